"""The cache never escapes its directory, and distinct URLs get distinct entries."""

import os

import pytest

from easycore.common.path import PathManager
from easycore.common.path.cache import check_inside, url_to_cache_path

HOSTILE_PATHS = [
    "/../../../../etc/passwd",
    "/a/b/../../../../etc/passwd",
    "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
    "/..%2f..%2f..%2fetc%2fpasswd",
    "/..%5c..%5c..%5cwindows%5cwin.ini",
    "/..\\..\\..\\etc\\passwd",
    "//etc/passwd",
    "///etc/passwd",
    "/%2Fetc%2Fpasswd",
    "/C:%5CWindows%5Csystem.ini",
    "/./././x",
    "/.",
    "/..",
    "/%2e",
    "/%2e%2e",
    "/...",
    "/x%00.txt",
    "/%0a%0d",
    "/~/.ssh/id_rsa",
    "/a?../../../../etc/passwd",
    "/a?x=/../../etc/passwd",
    "/%252e%252e/%252e%252e/etc",
    "/" + "a" * 600 + ".txt",
    "/" + "%2e" * 300,
    "/\u202egnp.exe",
    "/@index",
    "/file.lock",
    "/",
    "",
]

HOSTILE_HOSTS = [
    "http://127.0.0.1:{port}",
    "http://user:pass@127.0.0.1:{port}",
    "http://..:{port}",
    "http://%2e%2e:{port}",
    "http://[::1]:{port}",
    "http://a_b:{port}",
]


def assert_strictly_inside(root, path):
    root = os.path.realpath(root)
    real = os.path.realpath(path)
    assert real != root and os.path.commonpath([root, real]) == root, (path, real)


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_every_crafted_url_maps_inside_the_cache(tmp_path, host, path):
    cache = str(tmp_path / "cache" / "http")
    local = url_to_cache_path(cache, host.format(port=8000) + path)
    assert_strictly_inside(cache, local)
    parts = os.path.relpath(local, cache).split(os.sep)
    assert all(part not in ("", ".", "..") and "\\" not in part for part in parts)
    assert all(len(part.encode()) <= 255 for part in parts)


def test_downloading_crafted_urls_writes_only_inside_the_cache(
    server, http_handler, tmp_path, cache_dir, files_under
):
    outside_before = files_under(str(tmp_path))
    for path in HOSTILE_PATHS:
        url = server.url(path)
        try:
            local = PathManager.get_local_path(url)
        except (ValueError, OSError) as exc:
            # Refused clearly is fine too: "/%2e%2e" cannot be a file once
            # "/%2e%2e/%2e%2e/etc/passwd" made it a directory.
            assert url in str(exc)
            continue
        assert_strictly_inside(cache_dir, local)
        with open(local, "rb") as f:
            assert f.read().startswith(b"content of /")
    outside_after = [f for f in files_under(str(tmp_path)) if not f.startswith("cache" + os.sep)]
    assert outside_after == [f for f in outside_before if not f.startswith("cache" + os.sep)]


def test_distinct_urls_get_distinct_entries(tmp_path):
    cache = str(tmp_path)
    urls = [
        "http://h/data.bin",
        "http://h/data.bin?v=1",
        "http://h/data.bin?v=2",
        "http://h/data.bin?v=1&w=2",
        "http://h/data.bin?w=2&v=1",
        "http://h/data.bin@0123456789ab",
        "http://h/data%40x.bin",
        "http://h/data@x.bin",
        "http://h:81/data.bin",
        "http://h_81/data.bin",
        "http://h/data.bin/",
        "http://h/data.bin.lock",
        "http://h/@index",
        "http://h/",
        "http://h/%2e%2e",
        "http://h/.%2e",
        "http://h/a%2Fb",
        "http://h/a/b",
    ]
    mapped = [url_to_cache_path(cache, url) for url in urls]
    # %2e is '.', an unreserved character: both are the segment '..', which RFC 3986
    # removes, leaving "/". Everything else is distinct, %40 and @ included (a reserved
    # character and its escape differ).
    assert mapped[13] == mapped[14] == mapped[15]
    distinct = mapped[:14] + mapped[16:]
    assert len(set(distinct)) == len(distinct), distinct


def test_equivalent_spellings_share_an_entry(tmp_path):
    cache = str(tmp_path)
    same = [
        "http://example.com/a/b.txt",
        "http://EXAMPLE.com/a/b.txt",
        "http://example.com:80/a/b.txt",
        "http://example.com/a/./b.txt",
        "http://example.com/a/c/../b.txt",
        "http://example.com/%61/b.txt",
        "http://example.com/%61/b%2etxt",
        "http://example.com/a/b.txt?",  # an empty query is no query
        "http://example.com/a/b.txt#fragment",
        "http://:@example.com/a/b.txt",  # empty credentials: none are sent
    ]
    assert len({url_to_cache_path(cache, url) for url in same}) == 1
    assert url_to_cache_path(cache, same[0]) == os.path.join(cache, "example.com", "a@", "b.txt")


def test_layout_is_readable(tmp_path):
    cache = str(tmp_path)
    local = url_to_cache_path(cache, "https://example.com:8443/models/resnet%2050.pth?v=3")
    rel = os.path.relpath(local, cache).split(os.sep)
    assert rel[:2] == ["example.com_8443", "models@"]
    assert rel[2].startswith("resnet%2050@") and rel[2].endswith(".pth")


def test_urls_without_a_host_are_refused(tmp_path):
    for url in ("http:///etc/passwd", "http://:80/x", "http:etc/passwd"):
        with pytest.raises(ValueError, match="no host"):
            url_to_cache_path(str(tmp_path), url)
    with pytest.raises(ValueError, match=r"(?i)port"):
        url_to_cache_path(str(tmp_path), "http://h:99999/x")


def test_symlink_escaping_the_cache_is_refused(tmp_path, server, http_handler, cache_dir, uid):
    outside = tmp_path / "outside"
    outside.mkdir()
    host_dir = os.path.join(cache_dir, "http", f"127.0.0.1_{server.port}")
    os.makedirs(host_dir)
    os.symlink(outside, os.path.join(host_dir, uid + "@"))
    with pytest.raises(ValueError, match="outside"):
        PathManager.get_local_path(server.url(f"/{uid}/evil.txt"))
    assert os.listdir(outside) == []
    with pytest.raises(ValueError):
        check_inside(cache_dir, os.path.join(host_dir, uid + "@", "evil.txt"), "u")


def test_a_path_deeper_than_the_os_allows_gets_a_shorter_name(
    server, http_handler, uid, cache_dir, expected_body
):
    path = f"/deep/{uid}/" + "/".join(f"{i:03d}" + "d" * 150 for i in range(40)) + "/f.bin"
    local = PathManager.get_local_path(server.url(path))
    assert_strictly_inside(cache_dir, local)
    assert len(os.path.relpath(local, cache_dir).encode()) < 1024
    assert local.endswith("f.bin")
    with open(local, "rb") as f:
        assert f.read() == expected_body(path)
    other = path.replace("039", "038")  # a sibling is another entry
    assert PathManager.get_local_path(server.url(other)) != local


def test_a_cache_directory_too_deep_for_the_os_is_a_clear_error(
    server, http_handler, uid, tmp_path, monkeypatch
):
    monkeypatch.setenv("EASYCORE_CACHE", str(tmp_path) + ("/" + "d" * 200) * 25)
    url = server.url(f"/toolong/{uid}.bin")
    with pytest.raises(OSError) as info:
        PathManager.get_local_path(url)
    assert url in str(info.value) and "longer than the file system allows" in str(info.value)
    assert server.count(f"/toolong/{uid}.bin") == 0
