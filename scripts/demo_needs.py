"""What a tutorial needs beyond the demo environment, from its ``# requires:`` line.

    python scripts/demo_needs.py examples/25_torch_predictor.py

prints what the running interpreter lacks of it ("PyTorch"), or nothing. ``scripts/demo``
runs it with the demo environment's Python and skips a tutorial that lacks something,
with a one-line note. The demo environment (requirements/demo.txt) holds the
distributions and NumPy; a tutorial that needs more says so on a line
``# requires: NAME[, NAME]`` with NAME one of :data:`NEEDS`.

Only the standard library is used: it runs on every Python the distributions admit.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

#: requirement name -> (modules it needs importable, what it is to a reader)
NEEDS = {
    "torch": (("torch",), "PyTorch"),
    "s3": (("s3fs", "moto.server"), "an S3 server (moto, s3fs)"),
    "ray": (("ray",), "Ray"),
}
_LINE = re.compile(r"^# requires:(.*)$", re.M)


def declared(path: Path) -> list[str]:
    """The names on ``path``'s ``# requires:`` lines.

    Raises:
        SystemExit: a name that is not in :data:`NEEDS`, naming the file.
    """
    text = path.read_text(encoding="utf-8")
    names = [n.strip() for line in _LINE.findall(text) for n in line.split(",") if n.strip()]
    for name in names:
        if name not in NEEDS:
            raise SystemExit(f"{path}: unknown requirement {name!r} on its `# requires:` "
                             f"line (known: {', '.join(NEEDS)})")
    return names


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        return False


def missing(path: Path) -> list[str]:
    """What this interpreter lacks of ``path``'s requirements, as a reader says it."""
    return [NEEDS[name][1] for name in declared(path)
            if not all(_importable(module) for module in NEEDS[name][0])]


if __name__ == "__main__":
    print(", ".join(missing(Path(sys.argv[1]))))
