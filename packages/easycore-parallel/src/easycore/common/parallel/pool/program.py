"""What a pool's workers run: device set-up, the initializer, then jobs that are functions.

A pool's job carries its function as ``(function, mode, pass_context)``
(pickled by value where it must be, once per job: see
[`dumps_code`][easycore.common.parallel.transport.pickling.dumps_code]); the mode says
how an item is passed to it: ``MAP`` (``f(x)``), ``STAR`` (``f(*x)``) or
``APPLY`` (``f(*args, **kwds)``).
"""

from __future__ import annotations

import sys
import types

from .._os import inherit
from ..transport.big_calls import warn_if_big_function
from ..transport.pickling import dumps_code, loads_code
from ..worker.executor import WorkerContext, WorkerProgram

TYPE_CHECKING = False
if TYPE_CHECKING:  # a worker unpickles this module: it needs none of the caller's engine
    from typing import Any, Callable, Dict, Optional

    from ..engine.door import DevicePolicy

__all__ = ["APPLY", "MAP", "STAR", "PoolProgram", "job_code", "load_code"]

#: how a job's function takes an item: ``f(x)``, ``f(*x)``, ``f(*args, **kwds)``
MAP, STAR, APPLY = "map", "star", "apply"


class PoolProgram(WorkerProgram):
    """A pool worker: device set-up, then ``initializer(*initargs)``; jobs are functions."""

    def __init__(self, policy: DevicePolicy, initializer: Any, quiet: bool = False) -> None:
        """
        Args:
            policy (DevicePolicy): prepares the worker for its device.
            initializer (tuple or bytes or None): ``(initializer, initargs)``,
                or that as [`dumps_code`][easycore.common.parallel.transport.pickling.dumps_code]
                made it.
            quiet (bool): no initializer and a policy whose set-up does nothing
                (see ``WorkerProgram.quiet``).
        """
        self.policy = policy
        self.initializer = initializer
        self.quiet = quiet

    def __getstate__(self) -> Dict[str, Any]:
        # Code goes by value where it must (dumps_code), made once however
        # many workers it is pickled for. A forked worker inherits the program
        # unpickled (see ``inherit``): the initializer's arguments stay shared.
        if self.initializer is not None and not isinstance(self.initializer, bytes):
            self.initializer = dumps_code(self.initializer)
        state = self.__dict__.copy()
        state.pop("_with_cfg", None)  # each worker's own
        return state

    def init(self, ctx: WorkerContext) -> None:
        self.policy.setup_worker(ctx.device)
        if self.initializer is not None:
            initializer, initargs = load_code(self.initializer)
            initializer(*initargs)

    def function(self, blob: Any, ctx: WorkerContext) -> Callable[[Any], Any]:
        fn, mode, pass_context = _load_job(blob)
        if pass_context:
            inner, ctx = fn, self._context(ctx)

            def fn(*args: Any, **kwargs: Any) -> Any:
                return inner(ctx, *args, **kwargs)

        if mode == STAR:
            return lambda args: fn(*args)
        if mode == APPLY:
            return lambda call: fn(*call[0], **call[1])
        return fn

    def hook_name(self, blob: Any) -> str:
        return "task"

    def _context(self, ctx: WorkerContext) -> WorkerContext:
        """``ctx`` with a ``cfg``: a pool made without one leaves it None, and each
        worker gets an empty ``CfgNode`` when a function first asks for its context,
        kept for the worker's life (a worker that never asks, and the caller, import
        no easycore-config: ~1 ms of a short script's and of each spawned worker's
        start). One program may serve several workers (the thread back-end): kept
        per slot, a replacement (a new ``ctx`` in the slot) getting a new one."""
        if ctx.cfg is not None:
            return ctx
        made = self.__dict__.setdefault("_with_cfg", {})
        known = made.get(ctx.index)
        if known is None or known[0] is not ctx:
            from easycore.common.config import CfgNode

            known = made[ctx.index] = (ctx, ctx._replace(cfg=CfgNode()))
        return known[1]


def load_code(blob: Any) -> Any:
    """A job's function (or the initializer) as ``dumps_code`` made it, or as it was."""
    return loads_code(bytes(blob)) if isinstance(blob, (bytes, bytearray)) else blob


def job_code(func: Callable, mode: str, pass_context: bool, by_value: bool,
             cache: Optional[Dict[Any, bytes]] = None,
             main: Optional[inherit.MainCode] = None) -> Any:
    """A job's function as its workers read it: ``(func, mode, pass_context)``,
    pickled once (by value where it must be) for workers in other processes.

    Args:
        cache (dict or None): the bytes of functions pickled by reference,
            kept across jobs (a pool's): they are the same every time, and a
            small call (``apply``) no longer pickles its function each time.
        main (MainCode or None): ``__main__``'s code when the workers started
            ([`main_code`][easycore.common.parallel._os.inherit.main_code]). A
            function of ``__main__`` that the workers have (forked, or a
            script's top-level function they define again) goes by reference
            alone, as a module's does (no copy of its code; cloudpickle is not
            imported); one defined again since the workers started goes by
            value alone, under every start method.

    Raises:
        TypeError: ``func`` is not callable (the stdlib's words).
    """
    if not callable(func):
        raise TypeError(f"{func!r} is not callable")
    blob = (func, mode, pass_context)
    if not by_value:
        return blob
    # A function of __main__ the workers have (forked, or defined again as they
    # import the script) is the same bytes every time too (by reference, like a
    # module's).
    inherited = main is not None and inherit.workers_have(main, func)
    if cache is None or not (inherited or by_reference(func)):
        code = dumps_code(blob, main)
        warn_if_big_function(func, len(code))
        return code
    cached = cache.get(blob)
    if cached is None:
        if len(cache) >= _CACHED:
            cache.clear()
        cached = cache[blob] = dumps_code(blob, main)
    return cached


#: job functions pickled by reference kept at most (a pool's bytes; a worker's functions)
_CACHED = 64
#: a worker's job functions read from bytes that name them by reference
_LOADED: Dict[bytes, Any] = {}


def by_reference(func: Any) -> bool:
    """Whether pickle writes ``func`` as its module and name only.

    A plain function at the top level of a module other than ``__main__``:
    its pickle is the same bytes every time, and reading them gives back that
    very object (while the module still holds it under that name). Anything
    else (a lambda, a closure, a ``partial``, a bound method, code of
    ``__main__``) may carry state by value and is pickled for every job.
    """
    if type(func) not in (types.FunctionType, types.BuiltinFunctionType):
        return False
    module = getattr(func, "__module__", None)
    if module is None or module in ("__main__", "__mp_main__"):
        return False
    return getattr(sys.modules.get(module), func.__qualname__, None) is func


def _load_job(blob: Any) -> Any:
    """``load_code`` of a job's ``(func, mode, pass_context)``; the same bytes of a
    function by reference are read once per worker (each ``apply`` is a new job)."""
    if not isinstance(blob, (bytes, bytearray)):
        return blob
    key = bytes(blob)
    code = _LOADED.get(key)
    if code is not None and by_reference(code[0]):
        return code
    code = loads_code(key)
    if by_reference(code[0]):
        if len(_LOADED) >= _CACHED:
            _LOADED.clear()
        _LOADED[key] = code
    return code
