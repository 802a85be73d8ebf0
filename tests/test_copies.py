"""A copy of an index file kept elsewhere, fed with each commit's changes
(`VectorIndex._changes_since`), as `chassis.ray` feeds a replica on another machine.

Oracles: the writer's own file read by an `IndexReader` beside the copy's (same ids, same
vectors, the same search results to the last distance, as the graph must be the same bytes);
the copy's `check()`; the copy opened as a writer in a fresh process.
"""

from __future__ import annotations

import chassis
import numpy as np
import pytest
from chassis._copies import write_changes
from conftest import assert_child_ok, run_python, vecs

D = 16


apply = write_changes


def assert_same(writer_path, copy_path) -> None:
    queries = vecs(100, D, seed=77)
    with chassis.IndexReader(str(writer_path)) as a, chassis.IndexReader(str(copy_path)) as b:
        assert a.snapshot().seq == b.snapshot().seq
        ids = np.sort(a.ids())
        np.testing.assert_array_equal(ids, np.sort(b.ids()))
        for i in ids[:: max(1, len(ids) // 50)]:
            np.testing.assert_array_equal(a.get(int(i)), b.get(int(i)))
        ga, da = a.search_batch(queries, 10, ef=64)
        gb, db = b.search_batch(queries, 10, ef=64)
        np.testing.assert_array_equal(ga, gb)
        np.testing.assert_array_equal(da, db)
        report = b.check()
        assert report.corrupt == [] and report.unreachable == [], report


@pytest.mark.parametrize(
    "quantization, reuse", [(None, True), ("int8", True), (None, False)], ids=str
)
def test_a_copy_follows_every_kind_of_commit(tmp_path, quantization, reuse):
    opts = chassis.IndexOptions(quantization=quantization) if quantization else None
    path, copy = tmp_path / "w.chassis", tmp_path / "copy.chassis"
    idx = chassis.VectorIndex(str(path), D, opts)
    if not reuse:
        idx._keep_slots()  # as chassis.ray's shards, which rewind
    idx.add_batch(vecs(500, D, seed=1))
    idx.flush()
    idx.backup(str(copy))
    lineage, seq = idx._lineage()
    rng = np.random.default_rng(5)
    full = 0
    next_id = 500
    for r in range(12):
        kind = r % 6
        if kind == 0:  # a large batch: new segments, heap chunks
            idx.add_batch(vecs(3000, D, seed=10 + r))
            next_id += 3000
        elif kind == 1:  # a few rows: the tail, a small commit through the redo log
            for i in range(5):
                idx.add(vecs(1, D, seed=100 * r + i)[0])
            next_id += 5
        elif kind == 2:  # deletes, then a consolidation re-links lists
            live = idx.ids()
            idx.delete_batch(rng.choice(live, size=len(live) // 10, replace=False))
            idx.consolidate()
        elif kind == 3:
            live = idx.ids()
            some = rng.choice(live, size=40, replace=False)
            idx.upsert(vecs(40, D, seed=200 + r), some)
        elif kind == 4:  # a rewind: rows back as new rows
            s, slots, _ = idx._committed()
            idx.add_batch(vecs(100, D, seed=300 + r))
            idx.delete_batch(idx.ids()[:30])
            idx.flush()
            if reuse:  # an upsert reused the slots the consolidation before freed
                with pytest.raises(ValueError, match="slots were reused"):
                    idx._rewind(slots, s)
            else:
                idx._rewind(slots, s)
        else:
            idx.user_version = r
        idx.flush()
        got = idx._changes_since(lineage, seq)
        if got is None:  # a quantizer learned: every code changed
            full += 1
            idx.backup(str(copy), overwrite=True)
            lineage, seq = idx._lineage()
        else:
            seq, length, pieces = got
            apply(copy, length, pieces)
        assert_same(path, copy)
    assert full == (1 if quantization else 0)
    # A copy at an older commit of the chain is brought to the last too.
    old_seq = seq
    idx.add_batch(vecs(50, D, seed=999))
    idx.flush()
    idx.add_batch(vecs(50, D, seed=998))
    idx.flush()
    seq, length, pieces = idx._changes_since(lineage, old_seq)
    apply(copy, length, pieces)
    assert_same(path, copy)
    # A compaction writes another file: a copy of the old one cannot follow it.
    idx.compact()
    assert idx._changes_since(lineage, seq) is None
    idx.close()
    out = run_python(
        "import sys, chassis; i = chassis.VectorIndex(sys.argv[1]); r = i.check(); "
        "assert r.corrupt == [] and r.unreachable == [], r; print(len(i))",
        copy,
    )
    assert_child_ok(out, "opening the copy as a writer")


def test_changes_are_refused_with_pending_writes_and_for_other_files(tmp_path):
    idx = chassis.VectorIndex(str(tmp_path / "w.chassis"), D)
    idx.add_batch(vecs(100, D))
    idx.flush()
    lineage, seq = idx._lineage()
    assert idx._changes_since(lineage + 1, seq) is None
    assert idx._changes_since(lineage, seq + 5) is None
    # At the last commit: the header only.
    assert len(idx._changes_since(lineage, seq)[2]) == 1
    idx.add(vecs(1, D, seed=3)[0])
    with pytest.raises(chassis.InvalidArgumentError, match="nothing pending"):
        idx._changes_since(lineage, seq)
