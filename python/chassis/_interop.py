"""Arrays from other libraries, read through NumPy's own interchange, without a copy where
their memory allows.

The native module reads a NumPy array in place when it is C-contiguous float32 and converts
anything else once. Before that conversion it hands objects that are not NumPy arrays to
`foreign_array`, which turns two kinds of them into NumPy views of the same memory:

- objects with ``__dlpack__`` (PyTorch, JAX, CuPy and others) through ``numpy.from_dlpack``:
  a view when the tensor lives in host memory; a tensor on a GPU is refused with a message
  saying to copy it to the host (Chassis never copies from a device behind your back);
- Arrow arrays (pyarrow ``FixedSizeListArray``, or a ``ChunkedArray`` of them, as a
  ``fixed_size_list<float32>`` column of a table gives) through Arrow's own buffers: one row
  per list, a view of the values buffer. A chunked column of several chunks is joined once
  (a copy); a primitive float array reads as one vector. Null rows or values are refused.

A view of float32 values goes in as it is; other dtypes are then converted to float32 once,
as NumPy arrays of those dtypes are. pyarrow is never imported here: an object is
recognised as Arrow by its type's module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chassis._chassis import InvalidArgumentError


def _fail(message: str, help: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{message}\nhelp: {help}")


def foreign_array(obj: Any, what: str) -> np.ndarray | None:
    """A NumPy view of another library's array, or None for anything else.

    Parameters
    ----------
    obj : object
        What the caller passed (never a NumPy array: those are read directly).
    what : str
        How error messages name it ("vectors", "the query").

    Returns
    -------
    numpy.ndarray or None
        A view of the same memory where possible; None when ``obj`` is neither an Arrow
        array nor a ``__dlpack__`` object (the caller then asks ``numpy.asarray``).

    Raises
    ------
    InvalidArgumentError
        The array cannot be read on the host (a GPU tensor, a tensor that requires grad, an
        unsupported dtype) or holds nulls.
    """
    module = type(obj).__module__ or ""
    if module.split(".")[0] == "pyarrow":
        return _from_arrow(obj, what)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, what)
    return None


def _from_dlpack(obj: Any, what: str) -> np.ndarray:
    device = getattr(obj, "__dlpack_device__", None)
    if device is not None:
        kind, number = device()
        # DLPack device types: 1 CPU, 3 CUDA host (pinned) memory; others are on a device.
        if int(kind) not in (1, 3):
            raise _fail(
                f"{what} is a tensor on a device (DLPack device type {int(kind)}, number "
                f"{number}), not in host memory",
                "copy it to the host first, for example tensor.cpu() or numpy.asarray(...)",
            )
    try:
        return np.from_dlpack(obj)
    except (BufferError, TypeError, RuntimeError, ValueError) as exc:
        raise _fail(
            f"{what} cannot be read through DLPack ({exc})",
            "pass a NumPy array, or convert the tensor on its side first "
            "(for PyTorch: tensor.detach().cpu().numpy())",
        ) from None


def _from_arrow(obj: Any, what: str) -> np.ndarray:
    chunks = getattr(obj, "chunks", None)
    if chunks is not None:  # a ChunkedArray, such as a table's column
        if len(chunks) == 1:
            return _from_arrow(chunks[0], what)
        parts = [_from_arrow(c, what) for c in chunks]
        if not parts:
            list_size = getattr(obj.type, "list_size", None)
            return np.empty((0, list_size) if list_size else (0,), dtype=np.float32)
        return np.concatenate(parts)  # the one copy: several chunks joined
    arrow_type = getattr(obj, "type", None)
    if arrow_type is None or not hasattr(obj, "null_count"):
        raise _fail(
            f"{what} is a {type(obj).__name__} from pyarrow, not an Arrow array",
            "pass a pyarrow FixedSizeListArray (one vector per row), or a table's column",
        )
    if obj.null_count:
        raise _fail(
            f"{what} holds {obj.null_count} null rows",
            "drop or fill the nulls first (pyarrow.compute.drop_null)",
        )
    list_size = getattr(arrow_type, "list_size", None)
    if list_size is None:
        if hasattr(arrow_type, "value_type"):
            raise _fail(
                f"{what} is an Arrow {arrow_type} array: its rows may differ in length",
                "cast it to a fixed-size list, for example "
                "arr.cast(pyarrow.list_(pyarrow.float32(), dimensions))",
            )
        return _arrow_values(obj, what)
    values = obj.flatten()  # the rows' values, this array's offset and length applied
    flat = _arrow_values(values, what)
    return flat.reshape(len(obj), list_size)


def _arrow_values(values: Any, what: str) -> np.ndarray:
    if values.null_count:
        raise _fail(
            f"{what} holds {values.null_count} null values",
            "fill the nulls first (pyarrow.compute.fill_null)",
        )
    try:
        return np.asarray(values.to_numpy(zero_copy_only=True))
    except Exception as exc:  # pyarrow.ArrowInvalid: a type without a NumPy view
        raise _fail(
            f"{what} is an Arrow array of {values.type}, which has no NumPy view ({exc})",
            "use a float or integer value type, such as pyarrow.float32()",
        ) from None


_F32_MAX = float(np.finfo(np.float32).max)


def to_float32(array: np.ndarray, what: str) -> np.ndarray:
    """The one conversion: ``array`` as aligned, C-contiguous float32.

    Parameters
    ----------
    array : numpy.ndarray
        Real numbers of any dtype, order and strides.
    what : str
        How error messages name it.

    Returns
    -------
    numpy.ndarray
        ``array`` itself when it already is aligned, C-contiguous float32; else a converted
        copy.

    Raises
    ------
    InvalidArgumentError
        A finite float64 (or longer) value lies beyond the float32 range, where NumPy would
        warn and make it infinity. The message names its row and column.
    """
    if array.dtype.kind != "f" or array.dtype.itemsize <= 4:
        return np.require(array, np.float32, "CA")
    with np.errstate(over="raise"):
        try:
            return np.require(array, np.float32, "CA")
        except FloatingPointError:
            pass
    where = np.argwhere(np.isfinite(array) & (np.abs(array) > _F32_MAX))
    first = tuple(int(i) for i in where[0]) if len(where) else ()
    at = (
        f"at row {first[0]}, column {first[1]}"
        if len(first) == 2
        else f"at position {first[0]}"
        if len(first) == 1
        else ""
    )
    value = f"{float(array[first])!r} " if first else ""
    raise _fail(
        f"{what} holds {value}{at}, beyond the float32 range of +-{_F32_MAX:.7g} "
        f"({len(where)} such values in all)",
        "scale the data into the float32 range, or check it for bad values",
    )
