"""Tutorial: multiprocessing parallel acceleration with easycore.common.parallel.

Runs examples 1 (sum of squares) and 4 (parameters through ``cfg``) of the
easycore parallel tutorial, each on a small list as documented and then on a
long input with a progress bar; then shows the two runner kinds side by side
and what a failing worker looks like. Examples 2 and 3 (torch models) live in
the easycore-torch tutorial.

    cd "$(mktemp -d)" && python /path/to/examples/20_parallel_tutorial.py

The runner classes are defined at module level and the runners are created
under ``if __name__ == "__main__":``, as they must be: with the ``spawn`` and
``forkserver`` start methods (the default on macOS, and on Linux from Python
3.14) every worker imports this file.
"""

from __future__ import annotations

import time

from easycore.common.config import CfgNode as CN
from easycore.common.parallel import OrderedRunner, UnorderedRunner, WorkerError


# --- Example 1: Sum of squares -----------------------------------------------------
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


# --- Example 4: Transfer outside parameters into Runner ----------------------------
class SlowConsumer(UnorderedRunner):
    """A consumer that takes longer per item than the workers: the bottleneck."""

    @staticmethod
    def producer_work(device, cfg, data):
        return data

    @staticmethod
    def consumer_work(cfg, data):
        time.sleep(0.005)


class PowerRunner(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data**cfg.exponent  # calculate power of data with outside parameter "exponent"

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum


# --- Beyond the tutorial -------------------------------------------------------------
class _Collect:
    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(0.02 if data % 4 == 0 else 0.001)  # every fourth item is slow
        return (data, device)

    @staticmethod
    def consumer_init(cfg):
        cfg.seen = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.seen.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.seen


class InOrder(_Collect, OrderedRunner):
    pass


class AsTheyFinish(_Collect, UnorderedRunner):
    pass


class Fragile(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        if data == 13:
            raise ValueError(f"unlucky item {data}")
        return data


def heading(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 66 - len(text)))


def main() -> None:
    heading("Example 1: sum of squares")
    runner = Runner(devices=3)  # 3 cpu workers; or devices=["cpu", "cpu", "cpu"]
    data_list = list(range(100))  # prepare data, it must be iterable
    result = runner(data_list)  # call the runner
    print(f"sum of squares of 0..99 = {result}   (expected {sum(x * x for x in data_list)})")

    # The same runner again (its workers are still up), on a long generator:
    # it is read lazily, in chunks, never further ahead than the queues hold.
    n = 300_000
    result = runner((x for x in range(n)), progress={"desc": "squares", "unit": " items"})
    print(f"sum of squares of 0..{n - 1:,} = {result:,}")
    runner.close()  # close the runner and shutdown all processes it opens.

    heading("Example 4: parameters through cfg")
    cfg = CN()
    cfg.exponent = 3
    power = PowerRunner(devices=3, cfg=cfg)  # transfer `cfg` into the runner
    result = power(list(range(100)))
    print(f"sum of cubes of 0..99 = {result}   (expected {sum(x**3 for x in range(100))})")
    result = power(range(100_000), progress=True)  # a bar with the length: len() is known
    print(f"sum of cubes of 0..99,999 = {result:,}")
    power.close()

    heading("OrderedRunner and UnorderedRunner")
    with InOrder(devices=["cpu", "cpu"]) as ordered, AsTheyFinish(devices=2) as unordered:
        print("ordered:        ", [item for item, _ in ordered(range(12))])
        print("as they finish: ", [item for item, _ in unordered(range(12))])

    heading("A failing worker never hangs the call")
    fragile = Fragile(devices=["cpu", "cpu"])
    try:
        fragile(range(100))
    except WorkerError as err:
        first, *_ = str(err).splitlines()
        print(f"caught WorkerError: {first}")
        print(f"device={err.device!r}, hook={err.hook!r}; the worker's traceback is in the message")
    print(f"runner closed after the error: {not fragile.is_activate}; activate() restarts it")
    fragile.activate()
    print(f"after activate(): {fragile(range(10)) is None and 'usable again'}")
    fragile.close()

    heading("Why is it slow? insights=True")
    with SlowConsumer(devices=2, insights=True) as slow:
        slow(range(200))
        insights = slow.insights()  # the last call's table, ending with a verdict
    assert insights is not None  # None only without insights=True, or before a call
    print(insights)
    print(f"bottleneck: {insights.verdict().stage}")


if __name__ == "__main__":
    main()
