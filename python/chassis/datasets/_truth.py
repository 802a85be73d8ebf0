"""Exact k nearest neighbours by brute force, and the recall of a search against them."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from chassis._progress import progress_bar

from ._base import _METRICS


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
    *,
    progress: bool = False,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Find the exact k nearest neighbours of each query by brute force.

    Distances: "euclidean" the L2 distance (not squared), "cosine" 1 - cos, "inner_product"
    minus the dot product. Nearest first, ties to the lower id. Where the base has fewer than
    k vectors, rows are padded with id -1 and distance inf.

    Work is blocked: `block` base rows against up to 1,024 queries at a time, so memory stays
    near 4 * 1024 * `block` bytes whatever the sizes, and a memory-mapped base (of any numeric
    type: it is converted block by block) is read once per 1,024 queries. Candidates are found
    with float32 matrix products (BLAS), then their distances are recomputed directly in
    float64, which removes the rounding of the |q|^2 - 2 q.b + |b|^2 form from the final
    order.

    Parameters
    ----------
    base : array_like
        (n, d) base vectors of any numeric type; row i has id i. A memory map is read in
        blocks.
    queries : array_like
        (q, d) queries.
    k : int
        Neighbours per query, at least 1.
    metric : {"euclidean", "cosine", "inner_product"}, default: "euclidean"
        The distance (exactly one of these names; no aliases).
    block : int, default: 16384
        Base rows per block, at least 1.
    progress : bool, default: False
        Show a progress bar (tqdm's when tqdm is installed).

    Returns
    -------
    ids : numpy.ndarray
        (q, k) int64 ids, nearest first.
    distances : numpy.ndarray
        (q, k) float32 distances.

    Raises
    ------
    ValueError
        `metric` is not one of the three names, `k` or `block` is below 1, or `base` and
        `queries` are not two (n, d) matrices of the same d.

    See Also
    --------
    recall_at_k : Score a search against these ids.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import ground_truth
    >>> base = np.array([[0, 0], [3, 4], [1, 0]], dtype=np.float32)
    >>> ids, dist = ground_truth(base, np.array([[0, 0]]), k=4)
    >>> ids
    array([[ 0,  2,  1, -1]])
    >>> dist
    array([[ 0.,  1.,  5., inf]], dtype=float32)
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
    bar = (
        progress_bar(
            n * -(-nq // q_step), desc="ground truth", unit="vec", unit_scale=True, leave=False
        )
        if progress
        else None
    )
    try:
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
                if bar is not None:
                    bar.update(len(b))

            exact = _exact_distances(base_arr, q, best_i, metric)
            order = np.lexsort((best_i, exact), axis=1)[:, :kk]
            out_ids[q0 : q0 + len(q), :kk] = np.take_along_axis(best_i, order, axis=1)
            out_dist[q0 : q0 + len(q), :kk] = np.take_along_axis(exact, order, axis=1)
    finally:
        if bar is not None:
            bar.close()
    return out_ids, out_dist


def _exact_distances(
    base: npt.NDArray, q: npt.NDArray[np.float32], cand: npt.NDArray[np.int64], metric: str
) -> npt.NDArray[np.float64]:
    """Distances from each query row to its candidate base rows, computed in float64, a few
    queries at a time so the (queries, candidates, dimensions) temporaries stay near 32 MiB."""
    out = np.empty(cand.shape, dtype=np.float64)
    per_query = max(1, cand.shape[1] * q.shape[1])
    step = max(1, (4 << 20) // per_query)
    for r0 in range(0, len(q), step):
        c = cand[r0 : r0 + step]
        flat = np.unique(c)
        rows = np.asarray(base[flat], dtype=np.float64)  # gather once; works on memory maps
        vecs = rows[np.searchsorted(flat, c)]  # (q, c, d)
        qd = q[r0 : r0 + step].astype(np.float64)[:, None, :]
        if metric == "euclidean":
            out[r0 : r0 + step] = np.sqrt(((vecs - qd) ** 2).sum(axis=2))
        elif metric == "cosine":
            norms = np.linalg.norm(vecs, axis=2)
            norms[norms == 0] = 1.0
            out[r0 : r0 + step] = 1.0 - (vecs * qd).sum(axis=2) / norms  # queries normalised
        else:
            out[r0 : r0 + step] = -(vecs * qd).sum(axis=2)
    return out


def recall_at_k(found_ids: npt.ArrayLike, truth_ids: npt.ArrayLike, k: int) -> float:
    """Compute the mean over queries of the fraction of the true k nearest found in the first k.

    Each true id counts once, however often it is returned. Padding ids (2**64 - 1 from
    `VectorIndex.search_batch`, -1 from `ground_truth`) never match. Each row counts out of
    k, so where the ground truth itself is padded (a base of fewer than k vectors) recall
    stays below 1.

    Parameters
    ----------
    found_ids : array_like
        (q, m) ids a search returned, nearest first; the first k columns count.
    truth_ids : array_like
        (q, K) true ids, nearest first, K at least k; the first k columns count.
    k : int
        At least 1.

    Returns
    -------
    float
        Recall from 0 to 1; 0.0 when there are no queries.

    Raises
    ------
    ValueError
        `k` is below 1, the ids are not 2-D, their row counts differ, or `truth_ids` has
        fewer than k columns.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import recall_at_k
    >>> truth = np.array([[0, 1, 2], [3, 4, 5]])
    >>> found = np.array([[0, 2, 9], [5, 4, 3]])
    >>> recall_at_k(found, truth, k=3)
    0.8333333333333334

    With an index (in memory here):

    >>> import chassis
    >>> from chassis.datasets import clustered, ground_truth
    >>> base, queries = clustered(2_000, 16, 20)
    >>> truth, _ = ground_truth(base, queries, k=10)
    >>> index = chassis.VectorIndex(None, 16)
    >>> ids = index.add_batch(base)
    >>> found, _ = index.search_batch(queries, k=10)
    >>> recall_at_k(found, truth, k=10) > 0.9
    True
    """
    if k < 1:
        raise ValueError(f"k is {k}, must be at least 1")
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
        # a true id returned twice counts once: compare each true id with all found ones
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
