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


# --- prefixes match whole path components; '..' stays inside; loops are errors ---


def test_a_prefix_matches_whole_components(tmp_path):
    for name in ("a", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "other" / "ab").mkdir()
    (tmp_path / "other" / "ab" / "train.npz").write_text("ab's")
    (tmp_path / "a" / "train.npz").write_text("a's")
    PathManager.register(RedirectPathHandler("dataset://", str(tmp_path / "other") + "/"))
    PathManager.register(RedirectPathHandler("dataset://a", str(tmp_path / "a")))

    with PathManager.open("dataset://a/train.npz") as f:
        assert f.read() == "a's"
    with PathManager.open("dataset://ab/train.npz") as f:
        assert f.read() == "ab's"  # not <root>/a + "b/train.npz"
    assert PathManager.isdir("dataset://a")
    with pytest.raises(ValueError, match="does not start with"):
        RedirectPathHandler("dataset://a", "/x").redirect("dataset://ab/train.npz")


def test_without_a_shorter_prefix_a_near_miss_has_no_handler(tmp_path):
    PathManager.register(RedirectPathHandler("dataset://a", str(tmp_path)))
    with pytest.raises(ValueError, match="no PathHandler"):
        PathManager.exists("dataset://ab/train.npz")


def test_dot_dot_cannot_leave_the_root(tmp_path):
    root = tmp_path / "MNIST"
    root.mkdir()
    (root / "sub").mkdir()
    (root / "train.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    PathManager.register(RedirectPathHandler("dataset://MNIST/", str(root) + "/"))

    with PathManager.open("dataset://MNIST/sub/../train.txt") as f:  # stays inside: fine
        assert f.read() == "inside"
    for escape in (
        "dataset://MNIST/../secret.txt",
        "dataset://MNIST/sub/../../secret.txt",
        "dataset://MNIST/./../secret.txt",
    ):
        with pytest.raises(ValueError, match=r"'\.\.' leaves") as info:
            PathManager.open(escape)
        assert escape in str(info.value)
    # A literal "%2e%2e" is a file name on a local disk...
    assert not PathManager.exists("dataset://MNIST/%2e%2e/secret.txt")


def test_dot_dot_cannot_leave_a_remote_root(server, http_handler, uid):
    PathManager.register(RedirectPathHandler("easycore://", server.url(f"/download/{uid}/")))
    # ...but a server reads it as '..'
    escapes = (
        "easycore://../x.txt",
        "easycore://%2e%2e/x.txt",
        "easycore://a/%2E./../x",
        "easycore://..%5Cx.txt",
        "easycore://a\\..\\..\\x.txt",
    )
    for escape in escapes:
        with pytest.raises(ValueError, match="leaves"):
            PathManager.get_local_path(escape)
    assert server.count("/download/x.txt") == 0
    # a '..' in the query string is no part of the path; one that stays inside is fine
    assert PathManager.exists("easycore://f.txt?up=../../..")
    assert PathManager.exists("easycore://a/../f.txt")


def test_redirects_to_each_other_are_a_clear_error(tmp_path):
    PathManager.register(RedirectPathHandler("a://", "b://"))
    PathManager.register(RedirectPathHandler("b://", "a://"))
    with pytest.raises(ValueError, match="redirect loop") as info:
        PathManager.exists("a://f.txt")
    assert "a://f.txt -> b://f.txt -> a://f.txt" in str(info.value)
    with pytest.raises(ValueError, match="redirect loop"):
        PathManager.open("b://f.txt")


def test_a_chain_that_grows_forever_is_a_clear_error():
    PathManager.register(RedirectPathHandler("x://", "y://a/"))
    PathManager.register(RedirectPathHandler("y://", "x://b/"))
    with pytest.raises(ValueError, match=r"redirect loop.*after 32 redirects"):
        PathManager.isfile("x://f")


def test_a_failed_loop_leaves_no_state_behind(tmp_path):
    PathManager.register(RedirectPathHandler("a://", "b://"))
    PathManager.register(RedirectPathHandler("b://", "a://"))
    with pytest.raises(ValueError):
        PathManager.exists("a://f")
    PathManager.register(RedirectPathHandler("b://", str(tmp_path) + "/"), override=True)
    (tmp_path / "f").write_text("x")
    assert PathManager.isfile("a://f")


# --- schemes ignore case ---


def test_schemes_ignore_case(server, http_handler, uid, tmp_path):
    lower = PathManager.get_local_path(server.url(f"/caps/{uid}.txt"))
    upper = PathManager.get_local_path(server.url(f"/caps/{uid}.txt").replace("http", "HTTP"))
    assert upper == lower and server.count(f"/caps/{uid}.txt") == 1
    assert not PathManager.isdir("Https://example.com/x")  # found the HTTP handler

    (tmp_path / "f.txt").write_text("x")
    PathManager.register(RedirectPathHandler("Dataset://", str(tmp_path) + "/"))
    assert PathManager.isfile("DATASET://f.txt") and PathManager.isfile("dataset://f.txt")
    with pytest.raises(ValueError, match="already registered"):
        PathManager.register(RedirectPathHandler("dataset://", "/elsewhere/"))
