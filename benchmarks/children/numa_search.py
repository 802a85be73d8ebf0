"""NUMA child of bench_placement.py: in this fresh process (which numactl may have placed),
build an in-memory index with one add_batch on every thread the process may use, then search
it over an ef sweep with one thread and with all; print one JSON line: build seconds, cpus,
the sweeps ({"1 thread" | "all threads": [{"ef", "recall", "qps"}]}) and memory_stats().

    python benchmarks/children/numa_search.py '{"base": "base.npy", "queries": ..., "truth": ...,
        "k": 10, "m": 16, "efc": 200, "metric": "euclidean", "placement": "balanced",
        "efs": [10, 64], "min_seconds": 0.3}'
"""

import json
import os
import statistics
import sys
import time

import chassis
import numpy as np
from chassis.datasets import recall_at_k


def main() -> None:
    cfg = json.loads(sys.argv[1])
    base, queries, truth = np.load(cfg["base"]), np.load(cfg["queries"]), np.load(cfg["truth"])
    k = cfg["k"]
    cpus = len(os.sched_getaffinity(0))
    opts = chassis.IndexOptions(
        max_connections=cfg["m"],
        ef_construction=cfg["efc"],
        metric=cfg["metric"],
        placement=cfg["placement"],
    )
    index = chassis.VectorIndex(None, base.shape[1], opts)
    t0 = time.perf_counter()
    index.add_batch(base)  # every thread the process may use
    out = {"build_s": time.perf_counter() - t0, "cpus": cpus}
    index.search_batch(queries[:100], k, ef=cfg["efs"][0], threads=1)
    out["sweeps"] = {}
    for label, threads in {"1 thread": 1, "all threads": cpus}.items():
        points = []
        for ef in cfg["efs"]:
            times = []
            while not times or (sum(times) < cfg["min_seconds"] and len(times) < 5):
                t1 = time.perf_counter()
                ids, _ = index.search_batch(queries, k, ef=ef, threads=threads)
                times.append(time.perf_counter() - t1)
                if len(times) == 1:
                    rec = recall_at_k(ids, truth, k)
            points.append({"ef": ef, "recall": rec, "qps": len(queries) / statistics.median(times)})
        out["sweeps"][label] = points
    out["memory_stats"] = index.memory_stats()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
