"""The `requests` session a transfer uses: its sockets obey a deadline, and what it sends
depends on the URL alone.

Imported only when a transfer happens (it imports `requests` and `urllib3`).

- Sockets: the connection classes register every socket they open with the thread's
  [`Deadline`][easycore.common.network.deadline.Deadline], which shuts them down when it
  passes.
- Credentials: only those written in the URL are sent, and `~/.netrc` is not read. The
  cache names a file by its URL; if a netrc entry could change the answer, a file fetched
  with one user's netrc password could be served from a shared cache to another user.
  `requests` already drops the `Authorization` header when a redirect leaves the host;
  that is kept.
"""

from typing import Any, Dict, Type, TypeVar

import requests
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase, HTTPBasicAuth
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from . import deadline as _deadline
from .urls import credentials

__all__ = ["new_session"]

T = TypeVar("T", bound=HTTPConnection)


def new_session() -> requests.Session:
    """A session for one transfer (close it when done; it is a context manager)."""
    session = _Session()
    session.auth = _URLCredentials()
    adapter = _WatchedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class _Session(requests.Session):
    def rebuild_auth(self, prepared_request: Any, response: Any) -> None:
        # requests' own, without the netrc look-up that follows it.
        headers = prepared_request.headers
        if "Authorization" in headers and self.should_strip_auth(
            response.request.url, prepared_request.url
        ):
            del headers["Authorization"]


class _URLCredentials(AuthBase):
    """Basic authentication from the URL's `user:password@`, as requests does by default.

    Set as the session's auth, it also stops requests from reading `~/.netrc`, which it
    does only for sessions without one.
    """

    def __call__(self, request: Any) -> Any:
        found = credentials(request.url)
        return HTTPBasicAuth(*found)(request) if found else request


def _watched(base: Type[T]) -> Type[T]:
    class Watched(base):  # type: ignore[valid-type,misc]
        def _new_conn(self) -> Any:
            sock = super()._new_conn()
            clock = _deadline.current()
            if clock is not None:
                clock.watch(sock)
            return sock

    Watched.__name__ = Watched.__qualname__ = f"Watched{base.__name__}"
    return Watched


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _watched(HTTPConnection)


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _watched(HTTPSConnection)


_POOLS: Dict[str, Any] = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if hasattr(manager, "pool_classes_by_scheme"):  # not SOCKS: its own classes
            manager.pool_classes_by_scheme = _POOLS
        return manager
