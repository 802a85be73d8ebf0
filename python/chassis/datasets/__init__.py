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

`read_vecs(path, dtype)` / `write_vecs(path, array, dtype)` and `read_bin(path, dtype)` /
`write_bin(path, array, dtype)` read and write those two formats for any element type; the
names the texmex and big-ann tools use are the same calls with the type fixed:

| name | is |
|---|---|
| `read_fvecs` `read_ivecs` `read_bvecs` | `read_vecs(path, "<f4" / "<i4" / "u1")` |
| `write_fvecs` `write_ivecs` `write_bvecs` | `write_vecs(path, array, "<f4" / "<i4" / "u1")` |
| `read_fbin` `read_ibin` `read_u8bin` `read_i8bin` | `read_bin(path, "<f4" / "<i4" / "u1" / "i1")` |
| `write_fbin` `write_ibin` `write_u8bin` `write_i8bin` | `write_bin(path, array, "<f4" / "<i4" / "u1" / "i1")` |

    >>> from chassis.datasets import clustered, ground_truth, recall_at_k
    >>> base, queries = clustered(10_000, 64, 100)
    >>> truth_ids, truth_dist = ground_truth(base, queries, k=10)
"""

# The extension tables, for callers that dispatch on them (chassis.bench); not in __all__.
from ._base import ARRAY_EXTENSIONS as ARRAY_EXTENSIONS
from ._base import BIN_TYPES as BIN_TYPES
from ._base import HDF5_EXTENSIONS as HDF5_EXTENSIONS
from ._base import VECS_TYPES as VECS_TYPES
from ._base import Dataset, DatasetError
from ._bin import read_bin, read_bin_ground_truth, write_bin, write_bin_ground_truth
from ._clustered import clustered
from ._files import load, load_folder, load_npy_folder, read, write
from ._hdf5 import read_hdf5, write_hdf5
from ._npy import read_npy, write_npy
from ._truth import ground_truth, recall_at_k
from ._typed import (
    read_bvecs,
    read_fbin,
    read_fvecs,
    read_i8bin,
    read_ibin,
    read_ivecs,
    read_u8bin,
    write_bvecs,
    write_fbin,
    write_fvecs,
    write_i8bin,
    write_ibin,
    write_ivecs,
    write_u8bin,
)
from ._vecs import read_vecs, write_vecs

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
