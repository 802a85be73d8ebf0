//! Scalar quantization: an 8-bit (or 4-bit) code per dimension, the distances of a float query
//! to codes, and the query's preparation for them.
//!
//! Why: a search is bound by the bytes it reads, and an 8-bit code is a quarter of a float32
//! vector's bytes (6 cache lines instead of 24 at 384 dimensions). The walk computes distances
//! to codes, and those of the best candidates again on the full-precision vectors (reranked),
//! so the distances returned stay exact (measured: `docs/design/quantization.md`).
//!
//! | file           | what it holds                                                        |
//! |----------------|----------------------------------------------------------------------|
//! | `mod.rs`       | this table; [`Prepared`]: a query made ready for codes                |
//! | `quantizer.rs` | [`Quantizer`]: per-dimension offset and step learned from data, encode |
//! | `kernels.rs`   | distances of a prepared query to codes: scalar, AVX2, AVX-512, NEON    |
//! | `nibbles.rs`   | 4-bit codes: their layout, and their kernels (scalar, AVX2, AVX-512)   |
//!
//! The model: dimension `i` of a vector is `offset[i] + step[i] * code[i]`, `code[i]` in
//! `0..=255` (`0..=15` for 4-bit codes, whose prepared queries are the same). For a query `q`:
//! * squared L2: `sum (q[i] - offset[i] - step[i] * code[i])^2`: the kernel reads
//!   `b = q - offset` and `step` (one fused multiply-add and one square per value);
//! * dot product: `sum q[i] * offset[i] + sum (q[i] * step[i]) * code[i]`: the first sum is a
//!   constant of the query, the kernel reads `w = q * step`.
//!
//! Both are asymmetric: the query stays float, only the stored side is rounded, so the error of
//! a distance is that of the codes alone (at most half a step per value).
//!
//! What is decided and what is left to build: `docs/design/quantization.md`.

#[macro_use]
pub mod kernels;
pub mod nibbles;
pub mod quantizer;

pub use kernels::{code_kernels, code_kernels_bits, CodeKernels};
pub use quantizer::Quantizer;

use crate::format::Metric;

/// A query made ready for one quantizer and metric: the values the kernel reads and the affine
/// map from the kernel's value to the metric's distance (`bias + sign * kernel`, squared for
/// euclidean), as [`crate::distance::MetricKernels`] has it for float vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// Euclidean: `q - offset` then `step` (2 x dims values); otherwise `q * step` (dims).
    pub values: Vec<f32>,
    pub bias: f32,
    pub sign: f32,
}

impl Default for Prepared {
    /// Empty, for filling with `prepare`.
    fn default() -> Self {
        Prepared { values: Vec::new(), bias: 0.0, sign: 1.0 }
    }
}

impl Prepared {
    /// `q` (already normalised for cosine, as stored vectors are) made ready for `quantizer`.
    pub fn new(quantizer: &Quantizer, metric: Metric, q: &[f32]) -> Prepared {
        let mut p = Prepared { values: Vec::new(), bias: 0.0, sign: 1.0 };
        p.prepare(quantizer, metric, q);
        p
    }

    /// As [`Prepared::new`], reusing this one's buffer.
    pub fn prepare(&mut self, quantizer: &Quantizer, metric: Metric, q: &[f32]) {
        let (offset, step) = (quantizer.offset(), quantizer.step());
        assert_eq!(
            q.len(),
            offset.len(),
            "a query of {} values for {} dimensions",
            q.len(),
            offset.len()
        );
        self.values.clear();
        match metric {
            Metric::Euclidean => {
                self.values.extend(q.iter().zip(offset).map(|(x, o)| x - o));
                self.values.extend_from_slice(step);
                (self.bias, self.sign) = (0.0, 1.0);
            }
            Metric::Cosine | Metric::InnerProduct => {
                self.values.extend(q.iter().zip(step).map(|(x, s)| x * s));
                // f64: a constant of the query, summed once
                let c: f64 = q.iter().zip(offset).map(|(x, o)| *x as f64 * *o as f64).sum();
                let base = if metric == Metric::Cosine { 1.0 } else { 0.0 };
                (self.bias, self.sign) = ((base - c) as f32, -1.0);
            }
        }
    }
}

#[cfg(test)]
mod tests;
