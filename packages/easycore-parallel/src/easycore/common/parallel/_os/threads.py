"""A thread budget per worker: N workers must not each use every core.

NumPy's BLAS, OpenMP and torch start one thread per core in *every* process
by default. With 8 workers on 16 cores that is 128 busy threads fighting for
16 cores: on a 16-core machine with one GPU, two workers' CPU preprocessing
ran 30 times slower than at one thread each. So each worker limits its thread
pools to ``max(1, cpu_count // workers)`` unless told otherwise, where
``cpu_count`` is the number of CPUs this process may run on (its affinity
mask, which containers and ``taskset`` set), not the machine's.

How, without importing anything heavy:

* environment variables (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
  ``MKL_NUM_THREADS`` ...) set in the worker before anything else is
  unpickled or imported there: libraries loaded afterwards read them;
* libraries already loaded (a forked worker inherits NumPy's): through
  ``threadpoolctl``. Importing it and scanning the process's libraries cost
  a forked worker ~10 ms before its first item; the caller does both once
  ([`prepare_fork`][easycore.common.parallel._os.threads.prepare_fork]) and its
  workers inherit the result, setting only the pools not at the budget yet
  (an OpenBLAS pool, whose threads a fork ended, without starting them again:
  see ``_shrink_openblas_at_rest``);
* torch's intra-op pool: ``torch.set_num_threads`` when torch is already
  imported, else ``OMP_NUM_THREADS`` covers it.
"""

from __future__ import annotations

import contextlib
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, FrozenSet, List, Optional, Tuple

__all__ = [
    "AUTO",
    "ThreadsOption",
    "available_cpus",
    "budget",
    "limit_threads",
    "prepare_fork",
    "restarts_openblas_in_children",
    "shrink_loaded",
]

#: the default of ``cpu_threads``: ``max(1, available_cpus() // workers)``
AUTO = "auto"
#: what ``cpu_threads=`` accepts: ``"auto"``, a positive int, or None (leave alone)
ThreadsOption = int | str | None

_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def available_cpus() -> int:
    """The number of CPUs this process may run on.

    Returns:
        int: the affinity mask's size where the platform has one, else ``os.cpu_count()``.
    """
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return os.cpu_count() or 1


def budget(option: ThreadsOption, workers: int) -> Optional[int]:
    """Resolve a ``cpu_threads`` option into a thread count (or None).

    Args:
        option (int or str or None): ``"auto"``, a positive int, or None.
        workers (int): how many workers share this machine's CPUs.

    Returns:
        int or None: threads per worker; None means "leave the libraries alone".

    Raises:
        ValueError: an int below 1 or an unknown string.
    """
    if option is None:
        return None
    if option == AUTO:
        return max(1, available_cpus() // max(1, workers))
    if isinstance(option, bool) or not isinstance(option, int) or option < 1:
        raise ValueError(f"cpu_threads must be 'auto', None or an int >= 1, got {option!r}")
    return option


def set_thread_env(n: int) -> None:
    """Set the thread environment variables (for libraries loaded after this).

    Args:
        n (int): threads.
    """
    for key in _ENV:
        os.environ[key] = str(n)


def limit_threads(n: int) -> None:
    """Limit this process's thread pools to ``n`` threads, loaded ones included.

    Args:
        n (int): threads.
    """
    set_thread_env(n)
    if "numpy" in sys.modules or "torch" in sys.modules:
        _limit_loaded(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        # Broad on purpose: whatever torch raises here, the budget is advice.
        with contextlib.suppress(Exception):
            torch.set_num_threads(n)


# The caller's scan of its loaded thread pools, inherited by the workers it
# forks: (the modules imported when it scanned, threadpoolctl's controller).
# A native library comes with an extension module: while no new one is
# imported (pure-Python modules, e.g. multiprocessing's own, do not count),
# the scan still holds, in the caller and in its workers.
_scanned: Optional[Tuple[FrozenSet[str], Any]] = None


def _still_valid(scanned: Optional[Tuple[FrozenSet[str], Any]]) -> bool:
    if scanned is None:
        return False
    names = scanned[0]
    if len(sys.modules) == len(names):
        return True
    from importlib.machinery import EXTENSION_SUFFIXES  # (with NumPy or torch only)

    native = tuple(EXTENSION_SUFFIXES)
    for name in sys.modules.keys() - names:
        path = getattr(sys.modules.get(name), "__file__", None) or ""
        if path.endswith(native):
            return False
    return True


def prepare_fork() -> None:
    """In the caller, before forking workers: scan its thread pools once for them.

    A no-op unless NumPy or torch is imported (nothing to limit then), and
    while no extension module was imported since the last scan.
    """
    global _scanned
    if "numpy" not in sys.modules and "torch" not in sys.modules:
        return
    if _still_valid(_scanned):
        assert _scanned is not None
        if len(_scanned[0]) != len(sys.modules):
            # Still valid with what was imported since: remember it, so the
            # next check here, and the workers' own, is a length comparison.
            _scanned = (frozenset(sys.modules), _scanned[1])
        return
    try:
        from threadpoolctl import ThreadpoolController

        controller = ThreadpoolController()
    except Exception:  # noqa: BLE001 (not importable, or a runtime that breaks the scan)
        _scanned = None
        return
    _scanned = (frozenset(sys.modules), controller)


def _shrink_openblas_at_rest(lib: Any, n: int) -> bool:
    """Shrink an OpenBLAS pool whose threads are down to ``n``, starting none; False
    where that cannot be done so (then ``set_num_threads`` does it).

    OpenBLAS (its pthreads build, NumPy's and SciPy's) ends its threads at every
    fork and starts them again at the next call that needs them, or at the
    next ``openblas_set_num_threads``, whatever the number asked: in a forked
    worker, limiting the pool it inherited started ``blas_num_threads - 1``
    threads (one per core of the machine), each spinning ~0.1 s before it
    sleeps (OpenBLAS's thread timeout). That was 100 ms of a core per thread,
    per worker, at every start, for threads a budget of 1 never uses (on
    2 cores, a fresh ``Pool(2)``'s first ``apply`` with NumPy loaded took
    5-10 ms instead of 1-2). Shrinking a pool only sets its ``blas_cpu_number``
    (what ``openblas_get_num_threads`` reads) in a build without CPU affinity:
    set here while its threads are down, they start when a call needs them,
    as after any fork. Only where the build exports that state (NumPy 2.4's
    wheels, OpenBLAS 0.3.31); where it does not (NumPy 2.5's, 0.3.34), a
    ``fork`` back-end forks its workers from its zygote, which set the budget
    once (see ``restarts_openblas_in_children``).
    """
    state = _openblas_state(lib)
    if state is None or n < 1:
        return False
    avail, size, cpu_number = state
    if avail.value != 0 or n > size.value:
        return False
    cpu_number.value = n
    return True


def _openblas_state(lib: Any) -> Optional[Tuple[Any, Any, Any]]:
    """An OpenBLAS pool's ``blas_server_avail``, ``blas_num_threads`` and
    ``blas_cpu_number`` (``ctypes.c_int``s in the library) where its pthreads
    build has no CPU affinity and exports them; None otherwise."""
    if not _openblas_pthreads(lib):
        return None
    import ctypes

    try:
        dynlib = lib.dynlib
        state = tuple(ctypes.c_int.in_dll(dynlib, name) for name in (
            "blas_server_avail", "blas_num_threads", "blas_cpu_number"))
        # (threadpoolctl's lookup, which knows the build's symbol prefixes: a
        # threadpoolctl without it leaves the setter to do the work)
        get_config = lib._get_symbol("openblas_get_config")
        get_config.restype = ctypes.c_char_p
        if b"NO_AFFINITY" not in (get_config() or b"").split():
            return None
    except (AttributeError, OSError, TypeError, ValueError):
        return None
    return state  # type: ignore[return-value]


def _openblas_pthreads(lib: Any) -> bool:
    """Whether threadpoolctl's ``lib`` is an OpenBLAS on its own pthreads pool."""
    return (getattr(lib, "internal_api", None) == "openblas"
            and getattr(lib, "threading_layer", None) == "pthreads")


def restarts_openblas_in_children(n: int) -> bool:
    """Whether a worker forked from here would start OpenBLAS's threads to limit its
    pool to ``n``: a loaded pthreads OpenBLAS above ``n`` that cannot be shrunk at
    rest (a build that exports no pool state, or one with CPU affinity).

    Then a ``fork`` back-end forks its first workers from its zygote, which
    limits its pools once, before it forks any (a fork ends the threads the
    setter started there): its workers inherit the size and set nothing.

    Args:
        n (int): the workers' thread budget.

    Returns:
        bool:
    """
    libs = _scanned_libs()
    if libs is None:
        return False
    try:
        return any(_openblas_pthreads(lib) and lib.get_num_threads() > n
                   and _openblas_state(lib) is None for lib in libs)
    except Exception:  # noqa: BLE001 (a runtime that refuses: the workers set it as before)
        return False


def shrink_loaded(n: int) -> None:
    """Shrink the scanned thread pools above ``n`` to ``n`` (no environment, no torch,
    no pool grown): what a zygote does once, before it forks workers that inherit
    them so. Anything this leaves (no current scan, a runtime that refuses), each
    worker's own limit does, as before.

    Args:
        n (int): threads.
    """
    libs = _scanned_libs()
    if libs is not None:
        with contextlib.suppress(Exception):  # (the workers' own limit does the rest)
            _set_pools(libs, n, grow=False)


def _scanned_libs() -> Optional[List[Any]]:
    """The scan's thread-pool controllers while the scan holds here; None otherwise."""
    scanned = _scanned
    if scanned is None or not _still_valid(scanned):
        return None
    return scanned[1].lib_controllers


def _set_pools(libs: List[Any], n: int, grow: bool) -> None:
    """Set ``libs``' pools to ``n``: those above it, and below it if ``grow``."""
    for lib in libs:
        current = lib.get_num_threads()
        # A setter is not free (OpenBLAS's up to milliseconds): skip the pools
        # already at the budget, and shrink an OpenBLAS at rest without it.
        if (current != n if grow else current > n) and not _shrink_openblas_at_rest(lib, n):
            lib.set_num_threads(n)


def _limit_loaded(n: int) -> None:
    libs = _scanned_libs()
    if libs is not None:
        try:
            _set_pools(libs, n, grow=True)
            return
        except Exception:  # noqa: BLE001 (a runtime that refuses: threadpoolctl's own path below)
            pass
    # threadpoolctl finds every BLAS and OpenMP runtime a process has loaded
    # (OpenBLAS, MKL, BLIS, libgomp, libiomp, Apple's Accelerate ...) on every
    # platform, which a list of setter symbols of our own could not.
    from threadpoolctl import threadpool_limits

    # Broad on purpose: a runtime that refuses keeps its threads as they are.
    with contextlib.suppress(Exception):
        threadpool_limits(n)
