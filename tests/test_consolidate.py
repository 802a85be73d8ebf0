"""Consolidating deletes (`consolidate`, and `add_batch` doing it once deletes are many).

Oracles: brute-force k-NN in NumPy over the rows that should be live; the distances searches
compute (`_search_counters`) before and after; `check()`'s reachability walk; the file
reopened in a fresh process; a child killed (SIGKILL) while it consolidates; the level-0
lists read from the file as docs/format.md lays them out.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

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
from file_layout import NO_UPPER, Layout, current_header

N, D = 4000, 16


def live_rows(data: np.ndarray, gone: set[int]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array([i for i in range(len(data)) if i not in gone], dtype=np.uint64)
    return ids, data[ids.astype(np.int64)]


def recall_and_distances(idx, ids, rows, ef: int, seed: int = 11) -> tuple[float, float]:
    """Recall@10 against the brute force over the live rows, and distances per query."""
    queries = vecs(200, D, seed=seed)
    truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
    before = chassis._chassis._search_counters()
    got, _ = idx.search_batch(queries, 10, ef=ef, threads=1)
    after = chassis._chassis._search_counters()
    got = np.asarray(got)
    assert set(got.ravel().tolist()) <= set(ids.tolist()), "a deleted id was returned"
    return recall_at_k(got, truth), (after[1] - before[1]) / (after[0] - before[0])


@pytest.fixture
def filled(index_path):
    data = vecs(N, D, seed=4)
    idx = chassis.VectorIndex(index_path, D, chassis.IndexOptions(max_connections=8))
    idx.add_batch(data)
    idx.flush()
    yield idx, data
    idx.close()


@pytest.mark.parametrize(
    "options",
    [
        {"max_connections": 8},
        {"max_connections": 8, "metric": "cosine"},
        {"max_connections": 8, "quantization": "int8"},
        {"max_connections": 8, "precision": "int8"},
    ],
    ids=["euclidean", "cosine", "int8-codes-rerank", "codes-only"],
)
def test_after_consolidating_searches_skip_deleted_rows_and_find_the_live(index_path, options):
    data = vecs(N, D, seed=5)
    metric = options.get("metric", "euclidean")
    idx = chassis.VectorIndex(index_path, D, chassis.IndexOptions(**options))
    idx.add_batch(data)
    idx.flush()
    gone = set(np.random.default_rng(2).choice(N, size=N // 2, replace=False).tolist())
    idx.delete_batch(sorted(gone))
    assert idx.unconsolidated_count() == N // 2
    ids, rows = live_rows(data, gone)
    queries = vecs(100, D, seed=12)
    truth, _ = brute_force_knn(rows, queries, 10, metric, ids=ids)
    relinked = idx.consolidate()
    assert 0 < relinked <= len(ids)
    assert idx.unconsolidated_count() == 0
    assert idx.consolidate() == 0, "a second consolidation found deleted nodes still linked"
    got, _ = idx.search_batch(queries, 10, ef=96)
    got = np.asarray(got)
    assert set(got.ravel().tolist()) <= set(ids.tolist())
    floor = 0.9 if options.get("precision") == "int8" else 0.97
    assert recall_at_k(got, truth) >= floor
    report = idx.check()
    assert report.ok, report
    idx.close()


def level0(path) -> tuple[np.ndarray, ...]:
    """(id, delete marker, entry count, entries, upper lists' reference) of every committed
    slot, read from the file as docs/format.md lays it out (an index without codes). The
    reference is NO_UPPER for a node of level 0."""
    b = Path(path).read_bytes()
    layout = Layout(current_header(b))
    slots, words = layout.h.slots, layout.l0_words
    parts, first = [], 0
    for k in range(len(layout.segments)):
        take = min(1024 << k, slots - first)
        if take <= 0:
            break
        off, _, headers, records = layout.areas(k)
        h = np.frombuffer(b, np.uint64, take * 4, off + headers).reshape(take, 4)
        r = np.frombuffer(b, np.uint32, take * words, off + records).reshape(take, words)
        parts.append((h[:, 0], h[:, 2], r[:, 0] & 0xFFFF, r[:, 2:], h[:, 1]))
        first += take
    return tuple(np.concatenate(c) for c in zip(*parts))


def test_relinked_lists_hold_at_least_m_entries_where_candidates_allow(filled):
    # A list that held a deleted node keeps its live entries and takes the deleted nodes'
    # live neighbors in their place, filled to at least M (half of level 0's capacity) where
    # there are that many: lists left short made churned indexes find less per ef.
    idx, _ = filled
    m = 8
    gone = np.random.default_rng(5).choice(N, N // 5, replace=False)
    idx.delete_batch(gone)
    idx.flush()
    ids, marks, counts, lists, _ = level0(idx.path)
    dead = marks != 0
    assert set(ids[dead].tolist()) == set(gone.tolist())
    expect = {}
    for p in np.nonzero(~dead)[0]:
        mine = lists[p, : counts[p]]
        if not dead[mine].any():
            continue
        kept = set(mine[~dead[mine]].tolist())
        cands = {int(x) for d in mine[dead[mine]] for x in lists[d, : counts[d]] if not dead[x]}
        expect[p] = min(m, len(kept) + len(cands - kept - {p}))
    assert len(expect) > N // 2
    assert any(counts[p] < e for p, e in expect.items()), "no short list to fill: nothing tested"
    idx.consolidate()
    idx.flush()
    _, _, after, after_lists, _ = level0(idx.path)
    short = [(p, int(after[p]), e) for p, e in expect.items() if after[p] < e]
    assert not short, f"{len(short)} re-linked lists below M where candidates allowed: {short[:5]}"
    for p in expect:
        assert not dead[after_lists[p, : after[p]]].any(), "a deleted node left in a list"


BUILD = r"""
import sys, chassis, numpy as np
data = np.load(sys.argv[2])
opts = chassis.IndexOptions(max_connections=int(sys.argv[3]))
with chassis.VectorIndex(sys.argv[1], data.shape[1], opts) as idx:
    idx.add_batch(data)
    idx.flush()
"""


def test_nodes_of_upper_levels_take_long_edges_on_level_0(tmp_path):
    # Rows added into a populated graph find only their near neighbors on layer 0, and
    # consolidation re-links among those: a clustered set lost its edges between clusters
    # under churn. A node of level 1 or more also offers its layer-1 candidates, which lie
    # farther apart, to its level-0 list. Oracle: the clusters the rows were drawn from, and
    # each node's level and level-0 list read from the file; the same build with the switch
    # off (CHASSIS_UPPER_CANDIDATES=0) as the control.
    rng = np.random.default_rng(3)
    clusters, per, m = 20, 200, 8
    centers = rng.normal(size=(clusters, D)).astype(np.float32) * 10
    labels = rng.permutation(np.repeat(np.arange(clusters), per))
    data = centers[labels] + rng.normal(size=(len(labels), D)).astype(np.float32) * 0.3
    np.save(tmp_path / "rows.npy", data)
    shares = {}
    for name, env in (("on", {}), ("off", {"CHASSIS_UPPER_CANDIDATES": "0"})):
        path = tmp_path / f"{name}.chassis"
        assert_child_ok(run_python(BUILD, path, tmp_path / "rows.npy", m, env=env), name)
        ids, _, counts, lists, upper = level0(path)
        label = labels[ids.astype(np.int64)]
        across = [(label[lists[s, : counts[s]]] != label[s]).any() for s in range(len(ids))]
        across, high = np.array(across), upper != np.uint64(NO_UPPER)
        assert 200 < high.sum() < len(ids) // 2
        # (upper-level nodes with an edge into another cluster, the others)
        shares[name] = (across[high].mean(), across[~high].mean())
    # Measured: 0.44-0.45 against 0.20-0.22 with the layer-1 candidates, 0.20-0.22 for both
    # without them.
    assert shares["on"][0] >= 1.5 * shares["on"][1], shares
    assert shares["off"][0] < 1.2 * shares["off"][1], shares


def test_consolidating_cuts_the_distances_a_search_computes(filled):
    idx, data = filled
    gone = set(range(0, N, 2))
    idx.delete_batch(sorted(gone))
    ids, rows = live_rows(data, gone)
    recall_before, dist_before = recall_and_distances(idx, ids, rows, ef=32)
    idx.consolidate()
    recall_after, dist_after = recall_and_distances(idx, ids, rows, ef=32)
    # Half the nodes deleted: walking them was about half of the work.
    assert dist_after < 0.8 * dist_before, (dist_before, dist_after)
    assert recall_after >= 0.9, (recall_before, recall_after)


def test_add_batch_consolidates_first_once_deletes_are_many(filled):
    idx, data = filled
    few = list(range(0, 100))
    idx.delete_batch(few)
    idx.add_batch(vecs(10, D, seed=20), ids=range(N, N + 10))
    assert idx.unconsolidated_count() == 100, "a sixteenth of the index was not due yet"
    many = list(range(100, 100 + N // 8))
    idx.delete_batch(many)
    idx.add_batch(vecs(10, D, seed=21), ids=range(N + 10, N + 20))
    assert idx.unconsolidated_count() == 0
    assert idx.consolidate() == 0, "the batch left deleted nodes linked"
    gone = set(few) | set(many)
    ids, rows = live_rows(data, gone)
    extra = np.concatenate([vecs(10, D, seed=20), vecs(10, D, seed=21)])
    ids = np.concatenate([ids, np.arange(N, N + 20, dtype=np.uint64)])
    rows = np.concatenate([rows, extra])
    recall, _ = recall_and_distances(idx, ids, rows, ef=96)
    assert recall >= 0.97


def test_consolidation_is_durable_at_flush_and_undone_by_rollback(filled, index_path):
    idx, data = filled
    idx.delete_batch(range(0, N, 3))
    idx.flush()
    queries = vecs(30, D, seed=13)
    before, _ = idx.search_batch(queries, 10, ef=64)
    assert idx.consolidate() > 0
    idx.rollback()
    assert idx.unconsolidated_count() == idx.deleted_count() == len(range(0, N, 3))
    again, _ = idx.search_batch(queries, 10, ef=64)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(before), "rollback kept links")
    assert idx.consolidate() > 0
    idx.flush()
    after, _ = idx.search_batch(queries, 10, ef=64)
    idx.close()
    proc = run_python(
        """
        import sys, chassis, numpy as np
        sys.path.insert(0, sys.argv[2])
        from conftest import vecs
        idx = chassis.VectorIndex(sys.argv[1])
        got, _ = idx.search_batch(vecs(30, 16, seed=13), 10, ef=64)
        print(idx.consolidate(), idx.check().ok)
        np.save(sys.argv[3], np.asarray(got))
        """,
        index_path,
        str(Path(__file__).parent),
        index_path + ".npy",
    )
    assert_child_ok(proc, "reopening a consolidated index")
    assert proc.stdout.split() == ["0", "True"], "the reopened file still links deleted nodes"
    np.testing.assert_array_equal(np.load(index_path + ".npy"), np.asarray(after))


def test_readers_refuse_to_consolidate(filled, index_path):
    # Oracles: the file's bytes before and after the refused call, and the writer, which still
    # finds the deletes to consolidate.
    idx, _ = filled
    assert idx.delete_batch(np.arange(0, N, 7)) > 0
    idx.flush()
    before = Path(index_path).read_bytes()
    reader = chassis.VectorIndex(index_path, read_only=True)
    with pytest.raises(chassis.ReadOnlyError):
        reader.consolidate()
    reader.close()
    assert Path(index_path).read_bytes() == before
    assert idx.consolidate() > 0


CHILD = r"""
import os, sys, chassis, numpy as np
path, log = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(3)
data = rng.standard_normal((20000, 16)).astype(np.float32)
idx = chassis.VectorIndex(path, 16, chassis.IndexOptions(max_connections=8, ef_construction=64))
idx.add_batch(data)
idx.delete_batch(range(0, 20000, 4))
idx.flush()
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
idx.consolidate()
idx.flush()
os.write(fd, b"FLUSHED\n")
idx.delete_batch(range(1, 20000, 4))
os.write(fd, b"GO\n")
while True:
    idx.consolidate()
    idx.rollback()
    idx.delete_batch(range(1, 20000, 4))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15])
def test_a_writer_killed_while_consolidating_reopens_as_last_flushed(tmp_path, delay):
    path, log = str(tmp_path / "c.chassis"), tmp_path / "log"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    with killed_child([sys.executable, str(script), path, str(log)]) as proc:
        wait_for(proc, log, lambda lines: "GO" in lines, "the second consolidation")
        time.sleep(delay)
    assert "GO" in read_log(log)
    data = np.random.default_rng(3).standard_normal((20000, 16)).astype(np.float32)
    gone = set(range(0, 20000, 4))
    ids, rows = live_rows(data, gone)
    with warnings.catch_warnings():
        # (a log replayed, unless the kill came between a rollback and the next delete)
        warnings.simplefilter("ignore", RuntimeWarning)
        idx = chassis.VectorIndex(path)
    with idx:
        assert len(idx) == len(ids), "the unflushed deletes survived the kill"
        assert idx.check().ok
        queries = vecs(100, D, seed=14)
        truth, _ = brute_force_knn(rows, queries, 10, "euclidean", ids=ids)
        got, _ = idx.search_batch(queries, 10, ef=96)
        assert recall_at_k(np.asarray(got), truth) >= 0.97
        # The flushed consolidation is what the file holds: nothing is left to re-link.
        assert idx.consolidate() == 0


def test_deletes_an_earlier_writer_left_are_taken_out_by_the_next_pass(filled, index_path):
    """Oracle: the file reopened; what is left to re-link shows in `consolidate()`'s count."""
    idx, data = filled
    idx.delete_batch(range(0, N, 5))
    idx.flush()
    idx.close()
    with chassis.VectorIndex(index_path) as again:
        assert again.unconsolidated_count() == 0, "the file does not record them"
        assert again.consolidate() > 0
        assert again.consolidate() == 0
        ids, rows = live_rows(data, set(range(0, N, 5)))
        recall, _ = recall_and_distances(again, ids, rows, ef=96)
        assert recall >= 0.97
