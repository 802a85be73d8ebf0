"""`chassis.ray` on a local Ray cluster made here: three simulated nodes
(`ray.cluster_utils.Cluster`), shut down at the end.

Run by tests/test_ray.py inside a network namespace with only the loopback device up (Ray
binds to every interface), as ``python -m pytest tests/ray_suite.py``; not collected by the
main run (its name is not test_*.py).

Oracles: each shard's file opened here as an `IndexReader` and searched on its own, the
merge done again with plain sorting; brute-force k-NN in NumPy; a single `VectorIndex` on the
same data; a second driver process; shard workers killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import chassis
import numpy as np
import pytest
import ray
from chassis.ray import (
    MANIFEST,
    ShardedIndex,
    ShardedSearcher,
    ShardFailedError,
    ShardUnavailableError,
    StaleWriteError,
    shard_of,
)
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

NO_ID = 2**64 - 1
# Faults injected into chassis.ray's tasks (`chassis.ray._fault`): a file named after a point
# in this folder makes the first worker to reach that point die. Set before the cluster
# starts, so that every worker has it.
FAULTS = Path(tempfile.mkdtemp(prefix="chassis-faults-"))
os.environ["CHASSIS_RAY_FAULTS"] = str(FAULTS)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        c.add_node(num_cpus=1)
    ray.init(address=c.address)
    yield c
    ray.shutdown()
    c.shutdown()


def _fired(point: str) -> None:
    """The fault armed at `point` fired (its file was taken); cleared for the next test."""
    fired = FAULTS / (point + ".fired")
    assert fired.exists(), f"the fault {point} did not fire"
    fired.unlink()


def rows(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def clustered(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((20, d)) * 3
    return (centers[rng.integers(0, 20, n)] + rng.standard_normal((n, d))).astype(np.float32)


def exact(data: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int):
    d = np.sqrt(((q[:, None, :] - data[None, :, :]) ** 2).sum(-1))
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return ids[order], np.take_along_axis(d, order, axis=1)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def merge_by_hand(parts, k):
    """The oracle merge: every (distance, id) pair of a query, sorted, the first k."""
    nq = len(parts[0][0])
    out = []
    for q in range(nq):
        pairs = sorted(
            (float(d), int(i)) for ids, dist in parts for i, d in zip(ids[q], dist[q]) if i != NO_ID
        )
        out.append([i for _, i in pairs[:k]])
    return np.array(out, dtype=np.uint64)


def test_search_is_the_merge_of_its_shards_and_exact_search_is_brute_force(cluster, tmp_path):
    data, queries = rows(3000, 16, 1), rows(40, 16, 2)
    index = ShardedIndex(tmp_path, 16, shards=3)
    ids = index.add_batch(data)
    index.flush()
    assert len(index) == 3000 and np.array_equal(index.ids(), ids)
    assert len({s["node_id"] for s in index.shards}) >= 2, (
        "the shards are not spread over the nodes"
    )

    got, dist = index.search_batch(queries, 10, ef=32)
    alone = [chassis.IndexReader(s["path"]).search_batch(queries, 10, ef=32) for s in index.shards]
    assert np.array_equal(got, merge_by_hand(alone, 10))

    got, dist = index.search_batch(queries, 10, ef=3000)
    want, want_d = exact(data, ids, queries, 10)
    assert np.array_equal(got, want)
    np.testing.assert_allclose(dist, want_d, rtol=1e-4)
    one = index.search(queries[0], 5)
    assert [r.id for r in one] == list(want[0][:5])

    # Filters: allowed ids are routed to their shards; excluded ones never come back.
    allowed = ids[::7]
    got, _ = index.search_batch(queries, 10, allowed=allowed, ef=3000)
    want, _ = exact(data[::7], allowed, queries, 10)
    assert np.array_equal(got, want)
    got, _ = index.search_batch(queries, 10, excluded=want[:, 0], ef=3000)
    assert not np.isin(got, want[:, 0]).any()
    index.close()


def test_recall_is_at_least_a_single_indexs_on_the_same_data(cluster, tmp_path):
    data, queries = clustered(6000, 24, 3), clustered(100, 24, 4)
    truth, _ = exact(data, np.arange(6000, dtype=np.uint64), queries, 10)
    single = chassis.VectorIndex(None, 24)
    single.add_batch(data)
    sharded = ShardedIndex(tmp_path, 24, shards=3)
    sharded.add_batch(data)
    for ef in (10, 20):
        r_single = recall(single.search_batch(queries, 10, ef=ef)[0], truth)
        r_sharded = recall(sharded.search_batch(queries, 10, ef=ef)[0], truth)
        assert r_sharded >= r_single, (ef, r_sharded, r_single)
    sharded.close()


def test_ids_live_in_the_shard_of_their_hash_and_are_unique_across_shards(cluster, tmp_path):
    data = rows(300, 8, 5)
    ids = np.arange(100, 400, dtype=np.uint64)
    index = ShardedIndex(tmp_path, 8, shards=3)
    index.add_batch(data, ids)
    index.flush()
    for s in index.shards:
        held = chassis.IndexReader(s["path"]).ids()
        assert np.array_equal(np.sort(held), ids[shard_of(ids, 3) == s["number"]])
    # An id in use in whichever shard holds it: the whole batch is refused.
    with pytest.raises(chassis.IdInUseError):
        index.add_batch(rows(2, 8, 6), [5000, 150])
    assert 5000 not in index and len(index) == 300
    with pytest.raises(chassis.IdInUseError):
        index.add_batch(rows(2, 8, 6), [6000, 6000])
    with pytest.raises(chassis.IdInUseError):
        index.add(data[0], 150)
    with pytest.raises(chassis.DimensionMismatchError):
        index.add_batch(rows(2, 9, 6))
    bad = rows(2, 8, 6)
    bad[1, 3] = np.nan
    with pytest.raises(chassis.InvalidArgumentError):
        index.add_batch(bad)
    assert index.add(data[0]) == 400  # ids go on after the largest
    assert index.delete(150) and 150 not in index and not index.delete(150)
    np.testing.assert_array_equal(index.get(151), data[51])
    assert index.get(150) is None
    index.close()


def test_the_manifest_reopens_the_index_after_the_driver_restarts(cluster, tmp_path):
    data = rows(1000, 8, 7)
    np.save(tmp_path / "data.npy", data)
    driver = f"""
import numpy as np, ray
from chassis.ray import ShardedIndex
ray.init(address={cluster.address!r})
data = np.load({str(tmp_path / "data.npy")!r})
index = ShardedIndex({str(tmp_path / "idx")!r}, 8, shards=3)
index.add_batch(data[:800])
index.flush()
index.add_batch(data[800:])  # never flushed: gone with this driver
"""
    subprocess.run([sys.executable, "-c", driver], check=True, timeout=120)
    index = ShardedIndex.open(tmp_path / "idx")
    assert len(index) == 800
    got, _ = index.search_batch(data[:20], 1, ef=800)
    assert np.array_equal(got[:, 0], np.arange(20))
    assert index.add(data[900]) == 800  # the next id after what was flushed
    with pytest.raises(chassis.DimensionMismatchError):
        ShardedIndex(tmp_path / "idx", 9)
    with pytest.raises(chassis.IndexNotFoundError):
        ShardedIndex.open(tmp_path / "nothing")
    index.close()


def _kill_later(index: ShardedIndex, shard: int, after: float) -> threading.Thread:
    pid = ray.get(index.shard_actors()[shard].where.remote())["pid"]

    def kill():
        time.sleep(after)
        os.kill(pid, signal.SIGKILL)

    t = threading.Thread(target=kill)
    t.start()
    return t


def test_a_shard_killed_during_searches_restarts_and_the_searches_go_on(cluster, tmp_path):
    data, queries = rows(2000, 16, 8), rows(30, 16, 9)
    index = ShardedIndex(tmp_path, 16, shards=2, timeout=60)
    index.add_batch(data)
    index.flush()
    want = index.search_batch(queries, 10)
    before = ray.get(index.shard_actors()[1].where.remote())["pid"]
    killer = _kill_later(index, 1, 0.3)
    deadline = time.monotonic() + 6
    n = 0
    # Searches for 6 s, and at least 3 (a restart on a loaded machine can take most of that).
    while time.monotonic() < deadline or n < 3:
        got = index.search_batch(queries, 10)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        n += 1
    killer.join()
    after = ray.get(index.shard_actors()[1].where.remote())["pid"]
    assert after != before, "the shard was not restarted"
    index.close()


def test_reads_wait_for_a_shard_whose_restart_is_slow(cluster, tmp_path):
    """Ray's own retries of a read are spent long before a slow restart (a large file, a
    loaded node) ends: reads are asked again until `timeout`, and answer."""
    data, queries = rows(1000, 16, 20), rows(20, 16, 21)
    index = ShardedIndex(tmp_path, 16, shards=2, timeout=60)
    index.add_batch(data)
    index.flush()
    want, _ = exact(data, np.arange(1000, dtype=np.uint64), queries, 5)
    (FAULTS / "shard-start").write_text("4")
    pid = ray.get(index.shard_actors()[1].where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)  # Ray sees the death: the restart runs, the fault's pause in it
    got, _ = index.search_batch(queries, 5, ef=1000)
    _fired("shard-start")
    assert np.array_equal(got, want)
    assert len(index) == 1000 and 999 in index
    # A restart longer than `timeout`: reported, with what to do, once the timeout is spent.
    (FAULTS / "shard-start").write_text("8")
    pid = ray.get(index.shard_actors()[1].where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    index.timeout = 2
    with pytest.raises(ShardUnavailableError, match="help: retry"):
        index.search_batch(queries, 5)
    index.timeout = 60
    got, _ = index.search_batch(queries, 5, ef=1000)
    _fired("shard-start")
    assert np.array_equal(got, want)
    index.close()


def test_a_first_start_slower_than_the_timeout_is_waited_for(cluster, tmp_path):
    """A shard actor's first start, a new process, can outlast a short `timeout` on a loaded
    node: it is waited for, and the index works. Oracle: brute force."""
    data, queries = rows(500, 8, 22), rows(10, 8, 23)
    (FAULTS / "shard-start").write_text("4")
    index = ShardedIndex(tmp_path, 8, shards=2, timeout=2)
    _fired("shard-start")
    index.timeout = 60  # the rest is not what is tested: a loaded machine may be slow there
    index.add_batch(data)
    index.flush()
    got, _ = index.search_batch(queries, 5, ef=500)
    assert np.array_equal(got, exact(data, np.arange(500, dtype=np.uint64), queries, 5)[0])
    index.close()


def test_writes_after_a_slow_restart_fail_as_a_lost_shard(cluster, tmp_path):
    """A shard killed holding unflushed rows, its restart slower than Ray's own retries: the
    next add with ids (which first asks every shard which ids it holds) and the next flush
    wait for it, and fail as a shard that lost its writes does, not as one out of reach:
    `ShardFailedError`, every shard back at the last flush. Oracle: the ids of that flush."""
    data = rows(400, 8, 24)
    index = ShardedIndex(tmp_path, 8, shards=2, timeout=60)
    index.add_batch(data[:200])
    index.flush()
    for write in ("add_batch", "flush"):
        index.add_batch(data[200:300], ids=np.arange(200, 300))  # unflushed, in both shards
        (FAULTS / "shard-start").write_text("4")
        pid = ray.get(index.shard_actors()[1].where.remote())["pid"]
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)  # Ray sees the death: the restart runs, the fault's pause in it
        with pytest.raises(ShardFailedError, match="shard 1 "):
            if write == "add_batch":
                index.add_batch(data[300:], ids=np.arange(300, 400))
            else:
                index.flush()
        _fired("shard-start")
        assert np.array_equal(np.sort(index.ids()), np.arange(200)), write
    index.add_batch(data[200:], ids=np.arange(200, 400))
    index.flush()
    assert np.array_equal(np.sort(index.ids()), np.arange(400))
    index.close()


def _restarted(index: ShardedIndex, shard: int, old_pid: int) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            pid = ray.get(index.shard_actors()[shard].where.remote(), timeout=10)["pid"]
            if pid != old_pid:
                return pid
        except ray.exceptions.RayError:
            pass
        time.sleep(0.1)
    raise AssertionError("the shard did not restart")


def test_a_shard_that_dies_holding_unflushed_writes_fails_the_flush_not_silently(cluster, tmp_path):
    d = 16
    b0, b1 = rows(600, d, 20), rows(600, d, 21)
    index = ShardedIndex(tmp_path, d, shards=2, timeout=60)
    index.add_batch(b0)
    index.flush()
    index.add_batch(b1)  # unflushed, in both shards
    pid = ray.get(index.shard_actors()[1].where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    _restarted(index, 1, pid)
    with pytest.raises(ShardFailedError, match="shard 1 .*last flush") as e:
        index.flush()
    assert isinstance(e.value, OSError) and isinstance(e.value, chassis.ChassisError)
    # Every shard is back at the last flush: b1 is gone from both, not just from shard 1.
    assert len(index) == 600 and np.array_equal(index.ids(), np.arange(600))
    assert all(
        len(chassis.IndexReader(s["path"])) == n
        for s, n in zip(index.shards, np.bincount(shard_of(np.arange(600), 2)))
    )
    index.add_batch(b1, np.arange(600, 1200))  # the next calls work
    index.flush()
    assert len(index) == 1200
    index.close()


def test_a_shard_killed_during_a_write_loop_loses_nothing_flushed(cluster, tmp_path):
    d = 16
    index = ShardedIndex(tmp_path, d, shards=2, timeout=60)
    flushed: list[np.ndarray] = []
    failures = []
    killer = _kill_later(index, 1, 0.5)
    for b in range(40):
        batch = rows(300, d, 100 + b)
        ids = np.arange(b * 300, (b + 1) * 300, dtype=np.uint64)
        try:
            index.add_batch(batch, ids)
            index.flush()
            flushed.append(ids)
        except ShardFailedError as e:
            failures.append(str(e))
    killer.join()
    # A kill between a flush and the next write loses nothing and raises nothing; one while
    # the shard held a batch fails that write or flush, naming the shard.
    assert all("shard 1" in f for f in failures), failures
    # Every row of a flush that returned is there, and searchable; the next calls worked.
    held = set(index.ids().tolist())
    assert set(np.concatenate(flushed).tolist()) <= held
    assert len(flushed) >= 40 - len(failures) > 30
    for ids in (flushed[0], flushed[-1]):
        batch = rows(300, d, 100 + int(ids[0]) // 300)
        got, _ = index.search_batch(batch[:5], 1, ef=200)
        assert np.array_equal(got[:, 0], ids[:5])
    index.close()


def test_replicas_serve_searches_and_see_each_flush(cluster, tmp_path):
    data, queries = rows(1500, 8, 10), rows(20, 8, 11)
    index = ShardedIndex(tmp_path, 8, shards=2, replicas=1)
    index.add_batch(data[:1000])
    assert index.search_batch(queries, 5)[0].max() == NO_ID  # nothing flushed yet
    index.flush()
    want, _ = exact(data[:1000], np.arange(1000, dtype=np.uint64), queries, 5)
    assert np.array_equal(index.search_batch(queries, 5, ef=1000)[0], want)
    index.add_batch(data[1000:])
    assert index.search_batch(queries, 5, ef=1500)[0].max() < 1000  # readers: last flush
    index.flush()
    want, _ = exact(data, np.arange(1500, dtype=np.uint64), queries, 5)
    assert np.array_equal(index.search_batch(queries, 5, ef=1500)[0], want)
    index.close()


@ray.remote
def _search_through(searcher, queries, k, ef):
    return searcher.search_batch(queries, k, ef=ef)


@ray.remote(num_cpus=0)
class _Service:
    """Stands in for a Ray Serve replica: holds a searcher, answers queries."""

    def __init__(self, searcher):
        self.searcher = searcher

    def answer(self, queries, k):
        return self.searcher.search_batch(queries, k, ef=2000), len(self.searcher)


def test_a_pickled_searcher_answers_in_tasks_and_services(cluster, tmp_path):
    # Oracles: brute force over the flushed rows; the index's own answers; pickle itself.
    data, queries = rows(2000, 8, 41), rows(30, 8, 42)
    index = ShardedIndex(tmp_path, 8, shards=3)
    ids = index.add_batch(data)
    index.flush()
    with pytest.raises(TypeError, match="searcher"):
        pickle.dumps(index)
    searcher = index.searcher()
    again = pickle.loads(pickle.dumps(searcher))
    assert len(again) == 2000 and 7 in again and np.array_equal(again.get(7), data[7])
    assert not hasattr(searcher, "add_batch") and not hasattr(searcher, "flush")

    want, want_d = exact(data, ids, queries, 10)
    # Several tasks at once, each with its own copy of the handle.
    results = ray.get([_search_through.remote(searcher, queries, 10, 2000) for _ in range(4)])
    for got, dist in results:
        assert np.array_equal(got, want)
        np.testing.assert_allclose(dist, want_d, rtol=1e-4)
    service = _Service.remote(searcher)
    (got, _), count = ray.get(service.answer.remote(queries, 10))
    assert np.array_equal(got, want) and count == 2000
    # Without replicas it searches the writers, as the index does: unflushed rows too.
    extra = rows(1, 8, 43)
    index.add_batch(extra, ids=[5000])
    (got, _), count = ray.get(service.answer.remote(extra, 1))
    assert got[0, 0] == 5000 and count == 2001
    index.close()
    with pytest.raises(ShardUnavailableError):
        ray.get(service.answer.remote(queries, 10))
    with pytest.raises(chassis.IndexClosedError):
        index.searcher()


def test_searches_go_round_every_replica_of_every_shard(cluster, tmp_path):
    # With as many replicas as shards, each shard used to hit the same replica every time.
    # Oracle: the searches each replica's actor counted, and brute force.
    data, queries = rows(600, 8, 44), rows(10, 8, 45)
    index = ShardedIndex(tmp_path, 8, shards=2, replicas=2)
    index.add_batch(data)
    index.flush()
    searcher = index.searcher()
    want, _ = exact(data, np.arange(600, dtype=np.uint64), queries, 5)
    for handle in (index, searcher):
        for _ in range(6):
            assert np.array_equal(handle.search_batch(queries, 5, ef=600)[0], want)
    counts = [ray.get(r.stats.remote())["searches"] for s in index._shards for r in s.replicas]
    assert len(counts) == 4 and min(counts) >= 2, counts
    index.close()


def test_compact_and_backup_cover_every_shard(cluster, tmp_path):
    # Oracles: a dict of what each id holds, brute force over it, each shard's file opened
    # here, and the backup opened as an index of its own.
    data, new, queries = rows(3000, 8, 46), rows(200, 8, 47), rows(20, 8, 48)
    index = ShardedIndex(tmp_path / "idx", 8, shards=3)
    index.add_batch(data)
    gone = np.arange(0, 3000, 3, dtype=np.uint64)
    index.flush()
    assert index.delete_batch(gone) == 1000
    index.compact()  # flushes the deletes first
    want = {i: data[i] for i in range(3000) if i % 3}
    for s in index.shards:
        with chassis.IndexReader(s["path"]) as r:
            assert r.deleted_count() == 0
            assert sorted(int(i) for i in r.ids()) == sorted(
                i for i in want if shard_of([i], 3)[0] == s["number"]
            )
    live = np.array(sorted(want), dtype=np.uint64)
    truth, _ = exact(np.stack([want[int(i)] for i in live]), live, queries, 10)
    assert np.array_equal(index.search_batch(queries, 10, ef=3000)[0], truth)

    index.add_batch(new, ids=np.arange(5000, 5200))  # in the backup: it flushes first
    index.backup(tmp_path / "copy")
    want.update({5000 + i: v for i, v in enumerate(new)})
    index.add_batch(rows(5, 8, 49), ids=np.arange(9000, 9005))
    index.flush()  # after the backup: not in it
    with pytest.raises(chassis.InvalidArgumentError):
        index.backup(tmp_path / "idx")
    index.close()

    copy = ShardedIndex.open(tmp_path / "copy")
    assert np.array_equal(copy.ids(), np.array(sorted(want), dtype=np.uint64))
    live = copy.ids()
    truth, _ = exact(np.stack([want[int(i)] for i in live]), live, queries, 10)
    assert np.array_equal(copy.search_batch(queries, 10, ef=3000)[0], truth)
    assert all(Path(s["path"]).parent == (tmp_path / "copy").resolve() for s in copy.shards)
    copy.close()


def test_a_replica_that_died_is_searched_around_and_masks_filter(cluster, tmp_path):
    # Oracles: brute force over the flushed rows; the actors killed here for good.
    data, queries = rows(900, 8, 71), rows(12, 8, 72)
    index = ShardedIndex(tmp_path, 8, shards=2, replicas=2, timeout=30)
    index.add_batch(data)
    index.flush()
    want, _ = exact(data, np.arange(900, dtype=np.uint64), queries, 5)
    for r in index._shards[0].replicas:  # every replica of shard 0: its writer answers
        ray.kill(r, no_restart=True)
    ray.kill(index._shards[1].replicas[0], no_restart=True)  # shard 1: its other replica
    for _ in range(4):
        assert np.array_equal(index.search_batch(queries, 5, ef=900)[0], want)
    part = index.search_batch(queries, 5, ef=900, allow_partial=True)
    assert part.missing == [] and np.array_equal(part.ids, want)
    # A boolean mask is indexed by id, as for VectorIndex (not ids 0 and 1).
    mask = np.zeros(900, dtype=bool)
    mask[::5] = True
    got, _ = index.search_batch(queries, 5, allowed=mask, ef=900)
    want, _ = exact(data[::5], np.arange(0, 900, 5, dtype=np.uint64), queries, 5)
    assert np.array_equal(got, want)
    with pytest.raises(chassis.InvalidArgumentError, match="non-negative"):
        index.search_batch(queries, 5, allowed=[3, -1])
    # A set is its ids; one list per query is refused, not read as one set of them all.
    got, _ = index.search_batch(queries, 5, allowed=set(range(0, 900, 5)), ef=900)
    assert np.array_equal(got, want)
    for per_query in ([[1, 2], [3, 4]], [[1, 2], [3]]):
        with pytest.raises(chassis.InvalidArgumentError, match="one set of ids"):
            index.search_batch(queries[:2], 5, allowed=per_query)
    index.close()


def test_from_dataset_builds_the_shards_in_parallel(cluster, tmp_path):
    data = rows(3000, 12, 12)
    ds = ray.data.from_items([{"id": 10_000 + i, "v": data[i]} for i in range(3000)])
    index = ShardedIndex.from_dataset(
        ds, tmp_path / "a", vector_column="v", id_column="id", shards=3, batch_size=500
    )
    assert len(index) == 3000
    got, _ = index.search_batch(data[:10], 1, ef=3000)
    assert np.array_equal(got[:, 0], 10_000 + np.arange(10))
    index.close()
    # Without ids: unique ones from a counter; the rows all there.
    index = ShardedIndex.from_dataset(
        ray.data.from_numpy(data), tmp_path / "b", vector_column="data", shards=2
    )
    ids = index.ids()
    assert len(ids) == 3000 == len(np.unique(ids))
    got, _ = index.search_batch(data[:10], 1, ef=3000)
    vecs = np.stack([index.get(int(i)) for i in got[:, 0]])
    np.testing.assert_array_equal(vecs, data[:10])
    index.close()


@pytest.mark.parametrize("given_ids", [True, False], ids=["ids given", "ids made"])
def test_a_dataset_task_run_again_adds_nothing_twice(cluster, tmp_path, given_ids):
    # The fault: the worker of one batch dies right after the shards took its rows, and Ray
    # Data runs the task again. Oracles: the dataset's own rows by their column `n`, the ids
    # returned for them, each id's vector read back, and the count.
    data = rows(3000, 8, 61)
    index = ShardedIndex(tmp_path, 8, shards=2)
    items = [{"n": i, "v": data[i], **({"id": 7000 + i} if given_ids else {})} for i in range(3000)]
    (FAULTS / "after-write").touch()
    out = index.add_dataset(
        ray.data.from_items(items),
        vector_column="v",
        id_column="id" if given_ids else None,
        batch_size=500,
    )
    _fired("after-write")
    index.flush()
    id_of = {int(r["n"]): int(r["id"]) for r in out.iter_rows()}
    assert sorted(id_of) == list(range(3000))
    assert len(set(id_of.values())) == 3000 and len(index) == 3000
    assert np.array_equal(index.ids(), np.array(sorted(id_of.values()), dtype=np.uint64))
    if given_ids:
        assert all(id_of[n] == 7000 + n for n in id_of)
    for n in range(0, 3000, 97):
        np.testing.assert_array_equal(index.get(id_of[n]), data[n])
    index.close()


def test_dataset_batches_that_differ_only_in_text_are_all_added(cluster, tmp_path):
    # Two batches with the same vectors, told apart only by a string column: not a retry.
    # Oracle: the count, and the ids returned per text.
    data = rows(500, 8, 91)
    items = [{"text": f"row {i}", "v": data[i % 500]} for i in range(1000)]
    index = ShardedIndex(tmp_path, 8, shards=2)
    out = index.add_dataset(ray.data.from_items(items), vector_column="v", batch_size=500)
    index.flush()
    id_of = {r["text"]: int(r["id"]) for r in out.iter_rows()}
    assert len(id_of) == 1000 and len(set(id_of.values())) == 1000 and len(index) == 1000
    index.close()


def test_rows_of_a_dataset_that_a_restarted_shard_lost_fail_the_flush(cluster, tmp_path):
    # Oracles: the flush's error, each shard's file opened here (every shard at its last
    # flush, none holding part of the dataset), and rows the driver's checks refuse (NaN)
    # stored nowhere.
    data = rows(2000, 8, 51)
    index = ShardedIndex(tmp_path, 8, shards=2, timeout=60)
    index.add_batch(data[:100])
    index.flush()
    ds = ray.data.from_items([{"id": 5000 + i, "v": data[i]} for i in range(2000)])
    index.add_dataset(ds, vector_column="v", id_column="id", batch_size=500)
    assert len(index) == 2100
    pid = ray.get(index.shard_actors()[1].where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    _restarted(index, 1, pid)
    with pytest.raises(ShardFailedError, match="shard 1 "):
        index.flush()
    assert len(index) == 100
    for s, n in zip(index.shards, np.bincount(shard_of(np.arange(100), 2))):
        with chassis.IndexReader(s["path"]) as r:
            assert len(r) == n
    bad = data[:10].copy()
    bad[3, 2] = np.nan
    with pytest.raises(chassis.InvalidArgumentError, match="row 3 holds NaN"):
        index.add_dataset(ray.data.from_items([{"v": b} for b in bad]), vector_column="v")
    assert len(index) == 100
    index.close()


def test_batch_deletes_and_upserts_go_to_the_shards_of_their_ids(cluster, tmp_path):
    data, new, queries = rows(1200, 8, 21), rows(300, 8, 22), rows(20, 8, 23)
    index = ShardedIndex(tmp_path, 8, shards=3)
    index.add_batch(data)
    index.flush()
    gone = np.arange(0, 1200, 4, dtype=np.uint64)  # 300 ids
    # Repeated and absent ids are skipped; the count is of rows that were there.
    asked = np.concatenate([gone, gone[:5], np.array([5000], dtype=np.uint64)])
    assert index.delete_batch(asked) == 300
    assert index.delete_batch(gone[:10]) == 0
    # 150 present ids replaced, 150 new ones added.
    ids = np.concatenate([np.arange(1, 1200, 4)[:150], np.arange(2000, 2150)]).astype(np.uint64)
    index.upsert(new, ids)
    index.flush()

    # The oracle: a dict of what each id must hold now.
    want = {i: data[i] for i in range(1200) if i % 4}
    want.update({int(i): v for i, v in zip(ids, new)})
    assert len(index) == len(want) == 1050
    for s in index.shards:  # each shard's file holds exactly its ids, with their vectors
        with chassis.IndexReader(s["path"]) as r:
            held = sorted(int(i) for i in r.ids())
            assert held == sorted(i for i in want if shard_of([i], 3)[0] == s["number"])
            for i in held[:40]:
                assert np.array_equal(r.get(i), want[i])
    all_ids = np.array(sorted(want), dtype=np.uint64)
    truth, _ = exact(np.stack([want[int(i)] for i in all_ids]), all_ids, queries, 5)
    got, _ = index.search_batch(queries, 5, ef=1200)
    assert np.array_equal(got, truth)
    with pytest.raises(chassis.InvalidArgumentError):
        index.upsert(new[:2], [-1, 3])
    # A boolean among the ids is refused, not read as 1 (id 1 was replaced above: still there),
    # and is not an id for `in`; a list of booleans is a mask, as for a VectorIndex.
    with pytest.raises(chassis.ArgumentTypeError):
        index.delete_batch([True, 5])
    with pytest.raises(chassis.ArgumentTypeError):
        index.search_batch(queries, 5, allowed=[True, 5])
    assert 1 in index and True not in index and len(index) == 1050
    mask = [i % 2 == 1 for i in range(1200)]
    got, _ = index.search_batch(queries, 5, allowed=mask, ef=1200)
    assert (got % 2 == 1).all()
    index.close()


def test_an_upsert_one_shard_refuses_leaves_every_shard_as_it_was(cluster, tmp_path):
    # Half precision refuses values beyond 65,504 in the shard, not on the driver: one shard's
    # part of the upsert fails after the others applied theirs, which must be put back.
    data = rows(600, 8, 31)
    index = ShardedIndex(tmp_path, 8, {"precision": "half"}, shards=3)
    index.add_batch(data)
    index.flush()
    ids = np.array([1, 2, 3, 4, 5, 6, 1000, 1001, 1002], dtype=np.uint64)
    assert len(set(shard_of(ids, 3))) == 3
    before = {int(i): index.get(int(i)) for i in ids[:6]}
    new = rows(9, 8, 32)
    new[0, 0] = 1e6  # id 1's shard refuses it
    with pytest.raises(chassis.InvalidArgumentError):
        index.upsert(new, ids)
    for i, v in before.items():
        assert np.array_equal(index.get(i), v), i
    assert not any(int(i) in index for i in ids[6:])
    assert len(index) == 600
    index.flush()
    applied = 0  # rows another shard took, then gave back: it did run, and was undone
    for s in index.shards:  # and so each shard's file, flushed
        with chassis.IndexReader(s["path"]) as r:
            assert sorted(int(i) for i in r.ids()) == sorted(
                i for i in range(600) if shard_of([i], 3)[0] == s["number"]
            )
            applied += r.deleted_count()
    assert applied > 0
    index.close()


def test_writes_are_fenced_by_the_rollbacks_sent_around_them(cluster, tmp_path):
    # Ray runs an actor's tasks on several threads in no set order. Oracles: the shard's own
    # refusal of a write sent before a rollback (one that timed out, arriving late), and the
    # shard's ids, then its file opened here after the next flush: exactly the rows written
    # since, none of the late write's, and a rollback that arrives after the next write
    # (which ran it already) undoing nothing.
    data = rows(400, 8, 41)
    index = ShardedIndex(tmp_path, 8, shards=2)
    index.add_batch(data[:200])
    index.flush()
    actor = index.shard_actors()[0]
    mine = np.array([i for i in range(1000, 1200) if shard_of([i], 2)[0] == 0], dtype=np.uint64)
    stale = index._fence
    index.add_batch(data[200:250], np.arange(200, 250))
    index.rollback()
    for late in (
        actor.add_batch.remote(rows(10, 8, 42), mine[:10], stale),
        actor.upsert.remote(rows(2, 8, 43), mine[10:12], stale),
        actor.delete_many.remote([int(i) for i in range(200) if shard_of([i], 2)[0] == 0], stale),
        actor.flush.remote(stale, index._epoch + 1),
    ):
        with pytest.raises(StaleWriteError, match="refused"):
            ray.get(late)
    # A write that starts before the rollback sent ahead of it: it runs the rollback first.
    pending = np.arange(250, 300, dtype=np.uint64)
    index.add_batch(data[250:300], pending)
    ahead = index._fence + 1
    ray.get(actor.add_batch.remote(rows(5, 8, 44), mine[20:25], ahead))
    ray.get(actor.rollback.remote(ahead))  # the rollback task, late: already done
    held = set(int(i) for i in ray.get(actor.ids.remote()))
    assert held.isdisjoint(int(i) for i in pending)
    assert set(int(i) for i in mine[20:25]) <= held
    assert held.isdisjoint(int(i) for i in mine[:20])
    index._fence = ahead  # the driver's own rollback, whose task the write ran
    index.flush()
    for s in index.shards:
        with chassis.IndexReader(s["path"]) as r:
            got = sorted(int(i) for i in r.ids())
        want = [i for i in range(200) if shard_of([i], 2)[0] == s["number"]]
        if s["number"] == 0:
            want = sorted(want + [int(i) for i in mine[20:25]])
        assert got == want, s["number"]
    index.close()


def test_a_write_the_driver_gave_up_on_is_refused_when_it_lands(cluster, tmp_path):
    # The fault: the first shard to start the next add sleeps 6 s first, past the driver's
    # timeout of 2 s for that add (60 s for the other calls, which a loaded machine can hold
    # up for seconds). Oracles: the driver's error, then each shard's file after the next
    # flush, 10 s later: the rows of the last flush only, none of the late write's.
    data = rows(300, 8, 81)
    index = ShardedIndex(tmp_path, 8, shards=2, timeout=60)
    index.add_batch(data[:100])
    index.flush()
    (FAULTS / "shard-add").write_text("6")
    index.timeout = 2
    with pytest.raises(ShardFailedError):
        index.add_batch(data[100:200])  # ids 100 to 199, given: no `present` call to time out
    index.timeout = 60
    assert (FAULTS / "shard-add.fired").exists(), "the fault did not fire"
    time.sleep(8)  # the late write has woken, and been refused
    (FAULTS / "shard-add.fired").unlink()
    index.add_batch(data[200:], ids=np.arange(200, 300))
    index.flush()
    assert len(index) == 200
    for s in index.shards:
        with chassis.IndexReader(s["path"]) as r:
            got = sorted(int(i) for i in r.ids())
        want = [i for i in [*range(100), *range(200, 300)] if shard_of([i], 2)[0] == s["number"]]
        assert got == want, s["number"]
    index.close()


def _add_node(cluster):
    """A new node, once the driver's view of the cluster (`ray.nodes()`, which places new
    shards) lists it as alive: `wait_for_nodes` can return before that."""
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    deadline = time.monotonic() + 60
    while not any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
        assert time.monotonic() < deadline, "the added node never showed as alive"
        time.sleep(0.1)
    # Listed as alive is not yet taking work: a shard's soft affinity (shared paths) then
    # falls back to another node. A task pinned to the node (hard affinity) waits until it is.
    pinned = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
    assert ray.get(_node_of.options(scheduling_strategy=pinned).remote(), timeout=60) == (
        node.node_id
    )
    return node


@ray.remote(num_cpus=0)
def _node_of() -> str:
    return ray.get_runtime_context().get_node_id()


def test_a_shard_on_a_node_that_left_is_reported(cluster, tmp_path):
    """Last: it removes a node from the cluster."""
    extra = _add_node(cluster)
    index = ShardedIndex(tmp_path, 8, shards=4, timeout=30)
    index.add_batch(rows(400, 8, 13))
    index.flush()
    on_extra = [s["number"] for s in index.shards if s["node_id"] == extra.node_id]
    assert on_extra, "four shards over four nodes left the new node empty"
    cluster.remove_node(extra)
    with pytest.raises(ShardUnavailableError, match=f"shard {on_extra[0]} .* left the cluster"):
        index.search_batch(rows(3, 8, 14), 5)
    # What the other shards hold, flagged: oracle, brute force over their rows.
    queries = rows(3, 8, 14)
    part = index.search_batch(queries, 5, ef=400, allow_partial=True)
    assert part.missing == on_extra
    kept = np.array([i for i in range(400) if shard_of([i], 4)[0] not in on_extra])
    want, _ = exact(rows(400, 8, 13)[kept], kept.astype(np.uint64), queries, 5)
    assert np.array_equal(part.ids, want)
    with pytest.raises(ShardUnavailableError, match="left the cluster"):
        index.add_batch(rows(50, 8, 15))
    with pytest.raises(ShardUnavailableError):
        len(index)


def test_with_a_shared_path_a_shard_whose_node_left_comes_up_elsewhere(cluster, tmp_path):
    """Also last: it removes a node. One machine's disk is a path every node sees."""
    extra = _add_node(cluster)
    data, queries = rows(800, 8, 16), rows(10, 8, 17)
    # Eight shards go round at most five nodes (the one the test before removed may still be
    # listed as alive for a moment), so every node is given one. Their affinity is soft (a
    # shared path), so while the new node is still coming up under load Ray may start its
    # shards elsewhere (seen once in CI): then a new index, in a new folder, up to five times.
    for attempt in range(5):
        index = ShardedIndex(tmp_path / f"try{attempt}", 8, shards=8, shared=True, timeout=60)
        moved = [s["number"] for s in index.shards if s["node_id"] == extra.node_id]
        if moved:
            break
        index.close()
        time.sleep(1)
    assert moved, "eight shards over the nodes left the new node empty, five times"
    index.add_batch(data)
    index.flush()
    want, _ = exact(data, np.arange(800, dtype=np.uint64), queries, 5)
    cluster.remove_node(extra)
    got, _ = index.search_batch(queries, 5, ef=800)
    assert np.array_equal(got, want)
    where = ray.get(index.shard_actors()[moved[0]].where.remote())
    assert where["node_id"] != extra.node_id
    assert len(index) == 800
    index.add_batch(rows(10, 8, 18))  # its writer works on the new node (nothing was unflushed)
    index.flush()
    assert len(index) == 810
    index.close()


def test_a_machine_back_under_a_new_node_id_has_its_shards_found_by_their_files(cluster, tmp_path):
    """Also last: it removes a node and adds one, as a reboot does (Ray gives a node a new id
    each time it starts; the disk, here this machine's, is the same)."""
    extra = _add_node(cluster)
    data, queries = rows(600, 8, 18), rows(10, 8, 19)
    index = ShardedIndex(tmp_path, 8, shards=4, timeout=60)
    index.add_batch(data)
    index.flush()
    on_extra = [s for s in index.shards if s["node_id"] == extra.node_id]
    assert on_extra, "four shards over the nodes left the new node empty"
    index.close()
    cluster.remove_node(extra)
    back = _add_node(cluster)
    assert back.node_id != extra.node_id

    # The manifest still names the old node: open asks the nodes for the file instead.
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert {s["node_id"] for s in manifest["shards"]} >= {extra.node_id}
    reopened = ShardedIndex.open(tmp_path, timeout=60)
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    for s in reopened.shards:
        assert s["node_id"] in alive
        assert s["host"] == on_extra[0]["host"]  # the same host name, preferred
    assert len(reopened) == 600
    want, _ = exact(data, np.arange(600, dtype=np.uint64), queries, 5)
    got, _ = reopened.search_batch(queries, 5, ef=600)
    assert np.array_equal(got, want)
    reopened.close()

    # A shard whose file no node has: named, with what to do, and nothing else started.
    path = Path(on_extra[0]["path"])
    hidden = path.with_name(path.name + ".away")
    path.rename(hidden)
    try:
        with pytest.raises(
            ShardUnavailableError, match=f"shard {on_extra[0]['number']} .* no node"
        ):
            ShardedIndex.open(tmp_path, timeout=60)
    finally:
        hidden.rename(path)


# ---------------------------------------------------------------- one commit across shards


def _shard_files(index_or_root) -> dict[int, tuple[list[int], int]]:
    """Each shard's file opened here: its ids and the sharded flush (epoch) it holds."""
    root = Path(index_or_root)
    m = json.loads((root / MANIFEST).read_text())
    out = {}
    for s in m["shards"]:
        with chassis.IndexReader(s["path"]) as r:
            out[s["number"]] = (sorted(int(i) for i in r.ids()), int(r.snapshot().user_version))
    return out


def _assert_holds(index: ShardedIndex, root: Path, want: dict[int, np.ndarray], epoch: int):
    """Oracles: the record of the rows of the last sharded flush; every shard's file opened
    here (exactly its share of them, at that flush); the index's own reads."""
    shards = len(index.shards)
    for number, (ids, at) in _shard_files(root).items():
        assert ids == sorted(i for i in want if shard_of([i], shards)[0] == number), number
        assert at == epoch, number
    assert sorted(int(i) for i in index.ids()) == sorted(want)
    for i in list(want)[::37]:
        np.testing.assert_array_equal(index.get(i), want[i])
    if not want:
        return
    ids = np.array(sorted(want), dtype=np.uint64)
    data = np.stack([want[int(i)] for i in ids])
    truth, _ = exact(data, ids, data[:15], 5)
    got, _ = index.search_batch(data[:15], 5, ef=400)
    assert recall(got, truth) >= 0.99


def test_a_driver_killed_after_the_shards_flushed_reopens_at_the_last_flush(cluster, tmp_path):
    # The driver dies after every shard committed the flush and before the manifest records
    # it (the fault point `driver-flushed`). Oracles: each shard's file opened here first (it
    # holds the flush given up), then, after `open`, the record of the rows of the last flush
    # the manifest names.
    data, new = rows(900, 8, 91), rows(50, 8, 92)
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "new.npy", new)
    root = tmp_path / "idx"
    driver = f"""
import numpy as np, ray, pathlib
from chassis.ray import ShardedIndex
ray.init(address={cluster.address!r})
data, new = np.load({str(tmp_path / "data.npy")!r}), np.load({str(tmp_path / "new.npy")!r})
index = ShardedIndex({str(root)!r}, 8, shards=3)
index.add_batch(data[:600])
index.flush()
index.add_batch(data[600:])
index.delete_batch(np.arange(100))
index.upsert(new, np.arange(100, 150))
(pathlib.Path({str(FAULTS)!r}) / "driver-flushed").touch()
index.flush()
"""
    done = subprocess.run([sys.executable, "-c", driver], timeout=180, capture_output=True)
    assert done.returncode == 1, done.stderr.decode()[-3000:]
    _fired("driver-flushed")
    for number, (_ids, epoch) in _shard_files(root).items():
        assert epoch == 2, number  # every shard committed the second flush
    index = ShardedIndex.open(root)
    want = {i: data[i] for i in range(600)}
    _assert_holds(index, root, want, 1)
    index.add_batch(new, ids=np.arange(1000, 1050))
    index.flush()
    want.update({1000 + i: new[i] for i in range(50)})
    _assert_holds(index, root, want, 2)
    index.close()


def test_a_flush_only_some_shards_committed_is_taken_back_at_open(cluster, tmp_path):
    # Two of three shards commit the next flush (their actors called directly, as a driver
    # dying between them would leave them). Oracles as above.
    data = rows(800, 8, 93)
    index = ShardedIndex(tmp_path, 8, shards=3)
    index.add_batch(data[:500])
    index.flush()
    index.add_batch(data[500:])
    index.delete_batch(np.arange(0, 500, 3))
    index.upsert(rows(40, 8, 94), np.arange(1, 121, 3))
    actors = index.shard_actors()
    ray.get([a.flush.remote(index._fence, index._epoch + 1) for a in actors[:2]])
    index.close()
    index = ShardedIndex.open(tmp_path)
    _assert_holds(index, tmp_path, {i: data[i] for i in range(500)}, 1)
    index.close()


def _flushed_then_pending(tmp_path, seed: int) -> tuple[ShardedIndex, np.ndarray]:
    """Three shards: rows 0-399 flushed (epoch 1); rows 400-599 added and ids 0-49 deleted,
    not flushed. Rows 600-699 of the data are left for the test to add."""
    data = rows(700, 8, seed)
    index = ShardedIndex(tmp_path, 8, shards=3)
    index.add_batch(data[:400])
    index.flush()
    index.add_batch(data[400:600])
    index.delete_batch(np.arange(50))
    return index, data


def test_a_shard_that_fails_its_flush_leaves_every_shard_at_the_last_flush(cluster, tmp_path):
    # The first shard to start the flush raises (as a full disk would); the others commit it.
    # Oracles: the driver's error; each shard's file opened here; the index's reads; then a
    # flush that works.
    index, data = _flushed_then_pending(tmp_path, 95)
    (FAULTS / "shard-flush").write_text("raise")
    with pytest.raises(ShardFailedError, match="back at the last flush") as e:
        index.flush()
    _fired("shard-flush")
    # The error names the shard whose process raised.
    message = str(e.value)
    named = int(message.split("shard ", 1)[1].split(" ", 1)[0])
    pid = int(message.split("in process ", 1)[1].split()[0].rstrip(":"))
    assert ray.get(index.shard_actors()[named].where.remote())["pid"] == pid
    want = {i: data[i] for i in range(400)}
    _assert_holds(index, tmp_path, want, 1)
    index.add_batch(data[600:], ids=np.arange(600, 700))
    index.flush()
    want.update({i: data[i] for i in range(600, 700)})
    _assert_holds(index, tmp_path, want, 2)
    index.close()
    index = ShardedIndex.open(tmp_path)
    _assert_holds(index, tmp_path, want, 2)
    index.close()


def test_a_shard_killed_once_its_flush_committed_is_taken_back(cluster, tmp_path):
    # The first shard to commit the flush dies right after (the fault point `shard-flushed`);
    # Ray restarts it holding the flush, which the others are taken back from. Oracles: the
    # driver's error, then the rows of the next flush in every shard's file.
    index, data = _flushed_then_pending(tmp_path, 96)
    (FAULTS / "shard-flushed").touch()
    with pytest.raises(ShardFailedError):
        index.flush()
    _fired("shard-flushed")
    index.add_batch(data[600:], ids=np.arange(600, 700))
    index.flush()
    want = {i: data[i] for i in [*range(400), *range(600, 700)]}
    _assert_holds(index, tmp_path, want, 2)
    index.close()


# What each injected fault does: (kind, where it strikes, how). The loop below goes round
# them; docs/distributed.md gives the counts of a long run.
FAULT_KINDS = [
    ("add-dies", "a shard's add_batch", "its actor exits before adding"),
    ("add-late", "a shard's add_batch", "it sleeps past the driver's timeout, then lands late"),
    ("flush-raises", "a shard's flush", "OSError before it commits (a full disk)"),
    ("flush-dies", "a shard's flush", "its actor exits before it commits"),
    ("flushed-dies", "a shard's flush", "its actor exits right after it committed"),
    ("killed-holding", "a shard between writes", "SIGKILL while it holds unflushed rows"),
    ("driver-gone", "the driver mid-flush", "two of three shards commit, then the driver leaves"),
]


def _patiently(call, seconds: float = 60.0):
    """`call()`, again while a shard is unavailable (what its error's help says to do): a
    restart that outlasts a short `timeout` is reported, and the next call waits for it."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except ShardUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_injected_faults_lose_and_duplicate_no_row(cluster, tmp_path):
    # Rounds of add, delete, upsert and flush, each with one fault injected (FAULT_KINDS in
    # turn). Oracle: a record of every write, applied to the rows of the last flush when the
    # flush succeeds and dropped when a fault fails the round; after every round the index's
    # ids and vectors equal the record, and every few rounds each shard's file opened here
    # holds exactly its share. CHASSIS_RAY_FAULT_ROUNDS sets how many rounds (CI runs a few).
    rounds = int(os.environ.get("CHASSIS_RAY_FAULT_ROUNDS", "7"))
    rng = np.random.default_rng(97)
    # A timeout of 3 s around the calls whose fault must outlast it; 60 s for the others,
    # which a loaded machine can hold up for seconds.
    index = ShardedIndex(tmp_path, 8, shards=3, timeout=60)
    committed: dict[int, np.ndarray] = {}
    next_id, fired, lost, extra = 0, {k[0]: 0 for k in FAULT_KINDS}, 0, 0

    def arm(point: str, what: str = "") -> None:
        (FAULTS / point).write_text(what)

    for r in range(rounds):
        kind = FAULT_KINDS[r % len(FAULT_KINDS)][0]
        want = dict(committed)
        new = rows(30, 8, 1000 + r)
        ids = np.arange(next_id, next_id + 30, dtype=np.uint64)
        next_id += 30
        point = {
            "add-dies": "shard-add",
            "add-late": "shard-add",
            "flush-raises": "shard-flush",
            "flush-dies": "shard-flush",
            "flushed-dies": "shard-flushed",
        }.get(kind)
        try:
            if kind in ("add-dies", "add-late"):
                arm(point, "5" if kind == "add-late" else "")
            index.timeout = 3 if kind == "add-late" else 60
            index.add_batch(new, ids=ids)
            index.timeout = 60
            want.update({int(i): v for i, v in zip(ids, new)})
            if kind == "killed-holding":
                pid = ray.get(index.shard_actors()[r % 3].where.remote())["pid"]
                os.kill(pid, signal.SIGKILL)
            live = sorted(want)
            gone = [int(i) for i in rng.choice(live, size=min(10, len(live)), replace=False)]
            index.delete_batch(np.array(gone, dtype=np.uint64))
            for i in gone:
                del want[i]
            keep = sorted(want)
            up = np.array(rng.choice(keep, size=min(8, len(keep)), replace=False), dtype=np.uint64)
            vals = rows(len(up), 8, 5000 + r)
            index.upsert(vals, up)
            want.update({int(i): v for i, v in zip(up, vals)})
            if kind == "driver-gone":
                actors = index.shard_actors()
                ray.get([a.flush.remote(index._fence, index._epoch + 1) for a in actors[:2]])
                index.close()
                fired[kind] += 1
                index = ShardedIndex.open(tmp_path, timeout=60)
            else:
                if kind in ("flush-raises", "flush-dies", "flushed-dies"):
                    arm(point, "raise" if kind == "flush-raises" else "")
                if kind == "flushed-dies":
                    # Its restart outlasts the timeout, so the rollback after the failed flush
                    # cannot reach it: it comes back holding the flush the index gave up.
                    arm("shard-start", "4")
                    index.timeout = 3
                index.flush()
                committed = want
        except (ShardFailedError, ShardUnavailableError):
            pass
        index.timeout = 60
        if point is not None and (FAULTS / (point + ".fired")).exists():
            (FAULTS / (point + ".fired")).unlink()
            fired[kind] += 1
        elif kind == "killed-holding":
            fired[kind] += 1
        (FAULTS / (point or "none")).unlink(missing_ok=True)
        if kind == "add-late":
            time.sleep(5.5)  # the late add woke and was refused
        if kind == "flushed-dies":
            assert any(s.unsure for s in index._shards), "the rollback reached every shard"
        got = {int(i) for i in _patiently(index.ids)}
        if kind == "flushed-dies":
            _fired("shard-start")  # the read waited for that restart and took the shard back
        (FAULTS / "shard-start").unlink(missing_ok=True)
        lost += len(set(committed) - got)
        extra += len(got - set(committed))
        assert got == set(committed), (r, kind)
        for i in sorted(committed)[:: max(1, len(committed) // 10)]:
            np.testing.assert_array_equal(_patiently(partial(index.get, i)), committed[i])
        if r % 5 == 4 or r == rounds - 1:
            _patiently(index.flush)  # the files hold the last flush; checked as files
            _assert_holds(index, tmp_path, committed, index._epoch)
    index.close()
    print("\nfault kind | fired")
    for k, n in fired.items():
        print(f"{k} | {n}")
    print(f"rounds {rounds}, faults {sum(fired.values())}, rows lost {lost}, rows extra {extra}")
    assert sum(fired.values()) >= rounds - 1
    assert lost == 0 and extra == 0


# ---------------------------------------------------------------- other drivers


def _brute(data: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return exact(data, ids, queries, k)[0]


def test_a_detached_index_outlives_its_driver_and_is_taken_over(cluster, tmp_path):
    # A driver creates a detached index, flushes, writes more and exits. Oracles: the actors'
    # process ids (the same actors serve after it), a searcher connected by name against
    # brute force, the takeover's rollback (the rows of the flush only), then a write from
    # here checked in each shard's file, and the searcher refused once the index is closed.
    data = rows(600, 8, 111)
    np.save(tmp_path / "data.npy", data)
    root = tmp_path / "idx"
    driver = f"""
import json, numpy as np, ray
from chassis.ray import ShardedIndex
ray.init(address={cluster.address!r})
data = np.load({str(tmp_path / "data.npy")!r})
index = ShardedIndex({str(root)!r}, 8, shards=2, detached=True)
index.add_batch(data[:300])
index.flush()
index.add_batch(data[300:350])  # not flushed: the driver that takes over discards it
pids = [ray.get(a.where.remote())["pid"] for a in index.shard_actors()]
open({str(tmp_path / "pids.json")!r}, "w").write(json.dumps(pids))
"""
    subprocess.run([sys.executable, "-c", driver], check=True, timeout=120)
    pids = json.loads((tmp_path / "pids.json").read_text())
    searcher = ShardedSearcher.connect(root)
    ids = np.arange(350, dtype=np.uint64)
    got, _ = searcher.search_batch(data[:20], 5, ef=400)
    np.testing.assert_array_equal(got, _brute(data[:350], ids, data[:20], 5))
    index = ShardedIndex.open(root)
    assert [ray.get(a.where.remote())["pid"] for a in index.shard_actors()] == pids
    assert len(index) == 300
    index.add_batch(data[350:], ids=np.arange(350, 600))
    index.flush()
    want = {i: data[i] for i in [*range(300), *range(350, 600)]}
    _assert_holds(index, root, want, 2)
    keep = np.array(sorted(want), dtype=np.uint64)
    got, _ = searcher.search_batch(data[:20], 5, ef=400)  # the searcher from before
    np.testing.assert_array_equal(got, _brute(data[keep.astype(np.int64)], keep, data[:20], 5))
    index.close()
    with pytest.raises(ShardUnavailableError, match="no running actor"):
        ShardedSearcher.connect(root)


def test_a_driver_that_was_taken_over_has_its_writes_refused(cluster, tmp_path):
    # Two handles of one detached index (two drivers, here in one process): the second
    # open takes over. Oracles: the first handle's refusal, and the files after a flush.
    data = rows(300, 8, 112)
    first = ShardedIndex(tmp_path, 8, shards=2, detached=True)
    first.add_batch(data[:100])
    first.flush()
    first.add_batch(data[100:150], ids=np.arange(100, 150))
    second = ShardedIndex.open(tmp_path)
    with pytest.raises(StaleWriteError, match="refused"):
        first.add_batch(data[150:200], ids=np.arange(150, 200))
    second.add_batch(data[200:], ids=np.arange(200, 300))
    second.flush()
    want = {i: data[i] for i in [*range(100), *range(200, 300)]}
    _assert_holds(second, tmp_path, want, 2)
    # The first driver, behind by a flush it did not make, takes nothing back.
    for call in (first.flush, first.rollback):
        with pytest.raises(StaleWriteError, match="another driver took"):
            call()
    _assert_holds(second, tmp_path, want, 2)
    second.close()


def test_a_second_driver_searches_a_running_index_but_cannot_open_it(cluster, tmp_path):
    # The index is open here (not detached). Oracles: the other driver's IndexLockedError,
    # and its connected searcher's answers against brute force computed here.
    data = rows(400, 8, 113)
    index = ShardedIndex(tmp_path, 8, shards=2)
    index.add_batch(data)
    index.flush()
    driver = f"""
import numpy as np, ray, chassis, chassis.ray
from chassis.ray import ShardedIndex, ShardedSearcher
ray.init(address={cluster.address!r})
try:
    ShardedIndex.open({str(tmp_path)!r})
    raise SystemExit("opened an index another driver has open")
except chassis.IndexLockedError as e:
    assert "ShardedSearcher.connect" in str(e), e
s = ShardedSearcher.connect({str(tmp_path)!r})
q = np.load({str(tmp_path / "q.npy")!r})
np.save({str(tmp_path / "got.npy")!r}, s.search_batch(q, 5, ef=400)[0])
"""
    np.save(tmp_path / "q.npy", data[:15])
    subprocess.run([sys.executable, "-c", driver], check=True, timeout=120)
    np.testing.assert_array_equal(
        np.load(tmp_path / "got.npy"), _brute(data, np.arange(400, dtype=np.uint64), data[:15], 5)
    )
    index.close()


def test_replicas_on_a_shared_path_run_on_other_nodes_and_serve(cluster, tmp_path):
    # Oracles: each actor's node as it reports it, the replicas' own search counters, and
    # brute force.
    data = rows(500, 8, 114)
    index = ShardedIndex(tmp_path, 8, shards=2, replicas=2, shared=True)
    index.add_batch(data)
    index.flush()
    for s in index._shards:
        writer = ray.get(s.actor.where.remote())["node_id"]
        nodes = [ray.get(r.where.remote())["node_id"] for r in s.replicas]
        assert writer not in nodes and len(set(nodes)) == 2, (writer, nodes)
    ids = np.arange(500, dtype=np.uint64)
    for _ in range(4):
        got, _ = index.search_batch(data[:10], 5, ef=400)
        np.testing.assert_array_equal(got, _brute(data, ids, data[:10], 5))
    served = [ray.get(r.stats.remote())["searches"] for s in index._shards for r in s.replicas]
    assert all(n > 0 for n in served), served
    index.close()


def test_spread_replicas_keep_copies_on_other_nodes_fed_by_each_flush(cluster, tmp_path):
    # Local disks, spread=True: each replica on another node than its writer, reading its
    # own copy. Oracles: the nodes the actors report; brute force over a record of the rows
    # after each flush (searches go to the replicas); each copy opened here beside its
    # writer's file (the same answers to the last distance: the same bytes); the replicas'
    # search counters; a replica killed (it starts again from a whole copy); a failed flush
    # (the copies stay at the last one).
    rng = np.random.default_rng(121)
    data = rows(400, 8, 121)
    index = ShardedIndex(tmp_path, 8, shards=2, replicas=1, spread=True)
    want = {i: data[i] for i in range(400)}
    index.add_batch(data)
    index.flush()

    def check_copies(same_bytes: bool = True):
        ids = np.array(sorted(want), dtype=np.uint64)
        vals = np.stack([want[int(i)] for i in ids])
        got, _ = index.search_batch(vals[:20], 5, ef=400)
        np.testing.assert_array_equal(got, _brute(vals, ids, vals[:20], 5))
        for s in index.shards if same_bytes else []:
            copy = tmp_path / f"replica-{s['number']:04d}-0.chassis"
            with chassis.IndexReader(s["path"]) as a, chassis.IndexReader(str(copy)) as b:
                assert a.snapshot().seq == b.snapshot().seq
                ga, da = a.search_batch(vals[:20], 5, ef=64)
                gb, db = b.search_batch(vals[:20], 5, ef=64)
                np.testing.assert_array_equal(ga, gb)
                np.testing.assert_array_equal(da, db)

    for s in index._shards:
        writer = ray.get(s.actor.where.remote())["node_id"]
        assert ray.get(s.replicas[0].where.remote())["node_id"] != writer
    check_copies()
    for r in range(3):
        gone = [int(i) for i in rng.choice(sorted(want), size=30, replace=False)]
        index.delete_batch(gone)
        for i in gone:
            del want[i]
        up = np.array(sorted(want)[:20], dtype=np.uint64)
        vals = rows(20, 8, 130 + r)
        index.upsert(vals, up)
        want.update({int(i): v for i, v in zip(up, vals)})
        new = rows(100 * (r + 1), 8, 140 + r)
        ids = np.arange(1000 * (r + 1), 1000 * (r + 1) + len(new))
        index.add_batch(new, ids=ids)
        want.update({int(i): v for i, v in zip(ids, new)})
        index.flush()
        check_copies()
    served = [ray.get(s.replicas[0].stats.remote())["searches"] for s in index._shards]
    assert all(n > 0 for n in served), served
    # A replica killed: Ray starts it again, from a whole copy of the last flush.
    os.kill(ray.get(index._shards[0].replicas[0].where.remote())["pid"], signal.SIGKILL)
    index.add_batch(rows(10, 8, 150), ids=np.arange(9000, 9010))
    want.update({9000 + i: v for i, v in enumerate(rows(10, 8, 150))})
    index.flush()
    check_copies()
    # A flush that fails leaves the copies at the last one (the writers that committed it
    # taken back hold the same rows under another commit), and the next one brings them on.
    index.add_batch(rows(10, 8, 151), ids=np.arange(9100, 9110))
    (FAULTS / "shard-flush").write_text("raise")
    with pytest.raises(ShardFailedError):
        index.flush()
    _fired("shard-flush")
    check_copies(same_bytes=False)
    index.add_batch(rows(10, 8, 152), ids=np.arange(9200, 9210))
    want.update({9200 + i: v for i, v in enumerate(rows(10, 8, 152))})
    index.flush()
    check_copies()
    index.close()


def test_a_driver_killed_while_one_shard_has_not_flushed_reopens_at_the_last_flush(
    cluster, tmp_path
):
    # The first shard to start the flush sleeps (the fault point `shard-flush`, 30 s) while
    # the others commit; the driver is killed then, and its actors end with it. Oracles: the
    # shards' files opened here (some hold the flush, one does not), then, after `open`, the
    # record of the rows of the last flush, in every shard's file.
    data = rows(900, 8, 161)
    np.save(tmp_path / "data.npy", data)
    root = tmp_path / "idx"
    driver = f"""
import numpy as np, ray, pathlib, sys
from chassis.ray import ShardedIndex
ray.init(address={cluster.address!r})
data = np.load({str(tmp_path / "data.npy")!r})
index = ShardedIndex({str(root)!r}, 8, shards=3)
index.add_batch(data[:600])
index.flush()
index.add_batch(data[600:])
index.delete_batch(np.arange(50))
(pathlib.Path({str(FAULTS)!r}) / "shard-flush").write_text("30")
print("flushing", flush=True)
index.flush()
"""
    child = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "flushing"
        deadline = time.monotonic() + 60
        while True:  # until every shard but the sleeping one holds the flush
            epochs = [e for _, e in _shard_files(root).values()]
            if sorted(epochs) == [1, 2, 2]:
                break
            assert time.monotonic() < deadline, epochs
            time.sleep(0.2)
        child.kill()
    finally:
        child.wait(timeout=60)
    _fired("shard-flush")
    index = ShardedIndex.open(root)
    _assert_holds(index, root, {i: data[i] for i in range(600)}, 1)
    index.close()
