"""What ends up on disk is what the server sent, complete, and where it was asked for."""

import gzip
import os

import pytest

from easycore.common.network import DownloadError, download_file
from easycore.common.path import PathManager


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- Content-Encoding: stored as sent, never expanded ---


def test_a_gzipped_answer_is_stored_gzipped(server, http_handler, uid):
    # The server compresses although we asked for identity (as misconfigured servers do
    # for .tar.gz): the cache holds its bytes, as `curl -O` would.
    size = 1 << 20
    local = PathManager.get_local_path(server.url(f"/gzip/{size}/{uid}/data.tar.gz"))
    data = read(local)
    assert data[:2] == b"\x1f\x8b"  # still gzip
    assert len(data) < size // 100  # not expanded onto the disk
    assert gzip.decompress(data) == bytes(size)


def test_download_file_stores_gzip_as_sent(server, uid, tmp_path):
    path = download_file(server.url(f"/gzip/4096/{uid}/a.tar.gz"), str(tmp_path), progress=False)
    assert gzip.decompress(read(path)) == bytes(4096)


# --- a body cut short: detected where HTTP makes it detectable ---


def test_a_complete_chunked_body_is_accepted(server, http_handler, uid, expected_body):
    path = f"/chunked/{uid}.txt"
    assert read(PathManager.get_local_path(server.url(path))) == expected_body(path)


def test_a_chunked_body_without_its_last_chunk_is_refused(
    server, http_handler, uid, cache_dir, files_under
):
    url = server.url(f"/chunkcut/{uid}.txt")
    with pytest.raises(DownloadError) as info:
        PathManager.get_local_path(url)
    assert url in str(info.value) and "connection closed" in str(info.value)
    assert all(name.endswith(".lock") for name in files_under(cache_dir))


def test_a_body_ended_by_closing_is_taken_as_complete(server, http_handler, uid, expected_body):
    # No Content-Length, no chunked coding: the end of the connection is the end of the
    # body, and a cut cannot be told from the end (documented in docs/safety.md).
    path = f"/close/{uid}.txt"
    assert read(PathManager.get_local_path(server.url(path))) == expected_body(path)


# --- download_file: the target name must be free or a regular file ---


def test_a_directory_with_the_name_is_an_error(server, uid, tmp_path):
    (tmp_path / "mnist.npz").mkdir()
    url = server.url(f"/dl/{uid}/mnist.npz")
    with pytest.raises(IsADirectoryError) as info:
        download_file(url, str(tmp_path), progress=False)
    assert info.value.filename == str(tmp_path / "mnist.npz") and url in str(info.value)
    assert server.count(f"/dl/{uid}/mnist.npz") == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_special_file_with_the_name_is_an_error(server, uid, tmp_path):
    os.mkfifo(tmp_path / "data.bin")
    with pytest.raises(FileExistsError, match="non-regular"):
        download_file(server.url(f"/dl/{uid}/data.bin"), str(tmp_path), progress=False)


def test_a_file_where_the_directory_should_be_is_an_error(server, uid, tmp_path):
    (tmp_path / "data").write_text("a file, not a directory")
    url = server.url(f"/dl/{uid}/x.bin")
    with pytest.raises(NotADirectoryError) as info:
        download_file(url, str(tmp_path / "data"), progress=False)
    assert url in str(info.value)


def test_a_name_too_long_for_the_file_system_is_a_clear_error(server, uid, tmp_path):
    url = server.url(f"/dl/{uid}/x.bin")
    with pytest.raises(OSError) as info:
        download_file(url, str(tmp_path), "n" * 300, progress=False)
    assert url in str(info.value) and "longer than the file system allows" in str(info.value)
