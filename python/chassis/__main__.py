"""Command line: `python -m chassis bench` (also installed as the `chassis` script).

`bench` builds an index in a temporary folder and prints build time, recall@k and
single-thread queries per second over a sweep of ef, and the time to open the file again.
With no options it generates 20,000 clustered 64-dimensional vectors (seed 0) and finishes
in seconds. `--data PATH` benchmarks a file or folder of any format `chassis.datasets.load`
reads; `--compare hnswlib,usearch,faiss,chassisdb` measures the installed peers the same
way in the same run and compares QPS at equal recall; `--json` and `--plot` save the figures.

The measuring is `chassis.bench.run` (what a notebook calls); this file parses the options,
calls it, and prints the `BenchResult` it returns.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from chassis import ChassisError, _bench, bench

PEERS = bench.PEERS


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of ints"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("give one or more positive ints, such as 16,32,64")
    return values


def _engine_list(text: str) -> list[str]:
    try:
        return bench.engine_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count_or_path(text: str) -> int | str:
    """--queries: a number is how many queries; anything else a file of queries."""
    try:
        value = int(text)
    except ValueError:
        return text
    if value < 1:
        raise argparse.ArgumentTypeError("--queries takes a positive count or a file")
    return value


def _prog() -> str:
    """The command as the user typed it: `chassis` for the installed script, else `python -m
    chassis` (sys.argv[0] is then the path of this file, or whatever runs main())."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if name.lower().removesuffix(".exe").removesuffix("-script.py") == "chassis":
        return "chassis"
    return "python -m chassis"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=_prog(), description="Chassis, an embedded vector index.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = commands.add_parser(
        "bench",
        help="build an index and measure recall and search speed",
        description="Build an index in a temporary folder, then print build time, recall@k and "
        "single-thread queries per second for each ef, and the time to open the file. "
        "With --compare, other libraries are measured the same way in the same run and "
        "compared at equal recall.",
    )
    data = bench.add_argument_group("data")
    data.add_argument(
        "--data",
        metavar="PATH",
        help="a folder (base.npy + queries.npy [+ gt_ids.npy], or *base* / *query* / "
        "*groundtruth* files), an ann-benchmarks .hdf5, or one .fvecs/.bvecs/.fbin/.u8bin/"
        ".npy file whose last rows become the queries (default: generated clusters)",
    )
    data.add_argument(
        "--queries",
        type=_count_or_path,
        metavar="Q|PATH",
        help="a number: how many queries (generated: 1000; --data: the first Q, or the last "
        "Q rows of a single file, default min(1000, n/10)); otherwise a file of queries",
    )
    data.add_argument(
        "--truth",
        metavar="PATH",
        help="ground-truth ids for the queries (.ivecs, .ibin, .npy); computed exactly when absent",
    )
    data.add_argument("--n", type=int, help="base vectors (generated: 20000; --data: first N)")
    data.add_argument("--dims", type=int, help="dimensions of generated data (64)")
    data.add_argument(
        "--metric",
        choices=["euclidean", "cosine", "inner_product"],
        help="distance (default: euclidean, or what the --data file names)",
    )
    data.add_argument("--seed", type=int, default=0, help="seed for generated data (0)")

    run = bench.add_argument_group("index and search")
    run.add_argument(
        "--ef", type=_int_list, help="ef sweep (16,32,64,128,256; --quick: 10,20,40,80,160)"
    )
    run.add_argument("--k", type=int, default=10, help="neighbours per query (10)")
    run.add_argument("--m", type=int, default=16, help="max_connections / M (16)")
    run.add_argument("--ef-construction", type=int, default=200, help="ef_construction (200)")
    run.add_argument("--threads", type=int, help="build threads, every engine (default: all cores)")
    run.add_argument(
        "--loop", action="store_true", help="also time a Python loop of single-query search() calls"
    )
    run.add_argument(
        "--quick",
        action="store_true",
        help="a run of seconds: 10,000 generated vectors and 200 queries (--data: a random "
        "sample of at most 10,000 vectors and the first 200 queries), ef 10..160, short timings",
    )

    out = bench.add_argument_group("comparison and output")
    out.add_argument(
        "--compare",
        type=_engine_list,
        default=[],
        metavar="ENGINES",
        help=f"peers to measure too, comma-separated: {','.join(PEERS)} (or all); "
        "missing ones are skipped with a note",
    )
    out.add_argument("--json", metavar="FILE", help="write every figure to this JSON file")
    out.add_argument("--plot", metavar="FILE.png", help="draw recall/QPS curves (needs matplotlib)")
    out.add_argument("--progress", action="store_true", help="progress bars (ground truth, build)")
    bench.set_defaults(run=_bench_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args))


def _say(line: str) -> None:
    print(line, flush=True)


def _bench_command(args: argparse.Namespace) -> int:
    if args.k < 1:
        print("--k must be at least 1", file=sys.stderr)
        return 2
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "--plot needs matplotlib: pip install matplotlib "
                "(or pip install 'chassis-index[plot]')",
                file=sys.stderr,
            )
            return 2
    query_path = args.queries if isinstance(args.queries, str) else None
    for option, value in (
        ("--data", args.data),
        ("--queries", query_path),
        ("--truth", args.truth),
    ):
        if value and not Path(value).exists():
            print(f"error: {option} {value}: no such file or folder", file=sys.stderr)
            return 2
    try:
        result = bench.run(
            args.data,
            compare=args.compare,
            k=args.k,
            ef=args.ef,
            quick=args.quick,
            n=args.n,
            dims=args.dims,
            queries=args.queries,
            truth=args.truth,
            metric=args.metric,
            m=args.m,
            ef_construction=args.ef_construction,
            threads=args.threads,
            loop=args.loop,
            seed=args.seed,
            progress=args.progress,
            log=_say,
        )
    except ChassisError:
        raise  # the index itself failed: its traceback, not a one-line option error
    except (ValueError, FileNotFoundError, ImportError) as exc:  # DatasetError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2

    print("\n" + result.table())
    if args.json:
        result.to_json(args.json)
        print(f"\nwrote {args.json}")
    if args.plot:
        _bench.plot_sweeps(
            {name: r["sweep"] for name, r in result.engines.items()},
            args.plot,
            k=result.k,
            title=result.title,
        )
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
