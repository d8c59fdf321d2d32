"""Start/close cycles of services, runners and pools, interleaved (their
lifetimes overlap), under fork, spawn and forkserver, each moving arrays
through shared memory both ways (issue 20 item 9). Prints JSON: what failed,
and the shared-memory names of this process family still in /dev/shm.

``EASYCORE_SHM_CHURN_CYCLES`` sets the number of cycles (default 60; the
issue's stress run is 200).
"""

import json
import os
import sys
from collections import deque

import numpy as np

from easycore.common.parallel import OrderedRunner, Pool
from easycore.common.parallel.services import Service

METHODS = ("fork", "spawn", "forkserver")
ARRAY = np.arange(64 * 1024, dtype=np.float64)  # 512 KiB: over the in-band threshold


def twice(x):
    return x * 2


class Twice(OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data * 2

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


class Doubler:
    def twice(self, x):
        return x * 2

    def pid(self):
        return os.getpid()


def start(kind, method, pids):
    if kind == "pool":
        obj = Pool(1, start_method=method)
        pids.update(obj.worker_pids)
        return obj, lambda: obj.apply(twice, (ARRAY,))
    if kind == "runner":
        obj = Twice(1, start_method=method)
        pids.update(obj.worker_pids)
        return obj, lambda: obj([ARRAY])[0]
    obj = Service.start(Doubler, backend_options={"start_method": method})
    pids.add(obj.call("pid"))
    return obj, lambda: obj.call("twice", ARRAY)


def close(obj):
    if isinstance(obj, Pool):
        obj.terminate()
        obj.join()
    else:
        obj.close()


def ours(pids):
    names = []
    for entry in os.listdir("/dev/shm"):
        parts = entry.split("-")
        if len(parts) > 2 and parts[0] in ("ecp", "ecs", "ect"):
            try:
                if int(parts[1], 16) in pids:
                    names.append(entry)
            except ValueError:
                pass
    return sorted(names)


if __name__ == "__main__":
    cycles = int(os.environ.get("EASYCORE_SHM_CHURN_CYCLES", "60"))
    pids = {os.getpid()}
    live = deque()
    failures = []
    kinds = ("service", "runner", "pool")
    for n in range(cycles):
        kind, method = kinds[n % 3], METHODS[(n // 3) % 3]
        try:
            live.append((kind, method, *start(kind, method, pids)))
        except Exception as exc:  # noqa: BLE001 (any error is reported)
            failures.append(f"start {kind}/{method}: {type(exc).__name__}: {exc}")
        # Every live object still works: none of its segments was removed by
        # another object's start or close.
        for k, m, _obj, use in live:
            try:
                if not np.array_equal(use(), ARRAY * 2):
                    failures.append(f"{k}/{m}: wrong result")
            except Exception as exc:  # noqa: BLE001 (any error is reported)
                failures.append(f"{k}/{m} at cycle {n}: {type(exc).__name__}: {exc}")
        while len(live) > 2:
            k, m, obj, _use = live.popleft()
            try:
                close(obj)
            except Exception as exc:  # noqa: BLE001 (any error is reported)
                failures.append(f"close {k}/{m}: {type(exc).__name__}: {exc}")
    while live:
        close(live.popleft()[2])
    print(json.dumps({"failures": failures[:10], "left": ours(pids)}))
    sys.stdout.flush()
