"""CPython's own Pool tests (v3.11.7, vendored) run against easycore's pools.

The test classes come unchanged from ``_cpython_pool_v3_11_7.py``; this module
is the plumbing CPython's ``install_tests_in_module_dict`` does for the stdlib:
one concrete ``unittest.TestCase`` per test class and pool kind, where a kind
says which Pool ``self.Pool`` builds. Kinds: easycore's process Pool under each
start method (CPython's ``processes``), its thread back-end (CPython's
``threads``), and easycore-torch's Pool. Tests that read the stdlib pool's
private attributes are skipped, with the reason (also listed in README.md).
"""

from __future__ import annotations

import functools
import multiprocessing
import unittest

import pytest
from _cpython_pool_v3_11_7 import _TestPool, _TestPoolWorkerErrors, _TestPoolWorkerLifetime
from markers import needs

from easycore.common.parallel import Pool

#: test name -> why it is skipped (it reads or calls the stdlib pool's privates)
PRIVATE = {
    "test_make_pool": "reads Pool._pool, the stdlib's list of worker Process objects "
                      "(the ValueError part is checked in test_pool_api.py)",
    "test_pool_worker_lifetime": "reads Pool._pool and calls Pool._repopulate_pool(), "
                                 "the stdlib's worker list and refill (easycore's "
                                 "maxtasksperchild is checked in test_pool_lifecycle.py)",
}

#: kind -> {test name: why it is skipped for that kind (easycore differs on purpose)}
DIFFERS = {
    "Torch": {
        "test_map_no_failfast": (
            "easycore's map fails fast: an item not sent yet when another fails is not "
            "run (the stdlib runs every task). A torch pool's worker sets torch up at its "
            "start, so it takes its share of a map once it is ready; the first item can "
            "fail before the second worker is, and the second item is then not run"),
    },
}

METHODS = [m for m in ("fork", "forkserver", "spawn")
           if m in multiprocessing.get_all_start_methods()]


def _process_pool(start_method, *args, **kwargs):
    return Pool(*args, start_method=start_method, **kwargs)


def _thread_pool(*args, **kwargs):
    return Pool(*args, backend="thread", **kwargs)


def _torch_pool(*args, **kwargs):
    from easycore.torch.parallel import Pool as TorchPool

    if "fork" in METHODS:
        # fork (fast to start), with one torch thread a worker: easycore-torch
        # refuses fork with more (OpenMP does not survive fork)
        return TorchPool(*args, start_method="fork", cpu_threads=1, **kwargs)
    return TorchPool(*args, **kwargs)


#: kind -> (CPython's TYPE, what self.Pool builds, pytest marks)
# Under fork, CPython's tests start pools while a class's pool runs (CPython 3.13's
# own suite ignores the warning about forking then: ignore_fork_in_thread_...).
KINDS = {f"Process{m.capitalize()}": ("processes", functools.partial(_process_pool, m),
                                      [pytest.mark.forks_with_threads] if m == "fork" else [])
         for m in METHODS}
KINDS["Thread"] = ("threads", _thread_pool, [])
KINDS["Torch"] = ("processes", _torch_pool, [needs("torch", "easycore.torch")] + (
    [pytest.mark.forks_with_threads] if "fork" in METHODS else []))


def _install() -> None:
    for base in (_TestPool, _TestPoolWorkerErrors, _TestPoolWorkerLifetime):
        for kind, (type_, factory, marks) in KINDS.items():
            if type_ not in base.ALLOWED_TYPES:
                continue
            name = f"Test{kind}{base.__name__[len('_Test'):]}"
            attrs = {"TYPE": type_, "Pool": staticmethod(factory), "__module__": __name__}
            for test, reason in PRIVATE.items():
                if hasattr(base, test):
                    attrs[test] = unittest.skip(f"stdlib privates: {reason}")(getattr(base, test))
            for test, reason in DIFFERS.get(kind, {}).items():
                if hasattr(base, test):
                    attrs[test] = unittest.skip(reason)(getattr(base, test))
            cls = type(name, (base, unittest.TestCase), attrs)
            for mark in marks:
                cls = mark(cls)
            globals()[name] = cls


_install()

pytestmark = pytest.mark.timeout(300)
