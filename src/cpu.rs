//! The CPU, detected once, and the prefetch policy of ADR-0015: how many cache lines of each
//! neighbor's vector a search asks for ahead, and into which cache.
//!
//! | CPU                               | lines                          | cache |
//! |-----------------------------------|--------------------------------|-------|
//! | Apple silicon                     | whole vector, up to 256        | L2    |
//! | other aarch64                     | 16                             | L2    |
//! | AMD family 19h, Zen 4 model       | 32                             | L2    |
//! | AMD family 1Ah (Zen 5)            | 8                              | L1    |
//! | everything else                   | 8                              | L2    |
//!
//! Zen 4 is told from Zen 3 (same family) by the model ranges Linux uses: 10h-1Fh, 60h-AFh.
//! The two ARM policies are chosen at compile time. `CHASSIS_PREFETCH_LINES` (`crate::tuning`)
//! sets the lines instead, with the policy "set", so that a depth can be measured on a CPU
//! without building it in.

use std::sync::OnceLock;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuInfo {
    pub arch: &'static str,
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    /// Which policy row applies, e.g. "zen4", "apple", "default".
    pub policy: &'static str,
    /// Lines asked for ahead (before capping at the vector's own length).
    pub prefetch_lines: usize,
    /// True: into L1 (Zen 5); false: into L2.
    pub prefetch_l1: bool,
}

/// The policy for a CPU described by vendor, family and model (x86), as ADR-0015 decides.
pub fn policy_for(
    arch: &str,
    apple: bool,
    vendor: &str,
    family: u32,
    model: u32,
) -> (&'static str, usize, bool) {
    match arch {
        "aarch64" if apple => ("apple", 256, false),
        "aarch64" => ("aarch64", 16, false),
        "x86_64"
            if vendor == "AuthenticAMD"
                && family == 0x19
                && ((0x10..=0x1f).contains(&model) || (0x60..=0xaf).contains(&model)) =>
        {
            ("zen4", 32, false)
        }
        "x86_64" if vendor == "AuthenticAMD" && family == 0x1a => ("zen5", 8, true),
        _ => ("default", 8, false),
    }
}

pub fn info() -> &'static CpuInfo {
    static INFO: OnceLock<CpuInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        let (vendor, family, model) = identify();
        let arch = std::env::consts::ARCH;
        let apple = cfg!(target_vendor = "apple");
        let (mut policy, mut prefetch_lines, prefetch_l1) =
            policy_for(arch, apple, &vendor, family, model);
        if let Some(lines) = crate::tuning::get().prefetch_lines {
            (policy, prefetch_lines) = ("set", lines.clamp(1, 256));
        }
        CpuInfo { arch, vendor, family, model, policy, prefetch_lines, prefetch_l1 }
    })
}

#[cfg(target_arch = "x86_64")]
fn identify() -> (String, u32, u32) {
    use std::arch::x86_64::__cpuid;
    // CPUID leaves 0 and 1 exist on every x86_64 CPU (the intrinsic is safe to call).
    let (l0, l1) = (__cpuid(0), __cpuid(1));
    let mut v = Vec::with_capacity(12);
    for r in [l0.ebx, l0.edx, l0.ecx] {
        v.extend_from_slice(&r.to_le_bytes());
    }
    let base_family = (l1.eax >> 8) & 0xf;
    let base_model = (l1.eax >> 4) & 0xf;
    let family =
        if base_family == 0xf { base_family + ((l1.eax >> 20) & 0xff) } else { base_family };
    let model = if base_family == 0x6 || base_family == 0xf {
        base_model | (((l1.eax >> 16) & 0xf) << 4)
    } else {
        base_model
    };
    (String::from_utf8_lossy(&v).into_owned(), family, model)
}

#[cfg(not(target_arch = "x86_64"))]
fn identify() -> (String, u32, u32) {
    (String::from(if cfg!(target_vendor = "apple") { "Apple" } else { "unknown" }), 0, 0)
}

/// Ask for the first `lines` cache lines at `p`.
#[inline(always)]
pub fn prefetch(p: *const u8, lines: usize, l1: bool) {
    for i in 0..lines {
        // A prefetch never faults, whatever the address, so wrapping_add is enough.
        let a = p.wrapping_add(i * 64);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: prefetch instructions have no architectural effect and never fault.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
            if l1 {
                _mm_prefetch::<_MM_HINT_T0>(a as *const i8)
            } else {
                _mm_prefetch::<_MM_HINT_T1>(a as *const i8)
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: as above; PRFM never faults.
        unsafe {
            if l1 {
                std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) a, options(nostack, readonly, preserves_flags));
            } else {
                std::arch::asm!("prfm pldl2keep, [{0}]", in(reg) a, options(nostack, readonly, preserves_flags));
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let _ = (a, l1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adr_0015_policy_table() {
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x19, 0x11), ("zen4", 32, false));
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x19, 0x61), ("zen4", 32, false));
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x19, 0xaf), ("zen4", 32, false));
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x19, 0x01), ("default", 8, false)); // Zen 3
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x19, 0x21), ("default", 8, false)); // Zen 3
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x19, 0xb0), ("default", 8, false));
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x17, 0x31), ("default", 8, false)); // Zen 2
        assert_eq!(policy_for("x86_64", false, "AuthenticAMD", 0x1a, 0x02), ("zen5", 8, true));
        assert_eq!(policy_for("x86_64", false, "GenuineIntel", 6, 0xcf), ("default", 8, false));
        assert_eq!(policy_for("aarch64", true, "Apple", 0, 0), ("apple", 256, false));
        assert_eq!(policy_for("aarch64", false, "unknown", 0, 0), ("aarch64", 16, false));
    }

    #[test]
    fn this_cpu_is_identified() {
        let i = info();
        assert!(i.prefetch_lines >= 8);
        if cfg!(target_arch = "x86_64") {
            assert!(
                i.vendor == "GenuineIntel" || i.vendor == "AuthenticAMD" || !i.vendor.is_empty()
            );
            assert!(i.family > 0);
        }
    }
}
