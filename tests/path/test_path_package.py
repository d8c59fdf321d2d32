"""The package itself: light to import, public names, PEP 420 namespace."""

import os
import subprocess
import sys

import easycore.common.network
import easycore.common.path
from easycore.common.path import PathManager


def run_python(code: str, env=None) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_is_light():
    out = run_python(
        "import sys\n"
        "import easycore.common.path\n"
        "from easycore.common.path import PathManager\n"
        "PathManager.exists('/tmp')\n"
        "heavy = ('requests', 'tqdm', 'urllib3', 'filelock', 'logging', 'socket', 'threading')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    assert out.strip() == "[]"


def test_a_cache_hit_imports_nothing_heavy(server, http_handler, uid, cache_dir):
    url = server.url(f"/light/{uid}.txt")
    local = PathManager.get_local_path(url)
    out = run_python(
        "import sys\n"
        "from easycore.common.path import PathManager\n"
        f"print(PathManager.get_local_path({url!r}))\n"
        "print('requests' in sys.modules, 'tqdm' in sys.modules)",
        env=dict(os.environ, EASYCORE_CACHE=cache_dir),
    )
    assert out.split() == [local, "False", "False"]
    assert server.count(f"/light/{uid}.txt") == 1


def test_public_names():
    assert set(easycore.common.path.__all__) >= {
        "PathManager",
        "PathHandler",
        "NativePathHandler",
        "HTTPURLHandler",
        "RedirectPathHandler",
        "file_lock",
        "DownloadError",
    }
    assert easycore.common.network.__all__ == ["DownloadError", "download_file"]
    assert easycore.common.path.PathHandler.__module__ == "easycore.common.path.path_handler"


def test_namespace_packages_stay_namespaces():
    src = os.path.join(os.path.dirname(easycore.common.path.__file__), "..", "..")
    src = os.path.normpath(src)
    assert not os.path.exists(os.path.join(src, "__init__.py"))
    assert not os.path.exists(os.path.join(src, "common", "__init__.py"))
