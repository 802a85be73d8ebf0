//! `Snapshot`: one committed state of an index, pinned for as long as the Python object lives
//! or until its `with` block ends.
//! Its read methods and their docstrings are the index's own (`reads.rs`).

use super::errors::to_py;
use super::reads::{pymethods_with_reads, View};
use crate::error::{Error, ErrorKind};
use crate::index::{Index, Snap};
use parking_lot::Mutex;
use pyo3::prelude::*;
use std::sync::Arc;

/// One state of an index, pinned for several calls that must agree.
///
/// Every call on a snapshot sees the same vectors, whatever is flushed (or, in a writer,
/// added) meanwhile. Made by ``VectorIndex.snapshot()`` or ``IndexReader.snapshot()``; use it
/// as a context manager (the state is released when the block ends, and calls on it raise
/// ``IndexClosedError`` after) or just keep it (released when it is garbage). While a snapshot
/// holds a state, the writer does not reuse the slots of rows deleted since.
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
    /// None once its `with` block ended.
    snap: Mutex<Option<Arc<Snap>>>,
    seq: u64,
    user_version: u64,
    live: u64,
}

impl Snapshot {
    pub fn new(idx: Arc<Index>, snap: Arc<Snap>) -> Snapshot {
        let (seq, user_version, live) = (snap.seq, snap.user_version, snap.live);
        Snapshot { idx, snap: Mutex::new(Some(snap)), seq, user_version, live }
    }

    /// What the shared read methods read: the pinned state (never closed: it holds its index).
    fn view(&self) -> PyResult<View> {
        let snap = self.snap.lock().clone().ok_or_else(|| {
            to_py(Error::new(
                ErrorKind::Closed,
                "this snapshot was released when its with block ended",
                "take another with index.snapshot()",
            ))
        })?;
        Ok(View { idx: self.idx.clone(), pinned: Some(snap) })
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
        self.snap.lock().take();
        false
    }

    /// The commit sequence number of this state (it grows by one per flush).
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// The ``user_version`` of this state.
    #[getter]
    fn user_version(&self) -> u64 {
        self.user_version
    }

    fn __repr__(&self) -> String {
        format!("Snapshot(seq={}, len={})", self.seq, self.live)
    }
);
