"""Inputs and ``cfg`` through shared memory; a small or idle ``/dev/shm`` (issues 10 and 15).

A worker looks up where its arrays live in ``/proc/self/maps``: an input or
``cfg`` array that reached it through shared memory is inside a mapping of a
``/dev/shm`` segment named with the runner's transport prefix, so nothing
copied it. Real processes; a real private mount namespace for the small
``/dev/shm`` (skipped where the machine does not allow one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _parallel_support import METHODS, SCRIPTS, namespace_prefix, shm_segments
from processes import mapping_of

from easycore.common.parallel import OrderedRunner, SharedMemoryTransport, UnorderedRunner

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="reads /proc/self/maps and /dev/shm"),
]

np = pytest.importorskip("numpy")

N = 1 << 20  # float64: 8 MiB


def _where(arr) -> str:
    return mapping_of(arr.__array_interface__["data"][0])


def _prefix(runner) -> str:
    return "/dev/shm/" + runner._engine.backend.transport.prefix


# --- inputs and cfg travel through shared memory --------------------------------
class Locates(OrderedRunner):
    """Item (i, array): says where the input and ``cfg.big`` live in the worker."""

    @staticmethod
    def producer_work(device, cfg, data):
        i, arr = data
        return {
            "i": i,
            "intact": arr.shape == (N,) and bool((arr == i).all()),
            "input": _where(arr),
            "cfg": _where(cfg.big),
            "cfg_intact": bool((cfg.big == 7.0).all()),
        }

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


@pytest.mark.parametrize("method", METHODS)
def test_large_inputs_and_cfg_arrays_are_read_from_shared_memory(method, no_leaks):
    cfg = {"big": np.full(N, 7.0)}
    with Locates(2, cfg=cfg, start_method=method) as runner:
        prefix = _prefix(runner)
        seen = set()
        for _ in range(3):  # segments are recycled across chunks and calls
            out = runner((i, np.full(N, float(i))) for i in range(12))
            assert [r["i"] for r in out] == list(range(12))
            for r in out:
                assert r["intact"] and r["cfg_intact"]
                # no copy in the worker: the arrays view the caller's segments
                assert r["input"].startswith(prefix), r
                assert r["cfg"].startswith(prefix), r
                seen.add(r["input"])
        # 36 inputs of 8 MiB served by recycled segments: within a call at most
        # what 2 workers hold at once (3 credits + the one being released, each),
        # and between calls the idle trim may give all but two per worker back.
        assert len(seen) <= 3 * 8 < 36, sorted(seen)
    assert shm_segments() == []


def test_small_inputs_stay_on_the_pipe(no_leaks):
    with Locates(1, cfg={"big": np.full(16, 7.0)}) as runner:
        (r,) = runner([(3, np.full(N, 3.0))])
        assert r["input"].startswith(_prefix(runner))
        assert r["cfg"] == ""  # a small cfg array is pickled in-band


class WritesCfg(UnorderedRunner):
    """Each worker fills ``cfg.big`` with its own number, then reports what it sees."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.big[:] = float(device.split(":")[1]) + 1.0  # every page: copy-on-write

    @staticmethod
    def producer_work(device, cfg, data):
        values = np.unique(cfg.big)
        return device, [float(v) for v in values], _where(cfg.big)

    @staticmethod
    def consumer_init(cfg):
        cfg.seen = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.seen.append(data)

    @staticmethod
    def consumer_end(cfg):
        return {device: (values, where) for device, values, where in cfg.seen}


@pytest.mark.parametrize("method", METHODS)
def test_a_cfg_array_written_by_one_worker_is_not_seen_by_another(method, no_leaks):
    cfg = {"big": np.zeros(N)}
    devices = ["cpu:0", "cpu:1"]
    with WritesCfg(devices, cfg=cfg, start_method=method) as runner:
        seen: dict = {}
        # Which worker runs which item is not ours to say: call until both answered.
        for _ in range(50):
            seen.update(runner(range(8)))
            if len(seen) == 2:
                break
        assert sorted(seen) == devices
        for device, (values, where) in seen.items():
            assert values == [float(device[-1]) + 1.0], (device, values)
            assert where.startswith(_prefix(runner))
        assert not runner._cfg.big.any()  # the runner's own copy is untouched
    assert not cfg["big"].any()  # and so is the user's


# --- what shared memory cannot carry still travels -------------------------------
class Echo(OrderedRunner):
    """Returns its input, and the cfg's ``extra``, after checking them in the worker."""

    @staticmethod
    def producer_work(device, cfg, data):
        return data, cfg.extra

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


class Plain:
    def __init__(self, payload):
        self.payload = payload

    def __eq__(self, other):
        return type(other) is Plain and other.payload == self.payload


def _awkward():
    base = np.arange(2 * N, dtype=np.float64)
    return {
        "strided": base[::2],  # not contiguous: pickled in-band
        "fortran": np.asfortranarray(base.reshape(1024, -1)),
        "bytes": bytes(range(256)) * (N // 32),  # 8 MiB of bytes
        "bytearray": bytearray(b"x" * (N * 2)),
        "plain": Plain(list(range(1000))),
        "mixed": [np.ones(10), "text", {"k": (1, 2.5)}],
        "zero_size": np.empty((0, 3)),
    }


def _assert_same(got, want):
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[key].dtype == value.dtype and np.array_equal(got[key], value), key
        elif key == "mixed":
            assert np.array_equal(got[key][0], value[0]) and got[key][1:] == value[1:]
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("method", METHODS)
def test_objects_shared_memory_cannot_map_still_travel(method, no_leaks):
    extra = _awkward()
    with Echo(2, cfg={"extra": extra}, start_method=method) as runner:
        out = runner([_awkward() for _ in range(3)])
    assert len(out) == 3
    for got, got_cfg in out:
        _assert_same(got, extra)
        _assert_same(got_cfg, extra)


# --- a small /dev/shm (Docker's 64 MB) ---------------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", ["small", "full"])  # full: not a page left at the start
def test_a_small_dev_shm_falls_back_to_the_pipe_without_sigbus(method, mode):
    prefix = namespace_prefix()
    shell = 'mount -t tmpfs -o size=32m tmpfs /dev/shm && exec "$0" "$@"'
    script = [sys.executable, str(SCRIPTS / "small_shm.py"), method, mode]
    proc = subprocess.run(
        [*prefix, "sh", "-c", shell, *script],
        capture_output=True, text=True, timeout=150, cwd=str(SCRIPTS),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["shm_bytes"] == 32 << 20  # it really ran with the small /dev/shm
    assert "error" not in report, report["error"]  # e.g. a worker dead of SIGBUS
    assert report["first"] and report["second"]  # every result and input intact
    assert report["same_workers"]  # no worker died and was replaced
    assert len(report["warnings"]) == 1, report["warnings"]  # one warning per runner
    assert "--shm-size" in report["warnings"][0]
    assert "SIGBUS" not in proc.stderr and "Traceback" not in proc.stderr


# --- an idle runner gives shared memory back ---------------------------------------
class Drops(UnorderedRunner):
    """64 MiB results for int items; a float for 64 MiB array items. The consumer
    drops each result as soon as it has seen it."""

    @staticmethod
    def producer_work(device, cfg, data):
        if isinstance(data, int):
            return np.full(8 * N, float(data))
        return np.full(1, float(data[0]))

    @staticmethod
    def consumer_init(cfg):
        cfg.total = 0.0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.total += float(data[0])

    @staticmethod
    def consumer_end(cfg):
        return cfg.total


def _held_bytes(names) -> int:
    total = 0
    for name in names:
        try:
            st = os.stat(os.path.join("/dev/shm", name))
        except FileNotFoundError:
            continue
        total += max(st.st_size, st.st_blocks * 512)
    return total


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("direction", ["results", "inputs"])
def test_an_idle_runner_keeps_little_shared_memory(method, direction, no_leaks):
    workers = 2
    with Drops(workers, start_method=method) as runner:
        prefix = runner._engine.backend.transport.prefix
        for _ in range(2):
            if direction == "results":
                items = range(10)
            else:
                items = (np.full(8 * N, float(i)) for i in range(10))
            assert runner(items) == float(sum(range(10)))
            ours = [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
            # idle now: at most what the transport keeps for speed, per worker
            held = _held_bytes(ours)
            assert held <= SharedMemoryTransport.idle_keep_bytes * workers, (held, ours)


class KeepsInputs(UnorderedRunner):
    """A producer that keeps every input it got (a cache, a batch being built)."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.kept = []

    @staticmethod
    def producer_work(device, cfg, data):
        cfg.kept.append(data)
        # how many of the inputs kept so far no longer hold what they held
        return sum(int(a[0]) != k or int(a[-1]) != k for k, a in cfg.kept)

    @staticmethod
    def consumer_init(cfg):
        cfg.bad = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.bad = max(cfg.bad, data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.bad


@pytest.mark.parametrize("source", ["list", "generator"])
def test_an_input_a_worker_keeps_is_never_reused_under_it(no_leaks, source):
    # A segment may be written again only after the worker let go of every
    # array viewing it, not when its chunk came back.
    items = [(k, np.full(1 << 17, float(k))) for k in range(30)]  # 1 MiB each
    with KeepsInputs(1) as runner:
        data = items if source == "list" else (item for item in items)
        assert runner(data) == 0
