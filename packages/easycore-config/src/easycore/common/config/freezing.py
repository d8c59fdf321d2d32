"""Freezing a config tree: its nodes, the nodes inside its lists and tuples, now and later.

`CfgNode.freeze` sets a flag on every node of the tree. A list of a frozen tree
stays a list that may change, but a node put into it afterwards must be frozen
too: otherwise `cfg.L.append(CfgNode(...))` on a frozen config gives a node that
takes any change. So while a tree is frozen its lists are `FrozenTreeList`s, a
`list` subclass that freezes whatever node comes into it; unfreezing the tree
gives it plain lists again.

The walk is a loop over a stack, not recursion: lists built in Python may nest
deep, and may hold themselves.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from collections.abc import Iterable
    from typing import Any, SupportsIndex

__all__ = ["FrozenTreeList", "set_frozen", "thawed"]


class FrozenTreeList(list):
    """A list inside a frozen config: a list, whose new items are frozen with the config.

    Only a frozen tree holds these; `freeze(False)` turns them back into plain lists.
    """

    __slots__ = ()

    def append(self, item: Any) -> None:
        list.append(self, frozen_value(item))

    def extend(self, items: Iterable[Any]) -> None:
        list.extend(self, [frozen_value(item) for item in items])

    def insert(self, index: SupportsIndex, item: Any) -> None:
        list.insert(self, index, frozen_value(item))

    def __setitem__(self, index: SupportsIndex | slice, value: Any) -> None:
        if isinstance(index, slice):
            list.__setitem__(self, index, [frozen_value(item) for item in value])
        else:
            list.__setitem__(self, index, frozen_value(value))

    def __iadd__(self, items: Iterable[Any]) -> FrozenTreeList:  # type: ignore[misc]
        self.extend(items)
        return self


def frozen_value(value: Any) -> Any:
    """`value` as a frozen tree holds it: nodes in it frozen, its lists `FrozenTreeList`s."""
    return _Walk(True).run(value)


def thawed(value: Any) -> Any:
    """`value` with plain lists in place of `FrozenTreeList`s (copies; the nodes are not touched).

    What `CfgNode.dict()` hands out of a frozen config: lists of the types a
    config read from YAML has, which `yaml.safe_dump` and `type(x) is list` accept.
    """
    return _Walk(False, nodes=False).run(value)


def set_frozen(root: Any, frozen: bool) -> None:
    """Freeze or unfreeze the node `root` and every node reachable from it.

    Args:
        root (CfgNode): the node to start from.
        frozen (bool): the new state.
    """
    _Walk(frozen).run(root)


class _Walk:
    """One freeze or unfreeze of a tree: flags set on nodes, lists swapped for their kind."""

    def __init__(self, frozen: bool, nodes: bool = True) -> None:
        from .node import CfgNode  # node imports this module

        self.node_type = CfgNode
        self.frozen = frozen
        # False: only copy the FrozenTreeLists into plain lists; nodes and
        # every other list are left as they are, and never changed.
        self.nodes = nodes
        self.seen: set[int] = set()
        # id of a list or tuple met -> what takes its place (itself if nothing changes);
        # also keeps each original alive, so that its id stays its own.
        self.memo: dict[int, Any] = {}
        self.kept: list[Any] = []
        self.todo: list[Any] = []

    def run(self, value: Any) -> Any:
        value = self.swap(value)
        while self.todo:
            container = self.todo.pop()
            if isinstance(container, self.node_type):
                self.visit_node(container)
            else:
                self.visit_list(container)
        return value

    def swap(self, value: Any) -> Any:
        """What holds `value`'s place; the containers in it are queued to be visited."""
        if isinstance(value, self.node_type):
            if self.nodes and id(value) not in self.seen:
                self.seen.add(id(value))
                self.todo.append(value)
            return value
        if isinstance(value, list):
            hit = self.memo.get(id(value))
            if hit is not None:
                return hit
            # Only plain lists change kind: a list subclass of the user's stays as it is.
            kind = type(value)
            if self.frozen and kind is list:
                new: Any = FrozenTreeList(value)
            elif not self.frozen and kind is FrozenTreeList:
                new = list(value)
            else:
                new = value
            self.remember(value, new)
            if self.nodes or new is not value:
                self.todo.append(new)
            return new
        if isinstance(value, tuple):
            hit = self.memo.get(id(value))
            return hit if hit is not None else self.swap_tuple(value)
        return value

    def remember(self, old: Any, new: Any) -> None:
        self.memo[id(old)] = new
        self.memo[id(new)] = new
        self.kept.append(old)

    def swap_tuple(self, top: tuple) -> Any:
        # A tuple cannot change: when a list in it is swapped, a new tuple takes its
        # place. Tuples nest as deep as lists may; built bottom-up from a stack.
        stack: list[Any] = [[top, 0, []]]
        result: Any = top
        while stack:
            frame = stack[-1]
            value, index, items = frame
            if index < len(value):
                frame[1] += 1
                item = value[index]
                if isinstance(item, tuple) and id(item) not in self.memo:
                    stack.append([item, 0, []])
                    continue
                items.append(self.swap(item))
                continue
            stack.pop()
            new = tuple(items) if any(a is not b for a, b in zip(items, value)) else value
            self.remember(value, new)
            if stack:
                stack[-1][2].append(new)
            else:
                result = new
        return result

    def visit_node(self, node: Any) -> None:
        object.__setattr__(node, "_frozen", self.frozen)
        mirror = node.__dict__
        for key, item in list(dict.items(node)):
            if isinstance(item, (list, tuple, self.node_type)):
                new = self.swap(item)
                if new is not item:
                    dict.__setitem__(node, key, new)
                    if key in mirror:
                        mirror[key] = new

    def visit_list(self, items: list[Any]) -> None:
        for index, item in enumerate(items):
            # only what may hold a node: a list of a million numbers stays cheap
            if isinstance(item, (list, tuple, self.node_type)):
                new = self.swap(item)
                if new is not item:
                    list.__setitem__(items, index, new)
