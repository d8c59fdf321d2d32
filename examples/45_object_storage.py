"""Tutorial: object storage (``s3://``) through ``PathManager``, end to end on this machine.

A real S3 endpoint runs on 127.0.0.1 (moto's server mode); easycore reaches it through
fsspec and s3fs, as it would reach AWS, MinIO or any S3-compatible store. Objects are
written and read, downloaded once into the cache, reached through a redirected prefix,
and finally streamed through a runner whose workers each open their own objects.

Needs ``pip install "easycore-path[fsspec]" s3fs "moto[server]"``. Run it in a scratch
directory with a scratch cache:

    cd $(mktemp -d) && EASYCORE_CACHE=$PWD/cache python examples/45_object_storage.py

The runner class is defined at module level and the runner is created under
``if __name__ == "__main__":``: with the ``spawn`` and ``forkserver`` start methods every
worker imports this file.
"""

# requires: s3

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path

from easycore.common.parallel import UnorderedRunner
from easycore.common.path import PathManager, RedirectPathHandler

BUCKET = "easycore-demo"


def section(title: str) -> None:
    print(f"\n=== {title} ===")


def show(label: str, value) -> None:
    print(f"  {label:<44} {value}")


def start_local_s3():
    """moto's S3 server on a free loopback port; the client finds it through the
    environment, as AWS clients find credentials and endpoints everywhere."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # What you would export in your shell (or leave to ~/.aws) for a real store. Workers
    # inherit the environment, so they reach the same store with the same credentials.
    os.environ["AWS_ENDPOINT_URL"] = f"http://{host}:{port}"
    os.environ["AWS_ACCESS_KEY_ID"] = "demo-key"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "demo-secret"
    return server


def objects() -> None:
    section("Objects: s3:// behind the PathManager API")
    # s3:// needs no registration: fsspec knows it and s3fs is installed, so a handler
    # is made on first use. (Register FsspecPathHandler("s3", storage_options=...) to
    # pass credentials or an endpoint explicitly.)
    PathManager.makedirs(f"s3://{BUCKET}")  # creates the bucket
    for i in range(20):
        with PathManager.open(f"s3://{BUCKET}/datasets/digits/{i:03d}.json", "w") as f:
            json.dump({"id": i, "pixels": [i % 7] * 64}, f)
    show("listdir(datasets/digits)[:3]", PathManager.listdir(f"s3://{BUCKET}/datasets/digits")[:3])
    with PathManager.open(f"s3://{BUCKET}/datasets/digits/007.json") as f:
        show("open(.../007.json) -> id", json.load(f)["id"])
    show("isdir(datasets)", PathManager.isdir(f"s3://{BUCKET}/datasets"))
    show(
        "isfile(datasets/digits/000.json)",
        PathManager.isfile(f"s3://{BUCKET}/datasets/digits/000.json"),
    )

    # A write is atomic: an exception inside the block leaves no partial object.
    try:
        with PathManager.open(f"s3://{BUCKET}/checkpoints/model.bin", "wb") as f:
            f.write(b"half a checkpoint")
            raise RuntimeError("training crashed")
    except RuntimeError:
        pass
    show(
        "after a crash mid-write, exists(model.bin)",
        PathManager.exists(f"s3://{BUCKET}/checkpoints/model.bin"),
    )

    # Errors name the URL (never the credentials).
    try:
        PathManager.open("s3://no-such-bucket/x.bin", "rb")
    except FileNotFoundError as err:
        show("open(s3://no-such-bucket/x.bin)", "FileNotFoundError")
        print(f"    {err.strerror}")


def local_copies() -> None:
    section("get_local_path: downloaded once, refreshed when the object changes")
    url = f"s3://{BUCKET}/models/weights.bin"
    with PathManager.open(url, "wb") as f:
        f.write(os.urandom(4 << 20))
    start = time.perf_counter()
    local = PathManager.get_local_path(url)
    first = time.perf_counter() - start
    start = time.perf_counter()
    again = PathManager.get_local_path(url)
    second = time.perf_counter() - start
    show("get_local_path(.../weights.bin)", os.path.relpath(local))
    show(
        "first call (download) / second (check only)",
        f"{first * 1e3:.1f} ms / {second * 1e3:.1f} ms",
    )
    show("same copy the second time", again == local)
    with PathManager.open(url, "wb") as f:
        f.write(b"retrained")
    fresh = PathManager.get_local_path(url)
    show(
        "after the object changed: a new copy",
        fresh != local and Path(fresh).read_bytes() == b"retrained",
    )


def register_dataset_prefix() -> None:
    # data:// -> s3://easycore-demo/datasets/ ; called in the main process and in every
    # worker (with spawn or forkserver a worker starts with the default handlers only).
    # A ValueError: already registered in this process (a forked worker inherits it).
    with contextlib.suppress(ValueError):
        PathManager.register(RedirectPathHandler("data://", f"s3://{BUCKET}/datasets/"))


class DigitSum(UnorderedRunner):
    """Each worker opens the objects it is given; the consumer adds them up."""

    @staticmethod
    def producer_init(device, cfg):
        register_dataset_prefix()

    @staticmethod
    def producer_work(device, cfg, name):
        with PathManager.open(f"data://digits/{name}") as f:
            item = json.load(f)
        return item["id"], sum(item["pixels"])

    @staticmethod
    def consumer_init(cfg):
        cfg.total, cfg.seen = 0, []

    @staticmethod
    def consumer_work(cfg, result):
        item_id, pixel_sum = result
        cfg.seen.append(item_id)
        cfg.total += pixel_sum

    @staticmethod
    def consumer_end(cfg):
        return cfg.total, sorted(cfg.seen)


def redirect_and_runner() -> None:
    section("A redirected prefix, and a runner streaming items from s3://")
    register_dataset_prefix()
    names = PathManager.listdir("data://digits")
    show("listdir('data://digits') -> items", len(names))
    with DigitSum(devices=2) as runner:
        total, seen = runner(names)
    expected = sum((i % 7) * 64 for i in range(20))
    show("sum of pixels over 20 objects", f"{total} (expected {expected})")
    show("every item seen once", seen == list(range(20)))


def main() -> None:
    server = start_local_s3()
    try:
        objects()
        local_copies()
        redirect_and_runner()
    finally:
        server.stop()
    print("\nobject storage tutorial finished")


if __name__ == "__main__":
    main()
