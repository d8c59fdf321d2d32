"""[`Pool`][easycore.common.parallel.Pool]: ``multiprocessing.Pool``'s API on easycore's engine.

The package's modules, one job each (as CPython keeps its pool's results and
workers apart from the pool class):

* ``pool``: the ``Pool`` class (its ``__init__`` reads as named steps:
  ``arguments``);
* ``results``: what its calls return (``AsyncResult``/``ApplyResult``,
  ``MapResult``, the ``imap`` iterators) and the sinks that fill them;
* ``reader``: ``imap``'s reader, a lazy input read ahead by a thread of its own;
* ``program``: what the workers run (the initializer, then job functions);
* ``jobs``: the seam for clients built on a pool (``PoolJobs``, ``pool_options``).

Every name that ``easycore.common.parallel.pool`` offered as one module is
still imported from here.
"""


from .._lazy import exports

# Each name is imported on first use (PEP 562): a worker unpickling its
# ``PoolProgram`` imports ``program`` alone, not the caller's pool and engine.
#: name -> the module of this package that defines it
_LAZY = {
    "PoolJobs": ".jobs", "pool_options": ".jobs", "Pool": ".pool", "PoolProgram": ".program",
    "ApplyResult": ".results", "AsyncResult": ".results", "IMapIterator": ".results",
    "IMapUnorderedIterator": ".results", "MapResult": ".results", "TimeoutError": ".results",
}

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from .jobs import PoolJobs, pool_options
    from .pool import Pool
    from .program import PoolProgram
    from .results import (
        ApplyResult,
        AsyncResult,
        IMapIterator,
        IMapUnorderedIterator,
        MapResult,
        TimeoutError,  # noqa: A004 - the stdlib pool's name
    )

__all__ = [
    "ApplyResult",
    "AsyncResult",
    "IMapIterator",
    "IMapUnorderedIterator",
    "MapResult",
    "Pool",
    "PoolJobs",
    "PoolProgram",
    "TimeoutError",
    "pool_options",
]

__getattr__, __dir__ = exports(__name__, _LAZY)
