"""texmex files (`.fvecs`, `.ivecs`, `.bvecs`): per row an int32 d, then d values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._base import DatasetError, _as_2d, _cast_for, _empty_map, _PathLike, _size


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
    beyond its range is refused rather than made infinite). The file is replaced.

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
