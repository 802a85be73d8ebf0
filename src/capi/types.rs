//! The structs of `include/chassis.h` (`#[repr(C)]`, field for field) and every read of the
//! caller's memory: slices and strings from pointers, after their checks, and the structs
//! that grow (each starts with its `size`, in bytes, which the caller sets).
//!
//! A struct is read or written as the smaller of the caller's size and the library's: a
//! program built against an older, shorter header gets the fields it knows; one built
//! against a newer header may pass fields this library does not know only if they are zero
//! (as Linux's `copy_struct_from_user` does), so nothing asked for is silently ignored.

use crate::cpu::CpuInfo;
use crate::error::{Error, Result};
use crate::format::{Metric, Precision, Quantization};
use crate::index::{CheckReport, MemoryStats, Options, Placement};
use std::ffi::{c_char, CStr};
use std::path::PathBuf;

/// `chassis_options`: what `chassis_open` creates an index with (fixed fields are checked
/// against an existing file) and the tunables of this handle. Zero in a field is its default.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct COptions {
    pub size: usize,
    /// `CHASSIS_METRIC_*`: 1 euclidean, 2 cosine, 3 inner product.
    pub metric: u32,
    /// `CHASSIS_PRECISION_*`: 1 full (float32), 2 half, 3 int8 (codes only).
    pub precision: u32,
    /// `CHASSIS_QUANTIZATION_*`: 0 none, 1 int8 (codes beside the vectors, reranked), 2 int4.
    pub quantization: u32,
    pub max_connections: u32,
    pub ef_construction: u32,
    pub ef_search: u32,
    /// -1 (or 0): let `chassis_warm` decide (ADR-0016), 1: ask, 2: do not ask.
    pub huge_pages: i32,
    /// Non-zero: read the index in on a background thread from opening (ADR-0019).
    pub warm: u32,
    /// `CHASSIS_PLACEMENT_*`: 0 balanced, 1 local (in-memory indexes, the NUMA note).
    pub placement: u32,
    /// Must be 0: fills what would be padding, so that a field a later header puts here is
    /// refused by this library rather than silently ignored.
    pub reserved: u32,
}

impl COptions {
    pub fn defaults() -> COptions {
        let o = Options::default();
        COptions {
            size: size_of::<COptions>(),
            metric: o.metric as u32,
            precision: o.precision as u32,
            quantization: o.quantization as u32,
            max_connections: o.max_connections as u32,
            ef_construction: o.ef_construction as u32,
            ef_search: o.ef_search as u32,
            huge_pages: -1,
            warm: o.warm as u32,
            placement: 0,
            reserved: 0,
        }
    }

    /// The core's options, each field checked.
    pub fn to_options(&self) -> Result<Options> {
        let d = Options::default();
        let bad = |name: &str, v: i64, ok: &str| {
            Err(Error::invalid(format!("options.{name}={v} is not valid"), format!("use {ok}")))
        };
        let metric = match self.metric {
            0 | 1 => Metric::Euclidean,
            2 => Metric::Cosine,
            3 => Metric::InnerProduct,
            m => return bad("metric", m as i64, "a CHASSIS_METRIC_ value"),
        };
        let precision = match self.precision {
            0 | 1 => Precision::Full,
            2 => Precision::Half,
            3 => Precision::CodesOnly,
            p => return bad("precision", p as i64, "a CHASSIS_PRECISION_ value"),
        };
        let quantization = match self.quantization {
            0 => Quantization::None,
            1 => Quantization::Int8,
            2 => Quantization::Int4,
            q => return bad("quantization", q as i64, "a CHASSIS_QUANTIZATION_ value"),
        };
        let huge_pages = match self.huge_pages {
            -1 | 0 => None,
            1 => Some(true),
            2 => Some(false),
            h => return bad("huge_pages", h as i64, "-1 (let warm decide), 1 (ask) or 2 (never)"),
        };
        let placement = match self.placement {
            0 => Placement::Balanced,
            1 => Placement::Local,
            p => return bad("placement", p as i64, "a CHASSIS_PLACEMENT_ value"),
        };
        if self.reserved != 0 {
            return Err(Error::invalid(
                format!("options.reserved={} is not 0", self.reserved),
                "set it to 0 (chassis_options_init does); a non-zero value is a field of a later \
                 header that this library does not have: link the library of that version",
            ));
        }
        let or = |v: u32, d: usize| if v == 0 { d } else { v as usize };
        let o = Options {
            max_connections: or(self.max_connections, d.max_connections),
            ef_construction: or(self.ef_construction, d.ef_construction),
            ef_search: or(self.ef_search, d.ef_search),
            metric,
            precision,
            quantization,
            huge_pages,
            warm: self.warm != 0,
            placement,
        };
        o.validate()?;
        Ok(o)
    }
}

/// `chassis_search_params`: everything a search may be told besides the query and k.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CSearchParams {
    pub size: usize,
    /// 0: the index's ef_search.
    pub ef: usize,
    /// 8-bit codes: candidates whose distances are computed again on the vectors (0: the default).
    pub rerank: usize,
    /// Batch searches: threads (0: one per core).
    pub threads: usize,
    /// Only these ids may be returned (NULL: any id).
    pub allowed: *const u64,
    pub allowed_len: usize,
    /// These ids are never returned (NULL with length 0: none).
    pub excluded: *const u64,
    pub excluded_len: usize,
}

impl Default for CSearchParams {
    fn default() -> Self {
        CSearchParams {
            size: size_of::<CSearchParams>(),
            ef: 0,
            rerank: 0,
            threads: 0,
            allowed: std::ptr::null(),
            allowed_len: 0,
            excluded: std::ptr::null(),
            excluded_len: 0,
        }
    }
}

/// `chassis_check_report`: what `chassis_check` found, counted.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CCheckReport {
    pub size: usize,
    /// 1 when nothing is unreachable, non-finite or corrupt.
    pub ok: u32,
    /// 0; where padding would be.
    pub reserved: u32,
    pub unreachable: u64,
    pub not_finite: u64,
    pub corrupt: u64,
    /// 8-bit codes: stored values clipped to the quantizer's range (information, not damage).
    pub clipped: u64,
}

impl From<&CheckReport> for CCheckReport {
    fn from(r: &CheckReport) -> Self {
        CCheckReport {
            size: size_of::<CCheckReport>(),
            ok: (r.unreachable.is_empty() && r.not_finite.is_empty() && r.corrupt.is_empty())
                as u32,
            reserved: 0,
            unreachable: r.unreachable.len() as u64,
            not_finite: r.not_finite.len() as u64,
            corrupt: r.corrupt.len() as u64,
            clipped: r.clipped,
        }
    }
}

/// `chassis_memory_stats`: `MemoryStats` field for field. A count the system does not give
/// (huge pages off Linux) is `UINT64_MAX`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CMemoryStats {
    pub size: usize,
    pub mapped_bytes: u64,
    pub written_bytes: u64,
    pub resident_bytes: u64,
    pub vector_bytes: u64,
    pub resident_vector_bytes: u64,
    pub graph_bytes: u64,
    pub resident_graph_bytes: u64,
    pub code_bytes: u64,
    pub resident_code_bytes: u64,
    pub vector_huge_bytes: u64,
    pub graph_huge_bytes: u64,
    pub huge_bytes: u64,
    pub warm_done_bytes: u64,
    pub warm_total_bytes: u64,
    pub huge_pages_asked: u32,
    pub huge_pages_refused: u32,
    pub warm_running: u32,
    /// 1: searches prefetch the pages they read next (`WILLNEED` advice); the field keeps its
    /// older name, part of the ABI.
    pub naming_pages: u32,
    /// 1: the index is in memory (no file).
    pub in_memory: u32,
    /// How warm reads pages in: "MADV_POPULATE_READ", "MADV_WILLNEED" or "none".
    pub populate: [c_char; 32],
    /// 0; where padding would be.
    pub reserved: u32,
}

impl From<&MemoryStats> for CMemoryStats {
    fn from(m: &MemoryStats) -> Self {
        let n = |v: Option<u64>| v.unwrap_or(u64::MAX);
        CMemoryStats {
            size: size_of::<CMemoryStats>(),
            mapped_bytes: m.mapped_bytes,
            written_bytes: m.written_bytes,
            resident_bytes: m.resident_bytes,
            vector_bytes: m.vector_bytes,
            resident_vector_bytes: m.resident_vector_bytes,
            graph_bytes: m.graph_bytes,
            resident_graph_bytes: m.resident_graph_bytes,
            code_bytes: m.code_bytes,
            resident_code_bytes: m.resident_code_bytes,
            vector_huge_bytes: n(m.vector_huge_bytes),
            graph_huge_bytes: n(m.graph_huge_bytes),
            huge_bytes: n(m.huge_bytes),
            warm_done_bytes: m.warm_done_bytes,
            warm_total_bytes: m.warm_total_bytes,
            huge_pages_asked: m.huge_pages_asked as u32,
            huge_pages_refused: m.huge_pages_refused as u32,
            warm_running: m.warm_running as u32,
            naming_pages: m.prefetching_pages as u32,
            in_memory: (m.backing == "memory") as u32,
            populate: text(m.populate),
            reserved: 0,
        }
    }
}

/// `chassis_cpu_info`: the CPU as ADR-0015 sees it, and the prefetch policy it chose.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CCpuInfo {
    pub size: usize,
    /// "x86_64", "aarch64", ...
    pub arch: [c_char; 16],
    /// "GenuineIntel", "AuthenticAMD", "Apple", ...
    pub vendor: [c_char; 16],
    pub family: u32,
    pub model: u32,
    /// Which row of ADR-0015's table applies: "zen4", "zen5", "apple", "aarch64", "default".
    pub policy: [c_char; 16],
    /// Cache lines of a neighbor's vector asked for ahead, and into which cache (1: L1).
    pub prefetch_lines: u32,
    pub prefetch_l1: u32,
}

impl From<&CpuInfo> for CCpuInfo {
    fn from(c: &CpuInfo) -> Self {
        CCpuInfo {
            size: size_of::<CCpuInfo>(),
            arch: text(c.arch),
            vendor: text(&c.vendor),
            family: c.family,
            model: c.model,
            policy: text(c.policy),
            prefetch_lines: c.prefetch_lines as u32,
            prefetch_l1: c.prefetch_l1 as u32,
        }
    }
}

/// `s` as a NUL-terminated array, cut to fit.
fn text<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

/// A struct of the header: it starts with its size in bytes.
pub trait Versioned: Copy {
    const WHAT: &'static str;
}
impl Versioned for COptions {
    const WHAT: &'static str = "chassis_options";
}
impl Versioned for CSearchParams {
    const WHAT: &'static str = "chassis_search_params";
}
impl Versioned for CCheckReport {
    const WHAT: &'static str = "chassis_check_report";
}
impl Versioned for CMemoryStats {
    const WHAT: &'static str = "chassis_memory_stats";
}
impl Versioned for CCpuInfo {
    const WHAT: &'static str = "chassis_cpu_info";
}

fn null(what: &str) -> Error {
    Error::invalid(format!("{what} is NULL"), format!("pass a valid pointer for {what}"))
}

/// The caller's size field of the struct at `p`, checked to cover at least the size field.
///
/// # Safety
/// `p`, when not NULL, points to a readable `usize` (the struct's first field).
unsafe fn caller_size<T: Versioned>(p: *const T, what: &str) -> Result<usize> {
    if p.is_null() {
        return Err(null(what));
    }
    if !(p as usize).is_multiple_of(align_of::<usize>()) {
        return Err(Error::invalid(format!("{what} is not aligned"), "pass the struct itself"));
    }
    // SAFETY: non-null and aligned (checked); readable by the caller's promise.
    let size = unsafe { *(p as *const usize) };
    if size < size_of::<usize>() {
        return Err(Error::invalid(
            format!("{what}->size is {size}"),
            format!("set it to sizeof({}) (its _init function does)", T::WHAT),
        ));
    }
    Ok(size)
}

/// Read the caller's struct at `p` over `base`: its first `min(size, ours)` bytes; the
/// bytes past ours must be zero.
///
/// # Safety
/// `p` points to `p->size` readable bytes, as the header requires of the caller.
pub unsafe fn read_sized<T: Versioned>(p: *const T, mut base: T, what: &str) -> Result<T> {
    // SAFETY: the caller's promise, passed on.
    let size = unsafe { caller_size(p, what)? };
    let ours = size_of::<T>();
    // SAFETY: `p` holds `size` readable bytes (the caller's promise); `base` is a local of
    // `ours` bytes; the copy is of the smaller, between distinct objects. Every field is an
    // integer, an array of them or a raw pointer, so any bytes make a valid value.
    unsafe {
        std::ptr::copy_nonoverlapping(
            p as *const u8,
            &mut base as *mut T as *mut u8,
            size.min(ours),
        );
        if size > ours {
            let extra = std::slice::from_raw_parts((p as *const u8).add(ours), size - ours);
            if extra.iter().any(|&b| b != 0) {
                return Err(Error::invalid(
                    format!("{what} sets fields this library does not know ({size} bytes, {ours} known)"),
                    "link the library version whose header you compiled with, or leave the new fields zero",
                ));
            }
        }
    }
    Ok(base)
}

/// Write `value` to the caller's struct at `p`: the first `min(size, ours)` bytes, its size
/// field left as the caller set it.
///
/// # Safety
/// `p` points to `p->size` writable bytes, as the header requires of the caller.
pub unsafe fn write_sized<T: Versioned>(p: *mut T, value: &T, what: &str) -> Result<()> {
    // SAFETY: the caller's promise, passed on.
    let size = unsafe { caller_size(p, what)? };
    let n = size.min(size_of::<T>());
    let skip = size_of::<usize>();
    // SAFETY: `p` holds `size` writable bytes (the caller's promise) and `value` is ours;
    // bytes `skip..n` of each lie inside both.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (value as *const T as *const u8).add(skip),
            (p as *mut u8).add(skip),
            n - skip,
        );
    }
    Ok(())
}

/// `n` values at `p`, checked: NULL (unless `n` is 0), alignment, a length no object can have.
///
/// # Safety
/// `p` points to `n` readable values of `T` that nothing writes during the call, as the
/// header requires of the caller.
pub unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    check_ptr(p, n, what)?;
    // SAFETY: non-null, aligned and of a size an object can have (checked); the values are
    // readable and unchanged during the call by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// `n` writable values at `p`, checked as `slice`.
///
/// # Safety
/// `p` points to `n` writable values of `T` that nothing else reads or writes during the
/// call, as the header requires of the caller.
pub unsafe fn slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    check_ptr(p, n, what)?;
    // SAFETY: as in `slice`; exclusive by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

fn check_ptr<T>(p: *const T, n: usize, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(null(what));
    }
    if !(p as usize).is_multiple_of(align_of::<T>()) {
        return Err(Error::invalid(
            format!("{what} is not aligned to {} bytes", align_of::<T>()),
            "pass an array of the element type itself",
        ));
    }
    if n.checked_mul(size_of::<T>()).is_none_or(|b| b > isize::MAX as usize) {
        return Err(Error::invalid(
            format!("{what}: a length of {n} is more than memory can hold"),
            "pass the number of elements, not of bytes",
        ));
    }
    Ok(())
}

/// A mutable reference to one value at `p` (an out-parameter), checked as `slice_mut`.
///
/// # Safety
/// As `slice_mut` with `n` = 1.
pub unsafe fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: the caller's promise, passed on.
    Ok(unsafe { &mut slice_mut(p, 1, what)?[0] })
}

/// A path from a NUL-terminated string (bytes as they are on Unix; UTF-8 elsewhere).
///
/// # Safety
/// `p`, when not NULL, points to a NUL-terminated string, as the header requires.
pub unsafe fn path(p: *const c_char, what: &str) -> Result<PathBuf> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null and NUL-terminated by the caller's promise.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes).map(PathBuf::from).map_err(|_| {
            let kind = crate::error::ErrorKind::InvalidPath;
            Error::new(kind, format!("{what} is not UTF-8"), "pass a UTF-8 path")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    /// Oracle: a struct read through a shorter or longer size than ours, byte by byte.
    #[test]
    fn sized_structs_grow_both_ways() {
        let mut o = COptions::defaults();
        o.metric = 2;
        o.placement = 1;
        // SAFETY: `o` is a whole COptions whose size field says so.
        let r = unsafe { read_sized(&o, COptions::default(), "o") }.unwrap();
        assert_eq!((r.metric, r.placement, r.ef_search), (2, 1, 50));
        // An older caller knowing only up to `metric`: the rest stays as given.
        o.size = 12;
        // SAFETY: 12 bytes of `o` are readable.
        let r = unsafe { read_sized(&o, COptions::defaults(), "o") }.unwrap();
        assert_eq!((r.metric, r.placement), (2, 0));
        // A newer caller: extra zero bytes pass, extra set bytes are refused.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Newer {
            o: COptions,
            more: u64,
        }
        let mut n = Newer { o: COptions::defaults(), more: 0 };
        n.o.size = size_of::<Newer>();
        let p = &n as *const Newer as *const COptions;
        // SAFETY: `p` holds size_of::<Newer>() readable bytes, as its size field says.
        assert!(unsafe { read_sized(p, COptions::default(), "o") }.is_ok());
        n.more = 1;
        let p = &n as *const Newer as *const COptions;
        // SAFETY: as above.
        let e = unsafe { read_sized(p, COptions::default(), "o") }.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        o.size = 3;
        // SAFETY: `o` is readable; its size field is the bad value under test.
        let e = unsafe { read_sized(&o, COptions::default(), "o") }.unwrap_err();
        assert!(e.message.contains("size is 3"), "{}", e.message);
    }

    /// Oracle: the bytes past a short caller's size are left alone.
    #[test]
    fn writes_stop_at_the_callers_size() {
        // u64 words: aligned for the struct, which is 48 bytes.
        let mut c = [u64::from_ne_bytes([0xAA; 8]); 6];
        assert_eq!(size_of_val(&c), size_of::<CCheckReport>());
        c[0] = 12;
        let v = CCheckReport { size: 99, ok: 1, unreachable: 5, ..Default::default() };
        // SAFETY: `c` is as large as a CCheckReport and aligned for it; its size field says 12.
        unsafe { write_sized(c.as_mut_ptr() as *mut CCheckReport, &v, "r") }.unwrap();
        assert_eq!(c[0], 12);
        let bytes: Vec<u8> = c.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[8..12], &1u32.to_ne_bytes());
        assert!(bytes[12..].iter().all(|&b| b == 0xAA));
    }
}
