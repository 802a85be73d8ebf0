//! `VectorIndex`'s longer writes: a batch of rows (added, or upserted), and training the
//! quantizer on a sample.

use super::VectorIndex;
use crate::python::convert::vector;
use crate::python::errors::emit_notices;
use crate::python::run::{self, Count};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;

impl VectorIndex {
    /// `add_batch`: the rows of `arr` (checked against the index's dimensions), linked on
    /// `threads` without the GIL; their ids.
    pub(super) fn add_rows<'py>(
        &self,
        py: Python<'py>,
        arr: &Bound<'py, PyArrayDyn<f32>>,
        ids: Option<Vec<u64>>,
        threads: Option<usize>,
        progress: bool,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let n = arr.shape()[0];
        // SAFETY: as in `search::do_search`.
        let data = unsafe { arr.as_slice() }?;
        let idx = self.index()?;
        let out = run::run_long(py, n as u64, Count::Vectors, progress, "adding", |ctl| {
            idx.add_batch(data, n, ids.as_deref(), threads, ctl)
        });
        emit_notices(py)?;
        Ok(vector(py, out?))
    }

    /// `upsert`: the rows of `arr` replace those of their ids (added where absent), linked on
    /// `threads` without the GIL; how many ids were present.
    pub(super) fn upsert_rows(
        &self,
        py: Python<'_>,
        arr: &Bound<'_, PyArrayDyn<f32>>,
        ids: Vec<u64>,
        threads: Option<usize>,
        progress: bool,
    ) -> PyResult<u64> {
        let n = arr.shape()[0];
        // SAFETY: as in `search::do_search`.
        let data = unsafe { arr.as_slice() }?;
        let idx = self.index()?;
        let out = run::run_long(py, n as u64, Count::Vectors, progress, "upserting", |ctl| {
            idx.upsert(data, n, &ids, threads, ctl)
        });
        emit_notices(py)?;
        out
    }

    /// `train`: the quantizer learned from the rows of `sample`, then the stored vectors
    /// encoded on `threads` (on a helper thread: Ctrl-C stops it; the bar counts them).
    pub(super) fn train_on(
        &self,
        py: Python<'_>,
        sample: &Bound<'_, PyArrayDyn<f32>>,
        threads: Option<usize>,
        progress: bool,
    ) -> PyResult<()> {
        let n = sample.shape()[0];
        // SAFETY: as in `search::do_search`.
        let data = unsafe { sample.as_slice() }?;
        let idx = self.index()?;
        let stored = idx.snap().slots;
        run::run_long(py, stored, Count::VectorsThreaded, progress, "training", |ctl| {
            idx.train(data, n, threads, ctl)
        })
    }
}
