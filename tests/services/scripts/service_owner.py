"""A service's owner in a process of its own: starts a service, pickles its handle
to FILE, prints "ready", then waits for a line on stdin and ends normally
without closing the handle (its exit stops the service)."""

import pickle
import sys

from easycore.common.parallel.services import Service

if __name__ == "__main__":  # under spawn and forkserver the service's worker imports this file
    handle = Service.start(dict)
    with open(sys.argv[1], "wb") as f:
        pickle.dump(handle, f)
    print("ready", flush=True)
    sys.stdin.readline()
