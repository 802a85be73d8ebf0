"""Churn: rounds of replacing a share of the live rows, then search speed at equal recall
against a fresh build of the same rows, and the file's size.

Each round changes `--share` of the live rows, chosen at random, and flushes:

  --kind replace  deletes them (`delete_batch`) and adds as many rows drawn from those not
                  live, under new ids (`add_batch`);
  --kind upsert   gives them new vectors, drawn from the rows not live, under the same ids
                  (`upsert`).

The rows come from debian-minilm (`--data minilm`) or from generated clustered data
(`--data clustered`, twice `--rows` rows of 384 dimensions). After the rounds named by
`--measure`, the live rows are searched (one thread, `search_batch`, an ef sweep, recall@10
against the brute force over the live rows) beside:

  fresh    chassis built from scratch on the same live rows;
  hnswlib  the same churn on hnswlib (replace: mark_deleted, add_items(replace_deleted=True);
           upsert: add_items with the ids present, which updates them), and a fresh hnswlib
           build (with --engines chassis,hnswlib).

Also timed once: deleting `--delete-n` ids in one `delete_batch` against as many `delete` calls,
each after a lookup has built the id map (the delete itself; the first delete's, which builds
it, is recorded too): once as the first writes after a build's commit, once after a first
batch of deletes and its flush (a small commit, which leaves the pages it wrote writable).
`--plot PATH` draws QPS at recall 0.95 and the file's size per round.

    python benchmarks/bench_churn.py
    python benchmarks/bench_churn.py --quick
    python benchmarks/bench_churn.py --rounds 10 --measure 1,5,10 --json
    python benchmarks/bench_churn.py --kind upsert --rounds 10 --measure 1,5,10 --json
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import chassis
import numpy as np
from chassis import datasets
from chassis._bench import fmt, qps_at_targets, table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toolkit import MINILM, Parser, add_json_option, csv, log, run_record, write_results  # noqa: E402


def _parse(argv: list[str] | None = None):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--minilm", default=str(MINILM), help="the debian-minilm folder")
    p.add_argument("--data", choices=("minilm", "clustered"), default="minilm")
    p.add_argument("--kind", choices=("replace", "upsert"), default="replace")
    p.add_argument("--plot", help="write a PNG of QPS at recall 0.95 and file size per round")
    p.add_argument("--engines", default="chassis,hnswlib")
    p.add_argument("--share", type=float, default=0.2, help="rows deleted (and added) per round")
    p.add_argument("--efs", default="10,16,24,32,48,64,96,128")
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--efc", type=int, default=200)
    p.add_argument("--threads", type=int, default=2, help="build threads (2)")
    p.add_argument("--passes", type=int, default=5, help="passes per ef (median time)")
    p.add_argument("--quick", action="store_true", help="a smoke run")
    p.sized("--rows", full=25_000, quick=3_000, help="live rows")
    p.sized("--rounds", full=10, quick=2, help="rounds of churn")
    p.sized("--queries", full=500, quick=50, help="queries")
    p.sized("--delete-n", full=10_000, quick=1_000, help="ids of the delete timing")
    p.add_argument("--measure", help="rounds after which to search (default: 0, 1, half, last)")
    add_json_option(p)
    a = p.parse_args(argv)
    return a


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def sweeps(searches: dict[str, Any], queries, truth, efs, passes: int) -> dict[str, list]:
    """Recall@10 and QPS per ef of each search, `passes` passes with the searches alternating
    within each (so that a slow moment of the machine falls on all of them), median times;
    for chassis searches also the distances each query computed."""
    times: dict[str, dict[int, list[float]]] = {k: {ef: [] for ef in efs} for k in searches}
    found: dict[str, dict[int, np.ndarray]] = {k: {} for k in searches}
    dists: dict[str, dict[int, float]] = {k: {} for k in searches}
    for _ in range(passes):
        for ef in efs:
            for name, search in searches.items():
                before = chassis._chassis._search_counters()
                start = time.perf_counter()
                ids = np.asarray(search(queries, ef))
                times[name][ef].append(time.perf_counter() - start)
                after = chassis._chassis._search_counters()
                found[name][ef] = ids
                if after[0] > before[0]:
                    dists[name][ef] = (after[1] - before[1]) / (after[0] - before[0])
    out = {}
    for name in searches:
        out[name] = []
        for ef in efs:
            ids = found[name][ef]
            hits = sum(len(set(g.tolist()) & set(t.tolist())) for g, t in zip(ids, truth))
            point = {
                "ef": ef,
                "recall": hits / truth.size,
                "qps": len(queries) / float(np.median(times[name][ef])),
            }
            if ef in dists[name]:
                point["distances"] = dists[name][ef]
            out[name].append(point)
    return out


def chassis_search(idx):
    return lambda q, ef: idx.search_batch(q, 10, ef=ef, threads=1)[0]


def hnsw_search(index):
    def run(q, ef):
        index.set_ef(ef)
        return index.knn_query(q, 10, num_threads=1)[0]

    return run


def fresh_chassis(path: str, rows: np.ndarray, ids: np.ndarray, args) -> chassis.VectorIndex:
    opts = chassis.IndexOptions(max_connections=args.m, ef_construction=args.efc)
    idx = chassis.VectorIndex(path, rows.shape[1], opts)
    idx.add_batch(rows, ids, threads=args.threads)
    idx.flush()
    return idx


def delete_timing(base: np.ndarray, want: int, args, folder: Path) -> dict[str, float]:
    """Seconds to delete n ids with one delete_batch, and with n delete calls (same index
    built each time), after a lookup has built the id map; and the one delete_batch's
    seconds without that lookup first ("batch_first"). These are the first writes after a
    build's commit (n: `want`, at most half the rows). "steady_batch" and "steady_single":
    the same on 3n rows (n at most a third of them) after a first batch of n deletes and its
    flush, a small one (through the redo log), which leaves the header pages writable; a
    flush that also commits thousands of added rows leaves them as a build's commit does."""
    out: dict[str, float] = {}
    for how in ("batch_first", "batch", "single", "steady_batch", "steady_single"):
        steady = how.startswith("steady")
        n = min(want, len(base) // (3 if steady else 2))
        out["steady_n" if steady else "n"] = n
        rows = 3 * n if steady else 2 * n
        idx = fresh_chassis(str(folder / f"delete-{how}.chassis"), base[:rows], None, args)
        ids = np.random.default_rng(0).choice(rows, size=2 * n if steady else n, replace=False)
        ids = ids.astype(np.uint64)
        if how != "batch_first":
            assert 0 in idx  # builds the id map
        if steady:
            assert idx.delete_batch(ids[:n]) == n
            idx.flush()
            ids = ids[n:]
        start = time.perf_counter()
        if how.endswith("single"):
            for i in ids.tolist():
                idx.delete(i)
        else:
            assert idx.delete_batch(ids) == n
        out[how] = time.perf_counter() - start
        idx.close()
    return out


def load(args) -> tuple[np.ndarray, np.ndarray, str]:
    """(rows, queries, name) of `--data`: rows enough for the live ones and their successors."""
    if args.data == "clustered":
        base, queries = datasets.clustered(2 * args.rows, 384, args.queries, seed=7)
        return base, queries, f"clustered ({2 * args.rows:,} x 384, generated)"
    data = datasets.load_npy_folder(args.minilm)
    base = np.ascontiguousarray(data.base, dtype=np.float32)
    return (
        base,
        np.ascontiguousarray(data.queries[: args.queries], dtype=np.float32),
        "debian-minilm",
    )


HEADERS = [
    "round",
    "live",
    "chassis",
    "fresh",
    "ratio",
    "recall@ef16 churn/fresh",
    "widest recall gap (ef)",
    "file / fresh",
    "hnswlib",
    "hnswlib fresh",
    "chassis / hnswlib",
]


def _ratio(q: dict[str, Any], a: str, b: str) -> str:
    return fmt(q[a] / q[b], ".2f") if q.get(a) and q.get(b) else "-"


def summary(rounds: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The table of the measured rounds (this script's and `report.py`'s): QPS at recall 0.95,
    recall at ef 16 and where recall per ef falls furthest short of the fresh build's, sizes."""
    rows = []
    for e in rounds:
        if "chassis" not in e:
            continue
        q = {
            k: qps_at_targets(e[k], (0.95,))["0.95"].get("qps")
            for k in ("chassis", "fresh", "hnswlib", "hnswlib_fresh")
            if k in e
        }
        rec16 = {
            k: next((p["recall"] for p in e[k] if p["ef"] == 16), None)
            for k in ("chassis", "fresh")
        }
        gap = max((f["recall"] - c["recall"], c["ef"]) for c, f in zip(e["chassis"], e["fresh"]))
        rows.append(
            [
                str(e["round"]),
                f"{e['live']:,}",
                fmt(q.get("chassis")),
                fmt(q.get("fresh")),
                _ratio(q, "chassis", "fresh"),
                f"{rec16['chassis']:.3f} / {rec16['fresh']:.3f}"
                if rec16["chassis"] is not None and rec16["fresh"] is not None
                else "-",
                f"{gap[0]:.3f} ({gap[1]})",
                fmt(e["file_bytes"] / e["fresh_file_bytes"], ".2f"),
                fmt(q.get("hnswlib")),
                fmt(q.get("hnswlib_fresh")),
                _ratio(q, "chassis", "hnswlib"),
            ]
        )
    return HEADERS, rows


def main() -> None:
    args = _parse()
    engines = csv(args.engines)
    efs = [int(e) for e in csv(args.efs)]
    base, queries, data_name = load(args)
    n = min(args.rows, len(base) // 2)
    measure = (
        {int(r) for r in csv(args.measure)}
        if args.measure
        else {0, 1, args.rounds // 2, args.rounds}
    )
    rng = np.random.default_rng(7)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="chassis-churn-") as tmp:
        folder = Path(tmp)
        timing = delete_timing(base, args.delete_n, args, folder)
        log(
            f"delete {timing['n']:,} ids: batch {timing['batch']:.4f} s, single calls "
            f"{timing['single']:.4f} s (first batch, building the id map: {timing['batch_first']:.4f} s;"
            f" {timing['steady_n']:,} after a batch of deletes and its flush: "
            f"{timing['steady_batch']:.4f} s and {timing['steady_single']:.4f} s)"
        )
        live = rng.choice(len(base), size=n, replace=False)  # rows of `base` live, by id order
        ids = np.arange(n, dtype=np.uint64)  # their ids
        next_id = n
        path = str(folder / "churn.chassis")
        idx = fresh_chassis(path, base[live], ids, args)
        hnsw = None
        if "hnswlib" in engines:
            import hnswlib

            hnsw = hnswlib.Index(space="l2", dim=base.shape[1])
            hnsw.init_index(
                max_elements=n, ef_construction=args.efc, M=args.m, allow_replace_deleted=True
            )
            hnsw.add_items(base[live], ids, num_threads=args.threads)
        for r in range(args.rounds + 1):
            if r > 0:
                k = int(args.share * len(ids))
                drop = rng.choice(len(ids), size=k, replace=False)
                keep = np.ones(len(ids), dtype=bool)
                keep[drop] = False
                # Upserted rows take vectors no live row has; added rows, any not live after.
                pool = np.setdiff1d(
                    np.arange(len(base)), live if args.kind == "upsert" else live[keep]
                )
                new_rows = rng.choice(pool, size=k, replace=False)
                if args.kind == "upsert":
                    t0 = t1 = time.perf_counter()
                    idx.upsert(base[new_rows], ids[drop], threads=args.threads)
                    t2 = time.perf_counter()
                    idx.flush()
                    t3 = time.perf_counter()
                    if hnsw is not None:
                        hnsw.add_items(base[new_rows], ids[drop], num_threads=args.threads)
                    live[drop] = new_rows
                else:
                    new_ids = np.arange(next_id, next_id + k, dtype=np.uint64)
                    next_id += k
                    t0 = time.perf_counter()
                    idx.delete_batch(ids[drop])
                    t1 = time.perf_counter()
                    idx.add_batch(base[new_rows], new_ids, threads=args.threads)
                    t2 = time.perf_counter()
                    idx.flush()
                    t3 = time.perf_counter()
                    if hnsw is not None:
                        for i in ids[drop].tolist():
                            hnsw.mark_deleted(i)
                        hnsw.add_items(
                            base[new_rows], new_ids, num_threads=args.threads, replace_deleted=True
                        )
                    live = np.concatenate([live[keep], new_rows])
                    ids = np.concatenate([ids[keep], new_ids])
                times = {"delete_s": t1 - t0, "add_s": t2 - t1, "flush_s": t3 - t2}
            else:
                times = {}
            entry: dict[str, Any] = {
                "round": r,
                "live": len(ids),
                "file_bytes": allocated(path),
                **times,
            }
            if r in measure:
                truth_rows, _ = datasets.ground_truth(base[live], queries, 10, "euclidean")
                truth = ids[truth_rows]
                fresh_path = str(folder / f"fresh-{r}.chassis")
                fresh = fresh_chassis(fresh_path, base[live], ids, args)
                searches = {"chassis": chassis_search(idx), "fresh": chassis_search(fresh)}
                h2 = None
                if hnsw is not None:
                    import hnswlib

                    h2 = hnswlib.Index(space="l2", dim=base.shape[1])
                    h2.init_index(max_elements=len(ids), ef_construction=args.efc, M=args.m)
                    h2.add_items(base[live], ids, num_threads=args.threads)
                    searches["hnswlib"] = hnsw_search(hnsw)
                    searches["hnswlib_fresh"] = hnsw_search(h2)
                entry.update(sweeps(searches, queries, truth, efs, args.passes))
                entry["fresh_file_bytes"] = allocated(fresh_path)
                fresh.close()
                os.remove(fresh_path)
                del h2
                q = {
                    k: qps_at_targets(entry[k], (0.95,))["0.95"].get("qps")
                    for k in entry
                    if isinstance(entry[k], list)
                }
                log(f"round {r}: " + ", ".join(f"{k} {fmt(v)}" for k, v in q.items()))
            rounds.append(entry)
        idx.close()
    headers, rows = summary(rounds)
    how = "upserted" if args.kind == "upsert" else "replaced"
    print(
        f"\n{data_name}, {n:,} live rows, {args.share:.0%} {how} per round; QPS at recall 0.95, one thread"
    )
    print(
        f"delete {timing['n']:,} ids: one delete_batch {timing['batch'] * 1e3:.2f} ms, "
        f"single calls {timing['single'] * 1e3:.2f} ms ({timing['single'] / timing['batch']:.0f}x); "
        f"{timing['steady_n']:,} after a batch of deletes and its flush "
        f"{timing['steady_batch'] * 1e3:.2f} ms and "
        f"{timing['steady_single'] * 1e3:.2f} ms ({timing['steady_single'] / timing['steady_batch']:.0f}x)"
    )
    print(table(headers, rows))
    versions = {e: _version(e) for e in ("chassis-index", *engines) if e != "chassis"}
    record = run_record(args, versions=versions, delete_timing=timing, rounds=rounds)
    write_results(args.json, "bench_churn", record)
    if args.plot:
        plot(args.plot, rounds, f"{data_name}, {n:,} live rows, {args.share:.0%} {how} a round")


def plot(path: str, rounds: list[dict[str, Any]], title: str) -> None:
    """QPS at recall 0.95 per measured round for each index, and the file's allocated size per
    round beside the fresh build's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    measured = [e for e in rounds if "chassis" in e]
    for name, style in (
        ("chassis", "-o"),
        ("fresh", "--o"),
        ("hnswlib", "-s"),
        ("hnswlib_fresh", "--s"),
    ):
        pts = [
            (e["round"], qps_at_targets(e[name], (0.95,))["0.95"].get("qps"))
            for e in measured
            if name in e
        ]
        pts = [(r, q) for r, q in pts if q]
        if pts:
            left.plot(*zip(*pts), style, label=name.replace("_", " "))
    left.set(xlabel="round", ylabel="QPS at recall@10 = 0.95 (one thread)", ylim=(0, None))
    left.legend(fontsize=8)
    right.plot(
        [e["round"] for e in rounds],
        [e["file_bytes"] / 2**20 for e in rounds],
        "-o",
        label="chassis",
    )
    fresh = [
        (e["round"], e["fresh_file_bytes"] / 2**20) for e in measured if "fresh_file_bytes" in e
    ]
    if fresh:
        right.plot(*zip(*fresh), "x", markersize=9, label="fresh build")
    right.set(xlabel="round", ylabel="allocated file size (MiB)", ylim=(0, None))
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
