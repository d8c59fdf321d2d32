"""What type hints need at run time, without importing ``typing``.

``typing`` costs a fresh interpreter 2.5-4 ms: a short script pays it once,
and so does every worker started with ``spawn`` or ``forkserver``. Every
module of easycore-parallel imports its hints' names under
``if TYPE_CHECKING:`` (``TYPE_CHECKING = False`` beside it: the type checker
takes any name ``TYPE_CHECKING`` as true). What a class or a module needs
beyond annotations comes from here: the type checker sees ``typing``'s own
objects; the interpreter gets light stand-ins.

* ``Generic``: a base whose subclasses take ``[...]`` at run time (a
  ``types.GenericAlias``, as ``multiprocessing.pool.AsyncResult``'s);
* ``Protocol``: ``object`` (nothing checks a protocol at run time);
* ``TypeVar`` and ``ParamSpec``: the variable's name.

Overloads are written under ``if TYPE_CHECKING:`` before their implementation:
the interpreter never sees them.

Named tuples have their own base, in ``_named_tuples``.
"""

from __future__ import annotations

import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Generic as Generic
    from typing import ParamSpec as ParamSpec
    from typing import Protocol as Protocol
    from typing import TypeVar as TypeVar
else:
    class Generic:
        """A base whose subclasses are subscriptable: ``AsyncResult[int]``."""

        __slots__ = ()
        __class_getitem__ = classmethod(types.GenericAlias)

    Protocol = object

    def TypeVar(name, *constraints, **options):
        return name

    ParamSpec = TypeVar

__all__ = ["Generic", "ParamSpec", "Protocol", "TypeVar"]
