"""Share a model's parameters through a versioned store, with compare-and-set.

machin's ``PushPullModelServer`` on a
[`VersionedStore`][easycore.common.parallel.services.VersionedStore] service:
each push names the version it replaces, so concurrent trainers never
overwrite each other's updates unseen; the one that loses pulls the winner's
parameters and carries on from there.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, Optional

import torch

from easycore.common.parallel.services import ServiceHandle

from .transport import TensorTransport

__all__ = ["ModelSync"]


class ModelSync:
    """Push and pull a model's state dict through a ``VersionedStore`` service.

    ModelSync remembers, per model object, the version its parameters came
    from; a push succeeds only if that is still the newest version in the
    store, and becomes the next one. Versions are ints counting from 1.
    State dicts travel as copies (CPU tensors through shared memory on one
    machine); a model keeps its device, and pulling never clears gradients.
    Picklable: send it to worker processes with the handle inside (each copy
    starts with no versions known). It holds a connection of its own:
    [`close`][easycore.torch.parallel.ModelSync.close] it (or use ``with``)
    when done; closing it never stops the store.

    Args:
        handle (ServiceHandle): a service running a
            [`VersionedStore`][easycore.common.parallel.services.VersionedStore].
        name (str): the key of this model in the store (several models can
            share one store).

    Examples:
        ```python
        # requires: torch
        import torch
        from easycore.common.parallel.services import Service, VersionedStore
        from easycore.torch.parallel import ModelSync

        with Service.start(VersionedStore) as store, ModelSync(store, "policy") as sync:
            a, b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
            assert sync.push(a)              # version 1
            assert sync.pull(b)              # b now has a's parameters
            assert torch.equal(a.weight, b.weight)
        ```
    """

    def __init__(self, handle: ServiceHandle, name: str = "model") -> None:
        self._handle = handle.with_transport(TensorTransport)
        self.name = name
        self._versions: weakref.WeakKeyDictionary[torch.nn.Module, int] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    @property
    def handle(self) -> ServiceHandle:
        """ServiceHandle: the store's handle this sync calls through."""
        return self._handle

    def version(self, model: torch.nn.Module) -> Optional[int]:
        """The store version ``model``'s parameters came from (None: never synced here).

        Args:
            model (torch.nn.Module):

        Returns:
            int or None:
        """
        with self._lock:
            return self._versions.get(model)

    def push(self, model: torch.nn.Module, pull_on_fail: bool = True) -> bool:
        """Store ``model``'s state dict as the next version, if nobody pushed first.

        Args:
            model (torch.nn.Module): the model to push.
            pull_on_fail (bool): when another push came first, load the newest
                parameters into ``model`` (so its next push can succeed).

        Returns:
            bool: True if pushed; False if the store had moved on.
        """
        current = self.version(model)
        new = 1 if current is None else current + 1
        state = _cpu_state(model)
        if self._handle.call("push", self.name, state, new, current):
            with self._lock:
                self._versions[model] = new
            return True
        if pull_on_fail:
            self.pull(model)
        return False

    def pull(self, model: torch.nn.Module) -> bool:
        """Load the newest state dict into ``model`` (skipped if it has it already).

        Args:
            model (torch.nn.Module): the model to update, in place, on its device.

        Returns:
            bool: True if ``model`` now has the newest version; False when
            nothing was ever pushed under this name.
        """
        versions = self._handle.call("versions", self.name)
        if not versions:
            return False
        if versions[-1] == self.version(model):
            return True
        pulled = self._handle.call("pull", self.name)
        if pulled is None:  # pragma: no cover - the key cannot disappear
            return False
        state, version = pulled
        model.load_state_dict(state)  # copies into the model's own tensors
        del state  # the shared memory goes back to the store now
        with self._lock:
            self._versions[model] = version
        return True

    def close(self) -> None:
        """Disconnect this sync's own connection (the store keeps running)."""
        self._handle.close()

    def __enter__(self) -> ModelSync:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        return (ModelSync, (self._handle, self.name))

    def __repr__(self) -> str:
        return f"<ModelSync {self.name!r} on {self._handle!r}>"


def _cpu_state(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    # Tensors on the CPU are sent as they are (the transport copies them
    # once); others are copied to the CPU first.
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}
