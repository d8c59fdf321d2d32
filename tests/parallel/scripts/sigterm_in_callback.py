"""A worker whose SIGTERM lands where Python ignores exceptions.

argv[1]: the start method; argv[2]: a directory for the worker's two marks
("inside": it runs the callback; "exited": its interpreter shut down normally);
argv[3]: "weakref" (a weakref callback) or "del" (a ``__del__``).
The caller closes the runner, with a timeout, while the worker is inside the
callback: the worker is sent SIGTERM there. Prints one JSON line.
"""

import json
import os
import sys
import threading
import time

from easycore.common.parallel import UnorderedRunner


class CallbackWhenClosed(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        import weakref
        from multiprocessing import util

        # Runs as the worker's interpreter shuts down normally, not when it is killed.
        util.Finalize(None, open, args=(os.path.join(cfg.marks, "exited"), "w"),
                      exitpriority=10)

        def inside():
            open(os.path.join(cfg.marks, "inside"), "w").close()
            time.sleep(60)  # SIGTERM's Terminated is raised here, and ignored

        class Thing:
            if cfg.where == "del":
                def __del__(self):
                    inside()

        thing = Thing()
        if cfg.where == "weakref":
            _kept = weakref.ref(thing, lambda _ref: inside())
        del thing  # the callback runs now
        time.sleep(60)  # the worker went on: only a SIGKILL ends it here
        return 0


if __name__ == "__main__":
    from easycore.common.parallel.backends.process import ProcessBackend

    # The worker's grace after SIGTERM, before SIGKILL: long enough that only
    # a worker that did not act on SIGTERM is killed, even on a busy machine.
    ProcessBackend.term_grace = 30.0
    method, marks, where = sys.argv[1:4]
    runner = CallbackWhenClosed(1, cfg={"marks": marks, "where": where}, start_method=method)
    outcome = {}

    def call():
        try:
            runner([0])
        except Exception as err:  # noqa: BLE001 -- reported
            outcome["call"] = type(err).__name__

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(marks, "inside")) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        runner.close(timeout=0.5)  # the worker's chunk never ends: aborted, SIGTERM
    except TimeoutError:
        outcome["close"] = "TimeoutError"
    caller.join(30)
    print(json.dumps({"inside": os.path.exists(os.path.join(marks, "inside")),
                      "exited": os.path.exists(os.path.join(marks, "exited")),
                      "call_ended": not caller.is_alive(), **outcome}), flush=True)
