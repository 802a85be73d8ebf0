"""`python -m chassis bench`: the quick run end to end in a subprocess, --data on files the
test writes, --compare with missing peers, and the option errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from chassis import __main__ as cli
from chassis import _bench
from chassis import datasets as D
from conftest import child_env


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chassis", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
    )


def _check_sweep(points: list[dict], min_last_recall: float = 0.0) -> None:
    assert points, "empty sweep"
    recalls = [p["recall"] for p in points]
    assert all(0.0 <= r <= 1.0 for r in recalls), recalls
    assert all(b >= a - 0.02 for a, b in zip(recalls, recalls[1:])), (
        f"recall falls with ef: {recalls}"
    )
    assert all(p["qps"] > 0 for p in points)
    assert [p["ef"] for p in points] == sorted(p["ef"] for p in points)
    assert recalls[-1] >= min_last_recall, recalls


def test_quick_run_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "out.json"
    proc = _run("--quick", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    for column in ("ef", "recall@10", "QPS", "QPS@0.9", "build:", "open:", "ground truth"):
        assert column in text, f"{column!r} missing from:\n{text}"
    everything = json.loads(out.read_text())
    chassis = everything["engines"]["chassis"]
    _check_sweep(chassis["sweep"]["batch"], min_last_recall=0.9)
    assert chassis["build_s"] > 0 and chassis["open_ms"] > 0 and chassis["file_bytes"] > 0
    assert set(chassis["qps_at"]["batch"]) == {"0.9", "0.95", "0.99"}
    assert everything["data"]["n"] == 10_000 and everything["data"]["queries"] == 200
    assert everything["data"]["ground_truth"] == "computed"


def test_data_fvecs_file_last_rows_become_queries(tmp_path):
    base, _ = D.clustered(3_000, 16, 0, seed=2)
    path = tmp_path / "vectors.fvecs"
    D.write_fvecs(path, base)
    out = tmp_path / "fvecs.json"
    proc = _run("--data", str(path), "--queries", "100", "--ef", "10,40,160", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vectors.fvecs (last 100 rows as queries): 2,900 x 16" in proc.stdout
    everything = json.loads(out.read_text())
    assert everything["data"]["n"] == 2_900 and everything["data"]["queries"] == 100
    _check_sweep(everything["engines"]["chassis"]["sweep"]["batch"], min_last_recall=0.95)


def test_data_with_separate_queries_and_truth_files(tmp_path, capsys):
    """In-process: --queries PATH and --truth PATH are used as given (no ground truth pass)."""
    base, queries = D.clustered(1_500, 8, 50, seed=6)
    truth, _ = D.ground_truth(base, queries, 10)
    D.write_fbin(tmp_path / "b.fbin", base)
    D.write_fbin(tmp_path / "q.fbin", queries)
    D.write_ivecs(tmp_path / "gt.ivecs", truth)
    out = tmp_path / "o.json"
    rc = cli.main(
        [
            "bench",
            "--data",
            str(tmp_path / "b.fbin"),
            "--queries",
            str(tmp_path / "q.fbin"),
            "--truth",
            str(tmp_path / "gt.ivecs"),
            "--ef",
            "20,80",
            "--quick",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0
    assert "ground truth: exact" not in printed
    everything = json.loads(out.read_text())
    assert everything["data"]["ground_truth"] == "given"
    _check_sweep(everything["engines"]["chassis"]["sweep"]["batch"], min_last_recall=0.95)


def test_compare_skips_missing_peers_and_reports_ratios(tmp_path, capsys, monkeypatch):
    class Missing(_bench.Engine):
        name = package = "usearch"

        def __init__(self) -> None:
            raise ImportError("No module named 'usearch'")

    monkeypatch.setitem(_bench.ENGINES, "usearch", Missing)
    peers = ["usearch"]
    try:
        import hnswlib  # noqa: F401

        peers.append("hnswlib")
    except ImportError:
        pass
    out = tmp_path / "c.json"
    rc = cli.main(
        [
            "bench",
            "--quick",
            "--n",
            "1500",
            "--queries",
            "50",
            "--ef",
            "10,40",
            "--compare",
            ",".join(peers),
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0
    assert "skipped usearch" in printed
    everything = json.loads(out.read_text())
    assert "usearch" not in everything["engines"]
    if "hnswlib" in peers:
        assert "vs hnswlib" in printed and "hnswlib QPS" in printed
        _check_sweep(everything["engines"]["hnswlib"]["sweep"]["batch"])
        assert set(everything["ratios"]["hnswlib"]) >= {"build_s", "open_ms", "qps_at"}


def test_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    rc = cli.main(["bench", "--quick", "--plot", str(tmp_path / "p.png")])
    assert rc == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_plot_draws_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "p.png"
    rc = cli.main(
        ["bench", "--quick", "--n", "800", "--queries", "30", "--ef", "10,20", "--plot", str(png)]
    )
    assert rc == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_malformed_data_file_is_reported(tmp_path, capsys):
    path = tmp_path / "bad.fvecs"
    D.write_fvecs(path, np.zeros((4, 3), np.float32))
    path.write_bytes(path.read_bytes()[:-2])
    assert cli.main(["bench", "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.fvecs" in err and "byte offset 48" in err


def test_a_missing_data_path_is_named_as_not_found(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    assert cli.main(["bench", "--data", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--data {missing}: no such file or folder" in err, err


def test_option_errors():
    with pytest.raises(SystemExit):
        cli.main(["bench", "--compare", "nosuchlib"])
    with pytest.raises(SystemExit):
        cli.main(["bench", "--ef", "0,5"])
    assert cli.main([]) == 2


def test_interpolation_at_equal_recall():
    sweep = [(0.80, 1000.0), (0.90, 800.0), (1.0, 400.0)]
    assert _bench.interpolate_qps(sweep, 0.95) == (pytest.approx(600.0), "interpolated")
    assert _bench.interpolate_qps(sweep, 0.5) == (1000.0, "at-first-point")
    assert _bench.interpolate_qps(sweep[:2], 0.95) == (None, "not-reached")
    assert _bench.ratio(2.0, 4.0) == 0.5 and _bench.ratio(None, 1.0) is None


def test_benchmark_results_name_no_folder_of_the_machine(tmp_path):
    """Oracle: the written file, read back. The output path is left out of the recorded
    command line, a data set beside the repository is named relative to it, and any other
    absolute path is cut to its last part."""
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    toolkit = repo / "benchmarks" / "toolkit.py"
    spec = importlib.util.spec_from_file_location("_bench_toolkit_paths", toolkit)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "results.json"
    beside = str(repo.parent / "shared" / "data" / "set")
    args = {"json": str(out), "data": beside, "workdir": str(tmp_path / "scale"), "n": 5}
    module.write_results(str(out), "bench_x", {"args": args, "note": "/proc/self/io"})
    doc = json.loads(out.read_text())
    assert "json" not in doc["args"] and doc["args"]["n"] == 5
    assert doc["args"]["data"] == "../shared/data/set"
    # cut to "scale", or relative where the test's folder lies beside the repository
    assert (
        doc["args"]["workdir"].endswith("scale") and not Path(doc["args"]["workdir"]).is_absolute()
    )
    assert doc["note"] == "/proc/self/io", "only the command line's paths are cut"
    assert str(tmp_path) not in out.read_text()


def test_bench_module_is_shared_with_the_benchmarks():
    """The benchmark scripts and toolkit.py take the engines and the result schema from
    chassis._bench instead of repeating them (oracle: object identity), and none loads a file
    of the package by path."""
    import importlib.util
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if not folder.exists():
        pytest.skip("no benchmarks/ next to the tests")
    modules = {}
    for path in [folder / "toolkit.py", *sorted(folder.glob("bench_*.py"))]:
        assert "spec_from_file_location" not in path.read_text(), path.name
        spec = importlib.util.spec_from_file_location(f"_bench_script_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[path.stem] = module
    names = (
        "make_engine",
        "interpolate_qps",
        "qps_at_targets",
        "median_qps_at",
        "ratios",
        "versus_best_peer",
        "qps_cell",
        "write_json",
    )
    for name in names:
        for stem, module in modules.items():
            if hasattr(module, name):
                assert getattr(module, name) is getattr(_bench, name), (stem, name)
    used = {name for name in names for module in modules.values() if hasattr(module, name)}
    assert {"qps_at_targets", "median_qps_at", "versus_best_peer", "write_json"} <= used


def test_qps_at_targets_and_ratios_share_one_shape():
    points = [
        {"ef": 10, "recall": 0.80, "qps": 1000.0},
        {"ef": 20, "recall": 0.90, "qps": 800.0},
        {"ef": 40, "recall": 1.0, "qps": 400.0},
    ]
    at = _bench.qps_at_targets(points)
    assert at["0.95"] == {"qps": pytest.approx(600.0), "how": "interpolated"}
    assert at["0.99"]["qps"] == pytest.approx(440.0)
    both = _bench.median_qps_at([at, _bench.qps_at_targets(points[:2])])
    assert both["0.9"]["how"] == "interpolated" and both["0.95"] == {
        "qps": None,
        "how": "not-reached",
    }
    ours = {"build_s": 1.0, "qps_at": {"batch": at}}
    peer = {
        "build_s": 2.0,
        "qps_at": {"batch": _bench.qps_at_targets([{**p, "qps": p["qps"] / 2} for p in points])},
    }
    r = _bench.ratios(ours, peer, ("build_s",))
    assert r["build_s"] == 0.5 and r["qps_at"]["batch"]["0.95"] == pytest.approx(2.0)
    vs = _bench.versus_best_peer(
        {"chassis": ours, "hnswlib": peer, "faiss": {"build_s": 4.0}},
        [("build_s", lambda n, s: s["build_s"], "low")],
    )
    assert vs["build_s"]["best_peer"] == "hnswlib" and vs["build_s"]["ratio"] == 0.5
    assert (
        _bench.qps_cell(ours, "batch", "0.9") == "800"
        and _bench.qps_cell(ours, "loop", "0.9") == "-"
    )


# ------------------------------------------------------------------ first contact
def _npy_folder(folder, n: int, q: int, dims: int = 8, *, truth: bool = True, seed: int = 4):
    """A folder data set of n base vectors and q queries, with exact top-20 ground truth."""
    base, queries = D.clustered(n, dims, q, seed=seed)
    folder.mkdir()
    D.write_npy(folder / "base.npy", base)
    D.write_npy(folder / "queries.npy", queries)
    if truth:
        D.write_npy(folder / "gt_ids.npy", D.ground_truth(base, queries, 20)[0])
    return folder


def test_quick_data_takes_a_sample_and_says_so(tmp_path, capsys):
    """Oracle: the sizes of the files written; the recall says the ground truth fits the
    sample (a ground truth of the whole base, kept by mistake, would give a recall near 0)."""
    folder = _npy_folder(tmp_path / "big", 12_500, 300)
    out = tmp_path / "q.json"
    rc = cli.main(["bench", "--data", str(folder), "--quick", "--ef", "10,80", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    assert (
        "quick: a random sample of 10,000 of 12,500 vectors and the first 200 of 300 queries"
        in printed
    ), printed
    assert "big: 10,000 x 8, 200 queries" in printed
    assert "ground truth: exact top-10" in printed
    everything = json.loads(out.read_text())
    data = everything["data"]
    assert (data["n"], data["queries"]) == (10_000, 200)
    assert data["sampled_from"] == {"n": 12_500, "queries": 300}
    assert data["ground_truth"] == "computed"
    _check_sweep(everything["engines"]["chassis"]["sweep"]["batch"], min_last_recall=0.95)


def test_quick_data_keeps_the_given_truth_when_only_queries_are_cut(tmp_path, capsys):
    """The base is small enough: only the queries are cut, and their ground truth rows, sliced,
    stay exact (oracle: the recall against the file's ground truth)."""
    folder = _npy_folder(tmp_path / "small", 2_000, 260)
    out = tmp_path / "s.json"
    rc = cli.main(["bench", "--data", str(folder), "--quick", "--ef", "10,80", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "quick: the first 200 of 260 queries" in printed, printed
    assert "random sample" not in printed and "ground truth: exact" not in printed
    everything = json.loads(out.read_text())
    assert everything["data"]["ground_truth"] == "given"
    assert (everything["data"]["n"], everything["data"]["queries"]) == (2_000, 200)
    _check_sweep(everything["engines"]["chassis"]["sweep"]["batch"], min_last_recall=0.95)


def test_quick_data_within_the_caps_is_used_whole(tmp_path, capsys):
    folder = _npy_folder(tmp_path / "tiny", 1_500, 40)
    rc = cli.main(["bench", "--data", str(folder), "--quick", "--ef", "10,40"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "quick:" not in printed and "tiny: 1,500 x 8, 40 queries" in printed


def _summary_block(printed: str) -> str:
    return printed[printed.index("\nsummary") :]


def test_footnotes_only_when_a_cell_needs_them(tmp_path, capsys):
    """Uniform random data (hard for a graph) with a small M: ef=10 stays far below 0.9 and
    ef=3,000 on 3,000 vectors searches all of them. Oracle: the "how" of each QPS figure in the
    JSON; no lower bound and nothing unreached, so no footnote."""
    path = tmp_path / "uniform.npy"
    D.write_npy(path, np.random.default_rng(1).random((3_050, 32), dtype=np.float32))
    out = tmp_path / "f.json"
    common = ["bench", "--data", str(path), "--queries", "50", "--quick", "--m", "6"]
    rc = cli.main([*common, "--ef-construction", "40", "--ef", "10,3000", "--json", str(out)])
    printed = _summary_block(capsys.readouterr().out)
    assert rc == 0
    hows = [
        c["how"]
        for c in json.loads(out.read_text())["engines"]["chassis"]["qps_at"]["batch"].values()
    ]
    assert hows == ["interpolated"] * 3, f"the data no longer gives a clean sweep: {hows}"
    assert "(*" not in printed and "(-" not in printed and "lower bound" not in printed, printed

    # the same data, a sweep too short: only the "not reached" part of the footnote
    rc = cli.main([*common, "--ef-construction", "40", "--ef", "10,20", "--json", str(out)])
    printed = _summary_block(capsys.readouterr().out)
    hows = {
        c["how"]
        for c in json.loads(out.read_text())["engines"]["chassis"]["qps_at"]["batch"].values()
    }
    assert rc == 0 and "not-reached" in hows and "at-first-point" not in hows, hows
    assert "(- not reached by the largest ef" in printed and "lower bound" not in printed, printed


def test_footnote_for_a_lower_bound_alone(tmp_path, capsys):
    """Easy clustered data: ef=10 already reaches 0.9 (a lower bound, *) and ef=160 reaches
    0.99, so only the * part is printed (oracle: the JSON's "how")."""
    out = tmp_path / "l.json"
    rc = cli.main(
        ["bench", "--quick", "--n", "1500", "--queries", "50", "--ef", "10,160", "--json", str(out)]
    )
    printed = _summary_block(capsys.readouterr().out)
    assert rc == 0
    hows = {
        c["how"]
        for c in json.loads(out.read_text())["engines"]["chassis"]["qps_at"]["batch"].values()
    }
    assert "at-first-point" in hows and "not-reached" not in hows, hows
    assert "(* the smallest ef already reached this recall" in printed, printed
    assert "not reached" not in printed


def test_usage_names_the_command_as_invoked(tmp_path):
    """`python -m chassis` and a `chassis` script (as pip writes it: a file named chassis that
    calls main) each print their own name in the usage line."""
    proc = subprocess.run(
        [sys.executable, "-m", "chassis", "bench", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m chassis bench"), proc.stdout[:200]

    script = tmp_path / "chassis"
    script.write_text("import sys\nfrom chassis.__main__ import main\nsys.exit(main())\n")
    proc = subprocess.run(
        [sys.executable, str(script), "bench", "--k", "many"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: chassis bench"), proc.stderr[:200]
    assert "chassis bench: error: argument --k: invalid int value: 'many'" in proc.stderr


def test_cpu_line_is_in_words(capsys):
    """Oracle: chassis.cpu_info(), whose kernel and prefetch depth the line must say in words
    (not as key=value pairs)."""
    import chassis
    from chassis import bench

    info = chassis.cpu_info()
    rc = cli.main(["bench", "--quick", "--n", "600", "--queries", "20", "--ef", "10"])
    printed = capsys.readouterr().out
    assert rc == 0
    line = next(x for x in printed.splitlines() if x.startswith("cpu: "))
    assert "=" not in line and "kernels_available" not in line, line
    words = {"avx512": "AVX-512", "avx2": "AVX2", "neon": "NEON", "scalar": "without SIMD"}
    assert words[info["kernel"]] in line, line
    assert f"prefetch {info['prefetch_lines']} cache lines" in line, line
    assert line == "cpu: " + bench._cpu_text(info)


def test_cpu_words_for_other_machines():
    from chassis import bench

    forced = bench._cpu_text(
        {
            "arch": "x86_64",
            "vendor": "AuthenticAMD",
            "kernel": "avx2",
            "kernels_available": ["avx512", "avx2", "scalar"],
            "prefetch_policy": "zen4",
            "prefetch_lines": 32,
            "prefetch_cache": "L2",
        }
    )
    assert forced == (
        "AMD x86-64; distances computed with AVX2 instructions (chosen by CHASSIS_KERNEL; the "
        "CPU has AVX-512); searches prefetch 32 cache lines (2,048 bytes) of each neighbour's "
        "vector into the L2 cache (tuned for AMD Zen 4)"
    )
    plain = bench._cpu_text(
        {
            "arch": "aarch64",
            "vendor": "unknown",
            "kernel": "scalar",
            "kernels_available": ["scalar"],
        }
    )
    assert plain == "unknown ARM64; distances computed without SIMD instructions"
