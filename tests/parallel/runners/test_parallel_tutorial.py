"""Tutorial 1.3 "Multiprocessing parallel acceleration tools", example by example.

Examples 2 and 3 need torch models (and example 3 ``easycore.torch.parallel``):
easycore-torch tests them.
"""

from __future__ import annotations

from easycore.common.config import CfgNode
from easycore.common.config import CfgNode as CN
from easycore.common.parallel import OrderedRunner, UnorderedRunner


# --- Example 1: Sum of squares ------------------------------------------------
class Runner(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data * data  # calculate square of data

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0  # init a sum variable with 0, you can use cfg to transfer data

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data  # add the square to the sum variable

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum  # return the result you need


def test_example_1_sum_of_squares(no_leaks):
    runner = Runner(devices=3)  # if you specify `device with a integer`, it will use cpus.

    data_list = list(range(100))  # prepare data, it must be iterable
    result = runner(data_list)  # call the runner
    assert result == sum(data * data for data in data_list) == 328350

    runner.close()  # close the runner and shutdown all processes it opens.


def test_example_1_with_a_list_of_devices(no_leaks):
    runner = Runner(devices=["cpu", "cpu", "cpu"])
    assert runner(list(range(100))) == 328350
    runner.close()


# --- Example 4: Transfer outside parameters into Runner -------------------------
class PowerRunner(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data**cfg.exponent  # calculate power of data with outside parameter "exponent".

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum


def test_example_4_outside_parameters(no_leaks):
    # set parameters outside.
    cfg = CN()
    cfg.exponent = 3

    runner = PowerRunner(devices=3, cfg=cfg)  # transfer `cfg` into the runner

    data_list = list(range(100))
    result = runner(data_list)
    assert result == sum(d**3 for d in data_list) == 24502500

    runner.close()


def test_example_4_a_plain_dict_cfg_is_converted(no_leaks):
    with PowerRunner(devices=2, cfg={"exponent": 2}) as runner:
        assert runner(range(100)) == 328350


# Examples 2 and 3 (a torch model on devices) are tested with easycore-torch:
# tests/torch/test_torch_tutorial.py.


class Plain(OrderedRunner):
    pass


def test_default_hooks_pass_data_through_and_return_none(no_leaks):
    with Plain(2, cfg=CfgNode()) as runner:
        assert runner(range(10)) is None
