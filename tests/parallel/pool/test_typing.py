"""Typed results (issue 36 item 3): mypy on snippets, ``reveal_type`` checked.

``Pool``'s calls and ``Executor``'s are generic in their callables, as typeshed
types ``multiprocessing.Pool`` and ``concurrent.futures``: a ``map`` of
``f: Callable[[str], int]`` is a ``list[int]``; a wrong item type is an error.
"""

from __future__ import annotations

import re

import pytest

mypy_api = pytest.importorskip("mypy.api")

pytestmark = pytest.mark.timeout(300)

SNIPPET = '''
from typing import Callable
from easycore.common.parallel import Executor, Pool, WorkerContext

def f(s: str) -> int:
    return len(s)

def add(a: int, b: int) -> float:
    return a + b

def with_ctx(ctx: WorkerContext, s: str) -> bytes:
    return s.encode()

async def aio(pool: Pool) -> None:
    reveal_type(await pool.apply_async(f, ("a",)))             # apply_async awaited
    reveal_type(await pool.map_async(f, ["a"]))                # map_async awaited
    async for r in pool.imap(f, ["a"]):
        reveal_type(r)                                         # async for

def main(pool: Pool, executor: Executor, g: Callable[[str], int]) -> None:
    reveal_type(pool.map(g, ["a", "b"]))                       # map
    reveal_type(pool.map(with_ctx, ["a"], pass_context=True))  # map with context
    reveal_type(pool.imap(f, ["a"]))                           # imap
    reveal_type(next(pool.imap_unordered(f, ["a"])))           # imap_unordered
    reveal_type(pool.apply(f, ("a",)))                         # apply
    reveal_type(pool.apply_async(f, ("a",)))                   # apply_async
    reveal_type(pool.apply_async(f, ("a",)).get())             # get
    reveal_type(pool.map_async(f, ["a"]).get())                # map_async
    reveal_type(pool.starmap(add, [(1, 2)]))                   # starmap
    reveal_type(pool.starmap_async(add, [(1, 2)]).get())       # starmap_async
    reveal_type(pool.submit(add, 1, 2))                        # Pool.submit
    reveal_type(pool.broadcast(f, "a"))                        # broadcast
    reveal_type(executor.submit(add, 1, b=2))                  # Executor.submit
    reveal_type(executor.map(f, ["a"]))                        # Executor.map
'''

EXPECTED = {
    "apply_async awaited": "int",
    "map_async awaited": "list[int]",
    "async for": "int",
    "map": "list[int]",
    "map with context": "list[bytes]",
    "imap": "easycore.common.parallel.pool.results.IMapIterator[int]",
    "imap_unordered": "int",
    "apply": "int",
    "apply_async": "easycore.common.parallel.pool.results.AsyncResult[int]",
    "get": "int",
    "map_async": "list[int]",
    "starmap": "list[float]",
    "starmap_async": "list[float]",
    "Pool.submit": "concurrent.futures._base.Future[float]",
    "broadcast": "list[int]",
    "Executor.submit": "concurrent.futures._base.Future[float]",
    "Executor.map": "typing.Iterator[int]",
}

ERRORS = '''
from easycore.common.parallel import Executor, Pool

def f(s: str) -> int:
    return len(s)

def main(pool: Pool, executor: Executor) -> None:
    pool.map(f, [1, 2])               # line 8: items are not str
    executor.submit(f, 1)             # line 9: argument is not str
    x: str = pool.apply(f, ("a",))    # line 10: the result is an int
'''


def _mypy(tmp_path, code):
    path = tmp_path / "snippet.py"
    path.write_text(code)
    out, err, _ = mypy_api.run([str(path), "--no-incremental", "--cache-dir", str(tmp_path / "c"),
                                "--show-error-codes", "--no-error-summary"])
    return path, out + err


def test_reveal_type_gives_the_callables_result_types(tmp_path):
    path, out = _mypy(tmp_path, SNIPPET)
    lines = SNIPPET.splitlines()
    revealed = {}
    for line in out.splitlines():
        match = re.match(rf"{re.escape(str(path))}:(\d+): note: Revealed type is \"(.+)\"", line)
        if match:
            # (mypy before 1.11 writes builtins.int, after it int)
            revealed[lines[int(match[1]) - 1].split("# ")[-1].strip()] = match[2].replace(
                "", "")
    assert revealed == EXPECTED, out
    assert "error:" not in out, out


def test_a_wrong_argument_or_result_type_is_an_error(tmp_path):
    path, out = _mypy(tmp_path, ERRORS)
    lines = {int(m[1]) for m in re.finditer(rf"{re.escape(str(path))}:(\d+): error:", out)}
    assert lines == {8, 9, 10}, out
