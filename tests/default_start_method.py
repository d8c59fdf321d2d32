"""Run the suite with another start method as the platform's default, as Python 3.14 did.

Python 3.14 made ``forkserver`` the default start method on Linux (macOS has used
``spawn`` since 3.8). ``EASYCORE_TEST_START_METHOD=forkserver`` gives an older Python the
same default, before any test starts a process (tests/conftest.py applies it at start-up;
``scripts/test`` runs the parallel, background, services and torch suites so)::

    EASYCORE_TEST_START_METHOD=forkserver .venv/bin/python -m pytest tests/parallel

It changes the *default*, exactly as 3.14 does, rather than calling
``set_start_method``: nothing counts as set (``get_start_method(allow_none=True)`` stays
None and a later ``set_start_method("fork")`` still works), the default context and
``multiprocessing.get_context()`` start with that method, and ``get_all_start_methods()``
lists it first. Python processes the tests start (a tutorial, a script run by
``subprocess``) get the same default through ``start_method_site/sitecustomize.py``,
which the hook puts on their ``PYTHONPATH`` (``python -I`` ignores it, as it ignores
everything of the environment).
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import context
from pathlib import Path
from typing import Any

#: the environment variable that names the default start method for a run
ENV = "EASYCORE_TEST_START_METHOD"
SITE = Path(__file__).resolve().parent / "start_method_site"
METHODS = ("fork", "spawn", "forkserver")


def make_default(method: str) -> None:
    """Make ``method`` the platform's default start method in this interpreter.

    Args:
        method (str): ``"fork"``, ``"spawn"`` or ``"forkserver"``.

    Raises:
        ValueError: the platform has no such start method.
        RuntimeError: a start method was already chosen here (too late to change
            the default).
    """
    available = multiprocessing.get_all_start_methods()
    if method not in available:
        raise ValueError(f"{ENV}={method!r}: this platform's start methods are {available}")
    default = context._default_context
    chosen = default._actual_context
    if chosen is not None and chosen._name != method:
        raise RuntimeError(
            f"{ENV}={method!r}: the start method {chosen._name!r} was already chosen; "
            "the default must change before anything uses multiprocessing"
        )
    default._default_context = context._concrete_contexts[method]
    order = [method, *(name for name in available if name != method)]

    def get_all_start_methods() -> list:
        """The platform's start methods, the default first (as from Python 3.14)."""
        return list(order)

    # multiprocessing's module-level functions are bound methods of the default
    # context, taken at import: both are replaced.
    default.get_all_start_methods = get_all_start_methods  # type: ignore[method-assign]
    multiprocessing.get_all_start_methods = get_all_start_methods


def apply_from_environment() -> str | None:
    """Apply ``$EASYCORE_TEST_START_METHOD`` here and in the Python processes started later.

    Returns:
        str or None: the method made the default, None when the variable is unset.
    """
    method = os.environ.get(ENV)
    if not method:
        return None
    make_default(method)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(SITE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE), *filter(None, paths)])
    return method


def chooses_its_own(item: Any) -> bool:
    """Whether a collected test picks its start method itself, so that the default does
    not reach it: a parameter (or parametrized fixture) whose value is a start method or
    a pool kind ``"process-<method>"``, or a class of CPython's pool tests made for one
    start method (``TestProcessSpawnPool``)."""
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec is not None else ()):
        if isinstance(value, str) and value.rsplit("-", 1)[-1] in METHODS:
            return True
    cls = getattr(item, "cls", None)
    name = cls.__name__ if cls is not None else ""
    return any(name.startswith(f"TestProcess{m.capitalize()}") for m in METHODS)
