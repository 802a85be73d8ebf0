"""One array by its extension (`read`, `write`), and whole data sets from a file or a folder (`load`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._base import (
    _METRICS,
    ARRAY_EXTENSIONS,
    BIN_TYPES,
    HDF5_EXTENSIONS,
    VECS_TYPES,
    Dataset,
    DatasetError,
    _canonical_metric,
    _empty_map,
    _float32,
    _PathLike,
)
from ._bin import _bin_header, read_bin, read_bin_ground_truth, write_bin
from ._hdf5 import read_hdf5
from ._npy import read_npy, write_npy
from ._vecs import read_vecs, write_vecs


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
    extension = p.suffix.lower()
    if extension in VECS_TYPES:
        return read_vecs(p, VECS_TYPES[extension], mmap=mmap)
    if extension in BIN_TYPES:
        return read_bin(p, BIN_TYPES[extension], mmap=mmap)
    if extension == ".npy":
        return read_npy(p, mmap=mmap)
    raise _unknown_extension(p)


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
    extension = p.suffix.lower()
    if extension in VECS_TYPES:
        write_vecs(p, array, VECS_TYPES[extension])
    elif extension in BIN_TYPES:
        write_bin(p, array, BIN_TYPES[extension])
    elif extension == ".npy":
        write_npy(p, array)
    else:
        raise _unknown_extension(p)


def _unknown_extension(p: Path) -> DatasetError:
    return DatasetError(p, f"unknown extension {p.suffix!r}; known: {', '.join(ARRAY_EXTENSIONS)}")


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
    base = _float32(_matrix(folder / "base.npy"))
    queries = (
        _float32(_matrix(folder / "queries.npy"))
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
        gt_ids = _matrix(folder / "gt_ids.npy")
        if gt_ids.shape[0] != queries.shape[0]:
            raise DatasetError(
                folder / "gt_ids.npy", f"{gt_ids.shape[0]} rows for {len(queries)} queries"
            )
    if (folder / "gt_dist.npy").exists():
        gt_dist = _matrix(folder / "gt_dist.npy")

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
        The folder, of any of the layouts above.

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
