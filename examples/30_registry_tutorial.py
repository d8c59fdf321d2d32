"""Tutorial: the register mechanism of easycore.common.registry.

Follows the easycore registry tutorial end to end: create a registry,
register objects by their ``__name__`` or a given name, get them back, and
see the errors for duplicates and typos. Finally a model is built from a
config file by name, the way training scripts use a registry.

    cd "$(mktemp -d)" && python /path/to/examples/30_registry_tutorial.py
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from easycore.common.config import CfgNode
from easycore.common.registry import Registry


def section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 66 - len(title)))


def main() -> None:
    section("1. create a registry")
    MODEL_REGISTRY = Registry("MODEL")
    print(f"  MODEL_REGISTRY = {MODEL_REGISTRY!r}")

    section("2. register an object with its __name__")

    @MODEL_REGISTRY.register()
    class ResNet50:
        def __init__(self, num_classes: int = 1000) -> None:
            self.num_classes = num_classes

        def __repr__(self) -> str:
            return f"ResNet50(num_classes={self.num_classes})"

    class VGG16:
        def __init__(self, num_classes: int = 1000) -> None:
            self.num_classes = num_classes

        def __repr__(self) -> str:
            return f"VGG16(num_classes={self.num_classes})"

    MODEL_REGISTRY.register(obj=VGG16)
    print("  @MODEL_REGISTRY.register() on class ResNet50")
    print("  MODEL_REGISTRY.register(obj=VGG16)")
    print(f"  registered_names() -> {MODEL_REGISTRY.registered_names()}")

    section("3. register an object with a given name")

    @MODEL_REGISTRY.register("mobilenet")
    class MobileNetV2:
        pass

    MODEL_REGISTRY.register("resnet", ResNet50)  # one class may have several names
    MODEL_REGISTRY.register("vgg", VGG16)
    print('  @MODEL_REGISTRY.register("mobilenet") on class MobileNetV2')
    print('  MODEL_REGISTRY.register("resnet", ResNet50); MODEL_REGISTRY.register("vgg", VGG16)')
    print(f"  registered_names() -> {MODEL_REGISTRY.registered_names()}")

    section("4. get a registered object")
    model_class = MODEL_REGISTRY.get("ResNet50")
    print(f'  MODEL_REGISTRY.get("ResNet50") -> {model_class.__name__}')
    model_class = MODEL_REGISTRY.get("resnet")
    print(f'  MODEL_REGISTRY.get("resnet")   -> {model_class.__name__}')
    assert model_class is ResNet50
    print(f'  is_registered("vgg")           -> {MODEL_REGISTRY.is_registered("vgg")}')
    print(f'  "VGG16" in MODEL_REGISTRY      -> {"VGG16" in MODEL_REGISTRY}')
    print(f"  len(MODEL_REGISTRY)            -> {len(MODEL_REGISTRY)}")
    print(f"  list(MODEL_REGISTRY)           -> {list(MODEL_REGISTRY)}")

    section("5. mistakes are reported with the registry's name")
    try:
        MODEL_REGISTRY.register(obj=ResNet50)
    except KeyError as exc:
        print(f"  register ResNet50 twice -> KeyError: {exc.args[0]}")
    try:
        MODEL_REGISTRY.get("ResNet05")
    except KeyError as exc:
        print(f'  get("ResNet05")         -> KeyError: {exc.args[0]}')

    section("6. unregister")
    MODEL_REGISTRY.unregister("vgg")
    print('  MODEL_REGISTRY.unregister("vgg")')
    print(f"  registered_names() -> {MODEL_REGISTRY.registered_names()}")
    assert not MODEL_REGISTRY.is_registered("vgg")

    section("7. registration is thread-safe")
    HEADS = Registry("HEAD")
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: HEADS.register(f"head_{i}", i), range(200)))
    print(f"  200 heads registered from 8 threads -> len(HEADS) == {len(HEADS)}")

    def claim(i: int) -> bool:
        try:
            HEADS.register("contested", i)
            return True
        except KeyError:
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        wins = sum(pool.map(claim, range(8)))
    print(f'  8 threads register "contested"      -> {wins} succeeded, {8 - wins} got KeyError')
    assert len(HEADS) == 201 and wins == 1

    section("8. build a model named in a config file")
    Path("model.yaml").write_text("MODEL:\n  NAME: ResNet50\n  NUM_CLASSES: 10\n", encoding="utf-8")
    cfg = CfgNode.open("model.yaml")
    print(f"  cfg = {cfg}")
    model = MODEL_REGISTRY.get(cfg.MODEL.NAME)(num_classes=cfg.MODEL.NUM_CLASSES)
    print(f"  MODEL_REGISTRY.get(cfg.MODEL.NAME)(num_classes=...) -> {model!r}")
    assert isinstance(model, ResNet50) and model.num_classes == 10

    print(f"\n  final registry: {MODEL_REGISTRY!r}")
    print("\nregistry tutorial done.")


if __name__ == "__main__":
    main()
