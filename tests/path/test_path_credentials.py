"""Credentials in a URL: part of the cache identity, never in a file name, a message or a
log, never sent to another host, and never taken from ~/.netrc."""

import logging
import os
import stat

import pytest

from easycore.common.network import DownloadError, download_file
from easycore.common.path import PathManager
from easycore.common.path.cache import url_to_cache_path


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_each_user_gets_their_own_entry(server, http_handler, uid):
    path = f"/auth/{uid}/f.txt"
    alice = PathManager.get_local_path(server.url(path, "alice:secret"))
    mallory = PathManager.get_local_path(server.url(path, "mallory:guess"))
    anonymous = PathManager.get_local_path(server.url(path))
    only_a_name = PathManager.get_local_path(server.url(path, "alice"))

    assert read(alice).endswith(b"as alice:secret\n")
    assert read(mallory).endswith(b"as mallory:guess\n")
    assert read(anonymous).endswith(b"as anonymous\n")
    assert read(only_a_name).endswith(b"as alice:\n")
    assert server.count(path) == 4  # nobody was served someone else's file
    assert len({alice, mallory, anonymous, only_a_name}) == 4

    # ...and each entry is a cache hit for the same credentials
    assert PathManager.get_local_path(server.url(path, "alice:secret")) == alice
    assert PathManager.get_local_path(server.url(path, "alice:s%65cret")) == alice  # same
    assert server.count(path) == 4


def test_the_anonymous_entry_does_not_serve_a_user(server, http_handler, uid):
    path = f"/auth/{uid}/g.txt"
    PathManager.get_local_path(server.url(path))
    local = PathManager.get_local_path(server.url(path, "alice:secret"))
    assert read(local).endswith(b"as alice:secret\n")
    assert server.count(path) == 2


def test_no_secret_in_any_file_name(server, http_handler, uid, cache_dir, files_under):
    url = server.url(f"/auth/{uid}/h.txt?token=hunter2", "alice:secret")
    PathManager.get_local_path(url)
    names = "\n".join(files_under(cache_dir))
    for secret in ("alice", "secret", "hunter2", "token"):
        assert secret not in names, names


def test_hashed_names_are_keyed_per_user_and_cache(tmp_path):
    url = "http://alice:secret@example.com/data/f.txt?v=1"
    first = url_to_cache_path(str(tmp_path / "a"), url)
    second = url_to_cache_path(str(tmp_path / "b"), url)
    # the same URL, another key: a name cannot be recomputed (and a guess checked) by
    # anyone who does not hold the key
    assert os.path.basename(first) != os.path.basename(second)
    key = tmp_path / "a" / f"@key.{os.getuid()}"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
def test_a_key_others_can_read_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    key = cache / f"@key.{os.getuid()}"
    key.write_bytes(b"k" * 32)
    os.chmod(key, 0o644)  # as if another user had planted a key they know
    with pytest.raises(PermissionError) as info:
        url_to_cache_path(str(cache), "http://alice:secret@example.com/f")
    assert info.value.filename == str(key) and "other users" in str(info.value)
    os.unlink(key)
    os.symlink(tmp_path / "elsewhere", key)
    with pytest.raises(PermissionError):
        url_to_cache_path(str(cache), "http://alice:secret@example.com/g")


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX modes")
def test_a_file_fetched_with_credentials_is_private(server, http_handler, uid, tmp_path):
    local = PathManager.get_local_path(server.url(f"/auth/{uid}/p.txt", "alice:secret"))
    assert stat.S_IMODE(os.stat(local).st_mode) == 0o600
    path = download_file(server.url(f"/auth/{uid}/q.txt", "alice:secret"), str(tmp_path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_passwords_stay_out_of_errors_and_logs(server, http_handler, uid, caplog):
    url = server.url(f"/status/503/{uid}.txt", "alice:secret")
    with caplog.at_level(logging.WARNING, logger="easycore.common.network"):  # noqa: SIM117 (as one, the line would pass 100 columns)
        with pytest.raises(DownloadError) as info:
            PathManager.get_local_path(url)
    assert "secret" not in str(info.value) and "secret" not in info.value.url
    assert server.url(f"/status/503/{uid}.txt", "alice:***") in str(info.value)
    assert caplog.records and all("secret" not in r.getMessage() for r in caplog.records)


def test_credentials_are_not_sent_to_another_host(server, gated_server, http_handler, uid):
    # 127.0.0.1 redirects to localhost (another host, another port): follow, but without
    # alice's password
    path = f"/cross/{gated_server.port}/auth/{uid}/r.txt"
    local = PathManager.get_local_path(server.url(path, "alice:secret"))
    assert read(local).endswith(b"as anonymous\n")
    assert server.authorizations[path]  # the first host got them
    assert gated_server.count(f"/auth/{uid}/r.txt") == 1
    assert gated_server.authorizations[f"/auth/{uid}/r.txt"] == []


def test_a_redirect_on_the_same_host_keeps_them(server, http_handler, uid):
    local = PathManager.get_local_path(server.url(f"/redirect/auth/{uid}/s.txt", "alice:pw"))
    assert read(local).endswith(b"as alice:pw\n")


def test_netrc_is_not_read(server, http_handler, uid, tmp_path, monkeypatch):
    # What is sent depends on the URL alone, so a shared cache never holds a file fetched
    # with one user's ~/.netrc under a name another user's plain URL finds.
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login bob password fromnetrc\n")
    os.chmod(netrc, 0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    local = PathManager.get_local_path(server.url(f"/auth/{uid}/t.txt"))
    assert read(local).endswith(b"as anonymous\n")
