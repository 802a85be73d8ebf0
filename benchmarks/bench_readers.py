"""Readers benchmark: search throughput while another process writes, and flush-to-visibility lag.

Setup: an index of the first --n rows (20,000) of the data is built (M=16,
ef_construction=200, 2 threads), flushed and closed; then an `IndexReader` opens it.

  throughput  queries per second of the reader, searched three ways:
                two Python threads, each calling search_batch(chunk, threads=1) on
                chunks of --chunk queries; two Python threads, each calling
                search(query); one search_batch(all queries, threads=2) at a time;
              each measured with no writer, and with a writer PROCESS that adds one
              vector and flushes, in a loop, as fast as it can (its flush rate and CPU
              use are reported). The figure is the median over --repeats alternating
              rounds; the ratio is "with writer / without". On a 2-core machine the
              writer takes CPU from the readers: the ratio includes that.
  lag         the writer process records time.time() right after each flush() returns,
              with the new count; the reader polls len() in a tight loop and records when
              it first sees each count. Lag = seen - returned, per count seen (median,
              p99, max). A negative lag means the reader saw the commit before flush()
              returned (through the index file, the header is written before flush's last
              sync; through the redo log, after its one sync, so rarely); the lag from
              the moment flush() was called is reported too.

Data: --data minilm ($CHASSIS_DATA/debian-minilm, by default
<repo>/../shared/data/debian-minilm: base.npy float16 -> float32, the first --n rows; the
writer adds the rows after them; its 1,000 queries) or --data generated
(chassis.datasets.clustered, --dims dimensions). The writer process is
benchmarks/children/readers_writer.py.

    python benchmarks/bench_readers.py                 # about 2-3 minutes on 2 cores
    python benchmarks/bench_readers.py --quick         # smoke run
    python benchmarks/bench_readers.py --data generated --dims 128 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from chassis import datasets
from chassis._bench import fmt, median, table, timed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toolkit import (  # noqa: E402
    MINILM,
    Parser,
    add_json_option,
    child_script,
    run_record,
    work_folder,
    write_results,
)


# ------------------------------------------------------------------ the writer process
class Writer:
    """The writer child process, started and stopped around one measurement."""

    def __init__(self, path: str, vectors_file: Path, workdir: Path, tag: str) -> None:
        self.out = workdir / f"writer-{tag}.json"
        self.stop = workdir / f"writer-{tag}.stop"
        ready = workdir / f"writer-{tag}.ready"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                child_script("readers_writer"),
                path,
                str(vectors_file),
                str(self.out),
                str(self.stop),
                str(ready),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the writer process failed:\n{self.proc.stderr.read().decode()[-3000:]}"
                )
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("the writer process did not start within 60 s")
            time.sleep(0.01)
        time.sleep(0.2)  # let it reach its steady loop

    def finish(self) -> dict[str, Any]:
        self.stop.touch()
        _, err = self.proc.communicate(timeout=120)
        if self.proc.returncode != 0:
            raise RuntimeError(
                f"the writer process failed ({self.proc.returncode}):\n{err.decode()[-3000:]}"
            )
        result = json.loads(self.out.read_text())
        n = len(result["records"])
        result["flushes"] = n
        result["flushes_per_s"] = n / result["wall_s"] if result["wall_s"] else None
        result["cpu_share"] = result["cpu_s"] / result["wall_s"] if result["wall_s"] else None
        return result


# ------------------------------------------------------------------ measurements
def _two_threads(items: list, call, size, seconds: float) -> float:
    """Two Python threads, each calling `call(item)` over its half of `items`, round and
    round, for `seconds`. Queries per second over both (`size(item)` queries per call)."""
    stop = threading.Event()
    done = [0, 0]
    errors: list[BaseException] = []

    def work(t: int) -> None:
        mine = items[t::2]
        try:
            while not stop.is_set():
                for it in mine:
                    call(it)
                    done[t] += size(it)
                    if stop.is_set():
                        break
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(done) / elapsed


def qps_threads(reader, queries: np.ndarray, k: int, ef: int, seconds: float, chunk: int) -> float:
    """Two Python threads, each calling search_batch(chunk, threads=1) over its half of the
    queries. Queries per second over both."""
    chunks = [queries[i : i + chunk] for i in range(0, len(queries), chunk)]
    return _two_threads(chunks, lambda c: reader.search_batch(c, k, ef=ef, threads=1), len, seconds)


def qps_single(reader, queries: np.ndarray, k: int, ef: int, seconds: float) -> float:
    """Two Python threads, each calling search(query) over its half of the queries."""
    return _two_threads(list(queries), lambda q: reader.search(q, k, ef=ef), lambda _: 1, seconds)


def qps_batch(reader, queries: np.ndarray, k: int, ef: int, seconds: float) -> float:
    """search_batch(all queries, threads=2), repeated for `seconds`. Queries per second."""
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        reader.search_batch(queries, k, ef=ef, threads=2)
        n += len(queries)
    return n / (time.perf_counter() - start)


MODES = {
    "2 threads x search_batch(chunk, threads=1)": "threads",
    "2 threads x search(q)": "single",
    "search_batch(all, threads=2)": "batch",
}


def measure(reader, queries, args, mode: str) -> float:
    if MODES[mode] == "threads":
        return qps_threads(reader, queries, args.k, args.ef, args.seconds, args.chunk)
    if MODES[mode] == "single":
        return qps_single(reader, queries, args.k, args.ef, args.seconds)
    return qps_batch(reader, queries, args.k, args.ef, args.seconds)


def lag_run(reader, path: str, vectors_file: Path, workdir: Path, seconds: float) -> dict[str, Any]:
    """Poll len() in a tight loop while the writer process adds + flushes; match the counts."""
    seen: dict[int, float] = {}
    last = len(reader)
    writer = Writer(path, vectors_file, workdir, "lag")
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            n = len(reader)
            if n != last:
                seen[n] = time.time()
                last = n
    finally:
        result = writer.finish()
    flushed = {int(c): t for c, t, _ in result["records"]}
    called = {int(c): t0 for c, _, t0 in result["records"]}
    flush_ms = np.array([t - t0 for _, t, t0 in result["records"]]) * 1000.0
    lags = np.array([seen[c] - flushed[c] for c in seen if c in flushed]) * 1000.0
    from_call = np.array([seen[c] - called[c] for c in seen if c in called]) * 1000.0
    not_flushed = [c for c in seen if c not in flushed]  # would be a reader seeing unflushed adds
    out: dict[str, Any] = {
        "flushes": len(flushed),
        "counts_seen": len(seen),
        "matched": int(len(lags)),
        "seen_but_never_flushed": not_flushed[:20],
        "writer_flushes_per_s": result["flushes_per_s"],
        "flush_median_ms": float(np.median(flush_ms)) if len(flush_ms) else None,
    }
    if len(lags):
        out.update(
            median_ms=float(np.median(lags)),
            p99_ms=float(np.percentile(lags, 99)),
            max_ms=float(lags.max()),
            min_ms=float(lags.min()),
            negative_share=float((lags < 0).mean()),
            from_call_median_ms=float(np.median(from_call)),
            from_call_p99_ms=float(np.percentile(from_call, 99)),
            from_call_max_ms=float(from_call.max()),
        )
    return out


# ------------------------------------------------------------------ data
def load(args) -> dict[str, Any]:
    ds = datasets
    need = args.n + args.extra
    if args.data == "minilm":
        folder = ds.load_npy_folder(args.minilm)  # base.npy float16 -> float32
        if len(folder.base) < need:
            raise SystemExit(
                f"{args.minilm} has {len(folder.base)} rows; --n + --extra needs {need}"
            )
        rows = np.ascontiguousarray(folder.base[:need], dtype=np.float32)
        queries = np.ascontiguousarray(folder.queries[: args.queries], dtype=np.float32)
        metric = folder.metric
    elif args.data == "generated":
        rows, queries = ds.clustered(need, args.dims, args.queries, seed=0)
        metric = "euclidean"
    else:
        raise SystemExit(f"unknown --data {args.data!r}; use minilm or generated")
    return {"base": rows[: args.n], "extra": rows[args.n :], "queries": queries, "metric": metric}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="minilm", choices=["minilm", "generated"])
    p.add_argument(
        "--minilm",
        default=str(MINILM),
        help="the debian-minilm folder ($CHASSIS_DATA/debian-minilm)",
    )
    p.sized("--n", full=20_000, quick=5_000, help="vectors in the index")
    p.add_argument(
        "--extra", type=int, default=5000, help="distinct vectors the writer cycles through (5000)"
    )
    p.add_argument("--dims", type=int, default=128, help="dimensions of --data generated (128)")
    p.add_argument("--queries", type=int, default=1000, help="queries (1000)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--ef", type=int, default=64, help="search ef (64)")
    p.add_argument("--m", type=int, default=16, help="max_connections (16)")
    p.add_argument("--ef-construction", type=int, default=200)
    p.add_argument(
        "--chunk", type=int, default=32, help="queries per search_batch call in '2 threads' (32)"
    )
    p.sized("--seconds", full=4.0, quick=1.0, help="seconds per throughput measurement")
    p.sized("--repeats", full=3, quick=1, help="alternating rounds without / with writer")
    p.sized("--lag-seconds", full=5.0, quick=2.0, help="seconds of lag measurement")
    p.add_argument("--quick", action="store_true", help="small sizes, short runs: a smoke run")
    p.add_argument("--workdir", help="where the index goes (default: a temporary folder)")
    add_json_option(p)
    args = p.parse_args(argv)
    if args.quick:
        args.queries = min(args.queries, 200)
    return args


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import chassis

    data = load(args)
    base, queries = data["base"], data["queries"]
    print(
        f"data: {args.data}, index {base.shape[0]:,} x {base.shape[1]}, {len(queries)} queries, "
        f"metric {data['metric']}, k={args.k}, ef={args.ef}",
        flush=True,
    )
    workdir = work_folder(args.workdir, "chassis-bench-readers-")
    path = str(workdir / "readers.chassis")
    if os.path.exists(path):
        os.remove(path)
    vectors_file = workdir / "writer-vectors.npy"
    np.save(vectors_file, data["extra"])
    results = run_record(args, chassis=chassis.__version__, metric=data["metric"])
    try:
        opts = chassis.IndexOptions(
            max_connections=args.m, ef_construction=args.ef_construction, metric=data["metric"]
        )
        with chassis.VectorIndex(path, base.shape[1], opts) as index:
            _, build_s = timed(lambda: index.add_batch(base, threads=2))
            index.flush()
        print(f"built in {build_s:.1f} s", flush=True)
        results["build_s"] = build_s

        reader = chassis.IndexReader(path)
        truth, _ = datasets.ground_truth(base, queries, args.k, data["metric"])
        ids, _ = reader.search_batch(queries, args.k, ef=args.ef)
        recall = datasets.recall_at_k(ids, truth, args.k)
        results["recall"] = recall
        print(f"recall@{args.k} at ef={args.ef}: {recall:.4f}", flush=True)
        for mode in MODES:  # warm-up: mappings and caches
            args_w = argparse.Namespace(**{**vars(args), "seconds": min(0.5, args.seconds)})
            measure(reader, queries, args_w, mode)

        rounds: dict[str, dict[str, list[float]]] = {m: {"alone": [], "writer": []} for m in MODES}
        writers: list[dict[str, Any]] = []
        for r in range(args.repeats):
            for mode in MODES:
                alone = measure(reader, queries, args, mode)
                w = Writer(path, vectors_file, workdir, f"{r}-{MODES[mode]}")
                try:
                    busy = measure(reader, queries, args, mode)
                finally:
                    wr = w.finish()
                writers.append({k: wr[k] for k in ("flushes", "flushes_per_s", "cpu_share")})
                rounds[mode]["alone"].append(alone)
                rounds[mode]["writer"].append(busy)
                print(
                    f"  round {r + 1}/{args.repeats} {mode}: {alone:,.0f} q/s alone, {busy:,.0f} q/s "
                    f"with writer ({wr['flushes_per_s']:,.0f} flushes/s)",
                    flush=True,
                )

        lag = lag_run(reader, path, vectors_file, workdir, args.lag_seconds)
        final_len = len(reader)
        reader.close()
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    summary = {}
    rows = []
    for mode in MODES:
        a, b = median(rounds[mode]["alone"]), median(rounds[mode]["writer"])
        ratio = b / a if a else None
        summary[mode] = {"alone_qps": a, "writer_qps": b, "ratio": ratio, "rounds": rounds[mode]}
        rows.append([mode, fmt(a), fmt(b), fmt(ratio, ".2f")])
    results["throughput"] = summary
    results["writers"] = writers
    results["lag"] = lag
    results["final_len"] = final_len

    print(
        f"\nsearch throughput of one IndexReader (q/s, median of {args.repeats}; "
        f"k={args.k}, ef={args.ef}, {len(queries)} queries)"
    )
    print(table(["mode", "no writer", "writer process", "ratio"], rows))
    fps = median(w["flushes_per_s"] for w in writers)
    cpu = median(w["cpu_share"] for w in writers)
    print(
        f"writer process: add 1 + flush in a loop, {fmt(fps)} flushes/s, {fmt(cpu, '.0%')} of a core "
        f"(median over rounds)"
    )
    print(
        f"\nflush() returned -> visible to the reader's len() (ms; {lag['matched']} of {lag['flushes']} "
        f"flushes seen as distinct counts; writer {fmt(lag['writer_flushes_per_s'])} flushes/s, "
        f"flush() itself {fmt(lag['flush_median_ms'], '.3f')} ms median)"
    )
    print(
        table(
            ["lag (ms)", "median", "p99", "max", "min"],
            [
                [
                    "from flush() returned",
                    fmt(lag.get("median_ms"), ".3f"),
                    fmt(lag.get("p99_ms"), ".3f"),
                    fmt(lag.get("max_ms"), ".3f"),
                    fmt(lag.get("min_ms"), ".3f"),
                ],
                [
                    "from flush() called",
                    fmt(lag.get("from_call_median_ms"), ".3f"),
                    fmt(lag.get("from_call_p99_ms"), ".3f"),
                    fmt(lag.get("from_call_max_ms"), ".3f"),
                    "",
                ],
            ],
        )
    )
    if lag.get("negative_share"):
        print(
            f"({lag['negative_share']:.1%} of the counts were visible before flush() returned: "
            f"through the index file the commit header is written before flush's last sync)"
        )
    if lag["seen_but_never_flushed"]:
        print(f"WARNING: the reader saw counts no flush produced: {lag['seen_but_never_flushed']}")
    write_results(args.json, "bench_readers", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
