//! The native module `chassis._chassis`: the only code that touches pyo3.
//!
//! `VectorIndex` is a frozen class holding the core index behind its own RwLock, so that it is
//! safe without the GIL (free-threaded Python too). Every method detaches from the interpreter
//! before it takes the lock: a call that waits for a writer never holds the GIL while it waits.

mod convert;
mod errors;
mod run;

use crate::error::{Error, Result};
use crate::format::{Metric, Precision};
use crate::index::{BatchFilter, Filter, Hit, Index, Mode, Options, Placement, Snap, MAX_K};
use convert::{
    count_arg, f32_array, filter_ids_arg, id_arg, ids_arg, int_arg, is_per_query, matrix, vector,
};
use errors::{to_py, type_error, IntoPyResult};
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyUntypedArrayMethods};
use parking_lot::RwLock;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::Arc;

/// What `search_batch` returns: ids and distances, (queries, k) each.
type BatchArrays<'py> = (Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>);

/// One search hit: the caller's id and the distance (smaller is nearer).
#[pyclass(module = "chassis", frozen, name = "SearchResult")]
pub struct SearchResult {
    #[pyo3(get)]
    id: u64,
    #[pyo3(get)]
    distance: f64,
}

#[pymethods]
impl SearchResult {
    #[new]
    fn new(id: u64, distance: f64) -> Self {
        SearchResult { id, distance }
    }
    fn __repr__(&self) -> String {
        format!("SearchResult(id={}, distance={:.6})", self.id, self.distance)
    }
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyTuple::new(
            py,
            [self.id.into_pyobject(py)?.into_any(), self.distance.into_pyobject(py)?.into_any()],
        )?
        .try_iter()?
        .into_any())
    }
    fn __len__(&self) -> usize {
        2
    }
    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyAny>> {
        match i {
            0 | -2 => Ok(self.id.into_pyobject(py)?.into_any()),
            1 | -1 => Ok(self.distance.into_pyobject(py)?.into_any()),
            _ => Err(pyo3::exceptions::PyIndexError::new_err(
                "SearchResult has two fields: id, distance",
            )),
        }
    }
    /// Equal to another SearchResult or to an (id, distance) tuple with the same values.
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(o) = other.cast::<SearchResult>() {
            let o = o.get();
            return o.id == self.id && o.distance == self.distance;
        }
        other
            .extract::<(u64, f64)>()
            .map(|(i, d)| i == self.id && d == self.distance)
            .unwrap_or(false)
    }
    fn __hash__(&self) -> u64 {
        self.id ^ self.distance.to_bits().rotate_left(17)
    }
}

fn hits_to_list<'py>(py: Python<'py>, hits: Vec<Hit>) -> PyResult<Bound<'py, PyList>> {
    let items: Vec<Bound<'py, SearchResult>> = hits
        .into_iter()
        .map(|h| Bound::new(py, SearchResult { id: h.id, distance: h.distance as f64 }))
        .collect::<PyResult<_>>()?;
    PyList::new(py, items)
}

/// Options from a Python `IndexOptions` (or a dict of its fields), validated there.
fn options_from(
    py: Python<'_>,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(Options, Py<PyAny>)>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    let cls = py.import("chassis._options")?.getattr("IndexOptions")?;
    let obj = if let Ok(d) = obj.cast::<PyDict>() { cls.call((), Some(d))? } else { obj.clone() };
    if !obj.is_instance(&cls)? {
        return Err(type_error(
            py,
            format!("options={} is not an IndexOptions", obj.repr()?),
            "pass chassis.IndexOptions(...) or a dict of its fields",
        ));
    }
    obj.call_method0("validate")?;
    let metric: String = obj.getattr("metric")?.extract()?;
    let precision: String = obj.getattr("precision")?.extract()?;
    let o = Options {
        max_connections: obj.getattr("max_connections")?.extract()?,
        ef_construction: obj.getattr("ef_construction")?.extract()?,
        ef_search: obj.getattr("ef_search")?.extract()?,
        metric: Metric::parse(&metric).py()?,
        precision: Precision::parse(&precision).py()?,
        huge_pages: obj.getattr("huge_pages")?.extract()?,
        warm: obj.getattr("warm")?.extract()?,
        placement: Placement::parse(&obj.getattr("placement")?.extract::<String>()?).py()?,
    };
    Ok(Some((o, obj.unbind())))
}

fn options_to_py(py: Python<'_>, o: &Options) -> PyResult<Py<PyAny>> {
    let kw = PyDict::new(py);
    kw.set_item("max_connections", o.max_connections)?;
    kw.set_item("ef_construction", o.ef_construction)?;
    kw.set_item("ef_search", o.ef_search)?;
    kw.set_item("metric", o.metric.name())?;
    kw.set_item("precision", o.precision.name())?;
    kw.set_item("huge_pages", o.huge_pages)?;
    kw.set_item("warm", o.warm)?;
    kw.set_item("placement", o.placement.name())?;
    Ok(py.import("chassis._options")?.getattr("IndexOptions")?.call((), Some(&kw))?.unbind())
}

/// Query arguments shared by `VectorIndex.search` and `Snapshot.search`.
struct SearchArgs {
    k: usize,
    ef: Option<usize>,
    filter: Option<Filter>,
    /// search_batch: one filter per query.
    per_query: Option<Vec<Filter>>,
}

/// One `allowed`/`excluded` value: None, ids, or a boolean mask.
fn filter_set(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u64>>> {
    obj.filter(|a| !a.is_none()).map(filter_ids_arg).transpose()
}

fn make_filter(allowed: Option<Vec<u64>>, excluded: Option<Vec<u64>>) -> Option<Filter> {
    if allowed.is_none() && excluded.is_none() {
        return None;
    }
    Some(Filter { allowed, excluded: excluded.unwrap_or_default() })
}

impl SearchArgs {
    fn parse(
        k: Option<&Bound<'_, PyAny>>,
        ef: Option<&Bound<'_, PyAny>>,
        allowed: Option<&Bound<'_, PyAny>>,
        excluded: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SearchArgs> {
        let k = match k {
            Some(k) if !k.is_none() => count_arg(k, "k", MAX_K)?,
            _ => 10,
        };
        let ef = opt_count(ef, "ef", MAX_K)?;
        let filter = make_filter(filter_set(allowed)?, filter_set(excluded)?);
        Ok(SearchArgs { k, ef, filter, per_query: None })
    }

    /// As `parse`, where `allowed` and `excluded` may also be lists with one entry (ids, a
    /// mask, or None) per query.
    fn parse_batch(
        k: Option<&Bound<'_, PyAny>>,
        ef: Option<&Bound<'_, PyAny>>,
        allowed: Option<&Bound<'_, PyAny>>,
        excluded: Option<&Bound<'_, PyAny>>,
        nq: usize,
    ) -> PyResult<SearchArgs> {
        let per = |o: Option<&Bound<'_, PyAny>>| -> PyResult<bool> {
            o.filter(|a| !a.is_none()).map(is_per_query).unwrap_or(Ok(false))
        };
        if !per(allowed)? && !per(excluded)? {
            return Self::parse(k, ef, allowed, excluded);
        }
        let mut a = Self::parse(k, ef, None, None)?;
        let split = |o: Option<&Bound<'_, PyAny>>, name: &str| -> PyResult<Vec<Option<Vec<u64>>>> {
            match o.filter(|x| !x.is_none()) {
                None => Ok(vec![None; nq]),
                Some(x) if is_per_query(x)? => {
                    if x.len()? != nq {
                        return Err(errors::named(
                            x.py(),
                            "InvalidArgumentError",
                            format!("{name} has {} entries for {nq} queries", x.len()?),
                            "pass one entry per query, or one set for all",
                        ));
                    }
                    (0..nq).map(|i| filter_set(Some(&x.get_item(i)?))).collect()
                }
                Some(x) => {
                    let one = filter_set(Some(x))?;
                    Ok(vec![one; nq])
                }
            }
        };
        let (al, ex) = (split(allowed, "allowed")?, split(excluded, "excluded")?);
        a.per_query = Some(
            al.into_iter().zip(ex).map(|(a, e)| make_filter(a, e).unwrap_or_default()).collect(),
        );
        Ok(a)
    }
}

fn do_search<'py>(
    py: Python<'py>,
    idx: &Index,
    snap: Option<&Arc<Snap>>,
    query: &Bound<'py, PyAny>,
    a: SearchArgs,
) -> PyResult<Bound<'py, PyList>> {
    let arr = f32_array(query, 1, "the query")?;
    // SAFETY: no Rust code holds a mutable borrow of a caller's array; the slice is read
    // while the array is kept alive by `arr`.
    let q = unsafe { arr.as_slice() }?;
    let hits = py
        .detach(|| {
            let snap = snap.cloned().unwrap_or_else(|| idx.snap());
            idx.search_in(&snap, q, a.k, a.ef, a.filter.as_ref())
        })
        .map_err(to_py)?;
    hits_to_list(py, hits)
}

#[allow(clippy::type_complexity)]
fn do_search_batch<'py>(
    py: Python<'py>,
    idx: &Index,
    snap: Option<&Arc<Snap>>,
    queries: &Bound<'py, PyAny>,
    args: (
        Option<&Bound<'py, PyAny>>,
        Option<&Bound<'py, PyAny>>,
        Option<&Bound<'py, PyAny>>,
        Option<&Bound<'py, PyAny>>,
    ),
    threads: Option<&Bound<'py, PyAny>>,
    progress: bool,
) -> PyResult<BatchArrays<'py>> {
    let threads = opt_count(threads, "threads", 1024)?;
    let arr = f32_array(queries, 2, "queries")?;
    let shape = arr.shape().to_vec();
    let (nq, d) = (shape[0], shape[1]);
    let a = SearchArgs::parse_batch(args.0, args.1, args.2, args.3, nq)?;
    let dims = idx.dims();
    if d != dims && nq > 0 {
        return Err(to_py(Error::new(
            crate::error::ErrorKind::DimensionMismatch,
            format!("queries have {d} dimensions; this index holds {dims}"),
            format!("pass an array of shape (n, {dims})"),
        )));
    }
    // SAFETY: as in `do_search`.
    let qs = unsafe { arr.as_slice() }?;
    let snap = match snap {
        Some(s) => s.clone(),
        None => py.detach(|| idx.snap()),
    };
    let (ids, dists) = run::run_long(py, nq as u64, progress, "searching", |ctl| {
        let filters = match &a.per_query {
            Some(v) => BatchFilter::PerQuery(v),
            None => BatchFilter::Same(a.filter.as_ref()),
        };
        idx.search_batch_in(&snap, qs, nq, a.k, a.ef, filters, threads, ctl)
    })?;
    Ok((matrix(py, nq, a.k, ids), matrix(py, nq, a.k, dists)))
}

/// A vector index in one file. The writer: one process at a time opens a file for writing;
/// `read_only=True` (or `IndexReader`) opens it for searching, without the lock. `path=None`
/// makes an index in memory, without a file (`save` writes one, `VectorIndex.load` reads one
/// in); there `flush()` does nothing.
#[pyclass(module = "chassis", frozen, subclass, name = "VectorIndex")]
pub struct VectorIndex {
    /// None once closed. The lock is held only to clone or take the Arc: calls run on their
    /// own clone, without it.
    inner: RwLock<Option<Arc<Index>>>,
    path: Py<PyAny>,
    dims: usize,
    metric: Metric,
    precision: Precision,
    read_only: bool,
}

impl VectorIndex {
    fn index(&self) -> PyResult<Arc<Index>> {
        self.inner.read().clone().ok_or_else(|| to_py(Error::closed()))
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

    fn wrap(py: Python<'_>, idx: Index, path: Py<PyAny>, read_only: bool) -> PyResult<Self> {
        for w in &idx.warnings {
            let cat = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
            PyErr::warn(py, &cat, &std::ffi::CString::new(w.as_str()).unwrap_or_default(), 1)?;
        }
        emit_notices(py)?;
        Ok(VectorIndex {
            dims: idx.dims(),
            metric: idx.metric(),
            precision: idx.precision(),
            read_only,
            path,
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

fn opt_count(obj: Option<&Bound<'_, PyAny>>, name: &str, max: usize) -> PyResult<Option<usize>> {
    obj.filter(|o| !o.is_none()).map(|o| count_arg(o, name, max)).transpose()
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
        let pathobj = py.import("pathlib")?.getattr("Path")?.call1((fspath,))?.unbind();
        Self::wrap(py, idx, pathobj, read_only)
    }

    /// Open the index file at `path` as a writer, or with `in_memory=True` (the default) copy
    /// its last flush into memory: a writer of its own that leaves the file alone (any process
    /// may keep writing it). The copy is made by all threads under balanced placement.
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
            let pathobj = py.import("pathlib")?.getattr("Path")?.call1((fspath,))?.unbind();
            return Self::wrap(py, idx, pathobj, false);
        }
        let threads = opt_count(threads, "threads", 1024)?;
        let total = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        let idx = run::run_long_units(py, total, progress, "loading", "B", |ctl| {
            Index::load(&p, opts.as_ref().map(|o| &o.0), threads, ctl)
        })?;
        Self::wrap(py, idx, py.None(), false)
    }

    /// Write the index as an ordinary index file at `path` (any IndexReader or VectorIndex opens
    /// it), renamed into place when whole and synced. In memory, what it holds now; a
    /// file-backed writer flushes first (as `backup`). `path` may be missing, empty or an index
    /// no writer holds; any other file is replaced only with `overwrite=True`, and a file a
    /// writer holds never (IndexLockedError).
    #[pyo3(signature = (path, *, overwrite = false))]
    fn save(&self, py: Python<'_>, path: &Bound<'_, PyAny>, overwrite: bool) -> PyResult<()> {
        let (p, _) = path_arg(py, path)?;
        self.with(py, |idx| idx.save(&p, overwrite))
    }

    /// True for an index without a file (`VectorIndex(None, dims)`, `VectorIndex.load`).
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

    /// Add one vector; returns its id (the largest id so far + 1 unless given).
    #[pyo3(signature = (vector, id = None))]
    fn add(
        &self,
        py: Python<'_>,
        vector: &Bound<'_, PyAny>,
        id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let arr = f32_array(vector, 1, "the vector")?;
        let id = id.filter(|i| !i.is_none()).map(id_arg).transpose()?;
        // SAFETY: as in `do_search`.
        let v = unsafe { arr.as_slice() }?;
        self.with(py, |idx| idx.add(v, id))
    }

    /// Add the rows of an (n, dimensions) array, linked on all cores (or `threads`). All or
    /// nothing: if anything is wrong, or the call is interrupted, nothing is added. Searches
    /// in other threads go on meanwhile and see the batch when it is done.
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
        // SAFETY: as in `do_search`.
        let data = unsafe { arr.as_slice() }?;
        let idx = self.index()?;
        let out = run::run_long(py, n as u64, progress, "adding", |ctl| {
            idx.add_batch(data, n, ids.as_deref(), threads, ctl)
        });
        emit_notices(py)?;
        Ok(vector(py, out?))
    }

    /// The k nearest vectors to `query`, nearest first. `allowed`: only these ids may be
    /// returned; `excluded`: these never are. `ef` overrides the options' ef_search.
    #[pyo3(signature = (query, k = None, allowed = None, excluded = None, *, ef = None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
        allowed: Option<&Bound<'py, PyAny>>,
        excluded: Option<&Bound<'py, PyAny>>,
        ef: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let a = SearchArgs::parse(k, ef, allowed, excluded)?;
        do_search(py, &*self.index()?, None, query, a)
    }

    /// Search every row of a (q, dimensions) array on all cores (or `threads`). Returns
    /// `(ids, distances)`, two (q, k) arrays (uint64, float32), padded with 2**64-1 and inf.
    #[pyo3(signature = (queries, k = None, allowed = None, excluded = None, *, ef = None, threads = None, progress = false))]
    #[allow(clippy::too_many_arguments)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
        allowed: Option<&Bound<'py, PyAny>>,
        excluded: Option<&Bound<'py, PyAny>>,
        ef: Option<&Bound<'py, PyAny>>,
        threads: Option<&Bound<'py, PyAny>>,
        progress: bool,
    ) -> PyResult<BatchArrays<'py>> {
        do_search_batch(
            py,
            &*self.index()?,
            None,
            queries,
            (k, ef, allowed, excluded),
            threads,
            progress,
        )
    }

    /// A snapshot: one committed state (a writer's: with its published adds), pinned for as
    /// long as the object lives, for several searches that must agree.
    fn snapshot(&self, py: Python<'_>) -> PyResult<Snapshot> {
        let idx = self.index()?;
        let snap = py.detach(|| idx.snap());
        Ok(Snapshot { idx, snap })
    }

    /// The stored vector of `id` (normalised for cosine, rounded for half precision), or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let id = id_arg(id)?;
        Ok(self.with(py, |idx| idx.get(id))?.map(|v| vector(py, v)))
    }

    /// Live ids, in insertion order.
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

    fn is_empty(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |idx| Ok(idx.is_empty()))
    }

    /// Make every change durable (milliseconds; nothing happens when nothing changed).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| idx.flush())
    }

    /// Delete `id`: hidden from this handle's searches at once, durable at the next flush.
    /// Returns False if no live vector has it.
    fn delete(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        // An id no index can hold is refused as `get` refuses it (not "not found").
        let id = id_arg(id)?;
        self.with(py, |idx| idx.delete(id))
    }

    /// Vectors deleted and not yet compacted away.
    fn deleted_count(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |idx| idx.deleted_count())
    }

    /// A full scan of vectors and graph; returns a `Check`.
    #[pyo3(signature = (*, progress = false))]
    fn check<'py>(&self, py: Python<'py>, progress: bool) -> PyResult<Bound<'py, PyAny>> {
        let idx = self.index()?;
        let total = py.detach(|| idx.snap().slots);
        let r = run::run_long_threaded(py, total, progress, "checking", |ctl| idx.check(ctl))?;
        py.import("chassis._check")?.getattr("Check")?.call1((
            r.unreachable,
            r.not_finite,
            r.corrupt,
        ))
    }

    /// Write a consistent copy of the last flush to `path` (a writer flushes first), renamed
    /// into place when whole. `path` as for `save`: another existing file only with
    /// `overwrite=True`, a file a writer holds never.
    #[pyo3(signature = (path, *, overwrite = false))]
    fn backup(&self, py: Python<'_>, path: &Bound<'_, PyAny>, overwrite: bool) -> PyResult<()> {
        let (p, _) = path_arg(py, path)?;
        self.with(py, |idx| idx.backup(&p, overwrite))
    }

    /// Rewrite the file without deleted vectors, with a rebuilt graph and the same ids.
    /// Flushes first; Ctrl-C or an error leaves the original untouched.
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

    /// Ask for huge pages under the vectors from now on (ADR-0016). A request: see
    /// `memory_stats()` for what the system granted.
    fn use_huge_pages(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| {
            idx.use_huge_pages();
            Ok(())
        })
    }

    /// Stop asking for huge pages (ADR-0016).
    fn keep_small_pages(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| {
            idx.keep_small_pages();
            Ok(())
        })
    }

    /// Read the written part of the file into memory on a background thread (ADR-0019).
    /// Returns at once; asking while it runs does nothing.
    fn warm(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| {
            idx.warm();
            Ok(())
        })
    }

    /// What the system holds of this index's mappings: written and resident bytes, vector
    /// bytes on huge pages, and the warm thread's progress.
    fn memory_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.with(py, |idx| idx.memory_stats())?;
        let d = PyDict::new(py);
        d.set_item("mapped_bytes", m.mapped_bytes)?;
        d.set_item("written_bytes", m.written_bytes)?;
        d.set_item("resident_bytes", m.resident_bytes)?;
        d.set_item("vector_bytes", m.vector_bytes)?;
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
    fn rollback(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |idx| idx.rollback())
    }

    /// Close without flushing (unflushed changes are discarded). Closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let idx = self.inner.write().take();
        if let Some(idx) = idx {
            py.detach(|| idx.close()).map_err(to_py)?;
        }
        Ok(())
    }

    /// The application's own u64, committed by the next flush and restored by rollback.
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

    #[getter]
    fn dimensions(&self) -> usize {
        self.dims
    }
    #[getter]
    fn metric(&self) -> &'static str {
        self.metric.name()
    }
    #[getter]
    fn precision(&self) -> &'static str {
        self.precision.name()
    }
    #[getter]
    fn path(&self, py: Python<'_>) -> Py<PyAny> {
        self.path.clone_ref(py)
    }
    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().is_none()
    }
    /// The options in effect (fixed ones from the file).
    #[getter]
    fn options(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let o = self.index()?.options().clone();
        options_to_py(py, &o)
    }
    /// Vectors added since the last flush.
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |idx| Ok(idx.pending()))
    }

    /// An HTML summary for notebooks.
    fn _repr_html_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py().import("chassis._display")?.getattr("repr_html")?.call1((slf,))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let path = self.path.bind(py);
        let path = if path.is_none() {
            "None (in memory)".to_string()
        } else {
            format!("{:?}", path.str().map(|s| s.to_string()).unwrap_or_default())
        };
        let state = self
            .inner
            .read()
            .clone()
            .map(|i| py.detach(|| (i.len(), if i.is_read_only() { 0 } else { i.pending() })));
        let tail = match state {
            Some((n, p)) => format!("len={n}, pending={p}, status=open"),
            None => "status=closed".into(),
        };
        let cls = if self.read_only { "IndexReader" } else { "VectorIndex" };
        format!(
            "{cls}(path={path}, dimensions={}, metric={:?}, precision={:?}, {tail})",
            self.dims,
            self.metric.name(),
            self.precision.name()
        )
    }
}

/// One state of an index, pinned: every search on it sees the same vectors, whatever is
/// flushed (or, in a writer, added) meanwhile. Use it as a context manager or just keep it.
#[pyclass(module = "chassis", frozen, name = "Snapshot")]
pub struct Snapshot {
    idx: Arc<Index>,
    snap: Arc<Snap>,
}

#[pymethods]
impl Snapshot {
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    #[pyo3(signature = (_exc_type = None, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        false
    }
    #[pyo3(signature = (query, k = None, allowed = None, excluded = None, *, ef = None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
        allowed: Option<&Bound<'py, PyAny>>,
        excluded: Option<&Bound<'py, PyAny>>,
        ef: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let a = SearchArgs::parse(k, ef, allowed, excluded)?;
        do_search(py, &self.idx, Some(&self.snap), query, a)
    }
    #[pyo3(signature = (queries, k = None, allowed = None, excluded = None, *, ef = None, threads = None, progress = false))]
    #[allow(clippy::too_many_arguments)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
        allowed: Option<&Bound<'py, PyAny>>,
        excluded: Option<&Bound<'py, PyAny>>,
        ef: Option<&Bound<'py, PyAny>>,
        threads: Option<&Bound<'py, PyAny>>,
        progress: bool,
    ) -> PyResult<BatchArrays<'py>> {
        do_search_batch(
            py,
            &self.idx,
            Some(&self.snap),
            queries,
            (k, ef, allowed, excluded),
            threads,
            progress,
        )
    }
    fn get<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let id = id_arg(id)?;
        Ok(py.detach(|| self.idx.get_in(&self.snap, id)).map_err(to_py)?.map(|v| vector(py, v)))
    }
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(vector(py, py.detach(|| self.idx.ids_in(&self.snap)).map_err(to_py)?))
    }
    fn __contains__(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let v = int_arg(id, "id")?;
        if v < 0 || v >= u64::MAX as i128 {
            return Ok(false);
        }
        py.detach(|| self.idx.contains_in(&self.snap, v as u64)).map_err(to_py)
    }
    fn __len__(&self) -> usize {
        self.snap.live as usize
    }
    /// The commit sequence number of this state.
    #[getter]
    fn seq(&self) -> u64 {
        self.snap.seq
    }
    #[getter]
    fn user_version(&self) -> u64 {
        self.snap.user_version
    }
    fn __repr__(&self) -> String {
        format!("Snapshot(seq={}, len={})", self.snap.seq, self.snap.live)
    }
}

/// (searches, distances they computed) in this process so far: graph searches only (not exact
/// scans). For benchmarks: distances per query measure the graph's efficiency.
#[pyfunction]
fn _search_counters() -> (u64, u64) {
    crate::graph::counters()
}

/// Range checks of IndexOptions (one place for them: the core's).
#[pyfunction]
fn _check_options(max_connections: i64, ef_construction: i64, ef_search: i64) -> PyResult<()> {
    // A negative value is named as the caller gave it (not as the 0 it would clamp to).
    for (name, v) in [
        ("max_connections", max_connections),
        ("ef_construction", ef_construction),
        ("ef_search", ef_search),
    ] {
        if v < 0 {
            return Err(to_py(Error::invalid(
                format!("{name}={v} is out of range"),
                "use a positive value",
            )));
        }
    }
    let conv = |v: i64| v as usize;
    Options {
        max_connections: conv(max_connections),
        ef_construction: conv(ef_construction),
        ef_search: conv(ef_search),
        ..Default::default()
    }
    .validate()
    .py()
}

/// The CPU as Chassis sees it: the distance kernels chosen and the prefetch policy
/// (ADR-0015).
#[pyfunction]
fn cpu_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let c = crate::cpu::info();
    let d = PyDict::new(py);
    d.set_item("arch", c.arch)?;
    d.set_item("vendor", &c.vendor)?;
    d.set_item("family", c.family)?;
    d.set_item("model", c.model)?;
    d.set_item("kernel", crate::distance::kernels().level)?;
    d.set_item(
        "kernels_available",
        crate::distance::available().iter().map(|k| k.level).collect::<Vec<_>>(),
    )?;
    d.set_item("prefetch_policy", c.policy)?;
    d.set_item("prefetch_lines", c.prefetch_lines)?;
    d.set_item("prefetch_cache", if c.prefetch_l1 { "L1" } else { "L2" })?;
    d.set_item("page_size", crate::os::page_size())?;
    Ok(d)
}

#[pymodule]
fn _chassis(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<VectorIndex>()?;
    m.add_class::<SearchResult>()?;
    m.add_class::<Snapshot>()?;
    m.add_function(wrap_pyfunction!(cpu_info, m)?)?;
    m.add_function(wrap_pyfunction!(_check_options, m)?)?;
    m.add_function(wrap_pyfunction!(_search_counters, m)?)?;
    Ok(())
}
