"""Keyword arguments no layer takes: refused, or dropped with a warning (iopath's switch).

`PathManager` refuses a keyword argument it does not know, so that a typo
(`encodng=`) is found rather than ignored. Code written for iopath may pass keywords
meant for one of iopath's handlers, and iopath can be told to drop them with a
warning instead: `PathManager.set_strict_kwargs_checking(False)`. The setting is the
process's, as the handlers are (easycore has one registry of them).
"""

import os
from typing import AbstractSet, Any, Dict, Optional, Union

from easycore.common.network.urls import redact

__all__ = [
    "BUILTIN_OPEN_KEYWORDS",
    "UnknownArgumentError",
    "check_keywords",
    "checked_path",
    "set_strict",
    "strict",
]

#: The keyword arguments of the built-in `open` after its mode.
BUILTIN_OPEN_KEYWORDS = frozenset(
    {"buffering", "encoding", "errors", "newline", "closefd", "opener"}
)

_strict = True


class UnknownArgumentError(TypeError, ValueError):
    """A keyword argument that the operation does not take.

    A `TypeError`, as Python raises for an unexpected keyword argument, and a
    `ValueError`, as iopath raises for one: `except` clauses written for either catch it.
    """


def strict() -> bool:
    """Whether unknown keyword arguments are refused (the default) rather than dropped."""
    return _strict


def set_strict(enable: bool) -> None:
    """Refuse unknown keyword arguments (True, the default), or drop them with a warning."""
    global _strict
    _strict = bool(enable)


def check_keywords(
    operation: str,
    path: str,
    kwargs: Dict[str, Any],
    accepted: Optional[AbstractSet[str]] = frozenset(),
) -> Dict[str, Any]:
    """The keyword arguments to pass on: those in `accepted` (all of them if None).

    Args:
        operation (str): what was called (`"exists"`, `"open"`), for the message.
        path (str): the path it was called with, for the message.
        kwargs (dict): the keyword arguments it was given.
        accepted (set or None): the names it takes; None: any (its handler decides).

    Returns:
        dict: `kwargs` without the unknown names (which were logged).

    Raises:
        UnknownArgumentError: an unknown name, while checking is strict (the default).
    """
    if accepted is None:
        return kwargs
    unknown = sorted(name for name in kwargs if name not in accepted)
    if not unknown:
        return kwargs
    if _strict:
        takes = ", ".join(sorted(accepted)) or "no keyword arguments"
        raise UnknownArgumentError(
            f"{operation}({redact(path)!r}): unexpected keyword argument "
            f"{', '.join(map(repr, unknown))} (it takes {takes}; "
            "PathManager.set_strict_kwargs_checking(False) drops unknown ones with a warning)"
        )
    import logging  # only a dropped argument pays for logging

    logger = logging.getLogger("easycore.common.path")
    for name in unknown:
        logger.warning(
            "[PathManager] %s(%s): %s=%r argument ignored",
            operation,
            redact(path),
            name,
            kwargs[name],
        )
    return {name: value for name, value in kwargs.items() if name in accepted}


def checked_path(
    operation: str, path: Union[str, "os.PathLike[str]"], kwargs: Dict[str, Any]
) -> str:
    """`path` as a string, once `kwargs` (none of which `operation` takes) are checked."""
    path = os.fspath(path)
    if kwargs:
        check_keywords(operation, path, kwargs)
    return path
