"""examples/: the quick-start notebook runs from top to bottom in a fresh kernel, and the
example programs run and say what they showed.

The notebook runs in a temporary working folder with CHASSIS_REPO naming this repository,
so its data lookup is the one of a clean clone (the real data set beside the repository
when present, else generated data). Oracles: the notebook's own outputs (no error output, an
HTML table of the bench result, a plot) and the interpreter the kernel reports, which must
be the one running the tests (so the kernel imports the chassis under test); for the
programs, their exit codes and the lines where they check themselves (recall against brute
force; the reader finding the newest vector)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import child_env

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOK = EXAMPLES / "quickstart.ipynb"


def _outputs(nb, cell_id: str) -> list:
    return next(c for c in nb.cells if c.get("id") == cell_id).get("outputs", [])


def test_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.get("id")


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")

    for key, value in child_env().items():  # the kernel imports the chassis under test
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CHASSIS_REPO", str(EXAMPLES.parent))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # A kernel spec of this interpreter, found first (JUPYTER_PATH comes before the user's
    # and the system's folders), so no other "python3" kernel on the machine is started.
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "Python 3 (tests)", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    probe = nbformat.v4.new_code_cell(
        "import sys, chassis; print(sys.executable); print(chassis.__file__)"
    )
    probe["id"] = "probe"
    nb.cells.insert(0, probe)

    start = time.monotonic()
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,  # per cell
        resources={"metadata": {"path": str(work)}},  # the working folder
    )
    client.execute()
    seconds = time.monotonic() - start

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", (
                f"cell {cell.get('id')}: {out.get('ename')}: {out.get('evalue')}"
            )
            if out["output_type"] == "stream" and out["name"] == "stderr":
                assert "Warning" not in out["text"], f"cell {cell.get('id')}: {out['text']}"

    import chassis

    executable, module = _outputs(nb, "probe")[0]["text"].split()
    assert Path(executable).resolve() == Path(sys.executable).resolve()
    assert Path(module).resolve() == Path(chassis.__file__).resolve()

    (shown,) = [o for o in _outputs(nb, "bench") if o["output_type"] == "execute_result"]
    page = shown["data"]["text/html"]
    assert '<table class="chassis-bench-sweep"' in page and "QPS@0.95" in page, page[:300]
    assert any("image/png" in o.get("data", {}) for o in _outputs(nb, "plot")), "no plot shown"
    recall_lines = "".join(o.get("text", "") for o in _outputs(nb, "recall"))
    assert "ef=64: recall@10 = " in recall_lines
    print(f"notebook ran in {seconds:.1f} s")  # for reading; time limits are the runner's


def _run_example(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )


def test_build_and_search_example():
    proc = _run_example("build_and_search.py", "--n", "3000", "--dims", "16", "--queries", "50")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "built 3,000 x 16 in" in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.startswith("recall@10 = "))
    assert float(line.split()[2]) >= 0.9, line


def test_reader_follows_writer_example():
    proc = _run_example("reader_follows_writer.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reader: 5,000 vectors; the newest, id 4,999, finds id 4,999" in proc.stdout
    assert "up to 5,000 vectors" in proc.stdout
