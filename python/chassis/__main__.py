"""Command line: `python -m chassis bench` (also installed as the `chassis` script).

`bench` builds an index in a temporary folder and prints build time, recall@k and
single-thread queries per second over a sweep of ef, and the time to open the file again.
With no options it generates 20,000 clustered 64-dimensional vectors (seed 0) and finishes
in seconds. `--data PATH` benchmarks a file or folder of any format `chassis.datasets.load`
reads; `--compare hnswlib,usearch,faiss,chassisdb` measures the installed peers the same
way in the same run and compares QPS at equal recall; `--json` and `--plot` save the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import chassis
from chassis import _bench, datasets

DEFAULT_EF = [16, 32, 64, 128, 256]
QUICK_EF = [10, 20, 40, 80, 160]
PEERS = ("hnswlib", "usearch", "faiss", "chassisdb")


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
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return list(PEERS)
    unknown = [n for n in names if n not in _bench.ENGINES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown engine {', '.join(unknown)}; known: {', '.join(PEERS)} (or all)"
        )
    return [n for n in dict.fromkeys(names) if n != "chassis"]


def _count_or_path(text: str) -> int | str:
    """--queries: a number is how many queries; anything else a file of queries."""
    try:
        value = int(text)
    except ValueError:
        return text
    if value < 1:
        raise argparse.ArgumentTypeError("--queries takes a positive count or a file")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chassis", description="Chassis, an embedded vector index."
    )
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
        help="CI-size run: 10,000 generated, 200 queries, ef 10..160, short timings",
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


# ------------------------------------------------------------------ data
class _Data:
    def __init__(
        self,
        label: str,
        base: np.ndarray,
        queries: np.ndarray,
        truth: np.ndarray | None,
        metric: str,
        source: str,
    ) -> None:
        self.label, self.base, self.queries, self.truth = label, base, queries, truth
        self.metric, self.source = metric, source
        self.truth_origin = "given" if truth is not None else "computed"
        self.truth_seconds: float | None = None


def _load(args: argparse.Namespace) -> _Data:
    """The base, queries, ground truth (or None) and metric for the options given."""
    count = args.queries if isinstance(args.queries, int) else None
    query_path = args.queries if isinstance(args.queries, str) else None
    if not args.data:
        if query_path:
            raise SystemExit("--queries PATH needs --data (generated data makes its own queries)")
        n = args.n or (10_000 if args.quick else 20_000)
        dims = args.dims or 64
        q = count or (200 if args.quick else 1_000)
        generated = datasets.clustered(n, dims, q, seed=args.seed)
        return _Data(
            f"clustered (generated, seed {args.seed})",
            *generated,
            None,
            args.metric or "euclidean",
            "generated",
        )

    path = Path(args.data)
    if not path.exists():
        raise FileNotFoundError(f"--data {path}: no such file or folder")
    truth: np.ndarray | None = None
    queries: np.ndarray | None
    metric = "euclidean"
    if path.is_dir() or path.suffix.lower() in datasets.HDF5_EXTENSIONS:
        ds = datasets.load(path)
        base, queries, truth, metric, label = ds.base, ds.queries, ds.gt_ids, ds.metric, ds.name
    else:
        base, queries, label = datasets.read(path), None, path.name
        if base.ndim != 2:
            raise SystemExit(f"{path} holds an array of shape {base.shape}, not (count, dims)")
    if query_path:
        queries, truth = datasets.read(query_path), None
        label += f" + queries {Path(query_path).name}"
    elif queries is None or len(queries) == 0:
        # one file (or a folder of base vectors only): its last Q rows are the queries
        q = count or min(1_000, max(1, len(base) // 10))
        if q >= len(base):
            raise SystemExit(f"{path} has {len(base)} rows: too few to split off {q} queries")
        base, queries = base[:-q], base[-q:]
        truth, count = None, None
        label += f" (last {q} rows as queries)"
    if args.truth:
        truth = datasets.read(args.truth)  # a big-ann ground-truth .ibin reads as its ids
    if args.metric and args.metric != metric:
        metric, truth = args.metric, None  # the given ground truth is for another metric
    if args.n and args.n < len(base):
        base, truth = base[: args.n], None  # the given ground truth covers the whole base
    if count and count < len(queries):
        queries = queries[:count]
        truth = None if truth is None else truth[:count]
    if truth is not None and len(truth) != len(queries):
        raise SystemExit(f"the ground truth has {len(truth)} rows for {len(queries)} queries")
    if queries.shape[1] != base.shape[1]:
        raise SystemExit(f"queries have {queries.shape[1]} dimensions, the base {base.shape[1]}")
    return _Data(
        label,
        np.ascontiguousarray(base, dtype=np.float32),
        np.ascontiguousarray(queries, dtype=np.float32),
        truth,
        metric,
        str(path),
    )


# ------------------------------------------------------------------ measuring
def _measure(
    engine: _bench.Engine, data: _Data, args: argparse.Namespace, folder: Path, threads: int
) -> dict[str, Any]:
    """Build, persist, reopen and sweep one engine; every figure in a dict."""
    path = str(folder / f"{engine.name}.index")
    assert data.truth is not None
    out: dict[str, Any] = {"version": engine.version}
    n = len(data.base)
    out["build_s"] = engine.build(
        path,
        data.base,
        metric=data.metric,
        m=args.m,
        ef_construction=args.ef_construction,
        threads=threads,
    )
    out["vectors_per_s"] = n / max(out["build_s"], 1e-12)
    out["persist_s"] = engine.persist_seconds
    engine.close()
    out["file_bytes"] = _bench.path_bytes(path)
    opens = [engine.open_seconds(path) for _ in range(args.opens)]
    out["open_ms"] = statistics.median(opens) * 1e3
    if isinstance(engine, _bench.ChassisEngine):
        engine.read_only = True
        try:
            out["open_read_only_ms"] = (
                statistics.median(engine.open_seconds(path) for _ in range(args.opens)) * 1e3
            )
        finally:
            engine.read_only = False
    engine.open(path)
    try:
        out["sweep"] = _bench.measure_sweep(
            engine,
            data.queries,
            data.truth,
            args.k,
            args.ef,
            args.modes,
            min_seconds=args.min_seconds,
            max_runs=args.max_runs,
            warmup=min(len(data.queries), 1_000),
        )
    finally:
        engine.close()
    out["qps_at"] = {mode: _bench.qps_at_targets(points) for mode, points in out["sweep"].items()}
    return out


# ------------------------------------------------------------------ printing
def _print_results(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    fmt, table = _bench.fmt, _bench.table
    targets = [str(t) for t in _bench.TARGETS]
    for mode in args.modes:
        engines = [e for e in results if mode in results[e]["sweep"]]
        if not engines:
            continue
        what = "search_batch" if mode == "batch" else "loop of search()"
        print(f"\n{what}, 1 thread, k={args.k}")
        headers = ["ef"]
        for e in engines:
            prefix = "" if len(engines) == 1 else f"{e} "
            headers += [f"{prefix}recall@{args.k}", f"{prefix}QPS"]
        rows = []
        for i, ef in enumerate(args.ef):
            row = [str(ef)]
            for e in engines:
                point = results[e]["sweep"][mode][i]
                row += [f"{point['recall']:.4f}", fmt(point["qps"])]
            rows.append(row)
        print(table(headers, rows, align_first="right"))

    print(f"\nsummary (QPS at recall@{args.k}, interpolated between sweep points; 1 thread)")
    headers = ["engine", "version", "build s", "vectors/s", "flush/save ms", "open ms", "MiB"]
    headers += [
        f"{m} QPS@{t}" if len(args.modes) > 1 else f"QPS@{t}" for m in args.modes for t in targets
    ]
    rows = []
    for e, r in results.items():
        size = r["file_bytes"] / 2**20 if r["file_bytes"] is not None else None
        rows.append(
            [
                e,
                r["version"],
                fmt(r["build_s"], ".2f"),
                fmt(r["vectors_per_s"]),
                fmt(r["persist_s"] * 1e3, ".1f"),
                fmt(r["open_ms"], ".3f"),
                fmt(size, ".1f"),
            ]
            + [_bench.qps_cell(r, m, t) for m in args.modes for t in targets]
        )
    print(table(headers, rows))
    print(
        "(* the smallest ef already reached this recall: its QPS, a lower bound; "
        "- not reached: raise --ef)"
    )

    if "chassis" in results and len(results) > 1:
        print(
            "\nchassis / peer (QPS: > 1 means chassis is faster; build, open, size: "
            "< 1 means chassis is faster or smaller)"
        )
        headers = ["", "build", "open", "size"] + [
            f"{m} QPS@{t}" if len(args.modes) > 1 else f"QPS@{t}"
            for m in args.modes
            for t in targets
        ]
        rows = []
        for peer, r in results.items():
            if peer == "chassis":
                continue
            rr = _bench.ratios(results["chassis"], r)
            rows.append(
                [
                    f"vs {peer}",
                    fmt(rr["build_s"], ".2f", "x"),
                    fmt(rr["open_ms"], ".2f", "x"),
                    fmt(rr["file_bytes"], ".2f", "x"),
                ]
                + [
                    fmt(rr["qps_at"].get(m, {}).get(t), ".2f", "x")
                    for m in args.modes
                    for t in targets
                ]
            )
        print(table(headers, rows))


# ------------------------------------------------------------------ the command
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
    args.ef = args.ef or (QUICK_EF if args.quick else DEFAULT_EF)
    args.modes = ["batch", "loop"] if args.loop else ["batch"]
    args.opens = 3 if args.quick else 7
    args.min_seconds, args.max_runs = (0.1, 5) if args.quick else (0.3, 5)

    engines: dict[str, _bench.Engine] = {"chassis": _bench.make_engine("chassis")}
    peers, notes = _bench.engine_status(args.compare)
    engines.update(peers)
    engines["chassis"].progress = args.progress  # type: ignore[attr-defined]

    try:
        data = _load(args)
    except (datasets.DatasetError, FileNotFoundError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n, dims = data.base.shape
    print(
        f"chassis {chassis.__version__}  (python {sys.version.split()[0]}, {os.cpu_count()} cores)"
    )
    try:
        info = chassis.cpu_info()
        print("cpu: " + ", ".join(f"{key}={value}" for key, value in info.items()))
    except Exception as exc:  # informative only
        print(f"cpu: unknown ({exc})")
    print(f"data: {data.label}: {n:,} x {dims}, {len(data.queries):,} queries, {data.metric}")
    if len(engines) > 1:
        print("engines: " + ", ".join(f"{name} {e.version}" for name, e in engines.items()))
    for note in notes:
        print(f"note: {note}")
    sys.stdout.flush()

    if data.truth is None or data.truth.shape[1] < args.k:
        start = time.perf_counter()
        data.truth, _ = datasets.ground_truth(
            data.base, data.queries, args.k, data.metric, progress=args.progress
        )
        data.truth_origin = "computed"
        data.truth_seconds = time.perf_counter() - start
        print(f"ground truth: exact top-{args.k} in {data.truth_seconds:.2f} s")
    else:
        data.truth = np.asarray(data.truth[:, : args.k])

    threads = args.threads or os.cpu_count() or 1
    threads_text = "all cores" if args.threads is None else f"threads={args.threads}"
    results: dict[str, dict[str, Any]] = {}
    folder = Path(tempfile.mkdtemp(prefix="chassis-bench-"))
    try:
        for name, engine in engines.items():
            start = time.perf_counter()
            try:
                results[name] = r = _measure(engine, data, args, folder, threads)
            except _bench.EngineUnavailable as exc:
                notes.append(f"skipped {name}: {exc}")
                print(f"note: skipped {name}: {exc}")
                continue
            except Exception as exc:
                if name == "chassis":
                    raise
                traceback.print_exc()
                notes.append(f"{name} failed: {exc!r}")
                print(f"note: {name} failed: {exc!r}")
                continue
            finally:
                try:
                    engine.close()
                except Exception:
                    pass
            if name == "chassis":
                print(
                    f"build: {r['build_s']:.2f} s add_batch ({r['vectors_per_s']:,.0f} vectors/s, "
                    f"{threads_text}, M={args.m}, ef_construction={args.ef_construction}), "
                    f"flush {r['persist_s'] * 1e3:.1f} ms"
                )
                print(
                    f"open: {r['open_ms']:.3f} ms writer, {r['open_read_only_ms']:.3f} ms read-only "
                    f"(median of {args.opens}; file {(r['file_bytes'] or 0) / 2**20:.1f} MiB)"
                )
            else:
                print(
                    f"{name}: built in {r['build_s']:.2f} s, measured in "
                    f"{time.perf_counter() - start:.1f} s"
                )
            sys.stdout.flush()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    _print_results(results, args)
    engine_notes = [note for name in results for note in engines[name].notes]
    all_notes = list(dict.fromkeys(notes + engine_notes))
    if all_notes and len(engines) > 1:
        print("\nnotes:\n" + "\n".join(f"- {note}" for note in all_notes))

    if args.json:
        everything = {
            "chassis_version": chassis.__version__,
            "machine": _bench.machine_info(),
            "args": {key: value for key, value in vars(args).items() if key != "run"},
            "data": {
                "label": data.label,
                "source": data.source,
                "n": n,
                "dims": dims,
                "queries": len(data.queries),
                "metric": data.metric,
                "ground_truth": data.truth_origin,
                "ground_truth_s": data.truth_seconds,
            },
            "k": args.k,
            "build_threads": threads,
            "targets": list(_bench.TARGETS),
            "engines": results,
            "ratios": {
                peer: _bench.ratios(results["chassis"], r)
                for peer, r in results.items()
                if peer != "chassis" and "chassis" in results
            },
            "notes": all_notes,
        }
        everything["points"] = _bench.sweep_points(
            data.label, {name: r["sweep"] for name, r in results.items()}
        )
        _bench.write_json(args.json, everything)
        print(f"\nwrote {args.json}")
    if args.plot:
        _bench.plot_sweeps(
            {name: r["sweep"] for name, r in results.items()},
            args.plot,
            k=args.k,
            title=f"{data.label}: {n:,} x {dims}, {data.metric}, "
            f"M={args.m}, ef_construction={args.ef_construction}",
        )
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
