"""A copy of an index file kept elsewhere, brought to a later commit by the changes
`VectorIndex._changes_since` lists (used by `chassis.ray`'s replicas; the sharded-commit
record, docs/design/sharded-commit.md)."""

from __future__ import annotations

import os


def write_changes(
    path: str | os.PathLike[str], length: int, pieces: list[tuple[int, bytes]]
) -> None:
    """Write `pieces` into the copy at `path` as a flush writes a commit: the file made
    `length` bytes long, every piece but the last (the header), a sync, then the header and a
    sync, so that a reader of the copy sees the new commit only once it is whole."""
    fd = os.open(path, os.O_RDWR)
    try:
        if os.fstat(fd).st_size < length:
            os.ftruncate(fd, length)
        for offset, data in pieces[:-1]:
            os.pwrite(fd, data, offset)
        os.fsync(fd)
        os.pwrite(fd, pieces[-1][1], pieces[-1][0])
        os.fsync(fd)
    finally:
        os.close(fd)
