//! 4-bit codes: their layout, and the distances of a prepared f32 query to them.
//!
//! Why: an index larger than memory walks its codes and its level-0 lists; what must stay in
//! memory for a search not to wait on the disk is those two, and under a memory limit of a
//! quarter of an int8 file 8-bit codes and lists together do not fit, where 4-bit codes, half
//! the bytes, do (measured: `docs/design/quantization.md`). They rank coarsely (16 levels per
//! dimension), so a search reranks more candidates on the full vectors; the rerank's stopping
//! rule (`rerank_found`) sees their larger errors and goes on further by itself.
//!
//! **Layout.** Dimensions go in blocks of 32, each block 16 bytes: byte `16 b + j` holds
//! dimension `32 b + j` in its low nibble and dimension `32 b + 16 + j` in its high one (zero
//! where the dimension does not exist). A kernel then widens 16 bytes once and reads the
//! query's two halves of the block as they lie, without shuffling either side.
//!
//! The kernels have the signatures and the query forms of the 8-bit ones (`kernels.rs`): `n`
//! is the number of dimensions, and the code holds [`code_len`]`(n)` bytes. AVX-512 and AVX2
//! have their own bodies; other CPUs use the scalar one.

use super::kernels::CodeKernels;

/// Bytes of the 4-bit code of `dims` dimensions (a layout fact: [`crate::format::code_len`]).
pub fn code_len(dims: usize) -> usize {
    crate::format::code_len(dims, 4)
}

/// Where dimension `i`'s nibble lies: its byte and its shift (0 or 4).
#[inline(always)]
pub fn place(i: usize) -> (usize, u32) {
    let (b, w) = (i / 32, i % 32);
    (16 * b + w % 16, if w < 16 { 0 } else { 4 })
}

/// Dimension `i`'s code (0..=15) in `c`.
///
/// # Safety
/// `c` valid for `code_len(i + 1)` bytes.
#[inline(always)]
unsafe fn nibble(c: *const u8, i: usize) -> f32 {
    let (at, shift) = place(i);
    ((*c.add(at) >> shift) & 15) as f32
}

/// The kernel set for this CPU at the level of the 8-bit set in use (`level`).
pub fn for_level(level: &str) -> CodeKernels {
    match level {
        #[cfg(target_arch = "x86_64")]
        "avx512" => x86::AVX512,
        #[cfg(target_arch = "x86_64")]
        "avx2" => x86::AVX2,
        _ => SCALAR,
    }
}

pub const SCALAR: CodeKernels = CodeKernels {
    level: "scalar",
    l2: scalar::l2,
    dot: scalar::dot,
    l2_x4: scalar::l2_x4,
    dot_x4: scalar::dot_x4,
};

pub mod scalar {
    //! The reference: one dimension at a time, four accumulators.
    use super::nibble;

    /// # Safety
    /// See [`crate::quant::CodeKernels`]; the code holds `code_len(n)` bytes.
    pub unsafe fn l2(q: *const f32, c: *const u8, n: usize) -> f32 {
        let s = q.add(n);
        let mut acc = [0f32; 4];
        for i in 0..n {
            let d = *q.add(i) - *s.add(i) * nibble(c, i);
            acc[i % 4] += d * d;
        }
        (acc[0] + acc[1]) + (acc[2] + acc[3])
    }

    /// # Safety
    /// As [`l2`].
    pub unsafe fn dot(q: *const f32, c: *const u8, n: usize) -> f32 {
        let mut acc = [0f32; 4];
        for i in 0..n {
            acc[i % 4] += *q.add(i) * nibble(c, i);
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

    /// Masks of a block of `r` dimensions (`r` in 1..=32): its bytes and low nibbles, and its
    /// high nibbles.
    #[inline(always)]
    fn masks(r: usize) -> (__mmask16, __mmask16) {
        let lo = if r >= 16 { 0xffff } else { ((1u32 << r) - 1) as u16 };
        let hi = if r >= 32 {
            0xffff
        } else if r > 16 {
            ((1u32 << (r - 16)) - 1) as u16
        } else {
            0
        };
        (lo, hi)
    }

    /// The block at dimension `i` (a multiple of 32) of code `c`: its low and high nibbles as
    /// f32 (masked-off lanes zero).
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL; `i < n` and `c` valid for `code_len(n)` bytes: a block of
    /// 16 or more dimensions left has all its 16 bytes (blocks are padded whole), a shorter
    /// one is read under its mask `lo` (`masks(n - i)`).
    #[inline(always)]
    unsafe fn block(c: *const u8, i: usize, lo: __mmask16) -> (__m512, __m512) {
        let at = c.add(i / 2);
        let b = if lo == 0xffff {
            _mm_loadu_si128(at as *const __m128i)
        } else {
            _mm_maskz_loadu_epi8(lo, at as *const _)
        };
        let w = _mm512_cvtepu8_epi32(b);
        let low = _mm512_and_si512(w, _mm512_set1_epi32(15));
        let high = _mm512_srli_epi32(w, 4);
        (_mm512_cvtepi32_ps(low), _mm512_cvtepi32_ps(high))
    }

    /// The query's four chunks of the block at `i`: b (or w) and, for l2, the steps, for the
    /// low and the high half.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL; `i < n`; `q` valid for the query's `2 * n` f32s (l2) or
    /// `n` (dot), as [`crate::quant::CodeKernels`] says: the masks keep the loads within them.
    #[inline(always)]
    unsafe fn query(q: *const f32, n: usize, i: usize, l2: bool) -> [__m512; 4] {
        let (lo, hi) = masks(n - i);
        let x0 = load16(q, i, lo);
        let x1 = if hi == 0 { _mm512_setzero_ps() } else { load16(q, i + 16, hi) };
        if !l2 {
            return [x0, x1, x0, x1];
        }
        let y0 = load16(q.add(n), i, lo);
        let y1 = if hi == 0 { _mm512_setzero_ps() } else { load16(q.add(n), i + 16, hi) };
        [x0, x1, y0, y1]
    }

    /// One block into two accumulators. l2: `(b - step * code)^2`; dot: `w * code`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F (no memory is read).
    #[inline(always)]
    unsafe fn step(x: &[__m512; 4], code: (__m512, __m512), l2: bool, acc: &mut [__m512; 2]) {
        if l2 {
            let d0 = _mm512_fnmadd_ps(x[2], code.0, x[0]);
            let d1 = _mm512_fnmadd_ps(x[3], code.1, x[1]);
            acc[0] = _mm512_fmadd_ps(d0, d0, acc[0]);
            acc[1] = _mm512_fmadd_ps(d1, d1, acc[1]);
        } else {
            acc[0] = _mm512_fmadd_ps(x[0], code.0, acc[0]);
            acc[1] = _mm512_fmadd_ps(x[1], code.1, acc[1]);
        }
    }

    /// Four codes at once: the query's chunks loaded once for all four, each code's blocks
    /// into its own accumulators in the same order as one code alone (bitwise the same sums).
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL; `q` as [`query`] asks, each of `c` valid for
    /// `code_len(n)` bytes.
    #[inline(always)]
    unsafe fn four(q: *const f32, c: &[*const u8; 4], n: usize, l2: bool) -> [f32; 4] {
        let mut a = [[_mm512_setzero_ps(); 2]; 4];
        let mut i = 0;
        while i < n {
            let x = query(q, n, i, l2);
            let (lo, _) = masks(n - i);
            for t in 0..4 {
                step(&x, block(c[t], i, lo), l2, &mut a[t]);
            }
            i += 32;
        }
        let s = |a: &[__m512; 2]| sum512(&[a[0], a[1], _mm512_setzero_ps(), _mm512_setzero_ps()]);
        [s(&a[0]), s(&a[1]), s(&a[2]), s(&a[3])]
    }

    /// One code: as [`four`] for a single code.
    ///
    /// # Safety
    /// As [`four`], for `c`.
    #[inline(always)]
    unsafe fn one(q: *const f32, c: *const u8, n: usize, l2: bool) -> f32 {
        let mut a = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i < n {
            let (lo, _) = masks(n - i);
            step(&query(q, n, i, l2), block(c, i, lo), l2, &mut a);
            i += 32;
        }
        sum512(&[a[0], a[1], _mm512_setzero_ps(), _mm512_setzero_ps()])
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn l2_avx512(q: *const f32, c: *const u8, n: usize) -> f32 {
        one(q, c, n, true)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn dot_avx512(q: *const f32, c: *const u8, n: usize) -> f32 {
        one(q, c, n, false)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn l2_avx512_x4(q: *const f32, c: &[*const u8; 4], n: usize) -> [f32; 4] {
        four(q, c, n, true)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn dot_avx512_x4(q: *const f32, c: &[*const u8; 4], n: usize) -> [f32; 4] {
        four(q, c, n, false)
    }

    /// AVX2: half a block a step (8 bytes: 8 low nibbles at `i + h`, 8 high at `i + 16 + h`),
    /// whole blocks only; the last partial block one dimension at a time.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `q` valid for `2 * n` f32s (l2) or `n` (dot), `c` for
    /// `code_len(n)` bytes: whole blocks are read whole, the rest one nibble at a time.
    #[inline(always)]
    unsafe fn avx2(q: *const f32, c: *const u8, n: usize, l2: bool) -> f32 {
        let mut a = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for h in [0usize, 8] {
                let w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(c.add(i / 2 + h) as *const __m128i));
                let low = _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(15)));
                let high = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4));
                let (j0, j1) = (i + h, i + 16 + h);
                let k = h / 4;
                if l2 {
                    let d0 = _mm256_fnmadd_ps(
                        _mm256_loadu_ps(q.add(n + j0)),
                        low,
                        _mm256_loadu_ps(q.add(j0)),
                    );
                    let d1 = _mm256_fnmadd_ps(
                        _mm256_loadu_ps(q.add(n + j1)),
                        high,
                        _mm256_loadu_ps(q.add(j1)),
                    );
                    a[k] = _mm256_fmadd_ps(d0, d0, a[k]);
                    a[k + 1] = _mm256_fmadd_ps(d1, d1, a[k + 1]);
                } else {
                    a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(j0)), low, a[k]);
                    a[k + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(j1)), high, a[k + 1]);
                }
            }
            i += 32;
        }
        tail(q, c, n, i, l2, sum256(&a))
    }

    /// `sum` plus the dimensions `from..n` (the last partial block), one nibble at a time, in
    /// order: the single and the grouped AVX2 kernels end the same way.
    ///
    /// # Safety
    /// As `avx2`.
    #[inline(always)]
    unsafe fn tail(q: *const f32, c: *const u8, n: usize, from: usize, l2: bool, sum: f32) -> f32 {
        let mut sum = sum;
        for j in from..n {
            let code = super::nibble(c, j);
            sum += if l2 {
                let d = *q.add(j) - *q.add(n + j) * code;
                d * d
            } else {
                *q.add(j) * code
            };
        }
        sum
    }
    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2_avx2(q: *const f32, c: *const u8, n: usize) -> f32 {
        avx2(q, c, n, true)
    }
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2(q: *const f32, c: *const u8, n: usize) -> f32 {
        avx2(q, c, n, false)
    }

    /// `avx2` over four codes at once, bitwise four calls of it: two passes (the first 8 bytes
    /// of every 16-byte block, accumulators 0 and 1; then the last 8, accumulators 2 and 3:
    /// four codes' four accumulators would not fit AVX2's 16 registers), the four codes
    /// interleaved within a pass, as the 8-bit codes' AVX2 grouped kernels are.
    ///
    /// # Safety
    /// As `avx2`, for each of the four codes.
    #[inline(always)]
    unsafe fn avx2_x4(q: *const f32, c: &[*const u8; 4], n: usize, l2: bool) -> [f32; 4] {
        let main = n / 32 * 32;
        let mut acc = [[[_mm256_setzero_ps(); 2]; 4]; 2];
        for (pass, h) in [0usize, 8].into_iter().enumerate() {
            let a = &mut acc[pass];
            let mut i = 0;
            while i < main {
                let (j0, j1) = (i + h, i + 16 + h);
                let (x0, x1) = (_mm256_loadu_ps(q.add(j0)), _mm256_loadu_ps(q.add(j1)));
                for t in 0..4 {
                    let at = c[t].add(i / 2 + h) as *const __m128i;
                    let w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(at));
                    let low = _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(15)));
                    let high = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4));
                    if l2 {
                        let d0 = _mm256_fnmadd_ps(_mm256_loadu_ps(q.add(n + j0)), low, x0);
                        let d1 = _mm256_fnmadd_ps(_mm256_loadu_ps(q.add(n + j1)), high, x1);
                        a[t][0] = _mm256_fmadd_ps(d0, d0, a[t][0]);
                        a[t][1] = _mm256_fmadd_ps(d1, d1, a[t][1]);
                    } else {
                        a[t][0] = _mm256_fmadd_ps(x0, low, a[t][0]);
                        a[t][1] = _mm256_fmadd_ps(x1, high, a[t][1]);
                    }
                }
                i += 32;
            }
        }
        std::array::from_fn(|t| {
            let [lo, hi] = [acc[0][t], acc[1][t]];
            tail(q, c[t], n, main, l2, sum256(&[lo[0], lo[1], hi[0], hi[1]]))
        })
    }
    /// # Safety
    /// See [`CodeKernels`].
    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2_avx2_x4(q: *const f32, c: &[*const u8; 4], n: usize) -> [f32; 4] {
        avx2_x4(q, c, n, true)
    }
    /// # Safety
    /// See [`CodeKernels`].
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2_x4(q: *const f32, c: &[*const u8; 4], n: usize) -> [f32; 4] {
        avx2_x4(q, c, n, false)
    }
}
