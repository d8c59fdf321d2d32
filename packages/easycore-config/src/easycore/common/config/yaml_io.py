"""Safe YAML in and out: libyaml when present, no Python tags, no alias bombs.

Loading goes through PyYAML's *safe* loader (the C ``CSafeLoader`` when PyYAML
was built with libyaml, else the pure-Python ``SafeLoader``), so tags such as
``!!python/object/apply`` are refused instead of running code. Aliases are
checked before construction: a few lines of nested aliases can otherwise expand
into billions of nodes once the tree is walked.
"""

from __future__ import annotations

from typing import Any

import yaml

from .errors import ConfigError

try:  # libyaml makes parsing several times faster; fall back cleanly without it.
    from yaml import CSafeDumper as _SafeDumper
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

__all__ = ["MAX_EXPANDED_NODES", "safe_load", "safe_dump"]

#: Largest number of nodes a document may expand to once aliases are followed.
MAX_EXPANDED_NODES = 1_000_000


def safe_load(text: str, source: str = "<string>") -> Any:
    """Parse one YAML document without running code.

    Args:
        text (str): the YAML text.
        source (str): the file name used in error messages.

    Returns:
        Any: plain Python data (dicts, lists, scalars), or None for an empty document.

    Raises:
        ConfigError: for a syntax error, a refused tag or an alias bomb, naming
            ``source`` and the line.
    """
    loader = _SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "*" in text:  # aliases need '*': skip the walk for the common case
            _check_expansion(node, source)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_describe(exc, source)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    finally:
        loader.dispose()


def safe_dump(data: Any, stream: Any = None, encoding: str | None = None, **kwargs: Any) -> Any:
    """Write plain data as YAML with the safe dumper (block style, keys in order).

    Args:
        data (Any): plain data: dicts, lists and YAML scalars only.
        stream (io.IOBase or None): where to write; None returns a string.
        encoding (str or None): passed to :func:`yaml.dump`.
        **kwargs: other options of the YAML dumper, such as ``allow_unicode``.

    Returns:
        None or str: the YAML text when ``stream`` is None.
    """
    kwargs.setdefault("default_flow_style", False)
    kwargs.setdefault("sort_keys", False)
    kwargs.setdefault("allow_unicode", True)
    kwargs.pop("Dumper", None)  # the safe dumper is not negotiable
    return yaml.dump(data, stream, Dumper=_SafeDumper, encoding=encoding, **kwargs)


def _describe(exc: yaml.MarkedYAMLError, source: str) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source
    problem = exc.problem or exc.context or "invalid YAML"
    if isinstance(exc, yaml.constructor.ConstructorError) and "python/" in problem:
        return (
            f"{where}: refused unsafe tag ({problem}); config files may not "
            "construct Python objects"
        )
    return f"{where}: {problem}"


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse documents whose alias expansion is huge or recursive."""
    sizes: dict[int, int] = {}  # id(node) -> expanded size, filled bottom-up
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > MAX_EXPANDED_NODES:
                line = node.start_mark.line + 1
                raise ConfigError(
                    f"{source}, line {line}: aliases expand to more than "
                    f"{MAX_EXPANDED_NODES:,} nodes; refusing to load (alias bomb?)"
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in on_path:
            line = node.start_mark.line + 1
            raise ConfigError(f"{source}, line {line}: recursive alias; refusing to load")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return node.value
    return []
