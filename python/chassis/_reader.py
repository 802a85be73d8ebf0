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
