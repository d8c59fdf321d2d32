"""What `save(path)` does to the file system (issue 15, items 4 and 8).

Saving creates its temporary file with an explicit mode and lets the kernel
apply the umask, as `open()` does, instead of setting the process umask to 0
for a moment (which other threads share). A symlink is written through to its
target, atomically there; a path naming something other than a regular file
is refused.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from easycore.common.config import CfgNode, ConfigError, HierarchicalCfgNode

TIMEOUT = 60
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes and special files")


def entries(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ------------------------------------------------------------ the umask (item 4)
def test_save_never_changes_the_umask(tmp_path, monkeypatch):
    calls = []
    real_umask = os.umask

    def watching_umask(mask):
        calls.append(mask)
        return real_umask(mask)

    monkeypatch.setattr(os, "umask", watching_umask)
    CfgNode({"A": 1}).save(tmp_path / "new.yaml")
    CfgNode({"A": 2}).save(tmp_path / "new.yaml")
    HierarchicalCfgNode.save(CfgNode({"A": 3}), tmp_path / "child.yaml", tmp_path / "new.yaml")
    assert calls == []


@posix_only
@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077, 0o002])
def test_new_file_gets_the_mode_open_would_give_under_any_umask(tmp_path, umask):
    # In a child process: the umask is process-wide state this test must not leak.
    script = textwrap.dedent(
        f"""
        import os, stat
        from easycore.common.config import CfgNode
        os.umask({umask:#o})
        CfgNode({{"A": 1}}).save("saved.yaml")
        with open("opened.yaml", "w") as f:
            f.write("A: 1\\n")
        saved = stat.S_IMODE(os.stat("saved.yaml").st_mode)
        opened = stat.S_IMODE(os.stat("opened.yaml").st_mode)
        assert saved == opened, (oct(saved), oct(opened))
        assert os.umask(0) == {umask:#o}  # unchanged
        print(oct(saved))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == oct(0o666 & ~umask)


# ------------------------------------------------------------ symlinks (item 8)
@posix_only
def test_save_through_a_symlink_writes_the_target(tmp_path):
    real = tmp_path / "configs" / "real.yaml"
    real.parent.mkdir()
    real.write_text("A: 1\n", encoding="utf-8")
    os.chmod(real, 0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)

    CfgNode({"A": 2}).save(link)

    assert link.is_symlink() and os.readlink(link) == str(real)
    assert CfgNode.open(real).A == 2 and CfgNode.open(link).A == 2
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o640  # the target keeps its mode
    # the temporary file was made beside the target and renamed there
    assert entries(real.parent) == ["real.yaml"] and entries(tmp_path) == ["configs", "link.yaml"]


@posix_only
def test_save_through_a_relative_symlink_chain(tmp_path):
    (tmp_path / "real.yaml").write_text("A: 1\n", encoding="utf-8")
    (tmp_path / "middle.yaml").symlink_to("real.yaml")
    (tmp_path / "top.yaml").symlink_to("middle.yaml")

    CfgNode({"A": 3}).save(tmp_path / "top.yaml")

    assert (tmp_path / "top.yaml").is_symlink() and (tmp_path / "middle.yaml").is_symlink()
    assert CfgNode.open(tmp_path / "real.yaml").A == 3


@posix_only
def test_save_through_a_dangling_symlink_creates_the_target(tmp_path):
    link = tmp_path / "link.yaml"
    link.symlink_to("made-by-save.yaml")
    CfgNode({"A": 4}).save(link)
    assert link.is_symlink()
    assert CfgNode.open(tmp_path / "made-by-save.yaml").A == 4


# ------------------------------------------------------------ special files (item 8)
@posix_only
def test_save_refuses_a_fifo_without_blocking_or_replacing_it(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"pipe\.yaml.*FIFO.*not a regular file.*file object"):
        CfgNode({"A": 1}).save(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert entries(tmp_path) == ["pipe.yaml"]


@posix_only
def test_save_refuses_a_symlink_to_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link.yaml").symlink_to("pipe")
    with pytest.raises(ConfigError, match="FIFO"):
        CfgNode({"A": 1}).save(tmp_path / "link.yaml")
    assert (tmp_path / "link.yaml").is_symlink()
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)


def test_save_refuses_a_directory(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"dir\.yaml.*directory, not a regular file"):
        CfgNode({"A": 1}).save(tmp_path / "dir.yaml")
    assert (tmp_path / "dir.yaml").is_dir() and entries(tmp_path) == ["dir.yaml"]


# Never point these tests at the real /dev/null or /dev/stdout: an implementation
# that regressed would replace them, machine-wide when the suite runs as root.
@posix_only
def test_save_refuses_a_character_device(tmp_path):
    device = tmp_path / "null.yaml"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of our own
    except PermissionError:
        pytest.skip("creating a device node needs privileges")
    with pytest.raises(ConfigError, match=r"null\.yaml.*character device, not a regular file"):
        CfgNode({"A": 1}).save(device)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert entries(tmp_path) == ["null.yaml"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("through", ["proc", "symlink"])
def test_save_refuses_an_open_file_of_the_process_like_dev_stdout(tmp_path, through):
    # /dev/stdout is a link to /proc/self/fd/1; here fd N is a file of our own
    # (a regular file, as stdout is when redirected to one).
    stream = tmp_path / "stream.txt"
    with open(stream, "w", encoding="utf-8") as f:
        path = f"/proc/self/fd/{f.fileno()}"
        if through == "symlink":
            (tmp_path / "stdout").symlink_to(path)
            path = str(tmp_path / "stdout")
        with pytest.raises(ConfigError, match=r"open file of the process.*file object"):
            CfgNode({"A": 1}).save(path)
        f.write("still the stream\n")
    assert stream.read_text(encoding="utf-8") == "still the stream\n"


def test_a_file_object_still_writes_to_anything(tmp_path):
    with open(os.devnull, "w", encoding="utf-8") as f:
        CfgNode({"A": 1}).save(f)  # the way to write to a device or a pipe
