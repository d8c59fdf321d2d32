"""easycore's warning that Ray listens on every interface points at the user's line.

The suite's Ray binds loopback only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in
conftest.py), so nothing warns there; these tests call the warning with the ports
it would report and check where it points. A pool reached it through a deeper
call chain than a runner, and the fixed ``stacklevel=4`` pointed into easycore's
engine.py.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("ray")

from easycore.common.parallel.backends import ray_session as ray_backend

pytestmark = pytest.mark.ray


@pytest.fixture
def exposed(monkeypatch):
    monkeypatch.setattr(ray_backend, "exposed_ports", lambda root_pid=None: [6379])


def test_called_from_user_code_it_points_there(exposed):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ray_backend._warn_if_exposed()
    (warning,) = [w for w in caught if "every network interface" in str(w.message)]
    assert warning.filename == __file__, f"points at {warning.filename}:{warning.lineno}"


def test_through_easycore_frames_of_any_depth_it_points_past_them(exposed):
    # easycore's frames between the user's line and the warning (pool, engine,
    # back-end, session: more for a pool than for a runner) are all skipped: a
    # chain of functions compiled under easycore's file name stands for them.
    chain = compile(
        "def inner():\n    warn()\n"
        "def middle():\n    inner()\n"
        "def outer():\n    middle()\n",
        ray_backend.__file__,
        "exec",
    )
    namespace = {"warn": ray_backend._warn_if_exposed}
    exec(chain, namespace)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace["outer"]()  # the user's line
    (warning,) = [w for w in caught if "every network interface" in str(w.message)]
    assert warning.filename == __file__, f"points at {warning.filename}:{warning.lineno}"
