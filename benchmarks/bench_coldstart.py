"""A short script's cold start: import, start, first result, close, in fresh interpreters.

What a new user's first script pays (issue 32): each contender is a script run
by a fresh interpreter (``python script.py METHOD``) that imports its pool,
starts 2 workers with the given start method (``set_start_method`` in its
``if __name__ == "__main__":`` block), maps 200 tiny items (``x * x``),
checks the sum and closes; the time is the whole process, from ``exec`` to
exit:

* ``multiprocessing.Pool``: the peer, the function defined in the script;
* ``easycore Pool``: the same script with easycore's ``Pool`` (change the import);
* ``easycore runner``: an ``UnorderedRunner`` subclass in a module next to
  the script (how runners are meant to be written), summing in
  ``consumer_work``.

Per start method (``fork``, ``forkserver``, ``spawn``; those the platform
has), the three take turns round after round (best of the rounds, spread
beside it), every run's printed sum checked. Goals: easycore ``Pool`` at most
1.3x the stdlib's time, the runner at most 1.5x, under every start method;
the table prints the peer's best over each contender's (0.77x is 1.3x the
time). The scripts are compiled by an untimed first run of each, as an
installed package would be.

Also printed: how many modules ``from easycore.common.parallel import Pool,
UnorderedRunner`` loads (beyond the bare interpreter's), and how many of the
heavy ones that a cold start must not load
(``tests/parallel/layers/test_import_cost.py``'s ``HEAVY``).

``--before DIR`` adds the two easycore contenders again, run from another
checkout's sources (``DIR/packages/*/src`` first on ``PYTHONPATH``, and any
other easycore sources taken off ``sys.path`` at start-up, so that the namespace packages
have as many portions to look through as the contenders from here): a change's
before and after in the same run.

Run: ``scripts/bench coldstart`` or ``python benchmarks/bench_coldstart.py
[--quick] [--rounds N] [--only fork,spawn] [--before DIR]`` (~1 min with
``--quick`` on a 2-core machine).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import textwrap
import time

from _harness import Contender, flush, machine_line, parse_args, print_rows, take_turns

ITEMS = 200
WORKERS = 2
EXPECTED = sum(x * x for x in range(ITEMS))
STDLIB, POOL = "multiprocessing.Pool", "easycore Pool"
RUNNER = "easycore runner (class in a module)"
#: contender -> the time it may take, as a multiple of the peer's
GOALS = {POOL: 1.3, RUNNER: 1.5}

SCRIPTS = {
    "stdlib_pool.py": f"""
        import multiprocessing
        import sys
        from multiprocessing import Pool

        def square(x):
            return x * x

        if __name__ == "__main__":
            multiprocessing.set_start_method(sys.argv[1])
            with Pool({WORKERS}) as pool:
                print(sum(pool.map(square, range({ITEMS}))))
        """,
    "easycore_pool.py": f"""
        import multiprocessing
        import sys
        from easycore.common.parallel import Pool

        def square(x):
            return x * x

        if __name__ == "__main__":
            multiprocessing.set_start_method(sys.argv[1])
            with Pool({WORKERS}) as pool:
                print(sum(pool.map(square, range({ITEMS}))))
        """,
    "coldstart_squares.py": """
        from easycore.common.parallel import UnorderedRunner

        class Squares(UnorderedRunner):
            @staticmethod
            def producer_work(device, cfg, data):
                return data * data

            @staticmethod
            def consumer_init(cfg):
                cfg.sum = 0

            @staticmethod
            def consumer_work(cfg, data):
                cfg.sum += data

            @staticmethod
            def consumer_end(cfg):
                return cfg.sum
        """,
    "easycore_runner.py": f"""
        import multiprocessing
        import sys
        from coldstart_squares import Squares

        if __name__ == "__main__":
            multiprocessing.set_start_method(sys.argv[1])
            with Squares(devices={WORKERS}) as runner:
                print(runner(range({ITEMS})))
        """,
}

HEAVY_PROBE = """
import sys
before = set(sys.modules)
import easycore.common.parallel
from easycore.common.parallel import Pool, UnorderedRunner
loaded = set(sys.modules) - before
sys.path.insert(0, {tests!r})
from test_import_cost import heavy_in
print(len(loaded), len(heavy_in(loaded)))
"""


def script_runner(directory: str, script: str, method: str, env: dict):
    def run() -> int:
        out = subprocess.run([sys.executable, os.path.join(directory, script), method],
                             cwd=directory, env=env, capture_output=True, text=True,
                             timeout=120)
        if out.returncode != 0:
            raise AssertionError(f"{script} {method} exited {out.returncode}:\n"
                                 f"{out.stderr[-3000:]}")
        return int(out.stdout.split()[-1])

    return run


# Run at start-up by the "before" contenders: any other easycore sources (an
# editable install's .pth puts them on sys.path) leave it, else every namespace package
# would span both checkouts (~2 ms more of every "before" script); then the
# interpreter's own sitecustomize, if any, runs as it would have.
_SITECUSTOMIZE = """
import os, sys
def other_checkout(p):  # a checkout's packages/NAME/src (never site-packages)
    return (os.path.basename(p) == "src" and os.path.isdir(os.path.join(p, "easycore"))
            and os.path.basename(os.path.dirname(os.path.dirname(p))) == "packages")
sys.path[:] = [p for p in sys.path
               if p in {keep!r} or not (p == {here!r} or other_checkout(p))]
del sys.modules["sitecustomize"]
try:
    import sitecustomize
except ImportError:
    pass
"""


def _sources(checkout: str) -> list:
    packages = os.path.join(os.path.abspath(checkout), "packages")
    return sorted(os.path.join(packages, d, "src") for d in os.listdir(packages)
                  if os.path.isdir(os.path.join(packages, d, "src")))


def before_env(env: dict, checkout: str, directory: str) -> dict:
    """``env`` with ``checkout``'s package sources first on ``PYTHONPATH``, and
    any other easycore sources off ``sys.path`` (a ``sitecustomize`` written in
    ``directory``)."""
    here = os.path.join(directory, "before-site")
    os.makedirs(here, exist_ok=True)
    sources = _sources(checkout)
    with open(os.path.join(here, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE.format(keep=sources, here=here))
    path = [here, *sources, env.get("PYTHONPATH", "")]
    return dict(env, PYTHONPATH=os.pathsep.join(path))


def import_counts(env: dict) -> str:
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "parallel",
                         "layers")
    if not os.path.exists(os.path.join(tests, "test_import_cost.py")):
        code = ("import sys; b = set(sys.modules); import easycore.common.parallel; "
                "from easycore.common.parallel import Pool, UnorderedRunner; "
                "print(len(set(sys.modules) - b), '?')")
    else:
        code = HEAVY_PROBE.format(tests=os.path.abspath(tests))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    total, heavy = out.stdout.split()
    return (f"  from easycore.common.parallel import Pool, UnorderedRunner: {total} modules "
            f"beyond the interpreter's own, {heavy} of them heavy "
            f"(tests/parallel/layers/test_import_cost.py: HEAVY)")


def main() -> int:
    args = parse_args(__doc__, lambda p: p.add_argument(
        "--before", default=None, metavar="DIR",
        help="also run the easycore scripts from this checkout's sources, for comparison"))
    rounds = args.rounds or (3 if args.quick else 5)
    methods = [m for m in ("fork", "forkserver", "spawn")
               if m in multiprocessing.get_all_start_methods()]
    if args.only:
        methods = [m for m in methods if m in args.only.split(",")]
    print(f"cold start: import + {WORKERS} workers + map of {ITEMS} tiny items + close, in fresh "
          f"interpreters, best of {rounds} rounds taking turns{' (--quick)' if args.quick else ''}")
    print(f"  {machine_line()}")
    print("  ratios: the peer's best time over the contender's (1.00x: as fast as "
          "multiprocessing.Pool; 0.77x: 1.3x its time)")
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # scripts run as installed, compiled code does
    print(import_counts(env))
    start = time.perf_counter()
    goals = []
    with tempfile.TemporaryDirectory(prefix="bench-coldstart-") as directory:
        if args.before:
            old = before_env(env, args.before, directory)
            print(import_counts(old).replace("  from", "  before: from"))
        for name, text in SCRIPTS.items():
            with open(os.path.join(directory, name), "w") as f:
                f.write(textwrap.dedent(text))
        for method in methods:
            contenders = [
                Contender(name, script_runner(directory, script, method, env), _expect_sum)
                for name, script in ((STDLIB, "stdlib_pool.py"), (POOL, "easycore_pool.py"),
                                     (RUNNER, "easycore_runner.py"))
            ]
            if args.before:
                contenders += [
                    Contender(f"{name} (before)", script_runner(directory, script, method, old),
                              _expect_sum)
                    for name, script in ((POOL, "easycore_pool.py"),
                                         (RUNNER, "easycore_runner.py"))
                ]
            results = take_turns(contenders, rounds)  # the warm-up run compiles each script
            print_rows(f"start method {method}: one script, start to exit", results, STDLIB,
                       1, "script", per_call=True)
            peer = results[STDLIB].best
            for name, limit in GOALS.items():
                times = results[name].best / peer
                verdict = "met" if times <= limit else "NOT met"
                goals.append(f"  goal: {name} under {method}: {times:.2f}x the stdlib's time "
                             f"(at most {limit:g}x) {verdict}")
            flush()
    print("\nGoals (this run):")
    for line in goals:
        print(line)
    print(f"\n(total {time.perf_counter() - start:.0f} s)")
    return 0


def _expect_sum(result: int) -> None:
    if result != EXPECTED:
        raise AssertionError(f"wrong sum {result}, expected {EXPECTED}")


if __name__ == "__main__":
    sys.exit(main())
