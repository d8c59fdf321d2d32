"""`python -m easycore.common.config FILE [--set KEY=VALUE ...]`: print a resolved config."""

from __future__ import annotations

import argparse
import os
import sys

from .errors import ConfigError, ConfigKeyError
from .hierarchical import HierarchicalCfgNode
from .node import CfgNode


def main(argv: list[str] | None = None) -> int:
    """Print the config in FILE, with its `__BASE__` chain resolved and overrides applied.

    Args:
        argv (list[str] or None): command-line arguments (default: `sys.argv[1:]`).

    Returns:
        int: the exit status (0 on success, 2 on a config error).
    """
    parser = argparse.ArgumentParser(
        prog="python -m easycore.common.config",
        description="Print a YAML config with its __BASE__ chain resolved.",
    )
    parser.add_argument("file", help="path to the YAML config")
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        nargs="+",
        action="extend",
        default=[],
        help="override a value, e.g. --set SOLVER.LR=0.1 MODEL.NAME=resnet",
    )
    parser.add_argument("--allow-new", action="store_true", help="allow keys that do not exist")
    args = parser.parse_args(argv)
    try:
        cfg = HierarchicalCfgNode.open(args.file)
        if args.set:
            bad = [item for item in args.set if "=" not in item]
            if bad:
                raise ConfigError(f"--set expects KEY=VALUE, got {bad[0]!r}")
            cfg.merge_from_list(args.set, allow_new=args.allow_new)
        text = CfgNode.dump(cfg) or ""
        if not _encodable(text, sys.stdout):
            # An ASCII locale, a pipe in a legacy code page: YAML's escapes
            # ("\u00e9") say the same text in ASCII and read back the same.
            text = CfgNode.dump(cfg, allow_unicode=False) or ""
    except (OSError, ConfigError, ConfigKeyError) as exc:
        print(f"error: {_describe(exc)}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        # Point stdout at /dev/null so the interpreter's final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _encodable(text: str, stream: object) -> bool:
    encoding = getattr(stream, "encoding", None)
    if not encoding or text.isascii():
        return True
    try:
        text.encode(encoding, getattr(stream, "errors", None) or "strict")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _describe(exc: BaseException) -> str:
    """The message alone: no `[Errno 21]`, and the file named once."""
    if isinstance(exc, OSError) and not isinstance(exc, ConfigError) and exc.strerror:
        name = exc.filename
        if name is None or str(name) in exc.strerror:
            return exc.strerror
        return f"{name}: {exc.strerror}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
