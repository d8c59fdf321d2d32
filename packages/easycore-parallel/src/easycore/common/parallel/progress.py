"""The optional progress bar of a runner call (tqdm).

Updated once per chunk from the consuming thread, so it costs nothing per
item. tqdm is imported only when a bar is asked for.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Optional, Union

__all__ = ["Progress", "ProgressOption"]

#: ``False`` (no bar), ``True`` (default bar) or a dict of ``tqdm`` keyword arguments.
if TYPE_CHECKING:
    ProgressOption = Union[bool, Mapping[str, Any]]
else:  # the same union, made without typing
    ProgressOption = bool | Mapping


class Progress:
    """A tqdm bar counting consumed items, or nothing at all."""

    #: seconds between two updates of the live bottleneck (insights)
    postfix_interval = 0.5

    def __init__(self, option: ProgressOption, total: Optional[int], desc: str,
                 insights: Optional[Any] = None) -> None:
        """
        Args:
            option (bool or dict): False for no bar, True for the default bar,
                or tqdm keyword arguments (``file``, ``desc``, ``mininterval`` ...).
            total (int or None): number of items when the input has a length.
            desc (str): default label, the runner's class name.
            insights (Recorder or None): with insights on, the bar's postfix
                shows the live bottleneck (e.g. ``consumer 95%``).
        """
        self._bar = None
        self._insights = insights
        self._postfix_at = 0.0
        if not option:
            return
        from tqdm import tqdm

        class _Bar(tqdm):
            # tqdm's monitor thread outlives the bar; a runner promises not to
            # leave threads behind, and per-chunk updates make it unnecessary.
            monitor_interval = 0

        kwargs: dict = {"total": total, "desc": desc, "unit": "item", "dynamic_ncols": True}
        if isinstance(option, Mapping):
            kwargs.update(option)
        self._bar = _Bar(**kwargs)

    def update(self, n: int) -> None:
        """Count ``n`` more consumed items."""
        if self._bar is not None:
            self._bar.update(n)
            if self._insights is not None:
                now = time.perf_counter()
                if now - self._postfix_at >= self.postfix_interval:
                    self._postfix_at = now
                    self._bar.set_postfix_str(self._insights.live(), refresh=False)

    def close(self) -> None:
        """Finish the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
