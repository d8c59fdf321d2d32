"""User code that mypy checks (tests/registry/test_registry_typing.py); it also runs.

`register()` and `register("name")` are typed decorators that give back what
they decorate, unchanged; `register("name", obj)` returns None.
"""

from __future__ import annotations

from typing_extensions import assert_type

from easycore.common.registry import Registry

MODELS = Registry("MODEL")


@MODELS.register()
class ResNet:
    def __init__(self, depth: int = 50) -> None:
        self.depth = depth


@MODELS.register("vgg")
class VGG:
    pass


@MODELS.register()
def build_mobilenet(width: float = 1.0) -> str:
    return f"mobilenet x{width}"


@MODELS.register
class Bare:  # without parentheses: registered as "Bare", still the class
    def __init__(self, size: int = 1) -> None:
        self.size = size


class Plain:
    pass


def build_vgg() -> VGG:
    return VGG()


def main() -> None:
    assert_type(ResNet(101).depth, int)  # the class is still the class
    assert_type(build_mobilenet(0.5), str)  # so is the function
    assert_type(Bare(2).size, int)  # and the class decorated without parentheses
    assert MODELS.get("Bare") is Bare
    result = MODELS.register("plain", Plain)
    assert_type(result, None)
    MODELS.register(obj=build_vgg)  # keyword form, named by __name__
    MODELS.register(name="vgg2", obj=VGG)
    decorator = MODELS.register("late")
    assert decorator(Plain) is Plain
    assert MODELS.get("ResNet") is ResNet and "vgg" in MODELS
    assert sorted(MODELS) == sorted(MODELS.registered_names())


if __name__ == "__main__":
    main()
