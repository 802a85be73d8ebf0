"""The one-type names: `read_fvecs(path)` is `read_vecs(path, "<f4")`, `write_u8bin(path, a)` is
`write_bin(path, a, "u1")`, and so on for every extension of `VECS_TYPES` and `BIN_TYPES`.

Users know these names from the texmex and big-ann tools, so they stay; they are made here from
one template each rather than written out, and their documentation points to the function they
call, which says the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from ._base import BIN_TYPES, VECS_TYPES, _PathLike
from ._bin import read_bin, write_bin
from ._vecs import read_vecs, write_vecs

_S_co = TypeVar("_S_co", bound=np.generic, covariant=True)


class VecsReader(Protocol[_S_co]):
    """The signature of `read_fvecs`, `read_ivecs` and `read_bvecs`, for type checkers."""

    def __call__(
        self, path: _PathLike, *, mmap: bool = True, validate: bool = True
    ) -> npt.NDArray[_S_co]: ...


class BinReader(Protocol[_S_co]):
    """The signature of `read_fbin`, `read_ibin`, `read_u8bin` and `read_i8bin`."""

    def __call__(self, path: _PathLike, *, mmap: bool = True) -> npt.NDArray[_S_co]: ...


class Writer(Protocol):
    """The signature of the one-type writers (`write_fvecs`, `write_fbin`, ...)."""

    def __call__(self, path: _PathLike, array: npt.ArrayLike) -> None: ...


_READ_DOC = """Read an (n, d) {type} array from a `{ext}` file: ``{base}(path, "{code}")``.
{note}
Parameters
----------
path : str or os.PathLike
    The file.
mmap : bool, default: True
    Map the file (a read-only view) rather than read it into memory (a writable array).
{validate}
Returns
-------
numpy.ndarray
    (n, d) {type}.

Raises
------
FileNotFoundError
    No file at `path`.
DatasetError
    The file is not what its format says (see `{base}`); the message names the byte offset
    at fault.

See Also
--------
{base} : The same for any element type.
"""

_VALIDATE_DOC = """validate : bool, default: True
    Check every row's header against the first; the file length is always checked.
"""

_WRITE_DOC = """Write an (n, d) array as a `{ext}` file of {type} values: ``{base}(path, array, "{code}")``.

Parameters
----------
path : str or os.PathLike
    The file to write (replaced).
array : array_like
    (n, d) {values}.

Raises
------
DatasetError
    `array` is not 2-D or cannot be converted (see `{base}`).

See Also
--------
{base} : The same for any element type.
"""

# What a one-type reader says beyond the template.
_NOTES = {
    ".ivecs": "\ntexmex keeps ground truth (ids of the nearest neighbours) in this format.\n",
    ".ibin": "\nA ground-truth file (ids, then distances) reads as its ids; `read_bin_ground_truth`"
    "\nreads both.\n",
}


def _fields(extension: str, dtype: np.dtype, base: Callable[..., Any]) -> dict[str, str]:
    if dtype.kind == "f":
        values = f"numeric values, converted to {dtype.name}"
    else:
        info = np.iinfo(dtype)
        values = f"integers from {info.min} to {info.max}"
    return {
        "ext": extension,
        "type": dtype.name,
        "code": dtype.str.replace("|", ""),
        "base": base.__name__,
        "values": values,
        "note": _NOTES.get(extension, ""),
    }


def _named(function: Callable[..., Any], name: str, doc: str) -> Any:
    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    return function


def _vecs_reader(extension: str) -> VecsReader[Any]:
    dtype = VECS_TYPES[extension]

    def reader(path: _PathLike, *, mmap: bool = True, validate: bool = True) -> np.ndarray:
        return read_vecs(path, dtype, mmap=mmap, validate=validate)

    doc = _READ_DOC.format(validate=_VALIDATE_DOC, **_fields(extension, dtype, read_vecs))
    return _named(reader, f"read_{extension[1:]}", doc)


def _bin_reader(extension: str) -> BinReader[Any]:
    dtype = BIN_TYPES[extension]

    def reader(path: _PathLike, *, mmap: bool = True) -> np.ndarray:
        return read_bin(path, dtype, mmap=mmap)

    doc = _READ_DOC.format(validate="", **_fields(extension, dtype, read_bin))
    return _named(reader, f"read_{extension[1:]}", doc)


def _writer(extension: str) -> Writer:
    base, dtype = (
        (write_vecs, VECS_TYPES[extension])
        if extension in VECS_TYPES
        else (write_bin, BIN_TYPES[extension])
    )

    def writer(path: _PathLike, array: npt.ArrayLike) -> None:
        base(path, array, dtype)

    return _named(
        writer, f"write_{extension[1:]}", _WRITE_DOC.format(**_fields(extension, dtype, base))
    )


read_fvecs: VecsReader[np.float32] = _vecs_reader(".fvecs")
read_ivecs: VecsReader[np.int32] = _vecs_reader(".ivecs")
read_bvecs: VecsReader[np.uint8] = _vecs_reader(".bvecs")
read_fbin: BinReader[np.float32] = _bin_reader(".fbin")
read_ibin: BinReader[np.int32] = _bin_reader(".ibin")
read_u8bin: BinReader[np.uint8] = _bin_reader(".u8bin")
read_i8bin: BinReader[np.int8] = _bin_reader(".i8bin")
write_fvecs = _writer(".fvecs")
write_ivecs = _writer(".ivecs")
write_bvecs = _writer(".bvecs")
write_fbin = _writer(".fbin")
write_ibin = _writer(".ibin")
write_u8bin = _writer(".u8bin")
write_i8bin = _writer(".i8bin")
