"""[`Pool`][easycore.torch.parallel.Pool]: easycore's pool with torch's devices and tensors.

The same API as [`easycore.common.parallel.Pool`][easycore.common.parallel.Pool]
(which is ``multiprocessing.Pool``'s, plus timeouts, deaths survived,
``submit``, ``broadcast`` and contexts), for functions that run PyTorch:
``devices=["cuda:0", "cuda:1"]`` are checked, CUDA workers start with
``spawn`` and make their GPU current, each worker runs torch on its share of
the CPUs, and tensors travel as ``tensor_sharing`` says (machin's
``is_copy_tensor`` / ``share_method``):

* ``"segments"`` (the default): CPU tensors through easycore's recycled
  shared-memory segments, both ways, rebuilt without a copy on arrival;
* ``"copy"``: pickled by value through the pipe (simple, slow for large ones);
* ``"torch"``: torch's own sharing, shared-memory files for CPU tensors and
  CUDA IPC for GPU tensors (no copy off the GPU).
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict

from easycore.common import parallel as _common

from .policy import TorchDevicePolicy
from .transport import PickleTransport, TensorTransport, TorchSharingTransport

__all__ = ["Pool"]

_SHARING: Dict[str, type] = {
    "segments": TensorTransport,
    "copy": PickleTransport,
    "torch": TorchSharingTransport,
}


class Pool(_common.Pool):
    """A process pool for PyTorch: ``multiprocessing.Pool``'s API, torch's devices.

    Args:
        *args: as [`easycore.common.parallel.Pool`][easycore.common.parallel.Pool].
        tensor_sharing (str): ``"segments"``, ``"copy"`` or ``"torch"`` (see above).
        **kwargs: as [`easycore.common.parallel.Pool`][easycore.common.parallel.Pool].
    """

    device_policy: ClassVar[_common.DevicePolicy] = TorchDevicePolicy()

    def __init__(self, *args: Any, tensor_sharing: str = "segments", **kwargs: Any) -> None:
        if tensor_sharing not in _SHARING:
            raise ValueError(
                f"unknown tensor_sharing {tensor_sharing!r}; expected one of {sorted(_SHARING)}"
            )
        self._sharing = tensor_sharing
        super().__init__(*args, **kwargs)

    @property
    def tensor_sharing(self) -> str:
        """str: how tensors travel."""
        return self._sharing

    def make_policy(self) -> _common.DevicePolicy:
        """Torch's device policy with the transport ``tensor_sharing`` names."""
        return TorchDevicePolicy(_SHARING[self._sharing])
