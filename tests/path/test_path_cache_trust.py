"""What another user plants in a shared cache is never served (issue 22, item 2)."""

import os

import pytest

from easycore.common.path import PathManager
from easycore.common.path.cache import url_to_cache_path


def _entry(cache_dir, url):
    return url_to_cache_path(os.path.join(cache_dir, "http"), url)


def _secret(tmp_path):
    secret = tmp_path / "victim" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("the victim's secret\n")
    return str(secret)


def _assert_downloaded(local, entry, path, expected_body):
    assert local == entry and not os.path.islink(local)
    with open(local, "rb") as f:
        assert f.read() == expected_body(path)


@pytest.mark.parametrize("how", ["get_local_path", "open"])
def test_a_planted_link_to_a_file_outside_the_cache_is_not_served(
    server, http_handler, uid, tmp_path, cache_dir, expected_body, how
):
    secret = _secret(tmp_path)
    path = f"/trust/{uid}/model.bin"
    entry = _entry(cache_dir, server.url(path))
    os.makedirs(os.path.dirname(entry))
    os.symlink(secret, entry)
    if how == "open":
        with PathManager.open(server.url(path), "rb") as f:
            assert f.read() == expected_body(path)
        local = PathManager.get_local_path(server.url(path))
    else:
        local = PathManager.get_local_path(server.url(path))
    _assert_downloaded(local, entry, path, expected_body)  # the link was replaced
    assert server.count(path) == 1
    with open(secret) as f:
        assert f.read() == "the victim's secret\n"  # neither served nor written


def test_a_planted_link_to_another_entry_is_not_served(
    server, http_handler, uid, cache_dir, expected_body
):
    other, path = f"/trust/{uid}/other.bin", f"/trust/{uid}/model.bin"
    other_local = PathManager.get_local_path(server.url(other))
    entry = _entry(cache_dir, server.url(path))
    os.symlink(other_local, entry)
    _assert_downloaded(PathManager.get_local_path(server.url(path)), entry, path, expected_body)
    with open(other_local, "rb") as f:
        assert f.read() == expected_body(other)


def test_a_planted_dangling_link_is_downloaded_over_not_through(
    server, http_handler, uid, tmp_path, cache_dir, expected_body
):
    target = tmp_path / "created-through-the-link"
    path = f"/trust/{uid}/model.bin"
    entry = _entry(cache_dir, server.url(path))
    os.makedirs(os.path.dirname(entry))
    os.symlink(target, entry)
    _assert_downloaded(PathManager.get_local_path(server.url(path)), entry, path, expected_body)
    assert not os.path.lexists(target)


def test_a_planted_link_does_not_make_a_url_exist(server, http_handler, uid, tmp_path, cache_dir):
    secret = _secret(tmp_path)
    url = server.url(f"/status/404/{uid}/model.bin")
    entry = _entry(cache_dir, url)
    os.makedirs(os.path.dirname(entry))
    os.symlink(secret, entry)
    assert not PathManager.exists(url)  # the server was asked, and said no
    assert server.count(f"/status/404/{uid}/model.bin", "HEAD") == 1


def test_a_planted_host_directory_leading_outside_is_refused_not_served(
    server, http_handler, uid, tmp_path, cache_dir
):
    outside = tmp_path / "outside"
    (outside / f"{uid}@").mkdir(parents=True)
    (outside / f"{uid}@" / "model.bin").write_text("planted\n")
    host_dir = os.path.join(cache_dir, "http", f"127.0.0.1_{server.port}")
    os.makedirs(os.path.dirname(host_dir))
    os.symlink(outside, host_dir)
    url = server.url(f"/{uid}/model.bin")
    with pytest.raises(ValueError, match="outside") as info:
        PathManager.get_local_path(url)
    assert url in str(info.value)
    assert (outside / f"{uid}@" / "model.bin").read_text() == "planted\n"


@pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to plant another's file"
)
def test_a_file_of_another_user_is_not_served(server, http_handler, uid, cache_dir, expected_body):
    path = f"/trust/{uid}/model.bin"
    entry = _entry(cache_dir, server.url(path))
    os.makedirs(os.path.dirname(entry))
    with open(entry, "w") as f:
        f.write("planted by uid 54321\n")
    os.chown(entry, 54321, 54321)
    local = PathManager.get_local_path(server.url(path))
    _assert_downloaded(local, entry, path, expected_body)
    assert os.stat(local).st_uid == os.getuid()


def test_an_own_entry_is_still_served_without_asking(server, http_handler, uid):
    path = f"/trust/{uid}/model.bin"
    first = PathManager.get_local_path(server.url(path))
    assert PathManager.get_local_path(server.url(path)) == first
    assert PathManager.exists(server.url(path))
    assert server.count(path) == 1 and server.count(path, "HEAD") == 0
