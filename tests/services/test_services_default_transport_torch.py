"""Tensors through shared memory with the default handle (issue 24, item 2):
no ``with_transport(TensorTransport)`` needed once torch is imported."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from _services_support import Tool  # noqa: E402

from easycore.common.parallel import PickleTransport  # noqa: E402
from easycore.common.parallel.services import Service  # noqa: E402
from easycore.torch.parallel import TensorTransport  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _transport_of(handle):
    return type(handle._state.channel._reply)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_default_handle_moves_tensors_through_shared_memory(no_leaks, method):
    state = {"w": torch.randn(1 << 20), "b": torch.arange(10.0)}
    with Service.start(Tool, backend_options={"start_method": method}) as h:
        (back,), _ = h.call("echo", state)
        assert _transport_of(h) is TensorTransport
        assert torch.equal(back["w"], state["w"]) and torch.equal(back["b"], state["b"])
        clone = pickle.loads(pickle.dumps(h))  # a client's default handle too
        assert clone.call("pid") == h.pid and _transport_of(clone) is TensorTransport
        clone.close()
        no_leaks.track(h.pid)


def test_an_explicit_transport_is_kept(no_leaks):
    with Service.start(Tool) as h:
        plain = h.with_transport(PickleTransport)
        assert plain.call("echo", torch.ones(3))[0][0].sum() == 3
        assert _transport_of(plain) is PickleTransport
        copy = pickle.loads(pickle.dumps(plain))  # the choice travels with the handle
        assert copy.call("pid") == h.pid and _transport_of(copy) is PickleTransport
        copy.close()
        plain.close()


def test_without_torch_the_plain_transport(services_dir):
    """A process that never imported torch does not import it for a service."""
    code = textwrap.dedent("""
        import sys
        from easycore.common.parallel import SharedMemoryTransport
        from easycore.common.parallel.services import Service
        from _services_support import Tool
        with Service.start(Tool) as h:
            assert h.call("echo", 1) == ((1,), {})
            assert type(h._state.channel._reply) is SharedMemoryTransport
        assert "torch" not in sys.modules, "torch was imported"
        print("ok")
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
