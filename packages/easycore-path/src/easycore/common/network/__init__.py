"""easycore.common.network: download a URL to disk, completely or not at all.

[`download_file`][easycore.common.network.download_file] stores the bytes the server sent
(never decompressed), atomically, once however many processes ask, within a deadline
(`deadline=` or `$EASYCORE_DOWNLOAD_DEADLINE`, one hour by default). Retries are logged as
warnings on the `easycore.common.network` logger of the standard `logging` module; the
library configures no handler.
"""

from .download import download_file
from .errors import DownloadError

__all__ = ["DownloadError", "download_file"]
