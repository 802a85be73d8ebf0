//! Criterion microbenchmark: nanoseconds per distance of each kernel level this CPU has, against
//! the kernel's bound.
//!
//!     cargo bench --features bench --bench distance   # every level, dims 128 / 384 / 960
//!     cargo bench --features bench --bench distance -- avx512/l2_f32/384
//!
//! Two settings per kernel and length:
//! - `hot`: the same stored vector again and again (in L1): the arithmetic alone. The bound is
//!   the loads: each step of `w` floats reads `w` query floats and `w` stored values, and a core
//!   issues two loads per cycle, so `dims / w` cycles (w = 16 for AVX-512, 8 for AVX2, 4 for
//!   NEON) plus the horizontal sum. At the clock printed first, that is the `bound` line.
//! - `cold`: stored vectors picked at random from 256 MiB (beyond every cache), as a search
//!   reads them: what a miss to memory adds when nothing is prefetched.

use chassis::distance::{available, Kernel};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// The clock of this machine in GHz, as /proc/cpuinfo says (a nominal figure on a VM).
fn ghz() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 =
        text.lines().find(|l| l.starts_with("cpu MHz"))?.split(':').nth(1)?.trim().parse().ok()?;
    Some(mhz / 1000.0)
}

/// One 64-byte line: Vec<Line> is a 64-byte aligned buffer.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

fn as_f32(v: &mut [Line], n: usize) -> &mut [f32] {
    // SAFETY: Line is 16 f32s with no padding; n <= 16 * v.len().
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut f32, n) }
}

fn as_bytes(v: &mut [Line], n: usize) -> &mut [u8] {
    // SAFETY: any bytes are valid u8; n <= 64 * v.len().
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, n) }
}

fn width(level: &str) -> usize {
    match level {
        "avx512" => 16,
        "avx2" => 8,
        "neon" => 4,
        _ => 1,
    }
}

fn bench(c: &mut Criterion) {
    let dims_list = [128usize, 384, 960];
    let clock = ghz();
    for k in available() {
        for &dims in &dims_list {
            if let Some(g) = clock {
                let cycles = (dims / width(k.level)) as f64 + 8.0; // loads, then the horizontal sum
                eprintln!(
                    "bound {}/{dims}: {:.1} ns ({cycles:.0} cycles at {g:.2} GHz)",
                    k.level,
                    cycles / g
                );
            }
        }
    }
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for k in available() {
        let kernels: [(&str, Kernel, usize); 2] =
            [("l2_f32", k.l2_f32, 4), ("l2_f16", k.l2_f16, 2)];
        for (name, kernel, elem) in kernels {
            let mut group = c.benchmark_group(format!("{}/{name}", k.level));
            group.throughput(Throughput::Elements(1));
            for &dims in &dims_list {
                // 64-byte aligned, as stored vectors are (and as a search copies its query).
                let mut qa = vec![Line([0.0; 16]); dims.div_ceil(16)];
                let q = as_f32(&mut qa, dims);
                for x in q.iter_mut() {
                    *x = (next() >> 40) as f32 / 1e7;
                }
                let q: &[f32] = q;
                let mut oa = vec![Line([0.0; 16]); (dims * elem).div_ceil(64)];
                let one = as_bytes(&mut oa, dims * elem);
                for (i, b) in one.iter_mut().enumerate() {
                    *b = (i * 7 % 61) as u8;
                }
                let one: &[u8] = one;
                group.bench_with_input(BenchmarkId::new("hot", dims), &dims, |b, &dims| {
                    // SAFETY: q holds dims f32s, `one` dims elements of the kernel's type
                    // (f16 halves or f32s, read unaligned-safe by the kernels); the level
                    // came from `available()`, so this CPU has its features.
                    b.iter(|| unsafe {
                        kernel(black_box(q.as_ptr()), black_box(one.as_ptr()), dims)
                    })
                });
                let stride = (dims * elem).div_ceil(64) * 64;
                let count = (256 << 20) / stride;
                let mut pa = vec![Line([0.0; 16]); count * stride / 64];
                let pool: &[u8] = as_bytes(&mut pa, count * stride);
                let picks: Vec<usize> =
                    (0..4096).map(|_| (next() % count as u64) as usize * stride).collect();
                let mut at = 0usize;
                group.bench_with_input(BenchmarkId::new("cold", dims), &dims, |b, &dims| {
                    b.iter(|| {
                        at = (at + 1) & 4095;
                        // SAFETY: every pick is a whole stored vector inside `pool`, 64-byte
                        // strided as in the index; see above for the rest.
                        unsafe { kernel(black_box(q.as_ptr()), pool.as_ptr().add(picks[at]), dims) }
                    })
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
