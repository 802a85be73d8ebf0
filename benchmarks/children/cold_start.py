"""Cold-start child of bench_memory.py: open an index in this fresh process and search its
queries one at a time; print one JSON line of CLOCK_MONOTONIC times (a clock the parent
shares): interpreter up, opened, first / hundredth / last result.

    python benchmarks/children/cold_start.py ENGINE PATH QUERIES.npy K EF DIMS

ENGINE: "chassis" (IndexReader), "chassis+warm" (IndexReader with IndexOptions(warm=True))
or "hnswlib" (load_index, then search).
"""

import time

T0 = time.clock_gettime(time.CLOCK_MONOTONIC)  # before any other import: "interpreter up"

import json  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def main() -> None:
    engine, path, qfile = sys.argv[1], sys.argv[2], sys.argv[3]
    k, ef, dims = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    queries = np.load(qfile)
    if engine.startswith("chassis"):
        import chassis

        index = chassis.IndexReader(path, chassis.IndexOptions(warm=engine == "chassis+warm"))
        t_open = now()

        def search(q):
            return index.search(q, k, ef=ef)
    else:
        import hnswlib

        index = hnswlib.Index(space="l2", dim=dims)
        index.load_index(path)
        index.set_ef(ef)
        t_open = now()

        def search(q):
            return index.knn_query(q, k, num_threads=1)

    marks = {}
    for i, q in enumerate(queries):
        search(q)
        if i == 0:
            marks["first"] = now()
        elif i == 99:
            marks["hundredth"] = now()
    marks["last"] = now()
    print(json.dumps({"t0": T0, "open": t_open, **marks, "n": len(queries)}))


if __name__ == "__main__":
    main()
