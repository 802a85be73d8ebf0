"""Batch deletes (`delete_batch`) and upserts (`upsert`).

Oracles: brute-force k-NN in NumPy over the rows that should be live; the file reopened in a
fresh process after a flush, and after a child killed (SIGKILL) with deletes not flushed.
"""

from __future__ import annotations

import signal

import chassis
import numpy as np
import pytest
from conftest import assert_child_ok, brute_force_knn, recall_at_k, run_python, vecs

N, D = 3000, 16


@pytest.fixture
def filled(index_path):
    data = vecs(N, D, seed=4)
    idx = chassis.VectorIndex(index_path, D)
    idx.add_batch(data)
    idx.flush()
    yield idx, data
    idx.close()


def live_search_matches(idx, live: dict[int, np.ndarray], seed: int) -> None:
    """The index's answers against the brute force over `live` (id -> vector)."""
    ids = np.fromiter(live, dtype=np.uint64)
    rows = np.stack([live[int(i)] for i in ids])
    queries = vecs(50, D, seed=seed)
    truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
    got, _ = idx.search_batch(queries, 10, ef=128)
    got = np.asarray(got)
    assert set(got.ravel().tolist()) <= set(ids.tolist()), "a deleted id was returned"
    assert recall_at_k(got, truth) >= 0.98


def test_delete_batch_counts_what_was_there_and_searches_see_only_the_rest(filled, index_path):
    idx, data = filled
    rng = np.random.default_rng(1)
    gone = rng.choice(N, size=700, replace=False)
    # absent ids and repeats are skipped, not counted
    asked = np.concatenate([gone, gone[:50], np.arange(N, N + 30)]).astype(np.uint64)
    assert idx.delete_batch(asked) == 700
    assert len(idx) == N - 700 and idx.deleted_count() == 700
    assert idx.delete_batch(gone) == 0, "deleted twice"
    live = {i: data[i] for i in range(N) if i not in set(gone.tolist())}
    live_search_matches(idx, live, seed=7)
    idx.flush()
    proc = run_python(
        """
        import sys, chassis
        idx = chassis.VectorIndex(sys.argv[1], read_only=True)
        print(len(idx), sum(i in idx for i in range(3000)))
        """,
        index_path,
    )
    assert_child_ok(proc, "reopening after a flushed delete_batch")
    assert proc.stdout.split() == [str(N - 700)] * 2


def test_a_rollback_brings_back_every_row_of_a_batch_delete(filled):
    idx, data = filled
    assert idx.delete_batch(range(0, N, 2)) == N // 2
    idx.rollback()
    assert len(idx) == N and all(i in idx for i in range(0, N, 2))
    live_search_matches(idx, dict(enumerate(data)), seed=8)


def test_a_writer_killed_after_a_batch_delete_reopens_as_last_flushed(filled, index_path):
    """Oracle: a child that flushes one batch delete, makes another and is killed (SIGKILL)."""
    idx, _ = filled
    idx.close()
    proc = run_python(
        """
        import os, signal, sys, chassis
        idx = chassis.VectorIndex(sys.argv[1])
        idx.delete_batch(range(0, 100))
        idx.flush()
        idx.delete_batch(range(100, 1100))
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        index_path,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with pytest.warns(RuntimeWarning):
        again = chassis.VectorIndex(index_path)
    with again:
        assert len(again) == N - 100
        assert not any(i in again for i in range(100))
        assert all(i in again for i in range(100, 1100))


def test_upsert_replaces_the_present_adds_the_rest_and_searches_follow(filled):
    idx, data = filled
    fresh = vecs(400, D, seed=99)
    ids = np.concatenate([np.arange(100, 400), np.arange(N, N + 100)]).astype(np.uint64)
    assert idx.upsert(fresh, ids) == 300
    assert len(idx) == N + 100
    live = dict(enumerate(data))
    live.update({int(i): fresh[j] for j, i in enumerate(ids)})
    for i in (100, 399, N, N + 99):
        np.testing.assert_array_equal(idx.get(i), live[i])
    live_search_matches(idx, live, seed=9)


@pytest.mark.parametrize(
    ("what", "ids", "error"),
    [
        ("a NaN", None, chassis.InvalidArgumentError),
        ("an id twice", [5, 6, 5], chassis.IdInUseError),
        ("too few ids", [5, 6], chassis.InvalidArgumentError),
    ],
)
def test_a_bad_upsert_changes_nothing(filled, what, ids, error):
    idx, data = filled
    rows = vecs(3, D, seed=3)
    if what == "a NaN":
        rows[1, 2] = np.nan
        ids = [5, 6, 7]
    with pytest.raises(error):
        idx.upsert(rows, ids)
    assert len(idx) == N and idx.deleted_count() == 0
    for i in (5, 6, 7):
        np.testing.assert_array_equal(idx.get(i), data[i])


def test_readers_refuse_batch_writes(filled, index_path):
    idx, _ = filled
    with chassis.IndexReader(index_path) as r:
        with pytest.raises(chassis.ReadOnlyError):
            r.delete_batch([1, 2])
        with pytest.raises(chassis.ReadOnlyError):
            r.upsert(vecs(1, D), [1])
    assert len(idx) == N


@pytest.mark.parametrize(
    "ids",
    [[1, -3], [1, 2**64 - 1], [1, 2**64], np.array([1, -3])],
    ids=["negative", "reserved", "past_u64", "negative_array"],
)
def test_delete_batch_refuses_ids_no_index_can_hold(filled, index_path, ids):
    # Oracle: the file reopened in a fresh process after a flush still holds every row.
    idx, _ = filled
    with pytest.raises(chassis.InvalidArgumentError):
        idx.delete_batch(ids)
    assert len(idx) == N and 1 in idx and idx.deleted_count() == 0
    idx.flush()
    proc = run_python(
        "import chassis, sys; r = chassis.IndexReader(sys.argv[1]); print(len(r), 1 in r)",
        index_path,
    )
    assert_child_ok(proc, "reopen")
    assert proc.stdout.split() == [str(N), "True"]


@pytest.mark.parametrize(
    "ids", [[True, 3], (3, np.True_), {True, 3}], ids=["list", "tuple_numpy_bool", "set"]
)
def test_a_boolean_among_the_ids_is_refused_not_read_as_one(filled, ids):
    # NumPy would read [True, 3] as [1, 3]: id 1 deleted, which the caller never named.
    # Oracle: id 1 still there, and nothing deleted.
    idx, _ = filled
    with pytest.raises(chassis.ArgumentTypeError, match="a boolean") as e:
        idx.delete_batch(ids)
    assert isinstance(e.value, TypeError)
    assert 1 in idx and 3 in idx and idx.deleted_count() == 0
    with pytest.raises(chassis.ArgumentTypeError):
        idx.upsert(vecs(2, D), [True, 3])
    assert idx.deleted_count() == 0
