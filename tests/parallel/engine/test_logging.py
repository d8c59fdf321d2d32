"""easycore-parallel's logger (issue 36 item 6): ``logging.getLogger("easycore.parallel")``.

A worker replaced (it died, it overran its ``task_timeout``, it ran its
``maxtasksperchild``) and the fall back from shared memory to the pipe are
logged; the logger has a ``NullHandler`` (nothing printed unless the
application configures logging). ``caplog`` captures through the root logger,
where the records propagate; no handler or level is left behind.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pytest
from _parallel_support import METHODS

from easycore.common.parallel import Pool, SharedMemoryTransport, TaskTimeoutError, WorkerDiedError
from easycore.common.parallel.logs import LOGGER_NAME, logger
from easycore.common.parallel.transport import shm

pytestmark = pytest.mark.timeout(180)

WAIT = 60


def records(caplog, level=logging.WARNING):
    return [r for r in caplog.records if r.name == LOGGER_NAME and r.levelno == level]


def test_the_logger_is_easycore_parallel_with_a_null_handler():
    assert logger is logging.getLogger("easycore.parallel")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.propagate and logger.level == logging.NOTSET  # the application decides


@pytest.mark.parametrize("method", METHODS)
def test_a_dead_worker_is_logged_with_its_replacement(method, caplog, no_leaks):
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    with Pool(2, start_method=method) as pool:
        with pytest.raises(WorkerDiedError) as info:
            pool.apply(os._exit, (3,))
        assert pool.apply(abs, (-1,)) == 1
    (record,) = records(caplog)
    message = record.getMessage()
    assert f"pid {info.value.pid}" in message and "died (exit code 3)" in message
    assert "starting a replacement" in message


def test_a_timeout_is_logged(caplog, no_leaks):
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    with Pool(1) as pool, pytest.raises(TaskTimeoutError) as info:
        pool.apply(time.sleep, (60,), task_timeout=0.5)
    (record,) = records(caplog)
    assert f"pid {info.value.pid}" in record.getMessage()
    assert "ran longer than its task_timeout" in record.getMessage()


def test_a_planned_replacement_is_info(caplog, no_leaks):
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    with Pool(1, maxtasksperchild=1) as pool:
        pool.map(abs, range(3), chunksize=1)
    infos = records(caplog, logging.INFO)
    assert infos and all("maxtasksperchild" in r.getMessage() for r in infos)
    assert records(caplog) == []  # nothing went wrong: no warning


def test_the_fall_back_to_the_pipe_is_logged_once(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    transport = SharedMemoryTransport()

    def full(nbytes):
        raise shm.SharedMemoryFull(28, "no room")

    with pytest.warns(ResourceWarning):
        transport.pack(np.ones(1 << 15), full)
    transport.pack(np.ones(1 << 15), full)
    (record,) = records(caplog)
    assert "/dev/shm is full" in record.getMessage() and "pipe" in record.getMessage()


def test_nothing_is_logged_when_all_goes_well(caplog, no_leaks):
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    with Pool(2) as pool:
        assert pool.map(abs, range(-3, 3)) == [3, 2, 1, 0, 1, 2]
    assert [r for r in caplog.records if r.name == LOGGER_NAME] == []


def test_a_worker_over_its_memory_limit_is_logged_with_why_it_retired(caplog, no_leaks):
    # The memory limit logs on the same logger, and the retirement says why.
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    with Pool(1, max_worker_memory=1) as pool:
        assert pool.map(abs, [-1, -2], 1) == [1, 2]
    warned = [r.getMessage() for r in records(caplog)]
    assert any("max_worker_memory" in text and "worker 0" in text for text in warned), warned
    retired = [r.getMessage() for r in records(caplog, logging.INFO)]
    assert any("retired (max_worker_memory)" in text for text in retired), retired
