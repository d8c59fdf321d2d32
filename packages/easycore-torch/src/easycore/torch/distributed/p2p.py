"""Receiving from whichever rank sends first: `recv_any` and `irecv_any`.

``torch.distributed.irecv(tensor, src=None)`` receives from any source
natively (gloo's ``recv_anysource``); the sender is known to the request
once it completed. These two functions only make that explicit: the
blocking one returns the sender's rank, the other returns a request whose
``wait()`` does. Ranks are those of the default group, as everywhere in
``torch.distributed``. NCCL cannot receive from any source: use a gloo group
(a ``"cpu:gloo,cuda:nccl"`` backend receives CPU tensors through gloo).
"""

from __future__ import annotations

import datetime
from typing import Any, Optional

import torch
import torch.distributed as dist

__all__ = ["AnySourceRequest", "irecv_any", "recv_any"]


def _group(group: Any) -> Any:
    return dist.group.WORLD if group is None else group


def _check_supported(tensor: torch.Tensor, group: Any) -> None:
    name = str(dist.get_backend(group))
    if ":" in name:  # "cpu:gloo,cuda:nccl": the backend for this tensor's device
        table = dict(part.split(":", 1) for part in name.split(","))
        name = table.get(tensor.device.type, name)
    if name == "nccl":
        raise ValueError(
            f"NCCL cannot receive from any source (tensor on {tensor.device}); receive a "
            "CPU tensor on a gloo group, e.g. with backend='cpu:gloo,cuda:nccl'"
        )


class AnySourceRequest:
    """A pending any-source receive; `wait` returns the sender's rank.

    Attributes:
        work (torch.distributed.Work): torch's own request.
    """

    def __init__(self, work: Any, group: Any) -> None:
        self.work = work
        self._group = group

    def is_completed(self) -> bool:
        """Whether the tensor has arrived.

        Returns:
            bool:
        """
        return bool(self.work.is_completed())

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the tensor; return who sent it.

        Args:
            timeout (float or None): seconds to wait; None: the group's timeout.
                gloo closes its connections when a receive times out, so the
                group cannot be used afterwards: treat a timeout as fatal.

        Returns:
            int: the sender's rank in the default group.

        Raises:
            RuntimeError: torch's error: the receive timed out, or a peer failed.
        """
        if timeout is None:
            self.work.wait()
        else:
            self.work.wait(datetime.timedelta(seconds=timeout))
        # What torch.distributed.recv itself reads (the public name warns as deprecated).
        group_rank = self.work._source_rank()
        return dist.get_global_rank(self._group, group_rank)


def irecv_any(tensor: torch.Tensor, *, group: Any = None, tag: int = 0) -> AnySourceRequest:
    """Start receiving ``tensor`` from whichever rank sends first.

    Args:
        tensor (torch.Tensor): filled in place with the received data.
        group (ProcessGroup or None): the group to receive on; None: the default group.
        tag (int): match only sends with this tag.

    Returns:
        AnySourceRequest: ``wait()`` returns the sender's rank.

    Raises:
        ValueError: the group uses NCCL for this tensor's device.

    Examples:
        ```python
        # requires: torch
        import torch
        import torch.distributed as dist
        from easycore.torch.distributed import irecv_any, spawn

        def first_to_report(ctx):
            if ctx.rank == 0:
                buf = torch.zeros(1)
                request = irecv_any(buf, group=ctx.group)
                return request.wait(), buf.item()
            if ctx.rank == 2:
                dist.send(torch.tensor([42.0]), dst=0, group=ctx.group)

        if __name__ == "__main__":
            print(spawn(first_to_report, 3)[0])  # (2, 42.0)
        ```
    """
    group = _group(group)
    _check_supported(tensor, group)
    work = dist.irecv(tensor, src=None, group=group, tag=tag)
    if work is None:
        raise ValueError("this rank is not a member of the group it receives on")
    return AnySourceRequest(work, group)


def recv_any(tensor: torch.Tensor, *, group: Any = None, tag: int = 0) -> int:
    """Receive ``tensor`` from whichever rank sends first; return the sender's rank.

    Args:
        tensor (torch.Tensor): filled in place with the received data.
        group (ProcessGroup or None): the group to receive on; None: the default group.
        tag (int): match only sends with this tag.

    Returns:
        int: the sender's rank in the default group.

    Raises:
        ValueError: the group uses NCCL for this tensor's device.
    """
    return irecv_any(tensor, group=group, tag=tag).wait()
