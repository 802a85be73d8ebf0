//! The few operating-system calls the core makes beyond std, each with its fallback where the
//! system lacks it. Probed results are cached.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::OnceLock;

/// The page size of this machine, asked once at run time.
pub fn page_size() -> usize {
    static PS: OnceLock<usize> = OnceLock::new();
    *PS.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as usize
        } else {
            4096
        }
    })
}

/// Try to take the exclusive writer lock on `file` without waiting. `Ok(false)`: someone else
/// holds it. `flock` locks belong to the open file description, so a second open of the same
/// file in this process conflicts too, which is what "one writer per file" needs.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a valid descriptor owned by `file`.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) || e.raw_os_error() == Some(libc::EAGAIN) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Give `[offset, offset + len)` of the file real blocks, so that writing through a mapping
/// into it cannot fail (a write to a sparse hole on a full disk raises SIGBUS). Where the
/// system has no such call, nothing is done and the file stays sparse.
pub fn preallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: posix_fallocate on a valid descriptor; it reports errors by return value.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), offset as libc::off_t, len as libc::off_t) };
        match r {
            0 => Ok(()),
            // Filesystems without fallocate (some network ones): keep going sparse.
            libc::EOPNOTSUPP | libc::ENOSYS => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
        Ok(())
    }
}

/// Make the file's data durable. On Linux, `fdatasync` also writes back pages changed through
/// shared mappings; elsewhere the caller must `msync` its mappings first.
pub fn sync_data(file: &File) -> io::Result<()> {
    file.sync_data()
}

/// Make a directory entry durable (after a create or rename).
pub fn sync_dir(path: &std::path::Path) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    File::open(dir)?.sync_all()
}

/// Release the writer lock (closing the file would too, but a snapshot may keep it open).
pub fn unlock(file: &File) {
    // SAFETY: flock on a valid descriptor owned by `file`.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

/// Free bytes for an unprivileged user on the filesystem holding `path`, if the system says.
pub fn free_space(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data, for which all zero bytes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct of the right type.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

// ---------------------------------------------------------------------- memory advice
//
// The requests of ADR-0016 (huge pages) and ADR-0019 (warm), behind one small interface.
// Each is a request: where the system has no such call, or refuses, nothing happens, and
// the index works the same, only without the gain. What the kernel granted is read back
// from /proc/self/smaps (`file_pmd_mapped`) and mincore (`resident`).

pub const HUGE_PAGE: usize = 2 << 20;

/// Ask for huge pages under `[p, p + len)` (2 MiB aligned, a file mapping), and mark it as read
/// at random so that a miss reads its own huge page and not the next one (ADR-0016, 3); or,
/// with `on` false, ask for none (MADV_NOHUGEPAGE; `p` page-aligned). Returns false where the
/// system has no such request or refused it.
pub fn advise_huge(p: *const u8, len: usize, on: bool) -> bool {
    if len == 0 {
        return true;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: madvise only gives advice about a range of this process's own mapping; the
        // caller passes a range inside one of its live mappings.
        unsafe {
            if on {
                libc::madvise(p as *mut libc::c_void, len, libc::MADV_HUGEPAGE) == 0
                    && libc::madvise(p as *mut libc::c_void, len, libc::MADV_RANDOM) == 0
            } else {
                libc::madvise(p as *mut libc::c_void, len, libc::MADV_NOHUGEPAGE) == 0
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (p, len, on);
        false
    }
}

/// How `populate` reads pages in, probed on first use: MADV_POPULATE_READ (Linux 5.14+), or
/// MADV_WILLNEED where that is refused (older Linux: only in part; macOS: all of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Populate {
    PopulateRead,
    WillNeed,
    Nothing,
}

static POPULATE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The way `populate` works on this system (after the first call; before it, the first choice).
pub fn populate_mode() -> Populate {
    match POPULATE.load(std::sync::atomic::Ordering::Relaxed) {
        1 => Populate::WillNeed,
        2 => Populate::Nothing,
        _ if cfg!(target_os = "linux") => Populate::PopulateRead,
        _ if cfg!(unix) => Populate::WillNeed,
        _ => Populate::Nothing,
    }
}

const MADV_POPULATE_READ: libc::c_int = 22;

/// Read `[p, p + len)` of a file mapping into memory (page-aligned `p`).
pub fn populate(p: *const u8, len: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    if populate_mode() == Populate::PopulateRead {
        // SAFETY: advice about a range inside a live mapping of this process.
        let r = unsafe { libc::madvise(p as *mut libc::c_void, len, MADV_POPULATE_READ) };
        if r == 0 {
            return;
        }
        let e = std::io::Error::last_os_error().raw_os_error();
        if e == Some(libc::EINVAL) || e == Some(libc::ENOSYS) || e == Some(libc::EPERM) {
            // A kernel before 5.14 (or a filter that refuses the call): fall back for good.
            POPULATE.store(1, Relaxed);
        } else {
            return;
        }
    }
    if populate_mode() == Populate::WillNeed {
        // SAFETY: as above.
        unsafe { libc::madvise(p as *mut libc::c_void, len, libc::MADV_WILLNEED) };
    }
}

/// Ask the system to read `[offset, offset + len)` of a file, and nothing around it.
pub fn fadvise_willneed(file: &File, offset: u64, len: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: posix_fadvise on a valid descriptor; advice only.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), offset as libc::off_t, len as libc::off_t, libc::POSIX_FADV_WILLNEED);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Mark `[p, p + len)` as read at random (a fault reads its own page, nothing around it).
pub fn advise_random(p: *const u8, len: usize) {
    #[cfg(unix)]
    // SAFETY: advice about a range inside a live mapping of this process.
    unsafe {
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_RANDOM);
    }
}

/// Undo `advise_random`.
pub fn advise_normal(p: *const u8, len: usize) {
    #[cfg(unix)]
    // SAFETY: advice about a range inside a live mapping of this process.
    unsafe {
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_NORMAL);
    }
}

/// Bytes of `[p, p + len)` (page-aligned `p`) resident in memory, by mincore.
pub fn resident(p: *const u8, len: usize) -> u64 {
    let ps = page_size();
    let pages = len.div_ceil(ps);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` has one byte per page of the range, which lies in a live mapping.
    let r = unsafe { libc::mincore(p as *mut libc::c_void, len, vec.as_mut_ptr() as *mut _) };
    if r != 0 {
        return 0;
    }
    vec.iter().filter(|b| **b & 1 != 0).count() as u64 * ps as u64
}

/// Bytes of the given address ranges that the kernel maps with huge pages of a file
/// (`FilePmdMapped` in /proc/self/smaps); None where the system does not say.
pub fn file_pmd_mapped(ranges: &[(usize, usize)]) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut total = 0u64;
    let mut cur: Option<(usize, usize)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("FilePmdMapped:") {
            if let Some((s, e)) = cur {
                if ranges.iter().any(|&(a, b)| s < b && a < e) {
                    let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    // A VMA partly inside the ranges counts for its overlap at most.
                    let overlap: usize = ranges.iter().map(|&(a, b)| b.min(e).saturating_sub(a.max(s))).sum();
                    total += (kb * 1024).min(overlap as u64);
                }
            }
            continue;
        }
        let Some((range, _)) = line.split_once(' ') else { continue };
        if let Some((s, e)) = range.split_once('-') {
            if let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) {
                cur = Some((s, e));
            }
        }
    }
    Some(total)
}

/// Map `len` bytes of `file` at `offset` at an address aligned to `align` (a power of two),
/// so that 2 MiB pieces of the file can be mapped by huge pages (the kernel needs the address
/// and the file offset to agree modulo 2 MiB). A PROT_NONE reservation `align` larger is made
/// first and the file mapped over its aligned part; the spare head and tail stay reserved until
/// the mapping is dropped (splitting a mapping can fail once the kernel's map count is high).
pub struct AlignedMap {
    base: *mut u8,
    reserved: usize,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; see storage.rs for how it
// is accessed.
unsafe impl Send for AlignedMap {}
unsafe impl Sync for AlignedMap {}

impl AlignedMap {
    pub fn new(file: &File, offset: u64, len: usize, writable: bool, align: usize) -> io::Result<AlignedMap> {
        let reserved = len + align;
        // SAFETY: an anonymous reservation with no access; nothing aliases it.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), reserved, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANON, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base as *mut u8;
        let ptr = ((base as usize).div_ceil(align) * align) as *mut u8;
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: MAP_FIXED over part of our own reservation, which nothing else uses.
        let m = unsafe { libc::mmap(ptr as *mut libc::c_void, len, prot, libc::MAP_SHARED | libc::MAP_FIXED, file.as_raw_fd(), offset as libc::off_t) };
        if m == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: unmapping our own reservation.
            unsafe { libc::munmap(base as *mut libc::c_void, reserved) };
            return Err(e);
        }
        Ok(AlignedMap { base, reserved, ptr, len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// msync the mapping (systems where fdatasync does not cover shared mappings).
    pub fn flush(&self) -> io::Result<()> {
        // SAFETY: msync of our own live mapping.
        if unsafe { libc::msync(self.ptr as *mut libc::c_void, self.len, libc::MS_SYNC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for AlignedMap {
    fn drop(&mut self) {
        // SAFETY: unmaps the whole reservation (file part included); no reference into it
        // outlives the AlignedMap (Storage hands out references tied to its own lifetime).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.reserved) };
    }
}
