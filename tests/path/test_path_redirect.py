"""Tutorial 1.5.3, "Redirect path": a new prefix served from a URL or a local directory."""

import os

import pytest

from easycore.common.path import PathManager, RedirectPathHandler


def test_tutorial_redirect_to_a_url(server, http_handler, uid, expected_body):
    PathManager.register(RedirectPathHandler("easycore://", server.url(f"/download/{uid}/")))

    local = PathManager.get_local_path("easycore://yyy/zzz.txt")
    with open(local, "rb") as f:
        assert f.read() == expected_body(f"/download/{uid}/yyy/zzz.txt")
    with PathManager.open("easycore://yyy/zzz.txt", encoding="utf-8") as f:
        assert f.read().startswith("content of")
    assert PathManager.exists("easycore://yyy/zzz.txt")
    assert server.count(f"/download/{uid}/yyy/zzz.txt") == 1
    with pytest.raises(PermissionError):
        PathManager.remove("easycore://yyy/zzz.txt")  # read-only, like its target


def test_tutorial_redirect_to_a_local_dir(tmp_path):
    target = tmp_path / "dir"
    target.mkdir()
    PathManager.register(RedirectPathHandler("file://", str(target) + os.sep))

    PathManager.makedirs("file://sub")
    with PathManager.open("file://sub/a.txt", "w") as f:
        f.write("a")
    assert (target / "sub" / "a.txt").read_text() == "a"
    assert PathManager.exists("file://sub/a.txt") and PathManager.isfile("file://sub/a.txt")
    assert PathManager.isdir("file://sub") and PathManager.listdir("file://sub") == ["a.txt"]
    assert PathManager.get_local_path("file://sub/a.txt") == str(target / "sub" / "a.txt")
    PathManager.copy("file://sub/a.txt", "file://sub/b.txt")
    assert (target / "sub" / "b.txt").read_text() == "a"
    with pytest.raises(FileExistsError):
        PathManager.copy("file://sub/a.txt", "file://sub/b.txt")
    PathManager.remove("file://sub/a.txt")
    PathManager.remove("file://sub/b.txt")
    PathManager.removedirs("file://sub")
    assert not (target / "sub").exists()


def test_tutorial_dataset_prefixes_longest_wins(tmp_path):
    for name in ("MNIST", "CIFAR100", "ImageNet", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README").write_text(name)
    PathManager.register(RedirectPathHandler("dataset://", str(tmp_path / "other") + "/"))
    PathManager.register(RedirectPathHandler("dataset://MNIST/", str(tmp_path / "MNIST") + "/"))
    PathManager.register(
        RedirectPathHandler("dataset://CIFAR100/", str(tmp_path / "CIFAR100") + "/")
    )
    PathManager.register(
        RedirectPathHandler("dataset://ImageNet/", str(tmp_path / "ImageNet") + "/")
    )

    for name in ("MNIST", "CIFAR100", "ImageNet"):
        with PathManager.open(f"dataset://{name}/README") as f:
            assert f.read() == name
    with PathManager.open("dataset://README") as f:
        assert f.read() == "other"


def test_redirect_maps_the_prefix_only():
    handler = RedirectPathHandler("easycore://", "http://xxx.com/download/")
    assert handler.get_supported_prefixes() == ["easycore://"]
    assert handler.redirect("easycore://yyy/zzz.txt") == "http://xxx.com/download/yyy/zzz.txt"
    with pytest.raises(ValueError, match="does not start with"):
        handler.redirect("other://yyy")


def test_redirect_chains_and_loops(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    PathManager.register(RedirectPathHandler("a://", str(tmp_path) + "/"))
    PathManager.register(RedirectPathHandler("b://", "a://"))
    assert PathManager.isfile("b://f.txt")
    with pytest.raises(ValueError, match="loop"):
        RedirectPathHandler("c://", "c://x/")


def test_redirect_errors_come_from_the_target(tmp_path):
    PathManager.register(RedirectPathHandler("d://", str(tmp_path) + "/"))
    with pytest.raises(FileNotFoundError) as info:
        PathManager.open("d://missing.txt")
    assert info.value.filename == str(tmp_path / "missing.txt")
