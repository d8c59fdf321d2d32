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
