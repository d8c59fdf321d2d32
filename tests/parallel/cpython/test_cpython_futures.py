"""CPython's own ``ProcessPoolExecutor`` tests (v3.10.13, vendored) run against easycore's Executor.

The test classes come unchanged from ``_cpython_futures_v3_10_13.py``; this
module is the plumbing CPython's ``create_executor_tests`` does for the stdlib:
one concrete ``unittest.TestCase`` per test class and start method, where the
executor is ``easycore.common.parallel.Executor``. Skipped, each with its reason
(README.md lists them): tests that read the stdlib executor's private
attributes, and tests of behaviours where easycore's promise is better (each
such difference is tested on our side, in ``tests/parallel/pool/test_futures.py``).
"""

from __future__ import annotations

import multiprocessing
import unittest

import _cpython_futures_v3_10_13 as cpython
import pytest

from easycore.common.parallel import Executor

#: test name -> why it is skipped: it reads the stdlib executor's privates
PRIVATE = {
    "test_processes_terminate": "reads executor._processes, the stdlib's worker "
                                "Process objects by pid",
    "test_context_manager_shutdown": "reads executor._processes (the result of map in a "
                                     "with block is checked in test_futures.py)",
    "test_del_shutdown": "reads executor._executor_manager_thread, _processes and "
                         "_call_queue (test_futures.py: a dropped executor finishes its work)",
    "test_shutdown_no_wait": "reads executor._executor_manager_thread, _processes and "
                             "_call_queue (test_futures.py: shutdown(wait=False))",
    "test_saturation": "reads executor._processes and _max_workers (easycore starts every "
                       "worker at once: test_futures.py checks max_workers and worker_pids)",
    "test_idle_process_reuse_one": "reads executor._processes: the stdlib starts workers on "
                                   "demand, easycore starts them all at once",
    "test_idle_process_reuse_multiple": "reads executor._processes: the stdlib starts workers "
                                        "on demand, easycore starts them all at once",
    "test_shutdown_deadlock_pickle": "reads executor._executor_manager_thread",
}

#: test name -> where easycore's promise is better than the stdlib's (what it does instead
#: is tested in test_futures.py)
BETTER = {
    # FailingInitializerMixin (it also reads executor._broken)
    "test_initializer@Failing": "the stdlib's executor starts and breaks for good when an "
                                "initializer raises; easycore's constructor raises the "
                                "WorkerError naming it, a BrokenProcessPool too (the test "
                                "also reads executor._broken)",
    "test_killed_child": "a killed worker breaks the stdlib's executor for good (every "
                         "pending future, every later submit); easycore fails only the task "
                         "it ran (a WorkerDiedError that is a BrokenProcessPool) and "
                         "replaces it (it also reads executor._processes)",
    "test_exit_during_func_exec_on_worker": "SystemExit raised by a task: the stdlib "
                                            "re-raises it in the caller (which would end "
                                            "the caller's thread); easycore raises the "
                                            "WorkerError that reports it",
    "test_exit_during_result_pickle_on_worker": "SystemExit raised while pickling a result: "
                                                "the stdlib re-raises it in the caller; "
                                                "easycore raises the WorkerError that "
                                                "reports it",
    "test_error_at_task_unpickle": "an argument that does not unpickle in the worker breaks "
                                   "the stdlib's executor (BrokenProcessPool); easycore fails "
                                   "that task alone with a WorkerError naming the "
                                   "UnpicklingError, and the worker goes on",
    "test_exit_at_task_unpickle": "SystemExit while a worker unpickles an argument: the "
                                  "stdlib's worker exits and the executor breaks; easycore's "
                                  "worker reports it (WorkerError) and goes on",
    "test_error_during_result_unpickle_in_result_handler": "a result that does not unpickle "
                                  "in the caller breaks the stdlib's executor; easycore fails "
                                  "that task alone (a ParallelError caused by the "
                                  "UnpicklingError)",
    "test_exit_during_result_unpickle_in_result_handler": "SystemExit while the caller "
                                  "unpickles a result breaks the stdlib's executor; easycore "
                                  "fails that task alone (a ParallelError caused by it)",
    "test_hang_gh83386": "a script that names multiprocessing without importing it; CPython "
                         "runs it for ThreadPoolExecutor only (ctx None) and skips it for "
                         "ProcessPoolExecutor, which hangs there; easycore's does not hang "
                         "(test_futures.py: shutdown(wait=False) at exit)",
}

METHODS = [m for m in ("fork", "forkserver", "spawn")
           if m in multiprocessing.get_all_start_methods()]

#: CPython's mixin per start method, and its test classes for process executors
MIXINS = {"fork": cpython.ProcessPoolForkMixin, "forkserver": cpython.ProcessPoolForkserverMixin,
          "spawn": cpython.ProcessPoolSpawnMixin}
TESTS = [cpython.InitializerMixin, cpython.FailingInitializerMixin,
         cpython.ProcessPoolShutdownTest, cpython.WaitTests, cpython.AsCompletedTests,
         cpython.ProcessPoolExecutorTest, cpython.ExecutorDeadlockTest]


def _skips(base: type) -> dict:
    attrs = {}
    for test, reason in PRIVATE.items():
        if hasattr(base, test):
            attrs[test] = unittest.skip(f"stdlib privates: {reason}")(getattr(base, test))
    for key, reason in BETTER.items():
        test, _, only = key.partition("@")
        if hasattr(base, test) and only in base.__name__:
            attrs[test] = unittest.skip(f"easycore's promise: {reason}")(getattr(base, test))
    return attrs


def _install() -> None:
    for method in METHODS:
        mixin = MIXINS[method]
        for base in TESTS:
            name = f"Test{method.capitalize()}{base.__name__.replace('Mixin', '')}"
            attrs = {"executor_type": Executor, "__module__": __name__, **_skips(base)}
            cls = type(name, (base, mixin, cpython.BaseTestCase), attrs)
            if method == "fork":  # as CPython 3.13's own suite, which ignores the warning
                cls = pytest.mark.forks_with_threads(cls)
            globals()[name] = cls


_install()

pytestmark = pytest.mark.timeout(600)
