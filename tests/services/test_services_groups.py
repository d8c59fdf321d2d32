"""Groups and membership, ``pair`` / ``get_paired`` (issue 27, item 2)."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest
from _services_support import Tool, wait_gone

from easycore.common.parallel.services import (
    Service,
    ServiceNotFoundError,
    get_paired,
    is_member,
    lookup,
    names,
    pair,
)

pytestmark = pytest.mark.timeout(120)


def test_names_and_groups(no_leaks):
    with Service.start(Tool, name="a", groups="workers") as a, \
            Service.start(Tool, name="b", groups=["workers", "learners"]), \
            Service.start(Tool, name="c"), \
            Service.start(Tool, name="d", namespace="other", groups="workers"):
        assert names() == ["a", "b", "c"]
        assert names("workers") == ["a", "b"]
        assert names(group="learners") == ["b"]
        assert names("workers", namespace="other") == ["d"]
        assert names("nobody") == []
        assert is_member("a", "workers") and not is_member("c", "workers")
        a.close()
        assert names("workers") == ["b"]


def test_membership_follows_a_death(no_leaks):
    with Service.start(Tool, name="w1", groups="g"), \
            Service.start(Tool, name="w2", groups="g") as w2:
        assert names("g") == ["w1", "w2"]
        os.kill(w2.pid, signal.SIGKILL)
        assert wait_gone([w2.pid]) == []
        assert names("g") == ["w1"]


def test_groups_need_a_name(services_dir):
    with pytest.raises(ValueError, match="needs a name"):
        Service.start(Tool, groups="g")
    with pytest.raises(ValueError, match="non-empty"):
        Service.start(Tool, name="x", groups=[""])


def _read_paired(results):
    results.put(get_paired("lr") + 1)


def test_pair_and_get_paired(no_leaks):
    scale = 3
    with pair("lr", 0.5) as owner, pair("fn", lambda x: x * scale, groups="fns"):
        assert get_paired("lr") == 0.5
        assert get_paired("fn")(2) == 6
        assert names("fns") == ["fn"]
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        child = ctx.Process(target=_read_paired, args=(results,))
        child.start()
        assert results.get(timeout=60) == 1.5
        child.join(30)
        owner.call("set", 0.1)
        assert get_paired("lr") == 0.1
        with pytest.raises(ValueError, match="already running"):
            pair("lr", 1)
    with pytest.raises(ServiceNotFoundError):
        get_paired("lr", timeout=0.2)


# ------------------------------------------- names with dots (issue 34 items 8, 9)
def test_a_name_with_a_leading_dot_is_a_member_like_any_other(no_leaks):
    """The registry's scan skipped dotfiles as its temporaries: ``.hidden`` was
    found by lookup but missing from names() and is_member."""
    with Service.start(Tool, name=".hidden", groups="g"), \
            Service.start(Tool, name="..", groups=["g", ".dots"]), \
            Service.start(Tool, name="visible", groups="g"):
        assert names() == ["..", ".hidden", "visible"]
        assert names("g") == ["..", ".hidden", "visible"]
        assert names(".dots") == [".."]
        assert is_member(".hidden", "g") and is_member("..", ".dots")
        with lookup(".hidden") as found:
            assert found.call("echo", 1) == ((1,), {})


@pytest.mark.parametrize("namespace", [".", "..", ".x", "a/../..", "%2E"])
def test_a_namespace_stays_inside_the_registry(no_leaks, services_dir, namespace):
    """``".."`` wrote its entry into the services directory itself, ``"."`` beside
    the namespace folders."""
    with Service.start(Tool, name="s", namespace=namespace, groups="g"):
        names_dir = os.path.join(services_dir, "names")
        folders = os.listdir(names_dir)
        assert len(folders) == 1 and os.path.isdir(os.path.join(names_dir, folders[0]))
        assert not folders[0].startswith(".")
        assert os.listdir(os.path.join(names_dir, folders[0])) == ["s.json"]
        assert [f for f in os.listdir(services_dir) if f.endswith(".json")] == []
        assert names(namespace=namespace) == ["s"] and names() == []
        assert is_member("s", "g", namespace=namespace)
        with lookup("s", namespace=namespace, timeout=5) as found:
            assert found.call("echo", 2) == ((2,), {})
    assert names(namespace=namespace) == []


def test_namespaces_dot_and_dot_dot_are_apart(no_leaks):
    with Service.start(Tool, name="s", namespace="."), \
            Service.start(Tool, name="s", namespace=".."), \
            Service.start(Tool, name="s"):
        assert names(namespace=".") == ["s"] and names(namespace="..") == ["s"]
        with pytest.raises(ValueError, match="already running"):
            Service.start(Tool, name="s", namespace="..")
