//! Input checks (dimensions, NaN and infinity, ranges, k and ef) and the forms vectors take
//! on their way in: normalised for cosine, encoded for storage.

use super::*;
use crate::distance;
use std::borrow::Cow;

/// The largest half-precision value.
const F16_MAX: f32 = 65504.0;

pub(super) fn check_dims_arg(d: usize) -> Result<()> {
    if d == 0 || d > format::MAX_DIMS {
        return Err(Error::invalid(
            format!("dimensions={d} is out of range"),
            "pass from 1 to 65536 dimensions",
        ));
    }
    Ok(())
}

pub(super) fn check_k(k: usize) -> Result<()> {
    if !(1..=MAX_K).contains(&k) {
        return Err(Error::invalid(
            format!("k={k} is out of range"),
            format!("pass k from 1 to {MAX_K}"),
        ));
    }
    Ok(())
}

impl Index {
    /// `DimensionMismatch` unless `got` is the index's dimensions.
    pub fn check_dims(&self, got: usize, what: &str) -> Result<()> {
        if got != self.dims() {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("{what} has {got} dimensions; this index holds {}", self.dims()),
                format!("pass vectors of length {}", self.dims()),
            ));
        }
        Ok(())
    }

    /// Refuse NaN/inf, values beyond half precision, and zero vectors under cosine.
    pub(super) fn check_vector(&self, v: &[f32], what: &str) -> Result<()> {
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(
                format!("{what} holds {} at position {i}", v[i]),
                "remove or replace NaN and infinite values before adding or searching",
            ));
        }
        if self.precision() == Precision::Half {
            if let Some(i) = v.iter().position(|x| x.abs() > F16_MAX) {
                return Err(Error::invalid(
                    format!(
                        "{what} holds {} at position {i}, beyond half precision's range (+-65504)",
                        v[i]
                    ),
                    "scale the vectors down, or use precision=\"full\"",
                ));
            }
        }
        if self.metric() == Metric::Cosine && v.iter().all(|x| *x == 0.0) {
            return Err(Error::invalid(
                format!("{what} is the zero vector, which has no direction for cosine distance"),
                "remove zero vectors, or use metric=\"euclidean\"",
            ));
        }
        Ok(())
    }

    /// A query ready for the kernels: checked, and normalised for cosine (the one copy made).
    pub(super) fn prepare_query<'q>(&self, q: &'q [f32], what: &str) -> Result<Cow<'q, [f32]>> {
        self.check_dims(q.len(), what)?;
        self.check_vector(q, what)?;
        Ok(self.search_form(q, q.len()))
    }

    /// Checked rows of `d` values as searches take them: for cosine one normalised copy (the
    /// caller's array is never changed), else the rows themselves.
    pub(super) fn search_form<'q>(&self, rows: &'q [f32], d: usize) -> Cow<'q, [f32]> {
        if self.metric() != Metric::Cosine || d == 0 {
            return Cow::Borrowed(rows);
        }
        let mut v = rows.to_vec();
        v.chunks_exact_mut(d).for_each(|r| {
            distance::normalize(r);
        });
        Cow::Owned(v)
    }

    /// The bytes to store for `v` (normalised for cosine, rounded for half). Borrowed when the
    /// input is already in stored form.
    pub(super) fn encode<'v>(&self, v: &'v [f32], buf: &'v mut Vec<u8>) -> &'v [u8] {
        if self.precision() == Precision::Full && self.metric() != Metric::Cosine {
            // SAFETY: reinterpreting f32s as their little-endian bytes (the target is LE).
            return unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) };
        }
        let src: Cow<[f32]> = if self.metric() == Metric::Cosine {
            let mut n = v.to_vec();
            distance::normalize(&mut n);
            Cow::Owned(n)
        } else {
            Cow::Borrowed(v)
        };
        buf.clear();
        format::encode_vector(&src, self.precision(), buf);
        buf
    }

    pub(super) fn effective_ef(&self, ef: Option<usize>) -> Result<usize> {
        let ef = ef.unwrap_or(self.opts.ef_search);
        if !(1..=MAX_K).contains(&ef) {
            return Err(Error::invalid(
                format!("ef={ef} is out of range"),
                format!("pass ef from 1 to {MAX_K}"),
            ));
        }
        Ok(ef)
    }
}
