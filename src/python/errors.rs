//! The exception hierarchy: `ChassisError` and one class per error kind, each also a subclass
//! of the built-in exception users already catch (`ValueError`, `OSError`, ...). Each class has
//! the integer `code` chassisdb gave it. And the warnings the core leaves for the user.

use crate::error::{Error, ErrorKind};
use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PyOSError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

pyo3::create_exception!(chassis, ChassisError, PyException, "Base class of every Chassis error.");

/// One exception class: (name, kind, bases, doc). Its `code` is its kind's (`ErrorKind::code`,
/// the C API's status). A class without a kind is raised from Python code only and inherits
/// its code from its Chassis base. Bases are built-in exceptions (`module.name` outside
/// builtins) or classes earlier in the table.
type Class = (&'static str, Option<ErrorKind>, &'static [&'static str], &'static str);

// One row a class: a table reads best with its columns aligned.
#[rustfmt::skip]
const CLASSES: &[Class] = {
    use ErrorKind::*;
    &[
        ("InvalidArgumentError",   Some(InvalidArgument),   &["ValueError"],              "An argument has a bad value."),
        ("DimensionMismatchError", Some(DimensionMismatch), &["ValueError"],              "A vector's length is not the index's dimensions."),
        ("OptionsMismatchError",   Some(OptionsMismatch),   &["ValueError"],              "The file was created with other fixed options."),
        ("IndexNotFoundError",     Some(IndexNotFound),     &["FileNotFoundError"],       "There is no index at the path."),
        ("NotAnIndexError",        Some(NotAnIndex),        &["ValueError"],              "The file is not a Chassis index (or a newer format)."),
        ("IdInUseError",           Some(IdInUse),           &["ValueError"],              "The id is already in the index."),
        ("IndexLockedError",       Some(IndexLocked),       &["OSError"],                 "Another writer has the file open."),
        ("ReadOnlyError",          Some(ReadOnly),          &["io.UnsupportedOperation"], "A write on an index opened read-only."),
        ("CorruptIndexError",      Some(CorruptIndex),      &["OSError"],                 "The file is damaged."),
        ("IndexFullError",         Some(IndexFull),         &["OSError"],                 "The index or its ids are exhausted."),
        ("InvalidPathError",       Some(InvalidPath),       &["OSError"],                 "The path cannot hold an index."),
        ("IdNotFoundError",        Some(IdNotFound),        &["KeyError"],                "The id is not in the index."),
        ("IndexClosedError",       Some(Closed),            &["ValueError"],              "The index was closed."),
        ("StorageError",           Some(Io),                &["OSError"],                 "The operating system refused a file operation (disk full, permissions)."),
        // Wrong types and unknown option names, which chassisdb reported as TypeError.
        ("ArgumentTypeError",      None,                    &["InvalidArgumentError", "TypeError"], "An argument has the wrong type, or an option name is unknown."),
    ]
};

static TYPES: PyOnceLock<Vec<(Option<ErrorKind>, Py<PyType>)>> = PyOnceLock::new();

fn builtin<'py>(
    py: Python<'py>,
    name: &str,
    made: &[(&str, Bound<'py, PyType>)],
) -> PyResult<Bound<'py, PyAny>> {
    if let Some((_, t)) = made.iter().find(|(n, _)| *n == name) {
        return Ok(t.clone().into_any());
    }
    match name.split_once('.') {
        Some((m, attr)) => py.import(m)?.getattr(attr),
        None => py.import("builtins")?.getattr(name),
    }
}

/// Create the classes and add them to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<ChassisError>();
    base.setattr("code", crate::error::INTERNAL_CODE)?;
    m.add("ChassisError", &base)?;
    let mut made: Vec<(&str, Bound<'_, PyType>)> = Vec::new();
    let mut table = Vec::new();
    for (name, kind, bases, doc) in CLASSES {
        let mut b = vec![base.clone().into_any()];
        for n in *bases {
            b.push(builtin(py, n, &made)?);
        }
        // An explicit subclass of another Chassis class needs no second ChassisError base.
        if bases.iter().any(|n| made.iter().any(|(m, _)| m == n)) {
            b.remove(0);
        }
        let ns = PyDict::new(py);
        ns.set_item("__module__", "chassis")?;
        ns.set_item("__doc__", *doc)?;
        if let Some(k) = kind {
            ns.set_item("code", k.code())?;
        }
        let t = py
            .get_type::<PyType>()
            .call1((*name, PyTuple::new(py, b)?, ns))?
            .cast_into::<PyType>()?;
        if t.is_subclass_of::<PyOSError>()? {
            os_error_methods(py, &t)?;
        }
        m.add(*name, &t)?;
        table.push((*kind, t.clone().unbind()));
        made.push((name, t));
    }
    let _ = TYPES.set(py, table);
    Ok(())
}

/// An `OSError` class of ours: `str()` is its message (`OSError.__str__` writes "[Errno n]
/// strerror: 'filename'" once `filename` is set, with `None` for what is unset), and a pickle
/// or copy keeps `errno` and `filename` (`OSError.__reduce__` keeps them only with two or more
/// args, and Ray sends errors pickled).
fn os_error_methods(py: Python<'_>, t: &Bound<'_, PyType>) -> PyResult<()> {
    let globals = PyDict::new(py);
    globals.set_item("__builtins__", py.import("builtins")?)?;
    let str_fn = py.eval(
        c"lambda self: f'[Errno {self.errno}] {self.strerror}' \
          if self.errno is not None and self.strerror \
          else BaseException.__str__(self)",
        Some(&globals),
        None,
    )?;
    t.setattr("__str__", str_fn)?;
    let reduce_fn = py.eval(
        c"lambda self: (type(self), self.args, \
          {**self.__dict__, 'errno': self.errno, 'filename': self.filename})",
        Some(&globals),
        None,
    )?;
    t.setattr("__reduce__", reduce_fn)
}

fn class_of(py: Python<'_>, kind: ErrorKind) -> Option<Bound<'_, PyType>> {
    TYPES.get(py)?.iter().find(|(k, _)| *k == Some(kind)).map(|(_, t)| t.bind(py).clone())
}

/// The Python exception for a core error. An interrupted call becomes `KeyboardInterrupt`.
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| {
        if e.kind == ErrorKind::Interrupted {
            return PyKeyboardInterrupt::new_err(e.to_string());
        }
        let err = match class_of(py, e.kind) {
            Some(t) => match e.errno {
                // OSError subclasses get (errno, strerror) so that .errno works.
                Some(n) if e.kind == ErrorKind::Io => PyErr::from_type(t, (n, e.to_string())),
                _ => PyErr::from_type(t, e.to_string()),
            },
            None => ChassisError::new_err(e.to_string()),
        };
        // The file it is about, as Python's own OSErrors name it (other classes have no place
        // for it).
        if let Some(path) = &e.path {
            if err.value(py).is_instance_of::<PyOSError>() {
                let _ = err.value(py).setattr("filename", path.as_os_str());
            }
        }
        // A missing file's `errno` is ENOENT, as Python's own FileNotFoundError has it; set as
        // an attribute so that the message reads as ours (with `strerror` unset, `str()` is it).
        if e.kind == ErrorKind::IndexNotFound {
            let n = match e.errno {
                Some(n) => Ok(pyo3::types::PyInt::new(py, n).into_any()),
                None => py.import("errno").and_then(|m| m.getattr("ENOENT")),
            };
            if let Ok(n) = n {
                let _ = err.value(py).setattr("errno", n);
            }
        }
        err
    })
}

/// An error of a class that exists only on the Python side (ArgumentTypeError).
pub fn named(py: Python<'_>, name: &str, message: String, help: &str) -> PyErr {
    let msg = format!("{message}\nhelp: {help}");
    match py
        .import("chassis._chassis")
        .and_then(|m| m.getattr(name))
        .and_then(|t| Ok(t.cast_into::<PyType>()?))
    {
        Ok(t) => PyErr::from_type(t, msg),
        Err(_) => ChassisError::new_err(msg),
    }
}

pub fn type_error(py: Python<'_>, message: String, help: &str) -> PyErr {
    named(py, "ArgumentTypeError", message, help)
}

pub trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for crate::error::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A `RuntimeWarning` with `message`.
pub fn warn(py: Python<'_>, message: &str) -> PyResult<()> {
    let cat = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
    PyErr::warn(py, &cat, &std::ffi::CString::new(message).unwrap_or_default(), 1)
}

/// What the core asked to tell the user once (a refusal of huge pages): each as a
/// RuntimeWarning and a line on the "chassis" logger.
pub fn emit_notices(py: Python<'_>) -> PyResult<()> {
    for msg in crate::os::take_notices() {
        let _ = py
            .import("logging")
            .and_then(|l| l.call_method1("getLogger", ("chassis",)))
            .and_then(|l| l.call_method1("warning", (msg.as_str(),)));
        warn(py, &msg)?;
    }
    Ok(())
}
