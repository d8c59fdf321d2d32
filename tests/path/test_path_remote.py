"""Tutorial 1.5.2, "Manage remote URL", against a real loopback server: the documented
calls first, then caching, failures, retries and the read-only rules."""

import os

import pytest

from easycore.common.network import DownloadError
from easycore.common.path import HTTPURLHandler, PathManager


def test_tutorial_remote_url(server, http_handler, uid, tmp_path, cache_dir, expected_body):
    url = server.url(f"/download/{uid}/yyy.txt")

    # open a remote path
    with PathManager.open(url, "r", encoding="utf-8") as f:
        assert f.read() == expected_body(f"/download/{uid}/yyy.txt").decode()

    # get local path
    local_path = PathManager.get_local_path(url)
    assert os.path.isfile(local_path)
    assert local_path.startswith(os.path.join(cache_dir, "http") + os.sep)
    # directories end with "@", so a URL and a URL below it both fit (issue 22, item 9)
    assert local_path.endswith(os.path.join("download@", f"{uid}@", "yyy.txt"))

    # copy remote file to local path.
    PathManager.copy(url, str(tmp_path / "yyy.txt"))
    assert (tmp_path / "yyy.txt").read_bytes() == expected_body(f"/download/{uid}/yyy.txt")

    # one request served all three
    assert server.count(f"/download/{uid}/yyy.txt") == 1


def test_the_default_handler_is_registered(server, uid):
    url = server.url(f"/default/{uid}.bin")
    assert PathManager.get_local_path(url).endswith(f"{uid}.bin")  # progress bar to stderr


def test_cache_hit_makes_no_request(server, http_handler, uid):
    path = f"/cached/{uid}/model.pth"
    first = PathManager.get_local_path(server.url(path))
    for _ in range(5):
        assert PathManager.get_local_path(server.url(path)) == first
        with PathManager.open(server.url(path), "rb") as f:
            assert f.read().startswith(b"content of")
        assert PathManager.exists(server.url(path))
    assert server.count(path) == 1
    assert server.count(path, "HEAD") == 0


def test_query_strings_are_different_entries(server, http_handler, uid, expected_body):
    paths = [f"/q/{uid}/data.tar.gz", f"/q/{uid}/data.tar.gz?v=1", f"/q/{uid}/data.tar.gz?v=2"]
    locals_ = [PathManager.get_local_path(server.url(p)) for p in paths]
    assert len(set(locals_)) == 3
    for path, local in zip(paths, locals_):
        with open(local, "rb") as f:
            assert f.read() == expected_body(path)
        assert local.endswith(".tar.gz")  # the extension survives the query hash
        assert server.count(path) == 1


def test_redirects_are_followed(server, http_handler, uid, expected_body):
    local = PathManager.get_local_path(server.url(f"/redirect/target/{uid}.txt"))
    with open(local, "rb") as f:
        assert f.read() == expected_body(f"/target/{uid}.txt")


def test_large_file_is_complete(server, http_handler, uid):
    size = 5 * 1024 * 1024 + 7
    local = PathManager.get_local_path(server.url(f"/big/{size}/{uid}.bin"))
    assert os.path.getsize(local) == size


def test_exists_asks_the_server(server, http_handler, uid):
    assert PathManager.exists(server.url(f"/there/{uid}"))
    assert PathManager.isfile(server.url(f"/there/{uid}"))
    assert not PathManager.exists(server.url(f"/status/404/{uid}"))
    assert not PathManager.isdir(server.url(f"/there/{uid}"))
    assert server.count(f"/there/{uid}", "HEAD") == 2
    assert server.count(f"/there/{uid}") == 0  # nothing downloaded


def test_exists_falls_back_to_get_when_head_is_refused(server, http_handler, uid):
    assert PathManager.exists(server.url(f"/nohead/{uid}"))
    assert server.count(f"/nohead/{uid}", "HEAD") == 1
    assert server.count(f"/nohead/{uid}") == 1


# --- failures: an error naming the URL, and nothing in the cache but lock files ---


def only_lock_files(files):
    return all(name.endswith(".lock") for name in files)


def test_404_raises_with_url_and_status(server, http_handler, uid, cache_dir, files_under):
    url = server.url(f"/status/404/{uid}.txt")
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert info.value.url == url and info.value.status == 404
    assert url in str(info.value) and "404" in str(info.value)
    assert isinstance(info.value, OSError)
    assert server.count(f"/status/404/{uid}.txt") == 1  # 4xx is not retried
    assert only_lock_files(files_under(cache_dir))


def test_500_is_retried_then_raises(server, http_handler, uid, cache_dir, files_under):
    url = server.url(f"/status/500/{uid}.txt")
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert info.value.status == 500 and url in str(info.value)
    assert "3 attempts" in str(info.value)
    assert server.count(f"/status/500/{uid}.txt") == 3
    assert only_lock_files(files_under(cache_dir))


def test_500_then_200_succeeds_on_retry(server, http_handler, uid, expected_body):
    path = f"/flaky/2/{uid}.txt"
    local = PathManager.get_local_path(server.url(path))
    with open(local, "rb") as f:
        assert f.read() == expected_body(path)
    assert server.count(path) == 3


def test_attempts_are_configurable(server, uid):
    PathManager.register(HTTPURLHandler(max_attempts=1, progress=False), override=True)
    with pytest.raises(DownloadError):
        PathManager.get_local_path(server.url(f"/flaky/1/{uid}.txt"))
    assert server.count(f"/flaky/1/{uid}.txt") == 1


def test_truncated_body_is_never_cached(server, http_handler, uid, cache_dir, files_under):
    url = server.url(f"/truncated/{uid}.bin")
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert url in str(info.value) and "connection closed" in str(info.value)
    assert info.value.status is None and info.value.transient
    assert server.count(f"/truncated/{uid}.bin") == 3  # a cut connection is transient
    assert only_lock_files(files_under(cache_dir))


def test_refused_connection(refused_port, http_handler, cache_dir, files_under):
    url = f"http://127.0.0.1:{refused_port}/file.txt"
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert info.value.url == url and info.value.status is None
    assert url in str(info.value)
    assert only_lock_files(files_under(cache_dir))


def test_slow_server_times_out(server, uid, cache_dir, files_under):
    PathManager.register(
        HTTPURLHandler(timeout=(2.0, 0.3), max_attempts=2, backoff=0.01, progress=False),
        override=True,
    )
    url = server.url(f"/slow/{uid}.bin")
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert "timed out" in str(info.value).lower() and url in str(info.value)
    assert server.count(f"/slow/{uid}.bin") == 2
    assert only_lock_files(files_under(cache_dir))


def test_stall_mid_body_times_out(server, uid, cache_dir, files_under):
    PathManager.register(
        HTTPURLHandler(timeout=(2.0, 0.3), max_attempts=1, progress=False), override=True
    )
    url = server.url(f"/stall/{uid}.bin")
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert url in str(info.value)
    assert only_lock_files(files_under(cache_dir))


def test_a_failed_url_can_succeed_later(server, http_handler, uid):
    path = f"/flaky/3/{uid}.txt"
    with pytest.raises(DownloadError):
        PathManager.get_local_path(server.url(path))  # 3 attempts, 3 failures
    assert os.path.isfile(PathManager.get_local_path(server.url(path)))
    assert server.count(path) == 4


# --- remote paths are read-only ---


def test_remote_paths_are_read_only(server, http_handler, uid, tmp_path):
    url = server.url(f"/ro/{uid}.txt")
    for mode in ("w", "a", "x", "r+", "wb"):
        with pytest.raises(PermissionError) as info:
            PathManager.open(url, mode)
        assert url in str(info.value) and "open" in str(info.value)
    for operation in ("remove", "makedirs", "removedirs"):
        with pytest.raises(PermissionError) as info:
            getattr(PathManager, operation)(url)
        assert url in str(info.value) and operation in str(info.value)
    (tmp_path / "local.txt").write_text("x")
    with pytest.raises(PermissionError) as info:
        PathManager.copy(str(tmp_path / "local.txt"), url)
    assert url in str(info.value) and "copy_from_local" in str(info.value)
    with pytest.raises(NotImplementedError) as info:
        PathManager.listdir(url)
    assert url in str(info.value)
    assert server.count(f"/ro/{uid}.txt") == 0


def test_copy_from_remote_respects_overwrite(server, http_handler, uid, tmp_path):
    dst = tmp_path / "dst.txt"
    dst.write_text("old")
    with pytest.raises(FileExistsError) as info:
        PathManager.copy(server.url(f"/c/{uid}.txt"), str(dst))
    assert str(dst) in str(info.value)
    assert dst.read_text() == "old"
    PathManager.copy(server.url(f"/c/{uid}.txt"), str(dst), overwrite=True)
    assert dst.read_text().startswith("content of")


def test_cached_file_has_normal_permissions(server, http_handler, uid):
    local = PathManager.get_local_path(server.url(f"/perm/{uid}.txt"))
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(local).st_mode & 0o777 == 0o666 & ~mask


def test_timeouts_are_always_set():
    for bad in (None, 0, -1, (5, None), (5, 0), (5,), (1, 2, 3), [5, 5], "10"):
        with pytest.raises(ValueError, match="timeout"):
            HTTPURLHandler(timeout=bad)
    with pytest.raises(ValueError, match="max_attempts"):
        HTTPURLHandler(max_attempts=0)
    assert HTTPURLHandler().timeout == (10.0, 60.0)
