"""Durability, cross-process locking and robustness against damaged files.

Checks that:
* a FRESH PROCESS reopening an index (as writer and as reader) sees exactly the flushed ids, in
  insertion order, with bit-identical vectors (f16-rounded for half precision), and that exact
  search there gives the same answers as before closing and as brute force;
* unflushed adds are discarded by close(), by interpreter exit and by os._exit, and default ids
  continue from the flushed state;
* one writer per file across processes: a second writer in another process gets IndexLockedError
  (in both directions) while the first is open, readers are not locked out and do not lock out,
  the lock survives a failed second open and a reader's close in the holding process (the classic
  POSIX fcntl-lock pitfalls), and a SIGKILLed holder releases it;
* files that are not indexes (empty, text, random bytes, zeros) raise NotAnIndexError and are left
  untouched; truncated or byte-flipped indexes raise NotAnIndexError/CorruptIndexError or (where
  the damage may legitimately be survivable) open to exactly a flushed state; no damaged file
  ever kills the interpreter (every open runs in a child process whose return code is checked)
  or raises anything that is not a ChassisError;
* opening with warm=True / huge_pages and closing at once, repeatedly, does not crash.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import chassis
import numpy as np
import pytest
from chassis import IndexLockedError, IndexOptions, VectorIndex
from conftest import (
    MAX_ID,
    assert_bit_identical,
    assert_child_ok,
    assert_exact_knn,
    child_env,
    describe_returncode,
    dump_index,
    normalise,
    run_python,
    to_half,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process control")

CORRUPT_KINDS = {"NotAnIndexError", "CorruptIndexError"}


# =========================================================================== helpers
class Child:
    """A long-lived child interpreter that we talk to through stdin/stdout lines."""

    def __init__(self, code: str, *args):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *[str(a) for a in args]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        self._buf = b""

    def readline(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise AssertionError(f"child said nothing for {timeout}s; stderr:\n{self.stderr()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait(timeout=30)
                    raise AssertionError(
                        f"child ended ({describe_returncode(self.proc.returncode)}) before answering; "
                        f"stdout so far {self._buf!r}; stderr:\n{self.stderr()}"
                    )
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def expect(self, word: str, timeout: float = 60.0) -> str:
        line = self.readline(timeout)
        assert line.split()[0] == word, (
            f"child said {line!r}, expected {word!r}; stderr:\n{self.stderr()}"
        )
        return line

    def send(self, line: str) -> None:
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def finish(self, timeout: float = 60.0) -> int:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


TRY_OPEN = r"""
import json, sys
import chassis
path, mode = sys.argv[1], sys.argv[2]
try:
    if mode == "reader":
        index = chassis.VectorIndex(path, read_only=True)
    elif mode == "writer_dims":
        index = chassis.VectorIndex(path, int(sys.argv[3]))
    else:
        index = chassis.VectorIndex(path)
    out = {"outcome": "opened", "len": len(index)}
    index.close()
except chassis.ChassisError as e:
    out = {"outcome": "error", "type": type(e).__name__, "oserror": isinstance(e, OSError),
           "message": str(e)}
print(json.dumps(out))
"""


def try_open_elsewhere(path, mode: str = "writer", dims: int | None = None) -> dict:
    args = [str(path), mode] + ([str(dims)] if dims is not None else [])
    proc = run_python(TRY_OPEN, *args)
    assert_child_ok(proc, f"opening {path} ({mode}) in another process")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_locked_elsewhere(path, mode: str = "writer", dims: int | None = None) -> dict:
    """Another process's open of ``path`` as ``mode`` fails with IndexLockedError; its answer."""
    out = try_open_elsewhere(path, mode, dims)
    assert out["outcome"] == "error" and out["type"] == "IndexLockedError", out
    return out


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# =========================================================================== fresh-process reopen
CONFIGS = [
    ("euclidean", "full"),
    ("cosine", "full"),
    ("inner_product", "half"),
    ("euclidean", "half"),
]


@pytest.mark.parametrize("metric,precision", CONFIGS, ids=[f"{m}-{p}" for m, p in CONFIGS])
def test_fresh_process_sees_exactly_the_flushed_state(tmp_path, metric, precision):
    path = tmp_path / "d.chassis"
    rng = np.random.default_rng(CONFIGS.index((metric, precision)))
    dims = 19
    opts = IndexOptions(metric=metric, precision=precision, max_connections=8, ef_construction=50)
    b1 = rng.standard_normal((300, dims)).astype(np.float32)
    singles = rng.standard_normal((3, dims)).astype(np.float32) * 10
    b2 = rng.standard_normal((200, dims)).astype(np.float32)
    b2_ids = rng.permutation(np.arange(10_000, 10_200)).astype(np.uint64)
    queries = rng.standard_normal((8, dims)).astype(np.float32)

    index = VectorIndex(path, dims, opts)
    index.add_batch(b1)
    index.add(singles[0], id=2**63)
    index.add(singles[1], id=MAX_ID)
    index.add(singles[2], id=7_000)  # below the max id: insertion order != id order
    index.add_batch(b2, ids=b2_ids)
    index.flush()
    flushed_ids = index.ids().copy()
    flushed_vecs = np.stack([index.get(int(i)) for i in flushed_ids])
    n = len(index)
    parent_hits = [[(h.id, h.distance) for h in index.search(q, 10, ef=n)] for q in queries]
    # not flushed: must be gone in the next process
    index.add_batch(
        rng.standard_normal((50, dims)).astype(np.float32), ids=np.arange(20_000, 20_050)
    )
    index.add(rng.standard_normal(dims).astype(np.float32), id=5_000)  # a free id below the max
    assert index.pending == 51
    index.close()

    expected_ids = np.concatenate(
        [np.arange(300, dtype=np.uint64), np.array([2**63, MAX_ID, 7_000], dtype=np.uint64), b2_ids]
    )
    np.testing.assert_array_equal(flushed_ids, expected_ids)
    originals = np.concatenate([b1, singles, b2])
    if metric == "cosine":
        np.testing.assert_allclose(flushed_vecs, normalise(originals), atol=1e-5)
    else:
        assert_bit_identical(flushed_vecs, to_half(originals) if precision == "half" else originals)

    for read_only in (False, True):
        state = dump_index(
            path, tmp_path, queries=queries, read_only=read_only, tag=f"ro{int(read_only)}"
        )
        meta = state["meta"]
        assert meta["len"] == n
        assert (meta["dimensions"], meta["metric"], meta["precision"]) == (dims, metric, precision)
        assert meta["max_connections"] == 8
        assert meta["pending"] == 0
        assert meta["read_only"] is read_only
        np.testing.assert_array_equal(state["ids"], expected_ids)
        assert_bit_identical(state["vecs"], flushed_vecs, "vectors read back in a fresh process")
        for qi, q in enumerate(queries):
            got_ids = state["search_ids"][qi]
            got_d = state["search_d"][qi]
            assert got_ids.tolist() == [i for i, _ in parent_hits[qi]]
            np.testing.assert_allclose(got_d, [d for _, d in parent_hits[qi]], rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(state["batch_ids"][qi], got_ids)
            assert_exact_knn(
                got_ids, got_d, flushed_vecs, expected_ids, q, 10, metric, precision=precision
            )


def test_many_flush_cycles_each_visible_to_a_reader_in_another_process(tmp_path):
    path = tmp_path / "c.chassis"
    rng = np.random.default_rng(3)
    dims = 16
    with VectorIndex(path, dims, IndexOptions(ef_construction=40)) as index:
        for cycle in range(4):
            index.add_batch(
                rng.standard_normal((int(rng.integers(1, 200)), dims)).astype(np.float32)
            )
            for _ in range(int(rng.integers(0, 4))):
                index.add(rng.standard_normal(dims).astype(np.float32))
            index.flush()
            ids = index.ids().copy()
            vecs = np.stack([index.get(int(i)) for i in ids])
            index.add(
                rng.standard_normal(dims).astype(np.float32)
            )  # pending while the reader opens
            state = dump_index(path, tmp_path, read_only=True, tag=f"cycle{cycle}")
            np.testing.assert_array_equal(state["ids"], ids)
            assert_bit_identical(state["vecs"], vecs, f"cycle {cycle}")


EXIT_WITHOUT_CLOSE = r"""
import os, sys
import numpy as np
import chassis
path, how = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
index = chassis.VectorIndex(path, 6)
index.add_batch(rng.standard_normal((40, 6)).astype(np.float32))
index.flush()
index.add_batch(rng.standard_normal((30, 6)).astype(np.float32))
index.add(rng.standard_normal(6).astype(np.float32), id=999)
if how == "os_exit":
    os._exit(0)
elif how == "exception":
    raise SystemExit(3)
# "fall_off": the interpreter exits with the index still open
"""


@pytest.mark.parametrize("how", ["os_exit", "exception", "fall_off"])
def test_process_exit_without_close_discards_unflushed_adds(tmp_path, how):
    path = tmp_path / "x.chassis"
    proc = run_python(EXIT_WITHOUT_CLOSE, path, how)
    assert proc.returncode >= 0, describe_returncode(proc.returncode) + proc.stderr
    expected = np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)
    state = dump_index(path, tmp_path)
    np.testing.assert_array_equal(state["ids"], np.arange(40))
    assert_bit_identical(state["vecs"], expected)
    with VectorIndex(path, 6) as index:  # the lock went with the process
        assert index.add(np.ones(6, np.float32)) == 40  # default id from the flushed state
        assert 999 not in index


# =========================================================================== locks across processes
def test_writer_in_another_process_is_locked_out_while_we_hold_it(tmp_path):
    path = tmp_path / "l.chassis"
    index = VectorIndex(path, 4)
    try:
        index.add_batch(np.ones((5, 4), np.float32))
        index.flush()
        index.add(np.ones(4, np.float32))  # pending: invisible to the other process
        for mode in ("writer", "writer_dims"):
            out = assert_locked_elsewhere(path, mode, dims=4)
            assert out["oserror"] is True
            assert len(out["message"].splitlines()) >= 2 and out["message"].splitlines()[
                1
            ].startswith("help:")
        out = try_open_elsewhere(path, "reader")
        assert out == {"outcome": "opened", "len": 5}
    finally:
        index.close()
    out = try_open_elsewhere(path, "writer")
    assert out == {"outcome": "opened", "len": 5}


HOLDER = r"""
import sys
import numpy as np
import chassis
path = sys.argv[1]
index = chassis.VectorIndex(path, 4)
index.add_batch(np.arange(12, dtype=np.float32).reshape(3, 4))
index.flush()
index.add(np.full(4, 7.0, np.float32))  # never flushed
print("READY", flush=True)
sys.stdin.readline()
index.close()
print("CLOSED", flush=True)
sys.stdin.readline()
"""


def test_writer_in_another_process_locks_us_out_until_it_closes(tmp_path):
    path = tmp_path / "h.chassis"
    child = Child(HOLDER, path)
    try:
        child.expect("READY")
        with pytest.raises(IndexLockedError) as e:
            VectorIndex(path, 4)
        assert isinstance(e.value, OSError)
        with pytest.raises(IndexLockedError):
            VectorIndex(path)
        with VectorIndex(path, read_only=True) as reader:  # readers take no lock
            assert len(reader) == 3
            np.testing.assert_array_equal(reader.get(2), [8, 9, 10, 11])
        child.send("close")
        child.expect("CLOSED")
        with VectorIndex(path, 4) as index:
            assert len(index) == 3  # the holder's unflushed add was discarded by its close
            assert index.add(np.zeros(4, np.float32)) == 3
    finally:
        child.finish()


def test_killed_writer_releases_the_lock(tmp_path):
    path = tmp_path / "k.chassis"
    child = Child(HOLDER, path)
    try:
        child.expect("READY")
        with pytest.raises(IndexLockedError):
            VectorIndex(path, 4)
    finally:
        child.kill()
    with VectorIndex(path, 4) as index:
        assert len(index) == 3
        np.testing.assert_array_equal(index.ids(), [0, 1, 2])


READER_HOLDER = r"""
import sys
import chassis
index = chassis.VectorIndex(sys.argv[1], read_only=True)
print("READY", len(index), flush=True)
sys.stdin.readline()
index.close()
print("CLOSED", flush=True)
"""


def test_reader_in_another_process_does_not_lock_out_the_writer(tmp_path):
    path = tmp_path / "r.chassis"
    with VectorIndex(path, 4) as index:
        index.add_batch(np.ones((2, 4), np.float32))
    child = Child(READER_HOLDER, path)
    try:
        assert child.expect("READY").split() == ["READY", "2"]
        with VectorIndex(path, 4) as index:
            index.add(np.zeros(4, np.float32))
            index.flush()
            assert len(index) == 3
        child.send("go")
        child.expect("CLOSED")
    finally:
        child.finish()


def _second_writers_refused(path, index) -> None:
    for _ in range(2):
        with pytest.raises(IndexLockedError):
            VectorIndex(path, 4)


def _readers_closed(path, index) -> None:
    """Readers in the writer's process: closed, left by a with block, dropped."""
    import gc

    index.add(np.ones(4, np.float32))
    index.flush()
    reader = VectorIndex(path, read_only=True)
    reader.close()
    with VectorIndex(path, read_only=True) as r2:
        assert len(r2) == 1
    r3 = VectorIndex(path, read_only=True)
    del r3
    gc.collect()


@pytest.mark.parametrize(
    ("meanwhile", "rows"),
    [(_second_writers_refused, 1), (_readers_closed, 2)],
    ids=["failed-second-open", "reader-closing"],
)
def test_lock_survives_in_the_holding_process(tmp_path, meanwhile, rows):
    """What ``meanwhile`` does in the writer's own process leaves another process locked out,
    and the writer goes on writing."""
    path = tmp_path / "p.chassis"
    index = VectorIndex(path, 4)
    try:
        meanwhile(path, index)
        assert_locked_elsewhere(path)
        index.add(np.ones(4, np.float32))
        index.flush()
    finally:
        index.close()
    assert try_open_elsewhere(path, "writer") == {"outcome": "opened", "len": rows}


# =========================================================================== damaged files
PROBE = r"""
import json, sys
import numpy as np
import chassis

manifest = json.load(open(sys.argv[1]))
queries = np.load(manifest["queries"]) if manifest.get("queries") else None
dims = manifest["dims"]

def dump(index, out):
    ids = index.ids()
    vecs = np.stack([index.get(int(i)) for i in ids]) if len(ids) else np.empty((0, index.dimensions), np.float32)
    arrays = dict(ids=np.asarray(ids), vecs=np.asarray(vecs))
    if queries is not None and index.dimensions == queries.shape[1]:
        ef = max(len(index), 10)
        b_ids, b_d = index.search_batch(queries, 10, ef=ef)
        for q in queries:
            index.search(q, 10, ef=ef)
        arrays.update(batch_ids=b_ids, batch_d=b_d)
    np.savez(out, **arrays)

for case in manifest["cases"]:
    for mode in ("reader", "writer_dims", "writer"):
        print(json.dumps({"start": case["file"], "mode": mode}), flush=True)
        rec = {"file": case["file"], "mode": mode}
        index = None
        try:
            if mode == "reader":
                index = chassis.VectorIndex(case["file"], read_only=True)
            elif mode == "writer_dims":
                index = chassis.VectorIndex(case["file"], dims)
            else:
                index = chassis.VectorIndex(case["file"])
        except chassis.ChassisError as e:
            rec.update(outcome="error", type=type(e).__name__, message=str(e))
        except BaseException as e:
            rec.update(outcome="foreign", type=type(e).__name__, message=repr(e)[:1000])
        if index is not None:
            try:
                out = case["file"] + "." + mode + ".npz"
                dump(index, out)
                rec.update(outcome="opened", len=len(index), dump=out)
                if mode == "writer" and manifest.get("write"):
                    rec["added"] = index.add(np.full(dims, 0.5, np.float32))
                    index.flush()
                    rec["len_after_add"] = len(index)
            except chassis.ChassisError as e:
                rec.update(outcome="opened_then_error", type=type(e).__name__, message=str(e))
            except BaseException as e:
                rec.update(outcome="foreign", type=type(e).__name__, message=repr(e)[:1000])
            finally:
                try:
                    index.close()
                except chassis.ChassisError:
                    pass
        print(json.dumps(rec), flush=True)
"""


def probe(
    files: list[Path],
    workdir: Path,
    *,
    dims: int,
    queries: np.ndarray | None = None,
    write: bool = False,
) -> list[dict]:
    """Open every file (reader, writer with dims, writer) in ONE child; return one record per open.

    Fails the test if the child dies (a signal: SIGSEGV, SIGBUS, abort) or exits non-zero,
    naming the file and mode it was opening.
    """
    manifest = {"cases": [{"file": str(f)} for f in files], "dims": dims, "write": write}
    if queries is not None:
        qfile = workdir / "probe-queries.npy"
        np.save(qfile, queries)
        manifest["queries"] = str(qfile)
    mfile = workdir / "probe-manifest.json"
    mfile.write_text(json.dumps(manifest))
    proc = run_python(PROBE, mfile, timeout=600)
    records, current = [], None
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if "start" in rec:
            current = rec
        else:
            records.append(rec)
            current = None
    if proc.returncode != 0:
        raise AssertionError(
            f"the interpreter died ({describe_returncode(proc.returncode)}) while opening "
            f"{current and current['start']} as {current and current['mode']}\n"
            f"--- stderr ---\n{proc.stderr[-4000:]}"
        )
    assert len(records) == 3 * len(files)
    for rec in records:
        assert rec["outcome"] != "foreign", f"a non-Chassis exception escaped: {rec}"
    return records


@pytest.fixture(scope="module")
def flushed_corpus(tmp_path_factory):
    """An index file with two flushes: state A (200 vectors), then state B (+300 vectors)."""
    d = tmp_path_factory.mktemp("corpus")
    path = d / "good.chassis"
    rng = np.random.default_rng(77)
    dims = 8
    a = rng.standard_normal((200, dims)).astype(np.float32)
    b = rng.standard_normal((300, dims)).astype(np.float32)
    with VectorIndex(path, dims, IndexOptions(max_connections=8, ef_construction=40)) as index:
        index.add_batch(a)
        index.flush()
        index.add_batch(b, ids=np.arange(1000, 1300))
    states = {
        "A": (np.arange(200, dtype=np.uint64), a),
        "B": (
            np.concatenate([np.arange(200), np.arange(1000, 1300)]).astype(np.uint64),
            np.concatenate([a, b]),
        ),
    }
    raw = np.fromfile(path, dtype=np.uint8)
    last_nz = int(np.flatnonzero(raw)[-1]) + 1
    queries = rng.standard_normal((4, dims)).astype(np.float32)
    # the file may be sparse past its content: keep the content and the size, not every zero
    return {
        "path": path,
        "bytes": raw[:last_nz].tobytes(),
        "size": int(raw.size),
        "dims": dims,
        "states": states,
        "last_nz": last_nz,
        "queries": queries,
    }


def write_variant(f: Path, content: bytes, size: int | None) -> Path:
    """Write ``content``, then extend the file (sparsely) to ``size`` if given."""
    f.write_bytes(content)
    if size is not None and size > len(content):
        os.truncate(f, size)
    return f


def matching_state(rec: dict, corpus: dict) -> str | None:
    """Which flushed state an opened file shows exactly (ids, bit-identical vectors, exact search)."""
    with np.load(rec["dump"]) as z:
        ids, vecs = z["ids"], z["vecs"]
        b_ids = z["batch_ids"] if "batch_ids" in z.files else None
        b_d = z["batch_d"] if "batch_d" in z.files else None
    for name, (s_ids, s_vecs) in corpus["states"].items():
        if ids.shape == s_ids.shape and (ids == s_ids).all():
            assert_bit_identical(
                vecs, s_vecs, f"{rec['file']} ({rec['mode']}) opened as state {name}"
            )
            assert b_ids is not None
            for qi, q in enumerate(corpus["queries"]):
                assert_exact_knn(
                    b_ids[qi],
                    b_d[qi],
                    s_vecs,
                    s_ids,
                    q,
                    10,
                    "euclidean",
                    context=f"{rec['file']} ({rec['mode']})",
                )
            return name
    return None


def check_damaged(records: list[dict], corpus: dict, *, strict: bool) -> None:
    for rec in records:
        if rec["outcome"] == "error":
            assert rec["type"] in CORRUPT_KINDS, (
                f"expected NotAnIndexError/CorruptIndexError: {rec}"
            )
        elif strict:
            raise AssertionError(f"a damaged index must not open: {rec}")
        elif rec["outcome"] == "opened":
            assert matching_state(rec, corpus) is not None, (
                f"opened a damaged file to a state that was never flushed: {rec['file']} ({rec['mode']}), "
                f"{rec['len']} vectors"
            )
        else:  # opened, then a Chassis error while reading: only corruption errors are acceptable
            assert rec["type"] in CORRUPT_KINDS, rec


def test_corpus_is_valid(flushed_corpus, tmp_path):
    copy = write_variant(tmp_path / "copy.chassis", flushed_corpus["bytes"], flushed_corpus["size"])
    records = probe(
        [copy], tmp_path, dims=flushed_corpus["dims"], queries=flushed_corpus["queries"], write=True
    )
    for rec in records:
        assert rec["outcome"] == "opened", rec
        assert matching_state(rec, flushed_corpus) == "B"
    assert records[-1]["added"] == 1300


def _cuts(corpus: dict) -> list[tuple[str, int, bool]]:
    nz = corpus["last_nz"]
    size = corpus["size"]
    cuts = [
        ("empty", 0, True),
        ("1_byte", 1, True),
        ("8_bytes", 8, True),
        ("100_bytes", 100, True),
        ("4KiB", 4096, True),
        ("half_of_content", nz // 2, True),
        ("three_quarters_of_content", (3 * nz) // 4, False),
        ("last_content_byte_cut", nz - 1, False),
        ("trailing_zeros_cut", nz, False),
        ("one_byte_short", size - 1, False),
    ]
    return [(name, at, strict) for name, at, strict in cuts if at < size]


TRUNCATIONS = [
    "empty",
    "1_byte",
    "8_bytes",
    "100_bytes",
    "4KiB",
    "half_of_content",
    "three_quarters_of_content",
    "last_content_byte_cut",
    "trailing_zeros_cut",
    "one_byte_short",
]


@pytest.mark.parametrize("cut", TRUNCATIONS)
def test_truncated_index_is_refused_without_crashing(flushed_corpus, tmp_path, cut):
    cuts = {name: (at, strict) for name, at, strict in _cuts(flushed_corpus)}
    if cut not in cuts:
        pytest.skip(f"the file is too small for the {cut} cut")
    at, strict = cuts[cut]
    content = flushed_corpus["bytes"]
    f = write_variant(
        tmp_path / f"cut-{cut}.chassis", content[:at], at if at > len(content) else None
    )
    assert f.stat().st_size == at
    before = sha(f)
    records = probe(
        [f], tmp_path, dims=flushed_corpus["dims"], queries=flushed_corpus["queries"], write=True
    )
    if cut == "empty":
        for rec in records:
            assert rec["outcome"] == "error" and rec["type"] == "NotAnIndexError", rec
    check_damaged(records, flushed_corpus, strict=strict)
    if all(rec["outcome"] == "error" for rec in records):
        assert sha(f) == before, "a failed open modified the damaged file"


@pytest.mark.slow
def test_flipped_header_bytes_are_detected_or_harmless(flushed_corpus, tmp_path):
    """Flip bytes in the first 4 KiB: refused as corrupt, or opened to exactly a flushed state."""
    data, size = flushed_corpus["bytes"], flushed_corpus["size"]
    offsets = list(range(0, 32)) + list(range(32, 512, 16)) + list(range(512, 4096, 256))
    files = []
    for off in offsets:
        if off >= len(data):
            continue
        damaged = bytearray(data)
        damaged[off] ^= 0xFF
        files.append(write_variant(tmp_path / f"flip-{off}.chassis", bytes(damaged), size))
    zeroed = bytearray(data)
    zeroed[:4096] = bytes(min(4096, len(data)))
    files.append(write_variant(tmp_path / "zeroed-first-4KiB.chassis", bytes(zeroed), size))
    records = probe(files, tmp_path, dims=flushed_corpus["dims"], queries=flushed_corpus["queries"])
    check_damaged(records, flushed_corpus, strict=False)


def test_flipped_bytes_anywhere_never_crash(flushed_corpus, tmp_path):
    """Random single-byte damage anywhere in the content: no signal, only ChassisErrors."""
    data, size = flushed_corpus["bytes"], flushed_corpus["size"]
    rng = np.random.default_rng(5)
    files = []
    for j, off in enumerate(sorted(rng.choice(flushed_corpus["last_nz"], size=40, replace=False))):
        damaged = bytearray(data)
        damaged[int(off)] ^= int(rng.integers(1, 256))
        files.append(write_variant(tmp_path / f"any-{j}-{int(off)}.chassis", bytes(damaged), size))
    probe(
        files, tmp_path, dims=flushed_corpus["dims"], queries=flushed_corpus["queries"], write=True
    )


def _not_index_files(tmp_path: Path, corpus: dict) -> dict[str, Path]:
    rng = np.random.default_rng(9)
    files = {
        "empty": b"",
        "text": b"hello, this is not a vector index\n" * 400,
        "random_7_bytes": rng.bytes(7),
        "random_4KiB": rng.bytes(4096),
        "random_300KiB": rng.bytes(300 * 1024),
        "zeros_64KiB": bytes(65536),
        "zeros_1MiB": bytes(1 << 20),
        "json": json.dumps({"dimensions": 8, "metric": "euclidean"}).encode(),
    }
    out = {}
    for name, content in files.items():
        p = tmp_path / f"{name}.bin"
        p.write_bytes(content)
        out[name] = p
    return out


def test_files_that_are_not_indexes_are_refused_and_left_untouched(flushed_corpus, tmp_path):
    files = _not_index_files(tmp_path, flushed_corpus)
    hashes = {name: sha(p) for name, p in files.items()}
    records = probe(list(files.values()), tmp_path, dims=8, write=True)
    for rec in records:
        assert rec["outcome"] == "error", f"opened something that is not an index: {rec}"
        assert rec["type"] == "NotAnIndexError", rec
        assert len(rec["message"].splitlines()) >= 2 and rec["message"].splitlines()[1].startswith(
            "help:"
        ), rec
    for name, p in files.items():
        assert sha(p) == hashes[name], f"opening {name} changed it"


def test_real_magic_followed_by_garbage_is_refused_without_crashing(flushed_corpus, tmp_path):
    data, size = flushed_corpus["bytes"], flushed_corpus["size"]
    rng = np.random.default_rng(10)
    files = []
    for keep in (8, 16, 64, 512):
        garbage = data[:keep] + rng.bytes(max(0, len(data) - keep))
        files.append(write_variant(tmp_path / f"magic-{keep}.chassis", garbage, size))
    records = probe(files, tmp_path, dims=flushed_corpus["dims"], write=True)
    # with only 8 or 16 bytes of the real header left, the header itself is garbage: refused.
    # (With 64 or 512 bytes kept the header may survive whole; then the only demand is above:
    # no crash and no exception that is not a ChassisError.)
    short = [r for r in records if r["file"].endswith(("magic-8.chassis", "magic-16.chassis"))]
    assert len(short) == 6
    check_damaged(short, flushed_corpus, strict=True)


def test_not_an_index_in_process(tmp_path):
    """The same refusal seen from the test process itself (types and messages)."""
    p = tmp_path / "t.txt"
    p.write_text("just text\n" * 100)
    with pytest.raises(chassis.NotAnIndexError) as e:
        VectorIndex(p)
    assert isinstance(e.value, ValueError)
    with pytest.raises(chassis.NotAnIndexError):
        VectorIndex(p, 8)
    with pytest.raises(chassis.NotAnIndexError):
        VectorIndex(p, read_only=True)
    assert p.read_text() == "just text\n" * 100


# =========================================================================== warm / huge pages
WARM_CYCLES = r"""
import sys
import numpy as np
import chassis
path = sys.argv[1]
rng = np.random.default_rng(1)
data = rng.standard_normal((6000, 128)).astype(np.float32)
with chassis.VectorIndex(path, 128, chassis.IndexOptions(ef_construction=20, max_connections=4)) as ix:
    ix.add_batch(data)
for cycle in range(24):
    opts = chassis.IndexOptions(ef_construction=20, max_connections=4, warm=bool(cycle % 2 == 0),
                                huge_pages=(True, False, None)[cycle % 3])
    ro = cycle % 4 == 3
    ix = chassis.VectorIndex(path, read_only=True) if ro else chassis.VectorIndex(path, 128, opts)
    if cycle % 3 == 1:
        hits = ix.search(data[cycle], k=1, ef=6000)
        assert hits[0].id == cycle, hits
    ix.close()
    del ix
ix = chassis.VectorIndex(path, 128, chassis.IndexOptions(max_connections=4, warm=True))
assert len(ix) == 6000
assert ix.get(5999).tobytes() == data[5999].tobytes()
del ix  # dropped while warming: garbage collection must stop it safely
print("OK")
"""


def test_warm_and_huge_pages_open_close_cycles_do_not_crash(tmp_path):
    proc = run_python(WARM_CYCLES, tmp_path / "w.chassis", timeout=300)
    assert_child_ok(proc, "warm/huge-pages open-close cycles")
    assert proc.stdout.strip().endswith("OK")
