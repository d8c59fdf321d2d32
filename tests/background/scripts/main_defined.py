"""A target, job function and initializer defined under ``if __name__ == "__main__":``,
used by a BackgroundTask and a JobQueue under the start method given; prints
what came back as JSON (issue 20 item 21).

Under spawn and forkserver a worker re-runs this file as ``__mp_main__``,
where the block below does not run: these functions exist only in the
caller, and must reach the workers by value.
"""

import json
import sys

from easycore.common.parallel import BackgroundTask, JobQueue

if __name__ == "__main__":
    method = sys.argv[1]
    STATE = {"ready": False}

    def init(tag):
        STATE["ready"] = tag

    def target(x):
        return [x, STATE["ready"]]

    def job(a, b=0):
        return a + b + (100 if STATE["ready"] else 0)

    out = {}
    with BackgroundTask(target, (3,), workers=1, initializer=init, initargs=("bg",),
                        seed=1, start_method=method) as bg:
        out["background"] = bg.get(timeout=60)
    with BackgroundTask(target, (4,), workers=1, start_method=method) as bg:
        out["background_plain"] = bg.get(timeout=60)
    with JobQueue(workers=1, initializer=init, initargs=("jq",), seed=2,
                  start_method=method) as jobs:
        jobs.put(job, 1, b=2)
        out["jobqueue"] = jobs.get(timeout=60)
    with JobQueue(workers=1, start_method=method) as jobs:
        jobs.put(job, 5)
        out["jobqueue_plain"] = jobs.get(timeout=60)
    print(json.dumps(out))
