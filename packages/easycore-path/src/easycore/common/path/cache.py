"""Map a URL to a file inside a cache directory, and never outside it.

Layout: `<cache_dir>/<host>[_<port>]/<segment>@/.../<name>`, where `cache_dir` is the
handler's `get_cache_dir(<protocol>)`. Every distinct URL gets its own entry, and two
spellings of one URL share it. Each part is built from the URL by

- percent-decoding only what RFC 3986 lets a client decode without changing the URL:
  unreserved characters (`%41` is `A`) and characters a client must encode anyway (a
  space, non-ASCII letters, `%22`...). A reserved character and its encoding stay apart
  (`/a+b` and `/a%2Bb`, `:` and `%3A`, `@` and `%40` are different URLs), as does `%25`;
- removing `.` and `..` segments as RFC 3986 does (as the HTTP client will), keeping
  empty segments (`/d//e` and `/d/e` are different keys to an object store);
- re-encoding every byte outside a small safe set as `%XX` (so `\\`, `:`, NUL and control
  characters become harmless text; printable non-ASCII letters are kept; a `%` that
  stayed encoded becomes `%25`), and escaping a trailing dot (so no part is `.`, `..`, or
  loses its dot on Windows);
- ending every directory below the host with `@`, which no file name has: `/pa` (a file
  `pa`) and `/pa/b` (a file `b` in the directory `pa@`) can both be cached, as can `/r`
  and `/r/` (`r@/@index`);
- marking every name *we* invent with `@`, which the encoding escapes in real names:
  `name@<16 hex>.ext` for a URL with a query string or credentials, `@index` for a URL
  ending in `/`, `<head>@<16 hex>` for over-long names, `@<32 hex>@` for the directory of
  an over-long path, `@<8 hex>.part` / `@.lock` for temporary and lock files, and
  `@key.<uid>` for the key below.

Everything that changes what the server answers is part of the identity: scheme (one
directory per protocol), host, port, path, query string, and the credentials of
`user:password@`. The query and the credentials are never written into a name: they are
hashed with a secret key of the user's (see `.cache_key`), so a name reveals nothing
guessable. The request carries nothing else that could change the answer (no cookies, no
`~/.netrc`, fixed headers; see `easycore.common.network.session`).

The mapping is memoised, so a cache hit costs a dict look-up and a few `lstat`s.
`check_inside` adds a `realpath` check before anything is written, and `trusted_entry`
decides whether what is found at an entry may be served (see its doc).
"""

import hashlib
import os
import stat
from functools import lru_cache
from typing import List, Tuple
from urllib.parse import urlsplit

from easycore.common.network.names import lock_target
from easycore.common.network.urls import credentials, redact

from .cache_key import keyed_digest

__all__ = ["check_inside", "lock_target", "trusted_entry", "url_to_cache_path"]

_SAFE_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+,=")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21}
_MAX_NAME = 160  # bytes; file systems allow 255, leave room for '@…part' suffixes
# bytes below cache_dir; PATH_MAX is 4096 on Linux, 1024 on macOS: leave room for cache_dir
_MAX_RELATIVE = 640
_INDEX = "@index"
_DIR_MARK = "@"
# RFC 3986: a client may decode these (and must encode the rest of ASCII's printable
# characters that are not reserved, so decoding those changes nothing either).
_RESERVED = frozenset(b":/?#[]@!$&'()*+,;=%")
_HEX = frozenset(b"0123456789abcdefABCDEF")


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

    raw_segments, is_dir = _remove_dot_segments(
        [_normalise(segment) for segment in parts.path.split("/")]
    )
    names = [_encode(segment) for segment in raw_segments]
    leaf = _INDEX if is_dir or not names else names.pop()
    auth = credentials(url)
    if parts.query or auth:
        identity = repr((parts.query, auth))  # unambiguous, whatever the parts contain
        leaf = _with_marker(leaf, keyed_digest(cache_dir, identity, 16))
    # Directories end with "@", which no file name does: "/pa" and "/pa/b" both fit.
    names = [_shorten(name) + _DIR_MARK for name in names]
    host_dir, leaf = _shorten(host_dir), _shorten(leaf)
    relative = os.path.join(host_dir, *names, leaf)
    if len(relative.encode("utf-8", "surrogateescape")) > _MAX_RELATIVE:
        # Deep paths would pass the OS's limit: one directory named by a digest instead.
        names = ["@" + _digest("/".join(names), 32) + _DIR_MARK]
    components = [host_dir, *names, leaf]

    for name in components:  # cheap belt and braces; _encode already guarantees this
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ValueError(f"cannot cache {redact(url)!r}: unsafe path component {name!r}")
    return os.path.join(cache_dir, *components)


def check_inside(cache_dir: str, path: str, url: str) -> None:
    """Refuse `path` unless its directory resolves (symbolic links followed) inside
    `cache_dir`.

    The entry itself is not followed: a download replaces whatever is at `path` (a link
    included) by renaming a new file over it, never writing through it.

    Args:
        cache_dir (str): the cache directory.
        path (str): a path from `url_to_cache_path`.
        url (str): the URL, for the error message.

    Raises:
        ValueError: `path` would land outside `cache_dir`.
    """
    root = os.path.realpath(cache_dir)
    directory, name = os.path.split(path)
    target = os.path.join(os.path.realpath(directory), name)
    if target == root or os.path.commonpath([root, target]) != root:
        raise ValueError(
            f"refusing to cache {redact(url)!r}: {path!r} resolves outside {cache_dir!r}"
        )


def trusted_entry(cache_dir: str, path: str) -> bool:
    """Whether the file at `path` may be served as a cache hit.

    Only a regular file, not a symbolic link, owned by the user reading it (or by root),
    whose real path (every link above it followed) stays inside `cache_dir`. In a shared
    cache, anything another user planted (a link to `/victim/secret.txt`, a file of
    theirs) is not served: the URL is downloaded again over it, or the download fails
    clearly if it cannot be replaced.

    Args:
        cache_dir (str): the cache directory `path` belongs to.
        path (str): a path from `url_to_cache_path`.

    Returns:
        bool: True if the entry may be served.
    """
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    getuid = getattr(os, "getuid", None)
    if getuid is not None and info.st_uid not in (getuid(), 0):
        return False
    root = os.path.realpath(cache_dir)
    target = os.path.realpath(path)
    return target != root and os.path.commonpath([root, target]) == root


def _normalise(segment: str) -> bytes:
    """One path segment as bytes, with only the escapes that change nothing decoded.

    `%XX` of a reserved character (or of `%`) stays the three characters `%XX` (upper-case
    hex), written as the byte 0 followed by them so that `_encode` tells it from the
    character itself; every other `%XX` becomes its byte. A `%` without two hex digits
    is a literal `%`, which clients send as `%25`.
    """
    raw = segment.encode("utf-8", "surrogatepass")
    out = bytearray()
    i = 0
    while i < len(raw):
        byte = raw[i]
        if byte == 0x25:  # '%'
            if i + 2 < len(raw) and raw[i + 1] in _HEX and raw[i + 2] in _HEX:
                value = int(raw[i + 1 : i + 3], 16)
                i += 3
            else:
                value = 0x25
                i += 1
            if value in _RESERVED:
                out += b"\0%%%02X" % value
            else:
                out.append(value)
            continue
        out.append(byte)
        i += 1
    return bytes(out)


def _remove_dot_segments(segments: List[bytes]) -> Tuple[List[bytes], bool]:
    """RFC 3986 5.2.4 on a path split at "/", keeping empty segments (`//` is a key)."""
    if segments and segments[0] == b"":
        segments = segments[1:]  # the empty text before the path's leading "/"
    out: List[bytes] = []
    for segment in segments:
        if segment == b".":
            continue
        if segment == b"..":
            if out:
                out.pop()
            continue
        out.append(segment)
    is_dir = not segments or segments[-1] in (b"", b".", b"..")
    if out and out[-1] == b"" and segments and segments[-1] == b"":
        out.pop()  # the trailing "/" names the directory's index, not an empty name
    return out, is_dir


def _encode(raw: bytes) -> str:
    # A kept escape arrives as "\0%XX" (see _normalise) and is written "%25XX"; the
    # character itself (and a real NUL, "%00") is written "%XX": never the same.
    text = raw.decode("utf-8", "surrogateescape")
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith("\0%", i):
            out.append("%25" + text[i + 2 : i + 4])
            i += 4
            continue
        i += 1
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
