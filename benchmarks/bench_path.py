"""Benchmark easycore.common.path against its peers, measured in the same run.

1. Download throughput of a fresh URL through ``PathManager.get_local_path`` (progress
   off) against plain ``requests`` streaming to disk, from a loopback server serving a
   200 MB file with ``sendfile``.
2. The cost of a cache hit (``get_local_path`` of a cached URL) against
   ``os.path.exists`` of the cached file.

Run: ``scripts/bench path`` or ``python benchmarks/bench_path.py [--size-mb N]``.
"""

import argparse
import http.server
import os
import shutil
import statistics
import tempfile
import threading
import time

CHUNK = 1 << 20


def make_server(root: str) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            name = os.path.join(root, os.path.basename(self.path.split("?", 1)[0]))
            with open(name, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.connection.sendfile(f)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def requests_download(url: str, dst: str) -> None:
    import requests

    with requests.get(url, stream=True, timeout=(10, 60)) as response:
        response.raise_for_status()
        with open(dst, "wb") as f:
            for chunk in response.iter_content(CHUNK):
                f.write(chunk)


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def per_call_us(fn, arg, n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn(arg)
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="50 MB, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.repeat = min(args.size_mb, 50), min(args.repeat, 3)

    scratch = tempfile.mkdtemp(prefix="bench_path_")
    os.environ["EASYCORE_CACHE"] = os.path.join(scratch, "cache")
    from easycore.common.path import HTTPURLHandler, PathManager

    PathManager.register(HTTPURLHandler(progress=False), override=True)
    serve_dir = os.path.join(scratch, "serve")
    os.makedirs(serve_dir)
    size = args.size_mb * 1024 * 1024
    with open(os.path.join(serve_dir, "blob.bin"), "wb") as f:
        block = os.urandom(CHUNK)
        for _ in range(size // CHUNK):
            f.write(block)
    server = make_server(serve_dir)
    url = f"http://127.0.0.1:{server.server_address[1]}/blob.bin"
    peer_dir = os.path.join(scratch, "peer")
    os.makedirs(peer_dir)

    try:
        requests_download(url, os.path.join(peer_dir, "warmup.bin"))  # page cache, imports
        ours, peer = [], []
        for i in range(args.repeat):
            # Alternate who goes first: the page cache and writeback favour neither.
            for who in ("ours", "peer") if i % 2 == 0 else ("peer", "ours"):
                if who == "ours":
                    seconds, path = timed(PathManager.get_local_path, f"{url}?run={i}")
                    ours.append(seconds)
                else:
                    path = os.path.join(peer_dir, f"run{i}.bin")
                    peer.append(timed(requests_download, url, path)[0])
                assert os.path.getsize(path) == size
                os.remove(path)
        ours_mb_s = args.size_mb / statistics.median(ours)
        peer_mb_s = args.size_mb / statistics.median(peer)
        ours_best, peer_best = args.size_mb / min(ours), args.size_mb / min(peer)

        cached = PathManager.get_local_path(url)
        hit_us = per_call_us(PathManager.get_local_path, url, 100_000)
        exists_us = per_call_us(os.path.exists, cached, 100_000)
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"download: {args.size_mb} MB over loopback, {args.repeat} runs each, interleaved")
    print(f"{'measure':<36}{'easycore':>12}{'peer':>12}{'ratio':>8}  peer")
    print(f"{'-' * 36}{'-' * 12}{'-' * 12}{'-' * 8}  {'-' * 33}")
    print(
        f"{'download throughput, median (MB/s)':<36}{ours_mb_s:>12.0f}{peer_mb_s:>12.0f}"
        f"{ours_mb_s / peer_mb_s:>7.2f}x  requests stream to disk (median)"
    )
    print(
        f"{'download throughput, best (MB/s)':<36}{ours_best:>12.0f}{peer_best:>12.0f}"
        f"{ours_best / peer_best:>7.2f}x  requests stream to disk (best)"
    )
    print(
        f"{'cache hit (us per call)':<36}{hit_us:>12.2f}{exists_us:>12.2f}"
        f"{hit_us / exists_us:>7.2f}x  os.path.exists"
    )
    print("ratio: throughput easycore/peer (higher is better); cache hit easycore/peer (lower)")


if __name__ == "__main__":
    main()
