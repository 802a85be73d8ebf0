"""Shared pieces of the benchmarks: timing, QPS at fixed recall, engine adapters, data sets.

Every engine is driven through the same small adapter interface (`Engine`), so
a benchmark measures each one the same way:

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

import gc
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MINILM = Path("/work/shared/data/debian-minilm")


# ------------------------------------------------------------------ data sets
def datasets_module():
    """`chassis.datasets`; before the extension is built, the source file itself (numpy only)."""
    try:
        from chassis import datasets

        return datasets
    except ImportError:
        name = "_chassis_datasets_source"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(
            name, REPO / "python" / "chassis" / "datasets.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


# ------------------------------------------------------------------ timing
def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(fn(), seconds it took) by the monotonic high-resolution clock."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def median_seconds(fn: Callable[[], Any], repeats: int = 7, warmup: int = 1) -> float:
    """Median wall time of `repeats` calls of fn after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn)[1] for _ in range(repeats))


# ------------------------------------------------------------------ recall / QPS
def interpolate_qps(
    sweep: Sequence[tuple[float, float]], target: float
) -> tuple[float | None, str]:
    """QPS at recall `target`, linear between the two sweep points around it.

    `sweep` is (recall, qps) in sweep order (growing ef). The answer is taken
    between the first point reaching `target` and the point before it. Returns
    (qps, how): how is "interpolated", "at-first-point" when even the smallest ef
    reaches the target (its QPS is then a lower bound), or "not-reached" (qps None).
    """
    for i, (recall, qps) in enumerate(sweep):
        if recall >= target:
            if i == 0:
                return qps, "at-first-point"
            r0, q0 = sweep[i - 1]
            if recall == r0:
                return qps, "interpolated"
            frac = (target - r0) / (recall - r0)
            return q0 + frac * (qps - q0), "interpolated"
    return None, "not-reached"


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, None when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


# ------------------------------------------------------------------ engines
class EngineUnavailable(Exception):
    """The engine's package is missing or cannot do what was asked (e.g. a metric)."""


class Engine:
    """One index library behind a uniform interface. Subclasses fill in the hooks.

    `modes` names the search styles it offers: "batch" (one call for all
    queries, one thread) and "loop" (a Python loop of single-query calls).
    `durable_adds` is True when it can make one add durable (add + flush).
    """

    name = "?"
    package = "?"
    distributions: tuple[str, ...] = ()  # names to ask importlib.metadata for the version
    modes: tuple[str, ...] = ("batch", "loop")
    durable_adds = False
    notes: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.module = importlib.import_module(self.package)
        self.index: Any = None
        self.dims = 0
        self.metric = "euclidean"
        self.m = 16
        self.ef_construction = 200

    @property
    def version(self) -> str:
        found = getattr(self.module, "__version__", None)
        for dist in self.distributions:
            if found is not None:
                break
            try:
                found = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                pass
        return str(found or "?")

    # -- hooks
    def build(self, path: str, base: np.ndarray, *, metric: str, m: int,
              ef_construction: int, threads: int) -> float:
        """Create the index at `path`, insert `base` (ids 0..n-1), return the insert seconds.

        The index is then made durable (flush / save) outside the timed part and
        left open; `persist_seconds` says how long that took."""
        raise NotImplementedError

    def open(self, path: str) -> None:
        """Open the saved index at `path` for searching and writing."""
        raise NotImplementedError

    def set_ef(self, ef: int) -> None:
        raise NotImplementedError

    def search(self, mode: str, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
        """(ids as a (q, k) integer array, seconds spent in the engine's search calls)."""
        raise NotImplementedError

    def add_and_flush(self, vector: np.ndarray) -> None:
        raise EngineUnavailable(f"{self.name} has no durable single add")

    def close(self) -> None:
        if self.index is not None and hasattr(self.index, "close"):
            self.index.close()
        self.index = None
        gc.collect()

    # -- shared
    persist_seconds = 0.0

    def open_seconds(self, path: str) -> float:
        """Seconds for one fresh open of the saved file (the handle is closed afterwards)."""
        start = time.perf_counter()
        self.open(path)
        elapsed = time.perf_counter() - start
        self.close()
        return elapsed

    def _remember(self, base: np.ndarray, metric: str, m: int, ef_construction: int) -> None:
        self.dims, self.metric, self.m, self.ef_construction = (
            int(base.shape[1]), metric, m, ef_construction)

    @staticmethod
    def _loop(call: Callable[[np.ndarray], Any], queries: np.ndarray) -> tuple[list[Any], float]:
        """Results of call(q) for each row, and the seconds spent in the loop itself."""
        rows = list(queries)  # slicing rows outside the timed loop
        start = time.perf_counter()
        results = [call(q) for q in rows]
        return results, time.perf_counter() - start


def _pad_rows(rows: list[list[int]], k: int) -> np.ndarray:
    out = np.full((len(rows), k), -1, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row[:k]
    return out


class ChassisEngine(Engine):
    """This project: chassis.VectorIndex."""

    name = package = "chassis"
    durable_adds = True

    def __init__(self) -> None:
        super().__init__()
        self.ef = 50
        self.threads: int | None = None

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        options = self.module.IndexOptions(
            max_connections=m, ef_construction=ef_construction, metric=metric)
        self.index = self.module.VectorIndex(path, self.dims, options)
        _, seconds = timed(lambda: self.index.add_batch(base, threads=threads))
        _, self.persist_seconds = timed(self.index.flush)
        return seconds

    def open(self, path):
        self.index = self.module.VectorIndex(path, self.dims)

    def set_ef(self, ef):
        self.ef = ef

    def search(self, mode, queries, k):
        if mode == "batch":
            (ids, _), seconds = timed(
                lambda: self.index.search_batch(queries, k, ef=self.ef, threads=1))
            return ids, seconds
        results, seconds = self._loop(lambda q: self.index.search(q, k, ef=self.ef), queries)
        return _pad_rows([[hit.id for hit in hits] for hits in results], k), seconds

    def add_and_flush(self, vector):
        self.index.add(vector)
        self.index.flush()


class ChassisDBEngine(Engine):
    """The predecessor, chassisdb 0.10.0 (ctypes). Its ef is fixed when a file is opened,
    so set_ef reopens the file with IndexOptions(ef_search=ef)."""

    name = package = "chassisdb"
    durable_adds = True
    notes = ("chassisdb add_batch links on every core (no thread control)",
             "chassisdb takes ef_search at open: each ef of the sweep reopens the file")

    def __init__(self) -> None:
        super().__init__()
        self.path = ""

    def _options(self, ef_search: int = 50):
        return self.module.IndexOptions(
            max_connections=self.m, ef_construction=self.ef_construction,
            ef_search=ef_search, metric=self.metric)

    def build(self, path, base, *, metric, m, ef_construction, threads):
        if metric not in ("euclidean", "cosine"):
            raise EngineUnavailable(f"chassisdb has no {metric} metric")
        self._remember(base, metric, m, ef_construction)
        self.path = path
        self.index = self.module.VectorIndex(path, self.dims, self._options())
        _, seconds = timed(lambda: self.index.add_batch(base))
        _, self.persist_seconds = timed(self.index.flush)
        return seconds

    def open(self, path):
        self.path = path
        self.index = self.module.VectorIndex(path, self.dims, self._options())

    def set_ef(self, ef):
        self.close()
        self.index = self.module.VectorIndex(self.path, self.dims, self._options(ef))

    def search(self, mode, queries, k):
        if mode == "batch":
            (ids, _), seconds = timed(lambda: self.index.search_batch(queries, k))
            return ids, seconds
        results, seconds = self._loop(lambda q: self.index.search(q, k), queries)
        return _pad_rows([[hit.id for hit in hits] for hits in results], k), seconds

    def add_and_flush(self, vector):
        self.index.add(vector)
        self.index.flush()


class HnswlibEngine(Engine):
    """hnswlib (in-memory graph; save_index writes the whole file, load_index reads it)."""

    name = package = "hnswlib"
    distributions = ("hnswlib", "chroma-hnswlib")
    notes = ("hnswlib open = load_index, which reads the whole file into memory",)
    _SPACES = {"euclidean": "l2", "cosine": "cosine", "inner_product": "ip"}

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        self.index = self.module.Index(space=self._SPACES[metric], dim=self.dims)
        self.index.init_index(max_elements=len(base), ef_construction=ef_construction, M=m,
                              random_seed=100)
        ids = np.arange(len(base), dtype=np.int64)
        _, seconds = timed(lambda: self.index.add_items(base, ids, num_threads=threads))
        _, self.persist_seconds = timed(lambda: self.index.save_index(path))
        return seconds

    def open(self, path):
        self.index = self.module.Index(space=self._SPACES[self.metric], dim=self.dims)
        self.index.load_index(path)

    def set_ef(self, ef):
        self.index.set_ef(ef)

    def search(self, mode, queries, k):
        if mode == "batch":
            (ids, _), seconds = timed(lambda: self.index.knn_query(queries, k, num_threads=1))
            return ids, seconds
        results, seconds = self._loop(
            lambda q: self.index.knn_query(q, k, num_threads=1), queries)
        return np.vstack([labels for labels, _ in results]), seconds

    def close(self):
        self.index = None
        gc.collect()


class UsearchEngine(Engine):
    """usearch (optional peer; open = Index.restore(view=True), a memory map)."""

    name = package = "usearch"
    _METRICS = {"euclidean": "l2sq", "cosine": "cos", "inner_product": "ip"}

    def __init__(self) -> None:
        super().__init__()
        self.module = importlib.import_module("usearch.index")

    distributions = ("usearch",)

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        self.index = self.module.Index(
            ndim=self.dims, metric=self._METRICS[metric], dtype="f32",
            connectivity=m, expansion_add=ef_construction)
        keys = np.arange(len(base), dtype=np.uint64)
        _, seconds = timed(lambda: self.index.add(keys, base, threads=threads))
        _, self.persist_seconds = timed(lambda: self.index.save(path))
        return seconds

    def open(self, path):
        self.index = self.module.Index.restore(path, view=True)

    def set_ef(self, ef):
        self.index.expansion_search = ef

    def search(self, mode, queries, k):
        if mode == "batch":
            matches, seconds = timed(lambda: self.index.search(queries, k, threads=1))
            return matches.keys.astype(np.int64), seconds
        results, seconds = self._loop(lambda q: self.index.search(q, k), queries)
        return _pad_rows([m.keys.tolist() for m in results], k), seconds

    def close(self):
        self.index = None
        gc.collect()


class FaissEngine(Engine):
    """faiss IndexHNSWFlat (optional peer; read_index reads the whole file)."""

    name = package = "faiss"
    distributions = ("faiss-cpu", "faiss-gpu", "faiss")

    def build(self, path, base, *, metric, m, ef_construction, threads):
        if metric != "euclidean":
            raise EngineUnavailable("the faiss adapter only does euclidean")
        self._remember(base, metric, m, ef_construction)
        self.module.omp_set_num_threads(threads)
        self.index = self.module.IndexHNSWFlat(self.dims, m)
        self.index.hnsw.efConstruction = ef_construction
        _, seconds = timed(lambda: self.index.add(base))
        _, self.persist_seconds = timed(lambda: self.module.write_index(self.index, path))
        self.module.omp_set_num_threads(1)  # searches are single-threaded
        return seconds

    def open(self, path):
        self.index = self.module.read_index(path)

    def set_ef(self, ef):
        self.index.hnsw.efSearch = ef

    def search(self, mode, queries, k):
        self.module.omp_set_num_threads(1)
        if mode == "batch":
            (_, ids), seconds = timed(lambda: self.index.search(queries, k))
            return ids, seconds
        results, seconds = self._loop(lambda q: self.index.search(q[None, :], k), queries)
        return np.vstack([ids for _, ids in results]), seconds

    def close(self):
        self.index = None
        gc.collect()


ENGINES: dict[str, type[Engine]] = {
    "chassis": ChassisEngine,
    "chassisdb": ChassisDBEngine,
    "hnswlib": HnswlibEngine,
    "usearch": UsearchEngine,
    "faiss": FaissEngine,
}


def make_engine(name: str) -> Engine:
    """An adapter for `name`; EngineUnavailable when its package cannot be imported."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    try:
        return ENGINES[name]()
    except ImportError as exc:
        raise EngineUnavailable(f"{name} is not installed ({exc})") from None


def engine_status(names: Iterable[str]) -> tuple[dict[str, Engine], list[str]]:
    """({name: engine} for the importable ones, notes on the skipped ones)."""
    engines, notes = {}, []
    for name in names:
        try:
            engines[name] = make_engine(name)
        except EngineUnavailable as exc:
            notes.append(f"skipped {name}: {exc}")
    return engines, notes


# ------------------------------------------------------------------ reporting
def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
    }
    try:
        import chassis

        info["chassis_cpu_info"] = chassis.cpu_info()
    except Exception:
        pass
    return info


def fmt(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    """A number for a table cell; "-" when missing."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table, first column left-aligned, the rest right-aligned."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
