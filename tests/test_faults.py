"""I/O faults as a permanent part of the suite, in the spirit of SQLite's fault-injecting VFS.

An LD_PRELOAD shim (tests/fault_shim.c, compiled here with the system cc) makes one call of
the core fail: every write, sync, allocation, truncation, rename, link, unlink and create on
the index's folder is a numbered failure point. A counting run of tests/fault_child.py (one
fixed life of an index: create, add_batch, flush, delete, rollback, backup, compact, close,
and an in-memory index saved beside it) lists the points; then the child runs once per point
with that call failing: with EIO once ("once"), with ENOSPC from that call on ("always"),
and with EIO once followed by a SIGKILL at the next point ("kill").

Oracle, for every run, in this process and without the shim:
- the child ends by itself (no crash, no hang), and every error it saw is a Chassis error; a
  StorageError carries an errno and the file it is about (`filename`), and its message is ours;
- the index reopens as exactly one flush, for a reader opened first (which applies the dead
  writer's logs itself) and then for the next writer alike: its ids are those of the last
  flush that returned, or those of the flushing call that failed (when the failure came after
  its header was written), never a mixture; `check()` finds nothing; an exact search equals
  brute force over the stored vectors;
- every backup and save that returned opens with the ids it held.

The test also reads the core's source for the I/O calls it makes and fails when one is not a
failure point of the shim, or is not met by the child's life.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import chassis
import numpy as np
import pytest

# Reopening after a failure warns that unflushed changes were discarded: expected here.
pytestmark = pytest.mark.filterwarnings("ignore:.*the last writer stopped without flushing")

HERE = Path(__file__).parent
SHIM_SRC = HERE / "fault_shim.c"
CHILD = HERE / "fault_child.py"
SRC = HERE.parent / "src"
EIO, ENOSPC = 5, 28

# What the core's source calls (a pattern) -> the shim's name of that failure point.
SOURCE_CALLS = {
    r"\.sync_all\(": "fsync",
    r"\.sync_data\(": "fdatasync",
    r"\.write_all_at\(": "pwrite",
    r"\.set_len\(": "ftruncate",
    r"posix_fallocate\(": "fallocate",
    r"libc::fallocate\(": "fallocate",
    r"libc::msync\(": "msync",
    r"fs::rename\(": "rename",
    r"fs::hard_link\(": "link",
    r"fs::remove_file\(": "unlink",
    r"\.create(_new)?\(true\)": "create",
}
# Calls the core makes only on other systems (msync: where fdatasync does not cover mappings).
NOT_ON_LINUX = {"msync"}
# Calls that write or sync a file, any of which the core might start to use: each must be in
# SOURCE_CALLS (so the shim covers it) before this test passes again.
IO_CALL = re.compile(
    r"\.sync_all\(|\.sync_data\(|\.write_all_at\(|\.write_all\(|\.set_len\("
    r"|posix_fallocate\(|libc::fallocate\(|libc::msync\(|libc::fsync\(|libc::fdatasync\("
    r"|libc::sync_file_range\(|libc::pwrite|fs::rename\(|fs::hard_link\(|fs::remove_file\("
    r"|fs::copy\(|fs::write\(|\.create(_new)?\(true\)"
)


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    if sys.platform != "linux":
        pytest.skip("the fault shim uses LD_PRELOAD and /proc (Linux)")
    # Building Chassis from source links with the system cc, so a machine that runs this suite
    # has one: its absence is a set-up error, not a reason to skip.
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "no C compiler (cc) on PATH to build tests/fault_shim.c: install one"
    out = tmp_path_factory.mktemp("shim") / "fault_shim.so"
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(out), str(SHIM_SRC), "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def run_child(shim: Path, case: Path, at: int, mode: str = "once", errno: int = EIO) -> dict:
    """Run the child's life with call number `at` failing (0: none, counting). Returns its
    record, with the calls it logged and its exit."""
    data = case / "data"
    data.mkdir(parents=True)
    log = case / "calls.log"
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=str(shim),
        CHASSIS_FAULT_MATCH=str(data),
        CHASSIS_FAULT_AT=str(at),
        CHASSIS_FAULT_MODE=mode,
        CHASSIS_FAULT_ERRNO=str(errno),
        CHASSIS_FAULT_LOG=str(log),
    )
    state = case / "state.json"
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(data / "e.chassis"), str(state)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    record = {"created": False, "committed": None, "attempt": None, "errors": [], "backups": {}}
    if state.exists():
        record.update(json.loads(state.read_text()))
    calls = log.read_text().splitlines() if log.exists() else []
    record.update(returncode=proc.returncode, stderr=proc.stderr, calls=calls, data=str(data))
    return record


def exact_search_matches_brute_force(index) -> None:
    ids = np.array(sorted(index.ids()), dtype=np.uint64)
    if len(ids) == 0:
        return
    vectors = np.stack([index.get(int(i)) for i in ids])
    queries = np.random.default_rng(9).standard_normal((5, vectors.shape[1]), dtype=np.float32)
    k = min(10, len(ids))
    found, _ = index.search_batch(queries, k=k, ef=max(len(ids), k))
    for q, got in zip(queries, found):
        d = ((vectors - q) ** 2).sum(axis=1)
        want = ids[np.argsort(d, kind="stable")[:k]]
        assert set(got.tolist()) == set(want.tolist())


def judge(record: dict, errno: int, what: str, killed_ok: bool = False) -> None:
    """Everything the module docstring promises, for one run: the files first, then the
    errors the child saw. `killed_ok`: the shim may have killed the child (SIGKILL)."""
    ended = record["returncode"] == 0 or (killed_ok and record["returncode"] == -9)
    assert ended, f"{what}: the child did not end by itself\n{record['stderr']}"
    path = Path(record["data"]) / "e.chassis"
    if not record.get("created"):
        # Creation failed: no index, or an empty one (creation links a whole file into place).
        if path.exists():
            with chassis.IndexReader(path) as r:
                assert len(r) == 0
    else:
        allowed = [sorted(record["committed"])]
        if record["attempt"] is not None:
            allowed.append(sorted(record["attempt"]))
        # A reader first, as a service's would be before its writer comes back (it applies
        # the dead writer's logs itself), then the next writer: the same one flush.
        seen = []
        for who, opener in (("reader", chassis.IndexReader), ("writer", chassis.VectorIndex)):
            with opener(path) as index:
                ids = sorted(int(i) for i in index.ids())
                assert ids in allowed, (
                    f"{what}: a {who} reopened with {len(ids)} ids, not one flush "
                    f"(allowed sizes {[len(a) for a in allowed]}); errors {record['errors']}"
                )
                assert len(index) == len(ids)
                report = index.check()
                assert report.ok, f"{what}: check() by a {who} after reopening: {report}"
                exact_search_matches_brute_force(index)
                seen.append(ids)
        assert seen[0] == seen[1], f"{what}: the reader and the next writer saw other flushes"
        for dest, want in record["backups"].items():
            with chassis.IndexReader(dest) as r:
                assert sorted(int(i) for i in r.ids()) == sorted(want), f"{what}: {dest}"
    for e in record["errors"]:
        assert e["chassis"], f"{what}: {e['step']} raised a non-Chassis {e['type']}: {e['message']}"
        if e["type"] == "StorageError":
            assert e["errno"] is not None, f"{what}: {e['step']}: StorageError without errno"
            assert e["filename"], f"{what}: {e['step']}: StorageError without filename"
            assert "None" not in e["message"].splitlines()[0], f"{what}: {e['message']}"


def test_every_io_call_of_the_core_is_a_failure_point_the_life_meets(shim, tmp_path):
    counting = run_child(shim, tmp_path / "count", at=0)
    judge(counting, EIO, "the counting run")
    assert counting["errors"] == []
    met = {line.split()[1] for line in counting["calls"]}
    # The core's own calls: a file's unit tests (its `#[cfg(test)] mod tests`, last by
    # convention) make files of their own and are not a failure point of the index's life.
    source = "\n".join(
        p.read_text().split("#[cfg(test)]\nmod tests")[0]
        for p in SRC.rglob("*.rs")
        if "python" not in p.parts
    )
    lines = [ln for ln in source.splitlines() if not ln.strip().startswith("//")]
    found = {m.group(0) for ln in lines for m in IO_CALL.finditer(ln)}
    uncovered = sorted(f for f in found if not any(re.fullmatch(p, f) for p in SOURCE_CALLS))
    assert not uncovered, f"I/O calls in src/ that the fault shim does not cover: {uncovered}"
    used = {SOURCE_CALLS[p] for p in SOURCE_CALLS if re.search(p, "\n".join(lines))}
    never = used - met - NOT_ON_LINUX
    assert not never, f"calls of the core that the child's life never makes: {never}"


# (mode, errno, every how many points): EIO once at every point; ENOSPC from then on at every
# second; EIO once and SIGKILL at the next point (a writer killed while it handles the
# failure) at every third. About 1,100 children, 5 minutes on 2 cores.
@pytest.mark.parametrize(
    "mode, errno, stride", [("once", EIO, 1), ("always", ENOSPC, 2), ("kill", EIO, 3)]
)
@pytest.mark.slow
def test_a_failing_call_at_every_point_leaves_exactly_one_flush(
    shim, tmp_path, mode, errno, stride
):
    counting = run_child(shim, tmp_path / "count", at=0)
    points = len(counting["calls"])
    assert points > 50, f"only {points} failure points met"
    failures, killed = [], 0
    for at in range(1, points + 1, stride):
        record = run_child(shim, tmp_path / f"{mode}-{at}", at=at, mode=mode, errno=errno)
        call = counting["calls"][at - 1].split(maxsplit=2)
        what = f"call {at} of {points} ({call[1]} {Path(call[2]).name}) failing {mode}"
        killed += record["returncode"] == -9
        try:
            judge(record, errno, what, killed_ok=mode == "kill")
        except AssertionError as e:
            failures.append(str(e))
    runs = len(range(1, points + 1, stride))
    print(
        f"{points} failure points, {runs} runs {mode} with errno {errno}: "
        f"{killed} killed, {len(failures)} failed"
    )
    # The kill mode must kill (a point after the failure exists for all but the last calls).
    assert (killed > runs // 2) == (mode == "kill"), f"{killed} of {runs} children were killed"
    assert not failures, "\n\n".join(failures[:10])
