"""The seam for extensions (``easycore.common.parallel.extending``) and its page agree.

Every name the module offers has its line in the table of docs/extending.md, and
every name in that table is offered; importing the seam stays as light as the
package (no Ray, no torch), since easycore-torch imports it at start-up.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import easycore.common.parallel.extending as extending

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _table_names() -> set:
    text = (DOCS / "extending.md").read_text(encoding="utf-8")
    section = text.split("## The seam: `easycore.common.parallel.extending`", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_every_name_of_the_seam_has_its_line_on_the_extending_page():
    missing = sorted(set(extending.__all__) - _table_names())
    assert not missing, f"not listed on docs/extending.md: {', '.join(missing)}"


def test_every_name_on_the_extending_page_is_offered_by_the_seam():
    stale = sorted(_table_names() - set(extending.__all__))
    assert not stale, f"listed on docs/extending.md but not in extending.__all__: {stale}"
    for name in extending.__all__:
        assert hasattr(extending, name), name


def test_importing_the_seam_imports_neither_ray_nor_torch():
    code = (
        "import sys\n"
        "import easycore.common.parallel.extending\n"
        "print(sorted(m for m in ('ray', 'torch') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _toy_backend_example() -> str:
    text = (DOCS / "extending.md").read_text(encoding="utf-8")
    after = text.split("shows the whole contract:", 1)[1]
    return after.split("```python\n", 1)[1].split("\n```", 1)[0]


def _run(tmp_path, code: str) -> str:
    """Run ``code`` as a script of its own; its standard output."""
    script = tmp_path / "toy.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _toy_pool_script(body: str) -> str:
    """The page's toy back-end (without its own demonstration) serving a ``Pool``."""
    return _toy_backend_example().split('if __name__ == "__main__":', 1)[0] + (
        "from easycore.common.parallel import Pool\n"
        "class InlinePool(Pool):\n"
        "    backends = {**Pool.backends, 'inline': InlineBackend}\n"
    ) + body


def test_the_pages_toy_back_end_runs_as_written(tmp_path):
    _run(tmp_path, _toy_backend_example())


def test_the_toy_back_end_serves_a_pool_made_without_cfg(tmp_path):
    # A back-end of someone else's (no ``takes_no_cfg``) gets a CfgNode in its spec
    # even from a pool made without cfg, as the page's ``spec.cfg.copy()`` expects.
    out = _run(tmp_path, _toy_pool_script(
        "def seen(ctx):\n"
        "    ctx.cfg.calls = ctx.cfg.get('calls', 0) + 1\n"
        "    return type(ctx.cfg).__name__, ctx.cfg.calls\n"
        "with InlinePool(1, backend='inline') as pool:\n"
        "    print(pool.apply(seen, pass_context=True), pool.apply(seen, pass_context=True))\n"
    ))
    assert out.split() == ["('CfgNode',", "1)", "('CfgNode',", "2)"]


def test_the_toy_back_end_loses_no_answer_when_several_threads_send(tmp_path):
    # A pool's caller threads send while its coordinator polls: the page's back-end
    # must hand answers between them safely (a swapped list lost one now and then,
    # and the call waiting for it hung).
    out = _run(tmp_path, _toy_pool_script(
        "import threading\n"
        "def square(x):\n"
        "    return x * x\n"
        "with InlinePool(2, backend='inline') as pool:\n"
        "    def calls(base):\n"
        "        for i in range(base, base + 300):\n"
        "            assert pool.apply(square, (i,)) == i * i\n"
        "    threads = [threading.Thread(target=calls, args=(k * 1000,)) for k in range(3)]\n"
        "    for thread in threads:\n"
        "        thread.start()\n"
        "    assert pool.map(square, range(500), chunksize=1) == [i * i for i in range(500)]\n"
        "    for thread in threads:\n"
        "        thread.join()\n"
        "print('ok')\n"
    ))
    assert out.split() == ["ok"]
