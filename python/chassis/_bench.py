"""Benchmark machinery shared by `python -m chassis bench` and benchmarks/: timing, QPS at
equal recall, and one adapter per index library.

Every engine is driven through the same small interface (`Engine`), so each one is
measured the same way:

    engine = make_engine("hnswlib")          # or "chassis", "chassisdb", "usearch", "faiss"
    seconds = engine.build(path, base, metric="euclidean", m=16, ef_construction=200, threads=2)
    engine.close()
    open_s = engine.open_seconds(path)       # a fresh open of the saved file, closed again
    engine.open(path)
    engine.set_ef(64)
    ids, seconds = engine.search("batch", queries, k=10)
    points = measure_sweep(engine, queries, truth, k=10, efs=[16, 32, 64])
    qps_at = {mode: qps_at_targets(pts) for mode, pts in points.items()}

Results have one shape (the schema section below: Point, QpsAt, qps_at_targets,
median_qps_at, ratios, versus_best_peer, write_json); benchmarks/toolkit.py imports them from
here, so the figures of `chassis bench` and of the benchmarks are computed by the same code.

Peers are imported only when asked for; those not installed are reported by
`engine_status()` and skipped. Nothing here imports chassis at module level, so the
benchmarks can load this file by path before the extension is built.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np

TARGETS = (0.90, 0.95, 0.99)  # recall levels at which QPS is compared


# ------------------------------------------------------------------ data sets
def datasets_module() -> Any:
    """`chassis.datasets`; before the extension is built, the source file beside this one
    (it needs only NumPy)."""
    try:
        from chassis import datasets

        return datasets
    except ImportError:
        name = "_chassis_datasets_source"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("datasets.py"))
        assert spec is not None and spec.loader is not None
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


def path_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes of a file, or of every file under a folder; None when it does not exist."""
    p = Path(path)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size if p.exists() else None


def median_seconds(fn: Callable[[], Any], repeats: int = 7, warmup: int = 1) -> float:
    """Median wall time of `repeats` calls of fn after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn)[1] for _ in range(repeats))


# ------------------------------------------------------------------ the result schema
# One shape for every measured figure, here and in benchmarks/ (which imports these):
#   a sweep point      Point: {"ef", "recall", "qps"} (+ "runs", "distances"; flattened into a
#                      results file with "engine", "dataset", "mode")
#   QPS at a recall    QpsAt: {"qps": float | None, "how": "interpolated" | "at-first-point" |
#                      "not-reached"}, keyed by str(target) ("0.9", "0.95", "0.99")
#   a summary          {"qps_at": {mode: {target: QpsAt}}, "sweep": {mode: [Point]}, ...scalars}
#   ratios             ratio(ours, theirs) of one figure; ratios(ours, peer) of two summaries;
#                      versus_best_peer(...) against the best engine that is not ours


class Point(TypedDict, total=False):
    """One measured point of an ef sweep."""

    engine: str
    dataset: str
    mode: str  # "batch", "loop", "batch2", ... (the engine's search style)
    ef: int
    recall: float
    qps: float
    runs: int  # timed calls whose median gave qps
    distances: float  # distances computed per query, where counted


class QpsAt(TypedDict):
    """A figure (QPS, or another per-point value) interpolated at one recall target."""

    qps: float | None
    how: str  # "interpolated", "at-first-point" (a lower bound) or "not-reached"


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


def qps_at_targets(
    points: Sequence[Mapping[str, Any]], targets: Sequence[float] = TARGETS, key: str = "qps"
) -> dict[str, QpsAt]:
    """{str(target): QpsAt} for sweep points [{"ef", "recall", key}, ...] in sweep order;
    `key` names the figure interpolated (QPS by default, e.g. "distances" too)."""
    sweep = [(p["recall"], p[key]) for p in points]
    out: dict[str, QpsAt] = {}
    for t in targets:
        value, how = interpolate_qps(sweep, t)
        out[str(t)] = {"qps": value, "how": how}
    return out


def median_qps_at(per_pass: Sequence[Mapping[str, QpsAt]]) -> dict[str, QpsAt]:
    """Several passes' qps_at_targets() as one: the median value at each target, reported
    only when every pass reached it; "at-first-point" when any pass was a lower bound."""
    out: dict[str, QpsAt] = {}
    for t in per_pass[0] if per_pass else ():
        cells = [p[t] for p in per_pass]
        hows = {c["how"] for c in cells}
        if "not-reached" in hows:
            out[t] = {"qps": None, "how": "not-reached"}
        else:
            how = "at-first-point" if "at-first-point" in hows else "interpolated"
            out[t] = {"qps": median(c["qps"] for c in cells), "how": how}
    return out


def ratios(
    ours: Mapping[str, Any],
    peer: Mapping[str, Any],
    keys: Sequence[str] = ("build_s", "open_ms", "file_bytes"),
) -> dict[str, Any]:
    """ours / peer of two summaries: each of `keys` both have, and "qps_at" {mode: {target:
    ratio}} for the modes both have. QPS: > 1 means ours is faster; times and sizes: < 1."""
    r: dict[str, Any] = {key: ratio(ours.get(key), peer.get(key)) for key in keys}
    mine, theirs = ours.get("qps_at", {}), peer.get("qps_at", {})
    r["qps_at"] = {
        mode: {
            t: ratio(cell["qps"], theirs[mode].get(t, {}).get("qps"))
            for t, cell in mine[mode].items()
        }
        for mode in mine
        if mode in theirs
    }
    return r


def best_peer(
    values: Mapping[str, float | None], better: str, ours: Iterable[str] = ("chassis",)
) -> tuple[str | None, float | None]:
    """(engine, value) of the best engine not in `ours`: the highest value when `better` is
    "high" (QPS), the lowest when "low" (times, sizes); (None, None) when none has one."""
    mine = set(ours)
    found = [(v, n) for n, v in values.items() if n not in mine and v is not None]
    if not found:
        return None, None
    value, name = (max if better == "high" else min)(found)
    return name, value


def versus_best_peer(
    results: Mapping[str, Any],
    columns: Sequence[tuple[str, Callable[[str, Any], float | None], str]],
    who: str = "chassis",
    ours: Iterable[str] = ("chassis",),
) -> dict[str, dict[str, Any]]:
    """{column: {"chassis", "best_peer", "peer_value", "ratio"}}: `who` / the best engine not
    in `ours`, for each (key, getter(engine, summary) -> value, "high" | "low") column."""
    if who not in results:
        return {}
    mine = tuple(ours)
    out = {}
    for key, getter, better in columns:
        peer, value = best_peer({n: getter(n, s) for n, s in results.items()}, better, mine)
        figure = getter(who, results[who])
        out[key] = {
            "chassis": figure,
            "best_peer": peer,
            "peer_value": value,
            "ratio": ratio(figure, value),
        }
    return out


def sweep_points(
    dataset: str, sweeps: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]
) -> list[Point]:
    """{engine: {mode: [points]}} flattened into Points that name their engine, data set and
    mode: the "points" list of a results file."""
    return [
        cast(Point, {"engine": engine, "dataset": dataset, "mode": mode, **p})
        for engine, modes in sweeps.items()
        for mode, points in modes.items()
        for p in points
    ]


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
    def build(
        self,
        path: str,
        base: np.ndarray,
        *,
        metric: str,
        m: int,
        ef_construction: int,
        threads: int,
    ) -> float:
        """Create the index at `path`, insert `base` (ids 0..n-1), return the insert seconds.

        The index is then made durable (flush / save) outside the timed part and
        left open; `persist_seconds` says how long that took."""
        raise TypeError(f"{type(self).__name__} is an engine adapter without this hook")

    def open(self, path: str) -> None:
        """Open the saved index at `path` for searching and writing."""
        raise TypeError(f"{type(self).__name__} is an engine adapter without this hook")

    def set_ef(self, ef: int) -> None:
        raise TypeError(f"{type(self).__name__} is an engine adapter without this hook")

    def search(self, mode: str, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
        """(ids as a (q, k) integer array, seconds spent in the engine's search calls)."""
        raise TypeError(f"{type(self).__name__} is an engine adapter without this hook")

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
            int(base.shape[1]),
            metric,
            m,
            ef_construction,
        )

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
        self.progress = False  # a progress bar while building (add_batch(progress=True))
        self.read_only = False  # open() opens a reader instead of the writer

    quantization: str | None = None
    precision = "full"

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        options = self.module.IndexOptions(
            max_connections=m,
            ef_construction=ef_construction,
            metric=metric,
            quantization=self.quantization,
            precision=self.precision,
        )
        self.index = self.module.VectorIndex(path, self.dims, options)
        _, seconds = timed(
            lambda: self.index.add_batch(base, threads=threads, progress=self.progress)
        )
        _, self.persist_seconds = timed(self.index.flush)
        return seconds

    def open(self, path):
        if self.read_only:
            self.index = self.module.VectorIndex(path, read_only=True)
        else:
            self.index = self.module.VectorIndex(path, self.dims)

    def set_ef(self, ef):
        self.ef = ef

    def search(self, mode, queries, k):
        if mode == "batch":
            (ids, _), seconds = timed(
                lambda: self.index.search_batch(queries, k, ef=self.ef, threads=1)
            )
            return ids, seconds
        results, seconds = self._loop(lambda q: self.index.search(q, k, ef=self.ef), queries)
        return _pad_rows([[hit.id for hit in hits] for hits in results], k), seconds

    def add_and_flush(self, vector):
        self.index.add(vector)
        self.index.flush()


class ChassisInt8Engine(ChassisEngine):
    """This project with 8-bit codes (``IndexOptions(quantization="int8")``): the walk on the
    codes, the best candidates reranked on the float32 vectors (the distances are theirs)."""

    name = "chassis-int8"
    quantization = "int8"


class ChassisInt4Engine(ChassisEngine):
    """This project with 4-bit codes (``IndexOptions(quantization="int4")``): the walk on codes
    of half int8's bytes, more candidates reranked on the float32 vectors."""

    name = "chassis-int4"
    quantization = "int4"


class ChassisHalfEngine(ChassisEngine):
    """This project with its vectors stored in half precision (``IndexOptions(precision="half")``):
    half the file's vector bytes, distances on the half-precision values."""

    name = "chassis-half"
    precision = "half"


class ChassisCodesEngine(ChassisEngine):
    """This project with 8-bit codes only (``IndexOptions(precision="int8")``): no float32
    copy, walk and distances on the codes, as usearch ``i8`` and faiss SQ8."""

    name = "chassis-codes"
    precision = "int8"


class ChassisDBEngine(Engine):
    """The predecessor, chassisdb 0.10.0 (ctypes). Its ef is fixed when a file is opened,
    so set_ef reopens the file with IndexOptions(ef_search=ef)."""

    name = package = "chassisdb"
    durable_adds = True
    notes = (
        "chassisdb add_batch links on every core (no thread control)",
        "chassisdb takes ef_search at open: each ef of the sweep reopens the file",
    )

    def __init__(self) -> None:
        super().__init__()
        self.path = ""

    def _options(self, ef_search: int = 50):
        return self.module.IndexOptions(
            max_connections=self.m,
            ef_construction=self.ef_construction,
            ef_search=ef_search,
            metric=self.metric,
        )

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
        self.index.init_index(
            max_elements=len(base), ef_construction=ef_construction, M=m, random_seed=100
        )
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
        results, seconds = self._loop(lambda q: self.index.knn_query(q, k, num_threads=1), queries)
        return np.vstack([labels for labels, _ in results]), seconds

    def close(self):
        self.index = None
        gc.collect()


class UsearchEngine(Engine):
    """usearch (optional peer; open = Index.restore(view=True), a memory map)."""

    name = package = "usearch"
    _METRICS = {"euclidean": "l2sq", "cosine": "cos", "inner_product": "ip"}
    _DTYPE = "f32"  # what usearch stores per dimension

    def __init__(self) -> None:
        super().__init__()
        self.module = importlib.import_module("usearch.index")

    distributions = ("usearch",)

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        self.index = self.module.Index(
            ndim=self.dims,
            metric=self._METRICS[metric],
            dtype=self._DTYPE,
            connectivity=m,
            expansion_add=ef_construction,
        )
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


class UsearchI8Engine(UsearchEngine):
    """usearch storing 8-bit codes (``dtype="i8"``): searches and distances on the codes, no
    full-precision copy to rerank with."""

    name = "usearch-i8"
    _DTYPE = "i8"


class FaissEngine(Engine):
    """faiss IndexHNSWFlat (optional peer; read_index reads the whole file). Cosine is inner
    product on vectors normalised by the adapter (queries before the timed call)."""

    name = package = "faiss"
    distributions = ("faiss-cpu", "faiss-gpu", "faiss")

    def _faiss_metric(self, metric: str) -> int:
        if metric == "euclidean":
            return self.module.METRIC_L2
        return self.module.METRIC_INNER_PRODUCT  # cosine: on normalised vectors

    @staticmethod
    def _unit(x: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(x, axis=-1, keepdims=True)
        norms[norms == 0] = 1.0
        return np.ascontiguousarray(x / norms, dtype=np.float32)

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        if metric == "cosine":
            base = self._unit(base)
        self.module.omp_set_num_threads(threads)
        self.index = self._new_index(m, self._faiss_metric(metric))
        self.index.hnsw.efConstruction = ef_construction
        _, seconds = timed(lambda: self._train_and_add(base))
        _, self.persist_seconds = timed(lambda: self.module.write_index(self.index, path))
        self.module.omp_set_num_threads(1)  # searches are single-threaded
        return seconds

    def _new_index(self, m: int, metric: int) -> Any:
        return self.module.IndexHNSWFlat(self.dims, m, metric)

    def _train_and_add(self, base: np.ndarray) -> None:
        self.index.add(base)

    def open(self, path):
        self.index = self.module.read_index(path)

    def set_ef(self, ef):
        self.index.hnsw.efSearch = ef

    def search(self, mode, queries, k):
        self.module.omp_set_num_threads(1)
        if self.metric == "cosine":
            queries = self._unit(queries)
        if mode == "batch":
            (_, ids), seconds = timed(lambda: self.index.search(queries, k))
            return ids, seconds
        results, seconds = self._loop(lambda q: self.index.search(q[None, :], k), queries)
        return np.vstack([ids for _, ids in results]), seconds

    def close(self):
        self.index = None
        gc.collect()


class FaissSQ8Engine(FaissEngine):
    """faiss IndexHNSWSQ with 8-bit scalar quantization (``QT_8bit``: a learned range per
    dimension): the walk and the distances on the codes, no rerank. Its training on the whole
    base is part of the build time."""

    name = "faiss-sq8"

    def _new_index(self, m, metric):
        return self.module.IndexHNSWSQ(self.dims, self.module.ScalarQuantizer.QT_8bit, m, metric)

    def _train_and_add(self, base):
        self.index.train(base)
        self.index.add(base)


class FaissSQ4Engine(FaissSQ8Engine):
    """faiss IndexHNSWSQ with 4-bit scalar quantization (``QT_4bit``), otherwise as
    ``faiss-sq8``: the walk and the distances on the codes, no rerank."""

    name = "faiss-sq4"

    def _new_index(self, m, metric):
        return self.module.IndexHNSWSQ(self.dims, self.module.ScalarQuantizer.QT_4bit, m, metric)


ENGINES: dict[str, type[Engine]] = {
    "chassis": ChassisEngine,
    "chassis-int8": ChassisInt8Engine,
    "chassis-int4": ChassisInt4Engine,
    "chassis-codes": ChassisCodesEngine,
    "chassis-half": ChassisHalfEngine,
    "chassisdb": ChassisDBEngine,
    "hnswlib": HnswlibEngine,
    "usearch": UsearchEngine,
    "usearch-i8": UsearchI8Engine,
    "faiss": FaissEngine,
    "faiss-sq8": FaissSQ8Engine,
    "faiss-sq4": FaissSQ4Engine,
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
    try:
        from chassis import _machine

        info["cpu"] = _machine.describe()  # the CPU a result's tables name
    except ImportError:
        pass
    return info


def json_default(value: Any) -> Any:
    """`json.dumps(default=...)` for NumPy scalars and arrays (anything else as a string)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def write_json(path: str | os.PathLike[str], document: Mapping[str, Any]) -> Path:
    """Write a results document as indented JSON (NumPy values as plain numbers), creating
    the folder; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, default=json_default) + "\n")
    return out


def qps_cell(summary: Mapping[str, Any], mode: str, target: str) -> str:
    """A table cell for summary["qps_at"][mode][target]: the value, "*" when it is a lower
    bound (the smallest ef already reached the recall), "-" when not reached or missing."""
    cell = summary.get("qps_at", {}).get(mode, {}).get(target)
    if cell is None or cell["qps"] is None:
        return "-"
    return fmt(cell["qps"]) + ("*" if cell["how"] == "at-first-point" else "")


def fmt(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    """A number for a table cell; "-" when missing."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align_first: str = "left") -> str:
    """A plain-text table, first column left-aligned (or right with align_first="right"),
    the rest right-aligned."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        first = row[0].rjust(widths[0]) if align_first == "right" else row[0].ljust(widths[0])
        parts = [first] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ------------------------------------------------------------------ sweeps
def measure_sweep(
    engine: Engine,
    queries: np.ndarray,
    truth: np.ndarray,
    k: int,
    efs: Sequence[int],
    modes: Sequence[str] | None = None,
    *,
    min_seconds: float = 0.25,
    max_runs: int = 5,
    warmup: int = 100,
) -> dict[str, list[dict[str, float]]]:
    """Recall@k and single-thread QPS of an open engine for each ef: {mode: [{"ef", "recall",
    "qps"}, ...]} in sweep order.

    Before the sweep, the first `warmup` queries are searched once in each mode at the first
    ef (pages in, caches and branch predictors warm, lazy setup done). For each ef
    and mode the whole query set is searched repeatedly, until the runs add up to
    `min_seconds` or there are `max_runs` of them; QPS is from the median run, recall from
    the first.
    """
    recall_at_k = datasets_module().recall_at_k
    modes = [m for m in (modes or engine.modes) if m in engine.modes]
    engine.set_ef(efs[0])
    if warmup:
        for mode in modes:
            engine.search(mode, queries[:warmup], k)
    sweep: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for ef in efs:
        engine.set_ef(ef)
        for mode in modes:
            ids, seconds = engine.search(mode, queries, k)
            times = [seconds]
            while sum(times) < min_seconds and len(times) < max_runs:
                times.append(engine.search(mode, queries, k)[1])
            sweep[mode].append(
                {
                    "ef": ef,
                    "recall": recall_at_k(ids, truth, k),
                    "qps": len(queries) / max(statistics.median(times), 1e-12),
                }
            )
    return sweep


def draw_sweeps(
    ax: Any,
    sweeps: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    *,
    k: int,
    title: str = "",
    targets: Sequence[float] = TARGETS,
) -> Any:
    """Draw recall@k (x) against QPS (y, log scale) from {engine: {mode: sweep points}} on a
    matplotlib Axes: one colour per engine, solid for "batch", dashed for "loop"; the first
    point of each line is labelled with its ef, the recall targets are dotted lines. Returns
    `ax`."""
    import matplotlib

    colours = matplotlib.rcParams["axes.prop_cycle"].by_key().get("color", [None])
    for i, (engine, modes) in enumerate(sweeps.items()):
        for mode, points in modes.items():
            xs = [p["recall"] for p in points]
            ys = [p["qps"] for p in points]
            ax.plot(
                xs,
                ys,
                marker="o",
                markersize=3,
                color=colours[i % len(colours)],
                linestyle="-" if mode == "batch" else "--",
                label=engine if mode == "batch" else f"{engine} ({mode})",
            )
            if points:
                ax.annotate(
                    f"ef={points[0]['ef']}",
                    (xs[0], ys[0]),
                    fontsize=6,
                    textcoords="offset points",
                    xytext=(3, 3),
                )
    for t in targets:
        ax.axvline(t, color="grey", linewidth=0.5, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{k}")
    ax.set_ylabel("queries per second (1 thread)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=8)
    return ax


def plot_sweeps(
    sweeps: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    path: str | os.PathLike[str],
    *,
    k: int,
    title: str = "",
    targets: Sequence[float] = TARGETS,
) -> None:
    """`draw_sweeps` on a figure of its own, saved to `path` (PNG, SVG, PDF by extension).

    The figure is made without pyplot, so the caller's matplotlib backend is left as it is.
    Needs matplotlib (raises ImportError with an install hint otherwise)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'plotting needs matplotlib: pip install matplotlib (or "chassis-index[plot]")'
        ) from None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    draw_sweeps(ax, sweeps, k=k, title=title, targets=targets)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
