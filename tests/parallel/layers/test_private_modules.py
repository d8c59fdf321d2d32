"""easycore-parallel without CPython's private modules (issue 32, item 10).

Where the standard library has no public API, easycore uses CPython's private modules
(``_posixshmem`` for ``shm_open``, ``_signal`` for handlers without the enum wrapping,
``multiprocessing.forkserver``'s server object) and falls back to something public where
one is missing, as on another interpreter or a future CPython. Each case runs in a fresh
interpreter with the private part made unimportable (``sys.modules[name] = None``)
before easycore is imported. (``_thread`` needs no fallback: it is documented, and
``threading`` itself cannot import without it.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _parallel_support import shm_segments

TIMEOUT = 120
HERE = Path(__file__).resolve().parents[1]  # tests/parallel: its helper modules

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the fallback for _posixshmem is /dev/shm's files")


def run_without(code: str, *hidden: str) -> dict:
    """Run ``code`` in a fresh interpreter where ``hidden`` modules cannot be imported;
    return the JSON it prints last."""
    hide = "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)
    done = subprocess.run([sys.executable, "-c", f"import sys\n{hide}{code}"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


# Large arrays through a fork runner's shared-memory transport; each worker says where
# its input lives (a /dev/shm segment of the runner's prefix: nothing was copied).
SHM_RUN = """
import json, os
import numpy as np
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _parallel_helpers import _Collect
from processes import mapping_of
from easycore.common.parallel import OrderedRunner
from easycore.common.parallel.transport import shm

class Locates(_Collect, OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        i, arr = data
        return [i, bool((arr == i).all()), mapping_of(arr.__array_interface__["data"][0])]

if __name__ == "__main__":
    report = {"shm_open": shm._posixshmem.__name__, "tracker": shm.resource_tracker.__name__,
              "available": shm.AVAILABLE}
    with Locates(2, start_method="fork") as runner:
        prefix = "/dev/shm/" + runner._engine.backend.transport.prefix
        out = runner((i, np.full(1 << 20, float(i))) for i in range(6))
    report["ids"] = [i for i, _, _ in out]
    report["intact"] = all(ok for _, ok, _ in out)
    report["in_shm"] = all(path.startswith(prefix) for _, _, path in out)
    report["left"] = sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix[9:]))
    # the primitives themselves: exclusive create, open, release
    name = "/" + shm.make_prefix("ect") + "x"
    mm = shm.create(name, 4096)
    mm[:5] = b"hello"
    try:
        shm.create(name, 4096)
    except FileExistsError:
        report["exclusive"] = True
    report["read"] = bytes(shm.open_existing(name, 4096)[:5]).decode()
    mm.close()
    shm.release(name)
    report["exists_after"] = shm.exists(name)
    try:
        shm.open_existing(name, 4096)
    except shm.SegmentVanished as exc:
        report["vanished"] = str(exc)
    print(json.dumps(report))
"""


def test_shared_memory_without_posixshmem_and_the_resource_tracker():
    pytest.importorskip("numpy")
    # resource_tracker imports _posixshmem: both fall back at once, as on an
    # interpreter that has neither.
    report = run_without(SHM_RUN.replace("HERE", repr(str(HERE))), "_posixshmem")
    assert report["shm_open"] == "_DevShmFiles"
    assert report["tracker"] == "_Untracked"
    assert report["available"] is True
    assert report["ids"] == list(range(6)) and report["intact"]
    assert report["in_shm"], "the arrays did not travel through shared memory"
    assert report["left"] == []
    assert report["exclusive"] and report["read"] == "hello"
    assert report["exists_after"] is False
    assert "vanished before process" in report["vanished"]
    assert shm_segments() == []


def test_the_files_of_dev_shm_are_what_posixshmem_opens():
    # The fallback and CPython's module see the same segments, both ways.
    code = """
import json, os, _posixshmem
from easycore.common.parallel.transport import shm
files = shm._DevShmFiles
name = "/" + shm.make_prefix("ect") + "y"
fd = files.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
os.write(fd, b"abc"); os.close(fd)
fd = _posixshmem.shm_open(name, os.O_RDONLY, mode=0o600)
seen = os.read(fd, 3).decode(); os.close(fd)
mode = oct(os.stat("/dev/shm" + name).st_mode & 0o777)
_posixshmem.shm_unlink(name)
try:
    files.shm_unlink(name)
except FileNotFoundError:
    gone = True
try:
    files.shm_open("/a/b", os.O_RDONLY)
except OSError as exc:
    bad = exc.errno
print(json.dumps({"seen": seen, "mode": mode, "gone": gone, "bad": bad}))
"""
    import errno

    report = run_without(code)
    assert report == {"seen": "abc", "mode": "0o600", "gone": True, "bad": errno.EINVAL}


def test_ctrl_c_is_held_without_the_private_signal_module():
    code = """
import json, os, signal
sys.modules["_signal"] = None  # after signal itself, which is built on it
from easycore.common.parallel._os import interrupts
report = {"raw_is_public": interrupts._raw is signal}
steps = []
try:
    with interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs between bytecodes
            pass
        steps.append("finished the block")
except KeyboardInterrupt:
    steps.append("KeyboardInterrupt after it")
report["steps"] = steps
report["handler_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
print(json.dumps(report))
"""
    report = run_without(code)
    assert report == {
        "raw_is_public": True,
        "steps": ["finished the block", "KeyboardInterrupt after it"],
        "handler_back": True,
    }


def test_detaching_from_a_fork_server_without_its_private_fd_does_nothing():
    # A CPython whose fork server keeps its "alive" pipe elsewhere: nothing to close,
    # no error (the worker's watchdog still notices its caller's death).
    code = """
import json
from multiprocessing import forkserver
from easycore.common.parallel._os import lifeline
forkserver._forkserver = object()
lifeline.detach_from_forkserver()
del forkserver._forkserver
lifeline.detach_from_forkserver()
print(json.dumps({"ok": True}))
"""
    assert run_without(code) == {"ok": True}


def test_an_executors_task_error_keeps_its_traceback_without_the_private_cause_class():
    # The executor raises a task's error from concurrent.futures' own (private)
    # _RemoteTraceback, so that code matching the stdlib's cause keeps working; a
    # standard library without that name gets a cause of the same shape.
    code = """
import json
from concurrent.futures import process
stdlib_cause = process._RemoteTraceback
del process._RemoteTraceback
from easycore.common.parallel import Executor
with Executor(1, start_method="fork") as executor:
    try:
        executor.submit(int, "not a number").result(timeout=60)
    except ValueError as err:
        cause = err.__cause__
print(json.dumps({"stdlib": isinstance(cause, stdlib_cause), "tb": cause.tb, "str": str(cause),
                  "text": cause.text}))
"""
    report = run_without(code)
    assert report["stdlib"] is False
    assert "invalid literal for int()" in report["tb"]
    assert report["str"] == report["tb"] == report["text"]


# A fork pool's workers arm their parent-death signal with libc's prctl, looked up
# through ``_ctypes`` (the C half of ctypes: the Python half costs ~1 ms more to
# import); each case says whether the lookup found it and what was imported.
PRCTL_RUN = """
import json
from easycore.common.parallel import Pool
from easycore.common.parallel._os import lifeline

def armed_in_worker():
    return lifeline.arm_parent_death_signal()

if __name__ == "__main__":
    with Pool(1, start_method="fork") as pool:
        armed = pool.apply(armed_in_worker)
    print(json.dumps({"found": lifeline._prctl() is not None, "armed": armed,
                      "ctypes": "ctypes" in sys.modules}))
"""


def test_the_parent_death_signal_is_armed_without_importing_ctypes():
    assert run_without(PRCTL_RUN) == {"found": True, "armed": True, "ctypes": False}


def test_a_ctypes_without_the_parts_used_falls_back_to_ctypes():
    # An interpreter whose _ctypes lacks dlsym: the public ctypes.CDLL finds prctl.
    code = "import _ctypes\ndel _ctypes.dlsym\n" + PRCTL_RUN
    assert run_without(code) == {"found": True, "armed": True, "ctypes": True}


def test_a_pool_works_without_ctypes_at_all():
    # No _ctypes (nor ctypes, built on it): no signal to arm; the workers' watchdog
    # thread notices the caller's death instead, and the pool still works.
    assert run_without(PRCTL_RUN, "_ctypes") == {"found": False, "armed": False,
                                                  "ctypes": False}
