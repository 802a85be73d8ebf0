"""`VectorIndex._rewind`: an index taken back to the rows of one of its earlier commits, the
step the sharded index (`chassis.ray`) takes on a shard whose flush landed when another's did
not.

Oracles: a record of every row at the commit rewound to (ids and vectors), brute-force k-NN
in NumPy over it, and the file reopened in a fresh process; `check()`'s reachability walk.
"""

from __future__ import annotations

import chassis
import numpy as np
import pytest
from conftest import assert_child_ok, brute_force_knn, run_python, vecs

D = 16


def rows_of(idx) -> dict[int, np.ndarray]:
    return {int(i): idx.get(int(i)) for i in idx.ids()}


def assert_rows(idx, want: dict[int, np.ndarray]) -> None:
    got = rows_of(idx)
    assert sorted(got) == sorted(want)
    for i, v in want.items():
        np.testing.assert_array_equal(got[i], v)


def assert_searches_match(idx, want: dict[int, np.ndarray]) -> None:
    ids = np.array(sorted(want), dtype=np.uint64)
    rows = np.stack([want[int(i)] for i in ids])
    queries = vecs(50, D, seed=5)
    truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
    got, _ = idx.search_batch(queries, 10, ef=200)
    hits = sum(len(set(g.tolist()) & set(t.tolist())) for g, t in zip(got, truth))
    assert hits / truth.size >= 0.99


@pytest.mark.parametrize("opts", [None, chassis.IndexOptions(quantization="int8")])
def test_rewind_brings_back_exactly_the_rows_of_the_commit(tmp_path, opts):
    path = tmp_path / "r.chassis"
    idx = chassis.VectorIndex(str(path), D, opts)
    idx.add_batch(vecs(1500, D, seed=1))
    idx.delete_batch(np.arange(0, 1500, 7, dtype=np.uint64))
    idx.flush()
    seq, slots, _ = idx._committed()
    want = rows_of(idx)
    # Later commits: deletes (some consolidated), new rows, an upsert of old ids, new ids.
    idx.delete_batch(np.arange(1, 1500, 3, dtype=np.uint64))
    idx.consolidate()
    idx.add_batch(vecs(400, D, seed=2))
    idx.flush()
    idx.upsert(vecs(50, D, seed=3), np.arange(2, 102, 2, dtype=np.uint64))
    idx.add_batch(vecs(10, D, seed=4), ids=np.arange(10**6, 10**6 + 10, dtype=np.uint64))
    idx.flush()
    assert rows_of(idx).keys() != want.keys()

    removed, restored = idx._rewind(slots, seq)
    # The rows of the later commits out (the upsert's new rows among them), the deleted back.
    assert removed == 400 + 50 + 10
    assert restored > 0
    assert_rows(idx, want)
    # Pending until the flush; a rollback undoes it.
    idx.rollback()
    assert rows_of(idx).keys() != want.keys()
    idx._rewind(slots, seq)
    idx.flush()
    assert_rows(idx, want)
    assert_searches_match(idx, want)
    report = idx.check()
    assert report.unreachable == [] and report.corrupt == []
    idx.close()

    out = run_python(
        """
        import sys, chassis, numpy as np
        idx = chassis.IndexReader(sys.argv[1])
        ids = np.sort(idx.ids())
        np.save(sys.argv[2], np.stack([idx.get(int(i)) for i in ids]))
        np.save(sys.argv[3], ids)
        """,
        path,
        tmp_path / "v.npy",
        tmp_path / "i.npy",
    )
    assert_child_ok(out, "reopening the rewound index")
    ids = np.load(tmp_path / "i.npy")
    assert ids.tolist() == sorted(want)
    np.testing.assert_array_equal(
        np.load(tmp_path / "v.npy"), np.stack([want[int(i)] for i in ids])
    )


def test_rewind_refuses_pending_changes_and_a_later_commit(tmp_path):
    idx = chassis.VectorIndex(str(tmp_path / "r.chassis"), D)
    idx.add_batch(vecs(100, D))
    idx.flush()
    seq, slots, _ = idx._committed()
    idx.add(vecs(1, D, seed=9)[0])
    with pytest.raises(chassis.InvalidArgumentError, match="nothing pending"):
        idx._rewind(slots, seq)
    idx.flush()
    with pytest.raises(chassis.InvalidArgumentError, match="no later than"):
        idx._rewind(slots + 5, seq)
    with pytest.raises(chassis.InvalidArgumentError, match="no later than"):
        idx._rewind(slots, seq + 10)
    assert len(idx) == 101
    # To the last commit itself: nothing to do.
    s2, sl2, _ = idx._committed()
    assert idx._rewind(sl2, s2) == (0, 0)
