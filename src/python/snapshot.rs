//! `Snapshot`: one committed state of an index, pinned for as long as the Python object lives.
//! Its search docstrings are the index's own (`doc/*.md`, shared with `VectorIndex`).

use super::convert::{id_arg, int_arg, vector};
use super::errors::to_py;
use super::search::{do_search, do_search_batch, BatchArrays, SearchArgs};
use crate::index::{Index, Snap};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::Arc;

/// One state of an index, pinned for several calls that must agree.
///
/// Every call on a snapshot sees the same vectors, whatever is flushed (or, in a writer,
/// added) meanwhile. Made by ``VectorIndex.snapshot()`` or ``IndexReader.snapshot()``; use it
/// as a context manager or just keep it (the state is released when it is garbage).
///
/// Examples
/// --------
/// >>> import numpy as np, chassis
/// >>> index = chassis.VectorIndex(None, 2)
/// >>> _ = index.add([1.0, 0.0])
/// >>> with index.snapshot() as snap:
/// ...     _ = index.add([0.0, 1.0])
/// ...     print(len(snap), len(index))
/// 1 2
#[pyclass(module = "chassis", frozen, name = "Snapshot")]
pub struct Snapshot {
    idx: Arc<Index>,
    snap: Arc<Snap>,
}

impl Snapshot {
    pub fn new(idx: Arc<Index>, snap: Arc<Snap>) -> Snapshot {
        Snapshot { idx, snap }
    }
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
        do_search(py, &self.idx, Some(&self.snap), query, a)
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
            &self.idx,
            Some(&self.snap),
            queries,
            (k, ef, allowed, excluded),
            rerank,
            threads,
            progress,
        )
    }

    #[doc = include_str!("doc/get.md")]
    fn get<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let id = id_arg(id)?;
        Ok(py.detach(|| self.idx.get_in(&self.snap, id)).map_err(to_py)?.map(|v| vector(py, v)))
    }

    #[doc = include_str!("doc/ids.md")]
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

    /// The commit sequence number of this state (it grows by one per flush).
    #[getter]
    fn seq(&self) -> u64 {
        self.snap.seq
    }

    /// The ``user_version`` of this state.
    #[getter]
    fn user_version(&self) -> u64 {
        self.snap.user_version
    }

    fn __repr__(&self) -> String {
        format!("Snapshot(seq={}, len={})", self.snap.seq, self.snap.live)
    }
}
