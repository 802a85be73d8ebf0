"""Placement benchmark: in-memory indexes and balanced NUMA placement.

Four variants of the same index, built and searched the same way (M=16, ef_construction=200,
--threads 2 build threads, add_batch of the whole base):

  file      chassis.VectorIndex(path, dims, options): file-backed, its pages are the page cache's
  balanced  chassis.VectorIndex(None, dims, IndexOptions(placement="balanced")): in memory, the
            default; a batch of >= 16,384 items is written by all threads, each a stretch
  local     chassis.VectorIndex(None, dims, IndexOptions(placement="local")): in memory, one
            thread writes the new rows
  hnswlib   hnswlib.Index (in memory by nature), the peer (chassis._bench.HnswlibEngine)

  build    in each of --passes passes the variants are built one after another, in an order
           that rotates from pass to pass, and all stay open for the search. Timed: add_batch;
           apart from it flush (file), save(path) (in memory: flush() is a no-op there, timed
           too) or save_index (hnswlib). memory_stats(): share of the written bytes on huge
           pages (huge_bytes) and resident (resident_bytes).
  search   search_batch over an ef sweep, with one thread and with --search-threads (2):
           recall@k against exact ground truth and queries per second. Per ef, runs of the
           whole query set alternate between the variants (forward, backward, ...) until each
           has had --min-seconds and two runs; QPS is the median run. QPS at recall@10 0.90 /
           0.95 / 0.99 is interpolated along the sweep (chassis._bench.qps_at_targets); figures
           are medians over passes (chassis._bench.summarize). Ratios: memory / file, balanced /
           local, chassis in memory (balanced) / hnswlib, at the targets and "paired" (median
           over ef of the per-pass QPS ratio at equal ef). Builds on two threads are not
           deterministic, so file, balanced and local are compared by recall (equal within 3
           binomial standard errors plus the pass-to-pass spread) and by their stored vectors
           (get() of 1,000 ids, identical).
  exact    --exact-n (2,000) rows of the set, file / balanced / local each built as above and
           searched at ef=--exact-ef (2,000 >= n: every reachable node is visited): ids must
           be identical across the three, with 1 and 2 search threads, and equal to the exact
           neighbours. 2,000 rows are below the 16,384 from which balanced placement acts: this
           checks the in-memory search; the balanced copy is checked by `load`.
  load     the file index of the set (the build part's last file variant):
           VectorIndex.load(path, in_memory=True) with placement "balanced" and "local"
           (threads=--threads) against IndexReader(path) (an open maps the file and reads
           nothing: instant), with the file in the page cache and after evicting it (fsync +
           posix_fadvise DONTNEED, checked with mincore); variants interleaved, median of the
           passes. memory_stats share on huge pages / resident; single-thread QPS at ef
           --load-ef (the same graph in all three: a like-for-like comparison of memory and
           file), and the ids must be identical to the reader's.
  numa     NUMA nodes (/sys/devices/system/node/node*) and numactl. With >= 2 nodes and
           numactl: fresh processes build the clustered set in memory and search it with one
           thread and with all: balanced, local, local under `numactl --interleave=all`, and
           local pinned to node 0 (`numactl --cpunodebind=0 --membind=0`). Otherwise a written
           ESTIMATE, clearly labelled, from the measurements the design note
           docs/design/numa-placement.md reports (--quick then runs the subprocess machinery
           once without numactl, as a smoke test only). The child process is
           benchmarks/children/numa_search.py.

Data: debian-minilm (--data, by default $CHASSIS_DATA/debian-minilm, else
<repo>/../shared/data/debian-minilm: 45,056 x 384, 1,000 queries, ground truth given) and a generated clustered set (chassis.datasets.clustered, --n 100,000 x
--dims 128, seed 0, exact ground truth computed).

    python benchmarks/bench_placement.py                  # all parts (roughly 6-10 min on 2 cores)
    python benchmarks/bench_placement.py --quick          # smoke run (< 30 s; sizes >= 16,384 rows)
    python benchmarks/bench_placement.py --only load --n 300000 --json out.json
    python benchmarks/bench_placement.py --only numa --n 600000 --dims 384   # on a 2-socket machine

Linux only (eviction by posix_fadvise, mincore; /sys for NUMA nodes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from chassis import datasets
from chassis._bench import (
    TARGETS,
    ChassisEngine,
    HnswlibEngine,
    engine_status,
    fmt,
    median,
    qps_at_targets,
    qps_cell,
    ratio,
    ratios,
    summarize,
    sweep_points,
    table,
    timed,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from placement_numa import bench_numa, numa_info, pct, shares  # noqa: E402
from toolkit import (  # noqa: E402
    MINILM,
    MiB,
    Parser,
    add_json_option,
    csv,
    evict_file,
    log,
    not_linux,
    run_record,
    work_folder,
    write_results,
)

BALANCED_MIN = 16_384  # batches from this size are spread by balanced placement (src/index.rs)
CHASSIS_VARIANTS = ("file", "balanced", "local")
LABELS = {
    "file": "file (page cache)",
    "balanced": "memory, balanced",
    "local": "memory, local",
    "hnswlib": "hnswlib",
}


def mode_name(threads: int) -> str:
    return "1 thread" if threads == 1 else f"{threads} threads"


# ------------------------------------------------------------------ engines
class ChassisVariant(ChassisEngine):
    """chassis file-backed or in memory with a placement; adds search with any thread count."""

    def __init__(self, variant: str) -> None:
        super().__init__()
        self.name = variant
        self.memory = variant != "file"
        self.placement = "balanced" if variant == "file" else variant  # a file ignores it
        self.flush_seconds: float | None = None
        self.pending_after_flush: int | None = None

    def options(self, metric: str, m: int, ef_construction: int):
        return self.module.IndexOptions(
            max_connections=m,
            ef_construction=ef_construction,
            metric=metric,
            placement=self.placement,
        )

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        self.index = self.module.VectorIndex(
            None if self.memory else path, self.dims, self.options(metric, m, ef_construction)
        )
        _, seconds = timed(lambda: self.index.add_batch(base, threads=threads))
        if self.memory:
            _, self.flush_seconds = timed(self.index.flush)  # a no-op in memory
            self.pending_after_flush = self.index.pending
            _, self.persist_seconds = timed(lambda: self.index.save(path))
        else:
            _, self.persist_seconds = timed(self.index.flush)
        return seconds

    def search_t(
        self, queries: np.ndarray, k: int, ef: int, threads: int
    ) -> tuple[np.ndarray, float]:
        (ids, _), seconds = timed(
            lambda: self.index.search_batch(queries, k, ef=ef, threads=threads)
        )
        return ids, seconds

    def stats(self) -> dict[str, Any]:
        return self.index.memory_stats()


class HnswlibVariant(HnswlibEngine):
    name = "hnswlib"

    def search_t(
        self, queries: np.ndarray, k: int, ef: int, threads: int
    ) -> tuple[np.ndarray, float]:
        self.index.set_ef(ef)
        (ids, _), seconds = timed(lambda: self.index.knn_query(queries, k, num_threads=threads))
        return ids, seconds

    def stats(self) -> dict[str, Any] | None:
        return None


# ------------------------------------------------------------------ data
class Data:
    def __init__(
        self,
        tag: str,
        name: str,
        base: np.ndarray,
        queries: np.ndarray,
        truth: np.ndarray,
        metric: str,
    ) -> None:
        self.tag, self.name, self.base, self.queries, self.truth, self.metric = (
            tag,
            name,
            base,
            queries,
            truth,
            metric,
        )


def load_data(tag: str, args: argparse.Namespace) -> Data:
    dsm = datasets
    if tag == "minilm":
        ds = dsm.load_npy_folder(args.data)
        base, queries, truth, metric = ds.base, ds.queries[: args.queries], ds.gt_ids, ds.metric
        if args.minilm_n and args.minilm_n < len(base):
            base, truth = base[: args.minilm_n], None  # the given truth covers the full base only
        truth = None if truth is None else truth[: args.queries]
    elif tag == "clustered":
        base, queries = dsm.clustered(args.n, args.dims, args.queries, seed=0)
        truth, metric = None, "euclidean"
    else:
        raise SystemExit(f"unknown data set {tag!r}; known: minilm, clustered")
    base = np.ascontiguousarray(base, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if truth is None or truth.shape[1] < args.k:
        t0 = time.perf_counter()
        truth, _ = dsm.ground_truth(base, queries, args.k, metric)
        log(f"  [{tag}] exact ground truth in {time.perf_counter() - t0:.1f} s")
    name = f"{'debian-minilm' if tag == 'minilm' else 'clustered'} {len(base):,} x {base.shape[1]}"
    return Data(tag, name, base, queries, np.asarray(truth)[:, : args.k], metric)


# ------------------------------------------------------------------ (1) build + search
def interleaved_sweep(
    engines: dict[str, Any], data: Data, args: argparse.Namespace, p: int
) -> dict[str, dict[str, list[dict[str, float]]]]:
    """{variant: {mode: [{"ef", "recall", "qps"}, ...]}}: per ef and thread count, runs of the
    query set alternate between the variants (order rotated per ef and pass, then reversed
    every round) until each has --min-seconds and 2 runs (at most --max-runs)."""
    recall_at_k = datasets.recall_at_k
    names = list(engines)
    for e in engines.values():  # warm-up: lazy setup, caches
        e.search_t(data.queries[:100], args.k, args.efs[0], 1)
    out: dict[str, dict[str, list[dict[str, float]]]] = {
        n: {mode_name(t): [] for t in args.thread_counts} for n in names
    }
    for i, ef in enumerate(args.efs):
        for t in args.thread_counts:
            shift = (p + i) % len(names)
            order = names[shift:] + names[:shift]
            times: dict[str, list[float]] = {n: [] for n in names}
            recall: dict[str, float] = {}
            rnd = 0
            while True:
                for n in order if rnd % 2 == 0 else order[::-1]:
                    ids, s = engines[n].search_t(data.queries, args.k, ef, t)
                    if n not in recall:
                        recall[n] = recall_at_k(ids, data.truth, args.k)
                    times[n].append(s)
                rnd += 1
                if rnd >= args.max_runs or (
                    rnd >= 2 and all(sum(v) >= args.min_seconds for v in times.values())
                ):
                    break
            for n in names:
                out[n][mode_name(t)].append(
                    {
                        "ef": ef,
                        "recall": recall[n],
                        "qps": len(data.queries) / statistics.median(times[n]),
                        "runs": len(times[n]),
                    }
                )
    return out


def same_vectors(engines: dict[str, Any], data: Data) -> dict[str, bool]:
    """get() of 1,000 ids spread over the base: identical across file / balanced / local, and
    equal to the input rows."""
    ids = np.unique(np.linspace(0, len(data.base) - 1, 1000).astype(np.int64))
    got = {
        n: np.stack([engines[n].index.get(int(i)) for i in ids])
        for n in CHASSIS_VARIANTS
        if n in engines
    }
    first = next(iter(got.values()))
    return {
        "across_variants": all(np.array_equal(first, g) for g in got.values()),
        "equal_to_input": all(np.array_equal(g, data.base[ids]) for g in got.values()),
    }


def bench_build_search(
    data: Data, workdir: Path, args: argparse.Namespace, peers: dict[str, Any]
) -> dict[str, Any]:
    names = list(CHASSIS_VARIANTS) + (["hnswlib"] if "hnswlib" in peers else [])
    passes: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    checks: list[dict[str, bool]] = []
    flush_noop: list[dict[str, Any]] = []
    keep_file = None
    for p in range(args.passes):
        order = names[p % len(names) :] + names[: p % len(names)]
        engines: dict[str, Any] = {}
        per: dict[str, dict[str, Any]] = {}
        paths = {
            n: workdir / f"{data.tag}-{n}-pass{p}.{'hnsw' if n == 'hnswlib' else 'chassis'}"
            for n in names
        }
        for n in order:
            e = HnswlibVariant() if n == "hnswlib" else ChassisVariant(n)
            build_s = e.build(
                str(paths[n]),
                data.base,
                metric=data.metric,
                m=args.m,
                ef_construction=args.efc,
                threads=args.threads,
            )
            ms = e.stats()
            huge, resident = shares(ms)
            per[n] = {
                "build_s": build_s,
                "persist_s": e.persist_seconds,
                "huge_share": huge,
                "resident_share": resident,
                "huge_pages_refused": None if ms is None else ms["huge_pages_refused"],
                "written_bytes": None if ms is None else ms["written_bytes"],
                "backing": None if ms is None else ms["backing"],
            }
            if getattr(e, "memory", False):
                flush_noop.append(
                    {"variant": n, "flush_s": e.flush_seconds, "pending": e.pending_after_flush}
                )
            engines[n] = e
            log(
                f"  [{data.tag}] pass {p + 1}/{args.passes}: built {n} in {build_s:.2f} s"
                + (
                    ""
                    if huge is None
                    else f" (on huge pages {100 * huge:.0f}%, resident {100 * resident:.0f}%)"
                )
            )
        checks.append(same_vectors(engines, data))
        sweeps = interleaved_sweep(engines, data, args, p)
        for n in names:
            per[n]["sweep"] = sweeps[n]
            per[n]["qps_at"] = {
                mode: qps_at_targets(points, TARGETS) for mode, points in sweeps[n].items()
            }
            passes[n].append(per[n])
        log(
            f"  [{data.tag}] pass {p + 1}/{args.passes}: swept {len(args.efs)} ef x {len(args.thread_counts)} thread counts"
        )
        for e in engines.values():
            e.close()
        for n, path in paths.items():
            if n == "file" and p == args.passes - 1:
                keep_file = str(path)  # the load part copies this one
                continue
            for q in (path, Path(str(path) + ".undo")):
                q.unlink(missing_ok=True)
    summary = {n: summarize(ps) for n, ps in passes.items()}
    for n, ps in passes.items():
        summary[n]["huge_share"] = median(x["huge_share"] for x in ps)
        summary[n]["resident_share"] = median(x["resident_share"] for x in ps)
        summary[n]["huge_pages_refused"] = any(bool(x["huge_pages_refused"]) for x in ps)
    # paired ratios: per pass and ef, a / b; median over passes, then over ef
    pairs = {
        "memory balanced / file": ("balanced", "file"),
        "memory local / file": ("local", "file"),
        "balanced / local": ("balanced", "local"),
        "memory balanced / hnswlib": ("balanced", "hnswlib"),
    }
    paired: dict[str, dict[str, Any]] = {}
    for label, (a, b) in pairs.items():
        if a not in passes or b not in passes:
            continue
        paired[label] = {}
        for t in args.thread_counts:
            mode = mode_name(t)
            per_ef = [
                statistics.median(
                    pa["sweep"][mode][i]["qps"] / pb["sweep"][mode][i]["qps"]
                    for pa, pb in zip(passes[a], passes[b])
                )
                for i in range(len(args.efs))
            ]
            paired[label][mode] = {"per_ef": per_ef, "median": statistics.median(per_ef)}
    # recall of file / balanced / local: equal within noise?
    nq = len(data.queries)
    worst = {"delta": 0.0, "ef": None, "tolerance": None}
    equal = True
    for i, ef in enumerate(args.efs):
        recs = {
            n: [ps["sweep"]["1 thread"][i]["recall"] for ps in passes[n]] for n in CHASSIS_VARIANTS
        }
        meds = {n: statistics.median(v) for n, v in recs.items()}
        spread = max(max(v) - min(v) for v in recs.values())
        r = statistics.mean(meds.values())
        tol = 3 * (r * (1 - r) / (nq * args.k)) ** 0.5 + spread + 1e-9
        delta = max(meds.values()) - min(meds.values())
        if delta > tol:
            equal = False
        if worst["tolerance"] is None or delta - tol > worst["delta"] - worst["tolerance"]:
            worst = {"delta": delta, "ef": ef, "tolerance": tol}
    return {
        "name": data.name,
        "shape": list(data.base.shape),
        "queries": nq,
        "metric": data.metric,
        "passes": passes,
        "median": summary,
        "paired": paired,
        "ratios": {
            label: ratios(summary[a], summary[b], ("build_s", "persist_s"))
            for label, (a, b) in pairs.items()
            if a in summary and b in summary
        },
        "recall_equal": {"equal": equal, **worst},
        "vectors": checks,
        "flush_in_memory": flush_noop,
        "kept_file": keep_file,
    }


def print_build_search(
    res: dict[str, Any], args: argparse.Namespace, peers: dict[str, Any]
) -> None:
    n, d = res["shape"]
    s = res["median"]
    print(
        f"\n=== build + search: {res['name']}, {res['queries']:,} queries, {res['metric']}; M={args.m}, "
        f"ef_construction={args.efc}, build threads {args.threads}; medians of {args.passes} pass(es), variants interleaved"
    )
    modes = [mode_name(t) for t in args.thread_counts]
    targets = [str(t) for t in TARGETS]
    short = {m: ("1t" if m == "1 thread" else m.split()[0] + "t") for m in modes}
    rows = []
    for v, x in s.items():
        label = LABELS[v] + (f" {peers['hnswlib'].version}" if v == "hnswlib" else "")
        rows.append(
            [
                label,
                fmt(x["build_s"], ".2f"),
                fmt(n / x["build_s"] if x["build_s"] else None),
                fmt(x["persist_s"], ".3f"),
                pct(x["huge_share"]),
                pct(x["resident_share"]),
            ]
            + [qps_cell(x, m, t) for m in modes for t in targets]
        )
    print(
        table(
            ["variant", "build s", "vectors/s", "flush/save s", "on huge pages", "resident"]
            + [f"{short[m]} QPS@{t}" for m in modes for t in targets],
            rows,
        )
    )
    fl = res["flush_in_memory"]
    print(
        "(* the smallest ef already reached this recall: its QPS, a lower bound. flush/save: file flush(); in memory "
        "save(path); hnswlib save_index. huge pages / resident: memory_stats() huge_bytes, resident_bytes of written_bytes."
        f" flush() in memory: median {fmt(1e3 * median(f['flush_s'] for f in fl), '.3f', ' ms')}, pending after it "
        f"{sorted({f['pending'] for f in fl})})"
    )
    if any(x.get("huge_pages_refused") for x in s.values()):
        print("NOTE: memory_stats() says the kernel refused huge pages to this process")

    print(
        "\nratios (QPS: > 1 = the first is faster; build: < 1 = the first is faster); paired = median over ef of the per-pass QPS ratio"
    )
    rows = []
    for label, r in res["ratios"].items():
        pr = res["paired"].get(label, {})
        rows.append(
            [label, fmt(r["build_s"], ".3f")]
            + [fmt(r["qps_at"].get(m, {}).get(t), ".3f") for m in modes for t in targets]
            + [fmt(pr.get(m, {}).get("median"), ".3f") for m in modes]
        )
    print(
        table(
            ["", "build"]
            + [f"{short[m]} QPS@{t}" for m in modes for t in targets]
            + [f"paired {short[m]}" for m in modes],
            rows,
        )
    )

    names = list(s)
    first = modes[0]
    print(f"\nsweep, {first}: recall@{args.k} and QPS (medians over passes)")
    rows = []
    for i, ef in enumerate(args.efs):
        rows.append(
            [str(ef)]
            + [f"{s[v]['sweep'][first][i]['recall']:.4f}" for v in names]
            + [fmt(s[v]["sweep"][first][i]["qps"]) for v in names]
        )
    print(
        table(
            ["ef"] + [f"recall {v}" for v in names] + [f"QPS {v}" for v in names],
            rows,
            align_first="right",
        )
    )
    for m in modes[1:]:
        print(f"\nsweep, {m} (search_batch(threads={m.split()[0]})): QPS")
        rows = [
            [str(ef)] + [fmt(s[v]["sweep"][m][i]["qps"]) for v in names]
            for i, ef in enumerate(args.efs)
        ]
        print(table(["ef"] + [f"QPS {v}" for v in names], rows, align_first="right"))
    rq = res["recall_equal"]
    print(
        f"\nrecall of file / balanced / local equal within noise: {'yes' if rq['equal'] else 'NO'} (largest difference "
        f"{rq['delta']:.4f} at ef {rq['ef']}; tolerance 3 binomial s.e. + pass-to-pass spread = {rq['tolerance']:.4f})"
    )
    v = res["vectors"]
    print(
        f"stored vectors (get() of 1,000 ids): identical across file / balanced / local in every pass: "
        f"{all(c['across_variants'] for c in v)}; equal to the input rows: {all(c['equal_to_input'] for c in v)}"
    )
    if n < BALANCED_MIN:
        print(
            f"NOTE: {n:,} rows < {BALANCED_MIN:,}: balanced placement does not act on this batch; balanced and local are the same path"
        )


# ------------------------------------------------------------------ (1b) exactness on a subset
def bench_exact(data: Data, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    dsm = datasets
    rows = min(args.exact_n, len(data.base))
    base = data.base[:rows]
    truth, _ = dsm.ground_truth(base, data.queries, args.k, data.metric)
    ids: dict[str, dict[int, np.ndarray]] = {}
    for n in CHASSIS_VARIANTS:
        e = ChassisVariant(n)
        path = workdir / f"{data.tag}-exact-{n}.chassis"
        e.build(
            str(path),
            base,
            metric=data.metric,
            m=args.m,
            ef_construction=args.efc,
            threads=args.threads,
        )
        ids[n] = {
            t: e.search_t(data.queries, args.k, args.exact_ef, t)[0]
            for t in sorted({1, *args.thread_counts})
        }
        e.close()
        for q in (path, Path(str(path) + ".undo")):
            q.unlink(missing_ok=True)
    ref = ids["file"][1]
    identical = all(np.array_equal(ref, a) for per in ids.values() for a in per.values())
    recalls = {n: dsm.recall_at_k(per[1], truth, args.k) for n, per in ids.items()}
    exact = all(np.array_equal(per[1].astype(np.int64), truth) for per in ids.values())
    return {
        "rows": rows,
        "ef": args.exact_ef,
        "identical": identical,
        "equal_to_exact": exact,
        "recall": recalls,
    }


def print_exact(data: Data, res: dict[str, Any]) -> None:
    print(
        f"\nexactness, {data.name.split()[0]}: first {res['rows']:,} rows, ef={res['ef']}, {len(data.queries):,} queries: "
        f"ids identical across file / balanced / local (1 and more search threads): {res['identical']}; "
        f"equal to the exact neighbours: {res['equal_to_exact']} (recall "
        + ", ".join(f"{n} {r:.4f}" for n, r in res["recall"].items())
        + ")"
    )


# ------------------------------------------------------------------ (2) load
def read_through(path: str) -> None:
    """Bring the whole file into the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(8 * MiB):
            pass


def file_index(data: Data, workdir: Path, args: argparse.Namespace, kept: str | None) -> str:
    if kept and Path(kept).exists():
        return kept
    path = workdir / f"{data.tag}-load.chassis"
    e = ChassisVariant("file")
    secs = e.build(
        str(path),
        data.base,
        metric=data.metric,
        m=args.m,
        ef_construction=args.efc,
        threads=args.threads,
    )
    e.close()
    log(f"  [{data.tag}] built the file index for load in {secs:.1f} s")
    return str(path)


def bench_load(data: Data, path: str, args: argparse.Namespace) -> dict[str, Any]:
    import chassis

    names = ["reader", "balanced", "local"]

    def open_one(n: str):
        if n == "reader":
            return chassis.IndexReader(path)
        # to choose the placement, options must repeat the file's max_connections / metric
        opts = chassis.IndexOptions(
            max_connections=args.m, ef_construction=args.efc, metric=data.metric, placement=n
        )
        return chassis.VectorIndex.load(path, True, opts, threads=args.threads)

    secs: dict[str, dict[str, list[float]]] = {
        st: {n: [] for n in names} for st in ("cached", "evicted")
    }
    qps: dict[str, list[float]] = {n: [] for n in names}
    share: dict[str, list[tuple[float | None, float | None]]] = {n: [] for n in names}
    stats_last: dict[str, Any] = {}
    identical = True
    for p in range(args.passes):
        order = names[p % 3 :] + names[: p % 3]
        # the file in the page cache: open / load each, keep them for the search
        read_through(path)
        idx = {}
        for n in order:
            idx[n], s = timed(lambda n=n: open_one(n))
            secs["cached"][n].append(s)
        for n in names:
            ms = idx[n].memory_stats()
            stats_last[n] = ms
            share[n].append(shares(ms))
        want = idx["reader"].search_batch(data.queries, args.k, ef=args.load_ef, threads=1)[0]
        times: dict[str, list[float]] = {n: [] for n in names}
        for rnd in range(max(2, args.load_runs)):
            for n in order if rnd % 2 == 0 else order[::-1]:
                (ids, _), s = timed(
                    lambda h=idx[n]: h.search_batch(
                        data.queries, args.k, ef=args.load_ef, threads=1
                    )
                )
                times[n].append(s)
                identical &= bool(np.array_equal(ids, want))
        for n in names:
            qps[n].append(len(data.queries) / statistics.median(times[n]))
            idx[n].close()
        idx.clear()
        # the file evicted before each: load reads it from the disk
        for n in order:
            evict_file(path)
            h, s = timed(lambda n=n: open_one(n))
            secs["evicted"][n].append(s)
            h.close()
            del h
        log(
            f"  [{data.tag}] load pass {p + 1}/{args.passes}: cached "
            + ", ".join(f"{n} {secs['cached'][n][-1]:.3f} s" for n in names)
            + "; evicted "
            + ", ".join(f"{n} {secs['evicted'][n][-1]:.3f} s" for n in names)
        )
    return {
        "name": data.name,
        "path": path,
        "file_bytes": os.path.getsize(path),
        "ef": args.load_ef,
        "seconds": {st: {n: median(v) for n, v in d.items()} for st, d in secs.items()},
        "seconds_passes": secs,
        "qps": {n: median(v) for n, v in qps.items()},
        "huge_share": {n: median(x[0] for x in v) for n, v in share.items()},
        "resident_share": {n: median(x[1] for x in v) for n, v in share.items()},
        "memory_stats_last": stats_last,
        "identical": identical,
    }


def print_load(res: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\n=== load: {res['name']}, file {res['file_bytes'] / MiB:,.1f} MiB; VectorIndex.load(path, in_memory=True, "
        f"threads={args.threads}) vs IndexReader(path); medians of {args.passes} pass(es), interleaved"
    )
    rows = []
    label = {
        "reader": "IndexReader(path) (maps, reads nothing)",
        "balanced": "load, placement balanced",
        "local": "load, placement local",
    }
    for n in ("reader", "balanced", "local"):
        rows.append(
            [
                label[n],
                fmt(1e3 * res["seconds"]["cached"][n], ".1f", " ms"),
                fmt(1e3 * res["seconds"]["evicted"][n], ".1f", " ms"),
                pct(res["huge_share"][n]),
                pct(res["resident_share"][n]),
                fmt(res["qps"][n]),
            ]
        )
    print(
        table(
            [
                "",
                "file in page cache",
                "file evicted",
                "on huge pages",
                "resident",
                f"QPS ef={res['ef']} (1 thread)",
            ],
            rows,
        )
    )
    sc, se = res["seconds"]["cached"], res["seconds"]["evicted"]
    print(
        f"load balanced / local: {fmt(ratio(sc['balanced'], sc['local']), '.3f')} (page cache), "
        f"{fmt(ratio(se['balanced'], se['local']), '.3f')} (evicted); QPS loaded balanced / reader "
        f"{fmt(ratio(res['qps']['balanced'], res['qps']['reader']), '.3f')}, balanced / local "
        f"{fmt(ratio(res['qps']['balanced'], res['qps']['local']), '.3f')} (the same graph in all three)"
    )
    print(
        f"ids of the loaded copies identical to the reader's at ef={res['ef']}: {res['identical']}"
    )
    rows_n = res.get("rows")
    if rows_n is not None and rows_n < BALANCED_MIN:
        print(
            f"NOTE: {rows_n:,} slots < {BALANCED_MIN:,}: load copies serially whatever the placement"
        )


# ------------------------------------------------------------------ main
def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--only",
        choices=["build", "exact", "load", "numa"],
        action="append",
        help="run only these parts (repeatable; build = build + search)",
    )
    p.add_argument(
        "--quick", action="store_true", help="small sizes (>= 16,384 rows), one pass: a smoke run"
    )
    p.sized("--passes", full=3, quick=1, help="passes")
    p.add_argument("--datasets", default="minilm,clustered", help="minilm,clustered")
    p.add_argument(
        "--data",
        "--minilm",
        dest="data",
        default=str(MINILM),
        help="the debian-minilm folder ($CHASSIS_DATA/debian-minilm)",
    )
    p.add_argument(
        "--minilm-n", type=int, help="use the first rows of minilm only (all; --quick: 17000)"
    )
    p.sized("--n", "--large-n", full=100_000, quick=17_000, help="rows of the clustered set")
    p.add_argument("--dims", type=int, default=128, help="dimensions of the clustered set (128)")
    p.sized("--queries", full=1000, quick=200, help="queries per data set")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--m", type=int, default=16, help="max_connections / M (16)")
    p.sized("--efc", "--ef-construction", full=200, quick=64, help="ef_construction")
    p.add_argument("--threads", type=int, default=2, help="build and load threads (2)")
    p.add_argument(
        "--search-threads", type=int, default=2, help="threads of the multi-thread search_batch (2)"
    )
    p.add_argument(
        "--efs", help="ef sweep (10,16,24,32,48,64,96,128,192,256,400; --quick: 10,20,40,80,160)"
    )
    p.sized(
        "--min-seconds",
        full=0.3,
        quick=0.05,
        help="per ef, thread count and pass: search at least this long per variant",
    )
    p.add_argument(
        "--max-runs",
        type=int,
        default=15,
        help="at most this many runs per variant, ef and thread count (15)",
    )
    p.add_argument("--exact-n", type=int, default=2000, help="rows of the exactness check (2000)")
    p.add_argument("--exact-ef", type=int, default=2000, help="ef of the exactness check (2000)")
    p.add_argument("--load-ef", type=int, default=64, help="ef of the search after load (64)")
    p.sized("--load-runs", full=6, quick=2, help="alternating runs of that search per pass")
    p.add_argument("--no-hnswlib", action="store_true", help="leave the peer out")
    p.add_argument("--workdir", help="where index files go (default: a temporary folder, removed)")
    add_json_option(p)
    a = p.parse_args(argv)
    q = a.quick
    a.minilm_n = a.minilm_n if a.minilm_n is not None else (17_000 if q else None)
    a.efs = [
        int(x)
        for x in csv(a.efs or ("10,20,40,80,160" if q else "10,16,24,32,48,64,96,128,192,256,400"))
    ]
    a.thread_counts = [1] + ([a.search_threads] if a.search_threads != 1 else [])
    a.datasets = csv(a.datasets)
    return a


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not_linux("bench_placement", "posix_fadvise, mincore, /sys NUMA nodes"):
        return 0
    parts = set(args.only or ["build", "exact", "load", "numa"])
    peers, notes = engine_status([] if args.no_hnswlib else ["hnswlib"])
    started = time.perf_counter()
    workdir = work_folder(args.workdir, "chassis-bench-placement-")
    info = numa_info()
    results = run_record(args, numa=info, notes=notes, datasets={})
    print(
        f"machine: {results['machine']['platform']}, {results['machine']['cpu_count']} CPUs; NUMA nodes: {len(info['nodes'])}; "
        f"numactl: {'yes' if info['numactl'] else 'no'}; THP: {info['thp']}; M={args.m}, ef_construction={args.efc}, k={args.k}"
        + (f"; peer hnswlib {peers['hnswlib'].version}" if "hnswlib" in peers else "")
    )
    for note in notes:
        print(f"note: {note}")
    if args.quick:
        print(
            "QUICK RUN: small sizes and one pass; the figures are a smoke test, not a measurement"
        )
    largest = None
    numa_data = None
    try:
        for tag in args.datasets:
            if not parts & {"build", "exact", "load"} and tag != args.datasets[-1]:
                continue
            log(f"data: {tag}")
            data = load_data(tag, args)
            out: dict[str, Any] = {"name": data.name}
            kept = None
            if "build" in parts:
                res = bench_build_search(data, workdir, args, peers)
                kept = res.pop("kept_file")
                out["build_search"] = res
                print_build_search(res, args, peers)
                for v in ("balanced", "local"):
                    w = [x["written_bytes"] for x in res["passes"][v] if x["written_bytes"]]
                    largest = max([largest or 0] + w)
            if "exact" in parts:
                out["exact"] = bench_exact(data, workdir, args)
                print_exact(data, out["exact"])
            if "load" in parts:
                path = file_index(data, workdir, args, kept)
                res = bench_load(data, path, args)
                res["rows"] = len(data.base)
                out["load"] = res
                print_load(res, args)
                largest = max(largest or 0, res["memory_stats_last"]["balanced"]["written_bytes"])
                Path(path).unlink(missing_ok=True)
                Path(path + ".undo").unlink(missing_ok=True)
            results["datasets"][tag] = out
            if tag == "clustered" or numa_data is None:
                numa_data = data
        if "numa" in parts:
            results["numa_part"] = bench_numa(numa_data, workdir, args, largest)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    print(f"\n(total {results['seconds']:.0f} s)")
    points = [
        p
        for out in results["datasets"].values()
        if "build_search" in out
        for p in sweep_points(
            out["name"], {v: x["sweep"] for v, x in out["build_search"]["median"].items()}
        )
    ]
    write_results(args.json, "bench_placement", results, points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
