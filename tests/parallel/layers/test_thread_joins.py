"""Every wait for a thread's end in easycore-parallel goes through
``_os.interrupts.join`` (one place for the mechanism): a plain ``Thread.join``
sleeps through a Ctrl-C that the kernel handed to another thread, and on
CPython 3.10-3.12 a Ctrl-C that does interrupt it marks the running thread
ended (every later ``join`` and ``is_alive()`` of it lie). The other ``join``
calls of the package are listed here with why they are not thread joins."""

from __future__ import annotations

import ast
from pathlib import Path

import easycore.common.parallel as parallel

ROOT = Path(parallel.__file__).parent

# receiver of ``.join(...)`` -> why it is not a plain thread join
NOT_THREADS = {
    "interrupts": "the one sliced join itself",
    "process": "a worker process (multiprocessing.Process.join), in its own parent",
    "h.process": "a worker process",
    "self.process": "the zygote's process",
    "pool": "Pool.join, whose waits are sliced",
    "self._pool": "Pool.join",
    "self._coordinator": "engine.door.Coordinator.join: interrupts.join",
    "self._readers": "pool.reader.Readers.join: interrupts.join",
}


def _joins():
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "join"):
                receiver = node.func.value
                if isinstance(receiver, ast.Constant):
                    continue  # "".join(...)
                name = ast.unparse(receiver)
                if name not in ("os.path", "posixpath"):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", name


def test_every_thread_join_goes_through_interrupts_join():
    plain = [f"{where} {name}.join" for where, name in _joins()
             if name not in NOT_THREADS
             and not (where.startswith("_os/interrupts.py") and name == "thread")]
    assert plain == [], "join threads with _os.interrupts.join"


def test_the_list_of_other_joins_names_only_what_is_there():
    # a receiver that left the package leaves this list too, so that the list
    # never excuses a new join by an old name
    assert set(NOT_THREADS) <= {name for _, name in _joins()}
