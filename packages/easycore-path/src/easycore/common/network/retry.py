"""Retries of connections and transient answers: urllib3's `Retry`, on the session's adapter.

urllib3 retries what fails before a body arrives (a refused or reset connection, a
timeout waiting for the headers, 408/429/5xx answers) and honours `Retry-After` (429,
503). This subclass adds what is easycore's own: the pause (`backoff * 2**k`, plus up
to half as much again at random so that clients that failed together do not retry
together), the download's deadline (no pause outlives it, whatever `Retry-After` says),
and a warning on the `easycore.common.network` logger for every retry.

A body cut mid-stream is not urllib3's to retry (the response was already returned):
`.transfer` does that itself, within the same budget of attempts. A host name that does
not resolve is not retried at all: asking the resolver again gives the same answer (and
urllib3 files its error under connect timeouts).

Imported only when a transfer happens (it imports `urllib3`).
"""

import random
import socket
import time
from typing import Any, List, Optional

from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from . import deadline as _deadline
from .limits import MAX_WAIT
from .urls import redact

__all__ = ["TRANSIENT_STATUSES", "DownloadRetry", "download_retry", "resolution_failure"]

#: Answers worth asking again: the server may answer otherwise in a moment.
TRANSIENT_STATUSES = frozenset({408, 429, *range(500, 600)})


class DownloadRetry(Retry):
    """urllib3's `Retry` with easycore's pauses, deadline and log lines (see module)."""

    #: attempts made before this request, and in all, for the log lines
    attempts_before = 0
    max_attempts = 1
    log_url = ""

    def new(self, **kw: Any) -> "DownloadRetry":
        # urllib3 makes a new Retry at each increment: carry our attributes along.
        fresh = super().new(**kw)
        fresh.attempts_before = self.attempts_before
        fresh.max_attempts = self.max_attempts
        fresh.log_url = self.log_url
        return fresh

    def increment(  # type: ignore[override]  # urllib3's own signature, typed loosely
        self,
        method: Optional[str] = None,
        url: Optional[str] = None,
        response: Any = None,
        error: Optional[Exception] = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> "Retry":
        """urllib3's count of one more failure; a failed name resolution ends the request."""
        if error is not None and resolution_failure(error) is not None:
            raise MaxRetryError(_pool, url, error) from error
        return super().increment(method, url, response, error, _pool, _stacktrace)

    def get_backoff_time(self) -> float:
        """`backoff * 2**k` before the (k+1)-th retry, plus up to half of it at random."""
        k = len(self.history) - 1
        if k < 0 or self.backoff_factor <= 0:
            return 0.0
        pause = float(self.backoff_factor) * 2**k
        return min(pause + random.uniform(0.0, pause / 2), float(getattr(self, "backoff_max", 120)))

    def sleep(self, response: Optional[Any] = None) -> None:
        """Pause before the next try: `Retry-After` if the answer has one, else the
        backoff; never past the download's deadline."""
        pause: Optional[float] = None
        if response is not None and self.respect_retry_after_header:
            pause = self.get_retry_after(response)
        if pause is None:
            pause = self.get_backoff_time()
        clock = _deadline.current()
        if clock is not None:
            pause = min(pause, clock.remaining())
        pause = min(pause, MAX_WAIT)  # a Retry-After of years: no sleep takes it
        self._log(pause)
        if pause > 0:
            time.sleep(pause)

    def _log(self, pause: float) -> None:
        from .transfer import logger

        last = self.history[-1] if self.history else None
        if last is not None and last.status is not None:
            what = f"HTTP {last.status}"
        elif last is not None and last.error is not None:
            what = f"{type(last.error).__name__}: {last.error}"
        else:
            what = "error"
        logger().warning(
            "download of %s failed (%s); attempt %d of %d, retrying in %.3g s",
            redact(self.log_url),
            what,
            self.attempts_before + len(self.history),
            self.max_attempts,
            pause,
        )


def resolution_failure(error: BaseException) -> Optional[socket.gaierror]:
    """The resolver's error behind `error` (urllib3's `NameResolutionError` and its older
    `NewConnectionError` carry it as their cause or context), or None.

    Args:
        error (BaseException): what a request raised, or urllib3's reason for it.

    Returns:
        socket.gaierror or None.
    """
    seen = set()
    todo: List[Any] = [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return current
        todo += [current.__cause__, current.__context__, getattr(current, "reason", None)]
        todo += [arg for arg in getattr(current, "args", ()) if isinstance(arg, BaseException)]
    return None


def download_retry(url: str, backoff: float, attempts_before: int, max_attempts: int) -> Retry:
    """The `Retry` for one request of a download that has `max_attempts` in all, of
    which `attempts_before` are spent.

    Args:
        url (str): the URL, for the log lines.
        backoff (float): seconds before the first retry; doubles each time.
        attempts_before (int): attempts already made (bodies cut mid-stream).
        max_attempts (int): attempts in all.

    Returns:
        Retry: for `HTTPAdapter.max_retries`.
    """
    left = int(max(0, max_attempts - attempts_before - 1))
    retry = DownloadRetry(
        total=left,
        connect=left,
        read=left,
        status=left,
        other=0,  # TLS and other errors are not retried
        redirect=None,
        status_forcelist=TRANSIENT_STATUSES,
        allowed_methods=frozenset({"GET", "HEAD"}),
        backoff_factor=backoff,
        respect_retry_after_header=True,
        raise_on_status=False,  # the last answer is returned: its status names the failure
        raise_on_redirect=False,
    )
    retry.attempts_before = attempts_before
    retry.max_attempts = max_attempts
    retry.log_url = url
    return retry
