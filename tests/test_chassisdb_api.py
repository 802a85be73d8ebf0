"""chassisdb 0.10.0's documented API, run unchanged on chassis (and on chassisdb where installed).

Written against the predecessor's documentation, not against chassis: every test takes the
module as a fixture, `chassis` always, `chassisdb` when it is installed
(``pip install chassisdb==0.10.0``; `.ci/run` installs it), so a behaviour the two disagree on
fails on one of them. The one documented difference (chassis keeps at most 256 links per node,
chassisdb took up to 32,767) is asserted as such. Oracles: brute-force k-NN in NumPy, a reopened
file, the exception classes' built-in bases.
"""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np
import pytest

D = 12
NO_ID = 2**64 - 1

MODULES = ["chassis", "chassisdb"]


@pytest.fixture(params=MODULES)
def db(request):
    if importlib.util.find_spec(request.param) is None:
        pytest.skip("chassisdb 0.10.0 is not installed (pip install chassisdb==0.10.0)")
    return importlib.import_module(request.param)


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32)


def nearest(data: np.ndarray, ids: list[int], q: np.ndarray, k: int) -> list[int]:
    d = ((data.astype(np.float64) - q) ** 2).sum(1)
    return [ids[i] for i in np.argsort(d, kind="stable")[:k]]


def test_options_are_checked_by_validate_and_on_use_not_on_construction(db, tmp_path):
    options = db.IndexOptions(max_connections=100000)  # constructs, as a dataclass does
    assert options.max_connections == 100000
    with pytest.raises(db.InvalidArgumentError) as e:
        options.validate()
    assert isinstance(e.value, ValueError) and "help:" in str(e.value)
    with pytest.raises(db.InvalidArgumentError):
        db.VectorIndex(str(tmp_path / "a.chassis"), D, options)
    assert not (tmp_path / "a.chassis").exists()
    aliased = db.IndexOptions(metric="L2", precision="float16")
    aliased.validate()
    assert (aliased.metric, aliased.precision) == ("euclidean", "half")
    defaults = db.IndexOptions()
    assert (defaults.max_connections, defaults.ef_construction, defaults.ef_search) == (16, 200, 50)
    assert (defaults.metric, defaults.precision, defaults.huge_pages, defaults.warm) == (
        "euclidean",
        "full",
        None,
        False,
    )
    with pytest.raises(TypeError):
        db.IndexOptions(max_conections=8)


def test_the_documented_range_of_max_connections(db):
    wide = db.IndexOptions(max_connections=1000)
    if db.__name__ == "chassisdb":
        wide.validate()  # up to 32,767 there
    else:  # chassis: at most 256, and the error says why
        with pytest.raises(db.InvalidArgumentError, match="at most 256 links per node"):
            wide.validate()
    db.IndexOptions(max_connections=256).validate()


def test_adds_searches_deletes_and_ids(db, tmp_path):
    data = rows(300, 1)
    index = db.VectorIndex(str(tmp_path / "i.chassis"), D)
    assert index.is_empty() and len(index) == 0
    assert index.add(data[0]) == 0
    assert index.add(data[1], id=10) == 10
    assert index.add(data[2]) == 11  # the largest id + 1
    with pytest.raises(db.IdInUseError) as e:
        index.add(data[3], id=10)
    assert isinstance(e.value, ValueError)
    ids = index.add_batch(data[3:])
    assert isinstance(ids, np.ndarray) and ids.dtype == np.uint64
    assert list(ids) == list(range(12, 12 + 297))
    all_ids = [0, 10, 11, *range(12, 309)]
    assert list(index.ids()) == all_ids and len(index) == 300
    q = rows(1, 2)[0]
    hits = index.search(q, k=5)
    assert [h.id for h in hits] == nearest(data, all_ids, q, 5)
    assert all(a.distance <= b.distance for a, b in zip(hits, hits[1:]))
    assert index.delete(hits[0].id) is True
    assert index.delete(hits[0].id) is False
    assert hits[0].id not in index and index.get(hits[0].id) is None
    assert index.deleted_count() == 1
    assert hits[0].id not in [h.id for h in index.search(q, k=5)]
    np.testing.assert_array_equal(index.get(0), data[0])
    allowed = index.search(q, k=3, allowed=[0, 10, 11, 12])
    assert {h.id for h in allowed} <= {0, 10, 11, 12} and len(allowed) == 3
    assert 0 not in [h.id for h in index.search(q, k=5, excluded=[0])]
    got, dist = index.search_batch(np.stack([q, q]), k=5)
    assert got.shape == dist.shape == (2, 5)
    index.close()


def test_search_batch_pads_missing_results(db, tmp_path):
    index = db.VectorIndex(str(tmp_path / "i.chassis"), D)
    index.add_batch(rows(3, 3))
    ids, dist = index.search_batch(rows(2, 4), k=5)
    assert (ids[:, 3:] == NO_ID).all() and np.isinf(dist[:, 3:]).all()
    assert (ids[:, :3] != NO_ID).all()
    index.close()


def test_the_context_manager_flushes_on_success_only(db, tmp_path):
    path = str(tmp_path / "i.chassis")
    data = rows(40, 5)
    with db.VectorIndex(path, D) as index:
        index.add_batch(data[:20])
    with pytest.raises(RuntimeError), db.VectorIndex(path, D) as index:
        index.add_batch(data[20:])
        raise RuntimeError("leaves without flushing")
    with db.VectorIndex(path, D, read_only=True) as reader:
        assert len(reader) == 20


def test_rollback_and_user_version(db, tmp_path):
    path = str(tmp_path / "i.chassis")
    index = db.VectorIndex(path, D)
    index.add_batch(rows(10, 6))
    index.user_version = 7
    index.flush()
    index.add_batch(rows(5, 7))
    index.user_version = 8
    index.rollback()
    assert len(index) == 10 and index.user_version == 7
    index.close()
    with db.VectorIndex(path, D, read_only=True) as reader:
        assert reader.user_version == 7 and len(reader) == 10


def test_reopening_checks_options_and_dimensions(db, tmp_path):
    path = str(tmp_path / "i.chassis")
    with db.VectorIndex(path, D, db.IndexOptions(metric="cosine")) as index:
        index.add_batch(rows(5, 8))
        assert (index.dimensions, index.metric, index.precision) == (D, "cosine", "full")
    with pytest.raises(db.OptionsMismatchError):
        db.VectorIndex(path, D, db.IndexOptions(metric="euclidean"))
    with pytest.raises(db.DimensionMismatchError):
        db.VectorIndex(path, D + 1)


def test_read_only_readers(db, tmp_path):
    path = str(tmp_path / "i.chassis")
    with pytest.raises(db.IndexNotFoundError) as e:
        db.VectorIndex(path, D, read_only=True)
    assert isinstance(e.value, FileNotFoundError)
    writer = db.VectorIndex(path, D)
    writer.add_batch(rows(8, 9))
    writer.flush()
    reader = db.VectorIndex(path, D, read_only=True)
    assert len(reader) == 8
    with pytest.raises(db.ReadOnlyError):
        reader.add(rows(1, 10)[0])
    writer.add_batch(rows(4, 11))
    writer.flush()
    assert len(reader) == 12  # sees the writer's newest flush
    reader.close()
    writer.close()


def test_check_backup_and_compact(db, tmp_path):
    path, copy = str(tmp_path / "i.chassis"), str(tmp_path / "copy.chassis")
    data = rows(200, 12)
    index = db.VectorIndex(path, D)
    index.add_batch(data)
    for i in range(0, 200, 3):
        index.delete(i)
    index.flush()
    report = index.check()
    assert report.ok and not report.unreachable and not report.not_finite
    index.backup(copy)
    index.compact()
    live = [i for i in range(200) if i % 3]
    assert list(index.ids()) == live
    q = rows(1, 13)[0]
    assert [h.id for h in index.search(q, k=5)] == nearest(data[live], live, q, 5)
    index.close()
    with db.VectorIndex(copy, D, read_only=True) as backup:
        assert list(backup.ids()) == live


def test_every_error_is_a_chassis_error_and_its_builtin(db):
    builtins = {
        "InvalidArgumentError": ValueError,
        "DimensionMismatchError": ValueError,
        "OptionsMismatchError": ValueError,
        "IndexNotFoundError": FileNotFoundError,
        "NotAnIndexError": ValueError,
        "IdInUseError": ValueError,
        "InvalidPathError": OSError,
    }
    for name in (
        *builtins,
        "IndexLockedError",
        "ReadOnlyError",
        "CorruptIndexError",
        "IndexFullError",
    ):
        cls = getattr(db, name)
        assert issubclass(cls, db.ChassisError), name
        if name in builtins:
            assert issubclass(cls, builtins[name]), name
