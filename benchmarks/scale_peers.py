"""The parts of bench_scale.py that build in fresh processes at scale: the peers on one large
generated data set (--only peers) and Chassis alone at ten million (--only alone); and the
generated data every part of bench_scale.py uses.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from chassis import datasets
from chassis._bench import qps_at_targets, table, versus_best_peer
from toolkit import MiB, child_script, evict_file, log


# ------------------------------------------------------------------ generated data
def load_data(
    n: int, dims: int, nq: int, clusters: int, workdir: Path
) -> tuple[np.ndarray, Path, Path]:
    """The generated base (in memory), and the files of its queries and their exact top 100
    (the ground truth is computed once per shape and kept in `workdir`)."""
    base, queries = datasets.clustered(n, dims, nq, clusters=clusters, seed=16)
    tag = f"{n}x{dims}-c{clusters}-{nq}"
    qf, gf = workdir / f"q-{tag}.npy", workdir / f"gt-{tag}.npy"
    if not gf.exists():
        t0 = time.perf_counter()
        gt, _ = datasets.ground_truth(base, queries, 100)
        np.save(gf, gt)
        log(
            f"  ground truth of {nq:,} queries over {n:,} x {dims}: {time.perf_counter() - t0:.1f} s"
        )
    np.save(qf, queries)
    return base, qf, gf


# ------------------------------------------------------------------ peers at scale
PEERS = "chassis,hnswlib,faiss,usearch,chassisdb"
OURS = ("chassis", "chassis-int8", "chassis-codes")
GOAL_QPS, GOAL_BUILD, GOAL_RSS = 1.4, 0.75, 1.2  # the 1M targets (docstring)


def smaps_rss(pid: int, input_path: str) -> tuple[int, int] | None:
    """(resident bytes of process `pid`, of them the mapping of `input_path`), or None once it
    has exited."""
    total = inp = 0
    current = ""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                    parts = line.split(None, 5)
                    current = parts[5].strip() if len(parts) > 5 else ""
                elif line.startswith("Rss:"):
                    kib = int(line.split()[1]) * 1024
                    total += kib
                    if current == input_path:
                        inp += kib
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return total, inp


def peer_build(name: str, path: Path, base_file: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Build in a child (children/peer_build.py), sampling its memory every 0.5 s: peak RSS,
    and peak RSS without the input's pages (the engine's own)."""
    for p in (path, Path(f"{path}.undo"), Path(f"{path}.redo")):
        p.unlink(missing_ok=True)
    cmd = [sys.executable, child_script("peer_build"), name, str(path), str(base_file), "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = peak_own = 0
    started = time.monotonic()
    while proc.poll() is None:
        got = smaps_rss(proc.pid, str(base_file))
        if got is not None:
            peak, peak_own = max(peak, got[0]), max(peak_own, got[0] - got[1])
        time.sleep(0.5)
        if time.monotonic() - started > args.timeout:
            proc.kill()
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{name} build failed ({proc.returncode}): {err[-2000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res.update(peak_rss_mib=peak / MiB, peak_rss_own_mib=peak_own / MiB)
    return res


def peer_search(
    name: str, path: Path, qf: Path, gf: Path, dims: int, args: argparse.Namespace
) -> dict[str, Any]:
    evict_file(path)
    cmd = [
        sys.executable,
        child_script("peer_search"),
        name,
        str(path),
        str(qf),
        str(gf),
        str(dims),
        ",".join(map(str, args.peer_efs)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} search failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def data_files(args: argparse.Namespace, workdir: Path) -> tuple[Path, Path, Path]:
    """The base (.npy, mapped by the build children), the queries and their ground truth of
    --n x --dims, generated once into `workdir` and reused while the files are there."""
    workdir.mkdir(parents=True, exist_ok=True)
    n, d, nq, c = args.n, args.dims, args.nq, args.clusters
    base_file = workdir / f"base-{n}x{d}-c{c}.npy"
    tag = f"{n}x{d}-c{c}-{nq}"
    qf, gf = workdir / f"q-{tag}.npy", workdir / f"gt-{tag}.npy"
    if base_file.exists() and qf.exists() and gf.exists():
        return base_file, qf, gf
    base, qf, gf = load_data(n, d, nq, c, workdir)
    tmp = workdir / f"{base_file.name}.tmp.npy"
    np.save(tmp, base)
    os.replace(tmp, base_file)
    return base_file, qf, gf


def built_once(name: str, path: Path, base_file: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Build `name` at `path` in a child (peer_build), or take the build cached beside it
    (`<path>.build.json`: delete either file to build again); with the file's size."""
    meta = Path(f"{path}.build.json")
    if path.exists() and meta.exists():
        built = {**json.loads(meta.read_text()), "cached": True}
        log(f"  {name}: built earlier in {built['build_s']:.0f} s (cached)")
    else:
        meta.unlink(missing_ok=True)
        built = peer_build(name, path, base_file, args)
        meta.write_text(json.dumps(built))
        log(
            f"  {name}: built in {built['build_s']:.0f} s, peak RSS "
            f"{built['peak_rss_own_mib']:,.0f} MiB without the input"
        )
    built["file_mib"] = path.stat().st_size / MiB
    return built


def build_and_search(
    args: argparse.Namespace, names: list[str], prefix: str, efs: list[int]
) -> tuple[dict[str, Any], Path]:
    """Each engine of `names` built in a child of its own (cached in --workdir with its build
    figures: delete the file to build again), then opened and searched in another over `efs`.
    Returns the figures (with each file's path) and the queries' file."""
    workdir = Path(args.workdir)
    base_file, qf, gf = data_files(args, workdir)
    n, d = args.n, args.dims
    sweep_args = argparse.Namespace(**{**vars(args), "peer_efs": efs})
    out: dict[str, Any] = {"n": n, "dims": d, "clusters": args.clusters, "engines": {}}
    for name in names:
        path = workdir / f"{prefix}-{name}-{n}x{d}-c{args.clusters}-m16-efc200.idx"
        built = built_once(name, path, base_file, args)
        found = peer_search(name, path, qf, gf, d, sweep_args)
        log(
            f"  {name}: open {found['open_cold_ms']:.2f} ms cold, first query "
            f"{found['first_query_ms']:.1f} ms, "
            + ", ".join(
                f"ef {p['ef']} {p['recall']:.3f} {p['qps']:,.0f}/s" for p in found["sweep"]["batch"]
            )
        )
        out["engines"][name] = {"build": built, "search": found, "path": path.name}
    return out, qf


def bench_peers(args: argparse.Namespace) -> dict[str, Any]:
    """Every engine of --engines built and searched (`build_and_search`)."""
    return build_and_search(args, args.engines, "peer", args.peer_efs)[0]


def _peer_figures(e: dict[str, Any]) -> dict[str, Any]:
    """One engine's row: build, memory, file, open and QPS at each recall target per mode."""
    b, s = e["build"], e["search"]
    row = {
        "build_s": b["build_s"],
        "peak_rss_own_mib": b["peak_rss_own_mib"],
        "file_mib": b["file_mib"],
        "rss_per_file": b["peak_rss_own_mib"] / b["file_mib"],
        "open_cold_ms": s["open_cold_ms"],
        "open_warm_ms": s["open_warm_ms"],
    }
    for mode, points in s["sweep"].items():
        for t, cell in qps_at_targets(points).items():
            row[f"{mode}@{t}"] = cell["qps"]
    return row


def print_peers(res: dict[str, Any]) -> list[dict[str, Any]]:
    rows = {name: _peer_figures(e) for name, e in res["engines"].items()}
    print(
        f"\n{res['n']:,} x {res['dims']} float32 (clustered, {res['clusters']} clusters), M=16, "
        "ef_construction=200, built on 2 threads; QPS at recall@10 interpolated between ef points"
    )
    cols = [
        ("build_s", "build s", "low", "{:,.0f}"),
        ("peak_rss_own_mib", "peak RSS MiB", "low", "{:,.0f}"),
        ("file_mib", "file MiB", "low", "{:,.0f}"),
        ("open_cold_ms", "open cold ms", "low", "{:,.1f}"),
        ("open_warm_ms", "open warm ms", "low", "{:,.2f}"),
    ] + [
        (f"{mode}@{t}", f"{label} @{t}", "high", "{:,.0f}")
        for mode, label in (("batch", "1t batch"), ("loop", "1t loop"), ("batch2", "2t batch"))
        for t in ("0.9", "0.95", "0.99")
    ]
    # One comparison with the best peer per column, for the table and the targets alike.
    vs = versus_best_peer(
        rows,
        [(key, lambda _, r, k=key: r.get(k), better) for key, _, better, _ in cols],
        OURS[0],
        OURS,
    )
    lines = []
    for key, label, _, form in cols:
        line = [label]
        for name in rows:
            v = rows[name].get(key)
            line.append("-" if v is None else form.format(v))
        r, peer = (vs[key]["ratio"], vs[key]["best_peer"]) if vs else (None, None)
        line.append("-" if r is None else f"{r:.2f}x {peer}")
        lines.append(line)
    print(table(["", *rows, "chassis / best peer"], lines))
    checks = []

    def check(what: str, key: str, better: str, goal: float) -> None:
        r, peer = (vs[key]["ratio"], vs[key]["best_peer"]) if vs else (None, None)
        ok = r is not None and (r >= goal if better == "high" else r <= goal)
        checks.append({"what": what, "ratio": r, "best_peer": peer, "goal": goal, "pass": ok})

    for mode, label in (("batch", "1t batch"), ("loop", "1t loop"), ("batch2", "2t batch")):
        check(f"QPS at 0.95, {label} >= {GOAL_QPS}x best peer", f"{mode}@0.95", "high", GOAL_QPS)
    check(f"build time <= {GOAL_BUILD}x best peer", "build_s", "low", GOAL_BUILD)
    if "chassis" in rows:
        r = rows["chassis"]["rss_per_file"]
        checks.append(
            {
                "what": f"peak build RSS <= {GOAL_RSS}x file",
                "ratio": r,
                "goal": GOAL_RSS,
                "pass": r <= GOAL_RSS,
            }
        )
    for c in checks:
        r = "-" if c["ratio"] is None else f"{c['ratio']:.2f}"
        print(f"{'PASS' if c['pass'] else 'FAIL'}  {c['what']}: {r}")
    return checks


# ------------------------------------------------------------------ chassis alone, 10M
GOAL_OPEN_MS, GOAL_COMMIT_MS = 1.0, 0.5  # open of an evicted file; add + flush() median


def ops_child(step: str, path: Path, *extra: str, timeout: float) -> dict[str, Any]:
    """One step of children/large_ops.py on `path`, the file evicted first."""
    evict_file(path)
    cmd = [sys.executable, child_script("large_ops"), step, str(path), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{step} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_alone(args: argparse.Namespace) -> dict[str, Any]:
    """Chassis alone at --n (10,000,000: the peers' builds would take hours on 2 cores), per
    --alone-engines: the build and the searches as in --only peers (sweep --alone-efs), then
    in fresh processes, each on the evicted file: warm(wait=True) and the mappings, check(),
    --adds add + flush() calls (the queries added as new vectors), and the deletion of a tenth
    of the ids followed by compact(). The compaction changes the file: its build record is
    removed, so the next run builds it again."""
    out, qf = build_and_search(args, args.alone_engines, "alone", args.alone_efs)
    steps = args.alone_steps
    for name, e in out["engines"].items():
        path = Path(args.workdir) / e["path"]
        ops: dict[str, Any] = {}
        e["ops"] = ops
        t = args.timeout * 4
        if "warm" in steps:
            ops["warm"] = ops_child("warm", path, timeout=t)
            log(f"  {name}: warm {ops['warm']['warm_s']:.1f} s, {ops['warm']['index_maps']} maps")
        if "check" in steps:
            ops["check"] = ops_child("check", path, timeout=t)
            log(f"  {name}: check {ops['check']['check_s']:.1f} s, ok {ops['check']['check_ok']}")
        if "commits" in steps or "compact" in steps:
            # The file changes from here: the next run builds it again.
            Path(f"{path}.build.json").unlink(missing_ok=True)
        if "commits" in steps:
            evict_file(path)
            proc = subprocess.run(
                [sys.executable, child_script("add_flush"), str(path), str(qf), str(args.adds)],
                capture_output=True,
                text=True,
                timeout=t,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"add_flush failed: {proc.stderr[-2000:]}")
            ops["commits"] = json.loads(proc.stdout.strip().splitlines()[-1])
            log(f"  {name}: add + flush median {ops['commits']['both']['median']:.3f} ms")
        if "compact" in steps:
            ops["compact"] = ops_child("compact", path, "10", timeout=t)
            log(f"  {name}: compact {ops['compact']['compact_s']:.0f} s")
    return out


def print_alone(res: dict[str, Any]) -> list[dict[str, Any]]:
    print(
        f"\nChassis alone, {res['n']:,} x {res['dims']} (clustered, {res['clusters']} clusters), "
        "M=16, ef_construction=200, built on 2 threads"
    )
    rows: dict[str, dict[str, Any]] = {}
    for name, e in res["engines"].items():
        r = _peer_figures(e)
        o = e["ops"]
        warm, check = o.get("warm", {}), o.get("check", {})
        both = o.get("commits", {}).get("both", {})
        add, flush = o.get("commits", {}).get("add", {}), o.get("commits", {}).get("flush", {})
        compact = o.get("compact", {})
        r.update(
            first_query_ms=e["search"]["first_query_ms"],
            warm_s=warm.get("warm_s"),
            maps=warm.get("index_maps"),
            check_s=check.get("check_s"),
            commit_ms=both.get("median"),
            add_ms=add.get("median"),
            flush_ms=flush.get("median"),
            delete_s=compact.get("delete_s"),
            compact_s=compact.get("compact_s"),
            compacted_mib=compact.get("size_after_mib"),
        )
        rows[name] = r
    cols = [
        ("build_s", "build s", "{:,.0f}"),
        ("peak_rss_own_mib", "peak build RSS MiB", "{:,.0f}"),
        ("file_mib", "file MiB", "{:,.0f}"),
        ("open_cold_ms", "open, evicted file ms", "{:,.2f}"),
        ("first_query_ms", "first query, evicted file ms", "{:,.1f}"),
        ("batch@0.95", "1t batch QPS @0.95 (warm)", "{:,.0f}"),
        ("loop@0.95", "1t loop QPS @0.95 (warm)", "{:,.0f}"),
        ("batch2@0.95", "2t batch QPS @0.95 (warm)", "{:,.0f}"),
        ("warm_s", "warm() s", "{:,.1f}"),
        ("maps", "mappings of the file", "{:,}"),
        ("check_s", "check() s", "{:,.1f}"),
        ("commit_ms", "add + flush() median ms", "{:.3f}"),
        ("add_ms", "  add median ms", "{:.3f}"),
        ("flush_ms", "  flush() median ms", "{:.3f}"),
        ("delete_s", "delete a tenth s", "{:,.1f}"),
        ("compact_s", "compact() s", "{:,.0f}"),
        ("compacted_mib", "file after compact MiB", "{:,.0f}"),
    ]
    lines = [
        [label, *("-" if r.get(k) is None else f.format(r[k]) for r in rows.values())]
        for k, label, f in cols
    ]
    print(table(["", *rows], lines))
    checks = []
    for name, r in rows.items():
        for what, v, goal in (
            (
                f"{name}: open of an evicted file < {GOAL_OPEN_MS} ms",
                r["open_cold_ms"],
                GOAL_OPEN_MS,
            ),
            (
                f"{name}: add + flush() median <= {GOAL_COMMIT_MS} ms",
                r["commit_ms"],
                GOAL_COMMIT_MS,
            ),
        ):
            if v is None:
                continue
            ok = v <= goal
            checks.append({"what": what, "value": v, "goal": goal, "pass": ok})
            print(f"{'PASS' if ok else 'FAIL'}  {what}: {v:.3f}")
    return checks
