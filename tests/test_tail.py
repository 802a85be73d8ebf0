"""The tail: small adds stored, committed and searchable before they are linked.

A small batch (one ``add``, or up to a quarter of ``TAIL_MAX`` rows) on an index whose graph
has a node is written and published without linking; searches scan these rows exactly, and the
next call that finds the tail full (or any larger batch) links it as one batch. Oracles: brute
force k-NN in NumPy over everything added; the file's own header bytes (format version 4 and the
linked count while a tail exists, the mode's version once it is linked); a reader in a fresh
process; a writer killed with SIGKILL and its file reopened; ``check()``.
"""

from __future__ import annotations

import json
import signal
import struct
import sys

import numpy as np
import pytest
from chassis import IndexOptions, VectorIndex
from conftest import assert_child_ok, assert_exact_knn, brute_force_knn, run_python

DIMS = 24
BASE = 2000
TAIL_MAX = 256  # src/index/write.rs
HEADER_COPY = 64 * 1024


def header_copies(path) -> list[bytes]:
    """The two header copies, as the file holds them."""
    with open(path, "rb") as f:
        return [f.read(HEADER_COPY) for _ in range(2)]


def header_state(path) -> tuple[int, int, int]:
    """(format version, slots, linked) of the current header copy, read from the file's bytes:
    the copy with the higher sequence (both are valid here)."""
    best = max(header_copies(path), key=lambda b: struct.unpack_from("<Q", b, 16)[0])
    version = struct.unpack_from("<I", best, 8)[0]
    slots = struct.unpack_from("<Q", best, 48)[0]
    linked = struct.unpack_from("<Q", best, 104)[0] if version == 4 else slots
    return version, slots, linked


def copy_versions(path) -> list[int]:
    """The format version of each header copy."""
    return [struct.unpack_from("<I", b, 8)[0] for b in header_copies(path)]


def data(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIMS), dtype=np.float32)


def flushed_with_tail(path, xs: np.ndarray) -> VectorIndex:
    """A writer of ``xs``: the first ``BASE`` rows as one batch, the rest one ``add`` at a
    time (the tail), each part flushed."""
    ix = VectorIndex(path, DIMS)
    ix.add_batch(xs[:BASE])
    ix.flush()
    for x in xs[BASE:]:
        ix.add(x)
    ix.flush()
    return ix


def exact_everywhere(ix, xs: np.ndarray, metric: str = "euclidean", precision: str = "full"):
    """Exact search (ef covers the index) and the default search agree with brute force on the
    added rows' own vectors: each finds itself first."""
    ids = np.arange(len(xs), dtype=np.uint64)
    qs = xs[-40:] + np.float32(1e-3)
    for q in qs[:8]:
        got = ix.search(q, k=5, ef=len(xs) + 10)
        assert_exact_knn(
            [h.id for h in got],
            [h.distance for h in got],
            xs,
            ids,
            q[None, :],
            5,
            metric,
            precision=precision,
        )
    got_ids, _ = ix.search_batch(qs, k=1, ef=64)
    bf_ids, _ = brute_force_knn(xs, qs, 1, metric)
    assert (got_ids[:, 0] == bf_ids[:, 0]).all(), "a row of the tail was not found first"


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"precision": "half"},
        {"quantization": "int8"},
        {"precision": "int8"},
    ],
    ids=["float32", "half", "codes-beside", "codes-only"],
)
def test_single_adds_are_searchable_flushed_and_linked_later(tmp_path, options):
    path = tmp_path / "t.chassis"
    xs = data(BASE + TAIL_MAX + 40, 1)
    ix = VectorIndex(path, DIMS, options=IndexOptions(**options))
    ix.add_batch(xs[:BASE])
    ix.flush()
    assert header_state(path)[0] in (1, 2)
    for i in range(BASE, BASE + 30):
        assert ix.add(xs[i]) == i
    ix.flush()
    version, slots, linked = header_state(path)
    assert (version, slots, linked) == (4, BASE + 30, BASE), "the adds should be a tail"
    # Both copies: a build that reads up to version 3 must find no copy it could open (it
    # would take the older one, without the tail, and as a writer give back its slots).
    assert copy_versions(path) == [4, 4]
    precision = "half" if options.get("precision") == "half" else "full"
    if options.get("precision") != "int8":
        exact_everywhere(ix, xs[: BASE + 30], precision=precision)
    else:
        # Codes only: distances are the codes'; each added row still comes first.
        qs = xs[BASE : BASE + 30]
        got_ids, _ = ix.search_batch(qs, k=1, ef=64)
        assert (got_ids[:, 0] == np.arange(BASE, BASE + 30)).all()
    # Filling the tail links it: the next add finds it full.
    for i in range(BASE + 30, len(xs)):
        ix.add(xs[i])
    ix.flush()
    version, slots, linked = header_state(path)
    assert slots == len(xs) and linked > BASE + 30 and slots - linked <= TAIL_MAX
    # A batch larger than a quarter of the tail links the tail and itself.
    more = data(TAIL_MAX // 4 + 1, 2)
    ix.add_batch(more)
    ix.flush()
    version, slots, linked = header_state(path)
    assert version in (1, 2) and slots == linked == len(xs) + len(more)
    report = ix.check()
    assert report.ok and not report.unreachable, report
    ix.close()


def test_a_reader_in_another_process_finds_flushed_tail_rows(tmp_path):
    path = tmp_path / "r.chassis"
    xs = data(BASE + 20, 3)
    ix = flushed_with_tail(path, xs)
    version, _, linked = header_state(path)
    assert (version, linked) == (4, BASE)
    np.save(tmp_path / "q.npy", xs[BASE:])
    proc = run_python(
        """
        import json, sys, numpy as np
        from chassis import IndexReader
        r = IndexReader(sys.argv[1])
        qs = np.load(sys.argv[2])
        ids, d = r.search_batch(qs, k=1, ef=32)
        print(json.dumps([len(r), ids[:, 0].tolist(), float(d.max())]))
        """,
        path,
        tmp_path / "q.npy",
    )
    assert_child_ok(proc, "reader")
    n, ids, worst = json.loads(proc.stdout)
    assert n == BASE + 20
    assert ids == list(range(BASE, BASE + 20))
    assert worst == pytest.approx(0.0, abs=1e-5)
    ix.close()


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_a_killed_writer_leaves_its_flushed_tail_and_links_it_after(tmp_path):
    path = tmp_path / "k.chassis"
    xs = data(BASE + 25 + TAIL_MAX, 4)
    np.save(tmp_path / "x.npy", xs)
    proc = run_python(
        """
        import os, signal, sys, numpy as np
        from chassis import VectorIndex
        xs = np.load(sys.argv[2])
        ix = VectorIndex(sys.argv[1], xs.shape[1])
        ix.add_batch(xs[:2000])
        ix.flush()
        for x in xs[2000:2020]:
            ix.add(x)
        ix.flush()
        for x in xs[2020:2025]:
            ix.add(x)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        path,
        tmp_path / "x.npy",
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert header_state(path) == (4, BASE + 20, BASE)
    ix = VectorIndex(path)
    assert len(ix) == BASE + 20, "the unflushed adds must be gone, the flushed tail kept"
    exact_everywhere(ix, xs[: BASE + 20])
    # The reopened writer links the tail when it fills, as its own.
    for x in xs[BASE + 20 :]:
        ix.add(x)
    ix.flush()
    assert header_state(path)[2] > BASE
    report = ix.check()
    assert report.ok and not report.unreachable, report
    ix.close()
    ix = VectorIndex(path, read_only=True)
    assert len(ix) == len(xs)
    exact_everywhere(ix, xs)


def test_tail_rows_deleted_filtered_rolled_back_and_compacted(tmp_path):
    path = tmp_path / "d.chassis"
    xs = data(BASE + 10, 5)
    ix = flushed_with_tail(path, xs)
    assert ix.delete(BASE + 3)
    ix.flush()
    got = ix.search(xs[BASE + 3], k=3)
    assert BASE + 3 not in [h.id for h in got]
    got = ix.search(xs[BASE + 4], k=2, allowed=[BASE + 4, 7])
    assert [h.id for h in got][0] == BASE + 4
    got = ix.search(xs[BASE + 4], k=2, excluded=[BASE + 4])
    assert BASE + 4 not in [h.id for h in got]
    # A rollback drops the unflushed adds of the tail and keeps the flushed ones. Oracles:
    # the rolled-back vector is not found (its own nearest is another row), and after the
    # next flush a fresh process sees the same rows.
    extra = data(1, 6)[0]
    new_id = ix.add(extra)
    ix.rollback()
    assert len(ix) == BASE + 9 and header_state(path)[2] == BASE
    assert new_id not in ix
    assert ix.search(extra, k=1, ef=64)[0].id != new_id
    ix.flush()
    proc = run_python(
        "import sys, chassis; r = chassis.IndexReader(sys.argv[1]);"
        " print(len(r), int(sys.argv[2]) in r)",
        str(path),
        str(new_id),
    )
    assert_child_ok(proc, "reopening after the rollback")
    assert proc.stdout.split() == [str(BASE + 9), "False"]
    ix.compact()
    assert len(ix) == BASE + 9
    want = [i for i in range(BASE, BASE + 10) if i != BASE + 3]
    got, _ = ix.search_batch(xs[want], k=1, ef=64)
    assert got[:, 0].tolist() == want
    report = ix.check()
    assert report.ok and not report.unreachable, report
    ix.close()


def test_an_in_memory_index_keeps_a_tail_and_saves_it(tmp_path):
    xs = data(BASE + 12, 7)
    ix = VectorIndex(None, DIMS)
    ix.add_batch(xs[:BASE])
    for x in xs[BASE:]:
        ix.add(x)
    exact_everywhere(ix, xs)
    ix.save(tmp_path / "m.chassis")
    assert header_state(tmp_path / "m.chassis") == (4, BASE + 12, BASE)
    back = VectorIndex(tmp_path / "m.chassis", read_only=True)
    exact_everywhere(back, xs)


def test_defer_off_links_every_add(tmp_path):
    path = tmp_path / "o.chassis"
    code = """
        import sys, numpy as np
        from chassis import VectorIndex
        xs = np.random.default_rng(8).standard_normal((2010, 24), dtype=np.float32)
        ix = VectorIndex(sys.argv[1], 24)
        ix.add_batch(xs[:2000])
        for x in xs[2000:]:
            ix.add(x)
        ix.flush()
        ix.close()
        """
    proc = run_python(code, path, env={"CHASSIS_DEFER_LINK": "0"})
    assert_child_ok(proc, "writer")
    assert header_state(path) == (1, BASE + 10, BASE + 10)
