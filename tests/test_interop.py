"""Input conversions said out loud: what goes in without a copy, what is converted once, and
arrays from other libraries (``__dlpack__`` objects, Arrow fixed-size-list arrays).

Oracles:
* ``tracemalloc``, which NumPy reports its array allocations to: a call that reads its input
  in place allocates (almost) nothing on NumPy's side; a call that converts allocates one
  float32 copy, not two. The index's own storage is Rust memory, outside tracemalloc;
* the same rows passed as a plain C-contiguous float32 array: every other form must give the
  identical ids and distances (and ``get`` the identical stored vectors);
* ``numpy.shares_memory`` and Arrow's buffer addresses: the views really are of the caller's
  memory;
* refusals are checked by type (a ``ChassisError`` and a ``ValueError``) and by what the
  message names (row, column, the range, the device), with nothing added to the index.
"""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import chassis
import numpy as np
import pytest
from chassis import InvalidArgumentError
from chassis._interop import foreign_array
from conftest import assert_has_help

N, D = 2_000, 32


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((N, D)).astype(np.float32)


def _results(vectors: Any, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, distances, stored vectors) of an in-memory index built from `vectors`."""
    index = chassis.VectorIndex(None, D, chassis.IndexOptions(ef_construction=64))
    ids = index.add_batch(vectors, threads=1)
    found, dist = index.search_batch(queries, k=5, threads=1)
    stored = np.stack([index.get(int(i)) for i in ids[:50]])
    return found, dist, stored


@pytest.fixture(scope="module")
def reference(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _results(rows, rows[:20])


def _same_as_reference(vectors: Any, rows: np.ndarray, reference: Any) -> None:
    found, dist, stored = _results(vectors, rows[:20])
    np.testing.assert_array_equal(found, reference[0])
    np.testing.assert_array_equal(dist, reference[1])
    np.testing.assert_array_equal(stored, reference[2])


def _numpy_bytes_during(fn: Any) -> int:
    """Peak bytes NumPy (and Python) allocated while fn ran."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


def _add_batch_bytes(vectors: Any) -> int:
    index = chassis.VectorIndex(None, D)
    return _numpy_bytes_during(lambda: index.add_batch(vectors, threads=1))


# --------------------------------------------------------------------------- NumPy inputs
def test_float32_c_order_goes_in_without_a_copy(rows: np.ndarray) -> None:
    assert _add_batch_bytes(rows) < rows.nbytes // 10


def test_read_only_memory_mapped_npy_goes_in_without_a_copy(
    rows: np.ndarray, reference: Any, tmp_path: Path
) -> None:
    np.save(tmp_path / "rows.npy", rows)
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r")
    assert not mapped.flags.writeable
    assert _add_batch_bytes(mapped) < rows.nbytes // 10
    _same_as_reference(mapped, rows, reference)


@pytest.mark.parametrize(
    "form",
    ["float64", "float16-exact", "int", "list", "fortran", "strided"],
)
def test_other_forms_are_converted_once(form: str, rows: np.ndarray, reference: Any) -> None:
    if form == "float64":
        vectors: Any = rows.astype(np.float64)
    elif form == "float16-exact":
        # Values float16 holds exactly, so the reference is the same rows in float32.
        exact = rows.astype(np.float16)
        vectors, rows = exact, exact.astype(np.float32)
        reference = _results(rows, rows[:20])
    elif form == "int":
        ints = np.round(rows * 100).astype(np.int32)
        vectors, rows = ints, ints.astype(np.float32)
        reference = _results(rows, rows[:20])
    elif form == "list":
        vectors = rows.tolist()
    elif form == "fortran":
        vectors = np.asfortranarray(rows)
    else:
        wide = np.zeros((N, 2 * D), dtype=np.float32)
        wide[:, ::2] = rows
        vectors = wide[:, ::2]
    _same_as_reference(vectors, rows, reference)
    if form != "list":  # a list's own Python objects dwarf the conversion
        converted = _add_batch_bytes(vectors)
        assert rows.nbytes * 0.9 < converted < rows.nbytes * 1.6, (form, converted)


def test_float64_beyond_float32_is_refused_by_row_and_column() -> None:
    index = chassis.VectorIndex(None, D)
    index.add_batch(np.ones((3, D)))
    vectors = np.ones((10, D))
    vectors[4, 17] = -1e39
    vectors[6, 2] = 5e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not NumPy's overflow warning first
        with pytest.raises(InvalidArgumentError) as info:
            index.add_batch(vectors)
    message = str(info.value)
    assert "row 4, column 17" in message and "-1e+39" in message, message
    assert "float32 range" in message and "3.402823e+38" in message, message
    assert "2 such values" in message, message
    assert isinstance(info.value, ValueError)
    assert_has_help(info.value)
    assert len(index) == 3

    query = np.zeros(D)
    query[9] = 1e40
    with pytest.raises(InvalidArgumentError, match="position 9"):
        index.search(query)
    with pytest.raises(InvalidArgumentError, match="position 9"):
        index.add(query)
    assert len(index) == 3
    # A large float64 value inside the range goes in; infinity is its own refusal.
    index.add(np.full(D, 3.0e38))
    assert len(index) == 4
    query[9] = np.inf
    with pytest.raises(InvalidArgumentError) as info:
        index.add(query)
    assert "float32 range" not in str(info.value)


# --------------------------------------------------------------------------- DLPack
class HostTensor:
    """A minimal DLPack producer over a NumPy array, as a library's host tensor is."""

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def test_dlpack_object_is_read_in_place(rows: np.ndarray, reference: Any) -> None:
    tensor = HostTensor(rows)
    view = foreign_array(tensor, "vectors")
    assert view is not None and np.shares_memory(view, rows)
    assert _add_batch_bytes(tensor) < rows.nbytes // 10
    _same_as_reference(tensor, rows, reference)
    index = chassis.VectorIndex(None, D)
    index.add_batch(rows)
    assert index.search(HostTensor(rows[3].copy()), k=1)[0].id == 3


def test_dlpack_float64_is_converted_once(rows: np.ndarray, reference: Any) -> None:
    _same_as_reference(HostTensor(rows.astype(np.float64)), rows, reference)


def test_dlpack_tensor_on_a_device_is_refused() -> None:
    index = chassis.VectorIndex(None, D)
    gpu = HostTensor(np.ones((4, D), dtype=np.float32), device=(2, 0))  # kDLCUDA
    with pytest.raises(InvalidArgumentError, match="host") as info:
        index.add_batch(gpu)
    assert "device" in str(info.value)
    assert_has_help(info.value)
    assert len(index) == 0


@pytest.mark.slow
def test_jax_array(rows: np.ndarray, reference: Any) -> None:
    jnp = pytest.importorskip("jax.numpy")
    array = jnp.asarray(rows)
    _same_as_reference(array, rows, reference)
    assert _add_batch_bytes(array) < rows.nbytes // 10


def test_torch_tensor(rows: np.ndarray, reference: Any) -> None:
    torch = pytest.importorskip(
        "torch",
        reason="torch is not a test extra (its default wheels bring gigabytes of CUDA); "
        "pip install torch --index-url https://download.pytorch.org/whl/cpu runs this",
    )
    _same_as_reference(torch.from_numpy(rows), rows, reference)
    grad = torch.from_numpy(rows.copy()).requires_grad_(True)
    with pytest.raises(InvalidArgumentError, match="DLPack"):
        chassis.VectorIndex(None, D).add_batch(grad)


# --------------------------------------------------------------------------- Arrow
pa = pytest.importorskip("pyarrow")


def _arrow_rows(rows: np.ndarray) -> Any:
    return pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), D)


def test_arrow_fixed_size_list_is_read_in_place(rows: np.ndarray, reference: Any) -> None:
    arrow = _arrow_rows(rows)
    view = foreign_array(arrow, "vectors")
    assert view is not None and view.shape == (N, D) and view.dtype == np.float32
    assert view.ctypes.data == arrow.values.buffers()[1].address
    assert _add_batch_bytes(arrow) < rows.nbytes // 10
    _same_as_reference(arrow, rows, reference)


def test_arrow_slice_table_column_and_chunks(rows: np.ndarray, reference: Any) -> None:
    arrow = _arrow_rows(rows)
    index = chassis.VectorIndex(None, D)
    index.add_batch(arrow.slice(100, 50))  # an offset into the values
    np.testing.assert_array_equal(index.get(0), rows[100])
    np.testing.assert_array_equal(index.get(49), rows[149])
    table = pa.table({"embedding": arrow})
    _same_as_reference(table["embedding"], rows, reference)  # one chunk: in place
    chunked = pa.chunked_array([arrow.slice(0, 700), arrow.slice(700)])
    _same_as_reference(chunked, rows, reference)  # several: joined once
    query = pa.array(rows[5])  # a primitive array reads as one vector
    assert index.search(query, k=1) and chassis.VectorIndex(None, D).add(query) == 0


def test_arrow_refusals(rows: np.ndarray) -> None:
    index = chassis.VectorIndex(None, D)
    with_null = pa.array([rows[0].tolist(), None], type=pa.list_(pa.float32(), D))
    with pytest.raises(InvalidArgumentError, match="1 null rows"):
        index.add_batch(with_null)
    variable = pa.array([rows[0].tolist(), rows[1].tolist()])
    with pytest.raises(InvalidArgumentError, match="fixed-size list") as info:
        index.add_batch(variable)
    assert_has_help(info.value)
    null_values = pa.FixedSizeListArray.from_arrays(pa.array([1.0, None] * D), 2)
    with pytest.raises(InvalidArgumentError, match="null values"):
        chassis.VectorIndex(None, 2).add_batch(null_values)
    assert len(index) == 0
