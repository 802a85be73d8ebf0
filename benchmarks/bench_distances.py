"""Algorithmic efficiency: distances computed per query at equal recall, chassis against hnswlib.

Both indexes are built the same way (M=16, ef_construction=200, 2 threads) on debian-minilm and
on the generated clustered set. Then, over an ef sweep:

  chassis   runs search_batch and reads the process's own counters
            (chassis._chassis._search_counters(): graph searches and the distances they computed,
            the entry point and the upper-layer descent included);
  hnswlib   has no such counter, so its saved graph (save_index) is read here and the search of
            hnswlib's searchKnn is replayed on it in NumPy: the greedy descent through the upper
            layers, then the beam search of layer 0 with ef = max(ef, k), counting every distance
            it computes. The replay must return the ids hnswlib's own knn_query returns at the
            same ef (printed as "replay agrees"), which checks that it is the same search.

Recall@10 against exact ground truth; distances per query at recall 0.90 / 0.95 / 0.99 are
interpolated along the sweep (like QPS in the other benchmarks), and printed with the ratio
chassis / hnswlib (below 1: chassis reaches the recall with fewer distances).

    python benchmarks/bench_distances.py
    python benchmarks/bench_distances.py --datasets minilm --queries 300 --json out.json
    python benchmarks/bench_distances.py --quick
"""

from __future__ import annotations

import argparse
import heapq
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import chassis
import numpy as np
from chassis import _chassis, datasets
from chassis._bench import TARGETS, fmt, machine_info, qps_at_targets, ratio, sweep_points, table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toolkit import MINILM, add_json_option, write_results  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="minilm,clustered")
    p.add_argument(
        "--minilm",
        default=str(MINILM),
        help="the debian-minilm folder ($CHASSIS_DATA/debian-minilm)",
    )
    p.add_argument("--clustered-n", type=int)
    p.add_argument("--queries", type=int, help="queries per data set (300; --quick: 50)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--efc", type=int, default=200)
    p.add_argument("--threads", type=int, default=2, help="build threads (2)")
    p.add_argument("--efs", default="10,16,24,32,48,64,96,128,192,256")
    p.add_argument("--quick", action="store_true")
    add_json_option(p)
    a = p.parse_args()
    a.queries = a.queries or (50 if a.quick else 300)
    a.clustered_n = a.clustered_n or (10_000 if a.quick else 100_000)
    if a.quick:
        a.efc = min(a.efc, 64)
    return a


def load(name: str, args) -> dict[str, Any]:
    ds = datasets
    if name == "minilm":
        d = ds.load_npy_folder(args.minilm)
        base, queries, metric = d.base, d.queries[: args.queries], d.metric
        if args.quick:
            base = base[:10_000]
    else:
        base, queries = ds.clustered(args.clustered_n, 128, args.queries, seed=0)
        metric = "euclidean"
    base = np.ascontiguousarray(base, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    truth, _ = ds.ground_truth(base, queries, args.k, metric)
    return {
        "name": name,
        "base": base,
        "queries": queries,
        "truth": np.asarray(truth),
        "metric": metric,
    }


def recall(got: np.ndarray, truth: np.ndarray) -> float:
    return float(
        np.mean([len(set(g.tolist()) & set(t.tolist())) / len(t) for g, t in zip(got, truth)])
    )


# ------------------------------------------------------------------ hnswlib's graph, replayed
class HnswGraph:
    """hnswlib's saved index (hnswalg.h saveIndex): its header, level-0 block and upper lists."""

    def __init__(self, path: str, dims: int):
        raw = open(path, "rb").read()

        def size_t(i: int) -> int:
            return int(np.frombuffer(raw[8 * i : 8 * i + 8], dtype=np.uint64)[0])

        (
            self.offset_l0,
            self.max_elements,
            self.count,
            self.size_per,
            self.label_off,
            self.data_off,
        ) = (size_t(i) for i in range(6))
        at = 48
        self.max_level = int(np.frombuffer(raw[at : at + 4], dtype=np.int32)[0])
        self.entry = int(np.frombuffer(raw[at + 4 : at + 8], dtype=np.uint32)[0])
        at += 8
        self.max_m, self.max_m0, self.m = (
            int(np.frombuffer(raw[at + 8 * i : at + 8 * i + 8], dtype=np.uint64)[0])
            for i in range(3)
        )
        at += 24 + 8 + 8  # mult_ (double), ef_construction_
        block = np.frombuffer(raw[at : at + self.count * self.size_per], dtype=np.uint8).reshape(
            self.count, self.size_per
        )
        at += self.count * self.size_per
        words0 = (
            block[:, self.offset_l0 : self.offset_l0 + 4 * (1 + self.max_m0)].copy().view(np.uint32)
        )
        self.l0_count = (words0[:, 0] & 0xFFFF).astype(np.int64)
        self.l0 = words0[:, 1:]
        self.data = block[:, self.data_off : self.data_off + 4 * dims].copy().view(np.float32)
        self.labels = block[:, self.label_off : self.label_off + 8].copy().view(np.uint64).ravel()
        per_level = self.max_m * 4 + 4
        self.upper: list[np.ndarray | None] = []
        for _ in range(self.count):
            size = int(np.frombuffer(raw[at : at + 4], dtype=np.uint32)[0])
            at += 4
            self.upper.append(
                np.frombuffer(raw[at : at + size], dtype=np.uint32).reshape(-1, per_level // 4)
                if size
                else None
            )
            at += size

    def neighbors(self, node: int, level: int) -> np.ndarray:
        if level == 0:
            return self.l0[node, : self.l0_count[node]]
        lists = self.upper[node]
        row = lists[level - 1]
        return row[1 : 1 + (int(row[0]) & 0xFFFF)]


def replay(g: HnswGraph, q: np.ndarray, k: int, ef: int, metric: str) -> tuple[list[int], int]:
    """hnswlib's searchKnn on its graph: (labels nearest first, distances computed)."""
    if metric == "euclidean":

        def dist(nodes):
            diff = g.data[nodes] - q
            return np.einsum("nd,nd->n", diff, diff)
    else:  # hnswlib "cosine" / "ip": 1 - dot over (normalised) stored vectors

        def dist(nodes):
            return 1.0 - g.data[nodes] @ q

    count = 1
    cur = g.entry
    cur_d = float(dist(np.array([cur]))[0])
    for level in range(g.max_level, 0, -1):
        changed = True
        while changed:
            changed = False
            nb = g.neighbors(cur, level)
            if len(nb) == 0:
                continue
            d = dist(nb)
            count += len(nb)
            i = int(np.argmin(d))
            # hnswlib walks the list in order, moving on every strictly nearer one: the end
            # point of that walk is the first minimum below cur_d.
            if d[i] < cur_d:
                cur, cur_d, changed = int(nb[i]), float(d[i]), True
    ef = max(ef, k)
    visited = {cur}
    count += 1  # searchBaseLayerST computes the entry point's distance again
    top = [(-cur_d, cur)]
    cand = [(cur_d, cur)]
    bound = cur_d
    while cand:
        cd, c = heapq.heappop(cand)
        if cd > bound and len(top) == ef:
            break
        nb = [int(x) for x in g.neighbors(c, 0) if int(x) not in visited]
        if not nb:
            continue
        visited.update(nb)
        ds = dist(np.array(nb))
        count += len(nb)
        for n, d in zip(nb, ds.tolist()):
            if len(top) < ef or bound > d:
                heapq.heappush(cand, (d, n))
                heapq.heappush(top, (-d, n))
                if len(top) > ef:
                    heapq.heappop(top)
                bound = -top[0][0]
    best = sorted((-d, n) for d, n in top)[:k]
    return [int(g.labels[n]) for _, n in best], count


def run(data: dict[str, Any], args, folder: Path) -> dict[str, Any]:
    import hnswlib

    base, queries, truth, metric, k = (
        data["base"],
        data["queries"],
        data["truth"],
        data["metric"],
        args.k,
    )
    efs = [int(e) for e in args.efs.split(",")]
    name = data["name"]
    t = time.perf_counter()
    idx = chassis.VectorIndex(
        None,
        base.shape[1],
        chassis.IndexOptions(max_connections=args.m, ef_construction=args.efc, metric=metric),
    )
    idx.add_batch(base, threads=args.threads)
    print(f"  [{name}] chassis built in {time.perf_counter() - t:.1f} s", flush=True)
    space = {"euclidean": "l2", "cosine": "cosine", "inner_product": "ip"}[metric]
    h = hnswlib.Index(space=space, dim=base.shape[1])
    h.init_index(max_elements=len(base), ef_construction=args.efc, M=args.m, random_seed=100)
    t = time.perf_counter()
    h.add_items(base, np.arange(len(base)), num_threads=args.threads)
    print(f"  [{name}] hnswlib built in {time.perf_counter() - t:.1f} s", flush=True)
    hpath = str(folder / f"{name}.hnsw")
    h.save_index(hpath)
    g = HnswGraph(hpath, base.shape[1])
    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True) if metric == "cosine" else queries
    rows: dict[str, list[dict[str, float]]] = {"chassis": [], "hnswlib": []}
    agree_all = True
    for ef in efs:
        before = _chassis._search_counters()
        ids, _ = idx.search_batch(queries, k, ef=ef, threads=1)
        after = _chassis._search_counters()
        searches, dists = after[0] - before[0], after[1] - before[1]
        rows["chassis"].append(
            {"ef": ef, "recall": recall(ids, truth), "distances": dists / max(searches, 1)}
        )
        h.set_ef(ef)
        real, _ = h.knn_query(queries, k, num_threads=1)
        got, counts, agree = [], [], 0
        for i, q in enumerate(qn):
            labels, c = replay(g, q, k, ef, metric)
            got.append(labels)
            counts.append(c)
            agree += len(set(labels) & set(real[i].tolist())) / k
        agree /= len(qn)
        agree_all &= agree >= 0.99
        rows["hnswlib"].append(
            {
                "ef": ef,
                "recall": recall(np.array(got), truth),
                "distances": float(np.mean(counts)),
                "replay_agrees": agree,
            }
        )
        c, r = rows["chassis"][-1], rows["hnswlib"][-1]
        print(
            f"  [{name}] ef {ef:>4}: chassis recall {c['recall']:.4f}, {c['distances']:,.0f} distances/query; "
            f"hnswlib recall {r['recall']:.4f}, {r['distances']:,.0f} (replay agrees with knn_query on {agree:.1%} of ids)",
            flush=True,
        )
    # distances per query interpolated at each recall target, like QPS (cells {"qps": value, "how"})
    at = {e: qps_at_targets(rows[e], key="distances") for e in rows}
    return {"sweep": rows, "at": at, "replay_agrees": agree_all}


def main() -> None:
    args = parse_args()
    info = machine_info()
    print(
        f"machine: {info.get('platform')}, {info.get('cpu_count')} CPUs; M={args.m}, ef_construction={args.efc}, k={args.k}, {args.queries} queries"
    )
    results: dict[str, Any] = {"machine": info, "args": vars(args)}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets.split(","):
            data = load(name, args)
            print(
                f"data: {name} {data['base'].shape[0]:,} x {data['base'].shape[1]} ({data['metric']})",
                flush=True,
            )
            results[name] = run(data, args, Path(tmp))
    print()
    print("Distances computed per query at equal recall@10 (interpolated; lower is better)")
    rows = []
    for name in args.datasets.split(","):
        at = results[name]["at"]
        for t in TARGETS:
            c, h = at["chassis"][str(t)]["qps"], at["hnswlib"][str(t)]["qps"]
            rows.append([name, f"{t:.2f}", fmt(c), fmt(h), fmt(ratio(c, h), ".2f", "x")])
        if not results[name]["replay_agrees"]:
            print(
                f"  note: on {name} the hnswlib replay returned other ids than knn_query at some ef (see above)"
            )
    print(table(["data", "recall", "chassis", "hnswlib", "chassis/hnswlib"], rows))
    points = [
        p
        for name in args.datasets.split(",")
        for p in sweep_points(
            name, {e: {"1t search_batch": pts} for e, pts in results[name]["sweep"].items()}
        )
    ]
    write_results(args.json, "bench_distances", results, points)


if __name__ == "__main__":
    main()
