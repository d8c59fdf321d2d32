"""A task for ``test_import_cost``: what the worker that runs it has imported.

Imports nothing of easycore itself, so that a worker running it imports only
what its own start needs."""

import sys


def worker_modules(_=None):
    return sorted(sys.modules)


def runner_class():
    """A runner defined in a module (as runners are meant to be written)."""
    from easycore.common.parallel import UnorderedRunner

    class Doubles(UnorderedRunner):
        @staticmethod
        def producer_work(device, cfg, data):
            return 2 * data

    Doubles.__module__ = __name__
    Doubles.__qualname__ = "Doubles"
    globals()["Doubles"] = Doubles
    return Doubles
