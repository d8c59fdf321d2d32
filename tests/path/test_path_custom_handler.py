"""Tutorial 1.5.4, "Custom PathHandler", and the registry's rules."""

import os

import pytest

from easycore.common.path import HTTPURLHandler, PathHandler, PathManager


def test_tutorial_custom_handler(server, uid, tmp_path, monkeypatch, cache_dir):
    # custom PathHandler (as written in the tutorial, `get_support_prefixes` included)
    class NewHTTPURLHandler(HTTPURLHandler):
        def get_cache_dir(self, protocol):
            cache_dir = os.path.expanduser(os.getenv("NEW_CACHE", "~/.easycore/cache"))
            if protocol is not None:
                cache_dir = os.path.join(cache_dir, protocol)
            return cache_dir

        def get_support_prefixes(self):
            return ["http://", "https://"]

    # register custom path handler
    PathManager.register(NewHTTPURLHandler(), override=True)

    # Now, you can set cache directory through `$NEW_CACHE`.
    monkeypatch.setenv("NEW_CACHE", str(tmp_path / "new_cache"))
    local = PathManager.get_local_path(server.url(f"/custom/{uid}.txt"))
    assert local.startswith(str(tmp_path / "new_cache" / "http") + os.sep)
    assert not os.path.exists(cache_dir)


def test_get_support_prefixes_alias_is_honoured():
    class Only(PathHandler):
        def get_support_prefixes(self):
            return ["only://"]

        def exists(self, path):
            return path == "only://yes"

    PathManager.register(Only())
    assert PathManager.exists("only://yes") and not PathManager.exists("only://no")
    assert Only().get_support_prefixes() == ["only://"]
    assert HTTPURLHandler().get_support_prefixes() == ["http://", "https://"]


def test_registering_a_taken_prefix_needs_override():
    with pytest.raises(ValueError, match=r"'http://'.*override=True"):
        PathManager.register(HTTPURLHandler())
    PathManager.register(HTTPURLHandler(), override=True)


def test_a_failed_registration_registers_nothing():
    class Both(PathHandler):
        def get_supported_prefixes(self):
            return ["fresh://", "https://"]

    with pytest.raises(ValueError, match="https://"):
        PathManager.register(Both())
    with pytest.raises(ValueError, match="no PathHandler registered for 'fresh://x'"):
        PathManager.exists("fresh://x")


def test_only_handlers_can_be_registered():
    with pytest.raises(TypeError):
        PathManager.register(object())


def test_longest_prefix_wins():
    class Tagged(PathHandler):
        def __init__(self, prefix):
            self.prefix = prefix

        def get_supported_prefixes(self):
            return [self.prefix]

        def get_local_path(self, path):
            return self.prefix

    for prefix in ("s3://bucket/", "s3://", "s3://bucket/deep/"):
        PathManager.register(Tagged(prefix))
    assert PathManager.get_local_path("s3://other/x") == "s3://"
    assert PathManager.get_local_path("s3://bucket/x") == "s3://bucket/"
    assert PathManager.get_local_path("s3://bucket/deep/x") == "s3://bucket/deep/"


def test_unsupported_operations_name_handler_and_path():
    class Minimal(PathHandler):
        def get_supported_prefixes(self):
            return ["min://"]

    PathManager.register(Minimal())
    for operation in ("open", "exists", "isfile", "isdir", "listdir", "makedirs", "remove"):
        with pytest.raises(NotImplementedError, match=f"Minimal does not support {operation}"):
            getattr(PathManager, operation)("min://x")


def test_unregistered_schemes_are_an_error_not_a_local_path():
    # ftp is not supported (yet): say so instead of looking for a local "ftp:" directory.
    with pytest.raises(ValueError, match="no PathHandler registered for 'ftp://host/f'"):
        PathManager.get_local_path("ftp://host/f")
    with pytest.raises(ValueError, match="registered prefixes: http://, https://"):
        PathManager.open("ftp://host/f")


def test_get_cache_dir(monkeypatch, tmp_path):
    handler = PathHandler()
    monkeypatch.setenv("EASYCORE_CACHE", str(tmp_path / "c"))
    assert handler.get_cache_dir() == str(tmp_path / "c")
    assert handler.get_cache_dir("https") == str(tmp_path / "c" / "https")
    monkeypatch.delenv("EASYCORE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    # the platform's cache directory (issue 22), unless ~/.easycore/cache exists
    import platformdirs

    platform_dir = platformdirs.user_cache_dir("easycore", appauthor=False)
    assert platform_dir.startswith(str(tmp_path / "home"))
    assert handler.get_cache_dir() == platform_dir
    (tmp_path / "home" / ".easycore" / "cache").mkdir(parents=True)
    assert handler.get_cache_dir() == str(tmp_path / "home" / ".easycore" / "cache")
    assert handler.get_cache_dir("http") == str(tmp_path / "home" / ".easycore" / "cache" / "http")
