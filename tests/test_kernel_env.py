"""The kernel matrix cannot pass vacuously: each emulated variant really changes what the
kernel answers.

Oracle: the kernel itself, asked through ctypes in a child process after the variant was
applied there: a direct ``madvise(..., 22)`` (MADV_POPULATE_READ) fails with EINVAL under the
``no-populate-read`` filter while MADV_WILLNEED still passes; ``madvise(..., 14)``
(MADV_HUGEPAGE) fails with EINVAL under ``no-thp``; ``prctl(PR_GET_THP_DISABLE)`` reads 1 under
``thp-disabled``; and a grandchild started by the child is under the same filter (the tests'
own child processes must be). Nothing here imports chassis.
"""

from __future__ import annotations

import errno
import json
import platform
import subprocess
import sys
from pathlib import Path

import kernel_env
import pytest

pytestmark = pytest.mark.skipif(
    not kernel_env.LINUX or platform.machine() not in ("x86_64", "aarch64"),
    reason="the seccomp filter is written for Linux x86_64 and aarch64",
)

TESTS = Path(__file__).resolve().parent

PROBE = r"""
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
import kernel_env as k
k.apply_in_process(sys.argv[2])
probe = "import sys, json; sys.path.insert(0, sys.argv[1]); import kernel_env as k; print(json.dumps([k.madvise_errno(22), k.madvise_errno(14), k.madvise_errno(3), k.thp_disabled_for_process()]))"
grandchild = subprocess.run([sys.executable, "-c", probe, sys.argv[1]], capture_output=True, text=True, check=True)
print(json.dumps({"child": [k.madvise_errno(22), k.madvise_errno(14), k.madvise_errno(3), k.thp_disabled_for_process()],
                  "grandchild": json.loads(grandchild.stdout)}))
"""


def _probe(variant: str) -> dict[str, list]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(TESTS), variant],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        # errno of madvise(POPULATE_READ), madvise(HUGEPAGE), madvise(WILLNEED); THP opt-out
        ("no-populate-read", [errno.EINVAL, None, 0, False]),
        ("no-thp", [None, errno.EINVAL, 0, False]),
        ("thp-disabled", [None, None, 0, True]),
    ],
)
def test_a_variant_changes_what_the_kernel_answers_in_the_child_and_its_children(
    variant: str, expected: list
) -> None:
    native = kernel_env.kernel()
    out = _probe(variant)
    for who in ("child", "grandchild"):
        got = out[who]
        for i, want in enumerate(expected):
            if want is None:  # untouched by this variant: what the kernel answers here
                want = [
                    0 if native.populate_read else errno.EINVAL,
                    0 if native.hugepage_advice else errno.EINVAL,
                ][i]
            assert got[i] == want, (variant, who, i, got)


def test_native_is_what_this_kernel_answers() -> None:
    out = _probe("native")
    assert out["child"] == out["grandchild"]
    assert out["child"][2] == 0  # MADV_WILLNEED is accepted everywhere
