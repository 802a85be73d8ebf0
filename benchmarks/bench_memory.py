"""Memory policies benchmark: huge pages on request (ADR-0016) and warm on request (ADR-0019).

  search     single-thread search_batch QPS with huge pages off and on, as in ADR-0016's
             tables. One index file per data set (M=16, ef_construction=200, built once by
             add_batch and cached in --workdir). Each of --passes passes starts from the file
             evicted from the page cache (fsync + posix_fadvise DONTNEED, checked with mincore):
             first, per mode, a reader opened with IndexOptions(huge_pages=False / True) on the
             evicted file searches the query set once at ef 64 while the file comes back from
             disk (the "cold pass", timed); then, from a new eviction, a reader that asks for
             huge pages reads the file back in (warm(), through its own mappings, so that its
             vectors can land on huge pages) and a reader that does not ask maps the same page
             cache with 4 KiB pages. Per ef, runs of the whole query set alternate between the
             two readers (off on on off, on off off on, ...) for at least --min-seconds each:
             this machine's speed drifts by tens of percent from one run to the next, and the
             alternation makes the drift hit both alike. QPS per ef is the median of the runs
             of all passes; "paired on/off" the median of the on/off ratios of neighbouring
             runs; QPS at recall 0.90 / 0.95 is interpolated along the sweep
             (chassis._bench.qps_at_targets). Both readers must return identical ids. The
             share of vector bytes on huge pages is memory_stats()["vector_huge_bytes"] /
             ["vector_bytes"]. Data: debian-minilm (45,056 x 384, real embeddings) and a
             generated clustered set of --large-n x 384 float32 (default 700,000: 1.07 GB of
             vectors, which takes a while to build on two cores; --large-n 200000 is a shorter
             run, and the output says so).
  adds       median latency of one add + flush (300 of them) on an index built by add_batch
             with huge pages off and with them on (two writers, interleaved in blocks of 25),
             then again after both files were closed, evicted and reopened (read back from disk).
             Ratio on / off; the ADR's target is within 20%.
  cold       cold start: the index file evicted, a FRESH process opens it and searches queries
             one at a time (k=10, ef=64); times from the parent's spawn of the process to
             the child's first statement (interpreter start), to its first and to its hundredth
             search result, and to the last; chassis IndexReader without and with
             IndexOptions(warm=True), and hnswlib load_index-then-search (if installed; its index
             built with the same M and ef_construction); medians of --rounds rounds, the
             variants interleaved. Clock: CLOCK_MONOTONIC, which parent and child share.

    python benchmarks/bench_memory.py                     # all, large set 700,000 x 384
    python benchmarks/bench_memory.py --large-n 200000    # shorter (about 6-8 minutes on 2 cores)
    python benchmarks/bench_memory.py --only search --json out.json
    python benchmarks/bench_memory.py --quick             # smoke run

Linux only (eviction by posix_fadvise, mincore).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from chassis import datasets
from chassis._bench import (
    engine_status,
    fmt,
    median,
    qps_at_targets,
    ratio,
    sweep_points,
    table,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toolkit import (  # noqa: E402
    MINILM,
    MiB,
    Parser,
    add_json_option,
    child_script,
    evict_file,
    log,
    not_linux,
    run_record,
    write_results,
)

TARGETS = (0.90, 0.95)


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# ------------------------------------------------------------------ data and index files
class Data:
    def __init__(
        self, name: str, base: np.ndarray, queries: np.ndarray, gt: np.ndarray, note: str = ""
    ) -> None:
        self.name, self.base, self.queries, self.gt, self.note = name, base, queries, gt, note


def load_minilm(folder: str, nq: int) -> Data:
    ds = datasets.load(folder)
    base = np.ascontiguousarray(ds.base, dtype=np.float32)
    queries = np.ascontiguousarray(ds.queries[:nq], dtype=np.float32)
    return Data(
        f"debian-minilm {len(base):,} x {base.shape[1]}", base, queries, np.asarray(ds.gt_ids)[:nq]
    )


def load_large(n: int, dims: int, nq: int, workdir: Path, k: int) -> Data:
    dsm = datasets
    base, queries = dsm.clustered(n, dims, nq, seed=16)
    gt_file = workdir / f"large-{n}x{dims}-q{nq}-gt{k}.npy"
    if gt_file.exists():
        gt = np.load(gt_file)
    else:
        t0 = time.perf_counter()
        gt, _ = dsm.ground_truth(base, queries, k)
        np.save(gt_file, gt)
        log(f"  ground truth for {n:,} x {dims}: {time.perf_counter() - t0:.1f} s")
    gb = n * dims * 4 / 1e9
    note = (
        ""
        if gb >= 1.0
        else f"SHORT RUN: --large-n {n:,} gives {gb:.2f} GB of vectors, not the >= 1 GB (700,000 x 384) the comparison is meant for"
    )
    return Data(f"clustered {n:,} x {dims}", base, queries, gt, note)


def chassis_file(
    data: Data,
    workdir: Path,
    m: int,
    efc: int,
    tag: str,
    *,
    huge_pages: bool | None = None,
    rows: int | None = None,
    cache: bool = True,
) -> tuple[str, float | None]:
    """Path of an index of data.base[:rows] built by one add_batch (cached by name), and the
    build seconds when it was built now."""
    rows = len(data.base) if rows is None else rows
    path = workdir / f"{tag}-{rows}-m{m}-efc{efc}.chassis"
    if cache and path.exists():
        return str(path), None
    index, seconds = built_writer(path, data, rows, m, efc, huge_pages)
    index.close()
    return str(path), seconds


def built_writer(
    path: Path, data: Data, rows: int, m: int, efc: int, huge_pages: bool | None
) -> tuple[Any, float]:
    """A new index at `path` (any older one removed) of data.base[:rows], built by one
    add_batch and flushed: its writer, still open, and the seconds that took."""
    import chassis

    for p in (path, Path(str(path) + ".undo")):
        p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    index = chassis.VectorIndex(
        str(path),
        data.base.shape[1],
        chassis.IndexOptions(max_connections=m, ef_construction=efc, huge_pages=huge_pages),
    )
    index.add_batch(data.base[:rows])
    index.flush()
    return index, time.perf_counter() - t0


# ------------------------------------------------------------------ (i) search, huge pages off / on
def wait_warm(r, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while r.memory_stats()["warm_running"]:
        if time.monotonic() > deadline:
            raise RuntimeError("warm did not finish")
        time.sleep(0.01)


def bench_search(data: Data, path: str, args: argparse.Namespace) -> dict[str, Any]:
    """See the module docstring. Two readers of the same file are open during the sweep, one
    that asked for huge pages and one that did not; they share the page cache, but each maps
    it its own way (the one that did not ask with 4 KiB pages: its vectors are MADV_NOHUGEPAGE),
    so the TLB behaviour of each is its own. Runs of the whole query set alternate between
    them (off on on off ...), so that drift of the machine's speed hits both alike."""
    import chassis

    recall_at_k = datasets.recall_at_k
    modes = {"off": False, "on": True}
    cold: dict[str, list[float]] = {m: [] for m in modes}
    share: dict[str, list[float | None]] = {m: [] for m in modes}
    runs: dict[int, dict[str, list[float]]] = {ef: {m: [] for m in modes} for ef in args.efs}
    pair_ratios: dict[int, list[float]] = {ef: [] for ef in args.efs}
    recalls: dict[int, float] = {}
    identical = True
    stats_last: dict[str, Any] = {}
    for p in range(args.passes):
        # the first pass over a file not in memory, each mode from its own eviction
        for mode in list(modes) if p % 2 == 0 else list(modes)[::-1]:
            evict_file(path)
            r = chassis.IndexReader(path, chassis.IndexOptions(huge_pages=modes[mode]))
            t0 = time.perf_counter()
            r.search_batch(data.queries, args.k, ef=64, threads=1)
            cold[mode].append(time.perf_counter() - t0)
            r.close()
            del r
        # steady state: read back from disk through the reader that asks (its vectors land on
        # huge pages), then the other reader maps the same pages with small ones
        evict_file(path)
        readers = {"on": chassis.IndexReader(path, chassis.IndexOptions(huge_pages=True))}
        readers["on"].warm()
        wait_warm(readers["on"])
        readers["off"] = chassis.IndexReader(path, chassis.IndexOptions(huge_pages=False))
        readers["off"].warm()
        wait_warm(readers["off"])
        for r in readers.values():
            r.search_batch(data.queries[:100], args.k, ef=args.efs[0], threads=1)  # warm-up
        for ef in args.efs:
            ids = {
                m: readers[m].search_batch(data.queries, args.k, ef=ef, threads=1)[0] for m in modes
            }
            identical &= bool(np.array_equal(ids["off"], ids["on"]))
            recalls.setdefault(ef, recall_at_k(ids["off"], data.gt, args.k))
            spent = 0.0
            block = 0
            while block < 2 or spent < 2 * args.min_seconds:
                order = ["off", "on", "on", "off"] if block % 2 == 0 else ["on", "off", "off", "on"]
                got: dict[str, list[float]] = {m: [] for m in modes}
                for mode in order:
                    t0 = time.perf_counter()
                    readers[mode].search_batch(data.queries, args.k, ef=ef, threads=1)
                    dt = time.perf_counter() - t0
                    spent += dt
                    got[mode].append(len(data.queries) / dt)
                for m in modes:
                    runs[ef][m].extend(got[m])
                pair_ratios[ef].append(statistics.mean(got["on"]) / statistics.mean(got["off"]))
                block += 1
        for mode, r in readers.items():
            ms = r.memory_stats()
            stats_last[mode] = ms
            share[mode].append(
                ms["vector_huge_bytes"] / ms["vector_bytes"]
                if ms["vector_huge_bytes"] is not None
                else None
            )
            r.close()
        del readers
        log(
            f"  pass {p + 1}/{args.passes}: cold pass off {cold['off'][-1]:.2f} s, on {cold['on'][-1]:.2f} s; vectors on huge "
            f"pages: on-reader {fmt(None if share['on'][-1] is None else 100 * share['on'][-1], '.0f', '%')}, "
            f"off-reader {fmt(None if share['off'][-1] is None else 100 * share['off'][-1], '.0f', '%')}"
        )
    out: dict[str, Any] = {
        "name": data.name,
        "note": data.note,
        "path": path,
        "modes": {},
        "identical_results": identical,
    }
    for mode in modes:
        points = [
            {
                "ef": ef,
                "recall": recalls[ef],
                "qps": statistics.median(runs[ef][mode]),
                "runs": len(runs[ef][mode]),
            }
            for ef in args.efs
        ]
        out["modes"][mode] = {
            "points": points,
            "at": qps_at_targets(points, TARGETS),
            "huge_share": median(share[mode]),
            "huge_share_passes": share[mode],
            "cold_pass_s": median(cold[mode]),
            "cold_pass_s_passes": cold[mode],
            "memory_stats_last": stats_last[mode],
        }
    out["pair_ratios"] = {ef: v for ef, v in pair_ratios.items()}
    out["paired_ratio_per_ef"] = [statistics.median(pair_ratios[ef]) for ef in args.efs]
    out["median_ratio_over_ef"] = statistics.median(out["paired_ratio_per_ef"])
    return out


def print_search(res: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\n== search, single thread, huge pages off / on: {res['name']} ({len(args.efs)} ef values, "
        f"median of {args.passes} passes)"
    )
    if res["note"]:
        print(f"   {res['note']}")
    off, on = res["modes"]["off"], res["modes"]["on"]
    rows = []
    for a, b, pr in zip(off["points"], on["points"], res["paired_ratio_per_ef"]):
        q = np.quantile(res["pair_ratios"][a["ef"]], [0.25, 0.75])
        rows.append(
            [
                str(a["ef"]),
                f"{a['recall']:.3f}",
                fmt(a["qps"]),
                fmt(b["qps"]),
                fmt(ratio(b["qps"], a["qps"]), ".3f"),
                fmt(pr, ".3f"),
                f"{q[0]:.2f} to {q[1]:.2f}",
                str(a["runs"]),
            ]
        )
    print(
        table(
            [
                "ef",
                "recall@10",
                "QPS off",
                "QPS on",
                "on/off",
                "paired on/off",
                "its quartiles",
                "runs each",
            ],
            rows,
            align_first="right",
        )
    )
    rows = []
    for name, m in (("off", off), ("on", on)):
        cells = [
            f"huge pages {name}",
            fmt(None if m["huge_share"] is None else 100 * m["huge_share"], ".1f", "%"),
            fmt(m["cold_pass_s"], ".2f", " s"),
        ]
        for t in TARGETS:
            q, how = m["at"][str(t)]["qps"], m["at"][str(t)]["how"]
            cells.append(fmt(q) + ("" if how == "interpolated" else f" ({how})"))
        rows.append(cells)
    cells = ["on / off", "", fmt(ratio(on["cold_pass_s"], off["cold_pass_s"]), ".3f")]
    for t in TARGETS:
        cells.append(fmt(ratio(on["at"][str(t)]["qps"], off["at"][str(t)]["qps"]), ".3f"))
    rows.append(cells)
    print()
    print(
        table(
            ["reader", "vectors on huge pages", "cold pass (ef 64)"]
            + [f"QPS @ recall {t:.2f}" for t in TARGETS],
            rows,
        )
    )
    print(
        f"median over ef of the paired on/off: {fmt(res['median_ratio_over_ef'], '.3f')}; "
        f"identical results off / on: {res['identical_results']}"
    )


# ------------------------------------------------------------------ (ii) add + flush latency
def add_flush_round(
    writers: dict[str, Any], extra: np.ndarray, n: int, block: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {m: [] for m in writers}
    pos = {m: 0 for m in writers}
    order = list(writers)
    b = 0
    while any(pos[m] < n for m in writers):
        for mode in order if b % 2 == 0 else order[::-1]:
            w = writers[mode]
            for _ in range(min(block, n - pos[mode])):
                v = extra[pos[mode] % len(extra)]
                t0 = time.perf_counter()
                w.add(v)
                w.flush()
                times[mode].append(time.perf_counter() - t0)
                pos[mode] += 1
        b += 1
    return times


def bench_adds(data: Data, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    import chassis

    rows = args.adds_base
    extra = data.base[rows:]
    if len(extra) < 2 * args.adds:
        raise SystemExit(
            f"--adds-base {rows} leaves {len(extra)} rows to add; need {2 * args.adds}"
        )
    modes = {"off": False, "on": True}
    out: dict[str, Any] = {
        "rows": rows,
        "adds": args.adds,
        "build_s": {},
        "share": {},
        "rounds": {},
    }
    writers = {}
    for mode, hp in modes.items():
        path = workdir / f"adds-{mode}.chassis"
        w, out["build_s"][mode] = built_writer(path, data, rows, args.m, args.efc, hp)
        ms = w.memory_stats()  # the batch's own mappings: what it put on huge pages
        out["share"][mode] = (
            ms["vector_huge_bytes"] / ms["vector_bytes"]
            if ms["vector_huge_bytes"] is not None
            else None
        )
        writers[mode] = w
    log(
        f"  built {rows:,} rows by add_batch: off {out['build_s']['off']:.1f} s, on {out['build_s']['on']:.1f} s; "
        f"writer's vectors on huge pages: off {100 * (out['share']['off'] or 0):.0f}%, on {100 * (out['share']['on'] or 0):.0f}%"
    )
    t = add_flush_round(writers, extra[: args.adds], args.adds, 25)
    out["rounds"]["just built by a batch"] = {m: statistics.median(v) for m, v in t.items()}
    paths = {m: str(w.path) for m, w in writers.items()}
    for w in writers.values():
        w.close()
    writers = {}
    for mode, hp in modes.items():
        evict_file(paths[mode])
        writers[mode] = chassis.VectorIndex(
            paths[mode],
            options=chassis.IndexOptions(
                max_connections=args.m, ef_construction=args.efc, huge_pages=hp
            ),
        )
    t = add_flush_round(writers, extra[args.adds : 2 * args.adds], args.adds, 25)
    out["rounds"]["read back from disk"] = {m: statistics.median(v) for m, v in t.items()}
    for w in writers.values():
        w.close()
    for p in paths.values():
        for q in (p, p + ".undo"):
            Path(q).unlink(missing_ok=True)
    return out


def print_adds(res: dict[str, Any]) -> None:
    print(
        f"\n== add + flush, median of {res['adds']} each, on an index of {res['rows']:,} minilm rows built by add_batch"
    )
    rows = []
    for name, r in res["rounds"].items():
        rows.append(
            [
                name,
                fmt(1e3 * r["off"], ".2f", " ms"),
                fmt(1e3 * r["on"], ".2f", " ms"),
                fmt(ratio(r["on"], r["off"]), ".3f"),
            ]
        )
    print(table(["the file", "huge pages off", "on", "on/off (target <= 1.20)"], rows))
    b = res["build_s"]
    print(
        f"add_batch build of the {res['rows']:,} rows: off {b['off']:.2f} s, on {b['on']:.2f} s (on/off {ratio(b['on'], b['off']):.3f}); "
        f"vectors on huge pages after the batch: off {100 * (res['share']['off'] or 0):.0f}%, on {100 * (res['share']['on'] or 0):.0f}%"
    )


# ------------------------------------------------------------------ (iii) cold start
def hnswlib_file(
    data: Data, workdir: Path, args: argparse.Namespace, tag: str
) -> tuple[str | None, str]:
    engines, notes = engine_status(["hnswlib"])
    if "hnswlib" not in engines:
        return None, "; ".join(notes)
    path = workdir / f"{tag}-{len(data.base)}-m{args.m}-efc{args.efc}.hnsw"
    if not path.exists():
        e = engines["hnswlib"]
        t0 = time.perf_counter()
        e.build(
            str(path),
            data.base,
            metric="euclidean",
            m=args.m,
            ef_construction=args.efc,
            threads=os.cpu_count() or 2,
        )
        e.close()
        log(f"  hnswlib build {len(data.base):,}: {time.perf_counter() - t0:.1f} s")
    return str(path), f"hnswlib {engines['hnswlib'].version}"


def bench_cold(
    data: Data, chassis_path: str, workdir: Path, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    qfile = workdir / f"cold-queries-{tag}.npy"
    np.save(qfile, data.queries[: args.cold_queries])
    hpath, hnote = hnswlib_file(data, workdir, args, tag)
    variants = {"chassis": chassis_path, "chassis+warm": chassis_path}
    if hpath:
        variants["hnswlib"] = hpath
    script = child_script("cold_start")
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    names = list(variants)
    for rnd in range(args.rounds):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        for v in order:
            evict_file(variants[v])
            spawn = now()
            proc = subprocess.run(
                [
                    sys.executable,
                    script,
                    v,
                    variants[v],
                    str(qfile),
                    str(args.k),
                    "64",
                    str(data.base.shape[1]),
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"cold-start child {v} failed:\n{proc.stderr[-3000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[v].append(
                {
                    key: (r[key] - spawn) * 1e3
                    for key in ("t0", "open", "first", "hundredth", "last")
                }
            )
        log(
            f"  cold round {rnd + 1}/{args.rounds}: "
            + ", ".join(f"{v} 100th at {runs[v][-1]['hundredth']:.0f} ms" for v in names)
        )
    sizes = {v: os.path.getsize(p) for v, p in variants.items()}
    return {
        "name": data.name,
        "note": data.note,
        "queries": args.cold_queries,
        "rounds": args.rounds,
        "hnswlib": hnote,
        "file_bytes": sizes,
        "median_ms": {
            v: {key: statistics.median(x[key] for x in rs) for key in rs[0]}
            for v, rs in runs.items()
        },
        "runs_ms": runs,
    }


def print_cold(res: dict[str, Any]) -> None:
    print(
        f"\n== cold start: {res['name']}, file evicted, fresh process, search one query at a time (k=10, ef=64); "
        f"ms from spawn, median of {res['rounds']} rounds"
    )
    if res["note"]:
        print(f"   {res['note']}")
    rows = []
    for v, m in res["median_ms"].items():
        rows.append(
            [
                v,
                f"{res['file_bytes'][v] / MiB:,.0f} MiB",
                fmt(m["t0"], ".0f"),
                fmt(m["open"], ".0f"),
                fmt(m["first"], ".0f"),
                fmt(m["hundredth"], ".0f"),
                fmt(m["last"], ".0f"),
            ]
        )
    print(
        table(
            [
                "variant",
                "file",
                "interpreter up",
                "opened",
                "1st result",
                "100th result",
                f"{res['queries']}th result",
            ],
            rows,
        )
    )
    if res["hnswlib"] and "hnswlib" not in res["median_ms"]:
        print(f"   {res['hnswlib']}")


# ------------------------------------------------------------------ main
FULL_EFS, QUICK_EFS = "10,16,24,32,48,64,96,128,192,256", "16,32,64,128"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--only",
        choices=["search", "adds", "cold"],
        action="append",
        help="run only these parts (repeatable)",
    )
    p.add_argument(
        "--minilm",
        default=str(MINILM),
        help="the debian-minilm folder ($CHASSIS_DATA/debian-minilm)",
    )
    p.sized(
        "--large-n",
        full=700_000,
        quick=50_000,
        help="rows of the generated set (at full size, >= 1 GB of float32 vectors)",
    )
    p.add_argument("--dims", type=int, default=384, help="dimensions of the generated set (384)")
    p.add_argument("--no-large", action="store_true", help="search benchmark on minilm only")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--m", type=int, default=16)
    p.sized("--efc", full=200, quick=100, help="ef_construction")
    p.add_argument("--efs", help=f"ef sweep ({FULL_EFS}; --quick: {QUICK_EFS})")
    p.sized(
        "--passes", full=3, quick=1, help="passes (each from a fresh eviction) of the search sweep"
    )
    p.sized(
        "--min-seconds",
        full=1.0,
        quick=0.2,
        help="per ef, pass and mode: search the query set at least this long, and 4 times",
    )
    p.sized("--adds", full=300, quick=50, help="add+flush operations per mode and file state")
    p.sized(
        "--adds-base",
        full=20_000,
        quick=5_000,
        help="minilm rows built by add_batch before the adds",
    )
    p.add_argument(
        "--cold-data",
        choices=["large", "minilm"],
        default="large",
        help="data set of the cold-start runs (large)",
    )
    p.sized("--cold-queries", full=1000, quick=200, help="queries each cold-start process searches")
    p.sized("--rounds", full=5, quick=2, help="cold-start rounds")
    p.add_argument(
        "--workdir",
        default=os.path.join(tempfile.gettempdir(), "chassis-bench-memory"),
        help="index files (kept and reused between runs)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, few passes: a smoke run")
    add_json_option(p)
    a = p.parse_args(argv)
    a.efs = [int(x) for x in (a.efs or (QUICK_EFS if a.quick else FULL_EFS)).split(",")]
    return a


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not_linux("bench_memory", "page-cache eviction with posix_fadvise, mincore"):
        return 0
    parts = set(args.only or ["search", "adds", "cold"])
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        thp = "?"
    try:
        ra = Path("/sys/block/vda/queue/read_ahead_kb").read_text().strip()
    except OSError:
        ra = "?"
    results = run_record(args, thp=thp, read_ahead_kb=ra)
    print(
        f"machine: {results['machine']['platform']}, {results['machine']['cpu_count']} CPUs; THP: {thp}; read_ahead_kb (vda): {ra}; "
        f"M={args.m}, ef_construction={args.efc}; k={args.k}"
    )
    minilm = load_minilm(args.minilm, args.queries)
    large = None
    if ("search" in parts and not args.no_large) or ("cold" in parts and args.cold_data == "large"):
        log(f"generating {args.large_n:,} x {args.dims} ...")
        large = load_large(args.large_n, args.dims, args.queries, workdir, args.k)
        if large.note:
            print(large.note)
    files = {}
    for data, tag in ((minilm, "minilm"), (large, f"large{args.dims}")):
        if data is None:
            continue
        path, secs = chassis_file(data, workdir, args.m, args.efc, tag)
        files[tag] = path
        if secs is not None:
            log(f"  built {data.name}: {secs:.1f} s ({len(data.base) / secs:,.0f} vectors/s)")
            results.setdefault("build_s", {})[tag] = secs

    if "search" in parts:
        results["search"] = []
        for data, tag in ((minilm, "minilm"), (large, f"large{args.dims}")):
            if data is None or (tag != "minilm" and args.no_large):
                continue
            log(f"search: {data.name}")
            res = bench_search(data, files[tag], args)
            results["search"].append(res)
            print_search(res, args)
    if "adds" in parts:
        log("add + flush")
        results["adds"] = bench_adds(minilm, workdir, args)
        print_adds(results["adds"])
    if "cold" in parts:
        data, tag = (
            (large, f"large{args.dims}") if args.cold_data == "large" else (minilm, "minilm")
        )
        log(f"cold start: {data.name}")
        results["cold"] = bench_cold(data, files[tag], workdir, args, tag)
        print_cold(results["cold"])
    results["seconds"] = time.perf_counter() - started
    print(f"\n(total {results['seconds']:.0f} s)")
    points = [
        p
        for res in results.get("search", [])
        for p in sweep_points(
            res["name"],
            {"chassis": {f"huge pages {m}": x["points"] for m, x in res["modes"].items()}},
        )
    ]
    write_results(args.json, "bench_memory", results, points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
