"""`LazyPath`, `PathManagerFactory` and `opent`: iopath's names, in easycore's terms."""

import copy
import os
import pickle
import threading

import pytest

from easycore.common.path import (
    LazyPath,
    PathHandler,
    PathManager,
    PathManagerFactory,
    RedirectPathHandler,
)


class Counter:
    """A path function that counts its calls (a picklable one: a module-level class)."""

    def __init__(self, value="run/dir"):
        self.value = value
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.value


# ------------------------------------------------------------ LazyPath
def test_the_function_runs_on_first_use_and_only_then():
    made = Counter()
    lazy = LazyPath(made)
    assert made.calls == 0
    assert os.fspath(lazy) == "run/dir" and made.calls == 1
    assert os.fspath(lazy) == "run/dir" and made.calls == 1
    assert os.path.join(lazy, "a.txt") == os.path.join("run/dir", "a.txt")


def test_os_path_functions_compute_it():
    made = Counter()
    assert os.path.join(LazyPath(made), "x") == "run/dir/x" and made.calls == 1


def test_threads_using_it_at_once_call_the_function_once():
    barrier = threading.Barrier(8)
    calls = []

    def slow():
        calls.append(1)
        return "p"

    lazy = LazyPath(slow)
    seen = []

    def use():
        barrier.wait(timeout=30)
        seen.append(os.fspath(lazy))

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == ["p"] * 8 and len(calls) == 1


def test_it_acts_as_its_string_only_once_computed():
    lazy = LazyPath(lambda: "abc.pth")
    with pytest.raises(AttributeError, match="until its path is computed"):
        lazy.endswith(".pth")
    with pytest.raises(TypeError, match="not subscriptable until"):
        lazy[0]
    assert "not computed" in str(lazy) and "not computed" in repr(lazy)
    os.fspath(lazy)
    assert lazy.endswith(".pth") and lazy[0] == "a" and lazy[-4:] == ".pth"
    assert str(lazy) == "abc.pth" and repr(lazy) == "LazyPath('abc.pth')"
    with pytest.raises(AttributeError):
        lazy.no_such_method  # noqa: B018 (the str has none either)


def test_a_function_that_raises_is_called_again_next_time():
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("not mounted yet")
        return "/mnt/data"

    lazy = LazyPath(flaky)
    with pytest.raises(OSError, match="not mounted"):
        os.fspath(lazy)
    assert os.fspath(lazy) == "/mnt/data" and len(attempts) == 2


@pytest.mark.parametrize("value", [3, None, b"bytes/path"])
def test_a_function_that_returns_no_str_path_is_named(value):
    def odd():
        return value

    with pytest.raises(TypeError, match=r"odd.* returned .*not a path"):
        os.fspath(LazyPath(odd))


def test_a_function_may_return_a_pathlike(tmp_path):
    assert os.fspath(LazyPath(lambda: tmp_path)) == str(tmp_path)


def test_pathmanager_takes_it_for_every_kind_of_path(tmp_path, mem):
    (tmp_path / "f.txt").write_text("local")
    with PathManager.open(f"{mem}/o.txt", "w") as f:
        f.write("object")
    assert PathManager.ls(LazyPath(lambda: str(tmp_path))) == ["f.txt"]
    with PathManager.open(LazyPath(lambda: f"{mem}/o.txt")) as f:
        assert f.read() == "object"
    assert PathManager.isfile(LazyPath(lambda: str(tmp_path / "f.txt")))


def test_copies_and_pickles_keep_the_path_and_the_promise():
    made = Counter("/data/x")
    lazy = LazyPath(made)
    fresh = pickle.loads(pickle.dumps(lazy))  # not computed: the function travels
    assert "not computed" in repr(fresh) and os.fspath(fresh) == "/data/x"
    assert made.calls == 0  # the copy called its own copy of the function
    os.fspath(lazy)
    for clone in (copy.copy(lazy), copy.deepcopy(lazy), pickle.loads(pickle.dumps(lazy))):
        assert os.fspath(clone) == "/data/x" and clone.startswith("/data")
    assert made.calls == 1
    computed = LazyPath(lambda: "/tmp/a")  # a lambda does not pickle; its result does
    os.fspath(computed)
    assert os.fspath(pickle.loads(pickle.dumps(computed))) == "/tmp/a"


# ------------------------------------------------------------ PathManagerFactory
def test_the_factory_hands_out_one_manager_per_name(tmp_path):
    first = PathManagerFactory.get("test_factory_a")
    try:
        assert PathManagerFactory.get("test_factory_a") is first
        assert PathManagerFactory.get("test_factory_b") is not first
        assert isinstance(PathManagerFactory.get(), PathManager)
        assert PathManagerFactory.get() is PathManagerFactory.get("global_path_manager")
        (tmp_path / "f.txt").write_text("f")
        with first.open(str(tmp_path / "f.txt")) as f:
            assert f.read() == "f"
        PathManagerFactory.remove("test_factory_a")
        assert PathManagerFactory.get("test_factory_a") is not first
    finally:
        PathManagerFactory.remove("test_factory_a")
        PathManagerFactory.remove("test_factory_b")
    PathManagerFactory.remove("never_made")  # nothing to forget: no error


def test_named_managers_share_the_one_registry(tmp_path):
    (tmp_path / "f.txt").write_text("shared")
    mine = PathManagerFactory.get("test_factory_mine")
    try:
        mine.register_handler(RedirectPathHandler("named://", str(tmp_path) + "/"))
        for manager in (PathManager, PathManagerFactory.get("test_factory_other")):
            with manager.open("named://f.txt") as f:
                assert f.read() == "shared"
    finally:
        PathManagerFactory.remove("test_factory_mine")
        PathManagerFactory.remove("test_factory_other")


# ------------------------------------------------------------ opent
def test_opent_is_for_handlers_of_table_stores(tmp_path):
    with pytest.raises(NotImplementedError, match="NativePathHandler does not support opent"):
        PathManager.opent(str(tmp_path / "t.csv"))

    class Rows(PathHandler):
        def get_supported_prefixes(self):
            return ["rows://"]

        def opent(self, path, mode="r", buffering=32, **kwargs):
            return [(path, mode, buffering, kwargs)]

    PathManager.register(Rows())
    assert PathManager.opent("rows://t", buffering=4, columns=["a"]) == [
        ("rows://t", "r", 4, {"columns": ["a"]})
    ]
