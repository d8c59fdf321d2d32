"""Tutorial 1.5.1, "Manage local path": the documented calls, then their edge cases."""

import os
import stat

import pytest

from easycore.common.path import NativePathHandler, PathManager


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_tutorial_local_path(workdir):
    PathManager.makedirs("path/to/dir")
    with PathManager.open("path/to/file", "w", encoding="utf-8") as f:
        f.write("hello easycore\n")

    # open a local path
    with PathManager.open("path/to/file", "r", encoding="utf-8") as f:
        assert f.read() == "hello easycore\n"

    # check file or directory exists, similar to `os.path.exists`
    assert PathManager.exists("path/to/file")
    # isfile and isdir, similar to `os.path.isfile` and `os.path.isdir`.
    assert PathManager.isfile("path/to/file") and not PathManager.isdir("path/to/file")
    assert PathManager.isdir("path/to/dir") and not PathManager.isfile("path/to/dir")

    # list directory, similar to 'os.listdir'.
    assert sorted(PathManager.listdir("path/to")) == ["dir", "file"]

    # copy
    assert PathManager.copy("path/to/file", "path/to/file2") is True
    assert (workdir / "path/to/file2").read_text(encoding="utf-8") == "hello easycore\n"

    # remove file (no directory), similar to `os.remove`.
    PathManager.remove("path/to/file2")
    assert not PathManager.exists("path/to/file2")

    # remove directories, similar to `os.removedirs`.
    PathManager.removedirs("path/to/dir")
    assert not PathManager.exists("path/to/dir")
    assert PathManager.exists("path/to")  # not empty: os.removedirs stops there


def test_makedirs_is_exist_ok(workdir):
    PathManager.makedirs("a/b/c")
    PathManager.makedirs("a/b/c")
    assert os.path.isdir("a/b/c")


def test_removedirs_prunes_empty_parents(workdir):
    PathManager.makedirs("a/b/c")
    PathManager.removedirs("a/b/c")
    assert not os.path.exists("a")


def test_get_local_path_of_a_local_path_is_itself(workdir):
    assert PathManager.get_local_path("some/file.txt") == "some/file.txt"
    assert PathManager.get_local_path(workdir / "x") == str(workdir / "x")


def test_pathlike_paths_are_accepted(workdir):
    target = workdir / "p.txt"
    with PathManager.open(target, "w") as f:
        f.write("x")
    assert PathManager.exists(target) and PathManager.isfile(target)
    assert PathManager.listdir(workdir) == ["p.txt"]


def test_errors_are_the_os_own_with_the_path(workdir):
    with pytest.raises(FileNotFoundError) as info:
        PathManager.open("missing.txt")
    assert info.value.filename == "missing.txt"
    with pytest.raises(FileNotFoundError) as info:
        PathManager.remove("missing.txt")
    assert info.value.filename == "missing.txt"
    with pytest.raises(FileNotFoundError):
        PathManager.listdir("missing-dir")
    PathManager.makedirs("d")
    with pytest.raises(IsADirectoryError if os.name != "nt" else PermissionError):
        PathManager.remove("d")
    (workdir / "d" / "f").write_text("x")
    with pytest.raises(OSError):
        PathManager.removedirs("d")  # not empty


def test_copy_refuses_to_overwrite_without_overwrite(workdir):
    (workdir / "src").write_text("new")
    (workdir / "dst").write_text("old")
    with pytest.raises(FileExistsError) as info:
        PathManager.copy("src", "dst")
    assert info.value.filename == "dst"
    assert "dst" in str(info.value)
    assert (workdir / "dst").read_text() == "old"

    assert PathManager.copy("src", "dst", overwrite=True)
    assert (workdir / "dst").read_text() == "new"


def test_copy_leaves_no_temporary_files(workdir):
    (workdir / "src").write_bytes(os.urandom(1 << 20))
    PathManager.copy("src", "dst")
    PathManager.copy("src", "dst", overwrite=True)
    with pytest.raises(FileExistsError):
        PathManager.copy("src", "dst")
    assert sorted(os.listdir(workdir)) == ["dst", "src"]
    assert (workdir / "dst").read_bytes() == (workdir / "src").read_bytes()


def test_copy_keeps_the_mode(workdir):
    (workdir / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(workdir / "run.sh", 0o755)
    PathManager.copy("run.sh", "run2.sh")
    assert stat.S_IMODE(os.stat(workdir / "run2.sh").st_mode) == 0o755


def test_copy_missing_source_or_destination_dir(workdir):
    (workdir / "src").write_text("x")
    with pytest.raises(FileNotFoundError) as info:
        PathManager.copy("nope", "dst")
    assert info.value.filename == "nope"
    with pytest.raises(FileNotFoundError) as info:
        PathManager.copy("src", "no/such/dir/dst")
    assert info.value.filename == "no/such/dir/dst"
    assert sorted(os.listdir(workdir)) == ["src"]


def test_copy_onto_a_directory_is_refused(workdir):
    (workdir / "src").write_text("x")
    PathManager.makedirs("dir")
    with pytest.raises(IsADirectoryError) as info:
        PathManager.copy("src", "dir", overwrite=True)
    assert info.value.filename == "dir"


def test_native_handler_is_the_fallback():
    handler = NativePathHandler()
    assert handler.get_supported_prefixes() == []
    assert handler.get_local_path("/x/y") == "/x/y"
