//! Searching, shared by `VectorIndex` and `Snapshot` (`reads.rs`): the query arguments (k, ef,
//! allowed, excluded) parsed once, the call without the GIL, and the results: a list of
//! `SearchResult` for one query, two NumPy arrays handed over without a copy for a batch.

use super::convert::{
    check_width, count_arg, csr_rows, f32_array, filter_ids_arg, is_csr, is_per_query, matrix,
    opt_count,
};
use super::errors::{self, to_py};
use super::reads::View;
use super::run::{self, Count};
use crate::index::{BatchFilter, Filter, Hit, Ids, MAX_K};
use numpy::{PyArray2, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// What `search_batch` returns: ids and distances, (queries, k) each.
pub type BatchArrays<'py> = (Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>);

/// The default number of results, as chassisdb had it.
pub const DEFAULT_K: usize = 10;

#[doc = include_str!("doc/SearchResult.md")]
#[pyclass(module = "chassis", frozen, name = "SearchResult")]
pub struct SearchResult {
    /// The vector's id (the caller's, or the one `add` gave it).
    #[pyo3(get)]
    id: u64,
    /// The distance to the query: smaller is nearer.
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
    /// The hash of the tuple `(id, distance)`, which compares equal to it.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        PyTuple::new(
            py,
            [self.id.into_pyobject(py)?.into_any(), self.distance.into_pyobject(py)?.into_any()],
        )?
        .hash()
    }
}

fn hits_to_list<'py>(py: Python<'py>, hits: Vec<Hit>) -> PyResult<Bound<'py, PyList>> {
    let items: Vec<Bound<'py, SearchResult>> = hits
        .into_iter()
        .map(|h| Bound::new(py, SearchResult { id: h.id, distance: h.distance as f64 }))
        .collect::<PyResult<_>>()?;
    PyList::new(py, items)
}

/// Query arguments shared by `VectorIndex.search` and `Snapshot.search`.
pub struct SearchArgs {
    k: usize,
    ef: Option<usize>,
    filter: Option<Filter>,
    /// search_batch: one filter per query.
    per_query: Option<Vec<Filter>>,
    /// With codes: candidates whose distances are computed again on the full vectors.
    rerank: Option<usize>,
}

/// One `allowed`/`excluded` value: None, ids, or a boolean mask.
fn filter_set(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Ids>> {
    obj.filter(|a| !a.is_none()).map(filter_ids_arg).transpose()
}

fn make_filter(allowed: Option<Ids>, excluded: Option<Ids>) -> Option<Filter> {
    if allowed.is_none() && excluded.is_none() {
        return None;
    }
    Some(Filter { allowed, excluded: excluded.unwrap_or_default() })
}

impl SearchArgs {
    pub fn parse(
        k: Option<&Bound<'_, PyAny>>,
        ef: Option<&Bound<'_, PyAny>>,
        allowed: Option<&Bound<'_, PyAny>>,
        excluded: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SearchArgs> {
        let k = match k {
            Some(k) if !k.is_none() => count_arg(k, "k", MAX_K)?,
            _ => DEFAULT_K,
        };
        let ef = opt_count(ef, "ef", MAX_K)?;
        let filter = make_filter(filter_set(allowed)?, filter_set(excluded)?);
        Ok(SearchArgs { k, ef, filter, per_query: None, rerank: None })
    }

    /// These arguments with a `rerank` count (None, or 1 to 2**24).
    pub fn with_rerank(mut self, rerank: Option<&Bound<'_, PyAny>>) -> PyResult<SearchArgs> {
        self.rerank = opt_count(rerank, "rerank", MAX_K)?;
        Ok(self)
    }

    /// As `parse`, where `allowed` and `excluded` may also be lists with one entry (ids, a
    /// mask, or None) per query.
    pub fn parse_batch(
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
        let split = |o: Option<&Bound<'_, PyAny>>, name: &str| -> PyResult<Vec<Option<Ids>>> {
            match o.filter(|x| !x.is_none()) {
                None => Ok(vec![None; nq]),
                Some(x) if is_csr(x)? => csr_rows(x, nq, name),
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

pub fn do_search<'py>(
    py: Python<'py>,
    view: &View,
    query: &Bound<'py, PyAny>,
    a: SearchArgs,
) -> PyResult<Bound<'py, PyList>> {
    let arr = f32_array(query, 1, "the query")?;
    // SAFETY: no Rust code holds a mutable borrow of a caller's array; the slice is read
    // while the array is kept alive by `arr`.
    let q = unsafe { arr.as_slice() }?;
    let hits = py
        .detach(|| view.idx.search_in(&view.snap(), q, a.k, a.ef, a.rerank, a.filter.as_ref()))
        .map_err(to_py)?;
    hits_to_list(py, hits)
}

#[allow(clippy::type_complexity)]
pub fn do_search_batch<'py>(
    py: Python<'py>,
    view: &View,
    queries: &Bound<'py, PyAny>,
    args: (
        Option<&Bound<'py, PyAny>>,
        Option<&Bound<'py, PyAny>>,
        Option<&Bound<'py, PyAny>>,
        Option<&Bound<'py, PyAny>>,
    ),
    rerank: Option<&Bound<'py, PyAny>>,
    threads: Option<&Bound<'py, PyAny>>,
    progress: bool,
) -> PyResult<BatchArrays<'py>> {
    let threads = opt_count(threads, "threads", 1024)?;
    let arr = f32_array(queries, 2, "queries")?;
    let shape = arr.shape().to_vec();
    let (nq, d) = (shape[0], shape[1]);
    let a = SearchArgs::parse_batch(args.0, args.1, args.2, args.3, nq)?.with_rerank(rerank)?;
    check_width("queries", nq, d, view.idx.dims())?;
    // SAFETY: as in `do_search`.
    let qs = unsafe { arr.as_slice() }?;
    let snap = py.detach(|| view.snap());
    let (ids, dists) =
        run::run_long(py, nq as u64, Count::Vectors, progress, "searching", |ctl| {
            let filters = match &a.per_query {
                Some(v) => BatchFilter::PerQuery(v),
                None => BatchFilter::Same(a.filter.as_ref()),
            };
            view.idx.search_batch_in(&snap, qs, nq, a.k, a.ef, a.rerank, filters, threads, ctl)
        })?;
    Ok((matrix(py, nq, a.k, ids), matrix(py, nq, a.k, dists)))
}
