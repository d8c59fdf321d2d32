"""Lock files never collide with downloads and never write through a symbolic link
(issue 22, items 1, 3 and 14, and the planted-link note)."""

import errno
import importlib.metadata
import os

import pytest
from packaging.requirements import Requirement

from easycore.common.network import download_file
from easycore.common.path import PathManager, file_lock
from easycore.common.path.cache import url_to_cache_path


def test_the_filelock_floor_excludes_releases_that_follow_links():
    # CVE-2025-68146: filelock < 3.20.1 opened the lock with O_TRUNC through a link.
    requires = [Requirement(r) for r in importlib.metadata.requires("easycore-path") or []]
    (filelock,) = [r for r in requires if r.name == "filelock"]
    assert not filelock.specifier.contains("3.20.0")
    assert filelock.specifier.contains("3.20.1")
    assert filelock.specifier.contains(importlib.metadata.version("filelock"))


@pytest.mark.parametrize("name", ["Gemfile", "X", "data.tar.gz"])
def test_a_download_named_like_another_downloads_lock_is_its_own_file(
    server, uid, tmp_path, expected_body, name
):
    first, second = f"/dl/{uid}/{name}", f"/dl/{uid}/{name}.lock"
    for path in (first, second):  # X, then X.lock
        local = download_file(server.url(path), str(tmp_path), progress=False)
        with open(local, "rb") as f:
            assert f.read() == expected_body(path)
    assert server.count(second) == 1  # the second was asked for, not taken from the lock


@pytest.mark.parametrize("name", ["Gemfile", "X"])
def test_a_lock_never_truncates_an_earlier_download(server, uid, tmp_path, expected_body, name):
    lockfile = f"/dl/{uid}/{name}.lock"
    local = download_file(server.url(lockfile), str(tmp_path), progress=False)  # X.lock
    download_file(server.url(f"/dl/{uid}/{name}"), str(tmp_path), progress=False)  # then X
    with open(local, "rb") as f:
        assert f.read() == expected_body(lockfile)


@pytest.mark.parametrize("name", ["x@.lock", "model.bin@.lock", "x@0123abcd.part"])
def test_names_of_our_own_lock_and_temporary_files_are_refused(server, uid, tmp_path, name):
    url = server.url(f"/dl/{uid}/{name}")
    with pytest.raises(ValueError, match="lock and temporary files"):
        download_file(url, str(tmp_path), progress=False)
    with pytest.raises(ValueError, match="lock and temporary files"):
        download_file(server.url(f"/dl/{uid}/ok"), str(tmp_path), name, progress=False)
    assert os.listdir(tmp_path) == [] and server.count(f"/dl/{uid}/{name}") == 0


def test_http_cache_lock_names_are_no_urls_entry(tmp_path):
    cache = str(tmp_path)
    for url in ("http://h/x", "http://h/x.lock", "http://h/x@.lock", "http://h/x%40.lock"):
        entry = url_to_cache_path(cache, url)
        for other in ("http://h/x", "http://h/x.lock", "http://h/x@.lock", "http://h/x%40.lock"):
            assert url_to_cache_path(cache, other) != entry + "@.lock"


def _plant(at, target, dangling):
    if not dangling:
        with open(target, "w") as f:
            f.write("precious\n")
    os.makedirs(os.path.dirname(at), exist_ok=True)
    os.symlink(target, at)


def _assert_untouched(target, dangling):
    if dangling:
        assert not os.path.lexists(target)  # not created through the link
    else:
        with open(target) as f:
            assert f.read() == "precious\n"  # not truncated through the link


@pytest.mark.parametrize("dangling", [False, True], ids=["link", "dangling"])
def test_a_link_at_download_files_lock_is_refused_naming_the_url(server, uid, tmp_path, dangling):
    target = str(tmp_path / "victim.txt")
    downloads = tmp_path / "downloads"
    _plant(str(downloads / "model.bin@.lock"), target, dangling)
    url = server.url(f"/dl/{uid}/model.bin")
    with pytest.raises(OSError) as info:
        download_file(url, str(downloads), progress=False)
    assert info.value.errno == errno.ELOOP
    assert url in str(info.value) and "symbolic link" in str(info.value)
    _assert_untouched(target, dangling)
    assert server.count(f"/dl/{uid}/model.bin") == 0
    assert not os.path.exists(downloads / "model.bin")


@pytest.mark.parametrize("dangling", [False, True], ids=["link", "dangling"])
def test_a_link_at_the_http_caches_lock_is_refused_naming_the_url(
    server, http_handler, uid, tmp_path, cache_dir, dangling
):
    target = str(tmp_path / "victim.txt")
    url = server.url(f"/cached/{uid}/model.bin")
    entry = url_to_cache_path(os.path.join(cache_dir, "http"), url)
    _plant(entry + "@.lock", target, dangling)
    with pytest.raises(OSError) as info:
        PathManager.get_local_path(url)
    assert info.value.errno == errno.ELOOP
    assert url in str(info.value) and "symbolic link" in str(info.value)
    _assert_untouched(target, dangling)
    assert server.count(f"/cached/{uid}/model.bin") == 0


@pytest.mark.parametrize("dangling", [False, True], ids=["link", "dangling"])
def test_file_lock_refuses_a_link_at_its_lock_file(tmp_path, dangling):
    target = str(tmp_path / "victim.txt")
    _plant(str(tmp_path / "state.json.lock"), target, dangling)
    with pytest.raises(OSError) as info:
        file_lock(str(tmp_path / "state.json"))
    assert info.value.errno == errno.ELOOP
    assert info.value.filename == str(tmp_path / "state.json.lock")
    _assert_untouched(target, dangling)


def test_file_lock_refuses_a_lock_file_that_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "state.json.lock")
    with pytest.raises(OSError, match="not a regular file"):
        file_lock(str(tmp_path / "state.json"))


def test_file_lock_still_locks(tmp_path):
    lock = file_lock(str(tmp_path / "sub" / "state.json"), timeout=5)
    with lock:
        assert os.path.isfile(tmp_path / "sub" / "state.json.lock")
