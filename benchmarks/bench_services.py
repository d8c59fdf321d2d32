"""Benchmark services beside their peers, in the same run, on 127.0.0.1.

1. Local services (``backend="process"``: a Unix socket, tensors through
   shared memory) against ``torch.distributed.rpc.rpc_sync`` (TensorPipe),
   both calling one other process: the round trip of a small call, of a call
   returning an 8 MB state dict, and of a call taking one as its argument
   (made outside the timing: new tensors each call, or the same tensors
   written again, as a trainer's are); also that state dict loaded into a
   model (the data touched, as a trainer would). Goals: small calls no
   slower, 8 MB at least 2x faster, both ways. The 8 MB calls are measured
   with the *default* handle (torch imported: tensors through shared memory
   without asking) and with an explicit ``with_transport(TensorTransport)``
   handle; the pull also with the transport the default handle used before
   (``SharedMemoryTransport``: tensors pickled by torch, for reference).
2. Ray services (``backend="ray"``) against a plain call on a Ray named actor
   (same object, same Ray): goal at most 1.2x its time.

Median of many calls per round, best of several rounds, easycore and peer
taking turns. Run: ``scripts/bench services`` or
``python benchmarks/bench_services.py [--rounds N]``.
"""

import argparse
import os
import socket
import statistics
import time

# Ray's and TensorPipe's processes take their address from these: stay on loopback.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("TP_SOCKET_IFNAME", "lo")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from easycore.common.parallel import SharedMemoryTransport
from easycore.common.parallel.services import Service
from easycore.torch.parallel import TensorTransport

STATE_TENSORS, STATE_BYTES = 4, 8 << 20
SMALL_CALLS, BIG_CALLS = 2000, 40


def make_state():
    n = STATE_BYTES // 4 // STATE_TENSORS
    return {f"layer{i}.weight": torch.randn(n) for i in range(STATE_TENSORS)}


class Holder:
    """The object both sides call: an echo, and a model's state dict."""

    def __init__(self):
        self.state = make_state()

    def echo(self, x):
        return x

    def state_dict(self):
        return self.state

    def take(self, state):
        return len(state)


# ------------------------------------------------------------- rpc peer
_HOLDER = None


def _rpc_echo(x):
    return x


def _rpc_state_dict():
    return _HOLDER.state


def _rpc_take(state):
    return len(state)


def _rpc_peer(rank, port):
    global _HOLDER
    _HOLDER = Holder()
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}")
    rpc.init_rpc("peer", rank=1, world_size=2, rpc_backend_options=options)
    rpc.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median_seconds(fn, calls, make=None):
    """Median time of ``fn()``, or of ``fn(make())`` with ``make()`` outside the timing."""
    times = []
    for _ in range(calls):
        arg = make() if make is not None else None
        start = time.perf_counter()
        out = fn(arg) if make is not None else fn()
        times.append(time.perf_counter() - start)
        del out, arg
    return statistics.median(times)


def best_of(rounds, contenders):
    """contenders: name -> (fn, calls) or (fn, calls, make); taking turns, best median
    of ``rounds``."""
    best = {name: float("inf") for name in contenders}
    for _ in range(rounds):
        for name, (fn, calls, *make) in contenders.items():
            best[name] = min(best[name], median_seconds(fn, calls, *make))
    return best


def report(title, ours, peer, goal=None, at_most=None):
    ratio = ours / peer
    verdict = "for reference" if goal is None else (
        f"{goal}: {'met' if ratio <= at_most else 'NOT met'}")
    print(f"    {title:44s} easycore {ours * 1e3:8.3f} ms   peer {peer * 1e3:8.3f} ms   "
          f"easycore/peer {ratio:5.2f}  ({verdict})")


def bench_process(rounds):
    print("\n(1) local service (Unix socket, shared memory) vs torch.distributed.rpc.rpc_sync,"
          f" median per call, best of {rounds} rounds")
    port = free_port()
    peer = mp.get_context("spawn").Process(target=_rpc_peer, args=(1, port))
    peer.start()
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}")
    rpc.init_rpc("bench", rank=0, world_size=2, rpc_backend_options=options)
    service = Service.start(Holder)  # the owner's handle: the default transport
    handle = service.with_transport(TensorTransport)
    before = service.with_transport(SharedMemoryTransport)  # the default until now
    target = {k: torch.empty(STATE_BYTES // 4 // STATE_TENSORS) for k in make_state()}

    def load(state):
        for k, v in state.items():
            target[k].copy_(v)  # what load_state_dict does, per tensor

    try:
        small = best_of(rounds, {
            "ours": (lambda: handle.call("echo", 1), SMALL_CALLS),
            "rpc": (lambda: rpc.rpc_sync("peer", _rpc_echo, args=(1,)), SMALL_CALLS),
        })
        big = best_of(rounds, {
            "ours": (lambda: handle.call("state_dict"), BIG_CALLS),
            "default": (lambda: service.call("state_dict"), BIG_CALLS),
            "before": (lambda: before.call("state_dict"), BIG_CALLS),
            "rpc": (lambda: rpc.rpc_sync("peer", _rpc_state_dict), BIG_CALLS),
        })
        kept = make_state()

        def updated():  # a trainer's tensors: the same ones, written again each step
            for v in kept.values():
                v.add_(1.0)
            return kept

        pushed, pushed_kept = (best_of(rounds, {
            "default": (lambda state: service.call("take", state), BIG_CALLS, make),
            "ours": (lambda state: handle.call("take", state), BIG_CALLS, make),
            "rpc": (lambda state: rpc.rpc_sync("peer", _rpc_take, args=(state,)), BIG_CALLS,
                    make),
        }) for make in (make_state, updated))
        loaded = best_of(rounds, {
            "ours": (lambda: load(handle.call("state_dict")), BIG_CALLS),
            "rpc": (lambda: load(rpc.rpc_sync("peer", _rpc_state_dict)), BIG_CALLS),
        })
    finally:
        handle.close()
        before.close()
        service.close()
        rpc.shutdown()
        peer.join(30)
    report("small call (an int back and forth)", small["ours"], small["rpc"],
           "goal: no slower", 1.0)
    report("8 MB state dict, default handle", big["default"], big["rpc"], "goal: 2x faster",
           0.5)
    report("8 MB state dict, TensorTransport handle", big["ours"], big["rpc"], "goal: 2x faster",
           0.5)
    report("8 MB state dict, default handle before", big["before"], big["rpc"])
    for title, got in (("new", pushed), ("kept", pushed_kept)):
        report(f"8 MB argument ({title} tensors), default handle", got["default"], got["rpc"],
               "goal: 2x faster", 0.5)
        report(f"8 MB argument ({title} tensors), TensorTransport", got["ours"], got["rpc"],
               "goal: 2x faster", 0.5)
    report("8 MB state dict returned and loaded", loaded["ours"], loaded["rpc"])


def bench_ray(rounds):
    try:
        import ray
    except ImportError:
        print("\n(2) Ray benchmark skipped: Ray is not installed")
        return
    print(f"\n(2) Ray service vs a plain Ray named-actor call, median per call, best of {rounds}")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, object_store_memory=300 << 20)
    try:
        service = Service.start(Holder, backend="ray", name="bench-service")
        # The peer is called through a looked-up handle too, as a named actor is.
        owner = ray.remote(Holder).options(name="bench-plain", max_concurrency=1).remote()
        plain = ray.get_actor("bench-plain")
        ray.get(plain.echo.remote(1))
        small = best_of(rounds, {
            "ours": (lambda: service.call("echo", 1), SMALL_CALLS // 4),
            "ray": (lambda: ray.get(plain.echo.remote(1)), SMALL_CALLS // 4),
        })
        big = best_of(rounds, {
            "ours": (lambda: service.call("state_dict"), BIG_CALLS),
            "ray": (lambda: ray.get(plain.state_dict.remote()), BIG_CALLS),
        })
        service.close()
        ray.kill(owner)
    finally:
        ray.shutdown()
    report("small call", small["ours"], small["ray"], "goal: at most 1.2x", 1.2)
    report("8 MB state dict returned", big["ours"], big["ray"], "goal: at most 1.2x", 1.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench_process(args.rounds)
    bench_ray(args.rounds)


if __name__ == "__main__":
    main()
