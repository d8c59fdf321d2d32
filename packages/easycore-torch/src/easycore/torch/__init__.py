"""easycore for PyTorch: runners built on ``torch.multiprocessing``."""

from ._version import __version__

__all__ = ["__version__"]
