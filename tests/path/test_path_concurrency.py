"""Many processes (or threads), one download: ``file_lock`` around the download and a
second look after acquiring it."""

import os
import subprocess
import sys
import threading
from pathlib import Path

from easycore.common.path import PathManager, file_lock

WORKER = os.path.join(os.path.dirname(__file__), "_path_worker.py")
GRACE = 0.5  # seconds for the waiters to reach the lock; the assertions hold regardless


def test_file_lock_example(tmp_path):
    filename = str(tmp_path / "path" / "to" / "file")
    with file_lock(filename):
        if not os.path.isfile(filename):
            with open(filename, "w") as f:
                f.write("created once")
    assert os.path.isfile(filename + ".lock")
    assert Path(filename).read_text() == "created once"


def test_file_lock_waits_30_minutes_by_default(tmp_path):
    assert file_lock(str(tmp_path / "f")).timeout == 30 * 60


def test_file_lock_excludes_other_holders(tmp_path):
    import filelock

    path = str(tmp_path / "f")
    with file_lock(path):
        result = []
        other = threading.Thread(target=lambda: result.append(_try_lock(path, filelock)))
        other.start()
        other.join(timeout=10)
        assert result == ["timed out"]
    with file_lock(path, timeout=1):
        pass


def _try_lock(path, filelock):
    try:
        with file_lock(path, timeout=0.1):
            return "acquired"
    except filelock.Timeout:
        return "timed out"


def test_processes_download_once(gated_server, cache_dir, tmp_path):
    path = "/gated/processes/weights.bin"
    url = gated_server.url(path)
    env = dict(os.environ, EASYCORE_CACHE=cache_dir)
    workers = [
        subprocess.Popen(
            [sys.executable, WORKER, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        assert gated_server.first_request.wait(timeout=30)
        threading.Event().wait(GRACE)  # let the other three reach the lock
        gated_server.gate.set()
        results = []
        for worker in workers:
            out, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err
            results.append(out.split())
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)

    assert gated_server.count(path) == 1
    assert len({tuple(r) for r in results}) == 1  # same file, same digest, same size
    local, _, size = results[0]
    assert os.path.getsize(local) == int(size) > 0


def test_threads_download_once(gated_server, http_handler):
    path = "/gated/threads/weights.bin"
    url = gated_server.url(path)
    http_handler.timeout = (5.0, 30.0)
    start = threading.Barrier(4)
    results, errors = [], []

    def fetch():
        start.wait(timeout=10)
        try:
            with open(PathManager.get_local_path(url), "rb") as f:
                results.append(f.read())
        except Exception as exc:  # noqa: BLE001 (any error of the thread is reported below)
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for thread in threads:
        thread.start()
    assert gated_server.first_request.wait(timeout=30)
    threading.Event().wait(GRACE)
    gated_server.gate.set()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert errors == []
    assert gated_server.count(path) == 1
    assert len(results) == 4 and len(set(results)) == 1


def test_failures_are_not_cached_each_waiter_tries_itself(server, http_handler, uid):
    n = 3
    url = server.url(f"/status/404/{uid}")
    errors = []

    def fetch():
        try:
            PathManager.get_local_path(url)
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(errors) == n and all(url in str(e) for e in errors)
    assert server.count(f"/status/404/{uid}") == n
