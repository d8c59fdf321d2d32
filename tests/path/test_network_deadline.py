"""A deadline for a whole download (not per read), a limit on waiting for another
process's download, and retries that are logged."""

import logging
import math
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from easycore.common.network import DownloadError, download_file
from easycore.common.network.deadline import Deadline
from easycore.common.path import HTTPURLHandler, PathManager
from easycore.common.path.cache import url_to_cache_path

WORKER = os.path.join(os.path.dirname(__file__), "_path_worker.py")


def handler(**options) -> HTTPURLHandler:
    # A read timeout longer than the drip interval: per-read timeouts never fire.
    options = {"timeout": (2.0, 5.0), "progress": False, "backoff": 0.01, **options}
    instance = HTTPURLHandler(**options)
    PathManager.register(instance, override=True)
    return instance


def test_a_dripping_body_ends_at_the_deadline(server, uid, cache_dir, files_under):
    handler(deadline=1.5)
    path = f"/drip/40/{uid}.bin"  # 40 bytes, one every 0.5 s: 20 s without a deadline
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(server.url(path))
    assert server.url(path) in str(info.value) and "deadline of 1.5 s" in str(info.value)
    assert info.value.status is None
    assert server.count(path) == 1  # the deadline covers every attempt: no retry after it
    assert all(name.endswith(".lock") for name in files_under(cache_dir))


def test_dripping_headers_end_at_the_deadline(server, uid):
    handler(deadline=1.5)
    path = f"/driphead/40/{uid}.bin"
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(server.url(path))
    assert "deadline" in str(info.value) and server.url(path) in str(info.value)


def test_download_file_has_the_deadline_too(server, uid, tmp_path):
    url = server.url(f"/drip/40/{uid}.bin")
    with pytest.raises(DownloadError, match="deadline of 1 s"):
        download_file(url, str(tmp_path), progress=False, deadline=1, timeout=(2, 5))
    assert not (tmp_path / f"{uid}.bin").exists()


def test_the_deadline_comes_from_the_environment(server, uid, monkeypatch):
    handler()  # deadline=None: read at download time
    monkeypatch.setenv("EASYCORE_DOWNLOAD_DEADLINE", "1.5")
    with pytest.raises(DownloadError, match=r"EASYCORE_DOWNLOAD_DEADLINE"):
        PathManager.get_local_path(server.url(f"/drip/40/{uid}.bin"))
    monkeypatch.setenv("EASYCORE_DOWNLOAD_DEADLINE", "soon")
    with pytest.raises(ValueError, match=r"\$EASYCORE_DOWNLOAD_DEADLINE.*'soon'"):
        PathManager.get_local_path(server.url(f"/env/{uid}.bin"))


def test_bad_deadlines_are_refused():
    for bad in (0, -1, math.nan, "10", True):
        with pytest.raises(ValueError, match="deadline"):
            HTTPURLHandler(deadline=bad)
        with pytest.raises(ValueError, match="lock_timeout"):
            HTTPURLHandler(lock_timeout=bad)
    HTTPURLHandler(deadline=math.inf, lock_timeout=math.inf)  # no limit, on purpose


def test_a_fast_download_is_not_cut(server, uid, expected_body):
    handler(deadline=30)
    local = PathManager.get_local_path(server.url(f"/big/{3 << 20}/{uid}.bin"))
    assert os.path.getsize(local) == 3 << 20


def start_worker(url: str, cache_dir: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, WORKER, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, EASYCORE_CACHE=cache_dir),
    )


def wait_for_part(local: str, worker: subprocess.Popen) -> str:
    """The temporary file of the worker's download, once it exists."""
    directory, name = os.path.split(local)
    for _ in range(400):  # polled: nothing signals the file's creation
        if os.path.isdir(directory):
            parts = [f for f in os.listdir(directory) if f.startswith(name + "@")]
            parts = [f for f in parts if f.endswith(".part")]
            if parts:
                return os.path.join(directory, parts[0])
        assert worker.poll() is None, worker.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no temporary file appeared next to {local}")


def test_waiting_for_another_process_is_limited_and_killed_downloads_are_cleaned(
    server, uid, cache_dir, expected_body
):
    # A process downloads from a server that stalls mid-body: it holds the URL's lock.
    path = f"/stallonce/{uid}/weights.bin"
    url = server.url(path)
    local = url_to_cache_path(os.path.join(cache_dir, "http"), url)
    worker = start_worker(url, cache_dir)
    try:
        assert worker.stdout.readline().strip() == "ready"
        part = wait_for_part(local, worker)

        # Waiting for it ends with an error naming the URL; its file is left alone.
        handler(lock_timeout=0.5)
        with pytest.raises(DownloadError) as info:
            PathManager.get_local_path(url)
        assert url in str(info.value) and "lock" in str(info.value)
        assert "EASYCORE_DOWNLOAD_LOCK_TIMEOUT" in str(info.value)
        assert os.path.exists(part)
    finally:
        worker.kill()
        worker.communicate(timeout=30)

    # Killed mid-body, it left its temporary file: the next download removes it.
    assert os.path.exists(part)
    local = PathManager.get_local_path(url)
    assert read_bytes(local) == expected_body(path)
    directory = os.path.dirname(local)
    assert [f for f in os.listdir(directory) if f.endswith(".part")] == []
    assert server.count(path) == 2


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_lock_timeout_comes_from_the_environment(server, uid, cache_dir, monkeypatch):
    path = f"/stallonce/{uid}/env.bin"
    url = server.url(path)
    local = url_to_cache_path(os.path.join(cache_dir, "http"), url)
    worker = start_worker(url, cache_dir)
    try:
        assert worker.stdout.readline().strip() == "ready"
        wait_for_part(local, worker)
        handler()
        monkeypatch.setenv("EASYCORE_DOWNLOAD_LOCK_TIMEOUT", "0.3")
        with pytest.raises(DownloadError, match=re.escape("waiting 0.3 s")):
            PathManager.get_local_path(url)
    finally:
        worker.kill()
        worker.communicate(timeout=30)


# --- retries are logged, and the library configures no logging ---


def test_retries_are_logged(server, http_handler, uid, caplog):
    url = server.url(f"/flaky/2/{uid}.txt")
    with caplog.at_level(logging.WARNING, logger="easycore.common.network"):
        PathManager.get_local_path(url)
    retries = [r for r in caplog.records if r.name == "easycore.common.network"]
    assert len(retries) == 2
    assert all(r.levelno == logging.WARNING and url in r.getMessage() for r in retries)
    assert "HTTP 500" in retries[0].getMessage()
    assert "attempt 1 of 3" in retries[0].getMessage()
    assert "attempt 2 of 3" in retries[1].getMessage()


def test_the_library_adds_no_logging_handler():
    code = (
        "import logging\n"
        "root = list(logging.getLogger().handlers)\n"
        "import easycore.common.path, easycore.common.network\n"
        "from easycore.common.network import transfer\n"
        "assert logging.getLogger().handlers == root\n"
        "for name in ('easycore', 'easycore.common', 'easycore.common.network'):\n"
        "    assert logging.getLogger(name).handlers == [], name\n"
        "assert transfer.logger().name == 'easycore.common.network'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()


def test_a_ctrl_c_inside_the_timers_start_leaves_no_timer(monkeypatch):
    # Thread.start waits for the new thread: a Ctrl-C there finds the timer running,
    # and the with block's __exit__ never comes.
    started = []
    start = threading.Timer.start

    def interrupted(timer):
        start(timer)
        started.append(timer)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Timer, "start", interrupted)
    with pytest.raises(KeyboardInterrupt), Deadline(600.0):
        pass
    (timer,) = started
    timer.join(10)
    assert not timer.is_alive()
