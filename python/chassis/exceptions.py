"""The exception classes, also importable from here (as from ``chassisdb.exceptions``)."""

from chassis._chassis import (
    ArgumentTypeError,
    ChassisError,
    CorruptIndexError,
    DimensionMismatchError,
    IdInUseError,
    IdNotFoundError,
    IndexClosedError,
    IndexFullError,
    IndexLockedError,
    IndexNotFoundError,
    InvalidArgumentError,
    InvalidPathError,
    NotAnIndexError,
    OptionsMismatchError,
    ReadOnlyError,
    StorageError,
)

__all__ = [
    "ArgumentTypeError",
    "ChassisError",
    "CorruptIndexError",
    "DimensionMismatchError",
    "IdInUseError",
    "IdNotFoundError",
    "IndexClosedError",
    "IndexFullError",
    "IndexLockedError",
    "IndexNotFoundError",
    "InvalidArgumentError",
    "InvalidPathError",
    "NotAnIndexError",
    "OptionsMismatchError",
    "ReadOnlyError",
    "StorageError",
]
