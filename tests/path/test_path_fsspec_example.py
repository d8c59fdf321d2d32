"""The object-storage tutorial that ``scripts/demo`` runs, run as a user would (a
subprocess): moto's S3 on 127.0.0.1, a runner whose workers open their own objects."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
# The tutorial downloads in a runner: it needs easycore-parallel, which easycore-path
# alone (scripts/test-dist path) does not install.
pytest.importorskip("easycore.common.parallel")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.timeout(240)
def test_object_storage_tutorial(tmp_path):
    env = dict(os.environ, EASYCORE_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name, None)  # the tutorial sets its own
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "45_object_storage.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "after a crash mid-write, exists(model.bin)   False" in out
    assert "cannot open s3://no-such-bucket/x.bin" in out
    assert "after the object changed: a new copy         True" in out
    assert "sum of pixels over 20 objects                3648 (expected 3648)" in out
    assert "every item seen once                         True" in out
    assert "demo-secret" not in out + proc.stderr
