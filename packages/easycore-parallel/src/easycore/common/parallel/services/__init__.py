"""Services: objects hosted in their own worker, called from any process.

machin.parallel's ``RpcGroup`` services and its ordered and parameter
servers, on easycore's engine instead of ``torch.distributed.rpc``:

```python
from easycore.common.parallel.services import Service, VersionedStore, lookup

# the owner's handle
store = Service.start(VersionedStore, depth=2, name="weights")
store.call("push", "w", [0.5], version=1, prev_version=None)
# from any process of this user; or pickle `store`
other = lookup("weights")
print(other.call("pull", "w"))       # ([0.5], 1)
other.close()                        # disconnects
store.close()                        # stops the service
```

* ``backend="process"``: the service runs in one easycore runner worker
  ([`server`][easycore.common.parallel.services.server]) and clients connect
  over a Unix socket in a private directory, authenticated with a random
  key ([`client`][easycore.common.parallel.services.client],
  [`wire`][easycore.common.parallel.services.wire],
  [`naming`][easycore.common.parallel.services.naming]; the connections are
  the [`connection`][easycore.common.parallel.connection] layer's, which
  the ``Queue`` shares); large arrays (and
  tensors, with ``easycore.torch.parallel.TensorTransport``) go through the
  runners' shared-memory transport.
* ``backend="ray"``: a Ray named actor
  ([`ray_service`][easycore.common.parallel.services.ray_service]).

Calls run one at a time in the service; errors and deaths reach every client
(``ServiceClosedError``, ``ServiceDiedError``, ``ServiceNotFoundError``, kept
with the runners' errors in ``easycore.common.parallel.errors``).
"""

from ..errors import ServiceClosedError, ServiceDiedError, ServiceNotFoundError
from .dispatch import is_remote_call
from .groups import PairedValue, get_paired, is_member, names, pair
from .handle import Service, ServiceHandle, lookup
from .remote_ref import RemoteRef
from .versioned_store import VersionedStore

__all__ = [
    "PairedValue",
    "RemoteRef",
    "Service",
    "ServiceClosedError",
    "ServiceDiedError",
    "ServiceHandle",
    "ServiceNotFoundError",
    "VersionedStore",
    "get_paired",
    "is_member",
    "is_remote_call",
    "lookup",
    "names",
    "pair",
]
