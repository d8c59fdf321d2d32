"""Twenty 8 MB inputs and results through a runner, meant to run with a small /dev/shm.

The test runs it in a private mount namespace whose /dev/shm is a 32 MB tmpfs
(Docker gives containers 64 MB). argv: start method, then "small" or "full"
(/dev/shm filled up before the runner is built, which has a large cfg array
and a task timeout). Prints one JSON line.
"""

import json
import os
import sys
import warnings

import numpy as np

from easycore.common.parallel import OrderedRunner

N = 1 << 20  # float64: 8 MiB per array
ITEMS = 20


class Big(OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        i, arr = data
        intact = arr.shape == (N,) and bool((arr == i).all())
        out = np.full(N, float(i))
        out[1] = 1.0 if intact else -1.0  # the worker's verdict on its input
        return out

    @staticmethod
    def consumer_init(cfg):
        cfg.kept = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.kept.append(data)  # all held at once: more than /dev/shm can take

    @staticmethod
    def consumer_end(cfg):
        return cfg.kept


def _check(out, offset):
    return len(out) == ITEMS and all(
        a.shape == (N,) and a[0] == a[-1] == float(i + offset) and a[1] == 1.0
        for i, a in enumerate(out)
    )


if __name__ == "__main__":
    method, mode = sys.argv[1], sys.argv[2]
    st = os.statvfs("/dev/shm")
    report = {"shm_bytes": st.f_blocks * st.f_frsize}
    options = {}
    if mode == "full":
        with open("/dev/shm/filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"x" * (1 << 20))
            except OSError:
                pass  # ENOSPC: not one page left
        options = {"cfg": {"big": np.ones(N)}, "task_timeout": 60.0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            runner = Big(2, start_method=method, **options)
        except Exception as exc:  # noqa: BLE001 (any error is reported)
            print(json.dumps({**report, "error": f"{type(exc).__name__}: {exc}"}))
            sys.exit(0)
        pids = runner.worker_pids
        try:
            inputs = [(i, np.full(N, float(i))) for i in range(ITEMS)]
            report["first"] = _check(runner(inputs), 0)
            gen = ((i + 100, np.full(N, float(i + 100))) for i in range(ITEMS))
            report["second"] = _check(runner(gen), 100)
            report["same_workers"] = runner.worker_pids == pids
        except Exception as exc:  # noqa: BLE001 (any error is reported)
            report["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            runner.close()
    report["warnings"] = [
        str(w.message) for w in caught
        if issubclass(w.category, ResourceWarning) and "/dev/shm" in str(w.message)
    ]
    print(json.dumps(report))
