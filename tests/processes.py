"""Process helpers shared by the runner test folders (parallel, torch, ray)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Iterable, Optional

import psutil


def is_mp_helper(proc: psutil.Process) -> bool:
    """multiprocessing's long-lived helpers (resource tracker, forkserver) are no leak."""
    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False
    return "resource_tracker" in cmdline or "forkserver" in cmdline


def stray_children(before: set) -> list:
    """Children of this process not in ``before`` and not multiprocessing helpers."""
    return [
        p for p in psutil.Process().children(recursive=True)
        if p.pid not in before and not is_mp_helper(p)
    ]


def descendants(pid: int) -> list:
    """The pids of every process below ``pid`` now (workers, zygote, resource tracker,
    forkserver). A script cannot print a helper it starts later: under ``fork`` the
    resource tracker starts with the first shared-memory name, not with the runner."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def wait_gone(pids: Iterable[Optional[int]], timeout: float = 20.0) -> list:
    """Wait until none of ``pids`` (None entries ignored) is a live process.

    Returns:
        list: the pids still alive at the deadline.
    """
    deadline = time.monotonic() + timeout
    alive = [pid for pid in pids if pid is not None]
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.05)
    return alive


def kill_quietly(pids: Iterable[int]) -> None:
    """SIGKILL each of ``pids`` that still runs: a test's clean-up of what it found left,
    so that a failed assertion leaves no orphan on the machine."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_process(pid: int, timeout: float = 30.0) -> None:
    """SIGSTOP ``pid`` and return once every thread of it has stopped. ``kill``
    returns before that: a thread running on another CPU can still answer one more
    request (a queue owner served a get that was meant to find it stopped)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not _stopped(pid):
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGCONT)  # never leave it half stopped behind a failure
            raise AssertionError(f"process {pid} did not stop within {timeout} s")
        time.sleep(0.005)  # another process's state: no event to wait on


def _stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (or has ended)."""
    done = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE,
            psutil.STATUS_DEAD)
    proc = psutil.Process(pid)
    if proc.status() not in done:
        return False
    if not sys.platform.startswith("linux"):
        return True  # no per-thread state to read
    for thread in proc.threads():
        try:
            if psutil.Process(thread.id).status() not in done:  # a thread id is a pid here
                return False
        except psutil.NoSuchProcess:
            continue  # the thread ended meanwhile
    return True


def in_thread(fn, timeout: float):
    """Run ``fn`` in a daemon thread for at most ``timeout`` seconds.

    Returns:
        tuple: ``(finished, its result or the exception it raised)``.
    """
    import threading

    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test, whatever it is
            box["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), box.get("value")


def mapping_of(address: int) -> str:
    """The file mapped at ``address`` in this process ("" for anonymous memory): a
    ``/dev/shm`` segment's path where an array or tensor views shared memory."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else ""
    return ""


def ray_free_environment() -> dict:
    """``os.environ`` for a Python subprocess that may start a Ray of its own: less the
    ``RAY_*`` variables an in-process ``ray.init()`` of an earlier test left behind.
    Ray keeps its session's settings for the life of the process, so they stay in this
    process (taking them away broke the next module's cluster), but a script that
    inherited ``RAY_AUTH_MODE=token`` started a cluster whose head never came up."""
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("RAY_") and env[k] != _ENV_AT_START.get(k)]:
        if key in _ENV_AT_START:
            env[key] = _ENV_AT_START[key]
        else:
            del env[key]
    return env


#: The environment as the suite started: test modules import this at collection,
#: before any test runs.
_ENV_AT_START = dict(os.environ)
