"""Map a URL to a file inside a cache directory, and never outside it.

Layout: `<cache_dir>/<host>[_<port>]/<segment>/.../<name>`, where `cache_dir` is the
handler's `get_cache_dir(<protocol>)`. Each part is built from the URL by

- removing `.` and `..` segments as RFC 3986 does (as the HTTP client will), and
  dropping empty segments;
- percent-decoding each segment and re-encoding every byte outside a small safe set
  (so `%2e%2e`, `%2f`, `\\`, `:`, NUL and control characters become harmless
  text; printable non-ASCII letters are kept) and escaping a trailing dot (so no part is
  `.`, `..`, or loses its dot on Windows);
- marking every name *we* invent with `@`, which the encoding escapes in real names:
  `name@<16 hex>.ext` for a URL with a query string or credentials, `@index` for a URL
  ending in `/`, `<head>@<16 hex>` for over-long names, `@<32 hex>` for the directories of
  an over-long path, `@<8 hex>.part` / `@.lock` for temporary and lock files, and
  `@key.<uid>` for the key below.

Everything that changes what the server answers is part of the identity: scheme (one
directory per protocol), host, port, path, query string, and the credentials of
`user:password@`. The query and the credentials are never written into a name: they are
hashed with a secret key of the user's (see `.cache_key`), so a name reveals nothing
guessable. The request carries nothing else that could change the answer (no cookies, no
`~/.netrc`, fixed headers; see `easycore.common.network.session`).

The mapping is memoised, so a cache hit costs a dict look-up and a `stat`.
`check_inside` adds a `realpath` check before anything is written.
"""

import hashlib
import os
from functools import lru_cache
from typing import List, Tuple
from urllib.parse import unquote_to_bytes, urlsplit

from easycore.common.network.urls import credentials, redact

from .cache_key import keyed_digest

__all__ = ["check_inside", "lock_target", "url_to_cache_path"]

_SAFE_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+,=")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21}
_MAX_NAME = 160  # bytes; file systems allow 255, leave room for '@…part' suffixes
# bytes below cache_dir; PATH_MAX is 4096 on Linux, 1024 on macOS: leave room for cache_dir
_MAX_RELATIVE = 640
_INDEX = "@index"


@lru_cache(maxsize=4096)
def url_to_cache_path(cache_dir: str, url: str) -> str:
    """Return the cache file for `url` under `cache_dir`.

    Args:
        cache_dir (str): the directory of this URL's protocol, e.g. `<cache>/https`.
        url (str): an absolute URL such as `https://host:8080/a/b.txt?v=2`.

    Returns:
        str: `<cache_dir>/<host_port>/<segments>/<name>`, always strictly inside
        `cache_dir` by construction.

    Raises:
        ValueError: the URL has no host or an invalid port.
        PermissionError: the URL needs the user's key and its file is not safe.
    """
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        raise ValueError(f"cannot cache {redact(url)!r}: the URL has no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"cannot cache {redact(url)!r}: {exc}") from None
    # '_' separates the port, so it is escaped inside the host name.
    host_dir = _encode(host.encode("utf-8", "surrogatepass")).replace("_", "%5F")
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host_dir += f"_{port}"

    raw_segments, is_dir = _remove_dot_segments(parts.path)
    names = [_encode(unquote_to_bytes(segment)) for segment in raw_segments]
    leaf = _INDEX if is_dir or not names else names.pop()
    auth = credentials(url)
    if parts.query or auth:
        identity = repr((parts.query, auth))  # unambiguous, whatever the parts contain
        leaf = _with_marker(leaf, keyed_digest(cache_dir, identity, 16))
    names = [_shorten(name) for name in names]
    host_dir, leaf = _shorten(host_dir), _shorten(leaf)
    relative = os.path.join(host_dir, *names, leaf)
    if len(relative.encode("utf-8", "surrogateescape")) > _MAX_RELATIVE:
        # Deep paths would pass the OS's limit: one directory named by a digest instead.
        names = ["@" + _digest("/".join(names), 32)]
    components = [host_dir, *names, leaf]

    for name in components:  # cheap belt and braces; _encode already guarantees this
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ValueError(f"cannot cache {redact(url)!r}: unsafe path component {name!r}")
    return os.path.join(cache_dir, *components)


def check_inside(cache_dir: str, path: str, url: str) -> None:
    """Refuse `path` unless it resolves (symbolic links followed) inside `cache_dir`.

    Args:
        cache_dir (str): the cache directory.
        path (str): a path from `url_to_cache_path`.
        url (str): the URL, for the error message.

    Raises:
        ValueError: `path` would land outside `cache_dir`.
    """
    root = os.path.realpath(cache_dir)
    target = os.path.realpath(path)
    if target == root or os.path.commonpath([root, target]) != root:
        raise ValueError(
            f"refusing to cache {redact(url)!r}: {path!r} resolves outside {cache_dir!r}"
        )


def lock_target(path: str) -> str:
    """Return what to pass to `file_lock` for a cache file: `<path>@` locks as
    `<path>@.lock`, a name no URL maps to (`<path>.lock` could be another URL's)."""
    return path + "@"


def _remove_dot_segments(path: str) -> Tuple[List[str], bool]:
    segments: List[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    last = path.rsplit("/", 1)[-1]
    return segments, last in ("", ".", "..")


def _encode(raw: bytes) -> str:
    text = raw.decode("utf-8", "surrogateescape")
    out = []
    for ch in text:
        if ch in _SAFE_ASCII or (ch >= "\x80" and ch.isprintable() and not _is_surrogate(ch)):
            out.append(ch)
        else:
            data = ch.encode("utf-8", "surrogateescape")
            out.extend(f"%{byte:02X}" for byte in data)
    if out and out[-1] == ".":
        out[-1] = "%2E"
    return "".join(out)


def _is_surrogate(ch: str) -> bool:
    return "\ud800" <= ch <= "\udfff"


def _with_marker(name: str, marker: str) -> str:
    # Before the extension (counted from the first dot that does not start the name), so
    # "archive.tar.gz?v=2" stays a ".tar.gz": "archive@<hash>.tar.gz".
    start = len(name) - len(name.lstrip("."))
    dot = name.find(".", start)
    if dot < 0:
        return f"{name}@{marker}"
    return f"{name[:dot]}@{marker}{name[dot:]}"


def _shorten(name: str) -> str:
    if len(name.encode("utf-8", "surrogateescape")) <= _MAX_NAME:
        return name
    tail = name[name.rfind(".") :] if "." in name[1:] else ""
    if len(tail) > 24:
        tail = ""
    head = name.encode("utf-8", "surrogateescape")[:96].decode("utf-8", "ignore")
    return f"{head}@{_digest(name, 16)}{tail}"


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]
