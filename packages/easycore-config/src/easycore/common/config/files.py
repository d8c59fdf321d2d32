"""Config files on disk: bounded, decoded reads and atomic writes.

Reading names the file in every error: a missing file is a
`ConfigFileNotFoundError`, text that is not in the encoding a
`ConfigDecodeError`, a regular file larger than `MAX_STREAM_BYTES` is refused
before it is read, and a FIFO or device is read up to that many bytes.
Writing replaces a regular file atomically (a temporary file in the same
directory, renamed into place), follows symlinks to their target, refuses
anything that is not a regular file, and creates files with the mode `open()`
would give without touching the process umask. Where the directory refuses a
new file but the file itself may be written (another user's folder), the file
is rewritten in place, as `open(path, "w")` would. Errors name the target,
never the temporary file.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat

from .errors import ConfigDecodeError, ConfigError, ConfigFileNotFoundError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = [
    "MAX_STREAM_BYTES",
    "atomic_write",
    "check_size",
    "describe_mode",
    "is_binary",
    "read_text",
    "refuse_url",
    "url_scheme",
]

#: Most bytes a config may have: a larger regular file is refused before it is
#: read, a stream (a FIFO, a device) once it has given that much.
MAX_STREAM_BYTES = 64 * 2**20


def read_text(path: str, encoding: str) -> str:
    """The text of the config file at `path`.

    Raises:
        ConfigFileNotFoundError: no file there.
        ConfigDecodeError: the bytes are not text in `encoding`.
        ConfigError: a URL, or a stream that gave more than `MAX_STREAM_BYTES`.
        IsADirectoryError: a directory (any `OSError` of opening names the file).
    """
    refuse_url(path, "open")
    return decode(_read_bytes(path), encoding, path)


def url_scheme(path: str) -> str | None:
    """The scheme of `path` if it starts with `scheme://` (one letter is a drive), else None."""
    head, sep, _ = path.partition("://")
    if not sep or len(head) < 2 or not (head[0].isascii() and head[0].isalpha()):
        return None
    if all(c.isascii() and (c.isalnum() or c in "+.-") for c in head):
        return head
    return None


def refuse_url(path: str, action: str, what: str = "") -> None:
    """Refuse a URL where a local file is needed, naming it as given.

    Without this, `os.path.abspath("memory://b/x.yaml")` is `<cwd>/memory:/b/x.yaml`,
    and the error names a file nobody asked for.

    Raises:
        ConfigError: `path` is a URL (`scheme://...`).
    """
    if url_scheme(path) is None:
        return
    raise ConfigError(
        f"cannot {action} {what}{path!r}: configs are read and written as local files; "
        "for a URL, open it with easycore.common.path.PathManager.open() and pass the "
        "file object, or pass PathManager.get_local_path(url)"
    )


class ConfigTooLargeError(ConfigError):
    """A config whose text is larger than `open` reads; `size` holds its bytes."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


def check_size(size: int, where: str) -> None:
    """Refuse to write a config larger than `CfgNode.open` reads.

    Args:
        size (int): bytes the config's text takes.
        where (str): what is being written, for the message.

    Raises:
        ConfigTooLargeError: more than `MAX_STREAM_BYTES` (a `ConfigError`).
    """
    if size > MAX_STREAM_BYTES:
        raise ConfigTooLargeError(
            f"cannot save {where}: its YAML text is {size:,} bytes, more than the "
            f"{MAX_STREAM_BYTES // 2**20} MiB limit of configs (CfgNode.open refuses larger "
            "files); keep large data in a file of its own and its path in the config",
            size,
        )


def is_binary(stream: Any) -> bool:
    """Whether a file object takes bytes rather than text."""
    return isinstance(stream, (io.RawIOBase, io.BufferedIOBase)) or "b" in getattr(
        stream, "mode", ""
    )


def describe_mode(mode: int) -> str:
    """What a file is, in words, from its `st_mode`."""
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "regular file" if stat.S_ISREG(mode) else "special file"


def _read_bytes(path: str) -> bytes:
    try:
        # Entered by `with f:` just below; only the open is in this try, so that a
        # missing file, and no error of reading it, is a ConfigFileNotFoundError.
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        raise ConfigFileNotFoundError(
            errno.ENOENT, f"config file {path!r} not found", path
        ) from None
    except OSError as exc:  # a directory, no permission, a loop of links ...
        raise _reading_error(exc, path) from None
    with f:
        st = os.fstat(f.fileno())
        mode = st.st_mode
        if stat.S_ISREG(mode) and st.st_size > MAX_STREAM_BYTES:
            # Refused before reading: a 1 GB file would cost 2 GB of memory first.
            raise ConfigError(
                f"{path}: a file of {st.st_size:,} bytes, more than "
                f"{MAX_STREAM_BYTES // 2**20} MiB; refusing to read a config that large"
            )
        # A FIFO or a device may never end (/dev/zero), and a regular file may
        # grow while it is read: read a bounded amount.
        data = f.read(MAX_STREAM_BYTES + 1)
    if len(data) > MAX_STREAM_BYTES:
        raise ConfigError(
            f"{path}: a {describe_mode(mode)} that gave more than {MAX_STREAM_BYTES // 2**20} MiB; "
            "refusing to read a config that large"
        )
    return data


def _reading_error(exc: OSError, path: str) -> OSError:
    """The same kind of error, saying in words that it is the config file `path`."""
    why = "it is a directory, not a YAML file" if exc.errno == errno.EISDIR else exc.strerror
    return _naming(exc, path, f"cannot read config file {path!r}: {why}")


def decode(data: bytes, encoding: str, source: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise decode_error(exc, source) from None


def decode_error(exc: UnicodeDecodeError, source: str) -> ConfigDecodeError:
    line = exc.object.count(b"\n", 0, exc.start) + 1
    message = (
        f"{source}: not valid {exc.encoding} text (line {line}, byte {exc.start}: "
        f"{exc.reason}); pass encoding=... if the file uses another one"
    )
    return ConfigDecodeError(message, exc.encoding, exc.object, exc.start, exc.end, exc.reason)


def atomic_write(path: str, data: bytes) -> None:
    """Replace the regular file at `path` (or a symlink's target) by `data`, atomically."""
    refuse_url(path, "save to")
    try:
        st: os.stat_result | None = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        hint = "" if stat.S_ISDIR(st.st_mode) else "; pass a file object to write to it"
        kind = describe_mode(st.st_mode)
        raise ConfigError(f"cannot save to {path!r}: it is a {kind}, not a regular file{hint}")
    # Renaming onto a symlink would replace the link; write its target instead.
    target = _link_target(path)
    directory, name = os.path.split(target)
    try:
        fd, tmp = _create_temp(directory, name)
    except OSError as exc:
        if st is not None and exc.errno in (errno.EACCES, errno.EPERM) and _writable(target):
            _write_in_place(target, data, path)
            return
        raise _naming(exc, path) from None
    try:
        try:
            if st is not None and hasattr(os, "fchmod"):
                os.fchmod(fd, stat.S_IMODE(st.st_mode))  # keep the mode of the file replaced
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise


def _naming(exc: OSError, path: str, message: str | None = None) -> OSError:
    """The same error, naming the file the caller asked for (not a temporary one)."""
    if exc.errno is None:
        return exc
    try:
        return type(exc)(exc.errno, message or f"cannot save {path!r}: {exc.strerror}", path)
    except TypeError:  # pragma: no cover - an OSError subclass with another signature
        return exc


def _writable(path: str) -> bool:
    return os.access(path, os.W_OK, effective_ids=os.access in os.supports_effective_ids)


def _write_in_place(target: str, data: bytes, path: str) -> None:
    """Rewrite an existing file through its own inode (not atomic: the folder allows no other way).

    The new bytes are written over the old ones before the file is cut to
    their length, so a failure part-way leaves the new text's start over the old
    text's end, never an empty file.
    """
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
    except OSError as exc:
        raise _naming(exc, path) from None


def _link_target(path: str) -> str:
    """The absolute path that `path` names once its symlinks are followed.

    Links through `/proc` (`/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`) name
    an open file of the process, not a place: renaming a new file there would
    not write to the stream, so they are refused.
    """
    given, path = path, os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on nested symlinks
        if not os.path.islink(path):
            return path
        directory, name = os.path.split(path)
        directory = os.path.realpath(directory)
        if directory == "/proc" or directory.startswith("/proc/"):
            raise ConfigError(
                f"cannot save to {given!r}: it names an open file of the process (such as "
                "/dev/stdout), not a place on disk; pass a file object to write to it"
            )
        path = os.path.join(directory, os.readlink(os.path.join(directory, name)))
    raise ConfigError(f"cannot save to {given!r}: too many levels of symbolic links")


def _create_temp(directory: str, name: str) -> tuple[int, str]:
    """Create a new file next to `name`, with the mode a plain `open()` would give.

    Mode 0o666 through `os.open` lets the kernel apply the umask (and a default
    ACL), exactly as for `open(path, "w")`, without reading or changing the
    process umask, which other threads share.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0)
    while True:
        tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue
