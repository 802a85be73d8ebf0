"""Run the kernel-sensitive tests (marker ``kernel``) under every emulated kernel variant.

    python tests/kernel_matrix.py                       # every variant this machine can run
    python tests/kernel_matrix.py --variants no-thp,thp-never -- -x   # some, with pytest options

Each variant runs in a fresh interpreter that applies it to itself (`kernel_env.apply_in_process`:
a seccomp filter or prctl, inherited by every process the tests start), checks that it is in
force, and runs ``pytest -m kernel``. The THP-mode variants switch the system's
``/sys/kernel/mm/transparent_hugepage/enabled`` for the duration of their run (root only) and
put it back afterwards, whatever happens (an exception, Ctrl-C, SIGTERM).

Prints one line per variant with its counts (from pytest's JUnit XML) and exits non-zero when a
variant fails, passes no test, or cannot run: a variant this machine cannot run (a THP-mode
variant without root, say) fails unless its tier, ``kernel-<variant>`` in `.ci/tiers.toml`, is
declared optional here with ``CHASSIS_CI_OPTIONAL``. Real old kernels in VMs:
`tests/kernel_vms.py`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import FrameType

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

import ci_tiers  # noqa: E402
import kernel_env  # noqa: E402

THP_MODES = {"thp-always": "always", "thp-never": "never"}

RUN_VARIANT = """
import sys
sys.path.insert(0, {tests!r})
import kernel_env, pytest
kernel_env.apply_in_process({variant!r})
sys.exit(pytest.main({args!r}))
"""


def _counts(junit: Path) -> dict[str, int]:
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in total:
            total[key] += int(suite.get(key, 0))
    total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return total


class ThpMode:
    """The system's THP mode set for a while, and put back on exit, Ctrl-C or SIGTERM."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.saved: str | None = None
        self.handlers: dict[int, object] = {}

    def __enter__(self) -> ThpMode:
        self.saved = kernel_env.thp_mode()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self.handlers[sig] = signal.signal(sig, self._on_signal)
        kernel_env.THP_ENABLED.write_text(self.mode)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.restore()
        raise SystemExit(128 + signum)

    def restore(self) -> None:
        if self.saved is not None and kernel_env.thp_mode() != self.saved:
            kernel_env.THP_ENABLED.write_text(self.saved)

    def __exit__(self, *exc: object) -> None:
        self.restore()
        for sig, handler in self.handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def why_not(variant: str) -> str | None:
    """Why this machine cannot run `variant`, or None when it can."""
    if not kernel_env.LINUX:
        return f"not Linux ({sys.platform})"
    if variant in THP_MODES:
        if kernel_env.thp_mode() is None:
            return "no transparent huge pages in this kernel (no sysfs file)"
        if os.geteuid() != 0:
            return "switching the system's THP mode needs root"
    return None


def run_variant(variant: str, pytest_args: list[str], log_dir: Path) -> tuple[bool, str]:
    junit = log_dir / f"{variant}.xml"
    args = [
        "-q",
        "-m",
        "kernel",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        "--rootdir",
        str(TESTS.parent),
        str(TESTS),
        *pytest_args,
    ]
    env = dict(os.environ, **{kernel_env.ENV: variant})
    code = RUN_VARIANT.format(tests=str(TESTS), variant=variant, args=args)
    start = time.monotonic()
    output = log_dir / f"{variant}.log"
    with open(output, "w") as log:
        proc = subprocess.run(
            [sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, env=env
        )
    seconds = time.monotonic() - start
    if not junit.exists():
        tail = output.read_text()[-2000:]
        return False, f"could not run (exit {proc.returncode}, no results):\n{tail}"
    c = _counts(junit)
    line = (
        f"{c['passed']} passed, {c['failures'] + c['errors']} failed, {c['skipped']} skipped "
        f"in {seconds:.0f} s"
    )
    ok = proc.returncode == 0 and c["failures"] == c["errors"] == 0 and c["passed"] > 0
    if not ok:
        line += f"\n{output.read_text()[-4000:]}"
    return ok, line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variants",
        default=",".join(kernel_env.VARIANTS),
        help=f"comma-separated, from: {', '.join(kernel_env.VARIANTS)}",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in kernel_env.VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(kernel_env.VARIANTS)}")

    failed = 0
    with tempfile.TemporaryDirectory(prefix="kernel-matrix-") as tmp:
        for variant in variants:
            label = f"kernel variant {variant:<17}"
            reason = why_not(variant)
            if reason is not None:
                declared = f"kernel-{variant}" in ci_tiers.declared_here()
                print(
                    f"{label} not run: {reason}"
                    + ("" if declared else f" (declare CHASSIS_CI_OPTIONAL=kernel-{variant})"),
                    flush=True,
                )
                failed += not declared
                continue
            try:
                if variant in THP_MODES:
                    with ThpMode(THP_MODES[variant]):
                        ok, line = run_variant(variant, args.pytest_args, Path(tmp))
                else:
                    ok, line = run_variant(variant, args.pytest_args, Path(tmp))
            except OSError as exc:  # the THP mode could not be set
                ok, line = False, f"could not run: {exc}"
            print(f"{label} {line}", flush=True)
            failed += not ok
    if failed:
        print(f"{failed} kernel variant(s) failed or could not run", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
