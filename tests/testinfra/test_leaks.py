"""The suite's leak checker (tests/leaks.py) catches each kind of leak it claims to,
and lets through exactly what an area allows. Real threads, processes, segments and
descriptors; nothing is mocked."""

from __future__ import annotations

import multiprocessing
import os
import threading
from multiprocessing import shared_memory

import pytest
from leaks import check_leaks, shm_segments


def _wait(event: threading.Event) -> None:
    event.wait(timeout=30)


@pytest.fixture
def stop():
    event = threading.Event()
    before = set(threading.enumerate())
    yield event
    event.set()
    # joined, not only told to end: a thread still ending when the next test forks
    # would fail that test
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=30)


def test_a_clean_block_passes(tmp_path):
    with check_leaks(fds=True, empty_dir=str(tmp_path)) as leaks:
        worker = threading.Thread(target=lambda: None)
        worker.start()
        worker.join(timeout=30)
        fd = os.open(tmp_path, os.O_RDONLY)
        os.close(fd)
    assert leaks.pids == {os.getpid()}


def test_a_new_thread_fails_unless_allowed(stop):
    with pytest.raises(AssertionError, match="leaked threads"), check_leaks():
        threading.Thread(target=_wait, args=(stop,), name="stray").start()
    with check_leaks(allowed_threads=("kept",)):
        threading.Thread(target=_wait, args=(stop,), name="kept").start()
    with check_leaks(allowed_thread=lambda t: t.name.startswith("ke")):
        threading.Thread(target=_wait, args=(stop,), name="kept-too").start()


def test_a_new_child_process_fails():
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    proc = ctx.Process(target=stop.wait, args=(30,))
    try:
        with pytest.raises(AssertionError, match="leaked processes"):  # noqa: SIM117 (as one, the line would pass 100 columns)
            with check_leaks(process_grace=0.0):
                proc.start()
    finally:
        stop.set()
        proc.join(timeout=30)


def test_a_new_segment_of_this_process_fails_and_tracked_pids_count():
    name = f"ecp-{os.getpid():x}-leakcheck"
    try:
        with pytest.raises(AssertionError, match="leaked shared memory"), check_leaks():
            seg = shared_memory.SharedMemory(name=name, create=True, size=16)
    finally:
        seg.close()
        seg.unlink()
    assert shm_segments() == []
    # A segment named after another pid counts only once the test tracks that pid.
    other = f"ect-{os.getpid() + 1:x}-leakcheck"
    try:
        with check_leaks():
            seg = shared_memory.SharedMemory(name=other, create=True, size=16)
        with pytest.raises(AssertionError, match="leaked shared memory"):  # noqa: SIM117 (as one, the line would pass 100 columns)
            with check_leaks() as leaks:
                leaks.track(os.getpid() + 1, None)
    finally:
        seg.close()
        seg.unlink()


def test_shm_patterns_choose_the_names():
    name = f"torch_{os.getpid()}_leakcheck"
    seg = None
    try:
        with check_leaks():  # not an easycore name: not this area's business
            seg = shared_memory.SharedMemory(name=name, create=True, size=16)
        assert shm_segments(("torch_{pid}_",)) == [name]
    finally:
        if seg is not None:
            seg.close()
            seg.unlink()


def test_a_new_descriptor_fails_unless_process_wide_or_allowed(tmp_path):
    with pytest.raises(AssertionError, match="leaked file descriptors"), check_leaks(fds=True):
        fd = os.open(tmp_path / "f", os.O_CREAT | os.O_RDONLY)
    os.close(fd)
    with check_leaks(fds=True, process_wide_fds=(lambda: {str(fd)},)):
        fd = os.open(tmp_path / "f", os.O_RDONLY)
    os.close(fd)
    with check_leaks(fds=True, allowed_fd_target=lambda t: t.endswith("/f")):
        fd = os.open(tmp_path / "f", os.O_RDONLY)
    os.close(fd)
    with check_leaks():  # descriptors are checked only where asked
        fd = os.open(tmp_path / "f", os.O_RDONLY)
    os.close(fd)


def test_a_file_left_in_the_watched_directory_fails(tmp_path):
    with pytest.raises(AssertionError, match="leaked socket files"):  # noqa: SIM117 (as one, the line would pass 100 columns)
        with check_leaks(empty_dir=str(tmp_path)):
            (tmp_path / "sub").mkdir()
            (tmp_path / "sub" / "svc.sock").write_text("")
