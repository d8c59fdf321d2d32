"""Run by test_path_concurrency in separate processes: fetch one URL, report the result.

Usage: python _path_worker.py URL
Prints "ready" before asking, then "<local path> <sha256> <size>".
"""

import hashlib
import sys

from easycore.common.path import HTTPURLHandler, PathManager

PathManager.register(HTTPURLHandler(timeout=(5.0, 30.0), progress=False), override=True)
print("ready", flush=True)
local = PathManager.get_local_path(sys.argv[1])
with open(local, "rb") as f:
    data = f.read()
print(local, hashlib.sha256(data).hexdigest(), len(data), flush=True)
