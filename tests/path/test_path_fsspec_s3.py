"""FsspecPathHandler against a real S3 endpoint on 127.0.0.1: moto's server mode, reached
through s3fs (nothing of fsspec or s3fs is mocked)."""

import gc
import hashlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from easycore.common.path import (  # noqa: E402
    DownloadError,
    FsspecPathHandler,
    PathManager,
    RedirectPathHandler,
    fsspec_cache,
)
from easycore.common.path import manager as _manager  # noqa: E402

KEY, SECRET = "AKIDEASYCORETEST", "s3cr3t-never-to-be-shown-9f4e"
MiB = 1 << 20


@pytest.fixture(scope="module")
def endpoint():
    """moto's S3 in a thread of this process, on a free loopback port; fsspec's own loop
    thread, which s3fs starts, ends with it."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    before = _manager._handlers.get("s3://")
    try:
        yield f"http://{host}:{port}"
    finally:
        try:
            # The tests' handler goes (as the module found it: none, until first use).
            if before is None:
                _forget_s3_handler()
            else:
                PathManager.register(before, override=True)
            _end_fsspec_loop()
        finally:
            server.stop()


def _forget_s3_handler() -> None:
    """No handler for ``s3://``: the next use registers one, as in a fresh process."""
    _manager._handlers.pop("s3://", None)
    _manager._prefixes = tuple(p for p in _manager._prefixes if p != "s3://")


def _end_fsspec_loop() -> None:
    """End the event loop thread (and its executor's) that fsspec runs its async
    filesystems on for the rest of the process: a later suite's fork must not come from
    a process with threads (tests/fork_warnings.py). The next use starts a new one."""
    import asyncio

    import s3fs
    from fsspec import asyn

    loop, thread = asyn.loop[0], asyn.iothread[0]
    if loop is None or thread is None:
        return
    # Unreferenced, each instance's finalizer closes its session on the loop, still running.
    s3fs.S3FileSystem.clear_instance_cache()
    gc.collect()
    asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)
    assert not thread.is_alive(), "fsspec's loop thread did not end"
    loop.close()
    asyn.reset_lock()  # fsspec's own reset (made for forked children): a new loop next time


def options(endpoint: str, secret: str = SECRET, key: str = KEY) -> dict:
    return {
        "key": key,
        "secret": secret,
        "client_kwargs": {"endpoint_url": endpoint},
        # fail fast: the tests' store is local, a failure is not worth minutes of retries
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 5, "read_timeout": 10},
    }


@pytest.fixture
def s3(endpoint):
    """A bucket of the test's own, served by a registered handler: its ``s3://`` URL."""
    handler = FsspecPathHandler("s3", storage_options=options(endpoint))
    PathManager.register(handler, override=True)
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    handler.fs.mkdir(bucket)
    return f"s3://{bucket}"


@pytest.fixture
def raw_fs(endpoint):
    """Plain s3fs on the same server, to look behind the handler's back."""
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, **options(endpoint))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def moto_process(tmp_path):
    """``start(**env)``: moto's server as a process of its own (to kill it, or to turn on
    its credential checks); stopped after the test."""
    procs = []

    def start(**env):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=tmp_path,
        )
        procs.append(proc)
        deadline = time.monotonic() + 60
        while True:  # wait until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.05)
        return proc, f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def write(url: str, data: bytes, **kwargs) -> None:
    with PathManager.open(url, "wb", **kwargs) as f:
        f.write(data)


def read(url: str) -> bytes:
    with PathManager.open(url, "rb") as f:
        return f.read()


def test_every_call_on_s3(s3, tmp_path):
    with PathManager.open(f"{s3}/docs/a.txt", "w", encoding="utf-8") as f:
        f.write("héllo\nwörld\n")
    with PathManager.open(f"{s3}/docs/a.txt", encoding="utf-8") as f:
        assert f.readlines() == ["héllo\n", "wörld\n"]
    assert PathManager.exists(f"{s3}/docs/a.txt") and PathManager.isfile(f"{s3}/docs/a.txt")
    assert PathManager.isdir(f"{s3}/docs") and not PathManager.isfile(f"{s3}/docs")
    assert not PathManager.exists(f"{s3}/docs/b.txt")
    PathManager.makedirs(f"{s3}/empty/dir")  # prefixes need no creating: no error
    assert PathManager.listdir(s3) == ["docs"]
    PathManager.copy(f"{s3}/docs/a.txt", f"{s3}/docs/b.txt")
    assert read(f"{s3}/docs/b.txt") == "héllo\nwörld\n".encode()
    with pytest.raises(FileExistsError, match=f"{s3}/docs/b.txt"):
        PathManager.copy(f"{s3}/docs/a.txt", f"{s3}/docs/b.txt")
    local = tmp_path / "up.bin"
    local.write_bytes(b"uploaded")
    PathManager.copy_from_local(str(local), f"{s3}/docs/b.txt", overwrite=True)
    assert read(f"{s3}/docs/b.txt") == b"uploaded"
    PathManager.copy(f"{s3}/docs/b.txt", str(tmp_path / "down.bin"))
    assert (tmp_path / "down.bin").read_bytes() == b"uploaded"
    assert PathManager.listdir(f"{s3}/docs") == ["a.txt", "b.txt"]
    PathManager.remove(f"{s3}/docs/a.txt")
    assert PathManager.listdir(f"{s3}/docs") == ["b.txt"]
    with pytest.raises(OSError, match="not empty"):
        PathManager.removedirs(f"{s3}/docs")
    PathManager.remove(f"{s3}/docs/b.txt")
    PathManager.removedirs(f"{s3}/docs")
    assert not PathManager.exists(f"{s3}/docs")
    assert PathManager.exists(s3)  # removedirs never removes the bucket


@pytest.mark.parametrize(
    "key", ["a/../b", "a//c", "x%2Fy", "ünï/cödé.txt", "./d", "e/..", "sp ace+plus?q#h"]
)
def test_hostile_keys_are_the_keys_they_say(s3, raw_fs, key, cache_dir):
    url = f"{s3}/{key}"
    write(url, key.encode())
    bucket = s3[len("s3://") :]
    # Exactly that key was written: no normalisation, no second object.
    assert raw_fs.find(bucket) == [f"{bucket}/{key}"]
    assert read(url) == key.encode()
    local = PathManager.get_local_path(url)
    assert os.path.commonpath([cache_dir, os.path.realpath(local)]) == cache_dir
    assert Path(local).read_bytes() == key.encode()


def test_keys_that_the_cache_layout_folds_get_entries_of_their_own(s3):
    for key in ("a//c", "a/c", "a/./c", "a/x/../c"):
        write(f"{s3}/{key}", key.encode())
    for key in ("a//c", "a/c", "a/./c", "a/x/../c"):
        assert Path(PathManager.get_local_path(f"{s3}/{key}")).read_bytes() == key.encode()


def test_zero_byte_object(s3):
    write(f"{s3}/empty", b"")
    assert PathManager.isfile(f"{s3}/empty")
    assert read(f"{s3}/empty") == b""
    assert os.path.getsize(PathManager.get_local_path(f"{s3}/empty")) == 0


def test_multipart_object_round_trips(s3, raw_fs):
    # 12 MiB in 5 MiB parts (S3's smallest): a three-part upload, kept small for CI.
    data = os.urandom(12 * MiB)
    with PathManager.open(f"{s3}/big.bin", "wb", block_size=5 * MiB) as f:
        for start in range(0, len(data), MiB):
            f.write(data[start : start + MiB])
    etag = raw_fs.info(f"{s3}/big.bin")["ETag"]
    assert etag.strip('"').endswith("-3"), etag  # it really was a multipart upload
    assert hashlib.sha256(read(f"{s3}/big.bin")).digest() == hashlib.sha256(data).digest()
    with open(PathManager.get_local_path(f"{s3}/big.bin"), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()


def test_a_key_that_is_an_object_and_a_prefix(s3):
    write(f"{s3}/k", b"object")
    write(f"{s3}/k/inner", b"inner")
    assert PathManager.isfile(f"{s3}/k") and PathManager.isdir(f"{s3}/k")
    assert read(f"{s3}/k") == b"object"
    assert PathManager.listdir(f"{s3}/k") == ["inner"]
    assert Path(PathManager.get_local_path(f"{s3}/k")).read_bytes() == b"object"
    assert Path(PathManager.get_local_path(f"{s3}/k/inner")).read_bytes() == b"inner"
    with pytest.raises(NotADirectoryError, match=f"{s3}/k/inner"):
        PathManager.listdir(f"{s3}/k/inner")
    PathManager.remove(f"{s3}/k")  # the object only
    assert not PathManager.isfile(f"{s3}/k") and PathManager.isfile(f"{s3}/k/inner")


def test_a_prefix_is_no_object(s3):
    write(f"{s3}/p/x", b"x")
    for url in (f"{s3}/p", f"{s3}/p/"):
        with pytest.raises(IsADirectoryError, match=f"{s3}/p"):
            read(url)
        with pytest.raises(IsADirectoryError, match=f"{s3}/p"):
            PathManager.get_local_path(url)
        with pytest.raises(IsADirectoryError, match=f"{s3}/p"):
            PathManager.remove(url)


def test_missing_bucket_names_the_url(s3):
    url = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/x.bin"
    assert not PathManager.exists(url)
    with pytest.raises(FileNotFoundError, match=url):
        read(url)
    with pytest.raises(FileNotFoundError, match=url):
        PathManager.get_local_path(url)


@pytest.mark.parametrize("mode", ["wb", "w"])
@pytest.mark.parametrize("size", [100, 12 * MiB])
def test_an_exception_inside_a_write_leaves_no_object(s3, raw_fs, mode, size):
    url = f"{s3}/half.bin"
    chunk = b"x" * size if "b" in mode else "x" * size
    with pytest.raises(RuntimeError, match="boom"):  # noqa: SIM117 (as one, the line would pass 100 columns)
        with PathManager.open(url, mode, block_size=5 * MiB) as f:
            f.write(chunk)
            raise RuntimeError("boom")
    assert not PathManager.exists(url)
    bucket = s3[len("s3://") :]
    uploads = raw_fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", [])
    assert uploads == []  # the multipart upload was aborted, not left to bill
    # An existing object keeps its bytes.
    write(url, b"old")
    with pytest.raises(RuntimeError, match="boom"):  # noqa: SIM117 (as one, the line would pass 100 columns)
        with PathManager.open(url, mode, block_size=5 * MiB) as f:
            f.write(chunk)
            raise RuntimeError("boom")
    assert read(url) == b"old"


def test_a_closed_writer_stores_and_an_unclosed_one_does_not(s3):
    f = PathManager.open(f"{s3}/closed", "wb")
    f.write(b"done")
    f.close()
    assert read(f"{s3}/closed") == b"done"
    f = PathManager.open(f"{s3}/dropped", "wb")
    f.write(b"never closed")
    del f
    assert not PathManager.exists(f"{s3}/dropped")


def test_get_local_path_notices_a_changed_object(s3, cache_dir):
    url = f"{s3}/weights.bin"
    write(url, b"v1")
    first = PathManager.get_local_path(url)
    assert PathManager.get_local_path(url) == first
    write(url, b"v2 longer")
    second = PathManager.get_local_path(url)
    assert second != first and Path(second).read_bytes() == b"v2 longer"
    write(url, b"v3")  # same size as v1, other bytes: the ETag tells
    assert Path(PathManager.get_local_path(url)).read_bytes() == b"v3"


def test_get_local_path_is_keyed_by_credentials_and_private(s3, endpoint):
    url = f"{s3}/shared.bin"
    write(url, b"data")
    mine = PathManager.get_local_path(url)
    other = FsspecPathHandler("s3", storage_options=options(endpoint, key="AKIDSOMEONEELSE"))
    theirs = other.get_local_path(url)
    assert theirs != mine  # other credentials never find my copy
    assert Path(theirs).read_bytes() == b"data"
    if hasattr(os, "getuid"):
        assert os.stat(mine).st_mode & 0o077 == 0  # readable by its owner only
    for path in (mine, theirs):  # names reveal no credentials
        assert KEY not in path and "SOMEONEELSE" not in path and SECRET not in path


def test_get_local_path_downloads_once_for_many_threads(s3, monkeypatch):
    url = f"{s3}/once.bin"
    write(url, os.urandom(MiB))
    calls = []
    real = fsspec_cache._download
    monkeypatch.setattr(fsspec_cache, "_download", lambda *a: (calls.append(1), real(*a))[1])
    results, errors = [], []

    def fetch():
        try:
            results.append(PathManager.get_local_path(url))
        except Exception as exc:  # noqa: BLE001  # pragma: no cover - any error is reported below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(set(results)) == 1 and len(results) == 6
    assert len(calls) == 1


def test_redirect_prefix_to_s3(s3):
    write(f"{s3}/datasets/mnist/train.csv", b"1,2\n")
    PathManager.register(RedirectPathHandler("data://", f"{s3}/datasets/"))
    assert PathManager.exists("data://mnist/train.csv")
    assert PathManager.listdir("data://mnist") == ["train.csv"]
    with PathManager.open("data://mnist/train.csv") as f:
        assert f.read() == "1,2\n"
    with PathManager.open("data://mnist/test.csv", "w") as f:
        f.write("3,4\n")
    assert read(f"{s3}/datasets/mnist/test.csv") == b"3,4\n"
    assert Path(PathManager.get_local_path("data://mnist/test.csv")).read_text() == "3,4\n"
    with pytest.raises(ValueError, match="leaves"):
        PathManager.open("data://../secrets.txt")


def test_s3_registers_on_first_use_from_the_environment(endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    _forget_s3_handler()
    bucket = f"auto-{uuid.uuid4().hex[:10]}"
    PathManager.makedirs(f"s3://{bucket}")
    write(f"s3://{bucket}/x", b"auto")
    assert isinstance(_manager._handlers["s3://"], FsspecPathHandler)
    assert read(f"s3://{bucket}/x") == b"auto"


def test_wrong_credentials_name_the_url_and_never_the_secret(moto_process, caplog):
    _, url = moto_process(INITIAL_NO_AUTH_ACTION_COUNT="0")  # moto checks credentials
    handler = FsspecPathHandler("s3", storage_options=options(url))
    PathManager.register(handler, override=True)
    target = "s3://locked-bucket/model.bin"
    caplog.set_level(logging.DEBUG)
    for call in (
        lambda: read(target),
        lambda: PathManager.get_local_path(target),
        lambda: write(target, b"x"),
        lambda: PathManager.listdir("s3://locked-bucket"),
    ):
        with pytest.raises(PermissionError) as info:
            call()
        assert target in str(info.value) or "s3://locked-bucket" in str(info.value)
        assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    assert SECRET not in caplog.text


def test_a_server_killed_mid_read_raises_and_leaves_no_partial_copy(moto_process, cache_dir):
    proc, url = moto_process()
    handler = FsspecPathHandler("s3", storage_options=options(url))
    PathManager.register(handler, override=True)
    handler.fs.mkdir("doomed")
    data = os.urandom(6 * MiB)
    write("s3://doomed/blob.bin", data)
    with PathManager.open("s3://doomed/blob.bin", "rb", block_size=MiB) as f:
        assert f.read(MiB) == data[:MiB]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with pytest.raises(OSError, match=re.escape("s3://doomed/blob.bin")):
            f.read()
    with pytest.raises(OSError, match=re.escape("s3://doomed/blob.bin")):
        PathManager.get_local_path("s3://doomed/blob.bin")
    leftovers = [
        name for _, _, names in os.walk(cache_dir) for name in names if not name.startswith("@key")
    ]
    assert [name for name in leftovers if not name.endswith(".lock")] == []


def test_a_transfer_cut_short_is_a_download_error(moto_process, cache_dir, monkeypatch):
    proc, url = moto_process()
    handler = FsspecPathHandler("s3", storage_options=options(url))
    PathManager.register(handler, override=True)
    handler.fs.mkdir("cut")
    write("s3://cut/blob.bin", os.urandom(3 * MiB))
    real_open = handler.fs.open

    def open_then_kill(*args, **kwargs):
        f = real_open(*args, **kwargs)
        proc.send_signal(signal.SIGKILL)  # the store dies once the download has begun
        proc.wait(timeout=30)
        return f

    monkeypatch.setattr(handler.fs, "open", open_then_kill)
    with pytest.raises(DownloadError, match=re.escape("s3://cut/blob.bin")):
        PathManager.get_local_path("s3://cut/blob.bin")
    assert not any(n.endswith(".part") for _, _, names in os.walk(cache_dir) for n in names)


CHILD = """
import json, sys
from easycore.common.path import FsspecPathHandler, PathManager, fsspec_cache
real = fsspec_cache._download
def counted(*args):
    print("DOWNLOADED", flush=True)
    return real(*args)
fsspec_cache._download = counted
PathManager.register(FsspecPathHandler("s3", storage_options=json.loads(sys.argv[1])))
sys.stdin.readline()  # start together
print(PathManager.get_local_path(sys.argv[2]), flush=True)
"""


def test_get_local_path_downloads_once_for_many_processes(s3, endpoint, cache_dir):
    url = f"{s3}/processes.bin"
    write(url, os.urandom(4 * MiB))
    env = dict(os.environ, EASYCORE_CACHE=cache_dir)
    args = [sys.executable, "-c", CHILD, json.dumps(options(endpoint)), url]
    procs = [
        subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = []
    try:
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            outs.append(out.split())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    paths = {out[-1] for out in outs}
    assert len(paths) == 1 and os.path.getsize(paths.pop()) == 4 * MiB
    assert sum(out.count("DOWNLOADED") for out in outs) == 1


def test_changed_credentials_in_the_environment_make_a_new_client(endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    handler = FsspecPathHandler("s3")
    PathManager.register(handler, override=True)
    bucket = f"env-{uuid.uuid4().hex[:10]}"
    PathManager.makedirs(f"s3://{bucket}")
    write(f"s3://{bucket}/x", b"env")
    first_fs, first = handler.fs, PathManager.get_local_path(f"s3://{bucket}/x")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDROTATED")
    assert handler.fs is not first_fs  # the old client would still sign as the old key
    second = PathManager.get_local_path(f"s3://{bucket}/x")
    assert second != first and Path(second).read_bytes() == b"env"


def test_exclusive_create_refuses_an_existing_object(s3):
    with PathManager.open(f"{s3}/x.txt", "x") as f:
        f.write("first")
    with pytest.raises(FileExistsError, match=f"{s3}/x.txt"):
        PathManager.open(f"{s3}/x.txt", "xb")
    assert read(f"{s3}/x.txt") == b"first"


# ------------------------------------------------------------ issue 34, items 12, 20, 22, 23
def test_an_upper_case_scheme_is_the_same_bucket(s3):
    scheme = "S3"
    write(f"{s3}/u.txt", b"lower")
    upper = scheme + s3[len("s3") :]
    assert PathManager.exists(f"{upper}/u.txt") and read(f"{upper}/u.txt") == b"lower"
    write(f"{upper}/v.txt", b"upper")
    assert PathManager.listdir(s3) == ["u.txt", "v.txt"]
    assert Path(PathManager.get_local_path(f"{upper}/v.txt")).read_bytes() == b"upper"


@pytest.mark.parametrize("mode", ["w", "wb", "x", "r"])
def test_a_key_ending_in_a_slash_is_no_object(s3, raw_fs, mode):
    with pytest.raises(IsADirectoryError, match=f"{s3}/top/"):
        PathManager.open(f"{s3}/top/", mode)
    assert not raw_fs.exists(f"{s3}/top")


def test_a_cached_copy_of_the_wrong_size_is_downloaded_again(s3):
    write(f"{s3}/sized.bin", b"y" * 10_000)
    local = PathManager.get_local_path(f"{s3}/sized.bin")
    with open(local, "r+b") as f:
        f.truncate(10)
    again = PathManager.get_local_path(f"{s3}/sized.bin")
    assert Path(again).read_bytes() == b"y" * 10_000


def test_open_refuses_a_keyword_no_layer_takes_and_passes_those_s3fs_names(s3):
    with pytest.raises(TypeError, match="encodng"):
        PathManager.open(f"{s3}/k.txt", "w", encodng="utf-8")
    write(f"{s3}/k.txt", b"k")
    with pytest.raises(TypeError, match="encodng"):
        PathManager.open(f"{s3}/k.txt", "r", encodng="utf-8")
    with PathManager.open(f"{s3}/k.txt", "rb", version_id=None, fill_cache=False) as f:
        assert f.read() == b"k"
