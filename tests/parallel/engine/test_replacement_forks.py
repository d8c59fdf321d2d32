"""Replacement workers under ``fork`` come from the back-end's zygote (issue 32 item 3).

By the time a worker needs replacing (it died, or ran past ``task_timeout``),
the caller runs threads, and a fork from a process with threads can leave a
lock held for ever in the child (CPython 3.12+ warns). A single-threaded copy
of the caller, forked before the first workers, forks the replacements
instead: they still inherit the program without a copy.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import psutil
import pytest
from _engine_funcs import pid, square
from _parallel_support import kill_quietly, run_script, wait_gone
from leaks import open_fds

from easycore.common.parallel import Pool, TaskTimeoutError, UnorderedRunner, WorkerDiedError
from easycore.common.parallel._os.zygote import ZygoteChild

pytestmark = pytest.mark.timeout(180)

WAIT = 60


@pytest.fixture(scope="module")
def replaced():
    """What ``scripts/replacements_under_fork.py`` reports, with every DeprecationWarning shown."""
    proc = run_script("replacements_under_fork.py", timeout=150,
                      env={**os.environ, "PYTHONWARNINGS": "always::DeprecationWarning"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_replacements_are_forked_by_a_copy_of_the_caller_and_inherit_its_program(replaced):
    report, _ = replaced
    caller = report["pid"]
    assert report["spawn_exitcode"] == 7 and report["spawn_after"] == 3
    assert report["threads_after_spawn"] == ["MainThread"]  # no launcher left behind
    # A dead worker, and a replacement's death too, report the exit code.
    assert report["pool_exitcodes"] == [7, 7] and report["jobqueue_exitcode"] == 7
    assert report["timeout_error"] == "TaskTimeoutError"
    for kind in ("pool", "timeout", "jobqueue"):
        got = report[kind][0] if kind == "pool" else report[kind]
        parent, holds_lock = got
        assert parent != caller, kind  # not forked by the caller's threads
        assert holds_lock, kind  # the caller's lock, inherited, never pickled
    first, second, died, after = report["background"]
    assert first[0] == second[0] == caller and died == "died"
    assert after[0] != caller and after[1]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="the warning is new in 3.12")
def test_no_replacement_forks_from_a_process_with_threads(replaced):
    _, stderr = replaced
    assert "multi-threaded" not in stderr, stderr


def test_a_replacements_death_by_signal_is_reported_and_replaced_again(no_leaks):
    with Pool(1, start_method="fork") as pool:
        first = pool.worker_pids[0]
        os.kill(first, signal.SIGKILL)
        assert pool.map(square, range(6), 1) == [x * x for x in range(6)]
        replacement = pool.apply(pid)
        assert replacement != first and psutil.Process(replacement).ppid() != os.getpid()
        with pytest.raises(WorkerDiedError, match="SIGKILL") as info:
            pool.apply(kill_self)
        assert info.value.pid == replacement and info.value.exitcode == -signal.SIGKILL
        assert pool.apply(pid) not in (first, replacement)


def _fd_targets(pid_: int, fds) -> set:
    return {os.readlink(f"/proc/{pid_}/fd/{fd}") for fd in fds}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("workers", [2, 3])
def test_the_zygote_forked_after_the_first_workers_holds_none_of_their_descriptors(
        workers, no_leaks):
    before = _fd_targets(os.getpid(), open_fds())
    with Pool(workers, start_method="fork") as pool:
        backend = pool._backend
        zygote = backend._zygote
        if not backend._first_from_zygote:  # (else it forks them: an OpenBLAS it must limit)
            # Forked after them (they boot while it starts): its pid is the highest.
            assert all(w < zygote.pid for w in pool.worker_pids)
        # A worker's death shows at once, and its replacement comes from the zygote
        # (which, serving, has closed what it was told to).
        victim = pool.worker_pids[0]
        os.kill(victim, signal.SIGKILL)
        assert pool.map(square, range(6), 1) == [x * x for x in range(6)]
        wait_replaced(pool, 0, victim)
        assert psutil.Process(pool.worker_pids[0]).ppid() == zygote.pid
        # (The sentinel of a worker the zygote forked is the status pipe it writes the
        # exit code to.)
        theirs = _fd_targets(os.getpid(), [
            fd for h in backend._by_slot.values() for fd in (h.task_fd, h.results.fileno())])
        theirs |= _fd_targets(os.getpid(), [
            h.process.sentinel for h in backend._by_slot.values()
            if not isinstance(h.process, ZygoteChild)])
        theirs |= _fd_targets(os.getpid(), [backend._mux._wake_r, backend._mux._wake_w])
        held = _fd_targets(zygote.pid, os.listdir(f"/proc/{zygote.pid}/fd"))
        assert not held & theirs, held & theirs
        # Nor the multiplexer's epoll descriptor, nor the first workers' stack files.
        # (Not a count of what else is new: in a process with other threads, say a
        # Ray session's, a descriptor they open meanwhile is inherited too.)
        made_for_them = ("anon_inode:[eventpoll]", "/memfd:easycore-stack")
        assert not [t for t in held - before if t.startswith(made_for_them)], held - before


def test_where_descriptors_cannot_be_listed_the_zygote_is_forked_first(monkeypatch, no_leaks):
    from easycore.common.parallel._os import zygote as zygote_module

    monkeypatch.setattr(zygote_module, "_FD_DIRS", ("/nonexistent/fd",))
    assert zygote_module.open_fds() is None
    with Pool(2, start_method="fork") as pool:
        zygote = pool._backend._zygote
        assert all(w > zygote.pid for w in pool.worker_pids)  # before them, as it was
        victim = pool.worker_pids[1]
        os.kill(victim, signal.SIGKILL)
        assert pool.map(square, range(6), 1) == [x * x for x in range(6)]
        wait_replaced(pool, 1, victim)
        assert psutil.Process(pool.worker_pids[1]).ppid() == zygote.pid


@pytest.mark.forks_with_threads  # with the zygote gone, the caller forks the replacement itself
def test_a_killed_zygote_leaves_the_pool_able_to_replace_its_workers(no_leaks):
    with Pool(2, start_method="fork") as pool:
        zygote = pool._backend._zygote.process
        os.kill(zygote.pid, signal.SIGKILL)
        zygote.join(WAIT)
        victim = pool.worker_pids[0]
        os.kill(victim, signal.SIGKILL)
        assert pool.map(square, range(6), 1) == [x * x for x in range(6)]
        wait_replaced(pool, 0, victim)
        # Started by the caller instead, as before the zygote existed.
        assert psutil.Process(pool.worker_pids[0]).ppid() == os.getpid()
        assert len(set(pool.broadcast(pid))) == 2


@pytest.mark.forks_with_threads  # the second pool starts while the first one's threads run
def test_closing_a_pool_ends_its_zygote_while_another_pools_workers_hold_its_socket(no_leaks):
    with Pool(1, start_method="fork") as first:
        zygote = first._backend._zygote
        # The second pool's worker is forked after the first zygote: it holds
        # a copy of the caller's end of that zygote's socket.
        with Pool(1, start_method="fork") as second:
            first.close()
            first.join()  # reaps the zygote
            assert zygote.exitcode == 0  # it saw the end, rather than being killed
            assert second.apply(square, (3,)) == 9


@pytest.mark.forks_with_threads  # the pool starts while the test's own thread runs
def test_a_replacement_started_while_other_threads_work_serves_its_items(no_leaks):
    stop = threading.Event()

    def busy() -> None:  # a thread the fork would copy mid-work
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        with Pool(2, start_method="fork", max_deaths=10) as pool:
            for _ in range(3):
                victim = pool.worker_pids[0]
                os.kill(victim, signal.SIGKILL)
                assert pool.map(square, range(20), 1) == [x * x for x in range(20)]
                wait_replaced(pool, 0, victim)
    finally:
        stop.set()
        thread.join(WAIT)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def wait_replaced(pool, slot: int, old: int) -> None:
    """Wait until ``slot`` has a new worker (a broadcast reaches every slot's worker)."""
    pool.broadcast(pid)
    assert pool.worker_pids[slot] != old


@pytest.mark.parametrize("how", ["forgotten", "closed"])
def test_what_a_replacement_started_ends_with_the_pool(how):
    proc = run_script("replaced_worker_children.py", how, timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["parent"] != report["pid"]  # the zygote's child
    # The first worker was SIGKILLed: its sleeper is an orphan the test ends
    # (nobody could have found it); the replacement's must be gone.
    first, sleeper = report["sleepers"]
    kill_quietly([first])
    left = wait_gone([sleeper], 10)
    kill_quietly(left)
    assert left == [], "a process a replacement started outlived the pool"


def test_planned_replacements_of_maxtasksperchild_come_from_the_zygote_too(no_leaks):
    with Pool(1, start_method="fork", maxtasksperchild=1) as pool:
        got = [pool.apply(parent_and_pid) for _ in range(3)]
        pids = [p for _, p in got]
        assert len(set(pids)) == 3  # a new worker for every task
        assert got[0][0] == os.getpid()  # the first worker: the caller's child
        assert all(parent not in (os.getpid(), got[0][1]) for parent, _ in got[1:])


class _RenewedInChildren:
    """A pipe a library renews in every forked child by its numbers, as libuv's
    signal pipe does (torch and Ray load one): ``os.close`` of the numbers it
    holds, then a new pipe. A zygote that closed descriptors it did not make
    would let those numbers go to a worker's pipes, which the next fork's
    renewal would then close (CI, stop 59). ``intact``: whether the pipe this
    process's parent had was there, whole, at its fork."""

    fds: tuple = ()
    inode = 0
    intact = True

    @classmethod
    def renew(cls) -> None:
        if not cls.fds:
            return
        for fd in cls.fds:
            try:
                cls.intact = cls.intact and os.fstat(fd).st_ino == cls.inode
                os.close(fd)
            except OSError:
                cls.intact = False
        cls.open()

    @classmethod
    def open(cls) -> None:
        cls.fds = os.pipe()
        cls.inode = os.fstat(cls.fds[0]).st_ino


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RenewedInChildren.renew)


def renewed_intact() -> tuple:
    return os.getppid(), os.getpid(), _RenewedInChildren.intact


@pytest.fixture
def renewed_in_children():
    _RenewedInChildren.open()
    try:
        yield
    finally:
        fds, _RenewedInChildren.fds = _RenewedInChildren.fds, ()
        for fd in fds:
            os.close(fd)


def test_a_library_renewing_a_descriptor_by_number_at_fork_leaves_replacements_whole(
        renewed_in_children, no_leaks):
    with Pool(2, start_method="fork", maxtasksperchild=1) as pool:
        got = [pool.apply(renewed_intact) for _ in range(6)]
    assert len({p for _, p, _ in got}) == 6  # a new worker for every task
    assert sum(parent != os.getpid() for parent, _, _ in got) >= 4  # the zygote's children
    assert all(intact for _, _, intact in got)  # the zygote kept the library's pipe


def parent_and_pid() -> tuple:
    return os.getppid(), os.getpid()


class EndsInAFile(UnorderedRunner):
    """Each worker writes its pid to ``cfg.ends/<pid>`` as it ends (``producer_end``)."""

    @staticmethod
    def producer_work(device, cfg, data):
        if data == "slow":
            threading.Event().wait(60)  # past task_timeout: the worker is replaced
        return os.getpid()

    @staticmethod
    def producer_end(device, cfg):
        threading.Event().wait(0.5)  # a slow end: a zygote gone meanwhile would kill its child
        with open(os.path.join(cfg.ends, str(os.getpid())), "w"):
            pass

    @staticmethod
    def consumer_init(cfg):
        cfg.pids = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.pids.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.pids


@pytest.mark.parametrize("replaced", [False, True])
def test_the_zygote_ends_at_close_but_never_before_its_workers_end(no_leaks, tmp_path,
                                                                   replaced):
    # At close the zygote is told to go while the workers end, unless a worker
    # is its child: its exit kills its children, which must end as asked.
    runner = EndsInAFile(["cpu"], start_method="fork", cfg={"ends": str(tmp_path)})
    try:
        zygote = runner._engine.state.backend._zygote
        if replaced:
            with pytest.raises(TaskTimeoutError):
                runner(["slow"], task_timeout=0.5)
        worker = runner([1])[0]
        assert worker == runner.worker_pids[0]
        assert (psutil.Process(worker).ppid() == os.getpid()) is not replaced
    finally:
        runner.close()  # reaps the zygote
    assert zygote.exitcode == 0  # it saw the end of its socket: not killed
    assert os.listdir(tmp_path) == [str(worker)]  # the last worker's producer_end ran


# Before 3.13, Thread.join returns a few microseconds before the kernel's
# thread is gone: a fork right after a join came from a process the kernel
# still counted as multi-threaded (3.12 warned; 22 of 3,000 joins here).
_SETTLE_PROBE = """
import os, sys, threading, _thread
# A thread no Python code runs on (a BLAS pool's), there before easycore: never waited for.
early_gate, early = _thread.allocate_lock(), []
early_gate.acquire()
_thread.start_new_thread(lambda: (early.append(threading.get_native_id()), early_gate.acquire()),
                         ())
while not early:
    pass
from easycore.common.parallel._os import zygote
known_early = str(early[0]) in zygote._staying
lagging = 0
for _ in range(int(sys.argv[1])):
    t = threading.Thread(target=int)
    t.start()
    t.join()
    zygote.settle_ended_threads(limit=5.0)
    lagging += len(set(os.listdir("/proc/self/task")) - {str(early[0])}) > 1
# A thread that does not end (a native library's pool, say): waited for once.
gate = _thread.allocate_lock()
gate.acquire()
ids = []
_thread.start_new_thread(lambda: (ids.append(threading.get_native_id()), gate.acquire()), ())
while not ids:
    pass
zygote.settle_ended_threads(limit=0.05)
print(lagging, str(ids[0]) in zygote._staying, known_early)
"""


@pytest.mark.skipif(sys.version_info >= (3, 13) or not sys.platform.startswith("linux"),
                    reason="3.13's join waits for the kernel's thread; /proc is Linux's")
def test_a_fork_after_a_join_waits_for_the_joined_thread_to_end_in_the_kernel():
    import subprocess

    done = subprocess.run([sys.executable, "-c", _SETTLE_PROBE, "1000"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lagging, remembered, known_early = done.stdout.split()
    assert lagging == "0"  # without the wait: about 1 join in 140 here
    assert remembered == "True"  # a thread that stays is not waited for at every fork
    assert known_early == "True"  # nor one that ran before easycore was imported
