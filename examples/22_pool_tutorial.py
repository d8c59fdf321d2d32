"""The Pool tutorial: multiprocessing.Pool's API on easycore's engine.

First the drop-in replacement (only the import changes), then what the stdlib
pool cannot do: lambdas under spawn, a per-task timeout that replaces only the
stuck worker, a worker that dies without taking the pool down, NumPy arrays
through shared memory both ways, and ``submit`` / ``broadcast``.
"""

from __future__ import annotations

import os
import time

import numpy as np

from easycore.common.parallel import Pool, Queue, TaskTimeoutError, WorkerDiedError


def heading(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)))


def square(x: int) -> int:
    return x * x


def sometimes_stuck(x: int) -> int:
    if x == 3:
        time.sleep(60)  # a task that hangs (a network call without a timeout, say)
    return x


def sometimes_crashes(x: int) -> int:
    if x == 5:
        os._exit(1)  # a native crash, the out-of-memory killer...
    return x


def normalise(batch: np.ndarray) -> np.ndarray:
    return (batch - batch.mean()) / (batch.std() + 1e-6)


def produce(q: Queue, n: int) -> int:
    for i in range(n):
        q.put(np.full(1 << 20, i, dtype=np.uint8))  # 1 MiB, through shared memory
    return n


def main() -> None:
    heading("A drop-in for multiprocessing.Pool")
    with Pool(2) as pool:  # was: from multiprocessing import Pool
        print("map:           ", pool.map(square, range(10)))
        print("imap_unordered:", sorted(pool.imap_unordered(square, range(10))))
        result = pool.apply_async(square, (12,), callback=lambda v: print("callback got", v))
        print("apply_async:   ", result.get(timeout=10))
        print("starmap:       ", pool.starmap(pow, [(2, 10), (3, 3)]))

    heading("Beyond the stdlib")
    with Pool(2, start_method="spawn", progress=True) as pool:  # a bar per map, named after it
        offset = 100
        # A lambda closing over a local variable, under spawn: sent by value.
        print("a lambda:", pool.map(lambda x: x + offset, range(5)))
        pool.map(square, range(20_000))  # with a progress bar

        start = time.monotonic()
        try:
            pool.map(sometimes_stuck, range(6), task_timeout=1.0)
        except TaskTimeoutError as err:
            print(f"after {time.monotonic() - start:.1f} s: {err}")

        it = pool.imap(sometimes_crashes, range(8), chunksize=1)
        out: list[int | str] = []
        for _ in range(8):
            try:
                out.append(next(it))
            except WorkerDiedError as err:
                out.append("died")
                print("caught:", str(err).splitlines()[0])
        print("imap went on past the dead worker:", out)

        batches = [np.random.default_rng(i).normal(5.0, 2.0, (256, 1024)) for i in range(8)]
        normalised = pool.map(normalise, batches)  # 2 MB each way, through shared memory
        print("normalised batches, mean ~0:", [round(float(b.mean()), 6) for b in normalised][:3])

        future = pool.submit(square, 7)
        print("submit ->", future.result(timeout=10))
        print("one call per worker (pids):", pool.broadcast(os.getpid))

    heading("A queue between the caller and its workers")
    with Queue(maxsize=4) as q, Pool(2) as pool:  # passed to tasks like any argument
        done = pool.starmap_async(produce, [(q, 3), (q, 3)], chunksize=1)
        firsts = sorted(int(q.get(timeout=60)[0]) for _ in range(6))
        print(f"queue: {done.get(timeout=60)} arrays put, got firsts {firsts}")


if __name__ == "__main__":
    main()
