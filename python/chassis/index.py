"""The index classes, also importable from here (as from ``chassisdb.index``)."""

from chassis._chassis import SearchResult, VectorIndex  # noqa: F401
from chassis._options import IndexOptions  # noqa: F401
from chassis._reader import IndexReader  # noqa: F401
