"""`IndexReader`: the read side of an index, in any process, without the writer lock."""

from __future__ import annotations

import os
from typing import Any, NoReturn

from chassis._chassis import VectorIndex


class IndexReader(VectorIndex):
    """Open an existing index for searching, without the writer's lock.

    Since a reader takes no lock, any number of readers (in this and other processes) search
    while one writer writes. Metric, precision and dimensions come from the file. Every call
    works on the newest flush at the moment it starts (it never sees unflushed or
    half-flushed adds), maps what the writer appended since, and follows the path to a new
    file when one is renamed over it (a compaction). `snapshot()` pins one state across
    several calls. Writes raise `ReadOnlyError`.

    ``IndexReader(path)`` is the same as ``VectorIndex(path, read_only=True)``.

    Parameters
    ----------
    path : str or os.PathLike
        The index file, which must exist.
    options : IndexOptions or dict or None, default: None
        Parameters of this open: ``ef_search``, ``huge_pages`` and ``warm`` apply, while
        ``max_connections``, ``metric`` and ``precision`` are taken from the file (the values
        given are checked, then ignored). None: the ``ef_search`` stored in the file, no warm
        and no huge pages.

    Raises
    ------
    IndexNotFoundError
        No file at `path` (it is also a `FileNotFoundError`).
    NotAnIndexError
        The file is not a Chassis index (it is also a `ValueError`).
    InvalidArgumentError
        `options` holds a bad value (see `IndexOptions`).

    See Also
    --------
    VectorIndex : The writer, and its methods that readers share.
    VectorIndex.load : Copy an index into memory.

    Examples
    --------
    >>> import numpy as np, chassis
    >>> with chassis.VectorIndex("vectors.chassis", 4) as writer:  # doctest: +SKIP
    ...     ids = writer.add_batch(np.random.rand(100, 4).astype(np.float32))
    >>> reader = chassis.IndexReader("vectors.chassis")  # doctest: +SKIP
    >>> hits = reader.search(np.random.rand(4).astype(np.float32), k=5)  # doctest: +SKIP
    >>> reader.add(np.zeros(4, dtype=np.float32))  # doctest: +SKIP
    Traceback (most recent call last):
        ...
    chassis.ReadOnlyError: this index is open read-only
    help: open it with VectorIndex(path) to write
    """

    def __new__(cls, path: str | os.PathLike[str], options: Any = None) -> IndexReader:
        return super().__new__(cls, path, None, options, True)

    @staticmethod
    def load(*args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[override]
        """Not available on readers: always raises `TypeError`.

        ``VectorIndex.load(path)`` copies an index into memory (a writer of its own);
        ``IndexReader(path)`` maps it, which reads nothing.

        Parameters
        ----------
        *args, **kwargs
            Ignored.

        Raises
        ------
        TypeError
            Always, naming `VectorIndex.load` and `IndexReader` as the alternatives.
        """
        raise TypeError(
            "IndexReader.load is not available: use chassis.VectorIndex.load(path) to copy an "
            "index into memory, or IndexReader(path) to search the file"
        )
