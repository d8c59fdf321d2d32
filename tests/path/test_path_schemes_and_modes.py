"""Every scheme and mode keeps the native handler's promises (issue 34, items 11-13, 18-23).

Plain paths, ``file://`` and ``memory://`` here (real fsspec, no mocks); ``s3://`` against
a real S3 endpoint in test_path_fsspec_s3.py.
"""

import os
import stat
import threading
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

from easycore.common.path import (  # noqa: E402
    FsspecPathHandler,
    NativePathHandler,
    PathManager,
    RedirectPathHandler,
)


def file_url(path) -> str:
    return f"file://{path}"


def leftovers(directory: Path) -> list:
    """Names in `directory` that no test made: temporary files of a write."""
    return sorted(n for n in os.listdir(directory) if n.startswith(".") or "@" in n)


# ------------------------------------------------------------ item 11: x and xb on file://
@pytest.mark.parametrize("mode", ["x", "xb", "w", "wb"])
def test_a_file_url_write_lands_whole_on_a_clean_close_and_not_at_all_otherwise(tmp_path, mode):
    url = file_url(tmp_path / "out.txt")
    data = "text" if "b" not in mode else b"bytes"
    with pytest.raises(RuntimeError, match="crash"), PathManager.open(url, mode) as f:
        f.write(data * 1000)
        raise RuntimeError("crash")
    assert not (tmp_path / "out.txt").exists() and leftovers(tmp_path) == []
    with PathManager.open(url, mode) as f:  # a clean close: no error, the whole file
        f.write(data)
    assert (tmp_path / "out.txt").read_bytes() == (data if "b" in mode else data.encode())
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("mode", ["x", "xb"])
@pytest.mark.parametrize("where", ["file://", "plain path"])
def test_exclusive_create_refuses_an_existing_file_at_open(tmp_path, mode, where):
    (tmp_path / "there.txt").write_text("old")
    url = (file_url if where == "file://" else str)(tmp_path / "there.txt")
    with pytest.raises(FileExistsError):
        PathManager.open(url, mode)
    assert (tmp_path / "there.txt").read_text() == "old" and leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["file://", "plain path", "memory://"])
def test_of_writers_racing_to_create_one_file_exactly_one_wins(tmp_path, where, mem):
    target = tmp_path / "race.bin"
    url = {"file://": file_url(target), "plain path": str(target), "memory://": f"{mem}/r"}[where]
    writers = 8
    opened = threading.Barrier(writers, timeout=30)
    outcomes: dict = {}

    def write(i: int) -> None:
        try:
            f = PathManager.open(url, "xb")
        except FileExistsError:  # a plain path decides at open (O_EXCL)
            outcomes[i] = "exists"
            opened.wait()
            return
        opened.wait()  # every writer is past its open before any closes
        try:
            with f:
                f.write(bytes([i]) * 4096)
            outcomes[i] = "stored"
        except FileExistsError:  # file:// and memory:// decide when the file is closed
            outcomes[i] = "exists"

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [i for i, outcome in outcomes.items() if outcome == "stored"]
    assert len(outcomes) == writers and len(winners) == 1, outcomes
    with PathManager.open(url, "rb") as f:
        assert f.read() == bytes([winners[0]]) * 4096
    assert leftovers(tmp_path) == []


def test_a_new_file_gets_the_mode_a_plain_open_gives(tmp_path):
    with PathManager.open(file_url(tmp_path / "a"), "w") as f:
        f.write("a")
    with open(tmp_path / "b", "w") as f:
        f.write("b")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE(
        (tmp_path / "b").stat().st_mode
    )
    os.chmod(tmp_path / "a", 0o640)  # replacing a file keeps its mode, as open("w") does
    with PathManager.open(file_url(tmp_path / "a"), "w") as f:
        f.write("again")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o640


# ------------------------------------------------------------ item 18: symlinks
def _write_file_url(link, local) -> None:
    with PathManager.open(file_url(link), "w") as f:
        f.write("new")


@pytest.mark.parametrize(
    "write",
    [
        _write_file_url,
        lambda link, local: PathManager.copy_from_local(local, file_url(link), overwrite=True),
        lambda link, local: PathManager.copy_from_local(local, str(link), overwrite=True),
        lambda link, local: PathManager.copy(local, str(link), overwrite=True),
    ],
    ids=["file:// open", "file:// copy_from_local", "plain copy_from_local", "plain copy"],
)
def test_writes_go_through_a_symlink_and_keep_it(tmp_path, write):
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    local = tmp_path / "new.txt"
    local.write_text("new")
    write(link, str(local))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new" and leftovers(tmp_path) == []


def test_a_file_url_write_through_a_symlink_stores_in_the_target(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to("real.txt")  # relative, as most links are
    with PathManager.open(file_url(link), "w") as f:
        f.write("new")
    assert link.is_symlink() and target.read_text() == "new"
    assert leftovers(tmp_path) == []
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "created.txt")
    with PathManager.open(file_url(dangling), "w") as f:  # as open() does: creates the target
        f.write("made")
    assert dangling.is_symlink() and (tmp_path / "created.txt").read_text() == "made"


# ------------------------------------------------------------ item 12: scheme case
@pytest.mark.parametrize("scheme", ["MEMORY", "Memory", "mEmOrY"])
def test_a_memory_url_in_any_case_is_the_same_object(mem, scheme):
    lower = f"{mem}/dir/x.txt"
    other = scheme + lower[len("memory") :]
    with PathManager.open(lower, "w") as f:
        f.write("lower")
    assert PathManager.exists(other) and PathManager.isfile(other)
    assert PathManager.isdir(scheme + f"{mem}/dir"[len("memory") :])
    with PathManager.open(other) as f:
        assert f.read() == "lower"
    with PathManager.open(other.replace("x.txt", "y.txt"), "w") as f:
        f.write("upper")
    assert PathManager.listdir(f"{mem}/dir") == ["x.txt", "y.txt"]
    assert Path(PathManager.get_local_path(other)).read_text() == "lower"
    PathManager.remove(other)
    assert not PathManager.exists(lower)


def test_a_file_url_in_upper_case_is_the_file_and_nothing_in_the_working_dir(
    tmp_path, monkeypatch
):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    target = tmp_path / "f.txt"
    with PathManager.open(f"FILE://{target}", "w") as f:
        f.write("x")
    assert target.read_text() == "x" and os.listdir(work) == []
    assert PathManager.get_local_path(f"File://{target}") == str(target)


def test_a_handler_called_directly_takes_any_case_too(mem):
    handler = FsspecPathHandler("memory")
    with handler.open(f"{mem}/d.txt", "w") as f:
        f.write("direct")
    assert handler.exists("MEMORY" + f"{mem}/d.txt"[len("memory") :])
    assert handler.listdir("Memory" + mem[len("memory") :]) == ["d.txt"]


def test_a_redirect_to_an_upper_case_scheme_reaches_the_handler(mem):
    with PathManager.open(f"{mem}/data/a.txt", "w") as f:
        f.write("via redirect")
    PathManager.register(RedirectPathHandler("dataset://", "MEMORY" + mem[len("memory") :] + "/"))
    with PathManager.open("DATASET://data/a.txt") as f:
        assert f.read() == "via redirect"


# ------------------------------------------------------------ item 19: percent-encoding
def test_a_file_url_is_percent_decoded(tmp_path):
    folder = tmp_path / "a b"
    folder.mkdir()
    (folder / "100%.txt").write_text("full")
    base = file_url(tmp_path) + "/a%20b"
    assert PathManager.isdir(base) and PathManager.listdir(base) == ["100%.txt"]
    assert PathManager.exists(base + "/100%25.txt")
    with PathManager.open(base + "/100%25.txt") as f:
        assert f.read() == "full"
    assert PathManager.get_local_path(base + "/100%25.txt") == str(folder / "100%.txt")
    with PathManager.open(base + "/%C3%A9t%C3%A9.txt", "w") as f:
        f.write("été")
    assert (folder / "été.txt").read_text() == "été"
    assert not (tmp_path / "a%20b").exists()


def test_a_plain_path_is_never_decoded(tmp_path):
    (tmp_path / "a%20b.txt").write_text("literal")
    assert PathManager.exists(str(tmp_path / "a%20b.txt"))
    assert not PathManager.exists(str(tmp_path / "a b.txt"))


# ------------------------------------------------------------ item 20: a trailing slash
@pytest.mark.parametrize("where", ["memory", "file"])
@pytest.mark.parametrize(
    "call",
    [
        lambda url, local: PathManager.open(url, "w"),
        lambda url, local: PathManager.open(url, "wb"),
        lambda url, local: PathManager.open(url, "x"),
        lambda url, local: PathManager.open(url, "r"),
        lambda url, local: PathManager.copy_from_local(local, url),
        lambda url, local: PathManager.get_local_path(url),
    ],
    ids=["w", "wb", "x", "r", "copy_from_local", "get_local_path"],
)
def test_a_path_ending_in_a_slash_is_no_object(mem, tmp_path, where, call):
    root = mem if where == "memory" else file_url(tmp_path / "d")
    (tmp_path / "d").mkdir()
    local = tmp_path / "local.txt"
    local.write_text("x")
    with PathManager.open(f"{root}/top", "w") as f:  # an object named "top" exists too
        f.write("object")
    with pytest.raises(IsADirectoryError) as info:
        call(f"{root}/top/", str(local))
    assert f"{root}/top/" in str(info.value)
    with PathManager.open(f"{root}/top") as f:
        assert f.read() == "object"
    assert PathManager.listdir(root) == ["top"]


# ------------------------------------------------------------ item 22: a copy of the wrong size
@pytest.mark.parametrize("change", ["truncate", "grow", "empty"])
def test_a_cached_copy_that_is_not_the_objects_size_is_fetched_again(mem, change):
    url = f"{mem}/big.bin"
    data = os.urandom(100_000)
    with PathManager.open(url, "wb") as f:
        f.write(data)
    local = PathManager.get_local_path(url)
    with open(local, "r+b") as f:
        if change == "truncate":
            f.truncate(50_000)
        elif change == "grow":
            f.seek(0, os.SEEK_END)
            f.write(b"more")
        else:
            f.truncate(0)
    again = PathManager.get_local_path(url)
    assert Path(again).read_bytes() == data


# ------------------------------------------------------------ item 23: unknown keywords
@pytest.mark.parametrize("mode", ["w", "r", "x"])
@pytest.mark.parametrize("where", ["memory", "file", "plain"])
def test_a_misspelt_keyword_is_refused_as_the_native_open_refuses_it(mem, tmp_path, mode, where):
    target = tmp_path / "k.txt"
    url = {"memory": f"{mem}/k.txt", "file": file_url(target), "plain": str(target)}[where]
    if mode == "r":
        with PathManager.open(url, "w") as f:
            f.write("k")
    with pytest.raises(TypeError, match="encodng"):
        PathManager.open(url, mode, encodng="utf-8")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["memory", "file", "plain"])
def test_a_text_argument_in_a_binary_mode_is_refused(mem, tmp_path, where):
    url = {"memory": f"{mem}/b", "file": file_url(tmp_path / "b"), "plain": str(tmp_path / "b")}
    with pytest.raises(ValueError, match="binary mode"):
        PathManager.open(url[where], "wb", encoding="utf-8")


def test_the_arguments_fsspec_takes_are_accepted(mem):
    with PathManager.open(f"{mem}/ok.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("line\n")
    with PathManager.open(f"{mem}/ok.txt", "r", encoding="utf-8", block_size=1024) as f:
        assert f.read() == "line\n"
    with PathManager.open(f"{mem}/ok.txt", "rb", cache_type="none") as f:
        assert f.read() == b"line\n"


# ------------------------------------------------------------ item 13: a relative cache
def test_a_relative_cache_directory_gives_absolute_paths(mem, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EASYCORE_CACHE", "relative-cache")
    with PathManager.open(f"{mem}/c.txt", "w") as f:
        f.write("cached")
    local = PathManager.get_local_path(f"{mem}/c.txt")
    assert os.path.isabs(local) and local.startswith(str(tmp_path / "relative-cache"))
    assert os.path.isabs(NativePathHandler().get_cache_dir())
    monkeypatch.chdir(tmp_path.parent)
    assert Path(local).read_text() == "cached"


def test_a_relative_cache_directory_for_http(server, http_handler, uid, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EASYCORE_CACHE", "rel")
    local = PathManager.get_local_path(server.url(f"/{uid}/h.txt"))
    assert local.startswith(str(tmp_path / "rel") + os.sep)
    monkeypatch.chdir(tmp_path.parent)
    assert os.path.isfile(local)
