"""easycore-parallel's logger: ``logging.getLogger("easycore.parallel")``.

What a user may want to know and would otherwise see only as an exception, or
not at all, is logged here: a worker replaced (it died, or overran its
``task_timeout``), a task timed out, large payloads falling back from shared
memory to the pipe. As libraries do, the logger has a ``NullHandler`` and
nothing else: nothing is printed until the application configures logging
(``logging.basicConfig(level=logging.INFO)``), and its records propagate to
the root logger as usual.

Levels: ``WARNING`` for what costs the user something (a task lost to a
death or a timeout, the slow path), ``INFO`` for what is planned
(``maxtasksperchild`` replacements).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    import logging
    from typing import Any

    logger: logging.Logger

__all__ = ["LOGGER_NAME", "logger"]

#: the logger's name (not the package's: users type it in their logging config)
LOGGER_NAME = "easycore.parallel"


def __getattr__(name: str) -> Any:
    # ``logger`` is made on first use: ``logging`` costs a short script's start-up
    # (tests/parallel/layers/test_import_cost.py), and most runs never log.
    if name != "logger":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import logging

    made = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(h, logging.NullHandler) for h in made.handlers):
        made.addHandler(logging.NullHandler())
    globals()["logger"] = made
    return made
