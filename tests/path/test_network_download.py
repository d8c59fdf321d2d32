"""easycore.common.network.download_file: the documented call, then its edge cases."""

import os
from pathlib import Path

import pytest

from easycore.common.network import DownloadError, download_file


def test_download_file(server, uid, tmp_path, expected_body, capfd):
    path = download_file(server.url(f"/dl/{uid}/mnist.npz"), str(tmp_path / "data"))
    assert path == str(tmp_path / "data" / "mnist.npz")
    with open(path, "rb") as f:
        assert f.read() == expected_body(f"/dl/{uid}/mnist.npz")
    assert "mnist.npz" in capfd.readouterr().err  # the tqdm bar


def test_an_existing_file_is_not_downloaded_again(server, uid, tmp_path):
    (tmp_path / "mnist.npz").write_text("mine")
    path = download_file(server.url(f"/dl/{uid}/mnist.npz"), str(tmp_path), progress=False)
    assert Path(path).read_text() == "mine"
    assert server.count(f"/dl/{uid}/mnist.npz") == 0
    download_file(server.url(f"/dl/{uid}/other.npz"), str(tmp_path), progress=False)
    download_file(server.url(f"/dl/{uid}/other.npz"), str(tmp_path), progress=False)
    assert server.count(f"/dl/{uid}/other.npz") == 1


def test_filename(server, uid, tmp_path):
    path = download_file(server.url(f"/dl/{uid}/x?id=3"), str(tmp_path), "x3.bin", False)
    assert path == str(tmp_path / "x3.bin") and os.path.isfile(path)
    with pytest.raises(ValueError, match="plain file name"):
        download_file(server.url(f"/dl/{uid}/x"), str(tmp_path), "../x.bin", False)


def test_filename_from_the_url_is_decoded_and_must_be_usable(server, uid, tmp_path):
    path = download_file(server.url(f"/dl/{uid}/my%20file.txt"), str(tmp_path), progress=False)
    assert os.path.basename(path) == "my file.txt"
    for bad in (f"/dl/{uid}/", f"/dl/{uid}/..%2F..%2Fetc", f"/dl/{uid}/%2e%2e"):
        with pytest.raises(ValueError, match="filename="):
            download_file(server.url(bad), str(tmp_path), progress=False)


def test_failures_leave_nothing_but_the_lock(server, uid, tmp_path):
    url = server.url(f"/truncated/{uid}.bin")
    with pytest.raises(DownloadError) as info:
        download_file(url, str(tmp_path), progress=False, max_attempts=2, backoff=0.01)
    assert info.value.url == url and url in str(info.value)
    assert os.listdir(tmp_path) == [f"{uid}.bin@.lock"]

    url = server.url(f"/status/404/{uid}.bin")
    with pytest.raises(DownloadError) as info:
        download_file(url, str(tmp_path), progress=False)
    assert info.value.status == 404
    assert sorted(os.listdir(tmp_path)) == [f"{uid}.bin@.lock"]


def test_download_error_survives_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(DownloadError("http://h/x", "Not Found", 404)))
    assert (err.url, err.status, str(err)) == (
        "http://h/x",
        404,
        "failed to download http://h/x: HTTP 404 Not Found",
    )
