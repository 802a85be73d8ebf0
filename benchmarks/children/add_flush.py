"""Child of bench_scale.py --only commits: one add followed by flush(), timed, N times.

    add_flush.py INDEX VECTORS.npy N

Opens INDEX as a writer, adds the first N rows of VECTORS (not in the index) one at a time,
each followed by flush(), and prints one JSON line: medians, p90, p99, max and mean (ms) of the
add, the flush and both. Then closes the index (its close is timed too: the checkpoint).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import chassis
import numpy as np


def main() -> None:
    path, vecs, n = sys.argv[1], np.load(sys.argv[2]), int(sys.argv[3])
    index = chassis.VectorIndex(path)
    add, flush, both = [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        index.add(vecs[i])
        t1 = time.perf_counter()
        index.flush()
        t2 = time.perf_counter()
        add.append(t1 - t0)
        flush.append(t2 - t1)
        both.append(t2 - t0)
    t0 = time.perf_counter()
    index.close()
    close_ms = (time.perf_counter() - t0) * 1e3

    def summary(xs: list[float]) -> dict[str, float]:
        ms = np.asarray(xs) * 1e3
        return {
            "median": float(np.median(ms)),
            "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)),
            "max": float(ms.max()),
            "mean": float(statistics.fmean(ms)),
        }

    print(
        json.dumps(
            {
                "add": summary(add),
                "flush": summary(flush),
                "both": summary(both),
                "close_ms": close_ms,
            }
        )
    )


if __name__ == "__main__":
    main()
