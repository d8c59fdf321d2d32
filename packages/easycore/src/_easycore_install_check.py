"""Start-up check that pip has not removed files of the easycore micro-packages.

Why it exists: `pip install --upgrade easycore` from easycore 0.4.2 breaks the install, and
no packaging metadata can prevent it. pip installs dependencies before the distribution that
needs them, so it installs easycore-config & co. first and replaces the old `easycore` last;
uninstalling 0.4.2 removes every file in its RECORD, and that list names
`easycore/common/config/__init__.py` and other files that now belong to the micro-packages.
pip reports success, `pip check` is content, and the first import fails with an unhelpful
"cannot import name 'CfgNode' from 'easycore.common.config' (unknown location)".

The meta-package ships this module and `easycore-install-check.pth`, which calls `check()`
at every interpreter start. While the install is sound that costs a `stat` per
micro-package. When files are missing, it prints the one pip command that puts them back,
and makes imports of the damaged packages raise an ImportError that says the same (a
notebook user never sees a kernel's start-up messages). See "Upgrading from easycore 0.4.2"
in the installation guide.
"""

# No `from __future__ import annotations`: importing __future__ alone costs ~0.2 ms at every
# start-up, so the annotations Python 3.9 cannot evaluate are strings.
import os
import sys

# The meta-package always installs easycore-config, and easycore 0.4.2 owned this file, so
# every upgrade that damages the install removes it. A folder left without it is the sign.
SENTINEL = ("easycore", "common", "config")
# Every micro-package's import package: any of them may be left as a folder without its
# `__init__.py` (0.4.2's uninstall for config and registry; compiled files that `python -O`
# wrote and `pip uninstall` leaves, for any of them).
PACKAGES = (
    SENTINEL,
    ("easycore", "common", "registry"),
    ("easycore", "common", "path"),
    ("easycore", "common", "network"),
    ("easycore", "common", "parallel"),
    ("easycore", "torch"),
)
GUIDE = "https://easycore-dev.github.io/easycore/installation/#upgrading-from-easycore-042"

Damage = "dict[str, tuple[str, list[str]]]"  # name -> (version, import packages hit)


def looks_damaged(site: str) -> bool:
    """The fast test: a micro-package's folder in `site` is there, its `__init__.py` is not."""
    for package in PACKAGES:
        folder = os.path.join(site, *package)
        if not os.path.exists(os.path.join(folder, "__init__.py")) and os.path.isdir(folder):
            return True
    return False


def damaged_distributions(site: str) -> Damage:
    """The easycore micro-packages installed in `site` that miss files.

    Args:
        site: a site-packages folder.

    Returns:
        `{name: (version, packages)}` for each distribution in `site` whose name starts
        with `easycore-` and of whose files under `easycore/` some are gone; `packages` are
        the import packages that lost their `__init__.py` (outermost only).
    """
    # Only on the slow path: these imports are not free.
    import csv
    from importlib.metadata import distributions

    damaged = {}
    for dist in distributions(path=[site]):
        name = dist.metadata["Name"] or ""
        if not name.lower().replace("_", "-").startswith("easycore-"):
            continue
        # RECORD itself, not dist.files: since Python 3.12 that leaves out missing files.
        rows = csv.reader((dist.read_text("RECORD") or "").splitlines())
        files = [row[0].split("/") for row in rows if row and row[0].startswith("easycore/")]
        missing = [f for f in files if not os.path.exists(os.path.join(site, *f))]
        if missing:
            hit = {".".join(f[:-1]) for f in missing if f[-1] == "__init__.py"}
            outer = [p for p in hit if not any(p.startswith(o + ".") for o in hit)]
            damaged[name] = (dist.version, sorted(outer))
    return dict(sorted(damaged.items()))


def leftover_folders(site: str) -> "list[str]":
    """Import packages of easycore that only compiled files keep alive in `site`.

    `pip uninstall easycore-config` removes the files its RECORD lists, and the
    `.pyc` files of the default optimisation level next to them; the `.opt-1.pyc`
    and `.opt-2.pyc` files that `python -O` wrote stay, and so does their folder.
    Python then imports the folder as an empty namespace package ("cannot import
    name 'CfgNode' (unknown location)").

    Returns:
        The dotted names of the outermost such packages: folders under `easycore/`
        with no `__init__.py` and their own `__pycache__`, that hold no file but
        compiled ones.
    """
    root = os.path.join(site, "easycore")
    found = []
    for folder, subfolders, names in os.walk(root):
        if os.path.basename(folder) == "__pycache__":
            subfolders[:] = []
            continue
        # A package's own folder has its own __pycache__; namespace folders
        # (easycore/, easycore/common/) have none, and are never reported.
        if "__init__.py" in names or "__pycache__" not in subfolders:
            continue
        has_source = False
        has_compiled = False
        for inner, _, inner_names in os.walk(folder):
            if os.path.basename(inner) == "__pycache__":
                has_compiled = has_compiled or any(n.endswith(".pyc") for n in inner_names)
            elif any(not n.endswith(".pyc") for n in inner_names):
                has_source = True
                break
        if has_compiled and not has_source:
            found.append(".".join(os.path.relpath(folder, site).split(os.sep)))
            subfolders[:] = []  # its subfolders are part of the same leftover
    return found


def leftover_message(packages: "list[str]", site: str, python: str) -> str:
    """What the user reads when only compiled files of uninstalled packages are left."""
    folders = " ".join(os.path.join(site, *p.split(".")) for p in packages)
    names = ", ".join(packages)
    return (
        f"easycore: the installation in {site} is damaged: {names} hold only compiled\n"
        "files (.opt-1.pyc, .opt-2.pyc written by `python -O`) that pip left behind when it\n"
        "uninstalled the package; Python imports such a folder as an empty package.\n"
        f"Reinstall it (easycore needs it):\n\n    {python} -m pip install --force-reinstall"
        f" easycore\n\nor remove the leftovers:\n\n    rm -r {folders}\n\n(see {GUIDE})"
    )


def repair_command(damaged: Damage, python: str) -> str:
    """The pip command that puts the files back, pinned to the installed versions."""
    pins = " ".join(f"{name}=={version}" for name, (version, _) in damaged.items())
    return f"{python} -m pip install --force-reinstall --no-deps {pins}"


def message(damaged: Damage, site: str, python: str) -> str:
    """What the user reads: what is broken, why, and the command that repairs it."""
    names = ", ".join(f"{name} {version}" for name, (version, _) in damaged.items())
    return (
        f"easycore: the installation in {site} is damaged: files of {names} are missing.\n"
        "pip removed them when it uninstalled easycore 0.4.2 after installing the new\n"
        f"micro-packages. Repair it with:\n\n    {repair_command(damaged, python)}\n\n"
        f"(see {GUIDE})"
    )


class DamagedImportBlocker:
    """A meta path finder that fails imports of the damaged packages with the repair message.

    Without it, `easycore.common.config` would import as an empty namespace package.
    """

    def __init__(self, packages: "list[str]", text: str):
        self.packages = packages
        self.text = text

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == p or fullname.startswith(p + ".") for p in self.packages):
            raise ImportError(self.text, name=fullname)
        return None  # not ours: the other finders go on looking


_results: "dict[str, bool]" = {}


def check(site: "str | None" = None) -> bool:
    """Warn on stderr and block the damaged imports if easycore's files are missing.

    site.py runs the .pth files of a virtual environment twice (CPython 3.9 to 3.13 at
    least: `venv()` and `main()` both add its site-packages), so each folder is checked
    once per process.

    Args:
        site: the site-packages folder to check; by default the one holding this module.

    Returns:
        False if the install is damaged; True if it is sound or could not be checked.
    """
    site = site or os.path.dirname(os.path.abspath(__file__))
    if site not in _results:
        _results[site] = _check(site)
    return _results[site]


def _check(site: str) -> bool:
    try:
        if not looks_damaged(site):
            return True
        damaged = damaged_distributions(site)
        if damaged:
            text = message(damaged, site, sys.executable or "python")
            packages = [p for _, hit in damaged.values() for p in hit]
        else:
            packages = leftover_folders(site)
            if not packages:
                return True
            text = leftover_message(packages, site, sys.executable or "python")
        sys.meta_path.insert(0, DamagedImportBlocker(packages, text))
        print(text, file=sys.stderr)
        return False
    except Exception:  # noqa: BLE001 (a start-up check must never keep Python from starting)
        return True
