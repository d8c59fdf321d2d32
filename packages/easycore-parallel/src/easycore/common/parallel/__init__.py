"""Producer/consumer runners over worker processes that never hang.

Write a runner by subclassing :class:`UnorderedRunner` or :class:`OrderedRunner`
and overriding six static hooks::

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

    with Runner(devices=3) as runner:
        print(runner(range(100)))

Modules, one job each:

* :mod:`.runner`: the public classes, their hooks, lifecycle and seams;
* :mod:`.pipeline`: one call (feeder thread, credits, ordering, consumer hooks);
* :mod:`.chunking`: adaptive chunk sizes (hooks still see one item at a time);
* :mod:`.backend`: the back-end interface; :mod:`.process_backend`: processes;
  :mod:`.ray_backend`: Ray actors (``backend="ray"``; imported, with Ray, only
  when a runner uses it);
* :mod:`.worker`: the producer contract (:class:`~.worker.ProducerWorker`) and
  the worker process loop; :mod:`.lifeline`: workers die with their parent;
* :mod:`.transport`: results through shared memory (NumPy arrays zero-copy);
* :mod:`.progress`: the optional tqdm bar; :mod:`.errors`: what is raised.

Seams for the torch runners (``easycore.torch.parallel``), all overridable in
a subclass of these runners:

* ``BaseRunner.get_mp_context(self) -> BaseContext``: e.g.
  ``torch.multiprocessing.get_context("spawn")`` when any device is CUDA;
* ``BaseRunner.validate_device(cls, device: str) -> str`` (classmethod),
  called by ``normalize_devices(cls, devices) -> list[str]``;
* ``BaseRunner.check_available(cls, device: str) -> None`` (classmethod),
  called by the constructor for each device with the process back-end
  (e.g. "this machine has no cuda:7");
* ``BaseRunner.setup_worker(cls, device: str) -> None`` (classmethod), run in
  the worker before ``producer_init`` (e.g. ``torch.cuda.set_device``);
* ``BaseRunner.transport_class`` / ``make_transport(self) -> Transport``:
  ``Transport.encode(results) -> (payload, nbytes)`` in the worker,
  ``Transport.decode(payload) -> list`` in the caller (plus ``prepare``,
  ``bind_worker``, ``discard``, ``cleanup``, and ``feedback(worker)`` /
  ``on_feedback(data)``, a channel back to the worker on its next chunk).

Back-ends: ``BaseRunner.backends`` maps ``backend=`` names to
:class:`~.backend.Backend` classes (or ``"module:Class"`` strings imported on
first use); the runner calls ``Backend.from_runner(runner, cfg, **options)``
with the constructor's extra keyword arguments. ``backend="ray"``
(:class:`~.ray_backend.RayBackend`, ``pip install 'easycore-parallel[ray]'``)
takes ``address`` (for ``ray.init``; None: a running local Ray or a new one,
``"auto"`` / ``"host:port"`` / ``"ray://host:port"``: a cluster) and
``ray_init_kwargs`` (any other ``ray.init`` arguments), and makes one actor
per device around :class:`~.worker.ProducerWorker`; the pipeline (chunking,
ordering, consumer hooks, errors) is shared unchanged.
"""

from ._version import __version__
from .backend import Backend, BackendSpec, ChannelBroken, WorkerExited
from .background import BackgroundStats, BackgroundTask
from .errors import (
    ErrorReport,
    ParallelError,
    RemoteTraceback,
    RunnerClosedError,
    TaskTimeoutError,
    WorkerDiedError,
    WorkerError,
)
from .jobqueue import JobQueue
from .policy import DevicePolicy
from .pool import AsyncResult, IMapIterator, MapResult, Pool
from .process_backend import ProcessBackend
from .runner import BaseRunner, OrderedRunner, UnorderedRunner
from .transport import PickleTransport, SharedMemoryTransport, Transport
from .worker import Executor, ProducerWorker, WorkerContext, WorkerProgram

__all__ = [
    "Pool",
    "AsyncResult",
    "MapResult",
    "IMapIterator",
    "BackgroundTask",
    "BackgroundStats",
    "JobQueue",
    "BaseRunner",
    "UnorderedRunner",
    "OrderedRunner",
    "WorkerContext",
    "ParallelError",
    "RunnerClosedError",
    "WorkerError",
    "WorkerDiedError",
    "TaskTimeoutError",
    "RemoteTraceback",
    "ErrorReport",
    "Backend",
    "BackendSpec",
    "ChannelBroken",
    "WorkerExited",
    "DevicePolicy",
    "ProcessBackend",
    "Executor",
    "ProducerWorker",
    "WorkerProgram",
    "Transport",
    "PickleTransport",
    "SharedMemoryTransport",
    "__version__",
]
