"""A batch of 1,024 rows or more is laid out by locality (near vectors in near slots; see
src/locality.rs). None of that may show: ids() stays in insertion order, every id keeps its own
row's vector bit for bit, searches stay exact where asked, in this process, in a fresh one and
after compaction. The oracles are the rows as given, the order they were given in, and brute
force k-NN."""

from __future__ import annotations

import numpy as np
import pytest
from chassis import IndexOptions, VectorIndex
from conftest import assert_bit_identical, assert_exact_knn, clustered_data, dump_index, to_half

DIMS = 24


def stored(x: np.ndarray, precision: str) -> np.ndarray:
    return to_half(x) if precision == "half" else x


@pytest.mark.parametrize("precision", ["full", "half"])
def test_a_large_batch_keeps_its_ids_vectors_and_order(tmp_path, precision):
    rows = clustered_data(3000, DIMS, seed=5)
    path = tmp_path / "big.chassis"
    with VectorIndex(path, DIMS, IndexOptions(precision=precision)) as ix:
        ids = ix.add_batch(rows)
        np.testing.assert_array_equal(ids, np.arange(3000))
        np.testing.assert_array_equal(ix.ids(), np.arange(3000))
        for i in range(0, 3000, 7):
            assert_bit_identical(ix.get(i), stored(rows[i], precision), f"get({i})")
        # Each stored vector finds itself (the id that holds it) at the default ef.
        found, dist = ix.search_batch(rows[:300], 1)
        assert (found[:, 0] == np.arange(300)).mean() >= 0.98, "ids point at other rows' vectors"
        ix.flush()
    queries = clustered_data(5, DIMS, seed=5, sample_seed=77)
    state = dump_index(path, tmp_path, queries=queries)
    np.testing.assert_array_equal(state["ids"], np.arange(3000))
    assert_bit_identical(
        state["vecs"], stored(rows, precision), "vectors read back in a fresh process"
    )
    for qi, q in enumerate(queries):
        assert_exact_knn(
            state["search_ids"][qi],
            state["search_d"][qi],
            stored(rows, precision),
            np.arange(3000),
            q,
            10,
            "euclidean",
            context=f"exact search {qi} in a fresh process",
        )
        np.testing.assert_array_equal(state["batch_ids"][qi], state["search_ids"][qi])


def test_insertion_order_survives_mixed_batches_deletes_and_compaction(tmp_path):
    data = clustered_data(6000, DIMS, seed=9)
    path = tmp_path / "mixed.chassis"
    order: list[int] = []
    vec: dict[int, np.ndarray] = {}

    def add(ix, rows, ids=None):
        got = ix.add_batch(rows, ids=ids)
        order.extend(int(i) for i in got)
        vec.update({int(i): r for i, r in zip(got, rows)})

    with VectorIndex(path, DIMS) as ix:
        add(ix, data[:1500])  # default ids 0..1499: laid out by locality
        add(ix, data[1500:2700], ids=np.arange(20_000, 18_800, -1))  # falling ids: kept as given
        add(ix, data[2700:3800])  # default ids from 20_001: by locality
        add(ix, data[3800:5000], ids=np.arange(30_000, 31_200))  # rising, above all: by locality
        add(
            ix, data[5000:6000], ids=np.arange(5_000, 6_000)
        )  # rising, but below the largest: as given
        add(ix, data[:3], ids=[40_002, 40_000, 40_001])  # a small batch
        np.testing.assert_array_equal(ix.ids(), order)
        for i in order[::5]:
            assert_bit_identical(ix.get(i), vec[i], f"get({i})")
        gone = set(order[::11])
        for i in gone:
            assert ix.delete(i)
        live = [i for i in order if i not in gone]
        ix.flush()
        np.testing.assert_array_equal(ix.ids(), live)
        ix.compact()
        np.testing.assert_array_equal(ix.ids(), live, "ids() after compaction")
        ix.add_batch(data[:2], ids=[50_001, 50_000])
        live += [50_001, 50_000]
        vec.update({50_001: data[0], 50_000: data[1]})
        ix.flush()
        np.testing.assert_array_equal(ix.ids(), live)
    state = dump_index(path, tmp_path)
    np.testing.assert_array_equal(state["ids"], live, "ids() in a fresh process")
    assert_bit_identical(
        state["vecs"], np.stack([vec[i] for i in live]), "vectors in a fresh process"
    )
