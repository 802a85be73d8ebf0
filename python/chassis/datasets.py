"""Data sets for tests and benchmarks: file formats, generated clusters, exact k-NN, recall.

Only NumPy is needed (h5py for HDF5 files, tqdm for progress bars: both optional).

Readers and writers, one array per file unless said otherwise:

| format | extension | layout | read |
|---|---|---|---|
| texmex | `.fvecs` `.ivecs` `.bvecs` | per row: int32 d, then d float32 / int32 / uint8 | memory-mapped, strided view past each row's header |
| big-ann | `.fbin` `.ibin` `.u8bin` `.i8bin` | uint32 n, uint32 d, then n x d float32 / int32 / uint8 / int8 | memory-mapped from byte 8 |
| NumPy | `.npy` | NumPy's own | memory-mapped |
| ann-benchmarks | `.hdf5` `.h5` | `train`, `test`, `neighbors`, `distances`, attribute `distance` | memory-mapped when stored contiguous (needs h5py) |
| folder | a directory | `base.npy`, `queries.npy`, `gt_ids.npy`, `gt_dist.npy` (or `*base*`, `*query*`, `*groundtruth*` files of the formats above) | as its files |

`read(path)` returns the one array of a single-array file in its stored type (a read-only
memory map where the table says so); `load(path)` returns a `Dataset` (float32 base and
queries, ground truth when the source has it) for any of them. Malformed files raise
`DatasetError`, a `ValueError` whose message names the file and the byte offset at fault.

    >>> from chassis.datasets import clustered, ground_truth, recall_at_k
    >>> base, queries = clustered(10_000, 64, 100)
    >>> truth_ids, truth_dist = ground_truth(base, queries, k=10)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Dataset",
    "DatasetError",
    "load",
    "read",
    "write",
    "load_npy_folder",
    "load_folder",
    "read_fvecs",
    "read_ivecs",
    "read_bvecs",
    "write_fvecs",
    "write_ivecs",
    "write_bvecs",
    "read_fbin",
    "read_ibin",
    "read_u8bin",
    "read_i8bin",
    "write_fbin",
    "write_ibin",
    "write_u8bin",
    "write_i8bin",
    "read_bin_ground_truth",
    "write_bin_ground_truth",
    "read_vecs",
    "write_vecs",
    "read_bin",
    "write_bin",
    "read_npy",
    "write_npy",
    "read_hdf5",
    "write_hdf5",
    "clustered",
    "ground_truth",
    "recall_at_k",
]

_METRICS = ("euclidean", "cosine", "inner_product")
_PathLike = str | os.PathLike[str]

# extension -> element type
VECS_TYPES: dict[str, np.dtype] = {
    ".fvecs": np.dtype("<f4"),
    ".ivecs": np.dtype("<i4"),
    ".bvecs": np.dtype("u1"),
}
BIN_TYPES: dict[str, np.dtype] = {
    ".fbin": np.dtype("<f4"),
    ".ibin": np.dtype("<i4"),
    ".u8bin": np.dtype("u1"),
    ".i8bin": np.dtype("i1"),
}
HDF5_EXTENSIONS = (".hdf5", ".h5")
ARRAY_EXTENSIONS = tuple(VECS_TYPES) + tuple(BIN_TYPES) + (".npy",)


class DatasetError(ValueError):
    """A data file that cannot be read as its format says, or an array that cannot be written in it.

    A `ValueError` whose message names the file and, when the fault is at one place, the byte
    offset there.

    Parameters
    ----------
    path : str or os.PathLike
        The file (or folder) at fault.
    message : str
        What is wrong.
    offset : int or None, default: None
        The byte offset of the fault, or None when the fault is not at one place.

    Attributes
    ----------
    path : pathlib.Path
        The file (or folder) at fault.
    offset : int or None
        The byte offset of the fault, or None when the fault is not at one place.

    Examples
    --------
    >>> from chassis.datasets import DatasetError
    >>> exc = DatasetError("sift_base.fvecs", "truncated", 516)
    >>> str(exc)
    'sift_base.fvecs at byte offset 516: truncated'
    >>> isinstance(exc, ValueError), exc.offset
    (True, 516)
    """

    def __init__(self, path: _PathLike, message: str, offset: int | None = None) -> None:
        self.path = Path(path)
        self.offset = offset
        where = f"{self.path}" if offset is None else f"{self.path} at byte offset {offset}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Dataset:
    """A base set, its queries and (when known) their exact nearest neighbours.

    Row i of `base` has id i. `load`, `load_folder`, `load_npy_folder` and `read_hdf5` return
    one; the dataclass is frozen.

    Parameters
    ----------
    name : str
        A label: the file's stem or the folder's name for a data set that was loaded.
    base : numpy.ndarray
        (n, d) float32 base vectors, often a read-only memory map.
    queries : numpy.ndarray
        (q, d) float32 queries; (0, d) when the source has none.
    gt_ids : numpy.ndarray or None
        (q, K) integer ids of each query's exact nearest neighbours, nearest first, or None
        when not known.
    gt_dist : numpy.ndarray or None
        (q, K) their distances under `metric`, or None when not known.
    metric : {"euclidean", "cosine", "inner_product"}, default: "euclidean"
        The metric of the ground truth.

    Attributes
    ----------
    dims : int
        d, the number of dimensions.

    Examples
    --------
    >>> from chassis.datasets import Dataset, clustered, ground_truth
    >>> base, queries = clustered(1_000, 16, 10)
    >>> ids, dist = ground_truth(base, queries, k=10)
    >>> data = Dataset("demo", base, queries, ids, dist)
    >>> data
    Dataset('demo', base=(1000, 16), queries=(10, 16), ground truth top-10, metric='euclidean')
    >>> data.dims
    16
    """

    name: str
    base: npt.NDArray[np.float32]
    queries: npt.NDArray[np.float32]
    gt_ids: npt.NDArray[np.integer] | None
    gt_dist: npt.NDArray[np.float32] | None
    metric: str = "euclidean"

    @property
    def dims(self) -> int:
        """The number of dimensions, d (the width of `base`)."""
        return int(self.base.shape[1])

    def __repr__(self) -> str:
        gt = "none" if self.gt_ids is None else f"top-{self.gt_ids.shape[1]}"
        return (
            f"Dataset({self.name!r}, base={self.base.shape}, queries={self.queries.shape}, "
            f"ground truth {gt}, metric={self.metric!r})"
        )


# ====================================================================== helpers
def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None


def _as_2d(array: npt.ArrayLike, path: Path) -> np.ndarray:
    arr = np.asarray(array)
    if arr.ndim != 2:
        raise DatasetError(
            path, f"can only write a 2-D (rows, dimensions) array, not shape {arr.shape}"
        )
    return arr


def _cast_for(arr: np.ndarray, dtype: np.dtype, path: Path) -> np.ndarray:
    """`arr` as `dtype`, refusing casts that would change values (float to int, out of range)."""
    if arr.dtype == dtype:
        return arr
    if dtype.kind == "f":
        if arr.dtype.kind not in "fiub":
            raise DatasetError(path, f"cannot write {arr.dtype} values as {dtype}")
        if arr.dtype.kind == "f" and arr.dtype.itemsize > dtype.itemsize and arr.size:
            # Rounding is what a narrower float means; turning a finite value into infinity
            # is not: refuse it, as the index refuses such input.
            top = float(np.finfo(dtype).max)
            beyond = np.isfinite(arr) & (np.abs(arr) > top)
            if beyond.any():
                where = tuple(int(i) for i in np.argwhere(beyond)[0])
                raise DatasetError(
                    path,
                    f"{int(beyond.sum())} values lie beyond the {dtype} range of +-{top:.7g}, "
                    f"the first {float(arr[where])!r} at {where}",
                )
        return arr.astype(dtype)
    if arr.dtype.kind not in "iub":
        raise DatasetError(path, f"cannot write {arr.dtype} values as integer type {dtype}")
    if arr.size:
        info = np.iinfo(dtype)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise DatasetError(path, f"values {lo}..{hi} do not fit in {dtype}")
    return arr.astype(dtype)


def _empty_map(shape: tuple[int, int], dtype: np.dtype) -> np.ndarray:
    out = np.empty(shape, dtype=dtype)
    out.flags.writeable = False
    return out


# ====================================================================== texmex .fvecs / .ivecs / .bvecs
def read_vecs(
    path: _PathLike, dtype: npt.DTypeLike, *, mmap: bool = True, validate: bool = True
) -> np.ndarray:
    """Read an (n, d) array from a texmex file: per row an int32 d, then d values of `dtype`.

    With `mmap` (the default) the result is a read-only view into an `np.memmap` of the file,
    strided to skip each row's 4-byte header: nothing is read until used. An empty file reads
    as an empty (0, 0) array (without a row the format does not record d).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    dtype : data-type
        The type of the values, little-endian for types wider than a byte: ``"<f4"`` for
        `.fvecs`, ``"<i4"`` for `.ivecs`, ``"u1"`` for `.bvecs`.
    mmap : bool, default: True
        Map the file (a read-only view) rather than read it into memory (a writable array).
    validate : bool, default: True
        Check every row's header against the first (a strided pass over the file). The file
        length is always checked.

    Returns
    -------
    numpy.ndarray
        (n, d) values of `dtype`.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The first header is not a positive count, a row's header differs from the first (with
        `validate`), or the file is not a whole number of rows; the message names the byte
        offset at fault.

    See Also
    --------
    read_fvecs, read_ivecs, read_bvecs : This function for each texmex type.
    write_vecs : The writer.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import read_vecs, write_vecs
    >>> write_vecs("example.fvecs", np.eye(2), "<f4")  # doctest: +SKIP
    >>> read_vecs("example.fvecs", "<f4")  # doctest: +SKIP
    memmap([[1., 0.],
            [0., 1.]], dtype=float32)
    """
    p = Path(path)
    dt = np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).itemsize > 1 else np.dtype(dtype)
    size = _size(p)
    if size == 0:
        return _empty_map((0, 0), dt)
    if size < 4:
        raise DatasetError(
            p,
            f"the file is {size} bytes long, too short for the first row's 4-byte dimension header",
            0,
        )
    dims = int(np.fromfile(p, dtype="<i4", count=1)[0])
    if dims <= 0:
        raise DatasetError(p, f"the first row's dimension header is {dims}; it must be positive", 0)
    record = 4 + dims * dt.itemsize
    rows, rest = divmod(size, record)
    row_type = np.dtype([("d", "<i4"), ("v", dt, (dims,))])
    assert row_type.itemsize == record
    if rows and (validate or rest):
        headers = np.memmap(p, dtype=row_type, mode="r", shape=(rows,))["d"]
        step = 1 << 20
        for r0 in range(0, rows, step):
            bad = np.flatnonzero(headers[r0 : r0 + step] != dims)
            if bad.size:
                r = r0 + int(bad[0])
                raise DatasetError(
                    p,
                    f"row {r} has dimension header {int(headers[r])} but row 0 has {dims}: "
                    f"inconsistent dimensions (rows are 4 + {dims} x {dt.itemsize} = {record} bytes)",
                    r * record,
                )
    if rest:
        raise DatasetError(
            p,
            f"the file ends {rest} bytes into row {rows}: truncated, or not {record}-byte rows "
            f"(4-byte header + {dims} x {dt.itemsize}-byte {dt.name}); file size {size} is not "
            f"a multiple of {record}",
            rows * record,
        )
    if mmap:
        return np.memmap(p, dtype=row_type, mode="r", shape=(rows,))["v"]
    data = np.fromfile(p, dtype=row_type, count=rows)["v"]
    return np.ascontiguousarray(data)


def write_vecs(path: _PathLike, array: npt.ArrayLike, dtype: npt.DTypeLike) -> None:
    """Write an (n, d) array as texmex rows: per row an int32 d, then d values of `dtype`.

    Values are converted to `dtype`: to an integer type only when every value fits (floats are
    refused), to a float type from any numeric type (rounded to its precision; a finite value
    beyond its range is refused rather than made infinite). The file is
    replaced.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    array : array_like
        (n, d) values, d at least 1.
    dtype : data-type
        The stored type: ``"<f4"`` for `.fvecs`, ``"<i4"`` for `.ivecs`, ``"u1"`` for `.bvecs`.

    Raises
    ------
    DatasetError
        `array` is not 2-D, has no columns, or holds values that `dtype` cannot hold.

    See Also
    --------
    write_fvecs, write_ivecs, write_bvecs : This function for each texmex type.
    read_vecs : The reader.
    """
    p = Path(path)
    arr = _as_2d(array, p)
    dt = np.dtype(dtype)
    n, d = arr.shape
    if d < 1:
        raise DatasetError(p, "cannot write rows of 0 dimensions in a vecs file")
    rows = np.empty(n, dtype=np.dtype([("d", "<i4"), ("v", dt, (d,))]))
    rows["d"] = d
    rows["v"] = _cast_for(arr, dt, p)
    rows.tofile(p)


def read_fvecs(
    path: _PathLike, *, mmap: bool = True, validate: bool = True
) -> npt.NDArray[np.float32]:
    """Read an (n, d) float32 array from a `.fvecs` file (see `read_vecs`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (a read-only view) rather than read it into memory (a writable array).
    validate : bool, default: True
        Check every row's header against the first; the file length is always checked.

    Returns
    -------
    numpy.ndarray
        (n, d) float32.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not what its format says (see `read_vecs`); the message names the byte
        offset at fault.

    Examples
    --------
    >>> from chassis.datasets import read_fvecs, write_fvecs
    >>> write_fvecs("example.fvecs", [[1, 2], [3, 4]])  # doctest: +SKIP
    >>> read_fvecs("example.fvecs", mmap=False)  # doctest: +SKIP
    array([[1., 2.],
           [3., 4.]], dtype=float32)
    """
    return read_vecs(path, "<f4", mmap=mmap, validate=validate)


def read_ivecs(
    path: _PathLike, *, mmap: bool = True, validate: bool = True
) -> npt.NDArray[np.int32]:
    """Read an (n, d) int32 array from an `.ivecs` file (texmex ground truth; see `read_vecs`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (a read-only view) rather than read it into memory (a writable array).
    validate : bool, default: True
        Check every row's header against the first; the file length is always checked.

    Returns
    -------
    numpy.ndarray
        (n, d) int32.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not what its format says (see `read_vecs`); the message names the byte
        offset at fault.
    """
    return read_vecs(path, "<i4", mmap=mmap, validate=validate)


def read_bvecs(
    path: _PathLike, *, mmap: bool = True, validate: bool = True
) -> npt.NDArray[np.uint8]:
    """Read an (n, d) uint8 array from a `.bvecs` file (see `read_vecs`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (a read-only view) rather than read it into memory (a writable array).
    validate : bool, default: True
        Check every row's header against the first; the file length is always checked.

    Returns
    -------
    numpy.ndarray
        (n, d) uint8.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not what its format says (see `read_vecs`); the message names the byte
        offset at fault.
    """
    return read_vecs(path, "u1", mmap=mmap, validate=validate)


def write_fvecs(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an (n, d) array as a `.fvecs` file of float32 rows (see `write_vecs`).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) numeric values, d at least 1, converted to float32.

    Raises
    ------
    DatasetError
        `array` is not 2-D or cannot be converted (see `write_vecs`).

    Examples
    --------
    >>> from chassis.datasets import clustered, write_fvecs
    >>> base, queries = clustered(1_000, 16, 10)
    >>> write_fvecs("base.fvecs", base)  # doctest: +SKIP
    """
    write_vecs(path, array, "<f4")


def write_ivecs(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an (n, d) array as an `.ivecs` file of int32 rows (see `write_vecs`).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) integers, d at least 1, each of which must fit in int32.

    Raises
    ------
    DatasetError
        `array` is not 2-D or cannot be converted (see `write_vecs`).
    """
    write_vecs(path, array, "<i4")


def write_bvecs(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an (n, d) array as a `.bvecs` file of uint8 rows (see `write_vecs`).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) integers from 0 to 255, d at least 1.

    Raises
    ------
    DatasetError
        `array` is not 2-D or cannot be converted (see `write_vecs`).
    """
    write_vecs(path, array, "u1")


# ====================================================================== big-ann .fbin / .ibin / .u8bin
def _bin_header(p: Path) -> tuple[int, int, int]:
    size = _size(p)
    if size < 8:
        raise DatasetError(
            p,
            f"the file is {size} bytes long, too short for the 8-byte header (uint32 rows, uint32 dimensions)",
            0,
        )
    n, d = (int(x) for x in np.fromfile(p, dtype="<u4", count=2))
    for name, value, at in (("rows", n, 0), ("dimensions", d, 4)):
        if value >= 2**31:
            raise DatasetError(
                p,
                f"the header's {name} field is {value} ({value - 2**32} as int32): not a count",
                at,
            )
    if d == 0 and n > 0:
        raise DatasetError(p, f"the header says {n} rows of 0 dimensions", 4)
    return n, d, size


def read_bin(path: _PathLike, dtype: npt.DTypeLike, *, mmap: bool = True) -> np.ndarray:
    """Read an (n, d) array from a big-ann file: uint32 n, uint32 d, then n x d values of `dtype`.

    With `mmap` (the default) the result is a read-only `np.memmap` from byte 8. Read as int32,
    a ground-truth file (n x d int32 ids followed by n x d float32 distances, as `.ibin`
    ground truth is) gives its ids; use `read_bin_ground_truth` for both.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    dtype : data-type
        The type of the values: ``"<f4"`` for `.fbin`, ``"<i4"`` for `.ibin`, ``"u1"`` for
        `.u8bin`, ``"i1"`` for `.i8bin`.
    mmap : bool, default: True
        Map the file (read-only) rather than read it into memory (a writable array).

    Returns
    -------
    numpy.ndarray
        (n, d) values of `dtype`.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is shorter than its 8-byte header, a header field is not a count (2**31 or
        more), the header promises rows of 0 dimensions, or the file is shorter or longer than
        the header says; the message names the byte offset at fault.

    See Also
    --------
    read_fbin, read_ibin, read_u8bin, read_i8bin : This function for each big-ann type.
    write_bin : The writer.
    """
    p = Path(path)
    dt = np.dtype(dtype)
    n, d, size = _bin_header(p)
    row = d * dt.itemsize
    expected = 8 + n * row
    if size < expected:
        full = (size - 8) // row if row else 0
        raise DatasetError(
            p,
            f"truncated: the header promises {n} x {d} {dt.name} ({expected} bytes in all) but the "
            f"file is {size} bytes and ends inside row {full}",
            8 + full * row,
        )
    ground_truth_layout = dt.kind == "i" and dt.itemsize == 4 and size == 8 + 2 * n * row
    if size > expected and not ground_truth_layout:
        raise DatasetError(
            p,
            f"{size - expected} bytes past the {n} x {d} {dt.name} the header promises "
            f"(wrong header, or another element type)",
            expected,
        )
    if n == 0:
        return _empty_map((0, d), dt)
    if mmap:
        return np.memmap(p, dtype=dt, mode="r", offset=8, shape=(n, d))
    with open(p, "rb") as f:
        f.seek(8)
        return np.fromfile(f, dtype=dt, count=n * d).reshape(n, d)


def write_bin(path: _PathLike, array: npt.ArrayLike, dtype: npt.DTypeLike) -> None:
    """Write an (n, d) array as a big-ann file: uint32 n, uint32 d, then the values as `dtype`.

    Values are converted to `dtype`: to an integer type only when every value fits (floats are
    refused), to a float type from any numeric type (rounded to its precision; a finite value
    beyond its range is refused rather than made infinite). The file is
    replaced.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    array : array_like
        (n, d) values.
    dtype : data-type
        The stored type: ``"<f4"`` for `.fbin`, ``"<i4"`` for `.ibin`, ``"u1"`` for `.u8bin`,
        ``"i1"`` for `.i8bin`.

    Raises
    ------
    DatasetError
        `array` is not 2-D, n or d is 2**31 or more, or `array` holds values that `dtype`
        cannot hold.

    See Also
    --------
    write_fbin, write_ibin, write_u8bin, write_i8bin : This function for each big-ann type.
    read_bin : The reader.
    """
    p = Path(path)
    arr = _as_2d(array, p)
    n, d = arr.shape
    if n >= 2**31 or d >= 2**31:
        raise DatasetError(p, f"shape {arr.shape} does not fit the uint32 header")
    if d == 0 and n > 0:
        raise DatasetError(p, "cannot write rows of 0 dimensions (read_bin would refuse them)")
    data = np.ascontiguousarray(_cast_for(arr, np.dtype(dtype), p))
    with open(p, "wb") as f:
        np.array([n, d], dtype="<u4").tofile(f)
        data.tofile(f)


def read_fbin(path: _PathLike, *, mmap: bool = True) -> npt.NDArray[np.float32]:
    """Read an (n, d) float32 array from a `.fbin` file (see `read_bin`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (read-only) rather than read it into memory (a writable array).

    Returns
    -------
    numpy.ndarray
        (n, d) float32.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not what its format says (see `read_bin`); the message names the byte
        offset at fault.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import read_fbin, write_fbin
    >>> write_fbin("example.fbin", np.arange(6).reshape(2, 3))  # doctest: +SKIP
    >>> read_fbin("example.fbin")  # doctest: +SKIP
    memmap([[0., 1., 2.],
            [3., 4., 5.]], dtype=float32)
    """
    return read_bin(path, "<f4", mmap=mmap)


def read_ibin(path: _PathLike, *, mmap: bool = True) -> npt.NDArray[np.int32]:
    """Read an (n, d) int32 array from an `.ibin` file (see `read_bin`).

    A ground-truth file (ids, then distances) reads as its ids; `read_bin_ground_truth`
    reads both.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (read-only) rather than read it into memory (a writable array).

    Returns
    -------
    numpy.ndarray
        (n, d) int32.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not what its format says (see `read_bin`); the message names the byte
        offset at fault.
    """
    return read_bin(path, "<i4", mmap=mmap)


def read_u8bin(path: _PathLike, *, mmap: bool = True) -> npt.NDArray[np.uint8]:
    """Read an (n, d) uint8 array from a `.u8bin` file (see `read_bin`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (read-only) rather than read it into memory (a writable array).

    Returns
    -------
    numpy.ndarray
        (n, d) uint8.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not what its format says (see `read_bin`); the message names the byte
        offset at fault.
    """
    return read_bin(path, "u1", mmap=mmap)


def read_i8bin(path: _PathLike, *, mmap: bool = True) -> npt.NDArray[np.int8]:
    """Read an (n, d) int8 array from an `.i8bin` file (see `read_bin`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (read-only) rather than read it into memory (a writable array).

    Returns
    -------
    numpy.ndarray
        (n, d) int8.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not what its format says (see `read_bin`); the message names the byte
        offset at fault.
    """
    return read_bin(path, "i1", mmap=mmap)


def write_fbin(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an (n, d) array as a `.fbin` file of float32 values (see `write_bin`).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) numeric values, converted to float32.

    Raises
    ------
    DatasetError
        `array` is not 2-D or cannot be converted (see `write_bin`).
    """
    write_bin(path, array, "<f4")


def write_ibin(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an (n, d) array as an `.ibin` file of int32 values (see `write_bin`).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) integers, each of which must fit in int32.

    Raises
    ------
    DatasetError
        `array` is not 2-D or cannot be converted (see `write_bin`).
    """
    write_bin(path, array, "<i4")


def write_u8bin(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an (n, d) array as a `.u8bin` file of uint8 values (see `write_bin`).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) integers from 0 to 255.

    Raises
    ------
    DatasetError
        `array` is not 2-D or cannot be converted (see `write_bin`).
    """
    write_bin(path, array, "u1")


def write_i8bin(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an (n, d) array as an `.i8bin` file of int8 values (see `write_bin`).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) integers from -128 to 127.

    Raises
    ------
    DatasetError
        `array` is not 2-D or cannot be converted (see `write_bin`).
    """
    write_bin(path, array, "i1")


def read_bin_ground_truth(
    path: _PathLike, *, mmap: bool = True
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    """Read (ids, distances) from a big-ann ground-truth file.

    The layout is uint32 n, uint32 k, n x k int32 ids, then n x k float32 distances.

    Parameters
    ----------
    path : str or os.PathLike
        The file (usually `.ibin`).
    mmap : bool, default: True
        Map the file (read-only) rather than read it into memory (writable arrays).

    Returns
    -------
    ids : numpy.ndarray
        (n, k) int32 ids of each query's nearest neighbours, nearest first.
    distances : numpy.ndarray
        (n, k) float32, their distances.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The header is malformed or the file is not 8 + 8 x n x k bytes long.

    See Also
    --------
    write_bin_ground_truth : The writer.

    Examples
    --------
    >>> from chassis.datasets import read_bin_ground_truth, write_bin_ground_truth
    >>> write_bin_ground_truth("gt.ibin", [[2, 0]], [[0.5, 1.5]])  # doctest: +SKIP
    >>> ids, distances = read_bin_ground_truth("gt.ibin")  # doctest: +SKIP
    >>> ids, distances  # doctest: +SKIP
    (memmap([[2, 0]], dtype=int32), memmap([[0.5, 1.5]], dtype=float32))
    """
    p = Path(path)
    n, k, size = _bin_header(p)
    expected = 8 + 8 * n * k
    if size != expected:
        raise DatasetError(
            p,
            f"a ground-truth file of {n} x {k} is {expected} bytes (ids then distances), this one is {size}",
            min(size, expected),
        )
    if n == 0:
        return _empty_map((0, k), np.dtype("<i4")), _empty_map((0, k), np.dtype("<f4"))
    if mmap:
        ids = np.memmap(p, dtype="<i4", mode="r", offset=8, shape=(n, k))
        dist = np.memmap(p, dtype="<f4", mode="r", offset=8 + 4 * n * k, shape=(n, k))
        return ids, dist
    raw = np.fromfile(p, dtype="<i4", offset=8)
    return raw[: n * k].reshape(n, k), raw[n * k :].view("<f4").reshape(n, k)


def write_bin_ground_truth(path: _PathLike, ids: npt.ArrayLike, distances: npt.ArrayLike) -> None:
    """Write ids and their distances as a big-ann ground-truth file.

    The layout is uint32 n, uint32 k, n x k int32 ids, then n x k float32 distances, as
    `read_bin_ground_truth` reads. The file is replaced.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (usually `.ibin`).
    ids : array_like
        (n, k) integer ids, each of which must fit in int32. The padding id 2**64 - 1 of
        `VectorIndex.search_batch` (uint64) is written as -1.
    distances : array_like
        (n, k) distances, converted to float32.

    Raises
    ------
    DatasetError
        `ids` or `distances` is not 2-D, their shapes differ, or an id does not fit in int32.

    See Also
    --------
    read_bin_ground_truth : The reader.
    ground_truth : Exact neighbours to write.
    """
    p = Path(path)
    ids_arr, dist_arr = _as_2d(ids, p), _as_2d(distances, p)
    if ids_arr.shape != dist_arr.shape:
        raise DatasetError(p, f"ids {ids_arr.shape} and distances {dist_arr.shape} differ in shape")
    n, k = ids_arr.shape
    if ids_arr.dtype.kind not in "iu":
        raise DatasetError(p, f"ids have dtype {ids_arr.dtype}, not an integer type")
    if ids_arr.dtype == np.uint64:
        # search_batch's padding id (2**64 - 1) is the format's -1; any other id must fit.
        padding = ids_arr == np.uint64(2**64 - 1)
        ids64 = _cast_for(np.where(padding, np.uint64(0), ids_arr), np.dtype(np.int32), p)
        ids64 = ids64.astype(np.int64)
        ids64[padding] = -1
    else:
        ids64 = ids_arr.astype(np.int64)
    with open(p, "wb") as f:
        np.array([n, k], dtype="<u4").tofile(f)
        np.ascontiguousarray(_cast_for(ids64, np.dtype("<i4"), p)).tofile(f)
        np.ascontiguousarray(dist_arr, dtype="<f4").tofile(f)


# ====================================================================== .npy
def _npy_header(p: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    fmt = np.lib.format
    with open(p, "rb") as f:
        try:
            version = fmt.read_magic(f)
            reader = getattr(fmt, "_read_array_header", None)
            if reader is not None:
                shape, fortran, dtype = reader(f, version)
            elif version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
        except (ValueError, OSError, SyntaxError) as exc:
            raise DatasetError(p, f"not a readable .npy header: {exc}", 0) from None
        return tuple(shape), bool(fortran), np.dtype(dtype), f.tell()


def read_npy(path: _PathLike, *, mmap: bool = True) -> np.ndarray:
    """Read the array in a `.npy` file, memory-mapped read-only by default.

    The header is checked against the file length first, so a truncated file names the offset
    where data runs out. Any shape and any type but Python objects.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Map the file (read-only) rather than read it into memory (a writable array).

    Returns
    -------
    numpy.ndarray
        The array, in its stored shape and type.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The header cannot be read, the array holds Python objects, or the file is truncated.

    See Also
    --------
    numpy.load : What reads the data once the checks pass.
    """
    p = Path(path)
    shape, _fortran, dtype, offset = _npy_header(p)
    if dtype.hasobject:
        raise DatasetError(p, "holds Python objects, not numbers", offset)
    size = _size(p)
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size < expected:
        raise DatasetError(
            p,
            f"truncated: shape {shape} of {dtype} needs {expected} bytes, the file has {size}",
            size,
        )
    try:
        return np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError as exc:
        raise DatasetError(p, str(exc), offset) from None


def write_npy(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write an array as a `.npy` file, in its own shape and type.

    As `numpy.save` does, ``.npy`` is appended to `path` when it does not end in it. The file
    is replaced.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    array : array_like
        The array: any shape, no Python objects.

    Raises
    ------
    ValueError
        `array` holds Python objects (pickling is not allowed).
    """
    np.save(Path(path), np.asarray(array), allow_pickle=False)


def _npy_matrix(path: Path) -> np.ndarray:
    array = read_npy(path)
    if array.ndim != 2:
        raise DatasetError(path, f"holds an array of shape {array.shape}, not (count, dimensions)")
    return array


def _load_float32(path: Path) -> npt.NDArray[np.float32]:
    """A 2-D float32 array from `path`: memory-mapped when stored as float32, else converted."""
    return _float32(_npy_matrix(path))


def _float32(array: np.ndarray) -> npt.NDArray[np.float32]:
    """`array` unchanged when it is float32 (a memory map stays one), else a float32 copy."""
    if array.dtype == np.float32:
        return array
    return np.ascontiguousarray(array, dtype=np.float32)


# ====================================================================== folders
def load_npy_folder(path: _PathLike) -> Dataset:
    """Load a folder holding base.npy and, when present, queries.npy, gt_ids.npy and gt_dist.npy.

    float32 files are memory-mapped (read-only); a base or queries of another type (such as
    float16) is converted to float32 in memory. The metric is "euclidean" unless a metric.txt
    or stats.json (its "metric" key) in the folder names another; metric.txt comes first.

    Parameters
    ----------
    path : str or os.PathLike
        The folder.

    Returns
    -------
    Dataset
        Named after the folder; queries of shape (0, d) without queries.npy, ground truth as
        stored or None without its files.

    Raises
    ------
    FileNotFoundError
        `path` is not a folder, or it holds no base.npy.
    DatasetError
        A file is malformed or not 2-D, the queries and base differ in dimensions, gt_ids.npy
        has another number of rows than the queries, or the metric named is unknown.

    See Also
    --------
    load_folder : Also takes folders of other formats.

    Examples
    --------
    >>> import os
    >>> import numpy as np
    >>> from chassis.datasets import clustered, ground_truth, load_npy_folder
    >>> base, queries = clustered(1_000, 16, 10)
    >>> ids, dist = ground_truth(base, queries, k=10)
    >>> os.makedirs("demo", exist_ok=True)  # doctest: +SKIP
    >>> np.save("demo/base.npy", base)  # doctest: +SKIP
    >>> np.save("demo/queries.npy", queries)  # doctest: +SKIP
    >>> np.save("demo/gt_ids.npy", ids)  # doctest: +SKIP
    >>> np.save("demo/gt_dist.npy", dist)  # doctest: +SKIP
    >>> load_npy_folder("demo")  # doctest: +SKIP
    Dataset('demo', base=(1000, 16), queries=(10, 16), ground truth top-10, metric='euclidean')
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder with base.npy and queries.npy")
    base = _load_float32(folder / "base.npy")
    queries = (
        _load_float32(folder / "queries.npy")
        if (folder / "queries.npy").exists()
        else _empty_map((0, base.shape[1]), np.dtype(np.float32))
    )
    if base.shape[1] != queries.shape[1]:
        raise DatasetError(
            folder / "queries.npy",
            f"queries have {queries.shape[1]} dimensions but base.npy has {base.shape[1]}",
        )

    gt_ids = gt_dist = None
    if (folder / "gt_ids.npy").exists():
        gt_ids = _npy_matrix(folder / "gt_ids.npy")
        if gt_ids.shape[0] != queries.shape[0]:
            raise DatasetError(
                folder / "gt_ids.npy", f"{gt_ids.shape[0]} rows for {len(queries)} queries"
            )
    if (folder / "gt_dist.npy").exists():
        gt_dist = _npy_matrix(folder / "gt_dist.npy")

    return Dataset(folder.name, base, queries, gt_ids, gt_dist, _folder_metric(folder))


def _folder_metric(folder: Path) -> str:
    metric = "euclidean"
    if (folder / "metric.txt").exists():
        metric = (folder / "metric.txt").read_text().strip()
    elif (folder / "stats.json").exists():
        try:
            metric = json.loads((folder / "stats.json").read_text()).get("metric", metric)
        except (ValueError, AttributeError):
            pass
    canon = _canonical_metric(metric)
    if canon is None:
        raise DatasetError(folder, f"names metric {metric!r}; expected one of {_METRICS}")
    return canon


def _canonical_metric(name: Any) -> str | None:
    aliases = {
        "euclidean": "euclidean",
        "l2": "euclidean",
        "cosine": "cosine",
        "angular": "cosine",
        "cos": "cosine",
        "inner_product": "inner_product",
        "ip": "inner_product",
        "dot": "inner_product",
    }
    if isinstance(name, bytes):
        name = name.decode()
    return aliases.get(str(name).strip().lower())


# in this order: a "query_groundtruth" file is ground truth, not queries
_ROLES = {
    "truth": ("groundtruth", "ground_truth", "gt", "neighbors", "truth"),
    "queries": ("query", "queries", "test"),
    "base": ("base", "train"),
}


def load_folder(path: _PathLike) -> Dataset:
    """Load a folder as a `Dataset`, finding each file's role from its name.

    A folder with base.npy is read by `load_npy_folder`. Otherwise its files of any
    single-array format say their role by name: `*base*` (or `*train*`) for the base,
    `*query*` (or `*queries*`, `*test*`) for the queries and optionally `*groundtruth*` (or
    `*ground_truth*`, `*gt*`, `*neighbors*`, `*truth*`) for the ground truth, such as texmex's
    sift_base.fvecs, sift_query.fvecs and sift_groundtruth.ivecs. A word of three letters or
    fewer must be a whole part of the name between "_", "-" or "."; a longer one may appear
    anywhere. Roles are given in the order ground truth, queries, base, so that
    sift_query_groundtruth.ivecs is ground truth; a name holding "dist" is never ground truth,
    and files named `*learn*` are ignored. A big-ann ground-truth `.ibin` gives distances as
    well as ids. The metric is read as `load_npy_folder` reads it.

    Parameters
    ----------
    path : str or os.PathLike
        The folder.

    Returns
    -------
    Dataset
        Named after the folder; queries of shape (0, d) when no file is named for them, no
        ground truth when no file is named for it.

    Raises
    ------
    FileNotFoundError
        `path` is not a folder.
    DatasetError
        No file is named for the base, several are named for one role, a file is malformed,
        or the files' shapes do not match.

    See Also
    --------
    load_npy_folder : The base.npy layout.
    load : Takes a folder, an HDF5 file or a single-array file.

    Examples
    --------
    >>> import os
    >>> from chassis.datasets import clustered, ground_truth, load_folder, write
    >>> base, queries = clustered(1_000, 16, 10)
    >>> ids, _ = ground_truth(base, queries, k=10)
    >>> os.makedirs("tiny", exist_ok=True)  # doctest: +SKIP
    >>> write("tiny/tiny_base.fvecs", base)  # doctest: +SKIP
    >>> write("tiny/tiny_query.fvecs", queries)  # doctest: +SKIP
    >>> write("tiny/tiny_groundtruth.ivecs", ids)  # doctest: +SKIP
    >>> load_folder("tiny")  # doctest: +SKIP
    Dataset('tiny', base=(1000, 16), queries=(10, 16), ground truth top-10, metric='euclidean')
    """
    folder = Path(path)
    if (folder / "base.npy").exists():
        return load_npy_folder(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    files = [
        f
        for f in sorted(folder.iterdir())
        if f.is_file() and f.suffix.lower() in ARRAY_EXTENSIONS and "learn" not in f.stem.lower()
    ]
    found: dict[str, Path] = {}
    for role, words in _ROLES.items():
        matches = [
            f
            for f in files
            if _has_word(f.stem.lower(), words)
            and f not in found.values()
            and not (role == "truth" and "dist" in f.stem.lower())  # gt_dist: distances, not ids
        ]
        if len(matches) > 1:
            names = ", ".join(m.name for m in matches)
            raise DatasetError(folder, f"several files could be the {role}: {names}")
        if matches:
            found[role] = matches[0]
    if "base" not in found:
        raise DatasetError(
            folder,
            "no base vectors: expected base.npy, or a *base* / *train* file of "
            + ", ".join(ARRAY_EXTENSIONS),
        )
    base = _float32(_matrix(found["base"]))
    if "queries" in found:
        queries = _float32(_matrix(found["queries"]))
        if queries.shape[1] != base.shape[1]:
            raise DatasetError(
                found["queries"], f"{queries.shape[1]} dimensions, the base has {base.shape[1]}"
            )
    else:
        queries = _empty_map((0, base.shape[1]), np.dtype(np.float32))
    gt_ids = gt_dist = None
    if "truth" in found:
        if found["truth"].suffix.lower() == ".ibin" and _is_bin_ground_truth(found["truth"]):
            gt_ids, gt_dist = read_bin_ground_truth(found["truth"])
        else:
            gt_ids = _matrix(found["truth"])
        if gt_ids.shape[0] != queries.shape[0]:
            raise DatasetError(
                found["truth"], f"{gt_ids.shape[0]} rows of ground truth for {len(queries)} queries"
            )
    return Dataset(folder.name, base, queries, gt_ids, gt_dist, _folder_metric(folder))


def _has_word(stem: str, words: tuple[str, ...]) -> bool:
    parts = stem.replace("-", "_").replace(".", "_").split("_")
    return any(w in parts or (len(w) > 3 and w in stem) for w in words)


def _is_bin_ground_truth(p: Path) -> bool:
    n, k, size = _bin_header(p)
    return size == 8 + 8 * n * k and n * k > 0


def _matrix(p: Path) -> np.ndarray:
    array = read(p)
    if array.ndim != 2:
        raise DatasetError(p, f"holds an array of shape {array.shape}, not (count, dimensions)")
    return array


# ====================================================================== HDF5 (ann-benchmarks)
def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise ImportError(
            "reading or writing HDF5 needs h5py: pip install h5py (or chassis-index[hdf5])"
        ) from None
    return h5py


def _h5_array(p: Path, ds: Any, mmap: bool) -> np.ndarray:
    """A dataset of an open HDF5 file as an array: memory-mapped when stored contiguous and
    unfiltered (as ann-benchmarks writes them), else read into memory."""
    if mmap and ds.chunks is None and not ds.compression and ds.size:
        offset = ds.id.get_offset()
        if offset is not None and ds.dtype.isnative:
            return np.memmap(p, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape)
    return ds[()]


def read_hdf5(path: _PathLike, *, mmap: bool = True) -> Dataset:
    """Read an ann-benchmarks HDF5 file as a `Dataset`.

    Its data sets are `train` (the base), `test` (the queries), and optionally `neighbors` and
    `distances` (the ground truth); its attribute `distance` names the metric ("euclidean",
    "angular" -> cosine, "dot" or "ip" -> inner_product; euclidean when it is missing). Needs
    h5py.

    Parameters
    ----------
    path : str or os.PathLike
        The file (`.hdf5` or `.h5`).
    mmap : bool, default: True
        Memory-map the data sets stored contiguous and unfiltered in native byte order (as
        ann-benchmarks writes them); the others, and all with ``mmap=False``, are read into
        memory.

    Returns
    -------
    Dataset
        Named after the file's stem; `train` and `test` as float32 (converted in memory when
        stored otherwise), `neighbors` and `distances` as stored, or None when missing.

    Raises
    ------
    ImportError
        h5py is not installed.
    FileNotFoundError
        No file at `path`.
    DatasetError
        The file is not HDF5, lacks `train` or `test`, names an unknown distance, or holds
        arrays whose shapes do not match.

    See Also
    --------
    write_hdf5 : The writer.
    load : Reads `.hdf5` and `.h5` files with this function.
    """
    h5py = _h5py()
    p = Path(path)
    _size(p)
    try:
        f = h5py.File(p, "r")
    except OSError as exc:
        raise DatasetError(p, f"not a readable HDF5 file: {exc}", 0) from None
    with f:
        for name in ("train", "test"):
            if name not in f:
                raise DatasetError(
                    p, f"no {name!r} data set (found: {', '.join(f.keys()) or 'none'})"
                )
        metric_attr = f.attrs.get("distance", "euclidean")
        metric = _canonical_metric(metric_attr)
        if metric is None:
            raise DatasetError(p, f"distance {metric_attr!r} is not one of euclidean, angular, dot")
        arrays = {
            name: _h5_array(p, f[name], mmap)
            for name in ("train", "test", "neighbors", "distances")
            if name in f
        }
    for name in ("train", "test"):
        if arrays[name].ndim != 2:
            raise DatasetError(
                p, f"{name!r} has shape {arrays[name].shape}, not (count, dimensions)"
            )
    base, queries = _float32(arrays["train"]), _float32(arrays["test"])
    if base.shape[1] != queries.shape[1]:
        raise DatasetError(p, f"'test' has {queries.shape[1]} dimensions, 'train' {base.shape[1]}")
    gt_ids, gt_dist = arrays.get("neighbors"), arrays.get("distances")
    if gt_ids is not None and gt_ids.shape[0] != queries.shape[0]:
        raise DatasetError(
            p, f"'neighbors' has {gt_ids.shape[0]} rows for {queries.shape[0]} queries"
        )
    return Dataset(p.stem, base, queries, gt_ids, gt_dist, metric)


def write_hdf5(
    path: _PathLike,
    train: npt.ArrayLike,
    test: npt.ArrayLike,
    neighbors: npt.ArrayLike | None = None,
    distances: npt.ArrayLike | None = None,
    metric: str = "euclidean",
) -> None:
    """Write an ann-benchmarks style HDF5 file.

    The data sets are contiguous, so `read_hdf5` maps them: `train` and `test` as float32,
    `neighbors` as int32, `distances` as float32. The attribute `distance` is "euclidean",
    "angular" or "dot" (ann-benchmarks' names); `dimension` and `point_type` are written too.
    Needs h5py. The file is replaced.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    train : array_like
        (n, d) base vectors.
    test : array_like
        (q, d) queries.
    neighbors : array_like or None, default: None
        (q, k) ids of each query's nearest neighbours, or None to leave them out.
    distances : array_like or None, default: None
        (q, k) their distances, or None to leave them out.
    metric : str, default: "euclidean"
        "euclidean", "cosine" or "inner_product", or an alias ("l2", "cos", "angular", "ip",
        "dot").

    Raises
    ------
    ImportError
        h5py is not installed.
    ValueError
        `metric` is not a known metric.

    See Also
    --------
    read_hdf5 : The reader.

    Examples
    --------
    >>> from chassis.datasets import clustered, ground_truth, read_hdf5, write_hdf5
    >>> base, queries = clustered(1_000, 16, 10)
    >>> ids, dist = ground_truth(base, queries, k=10)
    >>> write_hdf5("demo.hdf5", base, queries, ids, dist)  # doctest: +SKIP
    >>> read_hdf5("demo.hdf5")  # doctest: +SKIP
    Dataset('demo', base=(1000, 16), queries=(10, 16), ground truth top-10, metric='euclidean')
    """
    h5py = _h5py()
    canon = _canonical_metric(metric)
    if canon is None:
        raise ValueError(f"metric is {metric!r}, expected one of {_METRICS}")
    name = {"euclidean": "euclidean", "cosine": "angular", "inner_product": "dot"}[canon]
    train_arr = np.asarray(train, dtype=np.float32)
    with h5py.File(Path(path), "w") as f:
        f.attrs["distance"] = name
        f.attrs["dimension"] = int(train_arr.shape[1])
        f.attrs["point_type"] = "float"
        f.create_dataset("train", data=train_arr)
        f.create_dataset("test", data=np.asarray(test, dtype=np.float32))
        if neighbors is not None:
            f.create_dataset("neighbors", data=np.asarray(neighbors, dtype=np.int32))
        if distances is not None:
            f.create_dataset("distances", data=np.asarray(distances, dtype=np.float32))


# ====================================================================== dispatch
_READERS: dict[str, Callable[..., np.ndarray]] = {
    ".fvecs": read_fvecs,
    ".ivecs": read_ivecs,
    ".bvecs": read_bvecs,
    ".fbin": read_fbin,
    ".ibin": read_ibin,
    ".u8bin": read_u8bin,
    ".i8bin": read_i8bin,
    ".npy": read_npy,
}
_WRITERS: dict[str, Callable[[_PathLike, npt.ArrayLike], None]] = {
    ".fvecs": write_fvecs,
    ".ivecs": write_ivecs,
    ".bvecs": write_bvecs,
    ".fbin": write_fbin,
    ".ibin": write_ibin,
    ".u8bin": write_u8bin,
    ".i8bin": write_i8bin,
    ".npy": write_npy,
}


def read(path: _PathLike, *, mmap: bool = True) -> np.ndarray:
    """Read the array of a single-array file, in its stored type, choosing the format by extension.

    The extensions are .fvecs .ivecs .bvecs .fbin .ibin .u8bin .i8bin .npy (in any case).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mmap : bool, default: True
        Return a read-only memory map rather than read the file into memory (a writable array).

    Returns
    -------
    numpy.ndarray
        (n, d) for the texmex and big-ann formats; any shape for `.npy`.

    Raises
    ------
    FileNotFoundError
        No file at `path`.
    DatasetError
        The extension is none of the above, or the file is not what its format says.

    See Also
    --------
    write : The writer.
    load : Read a file, a folder or an HDF5 file as a `Dataset`.

    Examples
    --------
    >>> from chassis.datasets import read, write
    >>> write("example.u8bin", [[1, 2, 3], [4, 5, 6]])  # doctest: +SKIP
    >>> read("example.u8bin")  # doctest: +SKIP
    memmap([[1, 2, 3],
            [4, 5, 6]], dtype=uint8)
    """
    p = Path(path)
    reader = _READERS.get(p.suffix.lower())
    if reader is None:
        raise DatasetError(p, f"unknown extension {p.suffix!r}; known: {', '.join(_READERS)}")
    return reader(p, mmap=mmap)


def write(path: _PathLike, array: npt.ArrayLike) -> None:
    """Write a 2-D array in the format its extension names.

    The extensions are those `read` knows. Values are converted to the format's type when they
    fit: integer formats refuse floats and values out of range, float formats take any numeric
    values (rounded to float32; a finite value beyond its range is refused); `.npy` stores
    the array as it is.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced).
    array : array_like
        (n, d) values (any shape for `.npy`).

    Raises
    ------
    DatasetError
        The extension is not one `read` knows, `array` is not 2-D, or its values do not fit
        the format's type.

    See Also
    --------
    read : The reader.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import read, write
    >>> write("example.ibin", np.arange(6).reshape(3, 2))  # doctest: +SKIP
    >>> read("example.ibin", mmap=False)  # doctest: +SKIP
    array([[0, 1],
           [2, 3],
           [4, 5]], dtype=int32)
    """
    p = Path(path)
    writer = _WRITERS.get(p.suffix.lower())
    if writer is None:
        raise DatasetError(p, f"unknown extension {p.suffix!r}; known: {', '.join(_WRITERS)}")
    writer(p, array)


def load(path: _PathLike) -> Dataset:
    """Load a `Dataset` from a folder, an HDF5 file or a single-array file.

    A folder: see `load_folder`. `.hdf5` / `.h5`: see `read_hdf5`. A single-array file
    (.fvecs, .bvecs, .fbin, .u8bin, .npy, ...): its rows are the base, with no queries and no
    ground truth (split queries off or read them from another file yourself). Bases stored as
    float32 stay memory-mapped; other types are converted to float32 in memory.

    Parameters
    ----------
    path : str or os.PathLike
        The folder or file.

    Returns
    -------
    Dataset
        The data set, named after the folder or the file's stem.

    Raises
    ------
    FileNotFoundError
        Nothing at `path`.
    DatasetError
        The extension is not known, or a file is not what its format says.
    ImportError
        An HDF5 file, and h5py is not installed.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import load, write
    >>> write("vectors.fbin", np.random.rand(100, 8))  # doctest: +SKIP
    >>> load("vectors.fbin")  # doctest: +SKIP
    Dataset('vectors', base=(100, 8), queries=(0, 8), ground truth none, metric='euclidean')
    """
    p = Path(path)
    if p.is_dir():
        return load_folder(p)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.suffix.lower() in HDF5_EXTENSIONS:
        return read_hdf5(p)
    base = _float32(_matrix(p))
    return Dataset(p.stem, base, _empty_map((0, base.shape[1]), np.dtype(np.float32)), None, None)


# ====================================================================== generated data
def clustered(
    n: int,
    dims: int,
    n_queries: int,
    clusters: int = 64,
    seed: int = 0,
    spread: float = 0.35,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Generate `n` base vectors and `n_queries` queries from one Gaussian mixture, as float32.

    Cluster centres are standard normal; each cluster has its own width, between 0.5x and 1.5x
    `spread` times the typical distance between centres, and its own share of the points, so
    the data has dense and sparse regions as embeddings do. Queries are fresh draws from the
    same mixture. Same arguments, same arrays.

    Parameters
    ----------
    n : int
        Base vectors, at least 1.
    dims : int
        Dimensions, at least 1.
    n_queries : int
        Queries, 0 or more.
    clusters : int, default: 64
        Clusters in the mixture, at least 1.
    seed : int, default: 0
        Seed of the random generator.
    spread : float, default: 0.35
        Cluster width relative to the typical distance between centres (on average; each
        cluster's is 0.5x to 1.5x this).

    Returns
    -------
    base : numpy.ndarray
        (n, dims) float32.
    queries : numpy.ndarray
        (n_queries, dims) float32.

    Raises
    ------
    ValueError
        `n`, `dims` or `clusters` is below 1, or `n_queries` below 0.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import clustered
    >>> base, queries = clustered(1_000, 32, 10, seed=1)
    >>> base.shape, queries.shape, base.dtype
    ((1000, 32), (10, 32), dtype('float32'))
    >>> np.array_equal(clustered(1_000, 32, 10, seed=1)[0], base)
    True
    """
    if n < 1 or dims < 1 or n_queries < 0 or clusters < 1:
        raise ValueError("n, dims and clusters must be positive and n_queries non-negative")
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dims), dtype=np.float32)
    # per-axis standard deviation: centres are ~sqrt(2 * dims) apart, a point ~sqrt(dims) * sigma
    # from its centre, so sigma = spread * sqrt(2) puts it at `spread` of the inter-centre distance
    widths = (spread * np.sqrt(2.0) * rng.uniform(0.5, 1.5, clusters)).astype(np.float32)
    weights = rng.dirichlet(np.full(clusters, 2.0))

    def draw(count: int) -> npt.NDArray[np.float32]:
        out = np.empty((count, dims), dtype=np.float32)
        step = 65_536  # generate in chunks to keep temporaries small
        for start in range(0, count, step):
            stop = min(count, start + step)
            which = rng.choice(clusters, size=stop - start, p=weights)
            noise = rng.standard_normal((stop - start, dims), dtype=np.float32)
            out[start:stop] = centres[which] + noise * widths[which, None]
        return out

    return draw(n), draw(n_queries)


# ====================================================================== exact k-NN
def _as_f32(block: npt.ArrayLike) -> npt.NDArray[np.float32]:
    return np.ascontiguousarray(block, dtype=np.float32)


def _normalized(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(x, axis=1, keepdims=True).astype(np.float32)
    norms[norms == 0] = 1.0  # zero rows stay zero
    return np.asarray(x / norms, dtype=np.float32)


def _progress_bar(enabled: bool, total: int, desc: str) -> Any:
    if not enabled:
        return None
    try:  # the bar every progress=True of chassis uses (tqdm's text bar in Jupyter without
        # ipywidgets, without tqdm.auto's warning there)
        from chassis._progress import progress_bar
    except ImportError:  # this file loaded by path, before the extension is built
        try:
            from tqdm.std import tqdm
        except ImportError:
            return None
        return tqdm(total=total, desc=desc, unit="vec", unit_scale=True, leave=False)
    return progress_bar(total, desc=desc, unit="vec", unit_scale=True, leave=False)


def ground_truth(
    base: npt.ArrayLike,
    queries: npt.ArrayLike,
    k: int,
    metric: str = "euclidean",
    block: int = 16_384,
    *,
    progress: bool = False,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Find the exact k nearest neighbours of each query by brute force.

    Distances: "euclidean" the L2 distance (not squared), "cosine" 1 - cos, "inner_product"
    minus the dot product. Nearest first, ties to the lower id. Where the base has fewer than
    k vectors, rows are padded with id -1 and distance inf.

    Work is blocked: `block` base rows against up to 1,024 queries at a time, so memory stays
    near 4 * 1024 * `block` bytes whatever the sizes, and a memory-mapped base (of any numeric
    type: it is converted block by block) is read once per 1,024 queries. Candidates are found
    with float32 matrix products (BLAS), then their distances are recomputed directly in
    float64, which removes the rounding of the |q|^2 - 2 q.b + |b|^2 form from the final
    order.

    Parameters
    ----------
    base : array_like
        (n, d) base vectors of any numeric type; row i has id i. A memory map is read in
        blocks.
    queries : array_like
        (q, d) queries.
    k : int
        Neighbours per query, at least 1.
    metric : {"euclidean", "cosine", "inner_product"}, default: "euclidean"
        The distance (exactly one of these names; no aliases).
    block : int, default: 16384
        Base rows per block, at least 1.
    progress : bool, default: False
        Show a tqdm progress bar when tqdm is installed.

    Returns
    -------
    ids : numpy.ndarray
        (q, k) int64 ids, nearest first.
    distances : numpy.ndarray
        (q, k) float32 distances.

    Raises
    ------
    ValueError
        `metric` is not one of the three names, `k` or `block` is below 1, or `base` and
        `queries` are not two (n, d) matrices of the same d.

    See Also
    --------
    recall_at_k : Score a search against these ids.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import ground_truth
    >>> base = np.array([[0, 0], [3, 4], [1, 0]], dtype=np.float32)
    >>> ids, dist = ground_truth(base, np.array([[0, 0]]), k=4)
    >>> ids
    array([[ 0,  2,  1, -1]])
    >>> dist
    array([[ 0.,  1.,  5., inf]], dtype=float32)
    """
    if metric not in _METRICS:
        raise ValueError(f"metric is {metric!r}, expected one of {_METRICS}")
    if k < 1 or block < 1:
        raise ValueError("k and block must be at least 1")
    base_arr = base if isinstance(base, np.ndarray) else np.asarray(base)
    q_all = _as_f32(queries)
    if q_all.ndim != 2 or base_arr.ndim != 2 or q_all.shape[1] != base_arr.shape[1]:
        raise ValueError(f"shapes {base_arr.shape} and {q_all.shape} are not two (n, d) matrices")
    n, nq = base_arr.shape[0], q_all.shape[0]
    kk = min(k, n)
    # a few spare candidates so near-ties reordered by the exact pass are not lost
    spare = min(n, kk + max(8, kk // 4))

    out_ids = np.full((nq, k), -1, dtype=np.int64)
    out_dist = np.full((nq, k), np.inf, dtype=np.float32)
    if n == 0 or nq == 0:
        return out_ids, out_dist
    if metric == "cosine":
        q_all = _normalized(q_all)

    q_step = 1_024
    bar = _progress_bar(progress, n * -(-nq // q_step), "ground truth")
    try:
        for q0 in range(0, nq, q_step):
            q = q_all[q0 : q0 + q_step]
            best_d = np.full((len(q), 0), np.inf, dtype=np.float32)
            best_i = np.zeros((len(q), 0), dtype=np.int64)
            for b0 in range(0, n, block):
                b = _as_f32(base_arr[b0 : b0 + block])
                if metric == "cosine":
                    b = _normalized(b)
                dots = q @ b.T
                if metric == "euclidean":
                    # a monotone stand-in for the distance: |b|^2 - 2 q.b (|q|^2 is per row)
                    scores = np.einsum("ij,ij->i", b, b)[None, :] - 2.0 * dots
                else:
                    scores = -dots
                ids = np.arange(b0, b0 + len(b), dtype=np.int64)
                if scores.shape[1] > spare:  # keep only this block's best before merging
                    part = np.argpartition(scores, spare - 1, axis=1)[:, :spare]
                    scores = np.take_along_axis(scores, part, axis=1)
                    block_ids = ids[part]
                else:
                    block_ids = np.broadcast_to(ids, scores.shape)
                best_d = np.concatenate([best_d, scores], axis=1)
                best_i = np.concatenate([best_i, block_ids], axis=1)
                if best_d.shape[1] > spare:
                    part = np.argpartition(best_d, spare - 1, axis=1)[:, :spare]
                    best_d = np.take_along_axis(best_d, part, axis=1)
                    best_i = np.take_along_axis(best_i, part, axis=1)
                if bar is not None:
                    bar.update(len(b))

            exact = _exact_distances(base_arr, q, best_i, metric)
            order = np.lexsort((best_i, exact), axis=1)[:, :kk]
            out_ids[q0 : q0 + len(q), :kk] = np.take_along_axis(best_i, order, axis=1)
            out_dist[q0 : q0 + len(q), :kk] = np.take_along_axis(exact, order, axis=1)
    finally:
        if bar is not None:
            bar.close()
    return out_ids, out_dist


def _exact_distances(
    base: npt.NDArray, q: npt.NDArray[np.float32], cand: npt.NDArray[np.int64], metric: str
) -> npt.NDArray[np.float64]:
    """Distances from each query row to its candidate base rows, computed in float64, a few
    queries at a time so the (queries, candidates, dimensions) temporaries stay near 32 MiB."""
    out = np.empty(cand.shape, dtype=np.float64)
    per_query = max(1, cand.shape[1] * q.shape[1])
    step = max(1, (4 << 20) // per_query)
    for r0 in range(0, len(q), step):
        c = cand[r0 : r0 + step]
        flat = np.unique(c)
        rows = np.asarray(base[flat], dtype=np.float64)  # gather once; works on memory maps
        vecs = rows[np.searchsorted(flat, c)]  # (q, c, d)
        qd = q[r0 : r0 + step].astype(np.float64)[:, None, :]
        if metric == "euclidean":
            out[r0 : r0 + step] = np.sqrt(((vecs - qd) ** 2).sum(axis=2))
        elif metric == "cosine":
            norms = np.linalg.norm(vecs, axis=2)
            norms[norms == 0] = 1.0
            out[r0 : r0 + step] = 1.0 - (vecs * qd).sum(axis=2) / norms  # queries normalised
        else:
            out[r0 : r0 + step] = -(vecs * qd).sum(axis=2)
    return out


# ====================================================================== recall
def recall_at_k(found_ids: npt.ArrayLike, truth_ids: npt.ArrayLike, k: int) -> float:
    """Compute the mean over queries of the fraction of the true k nearest found in the first k.

    Each true id counts once, however often it is returned. Padding ids (2**64 - 1 from
    `VectorIndex.search_batch`, -1 from `ground_truth`) never match. Each row counts out of
    k, so where the ground truth itself is padded (a base of fewer than k vectors) recall
    stays below 1.

    Parameters
    ----------
    found_ids : array_like
        (q, m) ids a search returned, nearest first; the first k columns count.
    truth_ids : array_like
        (q, K) true ids, nearest first, K at least k; the first k columns count.
    k : int
        At least 1.

    Returns
    -------
    float
        Recall from 0 to 1; 0.0 when there are no queries.

    Raises
    ------
    ValueError
        `k` is below 1, the ids are not 2-D, their row counts differ, or `truth_ids` has
        fewer than k columns.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import recall_at_k
    >>> truth = np.array([[0, 1, 2], [3, 4, 5]])
    >>> found = np.array([[0, 2, 9], [5, 4, 3]])
    >>> recall_at_k(found, truth, k=3)
    0.8333333333333334

    With an index (in memory here):

    >>> import chassis
    >>> from chassis.datasets import clustered, ground_truth
    >>> base, queries = clustered(2_000, 16, 20)
    >>> truth, _ = ground_truth(base, queries, k=10)
    >>> index = chassis.VectorIndex(None, 16)
    >>> ids = index.add_batch(base)
    >>> found, _ = index.search_batch(queries, k=10)
    >>> recall_at_k(found, truth, k=10) > 0.9
    True
    """
    if k < 1:
        raise ValueError(f"k is {k}, must be at least 1")
    found = _as_int64_ids(found_ids)[:, :k]
    truth = _as_int64_ids(truth_ids)[:, :k]
    if found.shape[0] != truth.shape[0]:
        raise ValueError(f"{found.shape[0]} result rows for {truth.shape[0]} ground-truth rows")
    if truth.shape[1] < k:
        raise ValueError(f"ground truth has {truth.shape[1]} columns, fewer than k={k}")
    if found.shape[0] == 0:
        return 0.0
    hits = 0
    step = max(1, 4_000_000 // (k * k))  # bound the (rows, k, k) comparison
    for r0 in range(0, found.shape[0], step):
        f, t = found[r0 : r0 + step], truth[r0 : r0 + step]
        # a true id returned twice counts once: compare each true id with all found ones
        match = (t[:, :, None] == f[:, None, :]).any(axis=2) & (t >= 0)
        hits += int(match.sum())
    return hits / (found.shape[0] * k)


def _as_int64_ids(ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(ids)
    if arr.ndim != 2:
        raise ValueError(f"ids must be a (queries, k) matrix, not shape {arr.shape}")
    if arr.dtype == np.uint64:
        return arr.view(np.int64)  # 2**64 - 1 (no result) becomes -1
    return arr.astype(np.int64, copy=False)
