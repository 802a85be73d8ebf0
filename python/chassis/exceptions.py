"""The exception classes, also importable from here (as from ``chassisdb.exceptions``)."""

from chassis._chassis import (  # noqa: F401
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
