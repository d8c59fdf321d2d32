"""How long a download may take, and how long to wait for another process's download.

Both limits are arguments (`deadline=`, `lock_timeout=`) of
[`HTTPURLHandler`][easycore.common.path.HTTPURLHandler] and
[`download_file`][easycore.common.network.download_file], and fall back to environment
variables read at download time, then to defaults. `.deadline` enforces the first.
"""

import os

# threading's own constant, from the built-in module behind it (importing threading
# is not light).
from _thread import TIMEOUT_MAX
from typing import Optional, Union

__all__ = [
    "DEADLINE_ENV",
    "DEFAULT_DEADLINE",
    "LOCK_MARGIN",
    "LOCK_TIMEOUT_ENV",
    "MAX_WAIT",
    "resolve_deadline",
    "resolve_lock_timeout",
]

DEADLINE_ENV = "EASYCORE_DOWNLOAD_DEADLINE"
LOCK_TIMEOUT_ENV = "EASYCORE_DOWNLOAD_LOCK_TIMEOUT"
DEFAULT_DEADLINE = 3600.0  # seconds for one download, every attempt and pause included
# Waiting for another process's download gives up only after that download's own deadline
# (if it uses the same settings) could have passed: a little more than the deadline.
LOCK_MARGIN = 60.0
#: The longest wait the platform can make (a socket timeout, a timer, a sleep): about 292
#: years on Linux, 49 days on Windows. A longer deadline or lock timeout means none (it
#: would fail with OverflowError mid-download); a longer per-operation timeout is refused.
MAX_WAIT = float(TIMEOUT_MAX)


def resolve_deadline(value: Optional[float]) -> float:
    """The deadline in seconds: `value`, else `$EASYCORE_DOWNLOAD_DEADLINE`, else one hour.

    Args:
        value (float or None): seconds, positive; `math.inf` (or anything longer than
            the platform's longest wait, `MAX_WAIT`) turns the deadline off.

    Returns:
        float: positive seconds, possibly `math.inf`.

    Raises:
        ValueError: the value (or the variable) is not a positive number of seconds.
    """
    if value is None:
        return _from_env(DEADLINE_ENV, DEFAULT_DEADLINE)
    return _seconds("deadline", value)


def resolve_lock_timeout(value: Optional[float], deadline: float) -> float:
    """How long to wait for another process's download of the same file.

    `value`, else `$EASYCORE_DOWNLOAD_LOCK_TIMEOUT`, else `deadline` plus one minute.

    Args:
        value (float or None): seconds, positive; `math.inf` waits for ever.
        deadline (float): this download's deadline, from `resolve_deadline`.

    Returns:
        float: positive seconds, possibly `math.inf`.

    Raises:
        ValueError: the value (or the variable) is not a positive number of seconds.
    """
    if value is None:
        return _from_env(LOCK_TIMEOUT_ENV, deadline + LOCK_MARGIN)
    return _seconds("lock_timeout", value)


def _from_env(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"${name} must be a number of seconds, got {text!r}") from None
    return _seconds(f"${name}", value)


def _seconds(what: str, value: Union[int, float]) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{what} must be positive seconds (math.inf for none), got {value!r}")
    # No clock can wait that long (a timer would fail with OverflowError): it means none.
    return float("inf") if value > MAX_WAIT else float(value)
