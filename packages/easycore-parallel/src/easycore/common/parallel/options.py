"""The options every client takes, in one object checked in one place.

The runners, [`Pool`][easycore.common.parallel.Pool],
[`BackgroundTask`][easycore.common.parallel.BackgroundTask] and
[`JobQueue`][easycore.common.parallel.JobQueue] take the same options for
the same things: which back-end runs the workers and how they start, how long
a task may run, how many chunks a worker holds, how many deaths a job
survives, the workers' thread budget, the progress bar and insights. Each
client builds one [`WorkerOptions`][easycore.common.parallel.options.WorkerOptions]
from its arguments; building it checks every field, with one message per
mistake, so the same bad value is refused the same way by every client (as
mpire keeps its pool's parameters in one dataclass, ``params.py``; here a
named tuple, whose class costs no import of ``dataclasses`` and ``inspect``
in a script's cold start nor in each spawned worker). A
``BackgroundTask`` or ``JobQueue`` hands the object it checked to its pool,
which does not check it again.

The checks of per-call values (a call's ``task_timeout``, a ``chunksize``)
and of the clients' own arguments (``workers``, ``prefetch``, ``maxsize``,
an ``initializer``) are the functions below, used by every client that takes
them.

A leaf module: it imports nothing of easycore-parallel, so any layer may use it.
"""

from __future__ import annotations

import math
import types

from ._named_tuples import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Collection, Dict, Mapping, Optional, Tuple, Union

__all__ = [
    "FIELDS",
    "WorkerOptions",
    "check_callable",
    "check_chunksize",
    "check_memory_limit",
    "check_options",
    "check_positive_int",
    "check_queue_scale",
    "check_seconds",
    "check_task_timeout",
]

#: ``cpu_threads``: ``"auto"``, an int, or None (see ``threads.budget``)
_Threads = int | str | None


def check_seconds(name: str, value: Any) -> Optional[float]:
    """Check a duration option: None (no limit) or a positive finite number of seconds.

    Args:
        name (str): the option, for the message.
        value (float or None):

    Returns:
        float or None: ``value``.

    Raises:
        ValueError: naming the option.
    """
    if value is not None and not (
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return value


def check_task_timeout(value: Any) -> Optional[float]:
    """Check a ``task_timeout`` (a client's, or one call's override).

    Args:
        value (float or None): seconds one item may run in a worker.

    Returns:
        float or None: ``value``.

    Raises:
        ValueError: not None and not a positive finite number.
    """
    return check_seconds("task_timeout", value)


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def check_memory_limit(value: Any) -> Optional[int]:
    """Check a ``max_worker_memory``: bytes (an int), or a string like ``"2 GB"``.

    Units: B, kB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers
    of 1024), in any case, with or without a space.

    Args:
        value (int or str or None): what the caller passed.

    Returns:
        int or None: the limit in bytes.

    Raises:
        ValueError: not a positive number of bytes, or an unknown unit.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
        unit = text[len(number):].strip() if number else text
        try:
            parsed = float(number) * _UNITS[unit]
        except (KeyError, ValueError):
            raise ValueError(
                f"max_worker_memory must be bytes (an int) or a size like '2 GB' or '512 MiB', "
                f"got {value!r}") from None
        value = int(parsed)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"max_worker_memory must be a positive number of bytes, got {value!r}")
    return value


def check_queue_scale(value: Any) -> float:
    """Check a ``queue_scale``: chunks each worker holds at once (``ceil``).

    Raises:
        ValueError: not a positive finite number.
    """
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"queue_scale must be a positive finite number, got {value!r}")
    return float(value)


def check_positive_int(name: str, value: Any, *, allow_none: bool = False,
                       minimum: int = 1) -> Any:
    """Check a count option (``workers``, ``prefetch``, ``max_deaths``, ``maxsize``, ...).

    Args:
        name (str): the option's name, for the message.
        value (int or None): what the caller passed.
        allow_none (bool): None is accepted (and returned).
        minimum (int): the smallest value accepted (0 for ``maxsize``).

    Returns:
        int or None: ``value``.

    Raises:
        ValueError: a bool, not an int, or below ``minimum``.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        if minimum == 0:
            what = "a non-negative int"
        raise ValueError(f"{name} must be {what}{' or None' if allow_none else ''}, "
                         f"got {value!r}")
    return value


def check_callable(name: str, value: Any, *, allow_none: bool = False) -> Any:
    """Check a function option (``target``, ``initializer``, a job's function).

    Raises:
        TypeError: not callable (nor None where ``allow_none``).
    """
    if (value is None and allow_none) or callable(value):
        return value
    raise TypeError(f"{name} must be a callable, got {value!r}")


def check_chunksize(value: Any) -> Optional[int]:
    """Check a ``chunksize`` (None: automatic), with the stdlib's message.

    Raises:
        ValueError: not None and not an int of at least 1.
    """
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(f"Chunksize must be 1+, not {value!r}")
    return value


def check_options(backend: str, options: dict, accepted: Tuple[str, ...]) -> None:
    """Refuse keyword arguments a back-end does not take, naming them (its ``from_spec``).

    Args:
        backend (str): the back-end's name, for the message.
        options (dict): what the caller passed.
        accepted (tuple): the names it takes.

    Raises:
        TypeError: an unknown option.
    """
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = ", ".join(accepted) if accepted else "no options"
        raise TypeError(
            f"backend={backend!r} got unexpected option(s) {', '.join(map(repr, unknown))}; "
            f"it takes {takes}"
        )


class _OptionFields(NamedTuple):
    """The fields of [`WorkerOptions`][easycore.common.parallel.options.WorkerOptions]
    and their defaults, unchecked."""

    backend: str = "process"
    start_method: Optional[str] = None
    task_timeout: Optional[float] = None
    queue_scale: float = 3.0
    max_deaths: int = 3
    max_node_losses: Optional[int] = 10
    maxtasksperchild: Optional[int] = None
    max_worker_memory: Union[int, str, None] = None  #: bytes once checked
    cpu_threads: _Threads = "auto"
    progress: Any = False
    insights: bool = False
    backend_options: Mapping[str, Any] = types.MappingProxyType({})


#: the names of ``WorkerOptions``' fields, in order
FIELDS: Tuple[str, ...] = _OptionFields._fields


class WorkerOptions(_OptionFields):
    """What runs the workers and how: the options of every client, checked when built.

    A frozen record (a named tuple): built with keywords, changed with
    [`replace`][easycore.common.parallel.options.WorkerOptions.replace], which checks again.

    Attributes:
        backend (str): the back-end's name in the client's ``backends`` table
            (checked against it by ``check_backend``).
        start_method (str or None): "fork", "spawn" or "forkserver" (None: the
            device policy's choice); the device policy checks it.
        task_timeout (float or None): seconds one item may run in a worker.
        queue_scale (float): chunks each worker holds at once (``ceil``).
        max_deaths (int): worker deaths one job may cause before it fails
            (pools; a runner fails at the first).
        max_node_losses (int or None): lost nodes one job may see and carry on (pools
            on Ray; one more fails it with ``NodesLostError``; None: any number). A lost
            node blames no item and counts against no ``max_deaths``.
        maxtasksperchild (int or None): replace a worker after this many items.
        max_worker_memory (int or str or None): replace a worker whose resident
            memory passed this many bytes after a chunk (``"2 GB"`` works; kept
            as bytes).
        cpu_threads (int or str or None): each worker's thread budget
            (resolved by the client: ``"auto"`` depends on the number of workers).
        progress (bool or dict): a tqdm bar (a dict: its keyword arguments).
        insights (bool): count where the time goes.
        backend_options (dict): the back-end's own keyword arguments (Ray's
            ``address``, ``ray_init_kwargs``); the back-end refuses others.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> WorkerOptions:
        fields = _OptionFields(*args, **kwargs)  # its defaults, its errors for unknown names
        if not isinstance(fields.backend, str):
            raise ValueError(f"unknown backend {fields.backend!r}: a back-end's name (str)")
        if fields.start_method is not None and not isinstance(fields.start_method, str):
            raise ValueError(f"unknown start_method {fields.start_method!r}")
        check_task_timeout(fields.task_timeout)
        check_queue_scale(fields.queue_scale)
        check_positive_int("max_deaths", fields.max_deaths)
        check_positive_int("max_node_losses", fields.max_node_losses, allow_none=True, minimum=0)
        if fields.maxtasksperchild is not None and (
            not isinstance(fields.maxtasksperchild, int) or fields.maxtasksperchild < 1
        ):
            # (the stdlib's message)
            raise ValueError("maxtasksperchild must be a positive int or None")
        checked = fields._replace(
            max_worker_memory=check_memory_limit(fields.max_worker_memory),
            # A copy: the caller's dict may change later; the object is frozen.
            backend_options=dict(fields.backend_options))
        return super().__new__(cls, *checked)

    @property
    def credits(self) -> int:
        """int: chunks each worker holds at once (``ceil(queue_scale)``)."""
        return math.ceil(self.queue_scale)

    def check_backend(self, known: Collection[str]) -> None:
        """Refuse a back-end name the client's table does not have.

        Args:
            known (Collection[str]): the client's ``backends`` names.

        Raises:
            ValueError: naming the back-end and the known ones.
        """
        if self.backend not in known:
            raise ValueError(f"unknown backend {self.backend!r}; known: {sorted(known)}")

    @property
    def local(self) -> bool:
        """bool: the workers run on this machine (its devices must exist here)."""
        return self.backend in ("process", "thread")

    def timeout_for(self, override: Optional[float]) -> Optional[float]:
        """One call's task timeout: ``override`` (checked) if given, else this one."""
        if override is None:
            return self.task_timeout
        return check_task_timeout(override)

    def replace(self, **changes: Any) -> WorkerOptions:
        """A copy with ``changes``, checked again."""
        return type(self)(**{**self._asdict(), **changes})

    # The named tuple's own ways to a changed copy (``copy.replace`` on 3.13+
    # too) check again as well.
    def _replace(self, **changes: Any) -> WorkerOptions:
        return self.replace(**changes)

    __replace__ = _replace

    def pool_kwargs(self) -> Dict[str, Any]:
        """These options as ``Pool``'s keyword arguments."""
        kwargs = {name: value for name, value in self._asdict().items()
                  if name != "backend_options"}
        kwargs.update(self.backend_options)
        return kwargs
