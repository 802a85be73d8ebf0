"""Threads that search while the same process writes.

Python threads searching one VectorIndex run (and complete) while the main thread is inside
``add_batch`` / ``flush``; during the batch they see exactly the state before it (exact search
equals brute force over the pre-batch vectors), never half a batch; reader threads in the
writer's process see only flushed states; approximate searches (default ef) during a batch still
return k results.

The oracles are brute force (conftest.brute_force_knn / pairwise_distances); no assertion is
about timing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from chassis import IndexOptions, IndexReader, VectorIndex
from conftest import ExactOracle, brute_force_knn

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")


# =========================================================================== e. threads
THREAD_DIMS = 32
THREAD_K = 10
THREAD_EF = 100_000  # >= any length here: exact searches


class Searchers:
    """Python threads searching `index` (search and search_batch, exact) in a loop.

    The main thread marks phases by setting named events in order (e.g. "started", "done").
    Each result is stored with the phases already set when the call began and when it had
    ended: a call with "done" in `before` began after "done"; a call with "started" in `before`
    and "done" not in `after` ran entirely between the two.
    """

    def __init__(self, index, queries: np.ndarray, n_threads: int, phases: list[str]) -> None:
        self.index, self.queries = index, queries
        self.events = {name: threading.Event() for name in phases}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results: list[tuple[frozenset, frozenset, list[int], object, object, int]] = []
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._work, args=(t,), daemon=True) for t in range(n_threads)
        ]
        for t in self.threads:
            t.start()

    def flags(self) -> frozenset:
        return frozenset(n for n, e in self.events.items() if e.is_set())

    def mark(self, phase: str) -> None:
        self.events[phase].set()

    def around(self, start: str, action: Callable[[], Any], end: str, what: str) -> Any:
        """Mark ``start``, run ``action``, mark ``end``, then wait for a search that began after
        ``end`` (``what``); returns what ``action`` returned."""
        self.mark(start)
        out = action()
        self.mark(end)
        self.wait_for(lambda r: end in r[0], what)
        return out

    def _work(self, tid: int) -> None:
        rng = np.random.default_rng(tid)
        q = self.queries
        try:
            while not self.stop.is_set():
                before = self.flags()
                if tid % 2 == 0:
                    qis = [int(rng.integers(0, len(q)))]
                    hits = self.index.search(q[qis[0]], THREAD_K, ef=THREAD_EF)
                    ids = [[h.id for h in hits]]
                    dists = [[h.distance for h in hits]]
                else:
                    qis = rng.integers(0, len(q), size=3).tolist()
                    b_ids, dists = self.index.search_batch(
                        q[qis], THREAD_K, ef=THREAD_EF, threads=1
                    )
                    ids = b_ids.astype(np.int64)
                n = len(self.index)
                after = self.flags()
                with self.lock:
                    self.results.append((before, after, qis, ids, dists, n))
        except Exception as e:
            self.errors.append(repr(e))

    def count(self, pred) -> int:
        with self.lock:
            return sum(1 for r in self.results if pred(r))

    def wait_for(self, pred, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count(pred) == 0:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"no search {what} within {timeout} s"
            time.sleep(0.002)

    def finish(self) -> list:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in self.threads), "a search thread hung"
        assert not self.errors, f"searches raised: {self.errors[:3]}"
        return list(self.results)

    @staticmethod
    def states(oracle: ExactOracle, result, sizes: dict[str, int]) -> set[str]:
        """The names of the states (by size) whose exact answer `result` is."""
        _, _, qis, ids, dists, _ = result
        return {
            name
            for name, size in sizes.items()
            if all(oracle.matches(q, ids[j], dists[j], size) for j, q in enumerate(qis))
        }


@pytest.mark.slow
def test_threads_search_during_add_batch_and_flush_and_see_the_state_before(index_path):
    n_pre, n_batch, n_more = 2_000, 20_000, 3_000
    rng = np.random.default_rng(31)
    data = rng.standard_normal((n_pre + n_batch + n_more, THREAD_DIMS)).astype(np.float32)
    # queries near batch vectors (the batch changes their answer) and near old ones
    picks = np.concatenate([rng.integers(n_pre, n_pre + n_batch, 24), rng.integers(0, n_pre, 8)])
    queries = (data[picks] + 0.05 * rng.standard_normal((len(picks), THREAD_DIMS))).astype(
        np.float32
    )
    oracle = ExactOracle(data, queries, THREAD_K)
    pre, full = n_pre, n_pre + n_batch
    for q in range(24):
        bf_ids, bf_d = brute_force_knn(data[:full], queries[q], THREAD_K, "euclidean")
        assert not oracle.matches(q, bf_ids, bf_d, pre), "premise: the batch changes these answers"

    opts = IndexOptions(max_connections=8, ef_construction=48)
    with VectorIndex(index_path, THREAD_DIMS, opts) as index:
        index.add_batch(data[:pre])
        index.flush()

        # ---- add_batch in the main thread while 4 threads search
        s = Searchers(index, queries, 4, ["started", "done"])
        s.wait_for(lambda r: True, "before the batch")
        ids = s.around(
            "started", lambda: index.add_batch(data[pre:full], threads=1), "done", "after the batch"
        )
        results = s.finish()
        np.testing.assert_array_equal(ids, np.arange(pre, full, dtype=np.uint64))

        during_pre = during = 0
        for r in results:
            before, after, qis, _, _, n = r
            names = Searchers.states(oracle, r, {"pre": pre, "full": full})
            assert names, (
                f"a search (queries {qis}, len {n}) returned neither the exact answer over the vectors "
                f"before the batch nor over all of them: half a batch, or a wrong result"
            )
            assert n in (pre, full), f"len() was {n} around add_batch: neither before nor after it"
            if "started" not in after:  # over before the batch began
                assert names == {"pre"} and n == pre
            if "done" in before:  # began after add_batch returned
                assert "full" in names and n == full, (
                    f"a search begun after add_batch returned saw {names}"
                )
            if "started" in before and "done" not in after:
                during += 1
                during_pre += "pre" in names
        print(
            f"add_batch: {len(results)} searches, {during} completed during the batch, "
            f"{during_pre} of them saw the state before it"
        )
        assert during > 0, (
            "no search completed while add_batch ran: searches wait for the batch "
            "(the GIL is held, or the index is locked for the whole batch)"
        )
        assert during_pre > 0, "no search that ran during add_batch saw the state before the batch"

        # ---- flush in the main thread (a big unflushed state) while 4 threads search
        index.add_batch(data[full:], threads=1)
        total = len(data)
        assert len(index) == total and index.pending == total - pre
        during_flush = 0
        for attempt in range(5):
            s = Searchers(index, queries, 4, ["started", "done"])
            s.wait_for(lambda r: True, "before the flush")
            s.around("started", index.flush, "done", "after the flush")
            results = s.finish()
            for r in results:
                names = Searchers.states(oracle, r, {"full": total})
                assert names == {"full"} and r[5] == total, (
                    f"a search around flush (queries {r[2]}, len {r[5]}) is not exact over all "
                    f"{total} vectors"
                )
            during_flush += sum(1 for r in results if "started" in r[0] and "done" not in r[1])
            print(
                f"flush attempt {attempt}: {len(results)} searches, {during_flush} completed during flushes"
            )
            assert index.pending == 0
            if during_flush > 0:
                break
            # nothing completed inside that flush: give the next one more to write
            more = (
                np.random.default_rng(100 + attempt)
                .standard_normal((2000, THREAD_DIMS))
                .astype(np.float32)
            )
            index.add_batch(more, threads=1)
            data = np.concatenate([data, more])
            oracle = ExactOracle(data, queries, THREAD_K)
            total = len(data)
        assert during_flush > 0, (
            "no search completed while flush ran (5 tries): searches wait for flush"
        )
    with IndexReader(index_path) as reader:
        assert len(reader) == total


@pytest.mark.slow
def test_reader_threads_in_the_writers_process_see_only_flushed_states(index_path):
    """Threads searching an IndexReader while the same process's writer adds (published but
    unflushed) and then flushes: only the flushed states, each whole."""
    n_pre, n_batch = 1_500, 6_000
    rng = np.random.default_rng(41)
    data = rng.standard_normal((n_pre + n_batch, THREAD_DIMS)).astype(np.float32)
    picks = rng.integers(n_pre, n_pre + n_batch, 16)
    queries = (data[picks] + 0.05 * rng.standard_normal((16, THREAD_DIMS))).astype(np.float32)
    oracle = ExactOracle(data, queries, THREAD_K)
    pre, full = n_pre, n_pre + n_batch
    opts = IndexOptions(max_connections=8, ef_construction=48)
    with VectorIndex(index_path, THREAD_DIMS, opts) as writer:
        writer.add_batch(data[:pre])
        writer.flush()
        with IndexReader(index_path) as reader:
            s = Searchers(reader, queries, 2, ["batching", "published", "flushing", "flushed"])
            s.wait_for(lambda r: True, "before the batch")
            s.around(
                "batching",
                lambda: writer.add_batch(data[pre:], threads=1),
                "published",  # the writer's own searches see the batch; it is not flushed
                "while the batch was published but unflushed",
            )
            assert len(writer) == full and writer.pending == n_batch
            s.around("flushing", writer.flush, "flushed", "after the flush")
            results = s.finish()
            for r in results:
                before, after, qis, _, _, n = r
                names = Searchers.states(oracle, r, {"pre": pre, "full": full})
                assert names, f"a reader search (queries {qis}) matched no flushed state"
                assert n in (pre, full)
                if "flushing" not in after:  # over before the flush began
                    assert names == {"pre"} and n == pre, "a reader saw unflushed adds"
                if "flushed" in before:
                    assert names == {"full"} and n == full, "a reader missed a flush"


@pytest.mark.slow
def test_approximate_searches_during_a_batch_return_k_results(index_path):
    """A search (default ef) from another thread while add_batch links new nodes returns k
    results from the published state, like the same search without a writer: routing through
    nodes being linked (visible in other nodes' lists before their own lists are filled) must
    not end the search early. The queries are vectors of the batch being linked, which is
    where such nodes are met."""
    k, pre, step, end = 5, 1_000, 2_000, 81_000
    target = 60_000  # searches overlapping the batches: stop adding batches once reached
    data = np.random.default_rng(61).standard_normal((end, 16)).astype(np.float32)
    opts = IndexOptions(max_connections=8, ef_construction=32)
    with VectorIndex(index_path, 16, opts) as index:
        index.add_batch(data[:pre])
        index.flush()
        current = [pre, pre + step]
        stop = threading.Event()
        short: list[tuple[int, int, int]] = []
        beyond: list[tuple[int, int]] = []
        counts = [0, 0]
        errors: list[str] = []

        def work(tid: int) -> None:
            rng = np.random.default_rng(tid)
            try:
                while not stop.is_set():
                    lo, hi = current
                    t = int(rng.integers(lo, hi))
                    n0 = len(index)
                    hits = index.search(data[t], k)
                    n1 = len(index)
                    counts[tid] += 1
                    if len(hits) < min(k, n0):
                        short.append((n0, len(hits), t))
                    if hits and max(h.id for h in hits) >= n1:
                        beyond.append((n1, max(h.id for h in hits)))
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(2)]
        for t in threads:
            t.start()
        added = pre
        for lo in range(pre, end, step):
            current[:] = [lo, lo + step]
            index.add_batch(data[lo : lo + step], threads=1)
            added = lo + step
            if sum(counts) >= target:
                break
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        print(
            f"{sum(counts)} searches during {(added - pre) // step} batches, {len(short)} with fewer "
            f"than {k} results"
        )
        assert not beyond, f"searches returned ids not yet published: (len, id) {beyond[:5]}"
        assert not short, (
            f"{len(short)} of {sum(counts)} searches (default ef) during add_batch returned fewer than "
            f"k={k} results although the index held >= k vectors; (len, results, query row): {short[:5]}"
        )
        # the premise: without a writer the same searches return k results
        for t in range(pre, added, 97):
            assert len(index.search(data[t], k)) == k
