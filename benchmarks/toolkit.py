"""The benchmarks' one shared module: every script imports from here (and from chassis), never
from another script.

What it holds:
  - the package's benchmark machinery, re-exported from `chassis._bench` (also behind
    `chassis bench`): timing, engine adapters, sweeps, and the one result schema: Point,
    QpsAt, qps_at_targets / median_qps_at (QPS interpolated at recall 0.90 / 0.95 / 0.99),
    ratio / ratios / versus_best_peer, write_json. There is one implementation of each, there.
  - the adapters with two more search modes, "batch2" (the engine's batch call on 2 threads)
    and "batch1" (batch calls of one query), for every engine: SPEED_ENGINES, speed_engines;
  - where the data is: $CHASSIS_DATA (a folder holding debian-minilm/), else
    <repo>/../shared/data;
  - the data sets the speed benchmark compares on (load_dataset) and the median over passes
    (summarize);
  - results files: benchmarks/results/YYYY-MM-DD-<script>-<machine>.json (add_json_option,
    write_results);
  - children/: the programs the scripts run in fresh processes, by path (child_script);
  - page-cache helpers (Linux): file_resident_bytes, evict_file.

    engine = make_engine("hnswlib")          # or "chassis", "chassisdb", "usearch", "faiss"
    seconds = engine.build(path, base, metric="euclidean", m=16, ef_construction=200, threads=2)
    engine.close()
    open_s = engine.open_seconds(path)       # a fresh open of the saved file, closed again
    engine.open(path)
    engine.set_ef(64)
    ids, seconds = engine.search("batch", queries, k=10)

Peers that are not installed are reported by `engine_status()` and skipped.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import importlib.util
import mmap
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
CHILDREN = HERE / "children"


def _bench_module():
    """`chassis._bench`; before the extension is built, the source file itself (it imports
    chassis only when the chassis engine is used)."""
    try:
        from chassis import _bench

        return _bench
    except ImportError:
        name = "_chassis_bench_source"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(
            name, REPO / "python" / "chassis" / "_bench.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


_b = _bench_module()

# the result schema and its arithmetic (one implementation, in chassis._bench)
TARGETS = _b.TARGETS
Point = _b.Point
QpsAt = _b.QpsAt
interpolate_qps = _b.interpolate_qps
qps_at_targets = _b.qps_at_targets
median_qps_at = _b.median_qps_at
ratio = _b.ratio
ratios = _b.ratios
best_peer = _b.best_peer
versus_best_peer = _b.versus_best_peer
sweep_points = _b.sweep_points
qps_cell = _b.qps_cell
write_json = _b.write_json
json_default = _b.json_default
# timing, engines, sweeps, printing
datasets_module = _b.datasets_module
median = _b.median
timed = _b.timed
median_seconds = _b.median_seconds
path_bytes = _b.path_bytes
EngineUnavailable = _b.EngineUnavailable
Engine = _b.Engine
ChassisEngine = _b.ChassisEngine
ChassisInt8Engine = _b.ChassisInt8Engine
ChassisInt4Engine = _b.ChassisInt4Engine
ChassisCodesEngine = _b.ChassisCodesEngine
ChassisHalfEngine = _b.ChassisHalfEngine
ChassisDBEngine = _b.ChassisDBEngine
HnswlibEngine = _b.HnswlibEngine
UsearchEngine = _b.UsearchEngine
UsearchI8Engine = _b.UsearchI8Engine
FaissEngine = _b.FaissEngine
FaissSQ8Engine = _b.FaissSQ8Engine
FaissSQ4Engine = _b.FaissSQ4Engine
ENGINES = _b.ENGINES
make_engine = _b.make_engine
engine_status = _b.engine_status
measure_sweep = _b.measure_sweep
plot_sweeps = _b.plot_sweeps
machine_info = _b.machine_info
fmt = _b.fmt
table = _b.table


# ------------------------------------------------------------------ engines: two more search modes
def _ids_2d(keys: Any, k: int) -> np.ndarray:
    """Result ids as a (q, k) int64 array (rows shorter than k padded with -1)."""
    keys = np.asarray(keys)
    if keys.ndim == 2:
        return keys.astype(np.int64)
    out = np.full((1, k), -1, dtype=np.int64)
    out[0, : len(keys)] = keys[:k]
    return out


class _SpeedModes:
    """Mixin over an adapter of chassis._bench: adds the search modes

      "batch2"  the engine's batch call on `threads` (2) threads, timed around that one call;
      "batch1"  a Python loop of batch calls with one query each (per-call overhead).

    Subclasses give `_batch(queries, k, threads)` (the raw batch call) and `_batch_ids(raw, k)`;
    `_with_threads(n)` / `_prepare(queries)` are set-up outside the timed part."""

    modes = ("batch", "loop", "batch2", "batch1")
    search_threads = 2  # threads of "batch2"
    threads2_note = ""  # how "batch2" gets its threads, when it is not the engine's own way

    def _batch(self, queries: np.ndarray, k: int, threads: int) -> Any:
        raise TypeError(f"{type(self).__name__} is a speed adapter without a batch call")

    def _batch_ids(self, raw: Any, k: int) -> np.ndarray:
        return _ids_2d(raw[0], k)

    def _with_threads(self, threads: int) -> None:
        pass

    def _prepare(self, queries: np.ndarray) -> np.ndarray:
        return queries

    def search(self, mode, queries, k):
        threads = self.search_threads
        if mode == "batch2":
            queries = self._prepare(queries)
            self._with_threads(threads)
            try:
                raw, seconds = timed(lambda: self._batch(queries, k, threads))
            finally:
                self._with_threads(1)
            return self._batch_ids(raw, k), seconds
        if mode == "batch1":
            rows = self._prepare(queries).reshape(len(queries), 1, -1)  # (1, d) views
            self._with_threads(1)
            results, seconds = self._loop(lambda q: self._batch(q, k, 1), rows)
            return np.vstack([self._batch_ids(r, k) for r in results]), seconds
        return super().search(mode, queries, k)


class ChassisSpeed(_SpeedModes, ChassisEngine):
    def __init__(self) -> None:
        super().__init__()
        from chassis import _chassis

        self._counters = _chassis._search_counters
        self.counted: tuple[int, int] | None = None  # (searches, distances) of the last 1t batch

    def _batch(self, queries, k, threads):
        return self.index.search_batch(queries, k, ef=self.ef, threads=threads)

    def search(self, mode, queries, k):
        if mode != "batch":
            return super().search(mode, queries, k)
        before = self._counters()
        found = super().search(mode, queries, k)
        after = self._counters()
        self.counted = (after[0] - before[0], after[1] - before[1])
        return found


class ChassisInt8Speed(ChassisSpeed, ChassisInt8Engine):
    pass


class ChassisInt4Speed(ChassisSpeed, ChassisInt4Engine):
    pass


class ChassisCodesSpeed(ChassisSpeed, ChassisCodesEngine):
    pass


class ChassisHalfSpeed(ChassisSpeed, ChassisHalfEngine):
    pass


class ChassisMemorySpeed(ChassisSpeed):
    """chassis in memory (VectorIndex(None, dims)), like hnswlib, usearch and faiss: built by
    add_batch into anonymous memory; "persist" is save(path), "open" is VectorIndex.load."""

    name = "chassis-memory"
    durable_adds = False  # in memory: flush() makes nothing durable

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        options = self.module.IndexOptions(
            max_connections=m, ef_construction=ef_construction, metric=metric
        )
        self.index = self.module.VectorIndex(None, self.dims, options)
        _, seconds = timed(lambda: self.index.add_batch(base, threads=threads))
        _, self.persist_seconds = timed(lambda: self.index.save(path))
        return seconds

    def open(self, path):
        self.index = self.module.VectorIndex.load(path)


class HnswlibSpeed(_SpeedModes, HnswlibEngine):
    def _batch(self, queries, k, threads):
        return self.index.knn_query(queries, k, num_threads=threads)


class UsearchSpeed(_SpeedModes, UsearchEngine):
    def _batch(self, queries, k, threads):
        return self.index.search(queries, k, threads=threads)

    def _batch_ids(self, raw, k):
        return _ids_2d(raw.keys, k)


class UsearchI8Speed(UsearchSpeed, UsearchI8Engine):
    pass


class FaissSpeed(_SpeedModes, FaissEngine):
    def _batch(self, queries, k, threads):
        return self.index.search(queries, k)

    def _batch_ids(self, raw, k):
        return _ids_2d(raw[1], k)

    def _with_threads(self, threads):
        self.module.omp_set_num_threads(threads)

    def _prepare(self, queries):
        return self._unit(queries) if self.metric == "cosine" else queries


class FaissSQ8Speed(FaissSpeed, FaissSQ8Engine):
    pass


class FaissSQ4Speed(FaissSpeed, FaissSQ4Engine):
    pass


class ChassisDBSpeed(_SpeedModes, ChassisDBEngine):
    threads2_note = (
        "chassisdb search_batch has no thread control (one thread): its 2t batch is "
        "two Python threads, each calling search_batch on half of the queries"
    )

    def __init__(self) -> None:
        super().__init__()
        self._pool: ThreadPoolExecutor | None = None  # kept across set_ef's reopens

    def _batch(self, queries, k, threads):
        if threads == 1:
            return self.index.search_batch(queries, k)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=threads)
        parts = np.array_split(queries, threads)
        results = list(self._pool.map(lambda part: self.index.search_batch(part, k), parts))
        return np.vstack([ids for ids, _ in results]), np.vstack([d for _, d in results])


SPEED_ENGINES = {
    "chassis": ChassisSpeed,
    "chassis-memory": ChassisMemorySpeed,
    "chassis-int8": ChassisInt8Speed,
    "chassis-int4": ChassisInt4Speed,
    "chassis-codes": ChassisCodesSpeed,
    "chassis-half": ChassisHalfSpeed,
    "hnswlib": HnswlibSpeed,
    "usearch": UsearchSpeed,
    "usearch-i8": UsearchI8Speed,
    "faiss": FaissSpeed,
    "faiss-sq8": FaissSQ8Speed,
    "faiss-sq4": FaissSQ4Speed,
    "chassisdb": ChassisDBSpeed,
}


def speed_engines(names: list[str]) -> tuple[dict[str, Any], list[str]]:
    """({name: engine} for the importable ones, notes on the skipped ones)."""
    engines, notes = {}, []
    for name in names:
        if name not in SPEED_ENGINES:
            raise SystemExit(f"unknown engine {name!r}; known: {', '.join(SPEED_ENGINES)}")
        try:
            engines[name] = SPEED_ENGINES[name]()
        except ImportError as exc:
            notes.append(f"skipped {name}: {name} is not installed ({exc})")
    return engines, notes


# ------------------------------------------------------------------ data
def data_dir() -> Path:
    """The folder of the data sets: $CHASSIS_DATA, else <repo>/../shared/data."""
    env = os.environ.get("CHASSIS_DATA")
    return Path(env).expanduser() if env else REPO.parent / "shared" / "data"


MINILM = data_dir() / "debian-minilm"


def csv(text: str) -> list[str]:
    """The non-empty, stripped parts of a comma-separated option."""
    return [part.strip() for part in text.split(",") if part.strip()]


def load_dataset(
    name: str,
    *,
    minilm: str | os.PathLike[str] = MINILM,
    queries: int = 1_000,
    k: int = 10,
    quick: bool = False,
    clustered_n: int = 100_000,
    clustered_dims: int = 128,
) -> dict[str, Any]:
    """{"name", "base", "queries", "truth", "metric"} of a data set the speed benchmark uses:

    "minilm"     the debian-minilm folder (45,056 x 384, 1,000 queries, ground truth given;
                 --quick: the first 10,000 rows, ground truth computed);
    "clustered"  chassis.datasets.clustered(clustered_n, clustered_dims, seed 0), exact
                 ground truth computed.
    """
    ds = datasets_module()
    if name == "minilm":
        data = ds.load_npy_folder(minilm)
        base, qs, truth, metric = data.base, data.queries, data.gt_ids, data.metric
        if quick:
            base, truth = base[:10_000], None  # the given truth covers the full base only
        if queries < len(qs):
            qs = qs[:queries]
            truth = None if truth is None else truth[:queries]
    elif name == "clustered":
        base, qs = ds.clustered(clustered_n, clustered_dims, queries, seed=0)
        truth, metric = None, "euclidean"
    else:
        raise SystemExit(f"unknown data set {name!r}; known: minilm, clustered")
    if truth is None or truth.shape[1] < k:
        start = time.perf_counter()
        truth, _ = ds.ground_truth(base, qs, k, metric)
        print(f"  [{name}] exact ground truth in {time.perf_counter() - start:.1f} s", flush=True)
    return {
        "name": name,
        "base": np.ascontiguousarray(base, dtype=np.float32),
        "queries": np.ascontiguousarray(qs, dtype=np.float32),
        "truth": np.asarray(truth[:, :k]),
        "metric": metric,
    }


# ------------------------------------------------------------------ summaries
SCALARS = ("build_s", "persist_s", "open_ms", "add_flush_ms", "file_bytes")


def summarize(passes: Sequence[dict[str, Any]], scalars: Sequence[str] = SCALARS) -> dict[str, Any]:
    """Several passes of one engine as one summary: the median of each scalar figure, the
    sweeps point by point (median recall and QPS at each ef), and QPS at each recall target
    as the median of the passes' interpolations (median_qps_at: None unless every pass
    reached it). Each pass is {scalar: value, "sweep": {mode: [Point]}, "qps_at": {mode:
    {target: QpsAt}}}."""
    s: dict[str, Any] = {key: median(p.get(key) for p in passes) for key in scalars}
    modes = passes[0]["sweep"].keys()
    s["sweep"] = {
        mode: [
            {
                "ef": pts[0]["ef"],
                "recall": median(p["recall"] for p in pts),
                "qps": median(p["qps"] for p in pts),
            }
            for pts in zip(*(p["sweep"][mode] for p in passes))
        ]
        for mode in modes
    }
    s["qps_at"] = {mode: median_qps_at([p["qps_at"][mode] for p in passes]) for mode in modes}
    return s


# ------------------------------------------------------------------ results files
def machine_name() -> str:
    """This machine's host name, as a file-name part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", platform.node() or "unknown").strip("-") or "unknown"


def results_path(script: str, day: datetime.date | None = None) -> Path:
    """benchmarks/results/YYYY-MM-DD-<script>-<machine>.json"""
    day = day or datetime.date.today()
    return RESULTS / f"{day.isoformat()}-{script}-{machine_name()}.json"


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """--json [OUT]: write every figure as JSON; without OUT, to results_path(script)."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="",
        metavar="OUT",
        help="write every figure as JSON to OUT (without OUT: "
        "benchmarks/results/YYYY-MM-DD-<script>-<machine>.json)",
    )


def _relative_paths(value: Any) -> Any:
    """`value` with every string naming a path beside the repository (the data sets in
    ../shared/data) written relative to it: results name no folder of the machine."""
    beside = str(REPO.parent) + os.sep
    if isinstance(value, str) and value.startswith(beside):
        return os.path.relpath(value, REPO)
    if isinstance(value, dict):
        return {k: _relative_paths(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_relative_paths(v) for v in value]
    return value


def write_results(
    out: str | None, script: str, document: dict[str, Any], points: Sequence[Any] = ()
) -> Path | None:
    """Write a run's results (nothing when `out` is None; results_path(script) when it is
    ""): {"script", "date", "points": [Point, ...], **document}."""
    if out is None:
        return None
    path = Path(out) if out else results_path(script)
    head = {"script": script, "date": datetime.date.today().isoformat(), "points": list(points)}
    document = _relative_paths({**head, **document})
    if isinstance(document.get("args"), dict):
        # The command line as run, without where this file went, and with any other folder
        # of the machine (an absolute path not beside the repository) cut to its last part.
        document["args"] = {
            k: os.path.basename(v) if isinstance(v, str) and os.path.isabs(v) else v
            for k, v in document["args"].items()
            if k != "json"
        }
    written = write_json(path, document)
    print(f"\nwrote {written}")
    return written


# ------------------------------------------------------------------ child processes
def child_script(name: str) -> str:
    """Path of benchmarks/children/<name>.py, a program a benchmark runs in a fresh process."""
    path = CHILDREN / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(path)
    return str(path)


# ------------------------------------------------------------------ page cache (Linux)
def file_resident_bytes(path: str | os.PathLike) -> int:
    """Bytes of the file in the page cache now: mincore over a fresh read-only mapping of the
    whole file (mapping reads nothing). Linux (and other systems with mincore)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
    finally:
        os.close(fd)
    try:
        page = mmap.PAGESIZE
        vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
        if libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), f"mincore {path}")
        return sum(b & 1 for b in bytes(vec)) * page
    finally:
        libc.munmap(addr, size)


def evict_file(path: str | os.PathLike, *, check: bool = True) -> int:
    """Drop the file from the page cache (fsync, then posix_fadvise DONTNEED) so that the next
    reads come from the disk; returns the bytes still cached, and with `check` raises if more
    than a page is (a process that still maps the file keeps its pages). Linux."""
    gc.collect()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    left = file_resident_bytes(path)
    if check and left > mmap.PAGESIZE:
        raise RuntimeError(
            f"{path}: {left} bytes still cached after POSIX_FADV_DONTNEED (is it still open?)"
        )
    return left
