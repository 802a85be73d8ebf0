"""NumPy `.npy` files, checked against their length before NumPy maps them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._base import DatasetError, _PathLike, _size


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
