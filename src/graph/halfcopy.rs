//! A half-precision copy of a full-precision index's vectors, made for one `add_batch`'s linking
//! and dropped after it.
//!
//! Why: a build is bound by how many bytes its searches read, not by arithmetic (an insertion
//! computes distances to a few thousand vectors it has not met before, more than L2 holds), and
//! linking a batch on a 16-bit copy reads half the bytes (measured:
//! `docs/design/half-precision-copy.md`). The copy only guides which nodes become neighbors:
//! the file's vectors, every search and every returned distance stay full precision, and
//! nothing of the copy is ever written to the file.
//!
//! Values are scaled by one power of two (exact, and the same for every vector) so that the
//! largest magnitude lands near 2^13: far from the 16-bit limit of 65,504 and far above the
//! 2^-14 below which 16-bit floats lose precision. Every distance of the build is then the
//! same monotone function of the unscaled one, so all the build's comparisons, which only
//! ever compare build distances with each other, see the same order (up to rounding).
//!
//! Memory: 2 bytes per dimension per slot (64-byte aligned rows), a `storage::RowTable`.

use crate::format::{Geometry, Precision};
use crate::os;
use crate::storage::{RowTable, Storage};
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// Largest |value| after scaling is at most 2^TOP_LOG2.
const TOP_LOG2: i32 = 13;

/// Rows scanned per rayon task for the largest magnitude.
const ROWS_PER_TASK: usize = 256;

pub struct HalfCopy {
    rows: RowTable,
    /// The rows' geometry: a half-precision index's (`geometry`), so rows lie `stride` bytes
    /// apart, 64-byte aligned from 64 bytes up, as the file's vectors.
    geo: Geometry,
}

impl HalfCopy {
    /// The geometry of a copy's rows: a half-precision index's.
    pub fn geometry(full: &Geometry) -> Geometry {
        Geometry::new(full.dims, Precision::Half, full.m)
    }

    /// A copy of the full-precision vectors of slots `0..slots` (all below the storage's
    /// capacity), or None if one cannot be made (no memory, or a non-finite value). Each block
    /// of a file's vectors is let go of once converted (`Storage::release_vectors`: they stay in
    /// the page cache), so the process holds the copy or the vectors, not both (the peak
    /// memory this saves: `docs/design/half-precision-copy.md`).
    pub fn new(st: &Storage, slots: u32) -> Option<HalfCopy> {
        let geo = Self::geometry(&st.geo);
        if st.geo.precision != Precision::Full || slots == 0 {
            return None;
        }
        // Written before linking starts, not during it (see Storage::vector_bytes).
        let vector = |s: u32| st.vector_f32(s);
        // The largest magnitude, and (x * 0 is NaN for an infinity or a NaN, which `max` would
        // pass over) whether any value is not finite.
        let (top, poison) = (0..slots)
            .into_par_iter()
            .with_min_len(ROWS_PER_TASK)
            .map(|s| vector(s).iter().fold((0f32, 0f32), |(m, p), x| (m.max(x.abs()), p + x * 0.0)))
            .reduce(|| (0f32, 0f32), |a, b| (a.0.max(b.0), a.1 + b.1));
        if !top.is_finite() || poison != 0.0 {
            return None;
        }
        // 2^k with top * 2^k in (2^(TOP_LOG2-1), 2^TOP_LOG2]; 1 for an all-zero index.
        let k = if top > 0.0 { TOP_LOG2 - top.log2().ceil() as i32 } else { 0 };
        let scale = 2f32.powi(k.clamp(-100, 100));
        let (rows, _converted) = RowTable::filled(slots, geo.vec_bytes, geo.stride, |chunk| {
            let mut buf = vec![0f32; geo.dims];
            let range = chunk.range();
            for s in range.clone() {
                buf.iter_mut().zip(vector(s)).for_each(|(b, x)| *b = x * scale);
                chunk.row_f16(s).convert_from_f32_slice(&buf);
            }
            st.release_vectors(range.start as u64, range.end as u64);
            range.len() as u64
        })?;
        Some(HalfCopy { rows, geo })
    }

    /// Bytes the copy of `slots` slots of `geo` takes.
    pub fn bytes_for(geo: &Geometry, slots: u64) -> u64 {
        slots * Self::geometry(geo).stride as u64
    }

    /// Pointer to a slot's row (dims f16s).
    #[inline(always)]
    pub fn ptr(&self, slot: u32) -> *const u8 {
        self.rows.ptr(slot)
    }

    /// A slot's row bytes (2 bytes per dimension).
    #[inline(always)]
    pub fn row(&self, slot: u32) -> &[u8] {
        self.rows.row(slot)
    }

    pub fn slots(&self) -> u32 {
        self.rows.rows()
    }

    /// The rows' geometry.
    pub fn geo(&self) -> &Geometry {
        &self.geo
    }
}

/// A batch is linked on a half-precision copy of the vectors (`halfcopy`) when they are at
/// least HALFCOPY_MIN_BYTES long (shorter ones the prefetch of ADR-0015 covers whole, and the
/// copy gains nothing), has at least HALFCOPY_MIN_ROWS rows and is at least 1/HALFCOPY_SHARE
/// of the index it makes: the copy reads every vector of the index twice, and the batch must
/// gain more than that from its linking (measured: `docs/design/half-precision-copy.md`).
const HALFCOPY_MIN_BYTES: usize = 1024;

const HALFCOPY_MIN_ROWS: u64 = 1024;

const HALFCOPY_SHARE: u64 = 32;

/// ... and when the copy takes at most 1/HALFCOPY_MEMORY_SHARE of the machine's memory.
const HALFCOPY_MEMORY_SHARE: u64 = 8;

/// Whether a batch of `rows` rows that makes an index of `total` slots is linked on a
/// half-precision copy. `CHASSIS_HALF_COPY=0` (never) or `1` (whenever the index is full
/// precision) overrides the rule, for tests and measurements; read once.
pub fn pays(geo: &Geometry, rows: u64, total: u64) -> bool {
    if geo.precision != Precision::Full {
        return false;
    }
    match forced() {
        Some(force) => force,
        None => {
            let memory = os::physical_memory().unwrap_or(0);
            geo.vec_bytes >= HALFCOPY_MIN_BYTES
                && large_batch(rows, total)
                && HalfCopy::bytes_for(geo, total) * HALFCOPY_MEMORY_SHARE <= memory
        }
    }
}

/// Whether a batch of `rows` rows making an index of `total` slots is large by the half copy's
/// rule (HALFCOPY_MIN_ROWS, HALFCOPY_SHARE), whatever the machine's memory and
/// `CHASSIS_HALF_COPY` say: the batches single adds make are not.
pub fn large_batch(rows: u64, total: u64) -> bool {
    rows >= HALFCOPY_MIN_ROWS && rows * HALFCOPY_SHARE >= total
}

/// `CHASSIS_HALF_COPY` (`crate::tuning`).
fn forced() -> Option<bool> {
    crate::tuning::get().half_copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Control, Index};

    fn rng(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        }
    }

    fn stored(st: &Storage, slot: u32) -> Vec<f32> {
        let mut v = vec![0f32; st.geo.dims];
        crate::format::decode_vector(st.vector_bytes(slot), st.geo.precision, &mut v);
        v
    }

    /// Rows are each stored vector times one power of two (the largest magnitude in (2^12,
    /// 2^13]), to 16-bit rounding; checked far above and far below the 16-bit range.
    #[test]
    fn rows_are_the_stored_vectors_scaled_by_one_power_of_two() {
        for magnitude in [1e9f32, 1.0, 1e-9] {
            let (d, n) = (40, 300);
            let mut r = rng(7);
            let data: Vec<f32> = (0..n * d).map(|_| r() * magnitude).collect();
            let idx = Index::memory(d, None).unwrap();
            idx.add_batch(&data, n, None, Some(1), &Control::default()).unwrap();
            let snap = idx.snap();
            let copy = HalfCopy::new(&snap.st, n as u32).expect("a copy");
            let top = data.iter().fold(0f32, |m, x| m.max(x.abs()));
            let mut row = vec![0f32; d];
            let mut scale = None;
            for s in 0..n as u32 {
                crate::format::decode_vector(copy.row(s), Precision::Half, &mut row);
                let v = stored(&snap.st, s);
                let (i, _) =
                    v.iter().enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap();
                let this = (row[i] / v[i]).log2().round();
                assert_eq!(*scale.get_or_insert(this), this, "one scale for every row");
                let k = 2f32.powf(this);
                for (a, b) in row.iter().zip(&v) {
                    assert!(
                        (a / k - b).abs() <= b.abs() / 1024.0 + top / (1 << 20) as f32,
                        "{a} / {k} against {b} at magnitude {magnitude}"
                    );
                }
            }
            let k = 2f32.powf(scale.unwrap());
            assert!(
                top * k > 4096.0 * 0.999 && top * k <= 8192.0 * 1.001,
                "largest scaled magnitude {} at {magnitude}",
                top * k
            );
        }
    }

    #[test]
    fn an_all_zero_index_copies_as_zeros() {
        let idx = Index::memory(8, None).unwrap();
        idx.add_batch(&[0f32; 8 * 20], 20, None, Some(1), &Control::default()).unwrap();
        let snap = idx.snap();
        let copy = HalfCopy::new(&snap.st, 20).unwrap();
        assert!((0..20).all(|s| copy.row(s).iter().all(|&b| b == 0)));
    }

    /// A batch large enough to be linked on the copy (1,536-byte vectors, 2,048 rows), of
    /// values far beyond the 16-bit range: searches find what exact k-NN finds, with the
    /// stored vectors' full-precision (euclidean) distances.
    #[test]
    fn a_batch_linked_on_the_copy_searches_like_exact_knn() {
        let (d, n, k) = (384, 2048, 10);
        let mut r = rng(11);
        let data: Vec<f32> = (0..n * d).map(|_| r() * 1e6).collect();
        let idx = Index::memory(d, None).unwrap();
        // The rule takes this batch onto the copy (unless CHASSIS_HALF_COPY=0 says never).
        assert!(
            pays(&idx.snap().st.geo, n as u64, n as u64) || forced() == Some(false),
            "the batch would not be linked on the copy: the test would check the plain path"
        );
        let ids = idx.add_batch(&data, n, None, Some(2), &Control::default()).unwrap();
        let queries: Vec<Vec<f32>> = (0..50)
            .map(|i| data[i * 37 * d..][..d].iter().map(|x| x + r() * 1e5).collect())
            .collect();
        let mut found = 0;
        for q in &queries {
            let mut exact: Vec<(f32, u64)> = (0..n)
                .map(|i| {
                    (
                        data[i * d..][..d]
                            .iter()
                            .zip(q)
                            .map(|(a, b)| (a - b) * (a - b))
                            .sum::<f32>(),
                        ids[i],
                    )
                })
                .collect();
            exact.sort_by(|a, b| a.0.total_cmp(&b.0));
            let hits = idx.search(q, k, Some(64)).unwrap();
            for h in &hits {
                let row = ids.iter().position(|&id| id == h.id).unwrap();
                let want = data[row * d..][..d]
                    .iter()
                    .zip(q)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f32>()
                    .sqrt();
                assert!(
                    (h.distance - want).abs() <= want * 1e-5,
                    "distance {} against {want}",
                    h.distance
                );
            }
            found += hits.iter().filter(|h| exact[..k].iter().any(|e| e.1 == h.id)).count();
        }
        let recall = found as f64 / (queries.len() * k) as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
    }
}
