"""The one door from a client to the engine: [`start`][easycore.common.parallel.engine.door.start].

Runners, ``Pool`` (and through it ``BackgroundTask`` and ``JobQueue``) build
their engine here and nowhere else: a back-end made from the client's
options and its device policy
([`backend_for`][easycore.common.parallel.engine.door.backend_for]), then an
engine over it with a failure policy (``FailFast`` for runners,
``ReplaceWorker`` for pools), started. The clients import nothing from
``backends`` (an import-linter contract, ``clients-through-the-door``, holds
it): what they name of that layer (the back-end table, the device policy,
the spec, whether workers are forked) they take from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional, Union

from .._os import inherit
from ..backends.base import Backend, BackendSpec
from ..backends.policy import BACKENDS, DevicePolicy, build_backend
from ..options import WorkerOptions
from .core import Engine
from .supervision import FailFast, Policy, ReplaceWorker

if TYPE_CHECKING:
    from ..insights import Recorder

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendSpec",
    "DevicePolicy",
    "FailFast",
    "Policy",
    "ReplaceWorker",
    "backend_for",
    "forked",
    "start",
]


def backend_for(backends: Mapping[str, Union[type, str]], options: WorkerOptions,
                spec: BackendSpec) -> Backend:
    """A fresh, unstarted back-end for a client: ``options.backend`` of ``backends``,
    built from ``spec`` (its ``policy`` picks the start method and the transport).

    Args:
        backends (dict): the client's table (a copy of ``BACKENDS``).
        options (WorkerOptions): the client's checked options (the back-end's
            name and its own options).
        spec (BackendSpec): the program, devices, cfg, device policy, start
            method, threads.

    Returns:
        Backend:

    Raises:
        ValueError: an unknown back-end; TypeError: an option it does not take.
    """
    return build_backend(backends, options.backend, spec, options.backend_options)


def start(backend: Backend, options: WorkerOptions, policy: Policy, *,
          wait: Literal["all", "first", "none"], recorder: Optional[Recorder] = None,
          caller_pumps: bool = False) -> Engine:
    """The engine a client runs on: over ``backend``, with ``policy``, started.

    Args:
        backend (Backend): an unstarted back-end (``backend_for``, or a
            runner's ``make_backend()``).
        options (WorkerOptions): credits (``queue_scale``) and ``maxtasksperchild``.
        policy (Policy): what a failure costs: ``FailFast()`` (runners) or
            ``ReplaceWorker(options.max_deaths, options.max_node_losses)`` (pools).
        wait (str): see [`Engine.start`][easycore.common.parallel.engine.core.Engine.start].
        recorder (Recorder or None): insights, counted from the start (None: off).
        caller_pumps (bool): the thread that submits is the one that pumps (a runner).

    Returns:
        Engine: started; if the start raised, the back-end cleaned up after itself.
    """
    engine = Engine(backend, credits=options.credits, maxtasksperchild=options.maxtasksperchild,
                    policy=policy)
    engine.recorder = recorder  # before the start: start-up counts
    engine.caller_pumps = caller_pumps
    if recorder is not None:
        recorder.caller_pumps = caller_pumps
    engine.start(wait=wait)
    return engine


def forked(engine: Any) -> bool:
    """Whether ``engine``'s workers are forked from this process (they inherit what
    ``inherit.keep`` registered)."""
    return inherit.forked(engine.backend)
