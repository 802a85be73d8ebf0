"""Data sets for tests and benchmarks: .npy folders, generated clusters, exact k-NN.

Only NumPy is needed. Everything returns float32 vectors, which is what
`VectorIndex.add_batch` and `search_batch` take without a copy.

    >>> from chassis.datasets import clustered, ground_truth, recall_at_k
    >>> base, queries = clustered(10_000, 64, 100)
    >>> truth_ids, truth_dist = ground_truth(base, queries, k=10)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["Dataset", "load_npy_folder", "clustered", "ground_truth", "recall_at_k"]

_METRICS = ("euclidean", "cosine", "inner_product")


@dataclass(frozen=True)
class Dataset:
    """A base set, its queries and (when known) their exact nearest neighbours.

    `base` and `queries` are (n, d) float32; `gt_ids` (q, K) integer ids, nearest
    first; `gt_dist` (q, K) their distances under `metric`. Row i of `base` has id i.
    """

    name: str
    base: npt.NDArray[np.float32]
    queries: npt.NDArray[np.float32]
    gt_ids: npt.NDArray[np.integer] | None
    gt_dist: npt.NDArray[np.float32] | None
    metric: str = "euclidean"

    @property
    def dims(self) -> int:
        return int(self.base.shape[1])

    def __repr__(self) -> str:
        gt = "none" if self.gt_ids is None else f"top-{self.gt_ids.shape[1]}"
        return (
            f"Dataset({self.name!r}, base={self.base.shape}, queries={self.queries.shape}, "
            f"ground truth {gt}, metric={self.metric!r})"
        )


def _load_float32(path: Path) -> npt.NDArray[np.float32]:
    """A 2-D float32 array from `path`: memory-mapped when stored as float32, else converted."""
    array = np.load(path, mmap_mode="r")
    if array.ndim != 2:
        raise ValueError(f"{path} holds an array of shape {array.shape}, not (count, dimensions)")
    if array.dtype == np.float32 and array.flags.c_contiguous:
        return array  # a read-only memory map: no copy, pages read on use
    return np.ascontiguousarray(array, dtype=np.float32)


def load_npy_folder(path: str | os.PathLike[str]) -> Dataset:
    """Load a folder holding base.npy, queries.npy and optionally gt_ids.npy / gt_dist.npy.

    float32 files are memory-mapped (read-only); a float16 base is widened to
    float32 in memory. The metric is "euclidean" unless stats.json or a metric.txt
    in the folder names another.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder with base.npy and queries.npy")
    base = _load_float32(folder / "base.npy")
    queries = _load_float32(folder / "queries.npy")
    if base.shape[1] != queries.shape[1]:
        raise ValueError(
            f"base has {base.shape[1]} dimensions but queries have {queries.shape[1]} in {folder}"
        )

    gt_ids = gt_dist = None
    if (folder / "gt_ids.npy").exists():
        gt_ids = np.load(folder / "gt_ids.npy", mmap_mode="r")
        if gt_ids.shape[0] != queries.shape[0]:
            raise ValueError(f"gt_ids.npy has {gt_ids.shape[0]} rows for {len(queries)} queries")
    if (folder / "gt_dist.npy").exists():
        gt_dist = np.load(folder / "gt_dist.npy", mmap_mode="r")

    return Dataset(folder.name, base, queries, gt_ids, gt_dist, _folder_metric(folder))


def _folder_metric(folder: Path) -> str:
    metric = "euclidean"
    if (folder / "metric.txt").exists():
        metric = (folder / "metric.txt").read_text().strip()
    elif (folder / "stats.json").exists():
        try:
            metric = json.loads((folder / "stats.json").read_text()).get("metric", metric)
        except (ValueError, AttributeError):
            pass
    if metric not in _METRICS:
        raise ValueError(f"{folder} names metric {metric!r}; expected one of {_METRICS}")
    return metric


def clustered(
    n: int,
    dims: int,
    n_queries: int,
    clusters: int = 64,
    seed: int = 0,
    spread: float = 0.35,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """`n` base vectors and `n_queries` queries from one Gaussian mixture, as float32.

    Cluster centres are standard normal; each cluster has its own width, between
    0.5x and 1.5x `spread` times the typical distance between centres, and its
    own share of the points, so the data has dense and sparse regions as
    embeddings do. Queries are fresh draws from the same mixture. Same
    arguments, same arrays.
    """
    if n < 1 or dims < 1 or n_queries < 0 or clusters < 1:
        raise ValueError("n, dims and clusters must be positive and n_queries non-negative")
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dims), dtype=np.float32)
    # per-axis standard deviation: centres are ~sqrt(2 * dims) apart, a point ~sqrt(dims) * sigma
    # from its centre, so sigma = spread * sqrt(2) puts it at `spread` of the inter-centre distance
    widths = (spread * np.sqrt(2.0) * rng.uniform(0.5, 1.5, clusters)).astype(np.float32)
    weights = rng.dirichlet(np.full(clusters, 2.0))

    def draw(count: int) -> npt.NDArray[np.float32]:
        out = np.empty((count, dims), dtype=np.float32)
        step = 65_536  # generate in chunks to keep temporaries small
        for start in range(0, count, step):
            stop = min(count, start + step)
            which = rng.choice(clusters, size=stop - start, p=weights)
            noise = rng.standard_normal((stop - start, dims), dtype=np.float32)
            out[start:stop] = centres[which] + noise * widths[which, None]
        return out

    return draw(n), draw(n_queries)


def _as_f32(block: npt.ArrayLike) -> npt.NDArray[np.float32]:
    return np.ascontiguousarray(block, dtype=np.float32)


def _normalized(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(x, axis=1, keepdims=True).astype(np.float32)
    norms[norms == 0] = 1.0  # zero rows stay zero
    return np.asarray(x / norms, dtype=np.float32)


def ground_truth(
    base: npt.ArrayLike,
    queries: npt.ArrayLike,
    k: int,
    metric: str = "euclidean",
    block: int = 16_384,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Exact k nearest neighbours of each query by brute force, ids int64 and distances float32.

    Distances: "euclidean" the L2 distance (not squared), "cosine" 1 - cos,
    "inner_product" minus the dot product. Nearest first, ties to the lower id.
    Rows where the base has fewer than k vectors are padded with id -1, distance inf.

    Work is blocked: `block` base rows against up to 1,024 queries at a time, so
    memory stays near 4 * 1024 * block bytes whatever the sizes. Candidates are
    found with float32 matrix products, then their distances are recomputed
    directly in float64, which removes the rounding of the |q|^2 - 2 q.b + |b|^2
    form from the final order.
    """
    if metric not in _METRICS:
        raise ValueError(f"metric is {metric!r}, expected one of {_METRICS}")
    if k < 1 or block < 1:
        raise ValueError("k and block must be at least 1")
    base_arr = base if isinstance(base, np.ndarray) else np.asarray(base)
    q_all = _as_f32(queries)
    if q_all.ndim != 2 or base_arr.ndim != 2 or q_all.shape[1] != base_arr.shape[1]:
        raise ValueError(f"shapes {base_arr.shape} and {q_all.shape} are not two (n, d) matrices")
    n, nq = base_arr.shape[0], q_all.shape[0]
    kk = min(k, n)
    # a few spare candidates so near-ties reordered by the exact pass are not lost
    spare = min(n, kk + max(8, kk // 4))

    out_ids = np.full((nq, k), -1, dtype=np.int64)
    out_dist = np.full((nq, k), np.inf, dtype=np.float32)
    if n == 0 or nq == 0:
        return out_ids, out_dist
    if metric == "cosine":
        q_all = _normalized(q_all)

    q_step = 1_024
    for q0 in range(0, nq, q_step):
        q = q_all[q0 : q0 + q_step]
        best_d = np.full((len(q), 0), np.inf, dtype=np.float32)
        best_i = np.zeros((len(q), 0), dtype=np.int64)
        for b0 in range(0, n, block):
            b = _as_f32(base_arr[b0 : b0 + block])
            if metric == "cosine":
                b = _normalized(b)
            dots = q @ b.T
            if metric == "euclidean":
                # a monotone stand-in for the distance: |b|^2 - 2 q.b (|q|^2 is per row)
                scores = np.einsum("ij,ij->i", b, b)[None, :] - 2.0 * dots
            else:
                scores = -dots
            ids = np.arange(b0, b0 + len(b), dtype=np.int64)
            if scores.shape[1] > spare:  # keep only this block's best before merging
                part = np.argpartition(scores, spare - 1, axis=1)[:, :spare]
                scores = np.take_along_axis(scores, part, axis=1)
                block_ids = ids[part]
            else:
                block_ids = np.broadcast_to(ids, scores.shape)
            best_d = np.concatenate([best_d, scores], axis=1)
            best_i = np.concatenate([best_i, block_ids], axis=1)
            if best_d.shape[1] > spare:
                part = np.argpartition(best_d, spare - 1, axis=1)[:, :spare]
                best_d = np.take_along_axis(best_d, part, axis=1)
                best_i = np.take_along_axis(best_i, part, axis=1)

        exact = _exact_distances(base_arr, q, best_i, metric)
        order = np.lexsort((best_i, exact), axis=1)[:, :kk]
        out_ids[q0 : q0 + len(q), :kk] = np.take_along_axis(best_i, order, axis=1)
        out_dist[q0 : q0 + len(q), :kk] = np.take_along_axis(exact, order, axis=1)
    return out_ids, out_dist


def _exact_distances(
    base: npt.NDArray, q: npt.NDArray[np.float32], cand: npt.NDArray[np.int64], metric: str
) -> npt.NDArray[np.float64]:
    """Distances from each query row to its candidate base rows, computed in float64."""
    flat = np.unique(cand)
    rows = np.asarray(base[flat], dtype=np.float64)  # gather once; works on memory maps
    vecs = rows[np.searchsorted(flat, cand)]  # (q, c, d)
    qd = q.astype(np.float64)[:, None, :]
    if metric == "euclidean":
        return np.sqrt(((vecs - qd) ** 2).sum(axis=2))
    if metric == "cosine":
        norms = np.linalg.norm(vecs, axis=2)
        norms[norms == 0] = 1.0
        return 1.0 - (vecs * qd).sum(axis=2) / norms  # queries already normalised
    return -(vecs * qd).sum(axis=2)


def recall_at_k(found_ids: npt.ArrayLike, truth_ids: npt.ArrayLike, k: int) -> float:
    """Mean over queries of the fraction of the true k nearest found in the first k results.

    Each true id counts once, however often it is returned. Padding ids
    (2**64 - 1 from search_batch, -1 from ground_truth) never match.
    """
    found = _as_int64_ids(found_ids)[:, :k]
    truth = _as_int64_ids(truth_ids)[:, :k]
    if found.shape[0] != truth.shape[0]:
        raise ValueError(f"{found.shape[0]} result rows for {truth.shape[0]} ground-truth rows")
    if truth.shape[1] < k:
        raise ValueError(f"ground truth has {truth.shape[1]} columns, fewer than k={k}")
    if found.shape[0] == 0:
        return 0.0
    hits = 0
    step = max(1, 4_000_000 // (k * k))  # bound the (rows, k, k) comparison
    for r0 in range(0, found.shape[0], step):
        f, t = found[r0 : r0 + step], truth[r0 : r0 + step]
        match = (t[:, :, None] == f[:, None, :]).any(axis=2) & (t >= 0)
        hits += int(match.sum())
    return hits / (found.shape[0] * k)


def _as_int64_ids(ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(ids)
    if arr.ndim != 2:
        raise ValueError(f"ids must be a (queries, k) matrix, not shape {arr.shape}")
    if arr.dtype == np.uint64:
        return arr.view(np.int64)  # 2**64 - 1 (no result) becomes -1
    return arr.astype(np.int64, copy=False)
