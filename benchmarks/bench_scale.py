"""Scale benchmark: large generated indexes against the peers, and searching one larger than the
memory it may use.

  peers   --engines (chassis, hnswlib, faiss HNSWFlat, usearch, chassisdb; chassis-int8 too when
          named) on --n x --dims of the same generated data (below), M=16, ef_construction=200,
          each built in a fresh process on 2 threads from the base mapped read-only from a .npy
          (children/peer_build.py; the file and its build figures are cached in --workdir:
          delete the file to build again). Build time (the insert; the persist apart), peak RSS
          sampled from /proc/<pid>/smaps every 0.5 s without the input's pages (the engine's
          own; getrusage's peak, input included, too), file size. Then in another fresh process
          (children/peer_search.py), the file evicted first: the open, the first query, a
          second open from the page cache, and an ef sweep (--peer-efs): recall@10 and QPS of a
          1-thread batch, a 1-thread loop and a 2-thread batch. QPS at recall 0.90 / 0.95 / 0.99
          interpolated; every figure with its ratio to the best peer. Targets (PASS / FAIL):
          QPS at 0.95 >= 1.4x the best peer's in each mode, build time <= 0.75x the best peer's,
          peak build RSS (without the input) <= 1.2x the file.

  limit   an index of --n x --dims generated clustered float32 vectors (chassis.datasets.clustered,
          --clusters 1024 clusters of about a thousand points, seed 16: recall@10 0.95 at about
          ef 128 at a million; the default 64 clusters of 15,600 points in 384 isotropic
          dimensions need ef 512), exact top-100 of 1,000 queries, built once by add_batch on 2
          threads (M=16, ef_construction=200, cached in --workdir): float32, and with 8-bit
          codes (quantization="int8"), with 4-bit codes ("int4"), and in half precision (precision="half"). Per variant and memory limit (none, then 1/2, 1/4 and 1/8
          of the file's size): the file is evicted from the page cache (fsync + fadvise
          DONTNEED, checked with mincore), and a fresh process, placed in a cgroup-v1 memory
          cgroup with that limit (the page cache it faults in is charged to it), opens it as an
          IndexReader and searches blocks of queries it has not seen (children/limit_search.py):
          the first query, two warm-up blocks (at the lowest and highest ef), then per ef a block
          one query at a time on one thread (QPS, p50 / p99 latency, recall@10, MiB read from
          the disk per query by /proc/self/io read_bytes) and a block by search_batch on 2
          threads (--settle N: N more blocks at the first ef before those, each reported, for a
          reader that has run a while). Variants (--variants to choose): each file as it is, and
          after warm(vectors=False) (all but the full vectors read in first); and float32 with
          a search_batch of a block as the process's first search (QPS and MiB read per query
          of that first batch). Whether the kernel killed the process (memory.oom_control) is
          reported. Needs root and cgroup v1's memory controller (/sys/fs/cgroup/memory);
          without them only the unlimited runs are made, and it says so.

  naming  paired: at a quarter of each file, runs that name their next pages (the default)
          and runs with CHASSIS_NAME_PAGES=0 alternate, --pairs pairs; medians and the median
          of the paired ratios.

  beam    paired the same way: layer 0 expanding several candidates per round where pages are
          named (the default, DiskANN's beam) against one at a time (CHASSIS_BEAM=1).

  commits paired: one add + flush() at a time (--adds of them) on a --commit-n x --dims index
          of the same generated data (float32, built once), runs with the redo log (the
          default) and with CHASSIS_REDO=0 alternating in fresh processes on fresh copies of
          the file, --pairs pairs; median, p90 / p99 / max and mean of add, flush and both,
          and close() (the checkpoint that writes the small flushes back).

  alone   Chassis alone at --n (10,000,000 x 384: the peers' builds would take hours on 2
          cores), each of --alone-engines (chassis-half by default: half-precision vectors) on
          the same generated data: the build and the searches as in peers (sweep --alone-efs;
          QPS with the file in the page cache), then in fresh processes, each on the evicted
          file (children/large_ops.py): warm(wait=True), the file's mappings against
          vm.max_map_count, check(), --adds add + flush() calls, and the deletion of a tenth of
          the ids followed by compact() (which changes the file: its build is not cached).
          Targets: open of an evicted file under 1 ms, add + flush() median at most 0.5 ms.

    python benchmarks/bench_scale.py --only peers            # 1,000,000 x 384, every peer
    python benchmarks/bench_scale.py --only alone --n 10000000 --timeout 10800   # ~1.5 h
    python benchmarks/bench_scale.py --only limit            # 1,000,000 x 384 (builds ~10 min)
    python benchmarks/bench_scale.py --only commits --pairs 4   # 100,000 x 384 (~3 min)
    python benchmarks/bench_scale.py --only naming --pairs 3
    python benchmarks/bench_scale.py --only beam --pairs 3
    python benchmarks/bench_scale.py --n 200000 --json out.json
    python benchmarks/bench_scale.py --quick                 # smoke run, 20,000 x 384

Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from chassis import datasets
from chassis._bench import CGROUP_V1, memory_cgroup_problem, table

sys.path.insert(0, str(Path(__file__).resolve().parent))
# OURS is read as bench_scale.OURS by report.py.
from scale_peers import OURS as OURS  # noqa: E402
from scale_peers import PEERS, bench_alone, bench_peers, load_data, print_alone, print_peers  # noqa: E402
from toolkit import (  # noqa: E402
    MiB,
    add_json_option,
    child_script,
    evict_file,
    log,
    run_record,
    write_results,
)


class MemoryCgroup:
    """A cgroup-v1 memory cgroup of its own with a limit; removed on exit."""

    def __init__(self, limit: int) -> None:
        self.path = CGROUP_V1 / f"chassis-bench-{os.getpid()}-{time.monotonic_ns()}"
        self.limit = limit

    def __enter__(self) -> MemoryCgroup:
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
        return self

    def join(self) -> None:
        """Put the calling process in the cgroup (a child's preexec_fn)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def stats(self) -> dict[str, int]:
        oom = dict(
            line.split() for line in (self.path / "memory.oom_control").read_text().splitlines()
        )
        return {
            "max_usage": int((self.path / "memory.max_usage_in_bytes").read_text()),
            "failcnt": int((self.path / "memory.failcnt").read_text()),
            "oom_kill": int(oom.get("oom_kill", 0)),
        }

    def __exit__(self, *exc: object) -> None:
        for _ in range(50):
            try:
                (self.path / "memory.force_empty").write_text("0")
            except OSError:
                pass
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def build(
    base: np.ndarray, workdir: Path, tag: str, clusters: int, opts: dict[str, Any]
) -> tuple[Path, float | None]:
    import chassis

    n, d = base.shape
    path = workdir / f"{tag}-{n}x{d}-c{clusters}-m16-efc200.chassis"
    if path.exists():
        return path, None
    tmp = Path(str(path) + ".building")
    for p in (tmp, Path(str(tmp) + ".undo")):
        p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    index = chassis.VectorIndex(
        str(tmp), d, chassis.IndexOptions(max_connections=16, ef_construction=200, **opts)
    )
    index.add_batch(base, threads=2)
    index.flush()
    index.close()
    secs = time.perf_counter() - t0
    os.replace(tmp, path)
    Path(str(tmp) + ".undo").unlink(missing_ok=True)
    log(f"  built {path.name} in {secs:.0f} s")
    return path, secs


def limited_run(
    path: Path,
    qf: Path,
    gf: Path,
    limit: int | None,
    args: argparse.Namespace,
    warm: str = "",
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    evict_file(path)
    cmd = [
        sys.executable,
        child_script("limit_search"),
        str(path),
        str(qf),
        str(gf),
        "10",
        str(args.block),
        ",".join(map(str, args.efs)),
        "2",
        warm,
        str(args.settle),
    ]
    env = {**os.environ, **(env or {})}
    if limit is None:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        stats: dict[str, int] = {}
    else:
        with MemoryCgroup(limit) as cg:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=args.timeout,
                env=env,
                preexec_fn=cg.join,
            )
            stats = cg.stats()
    res: dict[str, Any] = {"limit_mib": None if limit is None else limit / MiB, **stats}
    res["returncode"] = proc.returncode
    if proc.returncode != 0:
        res["error"] = proc.stderr[-2000:]
        return res
    res.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return res


def at_recall(points: list[dict[str, Any]], target: float, key: str) -> float | None:
    """`key` at recall `target`, linear between the two ef points around it (None if not reached)."""
    pts = sorted(points, key=lambda p: p["recall"])
    for a, b in zip(pts, pts[1:]):
        if a["recall"] <= target <= b["recall"]:
            if b["recall"] == a["recall"]:
                return b[key]
            t = (target - a["recall"]) / (b["recall"] - a["recall"])
            return a[key] + t * (b[key] - a[key])
    if pts and pts[0]["recall"] >= target:
        return pts[0][key]
    return None


# name: (index file, warm before searching, environment)
VARIANTS: dict[str, tuple[str, str, dict[str, str]]] = {
    "float32": ("float32", "", {}),
    "float32, warm(vectors=False)": ("float32", "walk", {}),
    "float32, first call search_batch": ("float32", "batch", {}),
    "int8": ("int8", "", {}),
    "int8, warm(vectors=False)": ("int8", "walk", {}),
    "half": ("half", "", {}),
    "int4": ("int4", "", {}),
    "int4, warm(vectors=False)": ("int4", "walk", {}),
}
FILES = {
    "float32": {},
    "int8": {"quantization": "int8"},
    "half": {"precision": "half"},
    "int4": {"quantization": "int4"},
}


def bench_limit(args: argparse.Namespace) -> dict[str, Any]:
    why = memory_cgroup_problem()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    base, qf, gf = load_data(args.n, args.dims, args.nq, args.clusters, workdir)
    out: dict[str, Any] = {"skipped": why, "files": {}, "variants": {}}
    paths = {}
    # Only the files the chosen variants search are built.
    tags = {t for v, (t, _, _) in VARIANTS.items() if not args.variants or v in args.variants}
    for tag, opts in FILES.items():
        if tag not in tags:
            continue
        path, secs = build(base, workdir, tag, args.clusters, opts)
        paths[tag] = path
        out["files"][tag] = {"file_mib": path.stat().st_size / MiB, "build_s": secs}
    del base
    if why is not None:
        log(f"  memory-limited runs skipped: {why}")
    for name, (tag, warm, env) in VARIANTS.items():
        if args.variants and name not in args.variants:
            continue
        path = paths[tag]
        size = path.stat().st_size
        limits: list[int | None] = [None]
        if why is None:
            limits += [size // f for f in args.fractions]
        v: dict[str, Any] = {"file": tag, "runs": []}
        for limit in limits:
            r = limited_run(path, qf, gf, limit, args, warm, env)
            r["fraction"] = None if limit is None else round(size / limit)
            v["runs"].append(r)
            lim = "none" if limit is None else f"1/{r['fraction']}"
            if "error" in r:
                log(f"  {name}, limit {lim}: failed: {r['error'][-300:]}")
            else:
                pts = [
                    (
                        p["ef"],
                        round(p["recall"], 3),
                        round(p["qps"]),
                        round(p["read_mib_per_query"], 2),
                    )
                    for p in r["loop"]
                ]
                log(f"  {name}, limit {lim}: (ef, recall, QPS, MiB/query) {pts}")
                if "first_batch" in r:
                    fb = r["first_batch"]
                    log(
                        f"    first call search_batch of {fb['queries']} at ef {fb['ef']}: "
                        f"QPS {fb['qps']:,.0f}, MiB/query {fb['read_mib_per_query']:.2f}, "
                        f"recall {fb['recall']:.3f}"
                    )
                if r.get("settle"):
                    qps = [round(b["qps"]) for b in r["settle"]]
                    mib = [round(b["read_mib_per_query"], 2) for b in r["settle"]]
                    log(f"    settling at ef {args.efs[0]}: QPS {qps}, MiB/query {mib}")
        out["variants"][name] = v
    return out


# Paired comparisons at a quarter of each file: (label on, label off, environment of the off
# runs). `naming`: the pages named (the default) against CHASSIS_NAME_PAGES=0; `beam`: layer 0
# expanding several candidates per round (the default) against one at a time, CHASSIS_BEAM=1.
PAIRED: dict[str, tuple[str, str, dict[str, str]]] = {
    "naming": ("pages named", "not named", {"CHASSIS_NAME_PAGES": "0"}),
    "beam": ("beam", "one at a time", {"CHASSIS_BEAM": "1"}),
}


def bench_paired(args: argparse.Namespace, what: str) -> dict[str, Any]:
    """Paired: at a quarter of each file, runs of the default and runs with PAIRED[what]'s
    environment alternate (on off, off on, ...), --pairs pairs per file."""
    on_label, off_label, off_env = PAIRED[what]
    why = memory_cgroup_problem()
    if why is not None:
        log(f"  paired {what} runs skipped: {why}")
        return {"skipped": why}
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    base, qf, gf = load_data(args.n, args.dims, args.nq, args.clusters, workdir)
    paths = {
        tag: build(base, workdir, tag, args.clusters, opts)[0]
        for tag, opts in FILES.items()
        if tag in ("float32", "int8")
    }
    del base
    out: dict[str, Any] = {"skipped": None, "labels": [on_label, off_label], "files": {}}
    for tag, path in paths.items():
        limit = path.stat().st_size // 4
        runs: dict[str, list[dict[str, Any]]] = {on_label: [], off_label: []}
        for i in range(args.pairs):
            for mode in (on_label, off_label) if i % 2 == 0 else (off_label, on_label):
                env = off_env if mode == off_label else {}
                r = limited_run(path, qf, gf, limit, args, "", env)
                if "error" in r:
                    raise RuntimeError(f"{tag}, {mode}: {r['error'][-500:]}")
                row = {
                    "qps": at_recall(r["loop"], 0.95, "qps"),
                    "qps_batch": at_recall(r["batch"], 0.95, "qps"),
                    "read_mib_per_query": at_recall(r["loop"], 0.95, "read_mib_per_query"),
                    "run": r,
                }
                runs[mode].append(row)
                log(f"  {tag}, {mode}: QPS {row['qps']}, batch {row['qps_batch']} (recall 0.95)")
        out["files"][tag] = runs
    return out


def bench_commits(args: argparse.Namespace) -> dict[str, Any]:
    """Paired: single add + flush() with the redo log and with CHASSIS_REDO=0, alternating
    (on off, off on, ...) in fresh processes, each on a fresh copy of the same built file."""
    import shutil

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    dsm = datasets
    base, queries = dsm.clustered(
        args.commit_n, args.dims, args.adds, clusters=args.clusters, seed=16
    )
    path, _ = build(base, workdir, "float32", args.clusters, {})
    del base
    vf = workdir / f"adds-{args.commit_n}x{args.dims}-{args.adds}.npy"
    np.save(vf, queries)
    copy = workdir / "commits-copy.chassis"
    runs: dict[str, list[dict[str, Any]]] = {"redo log": [], "index file": []}
    for i in range(args.pairs):
        for mode in ("redo log", "index file") if i % 2 == 0 else ("index file", "redo log"):
            for p in (copy, Path(f"{copy}.undo"), Path(f"{copy}.redo")):
                p.unlink(missing_ok=True)
            shutil.copyfile(path, copy)
            env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
            if mode == "index file":
                env["CHASSIS_REDO"] = "0"
            proc = subprocess.run(
                [sys.executable, child_script("add_flush"), str(copy), str(vf), str(args.adds)],
                capture_output=True,
                text=True,
                timeout=args.timeout,
                env=env,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{mode}: {proc.stderr[-2000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[mode].append(r)
            log(
                f"  {mode}: add + flush median {r['both']['median']:.3f} ms "
                f"(flush {r['flush']['median']:.3f}), mean {r['both']['mean']:.3f}"
            )
    copy.unlink(missing_ok=True)
    return {"n": args.commit_n, "dims": args.dims, "adds": args.adds, "runs": runs}


def print_commits(res: dict[str, Any]) -> None:
    print(
        f"\none add + flush() at a time, {res['n']:,} x {res['dims']} float32, "
        f"{res['adds']} per run, medians over runs (ms)"
    )
    rows = []

    def med(runs: list[dict[str, Any]], part: str, key: str) -> str:
        return f"{float(np.median([r[part][key] for r in runs])):.3f}"

    for mode, runs in res["runs"].items():
        rows.append(
            [
                mode,
                med(runs, "both", "median"),
                med(runs, "flush", "median"),
                med(runs, "add", "median"),
                med(runs, "both", "p99"),
                med(runs, "both", "mean"),
                f"{float(np.median([r['close_ms'] for r in runs])):.1f}",
            ]
        )
    print(table(["commits through", "add+flush", "flush", "add", "p99", "mean", "close"], rows))
    a, b = res["runs"]["redo log"], res["runs"]["index file"]
    ratios = [x["both"]["median"] / y["both"]["median"] for x, y in zip(a, b)]
    print(f"paired ratio of add+flush medians (redo log / index file): {np.median(ratios):.2f}")


def print_paired(res: dict[str, Any], what: str) -> None:
    if res.get("skipped"):
        print(f"paired {what} runs skipped: {res['skipped']}")
        return
    import statistics

    on_label, off_label = res["labels"]
    rows = []
    for tag, runs in res["files"].items():
        for key, label in (
            ("qps", "QPS, one query at a time"),
            ("qps_batch", "QPS, batch on 2 threads"),
            ("read_mib_per_query", "MiB read per query"),
        ):
            # A run whose recall missed 0.95 in the ef sweep (a block of unseen queries) counts
            # out, with its pair.
            pairs = [
                (a[key], b[key])
                for a, b in zip(runs[on_label], runs[off_label])
                if a[key] is not None and b[key] is not None
            ]
            if not pairs:
                rows.append([tag, label, "-", "-", "recall 0.95 not reached"])
                continue
            on, off = [p[0] for p in pairs], [p[1] for p in pairs]
            ratios = [a / b for a, b in pairs]
            rows.append(
                [
                    tag,
                    label,
                    f"{statistics.median(on):,.2f}",
                    f"{statistics.median(off):,.2f}",
                    f"{statistics.median(ratios):.2f}",
                ]
            )
    print("\nAt a quarter of the file, recall@10 = 0.95, pairs alternated; medians")
    print(table(["file", "", on_label, off_label, "paired ratio"], rows))


def print_limit(res: dict[str, Any]) -> None:
    if res.get("skipped"):
        print(f"memory-limited runs skipped: {res['skipped']}")
    for tag, f in res["files"].items():
        built = f" (built in {f['build_s']:.0f} s)" if f["build_s"] else ""
        print(f"{tag}: file {f['file_mib']:,.0f} MiB{built}")
    nan = float("nan")
    rows = []
    for name, v in res["variants"].items():
        for r in v["runs"]:
            lim = (
                "none"
                if r["limit_mib"] is None
                else f"1/{r['fraction']} ({r['limit_mib']:,.0f} MiB)"
            )
            if "error" in r:
                rows.append(
                    [
                        name,
                        lim,
                        f"failed: return code {r['returncode']}, OOM kills {r.get('oom_kill')}",
                    ]
                    + [""] * 8
                )
                continue
            loop, batch = r["loop"], r["batch"]

            def at(points: list[dict[str, Any]], key: str) -> float:
                x = at_recall(points, 0.95, key)
                return nan if x is None else x

            rows.append(
                [
                    name,
                    lim,
                    f"{r['first_ms']:.0f}",
                    f"{at(loop, 'ef'):.0f}",
                    f"{at(loop, 'qps'):,.0f}",
                    f"{at(batch, 'qps'):,.0f}",
                    f"{at(loop, 'p50_ms'):.2f}",
                    f"{at(loop, 'p99_ms'):.2f}",
                    f"{at(loop, 'read_mib_per_query'):.2f}",
                    f"{r.get('oom_kill', 0)}",
                    f"{r['resident_mib']:,.0f}",
                ]
            )
    print(
        "\nAt recall@10 = 0.95 (interpolated between the ef points), one query at a time on one thread; "
        "batch: search_batch on 2 threads"
    )
    print(
        table(
            [
                "variant",
                "memory limit",
                "first query ms",
                "ef",
                "QPS",
                "QPS batch 2t",
                "p50 ms",
                "p99 ms",
                "MiB read / query",
                "OOM kills",
                "resident MiB at end",
            ],
            rows,
        )
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only",
        default="peers,limit,naming,commits",
        help="peers, limit, naming, beam, commits, alone (comma-separated)",
    )
    ap.add_argument(
        "--engines", type=lambda s: s.split(","), default=PEERS.split(","), help="of --only peers"
    )
    ap.add_argument(
        "--peer-efs",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512],
        help="ef sweep of --only peers",
    )
    ap.add_argument(
        "--alone-engines",
        type=lambda s: s.split(","),
        default=["chassis-half"],
        help="of --only alone (chassis, chassis-half, chassis-int8, chassis-codes)",
    )
    ap.add_argument(
        "--alone-efs",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[32, 48, 64, 96, 128, 192, 256, 384],
        help="ef sweep of --only alone",
    )
    ap.add_argument(
        "--alone-steps",
        type=lambda s: s.split(","),
        default=["warm", "check", "commits", "compact"],
        help="of --only alone, after the build and the sweep (the commits and the compaction "
        "change the file: the next run builds it again)",
    )
    ap.add_argument("--commit-n", type=int, default=100_000, help="index size of the commits runs")
    ap.add_argument("--adds", type=int, default=1000, help="add + flush calls per commits run")
    ap.add_argument("--pairs", type=int, default=2, help="pairs of the naming and beam comparisons")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--clusters", type=int, default=1024)
    ap.add_argument("--block", type=int, default=100, help="queries per measured block")
    ap.add_argument("--efs", type=lambda s: [int(x) for x in s.split(",")], default=[64, 128, 256])
    ap.add_argument("--fractions", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8])
    ap.add_argument(
        "--settle",
        type=int,
        default=0,
        help="limit: this many more blocks at the first ef before the measured ones, each reported",
    )
    ap.add_argument(
        "--variants",
        type=lambda s: [x.strip() for x in s.split(";")],
        default=[],
        help="limit: only these variants (';'-separated names, as in VARIANTS: 'int8;half')",
    )
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument(
        "--workdir",
        default=os.environ.get(
            "CHASSIS_SCALE_DIR", str(Path(tempfile.gettempdir()) / "chassis-scale")
        ),
        help="where data and index files are cached (env CHASSIS_SCALE_DIR)",
    )
    ap.add_argument("--quick", action="store_true")
    add_json_option(ap)
    args = ap.parse_args(argv)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: no variant named {unknown}; the variants are {list(VARIANTS)}")
    if args.quick:
        args.n, args.nq, args.block, args.clusters = 20_000, 500, 50, 64
        args.commit_n, args.adds = 20_000, 200
    # A limited run searches (a first batch,) the first query, two warm-up blocks, --settle
    # blocks, then a block one at a time and one in a batch per ef, each of queries it has not
    # seen.
    first_batch = any(VARIANTS[v][1] == "batch" for v in args.variants or VARIANTS)
    need = 1 + args.block * (2 + first_batch + args.settle + 2 * len(args.efs))
    searched = {"limit", "naming", "beam"} & set(args.only.split(","))
    if searched and need > args.nq:
        ap.error(
            f"--only {','.join(sorted(searched))} needs {need} queries (1 + --block {args.block} "
            f"x (2 + {int(first_batch)} first batch + --settle {args.settle} + 2 x "
            f"{len(args.efs)} --efs)) and --nq is "
            f"{args.nq}: lower --block, --settle or the number of --efs"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    res = run_record(args)
    only = args.only.split(",")
    # The parts in the order they run: what measures one, and what prints it (returning the
    # checks of the parts that have some).
    parts: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = [
        ("peers", bench_peers, print_peers),
        ("limit", bench_limit, print_limit),
        *[(w, partial(bench_paired, what=w), partial(print_paired, what=w)) for w in PAIRED],
        ("alone", bench_alone, print_alone),
        ("commits", bench_commits, print_commits),
    ]
    for what, measure, show in parts:
        if what in only:
            res[what] = measure(args)
            checks = show(res[what])
            if checks is not None:
                res[what]["checks"] = checks
    write_results(args.json, "bench_scale", res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
