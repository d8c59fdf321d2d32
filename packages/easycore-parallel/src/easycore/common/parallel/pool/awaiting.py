"""How a pool's results are awaited from asyncio without blocking the event loop.

A result (``AsyncResult``) or an ``imap`` iterator's state keeps a list of
wake-ups; the coordinator thread that fills it calls them (``wake``), and each
schedules, thread-safely, the completion of the future its event loop awaits
(``until``). No thread waits on the loop's behalf and nothing polls.
"""

from __future__ import annotations

import contextlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # a coroutine runs in a loop: asyncio is loaded by then, not by a Pool
    import asyncio
    from typing import Callable, List, Optional

__all__ = ["until", "wake"]


def wake(wakeups: List[Callable[[], None]]) -> None:
    """Wake every event loop awaiting (the filling thread, after the change)."""
    for wakeup in list(wakeups):  # (a copy: awaiting tasks remove theirs meanwhile)
        wakeup()


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


async def until(wakeups: List[Callable[[], None]], ready: Callable[[], bool],
                timeout: Optional[float] = None) -> bool:
    """Await, in the running loop, until ``ready()`` or ``timeout`` seconds pass.

    Args:
        wakeups (list): where the filling thread finds this waiter.
        ready (callable): whether what is awaited is there.
        timeout (float or None): seconds (None: no limit).

    Returns:
        bool: ``ready()`` at the end.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def wakeup() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits
            loop.call_soon_threadsafe(_resolve, future)

    wakeups.append(wakeup)
    try:
        if not ready():  # (checked after joining the list: no wake-up is missed)
            await asyncio.wait({future}, timeout=timeout)
    finally:
        wakeups.remove(wakeup)
        future.cancel()
    return ready()
