"""Build child of bench_scale.py --only peers: build one engine's index in this fresh process, so
its peak memory is its own; print one JSON line.

    python benchmarks/children/peer_build.py ENGINE PATH BASE.npy THREADS

The base is mapped read-only from its .npy (np.load(mmap_mode="r")), so every engine reads the
same pages and none holds a private copy of the input unless it makes one; the parent samples
this process's /proc/<pid>/smaps to tell the input's resident pages from the engine's. Timed:
the insert of every row on THREADS threads (M=16, ef_construction=200, euclidean), then apart
the persist (chassis flush, the peers' save); then the index is closed. Reported: both times,
the engine's version and getrusage's peak RSS (which counts the input's pages too).
"""

import json
import resource
import sys

import numpy as np
from chassis._bench import ENGINES


def main() -> None:
    name, path, base_file, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    base = np.load(base_file, mmap_mode="r")
    engine = ENGINES[name]()
    seconds = engine.build(
        path, base, metric="euclidean", m=16, ef_construction=200, threads=threads
    )
    persist = engine.persist_seconds
    engine.close()
    out = {
        "build_s": seconds,
        "persist_s": persist,
        "version": engine.version,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
