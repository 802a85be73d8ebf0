"""Chassis: an embedded vector index in one memory-mapped file.

    >>> import numpy as np, chassis
    >>> with chassis.VectorIndex("vectors.chassis", 128) as index:   # doctest: +SKIP
    ...     index.add_batch(np.random.rand(1000, 128).astype(np.float32))
    ...     hits = index.search(np.random.rand(128).astype(np.float32), k=5)

`VectorIndex` is the writer (one process at a time per file), `IndexReader` searches a file
in any process while it is written, `IndexOptions` holds construction and search parameters. Every error is a
`ChassisError` and also the built-in exception it is a kind of (`ValueError`, `OSError`, ...).
The API is a superset of chassisdb 0.10.0's: switching is a change of import.
"""

from chassis import exceptions
from chassis._chassis import (
    SearchResult,
    Snapshot,
    VectorIndex,
    __version__,
    cpu_info,
    search_plans,
)
from chassis._check import Check
from chassis._options import IndexOptions
from chassis._reader import IndexReader
from chassis.exceptions import *  # noqa: F403 (the error classes, listed there)

__all__ = [
    "Check",
    "IndexOptions",
    "IndexReader",
    "SearchResult",
    "Snapshot",
    "VectorIndex",
    "__version__",
    "cpu_info",
    "search_plans",
]
__all__ += exceptions.__all__


def __getattr__(name: str) -> object:
    # `chassis.bench` and `chassis.datasets` on first use: `import chassis` stays light.
    if name in ("bench", "datasets"):
        import importlib

        return importlib.import_module(f"chassis.{name}")
    raise AttributeError(f"module 'chassis' has no attribute {name!r}")
