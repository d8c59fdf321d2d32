"""A task for ``test_import_cost``: what the worker that runs it has imported.

Imports nothing of easycore itself, so that a worker running it imports only
what its own start needs."""

import sys


def worker_modules(_=None):
    return sorted(sys.modules)
