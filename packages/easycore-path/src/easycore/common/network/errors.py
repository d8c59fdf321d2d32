"""The one error a failed download raises."""

from typing import Optional

__all__ = ["DownloadError"]


class DownloadError(OSError):
    """A URL could not be downloaded completely.

    Nothing is left at the destination when this is raised: downloads are written to a
    temporary file and renamed into place only once they are complete.

    Attributes:
        url (str): the URL that failed.
        status (int or None): the HTTP status code, or None when no response arrived
            (refused connection, timeout, connection cut mid-body).
        transient (bool): whether trying again later may succeed (5xx, connection errors).
    """

    def __init__(
        self, url: str, reason: str, status: Optional[int] = None, transient: bool = False
    ) -> None:
        self.url = url
        self.status = status
        self.reason = reason
        self.transient = transient
        where = f"HTTP {status} " if status is not None else ""
        super().__init__(f"failed to download {url}: {where}{reason}")

    def __reduce__(self):
        # OSError pickles its args, which are not our constructor's: keep the
        # error intact across processes (multiprocessing re-raises it in the parent).
        return (type(self), (self.url, self.reason, self.status, self.transient))
