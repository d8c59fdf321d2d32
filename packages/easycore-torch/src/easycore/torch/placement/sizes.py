"""How much memory a module's tensors take: `module_nbytes`."""

from __future__ import annotations

import torch

__all__ = ["module_nbytes", "tensor_nbytes"]


def tensor_nbytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor's elements, for any dtype.

    ``element_size()`` knows every dtype torch has (bfloat16, complex,
    float8, quantised, bool), so nothing is looked up in a table that could
    miss one. Sparse COO tensors count their values and indices.

    Args:
        tensor (torch.Tensor):

    Returns:
        int:
    """
    if tensor.layout == torch.sparse_coo:
        return tensor_nbytes(tensor._values()) + tensor_nbytes(tensor._indices())
    return tensor.numel() * tensor.element_size()


def module_nbytes(module: torch.nn.Module) -> int:
    """Bytes of a module's parameters and buffers, each counted once.

    Shared (tied) parameters count once, as ``module.parameters()`` yields
    them once. Works on ``meta`` modules too, so a model's size can be known
    before its memory is allocated. This is what the weights take; inference
    needs room for activations too, and training for gradients and optimiser
    state (about 2x to 4x more with Adam): scale it, or keep a ``reserve``.

    Args:
        module (torch.nn.Module):

    Returns:
        int: the number of bytes.

    Raises:
        TypeError: ``module`` is not a ``torch.nn.Module``.

    Examples:
        ```python
        # requires: torch
        import torch
        from easycore.torch.placement import module_nbytes

        layer = torch.nn.Linear(4, 2).to(torch.bfloat16)
        print(module_nbytes(layer))  # (4 * 2 + 2) * 2 bytes = 20
        ```
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module_nbytes needs a torch.nn.Module, got {type(module).__name__}")
    seen = set()
    total = 0
    for tensor in list(module.parameters()) + list(module.buffers()):
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += tensor_nbytes(tensor)
    return total
