"""ann-benchmarks HDF5 files (`train`, `test`, `neighbors`, `distances`); needs h5py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._base import _METRICS, Dataset, DatasetError, _canonical_metric, _float32, _PathLike, _size


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
