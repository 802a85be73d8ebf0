"""Core benchmark (issue 2): chassis against chassisdb 0.10.0 and hnswlib 0.8.0.

For each data set and engine, in each of several passes:
  build    insert the whole base with M=16, ef_construction=200 on 2 threads
           (chassis add_batch(threads=2), hnswlib num_threads=2; chassisdb uses
           every core and has no limit), then flush / save (timed apart);
  open     a fresh open of the saved file, median of several;
  search   one thread, over an ef sweep: "batch" (chassis search_batch(threads=1),
           chassisdb search_batch, hnswlib knn_query(num_threads=1)) and "loop"
           (a Python loop of single-query calls); recall@k against exact ground
           truth, and queries per second;
  add      median latency of one add followed by flush (engines with a flush).
QPS at recall@k = 0.90 / 0.95 / 0.99 is interpolated linearly between sweep
points; every figure is reported as the median over passes and as a ratio
chassis / peer.

Data sets: "minilm" (/work/shared/data/debian-minilm, 45,056 x 384, 1,000
queries, ground truth given) and "clustered" (100,000 x 128 Gaussian clusters,
seed 0, ground truth computed exactly).

    python benchmarks/bench_core.py                   # full run (about 10-20 min on 2 cores)
    python benchmarks/bench_core.py --quick           # smoke run, small sizes, one pass
    python benchmarks/bench_core.py --datasets clustered --engines chassis,hnswlib --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    json_default,
    MINILM,
    TARGETS,
    EngineUnavailable,
    datasets_module,
    engine_status,
    fmt,
    machine_info,
    measure_sweep,
    median,
    qps_at_targets,
    ratio,
    table,
)

DEFAULT_EF = "10,16,24,32,48,64,96,128,192,256,400"
QUICK_EF = "10,20,40,80,160"


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one pass: a smoke run")
    p.add_argument("--datasets", default="minilm,clustered", help="minilm,clustered")
    p.add_argument("--engines", default="chassis,chassisdb,hnswlib",
                   help="chassis,chassisdb,hnswlib (also: usearch,faiss)")
    p.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    p.add_argument("--passes", type=int, help="passes per engine (3; --quick: 1)")
    p.add_argument("--ef", help=f"ef sweep ({DEFAULT_EF}; --quick: {QUICK_EF})")
    p.add_argument("--k", type=int, default=10, help="neighbours per query (10)")
    p.add_argument("--m", type=int, default=16, help="max_connections / M (16)")
    p.add_argument("--ef-construction", type=int, default=200, help="(200)")
    p.add_argument("--threads", type=int, default=2, help="build threads (2)")
    p.add_argument("--adds", type=int, help="single add+flush calls timed (200; --quick: 20)")
    p.add_argument("--opens", type=int, default=7, help="fresh opens timed (7)")
    p.add_argument("--minilm", default=str(MINILM), help="the debian-minilm folder")
    p.add_argument("--clustered-n", type=int, help="clustered base size (100000; --quick: 10000)")
    p.add_argument("--clustered-dims", type=int, default=128, help="(128)")
    p.add_argument("--queries", type=int, help="queries per data set (1000; --quick: 200)")
    p.add_argument("--workdir", help="where index files go (default: a temporary folder)")
    args = p.parse_args(argv)
    args.passes = args.passes or (1 if args.quick else 3)
    args.ef = [int(x) for x in _csv(args.ef or (QUICK_EF if args.quick else DEFAULT_EF))]
    args.adds = args.adds if args.adds is not None else (20 if args.quick else 200)
    args.clustered_n = args.clustered_n or (10_000 if args.quick else 100_000)
    args.queries = args.queries or (200 if args.quick else 1_000)
    args.datasets, args.engines = _csv(args.datasets), _csv(args.engines)
    return args


# ------------------------------------------------------------------ data
def load(name: str, args: argparse.Namespace) -> dict[str, Any]:
    ds = datasets_module()
    if name == "minilm":
        data = ds.load_npy_folder(args.minilm)
        base, queries, truth = data.base, data.queries, data.gt_ids
        metric = data.metric
        if args.quick:
            base, truth = base[:10_000], None  # given truth covers the full base only
        if args.queries < len(queries):
            queries = queries[: args.queries]
            truth = None if truth is None else truth[: args.queries]
    elif name == "clustered":
        base, queries = ds.clustered(args.clustered_n, args.clustered_dims, args.queries, seed=0)
        truth, metric = None, "euclidean"
    else:
        raise SystemExit(f"unknown data set {name!r}; known: minilm, clustered")
    if truth is None or truth.shape[1] < args.k:
        start = time.perf_counter()
        truth, _ = ds.ground_truth(base, queries, args.k, metric)
        print(f"  [{name}] exact ground truth in {time.perf_counter() - start:.1f} s", flush=True)
    return {
        "name": name, "base": np.ascontiguousarray(base, dtype=np.float32),
        "queries": np.ascontiguousarray(queries, dtype=np.float32),
        "truth": np.asarray(truth[:, : args.k]), "metric": metric,
    }


# ------------------------------------------------------------------ one pass
def run_pass(engine, data: dict[str, Any], args, folder: Path) -> dict[str, Any]:
    base, queries, truth = data["base"], data["queries"], data["truth"]
    path = str(folder / f"{engine.name}.index")
    out: dict[str, Any] = {}

    out["build_s"] = engine.build(path, base, metric=data["metric"], m=args.m,
                                  ef_construction=args.ef_construction, threads=args.threads)
    out["persist_s"] = engine.persist_seconds
    engine.close()
    out["file_bytes"] = _size(path)
    opens = [engine.open_seconds(path) for _ in range(args.opens)]
    out["open_ms"] = statistics.median(opens) * 1e3

    engine.open(path)
    # warm-up on 100 queries, then per ef and mode: repeated runs (at least 0.25 s in all,
    # at most 5), median rate
    sweep = measure_sweep(engine, queries, truth, args.k, args.ef,
                          min_seconds=0.25, max_runs=5, warmup=100)
    out["sweep"] = sweep
    out["qps_at"] = {mode: qps_at_targets(points, TARGETS) for mode, points in sweep.items()}

    out["add_flush_ms"] = None
    if engine.durable_adds and args.adds > 0:
        rng = np.random.default_rng(1)
        scale = 1e-3 * float(np.std(queries))
        latencies = []
        for i in range(args.adds):
            vector = queries[i % len(queries)] + rng.normal(0, scale, base.shape[1]).astype(
                np.float32)
            start = time.perf_counter()
            engine.add_and_flush(vector)
            latencies.append(time.perf_counter() - start)
        out["add_flush_ms"] = statistics.median(latencies) * 1e3
        out["add_flush_p90_ms"] = float(np.percentile(latencies, 90)) * 1e3
    engine.close()
    return out


def _size(path: str) -> int | None:
    p = Path(path)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size if p.exists() else None


# ------------------------------------------------------------------ summaries
def summarize(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over passes; QPS at each target is the median of the per-pass interpolations,
    reported only when every pass reached the target."""
    s: dict[str, Any] = {key: median(p.get(key) for p in passes)
                         for key in ("build_s", "persist_s", "open_ms", "add_flush_ms",
                                     "file_bytes")}
    modes = passes[0]["sweep"].keys()
    s["sweep"] = {
        mode: [{"ef": pts[0]["ef"], "recall": median(p["recall"] for p in pts),
                "qps": median(p["qps"] for p in pts)}
               for pts in zip(*(p["sweep"][mode] for p in passes))]
        for mode in modes
    }
    s["qps_at"], s["qps_at_how"] = {}, {}
    for mode in modes:
        s["qps_at"][mode], s["qps_at_how"][mode] = {}, {}
        for t in map(str, TARGETS):
            found = [p["qps_at"][mode][t] for p in passes]
            reached = all(how != "not-reached" for _, how in found)
            s["qps_at"][mode][t] = median(q for q, _ in found) if reached else None
            s["qps_at_how"][mode][t] = sorted({how for _, how in found})
    return s


def ratios(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """chassis / peer for every figure both have. QPS: > 1 = chassis faster; times: < 1."""
    r: dict[str, Any] = {key: ratio(ours.get(key), peer.get(key))
                         for key in ("build_s", "open_ms", "add_flush_ms", "file_bytes")}
    r["qps_at"] = {mode: {t: ratio(ours["qps_at"][mode][t], peer["qps_at"][mode].get(t))
                          for t in ours["qps_at"][mode]}
                   for mode in ours["qps_at"] if mode in peer["qps_at"]}
    return r


def _qps_cell(summary: dict[str, Any], mode: str, target: str) -> str:
    if mode not in summary["qps_at"]:
        return "n/a"
    value = summary["qps_at"][mode][target]
    lower_bound = "at-first-point" in summary["qps_at_how"][mode][target]
    return fmt(value) + ("*" if lower_bound and value is not None else "")


def report(name: str, data: dict[str, Any], results: dict[str, Any], args) -> None:
    n, d = data["base"].shape
    print(f"\n=== {name}: {n:,} x {d}, {len(data['queries']):,} queries, {data['metric']}; "
          f"M={args.m}, ef_construction={args.ef_construction}, build threads={args.threads}; "
          f"medians of {args.passes} pass(es)")
    targets = [str(t) for t in TARGETS]
    headers = ["engine", "build s", "flush/save s", "open ms", "add+flush ms"] + [
        f"{mode} QPS@{t}" for mode in ("batch", "loop") for t in targets]
    rows = []
    for engine, s in results.items():
        rows.append([engine, fmt(s["build_s"], ".2f"), fmt(s["persist_s"], ".3f"),
                     fmt(s["open_ms"], ".3f"), fmt(s["add_flush_ms"], ".2f")]
                    + [_qps_cell(s, mode, t) for mode in ("batch", "loop") for t in targets])
    print(table(headers, rows))
    print("(* the smallest ef already reached this recall: its QPS, a lower bound)")

    if "chassis" in results and len(results) > 1:
        print("\nchassis / peer (QPS: > 1 means chassis is faster; times: < 1 means faster)")
        rows = []
        for peer, s in results.items():
            if peer == "chassis":
                continue
            r = ratios(results["chassis"], s)
            rows.append([f"vs {peer}", fmt(r["build_s"], ".2f", "x"), fmt(r["open_ms"], ".2f", "x"),
                         fmt(r["add_flush_ms"], ".2f", "x")]
                        + [fmt(r["qps_at"].get(mode, {}).get(t), ".2f", "x")
                           for mode in ("batch", "loop") for t in targets])
        print(table(["", "build", "open", "add+flush"]
                    + [f"{mode} QPS@{t}" for mode in ("batch", "loop") for t in targets], rows))

    for engine, s in results.items():
        for mode, points in s["sweep"].items():
            print(f"\n{engine} {mode} (1 thread)")
            print(table(["ef", f"recall@{args.k}", "QPS"],
                        [[str(p["ef"]), f"{p['recall']:.4f}", fmt(p["qps"])] for p in points]))


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    engines, notes = engine_status(args.engines)
    for note in notes:
        print(f"note: {note}", flush=True)
    if not engines:
        print("no engine to run", file=sys.stderr)
        return 1
    versions = {name: e.version for name, e in engines.items()}
    print("engines: " + ", ".join(f"{n} {v}" for n, v in versions.items()), flush=True)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="chassis-bench-core-"))
    workdir.mkdir(parents=True, exist_ok=True)
    everything: dict[str, Any] = {"machine": machine_info(), "versions": versions,
                                  "args": {k: v for k, v in vars(args).items()},
                                  "notes": notes, "datasets": {}}
    try:
        for name in args.datasets:
            data = load(name, args)
            per_engine: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
            skipped: set[str] = set()  # engines that cannot do this data set
            for n_pass in range(args.passes):
                for engine_name, engine in engines.items():
                    if engine_name in skipped:
                        continue
                    folder = workdir / f"{name}-{engine_name}-{n_pass}"
                    folder.mkdir(parents=True, exist_ok=True)
                    print(f"  [{name}] pass {n_pass + 1}/{args.passes}: {engine_name} ...",
                          end="", flush=True)
                    start = time.perf_counter()
                    try:
                        per_engine[engine_name].append(run_pass(engine, data, args, folder))
                        print(f" {time.perf_counter() - start:.1f} s", flush=True)
                    except EngineUnavailable as exc:
                        print(" skipped", flush=True)
                        skipped.add(engine_name)
                        notes.append(f"{name}: skipped {engine_name}: {exc}")
                    except Exception as exc:  # keep the other engines' figures
                        print(" FAILED", flush=True)
                        traceback.print_exc()
                        notes.append(f"{name}: {engine_name} failed: {exc!r}")
                    finally:
                        try:
                            engine.close()
                        except Exception:
                            pass
                        shutil.rmtree(folder, ignore_errors=True)
            results = {e: summarize(p) for e, p in per_engine.items() if p}
            report(name, data, results, args)
            everything["datasets"][name] = {
                "shape": list(data["base"].shape), "queries": len(data["queries"]),
                "metric": data["metric"], "passes": per_engine, "median": results,
                "ratios": {peer: ratios(results["chassis"], s) for peer, s in results.items()
                           if peer != "chassis" and "chassis" in results},
            }
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    notes_all = notes + [n for e in engines.values() for n in e.notes]
    if notes_all:
        print("\nnotes:\n" + "\n".join(f"- {n}" for n in dict.fromkeys(notes_all)))
    everything["notes"] = list(dict.fromkeys(notes_all))
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1, default=json_default))
        print(f"\nwrote {args.json}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
