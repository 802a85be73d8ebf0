"""big-ann files (`.fbin`, `.ibin`, `.u8bin`, `.i8bin`): uint32 n, uint32 d, then n x d values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._base import DatasetError, _as_2d, _cast_for, _empty_map, _PathLike, _size


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
        (n, d) values of `dtype`: a read-only `np.memmap` from byte 8, or with ``mmap=False``
        an array in memory.

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

    The values are converted as `write_vecs` converts them (never a float to an integer type,
    never a value out of range, never a finite value made infinite); the file is replaced.

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
