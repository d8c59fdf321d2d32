"""The shared-memory transport's public pack/unpack pair (issue 35 items 5, 6).

A reader that maps a segment itself (the ``Queue``, across unrelated
processes) packs with ``SharedMemoryTransport.pack`` and unpacks with
``unpack``; a ``Packed`` payload names its segment. The transport's split
(``interface``, ``shared_memory``, ``segments``) keeps every import path that
existed.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from easycore.common.parallel import SharedMemoryTransport
from easycore.common.parallel.transport import shm
from easycore.common.parallel.transport.shared_memory import Packed

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def segments():
    """Makes segments for ``pack`` (as the Queue does) and releases them all."""
    made = []
    prefix = shm.make_prefix("ecp")

    def segment_for(nbytes):
        name = f"/{prefix}t{len(made)}"
        made.append(name)
        return name, nbytes, shm.create(name, nbytes)

    yield segment_for
    for name in made:
        shm.release(name, free_now=True)


def test_a_large_array_goes_through_its_segment_and_comes_back(no_leaks, segments):
    transport = SharedMemoryTransport()
    data = {"x": np.arange(1 << 16, dtype=np.float64), "label": "big"}
    payload, nbytes = transport.pack(data, segments)
    assert isinstance(payload, Packed) and nbytes >= data["x"].nbytes
    pickle.loads(pickle.dumps(payload))  # it crosses a pipe as it is
    mm = shm.open_existing(payload.name, payload.size)
    back = transport.unpack(payload, mm)
    assert back["label"] == "big" and np.array_equal(back["x"], data["x"])
    assert not back["x"].flags.owndata  # it views the segment: no copy
    del back


def test_small_objects_travel_in_band(segments):
    transport = SharedMemoryTransport()
    payload, nbytes = transport.pack([1, "two", (3.0,)], segments)
    assert not isinstance(payload, Packed) and nbytes == len(payload)
    assert transport.unpack(payload) == [1, "two", (3.0,)]


def test_a_full_dev_shm_sends_in_band_and_warns_once():
    transport = SharedMemoryTransport()

    def full(nbytes):
        raise shm.SharedMemoryFull(28, "no room")

    array = np.ones(1 << 15)
    with pytest.warns(ResourceWarning, match="/dev/shm is full"):
        payload, _ = transport.pack(array, full)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per transport
        again, _ = transport.pack(array, full)
    assert not isinstance(payload, Packed) and np.array_equal(transport.unpack(again), array)


def test_a_packed_payload_needs_its_mapping(segments):
    transport = SharedMemoryTransport()
    payload, _ = transport.pack(np.ones(1 << 15), segments)
    with pytest.raises(ValueError, match=payload.name):
        transport.unpack(payload)


def test_unpack_tells_when_the_last_view_died(segments):
    transport = SharedMemoryTransport()
    payload, _ = transport.pack(np.ones(1 << 15), segments)
    died: list = []
    watch: dict = {}
    back = transport.unpack(payload, shm.open_existing(payload.name, payload.size),
                            died.append, watch)
    (token, name), = watch.values()
    assert name == payload.name and not died
    del back
    assert died == [token]


def test_segment_of_names_a_packed_payloads_segment_and_none_in_band(segments):
    transport = SharedMemoryTransport()
    payload, _ = transport.pack(np.ones(1 << 15), segments)
    assert SharedMemoryTransport.segment_of(payload) == (payload.name, payload.size)
    small, _ = transport.pack(1, segments)
    assert SharedMemoryTransport.segment_of(small) is None
