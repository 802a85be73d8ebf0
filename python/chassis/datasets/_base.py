"""What every format shares: the error, the `Dataset`, the element types and the checked casts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

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


def _float32(array: np.ndarray) -> npt.NDArray[np.float32]:
    """`array` unchanged when it is float32 (a memory map stays one), else a float32 copy."""
    if array.dtype == np.float32:
        return array
    return np.ascontiguousarray(array, dtype=np.float32)


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
