"""No silent tiers: every skipped test belongs to a tier of ``.ci/tiers.toml``.

Active when ``CHASSIS_CI_STRICT_TIERS=1`` (``.ci/run`` sets it): a skip whose tier is neither
optional there nor named in ``CHASSIS_CI_OPTIONAL`` (comma-separated), or whose reason matches
no tier, fails the session after the tests ran, and the terminal summary says which tier and
how to declare it. ``CHASSIS_CI_TIER_REPORT=<path>`` writes the counts and the tiers skipped as
JSON, for the table at the end of ``.ci/run``. Without these variables nothing changes: a
developer's ``pytest`` skips as it always did. The hooks are in ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TIERS_FILE = Path(__file__).resolve().parent.parent / ".ci" / "tiers.toml"
UNDECLARED = "(no tier)"


@dataclass
class Tier:
    name: str
    pattern: re.Pattern[str] | None
    optional: bool
    why: str
    reasons: dict[str, int] = field(default_factory=dict)


def load_tiers(path: Path = TIERS_FILE) -> list[Tier]:
    """The tiers declared in ``.ci/tiers.toml`` (none when the file is not beside the tests)."""
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text())
    return [
        Tier(
            name,
            re.compile(t["skip"]) if "skip" in t else None,
            bool(t.get("optional", False)),
            t.get("why", ""),
        )
        for name, t in data.items()
    ]


def declared_here() -> set[str]:
    """The tiers this environment declares optional (``CHASSIS_CI_OPTIONAL``)."""
    return {n.strip() for n in os.environ.get("CHASSIS_CI_OPTIONAL", "").split(",") if n.strip()}


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


class Ledger:
    """The session's skips, grouped by tier."""

    def __init__(self) -> None:
        self.tiers = load_tiers()
        self.nowhere = Tier(UNDECLARED, None, False, "matches no tier of .ci/tiers.toml")
        self.failed_tiers: list[Tier] = []

    def add(self, reason: str) -> None:
        tier = next((t for t in self.tiers if t.pattern and t.pattern.search(reason)), None)
        tier = tier or self.nowhere
        tier.reasons[reason] = tier.reasons.get(reason, 0) + 1

    def skipped(self) -> list[Tier]:
        return [t for t in [*self.tiers, self.nowhere] if t.reasons]

    def status(self, tier: Tier, here: set[str]) -> str:
        if tier.optional:
            return "optional"
        return "declared here" if tier.name in here else "NOT DECLARED"


LEDGER = Ledger()  # one session per process


def strict() -> bool:
    return os.environ.get("CHASSIS_CI_STRICT_TIERS") == "1"


def configure() -> None:
    global LEDGER
    LEDGER = Ledger()


def record(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        LEDGER.add(skip_reason(report))


def finish(session: pytest.Session) -> None:
    """Fail a strict session that skipped a tier not declared optional here."""
    ledger = LEDGER
    here = declared_here()
    ledger.failed_tiers = [t for t in ledger.skipped() if ledger.status(t, here) == "NOT DECLARED"]
    if strict() and ledger.failed_tiers and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def summary(terminalreporter: pytest.TerminalReporter) -> None:
    ledger = LEDGER
    here = declared_here()
    tiers = ledger.skipped()
    if strict() and tiers:
        terminalreporter.section("tiers not run")
        for t in tiers:
            count = sum(t.reasons.values())
            reason = next(iter(t.reasons))
            terminalreporter.write_line(
                f"{t.name}: {count} skipped, {ledger.status(t, here)} ({reason})"
            )
        if ledger.failed_tiers:
            names = ", ".join(t.name for t in ledger.failed_tiers)
            terminalreporter.write_line(
                f"FAILED: tier(s) {names} did not run here and are not declared optional. Make "
                "them run, or declare them for this environment with CHASSIS_CI_OPTIONAL=<tier>; "
                "a skip of no tier needs an entry in .ci/tiers.toml",
                red=True,
            )
    path = os.environ.get("CHASSIS_CI_TIER_REPORT")
    if path:
        stats = terminalreporter.stats
        counts = {k: len(stats.get(k, [])) for k in ("passed", "failed", "error", "skipped")}
        counts["deselected"] = len(stats.get("deselected", []))
        Path(path).write_text(
            json.dumps(
                {
                    **counts,
                    "tiers": {
                        t.name: {
                            "skipped": sum(t.reasons.values()),
                            "status": ledger.status(t, here),
                            "reasons": t.reasons,
                        }
                        for t in tiers
                    },
                },
                indent=1,
            )
        )
