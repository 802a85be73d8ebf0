"""SIGKILL during the life-cycle operations: delete + flush, compact, backup.

A child process opens a copy of a prepared index and runs a plan written by the parent
(rounds of deletes, replaces (delete + add under the same id), adds with default ids and a
delete of a vector added in the same round, then ``user_version = j`` and a flush), logging
"ROUND j" / "BEGIN j" / "END j" around each round and its commit with unbuffered writes. Kinds:

* ``delete``: rounds of deletes + flush; killed while deleting or flushing round j;
* ``compact``: round 1's changes are left pending and ``compact()`` is called (it flushes
  first, then rebuilds into ``.<name>.compacting-*`` and renames it over the index); killed at
  a random instant of the compaction;
* ``backup``: (a) the writer flushes round j then backs up to ``dest.chassis``, killed during
  the backup; (b) a writer thread runs rounds while the main thread backs up from an
  ``IndexReader`` in a loop, killed at a random instant.

Then, in a fresh process, the index is opened as a writer (recovery and removal of leftovers
happen there) and must be EXACTLY the state of the last flush whose END was logged, or of the
one that BEGAN without an END (for compact: before or after it, identical in content): ids() in
order, bit-identical vectors, user_version, exact search = brute force, check() clean, default
ids continuing after the largest id of that state. The backup destination either does not exist
or is a whole valid index equal to one flushed state. Leftover ``.compacting-`` / ``.creating-``
files next to the index are gone after the writer open; ``.backup-`` leftovers do not stop a
later backup to the same destination.

Trials: ``--kills N`` (default 30, shared with tests/test_kill.py), split evenly between kinds.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import sys
import time
from pathlib import Path

import conftest
import numpy as np
import pytest
from chassis import IndexOptions, VectorIndex
from conftest import (
    assert_bit_identical,
    assert_child_ok,
    assert_exact_knn,
    clustered_data,
    flush_candidates,
    killed_child,
    read_log,
    run_python,
)

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL"), pytest.mark.slow]

DIMS = 16
KINDS = ["delete", "compact", "backup"]
INDEX_NAME = "kill.chassis"
DEST_NAME = "dest.chassis"

CHILD = r"""
import os, pickle, sys, threading, time
import numpy as np
import chassis

path, dest, log_path, plan_file, kind = sys.argv[1:6]
with open(plan_file, "rb") as f:
    rounds = pickle.load(f)
fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
lock = threading.Lock()

def note(msg):
    with lock:
        os.write(fd, (msg + "\n").encode())

def apply(index, j, r):
    note(f"ROUND {j}")
    for i in r["deletes"]:
        if index.delete(i) is not True:
            note(f"MISMATCH delete {i}"); os._exit(3)
    for i, v in r["replaces"]:
        if index.delete(i) is not True or index.add(v, i) != i:
            note(f"MISMATCH replace {i}"); os._exit(3)
    if len(r["adds"]):
        got = index.add_batch(r["adds"])
        if not np.array_equal(got, r["add_ids"]):
            note(f"MISMATCH adds {got[:3]} {r['add_ids'][:3]}"); os._exit(3)
    for i in r["late_deletes"]:
        if index.delete(i) is not True:
            note(f"MISMATCH late delete {i}"); os._exit(3)
    index.user_version = j

def commit(index, j):
    note(f"BEGIN {j}")
    index.flush()
    note(f"END {j}")

index = chassis.VectorIndex(path)
note("OPENED")
if kind == "delete":
    for j, r in enumerate(rounds, 1):
        apply(index, j, r)
        commit(index, j)
elif kind == "compact":
    apply(index, 1, rounds[0])
    note("BEGIN 1")  # compact() flushes the pending round first
    t0 = time.monotonic()
    index.compact()
    note("END 1")
    note(f"COMPACTED {time.monotonic() - t0:.4f}")
    for j, r in enumerate(rounds[1:], 2):
        apply(index, j, r)
        commit(index, j)
elif kind == "backup_writer":
    for j, r in enumerate(rounds, 1):
        apply(index, j, r)
        commit(index, j)
        note(f"BK_BEGIN {j}")
        index.backup(dest)
        note(f"BK_END {j}")
elif kind == "backup_reader":
    def writer():
        for j, r in enumerate(rounds, 1):
            apply(index, j, r)
            commit(index, j)
            time.sleep(0.002)
        note("WRITER_DONE")
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    reader = chassis.IndexReader(path)
    n = 0
    while t.is_alive():
        n += 1
        note(f"BK_BEGIN {n}")
        try:
            reader.backup(dest)
            note(f"BK_END {n}")
        except chassis.ChassisError as e:
            note(f"BK_FAIL {n} {type(e).__name__}: {str(e).splitlines()[0]}")
note("DONE")
time.sleep(120)  # wait to be killed
"""

VERIFY = r"""
import json, os, sys
import numpy as np
import chassis

path, dest, out, qfile = sys.argv[1:5]
queries = np.load(qfile)
result = {}

def dump(index, tag):
    ids = index.ids()
    vecs = np.stack([index.get(int(i)) for i in ids]) if len(ids) else np.empty((0, index.dimensions), np.float32)
    ef = max(len(index), 10)
    s_ids = np.full((len(queries), 10), 2**64 - 1, dtype=np.uint64)
    s_d = np.full((len(queries), 10), np.inf)
    for qi, q in enumerate(queries):
        for r, hit in enumerate(index.search(q, 10, ef=ef)):
            s_ids[qi, r], s_d[qi, r] = hit.id, hit.distance
    np.savez(out + "." + tag + ".npz", ids=ids, vecs=vecs, s_ids=s_ids, s_d=s_d)
    c = index.check()
    result[tag] = dict(len=len(index), user_version=index.user_version, deleted=index.deleted_count(),
                       pending=index.pending, corrupt=c.corrupt, not_finite=c.not_finite,
                       unreachable=len(c.unreachable))

# 1. the first open after the kill is a writer's: recovery and leftover removal happen here
index = chassis.VectorIndex(path)
dump(index, "index")
result["leftovers_after_open"] = sorted(f for f in os.listdir(os.path.dirname(path) or ".")
                                        if f.startswith(("." + os.path.basename(path) + ".compacting-",
                                                         "." + os.path.basename(path) + ".creating-")))
# 2. the backup destination, if any
if os.path.exists(dest):
    with chassis.IndexReader(dest) as b:
        dump(b, "dest")
# 3. writable again: a default-id add, flushed; a new backup to the same destination works
result["new_id"] = int(index.add(np.linspace(-1, 1, index.dimensions).astype(np.float32)))
index.flush()
index.backup(dest)
with chassis.IndexReader(dest) as b:
    result["rebackup_len"] = len(b)
    result["rebackup_has_new"] = result["new_id"] in b
index.close()
print(json.dumps(result))
"""


# --------------------------------------------------------------------------- plans
def make_plan(
    rng: np.random.Generator,
    state0: dict,
    next_id: int,
    n_rounds: int,
    *,
    deletes=(20, 200),
    adds=(0, 60),
) -> tuple[list, list, list]:
    """Rounds of changes and the state (dict id -> vector, insertion order) after each."""
    model = dict(state0)
    states, next_ids, rounds = [dict(model)], [next_id], []
    for _ in range(n_rounds):
        live = np.array(list(model), dtype=np.int64)
        d = rng.choice(live, int(rng.integers(*deletes)), replace=False).tolist()
        for i in d:
            del model[i]
        rest = np.array(list(model), dtype=np.int64)
        rep = []
        for i in rng.choice(rest, int(rng.integers(0, 5)), replace=False).tolist():
            v = rng.standard_normal(DIMS).astype(np.float32)
            del model[i]
            model[i] = v
            rep.append((i, v))
        na = int(rng.integers(*adds))
        av = rng.standard_normal((na, DIMS)).astype(np.float32)
        aids = np.arange(next_id, next_id + na, dtype=np.uint64)
        for i, v in zip(aids.tolist(), av):
            model[i] = v
        next_id += na
        late = [int(aids[0])] if na and rng.random() < 0.5 else []
        for i in late:
            del model[i]
        rounds.append(dict(deletes=d, replaces=rep, adds=av, add_ids=aids, late_deletes=late))
        states.append(dict(model))
        next_ids.append(next_id)
    return rounds, states, next_ids


# --------------------------------------------------------------------------- templates
def build_template(path: Path, n: int, seed: int, m: int, ef_c: int, delete_every: int) -> dict:
    data = clustered_data(n, DIMS, seed=seed)
    with VectorIndex(path, DIMS, IndexOptions(max_connections=m, ef_construction=ef_c)) as ix:
        ix.add_batch(data[: n // 2])
        ix.flush()
        ix.add_batch(data[n // 2 :])
        ix.flush()
        for i in range(0, n, delete_every):
            ix.delete(i)
        ix.user_version = 0
    return {i: data[i] for i in range(n) if i % delete_every}


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    d = tmp_path_factory.mktemp("kill-lifecycle-templates")
    small = d / "small.chassis"
    big = d / "big.chassis"
    out = {
        "small": (small, build_template(small, 3000, 21, 8, 48, 7), 3000),
        "big": (big, build_template(big, 12_000, 22, 16, 64, 5), 12_000),
    }
    # how long a compaction of the big template takes here (to spread the kills over it)
    probe = d / "probe.chassis"
    shutil.copyfile(big, probe)
    with VectorIndex(probe) as ix:
        t0 = time.perf_counter()
        ix.compact()
        out["compact_seconds"] = time.perf_counter() - t0
    return out


def pytest_generate_tests(metafunc):
    if "lifecycle_kill_trial" in metafunc.fixturenames:
        n = max(len(KINDS), metafunc.config.getoption("kills"))
        metafunc.parametrize(
            "lifecycle_kill_trial", range(n), ids=[f"{KINDS[i % len(KINDS)]}{i}" for i in range(n)]
        )


# --------------------------------------------------------------------------- harness
def wait_for(*args, **kwargs) -> list[str]:
    """conftest.wait_for with this harness's finer polling (every half millisecond)."""
    return conftest.wait_for(*args, poll=0.0005, **kwargs)


def run_trial(templates, tmp_path: Path, trial: int) -> dict:
    kind = KINDS[trial % len(KINDS)]
    rnd = random.Random(7_000_003 * trial + 11)
    rng = np.random.default_rng(1000 + trial)
    if kind == "backup":
        kind = "backup_writer" if (trial // len(KINDS)) % 2 == 0 else "backup_reader"
    tpl_name = "small" if kind == "delete" else "big"
    tpl_path, state0, next_id0 = templates[tpl_name]
    n_rounds = {"delete": 10, "compact": 3, "backup_writer": 6, "backup_reader": 25}[kind]
    rounds, states, next_ids = make_plan(rng, state0, next_id0, n_rounds)

    path = tmp_path / INDEX_NAME
    dest = tmp_path / DEST_NAME
    log = tmp_path / "child.log"
    plan_file = tmp_path / "plan.pkl"
    shutil.copyfile(tpl_path, path)
    with open(plan_file, "wb") as f:
        pickle.dump(rounds, f)

    with killed_child(
        [sys.executable, "-c", CHILD, str(path), str(dest), str(log), str(plan_file), kind]
    ) as proc:
        if kind == "delete":
            j = rnd.randint(1, n_rounds)
            if rnd.random() < 0.5:
                wait_for(proc, log, lambda ls: f"ROUND {j}" in ls, f"ROUND {j}")
                time.sleep(
                    rnd.uniform(0.0, 0.004)
                )  # among the deletes (each one logs an undo record)
            else:
                wait_for(proc, log, lambda ls: f"BEGIN {j}" in ls, f"BEGIN {j}")
                time.sleep(rnd.choice([0.0, rnd.uniform(0.0, 0.002)]))
        elif kind == "compact":
            ino = os.stat(path).st_ino
            wait_for(proc, log, lambda ls: "BEGIN 1" in ls, "BEGIN 1")
            t = templates["compact_seconds"]
            u = (trial // len(KINDS)) % 3
            if u == 0:  # anywhere in the compaction
                time.sleep(rnd.uniform(0.0, 1.2 * t))
            elif u == 1:  # while the new file is being built
                wait_for(
                    proc,
                    log,
                    lambda ls: any(
                        f.startswith(f".{INDEX_NAME}.compacting-") for f in os.listdir(tmp_path)
                    ),
                    "the .compacting- file",
                )
                time.sleep(rnd.uniform(0.0, 0.8 * t))
            else:  # right after the rename over the index (adoption, undo log removal)
                wait_for(proc, log, lambda ls: _inode(path) not in (ino, None), "the rename")
                time.sleep(rnd.choice([0.0, rnd.uniform(0.0, 0.001)]))
        elif kind == "backup_writer":
            j = rnd.randint(1, n_rounds)
            wait_for(proc, log, lambda ls: f"BK_BEGIN {j}" in ls, f"BK_BEGIN {j}")
            time.sleep(rnd.uniform(0.0, 0.012))
        else:
            wait_for(proc, log, lambda ls: "BK_BEGIN 2" in ls, "BK_BEGIN 2")
            time.sleep(rnd.uniform(0.0, 0.25))

    lines = read_log(log)
    candidates = flush_candidates(lines)
    before = sorted(os.listdir(tmp_path))
    dest_existed = dest.exists()
    left_compacting = [f for f in before if f.startswith(f".{INDEX_NAME}.compacting-")]
    left_backup = [f for f in before if f.startswith(f".{DEST_NAME}.backup-")]

    # verify in a fresh process
    queries = rng.standard_normal((3, DIMS)).astype(np.float32)
    qfile = tmp_path / "queries.npy"
    np.save(qfile, queries)
    out = tmp_path / "verify"
    vproc = run_python(VERIFY, path, dest, out, qfile, timeout=300)
    assert_child_ok(vproc, f"reopening after SIGKILL ({kind}, log tail {lines[-4:]})")
    res = json.loads(vproc.stdout.strip().splitlines()[-1])
    with np.load(f"{out}.index.npz") as z:
        rec = {name: z[name] for name in z.files}

    got_ids = rec["ids"].tolist()
    matched = next((c for c in candidates if got_ids == list(states[c])), None)
    assert matched is not None, (
        f"{kind} trial {trial}: reopened with {len(got_ids)} ids, matching none of the acceptable flushed "
        f"states {[(c, len(states[c])) for c in candidates]} (log tail {lines[-4:]})"
    )
    state = states[matched]
    meta = res["index"]
    assert meta["user_version"] == matched, f"user_version {meta['user_version']}, state {matched}"
    assert meta["len"] == len(state) and meta["pending"] == 0
    assert meta["corrupt"] == [] and meta["not_finite"] == [], meta
    svecs = np.stack(list(state.values()))
    sids = np.array(list(state), dtype=np.uint64)
    assert_bit_identical(rec["vecs"], svecs, f"vectors after SIGKILL ({kind} trial {trial})")
    for qi, q in enumerate(queries):
        live = rec["s_ids"][qi] != np.uint64(2**64 - 1)
        assert_exact_knn(
            rec["s_ids"][qi][live],
            rec["s_d"][qi][live],
            svecs,
            sids,
            q,
            10,
            "euclidean",
            context=f"exact search after SIGKILL, query {qi}",
        )
    assert res["new_id"] == next_ids[matched], (
        f"default id after reopening {res['new_id']}, expected {next_ids[matched]} (largest id ever + 1)"
    )
    compacted = None
    if kind == "compact":
        if matched == 1:
            compacted = meta["deleted"] == 0
        if matched == 0:
            assert meta["deleted"] > 0, (
                "state before round 1 was compacted, although compact() flushes first"
            )
    # leftovers of a compaction / creation next to the index are gone after a writer open
    assert res["leftovers_after_open"] == []
    after = os.listdir(tmp_path)
    assert not [
        f for f in after if f.startswith((f".{INDEX_NAME}.compacting-", f".{INDEX_NAME}.creating-"))
    ]
    assert res["rebackup_len"] == len(state) + 1 and res["rebackup_has_new"]

    # the backup destination: absent, or one whole flushed state
    dest_state = None
    if "dest" in res:
        with np.load(f"{out}.dest.npz") as z:
            bk = {name: z[name] for name in z.files}
        k = res["dest"]["user_version"]
        assert 0 <= k <= max(candidates) and k < len(states), f"backup holds user_version {k}"
        bstate = states[k]
        assert bk["ids"].tolist() == list(bstate), f"backup ids differ from flushed state {k}"
        assert_bit_identical(
            bk["vecs"], np.stack(list(bstate.values())), f"backup vectors (state {k})"
        )
        assert res["dest"]["corrupt"] == [] and res["dest"]["not_finite"] == [], res["dest"]
        dest_state = k
    assert ("dest" in res) == dest_existed
    assert kind.startswith("backup") or not dest_existed

    fails = [x for x in lines if x.startswith("BK_FAIL")]
    assert not fails, (
        f"IndexReader.backup() raised while the writer flushed ({len(fails)} of "
        f"{sum(x.startswith('BK_BEGIN') for x in lines)} backups): {fails[:3]}"
    )
    return dict(
        kind=kind,
        matched=matched,
        candidates=candidates,
        compacted=compacted,
        dest_state=dest_state,
        left_compacting=len(left_compacting),
        left_backup=len(left_backup),
        in_window=_in_window(kind, lines),
        compact_seconds=[x.split()[1] for x in lines if x.startswith("COMPACTED")],
    )


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _in_window(kind: str, lines: list[str]) -> bool:
    """Whether the kill landed inside the operation aimed at (its BEGIN logged, no END)."""
    last = [
        x.split()[0]
        for x in lines
        if x.split()[0] in ("BEGIN", "END", "BK_BEGIN", "BK_END", "BK_FAIL", "ROUND")
    ]
    if not last:
        return False
    if kind.startswith("backup"):
        bk = [x for x in last if x.startswith("BK_")]
        return bool(bk) and bk[-1] == "BK_BEGIN"
    return last[-1] in ("BEGIN", "ROUND")


def test_sigkill_during_a_lifecycle_operation_leaves_a_flushed_state(
    templates, tmp_path, lifecycle_kill_trial
):
    info = run_trial(templates, tmp_path, lifecycle_kill_trial)
    print(f"\n{info}")
