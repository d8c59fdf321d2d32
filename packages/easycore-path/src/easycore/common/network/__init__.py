"""easycore.common.network: download a URL to disk, completely or not at all."""

from .download import download_file
from .errors import DownloadError

__all__ = ["DownloadError", "download_file"]
