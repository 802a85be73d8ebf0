//! `VectorIndex`'s life: opened or made in memory, loaded, written out, shown (`path`, `repr`).

use super::VectorIndex;
use crate::error::{Error, ErrorKind, Result};
use crate::format::Precision;
use crate::index::{Control, Index, Mode, Options};
use crate::python::errors::{self, emit_notices, to_py, type_error};
use crate::python::run::{self, Count};
use parking_lot::RwLock;
use pyo3::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// `os.fspath(path)` as a PathBuf (and as the str or bytes it gave), or a TypeError naming what
/// was passed.
pub fn path_arg<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
) -> PyResult<(PathBuf, Bound<'py, PyAny>)> {
    let fspath = py.import("os")?.getattr("fspath")?.call1((path,)).map_err(|_| {
        type_error(
            py,
            format!(
                "path={} is not a path",
                path.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
            "pass a str or pathlib.Path",
        )
    })?;
    let p: PathBuf = fspath.extract().map_err(|_| {
        type_error(py, "path is not a str path".into(), "pass a str or pathlib.Path")
    })?;
    if p.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(to_py(Error::new(
            ErrorKind::InvalidPath,
            format!("path {:?} holds a NUL byte, which no file name can", p.display().to_string()),
            "remove the NUL character from the path",
        )));
    }
    Ok((p, fspath))
}

impl VectorIndex {
    /// `VectorIndex(None, dims)`: the writer API without a file.
    pub(super) fn create_in_memory(
        py: Python<'_>,
        dims: Option<usize>,
        opts: Option<Options>,
        read_only: bool,
    ) -> PyResult<Self> {
        if read_only {
            return Err(errors::named(
                py,
                "InvalidArgumentError",
                "an in-memory index cannot be opened read-only".into(),
                "pass a file path, or read_only=False",
            ));
        }
        let Some(d) = dims else {
            return Err(errors::named(
                py,
                "InvalidArgumentError",
                "an in-memory index needs dimensions".into(),
                "pass VectorIndex(None, dimensions)",
            ));
        };
        let idx = py.detach(|| Index::memory(d, opts.as_ref())).map_err(to_py)?;
        Self::wrap(py, idx, py.None(), false)
    }

    /// The file at `path` (`fspath` as the caller gave it), opened in `mode`.
    pub(super) fn open_file(
        py: Python<'_>,
        path: &Path,
        fspath: Bound<'_, PyAny>,
        dims: Option<usize>,
        opts: Option<Options>,
        mode: Mode,
    ) -> PyResult<Self> {
        let idx = py.detach(|| Index::open(path, dims, opts.as_ref(), mode)).map_err(to_py)?;
        Self::wrap(py, idx, fspath.unbind(), mode == Mode::Read)
    }

    /// `load(path)`: the file's last flush copied into memory by `threads`, with a bar in bytes.
    pub(super) fn load_into_memory(
        py: Python<'_>,
        path: &Path,
        opts: Option<Options>,
        threads: Option<usize>,
        progress: bool,
    ) -> PyResult<Self> {
        let total = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let idx = run::run_long(py, total, Count::Bytes, progress, "loading", |ctl| {
            Index::load(path, opts.as_ref(), threads, ctl)
        })?;
        Self::wrap(py, idx, py.None(), false)
    }

    /// The class around an opened index: its warnings told, its fixed facts kept.
    fn wrap(py: Python<'_>, idx: Index, fspath: Py<PyAny>, read_only: bool) -> PyResult<Self> {
        for w in &idx.warnings {
            errors::warn(py, w)?;
        }
        emit_notices(py)?;
        Ok(VectorIndex {
            dims: idx.dims(),
            metric: idx.metric(),
            precision: idx.precision(),
            quantization: idx.quantization(),
            read_only,
            fspath,
            path: OnceLock::new(),
            inner: RwLock::new(Some(Arc::new(idx))),
        })
    }

    /// `save` or `backup`: a bar of the bytes `copy_bytes` says, Ctrl-C cancels the copy.
    pub(super) fn copy_to(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        progress: bool,
        desc: &str,
        copy: impl FnOnce(&Index, &Path, &Control) -> Result<()> + Send,
    ) -> PyResult<()> {
        let (p, _) = path_arg(py, path)?;
        let idx = self.index()?;
        let total = py.detach(|| idx.copy_bytes());
        run::run_long(py, total, Count::Bytes, progress, desc, |ctl| copy(&idx, &p, ctl))
    }

    /// The `path` property: None in memory, else a `pathlib.Path` made once.
    pub(super) fn pathlib_path(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.fspath.is_none(py) {
            return Ok(py.None());
        }
        if let Some(p) = self.path.get() {
            return Ok(p.clone_ref(py));
        }
        let p = py.import("pathlib")?.getattr("Path")?.call1((self.fspath.bind(py),))?.unbind();
        Ok(self.path.get_or_init(|| p).clone_ref(py))
    }

    /// `repr(index)`: the class, path, fixed options, and the length while open.
    pub(super) fn describe(&self, py: Python<'_>) -> String {
        let path = if self.fspath.is_none(py) {
            "None (in memory)".to_string()
        } else {
            // The path as `path` gives it (normalised by pathlib), else as it was passed.
            let p = self.pathlib_path(py).unwrap_or_else(|_| self.fspath.clone_ref(py));
            format!("{:?}", p.bind(py).str().map(|s| s.to_string()).unwrap_or_default())
        };
        // Clone the Arc first: the read guard must be gone before detaching, or a `close()`
        // in another thread (waiting for the write lock while it holds the GIL) and this
        // call (waiting to re-attach) would wait for each other.
        let current = self.inner.read().clone();
        let state = current
            .map(|i| py.detach(|| (i.len(), if i.is_read_only() { 0 } else { i.pending() })));
        let tail = match state {
            Some((n, p)) => format!("len={n}, pending={p}, status=open"),
            None => "status=closed".into(),
        };
        let cls = if self.read_only { "IndexReader" } else { "VectorIndex" };
        let quant = match (self.precision, self.quantization.name()) {
            // Codes only: say that the distances are the codes'.
            (Precision::CodesOnly, _) => ", distances=\"8-bit codes\"".to_string(),
            (_, Some(q)) => format!(", quantization={q:?}"),
            (_, None) => String::new(),
        };
        format!(
            "{cls}(path={path}, dimensions={}, metric={:?}, precision={:?}{quant}, {tail})",
            self.dims,
            self.metric.name(),
            self.precision.name()
        )
    }
}
