"""`lazy_copy`: a copy of a config tree that costs nothing until it is used.

A runner hands each call a fresh copy of its `cfg`, so that what one call's
consumer changes never reaches the next call or the caller's tree. A deep copy
of a large tree (a 10,000-key lookup table) costs tens of milliseconds per
call; most calls read a few keys and write a counter. `lazy_copy` gives the
same isolation at the cost of what a call touches:

* the copy's own dict holds the source's keys, sharing their values;
* values that cannot change (numbers, strings, tuples of them ...) stay shared;
* any other value — a nested node, a list, an object — is copied the first
  time the copy hands it out (attribute or item access, `get`, `items`,
  `values`, `pop` ...); a nested node is itself copied lazily, so reading one
  key of a 10,000-key sub-tree copies one dict level, in C.

A level of the tree with many keys (`OVERLAY_FROM` or more: a 100,000-key
lookup table) is not even copied as one dict: the copy starts as an *overlay*
over the source's level, holding only the keys the call reads or writes, so
changing one key of a 100,000-key node costs what changing one key of a small
one does. Reads and writes of single keys (attribute or item access, `get`,
`in`, assignment) stay in the overlay; anything else (iteration, `len`, `==`,
`items`, pickling, `freeze`, `dump` ...) first copies the rest of the level in,
in the source's order, as the small levels are copied, and from then on the
node is an ordinary lazy copy.

Operations that walk the whole tree (`freeze`, `merge`, `merge_from_list`,
`dict()`, `str()`) first copy the parts they walk. The source is never changed
through a lazy copy. The one rule for the caller: the *source* must not change
while a lazy copy of it is in use (an untouched part would show the change),
which holds for a runner's private snapshot of its cfg.
"""

from __future__ import annotations

import types

from .node import CfgNode, _deepcopy, _rebuild
from .peers import set_state, state_of

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple, Type

__all__ = ["OVERLAY_FROM", "lazy_copy"]

#: Levels with at least this many keys start as an overlay over the source's
#: level (per-key copies) instead of a copy of the whole level.
OVERLAY_FROM = 64

# Values of these types never change, so a copy may share them.
_IMMUTABLE = frozenset({int, float, str, bool, type(None), bytes, complex, range})

#: Per source node (by id, holding the node so the id stays its own): the keys
#: whose values must be copied before they are handed out.
TemplateCache = dict[int, tuple[CfgNode, frozenset[str]]]


def _shareable(value: Any) -> bool:
    kind = type(value)
    if kind in _IMMUTABLE:
        return True
    if kind is tuple or kind is frozenset:
        return all(_shareable(item) for item in value)
    return False


def _unshared_keys(source: CfgNode, cache: TemplateCache) -> FrozenSet[str]:
    hit = cache.get(id(source))
    if hit is not None and hit[0] is source:
        return hit[1]
    keys = frozenset(k for k, v in dict.items(source) if not _shareable(v))
    cache[id(source)] = (source, keys)
    return keys


if TYPE_CHECKING:  # the mixin is only ever used in front of a CfgNode class
    _MixinBase = CfgNode
else:
    _MixinBase = object


class _LazyCopyMixin(_MixinBase):
    """Methods of a lazy copy; mixed in front of the source's own class."""

    __slots__ = ()
    _lazy_unshared: set[str]
    _lazy_cache: TemplateCache
    #: an overlay's source level (None once the level is copied in, or never an overlay)
    _lazy_src: Optional[CfgNode]
    _lazy_base: Type[CfgNode]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # A node made by a CfgNode method (`type(self)()`, `type(self).__new__`)
        # owns what it holds: nothing marked shared.
        self = super().__new__(cls, *args, **kwargs)
        object.__setattr__(self, "_lazy_unshared", set())
        object.__setattr__(self, "_lazy_cache", {})
        object.__setattr__(self, "_lazy_src", None)
        return self

    # ------------------------------------------------------------ overlays
    def _lazy_pull(self, key: str) -> Any:
        """An overlay: this copy's own value of the source's `key`, kept from now on."""
        src: Any = self._lazy_src
        value = dict.__getitem__(src, key)
        if _shareable(value):
            own = value
        elif isinstance(value, CfgNode):
            own = _make(value, self._lazy_cache)
        else:
            own = _deepcopy(value)
        self._store(key, own)
        return own

    def _lazy_fill(self) -> None:
        """An overlay becomes an ordinary lazy copy: the source's other keys come in.

        In the source's order, keys this copy wrote keeping their place (new
        ones after), as a copy of the whole level would have them; nodes the
        overlay handed out are filled too, so that walks reading the storage
        directly (freezing, dumping, pickling) see whole levels.
        """
        src = self._lazy_src
        if src is None:
            return
        object.__setattr__(self, "_lazy_src", None)
        own = dict(dict.items(self))
        mirror = self.__dict__
        own_mirror = dict(mirror)
        dict.clear(self)
        dict.update(self, src)  # C: the source is a plain node
        dict.update(self, own)
        unshared = set(_unshared_keys(src, self._lazy_cache))
        unshared.difference_update(own)
        mirror.clear()
        mirror.update(src.__dict__)
        for key in unshared:
            mirror.pop(key, None)
        mirror.update(own_mirror)
        object.__setattr__(self, "_lazy_unshared", unshared)
        for value in own.values():
            if isinstance(value, _LazyCopyMixin):
                value._lazy_fill()

    def __contains__(self, key: Any) -> bool:
        if dict.__contains__(self, key):
            return True
        src = self._lazy_src
        return src is not None and dict.__contains__(src, key)

    # ------------------------------------------------ copying on first use
    def _lazy_take(self, key: str) -> Any:
        """Replace the shared value of `key` by this copy's own, and return it."""
        value = dict.__getitem__(self, key)
        if isinstance(value, CfgNode):
            own: Any = _make(value, self._lazy_cache)
        else:
            own = _deepcopy(value)
        self._store(key, own)  # also forgets `key` as unshared
        return own

    def _lazy_take_all(self, deep: bool = False) -> None:
        self._lazy_fill()
        for key in list(self._lazy_unshared):
            self._lazy_take(key)
        if deep:
            for value in dict.values(self):
                if isinstance(value, _LazyCopyMixin):
                    value._lazy_take_all(deep=True)

    def _lazy_take_nodes(self) -> None:
        """Own every nested node of this level (what tree walks descend into)."""
        self._lazy_fill()
        for key in list(self._lazy_unshared):
            if isinstance(dict.__getitem__(self, key), CfgNode):
                self._lazy_take(key)

    # --------------------------------------------------- reads hand out own
    def __getattr__(self, name: str) -> Any:
        # Reached for keys left out of the attribute mirror until first use
        # (dunder keys are items only, as in every CfgNode).
        if name[:2] != "__":
            if name in self._lazy_unshared:
                return self._lazy_take(name)
            src = self._lazy_src
            if src is not None and dict.__contains__(src, name) \
                    and not dict.__contains__(self, name):
                return self._lazy_pull(name)
        return super().__getattr__(name)

    def __getitem__(self, key: Any) -> Any:
        if dict.__contains__(self, key):
            if key in self._lazy_unshared:
                return self._lazy_take(key)
            return dict.__getitem__(self, key)
        src = self._lazy_src
        if src is not None and dict.__contains__(src, key):
            return self._lazy_pull(key)
        return dict.__getitem__(self, key)  # __missing__: the node's own error

    def get(self, key: Any, default: Any = None) -> Any:
        if not self.__contains__(key):
            return default
        return self.__getitem__(key)

    def __iter__(self) -> Any:
        # Defined so that dict(copy), {**copy} and dict.update(copy) go through
        # keys() and __getitem__ (CPython's fast path reads the storage directly).
        return dict.__iter__(self)

    def items(self) -> Any:
        self._lazy_take_all()
        return dict.items(self)

    def values(self) -> Any:
        self._lazy_take_all()
        return dict.values(self)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self._lazy_unshared:
            self._lazy_take(key)
        return super().pop(key, *default)

    def popitem(self) -> Any:
        self._lazy_take_all()
        return super().popitem()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self._lazy_unshared:
            self._check_mutable(key)  # refused on a frozen node, as CfgNode.setdefault is
            return self._lazy_take(key)
        return super().setdefault(key, default)

    # ------------------------------------------- writes forget the sharing
    def _store(self, key: str, value: Any) -> None:
        self._lazy_unshared.discard(key)
        super()._store(key, value)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._lazy_unshared.discard(key)

    def clear(self) -> None:
        super().clear()
        self._lazy_unshared.clear()

    # ------------------------------------- tree walks own what they walk
    def freeze(self, frozen: bool = True) -> None:
        # The walk sets a flag on every node it reaches, at any depth and inside
        # lists and tuples: all of them must be this copy's own first, or a
        # consumer's freeze would reach the source's nodes (and every later copy).
        self._lazy_take_all(deep=True)
        super().freeze(frozen)

    def _plan_merge(self, cfg: Any, plan: Any) -> None:
        self._lazy_take_nodes()
        super()._plan_merge(cfg, plan)

    def _walk_to_parent(self, dotted: str, allow_new: bool, copies: Any = None) -> Any:
        node: Any = self
        for part in dotted.split(".")[:-1]:
            if isinstance(node, _LazyCopyMixin) and part in node._lazy_unshared:
                node._lazy_take(part)
            node = dict.get(node, part)
            if not isinstance(node, CfgNode):
                break
        return super()._walk_to_parent(dotted, allow_new, copies)

    def dict(self) -> Dict[str, Any]:
        self._lazy_take_all(deep=True)
        return super().dict()

    # ------------------------------------ copies and pickles are plain nodes
    def __reduce__(self) -> Tuple[Any, ...]:
        return (
            _rebuild,
            (self._lazy_base, dict(self), self._frozen, self._key_path, state_of(self)),
        )

    def __deepcopy__(self, memo: Dict[int, Any]) -> CfgNode:  # type: ignore[override]
        new = self._lazy_base()
        memo[id(self)] = new
        object.__setattr__(new, "_key_path", self._key_path)
        set_state(new, state_of(self))
        for key, value in dict.items(self):
            new._set(key, _deepcopy(value, memo))
        object.__setattr__(new, "_frozen", self._frozen)
        return new


_CLASSES: Dict[Type[CfgNode], Type[CfgNode]] = {}

#: What an overlay answers from its own keys and the source's without filling
#: in the level; every other method of the class fills it first.
_OVERLAY_SAFE = frozenset({
    "__getattr__", "__getitem__", "get", "__contains__", "__setattr__", "__setitem__",
    "__getattribute__", "__new__", "__init_subclass__", "__subclasshook__", "__class__",
    "_store", "_set", "_prepare", "_check_mutable", "_path_of", "_lazy_pull", "_lazy_fill",
})
_METHODS = (types.FunctionType, types.WrapperDescriptorType, types.MethodDescriptorType)


def _filling(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def filled_first(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._lazy_src is not None:
            self._lazy_fill()
        return method(self, *args, **kwargs)

    filled_first.__name__ = filled_first.__qualname__ = name
    filled_first.__doc__ = getattr(method, "__doc__", None)
    return filled_first


def _lazy_class(base: Type[CfgNode]) -> Type[CfgNode]:
    """The lazy-copy class for `base` (same name, so reprs and errors read the same)."""
    cls = _CLASSES.get(base)
    if cls is None:
        namespace: Dict[str, Any] = {
            "__slots__": ("_lazy_unshared", "_lazy_cache", "_lazy_src"),
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "_lazy_base": base,
        }
        inner = type(base.__name__, (_LazyCopyMixin, base), dict(namespace))
        # Every method but the overlay's own fills an overlay in first: a
        # method of `base` or `dict` (and C code calling it) then sees the whole
        # level, whatever it reads the storage with.
        outer: Dict[str, Any] = {
            "__slots__": (),
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
        }
        for name in dir(inner):
            if name in _OVERLAY_SAFE:
                continue
            raw = _static(inner, name)
            if isinstance(raw, _METHODS):
                outer[name] = _filling(name, getattr(inner, name))
        cls = type(base.__name__, (inner,), outer)
        _CLASSES[base] = cls
    return cls


def _static(cls: type, name: str) -> Any:
    """``name`` as the class body that defines it holds it (a function, not a bound
    method), as ``inspect.getattr_static`` finds it on a class (no import of
    ``inspect``, which a script's cold start would pay for)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _make(source: CfgNode, cache: TemplateCache) -> CfgNode:
    base = source._lazy_base if isinstance(source, _LazyCopyMixin) else type(source)
    if isinstance(source, _LazyCopyMixin):
        source = _deepcopy(source)  # a copy of a copy: copy for real (rare)
    cls = _lazy_class(base)
    copy = cls.__new__(cls)
    object.__setattr__(copy, "_lazy_cache", cache)
    object.__setattr__(copy, "_key_path", source._key_path)
    set_state(copy, state_of(source))
    object.__setattr__(copy, "_frozen", source._frozen)
    if dict.__len__(source) >= OVERLAY_FROM:
        object.__setattr__(copy, "_lazy_src", source)
        # Never an empty storage over a non-empty source: C code that reads a
        # dict's size first (json's encoder) would see none. One key whose
        # copy costs nothing (a shareable value or a nested node) comes in now.
        for key, value in dict.items(source):
            if _shareable(value) or isinstance(value, CfgNode):
                copy._lazy_pull(key)
                return copy
        object.__setattr__(copy, "_lazy_src", None)  # no such key: copy the level
    unshared = _unshared_keys(source, cache)
    object.__setattr__(copy, "_lazy_unshared", set(unshared))
    dict.update(copy, source)  # C: the source is a plain node
    mirror = copy.__dict__
    mirror.update(source.__dict__)
    for key in unshared:
        mirror.pop(key, None)  # first attribute access goes through __getattr__
    return copy


def lazy_copy(cfg: CfgNode, cache: Optional[TemplateCache] = None) -> CfgNode:
    """A copy of `cfg` that copies a part only when it is first used.

    The copy behaves as `cfg.copy()` would: the same keys, values, class and
    frozen state, and no change to it ever reaches `cfg`. It costs one dict
    copy of the top level; nested nodes, lists and other changeable values are
    copied when the copy first hands them out.

    Args:
        cfg (CfgNode): the source. It must not change while the copy is in use.
        cache (dict or None): reuse one dict across many copies of the same
            unchanging source (what a runner does per call), so each node's
            scan for changeable values is done once.

    Returns:
        CfgNode: the copy, an instance of `type(cfg)` (pickled or deep-copied,
            it becomes a plain `type(cfg)`).

    Examples:
        ```python
        from easycore.common.config import CfgNode
        from easycore.common.config.lazy_copy import lazy_copy

        base = CfgNode({"TABLE": {"a": [1]}, "N": 0})
        view = lazy_copy(base)
        view.TABLE.a.append(2)
        view.N += 1
        assert base.TABLE.a == [1] and base.N == 0
        ```
    """
    return _make(cfg, {} if cache is None else cache)
