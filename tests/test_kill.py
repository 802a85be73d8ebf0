"""SIGKILL harness: a writer killed at any moment leaves exactly a flushed state behind.

A child process opens an index and runs a plan of operations drawn deterministically from a
seed: single ``add``s (default or explicit ids), ``add_batch``es of 1-300 rows (default ids, or
sparse shuffled explicit ids) and ``flush()``es. Around flush k it appends "BEGIN k" and "END k"
to a log (unbuffered ``os.write``, so the lines survive SIGKILL); the state after flush k is the
first c_k vectors of the plan, which the parent recomputes from the seed. The parent kills the
child with SIGKILL (after a random delay, during the first or a later flush, during an
``add_batch``, during ``close()`` or during the flush of a ``with`` block's exit), then, in a fresh
process:

* reopens the index as a writer (the lock must be gone) and checks it is EXACTLY the state of
  the last flush whose END was logged, or of the flush that BEGAN without an END: ids() in
  order, bit-identical vectors from get() (f16-rounded ones for half precision), no slot
  check() finds damaged (trials rotate over full precision, 8-bit codes and half), and exact
  search (ef >= len) matching brute force over that state;
* adds one vector with a default id, flushes, closes, reopens read-only and checks the new
  vector is there with id max + 1 and everything else unchanged.

The number of randomised trials is ``--kills N`` (default 30).
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from chassis import VectorIndex
from conftest import (
    NO_ID,
    assert_bit_identical,
    assert_child_ok,
    assert_exact_knn,
    child_module,
    flush_candidates,
    killed_child,
    read_log,
    run_python,
    to_half,
    wait_for,
)

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL"),
    pytest.mark.slow,
]

DIMS = 16
N_STEPS = 150

KILL_CHILD = r'''
"""Child of the SIGKILL harness (written by tests/test_kill.py)."""
import os
import sys
import time

import numpy as np

DIMS = 16


def options(precision):
    # "int8": full precision with 8-bit codes (learned once the plan has added 1,000 rows)
    import chassis
    if precision == "int8":
        return chassis.IndexOptions(max_connections=8, ef_construction=32, quantization="int8")
    return chassis.IndexOptions(max_connections=8, ef_construction=32, precision=precision)


def plan(seed, n_steps, dims=DIMS):
    """Deterministic operations for a seed.

    ("add", vector, id_argument, expected_id), ("batch", vectors, ids_argument, expected_ids)
    or ("flush",). The first operation is always a batch.
    """
    rng = np.random.default_rng(seed)
    ops = []
    max_id = -1
    for step in range(n_steps):
        r = rng.random()
        if step == 0 or r < 0.45:
            n = int(rng.integers(1, 301))
            vecs = rng.standard_normal((n, dims)).astype(np.float32)
            if rng.random() < 0.3:
                jump = 2**40 if rng.random() < 0.1 else int(rng.integers(0, 1000))
                base = max_id + 1 + jump
                ids = (base + rng.permutation(2 * n)[:n]).astype(np.uint64)  # sparse, shuffled
                ops.append(("batch", vecs, ids, ids))
            else:
                ids = np.arange(max_id + 1, max_id + 1 + n, dtype=np.uint64)
                ops.append(("batch", vecs, None, ids))
            max_id = int(ids.max())
        elif r < 0.80:
            v = rng.standard_normal(dims).astype(np.float32)
            if rng.random() < 0.3:
                new = max_id + 1 + int(rng.integers(0, 50))
                ops.append(("add", v, new, new))
            else:
                new = max_id + 1
                ops.append(("add", v, None, new))
            max_id = max(max_id, new)
        else:
            ops.append(("flush",))
    return ops


def flatten(ops):
    """All ids and vectors in the order the plan adds them, and the count after each flush op."""
    ids, vecs, counts, total = [], [], [0], 0
    for op in ops:
        if op[0] == "add":
            ids.append(np.array([op[3]], dtype=np.uint64))
            vecs.append(op[1][None, :])
            total += 1
        elif op[0] == "batch":
            ids.append(np.asarray(op[3], dtype=np.uint64))
            vecs.append(op[1])
            total += len(op[1])
        else:
            counts.append(total)
    all_ids = np.concatenate(ids) if ids else np.empty(0, np.uint64)
    all_vecs = np.concatenate(vecs) if vecs else np.empty((0, DIMS), np.float32)
    return all_ids, all_vecs, counts, total


def main():
    import chassis

    path, log_path, seed, n_steps, precision, mode, stop = sys.argv[1:8]
    ops = plan(int(seed), int(n_steps))[: int(stop)]
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(msg):
        os.write(fd, (msg + "\n").encode())

    index = chassis.VectorIndex(path, DIMS, options(precision))
    note("OPENED")
    k = 0

    def run():
        nonlocal k
        for i, op in enumerate(ops):
            if op[0] == "add":
                got = index.add(op[1], op[2])
                if got != int(op[3]):
                    note(f"MISMATCH add {i}: got id {got}, expected {int(op[3])}")
                    os._exit(3)
            elif op[0] == "batch":
                note(f"BATCH {i}")
                got = index.add_batch(op[1], op[2])
                if not np.array_equal(np.asarray(got, dtype=np.uint64), op[3]):
                    note(f"MISMATCH batch {i}")
                    os._exit(3)
            else:
                k += 1
                note(f"BEGIN {k}")
                index.flush()
                note(f"END {k}")

    if mode == "with":
        with index:
            run()
            k += 1
            note(f"BEGIN {k}")  # leaving the block flushes
        note(f"END {k}")
    elif mode == "close":
        run()
        note("CLOSE_BEGIN")  # close() discards what is pending: no new flush state
        index.close()
        note("CLOSE_END")
    else:
        run()
        k += 1
        note(f"BEGIN {k}")
        index.flush()
        note(f"END {k}")
    note("DONE")
    time.sleep(120)  # wait to be killed


if __name__ == "__main__":
    main()
'''

VERIFY = r"""
import json, sys
import numpy as np
import chassis

path, out, k = sys.argv[1], sys.argv[2], int(sys.argv[4])
queries = np.load(sys.argv[3])
result = {}

def dump(index, tag):
    ids = index.ids()
    vecs = np.stack([index.get(int(i)) for i in ids]) if len(ids) else np.empty((0, index.dimensions), np.float32)
    ef = max(len(index), k)
    s_ids = np.full((len(queries), k), 2**64 - 1, dtype=np.uint64)
    s_d = np.full((len(queries), k), np.inf)
    for qi, q in enumerate(queries):
        for r, hit in enumerate(index.search(q, k, ef=ef)):
            s_ids[qi, r], s_d[qi, r] = hit.id, hit.distance
    b_ids, b_d = index.search_batch(queries, k, ef=ef)
    np.savez(out + "." + tag + ".npz", ids=ids, vecs=vecs, s_ids=s_ids, s_d=s_d, b_ids=b_ids, b_d=b_d)
    result[tag] = dict(len=len(index), pending=index.pending)

# 1. the first open after the crash is a writer's (recovery, if any, happens here)
index = chassis.VectorIndex(path)
dump(index, "recovered")
# every stored checksum holds, and with 8-bit codes every code is its vector's encoding
result["corrupt"] = index.check().corrupt
# 2. the index is usable as a writer again
new_vec = np.linspace(-1, 1, index.dimensions).astype(np.float32)
result["new_id"] = index.add(new_vec)
index.flush()
index.close()
# 3. and the new state survives a reopen
reader = chassis.VectorIndex(path, read_only=True)
dump(reader, "after_write")
reader.close()
np.save(out + ".new_vec.npy", new_vec)
print(json.dumps(result))
"""

KINDS = ["random", "first_flush", "batch", "close", "with", "later_flush"]


def pytest_generate_tests(metafunc):
    if "kill_trial" in metafunc.fixturenames:
        n = metafunc.config.getoption("kills")
        metafunc.parametrize("kill_trial", range(n), ids=[f"trial{i}" for i in range(n)])


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return child_module(tmp_path_factory.mktemp("kill-harness"), "chassis_kill_child", KILL_CHILD)


def run_trial(harness, tmp_path: Path, trial: int, kind: str) -> dict:
    module, script = harness
    rnd = random.Random(1_000_003 * trial + KINDS.index(kind))
    seed = 7919 * trial + 17
    precision = ("full", "int8", "half")[trial % 3]
    ops_all = module.plan(seed, N_STEPS)
    mode = {"close": "close", "with": "with"}.get(kind, "flush")
    stop = rnd.randint(5, 60) if kind == "close" else N_STEPS

    path = tmp_path / "kill.chassis"
    log = tmp_path / "kill.log"
    with VectorIndex(path, DIMS, module.options(precision)):
        pass  # the file exists (empty, flushed) before the child starts

    with killed_child(
        [
            sys.executable,
            str(script),
            str(path),
            str(log),
            str(seed),
            str(N_STEPS),
            precision,
            mode,
            str(stop),
        ]
    ) as proc:
        if kind in ("random", "with"):
            wait_for(proc, log, lambda ls: "OPENED" in ls, "OPENED")
            time.sleep(rnd.uniform(0.0, 1.5))
        elif kind == "first_flush":
            wait_for(proc, log, lambda ls: "BEGIN 1" in ls, "BEGIN 1")
            time.sleep(rnd.choice([0.0, rnd.uniform(0.0, 0.003)]))
        elif kind == "later_flush":
            j = rnd.randint(2, 8)
            wait_for(proc, log, lambda ls: f"BEGIN {j}" in ls, f"BEGIN {j}")
            time.sleep(rnd.choice([0.0, rnd.uniform(0.0, 0.003)]))
        elif kind == "batch":
            m = rnd.randint(1, 12)
            wait_for(
                proc, log, lambda ls: sum(x.startswith("BATCH") for x in ls) >= m, f"batch {m}"
            )
            time.sleep(rnd.uniform(0.0, 0.01))
        elif kind == "close":
            wait_for(proc, log, lambda ls: "CLOSE_BEGIN" in ls, "CLOSE_BEGIN")
            time.sleep(rnd.choice([0.0, 0.0, rnd.uniform(0.0, 0.002)]))

    lines = read_log(log)
    candidates = flush_candidates(lines)

    ops = ops_all[:stop]
    all_ids, all_vecs, counts, total = module.flatten(ops)
    if mode != "close":
        counts.append(total)  # the final flush (explicit, or the with block's exit)
    if precision == "half":
        all_vecs = to_half(all_vecs)

    # verify in a fresh process
    qrng = np.random.default_rng(trial)
    queries = qrng.standard_normal((4, DIMS)).astype(np.float32)
    qfile = tmp_path / "queries.npy"
    np.save(qfile, queries)
    out = tmp_path / "verify"
    k = 10
    vproc = run_python(VERIFY, path, out, qfile, k, timeout=300)
    assert_child_ok(vproc, f"reopening after SIGKILL (log tail {lines[-4:]})")
    result = json.loads(vproc.stdout.strip().splitlines()[-1])
    with np.load(f"{out}.recovered.npz") as z:
        rec = {name: z[name] for name in z.files}
    with np.load(f"{out}.after_write.npz") as z:
        aft = {name: z[name] for name in z.files}
    new_vec = np.load(f"{out}.new_vec.npy")

    got_ids = rec["ids"]
    matched = None
    for c in candidates:
        n = counts[c]
        if got_ids.shape == (n,) and (got_ids == all_ids[:n]).all():
            matched = c
            break
    assert matched is not None, (
        f"{kind} trial {trial}: reopened with {len(got_ids)} vectors, but the acceptable flush states "
        f"are {[(c, counts[c]) for c in candidates]} (log tail {lines[-4:]})"
    )
    n = counts[matched]
    state_ids, state_vecs = all_ids[:n], all_vecs[:n]
    assert result["recovered"] == {"len": n, "pending": 0}
    assert result["corrupt"] == [], f"check() after SIGKILL: damaged slots {result['corrupt']}"
    assert_bit_identical(rec["vecs"], state_vecs, f"vectors after SIGKILL ({kind} trial {trial})")
    for qi, q in enumerate(queries):
        live = rec["s_ids"][qi] != np.uint64(NO_ID)
        assert_exact_knn(
            rec["s_ids"][qi][live],
            rec["s_d"][qi][live],
            state_vecs,
            state_ids,
            q,
            k,
            "euclidean",
            precision="half" if precision == "half" else "full",
            context=f"search after SIGKILL, query {qi}",
        )
        np.testing.assert_array_equal(rec["b_ids"][qi], rec["s_ids"][qi])

    # writable again: one default-id add, flushed, seen by a reader
    expected_new = int(state_ids.max()) + 1 if n else 0
    assert result["new_id"] == expected_new
    np.testing.assert_array_equal(
        aft["ids"], np.concatenate([state_ids, [expected_new]]).astype(np.uint64)
    )
    expected_new_vec = to_half(new_vec) if precision == "half" else new_vec
    assert_bit_identical(
        aft["vecs"],
        np.concatenate([state_vecs, expected_new_vec[None, :]]),
        "vectors after writing again",
    )
    return {"matched": matched, "candidates": candidates, "n": n}


def test_sigkill_leaves_exactly_a_flushed_state(harness, tmp_path, kill_trial):
    kind = KINDS[kill_trial % len(KINDS)]
    run_trial(harness, tmp_path, kill_trial, kind)


@pytest.mark.parametrize("trial", [1001, 1002])
def test_sigkill_during_close_keeps_the_last_flush(harness, tmp_path, trial):
    run_trial(harness, tmp_path, trial, "close")


@pytest.mark.parametrize("trial", [2001, 2002])
def test_sigkill_during_the_first_flush(harness, tmp_path, trial):
    run_trial(harness, tmp_path, trial, "first_flush")


def test_plan_reproduces_the_childs_ids(harness):
    """The harness's own premise: the plan is a pure function of the seed."""
    module, _ = harness
    a = module.flatten(module.plan(5, N_STEPS))
    b = module.flatten(module.plan(5, N_STEPS))
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1].tobytes() == b[1].tobytes()
    assert a[2] == b[2]
    assert len(set(a[0].tolist())) == len(a[0])  # the plan never reuses an id
