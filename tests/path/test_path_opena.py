"""`PathManager.opena`: writes that run in the background, in order, joined on request.

iopath's `opena`, `async_join` and `async_close`, with easycore's promises: an error of a
background write is raised by the join (and logged when it happens), nothing is left
running once the writes are done, and a script that never joins still has its writes
finished before it exits. Real files, a real object store (memory://), real threads and
processes; the handlers that hold or fail a write are handlers of a user's kind.
"""

import errno
import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from leaks import check_leaks

from easycore.common.path import PathHandler, PathManager, UnknownArgumentError
from easycore.common.path.async_writes import AsyncWriter

WAIT = 30  # seconds: every wait of these tests fails rather than hangs


class GatedFile:
    """A real file whose writes wait for `gate` (so that a test sees them pending)."""

    def __init__(self, path, mode, gate, started):
        self._file = open(path, mode)  # noqa: SIM115 (closed by close(), as a file is)
        self._gate, self._started = gate, started

    def write(self, data):
        self._started.set()
        assert self._gate.wait(WAIT), "the test never opened the gate"
        return self._file.write(data)

    def flush(self):
        self._file.flush()

    def close(self):
        self._file.close()


class GatedHandler(PathHandler):
    """`gated://name` is `folder/name`, written through a `GatedFile`."""

    def __init__(self, folder):
        self.folder = folder
        self.gate, self.started = threading.Event(), threading.Event()

    def get_supported_prefixes(self):
        return ["gated://"]

    def open(self, path, mode="r", **kwargs):
        target = os.path.join(self.folder, path[len("gated://"):])
        return GatedFile(target, mode, self.gate, self.started)


class FullDisk:
    """A real file that takes `room` bytes, then fails as a full disk does."""

    def __init__(self, path, mode, room):
        self._file = open(path, mode)  # noqa: SIM115 (closed by close(), as a file is)
        self._room, self.closed = room, False

    def write(self, data):
        if len(data) > self._room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room -= len(data)
        return self._file.write(data)

    def flush(self):
        self._file.flush()

    def close(self):
        self._file.close()
        self.closed = True


class FullDiskHandler(PathHandler):
    def __init__(self, folder, room):
        self.folder, self.room, self.files = folder, room, []

    def get_supported_prefixes(self):
        return ["full://"]

    def open(self, path, mode="r", **kwargs):
        target = os.path.join(self.folder, path[len("full://") :])
        self.files.append(FullDisk(target, mode, self.room))
        return self.files[-1]


@pytest.fixture(autouse=True)
def joined():
    """Whatever a test leaves queued is waited for (and its errors dropped) after it."""
    yield
    while True:
        try:
            PathManager.async_close()
            return
        except Exception:  # noqa: BLE001 (a test's deliberate failure, reported already)
            continue


@pytest.fixture
def gated(tmp_path):
    """A registered `GatedHandler`; its gate opens after the test, failed or not."""
    handler = GatedHandler(str(tmp_path))
    PathManager.register(handler)
    yield handler
    handler.gate.set()


def opena_threads():
    return [t for t in threading.enumerate() if t.name.startswith("easycore-opena")]


# ------------------------------------------------------------ order and completion
def test_writes_land_in_call_order_per_path_and_nothing_is_left_running(tmp_path):
    f_path, g_path = str(tmp_path / "f.txt"), str(tmp_path / "g.bin")
    with check_leaks(fds=True):
        with PathManager.opena(f_path, "w") as f:
            f.write("f1 ")
            with PathManager.opena(g_path, "wb") as g:
                f.write("f2 ")
                assert g.write(b"g1 ") == 3
                f.write("f3 ")
            f.write("f4 ")
        for i in range(5, 50):
            with PathManager.opena(f_path, "a") as f:
                f.write(f"f{i} ")
        assert PathManager.async_close() is True
        assert opena_threads() == []
    assert (tmp_path / "f.txt").read_text() == "".join(f"f{i} " for i in range(1, 50))
    assert (tmp_path / "g.bin").read_bytes() == b"g1 "


def test_write_returns_at_once_and_async_join_waits(tmp_path, gated):
    handler = gated
    f = PathManager.opena("gated://slow.txt", "w")
    assert isinstance(f, AsyncWriter) and f.writable() and not f.readable()
    assert f.write("held") == 4  # returns while the write waits for the gate
    f.close()
    assert handler.started.wait(WAIT)
    assert (tmp_path / "slow.txt").read_text() == ""  # the write is still pending
    done = threading.Event()

    def join():
        PathManager.async_join("gated://slow.txt")
        done.set()

    joiner = threading.Thread(target=join)
    joiner.start()
    assert not done.wait(0.2)  # async_join waits for the pending write
    handler.gate.set()
    joiner.join(WAIT)
    assert done.is_set() and (tmp_path / "slow.txt").read_text() == "held"


def test_paths_are_written_side_by_side_and_joined_one_by_one(tmp_path, gated):
    handler = gated
    with PathManager.opena("gated://held.txt", "w") as held:
        held.write("later")
    local = str(tmp_path / "free.txt")
    with PathManager.opena(local, "w") as free:
        free.write("now")
    assert handler.started.wait(WAIT)
    assert PathManager.async_join(local) is True  # not held up by the gated path
    assert (tmp_path / "free.txt").read_text() == "now"
    assert (tmp_path / "held.txt").read_text() == ""
    handler.gate.set()
    assert PathManager.async_join() is True
    assert (tmp_path / "held.txt").read_text() == "later"


def test_a_relative_and_an_absolute_spelling_are_one_queue(tmp_path):
    PathManager.set_cwd(str(tmp_path))
    with PathManager.opena("rel.txt", "w") as f:
        f.write("a")
    with PathManager.opena(str(tmp_path / "rel.txt"), "a") as f:
        f.write("b")
    with PathManager.opena("./sub/../rel.txt", "a") as f:
        f.write("c")
    assert PathManager.async_join("rel.txt") is True
    assert (tmp_path / "rel.txt").read_text() == "abc"


def test_an_object_store_is_written_in_the_background_too(mem):
    with PathManager.opena(f"{mem}/ckpt.bin", "wb") as f:
        f.write(b"weights")
    PathManager.async_join(f"{mem}/ckpt.bin")
    with PathManager.open(f"{mem}/ckpt.bin", "rb") as f:
        assert f.read() == b"weights"


def test_the_data_is_copied_when_written(tmp_path):
    buffer = bytearray(b"first")
    with PathManager.opena(str(tmp_path / "b.bin"), "wb") as f:
        f.write(buffer)
        buffer[:] = b"XXXXX"  # the caller reuses its buffer at once
        f.write(memoryview(b"second"))
    PathManager.async_join()
    assert (tmp_path / "b.bin").read_bytes() == b"firstsecond"


# ------------------------------------------------------------ callbacks
def test_the_callback_runs_once_after_the_close_with_the_file_complete(tmp_path):
    path = tmp_path / "cb.txt"
    seen = []
    f = PathManager.opena(
        str(path), "w", callback_after_file_close=lambda: seen.append(path.read_text())
    )
    f.write("all of it")
    f.close()
    f.close()  # a second close does nothing
    PathManager.async_join()
    assert seen == ["all of it"]


def test_an_error_of_the_callback_is_raised_by_the_join(tmp_path):
    def upload():
        raise ConnectionError("upload refused")

    with PathManager.opena(str(tmp_path / "u.txt"), "w", callback_after_file_close=upload) as f:
        f.write("u")
    with pytest.raises(ConnectionError, match="upload refused"):
        PathManager.async_join()
    assert PathManager.async_join() is True  # reported once


def test_a_callback_that_joins_its_own_path_is_told_instead_of_hanging(tmp_path):
    path = str(tmp_path / "self.txt")

    def join_myself():
        PathManager.async_join(path)

    with PathManager.opena(path, "w", callback_after_file_close=join_myself) as f:
        f.write("x")
    with pytest.raises(RuntimeError, match="would wait for itself"):
        PathManager.async_join()


# ------------------------------------------------------------ errors
def test_a_failed_write_stops_that_file_and_is_raised_by_the_join(tmp_path, caplog):
    handler = FullDiskHandler(str(tmp_path), room=6)
    PathManager.register(handler)
    called = []

    def callback():
        called.append(1)

    with caplog.at_level(logging.ERROR, logger="easycore.common.path"):
        f = PathManager.opena("full://f.txt", "w", callback_after_file_close=callback)
        with f:
            f.write("12345")
            f.write("678")  # no room: fails in the background
            f.write("9")  # skipped: it would leave a hole
        with pytest.raises(OSError) as caught:
            PathManager.async_join("full://f.txt")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == "full://f.txt"
    assert "asynchronous write to full://f.txt failed" in caplog.text
    assert (tmp_path / "f.txt").read_text() == "12345"
    assert handler.files[0].closed and called == []  # closed all the same; no callback
    assert PathManager.async_join("full://f.txt") is True  # reported once


def test_an_error_is_kept_for_the_join_of_its_own_path(tmp_path):
    PathManager.register(FullDiskHandler(str(tmp_path), room=0))
    with PathManager.opena("full://bad.txt", "w") as f:
        f.write("x")
    with PathManager.opena(str(tmp_path / "good.txt"), "w") as g:
        g.write("fine")
    assert PathManager.async_join(str(tmp_path / "good.txt")) is True
    with pytest.raises(OSError, match="No space"):
        PathManager.async_join()


@pytest.mark.parametrize("mode", ["r", "rb", "r+", "w+", "a+", "", "wa", "t"])
def test_reading_modes_are_refused_and_touch_nothing(tmp_path, mode):
    path = tmp_path / "keep.txt"
    path.write_text("keep")
    with pytest.raises(ValueError, match=r"written .* not read"):
        PathManager.opena(str(path), mode)
    assert path.read_text() == "keep"


def test_errors_of_opening_and_of_arguments_raise_at_once(tmp_path):
    (tmp_path / "keep.txt").write_text("keep")
    with pytest.raises(UnknownArgumentError, match="foo"):
        PathManager.opena(str(tmp_path / "keep.txt"), "w", foo="foo")
    assert (tmp_path / "keep.txt").read_text() == "keep"  # not truncated
    with pytest.raises(FileNotFoundError):
        PathManager.opena(str(tmp_path / "missing" / "f.txt"), "w")
    with pytest.raises(FileExistsError):
        PathManager.opena(str(tmp_path / "keep.txt"), "x")
    with PathManager.opena(str(tmp_path / "enc.txt"), "w", encoding="utf-16") as f:
        f.write("é")
    PathManager.async_join()
    assert (tmp_path / "enc.txt").read_text(encoding="utf-16") == "é"


def test_wrong_kinds_of_data_and_closed_files_raise_at_once(tmp_path):
    text = PathManager.opena(str(tmp_path / "t.txt"), "w")
    with pytest.raises(TypeError, match=r"t\.txt.*takes str"):
        text.write(b"bytes")
    binary = PathManager.opena(str(tmp_path / "b.bin"), "wb")
    with pytest.raises(TypeError, match=r"b\.bin.*takes bytes"):
        binary.write("text")
    text.close()
    binary.close()
    with pytest.raises(ValueError, match="closed"):
        text.write("late")
    for unsupported in (lambda: binary.tell(), lambda: binary.seek(0)):
        with pytest.raises(OSError):  # io.UnsupportedOperation
            unsupported()
    PathManager.async_join()


# ------------------------------------------------------------ processes
@pytest.mark.parametrize("ending", ["f.close()", "", "del f"])
def test_a_script_that_never_joins_still_finishes_its_writes(tmp_path, ending):
    # "": the writer is still open when the interpreter exits (closed by the collector).
    script = textwrap.dedent(f"""
        from easycore.common.path import PathManager
        f = PathManager.opena({str(tmp_path / "out.txt")!r}, "w")
        for i in range(2000):
            f.write(f"line {{i}}\\n")
        {ending}
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT
    )
    assert done.returncode == 0 and done.stderr == ""
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert lines == [f"line {i}" for i in range(2000)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.forks_with_threads  # forks while the parent's writer thread runs
def test_a_forked_child_does_not_wait_for_its_parents_writes(tmp_path, gated):
    with PathManager.opena("gated://parent.txt", "w") as f:
        f.write("parent's")
    assert gated.started.wait(WAIT)
    pid = os.fork()
    if pid == 0:  # the child: the parent's pending write is not its own
        code = 1
        try:
            code = 0 if PathManager.async_join() is True else 1
        finally:
            os._exit(code)
    statuses = []
    waiter = threading.Thread(target=lambda: statuses.append(os.waitpid(pid, 0)[1]))
    waiter.start()
    waiter.join(WAIT)
    if waiter.is_alive():
        os.kill(pid, 9)
        waiter.join(WAIT)
        pytest.fail("the child waited for its parent's writes")
    assert os.waitstatus_to_exitcode(statuses[0]) == 0
    gated.gate.set()
    PathManager.async_join()
    assert (tmp_path / "parent.txt").read_text() == "parent's"
