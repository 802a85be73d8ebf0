//! `VectorIndex`: the Python class over one core `Index`, and its docstrings (what `help()`
//! and notebooks show; NumPy style, checked by tests/test_docstrings.py against the stub).
//!
//! The class is frozen and holds the index behind its own RwLock, so that it is safe without
//! the GIL (free-threaded Python too). Every method detaches from the interpreter before it
//! takes the lock: a call that waits for a writer never holds the GIL while it waits.

use super::convert::{count_arg, f32_array, id_arg, ids_arg, int_arg, opt_count, vector};
use super::errors::{self, to_py, type_error};
use super::options::{options_from, options_to_py};
use super::run;
use super::search::{do_search, do_search_batch, BatchArrays, SearchArgs};
use super::snapshot::Snapshot;
use crate::error::{Error, Result};
use crate::format::{Metric, Precision, Quantization};
use crate::index::{Index, Mode};
use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use parking_lot::RwLock;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::Arc;

/// A vector index in one memory-mapped file, or in memory.
///
/// ``VectorIndex(path, dimensions)`` opens the index at ``path`` as its writer, creating it
/// when missing. One process at a time writes a file (a second writer gets
/// ``IndexLockedError``); ``read_only=True`` (or ``IndexReader``) opens it for searching,
/// without the lock, in any number of processes. ``VectorIndex(None, dimensions)`` makes an
/// index in memory, without a file: ``save`` writes one, ``VectorIndex.load`` reads one in,
/// and there ``flush()`` does nothing.
///
/// Adds are durable at ``flush()`` (milliseconds); a writer killed at any moment leaves the
/// file as last flushed. Used as a context manager, leaving the block normally flushes and
/// closes.
///
/// Parameters
/// ----------
/// path : str, os.PathLike or None
///     The index file; None for an index in memory.
/// dimensions : int, optional
///     The vectors' length, from 1 to 65,536. Required to create a file or an index in
///     memory; when opening an existing file it is read from the file (and checked when
///     given).
/// options : IndexOptions or dict, optional
///     Construction and search parameters (``IndexOptions``). The fixed ones (metric,
///     precision, max_connections) are taken from an existing file and must match when
///     given.
/// read_only : bool, default False
///     Open an existing file for searching only: no lock, every write raises
///     ``ReadOnlyError``.
///
/// Raises
/// ------
/// IndexLockedError
///     Another writer holds the file.
/// IndexNotFoundError
///     ``read_only=True`` and there is no file at ``path``.
/// DimensionMismatchError, OptionsMismatchError
///     The file was created with other dimensions or fixed options.
/// NotAnIndexError, CorruptIndexError
///     The file is not a Chassis index, or it is damaged.
///
/// Examples
/// --------
/// >>> import numpy as np, chassis
/// >>> with chassis.VectorIndex("vectors.chassis", 128) as index:  # doctest: +SKIP
/// ...     ids = index.add_batch(np.random.rand(1000, 128).astype(np.float32))
/// ...     hits = index.search(np.random.rand(128).astype(np.float32), k=5)
#[pyclass(module = "chassis", frozen, subclass, name = "VectorIndex")]
pub struct VectorIndex {
    /// None once closed. The lock is held only to clone or take the Arc: calls run on their
    /// own clone, without it.
    inner: RwLock<Option<Arc<Index>>>,
    /// `os.fspath` of the path the index was opened with; None in memory.
    fspath: Py<PyAny>,
    /// `fspath` as a `pathlib.Path`, made when first asked for (importing pathlib took 3.9
    /// ms of a fresh process's first open).
    path: std::sync::OnceLock<Py<PyAny>>,
    dims: usize,
    metric: Metric,
    precision: Precision,
    quantization: Quantization,
    read_only: bool,
}

impl VectorIndex {
    fn index(&self) -> PyResult<Arc<Index>> {
        self.inner.read().clone().ok_or_else(|| to_py(Error::closed()))
    }

    /// `save` or `backup` through the long-call helper: a bar of the bytes `copy_bytes` says,
    /// Ctrl-C cancels the copy.
    fn copy_to(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        progress: bool,
        desc: &str,
        copy: impl FnOnce(&Index, &std::path::Path, &crate::index::Control) -> Result<()> + Send,
    ) -> PyResult<()> {
        let (p, _) = path_arg(py, path)?;
        let idx = self.index()?;
        let total = py.detach(|| idx.copy_bytes());
        run::run_long_units(py, total, progress, desc, "B", |ctl| copy(&idx, &p, ctl))
    }

    /// Run `f` on the open index without the GIL.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Index) -> Result<R> + Send,
    ) -> PyResult<R> {
        let idx = self.index()?;
        let out = py.detach(|| f(&idx)).map_err(to_py);
        emit_notices(py)?;
        out
    }

    fn wrap(py: Python<'_>, idx: Index, fspath: Py<PyAny>, read_only: bool) -> PyResult<Self> {
        for w in &idx.warnings {
            let cat = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
            PyErr::warn(py, &cat, &std::ffi::CString::new(w.as_str()).unwrap_or_default(), 1)?;
        }
        emit_notices(py)?;
        Ok(VectorIndex {
            dims: idx.dims(),
            metric: idx.metric(),
            precision: idx.precision(),
            quantization: idx.quantization(),
            read_only,
            fspath,
            path: std::sync::OnceLock::new(),
            inner: RwLock::new(Some(Arc::new(idx))),
        })
    }
}

/// What the core asked to tell the user once (a refusal of huge pages): each as a
/// RuntimeWarning and a line on the "chassis" logger.
fn emit_notices(py: Python<'_>) -> PyResult<()> {
    for msg in crate::os::take_notices() {
        let _ = py
            .import("logging")
            .and_then(|l| l.call_method1("getLogger", ("chassis",)))
            .and_then(|l| l.call_method1("warning", (msg.as_str(),)));
        let cat = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
        PyErr::warn(py, &cat, &std::ffi::CString::new(msg).unwrap_or_default(), 1)?;
    }
    Ok(())
}

/// `os.fspath(path)` as a PathBuf, or a TypeError naming what was passed.
fn path_arg<'py>(
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
            crate::error::ErrorKind::InvalidPath,
            format!("path {:?} holds a NUL byte, which no file name can", p.display().to_string()),
            "remove the NUL character from the path",
        )));
    }
    Ok((p, fspath))
}

#[pymethods]
impl VectorIndex {
    #[new]
    #[pyo3(signature = (path, dimensions = None, options = None, read_only = false))]
    fn new(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        dimensions: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyAny>>,
        read_only: bool,
    ) -> PyResult<Self> {
        let dims = dimensions
            .filter(|d| !d.is_none())
            .map(|d| count_arg(d, "dimensions", 1 << 16))
            .transpose()?;
        let opts = options_from(py, options)?;
        if path.is_none() {
            // In memory: the writer API without a file.
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
            let idx = py.detach(|| Index::memory(d, opts.as_ref().map(|o| &o.0))).map_err(to_py)?;
            return Self::wrap(py, idx, py.None(), false);
        }
        let (p, fspath) = path_arg(py, path)?;
        let mode = if read_only { Mode::Read } else { Mode::Write };
        let idx = py
            .detach(|| Index::open(&p, dims, opts.as_ref().map(|o| &o.0), mode))
            .map_err(to_py)?;
        Self::wrap(py, idx, fspath.unbind(), read_only)
    }

    /// Copy an index file into memory, or open it as a writer.
    ///
    /// With ``in_memory=True`` (the default) the file's last flush is copied into memory by
    /// all threads: the result is a writer of its own that leaves the file alone (any process
    /// may keep writing it); ``save`` writes it back. With ``in_memory=False`` this is
    /// ``VectorIndex(path)``.
    ///
    /// Parameters
    /// ----------
    /// path : str or os.PathLike
    ///     An existing index file.
    /// in_memory : bool, default True
    ///     Copy into memory (True) or open the file as its writer (False).
    /// options : IndexOptions or dict, optional
    ///     As for ``VectorIndex``: fixed fields must match the file; ``ef_construction`` and
    ///     ``ef_search`` are the given ones (None keeps the file's).
    /// threads : int, optional
    ///     Threads for the copy, from 1 to 1024; by default every core.
    /// progress : bool, default False
    ///     Show a progress bar in bytes.
    ///
    /// Returns
    /// -------
    /// VectorIndex
    ///     The index in memory (``path`` None), or the file's writer.
    ///
    /// Raises
    /// ------
    /// IndexNotFoundError
    ///     There is no file at ``path``.
    /// NotAnIndexError, CorruptIndexError
    ///     The file is not a Chassis index, or it is damaged.
    /// KeyboardInterrupt
    ///     Ctrl-C during the copy.
    #[staticmethod]
    #[pyo3(signature = (path, in_memory = true, options = None, *, threads = None, progress = false))]
    fn load(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        in_memory: bool,
        options: Option<&Bound<'_, PyAny>>,
        threads: Option<&Bound<'_, PyAny>>,
        progress: bool,
    ) -> PyResult<VectorIndex> {
        let (p, fspath) = path_arg(py, path)?;
        let opts = options_from(py, options)?;
        if !in_memory {
            let idx = py
                .detach(|| Index::open(&p, None, opts.as_ref().map(|o| &o.0), Mode::Write))
                .map_err(to_py)?;
            return Self::wrap(py, idx, fspath.unbind(), false);
        }
        let threads = opt_count(threads, "threads", 1024)?;
        let total = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        let idx = run::run_long_units(py, total, progress, "loading", "B", |ctl| {
            Index::load(&p, opts.as_ref().map(|o| &o.0), threads, ctl)
        })?;
        Self::wrap(py, idx, py.None(), false)
    }

    /// Write the index as an ordinary index file at ``path``.
    ///
    /// Any ``IndexReader`` or ``VectorIndex`` opens the result. The file is written beside
    /// ``path``, synced and renamed into place when whole, so ``path`` never holds half a
    /// file. An index in memory writes what it holds now; a file-backed writer flushes first
    /// (as ``backup``).
    ///
    /// Parameters
    /// ----------
    /// path : str or os.PathLike
    ///     Where to write. It may be missing, an empty file or an index no writer holds.
    /// overwrite : bool, default False
    ///     Replace another existing file. A file that a writer holds is never replaced.
    /// progress : bool, default False
    ///     Show a progress bar, in bytes.
    ///
    /// Raises
    /// ------
    /// NotAnIndexError
    ///     ``path`` is another kind of file and ``overwrite`` is False.
    /// IndexLockedError
    ///     A writer holds the file at ``path``.
    /// StorageError
    ///     The disk is full or a write or sync failed; ``path`` is left as it was.
    /// KeyboardInterrupt
    ///     Ctrl-C during the copy; ``path`` is left as it was.
    #[pyo3(signature = (path, *, overwrite = false, progress = false))]
    fn save(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        overwrite: bool,
        progress: bool,
    ) -> PyResult<()> {
        self.copy_to(py, path, progress, "saving", |idx, p, ctl| idx.save(p, overwrite, ctl))
    }

    /// True for an index without a file (``VectorIndex(None, dims)``, ``VectorIndex.load``).
    #[getter]
    fn in_memory(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |idx| Ok(idx.is_memory()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving the block normally flushes, then closes; leaving by an exception closes without
    /// flushing (what the block added is discarded, as a crash would).
    #[pyo3(signature = (exc_type = None, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_none_or(|t| t.is_none()) && !self.read_only && !self.closed() {
            if let Err(e) = self.flush(py) {
                let _ = self.close(py);
                return Err(e);
            }
        }
        self.close(py)?;
        Ok(false)
    }

    /// Add one vector and return its id.
    ///
    /// The vector is searchable at once in this handle and durable at the next ``flush()``.
    /// For many vectors ``add_batch`` is much faster (it links them on all cores).
    ///
    /// Parameters
    /// ----------
    /// vector : array_like, shape (dimensions,)
    ///     The vector. A C-contiguous float32 array is read in place, as are ``__dlpack__``
    ///     and Arrow arrays of float32; anything else (other float or int dtypes, lists,
    ///     strided views) is converted to float32 once.
    /// id : int, optional
    ///     Its id, from 0 to 2**64-2; by default the largest id so far + 1 (0 for the first).
    ///
    /// Returns
    /// -------
    /// int
    ///     The vector's id.
    ///
    /// Raises
    /// ------
    /// DimensionMismatchError
    ///     The vector's length is not the index's dimensions.
    /// InvalidArgumentError
    ///     The vector holds NaN or infinity, or a float64 value beyond the float32 range.
    /// IdInUseError
    ///     A live vector already has ``id``.
    /// ReadOnlyError
    ///     The index was opened read-only.
    #[pyo3(signature = (vector, id = None))]
    fn add(
        &self,
        py: Python<'_>,
        vector: &Bound<'_, PyAny>,
        id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let arr = f32_array(vector, 1, "the vector")?;
        let id = id.filter(|i| !i.is_none()).map(id_arg).transpose()?;
        // SAFETY: as in `search::do_search`.
        let v = unsafe { arr.as_slice() }?;
        self.with(py, |idx| idx.add(v, id))
    }

    /// Add the rows of an (n, dimensions) array, linked on all cores.
    ///
    /// All or nothing: if anything is wrong, or the call is interrupted (Ctrl-C), nothing is
    /// added. The call releases the GIL; searches in other threads go on meanwhile and see the
    /// batch when it is done. Durable at the next ``flush()``.
    ///
    /// Parameters
    /// ----------
    /// vectors : array_like, shape (n, dimensions)
    ///     One vector per row. A C-contiguous float32 array (a read-only memory-mapped
    ///     ``.npy`` too) is read in place, without a copy; anything else (float64, float16,
    ///     ints, lists, Fortran order, strided views) is converted to float32 once, and
    ///     ``__dlpack__`` objects and Arrow fixed-size-list arrays are read through NumPy
    ///     without a copy where their memory allows.
    /// ids : array_like of int, optional
    ///     One id per row, from 0 to 2**64-2, all new and distinct; by default consecutive
    ///     ids after the largest so far.
    /// threads : int, optional
    ///     Threads to link with, from 1 to 1024; by default every core.
    /// progress : bool, default False
    ///     Show a progress bar (tqdm when installed, else a line on stderr).
    ///
    /// Returns
    /// -------
    /// numpy.ndarray of uint64, shape (n,)
    ///     The rows' ids.
    ///
    /// Raises
    /// ------
    /// DimensionMismatchError
    ///     The rows' length is not the index's dimensions.
    /// InvalidArgumentError
    ///     A row holds NaN or infinity (or a float64 value beyond the float32 range), or the
    ///     ids are not one per row.
    /// IdInUseError
    ///     An id is already in the index or given twice.
    /// ReadOnlyError
    ///     The index was opened read-only.
    /// KeyboardInterrupt
    ///     Ctrl-C during the call; nothing was added.
    ///
    /// Examples
    /// --------
    /// >>> import numpy as np, chassis
    /// >>> index = chassis.VectorIndex(None, 8)
    /// >>> index.add_batch(np.ones((3, 8), dtype=np.float32), ids=[10, 11, 12]).tolist()
    /// [10, 11, 12]
    #[pyo3(signature = (vectors, ids = None, *, threads = None, progress = false))]
    fn add_batch<'py>(
        &self,
        py: Python<'py>,
        vectors: &Bound<'py, PyAny>,
        ids: Option<&Bound<'py, PyAny>>,
        threads: Option<&Bound<'py, PyAny>>,
        progress: bool,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let arr = f32_array(vectors, 2, "vectors")?;
        let shape = arr.shape().to_vec();
        let (n, d) = (shape[0], shape[1]);
        if d != self.dims && n > 0 {
            return Err(to_py(Error::new(
                crate::error::ErrorKind::DimensionMismatch,
                format!("vectors have {d} dimensions; this index holds {}", self.dims),
                format!("pass an array of shape (n, {})", self.dims),
            )));
        }
        let ids = ids.filter(|i| !i.is_none()).map(ids_arg).transpose()?;
        let threads = opt_count(threads, "threads", 1024)?;
        // SAFETY: as in `search::do_search`.
        let data = unsafe { arr.as_slice() }?;
        let idx = self.index()?;
        let out = run::run_long(py, n as u64, progress, "adding", |ctl| {
            idx.add_batch(data, n, ids.as_deref(), threads, ctl)
        });
        emit_notices(py)?;
        Ok(vector(py, out?))
    }

    #[doc = include_str!("doc/search.md")]
    #[pyo3(
        signature = (query, k = None, allowed = None, excluded = None, *, ef = None, rerank = None),
        text_signature = "($self, query, k=10, allowed=None, excluded=None, *, ef=None, rerank=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
        allowed: Option<&Bound<'py, PyAny>>,
        excluded: Option<&Bound<'py, PyAny>>,
        ef: Option<&Bound<'py, PyAny>>,
        rerank: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let a = SearchArgs::parse(k, ef, allowed, excluded)?.with_rerank(rerank)?;
        do_search(py, &*self.index()?, None, query, a)
    }

    #[doc = include_str!("doc/search_batch.md")]
    #[pyo3(
        signature = (queries, k = None, allowed = None, excluded = None, *, ef = None, rerank = None, threads = None, progress = false),
        text_signature = "($self, queries, k=10, allowed=None, excluded=None, *, ef=None, rerank=None, threads=None, progress=False)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
        allowed: Option<&Bound<'py, PyAny>>,
        excluded: Option<&Bound<'py, PyAny>>,
        ef: Option<&Bound<'py, PyAny>>,
        rerank: Option<&Bound<'py, PyAny>>,
        threads: Option<&Bound<'py, PyAny>>,
        progress: bool,
    ) -> PyResult<BatchArrays<'py>> {
        do_search_batch(
            py,
            &*self.index()?,
            None,
            queries,
            (k, ef, allowed, excluded),
            rerank,
            threads,
            progress,
        )
    }

    /// Pin the current state for several calls that must agree.
    ///
    /// A writer's snapshot holds its adds so far; a reader's, the newest flush. Searches on
    /// it see the same vectors whatever is added or flushed meanwhile, for as long as the
    /// object lives (or until its ``with`` block ends).
    ///
    /// Returns
    /// -------
    /// Snapshot
    ///     The pinned state.
    fn snapshot(&self, py: Python<'_>) -> PyResult<Snapshot> {
        let idx = self.index()?;
        let snap = py.detach(|| idx.snap());
        Ok(Snapshot::new(idx, snap))
    }

    #[doc = include_str!("doc/get.md")]
    fn get<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let id = id_arg(id)?;
        Ok(self.with(py, |idx| idx.get(id))?.map(|v| vector(py, v)))
    }

    #[doc = include_str!("doc/ids.md")]
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(vector(py, self.with(py, |idx| idx.ids())?))
    }

    fn __contains__(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let v = int_arg(id, "id")?;
        if v < 0 || v >= u64::MAX as i128 {
            self.index()?;
            return Ok(false);
        }
        self.with(py, |idx| idx.contains(v as u64))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |idx| Ok(idx.len() as usize))
    }

    /// Whether the index holds no live vector.
    ///
    /// Returns
    /// -------
    /// bool
    ///     True when ``len(index) == 0``.
    fn is_empty(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |idx| Ok(idx.is_empty()))
    }

    /// Make every change so far durable.
    ///
    /// Returns when adds, deletes and ``user_version`` are on disk (milliseconds); readers
    /// in other processes see them from then on. Nothing happens when nothing changed, and
    /// in memory (there is no file).
    ///
    /// Raises
    /// ------
    /// StorageError
    ///     The disk is full or a write or sync failed. The file stays as last flushed and
    ///     the changes stay pending: free space and call ``flush()`` again.
    /// ReadOnlyError
    ///     The index was opened read-only.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| idx.flush())
    }

    /// Delete ``id``.
    ///
    /// The vector is hidden from this handle's searches at once and gone from the file at
    /// the next ``flush()``; its space is reused by ``compact()``.
    ///
    /// Parameters
    /// ----------
    /// id : int
    ///     The id, from 0 to 2**64-2.
    ///
    /// Returns
    /// -------
    /// bool
    ///     False when no live vector has ``id``.
    ///
    /// Raises
    /// ------
    /// InvalidArgumentError
    ///     ``id`` is negative or too large for any index.
    /// ReadOnlyError
    ///     The index was opened read-only.
    fn delete(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        // An id no index can hold is refused as `get` refuses it (not "not found").
        let id = id_arg(id)?;
        self.with(py, |idx| idx.delete(id))
    }

    /// How many vectors were deleted and not yet compacted away.
    ///
    /// Returns
    /// -------
    /// int
    ///     Deleted vectors still taking space in the file.
    fn deleted_count(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |idx| idx.deleted_count())
    }

    /// Scan every vector and the whole graph, and say what is wrong.
    ///
    /// Parameters
    /// ----------
    /// progress : bool, default False
    ///     Show a progress bar.
    ///
    /// Returns
    /// -------
    /// Check
    ///     Ids no search can reach, ids holding NaN or infinity, and damaged slots;
    ///     ``Check.ok`` is True when there are none.
    #[pyo3(signature = (*, progress = false))]
    fn check<'py>(&self, py: Python<'py>, progress: bool) -> PyResult<Bound<'py, PyAny>> {
        let idx = self.index()?;
        let total = py.detach(|| idx.snap().slots);
        let r = run::run_long_threaded(py, total, progress, "checking", |ctl| idx.check(ctl))?;
        py.import("chassis._check")?.getattr("Check")?.call1((
            r.unreachable,
            r.not_finite,
            r.corrupt,
            r.clipped,
        ))
    }

    /// Write a consistent copy of the last flush to ``path``.
    ///
    /// A writer flushes first. The copy is synced and renamed into place when whole; a
    /// writer may go on adding meanwhile. In memory this is ``save(path)``.
    ///
    /// Parameters
    /// ----------
    /// path : str or os.PathLike
    ///     Where to write: missing, an empty file or an index no writer holds.
    /// overwrite : bool, default False
    ///     Replace another existing file. A file that a writer holds is never replaced.
    /// progress : bool, default False
    ///     Show a progress bar, in bytes.
    ///
    /// Raises
    /// ------
    /// NotAnIndexError
    ///     ``path`` is another kind of file and ``overwrite`` is False.
    /// IndexLockedError
    ///     A writer holds the file at ``path``.
    /// StorageError
    ///     The disk is full or a write or sync failed; ``path`` is left as it was.
    /// KeyboardInterrupt
    ///     Ctrl-C during the copy; ``path`` is left as it was.
    #[pyo3(signature = (path, *, overwrite = false, progress = false))]
    fn backup(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        overwrite: bool,
        progress: bool,
    ) -> PyResult<()> {
        self.copy_to(py, path, progress, "backing up", |idx, p, ctl| idx.backup(p, overwrite, ctl))
    }

    /// Rewrite the index without its deleted vectors, keeping every id.
    ///
    /// Flushes first, then builds a new file with a rebuilt graph beside the old one and
    /// renames it into place; readers follow the rename. Ctrl-C or an error leaves the
    /// original untouched.
    ///
    /// Parameters
    /// ----------
    /// threads : int, optional
    ///     Threads to rebuild with, from 1 to 1024; by default every core.
    /// progress : bool, default False
    ///     Show a progress bar.
    ///
    /// Raises
    /// ------
    /// StorageError
    ///     The disk is full or a write failed; the original is kept.
    /// ReadOnlyError
    ///     The index was opened read-only.
    /// KeyboardInterrupt
    ///     Ctrl-C during the call; the original is kept.
    #[pyo3(signature = (*, threads = None, progress = false))]
    fn compact(
        &self,
        py: Python<'_>,
        threads: Option<&Bound<'_, PyAny>>,
        progress: bool,
    ) -> PyResult<()> {
        let threads = opt_count(threads, "threads", 1024)?;
        let idx = self.index()?;
        let total = py.detach(|| idx.len());
        let out = run::run_long_threaded(py, total, progress, "compacting", |ctl| {
            idx.compact(threads, ctl)
        });
        emit_notices(py)?;
        out
    }

    /// Ask for huge pages under the vectors from now on (design record ADR-0016).
    ///
    /// A request to the kernel, which may refuse it (transparent huge pages off or
    /// unavailable): ``memory_stats()`` says what was granted, and a refusal is reported once
    /// as a ``RuntimeWarning``.
    fn use_huge_pages(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| {
            idx.use_huge_pages();
            Ok(())
        })
    }

    /// Stop asking for huge pages (design record ADR-0016).
    fn keep_small_pages(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| {
            idx.keep_small_pages();
            Ok(())
        })
    }

    /// Read the written part of the file into memory on a background thread (ADR-0019).
    ///
    /// Returns at once unless ``wait``; asking while it runs does nothing (but wait), and it
    /// does nothing in memory.
    /// ``memory_stats()`` reports its progress.
    ///
    /// Parameters
    /// ----------
    /// vectors : bool, default: True
    ///     False reads all but the full-precision vectors: the lists, the upper layers and
    ///     the codes, which is what a search walks. For an index larger than memory:
    ///     with codes, searches then read only the few vectors they rerank.
    /// wait : bool, default: False
    ///     Return only when the reading is done.
    /// progress : bool, default: False
    ///     With ``wait``, show a progress bar in bytes.
    ///
    /// Raises
    /// ------
    /// KeyboardInterrupt
    ///     Ctrl-C while waiting: the reading stops (what it read stays in memory).
    #[pyo3(signature = (*, vectors = true, wait = false, progress = false))]
    fn warm(&self, py: Python<'_>, vectors: bool, wait: bool, progress: bool) -> PyResult<()> {
        let idx = self.index()?;
        let total = py.detach(|| {
            idx.warm(vectors);
            idx.warm_progress().0
        });
        if !wait {
            return Ok(());
        }
        run::run_long_units(py, total, progress, "warming", "B", |ctl| idx.wait_warm(ctl))
    }

    /// What the system holds of this index's mappings.
    ///
    /// Returns
    /// -------
    /// dict
    ///     ``mapped_bytes``, ``written_bytes`` and ``resident_bytes`` of the mappings;
    ///     ``vector_bytes`` and ``resident_vector_bytes``; ``code_bytes`` and
    ///     ``resident_code_bytes`` of the codes (0 without them); ``graph_bytes`` and
    ///     ``resident_graph_bytes`` (slot headers, lists, upper layers); ``naming_pages``
    ///     (searches name their next pages to the system: the index was short of memory at
    ///     the last sample); ``vector_huge_bytes`` (vectors and codes), ``graph_huge_bytes`` and ``huge_bytes``
    ///     on huge pages (of an in-memory index, its stores of 2 MiB and more: smaller ones
    ///     share the allocator's pages with the rest of the process); ``huge_pages_asked`` and ``huge_pages_refused``; ``backing``
    ///     (``"file"`` or ``"memory"``); ``warm_running``, ``warm_done_bytes`` and
    ///     ``warm_total_bytes``; ``populate`` (how warming reads: ``MADV_POPULATE_READ``, or
    ///     the fallback the kernel left).
    fn memory_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.with(py, |idx| idx.memory_stats())?;
        let d = PyDict::new(py);
        d.set_item("mapped_bytes", m.mapped_bytes)?;
        d.set_item("written_bytes", m.written_bytes)?;
        d.set_item("resident_bytes", m.resident_bytes)?;
        d.set_item("vector_bytes", m.vector_bytes)?;
        d.set_item("code_bytes", m.code_bytes)?;
        d.set_item("resident_code_bytes", m.resident_code_bytes)?;
        d.set_item("resident_vector_bytes", m.resident_vector_bytes)?;
        d.set_item("graph_bytes", m.graph_bytes)?;
        d.set_item("resident_graph_bytes", m.resident_graph_bytes)?;
        d.set_item("naming_pages", m.naming_pages)?;
        d.set_item("vector_huge_bytes", m.vector_huge_bytes)?;
        d.set_item("graph_huge_bytes", m.graph_huge_bytes)?;
        d.set_item("huge_bytes", m.huge_bytes)?;
        d.set_item("huge_pages_asked", m.huge_pages_asked)?;
        d.set_item("huge_pages_refused", m.huge_pages_refused)?;
        d.set_item("backing", m.backing)?;
        d.set_item("warm_running", m.warm_running)?;
        d.set_item("warm_done_bytes", m.warm_done_bytes)?;
        d.set_item("warm_total_bytes", m.warm_total_bytes)?;
        d.set_item("populate", m.populate)?;
        Ok(d)
    }

    /// Discard everything since the last flush; the writer lock is kept.
    ///
    /// Raises
    /// ------
    /// InvalidArgumentError
    ///     The index is in memory (there is no flushed state to go back to).
    /// ReadOnlyError
    ///     The index was opened read-only.
    fn rollback(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| idx.rollback())
    }

    /// Close without flushing: unflushed changes are discarded.
    ///
    /// Releases the writer lock and the mappings (once no snapshot holds them) and removes
    /// an empty ``.undo`` file beside the index. Closing twice is fine; every other call on a
    /// closed index raises ``IndexClosedError``.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let idx = self.inner.write().take();
        if let Some(idx) = idx {
            py.detach(|| idx.close()).map_err(to_py)?;
        }
        Ok(())
    }

    /// The application's own integer (0 to 2**64-1), committed by the next flush.
    ///
    /// ``rollback()`` restores the flushed value. Use it for a schema or data version of your
    /// own.
    #[getter]
    fn get_user_version(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |idx| Ok(idx.user_version()))
    }

    #[setter]
    fn set_user_version(&self, py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = int_arg(v, "user_version")?;
        if !(0..=u64::MAX as i128).contains(&v) {
            return Err(errors::named(
                py,
                "InvalidArgumentError",
                format!("user_version={v} is out of range"),
                "use 0 to 2**64-1",
            ));
        }
        self.with(py, |idx| idx.set_user_version(v as u64))
    }

    /// The vectors' length, fixed when the index was created.
    #[getter]
    fn dimensions(&self) -> usize {
        self.dims
    }
    /// The distance: ``"euclidean"``, ``"cosine"`` or ``"inner_product"``.
    #[getter]
    fn metric(&self) -> &'static str {
        self.metric.name()
    }
    /// How vectors are stored: ``"full"``, ``"half"`` or ``"int8"``.
    ///
    /// ``"full"`` is float32 and ``"half"`` float16; ``"int8"`` keeps 8-bit codes only, and
    /// then the distances and ``get`` are the codes'.
    #[getter]
    fn precision(&self) -> &'static str {
        self.precision.name()
    }
    /// ``"int8"`` or ``"int4"`` for an index that keeps codes beside its vectors, else None.
    ///
    /// 8-bit or 4-bit codes, fixed when the file was created (``IndexOptions.quantization``).
    #[getter]
    fn quantization(&self) -> Option<&'static str> {
        self.quantization.name()
    }
    /// Whether searches walk the codes now.
    ///
    /// True for a quantized index whose quantizer is learned (from its first 1,000 rows, or by
    /// ``train``); False before that, and always for an index without codes.
    #[getter]
    fn trained(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |idx| Ok(idx.is_trained()))
    }

    /// Learn the 8-bit quantizer of a quantized index from a sample of vectors.
    ///
    /// A quantized index (``IndexOptions(quantization="int8")``) learns it by itself from its
    /// first 1,000 rows; call this to learn it from a sample of your choosing instead, before
    /// or after adding. Each dimension's range runs from the sample's minimum to its maximum;
    /// values outside it are stored clipped to its ends and counted (``Check.clipped``).
    /// The vectors already added are encoded at once; the next ``flush()`` makes it durable.
    /// ``compact()`` learns it again from the live vectors.
    ///
    /// Parameters
    /// ----------
    /// sample : array_like, shape (n, dimensions)
    ///     Vectors like the ones the index will hold (converted to float32 once if needed).
    /// threads : int, optional
    ///     Threads to encode the stored vectors with, from 1 to 1024; by default every core.
    ///
    /// Raises
    /// ------
    /// InvalidArgumentError
    ///     The index keeps no codes, its quantizer is already learned, or the sample holds
    ///     NaN or infinity.
    /// DimensionMismatchError
    ///     The sample is empty or its rows are not ``dimensions`` long.
    /// ReadOnlyError
    ///     The index was opened read-only.
    ///
    /// Examples
    /// --------
    /// >>> import numpy as np, chassis
    /// >>> index = chassis.VectorIndex(None, 8, chassis.IndexOptions(quantization="int8"))
    /// >>> index.train(np.random.default_rng(0).random((100, 8), dtype=np.float32))
    /// >>> index.trained
    /// True
    #[pyo3(signature = (sample, *, threads = None))]
    fn train(
        &self,
        py: Python<'_>,
        sample: &Bound<'_, PyAny>,
        threads: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let arr = f32_array(sample, 2, "sample")?;
        let n = arr.shape()[0];
        let threads = opt_count(threads, "threads", 1024)?;
        // SAFETY: as in `search::do_search`.
        let data = unsafe { arr.as_slice() }?;
        let idx = self.index()?;
        run::run_long_threaded(py, n as u64, false, "training", |ctl| {
            idx.train(data, n, threads, ctl)
        })
    }
    /// The index file as a ``pathlib.Path``; None for an index in memory.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.fspath.is_none(py) {
            return Ok(py.None());
        }
        if let Some(p) = self.path.get() {
            return Ok(p.clone_ref(py));
        }
        let p = py.import("pathlib")?.getattr("Path")?.call1((self.fspath.bind(py),))?.unbind();
        Ok(self.path.get_or_init(|| p).clone_ref(py))
    }
    /// True when opened for searching only (``read_only=True`` or ``IndexReader``).
    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }
    /// True once ``close()`` was called (or the ``with`` block ended).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().is_none()
    }
    /// The options in effect, as an ``IndexOptions`` (the fixed ones from the file).
    #[getter]
    fn options(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let o = self.index()?.options().clone();
        options_to_py(py, &o)
    }
    /// Vectors added since the last flush (0 when there is nothing to flush).
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |idx| Ok(idx.pending()))
    }

    /// An HTML summary for notebooks.
    fn _repr_html_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py().import("chassis._display")?.getattr("repr_html")?.call1((slf,))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let path = if self.fspath.is_none(py) {
            "None (in memory)".to_string()
        } else {
            // The path as `path` gives it (normalised by pathlib), else as it was passed.
            let p = self.path(py).unwrap_or_else(|_| self.fspath.clone_ref(py));
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
