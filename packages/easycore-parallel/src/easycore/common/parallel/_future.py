"""The ``concurrent.futures.Future`` that easycore hands out: a Ctrl-C ends its waits.

The standard library's ``result()`` and ``exception()`` wait on a lock that the
thread filling the future releases (a pool's coordinator, a service's reader).
A Ctrl-C the kernel handed to that thread rather than to the waiting main
thread raised nothing until the work ended; this class waits as
[`interrupts.sliced`][easycore.common.parallel._os.interrupts.sliced] does.
Everything else is the standard library's.
"""

from __future__ import annotations

import concurrent.futures

from ._hints import TypeVar
from ._os import interrupts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

__all__ = ["Future"]

T = TypeVar("T")


class Future(concurrent.futures.Future[T]):
    """``concurrent.futures.Future`` whose ``result`` and ``exception`` a Ctrl-C interrupts."""

    def result(self, timeout: Optional[float] = None) -> T:
        """As ``concurrent.futures.Future.result``."""
        # Its end, or the timeout: the standard library's own call then raises
        # what it raises (the value, the error, TimeoutError, CancelledError).
        self.done_within(timeout)
        return super().result(0)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """As ``concurrent.futures.Future.exception``."""
        self.done_within(timeout)
        return super().exception(0)

    def done_within(self, timeout: Optional[float] = None) -> bool:
        """Wait for the future's end (its result, its error or its cancellation), as
        ``concurrent.futures.wait`` does, but a Ctrl-C interrupts it.

        Args:
            timeout (float or None): seconds; None waits for ever.

        Returns:
            bool: whether it ended within ``timeout``.
        """
        return self.done() or interrupts.sliced(
            lambda seconds: concurrent.futures.wait((self,), seconds).done, timeout
        )
