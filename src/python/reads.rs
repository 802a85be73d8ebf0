//! The read methods `VectorIndex` and `Snapshot` share, written once: `pymethods_with_reads!`.
//!
//! pyo3 takes one `#[pymethods]` block per class (more need its `multiple-pymethods` feature,
//! built on `inventory`, which not every platform supports) and refuses a macro call inside
//! one. So the macro writes a class's whole block: the shared methods (`search`,
//! `search_batch`, `get`, `ids`, `__contains__`, `__len__`, their docstrings in `doc/*.md`),
//! then the class's own methods. Each shared method parses its arguments and calls the work
//! below (or in `search.rs`) on the class's `View`: the index, and for a snapshot its state.

use super::convert::vector;
use super::errors::{emit_notices, to_py};
use crate::error::Result;
use crate::index::{Index, Snap};
use numpy::PyArray1;
use pyo3::prelude::*;
use std::sync::Arc;

/// What a read method reads: an index, at a pinned state (a `Snapshot`) or at the index's
/// current one (a `VectorIndex`; a reader moves to the newest flush at each call).
pub struct View {
    pub idx: Arc<Index>,
    pub pinned: Option<Arc<Snap>>,
}

impl View {
    /// The state to read: the pinned one, else the index's current one.
    pub fn snap(&self) -> Arc<Snap> {
        self.pinned.clone().unwrap_or_else(|| self.idx.snap())
    }

    /// Run `f` on the index without the GIL, then pass on what the core asked to tell.
    pub fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Index) -> Result<R> + Send,
    ) -> PyResult<R> {
        let out = py.detach(|| f(&self.idx)).map_err(to_py);
        emit_notices(py)?;
        out
    }

    pub fn get<'py>(
        &self,
        py: Python<'py>,
        id: u64,
    ) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        Ok(self.run(py, |idx| idx.get_in(&self.snap(), id))?.map(|v| vector(py, v)))
    }

    pub fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(vector(py, self.run(py, |idx| idx.ids_in(&self.snap()))?))
    }

    /// `id in index` for an int `id`: false for one no index can hold.
    pub fn contains(&self, py: Python<'_>, id: i128) -> PyResult<bool> {
        if id < 0 || id >= u64::MAX as i128 {
            return Ok(false);
        }
        self.run(py, |idx| idx.contains_in(&self.snap(), id as u64))
    }

    pub fn len(&self, py: Python<'_>) -> PyResult<usize> {
        self.run(py, |_| Ok(self.snap().live as usize))
    }
}

/// `#[pymethods] impl Class { <the shared read methods> <the class's own items> }`. The class
/// is named as an item, `type Class = ...;`, so that rustfmt still formats the own items (it
/// formats a macro's arguments when they read as items). The class has `fn view(&self) ->
/// PyResult<View>`, which fails once the index is closed: each method calls it after parsing
/// its arguments (a bad argument is named first), but `search_batch`, whose queries are read
/// against the index's dimensions, calls it first.
macro_rules! pymethods_with_reads {
    (type Class = $class:ty; $($own:tt)*) => {
        #[::pyo3::pymethods]
        impl $class {
            #[doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/python/doc/search.md"))]
            #[pyo3(
                signature = (query, k = None, allowed = None, excluded = None, *, ef = None, rerank = None),
                text_signature = "($self, query, k=10, allowed=None, excluded=None, *, ef=None, rerank=None)"
            )]
            fn search<'py>(
                &self,
                py: ::pyo3::Python<'py>,
                query: &::pyo3::Bound<'py, ::pyo3::PyAny>,
                k: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                allowed: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                excluded: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                ef: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                rerank: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::types::PyList>> {
                use $crate::python::search::{do_search, SearchArgs};
                let a = SearchArgs::parse(k, ef, allowed, excluded)?.with_rerank(rerank)?;
                do_search(py, &self.view()?, query, a)
            }

            #[doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/python/doc/search_batch.md"))]
            #[pyo3(
                signature = (queries, k = None, allowed = None, excluded = None, *, ef = None, rerank = None, threads = None, progress = false),
                text_signature = "($self, queries, k=10, allowed=None, excluded=None, *, ef=None, rerank=None, threads=None, progress=False)"
            )]
            fn search_batch<'py>(
                &self,
                py: ::pyo3::Python<'py>,
                queries: &::pyo3::Bound<'py, ::pyo3::PyAny>,
                k: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                allowed: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                excluded: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                ef: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                rerank: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                threads: Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                progress: bool,
            ) -> ::pyo3::PyResult<$crate::python::search::BatchArrays<'py>> {
                let view = self.view()?;
                let query_args = (k, ef, allowed, excluded);
                $crate::python::search::do_search_batch(
                    py, &view, queries, query_args, rerank, threads, progress,
                )
            }

            #[doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/python/doc/get.md"))]
            fn get<'py>(
                &self,
                py: ::pyo3::Python<'py>,
                id: &::pyo3::Bound<'py, ::pyo3::PyAny>,
            ) -> ::pyo3::PyResult<Option<::pyo3::Bound<'py, ::numpy::PyArray1<f32>>>> {
                let id = $crate::python::convert::id_arg(id)?;
                self.view()?.get(py, id)
            }

            #[doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/python/doc/ids.md"))]
            fn ids<'py>(
                &self,
                py: ::pyo3::Python<'py>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::numpy::PyArray1<u64>>> {
                self.view()?.ids(py)
            }

            fn __contains__(
                &self,
                py: ::pyo3::Python<'_>,
                id: &::pyo3::Bound<'_, ::pyo3::PyAny>,
            ) -> ::pyo3::PyResult<bool> {
                let view = self.view()?;
                // What is not an id (a float, a str, a bool) is not in it: an answer, not an
                // error. Any other error (one an `__index__` raised) goes through.
                match $crate::python::convert::int_arg(id, "id") {
                    Ok(id) => view.contains(py, id),
                    Err(e) if e.is_instance_of::<::pyo3::exceptions::PyTypeError>(py)
                        || e.is_instance_of::<::pyo3::exceptions::PyValueError>(py) =>
                    {
                        Ok(false)
                    }
                    Err(e) => Err(e),
                }
            }

            fn __len__(&self, py: ::pyo3::Python<'_>) -> ::pyo3::PyResult<usize> {
                self.view()?.len(py)
            }

            $($own)*
        }
    };
}
pub(crate) use pymethods_with_reads;
