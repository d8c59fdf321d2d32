"""Registry: a thread-safe name -> object mapping, usable as a decorator."""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs more import time than this whole module
    from collections.abc import Iterator
    from typing import Any, Callable, Optional, TypeVar, overload

    T = TypeVar("T")
    C = TypeVar("C", bound=Callable[..., Any])

__all__ = ["Registry"]


class _NoObject:
    """The private "no obj given" default of `Registry.register`: no caller can pass it
    by accident (as `...` or `None` could be), so `register(name, x)` always registers."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no object>"


_NO_OBJECT: Any = _NoObject()


class Registry:
    """The registry that provides name -> object mapping.

    Registering a taken name, or getting an unknown one, raises `KeyError`
    naming the registry (and, for unknown names, the closest registered one).
    `"name" in registry`, `len(registry)` and iteration over the names work
    too. Registration is thread-safe. `None` cannot be registered: it raises
    `TypeError` (it is almost always a failed import or a missing value).

    Examples:
        To create a registry:

        ```python
        from easycore.common.registry import Registry

        MODEL_REGISTRY = Registry("MODEL")
        ```

        To register an object with its `__name__`:

        ```python
        @MODEL_REGISTRY.register()
        class ResNet50:
            pass


        # or: MODEL_REGISTRY.register(obj=ResNet50)
        ```

        To register an object with a given name:

        ```python
        @MODEL_REGISTRY.register("resnet")
        class ResNet101:
            pass


        class VGG16:
            pass


        MODEL_REGISTRY.register("vgg", VGG16)
        ```

        To get a registered object from the registry:

        ```python
        model_class = MODEL_REGISTRY.get("ResNet50")
        assert MODEL_REGISTRY.get("vgg") is VGG16
        ```
    """

    def __init__(self, name: str) -> None:
        """
        Args:
            name (str): name of this registry
        """
        self._name = name
        self._objects: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """str: name of this registry."""
        return self._name

    def _do_register(self, name: str, obj: Any) -> None:
        # Every public path ends here, so the checks cannot be skipped.
        if not isinstance(name, str):
            raise TypeError(f"registry {self._name!r}: names must be str, got {name!r}")
        if obj is None:
            raise TypeError(
                f"registry {self._name!r}: cannot register None as {name!r} "
                "(a failed import or a missing value?); register an object"
            )
        with self._lock:
            if name in self._objects:
                raise KeyError(
                    f"an object named {name!r} is already registered in registry {self._name!r}"
                )
            self._objects[name] = obj

    if TYPE_CHECKING:  # for the type checker: a decorator, or None when obj is given

        @overload
        def register(self, name: Optional[str] = None) -> Callable[[T], T]: ...

        @overload
        def register(self, name: C) -> C: ...

        @overload
        def register(self, name: Optional[str], obj: object) -> None: ...

        @overload
        def register(self, name: Optional[str] = None, *, obj: object) -> None: ...

    # A private sentinel (not None, not `...`) means "no obj given": register(name, None)
    # is refused and register(name, ...) registers Ellipsis, neither returns a decorator.
    def register(self, name: Any = None, obj: Any = _NO_OBJECT) -> Any:
        """Register the given object with given name.

        If the object is not given, it will act as a decorator. Used as a decorator
        without parentheses (`@REG.register` on a class or a function), it registers
        what it decorates under its `__name__` and returns it unchanged, as
        `@REG.register()` does.

        Args:
            name (str, optional): if not given, it will use `obj.__name__` as the name.
            obj (object, optional): if not given, this method will return a decorator.
                It may not be `None`.

        Returns:
            None, a decorator that registers what it decorates and returns it, or (used
            as `@REG.register`) the decorated class or function itself.

        Raises:
            KeyError: the name is already registered.
            TypeError: `obj` is None, or has no `__name__` and no name was given, or
                `name` is neither a str, None, nor (without `obj`) a class or function.
        """
        if obj is _NO_OBJECT and name is not None and not isinstance(name, str):
            # `@REG.register` without parentheses hands us the class as `name`.
            if not callable(name) or not isinstance(getattr(name, "__name__", None), str):
                raise TypeError(
                    f"registry {self._name!r}: names must be str, got {name!r}; "
                    "use register(name, obj) or @register()"
                )
            self._do_register(name.__name__, name)
            return name
        if obj is _NO_OBJECT:

            def decorator(func_or_class: T) -> T:
                key = name if name is not None else _name_of(func_or_class)
                self._do_register(key, func_or_class)
                return func_or_class

            return decorator
        self._do_register(name if name is not None else _name_of(obj), obj)
        return None

    def unregister(self, name: str) -> None:
        """Remove registered object.

        Args:
            name (str): registered name

        Raises:
            KeyError: no object has that name.
        """
        with self._lock:
            if name not in self._objects:
                raise KeyError(self._missing_message(name))
            del self._objects[name]

    def is_registered(self, name: str) -> bool:
        """Get whether the given name has been registered.

        Args:
            name (str): the name to look up.

        Returns:
            bool: whether the name has been registered.
        """
        return name in self._objects

    def get(self, name: str) -> Any:
        """Get a registered object from registry by its name.

        Args:
            name (str): registered name.

        Returns:
            object: registered object.

        Raises:
            KeyError: no object has that name; the message suggests the closest one.
        """
        try:
            return self._objects[name]
        except KeyError:
            raise KeyError(self._missing_message(name)) from None

    def registered_names(self) -> list[str]:
        """Get all registered names.

        Returns:
            list[str]: list of registered names.
        """
        return list(self._objects)

    def __getstate__(self) -> dict[str, Any]:
        # The lock cannot be pickled or copied; each copy gets its own.
        with self._lock:
            return {"name": self._name, "objects": dict(self._objects)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._name = state["name"]
        self._objects = dict(state["objects"])
        self._lock = threading.Lock()

    def _missing_message(self, name: str) -> str:
        from difflib import get_close_matches  # only errors pay for difflib

        message = f"no object named {name!r} in registry {self._name!r}"
        close = get_close_matches(str(name), list(self._objects), n=1)
        return message + (f"; did you mean {close[0]!r}?" if close else "")

    def __contains__(self, name: object) -> bool:
        return name in self._objects

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._objects))

    def __repr__(self) -> str:
        return f"Registry({self._name!r}, names={sorted(self._objects)})"


def _name_of(obj: Any) -> str:
    if obj is None:
        raise TypeError("cannot register None; register an object")
    try:
        return obj.__name__
    except AttributeError:
        raise TypeError(f"{obj!r} has no __name__; pass a name: register(name, obj)") from None
