"""Writer child of bench_readers.py: add one vector and flush, in a loop, until STOP exists.

    python benchmarks/children/readers_writer.py INDEX VECTORS.npy OUT.json STOP READY

Touches READY once the index is open, then writes to OUT.json the (count, time.time() right
after flush returned, time.time() right before it was called) of every flush, and the CPU and
wall seconds of the loop.
"""

import json
import os
import sys
import time
from pathlib import Path

import chassis
import numpy as np


def main(path: str, vectors_file: str, out: str, stop_file: str, ready_file: str) -> None:
    vectors = np.load(vectors_file)
    index = chassis.VectorIndex(path)
    records: list[tuple[int, float, float]] = []
    Path(ready_file).touch()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    i = 0
    while not os.path.exists(stop_file):
        index.add(vectors[i % len(vectors)])
        before = time.time()
        index.flush()
        records.append((len(index), time.time(), before))
        i += 1
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    index.close()
    with open(out, "w") as f:
        json.dump({"records": records, "cpu_s": cpu, "wall_s": wall}, f)


if __name__ == "__main__":
    main(*sys.argv[1:6])
