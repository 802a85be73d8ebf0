//! Which kernels a build chooses where it runs: the level of the float kernels, of the 8-bit
//! and the 4-bit code kernels, and the CPU policy, printed and checked against what the
//! platform must choose. `.ci/cross` runs this under `qemu-aarch64` and Wine with
//! `CHASSIS_EXPECT_KERNEL` set, so that a build which silently falls back to the scalar
//! kernels (or forces a level the platform lacks) fails there instead of passing on scalar.
//!
//! Oracle: the platform's documented choice (`crate::distance`: NEON on every aarch64, whose
//! baseline it is; AVX-512, AVX2 or scalar on x86_64 as the CPU has them; `CHASSIS_KERNEL`
//! naming an available level wins), the level named in `CHASSIS_EXPECT_KERNEL`, and the
//! kernels' own results on a vector whose distances are exact in f32.

use chassis::{cpu, distance, quant};

fn levels(sets: &[distance::KernelSet]) -> Vec<&'static str> {
    sets.iter().map(|k| k.level).collect()
}

#[test]
fn the_kernels_in_use_are_the_ones_this_platform_chooses() {
    let available = levels(&distance::available());
    let float = distance::kernels().level;
    let codes = quant::code_kernels().level;
    let nibbles = quant::code_kernels_bits(4).level;
    let info = cpu::info();
    let forced = std::env::var("CHASSIS_KERNEL").ok();
    // One line for the log of .ci/cross, which reads it back.
    println!(
        "kernels: float {float}, 8-bit {codes}, 4-bit {nibbles}; available {available:?}; \
         CHASSIS_KERNEL {forced:?}; cpu {} {:?} policy {} ({} lines)",
        info.arch, info.vendor, info.policy, info.prefetch_lines
    );

    assert_eq!(available.last(), Some(&"scalar"), "scalar is always available, last");
    let want = match forced.as_deref().map(str::trim) {
        Some(level) if available.contains(&level) => level,
        _ => available[0],
    };
    assert_eq!(float, want, "the best available level, or the one CHASSIS_KERNEL names");
    // One feature check for both: the code kernels run at the float kernels' level; 4-bit
    // codes too where `quant::nibbles` has a body for it, else scalar (NEON, for now).
    assert_eq!(codes, float);
    assert!(nibbles == float || nibbles == "scalar", "4-bit codes at {nibbles}");
    if cfg!(target_arch = "aarch64") {
        assert_eq!(available, ["neon", "scalar"], "NEON is the aarch64 baseline");
        assert_eq!(info.arch, "aarch64");
        let policy = if cfg!(target_vendor = "apple") { "apple" } else { "aarch64" };
        if std::env::var_os("CHASSIS_PREFETCH_LINES").is_none() {
            assert_eq!(info.policy, policy);
        }
    } else if cfg!(target_arch = "x86_64") {
        assert!(!available.contains(&"neon"));
        assert_eq!(info.arch, "x86_64");
        assert!(!info.vendor.is_empty());
    }
    if let Ok(expect) = std::env::var("CHASSIS_EXPECT_KERNEL") {
        assert_eq!(float, expect.trim(), "CHASSIS_EXPECT_KERNEL: the level this run must test");
    }
}

/// Small integers: every product and sum below is exact in f32, so any summation order (each
/// level has its own) gives the same value, and the kernels in use must give exactly it.
#[test]
fn the_kernels_in_use_give_exact_distances_on_exact_inputs() {
    for n in [0usize, 1, 3, 4, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 384, 1537] {
        let q: Vec<f32> = (0..n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let v: Vec<f32> = (0..n).map(|i| ((i * 3) % 13) as f32 - 6.0).collect();
        let l2: f32 = q.iter().zip(&v).map(|(a, b)| (a - b) * (a - b)).sum();
        let dot: f32 = q.iter().zip(&v).map(|(a, b)| a * b).sum();
        assert_eq!(distance::l2_squared(&q, &v), l2, "l2 n={n}");
        assert_eq!(distance::dot(&q, &v), dot, "dot n={n}");

        let k = quant::code_kernels();
        // Codes below 16 keep every sum under 2^24, where f32 is still exact.
        let c: Vec<u8> = (0..n).map(|i| ((i * 5) % 16) as u8).collect();
        // l2's query: b then the steps (here 1 and 2 alternately); dot's: w.
        let mut b = q.clone();
        b.extend((0..n).map(|i| (1 + i % 2) as f32));
        let want_l2: f32 = (0..n)
            .map(|i| {
                let d = b[i] - b[n + i] * c[i] as f32;
                d * d
            })
            .sum();
        let want_dot: f32 = (0..n).map(|i| q[i] * c[i] as f32).sum();
        // SAFETY: `b` holds 2n f32s, `q` n, `c` n bytes (an 8-bit code of n dimensions); the
        // set is the one this CPU runs.
        let (got_l2, got_dot) =
            unsafe { ((k.l2)(b.as_ptr(), c.as_ptr(), n), (k.dot)(q.as_ptr(), c.as_ptr(), n)) };
        assert_eq!(got_l2, want_l2, "{} codes l2 n={n}", k.level);
        assert_eq!(got_dot, want_dot, "{} codes dot n={n}", k.level);
    }
}
