"""Ctrl-C as a terminal sends it (to the whole process group) while get() waits,
then reset() and get() again; prints what happened as JSON.

Run in a session of its own (the test starts it so): the group is this
process and its workers.
"""

import json
import os
import signal
import sys
import threading
import time

import psutil

from easycore.common.parallel import BackgroundTask


def slow(started, go):
    with open(started, "a") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


if __name__ == "__main__":
    started, go = sys.argv[2], sys.argv[3]
    bg = BackgroundTask(slow, (started, go), workers=2, start_method=sys.argv[1])
    pids = bg.worker_pids

    def waiting_in_get():
        frame = sys._current_frames().get(threading.main_thread().ident)
        while frame is not None:
            if frame.f_code.co_name == "get" and "background" in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        return False

    def ctrl_c():
        while not (os.path.exists(started) and waiting_in_get()):
            time.sleep(0.01)
        os.killpg(os.getpgrp(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    caught = False
    try:
        bg.get(timeout=60)
    except KeyboardInterrupt:
        caught = True
    open(go, "w").close()
    bg.reset()
    result = bg.get(timeout=60)
    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    bg.close()
    children = [p.pid for p in psutil.Process().children(recursive=True)
                if "resource_tracker" not in " ".join(p.cmdline())
                and "forkserver" not in " ".join(p.cmdline())]
    print(json.dumps({"caught": caught, "result_from_a_worker": result in pids,
                      "workers_alive": alive == pids, "children_after_close": children}))
