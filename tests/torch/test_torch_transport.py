"""Tensors from producers to the consumer: exact values and layouts, shared memory, no leaks."""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest
import torch
from _torch_helpers import CASE_NAMES, BigTensors, MakeCases, Sum, make_case
from _torch_util import shm_segments
from processes import mapping_of

from easycore.common.config import CfgNode
from easycore.torch.parallel import TensorTransport

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cases():
    """Every case built in two workers (ordered), once for the module."""
    with MakeCases(["cpu", "cpu"]) as runner:
        return dict(zip(CASE_NAMES, runner(CASE_NAMES)))


def assert_same_tensor(got, want, *, strides: bool = True) -> None:
    assert type(got) is type(want)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.requires_grad == want.requires_grad
    if strides:
        assert got.stride() == want.stride()
    assert torch.equal(got.detach().resolve_conj(), want.detach().resolve_conj())


@pytest.mark.parametrize(
    "name",
    ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int64", "bool",
     "complex64", "scalar", "big", "zero_rows", "zero_view"],
)
def test_dtypes_and_shapes_arrive_exactly(cases, name):
    assert_same_tensor(cases[name], make_case(name))


@pytest.mark.parametrize("name", ["transposed", "column_slice", "narrow_view", "expanded"])
def test_non_contiguous_views_keep_their_strides(cases, name):
    got, want = cases[name], make_case(name)
    assert not want.is_contiguous() or name == "narrow_view"
    assert_same_tensor(got, want)
    if name == "expanded":  # stride 0: 7 values travelled, not 350,000
        assert got.untyped_storage().nbytes() == 7 * 4


def test_sparse_views_are_compacted(cases):
    got, want = cases["sparse_rows"], make_case("sparse_rows")
    assert_same_tensor(got, want, strides=False)
    assert got.is_contiguous()
    assert got.untyped_storage().nbytes() == want.numel() * 4  # not the 4 MiB it viewed


def test_narrow_view_sends_only_its_bytes(cases):
    got = cases["narrow_view"]
    assert got.untyped_storage().nbytes() == 2000 * 4


def test_conj_requires_grad_and_parameter(cases):
    assert_same_tensor(cases["conj"], make_case("conj"), strides=False)
    assert not cases["conj"].is_conj()  # resolved before sending: values, not a lazy view
    neg, want = cases["neg_view"], make_case("neg_view")
    assert want.is_neg() and not neg.is_neg()
    assert torch.equal(neg, want.resolve_neg()) and neg.dtype == torch.float32
    got = cases["requires_grad"]
    assert got.requires_grad and got.is_leaf and got.grad is None
    param = cases["parameter"]
    assert isinstance(param, torch.nn.Parameter) and param.requires_grad
    assert torch.equal(param.detach(), make_case("parameter").detach())


def test_nested_in_tuples_dicts_lists(cases):
    got, want = cases["nested"], make_case("nested")
    assert isinstance(got, tuple) and isinstance(got[1], dict)
    assert_same_tensor(got[0], want[0])
    assert_same_tensor(got[1]["a"][0], want[1]["a"][0])
    assert_same_tensor(got[1]["a"][1], want[1]["a"][1])
    assert torch.equal(got[1]["b"][0], want[1]["b"][0])
    assert got[1]["b"][1:] == ("text", 5)


def test_aliasing_within_a_result(cases):
    a, b = cases["aliased"]
    assert a is b  # one object sent twice stays one object, as pickle does
    base, rows, few = cases["views_of_one"]
    want = make_case("views_of_one")
    for got_t, want_t in zip((base, rows, few), want):
        assert_same_tensor(got_t, want_t)
    # Views of one storage arrive as tensors of their own (as NumPy views do),
    # each holding only the bytes it spans.
    assert rows.untyped_storage().nbytes() == 200 * 400 * 4
    assert few.untyped_storage().nbytes() == 10 * 400 * 4
    rows[0, 0] = 1234.5
    assert base[100, 0] != 1234.5


def test_python_attributes_fall_back_to_torch_pickling(cases):
    got = cases["attribute"]
    assert got.note == "kept"
    assert torch.equal(got, make_case("attribute"))


def test_sparse_tensors_pickle_themselves(cases):
    # torch's own reduction; its indices and values are plain tensors, sent our way.
    sparse, want = cases["sparse"], make_case("sparse")
    assert sparse.layout == torch.sparse_coo
    assert torch.equal(sparse.to_dense(), want.to_dense())


def test_numpy_arrays_and_plain_objects_still_travel(no_leaks):
    with BigTensors(["cpu"], cfg=CfgNode({"n": 3})) as runner:
        assert [t.tolist() for t in runner([1, 2])] == [[1.0] * 3, [2.0] * 3]
    transport = TensorTransport()
    transport.prepare()
    transport.bind_worker(0)
    try:
        results = [np.arange(200_000.0), {"x": 1, "y": "two"}, None, b"bytes", torch.ones(3)]
        payload, nbytes = transport.encode_results(results)
        assert nbytes >= 200_000 * 8
        out = transport.decode_results(0, payload)
        assert np.array_equal(out[0], results[0]) and out[1:4] == results[1:4]
        assert torch.equal(out[4], results[4])
        plain, _ = transport.encode_results([1, 2, 3])
        assert transport.decode_results(0, plain) == [1, 2, 3]
        del out
    finally:
        transport.cleanup()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_large_tensors_view_shared_memory_in_the_caller(no_leaks):
    n = 1 << 20  # 4 MiB each
    with BigTensors(["cpu", "cpu"], cfg=CfgNode({"n": n})) as runner:
        out = runner(range(6))
        for i, t in enumerate(sorted(out, key=lambda t: float(t[0]))):
            assert torch.equal(t, torch.full((n,), float(i)))
            # No copy in the caller: the tensor's memory is the worker's segment.
            assert mapping_of(t.data_ptr()).startswith("/dev/shm/ect-")
        small = runner([1.0])[0][:10].clone()
    assert torch.equal(small, torch.ones(10))
    # Results outlive the runner: the names are gone, the mappings stay until the tensors die.
    assert shm_segments() == []
    assert float(out[0].sum()) in {float(i * n) for i in range(6)}
    del out
    gc.collect()


def test_small_tensors_travel_in_band(no_leaks):
    with BigTensors(["cpu"], cfg=CfgNode({"n": 16})) as runner:
        t = runner([5])[0]
    assert torch.equal(t, torch.full((16,), 5.0))
    assert mapping_of(t.data_ptr()) == "" or not sys.platform.startswith("linux")


def test_segments_are_recycled_and_removed(no_leaks):
    n = 1 << 21  # 8 MiB each
    with Sum(["cpu", "cpu"], cfg=CfgNode({"n": n})) as runner:
        seen = set()
        for _ in range(3):
            assert runner(range(60)) == float(sum(range(60)))
            seen.update(shm_segments())
        # 180 results of 8 MiB, consumed and dropped: their segments went back to
        # the workers and were reused, so a few names per worker served them all.
        assert 0 < len(seen) <= 2 * 12, sorted(seen)
    assert shm_segments() == []


def test_tensor_returned_by_producer_is_not_shared_with_it(no_leaks):
    # The transport copies once in the worker, so a producer may reuse its buffer.
    with BigTensors(["cpu"], cfg=CfgNode({"n": 1 << 20})) as runner:
        first, second = runner([1, 2])
    assert float(first[0]) == 1.0 and float(second[0]) == 2.0
    assert first.data_ptr() != second.data_ptr()


def test_worker_pids_differ_from_caller(no_leaks):
    with BigTensors(2, cfg=CfgNode({"n": 1})) as runner:
        assert os.getpid() not in runner.worker_pids


@pytest.fixture
def two_torch_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("source", ["tensor", "numpy", "read-only bytes", "small"])
def test_copy_into_a_segment_writes_exactly_the_buffer(source, two_torch_threads):
    # Large buffers go through Tensor.copy_ on torch's threads, the others
    # through a plain copy: the segment's bytes must be the same either way,
    # at the offset asked, and nothing beside them touched.
    import mmap

    n = 3 << 20 if source != "small" else 1000
    data = torch.randint(0, 256, (n,), dtype=torch.uint8)
    if source == "tensor":
        buf = memoryview(data.numpy())
    elif source == "numpy":
        buf = memoryview(np.asarray(data.numpy(), dtype=np.uint8).copy())
    elif source == "read-only bytes":
        buf = memoryview(bytes(data.numpy()))
    else:
        buf = memoryview(data.numpy())
    mm = mmap.mmap(-1, n + 256)
    mm[:] = b"\xee" * (n + 256)
    TensorTransport().copy_into(mm, 128, buf)
    assert mm[128 : 128 + n] == bytes(data.numpy())
    assert mm[:128] == b"\xee" * 128 and mm[128 + n :] == b"\xee" * 128
    mm.close()  # no export of the mapping was left behind
