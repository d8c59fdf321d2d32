"""What a URL says about who asks: its credentials, and how to name it without them."""

from typing import Optional, Tuple
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["credentials", "redact"]


def credentials(url: str) -> Optional[Tuple[str, str]]:
    """The `(user, password)` a client sends for `url` (percent-decoded), or None.

    `http://alice@host/` gives `("alice", "")`: HTTP clients send that as Basic
    authentication too. `http://:@host/` carries none, as for `requests`.

    Args:
        url (str): an absolute URL.

    Returns:
        tuple or None: `(user, password)`, or None when the URL carries no credentials.
    """
    parts = urlsplit(url)
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    return (user, password) if user or password else None


def redact(url: str) -> str:
    """`url` with its password replaced by `***`, for messages and logs.

    Args:
        url (str): any string; only a password in the URL's authority is touched.

    Returns:
        str: e.g. `http://alice:***@host/f` for `http://alice:secret@host/f`.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>" if "@" in url else url
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}"))
