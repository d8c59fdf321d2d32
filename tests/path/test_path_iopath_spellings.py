"""iopath's spellings on PathManager mean what they mean there (issue 36, item 4).

Written for easycore in its own words; `scripts/peer_suites.py` runs iopath's own suite
against them. Plain paths, memory:// and a real loopback HTTP server.
"""

import os
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

from easycore.common.path import (  # noqa: E402
    FsspecPathHandler,
    HTTPURLHandler,
    PathManager,
    RedirectPathHandler,
)
from easycore.common.path import manager as _manager  # noqa: E402


@pytest.mark.parametrize("where", ["plain", "memory"])
def test_ls_mkdirs_rm_are_listdir_makedirs_remove(tmp_path, mem, where):
    root = str(tmp_path) if where == "plain" else mem
    PathManager.mkdirs(f"{root}/a/b")
    assert PathManager.isdir(f"{root}/a/b")
    with PathManager.open(f"{root}/a/f.txt", "w") as f:
        f.write("x")
    assert sorted(PathManager.ls(f"{root}/a")) == sorted(PathManager.listdir(f"{root}/a"))
    assert "f.txt" in PathManager.ls(f"{root}/a")
    PathManager.rm(f"{root}/a/f.txt")
    assert not PathManager.exists(f"{root}/a/f.txt")


@pytest.mark.parametrize("where", ["plain", "memory", "redirect"])
def test_mv_moves_and_never_replaces(tmp_path, mem, where):
    if where == "redirect":
        PathManager.register(RedirectPathHandler("moves://", str(tmp_path) + "/"))
        root = "moves:/"
    else:
        root = str(tmp_path) if where == "plain" else mem
    with PathManager.open(f"{root}/src.txt", "w") as f:
        f.write("moved")
    with PathManager.open(f"{root}/taken.txt", "w") as f:
        f.write("keep")
    assert PathManager.mv(f"{root}/src.txt", f"{root}/dst.txt") is True
    assert not PathManager.exists(f"{root}/src.txt")
    with PathManager.open(f"{root}/dst.txt") as f:
        assert f.read() == "moved"
    with pytest.raises(FileExistsError):
        PathManager.mv(f"{root}/dst.txt", f"{root}/taken.txt")
    with PathManager.open(f"{root}/taken.txt") as f:
        assert f.read() == "keep"
    with pytest.raises(FileNotFoundError):
        PathManager.mv(f"{root}/gone.txt", f"{root}/new.txt")


def test_mv_across_handlers_and_on_a_read_only_handler_is_refused(tmp_path, mem, server):
    (tmp_path / "a.txt").write_text("a")
    with pytest.raises(NotImplementedError, match="copy, then remove"):
        PathManager.mv(str(tmp_path / "a.txt"), f"{mem}/a.txt")
    with pytest.raises(PermissionError, match="read-only"):
        PathManager.mv(server.url("/x"), server.url("/y"))
    assert (tmp_path / "a.txt").read_text() == "a"


def test_symlink_links_local_paths_only(tmp_path, mem):
    (tmp_path / "target.txt").write_text("t")
    assert PathManager.symlink(str(tmp_path / "target.txt"), str(tmp_path / "link")) is True
    assert os.readlink(tmp_path / "link") == str(tmp_path / "target.txt")
    with pytest.raises(FileExistsError):
        PathManager.symlink(str(tmp_path / "target.txt"), str(tmp_path / "link"))
    with pytest.raises(NotImplementedError):
        PathManager.symlink(f"{mem}/a", f"{mem}/b")


def test_set_cwd_resolves_relative_local_paths_until_reset(tmp_path, mem):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "f.txt").write_text("here")
    assert not PathManager.isfile("f.txt")
    assert PathManager.set_cwd(str(folder)) is True
    assert PathManager.isfile("f.txt") and PathManager.exists("f.txt")
    with PathManager.open("f.txt") as f:
        assert f.read() == "here"
    assert PathManager.get_local_path("f.txt") == str(folder / "f.txt")
    assert PathManager.ls(".") == ["f.txt"]
    PathManager.copy_from_local("f.txt", f"{mem}/up.txt")  # a relative local source too
    with PathManager.open(f"{mem}/up.txt") as f:
        assert f.read() == "here"
    assert PathManager.isfile(str(folder / "f.txt"))  # absolute paths are as given
    PathManager.set_cwd(None)
    assert not PathManager.isfile("f.txt")
    with pytest.raises(ValueError, match="not an existing directory"):
        PathManager.set_cwd(str(tmp_path / "missing"))
    with pytest.raises(NotImplementedError):
        PathManager.set_cwd(f"{mem}/dir")


def test_register_handler_replaces_as_iopath_does():
    first, second = HTTPURLHandler(progress=False), HTTPURLHandler(progress=False)
    PathManager.register_handler(first)
    PathManager.register_handler(second)  # iopath's default: allow_override=True
    assert _manager._handlers["http://"] is second
    with pytest.raises(ValueError, match="already registered"):
        PathManager.register_handler(first, allow_override=False)


def test_an_instance_works_as_iopath_code_uses_one(tmp_path):
    manager = PathManager()
    (tmp_path / "i.txt").write_text("i")
    assert manager.ls(str(tmp_path)) == ["i.txt"]
    assert manager._native_path_handler is _manager._native


# ------------------------------------------------------------ get_local_path(force=, cache_dir=)
def test_force_downloads_again_and_cache_dir_chooses_the_cache(
    server, http_handler, uid, tmp_path, expected_body
):
    url = server.url(f"/{uid}/f.bin")
    first = PathManager.get_local_path(url)
    assert PathManager.get_local_path(url) == first and server.count(f"/{uid}/f.bin") == 1
    again = PathManager.get_local_path(url, force=True)
    assert again == first and server.count(f"/{uid}/f.bin") == 2
    elsewhere = PathManager.get_local_path(url, cache_dir=str(tmp_path / "other"))
    assert elsewhere.startswith(str(tmp_path / "other" / "http") + os.sep)
    assert Path(elsewhere).read_bytes() == expected_body(f"/{uid}/f.bin")
    assert server.count(f"/{uid}/f.bin") == 3
    PathManager.get_local_path(url, cache_dir=str(tmp_path / "other"))
    assert server.count(f"/{uid}/f.bin") == 3  # cached there now


def test_force_and_cache_dir_for_object_stores(mem, tmp_path):
    url = f"{mem}/o.bin"
    with PathManager.open(url, "wb") as f:
        f.write(b"object")
    PathManager.register(FsspecPathHandler("memory", max_age=3600), override=True)
    first = PathManager.get_local_path(url)
    Path(first).chmod(0o600)
    Path(first).write_bytes(b"tamper")  # same size: only force notices
    assert Path(PathManager.get_local_path(url)).read_bytes() == b"tamper"
    assert Path(PathManager.get_local_path(url, force=True)).read_bytes() == b"object"
    other = PathManager.get_local_path(url, cache_dir=str(tmp_path / "c"))
    assert other.startswith(str(tmp_path / "c" / "memory") + os.sep)
    assert Path(other).read_bytes() == b"object"


def test_a_local_path_ignores_force_and_cache_dir(tmp_path):
    (tmp_path / "l.txt").write_text("l")
    local = str(tmp_path / "l.txt")
    assert PathManager.get_local_path(local, force=True, cache_dir=str(tmp_path / "c")) == local
    assert not (tmp_path / "c").exists()
