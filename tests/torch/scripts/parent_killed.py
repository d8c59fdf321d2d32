"""Starts spawned torch workers, prints their pids, then waits to be killed."""

import sys
import time

from easycore.torch.parallel import UnorderedRunner


class Idle(UnorderedRunner):
    pass


if __name__ == "__main__":
    runner = Idle(["cpu", "cpu"], start_method=sys.argv[1])
    print(" ".join(str(pid) for pid in runner.worker_pids), flush=True)
    time.sleep(120)
