"""Registry: the register mechanism tutorial and API of easycore 0.4.2, then its edge cases."""

from __future__ import annotations

import sys
import threading

import pytest

from easycore.common.registry import Registry


# ------------------------------------------------------------ 1.4.1 create a registry
def test_create_a_registry():
    MODEL_REGISTRY = Registry("MODEL")
    assert MODEL_REGISTRY.name == "MODEL"
    assert MODEL_REGISTRY.registered_names() == []
    assert len(MODEL_REGISTRY) == 0


# ------------------------------------------------------------ 1.4.2 register with __name__
def test_register_with_its_name_by_decorator():
    MODEL_REGISTRY = Registry("MODEL")

    @MODEL_REGISTRY.register()
    class ResNet50:
        pass

    assert ResNet50.__name__ == "ResNet50"  # the decorator returns the class itself
    assert MODEL_REGISTRY.get("ResNet50") is ResNet50
    assert MODEL_REGISTRY.registered_names() == ["ResNet50"]


def test_register_with_its_name_by_call():
    MODEL_REGISTRY = Registry("MODEL")

    class ResNet50:
        pass

    assert MODEL_REGISTRY.register(obj=ResNet50) is None
    assert MODEL_REGISTRY.get("ResNet50") is ResNet50


def test_register_functions_too():
    BUILDERS = Registry("BUILDER")

    @BUILDERS.register()
    def build_resnet():
        return "resnet"

    assert BUILDERS.get("build_resnet")() == "resnet"


def test_object_without_a_name_needs_one():
    registry = Registry("MODEL")
    with pytest.raises(TypeError, match="__name__"):
        registry.register(obj=42)
    with pytest.raises(TypeError, match="__name__"):
        registry.register()(42)
    registry.register("answer", 42)
    assert registry.get("answer") == 42


# ------------------------------------------------------------ 1.4.3 register with a given name
def test_register_with_a_given_name_by_decorator():
    MODEL_REGISTRY = Registry("MODEL")

    @MODEL_REGISTRY.register("resnet")
    class ResNet50:
        pass

    assert MODEL_REGISTRY.get("resnet") is ResNet50
    assert not MODEL_REGISTRY.is_registered("ResNet50")


def test_register_with_a_given_name_by_call():
    MODEL_REGISTRY = Registry("MODEL")

    class ResNet50:
        pass

    assert MODEL_REGISTRY.register("resnet", ResNet50) is None
    assert MODEL_REGISTRY.get("resnet") is ResNet50


def test_same_object_under_two_names():
    registry = Registry("MODEL")

    class ResNet50:
        pass

    registry.register(obj=ResNet50)
    registry.register("resnet", ResNet50)
    assert registry.get("ResNet50") is registry.get("resnet") is ResNet50
    assert registry.registered_names() == ["ResNet50", "resnet"]


def test_name_must_be_a_string():
    registry = Registry("MODEL")
    with pytest.raises(TypeError, match="MODEL"):
        registry.register(3, object())
    assert len(registry) == 0


# ------------------------------------------------------------ 1.4.4 get
def test_get_a_registered_object():
    MODEL_REGISTRY = Registry("MODEL")

    @MODEL_REGISTRY.register()
    class ResNet50:
        pass

    MODEL_REGISTRY.register("resnet", ResNet50)

    model_class = MODEL_REGISTRY.get("ResNet50")
    assert model_class is ResNet50
    model_class = MODEL_REGISTRY.get("resnet")
    assert model_class is ResNet50
    assert isinstance(model_class(), ResNet50)


def test_get_an_unknown_name_names_the_registry_and_suggests():
    registry = Registry("MODEL")
    registry.register("ResNet50", object())
    registry.register("VGG16", object())

    with pytest.raises(KeyError) as info:
        registry.get("ResNet5")
    message = info.value.args[0]
    assert "'ResNet5'" in message
    assert "registry 'MODEL'" in message
    assert "did you mean 'ResNet50'?" in message


def test_get_an_unknown_name_without_close_match():
    registry = Registry("MODEL")
    registry.register("ResNet50", object())
    with pytest.raises(KeyError) as info:
        registry.get("transformer")
    assert "registry 'MODEL'" in info.value.args[0]
    assert "did you mean" not in info.value.args[0]
    with pytest.raises(KeyError, match="MODEL"):
        Registry("MODEL").get("anything")


# ------------------------------------------------------------ duplicates
def test_duplicate_name_raises_naming_the_registry():
    registry = Registry("MODEL")

    class ResNet50:
        pass

    registry.register(obj=ResNet50)
    with pytest.raises(KeyError) as info:
        registry.register(obj=ResNet50)
    assert "'ResNet50'" in info.value.args[0]
    assert "registry 'MODEL'" in info.value.args[0]
    assert "already registered" in info.value.args[0]


@pytest.mark.parametrize(
    "register_again",
    [
        lambda r, o: r.register()(o),
        lambda r, o: r.register("ResNet50")(o),
        lambda r, o: r.register(obj=o),
        lambda r, o: r.register("ResNet50", o),
    ],
    ids=["decorator", "named decorator", "obj=", "name, obj"],
)
def test_duplicate_is_refused_by_every_way_in_and_keeps_the_first(register_again):
    registry = Registry("MODEL")

    class ResNet50:
        pass

    registry.register(obj=ResNet50)
    impostor = type("ResNet50", (), {})
    with pytest.raises(KeyError, match="MODEL"):
        register_again(registry, impostor)
    assert registry.get("ResNet50") is ResNet50
    assert len(registry) == 1


def test_registries_are_independent():
    models, heads = Registry("MODEL"), Registry("HEAD")
    models.register("resnet", 1)
    heads.register("resnet", 2)
    assert models.get("resnet") == 1 and heads.get("resnet") == 2


# ------------------------------------------------------------ unregister / is_registered
def test_unregister():
    registry = Registry("MODEL")
    registry.register("resnet", object())
    assert registry.is_registered("resnet")

    registry.unregister("resnet")

    assert not registry.is_registered("resnet")
    assert registry.registered_names() == []
    with pytest.raises(KeyError, match="MODEL"):
        registry.get("resnet")
    registry.register("resnet", "again")  # the name is free again
    assert registry.get("resnet") == "again"


def test_unregister_an_unknown_name_names_the_registry_and_suggests():
    registry = Registry("MODEL")
    registry.register("resnet", object())
    with pytest.raises(KeyError) as info:
        registry.unregister("resnt")
    assert "registry 'MODEL'" in info.value.args[0]
    assert "did you mean 'resnet'?" in info.value.args[0]
    assert registry.is_registered("resnet")


def test_is_registered():
    registry = Registry("MODEL")
    assert registry.is_registered("resnet") is False
    registry.register("resnet", object)
    assert registry.is_registered("resnet") is True
    assert registry.is_registered("ResNet") is False


# ------------------------------------------------------------ registered_names and dunders
def test_registered_names_in_registration_order_and_a_copy():
    registry = Registry("MODEL")
    for name in ["c", "a", "b"]:
        registry.register(name, name.upper())
    names = registry.registered_names()
    assert names == ["c", "a", "b"]
    names.append("zzz")
    assert registry.registered_names() == ["c", "a", "b"]


def test_in_len_iter_repr():
    registry = Registry("MODEL")
    registry.register("resnet", 1)
    registry.register("alexnet", 2)

    assert "resnet" in registry and "vgg" not in registry
    assert 3 not in registry
    assert len(registry) == 2
    assert list(registry) == ["resnet", "alexnet"]
    assert repr(registry) == "Registry('MODEL', names=['alexnet', 'resnet'])"


def test_iteration_is_a_snapshot():
    registry = Registry("MODEL")
    registry.register("a", 1)
    registry.register("b", 2)
    seen = []
    for name in registry:  # changing the registry while iterating does not break the loop
        seen.append(name)
        registry.unregister(name)
    assert seen == ["a", "b"]
    assert len(registry) == 0


# ------------------------------------------------------------ threads
def _run_threads(count, target):
    """Start ``count`` threads at once; switch threads very often to provoke races."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def worker(i):
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 (collected and checked by the test)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    return errors


@pytest.mark.timeout(60)
def test_many_threads_registering_distinct_names():
    registry = Registry("MODEL")
    per_thread = 200

    def register_many(i):
        for j in range(per_thread):
            registry.register(f"model_{i}_{j}", (i, j))

    errors = _run_threads(16, register_many)

    assert errors == []
    assert len(registry) == 16 * per_thread
    for i in range(16):
        for j in range(per_thread):
            assert registry.get(f"model_{i}_{j}") == (i, j)


@pytest.mark.timeout(60)
def test_same_name_from_many_threads_exactly_one_succeeds():
    for _ in range(20):  # repeat: a race shows up only sometimes
        registry = Registry("MODEL")
        winners: list[int] = []

        def register_one(i, registry=registry, winners=winners):
            registry.register("resnet", i)
            winners.append(i)

        errors = _run_threads(16, register_one)

        assert len(winners) == 1
        assert len(errors) == 15
        assert all(isinstance(e, KeyError) and "MODEL" in e.args[0] for e in errors)
        assert registry.get("resnet") == winners[0]
        assert len(registry) == 1


@pytest.mark.timeout(60)
def test_register_and_unregister_from_many_threads():
    registry = Registry("MODEL")

    def churn(i):
        for j in range(200):
            name = f"tmp_{i}_{j}"
            registry.register(name, j)
            assert registry.get(name) == j
            registry.unregister(name)
        registry.register(f"kept_{i}", i)

    errors = _run_threads(8, churn)

    assert errors == []
    assert sorted(registry) == sorted(f"kept_{i}" for i in range(8))


# ------------------------------------------------------------ registering None (issue 15, item 18)
@pytest.mark.parametrize(
    "register",
    [
        lambda r: r.register("x", None),
        lambda r: r.register(name="x", obj=None),
        lambda r: r.register("x")(None),
        lambda r: r.register(obj=None),
        lambda r: r.register()(None),
    ],
)
def test_registering_none_raises_and_registers_nothing(register):
    registry = Registry("ACTIVATION")
    with pytest.raises(TypeError, match="None"):
        register(registry)
    assert len(registry) == 0 and "x" not in registry


def test_the_none_error_names_the_registry_and_the_name():
    registry = Registry("ACTIVATION")
    with pytest.raises(TypeError, match=r"registry 'ACTIVATION': cannot register None as 'relu'"):
        registry.register("relu", None)


def test_falsy_objects_other_than_none_register():
    registry = Registry("CONST")
    for name, obj in [("zero", 0), ("empty", ""), ("false", False), ("nothing", ())]:
        registry.register(name, obj)
        assert registry.get(name) is obj


# ------------------------------------------------------------ issue 22: items 10, 21, 22
def _registry_with_two():
    registry = Registry("MODEL")
    registry.register("int", int)
    registry.register("dict", dict)
    return registry


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_a_registry_can_be_pickled_and_copied(how):
    import copy
    import pickle

    registry = _registry_with_two()
    twin = {
        "pickle": lambda r: pickle.loads(pickle.dumps(r)),
        "deepcopy": copy.deepcopy,
        "copy": copy.copy,
    }[how](registry)
    assert twin.name == "MODEL" and twin.registered_names() == ["int", "dict"]
    assert twin.get("int") is int
    twin.register("list", list)  # the copy has a lock of its own and works
    with pytest.raises(KeyError, match="already registered"):
        twin.register("int", int)
    assert "list" not in registry  # and is independent of the original


def test_a_registry_inside_a_config_can_be_deep_copied():
    import copy

    cfg = {"models": _registry_with_two(), "lr": 0.1}
    twin = copy.deepcopy(cfg)
    assert twin["models"].get("dict") is dict


def test_register_with_ellipsis_registers_ellipsis_and_returns_none():
    registry = Registry("MODEL")
    assert registry.register("dots", ...) is None
    assert registry.get("dots") is Ellipsis
    assert registry.register(obj=..., name="dots2") is None
    assert registry.registered_names() == ["dots", "dots2"]


def test_register_without_parentheses_registers_a_class_under_its_name():
    registry = Registry("MODEL")

    @registry.register
    class ResNet:
        pass

    assert isinstance(ResNet, type) and ResNet.__name__ == "ResNet"  # still the class
    assert registry.get("ResNet") is ResNet


def test_register_without_parentheses_registers_a_function_under_its_name():
    registry = Registry("MODEL")

    @registry.register
    def build():
        return 7

    assert build() == 7 and registry.get("build") is build
    with pytest.raises(KeyError, match="already registered"):
        registry.register(build)  # and the name is taken, as for any other way in


@pytest.mark.parametrize("bad", [3, 2.5, b"name", ["a"], object()])
def test_a_name_that_is_not_a_string_raises_at_once(bad):
    registry = Registry("MODEL")
    with pytest.raises(TypeError, match=r"MODEL.*names must be str"):
        registry.register(bad)
    assert len(registry) == 0
