"""Names a package imports on first use (PEP 562): one ``__getattr__`` for all.

A short script, and every worker started with ``spawn`` or ``forkserver``,
pays for each module it imports: ``easycore.common.parallel`` and its
``pool`` package import a public name's module only when the name is first
read, then keep it in their namespace (later reads are plain lookups).

Both import through `load`, with the cyclic garbage collector paused: an
import makes only objects that live as long as the interpreter (functions,
classes, constants), and the ~15 young and 2 middle-generation collections
that easycore's modules would trigger find nothing to free (2-2.5 ms of a
cold ``fork`` script's ~55). One young collection still runs after, at the next
allocation, and moves them on.
"""

from __future__ import annotations

import gc
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from types import ModuleType
    from typing import Any, Callable, Dict, List, Tuple

__all__ = ["absolute", "bind", "exports", "load"]


def load(module: str, package: str) -> ModuleType:
    """Import ``module`` (absolute, or relative to ``package``), the garbage collector paused.

    The collector is re-enabled after (also when the import raised) only if
    this call disabled it: one that you (or an outer `load`) turned off stays off.
    The import statement's own machinery does the work (``__import__``, with its
    module locks): ``importlib``, a module of its own, is not needed for it.

    Args:
        module (str): the module, absolute or relative to ``package`` (``".pool"``,
            ``"..engine.core"``).
        package (str): the package a relative ``module`` is resolved in.

    Returns:
        module: the imported module.
    """
    name = absolute(module, package)
    pause = gc.isenabled()
    if pause:
        gc.disable()
    try:
        __import__(name)
        return sys.modules[name]
    finally:
        if pause:
            gc.enable()


def absolute(module: str, package: str) -> str:
    """``module``'s absolute name: as it is, or resolved in ``package`` if relative.

    Args:
        module (str): ``"a.b"``, or relative: ``".pool"`` (in ``package``),
            ``"..engine"`` (in its parent), ...
        package (str): the package a relative name is resolved in.

    Returns:
        str: the absolute name.
    """
    if not module.startswith("."):
        return module
    rest = module.lstrip(".")
    level = len(module) - len(rest)
    parts = package.split(".")
    if level > len(parts):
        raise ImportError(f"{module!r} goes beyond the top-level package of {package!r}")
    base = ".".join(parts[:len(parts) - level + 1])
    return f"{base}.{rest}" if rest else base


def exports(package: str, names: Dict[str, str]) -> Tuple[Callable[[str], Any],
                                                          Callable[[], List[str]]]:
    """A package's module ``__getattr__`` and ``__dir__`` for ``names``.

    Args:
        package (str): the package's ``__name__``.
        names (dict): public name -> the module that defines it, relative to
            the package (``".pool"``).

    Returns:
        tuple: ``(__getattr__, __dir__)``, to assign at the package's top level.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            defining = load(module, package)
        except AttributeError as exc:
            # Raised from here as it is, ``from package import name`` would say
            # only "cannot import name": the module's own failure (a dependency
            # of the wrong version, say) is what needs fixing.
            where = absolute(module, package)  # relative (".futures") or absolute
            raise ImportError(f"cannot import {name!r} from {package!r}: importing "
                              f"{where} failed: {exc!r}", name=package) from exc
        value = getattr(defining, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__


def bind(namespace: Dict[str, Any], parts: Dict[str, str]) -> None:
    """Import a module's globals that only some of its code uses, when that code runs.

    ``Pool``'s and the runners' modules name the caller's parts (the engine,
    the results, the option checks) in their methods only: a ``spawn`` worker,
    which imports your script again and with it those modules, never runs
    them. Each module imports them for the type checker only, and its
    constructor binds them here.

    Args:
        namespace (dict): the module's ``globals()``.
        parts (dict): a module, relative to the namespace's package (``".results"``)
            -> the names it defines, separated by spaces.
    """
    for module, names in parts.items():
        wanted = names.split()
        if all(name in namespace for name in wanted):
            continue
        defining = load(module, namespace["__package__"])
        for name in wanted:
            namespace[name] = getattr(defining, name)
