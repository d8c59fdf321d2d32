"""The YAML dialect of config files, on PyYAML's safe loader and dumper.

Imported by `yaml_io` on the first YAML read or write, never by the package
itself. On top of PyYAML's safe loader, this dialect:

* decodes Python literals in *unquoted* scalars only (`(1, 2)` is a tuple,
  `'(1, 2)'` the string), and never in mapping keys;
* refuses duplicate keys, naming both lines;
* refuses nesting deeper than `MAX_DEPTH`, checked before libyaml's C composer
  (which recurses in C) sees the text;
* refuses alias bombs and recursive aliases before construction;
* turns values Python cannot build (a 5,000-digit integer, February 30th)
  into errors with the line.

The dumper quotes every string that would read back as something else and
writes `PlainScalar` literals unquoted, so that saved configs reopen unchanged.
"""

from __future__ import annotations

import re

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import ConfigError
from .literal import PlainScalar, decode_literal
from .yaml_io import MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

try:  # libyaml makes parsing several times faster; fall back cleanly without it.
    from yaml import CSafeDumper as _SafeDumper
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

__all__ = ["ConfigDumper", "ConfigLoader", "dump", "load"]

_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_MAP = "tag:yaml.org,2002:map"  # a mapping that becomes a CfgNode (not a !!set)


# ---------------------------------------------------------------- loading
class ConfigLoader(_SafeLoader):
    """PyYAML's safe loader with the config rules (see the module docstring)."""

    def flatten_mapping(self, node: MappingNode) -> None:
        # Merge keys (`<<: *base`) put the merged pairs in front of the node's
        # own; remember how many are its own before that happens (a node can be
        # flattened first as the source of another node's merge).
        if not hasattr(node, "own_pairs"):
            own = sum(1 for key, _ in node.value if key.tag != _MERGE)
            node.own_pairs = own  # type: ignore[attr-defined]
        super().flatten_mapping(node)

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):
            found = type(node).__name__
            raise ConstructorError(
                None, None, f"expected a mapping node, but found a {found}", node.start_mark
            )
        self.flatten_mapping(node)
        first_own = len(node.value) - node.own_pairs  # type: ignore[attr-defined]
        mapping: dict[Any, Any] = {}
        own: dict[Any, Node] = {}
        # The path of a mapping that becomes a CfgNode (the top one and its
        # mapping values): its keys must be names, checked here where the
        # line and the key as written are still known.
        path = getattr(node, "config_path", None)
        for index, (key_node, value_node) in enumerate(node.value):
            if path is not None:
                _check_config_key(key_node, path)
                if isinstance(value_node, MappingNode) and value_node.tag == _MAP:
                    name = key_node.value
                    value_node.config_path = f"{path}.{name}" if path else name  # type: ignore[attr-defined]
            if type(key_node) is ScalarNode and key_node.tag == _STR:
                key: Any = key_node.value  # keys are names, never literals
            else:
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError as exc:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found unhashable key ({exc})",
                        key_node.start_mark,
                    ) from None
            if index >= first_own:
                first = own.setdefault(key, key_node)
                if first is not key_node:
                    raise ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {first.start_mark.line + 1}); "
                        "a key may appear once in a mapping",
                        key_node.start_mark,
                    )
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def _check_config_key(key_node: Node, path: str) -> None:
    """Refuse a key of a CfgNode mapping that is not a name, as the file spells it."""
    if key_node.tag == _MERGE:
        return
    if isinstance(key_node, ScalarNode):
        written = key_node.value
        if key_node.tag == _STR and isinstance(written, str) and written.isidentifier():
            return
        dotted = f"{path}.{written}" if path else written
        what = f"invalid config key {dotted!r}"
        if key_node.tag != _STR and not key_node.style:
            # `NO:`, `on:`, `1:` are YAML 1.1 booleans and numbers, not names.
            kind = key_node.tag.rsplit(":", 1)[-1]
            what += f" (YAML reads it as a {kind}; quote it to use it as a name)"
    else:
        kind = getattr(key_node, "id", "node")  # "mapping" or "sequence"
        what = f"invalid config key under {path or 'the top level'!r}: a {kind}"
    raise ConstructorError(
        None, None, f"{what}: keys must be valid Python identifiers", key_node.start_mark
    )


def _construct_str(loader: ConfigLoader, node: Node) -> Any:
    value = loader.construct_scalar(node)  # type: ignore[arg-type]
    # An unquoted scalar may spell a literal; a quoted one is the string the
    # author wrote (CParser marks plain scalars with "", PyYAML's with None),
    # and so is one with an explicit `!!str` tag.
    if getattr(node, "style", None) or _has_explicit_tag(loader, node):
        return value
    return decode_literal(value)


def _has_explicit_tag(loader: ConfigLoader, node: Node) -> bool:
    """Whether a plain scalar carries a tag (`!!str 1`) in the text.

    Neither parser records whether a tag was written or resolved, but a plain
    scalar cannot start with `!` or `&`: text there before the value is the
    node's properties (an anchor, a tag, or both).
    """
    text = getattr(loader, "config_text", "")
    start = node.start_mark.index if node.start_mark is not None else -1
    if not 0 <= start < len(text) or text[start] not in "!&":
        return False
    if text[start] == "!":
        return True
    # `&anchor !!str value` or `&anchor value`: look past the anchor.
    match = re.compile(r"&\S+\s+").match(text, start)
    return match is not None and text[match.end() : match.end() + 1] == "!"


def _reporting(tag: str, construct: Callable[[Any, Node], Any]) -> Callable[[Any, Node], Any]:
    """Wrap a scalar constructor so that a value it cannot build is an error with its line.

    PyYAML's constructors let a bad value escape as a raw KeyError (`!!bool zz`),
    AttributeError (`!!timestamp zzz`), IndexError (`!!float ''`), ValueError
    or OverflowError.
    """
    short = tag.replace("tag:yaml.org,2002:", "!!")

    def construct_or_report(loader: Any, node: Node) -> Any:
        try:
            return construct(loader, node)
        # What PyYAML's scalar constructors raise for a bad value (a fuzz of every
        # standard scalar tag finds no other); its own YAMLErrors pass through.
        except (KeyError, AttributeError, IndexError, ValueError, OverflowError) as exc:
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, KeyError) and short == "!!bool":
                reason = "not a YAML boolean (true/false, yes/no, on/off)"
            elif isinstance(exc, AttributeError) and short == "!!timestamp":
                reason = "not a YAML timestamp (such as 2001-12-14 or 2001-12-14t21:59:43.10-05:00)"
            raise ConstructorError(
                None,
                None,
                f"cannot read the value {node.value!r:.40} as {short}: {reason}",
                node.start_mark,
            ) from None

    return construct_or_report


ConfigLoader.add_constructor(_STR, _construct_str)
# Every standard scalar tag; the collection constructors are generators, whose
# errors are already ConstructorErrors (and their items' errors are wrapped).
_GENERATOR = 0x20  # inspect.CO_GENERATOR, without importing inspect
for _tag, _construct in list(ConfigLoader.yaml_constructors.items()):
    if _tag is None or _tag == _STR or _construct.__code__.co_flags & _GENERATOR:
        continue
    ConfigLoader.add_constructor(_tag, _reporting(_tag, _construct))


def load(text: str, source: str) -> Any:
    """Parse one YAML document of a config (see `yaml_io.safe_load`)."""
    if text[:1] == "\ufeff":
        # The parsers disagree on whether a byte-order mark counts in a mark's
        # index; without it, indexes are those of `text` for both.
        text = text[1:]
    try:
        if _may_nest_deeper_than(text, MAX_DEPTH):
            _check_depth(text, source)
        loader = ConfigLoader(text)
        loader.config_text = text  # type: ignore[attr-defined]
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            aliased = "*" in text and _check_aliases(node, source)
            if isinstance(node, MappingNode) and node.tag == _MAP:
                node.config_path = ""  # type: ignore[attr-defined]
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_describe(exc, source)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    # PyYAML builds an anchored node once and hands the same object to every
    # alias: two keys would share one list. Each place gets its own.
    return _unshared(data) if aliased else data


def _unshared(value: Any) -> Any:
    """`value` with every list, dict and set rebuilt, so that no two places share one."""
    kind = type(value)
    if kind is list:
        return [_unshared(item) for item in value]
    if kind is dict:
        return {key: _unshared(item) for key, item in value.items()}
    if kind is set:
        return set(value)
    if kind is tuple:
        return tuple(_unshared(item) for item in value)
    return value


def _describe(exc: yaml.MarkedYAMLError, source: str) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    if _LIBYAML_DEPTH in problem:
        # libyaml >= 0.2.6 (in PyYAML's wheels since 6.0.3) refuses deep
        # nesting itself, in its own words: give easycore's refusal instead.
        line = mark.line + 1 if mark else "?"
        return f"{source}, line {line}: {_nested_too_deep()}"
    where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source
    if isinstance(exc, ConstructorError) and "python/" in problem:
        return (
            f"{where}: refused unsafe tag ({problem}); config files may not "
            "construct Python objects"
        )
    return f"{where}: {problem}"


# ---------------------------------------------------------------- nesting depth
# A bound on the nesting depth that costs a few scans in C: every flow
# collection opens with "[" or "{", and a block collection nested k levels deep
# starts on a line whose run of indentation and indicators ("- ", "? ", ": ")
# is at least k - 1 characters long. Text that might exceed the limit (rare:
# many brackets) gets the exact count from the parser's event stream, which
# libyaml produces without recursion.
_BREAK = "[\n\r\x85\u2028\u2029]"  # what YAML counts as a line break
_RUN = "[ \t?:-]"  # indentation and block indicators


def _may_nest_deeper_than(text: str, limit: int) -> bool:
    room = limit - 1 - text.count("[") - text.count("{")
    if room < 0:
        return True
    run = f"{_RUN}{{{room + 1}}}"
    # The first line separately (it may start with a byte-order mark): an
    # alternation with "^" in one pattern makes the scan about 3x slower.
    return (
        re.match(f"\ufeff?{run}", text) is not None or re.search(f"{_BREAK}{run}", text) is not None
    )


_LIBYAML_DEPTH = "maximum nesting depth"


def _nested_too_deep() -> str:
    return f"nested more than {MAX_DEPTH} levels deep; refusing to load"


def _check_depth(text: str, source: str) -> None:
    parser = _SafeLoader(text)
    try:
        depth = 0
        while True:
            event = parser.get_event()
            if event is None:
                return
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise ConfigError(f"{source}, line {line}: {_nested_too_deep()}")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    finally:
        parser.dispose()


# ---------------------------------------------------------------- aliases
def _check_aliases(root: Node, source: str) -> bool:
    """Refuse documents whose aliases expand hugely, recursively or too deep.

    Size is bounded twice: in nodes (a few lines of nested aliases can stand
    for billions of them) and in bytes of text (2,000 aliases of one 1 MiB
    string are 2,001 nodes but 2 GB once dumped or printed).

    Returns:
        bool: whether the document has an alias at all.
    """
    sizes: dict[int, int] = {}  # id(node) -> expanded size, filled bottom-up
    text_bytes: dict[int, int] = {}  # id(node) -> bytes of scalar text, expanded
    seen_alias = False
    depths: dict[int, int] = {}  # id(node) -> nesting depth once expanded
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            children = _children(node)
            size = 1 + sum(sizes[id(child)] for child in children)
            if isinstance(node, ScalarNode):
                nbytes = len(node.value.encode("utf-8", "surrogatepass"))
            else:
                nbytes = sum(text_bytes[id(child)] for child in children)
            depth = 0
            if isinstance(node, (MappingNode, SequenceNode)):
                depth = 1 + max((depths[id(child)] for child in children), default=0)
            line = node.start_mark.line + 1
            if size > MAX_EXPANDED_NODES:
                raise ConfigError(
                    f"{source}, line {line}: aliases expand to more than "
                    f"{MAX_EXPANDED_NODES:,} nodes; refusing to load (alias bomb?)"
                )
            if nbytes > MAX_EXPANDED_BYTES:
                raise ConfigError(
                    f"{source}, line {line}: aliases expand to more than "
                    f"{MAX_EXPANDED_BYTES // 2**20} MiB of text; refusing to load (alias bomb?)"
                )
            if depth > MAX_DEPTH:
                raise ConfigError(
                    f"{source}, line {line}: aliases nest more than {MAX_DEPTH} levels "
                    "deep; refusing to load"
                )
            sizes[key] = size
            text_bytes[key] = nbytes
            depths[key] = depth
            continue
        if key in sizes:
            seen_alias = True  # a node met twice: reached through an alias
            continue
        if key in on_path:
            line = node.start_mark.line + 1
            raise ConfigError(f"{source}, line {line}: recursive alias; refusing to load")
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in sizes:
                seen_alias = True
            else:
                stack.append((child, False))
    return seen_alias


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return node.value
    return []


# ---------------------------------------------------------------- dumping
class ConfigDumper(_SafeDumper):
    """PyYAML's safe dumper that writes strings and literals the loader reads back."""


def _represent_str(dumper: ConfigDumper, data: str) -> Node:
    if decode_literal(data) is not data:
        # Unquoted, "None" or "(1, 2)" would read back as a literal: quote it.
        return dumper.represent_scalar(_STR, data, style="'")
    return dumper.represent_str(data)


def _represent_plain(dumper: ConfigDumper, data: PlainScalar) -> Node:
    # Style "" asks for a plain scalar even when the caller set default_style;
    # PlainScalar texts are built so that the emitter can write them plain.
    return ScalarNode(_STR, str(data), style="")


ConfigDumper.add_representer(str, _represent_str)
ConfigDumper.add_representer(PlainScalar, _represent_plain)


def dump(data: Any, stream: Any = None, encoding: str | None = None, **kwargs: Any) -> Any:
    """Write plain data as YAML (see `yaml_io.safe_dump`)."""
    # Flow style or canonical output would quote or tag the literals, and a
    # saved tuple would reopen as a string.
    if kwargs.pop("default_flow_style", False) is not False or kwargs.pop("canonical", False):
        raise TypeError(
            "dump options default_flow_style and canonical are not supported: configs are "
            "written in block style so that Python literals stay unquoted"
        )
    kwargs["default_flow_style"] = False
    kwargs.setdefault("sort_keys", False)
    kwargs.setdefault("allow_unicode", True)
    kwargs.pop("Dumper", None)  # the safe dumper is not negotiable
    return yaml.dump(data, stream, Dumper=ConfigDumper, encoding=encoding, **kwargs)
