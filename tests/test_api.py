"""The Python API contract of chassis.VectorIndex, IndexOptions, SearchResult and the errors.

Checks: ids / get / `in` / len / is_empty; default and explicit ids and their bounds; IdInUseError;
properties (dimensions, metric, precision, path, options, read_only, closed, pending); options
validation, replace() and equality; SearchResult behaviour; context-manager and close() semantics
(flush on normal exit, discard on exception / close / garbage collection, use after close); the
in-process writer lock; read_only basics; the exception hierarchy and the "help:" line of
messages; and that every failing add_batch is all or nothing. What input is taken and refused:
test_api_inputs.py.
"""

from __future__ import annotations

import copy
import errno
import gc
import io
import os
import pathlib
import pickle
from pathlib import Path

import chassis
import numpy as np
import pytest
from chassis import (
    ArgumentTypeError,
    ChassisError,
    DimensionMismatchError,
    IdInUseError,
    IndexClosedError,
    IndexLockedError,
    IndexNotFoundError,
    IndexOptions,
    InvalidArgumentError,
    InvalidPathError,
    OptionsMismatchError,
    ReadOnlyError,
    SearchResult,
    VectorIndex,
)
from conftest import MAX_ID, NO_ID, assert_has_help, vecs

D = 8


def search_state(index: VectorIndex, queries: np.ndarray, k: int = 5) -> list:
    ef = max(len(index), k)
    return [[(h.id, h.distance) for h in index.search(q, k, ef=ef)] for q in queries]


# =========================================================================== errors
ERROR_BASES = {
    chassis.InvalidArgumentError: ValueError,
    chassis.DimensionMismatchError: ValueError,
    chassis.OptionsMismatchError: ValueError,
    chassis.NotAnIndexError: ValueError,
    chassis.IdInUseError: ValueError,
    chassis.IndexClosedError: ValueError,
    chassis.IndexNotFoundError: FileNotFoundError,
    chassis.IndexLockedError: OSError,
    chassis.CorruptIndexError: OSError,
    chassis.InvalidPathError: OSError,
    chassis.IndexFullError: OSError,
    chassis.IdNotFoundError: KeyError,
    chassis.ReadOnlyError: io.UnsupportedOperation,
}


@pytest.mark.parametrize(
    "cls,builtin", list(ERROR_BASES.items()), ids=lambda c: getattr(c, "__name__", str(c))
)
def test_error_classes_derive_from_chassis_error_and_their_builtin(cls, builtin):
    assert issubclass(cls, ChassisError)
    assert issubclass(cls, builtin)
    assert issubclass(ChassisError, Exception)
    assert getattr(chassis, cls.__name__) is cls


def test_read_only_error_is_an_os_error_too():
    # io.UnsupportedOperation is both OSError and ValueError
    assert issubclass(ReadOnlyError, OSError) and issubclass(ReadOnlyError, ValueError)


def test_version_and_cpu_info():
    assert isinstance(chassis.__version__, str) and chassis.__version__
    info = chassis.cpu_info()
    assert isinstance(info, dict)


# =========================================================================== ids, get, len
def test_new_index_is_empty(index_path):
    with VectorIndex(index_path, D) as index:
        assert len(index) == 0
        assert index.is_empty()
        ids = index.ids()
        assert isinstance(ids, np.ndarray) and ids.dtype == np.uint64 and ids.shape == (0,)
        assert index.get(0) is None
        assert 0 not in index


def test_default_ids_are_max_plus_one(index_path):
    v = vecs(10)
    with VectorIndex(index_path, D) as index:
        assert index.add(v[0]) == 0
        assert index.add(v[1]) == 1
        assert index.add(v[2], id=10) == 10
        assert index.add(v[3]) == 11
        assert index.add(v[4], id=5) == 5
        assert index.add(v[5]) == 12  # max id so far + 1, not "last + 1"
        got = index.add_batch(v[6:9])
        assert isinstance(got, np.ndarray) and got.dtype == np.uint64
        np.testing.assert_array_equal(got, [13, 14, 15])
        r = index.add(v[9])
        assert r == 16 and type(r) is int
        np.testing.assert_array_equal(index.ids(), [0, 1, 10, 11, 5, 12, 13, 14, 15, 16])
        assert len(index) == 10 and not index.is_empty()


def test_first_default_id_is_zero_for_a_batch(index_path):
    with VectorIndex(index_path, D) as index:
        np.testing.assert_array_equal(index.add_batch(vecs(4)), [0, 1, 2, 3])


def test_explicit_ids_in_batch_keep_insertion_order(index_path):
    v = vecs(6)
    with VectorIndex(index_path, D) as index:
        got = index.add_batch(v[:3], ids=[30, 7, 19])
        np.testing.assert_array_equal(got, [30, 7, 19])
        assert got.dtype == np.uint64
        got = index.add_batch(v[3:], ids=np.array([2, 100, 1], dtype=np.int64))
        np.testing.assert_array_equal(got, [2, 100, 1])
        np.testing.assert_array_equal(index.ids(), [30, 7, 19, 2, 100, 1])
        for i, id_ in enumerate([30, 7, 19, 2, 100, 1]):
            np.testing.assert_array_equal(index.get(id_), v[i])
            assert id_ in index
        assert index.add(v[0]) == 101


def test_get_returns_a_float32_copy_of_the_stored_vector(index_path):
    v = vecs(3)
    with VectorIndex(index_path, D) as index:
        index.add_batch(v)
        got = index.get(1)
        assert isinstance(got, np.ndarray)
        assert got.dtype == np.float32 and got.shape == (D,)
        assert got.tobytes() == v[1].tobytes()
        assert index.get(3) is None
        assert index.get(MAX_ID) is None


def test_get_result_is_independent_of_the_index(index_path):
    """Arrays from get() stay valid after growth and close, and writing to them changes nothing."""
    v = vecs(1)
    index = VectorIndex(index_path, D)
    index.add(v[0])
    got = index.get(0)
    if got.flags.writeable:
        got[:] = 123.0
    np.testing.assert_array_equal(index.get(0), v[0])
    kept = index.get(0)
    index.add_batch(vecs(5000, seed=1))  # grows the storage (remapping, if any)
    index.close()
    gc.collect()
    np.testing.assert_array_equal(kept, v[0])
    assert float(kept.sum()) == pytest.approx(float(v[0].sum()))


def test_input_array_is_copied_not_referenced(index_path):
    v = vecs(4)
    original = v.copy()
    with VectorIndex(index_path, D) as index:
        index.add_batch(v)
        one = original[0].copy()
        index.add(one, id=99)
        v[:] = 0.0
        one[:] = 0.0
        for i in range(4):
            np.testing.assert_array_equal(index.get(i), original[i])
        np.testing.assert_array_equal(index.get(99), original[0])


def test_contains(index_path):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0], id=42)
        assert 42 in index
        assert 41 not in index
        assert 43 not in index
        assert -1 not in index
        assert NO_ID not in index
        assert np.uint64(42) in index
        # What is not an id is not in it (an answer, no error).
        for other in ("42", 42.5, None, b"42", [42], True):
            assert other not in index, other
    with pytest.raises(IndexClosedError):
        42 in index  # noqa: B015 (the check is the raise)


def test_numpy_integer_ids_are_accepted(index_path):
    with VectorIndex(index_path, D) as index:
        assert index.add(vecs(1)[0], id=np.uint64(7)) == 7
        assert index.add(vecs(1)[0], id=np.int64(8)) == 8
        assert index.get(np.int32(7)) is not None


# =========================================================================== id bounds
def test_largest_id_is_accepted(index_path):
    with VectorIndex(index_path, D) as index:
        assert index.add(vecs(1)[0], id=MAX_ID) == MAX_ID
        assert MAX_ID in index
        np.testing.assert_array_equal(index.ids(), np.array([MAX_ID], dtype=np.uint64))
        got = index.add_batch(vecs(2), ids=[2**63, MAX_ID - 1])
        np.testing.assert_array_equal(got, np.array([2**63, MAX_ID - 1], dtype=np.uint64))


@pytest.mark.parametrize("bad", [-1, -(2**63), NO_ID, 2**64, 2**70])
def test_out_of_range_id_is_invalid_argument_not_overflow(index_path, bad):
    with VectorIndex(index_path, D) as index:
        with pytest.raises(InvalidArgumentError) as e:
            index.add(vecs(1)[0], id=bad)
        assert isinstance(e.value, ValueError) and isinstance(e.value, ChassisError)
        assert len(index) == 0
        assert index.add(vecs(1)[0]) == 0  # the failure consumed no id


@pytest.mark.parametrize("bad", [[0, -1], [NO_ID], [5, 2**64]])
def test_out_of_range_batch_id_is_invalid_argument(index_path, bad):
    with VectorIndex(index_path, D) as index:
        with pytest.raises(InvalidArgumentError):
            index.add_batch(vecs(len(bad)), ids=bad)
        assert len(index) == 0


def test_batch_of_negative_int64_ids_is_invalid_argument(index_path):
    with VectorIndex(index_path, D) as index:
        with pytest.raises(InvalidArgumentError):
            index.add_batch(vecs(2), ids=np.array([3, -3], dtype=np.int64))
        assert len(index) == 0


def test_default_id_after_the_largest_id_is_refused(index_path):
    """After id 2**64-2 there is no default id left: adding must fail and add nothing."""
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0], id=MAX_ID)
        with pytest.raises(ChassisError):
            index.add(vecs(1, seed=1)[0])
        with pytest.raises(ChassisError):
            index.add_batch(vecs(2, seed=2))
        assert len(index) == 1
        np.testing.assert_array_equal(index.ids(), np.array([MAX_ID], dtype=np.uint64))
        assert index.add(vecs(1)[0], id=0) == 0  # explicit ids still work


def test_batch_whose_default_ids_would_pass_the_largest_id_is_refused(index_path):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0], id=MAX_ID - 2)
        with pytest.raises(ChassisError):
            index.add_batch(vecs(3))  # would need MAX_ID - 1, MAX_ID and the reserved 2**64-1
        assert len(index) == 1
        np.testing.assert_array_equal(
            index.add_batch(vecs(2)), np.array([MAX_ID - 1, MAX_ID], dtype=np.uint64)
        )


def test_id_in_use(index_path):
    v = vecs(3)
    with VectorIndex(index_path, D) as index:
        index.add(v[0], id=5)
        with pytest.raises(IdInUseError) as e:
            index.add(v[1], id=5)
        assert isinstance(e.value, ValueError)
        assert "5" in str(e.value).splitlines()[0]
        assert_has_help(e.value)
        assert len(index) == 1
        np.testing.assert_array_equal(index.get(5), v[0])  # the first vector is kept
        index.flush()
        with pytest.raises(IdInUseError):
            index.add(v[2], id=5)  # also after a flush


# =========================================================================== all or nothing
def _batch_case(name: str):
    """(options, make_bad_batch(existing_max_id) -> (vectors, ids), error type)."""
    good = vecs(40, seed=5)

    def nan_last():
        b = good.copy()
        b[-1, 3] = np.nan
        return b, None

    def inf_middle():
        b = good.copy()
        b[20, 0] = np.inf
        return b, None

    def neg_inf_first():
        b = good.copy()
        b[0, 7] = -np.inf
        return b, None

    def id_in_use():
        return good, list(range(1000, 1039)) + [3]

    def id_duplicated_in_batch():
        return good, list(range(1000, 1039)) + [1005]

    def invalid_id_last():
        return good, list(range(1000, 1039)) + [NO_ID]

    def ids_length_mismatch():
        return good, list(range(1000, 1030))

    def wrong_dims():
        return vecs(40, D + 1), None

    def half_out_of_range():
        b = good.copy()
        b[39, 1] = 1e5
        return b, None

    def cosine_zero_row():
        b = good.copy()
        b[17] = 0.0
        return b, None

    cases = {
        "nan_in_last_row": (IndexOptions(), nan_last, InvalidArgumentError),
        "inf_in_middle_row": (IndexOptions(), inf_middle, InvalidArgumentError),
        "neg_inf_in_first_row": (IndexOptions(), neg_inf_first, InvalidArgumentError),
        "id_in_use": (IndexOptions(), id_in_use, IdInUseError),
        "id_duplicated_within_batch": (
            IndexOptions(),
            id_duplicated_in_batch,
            (IdInUseError, InvalidArgumentError),
        ),
        "invalid_id": (IndexOptions(), invalid_id_last, InvalidArgumentError),
        "ids_length_mismatch": (
            IndexOptions(),
            ids_length_mismatch,
            (InvalidArgumentError, DimensionMismatchError),
        ),
        "wrong_dimensions": (IndexOptions(), wrong_dims, DimensionMismatchError),
        "half_value_out_of_range": (
            IndexOptions(precision="half"),
            half_out_of_range,
            InvalidArgumentError,
        ),
        "cosine_zero_vector": (
            IndexOptions(metric="cosine"),
            cosine_zero_row,
            InvalidArgumentError,
        ),
    }
    return cases[name]


BATCH_CASES = [
    "nan_in_last_row",
    "inf_in_middle_row",
    "neg_inf_in_first_row",
    "id_in_use",
    "id_duplicated_within_batch",
    "invalid_id",
    "ids_length_mismatch",
    "wrong_dimensions",
    "half_value_out_of_range",
    "cosine_zero_vector",
]


@pytest.mark.parametrize("case", BATCH_CASES)
def test_failing_add_batch_adds_nothing(index_path, case):
    opts, make_bad, error = _batch_case(case)
    before = vecs(30, seed=9)
    queries = vecs(4, seed=10)
    with VectorIndex(index_path, D, opts) as index:
        index.add_batch(before[:20])
        index.flush()
        index.add_batch(before[20:])  # 10 pending
        ids_before = index.ids().copy()
        state_before = search_state(index, queries)
        pending_before = index.pending
        assert pending_before == 10

        bad, ids = make_bad()
        with pytest.raises(error):
            index.add_batch(bad, ids)

        assert len(index) == 30
        np.testing.assert_array_equal(index.ids(), ids_before)
        assert index.pending == pending_before
        assert search_state(index, queries) == state_before
        for new_id in (30, 31, 1000, 1005, 1038):
            assert new_id not in index
        # nothing was reserved: the next default id is still max + 1
        assert index.add(before[0]) == 30

    # and the failed batch left nothing in the file either
    with VectorIndex(index_path, D, opts) as index:
        assert len(index) == 31
        assert 1000 not in index


def test_failing_add_leaves_index_unchanged(index_path):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
        for bad in (
            np.full(D, np.nan, np.float32),
            np.full(D, np.inf, np.float32),
            vecs(1, D + 1)[0],
        ):
            with pytest.raises(ChassisError):
                index.add(bad)
        assert len(index) == 1 and index.pending == 1
        assert index.add(vecs(1)[0]) == 1


# =========================================================================== properties
def test_properties(index_path):
    opts = IndexOptions(
        max_connections=12, ef_construction=77, ef_search=33, metric="cosine", precision="half"
    )
    index = VectorIndex(Path(index_path), 5, opts)
    try:
        assert index.dimensions == 5
        assert index.metric == "cosine"
        assert index.precision == "half"
        assert isinstance(index.path, pathlib.Path)  # as chassisdb: a pathlib.Path
        assert os.path.samefile(index.path, index_path)
        assert isinstance(index.options, IndexOptions)
        assert index.options.max_connections == 12
        assert index.options.ef_construction == 77
        assert index.options.ef_search == 33
        assert index.options.metric == "cosine"
        assert index.options.precision == "half"
        assert index.read_only is False
        assert index.closed is False
        assert "VectorIndex" in repr(index)
    finally:
        index.close()
    assert index.closed is True
    repr(index)  # must not raise on a closed index


def test_default_options_properties(index_path):
    with VectorIndex(index_path, 3) as index:
        assert index.metric == "euclidean"
        assert index.precision == "full"
        assert index.options.max_connections == 16


def test_pending_counts_unflushed_adds(index_path):
    with VectorIndex(index_path, D) as index:
        assert index.pending == 0
        index.add(vecs(1)[0])
        assert index.pending == 1
        index.add_batch(vecs(5))
        assert index.pending == 6
        index.flush()
        assert index.pending == 0
        index.flush()  # nothing to flush: fine
        assert index.pending == 0
        index.add(vecs(1)[0])
        assert index.pending == 1


# =========================================================================== options
def test_index_options_defaults():
    o = IndexOptions()
    assert o.max_connections == 16
    assert o.ef_construction == 200
    assert o.ef_search == 50
    assert o.metric == "euclidean"
    assert o.precision == "full"
    assert o.huge_pages is None
    assert o.warm is False


def test_index_options_accepts_every_documented_value():
    for metric in ("euclidean", "cosine", "inner_product"):
        for precision in ("full", "half"):
            o = IndexOptions(metric=metric, precision=precision)
            assert (o.metric, o.precision) == (metric, precision)
    for hp in (True, False, None):
        assert IndexOptions(huge_pages=hp).huge_pages is hp
    assert IndexOptions(warm=True).warm is True
    o = IndexOptions(max_connections=2, ef_construction=1, ef_search=1)
    assert (o.max_connections, o.ef_construction, o.ef_search) == (2, 1, 1)


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(InvalidArgumentError) as e:
        IndexOptions(max_conections=8)
    msg = str(e.value)
    assert "max_conections" in msg
    for valid in ("max_connections", "ef_construction", "ef_search", "metric", "precision"):
        assert valid in msg, f"{valid!r} not named in {msg!r}"
    assert_has_help(e.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_connections": 0},
        {"max_connections": 1},
        {"max_connections": -1},
        {"ef_construction": 0},
        {"ef_construction": -5},
        {"ef_search": 0},
        {"ef_search": -1},
        {"metric": "manhattan"},
        {"metric": ""},
        {"precision": "double"},
        {"precision": "quarter"},
        # Past any int the core reads: refused as out of range, not an OverflowError.
        {"ef_search": 2**70},
        {"max_connections": 2**64},
    ],
    ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()),
)
def test_invalid_option_values_are_refused_by_validate_and_on_use(kwargs, tmp_path):
    # As chassisdb: construction keeps the value; validate() and opening an index refuse it,
    # and no file is made.
    options = IndexOptions(**kwargs)
    assert getattr(options, next(iter(kwargs))) == next(iter(kwargs.values()))
    path = tmp_path / "index.chassis"
    for check in (
        options.validate,
        lambda: VectorIndex(path, 4, options),
        lambda: VectorIndex(path, 4, kwargs),
    ):
        with pytest.raises(InvalidArgumentError) as e:
            check()
        assert isinstance(e.value, ValueError)
    assert not path.exists()


def test_integer_options_take_numpy_integers_and_refuse_bools():
    o = IndexOptions(max_connections=np.int64(8), ef_search=np.uint16(60))
    assert (o.max_connections, o.ef_search) == (8, 60)
    assert type(o.max_connections) is int  # made a Python int once, on purpose
    with VectorIndex(None, 4, o) as index:
        assert (index.options.max_connections, index.options.ef_search) == (8, 60)
    with pytest.raises(ArgumentTypeError):
        IndexOptions(ef_search=True).validate()


def test_invalid_metric_message_names_the_value():
    with pytest.raises(InvalidArgumentError) as e:
        IndexOptions(metric="manhattan").validate()
    assert "manhattan" in str(e.value)
    assert_has_help(e.value)


def test_replace_returns_a_modified_copy():
    o = IndexOptions(max_connections=8, metric="cosine")
    r = o.replace(ef_search=99, precision="half")
    assert isinstance(r, IndexOptions)
    assert r is not o
    assert (r.max_connections, r.metric, r.ef_search, r.precision) == (8, "cosine", 99, "half")
    assert (o.ef_search, o.precision) == (50, "full")  # the original is unchanged
    assert o.replace() == o


def test_replace_validates():
    o = IndexOptions()
    with pytest.raises(InvalidArgumentError):
        o.replace(max_connections=1)
    with pytest.raises(InvalidArgumentError):
        o.replace(metric="manhattan")
    with pytest.raises(InvalidArgumentError):
        o.replace(no_such_option=1)


def test_options_equality_by_value():
    assert IndexOptions() == IndexOptions()
    assert IndexOptions(metric="cosine", ef_search=10) == IndexOptions(
        ef_search=10, metric="cosine"
    )
    assert IndexOptions() != IndexOptions(ef_search=51)
    assert IndexOptions() != IndexOptions(warm=True)
    assert IndexOptions() != IndexOptions(huge_pages=False)
    assert (IndexOptions() == "euclidean") is False
    assert IndexOptions() != object()
    assert "IndexOptions" in repr(IndexOptions())
    assert "cosine" in repr(IndexOptions(metric="cosine"))


# =========================================================================== SearchResult
def test_search_result_behaviour():
    r = SearchResult(3, 0.5)
    assert r.id == 3 and r.distance == 0.5
    i, d = r
    assert (i, d) == (3, 0.5)
    assert list(r) == [3, 0.5]
    assert tuple(r) == (3, 0.5)
    assert len(r) == 2
    assert r[0] == 3 and r[1] == 0.5
    with pytest.raises(IndexError):
        r[2]
    assert r == SearchResult(3, 0.5)
    assert r != SearchResult(4, 0.5)
    assert r != SearchResult(3, 0.25)
    assert hash(r) == hash(SearchResult(3, 0.5))
    assert len({r, SearchResult(3, 0.5), SearchResult(4, 1.0)}) == 2
    # Equal to its tuple, so hashed as it (Python's rule for objects that compare equal).
    assert hash(r) == hash((3, 0.5)) and (3, 0.5) in {r} and r in {(3, 0.5)}
    assert "3" in repr(r) and "0.5" in repr(r)
    big = SearchResult(MAX_ID, 1.0)
    assert big.id == MAX_ID


# =========================================================================== creation / reopen
def test_reopen_with_dimensions_none(index_path):
    v = vecs(3)
    with VectorIndex(index_path, D) as index:
        index.add_batch(v)
    with VectorIndex(index_path) as index:
        assert index.dimensions == D
        assert len(index) == 3
        np.testing.assert_array_equal(index.get(2), v[2])


def test_reopen_with_same_dimensions_and_options(index_path):
    opts = IndexOptions(max_connections=10, metric="inner_product", precision="half")
    with VectorIndex(index_path, D, opts) as index:
        index.add_batch(vecs(3))
    with VectorIndex(index_path, D, opts) as index:
        assert len(index) == 3
        assert (index.metric, index.precision) == ("inner_product", "half")
        assert index.options.max_connections == 10


def test_missing_file_with_dimensions_none_is_index_not_found(index_path):
    with pytest.raises(IndexNotFoundError) as e:
        VectorIndex(index_path)
    assert isinstance(e.value, FileNotFoundError)
    assert e.value.errno == errno.ENOENT  # as open() would say; the message stays ours
    assert str(e.value).startswith("no index at ")
    assert e.value.filename == index_path  # as open() would say
    assert_has_help(e.value)
    assert not os.path.exists(index_path)
    # A pickled error (Ray sends them so) or a copy keeps its class, message, errno and file.
    for again in (pickle.loads(pickle.dumps(e.value)), copy.copy(e.value)):
        assert type(again) is IndexNotFoundError
        assert (str(again), again.errno, again.filename) == (str(e.value), errno.ENOENT, index_path)


@pytest.mark.parametrize(
    "change",
    [
        {"metric": "cosine"},
        {"metric": "inner_product"},
        {"precision": "half"},
        {"max_connections": 32},
    ],
    ids=lambda c: next(iter(c.items()))[0] + "=" + str(next(iter(c.values()))),
)
def test_reopen_with_other_fixed_option_is_options_mismatch(index_path, change):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
    with pytest.raises(OptionsMismatchError) as e:
        VectorIndex(index_path, D, IndexOptions(**change))
    assert isinstance(e.value, ValueError)
    assert_has_help(e.value)
    # the failed open released everything: a correct open works and the data is intact
    with VectorIndex(index_path, D) as index:
        assert len(index) == 1


def test_reopen_with_other_search_settings_is_fine(index_path):
    with VectorIndex(index_path, D, IndexOptions(ef_search=20, ef_construction=50)) as index:
        index.add_batch(vecs(10))
    with VectorIndex(
        index_path, D, IndexOptions(ef_search=80, ef_construction=300, warm=True)
    ) as index:
        assert len(index) == 10
        assert len(index.search(vecs(1)[0], k=3)) == 3


def test_reopen_with_other_dimensions_is_dimension_mismatch(index_path):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
    with pytest.raises(DimensionMismatchError) as e:
        VectorIndex(index_path, D + 1)
    assert isinstance(e.value, ValueError)
    assert_has_help(e.value)
    with VectorIndex(index_path, D) as index:
        assert len(index) == 1


@pytest.mark.parametrize("dims", [0, -1])
def test_invalid_dimensions_are_refused(index_path, dims):
    with pytest.raises(InvalidArgumentError):
        VectorIndex(index_path, dims)
    assert not os.path.exists(index_path)


def test_directory_as_path_is_an_os_error(tmp_path):
    with pytest.raises(ChassisError) as e:
        VectorIndex(tmp_path, D)
    assert isinstance(e.value, OSError)
    with pytest.raises(ChassisError) as e:
        VectorIndex(tmp_path)
    assert isinstance(e.value, OSError)


def test_path_in_missing_directory_is_an_os_error(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "index.chassis"
    with pytest.raises(ChassisError) as e:
        VectorIndex(path, D)
    assert isinstance(e.value, OSError)
    assert isinstance(e.value, (InvalidPathError, IndexNotFoundError))
    assert e.value.filename == str(path)
    assert_has_help(e.value)  # the message, not "[Errno None] None: ..."
    assert not path.parent.exists()


# =========================================================================== lock (in process)
def test_second_writer_in_same_process_is_locked_out(index_path):
    first = VectorIndex(index_path, D)
    try:
        first.add(vecs(1)[0])
        first.flush()
        with pytest.raises(IndexLockedError) as e:
            VectorIndex(index_path, D)
        assert isinstance(e.value, OSError)
        assert e.value.filename == index_path
        assert str(e.value).startswith(f"{index_path} is open for writing elsewhere")
        assert_has_help(e.value)
        with pytest.raises(IndexLockedError):
            VectorIndex(index_path)
        with pytest.raises(IndexLockedError):
            VectorIndex(index_path, D)  # still locked after failed attempts
        first.add(vecs(1, seed=3)[0])  # the first writer is unaffected
        assert len(first) == 2
    finally:
        first.close()
    with VectorIndex(index_path, D) as second:
        assert len(second) == 1  # the unflushed add of the first writer was discarded


def test_lock_holds_through_another_path_spelling(index_path, tmp_path):
    first = VectorIndex(index_path, D)
    try:
        link = tmp_path / "link.chassis"
        link.symlink_to(index_path)
        with pytest.raises(IndexLockedError):
            VectorIndex(link, D)
        rel = os.path.relpath(index_path)
        with pytest.raises(IndexLockedError):
            VectorIndex(rel, D)
    finally:
        first.close()


def test_garbage_collected_writer_releases_the_lock(index_path):
    index = VectorIndex(index_path, D)
    index.add(vecs(1)[0])
    index.flush()
    index.add(vecs(1)[0])  # unflushed: discarded by garbage collection
    del index
    gc.collect()
    with VectorIndex(index_path, D) as again:
        assert len(again) == 1


# =========================================================================== context manager
def test_context_manager_returns_the_index_and_flushes_then_closes(index_path):
    v = vecs(5)
    index = VectorIndex(index_path, D)
    with index as entered:
        assert entered is index
        entered.add_batch(v)
    assert index.closed
    with VectorIndex(index_path) as again:
        assert len(again) == 5
        np.testing.assert_array_equal(again.get(4), v[4])


def test_context_manager_exit_by_exception_discards_unflushed_adds(index_path):
    v = vecs(10)
    with VectorIndex(index_path, D) as index:
        index.add_batch(v[:4])

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with VectorIndex(index_path, D) as index:
            index.add_batch(v[4:8])
            index.add(v[8])
            raise Boom()
    assert index.closed
    with VectorIndex(index_path, D) as again:  # not locked: the exit closed it
        assert len(again) == 4
        np.testing.assert_array_equal(again.ids(), [0, 1, 2, 3])
        assert 8 not in again


def test_context_manager_exit_by_chassis_error_discards_too(index_path):
    with pytest.raises(InvalidArgumentError):
        with VectorIndex(index_path, D) as index:
            index.add(vecs(1)[0])
            index.flush()
            index.add(vecs(1)[0])
            index.add(np.full(D, np.nan))
    with VectorIndex(index_path, D) as again:
        assert len(again) == 1


def test_context_manager_keeps_what_was_flushed_inside_before_an_exception(index_path):
    with pytest.raises(KeyError):
        with VectorIndex(index_path, D) as index:
            index.add_batch(vecs(3))
            index.flush()
            index.add_batch(vecs(3))
            raise KeyError("x")
    with VectorIndex(index_path, D) as again:
        assert len(again) == 3


def test_context_manager_after_explicit_close_is_fine(index_path):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
        index.flush()
        index.close()
    assert index.closed


# =========================================================================== close
def test_close_without_flush_discards_unflushed_adds(index_path):
    v = vecs(8)
    index = VectorIndex(index_path, D)
    index.add_batch(v[:5])
    index.flush()
    index.add_batch(v[5:])
    index.add(v[0], id=77)
    index.close()
    with VectorIndex(index_path, D) as again:
        assert len(again) == 5
        np.testing.assert_array_equal(again.ids(), np.arange(5))
        assert again.get(77) is None
        assert again.add(v[5]) == 5  # default id from the flushed state


def test_close_twice_is_fine(index_path):
    index = VectorIndex(index_path, D)
    index.close()
    index.close()
    assert index.closed


USE_AFTER_CLOSE = {
    "add": lambda ix: ix.add(vecs(1)[0]),
    "add_batch": lambda ix: ix.add_batch(vecs(2)),
    "search": lambda ix: ix.search(vecs(1)[0]),
    "search_batch": lambda ix: ix.search_batch(vecs(2)),
    "get": lambda ix: ix.get(0),
    "ids": lambda ix: ix.ids(),
    "flush": lambda ix: ix.flush(),
    "len": lambda ix: len(ix),
    "contains": lambda ix: 0 in ix,
    "is_empty": lambda ix: ix.is_empty(),
}


@pytest.mark.parametrize("op", list(USE_AFTER_CLOSE))
def test_use_after_close_is_index_closed_error(index_path, op):
    index = VectorIndex(index_path, D)
    index.add(vecs(1)[0])
    index.flush()
    index.close()
    with pytest.raises(IndexClosedError) as e:
        USE_AFTER_CLOSE[op](index)
    assert isinstance(e.value, ValueError)
    assert_has_help(e.value)


def test_use_after_close_of_a_reader_is_index_closed_error(index_path):
    with VectorIndex(index_path, D) as w:
        w.add(vecs(1)[0])
    reader = VectorIndex(index_path, read_only=True)
    reader.close()
    with pytest.raises(IndexClosedError):
        reader.search(vecs(1)[0])
    with pytest.raises(IndexClosedError):
        reader.get(0)


# =========================================================================== read only
def test_read_only_basics(index_path):
    v = vecs(6)
    opts = IndexOptions(metric="cosine", precision="half", max_connections=8)
    writer = VectorIndex(index_path, D, opts)
    try:
        writer.add_batch(v[:4])
        writer.flush()
        writer.add_batch(v[4:])  # not flushed: a reader opened now does not see it
        reader = VectorIndex(index_path, read_only=True)
        try:
            assert reader.read_only is True
            assert reader.metric == "cosine" and reader.precision == "half"
            assert reader.dimensions == D
            assert reader.options.max_connections == 8
            assert len(reader) == 4
            np.testing.assert_array_equal(reader.ids(), [0, 1, 2, 3])
            np.testing.assert_array_equal(reader.get(2), writer.get(2))
            q = vecs(1, seed=7)[0]
            flushed_hits = [(h.id, h.distance) for h in reader.search(q, k=4, ef=10)]
            assert sorted(i for i, _ in flushed_hits) == [0, 1, 2, 3]
            with pytest.raises(ReadOnlyError) as e:
                reader.add(v[0])
            assert isinstance(e.value, io.UnsupportedOperation)
            with pytest.raises(ReadOnlyError):
                reader.add_batch(v)
            assert len(reader) == 4
        finally:
            reader.close()
    finally:
        writer.close()


def test_read_only_missing_file_is_index_not_found(index_path):
    with pytest.raises(IndexNotFoundError):
        VectorIndex(index_path, read_only=True)
    with pytest.raises(IndexNotFoundError):
        VectorIndex(index_path, D, read_only=True)
    assert not os.path.exists(index_path)  # a reader never creates the file


def test_read_only_context_manager_exit_does_not_fail(index_path):
    with VectorIndex(index_path, D) as w:
        w.add_batch(vecs(3))
    with VectorIndex(index_path, read_only=True) as r:
        assert len(r) == 3
    assert r.closed
    with VectorIndex(index_path, D) as w:  # the reader left no lock behind
        assert len(w) == 3


def test_several_readers_and_a_writer_at_once(index_path):
    with VectorIndex(index_path, D) as w:
        w.add_batch(vecs(3))
        w.flush()
        readers = [VectorIndex(index_path, read_only=True) for _ in range(3)]
        try:
            assert [len(r) for r in readers] == [3, 3, 3]
        finally:
            for r in readers:
                r.close()
        w.add(vecs(1)[0])
    with VectorIndex(index_path) as again:
        assert len(again) == 4
