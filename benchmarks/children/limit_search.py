"""Memory-limit child of bench_scale.py: open an index as an IndexReader in this fresh process
(which the parent has put in a cgroup with a memory limit, the file evicted first) and search
blocks of queries, each block new to the process; print one JSON line.

    python benchmarks/children/limit_search.py PATH QUERIES.npy GT.npy K BLOCK EFS THREADS2 [WARM [SETTLE]]

First the open, then one query alone (the first query on an evicted file), then a block of
BLOCK queries at the first ef (warm-up, reported apart), then per ef in EFS (comma-separated)
one block searched one query at a time on one thread (QPS, p50 / p99 latency, recall@K, bytes
read from the disk per query by /proc/self/io read_bytes), and one block by search_batch on
THREADS2 threads. WARM "walk": before the first query, warm(vectors=False) reads in all but the
full vectors, and the time it took is reported. WARM "batch": the process's first search is
instead one search_batch of BLOCK queries at the first ef with the default threads (QPS, MiB
read per query, recall), before the first query alone. SETTLE: that many more blocks at
the first ef after the warm-up, each reported (QPS, MiB read per query, recall, and what of the
codes, vectors and graph is in memory after it), before the measured blocks: how a
long-running process settles as the memory it may use fills. Queries are never repeated: a
block's pages are not already in memory because an earlier block asked for them.
"""

import json
import sys
import time

import numpy as np


def read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def recall(ids: np.ndarray, gt: np.ndarray, k: int) -> float:
    hits = sum(len(np.intersect1d(ids[i][ids[i] >= 0], gt[i, :k])) for i in range(len(ids)))
    return hits / (len(ids) * k)


def main() -> None:
    path, qfile, gtfile = sys.argv[1], sys.argv[2], sys.argv[3]
    k, block = int(sys.argv[4]), int(sys.argv[5])
    efs = [int(e) for e in sys.argv[6].split(",")]
    threads2 = int(sys.argv[7])
    warm = sys.argv[8] if len(sys.argv) > 8 else ""
    settle = int(sys.argv[9]) if len(sys.argv) > 9 else 0
    queries, gt = np.load(qfile), np.load(gtfile)
    import chassis

    t0 = time.perf_counter()
    index = chassis.IndexReader(path)
    out: dict = {"open_ms": (time.perf_counter() - t0) * 1e3}
    if warm == "walk":
        t0 = time.perf_counter()
        index.warm(vectors=False)
        while index.memory_stats()["warm_running"]:
            time.sleep(0.01)
        out["warm_s"] = time.perf_counter() - t0
    at = 0

    def take(n: int) -> tuple[np.ndarray, np.ndarray]:
        nonlocal at
        if at + n > len(queries):
            raise SystemExit(f"need more than {len(queries)} queries")
        q, g = queries[at : at + n], gt[at : at + n]
        at += n
        return q, g

    def batch(ef: int, threads: int | None) -> dict:
        q, g = take(block)
        rb = read_bytes()
        t0 = time.perf_counter()
        ids, _ = index.search_batch(q, k, ef=ef, threads=threads)
        secs = time.perf_counter() - t0
        return {
            "ef": ef,
            "qps": block / secs,
            "recall": recall(ids, g, k),
            "read_mib_per_query": (read_bytes() - rb) / 2**20 / block,
        }

    if warm == "batch":
        out["first_batch"] = {**batch(efs[0], None), "queries": block}
    q, _ = take(1)
    rb = read_bytes()
    t0 = time.perf_counter()
    index.search(q[0], k, ef=efs[0])
    out["first_ms"] = (time.perf_counter() - t0) * 1e3
    out["first_read_mib"] = (read_bytes() - rb) / 2**20

    def loop(ef: int) -> dict:
        q, g = take(block)
        rb, lat, ids = read_bytes(), [], []
        t0 = time.perf_counter()
        for row in q:
            t = time.perf_counter()
            hits = index.search(row, k, ef=ef)
            lat.append(time.perf_counter() - t)
            ids.append([h.id for h in hits] + [-1] * (k - len(hits)))
        secs = time.perf_counter() - t0
        return {
            "ef": ef,
            "qps": block / secs,
            "p50_ms": float(np.percentile(lat, 50) * 1e3),
            "p99_ms": float(np.percentile(lat, 99) * 1e3),
            "recall": recall(np.array(ids), g, k),
            "read_mib_per_query": (read_bytes() - rb) / 2**20 / block,
        }

    out["warmup"] = loop(efs[0])
    out["warmup2"] = loop(efs[-1])
    out["settle"] = []
    for _ in range(settle):
        b = loop(efs[0])
        st = index.memory_stats()
        for key in ("code", "vector", "graph"):
            b[f"resident_{key}_mib"] = st[f"resident_{key}_bytes"] / 2**20
        out["settle"].append(b)
    out["loop"] = [loop(ef) for ef in efs]
    out["batch"] = [batch(ef, threads2) for ef in efs]
    out["threads2"] = threads2
    st = index.memory_stats()
    out["resident_mib"] = st["resident_bytes"] / 2**20
    out["resident_code_mib"] = st["resident_code_bytes"] / 2**20
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
