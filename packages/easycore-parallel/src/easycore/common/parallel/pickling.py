"""Sending code to workers: plain pickle first, cloudpickle for what it refuses.

Plain pickle sends a function or class *by reference* (its module and name),
which a worker started with ``spawn`` or ``forkserver`` can only follow if it
can import it. Lambdas, closures, and anything defined in ``__main__`` (a
script's ``if __name__ == "__main__":`` block, a notebook, code read from
stdin) cannot be imported there, so those go *by value* through
[cloudpickle](https://github.com/cloudpipe/cloudpickle), which workers read
with plain ``pickle.loads``. Code is pickled once per job, never per item.
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["dumps_code", "loads_code"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def _from_main(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    return module in ("__main__", "__mp_main__")


def dumps_code(obj: Any) -> bytes:
    """Pickle ``obj`` (functions, classes, or structures holding them) for a worker.

    Args:
        obj (Any): e.g. a function, or a tuple of a function and its options.

    Returns:
        bytes: readable with ``pickle.loads`` in any worker.

    Raises:
        pickle.PicklingError: neither pickle nor cloudpickle can pickle it.
    """
    parts = obj if isinstance(obj, tuple) else (obj,)
    if not any(_from_main(p) or _from_main(getattr(p, "__class__", None)) for p in parts):
        try:
            return pickle.dumps(obj, protocol=_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            pass  # a lambda or a local function: by value below
    import cloudpickle

    return cloudpickle.dumps(obj, protocol=_PROTOCOL)


def loads_code(data: bytes) -> Any:
    """The inverse of [`dumps_code`][easycore.common.parallel.pickling.dumps_code].

    Args:
        data (bytes):

    Returns:
        Any:
    """
    return pickle.loads(data)
