"""One pickle per message: small chunks of plain values travel inside their message (issue 24).

A chunk's items (and results) used to be pickled by the transport, and the
payload pickled again inside its ``RunChunk`` (``ChunkDone``): 4 pickles and
4 unpickles per chunk. A short list of exact built-in scalars is now its own
payload, carried by the message's one pickle; everything else takes the
transport's way with the same errors as before. The unit tests look at the
payloads; the round trips go through real worker processes and read, in the
caller, what each chunk's payload was.
"""

from __future__ import annotations

import collections
import enum
import multiprocessing.pool
import pickle
import threading

import pytest
from _parallel_helpers import _Collect
from _parallel_support import METHODS
from _pool_funcs import identity, unpicklable_on

from easycore.common.parallel import (
    DevicePolicy,
    OrderedRunner,
    PickleTransport,
    Pool,
    SharedMemoryTransport,
    WorkerError,
)
from easycore.common.parallel.transport.inline import (
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_ITEMS,
    MAX_TEXT,
    inline_size,
)

pytestmark = pytest.mark.timeout(180)

START_METHODS = [m for m in ("fork", "spawn") if m in METHODS]
TRANSPORTS = [SharedMemoryTransport, PickleTransport]

#: every kind of plain value, with its edge cases
PLAIN = {
    "ints": [0, -1, 2**62, -(2**200)],
    "floats": [0.5, -0.0, float("inf"), 1e300],
    "bools and None": [True, False, None],
    "complex": [1 + 2j],
    "str": ["", "caf\u00e9", "x" * MAX_TEXT, "\ud800"],  # a lone surrogate pickles too
    "bytes": [b"", b"\x00\xff", b"y" * MAX_TEXT],
    "tuples": [(), (1, "a", b"b", None, 2.5), tuple(range(MAX_ENTRIES))],
    "containers": [((7,), {}), ((1, "a"), {"key": 2.5, "k2": None}), [1, [2]], {"k": (1, 2)}],
    "mixed": [1, "two", (3, b"4"), None, 5.0],
    "empty": [],
    "longest": list(range(MAX_ITEMS)),
}


class Shade(enum.IntEnum):
    DARK = 1


class MyInt(int):
    pass


class MainLike:
    """An instance of a class of ``__main__`` (as the pickler sees it)."""


MainLike.__module__ = "__main__"


def _not_plain():
    np = pytest.importorskip("numpy")
    return {
        "numpy array": [np.arange(3)],
        "numpy scalar": [np.float64(1.0)],
        "class of __main__": [MainLike()],
        "int subclass": [MyInt(3)],
        "IntEnum": [Shade.DARK],
        "long str": ["x" * (MAX_TEXT + 1)],
        "long bytes": [b"y" * (MAX_TEXT + 1)],
        "long list": list(range(MAX_ITEMS + 1)),
        "nested too deep": [(((1,),),)] if MAX_DEPTH == 2 else [],
        "long tuple": [tuple(range(MAX_ENTRIES + 1))],
        "long dict": [dict.fromkeys("abcdefghijklmnopqrstuvwxyz"[:MAX_ENTRIES + 1])],
        "dict with an int key": [{1: 2}],
        "set": [{3}],
        "OrderedDict": [collections.OrderedDict(a=1)],
        "tuple with a long str": [(1, "x" * (MAX_TEXT + 1))],
        "too many bytes in all": ["x" * MAX_TEXT] * MAX_ITEMS,
        "a plain list, then not": [1, 2, MainLike()],
        "unpicklable": [1, threading.Lock()],
    }


# --- what travels inline -----------------------------------------------------------
@pytest.fixture(params=TRANSPORTS, ids=lambda cls: cls.__name__)
def halves(request):
    """A caller's transport and a worker's (unpickled from it, as a worker gets it)."""
    caller = request.param()
    worker = pickle.loads(pickle.dumps(caller))
    worker.bind_worker(0)
    try:
        yield caller, worker
    finally:
        caller.cleanup()


@pytest.mark.parametrize("kind", sorted(PLAIN))
def test_a_short_list_of_plain_values_is_its_own_payload_both_ways(halves, kind):
    caller, worker = halves
    values = PLAIN[kind]
    payload, nbytes = caller.encode_items(0, values)
    assert payload is values  # no pickle of its own: the message carries it
    assert nbytes == inline_size(values) and nbytes >= 0
    assert worker.decode_items(pickle.loads(pickle.dumps(payload))) == values
    payload, _ = worker.encode_results(values)
    assert payload is values
    back = caller.decode_results(0, pickle.loads(pickle.dumps(payload)))
    assert [type(v) for v in back] == [type(v) for v in values]
    caller.discard(0, payload)  # a no-op, not an error
    caller.item_payload_done(0, payload)


def test_what_is_not_plain_takes_the_transports_own_way(halves):
    caller, worker = halves
    for kind, values in _not_plain().items():
        assert inline_size(values) is None, kind
        if kind == "unpicklable":
            continue  # below: the same error as before
        payload, nbytes = caller.encode_items(0, values)
        assert type(payload) is not list and nbytes > 0, kind
        got = worker.decode_items(payload)
        assert [type(v) for v in got] == [type(v) for v in values], kind
    assert inline_size((1, 2)) is None  # only a list is a chunk


def test_an_unpicklable_value_fails_in_the_transport_as_before(halves):
    caller, worker = halves
    with pytest.raises(TypeError, match="lock"):
        caller.encode_items(0, [1, threading.Lock()])
    with pytest.raises(TypeError, match="lock"):
        worker.encode_results([1, threading.Lock()])


def test_the_cfg_never_travels_inline():
    transport = SharedMemoryTransport()
    worker = pickle.loads(pickle.dumps(transport))
    try:
        payload = transport.encode_cfg([1, 2])
        assert type(payload) is bytes
        assert worker.decode_cfg(payload) == [1, 2]
    finally:
        transport.cleanup()


# --- through real workers ----------------------------------------------------------
class _Records:
    """Notes, in the caller, the type of every payload its transport makes and gets."""

    def __init__(self, *args):
        super().__init__(*args)
        self.sent = []
        self.got = []

    def encode_items(self, worker, items):
        payload, nbytes = super().encode_items(worker, items)
        self.sent.append(type(payload))
        return payload, nbytes

    def decode_results(self, worker, payload):
        self.got.append(type(payload))
        return super().decode_results(worker, payload)


class Recording(_Records, SharedMemoryTransport):
    pass


class RecordingPickle(_Records, PickleTransport):
    pass


class Echo(_Collect, OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data


class RecordingEcho(Echo):
    device_policy = DevicePolicy(transport_class=Recording)


class RecordingPickleEcho(Echo):
    device_policy = DevicePolicy(transport_class=RecordingPickle)


class RecordingPool(Pool):
    device_policy = DevicePolicy(transport_class=Recording)


def _transport_of(client):
    return client._engine.backend.transport


def _all_values():
    """Every plain value, fewer than ``MAX_ITEMS`` in all: no chunk can be too long."""
    values = [v for kind, values in PLAIN.items() if kind != "longest" for v in values]
    assert len(values) <= MAX_ITEMS
    return values


@pytest.mark.parametrize("runner_cls", [RecordingEcho, RecordingPickleEcho])
@pytest.mark.parametrize("method", START_METHODS)
def test_items_and_results_round_trip_identical_through_a_runner(no_leaks, method, runner_cls):
    values = _all_values()
    with runner_cls(2, start_method=method) as runner:
        out = runner(values)
        transport = _transport_of(runner)
        # Small chunks of plain values: each one pickle in its message, both ways.
        assert transport.sent and set(transport.sent) == {list}
        assert transport.got and set(transport.got) == {list}
    assert out == values
    assert [type(v) for v in out] == [type(v) for v in values]
    assert repr(out) == repr(values)  # -0.0 stays -0.0, "\ud800" stays itself


@pytest.mark.parametrize("method", START_METHODS)
def test_pool_results_round_trip_identical_and_mixed_chunks_take_both_ways(no_leaks, method):
    np = pytest.importorskip("numpy")
    values = _all_values()
    with RecordingPool(2, start_method=method) as pool:
        out = pool.map(identity, values, 4)
        assert out == values and [type(v) for v in out] == [type(v) for v in values]
        assert pool.apply(identity, ("x",)) == "x"
        transport = _transport_of(pool)
        assert set(transport.sent) == {list} and set(transport.got) == {list}
        del transport.sent[:], transport.got[:]
        arrays = pool.map(identity, [np.arange(4), 1], 2)
        assert arrays[1] == 1 and arrays[0].tolist() == [0, 1, 2, 3]
        # The chunk with an array is pickled by the transport, both ways.
        assert list not in transport.sent and list not in transport.got
        assert pool.map(identity, list(range(MAX_ITEMS + 1)), MAX_ITEMS + 1) == list(
            range(MAX_ITEMS + 1))


# --- errors stay as precise as before ----------------------------------------------
@pytest.mark.parametrize("method", START_METHODS)
def test_an_unpicklable_item_in_a_small_chunk_is_named_as_before(no_leaks, method):
    with Pool(2, start_method=method) as pool:
        with pytest.raises(TypeError, match="lock") as info:
            pool.map(identity, [1, 2, threading.Lock()], 3)
        assert "while sending items from index 0 to worker" in "".join(
            getattr(info.value, "__notes__", [str(info.value)]))
        assert pool.map(identity, [1, 2, 3], 3) == [1, 2, 3]  # the pool goes on


@pytest.mark.parametrize("method", START_METHODS)
def test_an_unpicklable_result_among_plain_ones_fails_alone_naming_its_item(no_leaks, method):
    with Pool(2, start_method=method) as pool:
        it = pool.imap(unpicklable_on, range(10), 5)  # item 7's chunk: 5 to 9
        got = [next(it) for _ in range(7)]
        with pytest.raises(multiprocessing.pool.MaybeEncodingError, match="item 7") as info:
            next(it)
        assert info.value.item == 7
        assert got + list(it) == [0, 1, 2, 3, 4, 5, 6, 8, 9]


class Weird:
    """Pickles, but its unpickling raises in the worker."""

    def __reduce__(self):
        return _refuse, ("no thanks",)


def _refuse(message):
    if multiprocessing.parent_process() is not None:
        raise ValueError(message)
    return Weird()


def test_an_item_that_does_not_unpickle_in_the_worker_still_fails_its_chunk(no_leaks):
    with Echo(1, start_method=START_METHODS[0]) as runner, pytest.raises(
            WorkerError, match="receiving items") as info:
        runner([1, Weird()])
    assert "no thanks" in str(info.value)
