"""A queue's owner in a process of its own: puts N arrays of 2 MiB, pickles the
queue to FILE, prints "ready", then waits for a line on stdin and ends
normally, without closing the queue (its exit closes it).

Usage: ``queue_owner.py FILE N``; with ``torch`` as a third argument, the
torch variant and tensors.
"""

import pickle
import sys

import numpy as np

path, n = sys.argv[1], int(sys.argv[2])
if sys.argv[3:] == ["torch"]:
    import torch

    from easycore.torch.parallel import Queue

    q = Queue()
    for i in range(n):
        q.put(torch.full((1 << 19,), float(i)))  # 2 MiB of float32
else:
    from easycore.common.parallel import Queue

    q = Queue()
    for i in range(n):
        q.put(np.full(1 << 18, i, dtype=np.float64))  # 2 MiB
with open(path, "wb") as f:
    pickle.dump(q, f)
print("ready", flush=True)
sys.stdin.readline()
print(q.qsize(), flush=True)
