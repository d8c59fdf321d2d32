"""`LazyPath`: a path computed the first time it is used (iopath's `LazyPath`)."""

import _thread  # threading's core, loaded with Python: importing threading costs time
import os
from typing import Any, Callable, Optional

__all__ = ["LazyPath"]

# Looked up on the instance itself, never passed on to the value: without them,
# `copy` and `pickle` (which look for `__setstate__`, `__reduce_ex__` ... on a bare
# instance) would reach `__getattr__` before `__init__` has run.
_OWN = frozenset({"_func", "_value", "_lock"})


class LazyPath(os.PathLike):
    """A path that is computed when it is first used, by a function called at most once.

    Useful where a path is known only later (a folder made when training starts, a file
    downloaded on demand) but code wants to hand it over now. Anything that takes an
    `os.PathLike` takes it: `os.fspath`, `open`, `os.path.join`,
    [`PathManager`][easycore.common.path.PathManager]'s methods. Once computed, it also
    behaves like the `str` it holds (`lp.endswith(".pth")`, `lp[0]`, `str(lp)`); before,
    those raise, so that nothing computes the path by accident (`str(lp)` and `repr(lp)`
    say it is not computed yet). It is not a `str`: `==` compares the objects, as in
    iopath; compare `os.fspath(lazy_path)`.

    Examples:
        ```python
        run_dir = LazyPath(lambda: make_run_dir())   # nothing happens yet
        with PathManager.open(os.path.join(run_dir, "log.txt"), "w") as f:  # made now
            f.write("epoch 1\\n")
        ```

    Args:
        func (callable): takes no argument and returns the path (a `str`, or an
            `os.PathLike` of one). Called the first time the path is used, once even
            when threads use it at the same time; if it raises, the next use calls it
            again.

    Raises:
        TypeError: (when the path is used) `func` returned something else than a path.
    """

    def __init__(self, func: Callable[[], Any]) -> None:
        self._func = func
        self._value: Optional[str] = None
        self._lock = _thread.allocate_lock()

    def __fspath__(self) -> str:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._compute()
                value = self._value
        return value

    def _compute(self) -> str:
        value = self._func()
        try:
            path = os.fspath(value)
        except TypeError:
            path = None
        if not isinstance(path, str):
            raise TypeError(
                f"LazyPath: {getattr(self._func, '__qualname__', self._func)!r} returned "
                f"{type(value).__name__}, not a path (a str or an os.PathLike of one)"
            )
        return path

    def __getattr__(self, name: str) -> Any:
        if name in _OWN or self.__dict__.get("_value") is None:
            raise AttributeError(
                f"LazyPath has no attribute {name!r} until its path is computed "
                "(os.fspath(lazy_path) computes it)"
            )
        return getattr(self._value, name)

    def __getitem__(self, key: Any) -> str:
        if self._value is None:
            raise TypeError(
                "LazyPath is not subscriptable until its path is computed "
                "(os.fspath(lazy_path) computes it)"
            )
        return self._value[key]

    def __str__(self) -> str:
        return self._value if self._value is not None else repr(self)

    def __repr__(self) -> str:
        if self._value is None:
            return "LazyPath(<not computed yet>)"
        return f"LazyPath({self._value!r})"

    def __getstate__(self) -> Any:
        # The lock stays behind; the function travels only while the path is not computed.
        return {"_func": self._func if self._value is None else None, "_value": self._value}

    def __setstate__(self, state: Any) -> None:
        self.__dict__.update(state)
        self._lock = _thread.allocate_lock()
