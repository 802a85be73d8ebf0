//! `VectorIndex`: the Python class over one core `Index`, and its one `#[pymethods]` block.
//!
//! | file             | what it holds                                                          |
//! |------------------|------------------------------------------------------------------------|
//! | `mod.rs`         | the class as Python sees it: each method's signature, docstring and    |
//! |                  | arguments, then a call into the file below that does its work          |
//! | `lifecycle.rs`   | opening, loading into memory, writing out (`save`, `backup`), `repr`   |
//! | `writes.rs`      | adding rows, training the quantizer                                    |
//! | `maintenance.rs` | `check`, `compact`, `consolidate`, `warm`, `memory_stats`              |
//!
//! The reads it shares with `Snapshot` (`search`, `get`, `ids`, ...) are in `../reads.rs`,
//! which also says why a class has one `#[pymethods]` block; the docstrings longer than a
//! screen are in `../doc/`.
//!
//! The class is frozen and holds the index behind its own RwLock, so that it is safe without
//! the GIL (free-threaded Python too). Every method detaches from the interpreter before it
//! takes the lock: a call that waits for a writer never holds the GIL while it waits.

mod lifecycle;
mod maintenance;
mod writes;

use super::convert::{check_width, f32_array, id_arg, ids_arg, int_arg, opt_count};
use super::errors::{self, to_py};
use super::options::{options_from, options_to_py};
use super::reads::{pymethods_with_reads, View};
use super::run::{self, Count};
use super::snapshot::Snapshot;
use crate::error::{Error, Result};
use crate::format::{Metric, Precision, Quantization};
use crate::index::{Index, Mode};
use lifecycle::path_arg;
use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use parking_lot::RwLock;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, OnceLock};

/// `_changes_since`'s answer: the commit, the file's length, the pieces to write.
type CommitChanges<'py> = (u64, u64, Vec<(u64, Bound<'py, pyo3::types::PyBytes>)>);

#[doc = include_str!("../doc/VectorIndex.md")]
#[pyclass(module = "chassis", frozen, subclass, name = "VectorIndex")]
pub struct VectorIndex {
    /// None once closed. The lock is held only to clone or take the Arc: calls run on their
    /// own clone, without it.
    inner: RwLock<Option<Arc<Index>>>,
    /// `os.fspath` of the path the index was opened with; None in memory.
    fspath: Py<PyAny>,
    /// `fspath` as a `pathlib.Path`, made when first asked for: importing pathlib is a large
    /// share of a fresh process's first open (docs/design/larger-than-memory.md).
    path: OnceLock<Py<PyAny>>,
    dims: usize,
    metric: Metric,
    precision: Precision,
    quantization: Quantization,
    read_only: bool,
}

impl VectorIndex {
    /// The open index, or IndexClosedError.
    fn index(&self) -> PyResult<Arc<Index>> {
        self.inner.read().clone().ok_or_else(|| to_py(Error::closed()))
    }

    /// What the shared read methods read: the index's current state.
    fn view(&self) -> PyResult<View> {
        Ok(View { idx: self.index()?, pinned: None })
    }

    /// Run `f` on the open index without the GIL.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Index) -> Result<R> + Send,
    ) -> PyResult<R> {
        self.view()?.run(py, f)
    }
}

pymethods_with_reads!(
    type Class = VectorIndex;

    // Opening and closing (the work: lifecycle.rs).

    #[new]
    #[pyo3(signature = (path, dimensions = None, options = None, read_only = false))]
    fn new(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        dimensions: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyAny>>,
        read_only: bool,
    ) -> PyResult<Self> {
        let dims = opt_count(dimensions, "dimensions", 1 << 16)?;
        let opts = options_from(py, options)?;
        if path.is_none() {
            return Self::create_in_memory(py, dims, opts, read_only);
        }
        let (p, fspath) = path_arg(py, path)?;
        let mode = if read_only { Mode::Read } else { Mode::Write };
        Self::open_file(py, &p, fspath, dims, opts, mode)
    }

    #[doc = include_str!("../doc/load.md")]
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
        // Checked either way: a bad count is refused whether or not it would be used.
        let threads = opt_count(threads, "threads", 1024)?;
        if !in_memory {
            return Self::open_file(py, &p, fspath, None, opts, Mode::Write);
        }
        Self::load_into_memory(py, &p, opts, threads, progress)
    }

    #[doc = include_str!("../doc/save.md")]
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

    #[doc = include_str!("../doc/backup.md")]
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

    // Writes (the work: writes.rs).

    #[doc = include_str!("../doc/add.md")]
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

    #[doc = include_str!("../doc/add_batch.md")]
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
        let (n, width) = (arr.shape()[0], arr.shape()[1]);
        check_width("vectors", n, width, self.dims)?;
        let ids = ids.filter(|i| !i.is_none()).map(ids_arg).transpose()?;
        let threads = opt_count(threads, "threads", 1024)?;
        self.add_rows(py, &arr, ids, threads, progress)
    }

    #[doc = include_str!("../doc/delete.md")]
    fn delete(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        // An id no index can hold is refused as `get` refuses it (not "not found").
        let id = id_arg(id)?;
        self.with(py, |idx| idx.delete(id))
    }

    #[doc = include_str!("../doc/delete_batch.md")]
    fn delete_batch(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<u64> {
        let ids = ids_arg(ids)?;
        self.with(py, |idx| idx.delete_batch(&ids))
    }

    #[doc = include_str!("../doc/upsert.md")]
    #[pyo3(signature = (vectors, ids, *, threads = None, progress = false))]
    fn upsert<'py>(
        &self,
        py: Python<'py>,
        vectors: &Bound<'py, PyAny>,
        ids: &Bound<'py, PyAny>,
        threads: Option<&Bound<'py, PyAny>>,
        progress: bool,
    ) -> PyResult<u64> {
        let arr = f32_array(vectors, 2, "vectors")?;
        let (n, width) = (arr.shape()[0], arr.shape()[1]);
        check_width("vectors", n, width, self.dims)?;
        let ids = ids_arg(ids)?;
        let threads = opt_count(threads, "threads", 1024)?;
        self.upsert_rows(py, &arr, ids, threads, progress)
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

    #[doc = include_str!("../doc/train.md")]
    #[pyo3(signature = (sample, *, threads = None, progress = false))]
    fn train(
        &self,
        py: Python<'_>,
        sample: &Bound<'_, PyAny>,
        threads: Option<&Bound<'_, PyAny>>,
        progress: bool,
    ) -> PyResult<()> {
        let arr = f32_array(sample, 2, "sample")?;
        let threads = opt_count(threads, "threads", 1024)?;
        self.train_on(py, &arr, threads, progress)
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

    // Reads of its own (the shared ones: ../reads.rs).

    /// Pin the current state for several calls that must agree.
    ///
    /// A writer's snapshot holds its adds so far; a reader's, the newest flush. Searches on
    /// it see the same vectors whatever is added, deleted or flushed meanwhile, for as long
    /// as the object lives (or until its ``with`` block ends).
    ///
    /// Returns
    /// -------
    /// Snapshot
    ///     The pinned state.
    fn snapshot(&self, py: Python<'_>) -> PyResult<Snapshot> {
        let idx = self.index()?;
        let snap = py.detach(|| idx.snapshot());
        Ok(Snapshot::new(idx, snap))
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

    /// How many vectors were deleted and not yet compacted away.
    ///
    /// Returns
    /// -------
    /// int
    ///     Deleted vectors still taking space in the file.
    fn deleted_count(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |idx| idx.deleted_count())
    }

    /// How many deletes searches may still walk through.
    ///
    /// They are the deletes since the last consolidation (``consolidate()``, or the next
    /// ``add_batch`` once they are many).
    ///
    /// Returns
    /// -------
    /// int
    ///     This handle's deletes not yet consolidated; 0 for a handle opened read-only.
    ///     Deletes an earlier writer left unconsolidated are not counted (the file does not
    ///     record them); any consolidation takes them out too.
    fn unconsolidated_count(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |idx| Ok(idx.unconsolidated()))
    }

    // Maintenance and memory (the work: maintenance.rs).

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
        self.check_all(py, progress)
    }

    #[doc = include_str!("../doc/compact.md")]
    #[pyo3(signature = (*, threads = None, progress = false))]
    fn compact(
        &self,
        py: Python<'_>,
        threads: Option<&Bound<'_, PyAny>>,
        progress: bool,
    ) -> PyResult<()> {
        let threads = opt_count(threads, "threads", 1024)?;
        self.rebuild(py, threads, progress)
    }

    #[doc = include_str!("../doc/consolidate.md")]
    #[pyo3(signature = (*, threads = None, progress = false))]
    fn consolidate(
        &self,
        py: Python<'_>,
        threads: Option<&Bound<'_, PyAny>>,
        progress: bool,
    ) -> PyResult<u64> {
        let threads = opt_count(threads, "threads", 1024)?;
        self.relink(py, threads, progress)
    }

    /// The last commit: ``(seq, slots, user_version)``, ``slots`` counting live and deleted
    /// rows. Used by ``chassis.ray`` to record each shard's state at a sharded flush.
    fn _committed(&self, py: Python<'_>) -> PyResult<(u64, u64, u64)> {
        self.with(py, |idx| idx.committed_state())
    }

    /// Never reuse a deleted row's slot in this handle: ``chassis.ray`` opens its shards so,
    /// since ``_rewind`` brings rows back from their slots.
    fn _keep_slots(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| {
            idx.keep_slots();
            Ok(())
        })
    }

    /// Take the rows back to those of this file's commit ``seq``, which held ``slots`` slots
    /// (``_committed()`` then), as one change the next ``flush()`` commits. Rows added since
    /// are deleted; rows deleted since are added again under their ids. Nothing may be
    /// pending, and the commit must be this file's (not from before a ``compact()``). Used by
    /// ``chassis.ray`` to take a shard back to the sharded index's last flush. Returns
    /// ``(removed, restored)``.
    #[pyo3(signature = (slots, seq, *, threads = None))]
    fn _rewind(
        &self,
        py: Python<'_>,
        slots: u64,
        seq: u64,
        threads: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, u64)> {
        let threads = opt_count(threads, "threads", 1024)?;
        let idx = self.index()?;
        let r = run::run_long(py, 0, Count::VectorsThreaded, false, "rewinding", |ctl| {
            idx.rewind(slots, seq, threads, ctl)
        })?;
        Ok((r.removed, r.restored))
    }

    /// ``(lineage, seq)``: which file (a number drawn for it) and its last commit, what a
    /// copy of the file made now is a copy of. Used by ``chassis.ray`` for replicas that keep
    /// their own copy of a shard.
    fn _lineage(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        self.with(py, |idx| idx.lineage())
    }

    /// What turns a copy of this file at commit ``seq`` of ``lineage`` into a copy of the last
    /// commit: ``(seq, length, [(offset, bytes), ...])``: the copy's file made ``length``
    /// bytes long, then the pieces written in order (the header last, after a sync), or None
    /// if the commits since are not all known (the copy needs the whole file). Nothing may be
    /// pending. Used by ``chassis.ray`` to feed replicas on other machines.
    fn _changes_since<'py>(
        &self,
        py: Python<'py>,
        lineage: u64,
        seq: u64,
    ) -> PyResult<Option<CommitChanges<'py>>> {
        let idx = self.index()?;
        let got = py.detach(|| idx.changes_since(lineage, seq)).map_err(to_py)?;
        Ok(got.map(|c| {
            let pieces =
                c.pieces.iter().map(|(o, b)| (*o, pyo3::types::PyBytes::new(py, b))).collect();
            (c.seq, c.len, pieces)
        }))
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

    #[doc = include_str!("../doc/warm.md")]
    #[pyo3(signature = (*, vectors = true, wait = false, progress = false))]
    fn warm(&self, py: Python<'_>, vectors: bool, wait: bool, progress: bool) -> PyResult<bool> {
        self.read_in(py, vectors, wait, progress)
    }

    #[doc = include_str!("../doc/memory_stats.md")]
    fn memory_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.with(py, |idx| idx.memory_stats())?;
        maintenance::memory_dict(py, &m)
    }

    // What the index is.

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
    /// The index file as a ``pathlib.Path``; None for an index in memory.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.pathlib_path(py)
    }
    /// True for an index without a file (``VectorIndex(None, dims)``, ``VectorIndex.load``).
    #[getter]
    fn in_memory(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |idx| Ok(idx.is_memory()))
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
        self.describe(py)
    }
);
