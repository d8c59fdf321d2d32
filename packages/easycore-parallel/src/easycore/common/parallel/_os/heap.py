"""The garbage collector around a fork: what a worker inherits is not collected twice.

After a fork, parent and child share their pages until one of them writes
to one. CPython's cyclic garbage collector writes to the header of every
object it visits, so a collection that visits objects made before the fork
copies their pages, in each process that runs it (a copy-on-write fault,
about 4 us a page on the 2-core VM, on top of the visit).

Measured in a short script that imports easycore, makes a ``fork`` pool of
one worker, waits 0.2 s and calls ``apply`` once: the first call took 12-17 ms
against ``multiprocessing.Pool``'s 1.1-1.5 ms, the second 0.5 ms. The caller
ran a middle-generation collection during the call (about 870 page faults,
7-10 ms of CPU) and so did the worker (about 680 faults): the objects that the
imports and the pool's set-up had just made were still young at the fork, and
the first young collections after it visited them on both sides. (easycore's
imports run with the collector paused, see ``_lazy``, which leaves their
collection to whatever runs next.)

* [`before_fork`][easycore.common.parallel._os.heap.before_fork]: the caller
  collects its young generations just before it forks its workers, so what
  it made is old at the fork and the young collections after it, on either
  side, visit only what was made since. The collection would have come soon
  anyway, at the next allocations; only its place changes. A collector that
  you turned off (``gc.disable()``) stays off and collects nothing.
* [`freeze_inherited`][easycore.common.parallel._os.heap.freeze_inherited]:
  a worker (and the zygote), first thing, moves every object it started with into the
  collector's permanent generation (``gc.freeze``, as the Python docs advise
  for a process that forks without exec). Its full collections then visit
  only what it made itself: what a ``fork`` worker inherited from the caller
  (or a ``forkserver`` worker from its server) keeps its shared pages. A
  reference cycle among those inherited objects that the worker drops is not
  collected in the worker; the caller's copy of it still is.

With both: the first call took 2-3 ms in that script; the caller took about
250 faults, the worker about 55. And a ``gc.collect()`` in a ``fork`` worker
whose caller holds 300,000 small dicts copied 61 MB of the worker's pages and
took 131 ms; now it copies none and takes under 0.1 ms (``scripts/bench memory
--only objects``).
"""

from __future__ import annotations

import gc

__all__ = ["before_fork", "freeze_inherited"]

#: a collection of generations 0 and 1: what the process made since its last
#: middle-generation collection
_YOUNG = 1


def before_fork() -> None:
    """Collect the caller's young objects just before it forks (if its collector is on)."""
    if gc.isenabled():
        gc.collect(_YOUNG)


def freeze_inherited() -> None:
    """In a worker, first thing: keep what it started with out of its collections."""
    gc.freeze()
