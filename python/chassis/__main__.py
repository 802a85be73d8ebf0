"""Command line: `python -m chassis bench` (also installed as the `chassis` script).

`bench` builds an index in a temporary folder and prints build time, recall@k
and single-thread queries per second over a sweep of ef, and the time to open
the file again. With no options it generates 20,000 clustered 64-dimensional
vectors (seed 0) and finishes in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

import numpy as np

import chassis
from chassis.datasets import clustered, ground_truth, load_npy_folder, recall_at_k


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of ints")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("give one or more positive ints, such as 16,32,64")
    return values


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chassis", description="Chassis, an embedded vector index."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = commands.add_parser(
        "bench",
        help="build an index and measure recall and search speed",
        description="Build an index in a temporary folder, then print build time, recall@k and "
        "single-thread queries per second for each ef, and the time to open the file.",
    )
    bench.add_argument("--n", type=int, help="base vectors (generated: 20000; --data: first N)")
    bench.add_argument("--dims", type=int, default=64, help="dimensions of generated data (64)")
    bench.add_argument("--queries", type=int, help="queries (generated: 1000; --data: first Q)")
    bench.add_argument(
        "--ef", type=_int_list, default=[16, 32, 64, 128, 256], help="ef sweep (16,32,64,128,256)"
    )
    bench.add_argument("--data", metavar="PATH", help="folder with base.npy, queries.npy, ...")
    bench.add_argument("--threads", type=int, help="threads for add_batch (default: all cores)")
    bench.add_argument("--k", type=int, default=10, help="neighbours per query (10)")
    bench.add_argument("--m", type=int, default=16, help="max_connections (16)")
    bench.add_argument("--ef-construction", type=int, default=200, help="ef_construction (200)")
    bench.add_argument(
        "--metric",
        default="euclidean",
        choices=["euclidean", "cosine", "inner_product"],
        help="metric for generated data (--data folders name their own)",
    )
    bench.add_argument("--seed", type=int, default=0, help="seed for generated data (0)")
    bench.add_argument("--progress", action="store_true", help="progress bar while building")
    bench.set_defaults(run=_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args))


def _load(args: argparse.Namespace):
    """(label, base, queries, truth ids or None, metric) for the options given."""
    if args.data:
        ds = load_npy_folder(args.data)
        base, queries, truth, metric = ds.base, ds.queries, ds.gt_ids, ds.metric
        if args.n and args.n < len(base):
            base, truth = base[: args.n], None  # the given ground truth covers the whole base
        if args.queries and args.queries < len(queries):
            queries = queries[: args.queries]
            truth = None if truth is None else truth[: args.queries]
        return ds.name, base, queries, truth, metric
    n, q = args.n or 20_000, args.queries or 1_000
    base, queries = clustered(n, args.dims, q, seed=args.seed)
    return f"clustered (generated, seed {args.seed})", base, queries, None, args.metric


def _qps(index: chassis.VectorIndex, queries: np.ndarray, k: int, ef: int):
    """(ids, median queries/s) of single-thread search_batch, repeated while under ~0.3 s."""
    rates: list[float] = []
    spent, ids = 0.0, None
    while len(rates) < 3 and (spent < 0.3 or not rates):
        start = time.perf_counter()
        ids, _ = index.search_batch(queries, k, ef=ef, threads=1)
        elapsed = time.perf_counter() - start
        spent += elapsed
        rates.append(len(queries) / max(elapsed, 1e-9))
    return ids, statistics.median(rates)


def _median_ms(fn, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        handle = fn()
        times.append(time.perf_counter() - start)
        handle.close()
    return statistics.median(times) * 1e3


def _bench(args: argparse.Namespace) -> int:
    if args.k < 1:
        print("--k must be at least 1", file=sys.stderr)
        return 2
    label, base, queries, truth, metric = _load(args)
    n, dims = base.shape
    print(f"chassis {chassis.__version__}  (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    try:
        info = chassis.cpu_info()
        print("cpu: " + ", ".join(f"{key}={value}" for key, value in info.items()))
    except Exception as exc:  # informative only
        print(f"cpu: unknown ({exc})")
    print(f"data: {label}: {n:,} x {dims}, {len(queries):,} queries, {metric}")

    if truth is None or truth.shape[1] < args.k:
        start = time.perf_counter()
        truth, _ = ground_truth(base, queries, args.k, metric)
        print(f"ground truth: exact top-{args.k} in {time.perf_counter() - start:.2f} s")

    options = chassis.IndexOptions(
        max_connections=args.m, ef_construction=args.ef_construction, metric=metric
    )
    with tempfile.TemporaryDirectory(prefix="chassis-bench-") as folder:
        path = os.path.join(folder, "bench.chassis")
        index = chassis.VectorIndex(path, dims, options)
        start = time.perf_counter()
        index.add_batch(base, threads=args.threads, progress=args.progress)
        built = time.perf_counter()
        index.flush()
        flushed = time.perf_counter()
        threads = "all cores" if args.threads is None else f"threads={args.threads}"
        print(
            f"build: {built - start:.2f} s add_batch ({n / (built - start):,.0f} vectors/s, "
            f"{threads}, M={args.m}, ef_construction={args.ef_construction}), "
            f"flush {(flushed - built) * 1e3:.1f} ms"
        )

        index.search_batch(queries[: min(len(queries), 200)], args.k, ef=args.ef[0], threads=1)
        print(f"\nsearch_batch, 1 thread, k={args.k}")
        print(f"{'ef':>6}  {'recall@' + str(args.k):>10}  {'QPS':>10}")
        for ef in args.ef:
            ids, qps = _qps(index, queries, args.k, ef)
            print(f"{ef:>6}  {recall_at_k(ids, truth, args.k):>10.4f}  {qps:>10,.0f}")
        index.close()

        size = os.path.getsize(path)
        writer_ms = _median_ms(lambda: chassis.VectorIndex(path))
        reader_ms = _median_ms(lambda: chassis.VectorIndex(path, read_only=True))
        print(
            f"\nopen: {writer_ms:.3f} ms writer, {reader_ms:.3f} ms read-only "
            f"(median of 7; file {size / 2**20:.1f} MiB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
