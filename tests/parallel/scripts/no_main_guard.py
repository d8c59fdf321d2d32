"""A script that forgets ``if __name__ == "__main__":``: starts workers at its top level.

``python no_main_guard.py METHOD KIND [preloads]`` (KIND: ``pool`` or ``runner``).
Under fork it works (a forked worker never imports the script); under spawn and
forkserver every worker imports it again, and easycore must say why they die
(``MainGuardError``) instead of a ``RuntimeError`` per worker and a bare death.
With ``preloads``, the fork server imports the script itself before it forks
any worker, as Python 3.13.8 and 3.14.1 on do (their fix of its ``__main__``
preload, emulated here on older Pythons by handing it the script's path).
"""

import multiprocessing
import sys

# (A fork server that preloads the script may run it with an empty sys.argv,
# as 3.13.8 and 3.14.1 did: gh-143706.)
METHOD, KIND, *REST = sys.argv[1:] or ["forkserver", "pool"]

if __name__ == "__main__" and REST == ["preloads"]:
    from _fork_server_preloads import emulate_main_preload

    emulate_main_preload()

from easycore.common.parallel import Pool, UnorderedRunner  # noqa: E402 (after the emulation)

multiprocessing.set_start_method(METHOD, force=True)


def square(x):
    return x * x


class Squares(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data * data

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum


if KIND == "pool":
    with Pool(2) as pool:
        print("sum", sum(pool.map(square, range(20))))
else:
    with Squares(devices=2) as runner:
        print("sum", runner(range(20)))
