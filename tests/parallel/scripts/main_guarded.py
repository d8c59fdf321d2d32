"""A runner class defined under ``if __name__ == "__main__":``, run with argv[1]'s start method.

Also run as ``python - METHOD < main_guarded.py`` (a script read from stdin,
like a notebook: no file a worker could import). Prints one JSON line.
"""

import json
import sys

if __name__ == "__main__":
    from easycore.common.parallel import OrderedRunner

    OFFSET = 1000  # a global of __main__: goes with the class, by value

    class Guarded(OrderedRunner):
        @staticmethod
        def producer_init(device, cfg):
            cfg.offset = OFFSET

        @staticmethod
        def producer_work(device, cfg, data):
            return data * data + cfg.offset

        @staticmethod
        def consumer_init(cfg):
            cfg.out = []

        @staticmethod
        def consumer_work(cfg, data):
            cfg.out.append(data)

        @staticmethod
        def consumer_end(cfg):
            return cfg.out

    method = sys.argv[1]
    with Guarded(2, start_method=method) as runner:
        out = runner(range(20))
        again = runner([5])
    print(json.dumps({"out": out, "again": again}))
