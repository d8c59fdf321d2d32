"""The tutorial's network predictor (examples 2 and 3) on easycore.torch.parallel, on two CPUs.

Every result is compared with the same model run in the test's process.
"""

from __future__ import annotations

import pytest
import torch
from _torch_helpers import (
    BatchPredictor,
    Predictor,
    UnorderedBatchPredictor,
    WeightsPredictor,
    batch_generator,
    reference_outputs,
)
from _torch_util import EXAMPLES, run_python
from network import Net
from torch.utils.data import DataLoader

import easycore.common.parallel as common_parallel
from easycore.common.config import CfgNode
from easycore.torch.parallel import OrderedRunner, UnorderedRunner

pytestmark = pytest.mark.timeout(120)

DATA = list(range(100))


@pytest.fixture(scope="module")
def expected():
    """The model run here on one (100, 1) batch. Workers run other shapes (one
    item, or batches of 8), for which a many-core CPU may pick other kernels:
    results are compared with a tolerance, not bit for bit."""
    return reference_outputs(torch.tensor(DATA, dtype=torch.float32).view(-1, 1))


def same(actual, wanted):
    torch.testing.assert_close(actual, wanted, rtol=1e-5, atol=1e-6)
    return True


def test_example2_one_item_at_a_time(no_leaks, expected):
    predictor = Predictor(devices=["cpu", "cpu"])  # init a parallel predictor
    result = predictor(DATA)  # predict
    predictor.close()  # close the predictor when you no longer need it.
    assert result.shape == (100, 3)
    assert same(result, expected)  # same model, same order, same numbers


def test_example3_batches_from_a_generator(no_leaks, expected):
    with BatchPredictor(devices=["cpu", "cpu"]) as predictor:
        result = predictor(batch_generator(DATA, batch_size=10))
    assert result.shape == (100, 3)
    assert same(result, expected)


# With workers, the DataLoader forks them anew on each pass (torch's own fork, not
# easycore's): the index queues' feeder threads of the pass before may still be
# ending then, which the fork check (tests/fork_warnings.py) would count.
@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.forks_with_threads)])
def test_example3_batches_from_a_dataloader(no_leaks, expected, num_workers):
    # A DataLoader with workers of its own: they are forked by the caller and
    # hand batches over through torch's shared memory; the runner reads it lazily.
    loader = DataLoader(
        torch.tensor(DATA, dtype=torch.float32), batch_size=16, num_workers=num_workers
    )
    with BatchPredictor(devices=["cpu", "cpu"]) as predictor:
        result = predictor(loader)
        assert same(result, expected)
        # Reusable: a second pass over the same DataLoader, same workers.
        assert same(predictor(loader), expected)


def test_weights_sent_through_cfg(no_leaks):
    with torch.random.fork_rng(devices=[]):  # this process's random state is left alone
        torch.manual_seed(123)
        model = Net()
    cfg = CfgNode()
    cfg.weights = list(model.state_dict().items())  # config keys must be identifiers
    with torch.no_grad():
        expected = model(torch.tensor(DATA, dtype=torch.float32).view(-1, 1))
    with WeightsPredictor(["cpu", "cpu"], cfg=cfg) as predictor:
        assert torch.allclose(predictor(batch_generator(DATA, 7)), expected)


def test_ordered_keeps_input_order_unordered_loses_none(no_leaks, expected):
    with UnorderedBatchPredictor(["cpu", "cpu"]) as predictor:
        pairs = predictor(batch_generator(DATA, batch_size=5))
    inputs = torch.cat([x for x, _ in pairs])
    outputs = torch.cat([y for _, y in pairs])
    assert sorted(inputs.view(-1).tolist()) == [float(d) for d in DATA]  # all, once each
    order = inputs.view(-1).argsort()
    assert same(outputs[order], expected)  # each output belongs to its input
    with BatchPredictor(["cpu", "cpu"]) as predictor:
        assert same(predictor(batch_generator(DATA, batch_size=5)), expected)


def test_same_api_as_easycore_common_parallel():
    assert issubclass(OrderedRunner, common_parallel.OrderedRunner)
    assert issubclass(UnorderedRunner, common_parallel.UnorderedRunner)
    for name in ("producer_init", "producer_work", "producer_end", "consumer_init",
                 "consumer_work", "consumer_end", "activate", "close", "is_activate"):
        assert hasattr(OrderedRunner, name)
    # The base runner receives data unordered, as documented.
    from easycore.torch.parallel import BaseRunner

    assert BaseRunner.ordered is False and OrderedRunner.ordered is True


def test_queue_scale_and_cfg_positional_as_documented(no_leaks, expected):
    cfg = CfgNode({"seed": 0})
    with Predictor(["cpu"], cfg, 1.0) as predictor:
        assert same(predictor(range(20)), expected[:20])
        assert predictor.is_activate
    assert not predictor.is_activate
    predictor.activate()  # restart all processes after close
    try:
        assert same(predictor(range(5)), expected[:5])
    finally:
        predictor.close()


def test_integer_devices_means_cpus(no_leaks, expected):
    with Predictor(devices=2) as predictor:
        assert predictor.devices == ["cpu", "cpu"]
        assert same(predictor(DATA), expected)


def test_the_example_script_runs(tmp_path):
    # As scripts/demo runs it: PYTHONPATH=examples, cwd a scratch directory.
    done = run_python(str(EXAMPLES / "25_torch_predictor.py"), cwd=tmp_path, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1. one item at a time:       (100, 3)" in done.stdout
    assert "3. batches from a DataLoader: (100, 3)" in done.stdout
    assert "outputs equal the model run in this process" in done.stdout
