"""Random streams of background workers: distinct always, reproducible with a seed.

Augmentation code run by N workers must not produce N identical batches, yet
that is what forked workers do by default: each child inherits its parent's
NumPy and torch generator states (CPython reseeds only ``random`` after a
fork), so N workers draw N copies of one stream.
`RandomStreams` fixes that
for the generators code uses without asking: Python's ``random``, NumPy's
legacy global ``np.random`` (if NumPy is importable) and, in easycore-torch's
subclass, torch's default generators.

* **Without a seed**, each worker seeds them from fresh OS entropy when it
  starts (a replacement worker too): distinct streams, different every run.
* **With a seed**, they are set before *each call* from ``(seed, k)``, ``k``
  being the call's number (the k-th call a
  [`BackgroundTask`][easycore.common.parallel.BackgroundTask] started, the
  k-th job ``put`` on a [`JobQueue`][easycore.common.parallel.JobQueue]).
  Call k draws the same numbers in every run, whichever worker runs it, so
  a replacement worker (after a death or a timeout) changes nothing, and with
  ``ordered=True`` the k-th result of a task is the same in every run. A
  ``reset`` skips the numbers of the calls it discarded (how many depends on
  timing), so runs with resets are reproducible call by call, not result by
  result. Numbers drawn in an ``initializer`` come from fresh entropy: draw
  them in the target.

Generators a target makes itself (``np.random.default_rng()``) are its own
business; derive them from the seeded ones to follow the seed, e.g.
``np.random.default_rng(random.getrandbits(128))``.

The thread back-end has no streams to give: its workers share the caller's
generators, which easycore never touches.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Optional, Sequence

__all__ = ["RandomStreams", "WorkerStart", "SeededCall", "check_seed"]


def check_seed(seed: Any) -> Optional[int]:
    """Validate a ``seed`` argument.

    Args:
        seed (int or None): a non-negative integer, or None.

    Returns:
        int or None: the seed.

    Raises:
        TypeError: not an int.
        ValueError: negative.
    """
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be a non-negative int or None, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative int or None, got {seed}")
    return seed


class RandomStreams:
    """Seeds the global generators of a worker process; see the module docstring.

    Picklable and small: it travels to every worker. Subclasses add
    generators by extending ``seed_all``.
    """

    def __init__(self, seed: Optional[int] = None) -> None:
        """
        Args:
            seed (int or None): the base seed (None: fresh entropy per worker).
        """
        self.seed = check_seed(seed)

    def key(self, call: int) -> bytes:
        """128 bits for call number ``call``, from ``(seed, call)`` (a hash: calls
        with neighbouring numbers get unrelated streams).

        Args:
            call (int): the call's number.

        Returns:
            bytes: 16 bytes.
        """
        return hashlib.blake2b(f"{self.seed}:{call}".encode(), digest_size=16,
                               person=b"easycore-rng").digest()

    def worker_started(self) -> None:
        """In a worker, before its initializer: seed everything from fresh entropy."""
        self.seed_all(os.urandom(16), first=True)

    def before_call(self, call: int) -> None:
        """In a worker, before call number ``call`` (only with a seed)."""
        if self.seed is not None:
            self.seed_all(self.key(call), first=False)

    def seed_all(self, key: bytes, first: bool) -> None:
        """Seed every generator this class knows from ``key``.

        Args:
            key (bytes): 16 bytes of seed material.
            first (bool): the worker just started (subclasses may do the
                slower, complete seeding only then).
        """
        random.seed(int.from_bytes(key, "little"))
        # ``numpy.random`` is imported lazily (about 10 ms): only a state that
        # exists can have been copied by fork. Seeded runs import it up front,
        # so that a target importing it in its first call draws seeded numbers.
        np_random: Any = sys.modules.get("numpy.random")
        if np_random is None and first and self.seed is not None:
            try:
                import numpy.random as np_random
            except ImportError:
                np_random = None
        if np_random is not None:
            np_random.seed([int.from_bytes(key[i : i + 4], "little") for i in range(0, 16, 4)])


class WorkerStart:
    """A pool ``initializer``: seed the worker's streams, then run the user's initializer."""

    def __init__(self, streams: Optional[RandomStreams],
                 initializer: Optional[Callable[..., Any]], initargs: Sequence[Any]) -> None:
        """
        Args:
            streams (RandomStreams or None): None on the thread back-end.
            initializer (callable or None): the user's.
            initargs (tuple): its arguments.
        """
        self.streams = streams
        self.initializer = initializer
        self.initargs = tuple(initargs)

    def __call__(self) -> None:
        if self.streams is not None:
            self.streams.worker_started()
        if self.initializer is not None:
            self.initializer(*self.initargs)


class SeededCall:
    """``target(*args, **kwargs)`` as a job's per-item function: the item is the call's number."""

    def __init__(self, target: Callable[..., Any], args: Sequence[Any],
                 kwargs: Optional[dict], streams: Optional[RandomStreams]) -> None:
        """
        Args:
            target (callable): what to call.
            args (tuple): its positional arguments.
            kwargs (dict or None): its keyword arguments.
            streams (RandomStreams or None): seeded before each call when it has a seed.
        """
        self.target = target
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.streams = streams if streams is not None and streams.seed is not None else None

    def __call__(self, call: int) -> Any:
        if self.streams is not None:
            self.streams.before_call(call)
        return self.target(*self.args, **self.kwargs)
