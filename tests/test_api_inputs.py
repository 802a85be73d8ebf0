"""What the Python API takes as vectors and what it refuses.

Input conversion (float64, ints, lists, Fortran order, strided and unaligned arrays give the same
result as C-contiguous float32; inputs are copied); refusal of NaN/inf, wrong shapes,
strings/objects/complex, non-positive thread counts, zero vectors for cosine, values beyond f16
range for half precision; what cosine and half precision store. The oracles are the same call on
C-contiguous float32 input, NumPy's own float16 rounding and normalisation (conftest.to_half,
normalise).
"""

from __future__ import annotations

import numpy as np
import pytest
from chassis import DimensionMismatchError, IndexOptions, InvalidArgumentError, VectorIndex
from conftest import assert_has_help, normalise, to_half, vecs

D = 8


# =========================================================================== inputs
def _layouts(a: np.ndarray) -> dict[str, object]:
    """Equivalent versions of the 2-D float32 array ``a`` in other dtypes, orders and strides."""
    n, d = a.shape
    wide = np.zeros((n, 2 * d), dtype=np.float32)
    wide[:, ::2] = a
    tall = np.zeros((2 * n, d), dtype=np.float32)
    tall[::2] = a
    raw = np.zeros(a.size * 4 + 1, dtype=np.uint8)
    raw[1:] = np.frombuffer(np.ascontiguousarray(a).tobytes(), dtype=np.uint8)
    unaligned = np.frombuffer(raw.data, dtype=np.float32, count=a.size, offset=1).reshape(n, d)
    assert not unaligned.flags.aligned
    return {
        "float32_c": np.ascontiguousarray(a),
        "float64": a.astype(np.float64),
        "float32_fortran": np.asfortranarray(a),
        "float64_fortran": np.asfortranarray(a.astype(np.float64)),
        "column_strided": wide[:, ::2],
        "row_strided": tall[::2],
        "reversed_rows": np.ascontiguousarray(a[::-1])[::-1],
        "transposed_view": np.ascontiguousarray(a.T).T,
        "unaligned": unaligned,
        "list": a.tolist(),
        "list_of_arrays": [row.copy() for row in a],
    }


LAYOUTS = list(_layouts(np.zeros((2, 3), np.float32)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_add_batch_accepts_any_layout_with_identical_results(tmp_path, layout):
    a = vecs(60, D, seed=21)
    # values exactly representable in float32, so float64 inputs convert to the same bits
    variant = _layouts(a)[layout]
    if layout == "column_strided":
        assert not variant.flags.c_contiguous
    if layout == "float32_fortran":
        assert variant.flags.f_contiguous and not variant.flags.c_contiguous
    with (
        VectorIndex(tmp_path / "ref.chassis", D) as ref,
        VectorIndex(tmp_path / "var.chassis", D) as var,
    ):
        ref_ids = ref.add_batch(a)
        var_ids = var.add_batch(variant)
        np.testing.assert_array_equal(var_ids, ref_ids)
        for i in ref_ids:
            assert var.get(int(i)).tobytes() == a[int(i)].tobytes(), f"row {i} differs ({layout})"
        queries = vecs(5, D, seed=22)
        for q in queries:
            r = [(h.id, h.distance) for h in ref.search(q, 5, ef=60)]
            s = [(h.id, h.distance) for h in var.search(q, 5, ef=60)]
            assert [i for i, _ in s] == [i for i, _ in r]
            assert [d for _, d in s] == pytest.approx([d for _, d in r], rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.float16])
def test_add_batch_accepts_integer_and_half_dtypes(tmp_path, dtype):
    a = np.random.default_rng(4).integers(-5, 6, size=(20, D))
    if np.dtype(dtype).kind == "u":
        a = np.abs(a)
    with VectorIndex(tmp_path / "i.chassis", D) as index:
        ids = index.add_batch(a.astype(dtype))
        for i in ids:
            np.testing.assert_array_equal(index.get(int(i)), a[int(i)].astype(np.float32))
        assert index.add(a[0].astype(dtype)) == 20
        np.testing.assert_array_equal(index.get(20), a[0].astype(np.float32))


def test_add_accepts_any_1d_layout(index_path):
    v = vecs(1, D, seed=2)[0]
    wide = np.zeros(2 * D, np.float32)
    wide[::2] = v
    raw = np.zeros(D * 4 + 1, np.uint8)
    raw[1:] = np.frombuffer(v.tobytes(), np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, count=D, offset=1)
    assert not unaligned.flags.aligned
    variants = [
        v,
        v.astype(np.float64),
        v.tolist(),
        tuple(v.tolist()),
        wide[::2],
        v[::-1].copy()[::-1],
        unaligned,
    ]
    with VectorIndex(index_path, D) as index:
        for i, variant in enumerate(variants):
            assert index.add(variant) == i
            assert index.get(i).tobytes() == v.tobytes(), f"variant {i}"


def test_add_accepts_python_ints(index_path):
    with VectorIndex(index_path, 3) as index:
        index.add([1, 2, 3])
        np.testing.assert_array_equal(index.get(0), np.array([1, 2, 3], np.float32))


def test_search_accepts_any_query_layout_with_identical_results(index_path):
    data = vecs(300, D, seed=30)
    q = vecs(1, D, seed=31)[0]
    qs = vecs(6, D, seed=32)
    with VectorIndex(index_path, D) as index:
        index.add_batch(data)
        ref = [(h.id, h.distance) for h in index.search(q, 7)]
        wide = np.zeros(2 * D, np.float32)
        wide[::2] = q
        for variant in (q.astype(np.float64), q.tolist(), wide[::2]):
            assert [(h.id, h.distance) for h in index.search(variant, 7)] == ref
        ref_ids, ref_d = index.search_batch(qs, 7)
        layouts = _layouts(qs)
        for name, variant in layouts.items():
            ids, dists = index.search_batch(variant, 7)
            np.testing.assert_array_equal(ids, ref_ids, err_msg=name)
            np.testing.assert_array_equal(dists, ref_d, err_msg=name)


BAD_KINDS = {
    "string": lambda d: "not a vector",
    "string_array": lambda d: np.array(["a"] * d),
    "list_of_strings": lambda d: ["1.0"] * d,
    "object_array": lambda d: np.array([object()] * d, dtype=object),
    "object_with_none": lambda d: np.array([1.0] * (d - 1) + [None], dtype=object),
    "complex": lambda d: np.ones(d, dtype=np.complex64),
}


@pytest.mark.parametrize("kind", list(BAD_KINDS))
def test_non_numeric_input_is_invalid_argument(index_path, kind):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
        bad = BAD_KINDS[kind](D)
        with pytest.raises(InvalidArgumentError):
            index.add(bad)
        with pytest.raises(InvalidArgumentError):
            index.search(bad)
        bad2 = BAD_KINDS[kind](D)
        if isinstance(bad2, np.ndarray):
            bad2 = np.stack([bad2, bad2])
        else:
            bad2 = [bad2, bad2]
        with pytest.raises(InvalidArgumentError):
            index.add_batch(bad2)
        with pytest.raises(InvalidArgumentError):
            index.search_batch(bad2)
        assert len(index) == 1


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_everywhere(index_path, value):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
        v = vecs(1, seed=1)[0]
        v[D // 2] = value
        with pytest.raises(InvalidArgumentError) as e:
            index.add(v)
        assert_has_help(e.value)
        with pytest.raises(InvalidArgumentError):
            index.add(v.astype(np.float64))
        with pytest.raises(InvalidArgumentError):
            index.search(v)
        batch = vecs(3, seed=2)
        batch[1, 0] = value
        with pytest.raises(InvalidArgumentError):
            index.add_batch(batch)
        with pytest.raises(InvalidArgumentError):
            index.search_batch(batch)
        with pytest.raises(InvalidArgumentError):
            index.search_batch(np.asfortranarray(batch))
        assert len(index) == 1


def test_float64_values_that_overflow_float32_are_refused(index_path):
    with VectorIndex(index_path, D) as index:
        v = np.zeros(D, np.float64)
        v[0] = 1e300  # finite as float64, infinite as float32
        with pytest.raises(InvalidArgumentError):
            index.add(v)
        assert len(index) == 0


def test_wrong_length_is_dimension_mismatch(index_path):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
        with pytest.raises(DimensionMismatchError) as e:
            index.add(np.ones(D + 1, np.float32))
        assert isinstance(e.value, ValueError)
        assert_has_help(e.value)
        with pytest.raises(DimensionMismatchError):
            index.add(np.ones(D - 1, np.float32))
        with pytest.raises(DimensionMismatchError):
            index.add([])
        with pytest.raises(DimensionMismatchError):
            index.search(np.ones(D + 3, np.float32))
        with pytest.raises(DimensionMismatchError):
            index.add_batch(np.ones((4, D - 1), np.float32))
        with pytest.raises(DimensionMismatchError):
            index.search_batch(np.ones((2, D + 1), np.float32))
        assert len(index) == 1


def test_wrong_number_of_axes_is_invalid_argument(index_path):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
        with pytest.raises(InvalidArgumentError):
            index.add(np.ones((1, D), np.float32))  # add takes one 1-D vector
        with pytest.raises(InvalidArgumentError):
            index.add(np.float32(1.0))
        with pytest.raises(InvalidArgumentError):
            index.search(np.ones((1, D), np.float32))
        with pytest.raises(InvalidArgumentError):
            index.add_batch(np.ones(D, np.float32))  # add_batch takes a 2-D array
        with pytest.raises(InvalidArgumentError):
            index.add_batch(np.ones((2, 1, D), np.float32))
        with pytest.raises(InvalidArgumentError):
            index.search_batch(np.ones(D, np.float32))
        with pytest.raises(InvalidArgumentError):
            index.search_batch(np.ones((2, 2, D), np.float32))
        assert len(index) == 1


def test_empty_batch_adds_nothing(index_path):
    with VectorIndex(index_path, D) as index:
        got = index.add_batch(np.empty((0, D), np.float32))
        assert isinstance(got, np.ndarray) and got.dtype == np.uint64 and got.shape == (0,)
        assert len(index) == 0 and index.pending == 0
        assert index.add(vecs(1)[0]) == 0


@pytest.mark.parametrize("threads", [0, -1])
def test_non_positive_threads_are_refused(index_path, threads):
    with VectorIndex(index_path, D) as index:
        index.add(vecs(1)[0])
        with pytest.raises(InvalidArgumentError):
            index.add_batch(vecs(3), threads=threads)
        with pytest.raises(InvalidArgumentError):
            index.search_batch(vecs(3), threads=threads)
        assert len(index) == 1


@pytest.mark.parametrize("threads", [1, 2, 7])
def test_explicit_thread_counts_work(index_path, threads):
    data = vecs(500, seed=40)
    with VectorIndex(index_path, D, IndexOptions(ef_construction=40)) as index:
        ids = index.add_batch(data, threads=threads)
        np.testing.assert_array_equal(ids, np.arange(500))
        for i in (0, 250, 499):
            np.testing.assert_array_equal(index.get(i), data[i])
        got, _ = index.search_batch(data[:20], k=1, ef=500, threads=threads)
        np.testing.assert_array_equal(got[:, 0], np.arange(20))


def test_progress_flag_is_accepted(index_path):
    data = vecs(200, seed=41)
    with VectorIndex(index_path, D) as index:
        ids = index.add_batch(data, progress=True)
        np.testing.assert_array_equal(ids, np.arange(200))
        a = index.search_batch(data[:10], k=3, progress=True)
        b = index.search_batch(data[:10], k=3)
        np.testing.assert_array_equal(a[0], b[0])


# =========================================================================== metric storage
def test_cosine_stores_normalised_vectors_and_refuses_zero(index_path):
    v = np.array([3.0, 4.0, 0.0, 0.0], np.float32)
    with VectorIndex(index_path, 4, IndexOptions(metric="cosine")) as index:
        index.add(v)
        np.testing.assert_allclose(index.get(0), [0.6, 0.8, 0.0, 0.0], rtol=1e-6, atol=1e-7)
        assert index.get(0).dtype == np.float32
        with pytest.raises(InvalidArgumentError) as e:
            index.add(np.zeros(4, np.float32))
        assert_has_help(e.value)
        assert len(index) == 1


def test_half_precision_stores_f16_rounded_values(index_path):
    v = np.array([0.1, 1 / 3, 1000.7, -2.0e-3, 65504.0, -65504.0, 3.14159, 0.0], np.float32)
    with VectorIndex(index_path, D, IndexOptions(precision="half")) as index:
        index.add(v)
        got = index.get(0)
        assert got.dtype == np.float32
        assert got.tobytes() == to_half(v).tobytes()
        assert got[4] == 65504.0 and got[5] == -65504.0


@pytest.mark.parametrize("big", [65520.0, 70000.0, -1e5, 3.0e38])
def test_half_precision_refuses_values_beyond_f16_range(index_path, big):
    with VectorIndex(index_path, D, IndexOptions(precision="half")) as index:
        v = np.ones(D, np.float32)
        v[3] = big
        with pytest.raises(InvalidArgumentError):
            index.add(v)
        with pytest.raises(InvalidArgumentError):
            index.add_batch(np.stack([np.ones(D, np.float32), v]))
        assert len(index) == 0


def test_cosine_half_stores_normalised_rounded_values(index_path):
    v = vecs(5, seed=50) * 100
    with VectorIndex(index_path, D, IndexOptions(metric="cosine", precision="half")) as index:
        index.add_batch(v)
        for i in range(5):
            got = index.get(i)
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, normalise(v[i]), atol=1e-3)
            # the values are f16 values
            assert got.tobytes() == to_half(got).tobytes()
