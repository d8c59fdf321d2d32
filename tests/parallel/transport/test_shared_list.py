"""SharedList: a read-only list in shared memory, read by workers without copies.

Real processes everywhere (multiprocessing's, easycore's Pool, a separate
interpreter); every test that waits has a timeout; ``no_leaks`` checks that
no segment (``/dev/shm/ecp-<pid>-...``), process or thread is left behind.
"""

from __future__ import annotations

import collections.abc
import contextlib
import gc
import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest
from _parallel_support import METHODS, SCRIPTS, namespace_prefix, shm_named, shm_segments
from _shared_list_funcs import (
    close_and_report,
    ids_of,
    keep,
    kept_ids,
    make_items,
    read_until_released,
)
from processes import wait_gone

from easycore.common.parallel import Pool, SharedList

pytestmark = pytest.mark.timeout(120)


def _name(shared: SharedList) -> str:
    return shared._segment.name.lstrip("/")


class _Explodes:
    """Pickles fine, fails to unpickle (as a class missing in a worker would)."""

    def __reduce__(self):
        return _explode, ()


def _explode():
    raise RuntimeError("cannot rebuild")


# ------------------------------------------------------------------ the sequence
def test_reads_like_the_list_it_was_made_from(no_leaks):
    items = [*make_items(50), None, b"\x00" * 10, ("t", 1), np.arange(6).reshape(2, 3),
             {"big": "x" * 200_000}]
    with SharedList(items) as shared:
        assert isinstance(shared, collections.abc.Sequence)
        assert len(shared) == len(items)
        for got, want in zip(shared, items):
            if isinstance(want, np.ndarray):
                np.testing.assert_array_equal(got, want)
                assert got.flags.writeable  # a copy of its own
            else:
                assert got == want
        assert shared[0] == items[0] and shared[-1] == items[-1]
        assert shared[np.int64(3)] == items[3]  # any __index__
        assert shared[-len(items)] == items[0]
        assert shared[0] is not shared[0]  # each read is a new object...
        shared[0]["id"] = 999
        assert shared[0]["id"] == 0  # ...so changing it changes nothing shared
        assert next(reversed(shared)) == items[-1]
        records = shared[:50]  # plain records: == on an array would broadcast
        assert make_items(50)[7] in records and {"nope": 1} not in records
        assert records.index(items[9]) == 9 and records.count(items[3]) == 1
        assert shared[50:53].count(("t", 1)) == 1


def test_bad_indices_say_what_is_wrong(no_leaks):
    with SharedList(range(3)) as shared:
        for index in (3, -4, 10**20):
            with pytest.raises(IndexError, match=f"SharedList index {index} out of range: "
                               "it has 3 items"):
                shared[index]
        for index, kind in (("1", "str"), (1.0, "float"), (None, "NoneType")):
            with pytest.raises(TypeError, match=f"integers or slices, not {kind}"):
                shared[index]  # type: ignore[index]
        with pytest.raises(TypeError):
            shared[0] = 1  # type: ignore[index]  # read-only
        with pytest.raises(AttributeError):
            shared.append(1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("cut", [slice(2, 8), slice(None, None, 3), slice(None, None, -2),
                                 slice(-3, None), slice(5, 2), slice(1, 100, 4)])
def test_slices_are_views_of_the_same_segment(no_leaks, cut):
    items = make_items(20)
    with SharedList(items) as shared:
        view = shared[cut]
        assert isinstance(view, SharedList)
        assert view._segment is shared._segment  # nothing copied
        assert list(view) == items[cut]
        assert len(view) == len(items[cut])
        assert list(view[1::2]) == items[cut][1::2]  # a view of a view
        if items[cut]:
            assert view[-1] == items[cut][-1]
            assert f"{len(items[cut])} of 20 items" in repr(view)


def test_an_empty_iterable_makes_an_empty_list(no_leaks):
    with SharedList(iter(())) as shared:
        assert len(shared) == 0 and list(shared) == [] and not shared
        with pytest.raises(IndexError):
            shared[0]


def test_repr_says_size_segment_and_owner(no_leaks):
    with SharedList(make_items(1000)) as shared:
        text = repr(shared)
        assert text.startswith("<SharedList: 1,000 items, ")
        assert text.endswith(f" kB shared as '{_name(shared)}', owner {os.getpid()}>")
    assert "closed" in repr(shared)


def test_a_pickled_handle_is_small_whatever_the_size(no_leaks):
    with SharedList(make_items(20_000)) as shared:
        assert shared.nbytes > 1 << 20
        assert len(pickle.dumps(shared)) < 300
        assert len(pickle.dumps(shared[::7])) < 300


# ------------------------------------------------------------------ errors and release
def test_an_unpicklable_item_is_named_and_nothing_is_left(no_leaks):
    def items():
        yield from range(3)
        yield lambda: 0

    with pytest.raises(pickle.PicklingError, match="SharedList: item 3 \\(function\\) "
                       "cannot be pickled"):
        SharedList(items())


def test_an_exception_from_the_iterable_leaves_nothing(no_leaks):
    def items():
        yield 1
        raise KeyError("source broke")

    with pytest.raises(KeyError, match="source broke"):
        SharedList(items())


def test_an_item_that_fails_to_unpickle_is_named(no_leaks):
    with SharedList([1, _Explodes(), 3]) as shared:
        assert shared[2] == 3
        with pytest.raises(pickle.UnpicklingError, match=f"item 1 of SharedList '{_name(shared)}'"
                           ".*RuntimeError: cannot rebuild") as info:
            shared[1]
        assert isinstance(info.value.__cause__, RuntimeError)


def test_a_full_dev_shm_fails_the_build_clearly_and_leaves_nothing():
    """In a private mount namespace whose /dev/shm is a 1 MB tmpfs: 4 MB of items."""
    code = ("import os\n"
            "from easycore.common.parallel import SharedList\n"
            "try:\n"
            "    SharedList(bytes(1000) for _ in range(4000))\n"
            "except OSError as exc:\n"
            "    print('error:', exc)\n"
            "print('left:', os.listdir('/dev/shm'))\n")
    shell = 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$0" "$@"'
    proc = subprocess.run([*namespace_prefix(), "sh", "-c", shell, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    error, left = proc.stdout.splitlines()
    assert error == ("error: [Errno 28] SharedList: 4,000 items need 3.9 MB of shared memory, "
                     "more than /dev/shm has room for (Docker: give the container more with "
                     "--shm-size)")
    assert left == "left: []"
    assert "leaked" not in proc.stderr, proc.stderr


def test_close_releases_the_segment_and_reads_then_fail_clearly(no_leaks):
    shared = SharedList(make_items(10))
    view = shared[2:5]
    handle = pickle.loads(pickle.dumps(shared))  # a handle in the owner's own process
    name = _name(shared)
    assert shm_named(name) == [name]
    shared.close()
    shared.close()  # idempotent
    assert shm_named(name) == []
    assert shared.closed and view.closed and handle.closed
    for reader in (shared, view, handle):
        with pytest.raises(ValueError, match=f"SharedList '{name}' .* was closed in this process"):
            reader[0]
        with pytest.raises(ValueError, match=f"SharedList '{name}'"):
            list(reader)
    with pytest.raises(ValueError, match=f"cannot pickle SharedList '{name}'"):
        pickle.dumps(view)


def test_an_exception_in_the_with_block_releases_it(no_leaks):
    with pytest.raises(ZeroDivisionError), SharedList(make_items(10)) as shared:
        name = _name(shared)
        assert shm_named(name) == [name]
        1 / 0  # noqa: B018
    assert shm_named(name) == []


def test_the_last_reference_releases_it_views_and_handles_included(no_leaks):
    shared = SharedList(make_items(10))
    name = _name(shared)
    view = shared[::2]
    handle = pickle.loads(pickle.dumps(shared))
    del shared
    gc.collect()
    assert list(view) == make_items(10)[::2]  # the view keeps it
    del view
    gc.collect()
    assert handle[3] == make_items(10)[3]  # so does a handle unpickled here
    del handle
    gc.collect()
    assert shm_named(name) == []


def test_at_exit_the_owner_releases_it_without_a_tracker_warning():
    code = ("from easycore.common.parallel import SharedList\n"
            "items = SharedList({'id': i} for i in range(100))\n"
            "print(items._segment.name.lstrip('/'), flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert shm_named(proc.stdout.strip()) == []
    assert "leaked" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("method", METHODS)
def test_a_killed_owner_family_leaves_nothing_behind(no_leaks, method):
    """Owner and reader SIGKILLed: the resource tracker removes the segment."""
    info: dict = {}
    with subprocess.Popen([sys.executable, str(SCRIPTS / "shared_list_owner.py"), method],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          cwd=str(SCRIPTS)) as proc:
        try:
            assert proc.stdout is not None
            info = json.loads(proc.stdout.readline())  # the test's timeout bounds it
            assert shm_named(info["name"]) == [info["name"]]
        finally:
            for pid in (proc.pid, info.get("reader")):
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            proc.wait(30)
    assert wait_gone([info["reader"], info["tracker"]], 30) == []
    assert shm_named(info["name"]) == []


# ------------------------------------------------------------------ other processes
@pytest.mark.parametrize("method", METHODS)
def test_a_multiprocessing_pool_reads_it_through_its_initializer(no_leaks, method):
    items = make_items(2000)
    total = sum(item["id"] for item in items)
    ctx = multiprocessing.get_context(method)
    with SharedList(items) as shared:
        pool = ctx.Pool(2, initializer=keep, initargs=(shared,))
        try:
            answers = pool.map(kept_ids, range(8), chunksize=1)
            assert {s for _, s in answers} == {total}
            assert os.getpid() not in {p for p, _ in answers}
            assert pool.apply(ids_of, (shared[100:110],)) == list(range(100, 110))
        finally:
            pool.close()
            pool.join()
        assert shared[5] == items[5]  # workers' exits released nothing
        assert shm_named(_name(shared)) == [_name(shared)]


@pytest.mark.parametrize("method", METHODS)
def test_easycore_pool_reads_it_sent_with_every_task(no_leaks, method):
    with SharedList(make_items(500)) as shared:
        with Pool(2, start_method=method) as pool:
            views = [shared[i:i + 50] for i in range(0, 500, 50)]
            assert [i for ids in pool.map(ids_of, views) for i in ids] == list(range(500))
            # a handle closed in a worker stops working there only
            first, error = pool.apply(close_and_report, (shared,))
            assert first == 0 and error is not None and "closed in this process" in error
            assert pool.apply(ids_of, (shared[:3],)) == [0, 1, 2]
        assert shared[499]["id"] == 499


@pytest.mark.parametrize("method", METHODS)
def test_a_reader_of_a_released_list_gets_an_error_not_sigbus(no_leaks, method):
    ctx = multiprocessing.get_context(method)
    shared = SharedList(make_items(10))
    name = _name(shared)
    ready, released = ctx.Event(), ctx.Event()
    mine, theirs = ctx.Pipe(duplex=False)
    reader = ctx.Process(target=read_until_released, args=(shared, ready, released, theirs))
    reader.start()
    try:
        theirs.close()
        assert ready.wait(60)
        assert mine.recv() == ("ok", 1)
        shared.close()
        released.set()
        for _ in range(2):  # by index, then by iteration
            assert mine.poll(60)
            kind, message = mine.recv()
            assert kind == "error", (kind, message)
            assert message.startswith(f"SharedList '{name}' (10 items, made by process "
                                      f"{os.getpid()}) was released by its owner"), message
    finally:
        reader.join(60)
        mine.close()
    assert reader.exitcode == 0


def test_an_unrelated_process_reads_it_while_the_owner_holds_it(no_leaks):
    code = ("import pickle, sys\n"
            "items = pickle.load(sys.stdin.buffer)\n"
            "try:\n"
            "    print(len(items), sum(item['id'] for item in items))\n"
            "except ValueError as exc:\n"
            "    print('error:', exc)\n")
    items = make_items(3000)
    shared = SharedList(items)
    blob = pickle.dumps(shared[1000:])
    proc = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().split() == ["2000", str(sum(range(1000, 3000)))]
    assert shared[2999] == items[2999]  # its exit released nothing
    shared.close()
    proc = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.startswith(f"error: SharedList '{_name(shared)}'") and "no longer exists" in out
    assert b"leaked" not in proc.stderr


def test_no_segment_is_left_after_normal_use():
    before = set(shm_segments())
    for _ in range(3):
        with SharedList(make_items(100)) as shared:
            assert shared[-1]["id"] == 99
        made = SharedList(range(10))
        assert made[3] == 3
        del made
    gc.collect()
    assert set(shm_segments()) == before
