//! Distances of a prepared f32 query to 8-bit codes (see the model in `quant`'s table):
//! `l2(q, code, n) = sum (q[i] - q[n + i] * code[i])^2` (the query's `b = q - offset`, then
//! its `step`), `dot(q, code, n) = sum q[i] * code[i]` (the query's `w = q * step`).
//!
//! Each code is widened to f32 and met by one fused multiply-add (dot), or two (l2): the
//! arithmetic of a float distance on a quarter of the bytes. On AVX-512 and AVX2 the grouped
//! kernels interleave four codes, 8-bit and 4-bit (a search computes its distances to codes
//! four at a time: see `graph::code_group_min_bytes`); on NEON they are four calls. One set is
//! chosen at run time, as for float vectors (`crate::distance`), and `CHASSIS_KERNEL` forces a
//! lower level.

use crate::distance::{Kernel, Kernel4};
use std::sync::OnceLock;

/// The kernels for codes. Their pointers: the query as described above (`2 * n` f32s for
/// `l2`, `n` for `dot`, 4-byte aligned) and the code's `code_len(n)` bytes (`n` for 8-bit
/// codes, `16 * ceil(n / 32)` for 4-bit ones: `nibbles`); the CPU must have the set's
/// features. The grouped kernels give bitwise what four calls of the single one give.
#[derive(Clone, Copy)]
pub struct CodeKernels {
    pub level: &'static str,
    pub l2: Kernel,
    pub dot: Kernel,
    pub l2_x4: Kernel4,
    pub dot_x4: Kernel4,
}

/// A `Kernel4` made of four calls of a `Kernel`.
macro_rules! four_calls {
    ($name:ident, $one:path) => {
        /// # Safety
        /// See [`CodeKernels`].
        pub unsafe fn $name(q: *const f32, v: &[*const u8; 4], n: usize) -> [f32; 4] {
            [$one(q, v[0], n), $one(q, v[1], n), $one(q, v[2], n), $one(q, v[3], n)]
        }
    };
}

/// The AVX-512 and AVX2 sets of a module whose kernels are named `l2_avx512`, `dot_avx512`,
/// `l2_avx512_x4`, `dot_avx512_x4`, `l2_avx2` and `dot_avx2` (8-bit codes here, 4-bit ones in
/// `nibbles`); the module writes its own AVX2 grouped kernels (`l2_avx2_x4`, `dot_avx2_x4`).
#[cfg(target_arch = "x86_64")]
macro_rules! x86_code_sets {
    () => {
        pub const AVX512: CodeKernels = CodeKernels {
            level: "avx512",
            l2: l2_avx512,
            dot: dot_avx512,
            l2_x4: l2_avx512_x4,
            dot_x4: dot_avx512_x4,
        };
        pub const AVX2: CodeKernels = CodeKernels {
            level: "avx2",
            l2: l2_avx2,
            dot: dot_avx2,
            l2_x4: l2_avx2_x4,
            dot_x4: dot_avx2_x4,
        };
    };
}

pub const SCALAR: CodeKernels = CodeKernels {
    level: "scalar",
    l2: scalar::l2,
    dot: scalar::dot,
    l2_x4: scalar::l2_x4,
    dot_x4: scalar::dot_x4,
};

/// Every set this CPU can run, best first, ending with scalar: the levels the float kernels
/// found (`crate::distance::available`, one feature check for both).
pub fn available() -> Vec<CodeKernels> {
    crate::distance::available()
        .iter()
        .filter_map(|k| match k.level {
            #[cfg(target_arch = "x86_64")]
            "avx512" => Some(x86::AVX512),
            #[cfg(target_arch = "x86_64")]
            "avx2" => Some(x86::AVX2),
            #[cfg(target_arch = "aarch64")]
            "neon" => Some(neon::NEON),
            "scalar" => Some(SCALAR),
            _ => None,
        })
        .collect()
}

/// The set in use: the level of `crate::distance::kernels()` where this module has it (the
/// same choice, `CHASSIS_KERNEL` included), else the best available.
pub fn code_kernels() -> &'static CodeKernels {
    static K: OnceLock<CodeKernels> = OnceLock::new();
    K.get_or_init(|| {
        let all = available();
        let level = crate::distance::kernels().level;
        all.iter().find(|k| k.level == level).copied().unwrap_or(all[0])
    })
}

/// The set in use for codes of `bits` bits: `code_kernels()` for 8, the 4-bit set of the same
/// level for 4 (`nibbles.rs`; scalar where it has none).
pub fn code_kernels_bits(bits: u32) -> &'static CodeKernels {
    static K4: OnceLock<CodeKernels> = OnceLock::new();
    if bits == 4 {
        K4.get_or_init(|| super::nibbles::for_level(code_kernels().level))
    } else {
        code_kernels()
    }
}

pub mod scalar {
    //! The reference: plain loops, four accumulators, no intrinsics.

    /// # Safety
    /// See [`super::CodeKernels`].
    pub unsafe fn l2(q: *const f32, c: *const u8, n: usize) -> f32 {
        let s = q.add(n);
        let mut acc = [0f32; 4];
        let mut i = 0;
        while i + 4 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                let d = *q.add(i + j) - *s.add(i + j) * *c.add(i + j) as f32;
                *a += d * d;
            }
            i += 4;
        }
        while i < n {
            let d = *q.add(i) - *s.add(i) * *c.add(i) as f32;
            acc[0] += d * d;
            i += 1;
        }
        (acc[0] + acc[1]) + (acc[2] + acc[3])
    }

    /// # Safety
    /// See [`super::CodeKernels`].
    pub unsafe fn dot(q: *const f32, c: *const u8, n: usize) -> f32 {
        let mut acc = [0f32; 4];
        let mut i = 0;
        while i + 4 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                *a += *q.add(i + j) * *c.add(i + j) as f32;
            }
            i += 4;
        }
        while i < n {
            acc[0] += *q.add(i) * *c.add(i) as f32;
            i += 1;
        }
        (acc[0] + acc[1]) + (acc[2] + acc[3])
    }

    four_calls!(l2_x4, l2);
    four_calls!(dot_x4, dot);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::CodeKernels;
    use crate::distance::x86::{load16, sum256, sum512};
    use std::arch::x86_64::*;

    x86_code_sets!();

    /// 16 codes from `c + i` (those of mask `m`, zeros elsewhere) as f32.
    #[inline(always)]
    unsafe fn codes16(c: *const u8, i: usize, m: __mmask16) -> __m512 {
        let b = if m == 0xffff {
            _mm_loadu_si128(c.add(i) as *const __m128i)
        } else {
            _mm_maskz_loadu_epi8(m, c.add(i) as *const _)
        };
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b))
    }

    /// One AVX-512 body for both kernels: four accumulators over 64 values a step, then up to
    /// three steps of 16, then a masked tail (masked-off lanes are zero on both sides: they add
    /// nothing).
    macro_rules! avx512_codes {
        ($name:ident, $step:ident) => {
            #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
            unsafe fn $name(q: *const f32, c: *const u8, n: usize) -> f32 {
                let mut a = [_mm512_setzero_ps(); 4];
                let mut i = 0;
                while i + 64 <= n {
                    for j in 0..4 {
                        a[j] = $step(q, c, n, i + 16 * j, 0xffff, a[j]);
                    }
                    i += 64;
                }
                for j in 0..3 {
                    if i + 16 <= n {
                        a[j] = $step(q, c, n, i, 0xffff, a[j]);
                        i += 16;
                    }
                }
                if i < n {
                    let m: __mmask16 = (1u32 << (n - i)) as u16 - 1;
                    a[3] = $step(q, c, n, i, m, a[3]);
                }
                sum512(&a)
            }
        };
    }
    #[inline(always)]
    unsafe fn l2_step512(
        q: *const f32,
        c: *const u8,
        n: usize,
        i: usize,
        m: __mmask16,
        acc: __m512,
    ) -> __m512 {
        // d = b - step * code, in one fused step
        let d = _mm512_fnmadd_ps(load16(q.add(n), i, m), codes16(c, i, m), load16(q, i, m));
        _mm512_fmadd_ps(d, d, acc)
    }
    #[inline(always)]
    unsafe fn dot_step512(
        q: *const f32,
        c: *const u8,
        _n: usize,
        i: usize,
        m: __mmask16,
        acc: __m512,
    ) -> __m512 {
        _mm512_fmadd_ps(load16(q, i, m), codes16(c, i, m), acc)
    }
    avx512_codes!(l2_avx512, l2_step512);
    avx512_codes!(dot_avx512, dot_step512);

    /// `avx512_codes` over four codes at once: per code the same steps into the same
    /// accumulators in the same order, with the same fused operations on the same values (so
    /// each result is bitwise the single kernel's), the query's chunks loaded once for all
    /// four, and the four codes' loads interleaved so their misses overlap. 16 accumulators,
    /// two query chunks and the widened codes fit AVX-512's 32 registers.
    macro_rules! avx512_codes4 {
        ($name:ident, $step:ident, $steps:expr) => {
            #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
            unsafe fn $name(q: *const f32, c: &[*const u8; 4], n: usize) -> [f32; 4] {
                // The query's chunk at `i` (masked by `m`), and its steps' chunk where the
                // query has them (`$steps`: l2's query is `2n` values, a dot's `n`).
                let load = |i: usize, m: __mmask16| {
                    let x = load16(q, i, m);
                    (x, if $steps { load16(q.add(n), i, m) } else { x })
                };
                let mut a = [[_mm512_setzero_ps(); 4]; 4];
                let mut i = 0;
                while i + 64 <= n {
                    for j in 0..4 {
                        let at = i + 16 * j;
                        let (x, y) = load(at, 0xffff);
                        for t in 0..4 {
                            a[t][j] = $step(x, y, codes16(c[t], at, 0xffff), a[t][j]);
                        }
                    }
                    i += 64;
                }
                for j in 0..3 {
                    if i + 16 <= n {
                        let (x, y) = load(i, 0xffff);
                        for t in 0..4 {
                            a[t][j] = $step(x, y, codes16(c[t], i, 0xffff), a[t][j]);
                        }
                        i += 16;
                    }
                }
                if i < n {
                    let m: __mmask16 = (1u32 << (n - i)) as u16 - 1;
                    let (x, y) = load(i, m);
                    for t in 0..4 {
                        a[t][3] = $step(x, y, codes16(c[t], i, m), a[t][3]);
                    }
                }
                [sum512(&a[0]), sum512(&a[1]), sum512(&a[2]), sum512(&a[3])]
            }
        };
    }
    /// `l2_step512` on chunks already loaded: `x` of `b`, `y` of the steps.
    #[inline(always)]
    unsafe fn l2_step512_x(x: __m512, y: __m512, code: __m512, acc: __m512) -> __m512 {
        let d = _mm512_fnmadd_ps(y, code, x);
        _mm512_fmadd_ps(d, d, acc)
    }
    /// `dot_step512` on a chunk already loaded (`y` unused).
    #[inline(always)]
    unsafe fn dot_step512_x(x: __m512, _y: __m512, code: __m512, acc: __m512) -> __m512 {
        _mm512_fmadd_ps(x, code, acc)
    }
    avx512_codes4!(l2_avx512_x4, l2_step512_x, true);
    avx512_codes4!(dot_avx512_x4, dot_step512_x, false);

    /// 8 codes from `c + i` as f32.
    #[inline(always)]
    unsafe fn codes8(c: *const u8, i: usize) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(c.add(i) as *const __m128i)))
    }

    /// One AVX2 body: four accumulators over 32 values a step, steps of 8, a scalar tail.
    macro_rules! avx2_codes {
        ($name:ident, $step:ident, $tail:path) => {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn $name(q: *const f32, c: *const u8, n: usize) -> f32 {
                let mut a = [_mm256_setzero_ps(); 4];
                let mut i = 0;
                while i + 32 <= n {
                    for j in 0..4 {
                        a[j] = $step(q, c, n, i + 8 * j, a[j]);
                    }
                    i += 32;
                }
                while i + 8 <= n {
                    a[0] = $step(q, c, n, i, a[0]);
                    i += 8;
                }
                sum256(&a) + $tail(q, c, n, i)
            }
        };
    }
    #[inline(always)]
    unsafe fn l2_step256(q: *const f32, c: *const u8, n: usize, i: usize, acc: __m256) -> __m256 {
        let d = _mm256_fnmadd_ps(
            _mm256_loadu_ps(q.add(n + i)),
            codes8(c, i),
            _mm256_loadu_ps(q.add(i)),
        );
        _mm256_fmadd_ps(d, d, acc)
    }
    #[inline(always)]
    unsafe fn dot_step256(q: *const f32, c: *const u8, _n: usize, i: usize, acc: __m256) -> __m256 {
        _mm256_fmadd_ps(_mm256_loadu_ps(q.add(i)), codes8(c, i), acc)
    }
    /// The last `n - i` values, one at a time.
    #[inline(always)]
    unsafe fn l2_tail(q: *const f32, c: *const u8, n: usize, i: usize) -> f32 {
        (i..n)
            .map(|j| {
                let d = *q.add(j) - *q.add(n + j) * *c.add(j) as f32;
                d * d
            })
            .sum()
    }
    #[inline(always)]
    unsafe fn dot_tail(q: *const f32, c: *const u8, n: usize, i: usize) -> f32 {
        (i..n).map(|j| *q.add(j) * *c.add(j) as f32).sum()
    }
    avx2_codes!(l2_avx2, l2_step256, l2_tail);
    avx2_codes!(dot_avx2, dot_step256, dot_tail);

    /// `avx2_codes` over four codes at once, bitwise its single kernel per code: two passes
    /// (accumulators 0 and 1 with the 8-value steps, then 2 and 3; four codes' four
    /// accumulators would not fit AVX2's 16 registers), the four codes' steps interleaved
    /// within a pass as `crate::distance`'s AVX2 grouped kernels do (four calls were slower:
    /// the quantization record).
    macro_rules! avx2_codes4 {
        ($name:ident, $step:ident, $tail:path) => {
            /// # Safety
            /// See [`CodeKernels`](super::CodeKernels).
            #[target_feature(enable = "avx2,fma")]
            unsafe fn $name(q: *const f32, c: &[*const u8; 4], n: usize) -> [f32; 4] {
                let main = n / 32 * 32;
                let mut lo = [[_mm256_setzero_ps(); 2]; 4];
                let mut i = 0;
                while i < main {
                    for j in 0..2 {
                        for t in 0..4 {
                            lo[t][j] = $step(q, c[t], n, i + 8 * j, lo[t][j]);
                        }
                    }
                    i += 32;
                }
                while i + 8 <= n {
                    for t in 0..4 {
                        lo[t][0] = $step(q, c[t], n, i, lo[t][0]);
                    }
                    i += 8;
                }
                let rest = i;
                let mut hi = [[_mm256_setzero_ps(); 2]; 4];
                let mut i = 0;
                while i < main {
                    for j in 0..2 {
                        for t in 0..4 {
                            hi[t][j] = $step(q, c[t], n, i + 16 + 8 * j, hi[t][j]);
                        }
                    }
                    i += 32;
                }
                let mut out = [0.0f32; 4];
                for t in 0..4 {
                    out[t] =
                        sum256(&[lo[t][0], lo[t][1], hi[t][0], hi[t][1]]) + $tail(q, c[t], n, rest);
                }
                out
            }
        };
    }
    avx2_codes4!(l2_avx2_x4, l2_step256, l2_tail);
    avx2_codes4!(dot_avx2_x4, dot_step256, dot_tail);
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::CodeKernels;
    use std::arch::aarch64::*;

    pub const NEON: CodeKernels = CodeKernels { level: "neon", l2, dot, l2_x4, dot_x4 };
    four_calls!(l2_x4, l2);
    four_calls!(dot_x4, dot);

    /// 8 codes from `c + i` as two f32x4.
    #[inline(always)]
    unsafe fn codes8(c: *const u8, i: usize) -> (float32x4_t, float32x4_t) {
        let w = vmovl_u8(vld1_u8(c.add(i)));
        (vcvtq_f32_u32(vmovl_u16(vget_low_u16(w))), vcvtq_f32_u32(vmovl_high_u16(w)))
    }

    unsafe fn l2(q: *const f32, c: *const u8, n: usize) -> f32 {
        let s = q.add(n);
        let mut a = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for h in 0..2 {
                let (lo, hi) = codes8(c, i + 8 * h);
                // d = b - step * code (vfmsq: a - b * c)
                let d0 = vfmsq_f32(vld1q_f32(q.add(i + 8 * h)), vld1q_f32(s.add(i + 8 * h)), lo);
                let d1 =
                    vfmsq_f32(vld1q_f32(q.add(i + 8 * h + 4)), vld1q_f32(s.add(i + 8 * h + 4)), hi);
                a[2 * h] = vfmaq_f32(a[2 * h], d0, d0);
                a[2 * h + 1] = vfmaq_f32(a[2 * h + 1], d1, d1);
            }
            i += 16;
        }
        let mut sum = vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])));
        for j in i..n {
            let d = *q.add(j) - *s.add(j) * *c.add(j) as f32;
            sum += d * d;
        }
        sum
    }

    unsafe fn dot(q: *const f32, c: *const u8, n: usize) -> f32 {
        let mut a = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for h in 0..2 {
                let (lo, hi) = codes8(c, i + 8 * h);
                a[2 * h] = vfmaq_f32(a[2 * h], vld1q_f32(q.add(i + 8 * h)), lo);
                a[2 * h + 1] = vfmaq_f32(a[2 * h + 1], vld1q_f32(q.add(i + 8 * h + 4)), hi);
            }
            i += 16;
        }
        let mut sum = vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])));
        for j in i..n {
            sum += *q.add(j) * *c.add(j) as f32;
        }
        sum
    }
}
