"""`chassis.ray`: the missing-extra error here, and the cases of tests/ray_suite.py on a local
Ray cluster in a child.

Ray binds to every interface and names the machine's own address even when asked for
127.0.0.1, so the suite runs in a network namespace of its own with only the loopback device
up (`unshare --net`, root): nothing can leave 127.0.0.1. Ray's files go to a temporary folder
(`RAY_TMPDIR`) and it writes no token under the home folder (`RAY_AUTH_MODE=disabled`).
Skipped, saying why, without Ray (``pip install chassis-index[ray]``) or without root.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_importing_it_without_ray_says_which_extra_to_install():
    """Oracle: a child interpreter in which `import ray` fails as it does without Ray."""
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # what an absent package looks like to an import\n"
        "try:\n"
        "    import chassis.ray\n"
        "except ModuleNotFoundError as e:\n"
        "    print(type(e).__name__, e.name, '|', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("ModuleNotFoundError ray |"), out
    assert "pip install 'chassis-index[ray]'" in out


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="pip install chassis-index[ray]"
)
@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")),
    reason="needs root, unshare and ip for a loopback-only network namespace",
)
def test_ray_suite_on_a_local_cluster(tmp_path):
    # A folder of its own directly in the system's temporary folder, not pytest's deeper
    # one: Ray's Unix sockets live under it, and their paths must stay short.
    ray_tmp = tempfile.mkdtemp(prefix="ray-")
    env = dict(os.environ, RAY_TMPDIR=ray_tmp, RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    cmd = (
        "ip link set lo up && exec "
        f"{sys.executable} -m pytest -q -p no:cacheprovider -x {HERE / 'ray_suite.py'}"
    )
    try:
        run = subprocess.run(
            ["unshare", "--net", "--", "sh", "-c", cmd],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=1500,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in run.stdout
