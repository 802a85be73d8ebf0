//! `VectorIndex`'s upkeep: `check`, `compact`, `consolidate`, `warm`, and `memory_stats` as a
//! dict.

use super::VectorIndex;
use crate::index::MemoryStats;
use crate::python::errors::emit_notices;
use crate::python::run::{self, Count};
use pyo3::prelude::*;
use pyo3::types::PyDict;

impl VectorIndex {
    /// `check`: every slot scanned on a helper thread, the findings as a `chassis.Check`.
    pub(super) fn check_all<'py>(
        &self,
        py: Python<'py>,
        progress: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let idx = self.index()?;
        let total = py.detach(|| idx.snap().slots);
        let r = run::run_long(py, total, Count::VectorsThreaded, progress, "checking", |ctl| {
            idx.check(ctl)
        })?;
        py.import("chassis._check")?.getattr("Check")?.call1((
            r.unreachable,
            r.not_finite,
            r.corrupt,
            r.clipped,
        ))
    }

    /// `compact`: the file rebuilt without its deleted rows on `threads`.
    pub(super) fn rebuild(
        &self,
        py: Python<'_>,
        threads: Option<usize>,
        progress: bool,
    ) -> PyResult<()> {
        let idx = self.index()?;
        let total = py.detach(|| idx.len());
        let out = run::run_long(py, total, Count::VectorsThreaded, progress, "compacting", |ctl| {
            idx.compact(threads, ctl)
        });
        emit_notices(py)?;
        out
    }

    /// `consolidate`: live nodes re-linked around deleted ones on `threads`.
    pub(super) fn relink(
        &self,
        py: Python<'_>,
        threads: Option<usize>,
        progress: bool,
    ) -> PyResult<u64> {
        let idx = self.index()?;
        let total = py.detach(|| idx.len());
        run::run_long(py, total, Count::VectorsThreaded, progress, "consolidating", |ctl| {
            idx.consolidate(threads, ctl)
        })
    }

    /// `warm`: the background read started (or joined), and with `wait` waited for.
    pub(super) fn read_in(
        &self,
        py: Python<'_>,
        vectors: bool,
        wait: bool,
        progress: bool,
    ) -> PyResult<bool> {
        let idx = self.index()?;
        let (started, total) = py.detach(|| (idx.warm(vectors), idx.warm_progress().0));
        if wait {
            run::run_long(py, total, Count::Bytes, progress, "warming", |ctl| idx.wait_warm(ctl))?;
        }
        Ok(started)
    }
}

/// `memory_stats()` as Python sees it (`doc/memory_stats.md`).
pub fn memory_dict<'py>(py: Python<'py>, m: &MemoryStats) -> PyResult<Bound<'py, PyDict>> {
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
    d.set_item("prefetching_pages", m.prefetching_pages)?;
    // The key's first name, kept so that code reading it goes on working.
    d.set_item("naming_pages", m.prefetching_pages)?;
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
