//! The quantizer: per dimension, an offset and a step learned from data, and the 8-bit (or
//! 4-bit, `nibbles.rs`) codes of vectors under them.
//!
//! Learning takes, per dimension, the values at two quantiles of a sample (`1 - q` and `q`)
//! as the ends of the range the codes cover: `offset = low`, `step = (high - low) / 255` (or
//! `/ 15` for 4 bits).
//! With `q = 1` the ends are the minimum and the maximum; a smaller `q` gives up the rarest
//! values at each end (they are clipped to the nearest code, and counted) for a finer step
//! everywhere else. Per dimension rather than one range for all: embedding dimensions differ
//! severalfold in spread, and one range would give the narrow ones only a few codes.

use crate::error::{Error, Result};

/// Codes per dimension of 8-bit codes: 0..=255.
pub const LEVELS: f32 = 255.0;

/// The quantile 4-bit codes learn their ranges at. With 16 levels the extremes cost every other
/// value a coarser step, and ranges a little inside them rank clustered data far better
/// (measured: `docs/design/quantization.md`).
pub const QUANTILE_4BIT: f64 = 0.99;

/// Rows a quantile range is learned from at most (evenly spread over the rows given): each
/// dimension's values are held together to select its quantiles, so this bounds that copy
/// (30 MB at 384 dimensions). At 20,000 rows the 0.99 quantile is the 200th value from each
/// end. A full range (quantile 1) sees every row.
pub const QUANTILE_ROWS: usize = 20_000;

/// The stored form's magics (8-bit and 4-bit codes) and the length of its head (magic, dims).
const STORED_MAGIC: &[u8; 4] = b"CHQ8";
const STORED_MAGIC_4: &[u8; 4] = b"CHQ4";
const STORED_HEAD: usize = 8;

/// A learned per-dimension affine map between f32 values and 8-bit (or 4-bit) codes.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantizer {
    offset: Vec<f32>,
    step: Vec<f32>,
    /// 1 / step, or 0 where step is 0 (a dimension that held one value).
    inv: Vec<f32>,
    /// Bits of a code: 8 or 4.
    bits: u32,
}

impl Quantizer {
    /// An 8-bit quantizer from its parameters (as stored): finite offsets, finite steps >= 0.
    pub fn from_parts(offset: Vec<f32>, step: Vec<f32>) -> Result<Quantizer> {
        Self::from_parts_bits(offset, step, 8)
    }

    /// As `from_parts`, for codes of `bits` bits (8 or 4).
    pub fn from_parts_bits(offset: Vec<f32>, step: Vec<f32>, bits: u32) -> Result<Quantizer> {
        if bits != 8 && bits != 4 {
            return Err(Error::invalid(
                format!("codes of {bits} bits"),
                "use codes of 8 or 4 bits",
            ));
        }
        if offset.len() != step.len() || offset.is_empty() {
            return Err(Error::invalid(
                format!("{} offsets and {} steps", offset.len(), step.len()),
                "give one offset and one step per dimension",
            ));
        }
        if let Some(i) = (0..offset.len())
            .find(|&i| !offset[i].is_finite() || !step[i].is_finite() || step[i] < 0.0)
        {
            return Err(Error::invalid(
                format!("dimension {i}: offset {} and step {}", offset[i], step[i]),
                "offsets must be finite and steps finite and not negative",
            ));
        }
        let inv = step.iter().map(|&s| if s > 0.0 { 1.0 / s } else { 0.0 }).collect();
        Ok(Quantizer { offset, step, inv, bits })
    }

    /// Learn offsets and steps of 8-bit codes from `rows` (each `dims` finite values), the
    /// range of each dimension running from its `1 - quantile` to its `quantile` quantile
    /// (`quantile` in `[0.5, 1]`; 1 keeps the minimum and maximum).
    pub fn train<'r>(
        dims: usize,
        rows: impl IntoIterator<Item = &'r [f32]>,
        quantile: f64,
    ) -> Result<Quantizer> {
        Self::train_bits(dims, rows, quantile, 8)
    }

    /// As `train`, for codes of `bits` bits (8 or 4).
    pub fn train_bits<'r>(
        dims: usize,
        rows: impl IntoIterator<Item = &'r [f32]>,
        quantile: f64,
        bits: u32,
    ) -> Result<Quantizer> {
        if !(0.5..=1.0).contains(&quantile) {
            return Err(Error::invalid(
                format!("quantile {quantile} is outside [0.5, 1]"),
                "use 1 for the full range, or e.g. 0.999 to clip the rarest 0.1% at each end",
            ));
        }
        // Dimension-major: each dimension's values together, for selecting its quantiles. The
        // full range (quantile 1) needs only each dimension's minimum and maximum, kept as the
        // rows stream by rather than gathered in columns, which cost a build's training most
        // of its time (measured: `docs/design/quantization.md`).
        let full = quantile == 1.0;
        let rows = rows.into_iter();
        // Quantiles: every `every`-th row (the callers' iterators know their length), in
        // columns sized for them; every row is still checked.
        let given = rows.size_hint().0;
        let every = if full { 1 } else { given.div_ceil(QUANTILE_ROWS).max(1) };
        let room = if full { 0 } else { given.div_ceil(every) };
        let mut cols: Vec<Vec<f32>> = if full {
            vec![vec![f32::INFINITY; dims], vec![f32::NEG_INFINITY; dims]]
        } else {
            (0..dims).map(|_| Vec::with_capacity(room)).collect()
        };
        // Each column's whole range, for a dimension whose quantiles meet (below).
        let mut whole: Vec<(f32, f32)> =
            if full { Vec::new() } else { vec![(f32::INFINITY, f32::NEG_INFINITY); dims] };
        let mut n = 0usize;
        for (r, row) in rows.enumerate() {
            if row.len() != dims {
                return Err(Error::invalid(
                    format!("row {r} has {} values for {dims} dimensions", row.len()),
                    "train on vectors of the index's dimensions",
                ));
            }
            if let Some(i) = row.iter().position(|x| !x.is_finite()) {
                return Err(Error::invalid(
                    format!("row {r} holds {} at dimension {i}", row[i]),
                    "train on finite values",
                ));
            }
            if full {
                let (lo, hi) = cols.split_at_mut(1);
                for ((l, h), &x) in lo[0].iter_mut().zip(hi[0].iter_mut()).zip(row) {
                    *l = l.min(x);
                    *h = h.max(x);
                }
                n += 1;
            } else {
                for (w, &x) in whole.iter_mut().zip(row) {
                    *w = (w.0.min(x), w.1.max(x));
                }
                if r % every == 0 {
                    for (c, &x) in cols.iter_mut().zip(row) {
                        c.push(x);
                    }
                    n += 1;
                }
            }
        }
        if n == 0 {
            return Err(Error::invalid("no rows to learn from", "train on at least one vector"));
        }
        if full {
            let ranges = cols[0].iter().zip(&cols[1]).map(|(&lo, &hi)| (lo, hi));
            return Self::from_ranges(ranges, bits);
        }
        let lo_rank = (((1.0 - quantile) * (n - 1) as f64).floor() as usize).min(n - 1);
        let hi_rank = ((quantile * (n - 1) as f64).ceil() as usize).min(n - 1);
        let ranges: Vec<(f32, f32)> = cols
            .iter_mut()
            .zip(&whole)
            .map(|(c, &w)| {
                let lo = *c.select_nth_unstable_by(lo_rank, f32::total_cmp).1;
                let hi = *c.select_nth_unstable_by(hi_rank, f32::total_cmp).1;
                // A dimension holding one value in more than the quantile's share of rows
                // (a feature mostly 0) would get a step of 0 and codes blind to the rest of
                // its values: it keeps its whole range instead.
                if lo == hi {
                    w
                } else {
                    (lo, hi)
                }
            })
            .collect();
        Self::from_ranges(ranges.into_iter(), bits)
    }

    /// A quantizer whose codes of each dimension run from `lo` to `hi`.
    fn from_ranges(ranges: impl Iterator<Item = (f32, f32)>, bits: u32) -> Result<Quantizer> {
        let levels = Self::levels_of(bits);
        let (mut offset, mut step) = (Vec::new(), Vec::new());
        for (lo, hi) in ranges {
            offset.push(lo);
            // f64, then rounded up: the top code reaches `hi` (never one rounding below it)
            let s = ((hi as f64 - lo as f64) / levels as f64) as f32;
            step.push(if (lo + s * levels) < hi { s.next_up() } else { s });
        }
        Quantizer::from_parts_bits(offset, step, bits)
    }

    /// The top code of `bits`-bit codes.
    fn levels_of(bits: u32) -> f32 {
        if bits == 4 {
            15.0
        } else {
            LEVELS
        }
    }

    pub fn dims(&self) -> usize {
        self.offset.len()
    }

    /// Bits of a code: 8 or 4.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Bytes of one vector's code.
    pub fn code_len(&self) -> usize {
        code_len(self.dims(), self.bits)
    }

    pub fn offset(&self) -> &[f32] {
        &self.offset
    }

    pub fn step(&self) -> &[f32] {
        &self.step
    }

    /// The codes of `v` into `out` (`code_len()` bytes): each value's nearest code, values
    /// beyond the range clipped to its ends. Returns how many values were clipped: more than
    /// half a step outside the range (a non-finite value counts as clipped; NaN becomes 0).
    pub fn encode(&self, v: &[f32], out: &mut [u8]) -> usize {
        assert!(
            v.len() == self.dims() && out.len() == self.code_len(),
            "a vector of {} for {} (a code of {} bytes into {})",
            v.len(),
            self.dims(),
            self.code_len(),
            out.len()
        );
        if self.bits == 4 {
            return self.encode4(v, out);
        }
        let mut clipped = 0;
        for i in 0..v.len() {
            let t = (v[i] - self.offset[i]) * self.inv[i];
            // NaN is in no range: it counts as clipped. A dimension of step 0 holds one value.
            let inside = if self.step[i] > 0.0 {
                (-0.5..=LEVELS + 0.5).contains(&t)
            } else {
                v[i] == self.offset[i]
            };
            clipped += usize::from(!inside);
            // `as u8` saturates and maps NaN to 0.
            out[i] = t.round().clamp(0.0, LEVELS) as u8;
        }
        clipped
    }

    /// `encode` for 4 bits: the nibbles laid out as `nibbles.rs` says.
    fn encode4(&self, v: &[f32], out: &mut [u8]) -> usize {
        const TOP: f32 = 15.0;
        out.fill(0);
        let mut clipped = 0;
        for (i, &x) in v.iter().enumerate() {
            let t = (x - self.offset[i]) * self.inv[i];
            let inside = if self.step[i] > 0.0 {
                (-0.5..=TOP + 0.5).contains(&t)
            } else {
                x == self.offset[i]
            };
            clipped += usize::from(!inside);
            let code = t.round().clamp(0.0, TOP) as u8;
            let (at, shift) = super::nibbles::place(i);
            out[at] |= code << shift;
        }
        clipped
    }

    /// The code of dimension `i` in `codes`.
    #[inline]
    pub fn code_at(&self, codes: &[u8], i: usize) -> u8 {
        if self.bits == 4 {
            let (at, shift) = super::nibbles::place(i);
            (codes[at] >> shift) & 15
        } else {
            codes[i]
        }
    }

    /// Bytes of a stored quantizer of `dims` dimensions (see `to_bytes`).
    pub fn stored_len(dims: usize) -> usize {
        STORED_HEAD + 8 * dims + 8
    }

    /// The stored form: magic `CHQ8` (`CHQ4` for 4-bit codes), dims (u32), then each
    /// dimension's offset and step (f32), then the xxh3 checksum (u64) of all that,
    /// little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::stored_len(self.dims()));
        b.extend_from_slice(if self.bits == 4 { STORED_MAGIC_4 } else { STORED_MAGIC });
        b.extend_from_slice(&(self.dims() as u32).to_le_bytes());
        for (o, s) in self.offset.iter().zip(&self.step) {
            b.extend_from_slice(&o.to_le_bytes());
            b.extend_from_slice(&s.to_le_bytes());
        }
        let crc = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// A quantizer from its stored form, for an index of `dims` dimensions and codes of
    /// `bits` bits: a damaged or crafted form (wrong magic, length, dimensions or checksum;
    /// values `from_parts` refuses) is a `CorruptIndex` error naming what was wrong.
    pub fn from_bytes(b: &[u8], dims: usize, bits: u32) -> Result<Quantizer> {
        let bad = |what: String| Error::corrupt(format!("the stored quantizer: {what}"));
        let magic = if bits == 4 { STORED_MAGIC_4 } else { STORED_MAGIC };
        if b.len() < STORED_HEAD + 8 || &b[..4] != magic {
            return Err(bad(format!("{} bytes without the header of {bits}-bit codes", b.len())));
        }
        let stored_dims = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        if stored_dims != dims || b.len() != Self::stored_len(dims) {
            return Err(bad(format!(
                "{stored_dims} dimensions in {} bytes, for an index of {dims}",
                b.len()
            )));
        }
        let body = b.len() - 8;
        let crc = u64::from_le_bytes(b[body..].try_into().unwrap());
        if xxhash_rust::xxh3::xxh3_64(&b[..body]) != crc {
            return Err(bad("its checksum does not match".into()));
        }
        let f = |i: usize| f32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let offset = (0..dims).map(|i| f(STORED_HEAD + 8 * i)).collect();
        let step = (0..dims).map(|i| f(STORED_HEAD + 8 * i + 4)).collect();
        Quantizer::from_parts_bits(offset, step, bits).map_err(|e| bad(e.message))
    }

    /// The value a code stands for in dimension `i`.
    #[inline]
    pub fn decode_one(&self, i: usize, code: u8) -> f32 {
        self.offset[i] + self.step[i] * code as f32
    }

    /// The vector `codes` stand for, into `out`.
    pub fn decode(&self, codes: &[u8], out: &mut [f32]) {
        assert!(codes.len() == self.code_len() && out.len() == self.dims());
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.decode_one(i, self.code_at(codes, i));
        }
    }
}

pub use crate::format::code_len;
