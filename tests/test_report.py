"""benchmarks/report.py (the README's and docs/benchmarks.md's figures from the raw results)
and chassis._machine (the CPU those figures name).

Oracles: ratios worked out by hand from synthetic sweep points; the CPUID family and model
numbers of named products; the repository's own committed files, which `--check` must find
in agreement, and a copy with one figure changed, which it must not.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chassis import _machine

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "report.py"

pytestmark = pytest.mark.skipif(
    not SCRIPT.exists(), reason="run from a checkout: benchmarks/ is not beside the tests"
)


@pytest.fixture(scope="module")
def report() -> Any:
    spec = importlib.util.spec_from_file_location("chassis_report_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ synthetic runs
def _sweep(*points: tuple[float, float]) -> list[dict[str, Any]]:
    return [{"ef": 10 * (i + 1), "recall": r, "qps": q} for i, (r, q) in enumerate(points)]


def _engine(passes: list[list[tuple[float, float]]], builds: list[float]) -> dict[str, Any]:
    """Passes of one engine, every mode swept alike; its builds."""
    return {
        "passes": [
            {"build_s": builds[i], "sweep": {m: _sweep(*pts) for m in ("batch", "loop", "batch2")}}
            for i, pts in enumerate(passes)
        ],
        "builds_s": builds,
    }


def _speed_run(engines: dict[str, dict[str, Any]], cpu: dict[str, Any]) -> dict[str, Any]:
    return {
        "script": "bench_speed",
        "date": "2030-01-02",
        "points": [],
        "machine": {"cpu_count": 2, "chassis_cpu_info": cpu},
        "versions": {e: "1" for e in engines},
        "args": {"engines": list(engines), "datasets": ["minilm"], "passes": 2},
        "datasets": {
            "minilm": {
                "shape": [1000, 8],
                "queries": 50,
                "metric": "euclidean",
                "passes": {e: f["passes"] for e, f in engines.items()},
                "median": {e: {"builds_s": f["builds_s"]} for e, f in engines.items()},
            }
        },
    }


INTEL = {"arch": "x86_64", "vendor": "GenuineIntel", "family": 6, "model": 143, "kernel": "avx512"}


def _write(folder: Path, name: str, doc: dict[str, Any]) -> str:
    (folder / name).write_text(json.dumps(doc))
    return name


def test_ratios_at_recall_095_are_the_interpolated_ones(report, tmp_path):
    """Oracle, by hand: linear interpolation at recall 0.95, then the median over passes.

    chassis:   pass 1 (0.90, 1000) -> (1.00, 500): 750; pass 2 (0.90, 1200) -> (1.00, 600): 900;
               median 825.
    hnswlib:   pass 1 (0.90, 600) -> (1.00, 400): 500; pass 2 (0.92, 500) -> (0.98, 300): 400;
               median 450, the best float peer (faiss: 300).
    chassis / hnswlib = 825 / 450 = 1.833.
    Builds: chassis median(10, 11, 30) = 11, hnswlib median(20, 22, 24) = 22: 0.50.
    chassis-int8: 1650 at 0.95 in both passes: / hnswlib 3.67; / faiss-sq8 (330) 5.00.
    """
    engines = {
        "chassis": _engine(
            [[(0.90, 1000), (1.00, 500)], [(0.90, 1200), (1.00, 600)]], [10, 11, 30]
        ),
        "chassis-int8": _engine([[(0.90, 2000), (1.00, 1300)]] * 2, [12, 12]),
        "hnswlib": _engine([[(0.90, 600), (1.00, 400)], [(0.92, 500), (0.98, 300)]], [20, 22, 24]),
        "faiss": _engine([[(0.94, 310), (0.96, 290)]] * 2, [30, 30]),
        "faiss-sq8": _engine([[(0.95, 330), (0.99, 100)]] * 2, [9, 9]),
    }
    name = _write(tmp_path, "2030-01-02-bench_speed-x.json", _speed_run(engines, INTEL))
    run = report.Run(name, tmp_path)
    text = report.readme_section([run])
    row = next(line for line in text.splitlines() if line.startswith("| Intel"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2030-01-02"
    assert cells[2] == "hnswlib, faiss; 8-bit: faiss-sq8"
    # faiss-sq8 reached 0.95 at its smallest ef: the ratio against it is marked as resting on
    # a lower bound, and the footnote says what the mark means
    assert cells[3:] == ["1.83", "1.83", "0.50", "3.67", "5.00*"], row
    assert "`*`: the smallest ef of the sweep already reached 0.95" in text
    assert "family 6 model 143, Sapphire Rapids" in cells[0]
    assert "AVX-512 kernels" in cells[0] and "L3 not recorded" in cells[0]

    docs = report.docs_section([run], [run])
    assert "| chassis | 11.00 | " in docs  # the median build, not the pass's
    assert "| chassis / best float peer | 0.50 (hnswlib) |  | 1.83 (hnswlib) |" in docs
    assert "| chassis-int8 / best 8-bit peer | 1.33 (faiss-sq8) |  | 5.00 (faiss-sq8) |" in docs
    # faiss-sq8's smallest ef already reaches 0.95: its QPS there is a lower bound, marked
    assert "| faiss-sq8 | 9.00 | 330* | 330* | 100 |" in docs


def test_a_run_without_int8_says_so(report, tmp_path):
    engines = {
        "chassis": _engine([[(0.90, 1000), (1.00, 500)]], [10]),
        "hnswlib": _engine([[(0.90, 600), (1.00, 400)]], [20]),
    }
    name = _write(tmp_path, "a.json", _speed_run(engines, INTEL))
    row = next(
        line
        for line in report.readme_section([report.Run(name, tmp_path)]).splitlines()
        if line.startswith("| Intel")
    )
    assert row.endswith("| 1.50 | 1.50 | 0.50 | not in this run | not in this run |"), row


def test_a_smoke_run_is_refused(report, tmp_path):
    engines = {"chassis": _engine([[(0.9, 2), (1.0, 1)]], [1])}
    doc = _speed_run(engines, INTEL)
    doc["args"]["quick"] = True
    name = _write(tmp_path, "q.json", doc)
    with pytest.raises(report.ReportError, match="smoke run"):
        report.load_runs({name: "docs"}, tmp_path)


def test_two_readme_rows_on_one_cpu_are_refused(report, tmp_path):
    engines = {
        "chassis": _engine([[(0.9, 2), (1.0, 1)]], [1]),
        "hnswlib": _engine([[(0.9, 2), (1.0, 1)]], [1]),
    }
    a = _write(tmp_path, "a.json", _speed_run(engines, INTEL))
    b = _write(tmp_path, "b.json", _speed_run(engines, INTEL))
    with pytest.raises(report.ReportError, match="one CPU"):
        report.readme_section([report.Run(a, tmp_path), report.Run(b, tmp_path)])


def _scale_engine(build_s: float, qps: float, cached: bool = False) -> dict[str, Any]:
    build = {"build_s": build_s, "peak_rss_own_mib": 150.0, "file_mib": 100.0, "version": "1"}
    if cached:
        build["cached"] = True
    sweep = _sweep((0.90, qps * 2), (1.00, 0.0))  # qps at 0.95
    return {
        "build": build,
        "search": {"open_cold_ms": 2.0, "sweep": {"batch": sweep, "loop": sweep, "batch2": sweep}},
    }


def _scale_run(engines: dict[str, Any]) -> dict[str, Any]:
    return {
        "script": "bench_scale",
        "date": "2030-01-03",
        "machine": {"chassis_cpu_info": {"vendor": "AuthenticAMD", "family": 25, "model": 1}},
        "args": {"only": "peers", "engines": list(engines)},
        "peers": {"n": 1000, "dims": 8, "clusters": 4, "engines": engines},
    }


def test_scale_run_ratios_and_a_cached_build_refused(report, tmp_path):
    """Oracle, by hand: at 0.95 each sweep gives half of its first point's QPS (midway to 0);
    chassis 400 against chassisdb 250: 1.60; builds 50 / 100: 0.50; memory 150 / 100 MiB."""
    fresh = {"chassis": _scale_engine(50, 400), "chassisdb": _scale_engine(100, 250)}
    name = _write(tmp_path, "s.json", _scale_run(fresh))
    text = report.readme_section([report.Run(name, tmp_path)])
    row = next(line for line in text.splitlines() if line.startswith("| AMD"))
    assert "family 25 model 1, Zen 3" in row
    assert row.endswith("| chassisdb | 1.60 | 1.60 | 1.60 | 0.50 | 1.50 | 2.0 ms |"), row

    cached = {"chassis": _scale_engine(50, 400, cached=True), "chassisdb": _scale_engine(100, 250)}
    name = _write(tmp_path, "c.json", _scale_run(cached))
    with pytest.raises(report.ReportError, match="chassis was cached"):
        report.readme_section([report.Run(name, tmp_path)])


def test_commands_parse_back_to_the_recorded_options(report):
    """Oracle: the script's own option parser, given the command, yields what the run
    recorded (every option of its "args")."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_churn
        import bench_filters
        import bench_scale
        import bench_speed
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    modules = {
        "speed": bench_speed,
        "scale-peers": bench_scale,
        "filters": bench_filters,
        "churn": bench_churn,
    }
    for name in report.RUNS:
        run = report.Run(name)
        # the measuring switches the run had set come first, as VAR=value
        words = [w for w in shlex.split(run.command) if not w.startswith("CHASSIS_")]
        module = modules[run.kind]
        assert words[:2] == ["python", f"benchmarks/{run.script}.py"]
        parsed = vars(module._parse(words[2:]))
        for key, value in run.doc["args"].items():
            if key in report.OUTPUTS:
                continue
            now = parsed[key]
            if isinstance(now, str) and os.path.isabs(now):
                now = os.path.relpath(now, REPO)
            assert value == (list(now) if isinstance(now, tuple) else now), (name, key)


# ------------------------------------------------------------------ the files as committed
def test_a_filter_sweep_point_is_the_median_of_its_passes(monkeypatch):
    """Oracle: a scripted clock. Each pass of the fake engine takes a known time, so a point's
    QPS must be the queries over the median of the passes it made, and the passes stop where
    `REPEAT_WITHIN_S` and `SLOW_POINT_S` say."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_filters
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    now = [0.0]
    monkeypatch.setattr(bench_filters.time, "perf_counter", lambda: now[0])
    # ef 10: five short passes; ef 16: two that take a second together; ef 24: one slow pass,
    # after which the sweep stops (ef 32 is never asked for).
    durations = iter([0.010, 0.050, 0.012, 0.011, 0.013, 0.6, 0.7, 25.0])
    found = np.tile(np.arange(10), (100, 1))
    truth = found.copy()
    truth[:, 0] = 99  # recall 0.9: the sweep does not stop for having found everything

    class Fake:
        name = "fake"

        def __call__(self, queries, k, ef):
            now[0] += next(durations)
            return found

    points = bench_filters.sweep(Fake(), found, truth, 10, [10, 16, 24, 32], passes=5)
    assert [p["ef"] for p in points] == [10, 16, 24]
    assert [p["passes"] for p in points] == [5, 2, 1]
    for p, median in zip(points, [0.012, 0.65, 25.0]):
        assert p["qps"] == pytest.approx(100 / median) and p["recall"] == pytest.approx(0.9)


def _run_report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_check_passes_on_the_repository():
    proc = _run_report("--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


# numpy made unimportable in the child: `sys.modules["numpy"] = None` fails its import.
WITHOUT_NUMPY = (
    "import runpy, sys; sys.modules['numpy'] = None; sys.argv = ['report.py', '--check']; "
    f"runpy.run_path({str(REPO / 'benchmarks' / 'report.py')!r}, run_name='__main__')"
)


def test_without_numpy_it_says_what_is_missing_and_what_to_do():
    # Oracle: the exit status the docstring gives an unusable run (2) and the module named.
    # CHASSIS_REPORT_AGAIN: as if it had already run again with a venv (none to go to).
    env = {**os.environ, "CHASSIS_REPORT_AGAIN": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_NUMPY], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot import numpy" in proc.stderr and "help: " in proc.stderr, proc.stderr


def test_without_numpy_it_runs_again_with_the_venv_that_has_it():
    # Oracle: the check's own exit status (0 on the repository), from the venv named.
    env = {**os.environ, "CHASSIS_CI_VENV": sys.prefix}
    env.pop("CHASSIS_REPORT_AGAIN", None)
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_NUMPY], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no numpy here; running with" in proc.stderr, proc.stderr


def test_check_fails_on_one_changed_figure_and_changes_nothing(tmp_path):
    readme, docs = tmp_path / "README.md", tmp_path / "benchmarks.md"
    shutil.copy(REPO / "README.md", readme)
    shutil.copy(REPO / "docs" / "benchmarks.md", docs)
    text = readme.read_text()
    lines = text.splitlines()
    begin = lines.index("<!-- report:begin performance -->")
    row = next(
        n
        for n in range(begin, len(lines))
        if lines[n].startswith("| ") and "---" not in lines[n] and not lines[n].startswith("| CPU")
    )
    cells = lines[row].split(" | ")
    cells[3] = "9.99" if cells[3] != "9.99" else "9.98"  # the search_batch ratio
    original, lines[row] = lines[row], " | ".join(cells)
    changed = "\n".join(lines) + "\n"
    readme.write_text(changed)
    proc = _run_report("--check", "--readme", str(readme), "--docs", str(docs))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert str(readme) in proc.stderr and str(docs) not in proc.stderr, proc.stderr
    diff = proc.stdout.splitlines()
    assert "-" + lines[row] in diff and "+" + original in diff, proc.stdout
    assert readme.read_text() == changed  # --check writes nothing

    proc = _run_report("--readme", str(readme), "--docs", str(docs))
    assert proc.returncode == 0, proc.stderr
    assert readme.read_text() == text  # rewritten: back to the committed figures


def test_rewrite_touches_only_the_text_between_markers(tmp_path):
    readme, docs = tmp_path / "README.md", tmp_path / "benchmarks.md"
    readme.write_text(
        "# Title\n\nbefore\n<!-- report:begin performance -->\nold\n"
        "<!-- report:end performance -->\nafter\n"
    )
    docs.write_text("intro\n<!-- report:begin benchmarks -->\n<!-- report:end benchmarks -->\n")
    proc = _run_report("--readme", str(readme), "--docs", str(docs))
    assert proc.returncode == 0, proc.stderr
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n<!-- report:begin performance -->\n")
    assert text.endswith("<!-- report:end performance -->\nafter\n")
    assert "\nold\n" not in text and "| CPU |" in text
    assert _run_report("--check", "--readme", str(readme), "--docs", str(docs)).returncode == 0

    docs.write_text("no markers here\n")
    proc = _run_report("--check", "--readme", str(readme), "--docs", str(docs))
    assert proc.returncode == 2 and "report:begin benchmarks" in proc.stderr, proc.stderr


# ------------------------------------------------------------------ chassis._machine
@pytest.mark.parametrize(
    ("vendor", "family", "model", "name"),
    [
        ("AuthenticAMD", 23, 0x01, "Zen / Zen+"),  # EPYC 7001 "Naples"
        ("AuthenticAMD", 23, 0x31, "Zen 2"),  # EPYC 7002 "Rome"
        ("AuthenticAMD", 23, 0x71, "Zen 2"),  # Ryzen 3000 "Matisse"
        ("AuthenticAMD", 25, 0x01, "Zen 3"),  # EPYC 7003 "Milan"
        ("AuthenticAMD", 25, 0x21, "Zen 3"),  # Ryzen 5000 "Vermeer"
        ("AuthenticAMD", 25, 0x11, "Zen 4"),  # EPYC 9004 "Genoa"
        ("AuthenticAMD", 25, 0x61, "Zen 4"),  # Ryzen 7000 "Raphael"
        ("AuthenticAMD", 26, 0x02, "Zen 5"),  # EPYC 9005 "Turin"
        ("GenuineIntel", 6, 85, "Skylake/Cascade Lake-SP"),
        ("GenuineIntel", 6, 106, "Ice Lake-SP"),
        ("GenuineIntel", 6, 143, "Sapphire Rapids"),
        ("GenuineIntel", 6, 207, "Emerald Rapids"),
        ("AuthenticAMD", 25, 0xF0, None),  # not in the table: unknown, not a guess
        ("GenuineIntel", 15, 6, None),
        ("ARM", 0, 0, None),
    ],
)
def test_microarchitecture_names(vendor, family, model, name):
    assert _machine.microarchitecture(vendor, family, model) == name


def test_cpu_line_says_what_is_not_recorded():
    full = {
        "model_name": "AMD EPYC 7B13",
        "vendor": "AuthenticAMD",
        "family": 25,
        "model": 1,
        "microarchitecture": "Zen 3",
        "kernel": "avx2",
        "l3_bytes": 32 << 20,
        "logical_cpus": 2,
        "memory_limit_bytes": None,
    }
    assert _machine.cpu_line(full) == (
        "AMD EPYC 7B13 (family 25 model 1, Zen 3), AVX2 kernels, L3 32 MiB, 2 CPUs"
    )
    old = _machine.from_record(
        {
            "cpu_count": 2,
            "chassis_cpu_info": {
                "vendor": "GenuineIntel",
                "family": 6,
                "model": 207,
                "kernel": "avx512",
            },
        }
    )
    assert _machine.cpu_line(old) == (
        "Intel (model name not recorded; family 6 model 207, Emerald Rapids), AVX-512 kernels, "
        "L3 not recorded, 2 CPUs"
    )
    new = _machine.from_record({"cpu": full, "chassis_cpu_info": {"kernel": "scalar"}})
    assert new == full  # a run that recorded "cpu" is taken as it recorded it


def test_describe_this_machine():
    """Oracles: os.cpu_count(), chassis.cpu_info(), /proc/cpuinfo's first "model name"."""
    import chassis

    info = _machine.describe()
    json.dumps(info)  # JSON-able
    assert info["logical_cpus"] == os.cpu_count()
    assert info["kernel"] == chassis.cpu_info()["kernel"]
    assert info["kernels_available"] == chassis.cpu_info()["kernels_available"]
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        if names:
            assert info["model_name"] == names[0]
    limit = info["memory_limit_bytes"]
    assert limit is None or 0 < limit < 1 << 60
    assert info["l3_bytes"] is None or info["l3_bytes"] >= 1 << 20


def test_describe_honours_chassis_kernel():
    """Oracle: CHASSIS_KERNEL=scalar forces the plain kernels in a fresh process."""
    code = "import json; from chassis import _machine; print(json.dumps(_machine.describe()))"
    env = {**os.environ, "CHASSIS_KERNEL": "scalar"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["kernel"] == "scalar"
    assert "plain kernels" in _machine.cpu_line(info)
