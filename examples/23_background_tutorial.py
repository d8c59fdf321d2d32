"""Background work: the next batches made by worker processes while the loop trains.

``BackgroundTask`` calls one function again and again in background workers
(a few results ahead); ``JobQueue`` runs different jobs first in, first out.
Both are elektronn2's ``BackgroundProc`` and ``SharedQ``, on easycore's
engine: arrays through shared memory, errors and dead workers raised, never a
hang.
"""

from __future__ import annotations

import time

import numpy as np
from tqdm import tqdm

from easycore.common.parallel import BackgroundTask, JobQueue, WorkerError


def heading(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)))


def make_batch(batch_size: int, noise: float = 0.1) -> tuple:
    """An 'augmented' batch: random crops of a fixed image, plus noise."""
    rng = np.random.default_rng()  # a stream of its own in every worker
    image = np.linspace(0.0, 1.0, 64 * 64, dtype=np.float32).reshape(64, 64)
    crops = np.stack([image[y : y + 32, x : x + 32]
                      for y, x in rng.integers(0, 32, size=(batch_size, 2))])
    time.sleep(0.01)  # decoding and augmenting take time
    noisy = crops + rng.normal(0, noise, crops.shape).astype(np.float32)
    return noisy, rng.integers(0, 10, batch_size)


def slow_square(x: int, delay: float) -> int:
    time.sleep(delay)
    return x * x


def broken(x: int) -> int:
    raise ValueError(f"job {x} cannot be done")


def main() -> None:
    heading("BackgroundTask: the training-loop prefetch pattern")
    with BackgroundTask(make_batch, (64,), {"noise": 0.05}, workers=2, prefetch=2) as batches:
        for _ in tqdm(range(100), desc="training steps", unit="step"):
            data, _label = batches.get(timeout=30)  # ready when the step needs it
            _ = float(data.mean())  # the training step
        stats = batches.stats
        print(f"batch {data.shape} {data.dtype}; the loop waited {stats.waited:.2f} s in all")

    heading("JobQueue: jobs of uneven length, results first in, first out")
    with JobQueue(workers=2) as jobs:
        for x, delay in [(1, 0.3), (2, 0.0), (3, 0.1)]:
            jobs.put(slow_square, x, delay)
        print("in put order:", [jobs.get(timeout=30) for _ in range(3)])
        jobs.put(broken, 7)
        try:
            jobs.get(timeout=30)
        except WorkerError as err:
            print("a failed job raises:", str(err).splitlines()[0])


if __name__ == "__main__":
    main()
