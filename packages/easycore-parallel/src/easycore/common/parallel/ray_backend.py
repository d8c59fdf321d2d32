"""The Ray back-end's public names, where 0.5 documented them.

The back-end itself lives in
[`easycore.common.parallel.backends.ray`][easycore.common.parallel.backends.ray]
since the modules of easycore-parallel were grouped by layer; this module keeps
the documented import path (`from easycore.common.parallel.ray_backend import
RayWorkerDiedError`) working. Importing it imports Ray.
"""

from .backends.ray import (
    RayBackend,
    RayWorkerDiedError,
    acquire_ray,
    import_ray,
    is_cuda,
    release_ray,
)

__all__ = [
    "RayBackend",
    "RayWorkerDiedError",
    "acquire_ray",
    "import_ray",
    "is_cuda",
    "release_ray",
]
