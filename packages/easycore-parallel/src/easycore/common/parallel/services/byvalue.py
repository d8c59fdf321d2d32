"""Call arguments and results by value: lambdas, closures and ``__main__`` code.

A service call's arguments and result go through the handle's transport
(pickle protocol 5, large buffers through shared memory). Plain pickle sends
functions by reference, which a lambda, a closure or a function of the
caller's ``__main__`` cannot survive. As ``Pool`` does for its functions
(easycore.common.parallel's ``pickling`` module), such values travel *by
value* through cloudpickle: wrapped in a
[`ByValue`][easycore.common.parallel.services.byvalue.ByValue], which the
receiving side's plain ``pickle.loads`` turns back into the value itself.
Everything else keeps the transport's own path (arrays and tensors out of
band).
"""

from __future__ import annotations

import pickle
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Tuple

__all__ = ["ByValue", "encode", "wrap_call"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_UNPICKLABLE = (pickle.PicklingError, AttributeError, TypeError)


class ByValue:
    """A value pickled with cloudpickle; unpickling it gives the value back.

    Args:
        value (Any): e.g. a lambda.
    """

    __slots__ = ("data",)

    def __init__(self, value: Any) -> None:
        import cloudpickle

        self.data = cloudpickle.dumps(value, protocol=_PROTOCOL)

    def __reduce__(self) -> Any:
        return (pickle.loads, (self.data,))


_CODE = (types.FunctionType, type)


def _by_value(obj: Any) -> bool:
    """Whether plain pickle would send ``obj`` by a reference the other side lacks."""
    if isinstance(obj, _CODE):
        qualname = getattr(obj, "__qualname__", "")
        return (getattr(obj, "__module__", None) in ("__main__", "__mp_main__")
                or "<lambda>" in qualname or "<locals>" in qualname)
    return False


def _any_by_value(values: Any) -> bool:
    # A plain loop over isinstance first: every call passes here, and most
    # arguments are data (a generator per call cost a small call ~3%).
    for value in values:  # noqa: SIM110 - any(generator) is what this avoids
        if isinstance(value, _CODE) and _by_value(value):
            return True
    return False


def wrap_call(args: tuple, kwargs: Dict[str, Any]) -> Tuple[tuple, Dict[str, Any]]:
    """``args`` and ``kwargs`` with each function or class that needs it by value.

    Args:
        args (tuple):
        kwargs (dict):

    Returns:
        tuple: ``(args, kwargs)``.
    """
    if _any_by_value(args):
        args = tuple(ByValue(a) if _by_value(a) else a for a in args)
    if kwargs and _any_by_value(kwargs.values()):
        kwargs = {k: ByValue(v) if _by_value(v) else v for k, v in kwargs.items()}
    return args, kwargs


def encode(transport: Any, value: Any) -> Tuple[Any, int]:
    """``transport.encode_results([value])``; by value when pickle refuses it.

    A lambda nested in a structure is found only here: the whole value then
    travels through cloudpickle, in-band.

    Raises:
        pickle.PicklingError, TypeError: cloudpickle cannot pickle it either.
    """
    try:
        return transport.encode_results([value])
    except _UNPICKLABLE as exc:
        try:
            wrapped = ByValue(value)
        except Exception:  # noqa: BLE001
            # cloudpickle failing in any way (or missing): the caller sees
            # the transport's own error, which names the value's problem.
            raise exc from None
        return transport.encode_results([wrapped])
