"""Search child of bench_scale.py --only peers: open one engine's saved index in this fresh
process (the parent evicted the file from the page cache first) and sweep ef; print one JSON
line.

    python benchmarks/children/peer_search.py ENGINE PATH QUERIES.npy GT.npy DIMS EFS

Measured, in this order: the open of the evicted file (chassis and usearch map it, hnswlib,
faiss and chassisdb read it); the first query after that open (an mmap'd index reads its pages
then); a second open with the file in the page cache; one untimed pass of every query at the
largest ef (pages in, caches warm); then per ef (comma-separated EFS) recall@10 and QPS of a
1-thread batch, a 1-thread loop of single calls and a 2-thread batch (chassis._bench.measure_sweep,
the median of up to 3 runs of at least a second together); the peak and current RSS.
"""

import json
import resource
import sys
import time

import numpy as np
from chassis._bench import ENGINES, measure_sweep


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    name, path, qfile, gtfile = sys.argv[1:5]
    dims, efs = int(sys.argv[5]), [int(e) for e in sys.argv[6].split(",")]
    queries, gt = np.load(qfile), np.load(gtfile)
    engine = ENGINES[name]()
    engine.dims, engine.metric, engine.m, engine.ef_construction = dims, "euclidean", 16, 200
    t0 = time.perf_counter()
    engine.open(path)
    open_cold = time.perf_counter() - t0
    engine.set_ef(efs[0])
    _, first = engine.search("loop", queries[:1], 10)
    engine.close()
    open_warm = engine.open_seconds(path)
    engine.open(path)
    engine.set_ef(efs[-1])
    engine.search("batch", queries, 10)
    sweep = measure_sweep(
        engine,
        queries,
        gt,
        10,
        efs,
        ("batch", "loop", "batch2"),
        min_seconds=1.0,
        max_runs=3,
        warmup=0,
    )
    out = {
        "open_cold_ms": open_cold * 1e3,
        "first_query_ms": first * 1e3,
        "open_warm_ms": open_warm * 1e3,
        "sweep": sweep,
        "rss_mib": rss_mib(),
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
