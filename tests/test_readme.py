"""The README's quick start, run as a user runs it: twice in a row in the same folder.

Oracle: the first run's own output. A second run reopens the files the first made; it must
print exactly the same (it adds nothing twice), and both runs must leave no ``.undo`` or ``.redo`` file
behind (the README says ``close()`` removes it).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

README = Path(__file__).resolve().parent.parent / "README.md"


def _quick_start() -> str:
    if not README.exists():
        pytest.skip("run from a checkout: README.md is not beside the tests")
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the quick start has no python block"
    return match.group(1)


def test_quick_start_runs_twice_with_the_same_output(tmp_path: Path) -> None:
    script = tmp_path / "quick_start.py"
    script.write_text(_quick_start())
    outputs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Warning" not in proc.stderr, proc.stderr
        outputs.append(proc.stdout)
        assert not list(tmp_path.glob("*.undo")), "close() leaves no .undo file"
        assert not list(tmp_path.glob("*.redo")), "close() leaves no .redo file"
    assert outputs[0] == outputs[1]
    lines = outputs[0].splitlines()
    assert len(lines) == 6  # five hits and the reader's line
    assert lines[0].split()[0] == "0"  # the nearest to vectors[0] is itself
    assert lines[-1].startswith("10000 ")  # the reader sees every flushed vector, once
