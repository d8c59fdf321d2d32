"""A Ctrl-C ends a service call's wait, also when the kernel hands it to the
client's reader thread rather than to the waiting main thread (see
``tests/ctrl_c.py``); the handle serves on."""

from __future__ import annotations

import pytest
from _services_support import Tool
from ctrl_c import WAIT, interrupted_elsewhere, needs_python_sigint_handler

from easycore.common.parallel.services import Service

pytestmark = [pytest.mark.timeout(120), needs_python_sigint_handler]

SLACK = 5.0  # "promptly": the held call would have held 60 s


@pytest.mark.parametrize("how", ["call", "call_async"])
def test_a_service_call_ends_when_another_thread_gets_the_ctrl_c(how, tmp_path, no_leaks):
    with Service.start(Tool) as handle:
        if how == "call":
            waited = interrupted_elsewhere(lambda: handle.call("hold", str(tmp_path)), tmp_path)
        else:
            future = handle.call_async("hold", str(tmp_path))
            waited = interrupted_elsewhere(future.result, tmp_path)
            assert future.result(timeout=WAIT) == "opened"
        assert waited < SLACK
        assert handle.call("echo", 1) == ((1,), {})
