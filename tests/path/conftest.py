"""Fixtures for the easycore.common.path tests: a real loopback HTTP server, a scratch
cache, and a registry restored after every test."""

import base64
import collections
import contextlib
import gzip
import http.server
import os
import socket
import threading
import urllib.parse
import uuid

import pytest

from easycore.common.path import HTTPURLHandler, PathManager, keywords
from easycore.common.path import manager as _manager


def payload(path: str) -> bytes:
    """What the server's default route answers for a request line's path."""
    return f"content of {path}\n".encode()


class LoopbackServer:
    """A ThreadingHTTPServer on 127.0.0.1 whose routes misbehave on purpose.

    Routes (the first path segment picks; everything after it is free text):

    - ``/status/<code>/...``   answers ``<code>``.
    - ``/flaky/<n>/...``       answers 500 the first ``n`` times, then 200.
    - ``/retryafter/<code>/<value>/<n>/...`` answers ``<code>`` with ``Retry-After:
      <value>`` (``-`` for none) the first ``n`` times, then as the route named by the
      next segment (``/retryafter/503/-/1/truncated/x``), else 200.
    - ``/truncated/...``       promises 1000 bytes, sends 100, closes the connection.
    - ``/slow/...``            says nothing until the test ends (read timeout).
    - ``/stall/...``           sends headers and 100 of 1000 bytes, then nothing.
    - ``/gated/...``           sets ``first_request``, waits for ``gate``, then 200.
    - ``/big/<n>/...``         ``n`` deterministic bytes.
    - ``/redirect/<rest>``     302 to ``/<rest>``.
    - ``/nohead/...``          405 for HEAD, 200 for GET.
    - ``/auth/...``            200 with ``payload(path)`` plus who asked: the Basic
      credentials (``user:password``) or ``anonymous``.
    - ``/cross/<port>/<rest>`` 302 to ``http://localhost:<port>/<rest>`` (another host).
    - ``/drip/<n>/...``        promises ``n`` bytes and sends one every ``DRIP`` seconds.
    - ``/driphead/<n>/...``    sends its status line, then ``n`` header bytes one every
      ``DRIP`` seconds, then a normal answer.
    - ``/stallonce/...``       the first time: as ``/stall/`` (until the test ends); then 200.
    - ``/gzip/<n>/...``        ``n`` zero bytes, gzipped, sent with ``Content-Encoding: gzip``
      whatever the client accepts (``Content-Length`` counts the gzip bytes).
    - ``/chunked/...``         ``payload(path)`` in two chunks (``Transfer-Encoding: chunked``).
    - ``/chunkcut/...``        one chunk, then the connection closes without the last chunk.
    - ``/close/...``           ``payload(path)`` with no length, ended by closing the
      connection (HTTP/1.0 style).
    - ``/badlength/<value>/...`` ``payload(path)`` with ``Content-Length: <value>`` as
      given (``%2C`` for a comma, ``%20`` for a space), ended by closing the connection.
    - anything else          200 with ``payload(path)``.

    Every request is counted by method and full path (query included), and the
    ``Authorization`` headers that came with it are kept in ``authorizations``.
    """

    DRIP = 0.5  # seconds between two bytes of the drip routes

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self.authorizations: collections.defaultdict = collections.defaultdict(list)
        self.first_request = threading.Event()
        self.gate = threading.Event()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict = {}  # socket -> the thread serving it (keep-alive)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str, userinfo: str = "") -> str:
        """The URL of ``path``; ``userinfo`` such as ``"alice:secret"`` goes before the host."""
        at = f"{userinfo}@" if userinfo else ""
        return f"http://{at}127.0.0.1:{self.port}{path}"

    def count(self, path: str, method: str = "GET") -> int:
        with self._lock:
            return self.counts[(method, path)]

    def __enter__(self) -> "LoopbackServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)
        # A kept-alive connection's thread waits for the client's next request for
        # ever: end its connection, so that no thread of the server outlives it
        # (a later fork in this process would fork a process with threads).
        with self._lock:
            open_ones = list(self._connections.items())
        for sock, _ in open_ones:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for _, thread in open_ones:
            thread.join(timeout=10)

    def _hit(self, method: str, path: str, authorization) -> int:
        with self._lock:
            self.counts[(method, path)] += 1
            if authorization is not None:
                self.authorizations[path].append(authorization)
            return self.counts[(method, path)]

    def _handler_class(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with server._lock:  # ended by __exit__, whatever the client keeps open
                    server._connections[self.connection] = threading.current_thread()

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    with server._lock:
                        server._connections.pop(self.connection, None)

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_HEAD(self) -> None:
                self._route("HEAD")

            def do_GET(self) -> None:
                self._route("GET")

            def _send(self, status: int, body: bytes, length=None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _drip(self, data: bytes) -> None:
                for i in range(len(data)):
                    if server.stop.wait(server.DRIP):
                        break
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()

            def _route(self, method: str) -> None:
                n = server._hit(method, self.path, self.headers.get("Authorization"))
                parts = self.path.split("?", 1)[0].split("/")
                kind = parts[1] if len(parts) > 1 else ""
                if kind == "retryafter" and n > int(parts[4]) and len(parts) > 6:
                    kind = parts[5]  # done answering Retry-After: behave as that route
                if kind == "status":
                    self._send(int(parts[2]), b"status body\n")
                elif kind == "flaky":
                    self._send(500 if n <= int(parts[2]) else 200, payload(self.path))
                elif kind == "retryafter" and n <= int(parts[4]):
                    self.send_response(int(parts[2]))
                    if parts[3] != "-":
                        self.send_header("Retry-After", parts[3])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif kind == "truncated":
                    self._send(200, b"x" * 100, length=1000)
                    self.close_connection = True
                elif kind == "slow":
                    server.stop.wait(10)
                    self.close_connection = True
                elif kind == "stall":
                    self._send(200, b"x" * 100, length=1000)
                    self.wfile.flush()
                    server.stop.wait(10)
                    self.close_connection = True
                elif kind == "gated":
                    server.first_request.set()
                    server.gate.wait(30)
                    self._send(200, payload(self.path))
                elif kind == "big":
                    size = int(parts[2])
                    self._send(200, (b"0123456789abcdef" * (size // 16 + 1))[:size])
                elif kind == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "/" + "/".join(parts[2:]))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif kind == "nohead" and method == "HEAD":
                    self._send(405, b"")
                elif kind == "auth":
                    self._send(200, payload(self.path) + b"as " + _who(self.headers) + b"\n")
                elif kind == "cross":
                    self.send_response(302)
                    location = f"http://localhost:{parts[2]}/" + "/".join(parts[3:])
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif kind == "drip":
                    self.send_response(200)
                    self.send_header("Content-Length", parts[2])
                    self.end_headers()
                    self._drip(b"x" * int(parts[2]))
                    self.close_connection = True
                elif kind == "driphead":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                    self._drip(b"x" * int(parts[2]))
                    self.wfile.write(b"\r\nContent-Length: 3\r\n\r\nend")
                    self.close_connection = True
                elif kind == "stallonce" and n == 1:
                    self._send(200, b"x" * 100, length=1000)
                    self.wfile.flush()
                    server.stop.wait(60)
                    self.close_connection = True
                elif kind == "gzip":
                    body = gzip.compress(bytes(int(parts[2])))
                    self.send_response(200)
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif kind in ("chunked", "chunkcut"):
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    body = payload(self.path)
                    for piece in (body[:5], body[5:]):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        if kind == "chunkcut":
                            break
                    else:
                        self.wfile.write(b"0\r\n\r\n")
                    self.close_connection = kind == "chunkcut"
                elif kind == "badlength":
                    self.send_response(200)
                    self.send_header("Content-Length", urllib.parse.unquote(parts[2]))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload(self.path))
                    self.close_connection = True
                elif kind == "close":
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(payload(self.path))
                    self.close_connection = True
                else:
                    self._send(200, payload(self.path))

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (timeouts): fine

        return Handler


def _who(headers) -> bytes:
    value = headers.get("Authorization")
    if value is None:
        return b"anonymous"
    scheme, _, encoded = value.partition(" ")
    assert scheme == "Basic", value
    return base64.b64decode(encoded)


@pytest.fixture(scope="module")
def server():
    """One loopback server per test module; tests keep apart by using unique paths. Ended
    with the module: its threads must not run while later suites fork."""
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture
def gated_server():
    """A server of one's own, for tests that hold its ``gate`` (or need a second host)."""
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture
def mem():
    """A memory:// directory of the test's own (fsspec's in-process store), removed after."""
    fsspec = pytest.importorskip("fsspec")
    root = f"memory://t{uuid.uuid4().hex[:10]}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
def uid() -> str:
    """A short token that makes a test's URLs its own."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def refused_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> str:
    """Every test gets its own $EASYCORE_CACHE; the user's home cache is never touched."""
    path = str(tmp_path / "cache")
    monkeypatch.setenv("EASYCORE_CACHE", path)
    return path


@pytest.fixture(autouse=True)
def restore_registry():
    """Handlers registered by a test are gone after it, and so are a `set_cwd` and a
    `set_strict_kwargs_checking` of it."""
    saved_handlers = dict(_manager._handlers)
    saved_prefixes = _manager._prefixes
    saved_cwd = _manager._native._cwd
    saved_strict = keywords.strict()
    yield
    _manager._handlers.clear()
    _manager._handlers.update(saved_handlers)
    _manager._prefixes = saved_prefixes
    _manager._native._cwd = saved_cwd
    keywords.set_strict(saved_strict)


@pytest.fixture
def http_handler() -> HTTPURLHandler:
    """The default HTTP handler with settings that keep failure tests fast."""
    handler = HTTPURLHandler(timeout=(2.0, 1.0), max_attempts=3, backoff=0.01, progress=False)
    PathManager.register(handler, override=True)
    return handler


def _files_under(root: str):
    found = []
    for dirpath, _, filenames in os.walk(root):
        found += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
    return sorted(found)


@pytest.fixture
def files_under():
    """``files_under(root)``: every file below root, relative to it, sorted."""
    return _files_under


@pytest.fixture
def expected_body():
    """``expected_body(path)``: what the server's default route answers for ``path``."""
    return payload
