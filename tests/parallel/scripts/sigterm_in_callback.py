"""A worker whose SIGTERM lands where Python ignores exceptions.

argv[1]: the start method; argv[2]: a directory for the worker's two marks
("inside": it runs the callback; "exited": its interpreter shut down normally);
argv[3]: "weakref" (a weakref callback) or "del" (a ``__del__``); argv[4]:
"runner" (closed with a timeout while its call runs) or "pool"
(``Pool.terminate()``). Either way the worker is sent SIGTERM while it is
inside the callback. Prints one JSON line.
"""

import json
import os
import sys
import threading
import time

from easycore.common.parallel import Pool, UnorderedRunner


def stays_in_callback(marks, where):
    import weakref
    from multiprocessing import util

    # Runs as the worker's interpreter shuts down normally, not when it is killed.
    util.Finalize(None, open, args=(os.path.join(marks, "exited"), "w"), exitpriority=10)

    def inside():
        open(os.path.join(marks, "inside"), "w").close()
        time.sleep(60)  # SIGTERM's Terminated is raised here, and ignored

    class Thing:
        if where == "del":
            def __del__(self):
                inside()

    thing = Thing()
    if where == "weakref":
        _kept = weakref.ref(thing, lambda _ref: inside())
    del thing  # the callback runs now
    time.sleep(60)  # the worker went on: only a SIGKILL ends it here
    return 0


class CallbackWhenClosed(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return stays_in_callback(cfg.marks, cfg.where)


def wait_inside(marks):
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(marks, "inside")) and time.monotonic() < deadline:
        time.sleep(0.01)


if __name__ == "__main__":
    from easycore.common.parallel.backends.process import ProcessBackend

    # The worker's grace after SIGTERM, before SIGKILL: long enough that only
    # a worker that did not act on SIGTERM is killed, even on a busy machine.
    ProcessBackend.term_grace = 30.0
    method, marks, where, entry = sys.argv[1:5]
    outcome = {}
    if entry == "runner":
        runner = CallbackWhenClosed(1, cfg={"marks": marks, "where": where},
                                    start_method=method)

        def call():
            try:
                runner([0])
            except Exception as err:  # noqa: BLE001 -- reported
                outcome["call"] = type(err).__name__

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        wait_inside(marks)
        try:
            runner.close(timeout=0.5)  # the worker's chunk never ends: aborted, SIGTERM
        except TimeoutError:
            outcome["close"] = "TimeoutError"
        caller.join(30)
        outcome["call_ended"] = not caller.is_alive()
    else:
        pool = Pool(1, start_method=method)
        pending = pool.apply_async(stays_in_callback, (marks, where))
        wait_inside(marks)
        pool.terminate()  # SIGTERM, then SIGKILL after the grace
        pool.join()
        outcome["call_ended"] = pending.ready()
    print(json.dumps({"inside": os.path.exists(os.path.join(marks, "inside")),
                      "exited": os.path.exists(os.path.join(marks, "exited")), **outcome}),
          flush=True)
