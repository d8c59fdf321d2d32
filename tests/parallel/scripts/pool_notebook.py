# A notebook's cells, or a script piped to `python -` (argv[1]: the start method;
# argv[2], optional: "preloads", a fork server that imports __main__ first).
# No `if __name__ == "__main__":` guard and no file a worker could import:
# everything defined here reaches the workers by value. Prints one JSON line.
import json
import os
import sys
from dataclasses import dataclass

from easycore.common.parallel import Pool

if sys.argv[2:] == ["preloads"]:  # the fork server imports __main__ (3.13.8, 3.14.1 on)
    from _fork_server_preloads import emulate_main_preload

    emulate_main_preload()


@dataclass
class Reading:
    sensor: str
    value: float


def calibrate(reading):
    assert isinstance(reading, Reading), type(reading)
    return Reading(reading.sensor.upper(), round(reading.value * factor, 3))


class Threshold:
    def __init__(self, limit):
        self.limit = limit

    def __call__(self, reading):
        return reading.value > self.limit


factor = 2.0
pool = Pool(2, start_method=sys.argv[1])
report = {"pids": pool.worker_pids}
calibrated = pool.map(calibrate, [Reading("a", 1.5), Reading("b", -0.25)])
report["classes"] = [type(r) is Reading for r in calibrated]
report["calibrated"] = [[r.sensor, r.value] for r in calibrated]
report["threshold"] = pool.map(Threshold(0.0), calibrated)
report["lambda"] = sorted(pool.imap_unordered(lambda r: r.sensor * 2, calibrated))
report["apply"] = pool.apply(lambda: os.getpid() in report["pids"])
pool.close()
pool.join()
print(json.dumps(report))
