"""Objects for the engine tests of the background clients (importable by workers)."""

from __future__ import annotations


class InterruptWhenPickled:
    """Pickling it raises ``KeyboardInterrupt``: a Ctrl-C landing while a job's
    arguments are being sent (after a worker's credit was reserved)."""

    def __reduce__(self):
        raise KeyboardInterrupt


class Echo:
    """A service object."""

    def echo(self, value):
        return value
