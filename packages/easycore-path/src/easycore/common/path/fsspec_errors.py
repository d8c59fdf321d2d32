"""Errors from fsspec back-ends, said again naming the URL and never a secret.

An fsspec back-end raises whatever its client raises (`botocore` errors, `aiohttp`
errors, `OSError`s with the store's own wording). `as_os_error` turns each into the
`OSError` subclass a caller of `open` expects (`FileNotFoundError`, `PermissionError`,
`FileExistsError`, ...), whose message names the operation and the URL and whose text
has every secret of the storage options replaced by `***`.
"""

import errno
from typing import Any, Iterable, Iterator, Mapping, Tuple

from easycore.common.network.urls import redact

__all__ = ["as_os_error", "describe", "secret_values"]

# Option names (any nesting, case-insensitive substrings) whose values are secrets.
_SECRET_WORDS = ("secret", "token", "password", "passwd", "key", "credential", "sas", "auth")
_MIN_SECRET = 4  # shorter values would scrub ordinary words out of messages

# Client errors (by class name: no import of the client) that mean "who you are is wrong".
_DENIED = frozenset(
    {
        "NoCredentialsError",
        "PartialCredentialsError",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "ExpiredToken",
        "InvalidToken",
    }
)
# ... and those that mean "the store could not be reached or stopped answering".
_UNREACHABLE = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "ClientConnectorError",
        "ClientOSError",
        "ServerDisconnectedError",
        "ClientPayloadError",
    }
)


def secret_values(options: Mapping[str, Any]) -> Tuple[str, ...]:
    """Every string in `options` (nested mappings and lists included) held under a name
    that sounds secret (`secret`, `token`, `password`, `key`, ...), longest first.

    Args:
        options (Mapping): fsspec storage options.

    Returns:
        tuple: the values to scrub from messages.
    """
    found = set(_secret_values(options, secret=False))
    return tuple(sorted(found, key=len, reverse=True))


def _secret_values(value: Any, secret: bool) -> Iterator[str]:
    if isinstance(value, Mapping):
        for name, item in value.items():
            lowered = str(name).lower()
            yield from _secret_values(item, secret or any(w in lowered for w in _SECRET_WORDS))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _secret_values(item, secret)
    elif secret and isinstance(value, str) and len(value) >= _MIN_SECRET:
        yield value


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every one of `secrets` replaced by `***`."""
    for value in secrets:
        text = text.replace(value, "***")
    return text


def as_os_error(exc: BaseException, operation: str, url: str, secrets: Iterable[str]) -> OSError:
    """`exc` said again as an `OSError` naming `operation` and `url`, secrets scrubbed.

    Args:
        exc (BaseException): what the back-end raised.
        operation (str): e.g. `"open"`, `"get_local_path"`.
        url (str): the path as the caller spelt it.
        secrets (iterable of str): values to keep out of the message.

    Returns:
        OSError: of the subclass that matches `exc` (`OSError(errno, ...)` picks it):
        `FileNotFoundError` for a missing object or bucket, `PermissionError` for bad or
        missing credentials, `ConnectionError` for an unreachable store, otherwise the
        `OSError` subclass `exc` already was (or a plain `OSError`).
    """
    name = type(exc).__name__
    code = _client_error_code(exc)
    if isinstance(exc, OSError) and exc.errno:
        number = exc.errno
    elif isinstance(exc, FileNotFoundError) or code in ("NoSuchBucket", "NoSuchKey", "404"):
        number = errno.ENOENT
    elif isinstance(exc, PermissionError) or name in _DENIED or code in _DENIED:
        number = errno.EACCES
    elif isinstance(exc, FileExistsError):
        number = errno.EEXIST
    elif isinstance(exc, IsADirectoryError):
        number = errno.EISDIR
    elif isinstance(exc, NotADirectoryError):
        number = errno.ENOTDIR
    elif name in _UNREACHABLE or isinstance(exc, (ConnectionError, TimeoutError)):
        number = errno.ECONNREFUSED if "Connect" in name else errno.ECONNRESET
    else:
        number = errno.EIO
    where = redact(url)
    message = f"cannot {operation} {where}: {describe(exc, secrets)}"
    error = OSError(number, message, where)
    if number in (errno.ECONNREFUSED, errno.ECONNRESET) and not isinstance(error, ConnectionError):
        return ConnectionError(number, message, where)
    return error


def describe(exc: BaseException, secrets: Iterable[str]) -> str:
    """`"<exception class>: <message>"` of `exc`, secrets scrubbed."""
    name = type(exc).__name__
    detail = scrub(str(exc), secrets)
    return f"{name}: {detail}" if detail else name


def _client_error_code(exc: BaseException) -> str:
    # botocore's ClientError carries the store's code in .response["Error"]["Code"].
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error")
        if isinstance(error, Mapping):
            return str(error.get("Code", ""))
    return ""
