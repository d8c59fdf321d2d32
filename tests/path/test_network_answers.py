"""What a download refuses and how it says so (issue 22, items 15, 30, 31 and 33)."""

import errno
import math
import os
import subprocess
import sys

import pytest

from easycore.common.network import DownloadError, download_file
from easycore.common.path import HTTPURLHandler, PathManager


# ------------------------------------------------------------ 15: non-2xx final answers
@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 304, 204, 205, 206, 201, 202])
def test_a_final_answer_that_is_not_the_resource_is_an_error_never_cached(
    server, http_handler, uid, tmp_path, files_under, cache_dir, status
):
    path = f"/status/{status}/{uid}.bin"  # 3xx here come without a Location
    url = server.url(path)
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert info.value.status == status and url in str(info.value)
    assert f"HTTP {status}" in str(info.value)
    assert not info.value.transient
    assert all(name.endswith("@.lock") for name in files_under(cache_dir))
    with pytest.raises(DownloadError):  # still not cached: asked again
        PathManager.get_local_path(url)
    assert server.count(path) == 2

    with pytest.raises(DownloadError) as info:
        download_file(url, str(tmp_path / "d"), progress=False)
    assert info.value.status == status
    assert os.listdir(tmp_path / "d") == [f"{uid}.bin@.lock"]


def test_a_partial_answer_to_a_request_without_range_names_it(server, http_handler, uid):
    with pytest.raises(DownloadError, match="without Range"):
        PathManager.get_local_path(server.url(f"/status/206/{uid}"))


@pytest.mark.parametrize("status", [200, 203])
def test_answers_that_carry_the_resource_are_stored(server, http_handler, uid, status):
    local = PathManager.get_local_path(server.url(f"/status/{status}/{uid}"))
    with open(local, "rb") as f:
        assert f.read() == b"status body\n"


# ------------------------------------------------------------ 30: a full disk
_FILL = """
import resource, sys
from easycore.common.network import DownloadError, download_file
from easycore.common.path import HTTPURLHandler, PathManager
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))  # Python ignores SIGXFSZ
url, where = sys.argv[1], sys.argv[2]
try:
    if where == "cache":
        PathManager.register(HTTPURLHandler(progress=False, max_attempts=1), override=True)
        PathManager.get_local_path(url)
    else:
        download_file(url, where, progress=False, max_attempts=1)
except DownloadError as err:
    print(err.errno, err.transient, err, flush=True)
    sys.exit(3)
"""


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("where", ["download_file", "cache"])
def test_a_disk_that_fills_up_is_a_download_error_naming_the_url(
    server, uid, tmp_path, cache_dir, files_under, where
):
    # RLIMIT_FSIZE makes write() fail as a full disk does (EFBIG rather than ENOSPC):
    # the same write error path, without filling a real file system.
    url = server.url(f"/big/1000000/{uid}.bin")
    target = str(tmp_path / "d") if where == "download_file" else "cache"
    result = subprocess.run(
        [sys.executable, "-c", _FILL, url, target],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EASYCORE_CACHE": cache_dir},
    )
    assert result.returncode == 3, result.stderr
    number, transient, message = result.stdout.strip().split(" ", 2)
    assert int(number) in (errno.EFBIG, errno.ENOSPC) and transient == "False"
    assert url in message and "cannot store it" in message
    root = str(tmp_path / "d") if where == "download_file" else cache_dir
    assert all(name.endswith("@.lock") for name in files_under(root))  # .part removed


# ------------------------------------------------------------ 31: options checked at once
BAD_OPTIONS = [
    {"backoff": -1},
    {"backoff": math.inf},
    {"backoff": math.nan},
    {"backoff": "1"},
    {"timeout": math.inf},
    {"timeout": (1.0, math.inf)},
    {"timeout": (math.inf, 1.0)},
    {"timeout": math.nan},
    {"timeout": 0},
    {"timeout": -1},
    {"timeout": (1.0,)},
    {"timeout": None},
    {"max_attempts": 0},
    {"max_attempts": 2.5},
    {"max_attempts": True},
    {"deadline": 0},
    {"deadline": -1},
    {"deadline": math.nan},
    {"lock_timeout": 0},
    {"lock_timeout": math.nan},
    {"progress": "yes"},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=repr)
def test_every_option_of_the_handler_is_checked_in_the_constructor(options):
    (name,) = options
    with pytest.raises(ValueError, match=name):
        HTTPURLHandler(**options)


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=repr)
def test_every_option_of_download_file_is_checked_before_anything_happens(
    server, uid, tmp_path, options
):
    (name,) = options
    with pytest.raises(ValueError, match=name):
        download_file(server.url(f"/dl/{uid}.bin"), str(tmp_path / "d"), **options)
    assert server.count(f"/dl/{uid}.bin") == 0 and not os.path.exists(tmp_path / "d")


def test_no_deadline_and_no_lock_timeout_still_download(server, uid, tmp_path, expected_body):
    HTTPURLHandler(deadline=math.inf, lock_timeout=math.inf, backoff=0)  # documented
    path = download_file(
        server.url(f"/dl/{uid}.bin"),
        str(tmp_path),
        progress=False,
        deadline=math.inf,
        lock_timeout=math.inf,
        backoff=0,
    )
    with open(path, "rb") as f:
        assert f.read() == expected_body(f"/dl/{uid}.bin")


# ------------------------------------------------------------ 33: a very long file name
@pytest.mark.parametrize("length", [256, 300, 1000])
def test_a_file_name_too_long_for_the_disk_is_a_clear_error_naming_the_url(
    server, uid, tmp_path, length
):
    path = f"/dl/{uid}/" + "n" * length
    url = server.url(path)
    with pytest.raises(OSError) as info:
        download_file(url, str(tmp_path / "d"), progress=False)
    assert info.value.errno == errno.ENAMETOOLONG
    assert url in str(info.value) and "longer than the file system allows" in str(info.value)
    assert not os.path.exists(tmp_path / "d") and server.count(path) == 0
    with pytest.raises(OSError, match="longer than the file system allows"):
        download_file(server.url(f"/dl/{uid}/x"), str(tmp_path / "d"), "m" * length, False)


def test_the_cache_stores_a_very_long_file_name_under_a_shorter_one(
    server, http_handler, uid, expected_body
):
    path = f"/dl/{uid}/" + "n" * 300 + ".bin"
    local = PathManager.get_local_path(server.url(path))
    assert len(os.path.basename(local).encode()) < 255 and local.endswith(".bin")
    with open(local, "rb") as f:
        assert f.read() == expected_body(path)


@pytest.mark.parametrize("length", [241, 250, 255])
def test_a_long_name_that_fits_downloads_with_shorter_lock_and_temporary_names(
    server, uid, tmp_path, expected_body, length
):
    # The name fits (255 bytes) but "<name>@.lock" and "<name>@<8 hex>.part" would not.
    path = f"/dl/{uid}/" + "n" * length
    local = download_file(server.url(path), str(tmp_path), progress=False)
    with open(local, "rb") as f:
        assert f.read() == expected_body(path)
    others = [name for name in os.listdir(tmp_path) if name != "n" * length]
    assert len(others) == 1 and others[0].endswith("@.lock") and len(others[0]) <= 255


# ------------------------------------------------------- a progress bar's threads
def test_a_download_with_a_progress_bar_leaves_no_thread_behind(server, uid, tmp_path, capsys):
    # tqdm's monitor thread would outlive the bar: a later fork in this process
    # (a fork pool's workers) would then fork a process with threads.
    import threading

    before = set(threading.enumerate())
    path = download_file(server.url(f"/big/100000/{uid}.bin"), str(tmp_path), progress=True)
    assert os.path.getsize(path) == 100000
    left = [t.name for t in threading.enumerate() if t not in before and t.is_alive()
            and "process_request_thread" not in t.name]  # the test server's, kept alive
    assert left == []
