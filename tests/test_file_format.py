"""File-format regression: an index written by older code opens with this code, with identical
results.

The fixture in tests/data (``format-v1-*.chassis`` and ``format-v1-expected.json``) was written
ONCE by ``tests/data/make_format_fixture.py`` running the code of commit b9a8cd8 (file format
version 1). The oracle is that recorded output of the pinned old code, never this code run
again: each file is copied to tmp_path (tests/data is never written) and opened as a reader
(``IndexReader``), as a ``read_only`` VectorIndex, as a writer (``VectorIndex(path)``) and
copied into memory (``VectorIndex.load``); every one must give the recorded ``len``, ``ids()``,
``deleted_count()``, ``user_version``, options, ``get()`` bit for bit, ``check()`` clean, and the
ids and distances of exact ``search`` and ``search_batch`` (k=10, ef above the slot count) for 20
fixed queries. Then a writer adds 5 vectors, flushes and reopens: the ids it gives and the
searches after that must again be the recorded ones.

Ids must be equal; distances equal up to 1e-6 relative (a CPU with other distance kernels, see
tests/test_kernels.py, may sum in another order).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from chassis import IndexReader, VectorIndex

DATA = Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "format-v1-expected.json").read_text())
FILES = sorted(EXPECTED["files"])
RTOL = 1e-6


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).astype(np.float32)


@pytest.fixture(params=FILES)
def fixture_copy(request, tmp_path) -> tuple[Path, dict]:
    """A copy of one fixture file in tmp_path, and what the old code recorded for it."""
    name = request.param
    exp = EXPECTED["files"][name]
    src = DATA / name
    assert hashlib.sha256(src.read_bytes()).hexdigest() == exp["sha256"], (
        f"tests/data/{name} is not the file the expected results were recorded on"
    )
    dst = tmp_path / name
    shutil.copyfile(src, dst)
    return dst, exp


def assert_answers(ix: VectorIndex, exp: dict, queries: np.ndarray, what: str, *, k, ef) -> None:
    """``exp`` holds the recorded ``search`` and ``search_batch`` answers for ``queries``."""
    for qi, (q, want) in enumerate(zip(queries, exp["search"], strict=True)):
        hits = ix.search(q, k, ef=ef)
        assert [h.id for h in hits] == want["ids"], f"{what}: search ids, query {qi}"
        np.testing.assert_allclose(
            f32([h.distance for h in hits]),
            f32(want["distances"]),
            rtol=RTOL,
            atol=0,
            err_msg=f"{what}: search distances, query {qi}",
        )
    ids, dist = ix.search_batch(queries, k, ef=ef)
    np.testing.assert_array_equal(
        ids, np.asarray(exp["search_batch"]["ids"], dtype=np.uint64), err_msg=f"{what}: batch ids"
    )
    assert dist.dtype == np.float32
    np.testing.assert_allclose(
        dist,
        f32(exp["search_batch"]["distances"]),
        rtol=RTOL,
        atol=0,
        err_msg=f"{what}: batch distances",
    )


def assert_recorded_state(ix: VectorIndex, exp: dict, what: str) -> None:
    assert ix.dimensions == exp["dimensions"]
    assert ix.metric == exp["metric"]
    assert ix.precision == exp["precision"]
    assert ix.options.max_connections == exp["max_connections"]
    assert len(ix) == exp["len"]
    assert ix.deleted_count() == exp["deleted_count"]
    assert ix.user_version == exp["user_version"]
    ids = ix.ids()
    assert ids.dtype == np.uint64
    assert ids.tolist() == exp["ids"], f"{what}: ids() (values and insertion order)"
    for i, vector in exp["get"]:
        got = ix.get(i)
        assert got is not None and got.dtype == np.float32, (what, i)
        np.testing.assert_array_equal(
            got.view(np.uint32), f32(vector).view(np.uint32), err_msg=f"{what}: get({i}) bits"
        )
        assert i in ix
    for i in exp["absent_ids"]:
        assert ix.get(i) is None, (what, i)
        assert i not in ix, (what, i)
    check = ix.check()
    assert check.ok, (what, check)
    assert {
        "unreachable": check.unreachable,
        "not_finite": check.not_finite,
        "corrupt": check.corrupt,
    } == exp["check"]
    assert_answers(ix, exp, f32(exp["queries"]), what, k=exp["k"], ef=exp["ef"])


def test_the_fixture_is_a_version_1_file_closed_cleanly():
    for name in FILES:
        head = (DATA / name).read_bytes()[:12]
        magic, version = struct.unpack_from("<8sI", head)
        assert magic == b"CHASSIS\x1a" and version == 1, name
        assert not (DATA / (name + ".undo")).exists(), name


@pytest.mark.parametrize("how", ["IndexReader", "read_only", "writer", "load"])
def test_an_index_written_by_the_old_code_opens_with_the_recorded_results(fixture_copy, how):
    path, exp = fixture_copy
    before = path.read_bytes()
    if how == "IndexReader":
        ix = IndexReader(path)
    elif how == "read_only":
        ix = VectorIndex(path, read_only=True)
    elif how == "writer":
        ix = VectorIndex(path)
    else:
        ix = VectorIndex.load(path)
        assert ix.in_memory
    with ix:
        assert ix.read_only == (how in ("IndexReader", "read_only"))
        assert ix.pending == 0
        assert_recorded_state(ix, exp, f"{path.name} ({how})")
    if how != "writer":
        assert path.read_bytes() == before, "opening and searching changed the file"


def test_a_writer_adds_to_an_old_file_flushes_and_reopens(fixture_copy):
    path, exp = fixture_copy
    after = exp["after_add"]
    extra = f32(after["vectors"])
    queries = f32(exp["queries"])
    k, ef = exp["k"], exp["ef"]
    with VectorIndex(path) as w:
        new_ids = w.add_batch(extra)
        assert new_ids.tolist() == after["ids"], "the default ids given after the recorded ones"
        w.flush()
        assert len(w) == after["len"]
        assert_answers(w, after, queries, f"{path.name} (writer, after add)", k=k, ef=ef)
    for reopen in (IndexReader, VectorIndex):
        with reopen(path) as ix:
            assert len(ix) == after["len"]
            assert ix.user_version == exp["user_version"]
            assert ix.ids().tolist() == exp["ids"] + after["ids"]
            for i, vector in exp["get"]:
                np.testing.assert_array_equal(
                    ix.get(i).view(np.uint32), f32(vector).view(np.uint32)
                )
            for i, hits in zip(after["ids"], ix.search_batch(extra, 1, ef=ef)[0], strict=True):
                assert hits[0] == i
            assert ix.check().ok
            assert_answers(
                ix, after, queries, f"{path.name} ({reopen.__name__} after reopen)", k=k, ef=ef
            )


def test_the_fixture_is_not_modified_by_the_tests():
    for name in FILES:
        data = (DATA / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == EXPECTED["files"][name]["sha256"], name
