"""Speed benchmark: chassis against hnswlib, usearch, faiss (IndexHNSWFlat) and chassisdb.

With 8-bit codes (engines outside the default set): chassis-int8 (`quantization="int8"`: codes
walked, float32 vectors reranked) and chassis-codes (`precision="int8"`: codes only) against
faiss-sq8 (IndexHNSWSQ, QT_8bit) and usearch-i8; recall is always against the exact float32
ground truth. chassis-int8's targets: 1t QPS at recall 0.95 >= 2x the best float32 peer and
>= 1.3x the best 8-bit peer (batch and loop), build time <= chassis's float32 build. With
4-bit codes: chassis-int4 (`quantization="int4"`) against faiss-sq4 (QT_4bit), no target.

Every engine builds the same index (M=16, ef_construction=200) on the same data, in the same run:

  build     the whole base inserted on 2 threads (chassis add_batch(threads=2), hnswlib
            add_items(num_threads=2), usearch add(threads=2), faiss omp_set_num_threads(2);
            chassisdb has no thread control and uses every core), then flushed / saved (not
            timed), closed and opened again from the file;
  open      a fresh open of the saved file, median of --opens (chassis: maps the file;
            chassis-memory: VectorIndex.load; hnswlib, faiss: read the whole file; usearch:
            a view);
  add       after the sweep, median latency of one add followed by flush (--adds of them), for
            the engines whose single add can be made durable (chassis, chassisdb);
  1t batch  one search call for all queries on one thread (chassis search_batch(threads=1),
            hnswlib knn_query(num_threads=1), usearch search(threads=1), faiss with 1 OpenMP
            thread, chassisdb search_batch);
  1t loop   a Python loop of single-query calls;
  2t batch  the engine's own multi-thread batch call with 2 threads (chassis
            search_batch(threads=2), hnswlib knn_query(num_threads=2), usearch search(threads=2),
            faiss omp_set_num_threads(2)); chassisdb's search_batch has no thread control and
            runs on the calling thread, so two Python threads each search half of the queries
            with it (ctypes releases the GIL);
  per call  a tiny index (100 x 16) searched with k=1: microseconds per call of a loop of
            single-query calls, and of the batch call with one query per call.

An ef sweep gives recall@k (against exact ground truth) and QPS for each search style; QPS at
recall@k = 0.90 / 0.95 / 0.99 is interpolated linearly between sweep points. Inside a pass the
engines are built one after the other and then all searched at each ef in turn (the order
rotates per ef and per pass, reversed on odd passes), so background load falls on every engine
alike; at each ef and mode the engines take turns call by call (a call searches the whole query
set once), each called at least --runs times and until its calls add up to --min-seconds; an
engine's QPS at that point is from its median call. So a burst of background load lands on a
call or two of every engine, never on all of one engine's. Figures are medians over passes,
each also given as a ratio to the best peer. Build times, which background load moves most,
are medians of --build-passes builds (5: each pass's, then build-only rounds in the same
rotating order). For chassis the distances computed per query (chassis._chassis._search_counters(),
differences around each 1t search_batch) are reported along the sweep.

Targets (printed as PASS / FAIL): chassis 1t QPS at recall 0.95 >= 1.15x the best peer's on
every data set, in batch and in loop; chassis build time <= 0.9x the best peer's; chassis 2t
batch >= 1.8x its own 1t batch at recall 0.95.

Data sets (toolkit.load_dataset): "minilm" ($CHASSIS_DATA/debian-minilm, by default
<repo>/../shared/data/debian-minilm: 45,056 x 384 unit vectors, euclidean, 1,000 queries,
ground truth given) and "clustered" (100,000 x 128 Gaussian clusters, seed 0, euclidean,
ground truth computed exactly).

    python benchmarks/bench_speed.py                  # full run (about 25 min on 2 cores)
    python benchmarks/bench_speed.py --quick          # smoke run: 10,000 rows, 200 queries, 1 pass
    python benchmarks/bench_speed.py --datasets clustered --engines chassis,hnswlib --json out.json
    python benchmarks/bench_speed.py --engines chassis,chassisdb,hnswlib --json   # to results/
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from chassis import datasets
from chassis._bench import (
    TARGETS,
    EngineUnavailable,
    best_peer,
    engine_status,
    fmt,
    median,
    median_qps_at,
    path_bytes,
    qps_at_targets,
    qps_cell,
    ratio,
    summarize,
    sweep_points,
    table,
    timed,
    versus_best_peer,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toolkit import (  # noqa: E402
    MINILM,
    Parser,
    add_json_option,
    csv,
    load_dataset,
    run_record,
    work_folder,
    write_results,
)

DEFAULT_EF = "10,16,24,32,48,64,96,128,192,256"
QUICK_EF = "10,20,40,80,160"
ALL_ENGINES = "chassis,chassis-memory,hnswlib,usearch,faiss,chassisdb"
# Our own engines: never a "peer" of each other.
OURS = ("chassis", "chassis-memory", "chassis-int8", "chassis-int4", "chassis-codes")
# Peers storing 8-bit codes: the quantized mode's own targets are against these and, apart,
# against the float32 peers.
EIGHT_BIT = ("faiss-sq8", "usearch-i8")
GOAL_INT8_FLOAT, GOAL_INT8_8BIT = 2.0, 1.3
SWEEP_MODES = ("batch", "loop", "batch2")  # 1t batch, 1t loop, 2t batch
MAX_CALLS = 1_000  # per engine, sweep point and mode (a bound for near-zero call times)
MODE_LABEL = {"batch": "1t batch", "loop": "1t loop", "batch2": "2t batch"}
GOAL_QPS, GOAL_BUILD, GOAL_SCALING = 1.15, 0.90, 1.8  # the speed targets (docstring)


def _order(names: list[str], n_pass: int, step: int = 0) -> list[str]:
    """Engine order: rotated by pass and step, reversed on odd passes."""
    if not names:
        return []
    shift = (n_pass + step) % len(names)
    order = names[shift:] + names[:shift]
    return order[::-1] if n_pass % 2 else order


# ------------------------------------------------------------------ options
def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 10,000 rows, 200 queries, 1 pass, short sweep, fewer calls",
    )
    p.add_argument("--datasets", default="minilm,clustered", help="minilm,clustered")
    p.add_argument("--engines", default=ALL_ENGINES, help=f"({ALL_ENGINES})")
    p.sized("--passes", full=3, quick=1, help="passes")
    p.sized(
        "--build-passes",
        full=5,
        quick=1,
        help="builds per engine for the build time: the passes' builds plus build-only "
        "rounds, the engines taking turns",
    )
    p.add_argument("--ef", help=f"ef sweep ({DEFAULT_EF}; --quick: {QUICK_EF})")
    p.add_argument("--k", type=int, default=10, help="neighbours per query (10)")
    p.add_argument("--m", type=int, default=16, help="max_connections / M (16)")
    p.add_argument("--ef-construction", type=int, default=200, help="(200)")
    p.add_argument("--threads", type=int, default=2, help="build threads (2)")
    p.add_argument("--search-threads", type=int, default=2, help="threads of the 2t batch (2)")
    p.sized(
        "--runs",
        full=5,
        quick=1,
        help="per sweep point and mode: calls (the whole query set each) per engine at "
        "least, the engines taking turns call by call; the median call counts",
    )
    p.sized(
        "--min-seconds",
        full=0.6,
        quick=0.0,
        help="per sweep point and mode: an engine is called until its calls add up to this long",
    )
    p.add_argument(
        "--warmup", type=int, default=50, help="queries searched untimed before each point (50)"
    )
    p.sized("--calls", full=20_000, quick=5_000, help="per-call overhead: searches per run")
    p.sized("--call-runs", full=5, quick=3, help="per-call overhead: runs, median taken")
    p.add_argument("--call-ef", type=int, default=10, help="per-call overhead: ef (10)")
    p.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead")
    p.sized("--opens", full=7, quick=3, help="fresh opens timed per engine and pass")
    p.sized("--adds", full=200, quick=20, help="single add+flush calls timed")
    p.add_argument("--minilm", default=str(MINILM), help="the debian-minilm folder")
    p.sized("--clustered-n", full=100_000, quick=10_000, help="clustered base size")
    p.add_argument("--clustered-dims", type=int, default=128, help="(128)")
    p.sized("--queries", full=1_000, quick=200, help="queries per data set")
    p.add_argument("--workdir", help="where index files go (default: a temporary folder)")
    add_json_option(p)
    args = p.parse_args(argv)
    args.build_passes = max(args.passes, args.build_passes)
    args.ef = [int(x) for x in csv(args.ef or (QUICK_EF if args.quick else DEFAULT_EF))]
    args.datasets, args.engines = csv(args.datasets), csv(args.engines)
    return args


# ------------------------------------------------------------------ per-call overhead
def per_call_overhead(
    engines: dict[str, Any], args, folder: Path, notes: list[str]
) -> dict[str, Any]:
    """{engine: {"loop_us", "batch1_us", "runs"}}: microseconds per search call (k=1) on a tiny
    index of 100 vectors of 16 dims, median of the runs; the engines alternate inside a run."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((100, 16)).astype(np.float32)
    queries = rng.standard_normal((args.calls, 16)).astype(np.float32)
    ready = []
    for name, engine in engines.items():
        path = str(folder / f"tiny-{name}.index")
        try:
            engine.build(
                path,
                base,
                metric="euclidean",
                m=args.m,
                ef_construction=args.ef_construction,
                threads=1,
            )
            engine.close()
            engine.open(path)
            engine.set_ef(args.call_ef)
            for mode in ("loop", "batch1"):  # warm-up
                engine.search(mode, queries[:1000], 1)
            ready.append(name)
        except Exception as exc:
            traceback.print_exc()
            notes.append(f"per-call overhead: {name} failed: {exc!r}")
            engine.close()
    runs: dict[str, dict[str, list[float]]] = {n: {"loop": [], "batch1": []} for n in ready}
    for run in range(args.call_runs):
        for name in _order(ready, run):
            for mode in ("loop", "batch1"):
                _, seconds = engines[name].search(mode, queries, 1)
                runs[name][mode].append(seconds / len(queries) * 1e6)
    for name in ready:
        engines[name].close()
    return {
        n: {"loop_us": median(r["loop"]), "batch1_us": median(r["batch1"]), "runs": r}
        for n, r in runs.items()
    }


# ------------------------------------------------------------------ one pass
def _build(engine: Any, path: str, data: dict[str, Any], args) -> float:
    """Seconds `engine` takes to build the index of `data` at `path`, as the options ask."""
    return engine.build(
        path,
        data["base"],
        metric=data["metric"],
        m=args.m,
        ef_construction=args.ef_construction,
        threads=args.threads,
    )


def run_pass(
    engines: dict[str, Any], data: dict[str, Any], args, folder: Path, n_pass: int, notes: list[str]
) -> dict[str, dict[str, Any]]:
    """Build every engine (one after the other), then sweep ef with all of them open, the
    engines taking turns at each ef. {engine: figures} for the engines that got through."""
    queries, truth, name = data["queries"], data["truth"], data["name"]
    out: dict[str, dict[str, Any]] = {}
    for engine_name in _order(list(engines), n_pass):
        engine = engines[engine_name]
        path = str(folder / f"{engine_name}.index")
        print(
            f"  [{name}] pass {n_pass + 1}/{args.passes}: build {engine_name} ...",
            end="",
            flush=True,
        )
        try:
            build_s = _build(engine, path, data, args)
            persist_s = engine.persist_seconds
            engine.close()
            opens = [engine.open_seconds(path) for _ in range(args.opens)]
            engine.open(path)
            out[engine_name] = {
                "build_s": build_s,
                "persist_s": persist_s,
                "file_bytes": path_bytes(path),
                "open_ms": median(opens) * 1e3,
                "sweep": {mode: [] for mode in SWEEP_MODES},
            }
            print(f" {build_s:.2f} s", flush=True)
        except EngineUnavailable as exc:
            print(" skipped", flush=True)
            notes.append(f"{name}: skipped {engine_name}: {exc}")
            engine.close()
        except Exception as exc:
            print(" FAILED", flush=True)
            traceback.print_exc()
            notes.append(f"{name}: {engine_name} build failed: {exc!r}")
            engine.close()

    distances: list[dict[str, float]] = []
    start = time.perf_counter()
    recall_at_k = datasets.recall_at_k
    for name_ in list(out):  # warm-up: pages in, caches warm, lazy setup done
        try:
            engines[name_].set_ef(args.ef[0])
            for mode in SWEEP_MODES:
                engines[name_].search(mode, queries[: args.warmup], args.k)
        except Exception as exc:
            traceback.print_exc()
            notes.append(f"{name}: {name_} failed to warm up: {exc!r}")
            engines[name_].close()
            del out[name_]
    for step, ef in enumerate(args.ef):
        for engine_name in list(out):
            engines[engine_name].set_ef(ef)
        # Engines take turns call by call (each call: the whole query set once) until each has
        # had --runs calls adding up to --min-seconds, so a burst of background load lands on
        # a call or two of every engine, not on all of one's; QPS is from each engine's median
        # call.
        for mode in SWEEP_MODES:
            times: dict[str, list[float]] = {e: [] for e in out}
            recalls: dict[str, float] = {}
            turn = 0
            while True:
                due = [
                    e
                    for e, t in times.items()
                    if len(t) < args.runs or (sum(t) < args.min_seconds and len(t) < MAX_CALLS)
                ]
                if not due:
                    break
                for engine_name in _order(due, n_pass, step + turn):
                    engine = engines[engine_name]
                    try:
                        ids, seconds = engine.search(mode, queries, args.k)
                    except Exception as exc:
                        traceback.print_exc()
                        notes.append(f"{name}: {engine_name} failed at ef={ef}: {exc!r}")
                        engine.close()
                        del out[engine_name], times[engine_name]
                        continue
                    times[engine_name].append(seconds)
                    if len(times[engine_name]) == 1:
                        recalls[engine_name] = recall_at_k(ids, truth, args.k)
                        if (
                            mode == "batch"
                            and engine_name == "chassis"
                            and engine.counted is not None
                        ):
                            searches, dists = engine.counted  # (the file-backed one)
                            distances.append(
                                {
                                    "ef": ef,
                                    "recall": recalls[engine_name],
                                    "distances": dists / max(searches, 1),
                                    "searches": searches,
                                    "queries": len(queries),
                                }
                            )
                turn += 1
            for engine_name, t in times.items():
                out[engine_name]["sweep"][mode].append(
                    {
                        "ef": ef,
                        "recall": recalls[engine_name],
                        "qps": len(queries) / max(median(t), 1e-12),
                        "runs": len(t),
                    }
                )
        print(
            f"  [{name}] pass {n_pass + 1}/{args.passes}: ef {ef} done "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    for engine_name, figures in out.items():
        figures.update(add_flush(engines[engine_name], data, args, notes))
        engines[engine_name].close()
        figures["qps_at"] = {
            mode: qps_at_targets(points) for mode, points in figures["sweep"].items()
        }
    if "chassis" in out:
        out["chassis"]["distances"] = distances
        out["chassis"]["distances_at"] = qps_at_targets(distances, key="distances")
    return out


def add_flush(engine: Any, data: dict[str, Any], args, notes: list[str]) -> dict[str, Any]:
    """{"add_flush_ms", "add_flush_p90_ms"}: latency of one add followed by flush, --adds
    times, on the open index (after the sweep: the adds change it); None for an engine
    without a durable single add."""
    if not engine.durable_adds or args.adds <= 0:
        return {"add_flush_ms": None}
    queries = data["queries"]
    rng = np.random.default_rng(1)
    scale = 1e-3 * float(np.std(queries))
    latencies = []
    try:
        for i in range(args.adds):
            noise = rng.normal(0, scale, queries.shape[1]).astype(np.float32)
            vector = queries[i % len(queries)] + noise
            _, seconds = timed(lambda v=vector: engine.add_and_flush(v))
            latencies.append(seconds)
    except Exception as exc:
        traceback.print_exc()
        notes.append(f"{data['name']}: {engine.name} add+flush failed: {exc!r}")
        return {"add_flush_ms": None}
    return {
        "add_flush_ms": median(latencies) * 1e3,
        "add_flush_p90_ms": float(np.percentile(latencies, 90)) * 1e3,
    }


def build_rounds(
    engines: dict[str, Any],
    data: dict[str, Any],
    args,
    workdir: Path,
    notes: list[str],
    names: list[str],
) -> dict[str, list[float]]:
    """The build-only rounds after the passes (--build-passes beyond --passes): every engine
    builds again, in the rotating order, and the index is thrown away. A build is the figure
    this machine's background load moves most (one engine's three builds in one run have
    spread by 38%), so it gets more samples than the sweep. {engine: [build seconds]}."""
    out: dict[str, list[float]] = {e: [] for e in names}
    name = data["name"]
    for n_round in range(args.passes, args.build_passes):
        folder = workdir / f"{name}-build-{n_round}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            for engine_name in _order(names, n_round):
                engine = engines[engine_name]
                print(
                    f"  [{name}] build {n_round + 1}/{args.build_passes}: {engine_name} ...",
                    end="",
                    flush=True,
                )
                try:
                    seconds = _build(engine, str(folder / f"{engine_name}.index"), data, args)
                    out[engine_name].append(seconds)
                    print(f" {seconds:.2f} s", flush=True)
                except Exception as exc:
                    print(" FAILED", flush=True)
                    notes.append(f"{name}: {engine_name} build-only round failed: {exc!r}")
                finally:
                    engine.close()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return out


# ------------------------------------------------------------------ summaries
def summarize_speed(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """chassis._bench.summarize (medians over passes, QPS at targets only when every pass reached
    them), plus the 2t/1t scaling and, for chassis, distances per query."""
    s = summarize(passes)
    s["add_flush_p90_ms"] = median(p.get("add_flush_p90_ms") for p in passes)
    t95 = "0.95"
    s["scaling"] = ratio(s["qps_at"]["batch2"][t95]["qps"], s["qps_at"]["batch"][t95]["qps"])
    if "distances" in passes[0]:
        s["distances"] = [
            {
                "ef": pts[0]["ef"],
                "recall": median(p["recall"] for p in pts),
                "distances": median(p["distances"] for p in pts),
            }
            for pts in zip(*(p["distances"] for p in passes))
        ]
        s["distances_at"] = median_qps_at([p["distances_at"] for p in passes])
    return s


# columns of the summary table: (key, header, getter, better) where better is "high" or "low"
def _columns(overhead: dict[str, Any]) -> list[tuple[str, str, Any, str]]:
    def qps(mode: str, t: str):
        return lambda name, s: s["qps_at"][mode][t]["qps"]

    cols = [
        ("build_s", "build s", lambda name, s: s["build_s"], "low"),
        ("open_ms", "open ms", lambda name, s: s["open_ms"], "low"),
        ("add_flush_ms", "add+flush ms", lambda name, s: s["add_flush_ms"], "low"),
    ]
    cols += [(f"batch@{t}", f"1t batch QPS@{t:.2f}", qps("batch", str(t)), "high") for t in TARGETS]
    cols += [
        ("loop@0.95", "1t loop QPS@0.95", qps("loop", "0.95"), "high"),
        ("batch2@0.95", "2t batch QPS@0.95", qps("batch2", "0.95"), "high"),
        ("scaling", "2t/1t", lambda name, s: s["scaling"], "high"),
    ]
    if overhead:
        cols += [
            ("loop_us", "loop us/call", lambda n, s: overhead.get(n, {}).get("loop_us"), "low"),
            (
                "batch1_us",
                "batch(1) us/call",
                lambda n, s: overhead.get(n, {}).get("batch1_us"),
                "low",
            ),
        ]
    return cols


def versus_best(
    results: dict[str, Any], overhead: dict[str, Any], who: str = "chassis"
) -> dict[str, Any]:
    """{column: {"chassis", "best_peer", "peer_value", "ratio"}}: `who` (one of ours) / the
    best peer (chassis._bench.versus_best_peer over the summary table's columns)."""
    columns = [(key, getter, better) for key, _, getter, better in _columns(overhead)]
    return versus_best_peer(results, columns, who, OURS)


def _cell(key: str, name: str, s: dict[str, Any], value: float | None) -> str:
    if key == "build_s":
        return fmt(value, ".2f")
    if key in ("open_ms", "add_flush_ms"):
        return fmt(value, ".3f" if key == "open_ms" else ".2f")
    if key == "scaling":
        return fmt(value, ".2f", "x")
    if key.endswith("_us"):
        return fmt(value, ".2f")
    mode, t = key.split("@")
    return qps_cell(s, mode, t)


def targets(
    name: str, results: dict[str, Any], vs: dict[str, Any], who: str = "chassis"
) -> list[dict[str, Any]]:
    """The speed targets' PASS / FAIL checks for one data set, for `who` (one of ours)."""
    checks = []
    if who not in results:
        return checks
    label = name if who == "chassis" else f"{name} ({who})"

    def check(what: str, key: str, goal: float, higher: bool) -> None:
        v = vs.get(key, {})
        checks.append(
            _target_row(
                label, what, v.get("chassis"), v.get("best_peer"), v.get("peer_value"), goal, higher
            )
        )

    if who == "chassis-int8":
        return checks + int8_targets(label, results)
    if who in ("chassis-codes", "chassis-int4"):
        return checks  # reported against the peers in the sweeps (faiss-sq4 for int4); no target
    check("1t batch QPS@0.95 vs best peer", "batch@0.95", GOAL_QPS, True)
    check("1t loop QPS@0.95 vs best peer", "loop@0.95", GOAL_QPS, True)
    check("build time vs best peer", "build_s", GOAL_BUILD, False)
    scaling = results[who].get("scaling")
    checks.append(
        {
            "dataset": label,
            "what": "2t batch / own 1t batch at 0.95",
            "goal": GOAL_SCALING,
            "higher": True,
            "ratio": scaling,
            "verdict": "PASS" if scaling is not None and scaling >= GOAL_SCALING else "FAIL",
        }
    )
    return checks


def _target_row(
    label: str,
    what: str,
    value: float | None,
    peer: str | None,
    peer_value: float | None,
    goal: float,
    higher: bool,
) -> dict[str, Any]:
    """One PASS / FAIL / n/a check: `value` over `peer_value` against `goal` (at least it when
    `higher`, else at most)."""
    r = ratio(value, peer_value)
    if peer_value is None:
        verdict = "n/a"
    else:
        verdict = "PASS" if r is not None and (r >= goal if higher else r <= goal) else "FAIL"
    return {
        "dataset": label,
        "what": what,
        "goal": goal,
        "higher": higher,
        "ratio": r,
        "chassis": value,
        "best_peer": peer,
        "peer_value": peer_value,
        "verdict": verdict,
    }


def int8_targets(label: str, results: dict[str, Any]) -> list[dict[str, Any]]:
    """The quantized mode's targets: 1t QPS at recall 0.95 (batch and loop) at least 2x the
    best float32 peer's and 1.3x the best 8-bit peer's; build time at most chassis's float one."""
    who = "chassis-int8"
    mine = results[who]
    checks = []

    def add(what, value, peer, peer_value, goal, higher):
        checks.append(_target_row(label, what, value, peer, peer_value, goal, higher))

    for mode in ("batch", "loop"):
        qps = {n: s["qps_at"][mode]["0.95"]["qps"] for n, s in results.items()}
        value = qps[who]
        floats = {n: v for n, v in qps.items() if n not in EIGHT_BIT}
        eights = {n: v for n, v in qps.items() if n in EIGHT_BIT}
        peer, peer_value = best_peer(floats, "high", OURS)
        add(f"1t {mode} QPS@0.95 vs float peer", value, peer, peer_value, GOAL_INT8_FLOAT, True)
        peer, peer_value = best_peer(eights, "high", OURS)
        add(f"1t {mode} QPS@0.95 vs 8-bit peer", value, peer, peer_value, GOAL_INT8_8BIT, True)
    float_build = results.get("chassis", {}).get("build_s")
    add("build time vs chassis float32", mine.get("build_s"), "chassis", float_build, 1.0, False)
    return checks


def _check_line(c: dict[str, Any]) -> str:
    sign = ">=" if c["higher"] else "<="
    text = (
        f"{c['verdict']:<4}  {c['dataset']:<27} {c['what']:<33} {fmt(c['ratio'], '.2f', 'x'):>6}"
        f"  (target {sign} {c['goal']:.2f}x"
    )
    if "best_peer" in c:
        spec = ".2f" if c["what"].startswith("build") else ",.0f"
        text += (
            f"; chassis {fmt(c['chassis'], spec)}, {c['best_peer'] or 'no peer'} "
            f"{fmt(c['peer_value'], spec)}"
        )
    return text + ")"


# ------------------------------------------------------------------ report
def report_overhead(overhead: dict[str, Any], args) -> None:
    print(
        f"\n=== per-call overhead: 100 x 16 index, k=1, ef={args.call_ef}, {args.calls:,} calls "
        f"per run, median of {args.call_runs} runs (microseconds per call)"
    )
    best = {
        key: best_peer({n: s[key] for n, s in overhead.items()}, "low", OURS)
        for key in ("loop_us", "batch1_us")
    }
    rows = []
    for name, s in overhead.items():
        cells = [name]
        for key in ("loop_us", "batch1_us"):
            cells += [fmt(s[key], ".2f"), fmt(ratio(s[key], best[key][1]), ".2f", "x")]
        rows.append(cells)
    print(
        table(
            ["engine", "loop of search(q)", "/ best peer", "loop of batch(1 query)", "/ best peer"],
            rows,
        )
    )
    print("(faiss has no single-query call: its loop is search(q[None, :]), like its batch(1))")


def report(
    name: str,
    data: dict[str, Any],
    results: dict[str, Any],
    overhead: dict[str, Any],
    vs_all: dict[str, dict[str, Any]],
    checks: list[dict[str, Any]],
    args,
) -> None:
    n, d = data["base"].shape
    print(
        f"\n=== {name}: {n:,} x {d}, {len(data['queries']):,} queries, {data['metric']}; "
        f"M={args.m}, ef_construction={args.ef_construction}, build threads={args.threads}, "
        f"2t = {args.search_threads} search threads; medians of {args.passes} pass(es) "
        f"({args.build_passes} builds for the build time), each "
        f"point the median call of >= {args.runs} per engine adding up to >= "
        f"{args.min_seconds:g} s, the engines taking turns"
    )
    cols = _columns(overhead)
    rows = [
        [engine] + [_cell(key, engine, s, get(engine, s)) for key, _, get, _ in cols]
        for engine, s in results.items()
    ]
    for who, vs in vs_all.items():
        if vs:
            rows.append(
                [f"{who} / best peer"] + [fmt(vs[key]["ratio"], ".2f", "x") for key, *_ in cols]
            )
    vs = next((v for v in vs_all.values() if v), None)
    if vs:
        rows.append(["  (best peer)"] + [vs[key]["best_peer"] or "-" for key, *_ in cols])
    print(table(["engine"] + [header for _, header, _, _ in cols], rows))
    print(
        "(* the smallest ef already reached this recall: its QPS, a lower bound; "
        "- not reached at the largest ef)"
    )

    print("\nQPS at every recall target and mode")
    targets_s = [str(t) for t in TARGETS]
    rows = [
        [engine] + [qps_cell(s, mode, t) for mode in SWEEP_MODES for t in targets_s]
        for engine, s in results.items()
    ]
    print(
        table(["engine"] + [f"{MODE_LABEL[m]}@{t}" for m in SWEEP_MODES for t in targets_s], rows)
    )

    chassis = results.get("chassis")
    if chassis and chassis.get("distances_at"):
        print(
            "\nchassis distances computed per query (1t search_batch): "
            + ", ".join(f"@{t} {fmt(chassis['distances_at'][t]['qps'])}" for t in targets_s)
        )

    for engine, s in results.items():
        extra = engine == "chassis" and bool(s.get("distances"))
        headers = ["ef", f"recall@{args.k}"] + [f"{MODE_LABEL[m]} QPS" for m in SWEEP_MODES]
        if extra:
            headers.append("distances/query")
        rows = []
        for i, p in enumerate(s["sweep"]["batch"]):
            row = [str(p["ef"]), f"{p['recall']:.4f}"] + [
                fmt(s["sweep"][m][i]["qps"]) for m in SWEEP_MODES
            ]
            if extra:
                row.append(fmt(s["distances"][i]["distances"]))
            rows.append(row)
        print(f"\n{engine} sweep")
        print(table(headers, rows, align_first="right"))

    if checks:
        print(f"\nTARGETS ({name})")
        for c in checks:
            print("  " + _check_line(c))


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        engines, notes = engine_status(args.engines)
    except ValueError as exc:  # a name that is no engine
        raise SystemExit(str(exc)) from None
    for note in notes:
        print(f"note: {note}", flush=True)
    if not engines:
        print("no engine to run", file=sys.stderr)
        return 1
    for engine in engines.values():
        engine.search_threads = args.search_threads
    versions = {name: e.version for name, e in engines.items()}
    print("engines: " + ", ".join(f"{n} {v}" for n, v in versions.items()), flush=True)
    load_before = os.getloadavg()
    print(
        f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} "
        f"on {os.cpu_count()} cores",
        flush=True,
    )
    started = time.perf_counter()

    workdir = work_folder(args.workdir, "chassis-bench-speed-")
    everything = run_record(args, versions=versions, load_before=load_before, datasets={})
    all_checks: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    overhead: dict[str, Any] = {}
    try:
        if not args.no_overhead:
            folder = workdir / "overhead"
            folder.mkdir(parents=True, exist_ok=True)
            print("  per-call overhead ...", end="", flush=True)
            start = time.perf_counter()
            overhead = per_call_overhead(engines, args, folder, notes)
            print(f" {time.perf_counter() - start:.1f} s", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
            report_overhead(overhead, args)
            everything["overhead"] = overhead

        for name in args.datasets:
            data = load_dataset(
                name,
                minilm=args.minilm,
                queries=args.queries,
                k=args.k,
                quick=args.quick,
                clustered_n=args.clustered_n,
                clustered_dims=args.clustered_dims,
            )
            per_engine: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
            for n_pass in range(args.passes):
                folder = workdir / f"{name}-{n_pass}"
                folder.mkdir(parents=True, exist_ok=True)
                try:
                    for engine_name, figures in run_pass(
                        engines, data, args, folder, n_pass, notes
                    ).items():
                        per_engine[engine_name].append(figures)
                finally:
                    for engine in engines.values():
                        try:
                            engine.close()
                        except Exception:
                            pass
                    shutil.rmtree(folder, ignore_errors=True)
            extra = build_rounds(
                engines, data, args, workdir, notes, [e for e, p in per_engine.items() if p]
            )
            # an engine that missed a pass is summarised over the passes it has
            results = {e: summarize_speed(p) for e, p in per_engine.items() if p}
            for e, s in results.items():
                s["builds_s"] = [p["build_s"] for p in per_engine[e]] + extra.get(e, [])
                s["build_s"] = median(s["builds_s"])
            vs = {who: versus_best(results, overhead, who) for who in OURS}
            checks = [c for who in OURS for c in targets(name, results, vs[who], who)]
            all_checks += checks
            report(name, data, results, overhead, vs, checks, args)
            everything["datasets"][name] = {
                "shape": list(data["base"].shape),
                "queries": len(data["queries"]),
                "metric": data["metric"],
                "passes": per_engine,
                "median": results,
                "vs_best_peer": vs,
                "targets": checks,
            }
            points += sweep_points(name, {e: s["sweep"] for e, s in results.items()})
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    if all_checks:
        print("\nTARGETS")
        for c in all_checks:
            print("  " + _check_line(c))
        print(
            "scaling 2t/1t batch at recall 0.95: "
            + "; ".join(
                f"{ds}: "
                + ", ".join(
                    f"{e} {fmt(s.get('scaling'), '.2f', 'x')}"
                    for e, s in everything["datasets"][ds]["median"].items()
                )
                for ds in everything["datasets"]
            )
        )

    load_after = os.getloadavg()
    elapsed = time.perf_counter() - started
    print(
        f"\nload average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; "
        f"run took {elapsed:.0f} s"
    )
    notes_all = (
        notes
        + [n for e in engines.values() for n in e.notes]
        + [e.threads2_note for e in engines.values() if e.threads2_note]
    )
    if max(load_before[0], load_after[0]) > 0.5:
        notes_all.append("the machine had other load (load average > 0.5): figures are noisy")
    if notes_all:
        print("\nnotes:\n" + "\n".join(f"- {n}" for n in dict.fromkeys(notes_all)))
    everything.update(
        notes=list(dict.fromkeys(notes_all)),
        targets=all_checks,
        load_after=load_after,
        seconds=elapsed,
    )
    write_results(args.json, "bench_speed", everything, points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
