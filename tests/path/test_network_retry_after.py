"""Retries honour Retry-After and add jitter, through urllib3's Retry on the session's
adapter; the download's deadline still bounds every pause (issue 22, "where a library
already does it")."""

import logging
import re

import pytest

from easycore.common.network import DownloadError, download_file
from easycore.common.path import HTTPURLHandler, PathManager


def _pauses(caplog):
    found = []
    for record in caplog.records:
        if record.name == "easycore.common.network":
            found.append(float(re.search(r"retrying in ([0-9.e+-]+) s", record.getMessage())[1]))
    return found


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(server, uid, tmp_path, caplog, expected_body, status):
    path = f"/retryafter/{status}/1/1/{uid}.bin"
    with caplog.at_level(logging.WARNING, logger="easycore.common.network"):
        local = download_file(server.url(path), str(tmp_path), progress=False, backoff=0.01)
    with open(local, "rb") as f:
        assert f.read() == expected_body(path)
    assert server.count(path) == 2
    assert _pauses(caplog) == [1.0]  # what the server asked, not the 0.01 s backoff


def test_a_retry_after_beyond_the_deadline_ends_at_the_deadline(server, uid, caplog):
    PathManager.register(HTTPURLHandler(progress=False, backoff=0.01, deadline=0.5), override=True)
    path = f"/retryafter/503/3600/5/{uid}.bin"
    with caplog.at_level(logging.WARNING, logger="easycore.common.network"):  # noqa: SIM117 (as one, the line would pass 100 columns)
        with pytest.raises(DownloadError) as info:
            PathManager.get_local_path(server.url(path))
    assert "deadline of 0.5 s" in str(info.value) and server.url(path) in str(info.value)
    assert all(pause <= 0.5 for pause in _pauses(caplog))  # never the hour it asked for


@pytest.mark.parametrize("status", [429, 503, 500, 408])
def test_transient_answers_without_retry_after_are_retried_with_backoff(
    server, uid, tmp_path, status
):
    path = f"/retryafter/{status}/-/2/{uid}.bin"
    download_file(server.url(path), str(tmp_path), progress=False, backoff=0.01)
    assert server.count(path) == 3


def test_pauses_double_and_carry_jitter(server, uid, tmp_path, caplog):
    path = f"/flaky/5/{uid}.txt"
    with caplog.at_level(logging.WARNING, logger="easycore.common.network"):
        download_file(
            server.url(path), str(tmp_path), progress=False, max_attempts=6, backoff=0.001
        )
    pauses = _pauses(caplog)
    bases = [0.001 * 2**k for k in range(5)]
    assert len(pauses) == 5
    assert all(b <= p <= 1.5 * b * 1.001 for b, p in zip(bases, pauses))  # up to +50%
    assert pauses != bases  # not the bare doubling: clients that failed together spread out


def test_attempts_are_shared_between_urllib3_and_cut_bodies(server, uid, tmp_path):
    # every answer is transient: urllib3's status retries and cut-body retries together
    # still make max_attempts requests in all
    path = f"/retryafter/503/-/1/truncated/{uid}.bin"  # 503, then bodies cut short
    with pytest.raises(DownloadError, match="gave up after 3 attempts"):
        download_file(server.url(path), str(tmp_path), progress=False, backoff=0.01)
    assert server.count(path) == 3


def test_no_retry_when_one_attempt_is_asked(server, uid, tmp_path):
    path = f"/retryafter/503/1/5/{uid}.bin"
    with pytest.raises(DownloadError) as info:
        download_file(server.url(path), str(tmp_path), progress=False, max_attempts=1)
    assert info.value.status == 503 and server.count(path) == 1
