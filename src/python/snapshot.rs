//! `Snapshot`: one committed state of an index, pinned for as long as the Python object lives.
//! Its read methods and their docstrings are the index's own (`reads.rs`).

use super::reads::{pymethods_with_reads, View};
use crate::index::{Index, Snap};
use pyo3::prelude::*;
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

    /// What the shared read methods read: the pinned state (never closed: it holds its index).
    fn view(&self) -> PyResult<View> {
        Ok(View { idx: self.idx.clone(), pinned: Some(self.snap.clone()) })
    }
}

pymethods_with_reads!(
    type Class = Snapshot;

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
);
