"""Tutorial 1.5, "Path manage tools", end to end on local data.

Local files, a URL served by a loopback server (downloaded once, then read from the
cache), redirected prefixes and a custom handler, all through ``PathManager``.

Run it in a scratch directory with a scratch cache:

    cd $(mktemp -d) && EASYCORE_CACHE=$PWD/cache python examples/40_path_tutorial.py
"""

import io
import os
import sys
import time
from pathlib import Path

from _path_server import serve_directory

from easycore.common.path import (
    DownloadError,
    HTTPURLHandler,
    PathManager,
    RedirectPathHandler,
)


def section(title: str) -> None:
    print(f"\n=== {title} ===")


def show(label: str, value) -> None:
    print(f"  {label:<44} {value}")


def manage_local_paths() -> None:
    section("1.5.1 Manage local path")
    # makedirs, similar to `os.makedirs(path, exist_ok=True)`.
    PathManager.makedirs("path/to/dir")
    with PathManager.open("path/to/file", "w", encoding="utf-8") as f:
        f.write("Hello, easycore!\n")

    # open a local path
    with PathManager.open("path/to/file", "r", encoding="utf-8") as f:
        show("open('path/to/file').read()", repr(f.read()))

    # exists, isfile and isdir, similar to `os.path`.
    show("exists('path/to/file')", PathManager.exists("path/to/file"))
    show("isfile('path/to/file')", PathManager.isfile("path/to/file"))
    show("isdir('path/to/dir')", PathManager.isdir("path/to/dir"))

    # copy: atomic, and never over an existing file unless overwrite=True.
    PathManager.copy("path/to/file", "path/to/file2")
    show("after copy, listdir('path/to')", sorted(PathManager.listdir("path/to")))
    try:
        PathManager.copy("path/to/file", "path/to/file2")
    except FileExistsError as err:
        show("copy again without overwrite", f"FileExistsError: {err.filename}")
    PathManager.copy("path/to/file", "path/to/file2", overwrite=True)

    # remove a file, similar to `os.remove`; remove directories, like `os.removedirs`.
    PathManager.remove("path/to/file2")
    PathManager.removedirs("path/to/dir")
    show("after remove and removedirs", sorted(PathManager.listdir("path/to")))


def manage_remote_urls(base_url: str) -> None:
    section("1.5.2 Manage remote URL")
    print(f"  cache directory: $EASYCORE_CACHE = {os.environ.get('EASYCORE_CACHE')}")
    url = f"{base_url}/yyy.txt"

    # open a remote path
    with PathManager.open(url, "r", encoding="utf-8") as f:
        show(f"open({url!r})", repr(f.read()))

    # get local path: downloaded once (with a progress bar), then served from disk.
    weights = f"{base_url}/models/weights.bin"
    start = time.perf_counter()
    local_path = PathManager.get_local_path(weights)
    first = time.perf_counter() - start
    start = time.perf_counter()
    PathManager.get_local_path(weights)
    again = time.perf_counter() - start
    show("get_local_path(.../models/weights.bin)", os.path.relpath(local_path))
    show("size", f"{os.path.getsize(local_path) / 2**20:.1f} MiB")
    show(
        "first call (download) / second call (cache)",
        f"{first * 1e3:.1f} ms / {again * 1e6:.0f} us",
    )

    # copy remote file to local path.
    PathManager.makedirs("a/local")
    PathManager.copy(url, "a/local/path")
    show("copy(url, 'a/local/path') -> contents", repr(Path("a/local/path").read_text()))

    # failures name the URL and status, and leave nothing half-written behind.
    try:
        PathManager.get_local_path(f"{base_url}/missing.bin")
    except DownloadError as err:
        show("get_local_path(.../missing.bin)", f"DownloadError (status {err.status})")
        print(f"    {err}")
    # remote paths are read-only.
    try:
        PathManager.remove(url)
    except PermissionError as err:
        show("remove(url)", f"PermissionError: {err.strerror}")


def redirect_paths(base_url: str) -> None:
    section("1.5.3 Redirect path")
    # a prefix for files on a server
    PathManager.register(RedirectPathHandler("easycore://", f"{base_url}/download/"))
    with PathManager.open("easycore://yyy/zzz.txt", encoding="utf-8") as f:
        show("open('easycore://yyy/zzz.txt')", repr(f.read()))

    # a prefix for datasets on local disks; the longest prefix wins.
    for name in ("MNIST", "CIFAR100"):
        PathManager.makedirs(f"disks/{name}")
        with PathManager.open(f"disks/{name}/README", "w") as f:
            f.write(f"the {name} dataset\n")
    PathManager.register(RedirectPathHandler("dataset://", os.path.abspath("disks") + os.sep))
    PathManager.register(
        RedirectPathHandler("dataset://MNIST/", os.path.abspath("disks/MNIST") + os.sep)
    )
    show("listdir('dataset://')", sorted(PathManager.listdir("dataset://")))
    with PathManager.open("dataset://MNIST/README") as f:
        show("open('dataset://MNIST/README')", repr(f.read()))
    show(
        "get_local_path('dataset://CIFAR100/README')",
        os.path.relpath(PathManager.get_local_path("dataset://CIFAR100/README")),
    )


def custom_handler(base_url: str) -> None:
    section("1.5.4 Custom PathHandler")

    # custom PathHandler
    class NewHTTPURLHandler(HTTPURLHandler):
        def get_cache_dir(self, protocol):
            cache_dir = os.path.expanduser(os.getenv("NEW_CACHE", "~/.easycore/cache"))
            if protocol is not None:
                cache_dir = os.path.join(cache_dir, protocol)
            return cache_dir

        def get_support_prefixes(self):
            return ["http://", "https://"]

    # register custom path handler; override=True replaces the http and https handler.
    PathManager.register(NewHTTPURLHandler(), override=True)

    # Now, you can set cache directory through `$NEW_CACHE`.
    os.environ["NEW_CACHE"] = os.path.abspath("new_cache")
    local_path = PathManager.get_local_path(f"{base_url}/yyy.txt")
    show("with $NEW_CACHE, get_local_path(.../yyy.txt)", os.path.relpath(local_path))


def make_site(root: str) -> None:
    os.makedirs(os.path.join(root, "models"))
    os.makedirs(os.path.join(root, "download", "yyy"))
    with open(os.path.join(root, "yyy.txt"), "w") as f:
        f.write("Hello from the loopback server!\n")
    with open(os.path.join(root, "download", "yyy", "zzz.txt"), "w") as f:
        f.write("zzz, reached through easycore://\n")
    with open(os.path.join(root, "models", "weights.bin"), "wb") as f:
        f.write(os.urandom(4 * 2**20))


def main() -> None:
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # keep prints and progress bars in order
    os.environ.setdefault("EASYCORE_CACHE", os.path.abspath("cache"))
    manage_local_paths()
    make_site("site")
    with serve_directory(os.path.abspath("site")) as base_url:
        print(f"\n(serving ./site at {base_url})")
        manage_remote_urls(base_url)
        redirect_paths(base_url)
        custom_handler(base_url)
    print("\nDone.")


if __name__ == "__main__":
    main()
