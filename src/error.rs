//! Errors of the core: a kind (which maps one-to-one onto a Python exception
//! class), a one-line message naming the bad value, and a `help:` line.

use std::fmt;

/// What went wrong, at the granularity a caller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArgument,
    DimensionMismatch,
    OptionsMismatch,
    IndexNotFound,
    NotAnIndex,
    IdInUse,
    IdNotFound,
    IndexLocked,
    ReadOnly,
    CorruptIndex,
    IndexFull,
    InvalidPath,
    Closed,
    /// A long call was cancelled (Ctrl-C); nothing it did remains.
    Interrupted,
    /// Any other operating-system error (disk full, permission, ...).
    Io,
}

impl ErrorKind {
    /// The integer code of this kind: the `code` of its Python exception class and the status
    /// a C call returns (`include/chassis.h`). 12 is the base class (`ChassisError`,
    /// `CHASSIS_ERROR`: a fault inside the library); 0 is success in C. Interrupted has no
    /// Python class (it becomes `KeyboardInterrupt`) and is 16 in C.
    pub const fn code(self) -> u32 {
        match self {
            ErrorKind::InvalidArgument => 1,
            ErrorKind::DimensionMismatch => 2,
            ErrorKind::OptionsMismatch => 3,
            ErrorKind::IndexNotFound => 4,
            ErrorKind::NotAnIndex => 5,
            ErrorKind::IdInUse => 6,
            ErrorKind::IndexLocked => 7,
            ErrorKind::ReadOnly => 8,
            ErrorKind::CorruptIndex => 9,
            ErrorKind::IndexFull => 10,
            ErrorKind::InvalidPath => 11,
            ErrorKind::IdNotFound => 13,
            ErrorKind::Closed => 14,
            ErrorKind::Io => 15,
            ErrorKind::Interrupted => 16,
        }
    }
}

/// The code of an error no kind describes: a fault inside the library (a caught panic in C).
pub const INTERNAL_CODE: u32 = 12;

#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub help: String,
    /// The OS error number (errno; see `os::errno`), when the error came from a system call.
    pub errno: Option<i32>,
    /// The file the error is about, when there is one (Python's `OSError.filename`).
    pub path: Option<std::path::PathBuf>,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>, help: impl Into<String>) -> Self {
        Error { kind, message: message.into(), help: help.into(), errno: None, path: None }
    }

    /// The same error, about the file at `path`.
    pub fn at(mut self, path: &std::path::Path) -> Self {
        self.path = Some(path.to_path_buf());
        self
    }

    pub fn invalid(message: impl Into<String>, help: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message, help)
    }

    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::CorruptIndex,
            message,
            "restore the file from a backup; the damaged part cannot be trusted",
        )
    }

    /// An I/O error while doing `what` on `path`.
    pub fn io(err: std::io::Error, what: &str, path: &std::path::Path) -> Self {
        let errno = crate::os::errno(&err);
        let kind = match err.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::IndexNotFound,
            _ => ErrorKind::Io,
        };
        let help = match err.kind() {
            std::io::ErrorKind::PermissionDenied => "check the file's permissions",
            std::io::ErrorKind::NotFound => "check the path",
            _ if errno == Some(crate::os::ENOSPC) => {
                "free disk space, then retry; nothing flushed was lost"
            }
            _ => "check the disk and the path; nothing flushed was lost",
        };
        Error {
            kind,
            message: format!("{what} {}: {err}", path.display()),
            help: help.to_string(),
            errno,
            path: Some(path.to_path_buf()),
        }
    }

    pub fn closed() -> Self {
        Self::new(ErrorKind::Closed, "the index is closed", "open it again with VectorIndex(path)")
    }

    pub fn interrupted() -> Self {
        Self::new(
            ErrorKind::Interrupted,
            "interrupted",
            "the call was cancelled; nothing it did remains",
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\nhelp: {}", self.message, self.help)
    }
}

impl std::error::Error for Error {}
