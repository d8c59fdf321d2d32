"""A worker's second SIGTERM lands inside the hook that re-sends the first.

A SIGTERM raised where Python ignores exceptions (here a ``__del__``) is sent
again from another thread by the worker's unraisable hook. On a busy machine
that thread may send it before the hook has returned; raised in the hook, the
exception was lost again ("Exception ignored in sys.unraisablehook") and the
worker ran on until the caller's SIGKILL. This script makes that happen every
time: the first "thread" the hook starts sends the signal at once, in the hook.
Prints one JSON line: whether the main code was ended by ``Terminated``.
"""

import _thread
import json
import os
import signal
import sys
import time

from easycore.common.parallel.worker import loop
from easycore.common.parallel.worker.executor import Terminated

signal.signal(signal.SIGTERM, loop._on_sigterm)
sys.unraisablehook = loop._unraisable_hook(sys.unraisablehook)

real_start = _thread.start_new_thread
starts = []


def start_sending_early(func, args):
    starts.append(func)
    if len(starts) == 1:
        func(*args)  # the thread's os.kill, run before the hook returns
        return 0
    return real_start(func, args)


_thread.start_new_thread = start_sending_early


class Thing:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # Terminated, raised here: ignored


outcome = "ran on"
try:
    thing = Thing()
    del thing
    time.sleep(20)  # only a worker that lost the signal sleeps this out
except Terminated:
    outcome = "terminated"
print(json.dumps({"outcome": outcome, "starts": len(starts)}), flush=True)
