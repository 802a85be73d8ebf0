"""Build an index, search it, and check the answers against exact search.

The first program to read: it creates an index file, adds vectors in one batch, makes them
durable with `flush()`, opens the file again as a reader (what another process would do),
and measures recall@10 of `search_batch` against brute-force nearest neighbours.

    python examples/build_and_search.py              # 20,000 x 64 generated vectors
    python examples/build_and_search.py --n 100000 --dims 128
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import chassis
from chassis import datasets


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="vectors to add (20000)")
    parser.add_argument("--dims", type=int, default=64, help="dimensions (64)")
    parser.add_argument("--queries", type=int, default=200, help="queries (200)")
    parser.add_argument("--ef", type=int, default=64, help="search beam width (64)")
    args = parser.parse_args(argv)

    # Clustered vectors, like embeddings; queries drawn from the same clusters.
    base, queries = datasets.clustered(args.n, args.dims, args.queries, seed=0)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vectors.chassis"
        start = time.perf_counter()
        with chassis.VectorIndex(path, args.dims) as index:
            index.add_batch(base)  # ids 0..n-1, linked on every core
            index.flush()  # durable from here on
        seconds = time.perf_counter() - start
        print(f"built {args.n:,} x {args.dims} in {seconds:.2f} s: {path.stat().st_size:,} bytes")

        with chassis.IndexReader(path) as reader:  # no lock: any process can do this
            print(
                "nearest to query 0:",
                [(hit.id, round(hit.distance, 3)) for hit in reader.search(queries[0], k=3)],
            )
            start = time.perf_counter()
            found, _ = reader.search_batch(queries, k=10, ef=args.ef, threads=1)
            qps = len(queries) / (time.perf_counter() - start)

    truth, _ = datasets.ground_truth(base, queries, 10)  # exact, by brute force
    recall = datasets.recall_at_k(found, truth, 10)
    print(f"recall@10 = {recall:.3f} at ef={args.ef} ({qps:,.0f} queries/s on 1 thread)")
    return 0 if recall >= 0.9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
