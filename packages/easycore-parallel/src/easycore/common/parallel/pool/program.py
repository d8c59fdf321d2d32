"""What a pool's workers run: device set-up, the initializer, then jobs that are functions.

A pool's job carries its function as ``(function, mode, pass_context)``
(pickled by value where it must be, once per job: see
[`dumps_code`][easycore.common.parallel.transport.pickling.dumps_code]); the mode says
how an item is passed to it: ``MAP`` (``f(x)``), ``STAR`` (``f(*x)``) or
``APPLY`` (``f(*args, **kwds)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict

from ..transport.pickling import dumps_code, loads_code
from ..worker.executor import WorkerContext, WorkerProgram

if TYPE_CHECKING:  # a worker unpickles this module: it needs none of the caller's engine
    from ..engine.door import DevicePolicy

__all__ = ["APPLY", "MAP", "STAR", "PoolProgram", "job_code", "load_code"]

#: how a job's function takes an item: ``f(x)``, ``f(*x)``, ``f(*args, **kwds)``
MAP, STAR, APPLY = "map", "star", "apply"


class PoolProgram(WorkerProgram):
    """A pool worker: device set-up, then ``initializer(*initargs)``; jobs are functions."""

    def __init__(self, policy: DevicePolicy, initializer: Any) -> None:
        """
        Args:
            policy (DevicePolicy): prepares the worker for its device.
            initializer (tuple or bytes or None): ``(initializer, initargs)``,
                or that as [`dumps_code`][easycore.common.parallel.transport.pickling.dumps_code]
                made it.
        """
        self.policy = policy
        self.initializer = initializer

    def __getstate__(self) -> Dict[str, Any]:
        # Code goes by value where it must (dumps_code), made once however
        # many workers it is pickled for. A forked worker inherits the program
        # unpickled (see ``inherit``): the initializer's arguments stay shared.
        if self.initializer is not None and not isinstance(self.initializer, bytes):
            self.initializer = dumps_code(self.initializer)
        return self.__dict__.copy()

    def init(self, ctx: WorkerContext) -> None:
        self.policy.setup_worker(ctx.device)
        if self.initializer is not None:
            initializer, initargs = load_code(self.initializer)
            initializer(*initargs)

    def function(self, blob: Any, ctx: WorkerContext) -> Callable[[Any], Any]:
        fn, mode, pass_context = load_code(blob)
        if pass_context:
            inner = fn

            def fn(*args: Any, **kwargs: Any) -> Any:
                return inner(ctx, *args, **kwargs)

        if mode == STAR:
            return lambda args: fn(*args)
        if mode == APPLY:
            return lambda call: fn(*call[0], **call[1])
        return fn

    def hook_name(self, blob: Any) -> str:
        return "task"


def load_code(blob: Any) -> Any:
    """A job's function (or the initializer) as ``dumps_code`` made it, or as it was."""
    return loads_code(bytes(blob)) if isinstance(blob, (bytes, bytearray)) else blob


def job_code(func: Callable, mode: str, pass_context: bool, by_value: bool) -> Any:
    """A job's function as its workers read it: ``(func, mode, pass_context)``,
    pickled once (by value where it must be) for workers in other processes.

    Raises:
        TypeError: ``func`` is not callable (the stdlib's words).
    """
    if not callable(func):
        raise TypeError(f"{func!r} is not callable")
    blob = (func, mode, pass_context)
    return dumps_code(blob) if by_value else blob
