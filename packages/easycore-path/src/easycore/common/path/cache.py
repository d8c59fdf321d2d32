"""Map a URL to a file inside a cache directory, and never outside it.

Layout: ``<cache_dir>/<host>[_<port>]/<segment>/.../<name>``, where ``cache_dir`` is the
handler's ``get_cache_dir(protocol)``. Each part is built from the URL by

- removing ``.`` and ``..`` segments as RFC 3986 does (as the HTTP client will), and
  dropping empty segments;
- percent-decoding each segment and re-encoding every byte outside a small safe set
  (so ``%2e%2e``, ``%2f``, ``\\``, ``:``, NUL and control characters become harmless
  text; printable non-ASCII letters are kept) and escaping a trailing dot (so no part is
  ``.``, ``..``, or loses its dot on Windows);
- marking every name *we* invent with ``@``, which the encoding escapes in real names:
  ``name@<12 hex>.ext`` for a query string (URLs differing only in their query are
  different entries), ``@index`` for a URL ending in ``/``, ``<head>@<16 hex>`` for
  over-long names, and ``@<8 hex>.part`` / ``@.lock`` for temporary and lock files.

The mapping is a pure function of its arguments, memoised, so a cache hit costs a dict
look-up and a ``stat``. :func:`check_inside` adds a ``realpath`` check before anything
is written.
"""

import hashlib
import os
from functools import lru_cache
from urllib.parse import unquote_to_bytes, urlsplit

__all__ = ["check_inside", "lock_target", "url_to_cache_path"]

_SAFE_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+,=")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21}
_MAX_NAME = 160  # bytes; file systems allow 255, leave room for '@…part' suffixes
_INDEX = "@index"


@lru_cache(maxsize=4096)
def url_to_cache_path(cache_dir: str, url: str) -> str:
    """Return the cache file for ``url`` under ``cache_dir``.

    Args:
        cache_dir (str): the directory of this URL's protocol, e.g. ``<cache>/https``.
        url (str): an absolute URL such as ``https://host:8080/a/b.txt?v=2``.

    Returns:
        str: ``<cache_dir>/<host_port>/<segments>/<name>``, always strictly inside
        ``cache_dir`` by construction.

    Raises:
        ValueError: the URL has no host or an invalid port.
    """
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        raise ValueError(f"cannot cache {url!r}: the URL has no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"cannot cache {url!r}: {exc}") from None
    # '_' separates the port, so it is escaped inside the host name.
    host_dir = _encode(host.encode("utf-8", "surrogatepass")).replace("_", "%5F")
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host_dir += f"_{port}"

    raw_segments, is_dir = _remove_dot_segments(parts.path)
    names = [_encode(unquote_to_bytes(segment)) for segment in raw_segments]
    leaf = _INDEX if is_dir or not names else names.pop()
    if parts.query:
        leaf = _with_marker(leaf, _digest(parts.query, 12))
    components = [_shorten(name) for name in (host_dir, *names, leaf)]

    for name in components:  # cheap belt and braces; _encode already guarantees this
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ValueError(f"cannot cache {url!r}: unsafe path component {name!r}")
    return os.path.join(cache_dir, *components)


def check_inside(cache_dir: str, path: str, url: str) -> None:
    """Refuse ``path`` unless it resolves (symbolic links followed) inside ``cache_dir``.

    Args:
        cache_dir (str): the cache directory.
        path (str): a path from :func:`url_to_cache_path`.
        url (str): the URL, for the error message.

    Raises:
        ValueError: ``path`` would land outside ``cache_dir``.
    """
    root = os.path.realpath(cache_dir)
    target = os.path.realpath(path)
    if target == root or os.path.commonpath([root, target]) != root:
        raise ValueError(f"refusing to cache {url!r}: {path!r} resolves outside {cache_dir!r}")


def lock_target(path: str) -> str:
    """Return what to pass to ``file_lock`` for a cache file: ``<path>@`` locks as
    ``<path>@.lock``, a name no URL maps to (``<path>.lock`` could be another URL's)."""
    return path + "@"


def _remove_dot_segments(path: str):
    segments = []
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
