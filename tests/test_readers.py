"""Readers that search while a writer writes: `IndexReader` and snapshots in one process.

Readers in any process search while a writer writes, and searches never wait for writes. Checks
(readers in other processes: test_readers_processes.py; threads: test_readers_threads.py):

* basics: ``IndexReader(path)`` opens while a writer holds the file, raises IndexNotFoundError for a
  missing file (and creates nothing), refuses every write with ReadOnlyError (an
  io.UnsupportedOperation), takes metric / precision / dimensions from the file even when the
  options passed say otherwise, reports the last FLUSHED user_version; ``VectorIndex(path,
  read_only=True)`` behaves the same;
* visibility: a reader never sees unflushed adds (len, ids, get, ``in``, exact search), sees each
  flush at its next call; ``snapshot()`` pins one state (len, ids, get, search, search_batch) while
  the reader's own calls move on; a writer's own searches see its adds at once;
* a reader follows a new index file renamed over its path, while a snapshot keeps the old one.

The oracles are brute force (conftest.brute_force_knn / pairwise_distances); no assertion is
about timing.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator

import chassis
import numpy as np
import pytest
from chassis import (
    IndexLockedError,
    IndexNotFoundError,
    IndexOptions,
    IndexReader,
    ReadOnlyError,
    VectorIndex,
)
from conftest import (
    ExactOracle,
    assert_bit_identical,
    assert_child_ok,
    assert_exact_knn,
    exact_search,
    run_python,
    to_half,
    vecs,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")

D = 8


@contextlib.contextmanager
def writer_and_reader(
    path, rows: np.ndarray, user_version: int | None = None
) -> Iterator[tuple[VectorIndex, IndexReader]]:
    """A writer of a new index whose first flush holds ``rows`` (and ``user_version``), and a
    reader opened after that flush."""
    with VectorIndex(path, D) as writer:
        writer.add_batch(rows)
        if user_version is not None:
            writer.user_version = user_version
        writer.flush()
        with IndexReader(path) as reader:
            yield writer, reader


# =========================================================================== a. basics
def test_reader_opens_while_a_writer_holds_the_file(index_path):
    data = vecs(20)
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(data)
        writer.flush()
        reader = IndexReader(index_path)  # no IndexLockedError: readers take no lock
        try:
            assert isinstance(reader, IndexReader)
            assert isinstance(reader, VectorIndex)
            assert reader.read_only is True
            assert len(reader) == 20
            np.testing.assert_array_equal(reader.ids(), np.arange(20, dtype=np.uint64))
            ids, dist = exact_search(reader, data[3], k=5)
            assert_exact_knn(ids, dist, data, np.arange(20), data[3], 5, "euclidean")
            # a second writer is still refused while the first is open
            with pytest.raises(IndexLockedError):
                VectorIndex(index_path)
        finally:
            reader.close()
        writer.add(vecs(1, seed=1)[0])  # the writer is unaffected by the reader
    with IndexReader(index_path) as again:
        assert len(again) == 21


def test_reader_of_a_missing_file_is_index_not_found(tmp_path):
    path = tmp_path / "missing.chassis"
    with pytest.raises(IndexNotFoundError) as e:
        IndexReader(path)
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(IndexNotFoundError):
        IndexReader(str(path), IndexOptions(metric="cosine"))
    assert not path.exists(), "a reader must never create the file"
    assert list(tmp_path.iterdir()) == [], "a reader must leave nothing behind"


WRITES = {
    "add": lambda r: r.add(vecs(1, seed=9)[0]),
    "add_with_id": lambda r: r.add(vecs(1, seed=9)[0], 1000),
    "add_batch": lambda r: r.add_batch(vecs(3, seed=9)),
    "flush": lambda r: r.flush(),
    "rollback": lambda r: r.rollback(),
    "set_user_version": lambda r: setattr(r, "user_version", 5),
}


@pytest.mark.parametrize("how", ["IndexReader", "read_only=True"])
@pytest.mark.parametrize("op", list(WRITES))
def test_reader_refuses_writes_with_read_only_error(index_path, op, how):
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(vecs(4))
        writer.user_version = 3
        writer.flush()
        reader = (
            IndexReader(index_path)
            if how == "IndexReader"
            else VectorIndex(index_path, read_only=True)
        )
        try:
            with pytest.raises(ReadOnlyError) as e:
                WRITES[op](reader)
            assert isinstance(e.value, io.UnsupportedOperation)
            assert isinstance(e.value, chassis.ChassisError)
            # nothing changed, for the reader or the writer
            assert len(reader) == 4 and reader.user_version == 3
            assert len(writer) == 4 and writer.pending == 0 and writer.user_version == 3
        finally:
            reader.close()


@pytest.mark.parametrize(
    "given",
    [
        IndexOptions(metric="euclidean", max_connections=8),
        IndexOptions(metric="inner_product", precision="full", max_connections=8),
        {"metric": "euclidean", "ef_search": 77, "max_connections": 8},
        None,
    ],
    ids=["metric", "metric+precision", "dict", "none"],
)
def test_reader_takes_metric_precision_and_dimensions_from_the_file(index_path, given):
    """Options whose metric (and precision) differ from the file's are not an error for a reader
    (chassisdb compatibility); max_connections must still match (it is given as in the file)."""
    dims = 12
    data = vecs(30, dims, seed=4)
    opts = IndexOptions(metric="cosine", precision="half", max_connections=8)
    with VectorIndex(index_path, dims, opts) as writer:
        writer.add_batch(data)
        writer.flush()
        reader = IndexReader(index_path, given)
        try:
            assert reader.metric == "cosine"
            assert reader.precision == "half"
            assert reader.dimensions == dims
            assert reader.options.metric == "cosine" and reader.options.precision == "half"
            assert reader.options.max_connections == 8
            # and it searches by the file's metric: the same answers as the writer's (and exact)
            q = vecs(1, dims, seed=5)[0]
            r_ids, r_d = exact_search(reader, q)
            w_ids, w_d = exact_search(writer, q)
            np.testing.assert_array_equal(r_ids, w_ids)
            np.testing.assert_allclose(r_d, w_d, rtol=1e-6, atol=1e-6)
            stored = to_half(np.asarray([np.asarray(d) / np.linalg.norm(d) for d in data]))
            assert_exact_knn(r_ids, r_d, stored, np.arange(30), q, 10, "cosine", precision="half")
        finally:
            reader.close()


def test_read_only_vector_index_is_the_same_as_index_reader(index_path):
    data = vecs(25, seed=2)
    with VectorIndex(index_path, D, IndexOptions(metric="inner_product")) as writer:
        writer.add_batch(data)
        writer.flush()
        a = IndexReader(index_path)
        b = VectorIndex(index_path, read_only=True)
        try:
            assert a.read_only and b.read_only
            assert (a.metric, a.precision, a.dimensions) == (b.metric, b.precision, b.dimensions)
            np.testing.assert_array_equal(a.ids(), b.ids())
            q = vecs(3, seed=8)
            np.testing.assert_array_equal(
                a.search_batch(q, 5, ef=100)[0], b.search_batch(q, 5, ef=100)[0]
            )
            writer.add(vecs(1, seed=3)[0])
            assert len(a) == len(b) == 25
            writer.flush()
            assert len(a) == len(b) == 26
        finally:
            a.close()
            b.close()


def test_reader_reports_the_last_flushed_user_version(index_path):
    with writer_and_reader(index_path, vecs(3), user_version=7) as (writer, reader):
        assert reader.user_version == 7
        writer.user_version = 9  # not flushed
        assert writer.user_version == 9
        assert reader.user_version == 7
        with reader.snapshot() as snap:
            assert snap.user_version == 7
            writer.flush()  # a flush with only a new user_version
            assert reader.user_version == 9
            assert snap.user_version == 7
        writer.user_version = 11
        writer.rollback()
        assert writer.user_version == 9 and reader.user_version == 9


# =========================================================================== b. visibility
def test_reader_never_sees_unflushed_adds_and_sees_each_flush_at_its_next_call(index_path):
    data = vecs(80, seed=11)
    with writer_and_reader(index_path, data[:30]) as (writer, reader):
        flushed = 30
        for lo, hi in [(30, 50), (50, 51), (51, 80)]:
            # unflushed: single adds and a batch
            for i in range(lo, min(hi, lo + 3)):
                assert writer.add(data[i]) == i
            if hi > lo + 3:
                np.testing.assert_array_equal(
                    writer.add_batch(data[lo + 3 : hi]), np.arange(lo + 3, hi)
                )
            assert len(writer) == hi and writer.pending == hi - flushed

            assert len(reader) == flushed
            np.testing.assert_array_equal(reader.ids(), np.arange(flushed, dtype=np.uint64))
            for i in range(lo, hi):
                assert reader.get(i) is None, f"unflushed id {i} visible through get()"
                assert i not in reader, f"unflushed id {i} visible through `in`"
            for i in (lo, hi - 1):
                ids, dist = exact_search(reader, data[i], k=10)
                assert ids.max() < flushed, f"unflushed ids in search results: {ids.tolist()}"
                assert_exact_knn(
                    ids, dist, data[:flushed], np.arange(flushed), data[i], 10, "euclidean"
                )
            b_ids, _ = reader.search_batch(data[lo:hi], 10, ef=1000)
            assert b_ids.max() < flushed

            writer.flush()
            flushed = hi
            # the very next call of the reader sees the flush
            assert len(reader) == flushed
            np.testing.assert_array_equal(reader.ids(), np.arange(flushed, dtype=np.uint64))
            for i in range(lo, hi):
                assert i in reader
                assert_bit_identical(reader.get(i), data[i], f"vector {i} after flush")
            ids, dist = exact_search(reader, data[hi - 1], k=10)
            assert int(ids[0]) == hi - 1
            assert_exact_knn(
                ids, dist, data[:flushed], np.arange(flushed), data[hi - 1], 10, "euclidean"
            )


def test_reader_does_not_see_a_rolled_back_batch(index_path):
    data = vecs(40, seed=12)
    with writer_and_reader(index_path, data[:20]) as (writer, reader):
        writer.add_batch(data[20:])
        writer.rollback()
        assert len(reader) == 20 and len(writer) == 20
        writer.add_batch(data[30:35])  # ids 20..24 again, other vectors
        writer.flush()
        assert len(reader) == 25
        for j, i in enumerate(range(20, 25)):
            assert_bit_identical(reader.get(i), data[30 + j], f"id {i} after rollback + re-add")


def test_snapshot_pins_one_state_while_the_reader_moves_on(index_path):
    data = vecs(120, seed=13)
    queries = vecs(6, seed=14)
    k = 7
    with writer_and_reader(index_path, data[:50], user_version=1) as (writer, reader):
        snap = reader.snapshot()
        assert isinstance(snap, chassis.Snapshot)
        with snap as s:
            assert s is snap
            seq0 = s.seq
            n0 = len(s)
            assert n0 == 50
            for step, hi in enumerate((60, 61, 120)):
                writer.add_batch(data[len(writer) : hi])
                writer.user_version = step + 2
                writer.flush()
                # the reader's own calls see the newest flush ...
                assert len(reader) == hi
                ids, _ = exact_search(reader, data[hi - 1], k=1)
                assert int(ids[0]) == hi - 1
                # ... the snapshot still the state it pinned
                assert len(s) == 50 and s.seq == seq0 and s.user_version == 1
                np.testing.assert_array_equal(s.ids(), np.arange(50, dtype=np.uint64))
                assert (hi - 1) not in s and s.get(hi - 1) is None
                assert 49 in s
                assert_bit_identical(s.get(49), data[49], "a pinned vector")
                for qi, q in enumerate(queries):
                    hits = s.search(q, k, ef=1000)
                    assert_exact_knn(
                        [h.id for h in hits],
                        [h.distance for h in hits],
                        data[:50],
                        np.arange(50),
                        q,
                        k,
                        "euclidean",
                        context=f"snapshot search {qi}",
                    )
                b_ids, b_d = s.search_batch(queries, k, ef=1000, threads=1)
                for qi, q in enumerate(queries):
                    assert_exact_knn(
                        b_ids[qi],
                        b_d[qi],
                        data[:50],
                        np.arange(50),
                        q,
                        k,
                        "euclidean",
                        context=f"snapshot search_batch {qi}",
                    )
                assert (b_ids < 50).all(), "a snapshot returned an id flushed after it was taken"
        # a new snapshot takes the newest state
        with reader.snapshot() as s2:
            assert len(s2) == 120 and s2.seq > seq0 and s2.user_version == 4
            b_ids, b_d = s2.search_batch(queries, k, ef=1000)
            for qi, q in enumerate(queries):
                assert_exact_knn(b_ids[qi], b_d[qi], data, np.arange(120), q, k, "euclidean")


def test_writers_own_searches_see_its_adds_at_once_and_its_snapshot_pins(index_path):
    data = vecs(60, seed=15)
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(data[:10])
        with writer.snapshot() as before:
            for i in range(10, 20):
                assert writer.add(data[i]) == i
                assert len(writer) == i + 1  # no flush needed
                ids, dist = exact_search(writer, data[i], k=3)
                assert int(ids[0]) == i and dist[0] == pytest.approx(0.0, abs=1e-5)
            writer.add_batch(data[20:60])
            assert len(writer) == 60
            b_ids, b_d = writer.search_batch(data[20:60], 1, ef=1000)
            np.testing.assert_array_equal(b_ids[:, 0], np.arange(20, 60, dtype=np.uint64))
            # the snapshot taken before stays as it was
            assert len(before) == 10
            assert before.get(15) is None and 15 not in before
            p_ids, _ = before.search_batch(data[10:60], 3, ef=1000)
            assert (p_ids < 10).all()
        # and nothing of it is visible to a reader until the flush
        with IndexReader(index_path) as reader:
            assert len(reader) == 0  # the file was created empty and never flushed since
            writer.flush()
            assert len(reader) == 60


def test_a_writers_snapshot_keeps_rows_deleted_after_it(index_path):
    """Oracle: brute force over the rows live when the snapshot was taken. Rows deleted before
    it (same commit cycle) stay hidden in it; rows deleted after it, flushed or not, consolidated
    or not, stay in it (len, ids, get, in, exact search, filters), as does the vector an id had
    before an upsert; the writer's own calls do not see them."""
    data = vecs(300, seed=16)
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(data)
        writer.flush()
        assert writer.delete_batch(np.arange(0, 20, dtype=np.uint64)) == 20  # before the pin
        live = np.arange(20, 300)
        with writer.snapshot() as snap:
            assert writer.delete_batch(np.arange(20, 120, dtype=np.uint64)) == 100
            assert writer.delete(150) is True
            assert writer.upsert(vecs(1, seed=98), np.array([200], dtype=np.uint64)) == 1
            moved = vecs(1, seed=99)  # the same id twice: the snapshot keeps its first row
            assert writer.upsert(moved, np.array([200], dtype=np.uint64)) == 1
            for when in ("deletes unflushed", "deletes flushed and consolidated"):
                assert len(snap) == len(live), when
                np.testing.assert_array_equal(np.sort(snap.ids()), live.astype(np.uint64), when)
                assert 50 in snap and 150 in snap and 5 not in snap
                np.testing.assert_array_equal(snap.get(50), data[50])
                np.testing.assert_array_equal(snap.get(200), data[200])  # upserted after
                np.testing.assert_array_equal(writer.get(200), moved[0])
                assert snap.get(5) is None
                for q in data[[21, 60, 150, 250]]:
                    ids, dist = exact_search(snap, q, k=5)
                    assert_exact_knn(ids, dist, data[live], live, q, 5, "euclidean")
                allowed = np.arange(0, 60, dtype=np.uint64)
                got, _ = snap.search_batch(data[[30, 40]], 3, allowed=allowed, ef=1000)
                assert set(got.ravel().tolist()) <= set(range(20, 60)) and got.min() >= 20
                assert 50 not in writer and writer.get(50) is None
                assert len(writer) == len(live) - 101  # the upsert replaced a row
                w_ids, _ = writer.search_batch(data[20:120], 1, ef=1000)
                assert not set(w_ids.ravel().tolist()) & {*range(20, 120), 150}, "writer's view"
                writer.flush()  # committed and consolidated: the snapshot keeps them still
                writer.consolidate()
        with writer.snapshot() as after:
            assert len(after) == len(live) - 101 and 50 not in after


# =========================================================================== f. file replacement
REPLACE_CHILD = r"""
import json, os, sys, time
import numpy as np
import chassis

path, built, out = sys.argv[1:4]
reader = chassis.IndexReader(path)
meta = {"n_before": len(reader)}
pinned = reader.snapshot()
queries = np.load(out + ".queries.npy")
os.replace(built, path)  # e.g. a compaction written elsewhere, renamed over the path

polls = []
deadline = time.monotonic() + 10.0
meta["followed"] = False
while time.monotonic() < deadline:  # within ~50 ms the reader should serve the new file
    n_a = len(reader)
    b_ids, b_d = reader.search_batch(queries, 5, ef=1000, threads=1)
    n_b = len(reader)
    polls.append((n_a, n_b, b_ids, b_d))
    if n_a == n_b == 80:
        meta["followed"] = True
        break
    time.sleep(0.002)
meta["polls"] = len(polls)
a = {}
a["poll_n"] = np.array([(p[0], p[1]) for p in polls])
a["poll_ids"] = np.array([p[2] for p in polls])
a["poll_d"] = np.array([p[3] for p in polls])
meta["len"] = len(reader)
meta["user_version"] = reader.user_version
a["ids"] = reader.ids()
a["vecs"] = np.stack([reader.get(int(i)) for i in a["ids"]])
meta["in_79"], meta["in_80"] = 79 in reader, 80 in reader
s_ids, s_d = [], []
for q in queries:
    hits = reader.search(q, 5, ef=1000)
    s_ids.append([h.id for h in hits]); s_d.append([h.distance for h in hits])
a["search_ids"], a["search_d"] = np.array(s_ids), np.array(s_d)
with reader.snapshot() as s:
    meta["new_snapshot"] = [len(s), s.user_version]
# the snapshot taken before the replacement: still the old file's state
meta["pinned"] = [len(pinned), pinned.user_version]
a["pinned_get10"] = pinned.get(10)
a["pinned_ids"], a["pinned_d"] = pinned.search_batch(queries, 5, ef=1000)
# a writer of the new file, followed as before
extra = np.load(out + ".extra.npy")
with chassis.VectorIndex(path) as w3:
    meta["w3_len"] = len(w3)
    w3.add(extra)
    meta["len_unflushed"] = len(reader)
    w3.flush()
    meta["len_flushed"] = len(reader)
a["get80"] = reader.get(80)
reader.close()
np.savez(out, **a)
print(json.dumps(meta))
"""


def test_reader_follows_a_file_renamed_over_its_path(tmp_path, index_path):
    """Runs in a child process: a reader that hangs there (a deadlock) fails this test instead
    of hanging the test run."""
    dims = 16
    old = vecs(50, dims, seed=51)
    new = vecs(80, dims, seed=52) + np.float32(3.0)  # far from the old vectors: other answers
    queries = vecs(5, dims, seed=53) + np.float32(1.5)
    extra = vecs(1, dims, seed=54)[0]
    old_oracle = ExactOracle(old, queries, 5)
    new_oracle = ExactOracle(new, queries, 5)
    opts = IndexOptions(max_connections=8, ef_construction=32)
    with VectorIndex(index_path, dims, opts) as w:
        w.add_batch(old)
        w.user_version = 1
    built = tmp_path / "compacted.chassis"
    with VectorIndex(built, dims, opts) as w2:
        w2.add_batch(new)
        w2.user_version = 2
    out = tmp_path / "replace"
    np.save(f"{out}.queries.npy", queries)
    np.save(f"{out}.extra.npy", extra)
    try:
        proc = run_python(REPLACE_CHILD, index_path, built, out, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            "the reader hung (30 s) after a new index file was renamed over its path: "
            "a deadlock when it reopens the path?"
        ) from None
    assert_child_ok(proc, "the reader of a replaced file")
    meta = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(f"{out}.npz") as z:
        a = {name: z[name] for name in z.files}

    assert meta["n_before"] == 50
    assert meta["followed"], (
        f"the reader still served the replaced file after 10 s ({meta['polls']} polls)"
    )
    states = []
    for p, ((n_a, n_b), ids, d) in enumerate(zip(a["poll_n"], a["poll_ids"], a["poll_d"])):
        assert n_a in (50, 80) and n_b in (50, 80), f"poll {p}: len {n_a}/{n_b} is neither file's"
        is_old = all(old_oracle.matches(q, ids[q], d[q], 50) for q in range(len(queries)))
        is_new = all(new_oracle.matches(q, ids[q], d[q], 80) for q in range(len(queries)))
        assert is_old or is_new, (
            f"poll {p}: a search_batch matched neither file (or mixed them): {ids.tolist()}"
        )
        states.append("new" if is_new else "old")
    assert states[-1] == "new"
    assert "old" not in states[states.index("new") :], (
        f"the reader went back to the old file: {states}"
    )

    assert meta["len"] == 80 and meta["user_version"] == 2
    np.testing.assert_array_equal(a["ids"], np.arange(80, dtype=np.uint64))
    assert_bit_identical(a["vecs"], new, "the vectors of the new file")
    assert meta["in_79"] and not meta["in_80"]
    for qi, q in enumerate(queries):
        assert_exact_knn(
            a["search_ids"][qi], a["search_d"][qi], new, np.arange(80), q, 5, "euclidean"
        )
    assert meta["new_snapshot"] == [80, 2]
    assert meta["pinned"] == [50, 1], "a snapshot taken before the replacement changed"
    assert_bit_identical(a["pinned_get10"], old[10], "a pinned vector of the replaced file")
    for qi, q in enumerate(queries):
        assert_exact_knn(
            a["pinned_ids"][qi], a["pinned_d"][qi], old, np.arange(50), q, 5, "euclidean"
        )
    assert meta["w3_len"] == 80
    assert meta["len_unflushed"] == 80 and meta["len_flushed"] == 81
    assert_bit_identical(a["get80"], extra, "a vector added to the new file")
