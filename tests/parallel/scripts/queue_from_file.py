"""An unrelated ``python`` (not a multiprocessing child) using a pickled Queue.

Usage: ``queue_from_file.py FILE put N`` puts N arrays of 2 MiB (element i:
the item's number); ``queue_from_file.py FILE get N`` gets N and prints the
first element of each as a JSON list. Closes its end, exits normally.
"""

import json
import pickle
import sys

import numpy as np

path, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "rb") as f:
    q = pickle.load(f)
if what == "put":
    for i in range(n):
        q.put(np.full(1 << 18, i, dtype=np.float64), timeout=60)  # 2 MiB
    print(json.dumps("put"))
else:
    print(json.dumps([int(q.get(timeout=60)[0]) for _ in range(n)]))
q.close()
