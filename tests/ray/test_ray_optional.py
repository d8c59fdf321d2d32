"""Ray is optional: importing the runners never imports it, and asking for
``backend="ray"`` without it says which extra to install. Run in fresh
interpreters, where ``ray`` is blocked or simply never imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Optional

RUN = dict(capture_output=True, text=True, timeout=60)
PYTHONPATH = os.environ.get("PYTHONPATH")


def _python(code: str, *, path: Optional[str] = None) -> subprocess.CompletedProcess:
    env = None
    if path is not None:  # first on the path
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (path, PYTHONPATH))))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, **RUN)


def test_importing_the_runners_never_imports_ray():
    proc = _python(
        """
        import sys
        import easycore.common.parallel as parallel
        from easycore.common.parallel import UnorderedRunner

        assert "ray" not in sys.modules, "import"
        with UnorderedRunner(devices=1) as runner:  # the process back-end
            assert runner(range(3)) is None
        assert "ray" not in sys.modules, "process back-end"
        import easycore.common.parallel.backends.ray  # the module itself is light too
        assert "ray" not in sys.modules, "ray_backend"
        assert parallel.BaseRunner.backends["ray"] == (
            "easycore.common.parallel.backends.ray:RayBackend"
        )
        """
    )
    assert proc.returncode == 0, proc.stderr


BLOCKED = """
    import sys
    from easycore.common.parallel import UnorderedRunner

    try:
        UnorderedRunner(devices=2, backend="ray")
    except ImportError as exc:
        print(exc)
    else:
        sys.exit("no ImportError")
"""


def test_backend_ray_without_ray_names_the_extra(tmp_path):
    # Ray "not installed": a ray.py that fails to import comes first on the path.
    (tmp_path / "ray.py").write_text("raise ImportError('No module named ray')\n")
    proc = _python(BLOCKED, path=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "backend='ray' needs Ray" in proc.stdout
    assert "pip install 'easycore-parallel[ray]'" in proc.stdout
    assert "easycore[ray]" in proc.stdout


def test_backend_ray_with_ray_blocked_in_sys_modules():
    proc = _python('import sys; sys.modules["ray"] = None\n' + textwrap.dedent(BLOCKED))
    assert proc.returncode == 0, proc.stderr
    assert "easycore-parallel[ray]" in proc.stdout
