"""The errors of a pool that are the standard library pool's own classes.

[`RemoteTraceback`][easycore.common.parallel.RemoteTraceback] and
[`ResultEncodingError`][easycore.common.parallel.ResultEncodingError]
subclass ``multiprocessing.pool``'s ``RemoteTraceback`` and
``MaybeEncodingError``, so that code written for ``multiprocessing.Pool``
catches them. Kept apart from [`errors`][easycore.common.parallel.errors]
(which re-exports them) so that a runner, and each worker that imports its
script again, never imports ``multiprocessing.pool`` for them.
"""

from __future__ import annotations

import multiprocessing.pool

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Optional

__all__ = ["RemoteTraceback", "ResultEncodingError"]

# (typeshed does not list these two of multiprocessing.pool)
_mp_pool: Any = multiprocessing.pool
_StdRemoteTraceback: Any = _mp_pool.RemoteTraceback
_StdMaybeEncodingError: Any = _mp_pool.MaybeEncodingError


class _RemoteTracebackType(type):
    # isinstance(cause, RemoteTraceback) holds for the stdlib's class that
    # pools raise from (see RemoteTraceback.of).
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _StdRemoteTraceback) and hasattr(obj, "text")


class RemoteTraceback(_StdRemoteTraceback, metaclass=_RemoteTracebackType):
    """The traceback of an exception raised in a worker, as its ``__cause__``.

    Pools re-raise the task's own exception (a ``ValueError`` stays a
    ``ValueError``, as with ``multiprocessing.Pool``); this cause carries where
    it happened, as ``text`` and as the stdlib's ``tb``. The cause a pool
    raises from is the stdlib's own ``multiprocessing.pool.RemoteTraceback``
    (code that compares ``type(err.__cause__)`` with it keeps working), with
    ``text`` too; ``isinstance(cause, RemoteTraceback)`` holds for it.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
        #: the stdlib's name for the same text (``multiprocessing.pool.RemoteTraceback.tb``)
        self.tb = text

    def __str__(self) -> str:
        return self.text

    @staticmethod
    def of(text: str) -> BaseException:
        """The cause pools raise from: the stdlib's class, with ``tb`` and ``text``.

        Args:
            text (str): the worker's formatted traceback.

        Returns:
            multiprocessing.pool.RemoteTraceback:
        """
        cause = _StdRemoteTraceback(text)
        cause.text = text
        return cause


class ResultEncodingError(_StdMaybeEncodingError):
    """A task's result could not be sent back to the caller (it does not pickle).

    Only that item fails (the stdlib's ``MaybeEncodingError``, which this is);
    the other results of its chunk are delivered. ``exc`` and ``value`` are
    the ``repr`` of the pickling error and of the result, as the stdlib's;
    ``item`` is the item's index in its call's input, once the caller knows it.
    """

    def __init__(self, exc: str, value: str, item: Optional[int] = None) -> None:
        # (strings, not objects: the result could not travel, its repr can)
        Exception.__init__(self, exc, value)
        self.exc = exc
        self.value = value
        self.item = item

    @classmethod
    def of(cls, exc: BaseException, value: object) -> ResultEncodingError:
        """The error for ``value``, which raised ``exc`` when pickled."""
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 (a user's __repr__ may raise anything)
            text = f"<{type(value).__name__} object>"
        if len(text) > 200:
            text = text[:200] + "..."
        return cls(f"{type(exc).__name__}: {exc}", text)

    def __reduce__(self) -> tuple:
        return (type(self), (self.exc, self.value, self.item))

    def __str__(self) -> str:
        where = f" of item {self.item}" if self.item is not None else ""
        return (f"Error sending result{where}: {self.value}. Reason: {self.exc} "
                f"(results are pickled to reach the caller)")
