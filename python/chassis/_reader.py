"""`IndexReader`: the read side of an index, in any process, without the writer lock."""

from __future__ import annotations

import os
from typing import Any

from chassis._chassis import VectorIndex


class IndexReader(VectorIndex):
    """Open an existing index for searching: no lock, so any number of readers (in this and
    other processes) search while one writer writes.

    Metric, precision and dimensions come from the file; a missing file raises
    `IndexNotFoundError`. Every call works on the newest flush at the moment it starts (it
    never sees unflushed or half-flushed adds), maps what the writer appended since, and
    follows the path to a new file when one is renamed over it (a compaction). `snapshot()`
    pins one state across several calls. Writes raise `ReadOnlyError`.

    ``IndexReader(path)`` is the same as ``VectorIndex(path, read_only=True)``.
    """

    def __new__(cls, path: str | os.PathLike[str], options: Any = None) -> IndexReader:
        return super().__new__(cls, path, None, options, True)

    @staticmethod
    def load(*args: Any, **kwargs: Any) -> VectorIndex:  # type: ignore[override]
        """Not for readers: ``VectorIndex.load(path)`` copies an index into memory (a writer
        of its own); ``IndexReader(path)`` maps it, which reads nothing."""
        raise TypeError(
            "IndexReader.load is not available: use chassis.VectorIndex.load(path) to copy an "
            "index into memory, or IndexReader(path) to search the file"
        )
