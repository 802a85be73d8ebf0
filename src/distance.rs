//! Distance kernels: squared L2 and dot product of an f32 query against a stored vector in f32
//! or f16. One set is chosen at run time from the CPU's features (AVX-512, AVX2+FMA+F16C, NEON,
//! scalar); `CHASSIS_KERNEL=scalar|avx2|avx512|neon` forces a lower level, for tests.
//!
//! Metrics on top: euclidean ranks by squared L2 inside searches and reports its square root;
//! cosine stores normalised vectors and uses `1 - dot`; inner product uses `-dot`.

use crate::format::{Metric, Precision};
use std::sync::OnceLock;

/// `kernel(query, stored, dims)`: the query is `dims` f32s; `stored` is `dims` f32s or f16s.
///
/// # Safety
/// Both pointers must be valid for `dims` elements of their type and suitably aligned
/// (f32: 4 bytes, f16: 2 bytes); the CPU must have the kernel's features.
pub type Kernel = unsafe fn(*const f32, *const u8, usize) -> f32;

/// `kernel4(query, [stored; 4], dims)`: four distances, each bitwise equal to the one `Kernel`
/// gives (same operations in the same order per vector), the query read once per pass (AVX2
/// makes two passes over each block of values, the others one).
/// Loads from four stored vectors are interleaved, so their cache misses overlap (a long
/// vector is only partly prefetched: ADR-0015 asks for its first lines).
///
/// # Safety
/// As [`Kernel`], for each of the four stored pointers.
pub type Kernel4 = unsafe fn(*const f32, &[*const u8; 4], usize) -> [f32; 4];

/// A `Kernel4` made of four calls of a `Kernel` (where no interleaved version is written).
macro_rules! four_calls {
    ($name:ident, $one:path) => {
        /// # Safety
        /// See [`Kernel4`].
        pub unsafe fn $name(q: *const f32, v: &[*const u8; 4], n: usize) -> [f32; 4] {
            [$one(q, v[0], n), $one(q, v[1], n), $one(q, v[2], n), $one(q, v[3], n)]
        }
    };
}

#[derive(Clone, Copy)]
pub struct KernelSet {
    pub level: &'static str,
    pub l2_f32: Kernel,
    pub dot_f32: Kernel,
    pub l2_f16: Kernel,
    pub dot_f16: Kernel,
    pub l2_f32_x4: Kernel4,
    pub dot_f32_x4: Kernel4,
    pub l2_f16_x4: Kernel4,
    pub dot_f16_x4: Kernel4,
}

/// The metric's distance from a kernel's value: `bias + sign * kernel` (squared for euclidean).
#[derive(Clone, Copy)]
pub struct MetricKernels {
    pub one: Kernel,
    pub four: Kernel4,
    pub bias: f32,
    pub sign: f32,
}

impl KernelSet {
    /// The kernel for float vectors stored at `precision` (full or half) and the affine map
    /// `bias + sign * kernel` that gives the metric's distance (squared for euclidean). Codes
    /// have kernels of their own (`crate::quant`), which the graph chooses.
    pub fn for_metric(&self, metric: Metric, precision: Precision) -> MetricKernels {
        let (l2, dot) = match precision {
            Precision::Full => ((self.l2_f32, self.l2_f32_x4), (self.dot_f32, self.dot_f32_x4)),
            Precision::Half => ((self.l2_f16, self.l2_f16_x4), (self.dot_f16, self.dot_f16_x4)),
            Precision::CodesOnly => {
                panic!("distances to codes come from the code kernels of the quant module")
            }
        };
        let ((one, four), bias, sign) = match metric {
            Metric::Euclidean => (l2, 0.0, 1.0),
            Metric::Cosine => (dot, 1.0, -1.0),
            Metric::InnerProduct => (dot, 0.0, -1.0),
        };
        MetricKernels { one, four, bias, sign }
    }
}

pub const SCALAR: KernelSet = KernelSet {
    level: "scalar",
    l2_f32: scalar::l2_f32,
    dot_f32: scalar::dot_f32,
    l2_f16: scalar::l2_f16,
    dot_f16: scalar::dot_f16,
    l2_f32_x4: scalar::l2_f32_x4,
    dot_f32_x4: scalar::dot_f32_x4,
    l2_f16_x4: scalar::l2_f16_x4,
    dot_f16_x4: scalar::dot_f16_x4,
};

/// Every kernel set this CPU can run, best first, ending with scalar.
pub fn available() -> Vec<KernelSet> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            v.push(x86::AVX512);
        }
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            v.push(x86::AVX2);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        v.push(neon::NEON);
    }
    v.push(SCALAR);
    v
}

/// The kernel set in use: the best available, or the one `CHASSIS_KERNEL` names if it is
/// available (an unknown or unavailable name falls back to the best).
pub fn kernels() -> &'static KernelSet {
    static K: OnceLock<KernelSet> = OnceLock::new();
    K.get_or_init(|| {
        let all = available();
        if let Some(want) = &crate::tuning::get().kernel {
            if let Some(k) = all.iter().find(|k| k.level == want) {
                return *k;
            }
        }
        all[0]
    })
}

/// The dot product of two f32 slices of one length, with this CPU's kernel.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    // SAFETY: both slices hold a.len() f32s (4-byte aligned); the kernel set fits this CPU.
    unsafe { (kernels().dot_f32)(a.as_ptr(), b.as_ptr() as *const u8, a.len()) }
}

/// The squared L2 distance of two f32 slices of one length, with this CPU's kernel.
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    // SAFETY: both slices hold a.len() f32s (4-byte aligned); the kernel set fits this CPU.
    unsafe { (kernels().l2_f32)(a.as_ptr(), b.as_ptr() as *const u8, a.len()) }
}

/// Normalise in place; returns false for a zero (or non-finite-norm) vector.
pub fn normalize(v: &mut [f32]) -> bool {
    let n = v.iter().map(|x| (*x as f64) * (*x as f64)).sum::<f64>().sqrt();
    if !(n > 0.0 && n.is_finite()) {
        return false;
    }
    for x in v {
        *x = (*x as f64 / n) as f32;
    }
    true
}

pub mod scalar {
    //! The reference kernels: plain loops with four accumulators (so that the compiler can
    //! keep them in registers) and no intrinsics.

    #[inline(always)]
    unsafe fn f16_at(p: *const u8, i: usize) -> f32 {
        half::f16::from_bits((p as *const u16).add(i).read_unaligned()).to_f32()
    }

    /// # Safety
    /// See [`super::Kernel`].
    pub unsafe fn l2_f32(q: *const f32, v: *const u8, n: usize) -> f32 {
        let v = v as *const f32;
        let mut acc = [0f32; 4];
        let mut i = 0;
        while i + 4 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                let d = *q.add(i + j) - *v.add(i + j);
                *a += d * d;
            }
            i += 4;
        }
        while i < n {
            let d = *q.add(i) - *v.add(i);
            acc[0] += d * d;
            i += 1;
        }
        (acc[0] + acc[1]) + (acc[2] + acc[3])
    }

    /// # Safety
    /// See [`super::Kernel`].
    pub unsafe fn dot_f32(q: *const f32, v: *const u8, n: usize) -> f32 {
        let v = v as *const f32;
        let mut acc = [0f32; 4];
        let mut i = 0;
        while i + 4 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                *a += *q.add(i + j) * *v.add(i + j);
            }
            i += 4;
        }
        while i < n {
            acc[0] += *q.add(i) * *v.add(i);
            i += 1;
        }
        (acc[0] + acc[1]) + (acc[2] + acc[3])
    }

    /// # Safety
    /// See [`super::Kernel`].
    pub unsafe fn l2_f16(q: *const f32, v: *const u8, n: usize) -> f32 {
        let mut acc = 0f32;
        for i in 0..n {
            let d = *q.add(i) - f16_at(v, i);
            acc += d * d;
        }
        acc
    }

    /// # Safety
    /// See [`super::Kernel`].
    pub unsafe fn dot_f16(q: *const f32, v: *const u8, n: usize) -> f32 {
        let mut acc = 0f32;
        for i in 0..n {
            acc += *q.add(i) * f16_at(v, i);
        }
        acc
    }

    four_calls!(l2_f32_x4, l2_f32);
    four_calls!(dot_f32_x4, dot_f32);
    four_calls!(l2_f16_x4, l2_f16);
    four_calls!(dot_f16_x4, dot_f16);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::KernelSet;
    use std::arch::x86_64::*;

    pub const AVX2: KernelSet = KernelSet {
        level: "avx2",
        l2_f32: l2_f32_avx2,
        dot_f32: dot_f32_avx2,
        l2_f16: l2_f16_avx2,
        dot_f16: dot_f16_avx2,
        l2_f32_x4: l2_f32_avx2_x4,
        dot_f32_x4: dot_f32_avx2_x4,
        l2_f16_x4: l2_f16_avx2_x4,
        dot_f16_x4: dot_f16_avx2_x4,
    };
    pub const AVX512: KernelSet = KernelSet {
        level: "avx512",
        l2_f32: l2_f32_avx512,
        dot_f32: dot_f32_avx512,
        l2_f16: l2_f16_avx512,
        dot_f16: dot_f16_avx512,
        l2_f32_x4: l2_f32_avx512_x4,
        dot_f32_x4: dot_f32_avx512_x4,
        l2_f16_x4: l2_f16_avx512_x4,
        dot_f16_x4: dot_f16_avx512_x4,
    };

    /// The sum of four accumulators' lanes, in the one order every AVX2 kernel here and in
    /// `quant` ends with.
    ///
    /// # Safety
    /// The CPU must have AVX (the callers' own `target_feature`, into which it inlines).
    #[inline(always)]
    pub(crate) unsafe fn sum256(a: &[__m256; 4]) -> f32 {
        let v = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// One kernel body for the four AVX2 kernels: `$load` reads 8 stored values as f32 at
    /// element `i`, `$elem` is the stored element size, `$tail` is the scalar kernel for the
    /// remainder, `$op` folds a pair.
    macro_rules! avx2_kernel {
        ($name:ident, $load:ident, $elem:expr, $tail:path, $op:ident) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $name(q: *const f32, v: *const u8, n: usize) -> f32 {
                let load = $load;
                let mut a = [_mm256_setzero_ps(); 4];
                let mut i = 0;
                while i + 32 <= n {
                    for j in 0..4 {
                        a[j] = $op(_mm256_loadu_ps(q.add(i + 8 * j)), load(v, i + 8 * j), a[j]);
                    }
                    i += 32;
                }
                while i + 8 <= n {
                    a[0] = $op(_mm256_loadu_ps(q.add(i)), load(v, i), a[0]);
                    i += 8;
                }
                sum256(&a) + $tail(q.add(i), v.add(i * $elem), n - i)
            }
        };
    }

    #[inline(always)]
    unsafe fn l2_step(x: __m256, y: __m256, acc: __m256) -> __m256 {
        let d = _mm256_sub_ps(x, y);
        _mm256_fmadd_ps(d, d, acc)
    }
    #[inline(always)]
    unsafe fn dot_step(x: __m256, y: __m256, acc: __m256) -> __m256 {
        _mm256_fmadd_ps(x, y, acc)
    }
    #[inline(always)]
    unsafe fn load_f32(v: *const u8, i: usize) -> __m256 {
        _mm256_loadu_ps((v as *const f32).add(i))
    }
    #[inline(always)]
    unsafe fn load_f16(v: *const u8, i: usize) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128((v as *const u16).add(i) as *const __m128i))
    }
    avx2_kernel!(l2_f32_avx2, load_f32, 4, super::scalar::l2_f32, l2_step);
    avx2_kernel!(dot_f32_avx2, load_f32, 4, super::scalar::dot_f32, dot_step);
    avx2_kernel!(l2_f16_avx2, load_f16, 2, super::scalar::l2_f16, l2_step);
    avx2_kernel!(dot_f16_avx2, load_f16, 2, super::scalar::dot_f16, dot_step);
    /// `avx2_kernel` over four stored vectors at once, bitwise its single kernel per vector:
    /// four vectors' four accumulators would not fit AVX2's 16 registers, so each block of
    /// `BLOCK4` values is read in two passes, accumulators 0 and 1 (the first half of each
    /// 32-value step) and then 2 and 3, and the 8-value steps after the last block also go to
    /// accumulator 0: each accumulator takes the same values in the same order as in
    /// `avx2_kernel`. Within a pass the four vectors' loads are interleaved, so their misses on
    /// the lines past the prefetched ones overlap (four calls, one vector after the other, were
    /// slower); passes by block rather than over the whole vector read a float32 vector's lines
    /// in order, where whole-vector passes read every other line and came back for the rest
    /// (the search-path record has both measurements).
    macro_rules! avx2_kernel4 {
        ($name:ident, $load:ident, $elem:expr, $tail:path, $op:ident) => {
            /// # Safety
            /// See [`Kernel4`](super::Kernel4).
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $name(q: *const f32, v: &[*const u8; 4], n: usize) -> [f32; 4] {
                let load = $load;
                let main = n / 32 * 32;
                let mut lo = [[_mm256_setzero_ps(); 2]; 4];
                let mut hi = [[_mm256_setzero_ps(); 2]; 4];
                let mut start = 0;
                while start < main {
                    let end = (start + BLOCK4).min(main);
                    let mut i = start;
                    while i < end {
                        for j in 0..2 {
                            let x = _mm256_loadu_ps(q.add(i + 8 * j));
                            for t in 0..4 {
                                lo[t][j] = $op(x, load(v[t], i + 8 * j), lo[t][j]);
                            }
                        }
                        i += 32;
                    }
                    let mut i = start;
                    while i < end {
                        for j in 0..2 {
                            let x = _mm256_loadu_ps(q.add(i + 16 + 8 * j));
                            for t in 0..4 {
                                hi[t][j] = $op(x, load(v[t], i + 16 + 8 * j), hi[t][j]);
                            }
                        }
                        i += 32;
                    }
                    start = end;
                }
                let mut i = main;
                while i + 8 <= n {
                    let x = _mm256_loadu_ps(q.add(i));
                    for t in 0..4 {
                        lo[t][0] = $op(x, load(v[t], i), lo[t][0]);
                    }
                    i += 8;
                }
                let rest = i;
                let mut out = [0.0f32; 4];
                for t in 0..4 {
                    out[t] = sum256(&[lo[t][0], lo[t][1], hi[t][0], hi[t][1]])
                        + $tail(q.add(rest), v[t].add(rest * $elem), n - rest);
                }
                out
            }
        };
    }
    /// Values per block of `avx2_kernel4`: 512 bytes of float32, the eight lines ADR-0015
    /// prefetches by default.
    const BLOCK4: usize = 128;
    avx2_kernel4!(l2_f32_avx2_x4, load_f32, 4, super::scalar::l2_f32, l2_step);
    avx2_kernel4!(dot_f32_avx2_x4, load_f32, 4, super::scalar::dot_f32, dot_step);
    avx2_kernel4!(l2_f16_avx2_x4, load_f16, 2, super::scalar::l2_f16, l2_step);
    avx2_kernel4!(dot_f16_avx2_x4, load_f16, 2, super::scalar::dot_f16, dot_step);

    /// The sum of four accumulators' lanes, in the one order every AVX-512 kernel here and in
    /// `quant::kernels` ends with: a grouped kernel is bitwise its single kernel because both
    /// end in this call.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F (the callers' own `target_feature`, into which it inlines).
    #[inline(always)]
    pub(crate) unsafe fn sum512(a: &[__m512; 4]) -> f32 {
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])))
    }

    /// AVX-512: 16 lanes, four accumulators, and a masked load for the tail (no scalar loop).
    macro_rules! avx512_kernel {
        ($name:ident, $load:ident, $op:ident) => {
            // avx512vl: the 256-bit masked load of f16 values needs it; without it that load
            // is a function call per step, slower than AVX2 (measured:
            // `docs/design/search-path.md`).
            #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
            unsafe fn $name(q: *const f32, v: *const u8, n: usize) -> f32 {
                let mut a = [_mm512_setzero_ps(); 4];
                let mut i = 0;
                while i + 64 <= n {
                    for j in 0..4 {
                        a[j] = $op(
                            _mm512_loadu_ps(q.add(i + 16 * j)),
                            $load(v, i + 16 * j, 0xffff),
                            a[j],
                        );
                    }
                    i += 64;
                }
                // Up to three more whole steps, each into its own accumulator (no dependency
                // chain through one register).
                for j in 0..3 {
                    if i + 16 <= n {
                        a[j] = $op(_mm512_loadu_ps(q.add(i)), $load(v, i, 0xffff), a[j]);
                        i += 16;
                    }
                }
                if i < n {
                    let m: __mmask16 = (1u32 << (n - i)) as u16 - 1;
                    a[3] = $op(_mm512_maskz_loadu_ps(m, q.add(i)), $load(v, i, m), a[3]);
                }
                sum512(&a)
            }
        };
    }
    #[inline(always)]
    unsafe fn l2_step512(x: __m512, y: __m512, acc: __m512) -> __m512 {
        let d = _mm512_sub_ps(x, y);
        _mm512_fmadd_ps(d, d, acc)
    }
    #[inline(always)]
    unsafe fn dot_step512(x: __m512, y: __m512, acc: __m512) -> __m512 {
        _mm512_fmadd_ps(x, y, acc)
    }
    /// Sixteen f32s of `q` from element `i`, those of mask `m` (zeros elsewhere).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F (inlined as `sum512`); the lanes of `m` lie within `q`'s
    /// valid f32s.
    #[inline(always)]
    pub(crate) unsafe fn load16(q: *const f32, i: usize, m: __mmask16) -> __m512 {
        if m == 0xffff {
            _mm512_loadu_ps(q.add(i))
        } else {
            _mm512_maskz_loadu_ps(m, q.add(i))
        }
    }
    #[inline(always)]
    unsafe fn load512_f32(v: *const u8, i: usize, m: __mmask16) -> __m512 {
        load16(v as *const f32, i, m)
    }
    #[inline(always)]
    unsafe fn load512_f16(v: *const u8, i: usize, m: __mmask16) -> __m512 {
        let p = (v as *const i16).add(i);
        if m == 0xffff {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        } else {
            _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p as *const _))
        }
    }
    avx512_kernel!(l2_f32_avx512, load512_f32, l2_step512);
    avx512_kernel!(dot_f32_avx512, load512_f32, dot_step512);
    avx512_kernel!(l2_f16_avx512, load512_f16, l2_step512);
    avx512_kernel!(dot_f16_avx512, load512_f16, dot_step512);

    /// `avx512_kernel` over four stored vectors at once: per vector the same steps into the
    /// same accumulators in the same order (so each result is bitwise the single kernel's),
    /// with each query chunk loaded once for all four. 16 accumulators + query + loads fit
    /// AVX-512's 32 registers.
    macro_rules! avx512_kernel4 {
        ($name:ident, $load:ident, $op:ident) => {
            #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
            unsafe fn $name(q: *const f32, v: &[*const u8; 4], n: usize) -> [f32; 4] {
                let mut a = [[_mm512_setzero_ps(); 4]; 4];
                let mut i = 0;
                while i + 64 <= n {
                    for j in 0..4 {
                        let x = _mm512_loadu_ps(q.add(i + 16 * j));
                        for t in 0..4 {
                            a[t][j] = $op(x, $load(v[t], i + 16 * j, 0xffff), a[t][j]);
                        }
                    }
                    i += 64;
                }
                for j in 0..3 {
                    if i + 16 <= n {
                        let x = _mm512_loadu_ps(q.add(i));
                        for t in 0..4 {
                            a[t][j] = $op(x, $load(v[t], i, 0xffff), a[t][j]);
                        }
                        i += 16;
                    }
                }
                if i < n {
                    let m: __mmask16 = (1u32 << (n - i)) as u16 - 1;
                    let x = _mm512_maskz_loadu_ps(m, q.add(i));
                    for t in 0..4 {
                        a[t][3] = $op(x, $load(v[t], i, m), a[t][3]);
                    }
                }
                [sum512(&a[0]), sum512(&a[1]), sum512(&a[2]), sum512(&a[3])]
            }
        };
    }
    avx512_kernel4!(l2_f32_avx512_x4, load512_f32, l2_step512);
    avx512_kernel4!(dot_f32_avx512_x4, load512_f32, dot_step512);
    avx512_kernel4!(l2_f16_avx512_x4, load512_f16, l2_step512);
    avx512_kernel4!(dot_f16_avx512_x4, load512_f16, dot_step512);
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::KernelSet;
    use std::arch::aarch64::*;

    pub const NEON: KernelSet = KernelSet {
        level: "neon",
        l2_f32,
        dot_f32,
        l2_f16,
        dot_f16,
        l2_f32_x4,
        dot_f32_x4,
        l2_f16_x4,
        dot_f16_x4,
    };

    /// Four f32s from element `i` of stored f32 values.
    ///
    /// # Safety
    /// `v` is valid for elements `i..i + 4`.
    #[inline(always)]
    unsafe fn load_f32(v: *const u8, i: usize) -> float32x4_t {
        vld1q_f32((v as *const f32).add(i))
    }

    /// Four f16s from element `i`, widened to f32 by `fcvtl`. Rust's f16 vector types are not
    /// stable yet, so the one instruction is written out; widening half to single precision is
    /// in ARMv8.0's base SIMD set (FEAT_FP16 adds half-precision arithmetic, not this).
    ///
    /// # Safety
    /// `v` is valid for elements `i..i + 4` of 2 bytes, 2-byte aligned.
    #[inline(always)]
    unsafe fn load_f16(v: *const u8, i: usize) -> float32x4_t {
        let h: uint16x4_t = vld1_u16((v as *const u16).add(i));
        let out: float32x4_t;
        // SAFETY: a register-to-register conversion: reads `h`, writes `out`, touches no
        // memory or stack (a signalling NaN may set FPSR's invalid-operation flag, so the
        // flags are not declared preserved).
        unsafe {
            std::arch::asm!(
                "fcvtl {o:v}.4s, {h:v}.4h",
                h = in(vreg) h,
                o = lateout(vreg) out,
                options(pure, nomem, nostack)
            );
        }
        out
    }

    #[inline(always)]
    unsafe fn l2_step(acc: float32x4_t, x: float32x4_t, y: float32x4_t) -> float32x4_t {
        let d = vsubq_f32(x, y);
        vfmaq_f32(acc, d, d)
    }
    #[inline(always)]
    unsafe fn dot_step(acc: float32x4_t, x: float32x4_t, y: float32x4_t) -> float32x4_t {
        vfmaq_f32(acc, x, y)
    }

    /// Four accumulators over 16 values a step, a scalar tail. `$load` reads four stored values
    /// as f32, `$elem` is the stored element's size.
    macro_rules! neon_kernel {
        ($name:ident, $load:ident, $elem:expr, $step:ident, $tail:path) => {
            /// # Safety
            /// See [`Kernel`](super::Kernel).
            unsafe fn $name(q: *const f32, v: *const u8, n: usize) -> f32 {
                let mut a = [vdupq_n_f32(0.0); 4];
                let mut i = 0;
                while i + 16 <= n {
                    for (j, acc) in a.iter_mut().enumerate() {
                        *acc = $step(*acc, vld1q_f32(q.add(i + 4 * j)), $load(v, i + 4 * j));
                    }
                    i += 16;
                }
                let s = vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])));
                s + $tail(q.add(i), v.add(i * $elem), n - i)
            }
        };
    }

    /// `neon_kernel` over four stored vectors at once, each bitwise its single kernel (the same
    /// steps into the same accumulators in the same order): NEON's 32 registers hold the four
    /// vectors' four accumulators, the query's chunk and the loads, and the loads interleaved
    /// make the vectors' misses overlap (as AVX2's grouped kernels, which were measured).
    macro_rules! neon_kernel4 {
        ($name:ident, $load:ident, $elem:expr, $step:ident, $tail:path) => {
            /// # Safety
            /// See [`Kernel4`](super::Kernel4).
            unsafe fn $name(q: *const f32, v: &[*const u8; 4], n: usize) -> [f32; 4] {
                let mut a = [[vdupq_n_f32(0.0); 4]; 4];
                let mut i = 0;
                while i + 16 <= n {
                    for j in 0..4 {
                        let x = vld1q_f32(q.add(i + 4 * j));
                        for t in 0..4 {
                            a[t][j] = $step(a[t][j], x, $load(v[t], i + 4 * j));
                        }
                    }
                    i += 16;
                }
                let mut out = [0.0f32; 4];
                for t in 0..4 {
                    let s = vaddvq_f32(vaddq_f32(
                        vaddq_f32(a[t][0], a[t][1]),
                        vaddq_f32(a[t][2], a[t][3]),
                    ));
                    out[t] = s + $tail(q.add(i), v[t].add(i * $elem), n - i);
                }
                out
            }
        };
    }
    neon_kernel!(l2_f32, load_f32, 4, l2_step, super::scalar::l2_f32);
    neon_kernel!(dot_f32, load_f32, 4, dot_step, super::scalar::dot_f32);
    neon_kernel!(l2_f16, load_f16, 2, l2_step, super::scalar::l2_f16);
    neon_kernel!(dot_f16, load_f16, 2, dot_step, super::scalar::dot_f16);
    neon_kernel4!(l2_f32_x4, load_f32, 4, l2_step, super::scalar::l2_f32);
    neon_kernel4!(dot_f32_x4, load_f32, 4, dot_step, super::scalar::dot_f32);
    neon_kernel4!(l2_f16_x4, load_f16, 2, l2_step, super::scalar::l2_f16);
    neon_kernel4!(dot_f16_x4, load_f16, 2, dot_step, super::scalar::dot_f16);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A seeded xorshift stream of `n` values in [lo, hi) (the kernels' tests here and in
    /// `quant`).
    pub(crate) fn uniform(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect()
    }

    fn data(n: usize, seed: u64) -> Vec<f32> {
        uniform(n, seed, -2.0, 2.0)
    }

    fn exact_l2(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum()
    }
    fn exact_dot(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
    }

    #[test]
    fn every_available_kernel_matches_exact_math_at_every_length() {
        for k in available() {
            for n in (0..=70).chain([127, 128, 129, 160, 200, 383, 384, 385, 1536, 1537]) {
                let q = data(n, 1 + n as u64);
                let v = data(n, 1000 + n as u64);
                let h: Vec<u16> = v.iter().map(|x| half::f16::from_f32(*x).to_bits()).collect();
                let vh: Vec<f32> = h.iter().map(|b| half::f16::from_bits(*b).to_f32()).collect();
                let tol = |x: f64| 1e-4 * (1.0 + x.abs());
                // SAFETY: vectors of n elements; the set comes from `available()`.
                unsafe {
                    let got = (k.l2_f32)(q.as_ptr(), v.as_ptr() as *const u8, n) as f64;
                    assert!((got - exact_l2(&q, &v)).abs() < tol(got), "{} l2_f32 n={n}", k.level);
                    let got = (k.dot_f32)(q.as_ptr(), v.as_ptr() as *const u8, n) as f64;
                    assert!(
                        (got - exact_dot(&q, &v)).abs() < tol(got),
                        "{} dot_f32 n={n}",
                        k.level
                    );
                    let got = (k.l2_f16)(q.as_ptr(), h.as_ptr() as *const u8, n) as f64;
                    assert!((got - exact_l2(&q, &vh)).abs() < tol(got), "{} l2_f16 n={n}", k.level);
                    let got = (k.dot_f16)(q.as_ptr(), h.as_ptr() as *const u8, n) as f64;
                    assert!(
                        (got - exact_dot(&q, &vh)).abs() < tol(got),
                        "{} dot_f16 n={n}",
                        k.level
                    );
                }
            }
        }
    }

    #[test]
    fn grouped_kernels_give_bitwise_the_single_kernels_distances() {
        for k in available() {
            for n in (0..=70).chain([127, 128, 129, 160, 200, 383, 384, 385, 1536, 1537]) {
                let q = data(n, 7 + n as u64);
                let vs: Vec<Vec<f32>> = (0..4).map(|t| data(n, 100 * t + n as u64)).collect();
                let hs: Vec<Vec<u16>> = vs
                    .iter()
                    .map(|v| v.iter().map(|x| half::f16::from_f32(*x).to_bits()).collect())
                    .collect();
                let pf: [*const u8; 4] = std::array::from_fn(|t| vs[t].as_ptr() as *const u8);
                let ph: [*const u8; 4] = std::array::from_fn(|t| hs[t].as_ptr() as *const u8);
                let pairs: [(Kernel, Kernel4, &[*const u8; 4], &str); 4] = [
                    (k.l2_f32, k.l2_f32_x4, &pf, "l2_f32"),
                    (k.dot_f32, k.dot_f32_x4, &pf, "dot_f32"),
                    (k.l2_f16, k.l2_f16_x4, &ph, "l2_f16"),
                    (k.dot_f16, k.dot_f16_x4, &ph, "dot_f16"),
                ];
                for (one, four, ptrs, name) in pairs {
                    // SAFETY: four vectors of n elements of the kernel's type; the set comes
                    // from `available()`.
                    let (got, want) =
                        unsafe { (four(q.as_ptr(), ptrs, n), ptrs.map(|p| one(q.as_ptr(), p, n))) };
                    assert_eq!(
                        got.map(f32::to_bits),
                        want.map(f32::to_bits),
                        "{} {name} n={n}",
                        k.level
                    );
                }
            }
        }
    }

    /// Swapping the query and the stored vector gives bitwise the same distance, for stored
    /// vectors of either precision and a query that is the other's values as f32 (the neighbor
    /// heuristic relies on it: `Graph::select_after` measures a candidate from the kept nodes).
    /// Oracle: the kernel itself, the other way round.
    #[test]
    fn every_kernel_is_symmetric_bitwise() {
        for k in available() {
            for n in (0..=70).chain([127, 128, 129, 383, 384, 385, 1537]) {
                let (a, b) = (data(n, 31 + n as u64), data(n, 3100 + n as u64));
                let half = |v: &[f32]| -> (Vec<u16>, Vec<f32>) {
                    let h: Vec<u16> = v.iter().map(|x| half::f16::from_f32(*x).to_bits()).collect();
                    let f = h.iter().map(|b| half::f16::from_bits(*b).to_f32()).collect();
                    (h, f)
                };
                let ((ah, af), (bh, bf)) = (half(&a), half(&b));
                // (kernel, name, first query, its row, second query, its row)
                type Case<'a> = (Kernel, &'a str, &'a [f32], *const u8, &'a [f32], *const u8);
                let cases: [Case; 4] = [
                    (k.l2_f32, "l2_f32", &a, b.as_ptr() as _, &b, a.as_ptr() as _),
                    (k.dot_f32, "dot_f32", &a, b.as_ptr() as _, &b, a.as_ptr() as _),
                    (k.l2_f16, "l2_f16", &af, bh.as_ptr() as _, &bf, ah.as_ptr() as _),
                    (k.dot_f16, "dot_f16", &af, bh.as_ptr() as _, &bf, ah.as_ptr() as _),
                ];
                for (kernel, name, q1, v1, q2, v2) in cases {
                    // SAFETY: queries of n f32s, stored vectors of n elements of the kernel's
                    // type; the set comes from `available()`.
                    let (one, other) =
                        unsafe { (kernel(q1.as_ptr(), v1, n), kernel(q2.as_ptr(), v2, n)) };
                    assert_eq!(one.to_bits(), other.to_bits(), "{} {name} n={n}", k.level);
                }
            }
        }
    }

    #[test]
    fn normalize_refuses_zero_and_makes_unit_vectors() {
        let mut z = vec![0.0f32; 5];
        assert!(!normalize(&mut z));
        let mut v = vec![3.0f32, 4.0];
        assert!(normalize(&mut v));
        assert!((v[0] - 0.6).abs() < 1e-7 && (v[1] - 0.8).abs() < 1e-7);
    }
}
