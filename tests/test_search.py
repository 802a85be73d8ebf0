"""Search correctness of chassis.VectorIndex.

Checks that:
* the three metrics return the documented distances (true L2, 1 - cos, -dot), nearest first;
* with ef >= len(index) search and search_batch are EXACT (compared with brute-force NumPy k-NN)
  for every metric x precision, several dimensionalities, and (hypothesis) random small datasets
  including ones full of duplicates and ties;
* approximate search reaches recall@10 >= 0.95 at ef=100 on clustered data;
* search_batch equals a loop of search (same ef), for any thread count;
* k > len returns len results, search_batch pads with id 2**64-1 / distance inf, an empty index
  returns [] (and an all-padding batch), k < 1 is refused;
* the ef argument is a floor-respecting beam width: a tiny ef still returns k results;
* a large batch of long float32 vectors, linked on a half-precision copy (by default), finds as
  many true neighbours as the same batch linked on the full vectors (CHASSIS_HALF_COPY=0, in a
  fresh process), also for values far beyond the 16-bit range.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path

import chassis
import numpy as np
import pytest
from chassis import IndexOptions, InvalidArgumentError, SearchResult, VectorIndex
from conftest import (
    METRICS,
    NO_ID,
    PRECISIONS,
    assert_child_ok,
    assert_exact_knn,
    brute_force_knn,
    child_env,
    clustered_data,
    normalise,
    recall_at_k,
    to_half,
)
from hypothesis import given
from hypothesis import strategies as st


def make_data(rng: np.random.Generator, n: int, dims: int, metric: str) -> np.ndarray:
    x = rng.standard_normal((n, dims))
    if metric == "inner_product":
        # varied norms, so that inner product and cosine orderings differ
        x *= rng.uniform(0.2, 3.0, size=(n, 1))
    return np.ascontiguousarray(x, dtype=np.float32)


def expected_storage(data: np.ndarray, metric: str, precision: str) -> np.ndarray | None:
    """What get() must return, where it is predictable bit for bit (None for cosine)."""
    if metric == "cosine":
        return None
    return to_half(data) if precision == "half" else data


def stored_vectors(index: VectorIndex, ids) -> np.ndarray:
    return np.stack([index.get(int(i)) for i in ids])


def hits_to_arrays(hits: list[SearchResult]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([h.id for h in hits], dtype=np.uint64),
        np.array([h.distance for h in hits], dtype=np.float64),
    )


# --------------------------------------------------------------------------- metric definitions
@pytest.mark.parametrize("precision", PRECISIONS)
def test_euclidean_distance_is_true_l2_not_squared(index_path, precision):
    with VectorIndex(index_path, 3, IndexOptions(metric="euclidean", precision=precision)) as index:
        index.add([0.0, 0.0, 0.0], id=1)
        index.add([3.0, 4.0, 0.0], id=2)
        index.add([0.0, 0.0, -12.0], id=3)
        hits = index.search([0.0, 0.0, 0.0], k=3)
    assert [h.id for h in hits] == [1, 2, 3]
    assert [h.distance for h in hits] == pytest.approx([0.0, 5.0, 12.0], abs=1e-5)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_cosine_distance_is_one_minus_cosine(index_path, precision):
    with VectorIndex(index_path, 2, IndexOptions(metric="cosine", precision=precision)) as index:
        index.add([2.0, 0.0], id=10)  # same direction as the query, other length
        index.add([0.0, 5.0], id=11)  # orthogonal
        index.add([-1.0, 0.0], id=12)  # opposite
        index.add([1.0, 1.0], id=13)  # 45 degrees
        hits = index.search([3.0, 0.0], k=4)
    assert [h.id for h in hits] == [10, 13, 11, 12]
    expected = [0.0, 1.0 - math.sqrt(0.5), 1.0, 2.0]
    assert [h.distance for h in hits] == pytest.approx(
        expected, abs=2e-3 if precision == "half" else 1e-5
    )


@pytest.mark.parametrize("precision", PRECISIONS)
def test_inner_product_distance_is_negative_dot(index_path, precision):
    with VectorIndex(
        index_path, 2, IndexOptions(metric="inner_product", precision=precision)
    ) as index:
        index.add([1.0, 2.0], id=0)  # dot with (1, 1) = 3
        index.add([3.0, 4.0], id=1)  # 7
        index.add([-1.0, -1.0], id=2)  # -2
        hits = index.search([1.0, 1.0], k=3)
    assert [h.id for h in hits] == [1, 0, 2]
    assert [h.distance for h in hits] == pytest.approx([-7.0, -3.0, 2.0], abs=1e-4)


def test_query_equal_to_a_stored_vector_finds_it_first_at_distance_zero(index_path, rng):
    data = make_data(rng, 200, 8, "euclidean")
    with VectorIndex(index_path, 8) as index:
        index.add_batch(data)
        for i in (0, 57, 199):
            hits = index.search(data[i], k=1, ef=200)
            assert hits[0].id == i
            assert hits[0].distance == pytest.approx(0.0, abs=1e-2)


# --------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("dims", [8, 17, 64])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("metric", METRICS)
def test_exact_search_matches_brute_force(index_path, metric, precision, dims):
    rng = np.random.default_rng(dims * 31 + METRICS.index(metric) * 7 + PRECISIONS.index(precision))
    n, k = 400, 10
    data = make_data(rng, n, dims, metric)
    queries = make_data(rng, 25, dims, metric)
    opts = IndexOptions(metric=metric, precision=precision, max_connections=8, ef_construction=64)
    with VectorIndex(index_path, dims, opts) as index:
        ids = index.add_batch(data)
        np.testing.assert_array_equal(ids, np.arange(n, dtype=np.uint64))
        stored = stored_vectors(index, ids)
        expected = expected_storage(data, metric, precision)
        if expected is not None:
            np.testing.assert_array_equal(stored, expected)
        else:
            np.testing.assert_allclose(
                stored, normalise(data), atol=2e-3 if precision == "half" else 1e-5
            )
        # the reference: stored data for half precision, the caller's data for full
        reference = stored if precision == "half" else data
        b_ids, b_d = index.search_batch(queries, k, ef=n)
        for qi, q in enumerate(queries):
            got_ids, got_d = hits_to_arrays(index.search(q, k, ef=n))
            assert_exact_knn(
                got_ids,
                got_d,
                reference,
                ids,
                q,
                k,
                metric,
                precision=precision,
                context=f"search, query {qi}",
            )
            assert_exact_knn(
                b_ids[qi],
                b_d[qi],
                reference,
                ids,
                q,
                k,
                metric,
                precision=precision,
                context=f"search_batch, query {qi}",
            )


@pytest.mark.parametrize("metric", METRICS)
def test_exact_search_with_sparse_explicit_ids(index_path, metric, rng):
    n, dims, k = 300, 12, 15
    data = make_data(rng, n, dims, metric)
    ids = rng.choice(2**40, size=n, replace=False).astype(np.uint64)
    ids[0] = 2**64 - 2  # the largest valid id
    with VectorIndex(
        index_path, dims, IndexOptions(metric=metric, max_connections=6, ef_construction=40)
    ) as index:
        got = index.add_batch(data, ids)
        np.testing.assert_array_equal(got, ids)
        queries = make_data(rng, 10, dims, metric)
        for q in queries:
            got_ids, got_d = hits_to_arrays(index.search(q, k, ef=n))
            assert_exact_knn(got_ids, got_d, data, ids, q, k, metric)


def test_exact_search_after_incremental_single_adds(index_path, rng):
    """Vectors added one by one (linking one at a time) are found exactly too."""
    n, dims, k = 250, 10, 7
    data = make_data(rng, n, dims, "euclidean")
    with VectorIndex(
        index_path, dims, IndexOptions(max_connections=4, ef_construction=16)
    ) as index:
        for i, v in enumerate(data):
            assert index.add(v) == i
            if i in (0, 1, 5, 50, 249):
                q = rng.standard_normal(dims).astype(np.float32)
                got_ids, got_d = hits_to_arrays(index.search(q, k, ef=i + 1))
                assert_exact_knn(got_ids, got_d, data[: i + 1], np.arange(i + 1), q, k, "euclidean")


def test_exact_search_on_mixed_batches_and_singles(index_path, rng):
    dims, k = 16, 10
    data = make_data(rng, 700, dims, "euclidean")
    with VectorIndex(index_path, dims, IndexOptions(ef_construction=50)) as index:
        index.add_batch(data[:300])
        for v in data[300:320]:
            index.add(v)
        index.flush()
        index.add_batch(data[320:700], threads=1)
        n = len(index)
        assert n == 700
        for q in make_data(rng, 15, dims, "euclidean"):
            got_ids, got_d = hits_to_arrays(index.search(q, k, ef=n))
            assert_exact_knn(got_ids, got_d, data, np.arange(700), q, k, "euclidean")


@given(
    n=st.integers(1, 200),
    dims=st.integers(1, 40),
    metric=st.sampled_from(METRICS),
    precision=st.sampled_from(PRECISIONS),
    k=st.integers(1, 30),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([1e-3, 1.0, 100.0]),
)
def test_exact_search_matches_brute_force_on_random_datasets(
    n, dims, metric, precision, k, seed, scale
):
    rng = np.random.default_rng(seed)
    data = (make_data(rng, n, dims, metric) * np.float32(scale)).astype(np.float32)
    queries = (make_data(rng, 3, dims, metric) * np.float32(scale)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        opts = IndexOptions(
            metric=metric, precision=precision, max_connections=4, ef_construction=20
        )
        with VectorIndex(Path(tmp) / "h.chassis", dims, opts) as index:
            ids = index.add_batch(data)
            stored = stored_vectors(index, ids)
            reference = stored if precision == "half" else data
            ef = max(n, k)
            b_ids, b_d = index.search_batch(queries, k, ef=ef)
            assert b_ids.shape == (3, k) and b_d.shape == (3, k)
            kk = min(k, n)
            assert (b_ids[:, kk:] == NO_ID).all() and np.isinf(b_d[:, kk:]).all()
            for qi, q in enumerate(queries):
                got_ids, got_d = hits_to_arrays(index.search(q, k, ef=ef))
                assert_exact_knn(got_ids, got_d, reference, ids, q, k, metric, precision=precision)
                assert_exact_knn(
                    b_ids[qi, :kk], b_d[qi, :kk], reference, ids, q, k, metric, precision=precision
                )


@given(
    n=st.integers(1, 60),
    dims=st.integers(1, 6),
    metric=st.sampled_from(METRICS),
    k=st.integers(1, 12),
    data=st.data(),
)
def test_exact_search_with_duplicates_and_ties(n, dims, metric, k, data):
    """Small integer coordinates: many duplicate vectors and exactly tied distances."""
    values = data.draw(
        st.lists(st.lists(st.integers(-2, 2), min_size=dims, max_size=dims), min_size=n, max_size=n)
    )
    x = np.array(values, dtype=np.float32)
    if metric == "cosine":
        x[~x.any(axis=1), 0] = 1.0  # cosine refuses zero vectors
    q = np.array(
        data.draw(st.lists(st.integers(-2, 2), min_size=dims, max_size=dims)), dtype=np.float32
    )
    if metric == "cosine" and not q.any():
        q[0] = 1.0
    with tempfile.TemporaryDirectory() as tmp:
        opts = IndexOptions(metric=metric, max_connections=2, ef_construction=4)
        with VectorIndex(Path(tmp) / "t.chassis", dims, opts) as index:
            ids = index.add_batch(x)
            got_ids, got_d = hits_to_arrays(index.search(q, k, ef=max(n, k)))
            assert_exact_knn(got_ids, got_d, x, ids, q, k, metric)


# --------------------------------------------------------------------------- recall
@pytest.mark.parametrize(
    "metric,precision", [("euclidean", "full"), ("cosine", "full"), ("euclidean", "half")]
)
def test_recall_at_10_on_clustered_data(index_path, metric, precision):
    n, dims, k = 5000, 32, 10
    data = clustered_data(n, dims, seed=11)
    queries = clustered_data(200, dims, seed=11, sample_seed=12)  # same clusters, fresh points
    opts = IndexOptions(metric=metric, precision=precision, max_connections=16, ef_construction=100)
    with VectorIndex(index_path, dims, opts) as index:
        index.add_batch(data)
        got_ids, got_d = index.search_batch(queries, k, ef=100)
    reference = to_half(data) if precision == "half" else data
    true_ids, _ = brute_force_knn(reference, queries, k, metric)
    recall = recall_at_k(got_ids, true_ids)
    assert recall >= 0.95, f"recall@10 = {recall:.3f} at ef=100"
    assert (got_ids != NO_ID).all()
    assert np.all(np.diff(got_d, axis=1) >= -1e-5)


# --------------------------------------------------------------------------- search_batch
@pytest.mark.parametrize("metric", METRICS)
def test_search_batch_equals_loop_of_search(index_path, metric, rng):
    n, dims, k = 1500, 24, 10
    data = make_data(rng, n, dims, metric)
    queries = make_data(rng, 40, dims, metric)
    with VectorIndex(index_path, dims, IndexOptions(metric=metric, ef_construction=60)) as index:
        index.add_batch(data)
        for ef in (None, 12, 64, n):
            kw = {} if ef is None else {"ef": ef}
            loop = [index.search(q, k, **kw) for q in queries]
            for threads in (None, 1, 2):
                b_ids, b_d = index.search_batch(queries, k, threads=threads, **kw)
                assert b_ids.shape == (len(queries), k) and b_d.shape == (len(queries), k)
                for qi, hits in enumerate(loop):
                    l_ids, l_d = hits_to_arrays(hits)
                    np.testing.assert_array_equal(
                        b_ids[qi, : len(hits)],
                        l_ids,
                        err_msg=f"ef={ef} threads={threads} query {qi}",
                    )
                    np.testing.assert_allclose(b_d[qi, : len(hits)], l_d, rtol=1e-6, atol=1e-6)
                    assert (b_ids[qi, len(hits) :] == NO_ID).all()


@pytest.mark.parametrize("precision", ["full", "half"])
def test_large_batch_answers_each_query_as_alone_whatever_its_position(index_path, precision, rng):
    # A batch of 32 or more queries runs in an order of its own choosing (by where each query
    # enters the bottom layer); every row must still be that query's own search, in its row.
    n, dims, k = 6000, 16, 10
    centres = rng.standard_normal((20, dims)).astype(np.float32) * 4
    data = (centres[rng.integers(0, 20, n)] + rng.standard_normal((n, dims))).astype(np.float32)
    queries = (centres[rng.integers(0, 20, 300)] + rng.standard_normal((300, dims))).astype(
        np.float32
    )
    opts = IndexOptions(ef_construction=40, precision=precision)
    with VectorIndex(index_path, dims, opts) as index:
        index.add_batch(data)
        for i in range(0, n, 7):
            index.delete(i)
        index.flush()
        excluded = list(range(1, n, 11))
        loop = [hits_to_arrays(index.search(q, k, ef=20, excluded=excluded)) for q in queries]
        perm = rng.permutation(len(queries))
        with chassis.IndexReader(index_path) as reader:
            for who, handle in (("writer", index), ("reader", reader)):
                for threads in (1, 2):
                    ids, dists = handle.search_batch(
                        queries, k, ef=20, threads=threads, excluded=excluded
                    )
                    p_ids, p_d = handle.search_batch(
                        queries[perm], k, ef=20, threads=threads, excluded=excluded
                    )
                    np.testing.assert_array_equal(
                        p_ids, ids[perm], err_msg=f"{who} threads={threads}"
                    )
                    np.testing.assert_array_equal(p_d, dists[perm])
                    for qi, (l_ids, l_d) in enumerate(loop):
                        np.testing.assert_array_equal(
                            ids[qi], l_ids, err_msg=f"{who} threads={threads} query {qi}"
                        )
                        np.testing.assert_allclose(dists[qi], l_d, rtol=1e-6, atol=1e-6)
    # an independent check that the rows are good answers: recall against brute force
    live = np.ones(n, bool)
    live[::7] = False
    live[1::11] = False
    stored = to_half(data) if precision == "half" else data
    true_ids, _ = brute_force_knn(stored[live], queries, k, "euclidean", ids=np.flatnonzero(live))
    assert recall_at_k(ids, true_ids) >= 0.9


def test_search_batch_dtypes_and_shapes(index_path, rng):
    data = make_data(rng, 50, 5, "euclidean")
    with VectorIndex(index_path, 5) as index:
        index.add_batch(data)
        ids, dists = index.search_batch(data[:7], k=4)
    assert isinstance(ids, np.ndarray) and isinstance(dists, np.ndarray)
    assert ids.dtype == np.uint64 and dists.dtype == np.float32
    assert ids.shape == (7, 4) and dists.shape == (7, 4)
    # each query is a stored vector: it finds itself first
    np.testing.assert_array_equal(ids[:, 0], np.arange(7, dtype=np.uint64))


def test_search_batch_pads_missing_results(index_path, rng):
    data = make_data(rng, 5, 6, "euclidean")
    queries = make_data(rng, 3, 6, "euclidean")
    with VectorIndex(index_path, 6) as index:
        index.add_batch(data, ids=[10, 20, 30, 40, 50])
        ids, dists = index.search_batch(queries, k=8)
    assert ids.shape == (3, 8) and dists.shape == (3, 8)
    assert (ids[:, 5:] == np.uint64(NO_ID)).all()
    assert np.isposinf(dists[:, 5:]).all()
    for row in ids:
        assert sorted(row[:5].tolist()) == [10, 20, 30, 40, 50]
    assert np.isfinite(dists[:, :5]).all()


def test_search_batch_on_empty_index_is_all_padding(index_path):
    with VectorIndex(index_path, 4) as index:
        ids, dists = index.search_batch(np.ones((2, 4), dtype=np.float32), k=3)
    assert ids.shape == (2, 3) and ids.dtype == np.uint64
    assert dists.shape == (2, 3) and dists.dtype == np.float32
    assert (ids == np.uint64(NO_ID)).all()
    assert np.isposinf(dists).all()


def test_search_batch_with_zero_queries(index_path):
    with VectorIndex(index_path, 4) as index:
        index.add([1, 2, 3, 4])
        ids, dists = index.search_batch(np.empty((0, 4), dtype=np.float32), k=3)
    assert ids.shape == (0, 3) and dists.shape == (0, 3)
    assert ids.dtype == np.uint64 and dists.dtype == np.float32


# --------------------------------------------------------------------------- k and ef
def test_search_on_empty_index_returns_empty_list(index_path):
    with VectorIndex(index_path, 3) as index:
        assert index.search([1.0, 2.0, 3.0]) == []
        assert index.search([1.0, 2.0, 3.0], k=1, ef=10) == []


def test_k_larger_than_len_returns_every_vector(index_path, rng):
    data = make_data(rng, 7, 4, "euclidean")
    with VectorIndex(index_path, 4) as index:
        index.add_batch(data)
        hits = index.search(data[0], k=100)
        assert len(hits) == 7
        assert sorted(h.id for h in hits) == list(range(7))
        assert_exact_knn(*hits_to_arrays(hits), data, np.arange(7), data[0], 100, "euclidean")


@pytest.mark.parametrize("k", [0, -1, -100])
def test_k_below_one_is_refused(index_path, k):
    with VectorIndex(index_path, 3) as index:
        index.add([1.0, 0.0, 0.0])
        with pytest.raises(InvalidArgumentError):
            index.search([1.0, 0.0, 0.0], k=k)
        with pytest.raises(InvalidArgumentError):
            index.search_batch(np.ones((2, 3), dtype=np.float32), k=k)


def test_default_k_is_ten(index_path, rng):
    with VectorIndex(index_path, 4) as index:
        index.add_batch(make_data(rng, 30, 4, "euclidean"))
        assert len(index.search(np.zeros(4, dtype=np.float32))) == 10
        ids, dists = index.search_batch(np.zeros((2, 4), dtype=np.float32))
        assert ids.shape == (2, 10)


def test_small_ef_still_returns_k_results(index_path, rng):
    data = make_data(rng, 500, 8, "euclidean")
    with VectorIndex(index_path, 8, IndexOptions(ef_search=1)) as index:
        index.add_batch(data)
        q = make_data(rng, 1, 8, "euclidean")[0]
        assert len(index.search(q, k=20, ef=1)) == 20
        assert len(index.search(q, k=20)) == 20  # ef_search=1 from the options, k is the floor
        assert len({h.id for h in index.search(q, k=20, ef=1)}) == 20
        ids, _ = index.search_batch(data[:3], k=20, ef=1)
        assert (ids != NO_ID).all()


def test_ef_is_keyword_only(index_path):
    with VectorIndex(index_path, 2) as index:
        index.add([1.0, 1.0])
        with pytest.raises(TypeError):
            index.search([1.0, 1.0], 1, 50)  # type: ignore[misc]


def test_ef_at_least_len_is_exact_even_with_a_poor_graph(index_path):
    """With ef >= len the answer is exact, however sparse the graph (M=2, ef_construction=2)."""
    data = clustered_data(2000, 16, seed=3)
    queries = clustered_data(30, 16, seed=3, sample_seed=4)
    opts = IndexOptions(max_connections=2, ef_construction=2, ef_search=1)
    with VectorIndex(index_path, 16, opts) as index:
        index.add_batch(data)
        got_ids, got_d = index.search_batch(queries, 10, ef=len(index))
    for qi, q in enumerate(queries):
        assert_exact_knn(got_ids[qi], got_d[qi], data, np.arange(2000), q, 10, "euclidean")


def test_search_results_are_search_result_objects(index_path, rng):
    data = make_data(rng, 20, 3, "euclidean")
    with VectorIndex(index_path, 3) as index:
        index.add_batch(data)
        hits = index.search(data[3], k=5)
    assert isinstance(hits, list)
    assert all(isinstance(h, SearchResult) for h in hits)
    assert all(type(h.id) is int and type(h.distance) is float for h in hits)
    assert hits[0].id == 3
    ids = [i for i, _ in hits]
    dists = [d for _, d in hits]
    assert ids == [h.id for h in hits] and dists == [h.distance for h in hits]
    assert dists == sorted(dists)


def test_module_exports():
    for name in chassis.__all__:
        assert hasattr(chassis, name), name


_BUILD_AND_SEARCH = """
import sys, numpy as np, chassis
data, queries = np.load(sys.argv[1]), np.load(sys.argv[2])
index = chassis.VectorIndex(sys.argv[3], data.shape[1])
index.add_batch(data, threads=2)
ids, _ = index.search_batch(queries, 10, ef=10)
np.save(sys.argv[4], ids)
"""


@pytest.mark.parametrize("scale", [1.0, 1e6])
def test_a_batch_linked_on_its_half_precision_copy_finds_as_many_true_neighbours(tmp_path, scale):
    rng = np.random.default_rng(5)
    data = (clustered_data(3000, 384, seed=5) * scale).astype(np.float32)
    queries = (
        data[rng.choice(len(data), 100, replace=False)]
        + rng.normal(scale=0.2 * scale, size=(100, 384))
    ).astype(np.float32)
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "queries.npy", queries)
    truth = brute_force_knn(data, queries, 10, "euclidean")[0]
    recall = {}
    for copy in ("0", "1"):
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                _BUILD_AND_SEARCH,
                str(tmp_path / "data.npy"),
                str(tmp_path / "queries.npy"),
                str(tmp_path / f"{copy}.chassis"),
                str(tmp_path / f"ids{copy}.npy"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**child_env(), "CHASSIS_HALF_COPY": copy},
        )
        assert_child_ok(proc, f"build with CHASSIS_HALF_COPY={copy}")
        recall[copy] = recall_at_k(np.load(tmp_path / f"ids{copy}.npy"), truth)
    assert recall["0"] >= 0.9, recall
    assert recall["1"] >= recall["0"] - 0.02, recall
