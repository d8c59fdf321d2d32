"""Creates one shared-memory segment and is SIGKILLed in the middle (argv[1]: where).

"registering": as it registers the name with the resource tracker; "reserving":
as it reserves the segment's space. Prints one JSON line first: the segment's
name and the tracker's pid. Stands for a worker killed with its caller.
"""

import json
import os
import signal
import sys

from easycore.common.parallel.transport import shm

where = sys.argv[1]
shm.resource_tracker.ensure_running()
name = shm.make_prefix("ecx") + "0"  # a tag no leak check of the suite looks for
print(json.dumps({"name": name, "tracker": shm.resource_tracker._resource_tracker._pid}),
      flush=True)


def die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


if where == "registering":
    shm.resource_tracker.register = die
else:
    shm._reserve = die
shm.create("/" + name, 1 << 16)
print("not killed", flush=True)
