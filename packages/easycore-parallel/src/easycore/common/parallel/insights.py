"""Insights: where a run's time went, and which stage bounds its throughput.

With ``insights=True`` a runner, `Pool`, `BackgroundTask` or `JobQueue`
counts, per worker, the seconds spent in user code, moving data (unpickling
inputs, pickling and copying results) and waiting for work, and on the
caller's side the seconds spent reading the input, in the consumer's hooks and
waiting for results. `insights()` returns them as an
[`Insights`][easycore.common.parallel.Insights]; `print(insights)` shows a
short table that ends with a verdict: the stage that bounds the run, and what
to change.

The verdict follows the pipeline's shape. A producer/consumer run is as fast
as its slowest stage, and a stage that is busy nearly all of the wall time is
that stage: the consumer (one thread of the caller), the input (read by the
caller), the workers' own work, or moving data between them. Workers that wait
most of the time are the symptom of a slow consumer or a slow input, not a
cause, so the caller's stages are judged first.
"""

from __future__ import annotations

import json
import statistics
import textwrap
import time
from dataclasses import asdict, dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, List, Optional, Sequence

__all__ = ["Insights", "Recorder", "Verdict", "WorkerInsights"]

# A stage busy this share of the wall time (or more) bounds the run.
_BOUND = 0.7
# Workers waiting this share of their time (or more) are starved.
_STARVED = 0.5
# A worker whose busy time (or time per item) is this many times the median
# of the others is a straggler (noise on a loaded machine reaches 2x).
_STRAGGLER = 3.0
# Spans kept for the timeline of a plot, at most (a long run keeps its start).
_TIMELINE = 20_000


@dataclass
class WorkerInsights:
    """One worker slot's seconds and counts (replacement workers included).

    Attributes:
        worker (int): the worker's index.
        device (str): its device.
        startup (float): seconds from its start until it was ready for work.
        working (float): seconds in user code (``producer_work``, the task).
        moving (float): seconds moving data: unpickling inputs, pickling and
            copying results into shared memory, sending them.
        waiting (float): seconds with no work in hand (``wall - startup -
            working - moving``).
        items (int): items it ran.
        chunks (int): chunks it ran.
        bytes (int): bytes it received and sent.
        deaths (int): times its process died (or was killed) and was replaced.
        timeouts (int): items it ran past the task timeout.
        peak_rss (int or None): the most resident memory (RSS, bytes) its
            process held (the largest of its replacements'), read after chunks
            (Linux; None elsewhere, and for threads and Ray).
        peak_uss (int or None): the most memory only its process held (USS,
            bytes: what ending it gives back), read with ``peak_rss``.
        memory_replacements (int): times it was replaced for passing
            ``max_worker_memory``.
    """

    worker: int
    device: str
    startup: float = 0.0
    working: float = 0.0
    moving: float = 0.0
    waiting: float = 0.0
    items: int = 0
    chunks: int = 0
    bytes: int = 0
    deaths: int = 0
    timeouts: int = 0
    peak_rss: Optional[int] = None
    peak_uss: Optional[int] = None
    memory_replacements: int = 0

    @property
    def busy(self) -> float:
        """float: ``working + moving``."""
        return self.working + self.moving


@dataclass
class Verdict:
    """The stage that bounds a run, how much, and what to change.

    Attributes:
        stage (str): ``"consumer"``, ``"input"``, ``"moving data"``,
            ``"straggler"``, ``"workers"``, ``"latency"`` (no stage is busy
            most of the time) or ``"none"`` (nothing ran).
        share (float): the share of the wall time (or, for a straggler, the
            ratio to the median worker) that names the stage.
        advice (str): one sentence a person can act on.
    """

    stage: str
    share: float
    advice: str

    def __str__(self) -> str:
        return self.advice


@dataclass
class Insights:
    """Where the time of a run (a call, a job, or a task's life so far) went.

    Attributes:
        wall (float): wall seconds of the run.
        workers (list[WorkerInsights]): per worker slot.
        reading_input (float): caller seconds reading the input iterable.
        consuming (float): caller seconds in the consumer hooks (runners),
            callbacks (`Pool`) or the code between ``get`` calls
            (`BackgroundTask`, `JobQueue`).
        waiting_for_results (float): caller seconds blocked waiting for a result.
        caller_moving (float): caller seconds moving data (runners): sending
            items and receiving results (pickling, shared-memory copies) and
            the engine's bookkeeping around them.
        items (int): items (or calls) run.
        chunk_sizes (list[int]): the sizes of the chunks sent, in order.
        deaths (int): worker deaths during the run.
        timeouts (int): items that ran past the task timeout.
        retries (int): items run again after a death or timeout.
        timeline (list[list]): spans for `plot`'s timeline, as the caller saw
            them: ``[worker, start, working, moving]`` (seconds from the start of
            the run; worker -1 is the caller's consumer), the first 20000.
        stalled (dict or None): an item running far longer than the items
            before it when the insights were taken (a `Pool`'s, a
            `BackgroundTask`'s, a `JobQueue`'s): ``worker``, ``pid``,
            ``seconds`` it has run, ``typical`` seconds of an item, and
            ``where`` (the innermost frame of user code it is in, or "").
    """

    wall: float
    workers: List[WorkerInsights] = field(default_factory=list)
    reading_input: float = 0.0
    consuming: float = 0.0
    waiting_for_results: float = 0.0
    caller_moving: float = 0.0
    items: int = 0
    chunk_sizes: List[int] = field(default_factory=list)
    deaths: int = 0
    timeouts: int = 0
    retries: int = 0
    timeline: List[List[float]] = field(default_factory=list)
    stalled: Optional[Dict[str, Any]] = None

    # ----------------------------------------------------------- the verdict
    def verdict(self) -> Verdict:
        """Name the stage that bounds this run's throughput.

        Returns:
            Verdict: the stage, its share and advice.
        """
        wall = self.wall
        if self.stalled is not None:
            return self._stalled(self.stalled)
        if wall <= 0 or not self.workers or self.items == 0:
            return Verdict("none", 0.0, "nothing ran: no verdict")
        consumer = self.consuming / wall
        reading = self.reading_input / wall
        caller_moving = self.caller_moving / wall
        waiting = self._share("waiting")
        moving = self._share("moving")
        busy = self._share("working") + moving
        if consumer >= _BOUND:
            return self._consumer(consumer)
        if reading >= _BOUND or (waiting >= _STARVED and reading >= _STARVED / 2):
            return self._input(reading, waiting)
        caller = consumer + reading + caller_moving
        if caller >= _BOUND and waiting >= _STARVED:
            # The caller's thread is saturated while the workers wait for it:
            # its biggest part is the stage to change.
            if consumer >= max(reading, caller_moving):
                return self._consumer(consumer, caller)
            if reading >= caller_moving:
                return self._input(reading, waiting)
            return Verdict(
                "moving data", caller_moving,
                f"the caller spends {caller_moving:.0%} of the time sending items and receiving "
                f"results while the workers wait {waiting:.0%}: items are too small for what "
                "each costs to move; give each item more work (batch them), consume with "
                "`consumer_work_batch`, or return smaller results",
            )
        if busy >= 0.3 and moving / busy >= 0.5:
            mb = sum(w.bytes for w in self.workers) / max(1, self.items) / 2**20
            return Verdict(
                "moving data", moving / busy,
                f"{moving / busy:.0%} of worker time moves data ({mb:.2f} MB an item): return "
                "smaller results, send arrays instead of Python objects, or keep data on the GPU",
            )
        straggler = self._straggler()
        if straggler is not None:
            return straggler
        if busy >= _STARVED:
            return Verdict(
                "workers", busy,
                f"workers are busy {busy:.0%} of the time: the work itself bounds the run; "
                "more workers (or devices) would help",
            )
        return Verdict(
            "latency", max(busy, caller),
            f"no stage is busy most of the time (workers {busy:.0%}, the caller {caller:.0%}): "
            "the run is short or waits on round trips; give it more items per call, or more "
            "work per item",
        )

    @staticmethod
    def _stalled(stalled: Dict[str, Any]) -> Verdict:
        ratio = stalled["seconds"] / max(stalled["typical"], 1e-9)
        where = f" in {stalled['where']}" if stalled.get("where") else ""
        return Verdict(
            "stalled", ratio,
            f"worker {stalled['worker']} (pid {stalled['pid']}) has run one item for "
            f"{stalled['seconds']:.1f} s, {ratio:.0f}x a typical item "
            f"({stalled['typical']:.3g} s); it is{where}: call stacks() to see where every "
            "worker is, or set task_timeout",
        )

    @staticmethod
    def _consumer(share: float, caller: Optional[float] = None) -> Verdict:
        busy = f" (the caller {caller:.0%})" if caller is not None and caller > share else ""
        return Verdict(
            "consumer", share,
            f"the consumer is busy {share:.0%} of the time{busy}: consume in batches "
            "(`consumer_work_batch`) or move work into `producer_work`",
        )

    @staticmethod
    def _input(share: float, waiting: float) -> Verdict:
        return Verdict(
            "input", share,
            f"workers wait for input {waiting:.0%} of the time while reading the input "
            f"takes {share:.0%} of it: your input generator is the bottleneck (make "
            "items cheaper to produce, or produce them in `producer_work`)",
        )

    def _straggler(self) -> Optional[Verdict]:
        """A worker far slower than the others: in busy time (one slow item, the
        others done and waiting) or in seconds per item (a slow device, the load
        balanced around it). Compared with the median of the *other* workers: with
        two workers the median of all is their mean, which nothing doubles."""
        rows = [w for w in self.workers if w.items > 0]
        if len(rows) < 2:
            return None
        # Busy time as a share of the time each was up: a worker that joined late
        # (a slow start) did less, and is no reason to call the others slow.
        for what, unit in ((lambda w: w.busy / max(self.wall - w.startup, 1e-9), "longer"),
                           (lambda w: w.busy / w.items, "longer per item")):
            values = [what(w) for w in rows]
            k = max(range(len(rows)), key=values.__getitem__)
            others = statistics.median(values[:k] + values[k + 1:])
            # A straggler also has to matter: busy half of its time at least.
            up = max(self.wall - rows[k].startup, 1e-9)
            if others > 0 and values[k] >= _STRAGGLER * others and rows[k].busy >= 0.5 * up:
                ratio = values[k] / others
                return Verdict(
                    "straggler", ratio,
                    f"worker {rows[k].worker} ({rows[k].device}) ran {ratio:.1f}x {unit} than "
                    "the other workers: one slow item or a slow device",
                )
        return None

    def _share(self, what: str) -> float:
        """Mean over workers of ``what`` seconds as a share of the time each was up
        (the wall time less its start-up)."""
        if not self.workers or self.wall <= 0:
            return 0.0
        return sum(getattr(w, what) / max(self.wall - w.startup, 1e-9)
                   for w in self.workers) / len(self.workers)

    # ---------------------------------------------------------- presentation
    def to_dict(self) -> Dict[str, Any]:
        """Returns:
        dict: the insights as plain values (JSON-serialisable), verdict included.
        """
        data = asdict(self)
        data["verdict"] = asdict(self.verdict())
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Insights:
        """The inverse of `to_dict` (its ``verdict`` is recomputed, not read).

        Args:
            data (dict): what `to_dict` (or ``json.loads`` of `to_json`) gave.

        Returns:
            Insights:
        """
        fields = {k: v for k, v in data.items() if k not in ("verdict", "workers")}
        workers = [WorkerInsights(**w) for w in data.get("workers", [])]
        return cls(workers=workers, **fields)

    def to_json(self, **kwargs: Any) -> str:
        """Returns:
        str: `to_dict` as JSON; `kwargs` go to `json.dumps`.
        """
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        wall = self.wall or 1.0
        lines = [
            f"{self.items} items in {self.wall:.3f} s, {len(self.workers)} workers"
            + (f", {self.deaths} deaths" if self.deaths else "")
            + (f", {self.timeouts} timeouts" if self.timeouts else "")
            + (f", {self.retries} retries" if self.retries else ""),
            f"  {'worker':<12} {'start-up':>9} {'working':>9} {'moving':>9} {'waiting':>9}"
            f" {'items':>8} {'MB':>8}",
        ]
        for w in self.workers:
            label = f"{w.worker} {w.device}"[:12]
            lines.append(
                f"  {label:<12} {w.startup / wall:>9.0%} {w.working / wall:>9.0%}"
                f" {w.moving / wall:>9.0%} {w.waiting / wall:>9.0%} {w.items:>8}"
                f" {w.bytes / 2**20:>8.1f}"
            )
        lines.append(
            f"  caller: reading input {self.reading_input / wall:.0%}, consuming "
            f"{self.consuming / wall:.0%}, moving {self.caller_moving / wall:.0%}, "
            f"waiting {self.waiting_for_results / wall:.0%}"
        )
        memory = [w for w in self.workers if w.peak_rss is not None]
        if memory:
            rows = "; ".join(
                f"{w.worker} RSS {(w.peak_rss or 0) / 1e6:.0f}"
                + (f" USS {w.peak_uss / 1e6:.0f}" if w.peak_uss is not None else "")
                + (f" ({w.memory_replacements} replaced)" if w.memory_replacements else "")
                for w in memory)
            lines += textwrap.wrap(f"peak memory, MB: {rows}", 77, initial_indent="  ",
                                   subsequent_indent="    ")
        if self.chunk_sizes:
            sizes = sorted(self.chunk_sizes)
            lines.append(
                f"  chunks: {len(sizes)}, items per chunk {sizes[0]}..{sizes[-1]} "
                f"(median {statistics.median(sizes):g})"
            )
        # Under 80 columns: a terminal shows it without wrapping it badly.
        lines += textwrap.wrap(f"verdict: {self.verdict()}", 79, subsequent_indent="  ")
        return "\n".join(lines)

    def _lanes(self) -> List[str]:
        return [f"worker {w.worker} {w.device}" for w in self.workers] + ["caller"]

    def _plot_timeline(self, ax: Any) -> None:
        """When each worker worked and moved data, and when the caller consumed."""
        lanes = self._lanes()
        row = {w.worker: k for k, w in enumerate(self.workers)}
        row[-1] = len(self.workers)
        spans: Dict[Any, List[Any]] = {}
        for slot, start, working, moving in self.timeline:
            k = row.get(int(slot))
            if k is None:
                continue
            spans.setdefault((k, "work"), []).append((start, working))
            if moving > 0:
                spans.setdefault((k, "move"), []).append((start + working, moving))
        for (k, what), ranges in sorted(spans.items()):
            colour = _COLOURS["working"] if what == "work" else _COLOURS["moving"]
            ax.broken_barh(ranges, (k - 0.35, 0.7), facecolors=colour)
        ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
        ax.set_ylim(len(lanes) - 0.5, -0.5)
        ax.set_xlim(0, max(self.wall, 1e-9))
        ax.set_facecolor(_COLOURS["waiting"])
        ax.set_xlabel("seconds since the start (gaps: waiting)", fontsize=8)
        ax.set_title("timeline", fontsize=9)

    def _plot_breakdown(self, ax: Any) -> None:
        """Each lane's seconds by stage, stacked."""
        lanes = self._lanes()
        parts = {
            "start-up": [w.startup for w in self.workers] + [0.0],
            "working / consuming": [w.working for w in self.workers] + [self.consuming],
            "moving data / reading input": [w.moving for w in self.workers]
            + [self.reading_input + self.caller_moving],
            "waiting": [w.waiting for w in self.workers] + [self.waiting_for_results],
        }
        colours = [_COLOURS["startup"], _COLOURS["working"], _COLOURS["moving"],
                   _COLOURS["waiting"]]
        left = [0.0] * len(lanes)
        for (name, values), colour in zip(parts.items(), colours):
            ax.barh(lanes, values, left=left, color=colour, label=name)
            left = [a + b for a, b in zip(left, values)]
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("seconds", fontsize=8)
        ax.set_title("where the time went", fontsize=9)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=4, fontsize=8,
                  frameon=False)

    def plot(self, path: str) -> str:
        """Draw a per-worker timeline and the stage breakdown into a picture.

        The timeline shows when each worker ran user code (blue) and moved
        data (orange), and when the caller consumed; gaps are waiting. Below
        it, each worker's (and the caller's) seconds by stage.

        With matplotlib (``pip install "easycore-parallel[plot]"``) the picture
        is a PNG (or whatever `path`'s suffix names); without it, `path` gets
        the text table instead, and a `.txt` suffix is added when `path` has
        another one.

        Args:
            path (str): where to write.

        Returns:
            str: the path written.
        """
        try:
            import matplotlib

            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError:
            if not path.endswith(".txt"):
                path += ".txt"
            with open(path, "w", encoding="utf-8") as f:
                f.write(str(self) + "\n")
            return path
        fig, (line, bars) = plt.subplots(
            2, 1, figsize=(8, 1.2 * len(self.workers) + 3.4),
            gridspec_kw={"height_ratios": [1.4, 1.0]})
        self._plot_timeline(line)
        self._plot_breakdown(bars)
        fig.suptitle("\n".join(textwrap.wrap(str(self.verdict()), 90)), fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


_COLOURS = {"startup": "#9e9e9e", "working": "#3f51b5", "moving": "#ff9800",
            "waiting": "#e0e0e0"}


class Recorder:
    """Collects a run's seconds and counts while it runs (internal).

    The engine writes the workers' columns (one guarded call per chunk), the
    client writes the caller's (consumer hooks, waiting, reading the input).
    Sums are plain ``+=`` under the GIL: a pool's coordinator and a caller
    thread may both write, and at worst one addition of a statistic is lost.
    """

    def __init__(self, devices: Sequence[str]) -> None:
        """
        Args:
            devices (list[str]): one per worker slot.
        """
        self.devices = list(devices)
        #: the caller's own code is what runs between its ``get`` calls
        #: (``BackgroundTask``, ``JobQueue``): consuming = wall - waiting - reading
        self.between_calls = False
        #: the caller's thread pumps the engine (runners): its time blocked in
        #: the back-end's poll is its waiting for results
        self.caller_pumps = False
        self.reset()

    def reset(self) -> None:
        """Start counting afresh (a new call, or ``reset``)."""
        n = len(self.devices)
        # A worker still starting goes on starting in the new count, from its start.
        pending = getattr(self, "_restarting", {})
        self.started = time.perf_counter()
        self.startup = [0.0] * n
        self.seconds = [0.0] * n  # per chunk, unpickling inputs to encoding results
        self.working = [0.0] * n  # of which in user code
        self.items = [0] * n
        self.chunks = [0] * n
        self.bytes = [0] * n
        self.deaths = [0] * n
        self.timeouts = [0] * n
        self.peak_rss: List[Optional[int]] = [None] * n
        self.peak_uss: List[Optional[int]] = [None] * n
        self.memory_replacements = [0] * n
        self.reading_input = 0.0
        self.consuming = 0.0
        self.waiting_for_results = 0.0
        self.caller_moving = 0.0
        self.chunk_sizes: List[int] = []
        self.retries = 0
        self.timeline: List[List[float]] = []
        self._restarting: Dict[int, float] = {slot: self.started for slot in pending}

    # ----------------------------------------------------------- the engine
    def chunk_sent(self, n: int) -> None:
        self.chunk_sizes.append(n)

    def chunk_done(self, slot: int, n_items: int, seconds: float, working: float,
                   nbytes: int) -> None:
        if len(self.timeline) < _TIMELINE:
            # Its end as the caller saw it (the result's arrival), its start before that.
            start = time.perf_counter() - self.started - seconds
            work = working if working > 0 else seconds
            self.timeline.append([slot, start, work, max(0.0, seconds - work)])
        self.seconds[slot] += seconds
        # A back-end that does not time user code apart (working 0) counts all as work.
        self.working[slot] += working if working > 0 else seconds
        self.items[slot] += n_items
        self.chunks[slot] += 1
        self.bytes[slot] += nbytes

    def consumed(self, since: float) -> None:
        """The caller's consumer ran from ``since`` (a ``perf_counter``) until now."""
        now = time.perf_counter()
        self.consuming += now - since
        if len(self.timeline) < _TIMELINE:
            self.timeline.append([-1, since - self.started, now - since, 0.0])

    def started_all(self, seconds: float) -> None:
        for i in range(len(self.startup)):
            self.startup[i] += seconds

    def restarting(self, slot: int) -> None:
        self._restarting[slot] = time.perf_counter()

    def ready(self, slot: int) -> None:
        since = self._restarting.pop(slot, None)
        if since is not None:
            self.startup[slot] += time.perf_counter() - since

    def memory(self, slot: int, peak_rss: int, uss: Optional[int]) -> None:
        """A reading of ``slot``'s memory (bytes): its peaks so far are kept."""
        self.peak_rss[slot] = max(peak_rss, self.peak_rss[slot] or 0)
        if uss is not None:
            self.peak_uss[slot] = max(uss, self.peak_uss[slot] or 0)

    def memory_replaced(self, slot: int, rss: int) -> None:
        """``slot``'s worker held ``rss`` bytes, over ``max_worker_memory``: replaced."""
        self.memory_replacements[slot] += 1
        self.peak_rss[slot] = max(rss, self.peak_rss[slot] or 0)

    def lost(self, slot: int, timeout: bool) -> None:
        if timeout:
            self.timeouts[slot] += 1
        else:
            self.deaths[slot] += 1

    # ------------------------------------------------------------- results
    def snapshot(self, wall: Optional[float] = None, timeline: bool = True) -> Insights:
        """The insights so far.

        Args:
            wall (float or None): the run's wall seconds (default: since ``reset``).
            timeline (bool): copy the timeline too (not for a live verdict).

        Returns:
            Insights:
        """
        if wall is None:
            wall = time.perf_counter() - self.started
        rows = []
        for i, device in enumerate(self.devices):
            working = min(self.working[i], self.seconds[i])
            moving = self.seconds[i] - working
            startup = min(self.startup[i], wall)
            rows.append(WorkerInsights(
                i, device, startup, working, moving,
                max(0.0, wall - startup - working - moving), self.items[i], self.chunks[i],
                self.bytes[i], self.deaths[i], self.timeouts[i], self.peak_rss[i],
                self.peak_uss[i], self.memory_replacements[i],
            ))
        consuming = self.consuming
        if self.between_calls:
            consuming = max(0.0, wall - self.waiting_for_results - self.reading_input)
        return Insights(
            wall, rows, self.reading_input, consuming, self.waiting_for_results,
            self.caller_moving, sum(self.items), list(self.chunk_sizes), sum(self.deaths),
            sum(self.timeouts), self.retries,
            [list(span) for span in self.timeline] if timeline else [],
        )

    def live(self) -> str:
        """The bottleneck so far in a few words, for a progress bar (e.g. ``consumer 95%``)."""
        verdict = self.snapshot(timeline=False).verdict()
        peak = max((m for m in self.peak_rss if m is not None), default=None)
        largest = f", RSS {peak / 1e6:.0f} MB" if peak is not None else ""
        if verdict.stage == "straggler":
            return f"straggler {verdict.share:.1f}x{largest}"
        return f"{verdict.stage} {verdict.share:.0%}{largest}"
