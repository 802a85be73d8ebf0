"""Readers that search while a writer writes: `IndexReader`, snapshots, threads, processes.

Readers in any process search while a writer writes, and searches never wait for writes. Checks:

* basics: ``IndexReader(path)`` opens while a writer holds the file, raises IndexNotFoundError for a
  missing file (and creates nothing), refuses every write with ReadOnlyError (an
  io.UnsupportedOperation), takes metric / precision / dimensions from the file even when the
  options passed say otherwise, reports the last FLUSHED user_version; ``VectorIndex(path,
  read_only=True)`` behaves the same;
* visibility: a reader never sees unflushed adds (len, ids, get, ``in``, exact search), sees each
  flush at its next call; ``snapshot()`` pins one state (len, ids, get, search, search_batch) while
  the reader's own calls move on; a writer's own searches see its adds at once;
* processes: a writer child adds (single adds and batches, several ops per flush) and flushes for
  a few seconds while two reader children search continuously; every length a reader observes is
  a flushed count, in non-decreasing order, every returned id is below the count of the call that
  returned it, and every flushed vector is found by exact search (ef >= len) once covered;
* a writer SIGKILLed mid-batch while readers search: the readers go on without errors, never see
  anything past the last flush, and a new writer opens the file (no lock left) at that flush;
* threads: Python threads searching one VectorIndex run (and complete) while the main thread is
  inside ``add_batch`` / ``flush``; during the batch they see exactly the state before it (exact
  search equals brute force over the pre-batch vectors), never half a batch; reader threads in
  the writer's process see only flushed states; approximate searches (default ef) during a
  batch still return k results;
* a reader follows a new index file renamed over its path, while a snapshot keeps the old one.

The oracles are brute force (conftest.brute_force_knn / pairwise_distances) and the writer's
deterministic vector pool; no assertion is about timing.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

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
    assert_bit_identical,
    assert_child_ok,
    assert_exact_knn,
    brute_force_knn,
    child_env,
    describe_returncode,
    pairwise_distances,
    run_python,
    to_half,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")

D = 8


def vecs(n: int, d: int = D, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def exact(index, query, k: int = 10):
    """(ids, distances) of an exact search (ef >= len, so the whole visible state is scanned)."""
    hits = index.search(query, k, ef=max(len(index), k, 1) + 1000)
    return np.array([h.id for h in hits], dtype=np.uint64), np.array([h.distance for h in hits])


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
            ids, dist = exact(reader, data[3], k=5)
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
            r_ids, r_d = exact(reader, q)
            w_ids, w_d = exact(writer, q)
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
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(vecs(3))
        writer.user_version = 7
        writer.flush()
        with IndexReader(index_path) as reader:
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
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(data[:30])
        writer.flush()
        reader = IndexReader(index_path)
        try:
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
                    ids, dist = exact(reader, data[i], k=10)
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
                ids, dist = exact(reader, data[hi - 1], k=10)
                assert int(ids[0]) == hi - 1
                assert_exact_knn(
                    ids, dist, data[:flushed], np.arange(flushed), data[hi - 1], 10, "euclidean"
                )
        finally:
            reader.close()


def test_reader_does_not_see_a_rolled_back_batch(index_path):
    data = vecs(40, seed=12)
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(data[:20])
        writer.flush()
        with IndexReader(index_path) as reader:
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
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(data[:50])
        writer.user_version = 1
        writer.flush()
        reader = IndexReader(index_path)
        try:
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
                    ids, _ = exact(reader, data[hi - 1], k=1)
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
                    assert (b_ids < 50).all(), (
                        "a snapshot returned an id flushed after it was taken"
                    )
            # a new snapshot takes the newest state
            with reader.snapshot() as s2:
                assert len(s2) == 120 and s2.seq > seq0 and s2.user_version == 4
                b_ids, b_d = s2.search_batch(queries, k, ef=1000)
                for qi, q in enumerate(queries):
                    assert_exact_knn(b_ids[qi], b_d[qi], data, np.arange(120), q, k, "euclidean")
        finally:
            reader.close()


def test_writers_own_searches_see_its_adds_at_once_and_its_snapshot_pins(index_path):
    data = vecs(60, seed=15)
    with VectorIndex(index_path, D) as writer:
        writer.add_batch(data[:10])
        with writer.snapshot() as before:
            for i in range(10, 20):
                assert writer.add(data[i]) == i
                assert len(writer) == i + 1  # no flush needed
                ids, dist = exact(writer, data[i], k=3)
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


# =========================================================================== c/d. processes
CHILD = r'''
"""Children of tests/test_readers.py: a writer that adds and flushes, readers that search."""
import json
import os
import sys
import time
import traceback

import numpy as np


def make_pool(seed, n, dims):
    """The vectors a writer adds, in order: row i gets the default id i."""
    return np.random.default_rng(seed).standard_normal((n, dims)).astype(np.float32)


def options():
    import chassis
    return chassis.IndexOptions(max_connections=8, ef_construction=32)


def logger(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(msg):
        os.write(fd, (msg + "\n").encode())
        os.fsync(fd)
    return note


def writer_loop(path, log, seed, pool_n, dims, duration, wseed):
    """Several ops (single adds, batches of 1-300) per flush; FLUSHED n after each flush."""
    import chassis
    pool = make_pool(seed, pool_n, dims)
    rng = np.random.default_rng(wseed)
    note = logger(log)
    index = chassis.VectorIndex(path)
    n = len(index)
    note(f"START {n}")
    end = time.monotonic() + duration
    while time.monotonic() < end and n + 4 * 300 < pool_n:
        for _ in range(int(rng.integers(1, 5))):
            if rng.random() < 0.45:
                got = index.add(pool[n])
                if got != n:
                    note(f"MISMATCH add: got {got}, expected {n}")
                    os._exit(3)
                n += 1
            else:
                b = int(rng.integers(1, 301))
                got = index.add_batch(pool[n:n + b], threads=1)
                if not np.array_equal(got, np.arange(n, n + b)):
                    note(f"MISMATCH batch at {n}")
                    os._exit(3)
                n += b
        index.flush()
        note(f"FLUSHED {n}")
    index.close()
    note("DONE")


def writer_kill(path, log, seed, pool_n, dims, batch):
    """Big batches, each followed by a flush, until killed; every step logged with its time."""
    import chassis
    pool = make_pool(seed, pool_n, dims)
    note = logger(log)
    index = chassis.VectorIndex(path)
    n = len(index)
    note(f"START {n} {time.time()}")
    while n + batch <= pool_n:
        note(f"BEGIN_BATCH {n} {time.time()}")
        index.add_batch(pool[n:n + batch], threads=1)
        n += batch
        note(f"END_BATCH {n} {time.time()}")
        note(f"BEGIN_FLUSH {n} {time.time()}")
        index.flush()
        note(f"END_FLUSH {n} {time.time()}")
    note("POOL_EXHAUSTED")
    time.sleep(120)


def reader_loop(path, out, stop_file, ready_file, seed, pool_n, dims, rseed):
    """Search until stop_file exists. One record per call:
    [time, kind, n_before, n_after, max_id, found, n_hits, ok]
    kind 0: snapshot (len, exact search, get, sometimes ids) - n_before == len(snapshot)
    kind 1: exact search; kind 2: exact search_batch of 4; kind 3: approximate search
    (default ef, only its ids are checked); kind 4: the last len(), after the stop file.
    found: 1/0 whether each target was returned first (-1: not checked); ok: 1/0 result of
    the extra checks (get bit-identical to the pool, ids() == arange(len), hit count).
    """
    import chassis
    pool = make_pool(seed, pool_n, dims)
    rng = np.random.default_rng(rseed)
    reader = chassis.IndexReader(path)
    ef = pool_n + 10  # >= any length: every "exact" search scans the whole visible state
    records, errors = [], []
    open(ready_file, "w").close()
    i = 0
    while not os.path.exists(stop_file):
        i += 1
        kind = i % 4
        t = time.time()
        try:
            ok = 1
            if kind == 0:
                with reader.snapshot() as s:
                    n0 = len(s)
                    if n0 == 0:
                        records.append([t, kind, 0, 0, -1, -1, 0, 1])
                        continue
                    tgt = int(rng.integers(0, n0))
                    hits = s.search(pool[tgt], 5, ef=ef)
                    got = s.get(tgt)
                    if got is None or got.tobytes() != pool[tgt].tobytes():
                        ok = 0
                    if i % 40 == 0 and not np.array_equal(s.ids(), np.arange(n0)):
                        ok = 0
                    if len(hits) != min(5, n0):
                        ok = 0
                    n1 = len(s)
                ids = [h.id for h in hits]
                found = int(bool(ids) and ids[0] == tgt)
            elif kind in (1, 3):
                n0 = len(reader)
                if n0 == 0:
                    records.append([t, kind, 0, len(reader), -1, -1, 0, 1])
                    continue
                tgt = int(rng.integers(0, n0))
                if kind == 1:
                    hits = reader.search(pool[tgt], 5, ef=ef)
                else:
                    hits = reader.search(pool[tgt] + np.float32(0.01), 5)
                n1 = len(reader)
                ids = [h.id for h in hits]
                if kind == 1 and len(hits) < min(5, n0):
                    ok = 0
                found = int(bool(ids) and ids[0] == tgt) if kind == 1 else -1
            else:
                n0 = len(reader)
                if n0 == 0:
                    records.append([t, kind, 0, len(reader), -1, -1, 0, 1])
                    continue
                tgts = rng.integers(0, n0, size=4)
                b_ids, _ = reader.search_batch(pool[tgts], 5, ef=ef, threads=1)
                n1 = len(reader)
                valid = b_ids[b_ids != np.uint64(2**64 - 1)]
                ids = valid.tolist()
                found = int(all(int(b_ids[r, 0]) == int(tg) for r, tg in enumerate(tgts)))
                if (b_ids == np.uint64(2**64 - 1)).any() and n0 >= 5:
                    ok = 0
            records.append([t, kind, n0, n1, max(ids) if ids else -1, found, len(ids), ok])
        except Exception:
            errors.append(traceback.format_exc())
            if len(errors) > 20:
                break
    n = len(reader)  # kind 4: one last look, after the stop file appeared
    records.append([time.time(), 4, n, n, -1, -1, 0, 1])
    reader.close()
    with open(out, "w") as f:
        json.dump({"records": records, "errors": errors}, f)


if __name__ == "__main__":
    role = sys.argv[1]
    a = sys.argv[2:]
    if role == "writer":
        writer_loop(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), float(a[5]), int(a[6]))
    elif role == "writer_kill":
        writer_kill(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]))
    elif role == "reader":
        reader_loop(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6]), int(a[7]))
    else:
        raise SystemExit(f"unknown role {role}")
'''

PROC_DIMS = 16
PROC_SEED = 4242
PROC_POOL = 60_000


@pytest.fixture
def child(tmp_path):
    """(the child module loaded in this process, the path of its script)."""
    script = tmp_path / "chassis_readers_child.py"
    script.write_text(CHILD)
    spec = importlib.util.spec_from_file_location("chassis_readers_child", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, script


class Children:
    """Child processes started by one test; all killed (by pid) at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self, script: Path, name: str, *args) -> subprocess.Popen:
        err = self.tmp / f"{name}.stderr"
        with open(err, "wb") as ferr:
            proc = subprocess.Popen(
                [sys.executable, str(script), *[str(a) for a in args]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=ferr,
                env=child_env(),
            )
        self.procs.append((name, proc, err))
        return proc

    def stderr(self, proc: subprocess.Popen) -> str:
        for _, p, err in self.procs:
            if p is proc:
                return err.read_text(errors="replace")[-4000:]
        return ""

    def check_alive(self, proc: subprocess.Popen, what: str) -> None:
        if proc.poll() is not None:
            raise AssertionError(
                f"{what} ended on its own ({describe_returncode(proc.returncode)})\n"
                f"--- stderr ---\n{self.stderr(proc)}"
            )

    def wait_ok(self, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(
                f"{what} did not finish within {timeout} s\n{self.stderr(proc)}"
            ) from None
        assert proc.returncode == 0, (
            f"{what} failed: {describe_returncode(proc.returncode)}\n--- stderr ---\n{self.stderr(proc)}"
        )

    def cleanup(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def children(tmp_path):
    c = Children(tmp_path)
    try:
        yield c
    finally:
        c.cleanup()


def read_log(log: Path) -> list[str]:
    """The complete lines of a child's log (a line still being written is left out)."""
    try:
        text = log.read_text()
    except FileNotFoundError:
        return []
    return text[: text.rfind("\n") + 1].splitlines()


def wait_until(cond, what: str, procs=(), children_=None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        for p in procs:
            children_.check_alive(p, what)
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def start_readers(children_, script, path, tmp_path, n_readers=2):
    stop = tmp_path / "stop"
    readers = []
    for r in range(n_readers):
        ready = tmp_path / f"reader{r}.ready"
        out = tmp_path / f"reader{r}.json"
        proc = children_.start(
            script,
            f"reader{r}",
            "reader",
            path,
            out,
            stop,
            ready,
            PROC_SEED,
            PROC_POOL,
            PROC_DIMS,
            100 + r,
        )
        readers.append((proc, ready, out))
    for r, (proc, ready, _) in enumerate(readers):
        wait_until(ready.exists, f"reader {r} to start", [proc], children_)
    return readers, stop


def stop_readers(children_, readers, stop: Path) -> list[dict]:
    stop.touch()
    results = []
    for r, (proc, _, out) in enumerate(readers):
        children_.wait_ok(proc, f"reader child {r}")
        results.append(json.loads(out.read_text()))
    return results


def check_reader_records(
    r: int, result: dict, allowed_lens: set[int], final_len: int | None = None
) -> np.ndarray:
    """The assertions every reader child's records must pass; returns the records array."""
    assert not result["errors"], f"reader {r} raised:\n" + "\n".join(result["errors"][:3])
    rec = np.array(result["records"], dtype=np.float64)
    assert len(rec) > 0, f"reader {r} made no calls"
    kind = rec[:, 1].astype(int)
    n0, n1 = rec[:, 2].astype(np.int64), rec[:, 3].astype(np.int64)
    max_id, found, ok = rec[:, 4].astype(np.int64), rec[:, 5].astype(int), rec[:, 7].astype(int)

    seq = np.column_stack([n0, n1]).ravel()  # the lengths in the order the reader saw them
    drops = np.nonzero(np.diff(seq) < 0)[0]
    assert len(drops) == 0, (
        f"reader {r}: len went backwards: ... {seq[max(0, drops[0] - 3) : drops[0] + 3].tolist()} ..."
    )
    unknown = sorted(set(seq.tolist()) - allowed_lens)
    assert not unknown, (
        f"reader {r} saw lengths that are no flushed count (unflushed or half-flushed state): "
        f"{unknown[:10]}; flushed counts {sorted(allowed_lens)[:10]}..."
    )
    snap = kind == 0
    assert (n0[snap] == n1[snap]).all(), f"reader {r}: a snapshot's len changed while it was held"
    over = np.nonzero(max_id >= n1)[0]
    assert len(over) == 0, (
        f"reader {r}: returned id {int(max_id[over[0]])} with only {int(n1[over[0]])} vectors flushed "
        f"(call kind {int(kind[over[0]])})"
    )
    checked = found >= 0
    missed = np.nonzero(checked & (found == 0))[0]
    assert len(missed) == 0, (
        f"reader {r}: {len(missed)} exact searches (ef >= len) for a flushed vector did not return "
        f"it first; first at call {int(missed[0])} (kind {int(kind[missed[0]])}, len {int(n0[missed[0]])})"
    )
    bad = np.nonzero(ok == 0)[0]
    assert len(bad) == 0, (
        f"reader {r}: {len(bad)} calls failed the get()/ids()/hit-count checks; first at call "
        f"{int(bad[0])} (kind {int(kind[bad[0]])}, len {int(n0[bad[0]])})"
    )
    if final_len is not None:
        assert int(seq[-1]) == final_len
    approx = kind == 3
    print(
        f"reader {r}: {len(rec)} calls, {len(set(seq.tolist()))} distinct lengths, "
        f"approximate searches with fewer than 5 hits: {int((rec[approx, 6] < np.minimum(5, n0[approx])).sum())}"
        f"/{int(approx.sum())}"
    )
    return rec


def make_initial_index(module, path: str, n: int) -> None:
    pool = module.make_pool(PROC_SEED, PROC_POOL, PROC_DIMS)
    with VectorIndex(path, PROC_DIMS, module.options()) as index:
        if n:
            index.add_batch(pool[:n])


@pytest.mark.slow
def test_two_reader_processes_follow_a_writer_process(child, children, tmp_path, index_path):
    module, script = child
    initial = 500
    make_initial_index(module, index_path, initial)
    readers, stop = start_readers(children, script, index_path, tmp_path)

    log = tmp_path / "writer.log"
    writer = children.start(
        script, "writer", "writer", index_path, log, PROC_SEED, PROC_POOL, PROC_DIMS, 3.5, 7
    )
    children.wait_ok(writer, "writer child")
    for r, (proc, _, _) in enumerate(readers):
        children.check_alive(proc, f"reader {r}")
    results = stop_readers(children, readers, stop)

    lines = read_log(log)
    assert lines[0] == f"START {initial}" and lines[-1] == "DONE", lines[:2] + lines[-2:]
    assert not [x for x in lines if x.startswith("MISMATCH")]
    counts = [int(x.split()[1]) for x in lines if x.startswith("FLUSHED")]
    assert len(counts) >= 5, f"the writer flushed only {len(counts)} times"
    assert counts == sorted(counts)
    flushed = {initial, *counts}

    for r, result in enumerate(results):
        rec = check_reader_records(r, result, flushed, final_len=counts[-1])
        seen = set(rec[:, 2].astype(int).tolist()) | set(rec[:, 3].astype(int).tolist())
        # the test's premise: the reader ran while the writer wrote
        assert len(seen) >= 3, (
            f"reader {r} saw only lengths {sorted(seen)}: it did not overlap the writer"
        )

    with IndexReader(index_path) as reader:
        assert len(reader) == counts[-1]
        np.testing.assert_array_equal(reader.ids(), np.arange(counts[-1], dtype=np.uint64))


@pytest.mark.slow
def test_writer_killed_mid_batch_while_readers_search(child, children, tmp_path, index_path):
    module, script = child
    rnd = random.Random(99)
    initial = 2000
    batch = 6000
    make_initial_index(module, index_path, initial)
    readers, stop = start_readers(children, script, index_path, tmp_path)

    log = tmp_path / "writer.log"
    writer = children.start(
        script,
        "writer_kill",
        "writer_kill",
        index_path,
        log,
        PROC_SEED,
        PROC_POOL,
        PROC_DIMS,
        batch,
    )

    def batches_begun(lines):
        return [x for x in lines if x.startswith("BEGIN_BATCH")]

    # kill during the third batch (two batches flushed before), after some of its duration
    wait_until(
        lambda: len(batches_begun(read_log(log))) >= 3, "the third batch", [writer], children
    )
    lines = read_log(log)
    t = {
        (x.split()[0], int(x.split()[1])): float(x.split()[2]) for x in lines if len(x.split()) == 3
    }
    last_batch = t[("END_BATCH", initial + 2 * batch)] - t[("BEGIN_BATCH", initial + batch)]
    time.sleep(rnd.uniform(0.05, 0.3) * last_batch)
    children.check_alive(writer, "writer child")
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    kill_time = time.time()
    assert writer.returncode == -signal.SIGKILL, describe_returncode(writer.returncode)

    lines = read_log(log)
    assert lines[-1].startswith("BEGIN_BATCH"), (
        f"the harness meant to kill the writer inside a batch, but its log ends with {lines[-2:]}"
    )
    ended = [int(x.split()[1]) for x in lines if x.startswith("END_FLUSH")]
    begun = [int(x.split()[1]) for x in lines if x.startswith("BEGIN_FLUSH")]
    last_flushed = max(ended, default=initial)
    candidates = {last_flushed} | {c for c in begun if c not in ended}
    flushed = {initial, *ended, *begun}

    time.sleep(1.0)  # the readers keep searching the file the dead writer left
    # a new writer opens it while the readers are still searching: no lock left behind
    try:
        with warnings.catch_warnings(record=True) as caught:  # "unflushed changes were discarded"
            warnings.simplefilter("always")
            again = VectorIndex(index_path)
        print("warnings on reopening:", [str(w.message) for w in caught])
    except IndexLockedError as e:
        raise AssertionError(f"the killed writer's lock is still held: {e}") from None
    try:
        n = len(again)
        assert n in candidates, (
            f"the new writer sees {n} vectors; the flushed states are {sorted(candidates)}"
        )
        assert again.pending == 0
        np.testing.assert_array_equal(again.ids(), np.arange(n, dtype=np.uint64))
        pool = module.make_pool(PROC_SEED, PROC_POOL, PROC_DIMS)
        for i in (0, n // 2, n - 1):
            assert_bit_identical(again.get(i), pool[i], f"vector {i} after the kill")
        ids, dist = exact(again, pool[n - 1], k=5)
        assert int(ids[0]) == n - 1
    finally:
        again.close()
    time.sleep(0.3)
    results = stop_readers(children, readers, stop)

    for r, result in enumerate(results):
        rec = check_reader_records(r, result, flushed, final_len=n)
        after = rec[rec[:, 0] > kill_time]  # calls begun after the writer was dead
        assert np.isin(after[:, 1], [0, 1, 2, 3]).sum() > 0, (
            f"reader {r} made no searches after the kill"
        )
        assert (after[:, 2] == n).all() and (after[:, 3] == n).all(), (
            f"reader {r} after the kill saw lengths {sorted(set(after[:, 2].astype(int).tolist()))}, "
            f"expected only {n}"
        )


# =========================================================================== e. threads
THREAD_DIMS = 32
THREAD_K = 10
THREAD_EF = 100_000  # >= any length here: exact searches


class ExactOracle:
    """Brute-force answers for a fixed query set over prefixes of the data (ids 0..n-1)."""

    def __init__(self, data: np.ndarray, queries: np.ndarray, k: int) -> None:
        self.k = k
        self.true = pairwise_distances(data, queries, "euclidean")  # (q, n)
        self.scale = float(np.abs(data).max() + np.abs(queries).max())
        self._best: dict[tuple[int, int], np.ndarray] = {}

    def best(self, qi: int, n: int) -> np.ndarray:
        key = (qi, n)
        if key not in self._best:
            kk = min(self.k, n)
            self._best[key] = np.sort(np.partition(self.true[qi, :n], kk - 1)[:kk])
        return self._best[key]

    def matches(self, qi: int, ids, dists, n: int) -> bool:
        """Whether (ids, dists) is the exact k-NN answer over ids 0..n-1 (up to near ties):
        min(k, n) distinct ids below n, reported distances their true ones, and their true
        distances the k smallest."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        dists = np.asarray(dists, dtype=np.float64).ravel()
        keep = ids >= 0  # search_batch pads with 2**64-1, which is -1 here
        ids, dists = ids[keep], dists[keep]
        kk = min(self.k, n)
        if len(ids) != kk or len(set(ids.tolist())) != kk or (ids >= n).any():
            return False
        atol, rtol = 1e-4 * self.scale, 1e-4
        true_of_got = self.true[qi, ids]
        if not np.allclose(dists, true_of_got, rtol=rtol, atol=atol):
            return False
        return bool(np.allclose(np.sort(true_of_got), self.best(qi, n), rtol=rtol, atol=atol))


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
        s.mark("started")
        ids = index.add_batch(data[pre:full], threads=1)
        s.mark("done")
        s.wait_for(lambda r: "done" in r[0], "after the batch")
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
            s.mark("started")
            index.flush()
            s.mark("done")
            s.wait_for(lambda r: "done" in r[0], "after the flush")
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
            s.mark("batching")
            writer.add_batch(data[pre:], threads=1)
            s.mark("published")  # the writer's own searches see the batch; it is not flushed
            assert len(writer) == full and writer.pending == n_batch
            s.wait_for(lambda r: "published" in r[0], "while the batch was published but unflushed")
            s.mark("flushing")
            writer.flush()
            s.mark("flushed")
            s.wait_for(lambda r: "flushed" in r[0], "after the flush")
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
