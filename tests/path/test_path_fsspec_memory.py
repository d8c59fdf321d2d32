"""FsspecPathHandler on fsspec's own stores: ``memory://`` and ``file://`` (no mocks)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

from easycore.common.path import FsspecPathHandler, PathManager  # noqa: E402
from easycore.common.path import manager as _manager  # noqa: E402


def test_importing_the_package_does_not_import_fsspec():
    code = (
        "import sys, easycore.common.path as p; "
        "assert p.FsspecPathHandler; "
        "assert 'fsspec' not in sys.modules, 'fsspec imported'; "
        "assert not any(m.split('.')[0] in ('s3fs', 'boto3', 'botocore') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_memory_registers_on_first_use_and_round_trips(mem):
    assert "memory://" not in _manager._handlers
    with PathManager.open(f"{mem}/dir/a.txt", "w", encoding="utf-8") as f:
        f.write("héllo\n")
    assert isinstance(_manager._handlers["memory://"], FsspecPathHandler)
    with PathManager.open(f"{mem}/dir/a.txt", encoding="utf-8") as f:
        assert f.read() == "héllo\n"
    with PathManager.open(f"{mem}/dir/a.txt", "rb") as f:
        assert f.read() == "héllo\n".encode()
    assert PathManager.exists(f"{mem}/dir/a.txt")
    assert PathManager.isfile(f"{mem}/dir/a.txt")
    assert not PathManager.isdir(f"{mem}/dir/a.txt")
    assert PathManager.isdir(f"{mem}/dir")
    assert PathManager.listdir(f"{mem}/dir") == ["a.txt"]
    assert PathManager.listdir(mem) == ["dir"]


def test_an_exception_inside_a_write_leaves_nothing(mem):
    url = f"{mem}/half.bin"
    with pytest.raises(RuntimeError, match="boom"), PathManager.open(url, "wb") as f:
        f.write(b"x" * 1000)
        raise RuntimeError("boom")
    assert not PathManager.exists(url)
    # ... and an existing object keeps its bytes.
    with PathManager.open(url, "wb") as f:
        f.write(b"old")
    with pytest.raises(RuntimeError), PathManager.open(url, "w") as f:
        f.write("new")
        raise RuntimeError("boom")
    with PathManager.open(url, "rb") as f:
        assert f.read() == b"old"


def test_get_local_path_caches_and_notices_a_change(mem, cache_dir):
    url = f"{mem}/w.bin"
    with PathManager.open(url, "wb") as f:
        f.write(b"v1")
    first = PathManager.get_local_path(url)
    assert os.path.commonpath([cache_dir, first]) == cache_dir
    assert Path(first).read_bytes() == b"v1"
    assert PathManager.get_local_path(url) == first  # a hit
    with PathManager.open(url, "wb") as f:
        f.write(b"version 2")
    second = PathManager.get_local_path(url)
    assert second != first
    assert Path(second).read_bytes() == b"version 2"


def test_get_local_path_of_a_directory_or_missing_object_names_the_url(mem):
    with PathManager.open(f"{mem}/d/x", "wb") as f:
        f.write(b"x")
    with pytest.raises(IsADirectoryError, match=f"{mem}/d"):
        PathManager.get_local_path(f"{mem}/d")
    with pytest.raises(FileNotFoundError, match=f"{mem}/nope"):
        PathManager.get_local_path(f"{mem}/nope")
    with pytest.raises(FileNotFoundError, match=f"{mem}/nope"):
        PathManager.open(f"{mem}/nope", "rb")


def test_remove_copy_and_removedirs(mem, tmp_path):
    local = tmp_path / "src.bin"
    local.write_bytes(b"payload")
    dst = f"{mem}/a/b/c.bin"
    assert PathManager.copy_from_local(str(local), dst)
    with pytest.raises(FileExistsError, match=re.escape("c.bin")):
        PathManager.copy_from_local(str(local), dst)
    local.write_bytes(b"payload 2")
    PathManager.copy_from_local(str(local), dst, overwrite=True)
    assert PathManager.open(dst, "rb").read() == b"payload 2"
    PathManager.copy(dst, f"{mem}/a/copy.bin")
    assert PathManager.open(f"{mem}/a/copy.bin", "rb").read() == b"payload 2"
    with pytest.raises(IsADirectoryError):
        PathManager.remove(f"{mem}/a/b")
    with pytest.raises(OSError):
        PathManager.removedirs(f"{mem}/a/b")  # not empty
    PathManager.remove(dst)
    assert not PathManager.exists(dst)
    with pytest.raises(FileNotFoundError):
        PathManager.remove(dst)
    PathManager.removedirs(f"{mem}/a/b")
    assert not PathManager.exists(f"{mem}/a/b")
    assert PathManager.exists(f"{mem}/a/copy.bin")


def test_append_and_update_modes_are_refused(mem):
    for mode in ("a", "ab", "r+", "w+b"):
        with pytest.raises(ValueError, match="objects are read or written whole"):
            PathManager.open(f"{mem}/x", mode)


def test_file_urls_through_fsspec(tmp_path):
    target = tmp_path / "sub" / "f.txt"
    url = f"file://{target}"
    PathManager.makedirs(f"file://{tmp_path / 'sub'}")
    with PathManager.open(url, "w") as f:
        f.write("local")
    assert target.read_text() == "local"
    assert PathManager.get_local_path(url) == str(target)  # no copy of a local file
    with pytest.raises(RuntimeError), PathManager.open(url, "w") as f:
        f.write("half")
        raise RuntimeError("boom")
    assert target.read_text() == "local"
    assert PathManager.listdir(f"file://{tmp_path / 'sub'}") == ["f.txt"]
    with pytest.raises(FileNotFoundError, match="missing"):
        PathManager.get_local_path(f"file://{tmp_path / 'missing'}")


def test_unknown_and_uninstalled_protocols_name_the_path():
    with pytest.raises(ValueError, match="no PathHandler registered for 'nosuchproto://x'"):
        PathManager.exists("nosuchproto://x")
    # fsspec's own network protocols reach another host: only when registered explicitly.
    for url in ("ftp://127.0.0.1/f", "sftp://127.0.0.1/f", "smb://127.0.0.1/f"):
        with pytest.raises(ValueError, match=r"PathManager.register\(FsspecPathHandler\("):
            PathManager.exists(url)
    assert "ftp://" not in _manager._handlers
    try:
        import adlfs  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match=r"az://c/x.*fsspec serves az:// once its package"):
            PathManager.exists("az://c/x")


def test_repr_and_pickle_keep_no_file_system_and_show_no_secret():
    import pickle

    handler = FsspecPathHandler("memory", storage_options={"secret": "hunter2-topsecret"})
    assert "hunter2" not in repr(handler)
    handler.fs  # noqa: B018 - make the file system
    clone = pickle.loads(pickle.dumps(handler))
    assert clone._fs is None and clone.protocol == "memory"
    with pytest.raises(ValueError):
        FsspecPathHandler("s3://")


def test_max_age_serves_a_checked_copy_without_asking_again(mem):
    handler = FsspecPathHandler("memory", max_age=3600)
    url = f"{mem}/m.bin"
    with PathManager.open(url, "wb") as f:
        f.write(b"v1")
    first = handler.get_local_path(url)
    with PathManager.open(url, "wb") as f:
        f.write(b"version 2")
    assert handler.get_local_path(url) == first  # within max_age: not asked again
    assert Path(FsspecPathHandler("memory").get_local_path(url)).read_bytes() == b"version 2"
    with pytest.raises(ValueError, match="max_age"):
        FsspecPathHandler("memory", max_age=-1)
