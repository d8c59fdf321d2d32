"""easycore.common.path: local paths, URLs and redirected prefixes behind one API.

Importing this package is cheap: `requests` and `tqdm` are imported only when a URL
is actually downloaded, and fsspec only when an object store is first used.
"""

from easycore.common.network.errors import DownloadError

from ._version import __version__
from .fsspec_handler import FsspecPathHandler
from .http import HTTPURLHandler
from .iopath_spellings import PathManagerFactory
from .keywords import UnknownArgumentError
from .lazy_path import LazyPath
from .lock import file_lock
from .manager import PathManager
from .native import NativePathHandler
from .path_handler import PathHandler
from .redirect import RedirectPathHandler

__all__ = [
    "DownloadError",
    "FsspecPathHandler",
    "HTTPURLHandler",
    "LazyPath",
    "NativePathHandler",
    "PathHandler",
    "PathManager",
    "PathManagerFactory",
    "RedirectPathHandler",
    "UnknownArgumentError",
    "__version__",
    "file_lock",
]
