"""Where the cache is when nothing says so: the platform's place, or an existing
`~/.easycore/cache` (issue 22, "where a library already does it")."""

import os
import sys

import platformdirs
import pytest

from easycore.common.path import HTTPURLHandler, PathManager


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home of the test's own, with no $EASYCORE_CACHE; monkeypatch restores all."""
    monkeypatch.delenv("EASYCORE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "home").mkdir()
    return tmp_path


def test_the_default_cache_follows_the_platform(home):
    expected = platformdirs.user_cache_dir("easycore", appauthor=False)
    assert expected.startswith(str(home))  # the test's own, never the user's
    handler = HTTPURLHandler()
    assert handler.get_cache_dir() == expected
    assert handler.get_cache_dir("https") == os.path.join(expected, "https")


LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG is Linux's")


@LINUX_ONLY
def test_on_linux_it_is_xdg_cache_home(home):
    assert HTTPURLHandler().get_cache_dir() == str(home / "xdg" / "easycore")


def test_an_existing_dot_easycore_cache_keeps_being_used(home):
    legacy = home / "home" / ".easycore" / "cache"
    legacy.mkdir(parents=True)
    assert HTTPURLHandler().get_cache_dir("http") == str(legacy / "http")


def test_easycore_cache_wins_over_both(home, monkeypatch):
    (home / "home" / ".easycore" / "cache").mkdir(parents=True)
    monkeypatch.setenv("EASYCORE_CACHE", str(home / "mine"))
    assert HTTPURLHandler().get_cache_dir() == str(home / "mine")


@LINUX_ONLY
def test_a_download_lands_in_the_platform_cache(home, server, http_handler, uid):
    local = PathManager.get_local_path(server.url(f"/dir/{uid}.bin"))
    assert local.startswith(str(home / "xdg" / "easycore" / "http") + os.sep)
