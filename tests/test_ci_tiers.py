"""No silent tiers (tests/ci_tiers.py, .ci/tiers.toml).

Oracles: the exit code and output of pytest run in a child on a folder of tests that skip with
chosen reasons; the skip reasons written in this folder's own tests, read with ``ast``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import ci_tiers
import pytest

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(
    not ci_tiers.TIERS_FILE.exists(), reason="needs the source checkout (.ci/tiers.toml)"
)

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import ci_tiers

def pytest_configure(config):
    ci_tiers.configure()

def pytest_runtest_logreport(report):
    ci_tiers.record(report)

def pytest_collectreport(report):
    ci_tiers.record(report)

def pytest_sessionfinish(session):
    ci_tiers.finish(session)

def pytest_terminal_summary(terminalreporter):
    ci_tiers.summary(terminalreporter)
"""


def run(tmp_path: Path, reasons: list[str], **env: str) -> tuple[int, str, dict | None]:
    """pytest in a child on one passing test and one test per skip reason."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    body = "import pytest\n\ndef test_passes():\n    assert 1 + 1 == 2\n"
    for i, reason in enumerate(reasons):
        body += f"\ndef test_skip_{i}():\n    pytest.skip({reason!r})\n"
    (tmp_path / "test_some.py").write_text(body)
    report = tmp_path / "tiers.json"
    child_env = {
        k: v for k, v in os.environ.items() if not k.startswith("CHASSIS_CI_") and k != "CI"
    }
    child_env.update(env, CHASSIS_CI_TIER_REPORT=str(report))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, data


def test_an_optional_tier_passes_and_is_reported(tmp_path):
    rc, out, data = run(
        tmp_path, ["torch is not a test extra (gigabytes)"], CHASSIS_CI_STRICT_TIERS="1"
    )
    assert rc == 0, out
    assert "torch: 1 skipped, optional" in out
    assert data["passed"] == 1 and data["skipped"] == 1
    assert data["tiers"]["torch"]["status"] == "optional"


def test_a_tier_not_declared_fails_the_run_until_this_environment_declares_it(tmp_path):
    reasons = ["needs Linux, cargo and cc to build the C library and program"]
    rc, out, data = run(tmp_path, reasons, CHASSIS_CI_STRICT_TIERS="1")
    assert rc == 1, out
    assert "c-library: 1 skipped, NOT DECLARED" in out
    assert "CHASSIS_CI_OPTIONAL=<tier>" in out
    assert data["tiers"]["c-library"]["status"] == "NOT DECLARED"

    rc, out, data = run(
        tmp_path, reasons, CHASSIS_CI_STRICT_TIERS="1", CHASSIS_CI_OPTIONAL="cargo, c-library"
    )
    assert rc == 0, out
    assert data["tiers"]["c-library"]["status"] == "declared here"


def test_a_skip_of_no_tier_fails_and_a_developer_run_is_unchanged(tmp_path):
    rc, out, data = run(tmp_path, ["some reason no tier names"], CHASSIS_CI_STRICT_TIERS="1")
    assert rc == 1, out
    assert f"{ci_tiers.UNDECLARED}: 1 skipped, NOT DECLARED (some reason no tier names)" in out

    rc, out, data = run(tmp_path, ["some reason no tier names"])
    assert rc == 0, out
    assert "tiers not run" not in out
    assert data["skipped"] == 1  # still counted for the table


def test_a_failing_test_is_not_hidden_behind_the_tier_check(tmp_path):
    (tmp_path / "test_fails.py").write_text("def test_fails():\n    assert 1 + 1 == 3\n")
    rc, out, data = run(tmp_path, [], CHASSIS_CI_STRICT_TIERS="1")
    assert rc == 1, out
    assert data["failed"] == 1 and data["passed"] == 1


def literal_skip_reasons() -> list[tuple[str, str]]:
    """(file:line, reason) for every skip reason written in the tests, f-strings by their text."""
    found = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            args = []
            if name.endswith("skipif"):
                args = [k.value for k in node.keywords if k.arg == "reason"]
            elif name == "pytest.skip":
                args = node.args[:1]
            for arg in args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    text = arg.value
                elif isinstance(arg, ast.JoinedStr):
                    text = "".join(v.value for v in arg.values if isinstance(v, ast.Constant))
                else:
                    continue  # a name: IMMUTABLE_SKIP, or a function's answer
                found.append((f"{path.name}:{node.lineno}", text))
    return found


def test_every_skip_written_in_the_tests_belongs_to_a_tier():
    tiers = ci_tiers.load_tiers()
    reasons = literal_skip_reasons()
    assert len(reasons) > 30  # the walk finds them: skipif reasons and pytest.skip calls
    orphans = [
        (where, text)
        for where, text in reasons
        if not any(t.pattern and t.pattern.search(text) for t in tiers)
    ]
    assert not orphans, f"add these to a tier of .ci/tiers.toml: {orphans}"
