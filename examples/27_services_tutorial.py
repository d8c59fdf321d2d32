"""Services: one object in a process of its own, called from any other.

A ``VersionedStore`` (compare-and-set on versions, machin's OrderedServer)
shared by pool workers that race to update the same key: every acknowledged
push is kept, in one order of versions, and nothing is lost. Then any
function run in a service (``handle.run``, machin's ``rpc_sync``), a result
kept there (``RemoteRef``, machin's ``RRef``), groups and paired values.
"""

from __future__ import annotations

from easycore.common.parallel import Pool
from easycore.common.parallel.services import (
    Service,
    VersionedStore,
    get_paired,
    names,
    pair,
)


def heading(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)))


def add_one(store, key: str) -> int:
    """Read-modify-write with compare-and-set: retry until our push wins."""
    while True:
        value, version = store.call("pull", key)
        if store.call("push", key, value + 1, version + 1, version):
            return version + 1


def main() -> None:
    heading("A versioned store as a service")
    with Service.start(VersionedStore, depth=3) as store:  # its own process
        store.call("push", "steps", 0, 0, None)  # the first version of a key
        with Pool(2) as pool:  # the handle pickles into the workers
            versions = pool.starmap(add_one, [(store, "steps")] * 20)
        value, version = store.call("pull", "steps")
        print(f"20 racing increments -> value {value}, version {version}")
        print("each push got a version of its own:", sorted(versions) == list(range(1, 21)))
        print("versions kept (depth=3):", store.call("versions", "steps"))

        heading("Any function in the service's process")
        offset = 100
        print("a closure ran there:", store.run(lambda x: x + offset, 1))
        history = store.run(list, [1, 2, 3], remote=True)  # the result stays there
        history.call("append", 4)
        print("kept remotely, then fetched:", history.get())
        del history  # the service drops it

    heading("Groups and paired values")
    with Service.start(VersionedStore, name="shard-0", groups="shards"), \
            Service.start(VersionedStore, name="shard-1", groups="shards"):
        print("members of 'shards':", names("shards"))
        with pair("learning-rate", 0.01):
            print("paired value:", get_paired("learning-rate"))


if __name__ == "__main__":
    main()
