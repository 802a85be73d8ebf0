"""Reader processes that search while a writer process writes, and a writer killed mid-batch.

* a writer child adds (single adds and batches, several ops per flush) and flushes for a few
  seconds while two reader children search continuously; every length a reader observes is a
  flushed count, in non-decreasing order, every returned id is below the count of the call that
  returned it, and every flushed vector is found by exact search (ef >= len) once covered;
* a writer SIGKILLed mid-batch while readers search: the readers go on without errors, never see
  anything past the last flush, and a new writer opens the file (no lock left) at that flush.

The oracles are the writer's deterministic vector pool and exact searches (ef >= len); no
assertion is about timing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from chassis import IndexLockedError, IndexReader, VectorIndex
from conftest import (
    assert_bit_identical,
    child_env,
    child_module,
    describe_returncode,
    exact_search,
    read_log,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")


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
    return child_module(tmp_path, "chassis_readers_child", CHILD)


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
        ids, dist = exact_search(again, pool[n - 1], k=5)
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
