"""One adapter per index library, all driven through `Engine`, so each is measured the same way.

An adapter says how its library builds, opens, sets ef and answers a batch of queries and one
query (`_batch`, `_one`); `Engine.search` times those calls in the four search modes:

  "batch"   one batch call for all queries, on one thread;
  "loop"    a Python loop of single-query calls;
  "batch2"  the batch call on `search_threads` (2) threads, timed around that one call;
  "batch1"  a Python loop of batch calls with one query each (per-call overhead).

Peers are imported only when an adapter is made; `engine_status` reports the missing ones.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .timing import timed


class EngineUnavailable(Exception):
    """The engine's package is missing or cannot do what was asked (e.g. a metric)."""


def _ids_2d(keys: Any, k: int) -> np.ndarray:
    """Result ids as a (q, k) int64 array: a 2-D array as it is, one row of up to k ids padded
    with -1."""
    keys = np.asarray(keys)
    if keys.ndim == 2:
        return keys.astype(np.int64)
    out = np.full((1, k), -1, dtype=np.int64)
    out[0, : len(keys)] = keys[:k]
    return out


class Engine:
    """One index library behind a uniform interface. Subclasses fill in the hooks.

    `modes` names the search styles a sweep measures by default ("batch" and "loop");
    `search` also takes "batch2" and "batch1". `durable_adds` is True when the engine can make
    one add durable (add + flush).
    """

    name = "?"
    package = "?"
    distributions: tuple[str, ...] = ()  # names to ask importlib.metadata for the version
    modes: tuple[str, ...] = ("batch", "loop")
    durable_adds = False
    notes: tuple[str, ...] = ()
    search_threads = 2  # threads of "batch2"
    threads2_note = ""  # how "batch2" gets its threads, when it is not the engine's own way
    persist_seconds = 0.0

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

    def _batch(self, queries: np.ndarray, k: int, threads: int) -> Any:
        """The library's batch search of `queries` on `threads` threads, as it returns it."""
        raise TypeError(f"{type(self).__name__} is an engine adapter without this hook")

    def _batch_ids(self, raw: Any, k: int) -> np.ndarray:
        return _ids_2d(raw[0], k)

    def _one(self, query: np.ndarray, k: int) -> Any:
        """The library's search of one query, as it returns it."""
        raise TypeError(f"{type(self).__name__} is an engine adapter without this hook")

    def _one_ids(self, raw: Any, k: int) -> np.ndarray:
        return self._batch_ids(raw, k)

    def _with_threads(self, threads: int) -> None:
        """Set the library's own thread count, for libraries that keep one (set-up, untimed)."""

    def _prepare(self, queries: np.ndarray) -> np.ndarray:
        """The queries as the library takes them (set-up, untimed)."""
        return queries

    def add_and_flush(self, vector: np.ndarray) -> None:
        raise EngineUnavailable(f"{self.name} has no durable single add")

    def close(self) -> None:
        if self.index is not None and hasattr(self.index, "close"):
            self.index.close()
        self.index = None
        gc.collect()

    # -- shared
    def search(self, mode: str, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
        """(ids as a (q, k) int64 array, seconds spent in the engine's search calls)."""
        queries = self._prepare(queries)
        if mode in ("batch", "batch2"):
            threads = 1 if mode == "batch" else self.search_threads
            self._with_threads(threads)
            try:
                raw, seconds = timed(lambda: self._batch(queries, k, threads))
            finally:
                self._with_threads(1)
            return self._batch_ids(raw, k), seconds
        self._with_threads(1)
        if mode == "loop":
            results, seconds = self._loop(lambda q: self._one(q, k), queries)
            return np.vstack([self._one_ids(r, k) for r in results]), seconds
        if mode == "batch1":
            rows = queries.reshape(len(queries), 1, -1)  # (1, d) views
            results, seconds = self._loop(lambda q: self._batch(q, k, 1), rows)
            return np.vstack([self._batch_ids(r, k) for r in results]), seconds
        raise ValueError(f"unknown search mode {mode!r}; known: batch, loop, batch2, batch1")

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


def _hit_ids(hits: Any, k: int) -> np.ndarray:
    return _ids_2d([hit.id for hit in hits], k)


class ChassisEngine(Engine):
    """This project: chassis.VectorIndex. After each "batch" search, `counted` holds the
    (searches, distances) the native counters moved by."""

    name = package = "chassis"
    durable_adds = True
    quantization: str | None = None
    precision = "full"

    def __init__(self) -> None:
        super().__init__()
        self.ef = 50
        self.threads: int | None = None
        self.progress = False  # a progress bar while building (add_batch(progress=True))
        self.read_only = False  # open() opens a reader instead of the writer
        self._counters = self.module._chassis._search_counters
        self.counted: tuple[int, int] | None = None

    def _options(self, metric: str, m: int, ef_construction: int) -> Any:
        return self.module.IndexOptions(
            max_connections=m,
            ef_construction=ef_construction,
            metric=metric,
            quantization=self.quantization,
            precision=self.precision,
        )

    def build(self, path, base, *, metric, m, ef_construction, threads):
        self._remember(base, metric, m, ef_construction)
        options = self._options(metric, m, ef_construction)
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

    def _batch(self, queries, k, threads):
        return self.index.search_batch(queries, k, ef=self.ef, threads=threads)

    def _one(self, query, k):
        return self.index.search(query, k, ef=self.ef)

    def _one_ids(self, raw, k):
        return _hit_ids(raw, k)

    def search(self, mode, queries, k):
        if mode != "batch":
            return super().search(mode, queries, k)
        before = self._counters()
        found = super().search(mode, queries, k)
        after = self._counters()
        self.counted = (after[0] - before[0], after[1] - before[1])
        return found

    def add_and_flush(self, vector):
        self.index.add(vector)
        self.index.flush()


class ChassisMemoryEngine(ChassisEngine):
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
    threads2_note = (
        "chassisdb search_batch has no thread control (one thread): its 2t batch is "
        "two Python threads, each calling search_batch on half of the queries"
    )

    def __init__(self) -> None:
        super().__init__()
        self.path = ""
        self._pool: ThreadPoolExecutor | None = None  # kept across set_ef's reopens

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

    def _batch(self, queries, k, threads):
        if threads == 1:
            return self.index.search_batch(queries, k)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=threads)
        parts = np.array_split(queries, threads)
        results = list(self._pool.map(lambda part: self.index.search_batch(part, k), parts))
        return np.vstack([ids for ids, _ in results]), np.vstack([d for _, d in results])

    def _one(self, query, k):
        return self.index.search(query, k)

    def _one_ids(self, raw, k):
        return _hit_ids(raw, k)

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

    def _batch(self, queries, k, threads):
        return self.index.knn_query(queries, k, num_threads=threads)

    def _one(self, query, k):
        return self.index.knn_query(query, k, num_threads=1)

    def close(self):
        self.index = None
        gc.collect()


class UsearchEngine(Engine):
    """usearch (optional peer; open = Index.restore(view=True), a memory map)."""

    name = package = "usearch"
    distributions = ("usearch",)
    _METRICS = {"euclidean": "l2sq", "cosine": "cos", "inner_product": "ip"}
    _DTYPE = "f32"  # what usearch stores per dimension

    def __init__(self) -> None:
        super().__init__()
        self.module = importlib.import_module("usearch.index")

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

    def _batch(self, queries, k, threads):
        return self.index.search(queries, k, threads=threads)

    def _batch_ids(self, raw, k):
        return _ids_2d(raw.keys, k)

    def _one(self, query, k):
        return self.index.search(query, k)

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
    product on vectors normalised by the adapter (queries before the timed call). faiss has
    no single-query call: its "loop" is search(q[None, :]), like its "batch1"."""

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

    def _prepare(self, queries):
        return self._unit(queries) if self.metric == "cosine" else queries

    def _with_threads(self, threads):
        self.module.omp_set_num_threads(threads)

    def _batch(self, queries, k, threads):
        return self.index.search(queries, k)

    def _batch_ids(self, raw, k):
        return _ids_2d(raw[1], k)

    def _one(self, query, k):
        return self.index.search(query[None, :], k)

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
    "chassis-memory": ChassisMemoryEngine,
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
    """({name: engine} for the importable ones, notes on the skipped ones); ValueError for a
    name that is no engine."""
    engines, notes = {}, []
    for name in names:
        try:
            engines[name] = make_engine(name)
        except EngineUnavailable as exc:
            notes.append(f"skipped {name}: {exc}")
    return engines, notes
