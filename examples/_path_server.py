"""A quiet static file server on 127.0.0.1 for the path tutorial (40_path_tutorial.py)."""

import contextlib
import functools
import http.server
import threading
from typing import Iterator


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serve_directory(root: str) -> Iterator[str]:
    """Serve ``root`` over HTTP on a free loopback port.

    Args:
        root (str): the directory to serve.

    Returns:
        Iterator[str]: yields the base URL, e.g. ``http://127.0.0.1:40123``.
    """
    handler = functools.partial(_QuietHandler, directory=root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
