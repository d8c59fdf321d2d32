"""Benchmark easycore.common.path against its peers, measured in the same run.

1. Download throughput of a fresh URL through ``PathManager.get_local_path`` (progress
   off) against plain ``requests`` streaming to disk, from a loopback server serving a
   200 MB file with ``sendfile``.
2. The cost of a cache hit (``get_local_path`` of a cached URL) against
   ``os.path.exists`` of the cached file.
3. Object storage (when s3fs and moto are installed): ``PathManager.open("s3://...")``
   read throughput against plain s3fs, both reading the same object from one moto S3
   server on 127.0.0.1 (its own process), and ``get_local_path`` of a cached,
   unchanged object (one metadata request to check its version) against a local
   ``open`` (also with ``max_age=``, which skips the check for a while).

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
    bench_object_storage(args.size_mb, args.repeat)


def moto_process():
    """moto's S3 server in a process of its own (the client's GIL stays the client's)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.05)


def read_all(opener, path: str) -> int:
    """Read `path` to the end in 8 MiB pieces, as a data loader would; bytes read."""
    total = 0
    with opener(path, "rb") as f:
        while True:
            piece = f.read(8 * CHUNK)
            if not piece:
                return total
            total += len(piece)


def bench_object_storage(size_mb: int, repeat: int) -> None:
    try:
        import moto  # noqa: F401
        import s3fs
    except ImportError:
        print("\nobject storage: skipped (needs s3fs and moto[server])")
        return
    from easycore.common.path import FsspecPathHandler, PathManager

    scratch = tempfile.mkdtemp(prefix="bench_s3_")
    os.environ["EASYCORE_CACHE"] = os.path.join(scratch, "cache")
    proc, endpoint = moto_process()
    try:
        options = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": endpoint}}
        PathManager.register(FsspecPathHandler("s3", storage_options=options), override=True)
        peer = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        peer.mkdir("bench")
        block = os.urandom(CHUNK)
        with peer.open("bench/blob.bin", "wb") as f:  # a multipart upload
            for _ in range(size_mb):
                f.write(block)
        url = "s3://bench/blob.bin"
        size = size_mb * CHUNK
        assert read_all(peer.open, "bench/blob.bin") == size  # warm-up: imports, connections
        ours, theirs = [], []
        for i in range(repeat):
            for who in ("ours", "peer") if i % 2 == 0 else ("peer", "ours"):
                if who == "ours":
                    seconds, n = timed(read_all, PathManager.open, url)
                    ours.append(seconds)
                else:
                    seconds, n = timed(read_all, peer.open, "bench/blob.bin")
                    theirs.append(seconds)
                assert n == size
        ours_mb_s, peer_mb_s = (
            size_mb / statistics.median(ours),
            size_mb / statistics.median(theirs),
        )
        ours_best, peer_best = size_mb / min(ours), size_mb / min(theirs)

        with peer.open("bench/small.bin", "wb") as f:
            f.write(b"x" * 4096)
        cached = PathManager.get_local_path("s3://bench/small.bin")
        hit_us = per_call_us(PathManager.get_local_path, "s3://bench/small.bin", 200)
        open_us = per_call_us(lambda p: open(p, "rb").close(), cached, 20_000)
        trusting = FsspecPathHandler("s3", storage_options=options, max_age=3600)
        trusting.get_local_path("s3://bench/small.bin")
        trusted_us = per_call_us(trusting.get_local_path, "s3://bench/small.bin", 20_000)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"\nobject storage: {size_mb} MB object on moto S3 (127.0.0.1), {repeat} reads each")
    print(f"{'measure':<36}{'easycore':>12}{'peer':>12}{'ratio':>8}  peer")
    print(f"{'-' * 36}{'-' * 12}{'-' * 12}{'-' * 8}  {'-' * 33}")
    print(
        f"{'s3:// read throughput, median (MB/s)':<36}{ours_mb_s:>12.0f}{peer_mb_s:>12.0f}"
        f"{ours_mb_s / peer_mb_s:>7.2f}x  s3fs open().read() (median)"
    )
    print(
        f"{'s3:// read throughput, best (MB/s)':<36}{ours_best:>12.0f}{peer_best:>12.0f}"
        f"{ours_best / peer_best:>7.2f}x  s3fs open().read() (best)"
    )
    print(
        f"{'get_local_path hit (us per call)':<36}{hit_us:>12.0f}{open_us:>12.2f}"
        f"{hit_us / open_us:>7.0f}x  local open()+close() of the copy"
    )
    print(
        f"{'get_local_path hit, max_age (us)':<36}{trusted_us:>12.2f}{open_us:>12.2f}"
        f"{trusted_us / open_us:>7.2f}x  local open()+close() of the copy"
    )
    print("a get_local_path hit asks the store for the object's version (one HEAD request);")
    print("with max_age=, a copy checked less than max_age seconds ago is served unasked")


if __name__ == "__main__":
    main()
