"""In-memory indexes (``VectorIndex(None, ...)``): the writer API without a file, `save` / `load`,
anonymous stores on transparent huge pages, and the placement of bulk writes (``balanced``: every
thread of the pool writes a stretch, so the pages spread over the NUMA nodes; ``local``).

Oracles: brute-force k-NN in NumPy; the same data in a file-backed index; a saved file opened
by a fresh process; the kernel's own accounting (AnonHugePages in /proc/self/smaps, through
``memory_stats()``); a child process that opted out of transparent huge pages.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import chassis
import numpy as np
import pytest
from conftest import assert_child_ok, assert_exact_knn, assert_has_help, brute_force_knn, run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_available() -> bool:
    return (
        sys.platform.startswith("linux")
        and THP_MODE.exists()
        and "[never]" not in THP_MODE.read_text()
    )


def search_ids(idx, queries: np.ndarray, k: int, ef: int) -> np.ndarray:
    ids, _ = idx.search_batch(queries, k, ef=ef)
    return ids


# --------------------------------------------------------------------------- the writer API
def test_in_memory_index_has_the_writer_api_and_no_file(tmp_path, rng, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x = rng.standard_normal((500, 12)).astype(np.float32)
    idx = chassis.VectorIndex(None, 12)
    assert idx.in_memory and idx.path is None
    assert "in memory" in repr(idx)
    ids = idx.add_batch(x[:400])
    assert ids.tolist() == list(range(400))
    assert idx.add(x[400]) == 400
    idx.add_batch(x[401:], ids=np.arange(1000, 1099, dtype=np.uint64))
    assert len(idx) == 500 and idx.pending == 0
    idx.flush()  # does nothing in memory, and makes no file
    assert idx.delete(3) and 3 not in idx and not idx.delete(3)
    np.testing.assert_array_equal(idx.get(1000), x[401])
    live = np.array([i for i in range(500) if i != 3])
    live_ids = np.array([i if i <= 400 else 1000 + i - 401 for i in live], dtype=np.uint64)
    for q in rng.standard_normal((5, 12)).astype(np.float32):
        hits = idx.search(q, 7, ef=500)
        assert_exact_knn(
            [h.id for h in hits],
            [h.distance for h in hits],
            x[live],
            live_ids,
            q[None],
            7,
            "euclidean",
        )
    snap = idx.snapshot()
    idx.add(x[0])
    assert len(snap) == 499 and len(idx) == 500
    assert idx.check() == chassis.Check([], [], [])
    idx.compact()
    assert idx.deleted_count() == 0 and len(idx) == 500
    hits = idx.search(x[10], 1, ef=500)
    assert hits[0].id == 10 and hits[0].distance == 0.0
    assert os.listdir(tmp_path) == [], "an in-memory index wrote files"
    idx.close()
    with pytest.raises(chassis.IndexClosedError):
        idx.search(x[0])


def test_rollback_in_memory_is_refused_and_keeps_everything():
    idx = chassis.VectorIndex(None, 4)
    idx.add_batch(np.eye(4, dtype=np.float32))
    with pytest.raises(chassis.InvalidArgumentError) as e:
        idx.rollback()
    assert_has_help(e.value)
    assert isinstance(e.value, ValueError)
    assert len(idx) == 4


def test_bad_in_memory_arguments_get_typed_errors(tmp_path):
    with pytest.raises(chassis.InvalidArgumentError, match="dimensions") as e:
        chassis.VectorIndex(None)
    assert_has_help(e.value)
    with pytest.raises(chassis.InvalidArgumentError, match="read-only"):
        chassis.VectorIndex(None, 4, read_only=True)
    with pytest.raises(chassis.InvalidArgumentError, match="placement"):
        chassis.IndexOptions(placement="spread").validate()
    with pytest.raises(chassis.ArgumentTypeError):
        chassis.IndexOptions(placement=1).validate()  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        chassis.VectorIndex.load(tmp_path / "missing.chassis")
    idx = chassis.VectorIndex(None, 4)
    idx.add(np.ones(4, np.float32))
    with pytest.raises(chassis.InvalidPathError):
        idx.save(tmp_path)  # a directory
    with pytest.raises(chassis.InvalidPathError):
        idx.save(tmp_path / "no" / "such" / "dir.chassis")
    with pytest.raises(TypeError):
        idx.save(3)  # type: ignore[arg-type]
    with pytest.raises(chassis.DimensionMismatchError):
        idx.add(np.ones(5, np.float32))
    with pytest.raises(chassis.InvalidArgumentError):
        idx.add(np.array([1, np.nan, 0, 0], np.float32))
    assert len(idx) == 1


def test_placement_and_options_round_trip():
    o = chassis.IndexOptions(placement=" Local ")
    assert o.placement == "local"
    idx = chassis.VectorIndex(None, 3, o)
    assert idx.options.placement == "local"
    assert chassis.VectorIndex(None, 3).options.placement == "balanced"


# --------------------------------------------------------------------------- save and load
def test_save_writes_a_file_another_process_reads_with_the_same_results(tmp_path, rng):
    x = rng.standard_normal((3000, 16)).astype(np.float32)
    q = rng.standard_normal((20, 16)).astype(np.float32)
    idx = chassis.VectorIndex(None, 16, chassis.IndexOptions(metric="cosine", precision="half"))
    idx.add_batch(x)
    idx.delete(7)
    idx.user_version = 42
    want = search_ids(idx, q, 10, 3000)
    path = tmp_path / "saved.chassis"
    idx.save(path)
    np.save(tmp_path / "q.npy", q)
    proc = run_python(
        """
        import sys, json, numpy as np, chassis
        r = chassis.IndexReader(sys.argv[1])
        q = np.load(sys.argv[2])
        ids, _ = r.search_batch(q, 10, ef=3000)
        print(json.dumps({"len": len(r), "uv": r.user_version, "metric": r.metric,
                          "precision": r.precision, "has7": 7 in r, "ids": ids.tolist()}))
        """,
        path,
        tmp_path / "q.npy",
    )
    assert_child_ok(proc)
    got = json.loads(proc.stdout)
    assert got["len"] == 2999 and got["uv"] == 42 and not got["has7"]
    assert (got["metric"], got["precision"]) == ("cosine", "half")
    np.testing.assert_array_equal(np.array(got["ids"], dtype=np.uint64), want)
    # A writer opens the saved file and goes on from it.
    with chassis.VectorIndex(path) as w:
        assert w.add(x[0]) == 3000
    assert len(chassis.IndexReader(path)) == 3000


def test_load_copies_the_last_flush_and_leaves_the_file_alone(tmp_path, rng):
    x = rng.standard_normal((2500, 8)).astype(np.float32)
    path = tmp_path / "a.chassis"
    w = chassis.VectorIndex(path, 8)
    w.add_batch(x[:2000])
    w.delete(5)
    w.flush()
    w.add_batch(x[2000:])  # not flushed: a load sees the last flush only
    w.delete(6)
    mem = chassis.VectorIndex.load(path)  # while the writer holds the file
    assert mem.in_memory and mem.path is None
    assert len(mem) == 1999 and 5 not in mem and 6 in mem
    live = np.array([i for i in range(2000) if i != 5])
    q = rng.standard_normal((10, 8)).astype(np.float32)
    ids, d = mem.search_batch(q, 5, ef=2000)
    for i in range(len(q)):
        assert_exact_knn(ids[i], d[i], x[live], live, q[i : i + 1], 5, "euclidean")
    # The copy is a writer of its own; the file does not change.
    mem.add_batch(x[2000:2100])
    mem.delete(10)
    w.rollback()
    w.close()
    r = chassis.IndexReader(path)
    assert len(r) == 1999 and 10 in r
    # load(in_memory=False) is an ordinary writer.
    fw = chassis.VectorIndex.load(path, in_memory=False)
    assert not fw.in_memory and fw.path == path
    fw.close()


def test_load_with_other_fixed_options_is_refused(tmp_path):
    path = tmp_path / "a.chassis"
    with chassis.VectorIndex(path, 4) as w:
        w.add(np.ones(4, np.float32))
    with pytest.raises(chassis.OptionsMismatchError) as e:
        chassis.VectorIndex.load(path, options=chassis.IndexOptions(metric="cosine"))
    assert_has_help(e.value)
    m = chassis.VectorIndex.load(
        path, options=chassis.IndexOptions(placement="local", ef_search=80)
    )
    assert m.options.placement == "local" and m.options.ef_search == 80


def test_load_of_a_truncated_file_is_a_corrupt_index_error(tmp_path, rng):
    path = tmp_path / "a.chassis"
    with chassis.VectorIndex(path, 32) as w:
        w.add_batch(rng.standard_normal((3000, 32)).astype(np.float32))
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(chassis.CorruptIndexError):
        chassis.VectorIndex.load(path)


# --------------------------------------------------------------------------- placement
@pytest.fixture(scope="module")
def big_set():
    # Above the 16,384 items from which bulk writes are balanced.
    rng = np.random.default_rng(8)
    return rng.standard_normal((20_000, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(
        np.float32
    )


@pytest.mark.slow
def test_balanced_local_and_file_give_identical_results(tmp_path, big_set):
    x, q = big_set
    n = len(x)
    opts = dict(ef_construction=40)
    variants = {
        "file": chassis.VectorIndex(tmp_path / "f.chassis", 8, chassis.IndexOptions(**opts)),
        "balanced": chassis.VectorIndex(
            None, 8, chassis.IndexOptions(placement="balanced", **opts)
        ),
        "local": chassis.VectorIndex(None, 8, chassis.IndexOptions(placement="local", **opts)),
    }
    for idx in variants.values():
        idx.add_batch(x, threads=2)
    variants["file"].flush()
    variants["loaded balanced"] = chassis.VectorIndex.load(tmp_path / "f.chassis", threads=2)
    variants["loaded local"] = chassis.VectorIndex.load(
        tmp_path / "f.chassis", options=chassis.IndexOptions(placement="local")
    )
    bf_ids, _ = brute_force_knn(x, q, 10, "euclidean")
    for name, idx in variants.items():
        np.testing.assert_array_equal(search_ids(idx, q, 10, n), bf_ids, err_msg=name)
        for i in (0, 12_345, n - 1):
            np.testing.assert_array_equal(idx.get(i), x[i], err_msg=name)
    for idx in variants.values():
        idx.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 300),
    dims=st.integers(1, 24),
    metric=st.sampled_from(["euclidean", "cosine", "inner_product"]),
    precision=st.sampled_from(["full", "half"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_memory_and_file_builds_and_saves_agree_exactly(
    tmp_path_factory, n, dims, metric, precision, seed
):
    tmp = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dims)).astype(np.float32)
    if metric == "cosine":
        x[np.linalg.norm(x, axis=1) == 0] = 1.0
    q = rng.standard_normal((3, dims)).astype(np.float32)
    ef = max(n, 10)
    results = {}
    for name, path, placement in [
        ("file", tmp / "f.chassis", "balanced"),
        ("balanced", None, "balanced"),
        ("local", None, "local"),
    ]:
        opts = chassis.IndexOptions(
            metric=metric,
            precision=precision,
            placement=placement,
            max_connections=4,
            ef_construction=16,
        )
        idx = chassis.VectorIndex(path, dims, opts)
        idx.add_batch(x)
        results[name] = idx.search_batch(q, 5, ef=ef)
        if path is None:
            saved = tmp / f"{name}.chassis"
            idx.save(saved)
            results[name + " saved"] = chassis.IndexReader(saved).search_batch(q, 5, ef=ef)
            results[name + " loaded"] = chassis.VectorIndex.load(saved).search_batch(q, 5, ef=ef)
        idx.close()
    ref_ids, ref_d = results["file"]
    for name, (ids, d) in results.items():
        np.testing.assert_array_equal(ids, ref_ids, err_msg=name)
        np.testing.assert_array_equal(d, ref_d, err_msg=name)
    stored = (
        x.astype(np.float16).astype(np.float32) if precision == "half" and metric != "cosine" else x
    )
    if metric != "cosine":
        for i in range(len(q)):
            assert_exact_knn(
                ref_ids[i][: min(5, n)],
                ref_d[i][: min(5, n)],
                stored,
                np.arange(n),
                q[i : i + 1],
                5,
                metric,
                precision=precision,
            )


# --------------------------------------------------------------------------- huge pages
@pytest.mark.skipif(
    not thp_available(),
    reason="transparent huge pages are not available (not Linux, or THP is [never])",
)
@pytest.mark.slow
def test_a_one_gigabyte_in_memory_store_is_on_huge_pages():
    # 250,000 x 1024 float32 = 1.02 GB of vectors; a sparse graph keeps the build short.
    n, d = 250_000, 1024
    x = np.random.default_rng(3).random((n, d), dtype=np.float32)
    idx = chassis.VectorIndex(None, d, chassis.IndexOptions(max_connections=4, ef_construction=8))
    idx.add_batch(x)
    del x
    s = idx.memory_stats()
    assert s["backing"] == "memory" and s["huge_pages_asked"] and not s["huge_pages_refused"]
    assert s["resident_bytes"] >= 1_000_000_000
    share = s["huge_bytes"] / s["resident_bytes"]
    assert share > 0.90, f"only {share:.1%} of the store is on huge pages: {s}"
    assert s["vector_huge_bytes"] / s["vector_bytes"] > 0.90
    idx.close()


@pytest.mark.slow
@pytest.mark.skipif(not thp_available(), reason="transparent huge pages are not available")
def test_small_pages_when_asked_for_none():
    idx = chassis.VectorIndex(None, 256, chassis.IndexOptions(huge_pages=False))
    idx.add_batch(np.random.default_rng(1).random((8000, 256), dtype=np.float32))
    s = idx.memory_stats()
    assert not s["huge_pages_asked"] and s["huge_bytes"] == 0, s
    assert s["resident_bytes"] >= 8000 * 1024


@pytest.mark.slow
@pytest.mark.skipif(not thp_available(), reason="transparent huge pages are not available")
def test_stores_made_after_keep_small_pages_do_not_ask_and_use_huge_pages_asks_again():
    x = np.random.default_rng(2).random((8000, 256), dtype=np.float32)
    idx = chassis.VectorIndex(None, 256)
    idx.keep_small_pages()
    idx.add_batch(x)
    s = idx.memory_stats()
    assert not s["huge_pages_asked"] and s["huge_bytes"] == 0, s
    idx.use_huge_pages()
    idx.add_batch(x)  # fills the stores made before, whose request is renewed, and new ones
    s = idx.memory_stats()
    assert s["huge_pages_asked"] and s["huge_bytes"] > 0, s


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="prctl(PR_SET_THP_DISABLE) is Linux's"
)
@pytest.mark.slow
def test_a_process_that_opted_out_of_huge_pages_is_warned_exactly_once():
    proc = run_python(
        """
        import ctypes, io, json, logging, warnings
        import numpy as np
        assert ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0) == 0  # PR_SET_THP_DISABLE
        log = io.StringIO()
        logging.basicConfig(stream=log, level=logging.WARNING)
        import chassis
        x = np.random.default_rng(0).random((6000, 256), dtype=np.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = chassis.VectorIndex(None, 256)
            a.add_batch(x)                   # stores of several MiB: huge pages asked
            b = chassis.VectorIndex(None, 256)
            b.add_batch(x)
            b.add(x[0])
            s = a.memory_stats()
            assert a.search(x[1], 1)[0].id == 1
        print(json.dumps({
            "warnings": [(w.category.__name__, str(w.message)) for w in caught],
            "log": log.getvalue(), "huge": s["huge_bytes"], "refused": s["huge_pages_refused"],
        }))
        """
    )
    assert_child_ok(proc)
    got = json.loads(proc.stdout)
    assert len(got["warnings"]) == 1, got["warnings"]
    category, message = got["warnings"][0]
    assert category == "RuntimeWarning" and "PR_SET_THP_DISABLE" in message
    lines = got["log"].splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("WARNING:chassis:")
        and "PR_SET_THP_DISABLE" in lines[0]
    ), lines
    assert got["refused"] and got["huge"] == 0


@pytest.mark.slow
def test_no_warning_where_huge_pages_are_granted():
    if not thp_available():
        pytest.skip("transparent huge pages are not available")
    proc = run_python(
        """
        import warnings, numpy as np, chassis
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            a = chassis.VectorIndex(None, 256)
            a.add_batch(np.random.default_rng(0).random((6000, 256), dtype=np.float32))
            assert a.memory_stats()["huge_bytes"] > 0
        """
    )
    assert_child_ok(proc)


def test_index_reader_has_no_load(tmp_path):
    with pytest.raises(TypeError, match="VectorIndex.load"):
        chassis.IndexReader.load(tmp_path / "x.chassis")
