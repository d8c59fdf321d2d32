"""The API reference documents every public name of the five packages."""

from __future__ import annotations

import importlib
import re

import pytest
from docblocks import DOCS

#: The public modules and where their reference lives.
MODULES = [
    "easycore.common.config",
    "easycore.common.registry",
    "easycore.common.path",
    "easycore.common.network",
    "easycore.common.parallel",
    "easycore.torch.parallel",
    "easycore.torch.distributed",
    "easycore.torch.placement",
]

_DIRECTIVE = re.compile(r"^:::\s*(?P<target>[\w.]+)\s*$")


def _directives() -> list[tuple[str, str]]:
    """(target, options text) of every ``::: target`` in docs/api."""
    found = []
    for page in sorted((DOCS / "api").glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            match = _DIRECTIVE.match(line)
            if not match:
                continue
            options = []
            for follow in lines[i + 1 :]:
                if follow.strip() and not follow.startswith((" ", "\t")):
                    break
                options.append(follow)
            found.append((match["target"], "\n".join(options)))
    return found


def _documented(module: str, name: str, obj: object, directives: list[tuple[str, str]]) -> bool:
    for target, options in directives:
        if target == f"{module}.{name}":
            return True
        whole = "members:" not in options
        if target == module and whole:
            return True
        if module.startswith(target + ".") and whole and "show_submodules: true" in options:
            return True
        # the same object documented under another module (a re-export)
        owner, _, attr = target.rpartition(".")
        if attr == name and owner != module:
            try:
                if getattr(importlib.import_module(owner), attr) is obj:
                    return True
            except (ImportError, AttributeError):
                pass
    return False


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_documented(module: str) -> None:
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        pytest.fail(f"{module} cannot be imported ({err}); its API page cannot be built")
    names = [n for n in getattr(mod, "__all__", []) if not n.startswith("_")]
    assert names, f"{module} exports nothing (no __all__)"
    directives = _directives()
    missing = [n for n in names if not _documented(module, n, getattr(mod, n), directives)]
    assert not missing, f"not in docs/api/*.md: {', '.join(f'{module}.{n}' for n in missing)}"


# ------------------------------------------------------------- what users see first

#: The seams underneath the runners and pools: documented on docs/api/internals.md,
#: never on the page a user reads to call easycore (docs/api/parallel.md).
INTERNALS = {
    "Backend", "BackendSpec", "ChannelBroken", "WorkerExited", "DevicePolicy",
    "ProcessBackend", "ThreadBackend", "RayBackend", "WorkerHandler",
    "WorkerProgram", "RunnerProgram", "HookFailed", "Transport", "PickleTransport",
    "SharedMemoryTransport", "ErrorReport", "protocol", "core", "Engine", "Job",
    "JobSink", "AdaptiveChunker",
}
#: BaseRunner's methods and attributes that only a subclass changing the machinery uses.
RUNNER_SEAMS = {
    "backends", "device_policy", "transport_class", "default_start_method",
    "normalize_devices", "validate_device", "check_available", "setup_worker",
    "get_mp_context", "make_transport", "make_program", "make_backend",
}


def _page_directives(page: str) -> list[tuple[str, str]]:
    return _directives_of(DOCS / "api" / page)


def _directives_of(path) -> list[tuple[str, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        match = _DIRECTIVE.match(line)
        if match:
            options = []
            for follow in lines[i + 1 :]:
                if follow.strip() and not follow.startswith((" ", "\t")):
                    break
                options.append(follow)
            found.append((match["target"], "\n".join(options)))
    return found


def test_the_parallel_page_lists_only_what_users_call() -> None:
    shown = _page_directives("parallel.md")
    leaked = [t for t, _ in shown if t.rpartition(".")[2] in INTERNALS]
    assert not leaked, f"internals on docs/api/parallel.md (move them to internals.md): {leaked}"
    # BaseRunner and Pool are there with what users call, without the seams
    seams = {
        "easycore.common.parallel.BaseRunner": RUNNER_SEAMS,
        "easycore.common.parallel.Pool": {"make_policy"},
    }
    for target, names in seams.items():
        (options,) = [o for t, o in shown if t == target]
        hidden = _hidden_by_filters(options)
        assert {n for n in names if hidden(n)} == names, f"{target}: a seam is shown"
        for name in ("__call__", "close", "producer_work", "map", "apply_async"):
            assert not hidden(name), f"{target}: {name} is hidden"


def _hidden_by_filters(options: str):
    """Whether a directive's mkdocstrings ``filters`` leave a member out (as mkdocstrings:
    a ``!pattern`` that ``re.search`` finds in the name excludes it)."""
    import yaml

    filters = yaml.safe_load(options)["options"].get("filters", [])
    excluded = [re.compile(f[1:]) for f in filters if f.startswith("!")]
    return lambda name: any(p.search(name) for p in excluded)


def test_the_internals_page_holds_the_seams_and_says_what_it_is() -> None:
    shown = _page_directives("internals.md")
    names = {t.rpartition(".")[2] for t, _ in shown}
    # Engine, Job and JobSink are shown through the engine's module (engine/core.py).
    assert INTERNALS - {"Engine", "Job", "JobSink"} <= names
    runner = "easycore.common.parallel.BaseRunner."
    assert {t[len(runner):] for t, _ in shown if t.startswith(runner)} == RUNNER_SEAMS
    assert "easycore.common.parallel.Pool.make_policy" in {t for t, _ in shown}
    text = (DOCS / "api" / "internals.md").read_text(encoding="utf-8")
    assert '!!! note "Not needed to use easycore"' in text


def test_returns_sections_render_a_type_not_a_name() -> None:
    # "Returns: bool: whether ..." rendered as "bool | bool" (name | type) while
    # griffe read "bool" as the name of the returned value.
    yaml = pytest.importorskip("yaml")
    griffe = pytest.importorskip("griffe")
    config = yaml.safe_load((DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8"))
    (handler,) = [p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict)
                  and "mkdocstrings" in p]
    options = handler["handlers"]["python"]["options"]
    docstring = griffe.Docstring(
        "Do it.\n\nReturns:\n    bool: whether it was done.",
        parent=griffe.Function("f", returns="bool"),
    )
    sections = docstring.parse(options["docstring_style"], **options["docstring_options"])
    (returns,) = [s for s in sections if s.kind.value == "returns"]
    (item,) = returns.value
    assert not item.name, f"the returned value is named {item.name!r}"
    assert str(item.annotation) == "bool" and item.description == "whether it was done."


def test_no_returns_section_names_its_value() -> None:
    # With returns_named_value off, "Returns: local_path (str): ..." would render its
    # type as "local_path (str": a Returns entry is "TYPE: description".
    named = []
    for source in sorted(DOCS.parent.glob("packages/*/src/**/*.py")):
        lines = source.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines[:-1]):
            if line.strip() == "Returns:" and re.match(r"\s+\w+ \([^)]*\):", lines[i + 1]):
                named.append(f"{source.relative_to(DOCS.parent)}:{i + 2}: {lines[i + 1].strip()}")
    assert not named, "Returns entries written as 'name (type):':\n" + "\n".join(named)
