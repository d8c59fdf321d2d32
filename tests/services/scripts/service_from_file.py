"""An unrelated ``python`` calling a service whose handle it loads from FILE:
a 2 MiB argument and a 2 MiB result; prints both sums as JSON."""

import json
import pickle
import sys

import numpy as np

with open(sys.argv[1], "rb") as f:
    handle = pickle.load(f)
sent = handle.run(np.sum, np.ones(1 << 18), timeout=60)
back = handle.run(np.ones, 1 << 18, timeout=60)
print(json.dumps([float(sent), float(back.sum())]))
handle.close()
