"""The index's life cycle: delete, filtered search, rollback, backup, compact, user_version.

Checks:

* a hypothesis state machine against a Python model (id -> float32 vector of live vectors, the
  last flushed copy of it, the flushed user_version, the next default id and the slot count):
  add / add_batch (default and explicit ids, re-using deleted ids, refused batches leave
  nothing behind), delete (present and absent ids), replace (delete + add under the same id),
  flush, rollback, reopen (close without flush), compact, backup then open the backup, set
  user_version, a reader of the file; after every step ids() (set and insertion order), len,
  deleted_count, user_version, get() bit-identical, exact search (ef >= len) and a filtered
  exact search equal brute force over the model, and an approximate search returns only live
  ids;
* filtered search on 20,000 x 32 clustered vectors at selectivities 100 % .. 0.1 %:
  recall@10 against brute force over the allowed set >= 0.95 at the default ef, excluded ids
  never returned, search_batch with a filter equals a loop of search (QPS printed, not asserted);
* processes: a reader in another process sees a delete only after the flush; a compaction is
  followed by readers in this process and in another one; a backup taken by a reader while a
  writer thread adds, deletes and flushes equals exactly one flushed state.

Oracles: brute force in float64 (conftest) and the model; no assertion is about timing.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from chassis import IdInUseError, IndexOptions, IndexReader, InvalidArgumentError, VectorIndex
from conftest import (
    NO_ID,
    assert_bit_identical,
    assert_exact_knn,
    brute_force_knn,
    child_env,
    clustered_data,
    pairwise_distances,
    recall_at_k,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

POSIX_ONLY = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")


def leftovers(directory: str | Path, index_name: str) -> list[str]:
    """Temporary files of a compaction / creation / backup of ``index_name`` in ``directory``."""
    prefixes = tuple(f".{index_name}.{w}-" for w in ("compacting", "creating", "backup"))
    return sorted(f for f in os.listdir(directory) if f.startswith(prefixes))


# =========================================================================== A1. state machine
class LifecycleMachine(RuleBasedStateMachine):
    """One writer handle against a model. ``live``/``flushed`` are dicts id -> vector in
    insertion (slot) order: deleting and re-adding an id moves it to the end, as in the index."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="chassis-lifecycle-")
        self.path = os.path.join(self.dir, "sm.chassis")
        self.index: VectorIndex | None = None
        self.n_backups = 0

    # ------------------------------------------------------------------ helpers
    def vectors(self, data, n: int) -> np.ndarray:
        seed = data.draw(st.integers(0, 2**32 - 1), label="vector seed")
        g = np.random.default_rng(seed)
        if data.draw(st.booleans(), label="grid vectors (ties)"):
            # a coarse integer grid: duplicates and exact distance ties are likely
            return g.integers(-2, 3, size=(n, self.dims)).astype(np.float32)
        return g.standard_normal((n, self.dims)).astype(np.float32)

    def dead_ids(self) -> list[int]:
        return sorted(self.ever - set(self.live))

    def fresh_id(self, data) -> int:
        kind = data.draw(st.sampled_from(["next", "gap", "far"]), label="fresh id kind")
        if kind == "next":
            base = self.next_id
        elif kind == "gap":
            base = self.next_id + data.draw(st.integers(1, 50))
        else:
            base = data.draw(st.integers(2**32, 2**48))
        while base in self.live:
            base += 1
        return base

    def note_add(self, ids, vecs) -> None:
        for i, v in zip(ids, vecs):
            i = int(i)
            assert i not in self.live
            self.live[i] = v.copy()
            self.ever.add(i)
            self.next_id = max(self.next_id, i + 1)
        self.slots += len(ids)

    # What a flush makes durable and a rollback brings back: the model's field -> its copy.
    DURABLE = {
        "live": "flushed",
        "uv": "flushed_uv",
        "next_id": "flushed_next_id",
        "slots": "flushed_slots",
        "ever": "flushed_ever",
    }

    def commit(self) -> None:
        for now, flushed in self.DURABLE.items():
            setattr(self, flushed, copy.copy(getattr(self, now)))

    def revert(self) -> None:
        for now, flushed in self.DURABLE.items():
            setattr(self, now, copy.copy(getattr(self, flushed)))

    def queries(self) -> np.ndarray:
        q = self.qrng.standard_normal((2, self.dims)).astype(np.float32)
        if self.live:  # one query sits exactly on a stored vector (distance 0, ties with copies)
            ids = list(self.live)
            q[1] = self.live[ids[int(self.qrng.integers(len(ids)))]]
        return q

    def compare(self, index, model: dict, uv: int, what: str) -> None:
        """``index`` holds exactly ``model``: ids (set, then order), len, vectors, user_version,
        exact search."""
        ids = index.ids()
        assert ids.dtype == np.uint64
        assert set(ids.tolist()) == set(model), (
            f"{what}: ids() differ from the model: extra {sorted(set(ids.tolist()) - set(model))[:10]}, "
            f"missing {sorted(set(model) - set(ids.tolist()))[:10]}"
        )
        assert ids.tolist() == list(model), f"{what}: ids() not in insertion order"
        assert len(index) == len(model), what
        assert index.is_empty() == (not model)
        assert index.user_version == uv, f"{what}: user_version {index.user_version}, expected {uv}"
        for i, v in model.items():
            got = index.get(i)
            assert got is not None, f"{what}: get({i}) is None"
            assert_bit_identical(got, v, f"{what}: get({i})")
            assert i in index
        data = np.stack(list(model.values())) if model else np.empty((0, self.dims), np.float32)
        data_ids = np.array(list(model), dtype=np.uint64)
        k = 10
        ef = max(len(model), k)
        for q in self.queries():
            hits = index.search(q, k, ef=ef)
            assert_exact_knn(
                [h.id for h in hits],
                [h.distance for h in hits],
                data,
                data_ids,
                q,
                k,
                "euclidean",
                context=f"{what}: exact search",
            )

    # ------------------------------------------------------------------ setup
    @initialize(
        dims=st.integers(4, 8), m=st.sampled_from([4, 8, 16]), qseed=st.integers(0, 2**32 - 1)
    )
    def create(self, dims: int, m: int, qseed: int) -> None:
        self.dims = dims
        self.opts = IndexOptions(max_connections=m, ef_construction=32)
        self.index = VectorIndex(self.path, dims, self.opts)
        self.qrng = np.random.default_rng(qseed)
        self.live: dict[int, np.ndarray] = {}
        self.ever: set[int] = set()
        self.uv = 0
        self.next_id = 0
        self.slots = 0
        self.commit()

    def teardown(self) -> None:
        if self.index is not None:
            self.index.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ adds
    @rule(data=st.data())
    def add(self, data) -> None:
        v = self.vectors(data, 1)[0]
        kind = data.draw(
            st.sampled_from(["default", "fresh", "reuse_deleted", "live"]), label="id kind"
        )
        if kind == "reuse_deleted" and not self.dead_ids():
            kind = "fresh"
        if kind == "live" and not self.live:
            kind = "default"
        if kind == "default":
            got = self.index.add(v)
            assert got == self.next_id, f"default id {got}, expected {self.next_id}"
            self.note_add([got], [v])
        elif kind == "live":
            taken = data.draw(st.sampled_from(sorted(self.live)), label="live id")
            with pytest.raises(IdInUseError):
                self.index.add(v, taken)
        else:
            i = (
                self.fresh_id(data)
                if kind == "fresh"
                else data.draw(st.sampled_from(self.dead_ids()))
            )
            assert self.index.add(v, i) == i
            self.note_add([i], [v])

    @rule(data=st.data(), n=st.integers(1, 20))
    def add_batch(self, data, n: int) -> None:
        vecs = self.vectors(data, n)
        kind = data.draw(
            st.sampled_from(["default", "explicit", "explicit", "refused"]), label="batch kind"
        )
        if kind == "default":
            got = self.index.add_batch(vecs)
            expected = np.arange(self.next_id, self.next_id + n, dtype=np.uint64)
            np.testing.assert_array_equal(got, expected)
            self.note_add(got.tolist(), vecs)
            return
        pool = self.dead_ids()
        ids: list[int] = []
        for _ in range(n):
            if pool and data.draw(st.booleans(), label="reuse a deleted id"):
                ids.append(pool.pop(data.draw(st.integers(0, len(pool) - 1))))
            else:
                i = self.fresh_id(data)
                while i in ids or i in self.live:
                    i += 1
                ids.append(i)
        if kind == "explicit":
            got = self.index.add_batch(vecs, np.array(ids, dtype=np.uint64))
            np.testing.assert_array_equal(got, np.array(ids, dtype=np.uint64))
            self.note_add(ids, vecs)
            return
        # refused: one id is live, or appears twice; all or nothing
        if self.live and data.draw(st.booleans(), label="live id (else duplicate)"):
            ids[data.draw(st.integers(0, n - 1))] = data.draw(st.sampled_from(sorted(self.live)))
        else:
            if n == 1:
                ids.append(ids[0])
                vecs = np.concatenate([vecs, vecs])
            else:
                ids[-1] = ids[0]
        with pytest.raises(IdInUseError):
            self.index.add_batch(vecs, np.array(ids, dtype=np.uint64))

    # ------------------------------------------------------------------ deletes
    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def delete_present(self, data) -> None:
        i = data.draw(st.sampled_from(sorted(self.live)), label="id to delete")
        assert self.index.delete(i) is True
        del self.live[i]
        assert i not in self.index
        assert self.index.get(i) is None

    @rule(data=st.data())
    def delete_absent(self, data) -> None:
        dead = self.dead_ids()
        if dead and data.draw(st.booleans()):
            i = data.draw(st.sampled_from(dead), label="deleted id")
        else:
            i = self.fresh_id(data)
        assert self.index.delete(i) is False
        assert self.index.deleted_count() == self.slots - len(self.live)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def replace(self, data) -> None:
        i = data.draw(st.sampled_from(sorted(self.live)), label="id to replace")
        v = self.vectors(data, 1)[0]
        assert self.index.delete(i) is True
        del self.live[i]
        assert self.index.add(v, i) == i
        self.note_add([i], [v])

    # ------------------------------------------------------------------ commits
    @rule()
    def flush(self) -> None:
        self.index.flush()
        self.commit()
        assert self.index.pending == 0

    @rule()
    def rollback(self) -> None:
        self.index.rollback()
        self.revert()
        assert self.index.pending == 0

    @rule()
    def reopen(self) -> None:
        """close() without flush discards what is pending, as a crash would."""
        self.index.close()
        assert self.index.closed
        self.index = VectorIndex(self.path, options=self.opts)
        self.revert()

    @rule()
    def compact(self) -> None:
        self.index.compact()
        self.slots = len(self.live)
        self.commit()
        assert self.index.deleted_count() == 0
        assert self.index.pending == 0
        assert leftovers(self.dir, "sm.chassis") == []

    @rule(v=st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 1000)))
    def set_user_version(self, v: int) -> None:
        self.index.user_version = v
        self.uv = v

    def new_copy_path(self) -> str:
        self.n_backups += 1
        return os.path.join(self.dir, f"bk{self.n_backups}.chassis")

    def check_copy(self, dest: str, live, uv: int, slots: int, next_id: int, what: str) -> None:
        """A copy of the index at `dest` (a backup, a save): nothing left beside it, a reader
        sees `live` and `uv` in `slots` slots, and a writer continues the default ids at
        `next_id`. The copy is removed afterwards."""
        assert leftovers(self.dir, os.path.basename(dest)) == []
        with IndexReader(dest) as r:
            self.compare(r, live, uv, what)
            assert r.deleted_count() == slots - len(live)
        w = VectorIndex(dest, self.dims)
        try:
            assert w.add(np.ones(self.dims, np.float32)) == next_id
        finally:
            w.close()  # without flushing
        os.remove(dest)
        if os.path.exists(dest + ".undo"):
            os.remove(dest + ".undo")

    @rule()
    def backup_then_open_it(self) -> None:
        dest = self.new_copy_path()
        self.index.backup(dest)  # a writer flushes first
        self.commit()
        assert self.index.pending == 0
        # the backup holds the flushed state and continues its default ids
        self.check_copy(
            dest,
            self.flushed,
            self.flushed_uv,
            self.flushed_slots,
            self.flushed_next_id,
            "the backup, read-only",
        )

    @rule()
    def reader_sees_the_last_flush(self) -> None:
        with IndexReader(self.path) as r:
            self.compare(r, self.flushed, self.flushed_uv, "a reader of the file")
            assert r.deleted_count() == self.flushed_slots - len(self.flushed)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def matches_the_model(self) -> None:
        if self.index is None:
            return
        index = self.index
        self.compare(index, self.live, self.uv, "the writer")
        assert index.deleted_count() == self.slots - len(self.live), (
            f"deleted_count {index.deleted_count()}, expected {self.slots - len(self.live)}"
        )
        for i in self.dead_ids()[:20]:
            assert i not in index and index.get(i) is None

    @invariant()
    def filtered_and_approximate_searches(self) -> None:
        if self.index is None:
            return
        index = self.index
        live_ids = list(self.live)
        data = (
            np.stack(list(self.live.values())) if live_ids else np.empty((0, self.dims), np.float32)
        )
        q = self.qrng.standard_normal(self.dims).astype(np.float32)
        # filtered: allowed mixes live, deleted and never-used ids (at most 4 x ef of them: the
        # plan is the exact scan, cheaper than any walk at that ef)
        cand = live_ids + self.dead_ids() + [self.next_id + 7]
        pick = self.qrng.random(len(cand)) < 0.5
        allowed = [c for c, p in zip(cand, pick) if p]
        excluded = [c for c in live_ids if self.qrng.random() < 0.2]
        keep = [j for j, i in enumerate(live_ids) if i in set(allowed) and i not in set(excluded)]
        ef = max(50, len(cand) // 8 + 1)
        hits = index.search(q, 5, allowed=allowed, excluded=excluded, ef=ef)
        assert_exact_knn(
            [h.id for h in hits],
            [h.distance for h in hits],
            data[keep],
            np.array([live_ids[j] for j in keep], dtype=np.uint64),
            q,
            5,
            "euclidean",
            context="filtered search (allowed + excluded)",
        )
        # approximate (graph walk, deleted nodes routing): only live ids, true distances
        if len(live_ids) > 6:
            hits = index.search(q, 5, ef=5)
            got = [h.id for h in hits]
            assert len(set(got)) == len(got)
            assert set(got) <= set(live_ids), (
                f"search returned deleted/unknown ids {set(got) - set(live_ids)}"
            )
            if got:
                true = pairwise_distances(np.stack([self.live[i] for i in got]), q, "euclidean")[0]
                np.testing.assert_allclose([h.distance for h in hits], true, rtol=1e-4, atol=1e-4)
            rep = index.check()
            assert rep.corrupt == [] and rep.not_finite == []
            if not rep.unreachable:
                assert len(got) == 5, (
                    f"graph search found {len(got)} of 5 with every live node reachable"
                )


def machine_test(machine: type[RuleBasedStateMachine], least_examples: int) -> type:
    """The pytest class of a state machine: slow, runs of 40 steps, at least ``least_examples``
    runs (more under a profile that asks for more)."""
    test = machine.TestCase
    test.pytestmark = [pytest.mark.slow]  # type: ignore[attr-defined]
    test.settings = settings(
        max_examples=max(least_examples, settings().max_examples),
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )
    return test


TestLifecycleMachine = machine_test(LifecycleMachine, 100)  # the thorough profile runs 300


class MemoryLifecycleMachine(LifecycleMachine):
    """The same model against an in-memory index (VectorIndex(None, dims)): nothing is ever
    "flushed", so flush changes nothing, rollback is refused and keeps everything, and what
    leaves the process goes through save(path) (a reopen is save + VectorIndex.load)."""

    @initialize(
        dims=st.integers(4, 8), m=st.sampled_from([4, 8, 16]), qseed=st.integers(0, 2**32 - 1)
    )
    def create(self, dims: int, m: int, qseed: int) -> None:
        super().create(dims, m, qseed)
        self.index.close()
        os.remove(self.path)  # the file-backed machine's; this one keeps none
        self.index = VectorIndex(None, dims, self.opts)
        assert self.index.in_memory and self.index.path is None

    @rule()
    def flush(self) -> None:
        self.index.flush()
        assert self.index.pending == 0
        assert not os.path.exists(self.path)

    @rule()
    def rollback(self) -> None:
        with pytest.raises(InvalidArgumentError):
            self.index.rollback()

    @rule()
    def reopen(self) -> None:
        self.index.save(self.path)
        self.index.close()
        self.index = VectorIndex.load(self.path, options=self.opts)
        os.remove(self.path)

    @rule()
    def compact(self) -> None:
        self.index.compact()
        self.slots = len(self.live)
        assert self.index.deleted_count() == 0

    @rule()
    def backup_then_open_it(self) -> None:
        dest = self.new_copy_path()
        self.index.save(dest)
        self.check_copy(
            dest, self.live, self.uv, self.slots, self.next_id, "the saved file, read-only"
        )

    @rule()
    def reader_sees_the_last_flush(self) -> None:
        pass  # no file to read; backup_then_open_it reads what save wrote


TestMemoryLifecycleMachine = machine_test(MemoryLifecycleMachine, 60)


# =========================================================================== A2. filtered search
N_FILTER, D_FILTER = 20_000, 32
SELECTIVITIES = [1.0, 0.3, 0.1, 0.01, 0.001]


@pytest.fixture(scope="module")
def filter_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("filtered") / "f.chassis"
    data = clustered_data(N_FILTER, D_FILTER, seed=11)
    index = VectorIndex(path, D_FILTER, IndexOptions(max_connections=16, ef_construction=100))
    index.add_batch(data)
    index.flush()
    queries = clustered_data(200, D_FILTER, seed=11, sample_seed=12345)
    yield index, data, queries
    index.close()


@pytest.mark.parametrize("selectivity", SELECTIVITIES, ids=[f"{s:g}" for s in SELECTIVITIES])
def test_filtered_search_recall(filter_index, selectivity):
    index, data, queries = filter_index
    assert index.options.ef_search == 50
    g = np.random.default_rng(int(selectivity * 1e6) + 1)
    n_allowed = max(1, int(round(N_FILTER * selectivity)))
    allowed = np.sort(g.choice(N_FILTER, n_allowed, replace=False)).astype(np.uint64)
    k = 10
    kk = min(k, n_allowed)
    true_ids, _ = brute_force_knn(
        data[allowed.astype(np.int64)], queries, kk, "euclidean", ids=allowed
    )

    t0 = time.perf_counter()
    got = [index.search(q, k, allowed=allowed) for q in queries]
    dt_loop = time.perf_counter() - t0
    allowed_set = set(allowed.tolist())
    for r in got:
        assert len(r) == kk, f"{len(r)} results, expected {kk}"
        assert {h.id for h in r} <= allowed_set, "a result outside the allowed set"
    got_ids = np.array([[h.id for h in r] for r in got], dtype=np.uint64)
    recall = recall_at_k(got_ids, true_ids)

    t0 = time.perf_counter()
    b_ids, b_d = index.search_batch(queries, k, allowed=allowed)
    dt_batch = time.perf_counter() - t0
    np.testing.assert_array_equal(
        b_ids[:, :kk], got_ids, err_msg="search_batch(allowed=) != loop of search"
    )
    np.testing.assert_allclose(
        b_d[:, :kk], np.array([[h.distance for h in r] for r in got]), rtol=1e-6, atol=1e-6
    )
    assert (b_ids[:, kk:] == np.uint64(NO_ID)).all() and np.isinf(b_d[:, kk:]).all()

    print(
        f"\nselectivity {selectivity:>6.1%} ({n_allowed} allowed): recall@10 {recall:.4f}, "
        f"search loop {len(queries) / dt_loop:,.0f} QPS, search_batch {len(queries) / dt_batch:,.0f} QPS"
    )
    assert recall >= 0.95, f"filtered recall@10 {recall:.4f} at selectivity {selectivity}"


@pytest.mark.parametrize("selectivity", [1.0, 0.3, 0.01], ids=["all", "0.3", "0.01"])
def test_excluded_ids_are_never_returned(filter_index, selectivity):
    index, data, queries = filter_index
    g = np.random.default_rng(7)
    allowed = None
    pool = np.arange(N_FILTER, dtype=np.uint64)
    if selectivity < 1.0:
        pool = np.sort(g.choice(N_FILTER, int(N_FILTER * selectivity), replace=False)).astype(
            np.uint64
        )
        allowed = pool
    qs = queries[:60]
    # exclude the exact 5 nearest allowed neighbours of the first queries, plus random ids
    near, _ = brute_force_knn(data[pool.astype(np.int64)], qs[:20], 5, "euclidean", ids=pool)
    excluded = np.unique(
        np.concatenate([near.ravel(), g.choice(N_FILTER, 500, replace=False).astype(np.uint64)])
    )
    ex_set = set(excluded.tolist())
    keep = np.array(sorted(set(pool.tolist()) - ex_set), dtype=np.uint64)
    true_ids, _ = brute_force_knn(data[keep.astype(np.int64)], qs, 10, "euclidean", ids=keep)
    got = []
    for q in qs:
        r = index.search(q, 10, allowed=allowed, excluded=excluded)
        ids = [h.id for h in r]
        assert not (set(ids) & ex_set), f"excluded ids returned: {set(ids) & ex_set}"
        if allowed is not None:
            assert set(ids) <= set(allowed.tolist())
        assert len(ids) == 10
        got.append(ids)
    b_ids, _ = index.search_batch(qs, 10, allowed=allowed, excluded=excluded)
    assert not (set(b_ids.ravel().tolist()) & ex_set)
    np.testing.assert_array_equal(b_ids, np.array(got, dtype=np.uint64))
    assert recall_at_k(np.array(got), true_ids) >= 0.95


def test_filters_with_unknown_deleted_and_overlapping_ids(tmp_path):
    g = np.random.default_rng(3)
    data = g.standard_normal((300, 8)).astype(np.float32)
    with VectorIndex(tmp_path / "x.chassis", 8) as index:
        index.add_batch(data)
        for i in range(0, 300, 3):
            assert index.delete(i)
        q = g.standard_normal(8).astype(np.float32)
        assert index.search(q, 5, allowed=[]) == []
        assert index.search(q, 5, allowed=[0, 3, 6, 10**12]) == []  # only deleted or unknown
        ids, d = index.search_batch(np.stack([q, q]), 5, allowed=[])
        assert (ids == np.uint64(NO_ID)).all() and np.isinf(d).all()
        live = [i for i in range(300) if i % 3]
        assert index.search(q, 5, excluded=live) == []
        # allowed and excluded overlap: excluded wins
        hits = index.search(q, 10, allowed=[1, 2, 3, 4, 5, 7], excluded=[2, 7])
        assert sorted(h.id for h in hits) == [1, 4, 5]
        # graph walk with a large allowed set holding many deleted ids
        allowed = list(range(300))
        hits = index.search(q, 10, allowed=allowed, ef=10)
        assert len(hits) == 10 and all(h.id % 3 for h in hits)
        keep = np.array(live)
        assert_exact_knn(
            [h.id for h in index.search(q, 10, allowed=allowed, ef=300)],
            [h.distance for h in index.search(q, 10, allowed=allowed, ef=300)],
            data[keep],
            keep,
            q,
            10,
            "euclidean",
        )


# =========================================================================== A3. processes
READER_CHILD = r"""
import json, sys
import numpy as np
import chassis

path, qfile = sys.argv[1], sys.argv[2]
queries = np.load(qfile)
r = chassis.IndexReader(path)
print("READY", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
        break
    ids = r.ids()
    ef = max(len(r), 10)
    res = [[h.id for h in r.search(q, 10, ef=ef)] for q in queries]
    probe = [int(x) for x in cmd[1:]]
    out = dict(len=len(r), deleted=r.deleted_count(), user_version=r.user_version,
               ids=ids.tolist(), search=res,
               contains={str(p): (p in r) for p in probe},
               got={str(p): (None if r.get(p) is None else r.get(p).tolist()) for p in probe})
    if cmd[0] == "full":
        vecs = np.stack([r.get(int(i)) for i in ids]) if len(ids) else np.empty((0, r.dimensions), np.float32)
        out["vec_bits"] = vecs.view(np.uint32).tolist()
    print(json.dumps(out), flush=True)
r.close()
"""


class ReaderChild:
    """A long-lived reader in another process, asked for its view one line at a time."""

    def __init__(self, path, queries: np.ndarray, workdir: Path):
        qfile = workdir / "reader-queries.npy"
        np.save(qfile, np.ascontiguousarray(queries, dtype=np.float32))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", READER_CHILD, str(path), str(qfile)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert self.proc.stdout.readline().strip() == "READY", self.proc.stderr.read()

    def ask(self, *probe: int, full: bool = False) -> dict:
        self.proc.stdin.write(("full" if full else "view") + "".join(f" {p}" for p in probe) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"reader child died: rc={self.proc.poll()}\n{self.proc.stderr.read()[-4000:]}"
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()
        assert self.proc.returncode == 0, f"reader child exit status {self.proc.returncode}"


def exact_ids(data_ids, data, queries, k=10):
    ids, _ = brute_force_knn(
        data, queries, k, "euclidean", ids=np.asarray(data_ids, dtype=np.uint64)
    )
    return ids


@POSIX_ONLY
def test_reader_in_another_process_sees_a_delete_only_after_the_flush(tmp_path):
    path = tmp_path / "d.chassis"
    data = clustered_data(500, 8, seed=3)
    gone = [7, 123, 499]
    queries = data[gone]  # each deleted vector is its own query's exact nearest neighbour
    with VectorIndex(path, 8) as w:
        w.add_batch(data)
        w.flush()
        child = ReaderChild(path, queries, tmp_path)
        try:
            before = child.ask(*gone)
            assert before["len"] == 500 and before["deleted"] == 0
            assert [s[0] for s in before["search"]] == gone
            for i in gone:
                assert w.delete(i) is True
            assert w.delete(10**9) is False
            # this handle: hidden at once
            assert len(w) == 497 and w.deleted_count() == 3
            for i, q in zip(gone, queries):
                assert i not in w and w.get(i) is None
                assert i not in [h.id for h in w.search(q, 10, ef=500)]
                assert i not in [
                    h.id for h in w.search(q, 10)
                ]  # graph walk: still routes, never returned
            # the other process: not until the flush
            mid = child.ask(*gone)
            assert mid["len"] == 500 and mid["deleted"] == 0
            assert all(mid["contains"][str(i)] for i in gone)
            for i in gone:
                assert_bit_identical(
                    np.array(mid["got"][str(i)], np.float32), data[i], f"reader get({i})"
                )
            assert [s[0] for s in mid["search"]] == gone
            w.flush()
            after = child.ask(*gone, full=True)
            assert after["len"] == 497 and after["deleted"] == 3
            assert not any(after["contains"][str(i)] for i in gone)
            assert all(after["got"][str(i)] is None for i in gone)
            keep = [i for i in range(500) if i not in gone]
            assert after["ids"] == keep
            assert_bit_identical(
                np.array(after["vec_bits"], np.uint32).view(np.float32), data[keep]
            )
            np.testing.assert_array_equal(
                np.array(after["search"], np.uint64), exact_ids(keep, data[keep], queries)
            )
        finally:
            child.close()


@POSIX_ONLY
def test_compaction_is_followed_by_readers_here_and_in_another_process(tmp_path):
    path = tmp_path / "c.chassis"
    data = clustered_data(3000, 8, seed=5)
    queries = clustered_data(5, 8, seed=5, sample_seed=77)
    w = VectorIndex(path, 8, IndexOptions(max_connections=8, ef_construction=64))
    try:
        for s in range(0, 3000, 500):  # several commits: the old file's seq is well above 1
            w.add_batch(data[s : s + 500])
            w.flush()
        dead = list(range(0, 3000, 4)) + [2999]  # includes the largest id
        for i in dead:
            assert w.delete(i)
        w.user_version = 4242
        w.flush()
        keep = [i for i in range(3000) if i not in set(dead)]
        local = IndexReader(path)
        child = ReaderChild(path, queries, tmp_path)
        try:
            pre = child.ask()
            assert pre["len"] == len(keep) and pre["deleted"] == len(dead)
            assert len(local) == len(keep) and local.deleted_count() == len(dead)
            old_inode = os.stat(path).st_ino
            snap = local.snapshot()  # pins the old file

            w.compact()
            assert os.stat(path).st_ino != old_inode, (
                "compact() did not rename a new file over the path"
            )
            assert leftovers(tmp_path, "c.chassis") == []
            assert w.deleted_count() == 0 and len(w) == len(keep)
            assert w.ids().tolist() == keep
            assert w.user_version == 4242
            for i in keep:
                assert_bit_identical(w.get(i), data[i], f"get({i}) after compact")
            assert w.check().ok
            # default ids continue after the old largest (2999, deleted): 3000
            extra = clustered_data(10, 8, seed=5, sample_seed=99)
            new_ids = w.add_batch(extra)
            np.testing.assert_array_equal(new_ids, np.arange(3000, 3010, dtype=np.uint64))
            w.flush()
            all_ids = keep + list(range(3000, 3010))
            all_vecs = np.concatenate([data[keep], extra])
            expected_search = exact_ids(all_ids, all_vecs, queries)

            # the readers move to the new file by themselves (~50 ms after the rename, next call)
            time.sleep(0.25)
            view = child.ask(full=True)
            assert view["ids"] == all_ids, (
                "the reader in another process did not follow the compaction"
            )
            assert view["deleted"] == 0 and view["user_version"] == 4242
            assert_bit_identical(np.array(view["vec_bits"], np.uint32).view(np.float32), all_vecs)
            np.testing.assert_array_equal(np.array(view["search"], np.uint64), expected_search)

            assert local.ids().tolist() == all_ids, (
                "the reader in this process did not follow the compaction"
            )
            assert local.deleted_count() == 0 and local.user_version == 4242
            for i, v in zip(all_ids, all_vecs):
                assert_bit_identical(local.get(i), v, f"reader get({i})")
            got = np.array(
                [[h.id for h in local.search(q, 10, ef=len(all_ids))] for q in queries], np.uint64
            )
            np.testing.assert_array_equal(got, expected_search)
            # the snapshot still holds the old file's state
            assert len(snap) == len(keep) and snap.ids().tolist() == keep
            del snap
            # and a later flush is seen too (the readers are on the new file, not the unlinked one)
            assert w.delete(3000)
            w.flush()
            time.sleep(0.1)
            assert 3000 not in local and len(local) == len(all_ids) - 1
            assert child.ask(3000)["contains"]["3000"] is False
        finally:
            child.close()
            local.close()
    finally:
        w.close()


def test_user_version_of_writers_readers_and_snapshots(tmp_path):
    path = tmp_path / "uv.chassis"
    with VectorIndex(path, 4) as w:
        assert w.user_version == 0
        w.add(np.ones(4, np.float32))
        w.user_version = 1
        w.flush()
        r = IndexReader(path)
        snap = r.snapshot()
        w.user_version = 2**64 - 1
        assert w.user_version == 2**64 - 1 and w.pending == 0
        assert r.user_version == 1, "a reader sees user_version only once flushed"
        w.flush()  # a user_version change alone is something to commit
        assert r.user_version == 2**64 - 1
        assert snap.user_version == 1, "a snapshot reports its own commit's user_version"
        w.user_version = 3
        w.rollback()
        assert w.user_version == 2**64 - 1
        for bad in (-1, 2**64):
            with pytest.raises((ValueError, OverflowError, TypeError)):
                w.user_version = bad
        assert w.user_version == 2**64 - 1
        r.close()
    with IndexReader(path) as r2:
        assert r2.user_version == 2**64 - 1


def test_backup_from_a_reader_while_a_writer_thread_writes_is_one_flushed_state(tmp_path):
    path = tmp_path / "b.chassis"
    pool = clustered_data(12_000, 16, seed=9)
    g = np.random.default_rng(4)
    w = VectorIndex(path, 16, IndexOptions(max_connections=12, ef_construction=48))
    w.add_batch(pool[:3000])
    w.user_version = 0
    w.flush()
    states: dict[int, dict[int, np.ndarray]] = {0: {i: pool[i] for i in range(3000)}}
    model = dict(states[0])
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            nxt, k = 3000, 0
            while not stop.is_set() and nxt + 300 <= len(pool):
                k += 1
                n = int(g.integers(50, 300))
                ids = w.add_batch(pool[nxt : nxt + n])
                assert ids[0] == nxt
                for i in range(nxt, nxt + n):
                    model[i] = pool[i]
                nxt += n
                for i in g.choice(
                    sorted(model), 40, replace=False
                ).tolist():  # deletes change markers in place
                    assert w.delete(i)
                    del model[i]
                victim = int(g.choice(sorted(model)))  # a replace: same id, new vector
                assert w.delete(victim)
                del model[victim]
                v = -pool[victim]
                w.add(v, victim)
                model[victim] = v
                w.user_version = k
                w.flush()
                states[k] = dict(model)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    reader = IndexReader(path)
    t = threading.Thread(target=writer)
    t.start()
    dests = []
    try:
        for b in range(20):
            dest = tmp_path / f"backup{b}.chassis"
            reader.backup(dest)
            dests.append(dest)
            time.sleep(0.005)
    finally:
        stop.set()
        t.join()
        reader.close()
    assert not errors, errors
    w.close()
    assert len(states) > 3, "the writer thread hardly ran"
    seen = []
    for dest in dests:
        assert dest.exists()
        assert leftovers(tmp_path, dest.name) == []
        with IndexReader(dest) as r:
            k = r.user_version
            assert k in states, f"{dest.name}: user_version {k} is no flushed state"
            model_k = states[k]
            assert r.ids().tolist() == list(model_k), (
                f"{dest.name}: ids differ from flushed state {k}"
            )
            assert len(r) == len(model_k)
            for i, v in model_k.items():
                assert_bit_identical(r.get(i), v, f"{dest.name} (state {k}): get({i})")
            rep = r.check()
            assert rep.corrupt == [] and rep.not_finite == [], f"{dest.name}: {rep}"
            q = pool[:3]
            data = np.stack(list(model_k.values()))
            for qi in q:
                hits = r.search(qi, 10, ef=len(model_k))
                assert_exact_knn(
                    [h.id for h in hits],
                    [h.distance for h in hits],
                    data,
                    np.array(list(model_k), np.uint64),
                    qi,
                    10,
                    "euclidean",
                )
            seen.append(k)
        # the backup is a working index: a writer opens it (no undo log replay surprises)
        with VectorIndex(dest) as bw:
            assert bw.ids().tolist() == list(model_k)
            assert bw.check().corrupt == []
    print(f"\nbackups taken at flushed states {seen} of {len(states)}")
