"""Deleted rows' slots reused by later rows (docs/design/slot-reuse.md).

Oracles: a model of the live rows kept here (ids in insertion order, their vectors) and
brute-force k-NN in NumPy over it; the file's allocated size against a fresh file of the
same rows; `check()`; the file reopened in a fresh process; readers (in this process and in
another) holding a snapshot of an older commit, searched against the rows of that commit; a
writer killed (SIGKILL) while a batch reuses slots.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import chassis
import numpy as np
import pytest
from conftest import (
    assert_child_ok,
    brute_force_knn,
    killed_child,
    read_log,
    recall_at_k,
    run_python,
    vecs,
    wait_for,
)

N, D = 3000, 16

no_pins = pytest.mark.skipif(
    sys.platform == "darwin", reason="not Linux (macOS): no open-file locks, no slot reuse"
)
pytestmark = no_pins


class Model:
    """The live rows, in insertion order, as a writer that reuses nothing would hold them."""

    def __init__(self) -> None:
        self.rows: dict[int, np.ndarray] = {}

    def add(self, ids, data) -> None:
        for i, v in zip(np.asarray(ids).tolist(), data):
            self.rows[int(i)] = v

    def delete(self, ids) -> None:
        for i in np.asarray(ids).tolist():
            del self.rows[int(i)]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        ids = np.array(list(self.rows), dtype=np.uint64)
        return ids, np.stack(list(self.rows.values()))


def started(path: str, seed: int) -> tuple[chassis.VectorIndex, Model, np.random.Generator]:
    """An index of N rows, flushed, its model, and the churn's random generator."""
    idx = chassis.VectorIndex(path, D)
    data = vecs(N, D, seed=seed)
    idx.add_batch(data)
    model = Model()
    model.add(np.arange(N), data)
    idx.flush()
    return idx, model, np.random.default_rng(seed)


def churn(idx, model: Model, rng, next_id: int, share: float = 0.2, seed: int = 0) -> int:
    """Delete `share` of the live rows at random, add as many new ones, flush."""
    live = np.array(list(model.rows), dtype=np.uint64)
    gone = rng.choice(live, size=int(len(live) * share), replace=False)
    assert idx.delete_batch(gone) == len(gone)
    model.delete(gone)
    new = np.arange(next_id, next_id + len(gone), dtype=np.uint64)
    data = vecs(len(gone), D, seed=seed)
    idx.add_batch(data, ids=new)
    model.add(new, data)
    idx.flush()
    return next_id + len(gone)


def assert_matches(idx, model: Model, what: str) -> None:
    ids, rows = model.arrays()
    assert idx.ids().tolist() == ids.tolist(), f"{what}: ids() not in insertion order"
    for i in ids[:: max(1, len(ids) // 40)].tolist():
        np.testing.assert_array_equal(idx.get(i), model.rows[i], err_msg=what)
    queries = vecs(30, D, seed=99)
    truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
    got, _ = idx.search_batch(queries, 10, ef=len(ids))  # exhaustive: exact
    np.testing.assert_array_equal(np.sort(np.asarray(got), 1), np.sort(truth, 1), err_msg=what)


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


@pytest.mark.parametrize("share", [0.2, 0.4], ids=["small-batches", "batches-by-locality"])
def test_churn_reuses_slots_keeps_order_and_answers_exactly(tmp_path, share):
    """Batches of 1,024 rows or more choose their free slots by where the slots' old rows lay
    (`graph::locality`); smaller ones take the lowest. Either way nothing of that may show."""
    path = str(tmp_path / "r.chassis")
    fresh = str(tmp_path / "fresh.chassis")
    idx, model, rng = started(path, seed=1)
    next_id = N
    for r in range(6):
        next_id = churn(idx, model, rng, next_id, share=share, seed=10 + r)
        assert_matches(idx, model, f"round {r + 1}")
        # Walks (small ef) too: after the batch's consolidation they check no node.
        ids, rows = model.arrays()
        queries = rows[:: len(rows) // 50][:50]
        truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
        got = np.asarray(idx.search_batch(queries, 10, ef=24)[0])
        assert set(got.ravel().tolist()) <= set(ids.tolist()), f"round {r + 1}: a deleted id"
        assert recall_at_k(got, truth) >= 0.9, f"round {r + 1}"
    assert idx.check().ok
    # A fresh file of the same rows, for its allocated size.
    ids, rows = model.arrays()
    with chassis.VectorIndex(fresh, D) as f:
        f.add_batch(rows, ids=ids)
        f.flush()
    # A round's deleted slots are reused the round after.
    ratio = allocated(path) / allocated(fresh)
    assert ratio <= 1.1 + share, f"the churned file takes {ratio:.2f}x a fresh one"
    idx.close()
    # A fresh process sees the same rows in the same order.
    out = run_python(
        "import chassis, json, sys\n"
        "with chassis.IndexReader(sys.argv[1]) as r:\n"
        "    print(json.dumps(r.ids().tolist()), r.check().ok)\n",
        path,
    )
    assert_child_ok(out)
    got, ok = out.stdout.rsplit(" ", 1)
    assert [int(i) for i in got.strip()[1:-1].split(",")] == ids.tolist() and ok.strip() == "True"


SIZES = """
import sys, chassis, numpy as np
path, d = sys.argv[1], 16
rng = np.random.default_rng(1)
idx = chassis.VectorIndex(path, d)
idx.add_batch(rng.standard_normal((3000, d)).astype(np.float32))
idx.flush()
for r in range(6):
    live = idx.ids()
    idx.delete_batch(rng.choice(live, size=len(live) // 5, replace=False))
    idx.add_batch(rng.standard_normal((len(live) // 5, d)).astype(np.float32))
    idx.flush()
    print(len(idx), idx.deleted_count())
"""


@pytest.mark.parametrize("reuse", [True, False])
def test_deleted_slots_stay_a_round_s_worth_only_with_reuse(tmp_path, reuse):
    """The control of the size bound: the same churn with reuse off (`CHASSIS_REUSE_SLOTS=0`,
    read once per process) leaves every deleted slot in the file."""
    env = {} if reuse else {"CHASSIS_REUSE_SLOTS": "0"}
    out = run_python(SIZES, tmp_path / "g.chassis", env=env)
    assert_child_ok(out)
    rounds = [tuple(map(int, line.split())) for line in out.stdout.split("\n") if line]
    assert [r[0] for r in rounds] == [3000] * 6
    deleted = [r[1] for r in rounds]
    if reuse:
        # A round's deletes, and those of the round before until its consolidation commits.
        assert max(deleted) <= 2 * 600, deleted
    else:
        assert deleted == [600 * (r + 1) for r in range(6)], deleted


def test_a_snapshot_of_an_older_commit_blocks_reuse_and_keeps_its_rows(tmp_path):
    path = str(tmp_path / "s.chassis")
    idx, model, rng = started(path, seed=2)
    next_id = churn(idx, model, rng, N, seed=20)  # frees slots, reused from the next round
    reader = chassis.IndexReader(path)
    held = reader.snapshot()
    then = {i: v.copy() for i, v in model.rows.items()}
    deleted = idx.deleted_count()
    for r in range(3):
        next_id = churn(idx, model, rng, next_id, seed=30 + r)
    # The slots freed by the snapshot's own commit were reused (it cannot reach them); every
    # slot deleted since is still a deleted slot.
    assert idx.deleted_count() == deleted + 3 * (N // 5) - deleted, "reused under a snapshot"
    # The snapshot still answers for its own commit, exactly.
    ids = np.array(list(then), dtype=np.uint64)
    rows = np.stack(list(then.values()))
    queries = vecs(20, D, seed=7)
    truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
    got, _ = held.search_batch(queries, 10, ef=len(ids))
    np.testing.assert_array_equal(np.sort(np.asarray(got), 1), np.sort(truth, 1))
    assert sorted(held.ids().tolist()) == sorted(then)
    # Let go (the end of a with block), searched again (the reader moves on): the next
    # rounds reuse.
    held.__exit__(None, None, None)
    with pytest.raises(chassis.IndexClosedError):
        held.ids()
    reader.search(vecs(1, D, seed=3)[0], 1)
    deleted = idx.deleted_count()
    for r in range(3):
        next_id = churn(idx, model, rng, next_id, seed=40 + r)
    assert idx.deleted_count() <= deleted, "the slots stayed unused after the snapshot went"
    assert_matches(reader, model, "the reader after reuse")
    assert_matches(idx, model, "the writer")
    reader.close()
    idx.close()


def test_a_reader_of_clean_lists_never_sees_rows_a_batch_is_reusing(tmp_path):
    """Every delete consolidated at the reader's commit: its walks check no node (the commit
    says so), yet the writer's unflushed batch has linked new rows into the slots it reuses,
    and the reader's walks meet them. None may be returned, nor cost a result. Oracle: brute
    force over the rows of the reader's commit."""
    path = str(tmp_path / "c.chassis")
    idx, model, rng = started(path, seed=5)
    next_id = churn(idx, model, rng, N, seed=50)  # consolidated before the flush: clean lists
    reader = chassis.IndexReader(path)
    ids, rows = model.arrays()
    assert reader.ids().tolist() == ids.tolist()
    before = idx.deleted_count()
    fresh = vecs(N // 5, D, seed=51)
    new = np.arange(next_id, next_id + len(fresh), dtype=np.uint64)
    # Nothing deleted meanwhile (the reader's rows all keep their links); not flushed, so the
    # reader stays on its commit.
    idx.add_batch(fresh, ids=new)
    assert idx.deleted_count() < before, "the batch reused no slot"
    # Queries at the new rows: their nearest nodes are the reused slots.
    queries = fresh[:: len(fresh) // 40][:40]
    truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
    got = np.asarray(reader.search_batch(queries, 10, ef=16)[0])
    assert not set(got.ravel().tolist()) & set(new.tolist()), "a row of the unflushed batch"
    assert set(got.ravel().tolist()) <= set(ids.tolist()), "fewer than 10 results, or ids gone"
    assert recall_at_k(got, truth) >= 0.9
    reader.close()
    idx.close()


HOLDER = """
import sys, chassis, numpy as np
r = chassis.IndexReader(sys.argv[1])
s = r.snapshot()
print(s.seq, flush=True)
sys.stdin.read()
# Each of its rows is still its own nearest neighbor, under its id.
ids = s.ids()
got, _ = s.search_batch(np.stack([s.get(int(i)) for i in ids[:200]]), 1, ef=len(ids))
print(int((np.asarray(got)[:, 0] == ids[:200]).all()), len(ids), flush=True)
"""


def test_a_reader_in_another_process_blocks_reuse_until_it_lets_go(tmp_path):
    import subprocess

    from conftest import child_env

    path = str(tmp_path / "p.chassis")
    idx, model, rng = started(path, seed=3)
    next_id = churn(idx, model, rng, N, seed=50)
    held_len = len(model.rows)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        seq = int(proc.stdout.readline())
        assert seq == idx._committed()[0]
        deleted = idx.deleted_count()
        for r in range(2):
            next_id = churn(idx, model, rng, next_id, seed=60 + r)
        # Only the slots its commit freed (which it cannot reach) were reused.
        assert idx.deleted_count() == 2 * (N // 5), "reused under its snapshot"
        assert deleted == N // 5
        # Every row of its commit is still where its snapshot finds it.
        out, _ = proc.communicate("", timeout=120)
        exact, n = out.split()
        assert (exact, int(n)) == ("1", held_len)
    finally:
        if proc.poll() is None:
            proc.kill()
    deleted = idx.deleted_count()
    for r in range(2):
        next_id = churn(idx, model, rng, next_id, seed=70 + r)
    assert idx.deleted_count() <= deleted, "the reader's process ended, the slots stayed unused"
    assert_matches(idx, model, "after the reader went")
    idx.close()


def test_rollback_of_a_reusing_batch_and_deleting_a_reused_row(tmp_path):
    path = str(tmp_path / "b.chassis")
    idx, model, rng = started(path, seed=4)
    next_id = churn(idx, model, rng, N, seed=80)
    next_id = churn(idx, model, rng, next_id, seed=81)  # this one reused
    deleted = idx.deleted_count()
    # A batch that reuses, rolled back: the state of the last flush.
    idx.add_batch(vecs(300, D, seed=82), ids=np.arange(next_id, next_id + 300))
    idx.rollback()
    assert_matches(idx, model, "after the rollback")
    # Reused again, then some of the reused rows deleted before and after their flush.
    new = np.arange(next_id, next_id + 300, dtype=np.uint64)
    rows = vecs(300, D, seed=83)
    idx.add_batch(rows, ids=new)
    model.add(new, rows)
    idx.delete_batch(new[:50])
    model.delete(new[:50])
    assert_matches(idx, model, "a reused row deleted before its flush")
    idx.flush()
    idx.delete_batch(new[50:100])
    model.delete(new[50:100])
    idx.flush()
    assert_matches(idx, model, "a reused row deleted after its flush")
    # 300 rows into free slots, 100 of them deleted again.
    assert idx.deleted_count() == deleted - 300 + 100
    assert idx.check().ok
    idx.close()
    with chassis.VectorIndex(path) as again:
        assert_matches(again, model, "reopened")
        assert again.check().ok


CHILD = """
import os, sys, numpy as np, chassis
path, log = sys.argv[1], sys.argv[2]
def say(s):
    with open(log, "a") as f:
        f.write(s + "\\n")
d = 16
rng = np.random.default_rng(5)
x = rng.standard_normal((40000, d)).astype(np.float32)
idx = chassis.VectorIndex(path, d)
idx.add_batch(x[:20000], ids=np.arange(20000))
idx.flush()
idx.delete_batch(np.arange(0, 20000, 4))
idx.consolidate()
idx.flush()
say("GO")
while True:
    idx.add_batch(x[20000:25000], ids=np.arange(20000, 25000))
    idx.rollback()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
def test_a_writer_killed_while_reusing_reopens_as_last_flushed(tmp_path, delay):
    path, log = str(tmp_path / "k.chassis"), tmp_path / "log"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    with killed_child([sys.executable, str(script), path, str(log)]) as proc:
        wait_for(proc, log, lambda lines: "GO" in lines, "the flush that frees slots")
        time.sleep(delay)
    assert "GO" in read_log(log)
    x = np.random.default_rng(5).standard_normal((40000, 16)).astype(np.float32)
    model = Model()
    keep = np.array([i for i in range(20000) if i % 4], dtype=np.uint64)
    model.add(keep, x[keep.astype(np.int64)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a log replayed
        idx = chassis.VectorIndex(path)
    with idx:
        assert idx.check().ok
        assert_matches(idx, model, "reopened after the kill")
        # A new writer frees the slots at its first consolidation; the batch then reuses them
        # all, and all is still exact.
        idx.consolidate()
        idx.flush()
        new = np.arange(20000, 25000, dtype=np.uint64)
        idx.add_batch(x[20000:25000], ids=new)
        model.add(new, x[20000:25000])
        idx.flush()
        assert idx.deleted_count() == 0
        assert_matches(idx, model, "after the batch the kill cut short")
        assert idx.check().ok


def test_reused_slots_leave_the_graph_whole(tmp_path):
    """A batch that reuses slots without consolidating first (its deletes are too few) must
    find them out of every list: the graph stays whole, and searches that walk it (small ef)
    find as much as on a fresh build of the same rows."""
    path, fresh = str(tmp_path / "g.chassis"), str(tmp_path / "f.chassis")
    idx, model, rng = started(path, seed=7)
    next_id = churn(idx, model, rng, N, seed=100)  # consolidates (and repairs), frees 600
    for r in range(3):
        next_id = churn(idx, model, rng, next_id, share=0.003, seed=101 + r)  # 9 deleted
        new = np.arange(next_id, next_id + 150, dtype=np.uint64)
        rows = vecs(150, D, seed=110 + r)
        idx.add_batch(rows, ids=new)
        model.add(new, rows)
        idx.flush()
        next_id += 150
    assert idx.deleted_count() < N // 5, "the batches reused no slot"
    report = idx.check()
    assert report.corrupt == [] and report.unreachable == [], report
    ids, rows = model.arrays()
    queries = vecs(200, D, seed=8)
    truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
    with chassis.VectorIndex(fresh, D) as f:
        f.add_batch(rows, ids=ids)
        got_fresh, _ = f.search_batch(queries, 10, ef=32)
    got, _ = idx.search_batch(queries, 10, ef=32)
    assert set(np.asarray(got).ravel().tolist()) <= set(ids.tolist())
    reused, built = recall_at_k(np.asarray(got), truth), recall_at_k(np.asarray(got_fresh), truth)
    assert reused >= built - 0.03, (reused, built)
    idx.close()


def test_a_file_that_reused_slots_refuses_a_rewind(tmp_path):
    path = str(tmp_path / "w.chassis")
    idx, model, rng = started(path, seed=6)
    seq, slots, _ = idx._committed()
    next_id = churn(idx, model, rng, N, seed=90)
    churn(idx, model, rng, next_id, seed=91)
    with pytest.raises(ValueError, match="slots were reused"):
        idx._rewind(slots, seq)
    assert_matches(idx, model, "after the refused rewind")
    idx.close()
