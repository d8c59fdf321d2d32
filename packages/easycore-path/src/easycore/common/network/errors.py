"""The one error a failed download raises."""

from typing import Optional

from .urls import redact

__all__ = ["DownloadError"]


class DownloadError(OSError):
    """A URL could not be downloaded completely.

    Nothing is left at the destination when this is raised: downloads are written to a
    temporary file and renamed into place only once they are complete.

    A password in the URL never appears in the error: `url` and the message carry
    `http://user:***@host/...` instead.

    Attributes:
        url (str): the URL that failed (its password, if any, replaced by `***`).
        status (int or None): the HTTP status code, or None when no response arrived
            (refused connection, timeout, connection cut mid-body, deadline passed).
        reason (str): what went wrong, in words.
        transient (bool): whether trying again later may succeed (5xx, connection errors,
            timeouts).
    """

    def __init__(
        self, url: str, reason: str, status: Optional[int] = None, transient: bool = False
    ) -> None:
        self.url = redact(url)
        self.status = status
        self.reason = reason
        self.transient = transient
        where = f"HTTP {status} " if status is not None else ""
        super().__init__(f"failed to download {self.url}: {where}{reason}")

    def __reduce__(self):
        # OSError pickles its args, which are not our constructor's: keep the
        # error intact across processes (multiprocessing re-raises it in the parent).
        return (type(self), (self.url, self.reason, self.status, self.transient))
