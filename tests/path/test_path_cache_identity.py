"""Every distinct URL is its own cache entry (issue 22, items 9, 12 and 13).

Each case downloads both URLs from a real loopback server, in both orders, and checks
that each cached file holds what the server answered for that very URL.
"""

import os

import pytest

from easycore.common.path import PathManager
from easycore.common.path.cache import url_to_cache_path

# RFC 3986 reserved characters that may appear raw in a path segment: each one and its
# percent-encoding are different URLs.
RESERVED = ";,=!$&'()*:@+"


def _both(server, expected_body, first, second):
    for path in (first, second):
        local = PathManager.get_local_path(server.url(path))
        with open(local, "rb") as f:
            assert f.read() == expected_body(path), (path, local)
    # and both are still served from the cache, each its own
    for path in (first, second):
        with open(PathManager.get_local_path(server.url(path)), "rb") as f:
            assert f.read() == expected_body(path)
        assert server.count(path) == 1


@pytest.mark.parametrize(
    "first, second",
    [
        ("/pa", "/pa/b"),  # a file, then a URL below it
        ("/q/b", "/q"),  # a URL below, then the file
        ("/r/", "/r"),  # a directory's index, then the file
        ("/r2", "/r2/"),
        ("/s/t/u", "/s/t"),
        ("/v/", "/v/w"),
    ],
)
def test_a_url_and_a_url_below_it_are_both_cached(
    server, http_handler, uid, expected_body, first, second
):
    _both(server, expected_body, f"/nest/{uid}{first}", f"/nest/{uid}{second}")


@pytest.mark.parametrize("char", list(RESERVED))
def test_a_reserved_character_and_its_escape_are_distinct_entries(
    server, http_handler, uid, expected_body, char
):
    escaped = f"%{ord(char):02X}"
    _both(server, expected_body, f"/res/{uid}/a{char}b", f"/res/{uid}/a{escaped}b")


def test_an_escaped_percent_is_not_the_escape_it_spells(server, http_handler, uid, expected_body):
    # "%252B" is the text "%2B", not the character "+" nor its escape "%2B"
    _both(server, expected_body, f"/pct/{uid}/a%252Bb", f"/pct/{uid}/a%2Bb")
    _both(server, expected_body, f"/pct/{uid}/c%25", f"/pct/{uid}/c%2525")


@pytest.mark.parametrize(
    "first, second",
    [("/d//e", "/d/e"), ("//e", "/e"), ("/f/", "/f//"), ("/g///h", "/g//h")],
)
def test_empty_segments_are_part_of_the_url(
    server, http_handler, uid, expected_body, first, second
):
    _both(server, expected_body, f"/empty/{uid}{first}", f"/empty/{uid}{second}")


def test_spellings_a_client_may_normalise_share_an_entry(tmp_path):
    cache = str(tmp_path)
    same_groups = [
        ["http://h/aA~-._", "http://h/a%41%7E%2D%2E%5F", "http://h/a%41%7e%2d%2e%5f"],
        ["http://h/a%2Bb", "http://h/a%2bb"],  # hex digits ignore case
        ["http://h/caf%C3%A9", "http://h/café"],  # clients encode non-ASCII anyway
        ["http://h/a%20b", "http://h/a b"],
        ["http://h/x/./y", "http://h/x/z/../y", "http://h/x/%2e/y"],
    ]
    groups = [{url_to_cache_path(cache, url) for url in group} for group in same_groups]
    assert all(len(g) == 1 for g in groups), groups
    assert len(set().union(*groups)) == len(groups)


def test_no_entry_is_a_directory_of_another_entry(tmp_path):
    cache = str(tmp_path)
    urls = ["http://h/a", "http://h/a/", "http://h/a/b", "http://h/a//b", "http://h/a/b/"]
    files = [url_to_cache_path(cache, url) for url in urls]
    assert len(set(files)) == len(files)
    for f in files:
        for g in files:
            assert not g.startswith(f + os.sep), (f, g)
