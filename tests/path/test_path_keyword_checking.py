"""Unknown keyword arguments: refused by default, dropped with a warning on request.

iopath's `set_strict_kwargs_checking(False)` lets code pass options meant for one of
iopath's handlers; easycore refuses them unless told so, with an error that is both
Python's `TypeError` and iopath's `ValueError`, before anything is touched.
"""

import logging
import os

import pytest

pytest.importorskip("fsspec")

from easycore.common.path import (
    NativePathHandler,
    PathHandler,
    PathManager,
    RedirectPathHandler,
    UnknownArgumentError,
)

#: (name, call) for every PathManager operation but open; `root` holds f.txt and d/.
OPERATIONS = [
    ("exists", lambda root: PathManager.exists(f"{root}/f.txt", foo=1)),
    ("isfile", lambda root: PathManager.isfile(f"{root}/f.txt", foo=1)),
    ("isdir", lambda root: PathManager.isdir(f"{root}/d", foo=1)),
    ("listdir", lambda root: PathManager.listdir(f"{root}/d", foo=1)),
    ("ls", lambda root: PathManager.ls(f"{root}/d", foo=1)),
    ("makedirs", lambda root: PathManager.makedirs(f"{root}/new/a", foo=1)),
    ("mkdirs", lambda root: PathManager.mkdirs(f"{root}/new/b", foo=1)),
    ("remove", lambda root: PathManager.remove(f"{root}/f.txt", foo=1)),
    ("rm", lambda root: PathManager.rm(f"{root}/f.txt", foo=1)),
    ("get_local_path", lambda root: PathManager.get_local_path(f"{root}/f.txt", foo=1)),
    ("copy", lambda root: PathManager.copy(f"{root}/f.txt", f"{root}/c.txt", foo=1)),
    ("copy_from_local", lambda root: PathManager.copy_from_local(__file__, f"{root}/c.txt", foo=1)),
    ("mv", lambda root: PathManager.mv(f"{root}/f.txt", f"{root}/m.txt", foo=1)),
]


@pytest.fixture(params=["plain", "memory", "redirect"])
def root(request, tmp_path, mem):
    if request.param == "plain":
        where = str(tmp_path)
    elif request.param == "memory":
        where = mem
    else:
        PathManager.register(RedirectPathHandler("kw://", str(tmp_path) + "/"))
        where = "kw:/"
    PathManager.makedirs(f"{where}/d")
    with PathManager.open(f"{where}/f.txt", "w") as f:
        f.write("kept")
    return where


def state(root):
    return [PathManager.exists(f"{root}/{name}") for name in ("f.txt", "c.txt", "m.txt", "new")]


@pytest.mark.parametrize("name, call", OPERATIONS, ids=[name for name, _ in OPERATIONS])
def test_an_unknown_keyword_is_refused_before_anything_happens(root, name, call):
    before = state(root)
    with pytest.raises(UnknownArgumentError, match=rf"{name}\(.*'foo'") as caught:
        call(root)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)
    assert state(root) == before


@pytest.mark.parametrize("name, call", OPERATIONS, ids=[name for name, _ in OPERATIONS])
def test_unchecked_an_unknown_keyword_is_dropped_with_a_warning(root, name, call, caplog):
    PathManager.set_strict_kwargs_checking(False)
    with caplog.at_level(logging.WARNING, logger="easycore.common.path"):
        call(root)
    assert f"{name}(" in caplog.text and "foo=1 argument ignored" in caplog.text


def test_set_cwd_checks_its_keywords_too(tmp_path):
    with pytest.raises(UnknownArgumentError):
        PathManager.set_cwd(str(tmp_path), foo=1)
    with pytest.raises(UnknownArgumentError):
        PathManager.set_cwd(None, foo=1)
    PathManager.set_strict_kwargs_checking(False)
    assert PathManager.set_cwd(str(tmp_path), foo=1)
    assert PathManager.isdir(".")


@pytest.mark.parametrize("mode", ["r", "w"])
def test_open_takes_the_builtin_keywords_and_refuses_others(root, mode):
    with PathManager.open(f"{root}/f.txt", mode, encoding="utf-8", newline="") as f:
        pass
    expected = "kept" if mode == "r" else ""
    with pytest.raises(UnknownArgumentError, match="encodng"):
        PathManager.open(f"{root}/f.txt", "w", encodng="utf-8")
    with PathManager.open(f"{root}/f.txt") as f:
        assert f.read() == expected  # the refused open did not truncate the file


def test_open_of_a_url_refuses_before_downloading(server, http_handler, uid):
    url = server.url(f"/{uid}/k.txt")
    with pytest.raises(UnknownArgumentError, match="cache_timeout"):
        PathManager.open(url, cache_timeout=60)
    assert server.count(f"/{uid}/k.txt") == 0
    PathManager.set_strict_kwargs_checking(False)
    with PathManager.open(url, cache_timeout=60, encoding="utf-8") as f:
        assert f.read() == f"content of /{uid}/k.txt\n"


def test_unchecked_open_drops_only_what_the_handler_does_not_take(root, caplog):
    PathManager.set_strict_kwargs_checking(False)
    path = f"{root}/f.txt"
    with caplog.at_level(logging.WARNING), PathManager.open(path, encoding="utf-8", ttl=5) as f:
        assert f.read() == "kept"
    assert "ttl=5 argument ignored" in caplog.text and "encoding" not in caplog.text
    with pytest.raises(LookupError):  # a known argument still reaches open
        PathManager.open(f"{root}/f.txt", "r", encoding="no-such-codec")


class TaggedHandler(PathHandler):
    """A handler of a user's own whose open takes an option of its own."""

    def get_supported_prefixes(self):
        return ["tagged://"]

    def open(self, path, mode="r", tag=None, **kwargs):
        return open(os.path.join(self.folder, path[len("tagged://"):]), mode, **kwargs), tag


class TaggedNative(NativePathHandler):
    """A subclass of the local handler whose open takes an option of its own."""

    def get_supported_prefixes(self):
        return ["tagnative://"]

    def open(self, path, mode="r", tag=None, **kwargs):
        return super().open(os.path.join(self.folder, path[len("tagnative://"):]), mode), tag


@pytest.mark.parametrize("kind", [TaggedHandler, TaggedNative])
def test_a_handler_with_an_open_of_its_own_decides_its_keywords(tmp_path, kind):
    handler = kind()
    handler.folder = str(tmp_path)
    PathManager.register(handler)
    (tmp_path / "t.txt").write_text("t")
    prefix = handler.get_supported_prefixes()[0]
    f, tag = PathManager.open(f"{prefix}t.txt", tag="mine")
    f.close()
    assert tag == "mine"


def test_a_switch_is_the_processs_and_goes_back(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    manager = PathManager()
    manager.set_strict_kwargs_checking(False)
    assert PathManager.exists(str(tmp_path / "f.txt"), foo=1)  # every manager: one registry
    PathManager.set_strict_kwargs_checking(True)
    with pytest.raises(UnknownArgumentError):
        manager.exists(str(tmp_path / "f.txt"), foo=1)
