"""A versioned key-value store with compare-and-set, for clients that race."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict

from .dispatch import is_remote_call

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Hashable, List, Optional, Tuple

__all__ = ["VersionedStore"]


class VersionedStore:
    """Keys whose values change only by compare-and-set on their newest version.

    Run it as a service (``Service.start(VersionedStore, depth=...)``) and
    every client sees one order of versions: a push succeeds only if it names
    the version it replaces, so of two clients that read version 3 and push
    version 4, exactly one wins and the other learns it lost (and pulls).
    Calls on a service run one at a time, which makes the check and the write
    one atomic step; used directly, a lock does the same.

    Versions are any hashable values (usually ints counting up). ``depth``
    versions of each key are kept, the newest last.

    Values are stored as copies: changing a tensor or an array after pushing
    it, or after pulling it, does not change the store. (Through a service
    the trip between processes is the copy; used in-process, the store
    copies with ``copy.deepcopy``.)

    Args:
        depth (int): how many versions of each key to keep (at least 1).

    Examples:
        ```python
        from easycore.common.parallel.services import VersionedStore

        store = VersionedStore(depth=2)
        assert store.push("w", 1.0, version=1, prev_version=None)  # first push
        assert store.push("w", 2.0, version=2, prev_version=1)
        # stale: 2 is newest
        assert not store.push("w", 9.9, version=3, prev_version=1)
        assert store.pull("w") == (2.0, 2)
        assert store.pull("w", version=1) == (1.0, 1)
        assert store.versions("w") == [1, 2]
        ```
    """

    def __init__(self, depth: int = 1) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int of at least 1, got {depth!r}")
        self.depth = depth
        self._data: Dict[Hashable, OrderedDict] = {}
        self._lock = threading.Lock()

    def push(self, key: Hashable, value: Any, version: Hashable,
             prev_version: Optional[Hashable]) -> bool:
        """Store ``value`` as ``version`` of ``key`` if ``prev_version`` is its newest.

        Args:
            key (Hashable): the key.
            value (Any): the new value (stored as a copy).
            version (Hashable): the new version; not None, and not a version
                the key still keeps.
            prev_version (Hashable or None): the version this one replaces:
                the key's newest, or None for the first push of a new key.

        Returns:
            bool: True if stored; False if ``prev_version`` is not the newest
            (someone pushed first: pull and try again), nothing changed.

        Raises:
            ValueError: ``version`` is None, equals ``prev_version``, or is
                already kept for this key.
        """
        if version is None:
            raise ValueError(f"version of {key!r} must not be None")
        if version == prev_version:
            raise ValueError(f"version {version!r} of {key!r} must differ from prev_version")
        with self._lock:
            versions = self._data.get(key)
            newest = next(reversed(versions)) if versions else None
            if prev_version != newest:
                return False
            if versions is None:
                versions = self._data[key] = OrderedDict()
            elif version in versions:
                raise ValueError(f"version {version!r} of {key!r} is already stored; versions "
                                 f"must not repeat (kept: {list(versions)})")
            versions[version] = value if is_remote_call() else copy.deepcopy(value)
            while len(versions) > self.depth:
                versions.popitem(last=False)
            return True

    def pull(self, key: Hashable, version: Optional[Hashable] = None
             ) -> Optional[Tuple[Any, Hashable]]:
        """The value of ``key`` at ``version`` (None: its newest).

        Args:
            key (Hashable): the key.
            version (Hashable or None): which version; None for the newest.

        Returns:
            tuple or None: ``(value, version)`` (the value a copy), or None
            when the key is unknown or that version is not kept (any more).
        """
        with self._lock:
            versions = self._data.get(key)
            if not versions:
                return None
            if version is None:
                version = next(reversed(versions))
            elif version not in versions:
                return None
            value = versions[version]
        return (value if is_remote_call() else copy.deepcopy(value)), version

    def versions(self, key: Hashable) -> List[Hashable]:
        """The versions of ``key`` kept, oldest first (``[]`` for an unknown key).

        Args:
            key (Hashable):

        Returns:
            list:
        """
        with self._lock:
            return list(self._data.get(key, ()))

    def keys(self) -> List[Hashable]:
        """Every key pushed so far.

        Returns:
            list:
        """
        with self._lock:
            return list(self._data)

    def __repr__(self) -> str:
        return f"<VersionedStore depth={self.depth} keys={len(self._data)}>"
