"""Work spread over worker processes (or threads, or Ray actors) that never hangs.

Two ways in, on one engine:

* **runners**: subclass [`UnorderedRunner`][easycore.common.parallel.UnorderedRunner]
  or [`OrderedRunner`][easycore.common.parallel.OrderedRunner] and override
  the static hooks: ``producer_*`` run in one worker per device,
  ``consumer_*`` in the calling thread;
* **a pool**: [`Pool`][easycore.common.parallel.Pool] has the API of
  ``multiprocessing.Pool`` (change the import), plus per-task timeouts,
  workers replaced when they die, ``submit``, ``broadcast`` and per-worker
  contexts; [`Executor`][easycore.common.parallel.Executor] is
  ``concurrent.futures.ProcessPoolExecutor``'s API on the same engine.

Errors name the device, worker and item at fault
([`WorkerError`][easycore.common.parallel.WorkerError],
[`WorkerDiedError`][easycore.common.parallel.WorkerDiedError],
[`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError]); NumPy
arrays travel through shared memory both ways; each worker's thread pools are
limited to its share of the CPUs (``cpu_threads``). The seams (device policy,
back-ends, wire protocol, transports) are
[`extending`][easycore.common.parallel.extending]'s, described on the docs'
"Extending" page.

Examples:
    ```python
    from easycore.common.parallel import Pool, UnorderedRunner

    class Runner(UnorderedRunner):
        @staticmethod
        def producer_work(device, cfg, data):  # in a worker process
            return data * data

        @staticmethod
        def consumer_init(cfg):                # in the calling thread
            cfg.sum = 0

        @staticmethod
        def consumer_work(cfg, data):
            cfg.sum += data

        @staticmethod
        def consumer_end(cfg):
            return cfg.sum

    if __name__ == "__main__":
        with Runner(devices=3) as runner:
            print(runner(range(100)))                    # 328350
        with Pool(3) as pool:
            print(pool.map(lambda x: x * x, range(5)))  # [0, 1, 4, 9, 16]
    ```
"""


from ._lazy import exports
from ._version import __version__

# Every name below is imported on first use (PEP 562): a script that needs only
# ``Pool`` does not pay for runners, insights, queues or services, and a
# spawned worker that imports this package (to unpickle its program) loads
# only what its program names. ``tests/parallel/layers/test_import_cost.py`` holds
# what ``import easycore.common.parallel`` may load.
#: public name -> the module that defines it (relative to this package)
_LAZY = {
    "Pool": ".pool", "AsyncResult": ".pool", "MapResult": ".pool", "IMapIterator": ".pool",
    "BackgroundTask": ".background", "BackgroundStats": ".background",
    "JobQueue": ".jobqueue",
    "Queue": ".queue", "QueueClosedError": ".queue", "QueuePeerDiedError": ".queue",
    "SharedList": ".shared_list",
    "BaseRunner": ".runner", "UnorderedRunner": ".runner", "OrderedRunner": ".runner",
    "Insights": ".insights", "WorkerInsights": ".insights", "Verdict": ".insights",
    "WorkerContext": ".worker.executor",
    "ParallelError": ".errors", "RunnerClosedError": ".errors", "WorkerError": ".errors",
    "WorkerDiedError": ".errors", "NodesLostError": ".errors", "TaskTimeoutError": ".errors",
    "RemoteTraceback": ".pool_errors",
    "ResultEncodingError": ".pool_errors", "ErrorReport": ".errors",
    # The seams' base classes are `extending`'s (docs/extending.md lists them):
    # pages before issue 35 taught extensions to import them from here, and
    # they still do, but they are not in `__all__`.
    "Backend": ".backends.base", "BackendSpec": ".backends.base",
    "ChannelBroken": ".backends.base", "WorkerExited": ".backends.base",
    "DevicePolicy": ".backends.policy", "ProcessBackend": ".backends.process",
    "PickleTransport": ".transport.interface", "Transport": ".transport.interface",
    "SharedMemoryTransport": ".transport.shared_memory",
    "WorkerProgram": ".worker.executor",
    "Executor": ".futures",
}

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and IDEs see: the names, eagerly
    from .backends.base import Backend as Backend
    from .backends.base import BackendSpec as BackendSpec
    from .backends.base import ChannelBroken as ChannelBroken
    from .backends.base import WorkerExited as WorkerExited
    from .backends.policy import DevicePolicy as DevicePolicy
    from .backends.process import ProcessBackend as ProcessBackend
    from .background import BackgroundStats, BackgroundTask
    from .errors import (
        ErrorReport,
        NodesLostError,
        ParallelError,
        RunnerClosedError,
        TaskTimeoutError,
        WorkerDiedError,
        WorkerError,
    )
    from .futures import Executor
    from .insights import Insights, Verdict, WorkerInsights
    from .jobqueue import JobQueue
    from .pool import AsyncResult, IMapIterator, MapResult, Pool
    from .pool_errors import RemoteTraceback, ResultEncodingError
    from .queue import Queue, QueueClosedError, QueuePeerDiedError
    from .runner import BaseRunner, OrderedRunner, UnorderedRunner
    from .shared_list import SharedList
    from .transport.interface import PickleTransport as PickleTransport
    from .transport.interface import Transport as Transport
    from .transport.shared_memory import SharedMemoryTransport as SharedMemoryTransport
    from .worker.executor import WorkerContext
    from .worker.executor import WorkerProgram as WorkerProgram

__all__ = [
    "Pool",
    "Executor",
    "AsyncResult",
    "MapResult",
    "IMapIterator",
    "BackgroundTask",
    "BackgroundStats",
    "JobQueue",
    "Queue",
    "QueueClosedError",
    "QueuePeerDiedError",
    "SharedList",
    "BaseRunner",
    "UnorderedRunner",
    "OrderedRunner",
    "Insights",
    "WorkerInsights",
    "Verdict",
    "WorkerContext",
    "ParallelError",
    "RunnerClosedError",
    "WorkerError",
    "WorkerDiedError",
    "NodesLostError",
    "TaskTimeoutError",
    "RemoteTraceback",
    "ResultEncodingError",
    "ErrorReport",
    "__version__",
]

__getattr__, __dir__ = exports(__name__, _LAZY)
