"""An inter-process queue for tensors: easycore-parallel's `Queue` on `TensorTransport`.

CPU tensors (and NumPy arrays) are copied once into shared memory by
``put`` and rebuilt on it by ``get``, without a copy: the transport the torch
runners use. Other tensors (CUDA, sparse) use torch's own pickling, in-band.
"""

from __future__ import annotations

from typing import Optional

from easycore.common.parallel import Queue as _Queue
from easycore.common.parallel import SharedMemoryTransport

from .transport import TensorTransport

__all__ = ["Queue"]


class Queue(_Queue):
    """[`easycore.common.parallel.Queue`][easycore.common.parallel.Queue] for tensors.

    Args:
        maxsize (int): items held at most (0: no bound).
        transport (SharedMemoryTransport or None): None: a ``TensorTransport``.

    Examples:
        ```python
        # requires: torch
        import torch
        from easycore.torch.parallel import Pool, Queue


        def fill(q):
            for i in range(3):
                q.put(torch.full((1024, 1024), float(i)))  # 4 MiB each
            return "done"


        if __name__ == "__main__":
            with Queue() as q, Pool(1) as pool:
                done = pool.apply_async(fill, (q,))
                assert [q.get(timeout=60)[0, 0].item() for _ in range(3)] == [0.0, 1.0, 2.0]
                assert done.get(timeout=60) == "done"
        ```
    """

    def __init__(self, maxsize: int = 0, *,
                 transport: Optional[SharedMemoryTransport] = None) -> None:
        super().__init__(maxsize, transport=transport if transport is not None
                         else TensorTransport())
