//! Linux and macOS (see `mod.rs` for the interface): libc for what std lacks. Where Linux and
//! macOS differ, `cfg(target_os = "linux")` picks Linux's call and macOS does without.

#[cfg(target_os = "linux")]
use super::{notice, THP_REFUSED};
use super::{populate_mode, Populate, HUGE_PAGE, POPULATE};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
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

/// Bytes of physical memory, asked once (None where the system does not say).
pub fn physical_memory() -> Option<u64> {
    static PM: OnceLock<Option<u64>> = OnceLock::new();
    *PM.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        (pages > 0).then(|| pages as u64 * page_size() as u64)
    })
}

/// None: Wine runs Windows programs, and this is not one (see the Windows `wine_version`).
pub fn wine_version() -> Option<String> {
    None
}

/// Memory this process could give an index now: the system's MemAvailable (free memory and
/// reclaimable cache, /proc/meminfo), or less where the process's memory cgroup (v1 or v2)
/// has a lower limit. Linux; None elsewhere or where neither can be read.
pub fn memory_available() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
        let avail = meminfo.as_deref().and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
        });
        let limit = cgroup_memory_limit();
        match (avail, limit) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        }
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The memory limit of this process's cgroup (v1 `memory.limit_in_bytes`, v2 `memory.max`),
/// if one below the machine's is set.
#[cfg(target_os = "linux")]
fn cgroup_memory_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let file = if controllers.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else if controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else {
            continue;
        };
        if let Some(v) =
            std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse::<u64>().ok())
        {
            // v1 says "no limit" with a number near 2^63; v2 with "max" (not a number).
            if physical_memory().is_none_or(|pm| v < pm) {
                return Some(v);
            }
        }
    }
    None
}

/// Read `buf.len()` bytes at `offset` (pread), or fail with UnexpectedEof at the file's end.
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    FileExt::read_exact_at(file, buf, offset)
}

/// Read at most `buf.len()` bytes at `offset` (one pread); 0 at the file's end.
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    FileExt::read_at(file, buf, offset)
}

/// Write all of `buf` at `offset` (pwrite), leaving the file position alone.
pub fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    FileExt::write_all_at(file, buf, offset)
}

/// Which file a path or an open file is, to tell whether a path still names the file that is
/// open (a compaction renames a new file over it): the device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> FileId {
        FileId { dev: m.dev(), ino: m.ino() }
    }
}

/// The identity of an open file (fstat).
pub fn file_id(file: &File) -> io::Result<FileId> {
    file.metadata().map(|m| FileId::of(&m))
}

/// The identity of the file a path names now (stat, following symbolic links).
pub fn path_id(path: &Path) -> io::Result<FileId> {
    std::fs::metadata(path).map(|m| FileId::of(&m))
}

/// errno's "no space left on device".
pub const ENOSPC: i32 = libc::ENOSPC;

/// The OS error number of an I/O error (errno), if it came from a system call.
pub fn errno(err: &io::Error) -> Option<i32> {
    err.raw_os_error()
}

/// Try to take the exclusive writer lock on `file` without waiting. `Ok(false)`: someone else
/// holds it. std's file lock (`flock`) belongs to the open file, so a second open of the same
/// file in this process conflicts too, which is what "one writer per file" needs. (Advisory:
/// it keeps nobody from reading; Windows, whose locks are mandatory, locks elsewhere.)
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
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
        let r = unsafe {
            libc::posix_fallocate(file.as_raw_fd(), offset as libc::off_t, len as libc::off_t)
        };
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

/// Give back the blocks of `[offset, offset + len)` (a hole that reads as zeros; the file
/// keeps its size). Where the filesystem cannot punch holes, nothing happens.
pub fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: fallocate on a valid descriptor; it reports errors through errno.
        let r = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
                _ => Err(e),
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset);
    Ok(())
}

/// Make a closed file's data and metadata durable (fsync through a read-only open).
pub fn sync_file(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

/// Make a directory entry durable (after a create or rename).
pub fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// Release the writer lock (closing the file would too, but a snapshot may keep it open).
pub fn unlock(file: &File) {
    let _ = file.unlock();
}

/// Take (`on`) or release a shared lock on the byte at `offset` of `file`, a reader's pin
/// (`storage::pins`). Linux: an open-file-description lock, which belongs to this open of the
/// file, so that closing another descriptor of the same file in this process (as a classic
/// POSIX lock would) does not drop it. Elsewhere `Unsupported`: a writer there cannot learn
/// which commits readers hold, and acts as if one held the oldest.
pub fn pin_byte(file: &File, offset: u64, on: bool) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let kind = if on { libc::F_RDLCK } else { libc::F_UNLCK };
        let mut lock = ofd_lock(kind, offset, 1);
        // SAFETY: fcntl on a valid descriptor with a pointer to a live, initialised flock.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut lock) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, on);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// Whether another open of the file holds a lock on a byte of `[start, start + len)` (a pin
/// of `pin_byte`; this open's own are not seen).
pub fn pinned_by_other(file: &File, start: u64, len: u64) -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        let mut lock = ofd_lock(libc::F_WRLCK, start, len);
        // SAFETY: as in `pin_byte`; F_OFD_GETLK writes the first conflicting lock into `lock`.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, start, len);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

#[cfg(target_os = "linux")]
fn ofd_lock(kind: libc::c_int, start: u64, len: u64) -> libc::flock {
    // SAFETY: flock is plain integers, for which all zeros is valid; l_pid must be 0 for OFD
    // locks.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start as libc::off_t;
    lock.l_len = len as libc::off_t;
    lock
}

/// Free bytes for an unprivileged user on the filesystem holding `path`, if the system says.
pub fn free_space(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
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

const MADV_POPULATE_READ: libc::c_int = 22;
#[cfg(target_os = "linux")]
const MADV_POPULATE_WRITE: libc::c_int = 23;
/// The system refused `MADV_POPULATE_WRITE` once (a kernel before 5.14): not asked again.
static POPULATE_WRITE_REFUSED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether `populate_write` does nothing here (not Linux, or a kernel before 5.14 refused it
/// once): a thread started for it would be wasted.
pub fn populate_write_refused() -> bool {
    !cfg!(target_os = "linux") || POPULATE_WRITE_REFUSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Take the write faults of `[p, p + len)` (page-aligned `p`, a shared writable mapping) in one
/// call (Linux 5.14+), as writing a byte of each page would; false where the system cannot.
pub fn populate_write(p: *const u8, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::sync::atomic::Ordering::Relaxed;
        if POPULATE_WRITE_REFUSED.load(Relaxed) {
            return false;
        }
        // SAFETY: advice about a range inside a live writable mapping of this process; it
        // changes no byte of it.
        let r = unsafe { libc::madvise(p as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
        if r != 0 {
            let e = io::Error::last_os_error().raw_os_error();
            if e == Some(libc::EINVAL) || e == Some(libc::ENOSYS) || e == Some(libc::EPERM) {
                POPULATE_WRITE_REFUSED.store(true, Relaxed); // a kernel before 5.14: for good
            }
        }
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (p, len);
        false
    }
}

/// Run `f` on a thread of its own, kept off the CPU this thread runs on, where the process may
/// use another (Linux): a new thread may otherwise be queued behind its parent on the parent's
/// CPU and start only once the work it was to overlap is done (seen on a 2-CPU VM). None when
/// the system gives no thread.
pub fn spawn_elsewhere(f: impl FnOnce() + Send + 'static) -> Option<std::thread::JoinHandle<()>> {
    let t = std::thread::Builder::new().name("chassis-helper".into()).spawn(f).ok()?;
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::thread::JoinHandleExt;
        // SAFETY: plain calls on a zeroed cpu_set_t (a bit set) and on the live thread `t`
        // (joined or detached only by the caller, later); a failure leaves it where it is.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let here = libc::sched_getcpu();
            let size = size_of::<libc::cpu_set_t>();
            if here >= 0 && libc::sched_getaffinity(0, size, &mut set) == 0 {
                libc::CPU_CLR(here as usize, &mut set);
                if libc::CPU_COUNT(&set) > 0 {
                    libc::pthread_setaffinity_np(t.as_pthread_t(), size, &set);
                }
            }
        }
    }
    Some(t)
}

/// Read `[p, p + len)` of a file mapping into memory (page-aligned `p`).
pub fn populate(p: *const u8, len: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    if populate_mode() == Populate::PopulateRead {
        // SAFETY: advice about a range inside a live mapping of this process.
        let r = unsafe { libc::madvise(p as *mut libc::c_void, len, MADV_POPULATE_READ) };
        if r == 0 {
            return;
        }
        let e = io::Error::last_os_error().raw_os_error();
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
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Let go of this process's hold on `[p, p + len)` (page-aligned `p`) of a shared file
/// mapping: its pages leave the process's resident set and stay in the page cache, changed
/// ones included (written back as any other); the next access maps them again from there, with
/// the same contents. Linux only (MADV_DONTNEED); elsewhere nothing.
///
/// # Safety
/// The range must lie inside a live `MAP_SHARED` mapping of a file. On private or anonymous
/// memory MADV_DONTNEED throws the contents away (the next read sees zeros, or the file as it
/// was), which would be a silent loss of data.
pub unsafe fn release_shared(p: *const u8, len: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: the caller's contract: a shared file mapping, whose pages the page cache keeps.
    unsafe {
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_DONTNEED);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, len);
}

/// Mark `[p, p + len)` as read at random (a fault reads its own page, nothing around it).
pub fn advise_random(p: *const u8, len: usize) {
    // SAFETY: advice about a range inside a live mapping of this process.
    unsafe {
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_RANDOM);
    }
}

/// Undo `advise_random` (the kernel's read-around on a fault again).
pub fn advise_normal(p: *const u8, len: usize) {
    // SAFETY: advice about a range inside a live mapping of this process.
    unsafe {
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_NORMAL);
    }
}

/// Mark `[p, p + len)` as read in order (a fault reads well ahead, and pages behind may go
/// first): for whole-index scans only, which then give it its advice back.
pub fn advise_sequential(p: *const u8, len: usize) {
    // SAFETY: advice about a range inside a live mapping of this process.
    unsafe {
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_SEQUENTIAL);
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

/// The `THPeligible` flag of the mapping holding `addr` (Linux 5.x+); None if not reported.
#[cfg(target_os = "linux")]
fn thp_eligible(addr: usize) -> Option<bool> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("THPeligible:") {
            if inside {
                return Some(rest.trim() == "1");
            }
            continue;
        }
        let Some((range, _)) = line.split_once(' ') else { continue };
        if let Some((s, e)) = range.split_once('-') {
            if let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) {
                inside = s <= addr && addr < e;
            }
        }
    }
    None
}

// ---------------------------------------------------------------------- anonymous stores
//
// The THP note (NOTE-transparent-huge-pages-for-anonymous-buffers): a store of 2 MiB or more
// maps one huge page more than it needs, starts at the first 2 MiB boundary inside the mapping,
// keeps its requested length and asks for MADV_HUGEPAGE; the spare head and tail stay mapped
// until the store is dropped (unmapping them would split the mapping, which can fail with
// ENOMEM at the kernel's map-count limit). No hugetlbfs pool (MAP_HUGETLB) is tried: it needs
// pages an administrator reserved, and most hosts have none. Smaller stores come from the
// normal allocator. Where the kernel refuses huge pages (THP `never`, not built in, or the
// process opted out with PR_SET_THP_DISABLE), the first store says so once; it never falls
// back silently.

/// Whether the kernel will back this process's MADV_HUGEPAGE ranges with huge pages, checked
/// on the first huge-page-sized store (`addr` inside it, already advised): the kernel's own
/// `THPeligible` for that mapping, else the THP mode and the process's opt-out. Some(reason)
/// when refused.
#[cfg(target_os = "linux")]
fn thp_refusal(addr: usize, advise_error: Option<io::Error>) -> Option<String> {
    if let Some(e) = advise_error {
        return Some(format!("madvise(MADV_HUGEPAGE) failed ({e}); the kernel likely lacks transparent huge page support (CONFIG_TRANSPARENT_HUGEPAGE)"));
    }
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if mode.contains("[never]") {
        return Some("transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled is [never])".into());
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_GET_THP_DISABLE reads a flag of this process; no pointers.
        let r = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        // Bit 1 (PR_THP_DISABLE_EXCEPT_ADVISED) still allows ranges that asked, as ours do.
        if r > 0 && r & 2 == 0 {
            return Some(
                "this process opted out of transparent huge pages (prctl PR_SET_THP_DISABLE)"
                    .into(),
            );
        }
    }
    if thp_eligible(addr) == Some(false) {
        return Some("the kernel does not offer transparent huge pages to this mapping (THPeligible: 0 in /proc/self/smaps)".into());
    }
    None
}

#[cfg(target_os = "linux")]
static THP_PROBED: std::sync::Once = std::sync::Once::new();
/// Memory that is not a file: a whole store of the index held in this process only.
/// `AlignedMap::anonymous` makes one.
enum Backing {
    /// A file mmap'd: unmap `reserved` from `base`.
    Mapped,
    /// Anonymous memory mmap'd with a 2 MiB-aligned start: unmap `reserved` from `base`.
    Anonymous,
    /// From the allocator (a store below 2 MiB).
    Heap(std::alloc::Layout),
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
    backing: Backing,
}

// SAFETY: the mapping is plain shared memory owned by this value; `crate::storage` (the only
// user that makes references into it) says how it is accessed.
unsafe impl Send for AlignedMap {}
// SAFETY: as for Send.
unsafe impl Sync for AlignedMap {}

/// A fresh private anonymous mapping of `len` bytes with protection `prot`, zeroed.
fn map_anonymous(len: usize, prot: libc::c_int) -> io::Result<*mut u8> {
    // SAFETY: a new mapping at an address the kernel picks; nothing aliases it.
    let base = unsafe {
        libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANON, -1, 0)
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(base as *mut u8)
}

impl AlignedMap {
    pub fn new(
        file: &File,
        offset: u64,
        len: usize,
        writable: bool,
        align: usize,
    ) -> io::Result<AlignedMap> {
        let reserved = len + align;
        // A reservation with no access.
        let base = map_anonymous(reserved, libc::PROT_NONE)?;
        let ptr = ((base as usize).div_ceil(align) * align) as *mut u8;
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: MAP_FIXED over part of our own reservation, which nothing else uses.
        let m = unsafe {
            libc::mmap(
                ptr as *mut libc::c_void,
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if m == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: unmapping our own reservation.
            unsafe { libc::munmap(base as *mut libc::c_void, reserved) };
            return Err(e);
        }
        Ok(AlignedMap { base, reserved, ptr, len, backing: Backing::Mapped })
    }

    /// A zeroed anonymous store of `len` bytes (see the THP note above): from 2 MiB on, mapped
    /// one huge page larger, starting at a 2 MiB boundary and advised MADV_HUGEPAGE with
    /// `huge`, MADV_NOHUGEPAGE without; below that, page-aligned memory from the allocator.
    pub fn anonymous(len: usize, huge: bool) -> io::Result<AlignedMap> {
        let len = len.max(1);
        if len < HUGE_PAGE {
            let layout = std::alloc::Layout::from_size_align(len, page_size())
                .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
            // SAFETY: a non-zero size and a power-of-two alignment.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            if p.is_null() {
                return Err(io::Error::from(io::ErrorKind::OutOfMemory));
            }
            return Ok(AlignedMap {
                base: p,
                reserved: len,
                ptr: p,
                len,
                backing: Backing::Heap(layout),
            });
        }
        let reserved = len + HUGE_PAGE;
        let base = map_anonymous(reserved, libc::PROT_READ | libc::PROT_WRITE)?;
        let ptr = ((base as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE) as *mut u8;
        let map = AlignedMap { base, reserved, ptr, len, backing: Backing::Anonymous };
        // Without `huge`, MADV_NOHUGEPAGE: small pages even where THP is `always`.
        map.advise_anon_huge(huge);
        Ok(map)
    }

    /// Elsewhere than Linux there is no such advice: nothing is asked (the THP note).
    #[cfg(not(target_os = "linux"))]
    pub fn advise_anon_huge(&self, _on: bool) {}

    /// Ask for huge pages under an anonymous store (or, with `on` false, for none). The first
    /// request of the process checks what the kernel does with it and notes a refusal once.
    #[cfg(target_os = "linux")]
    pub fn advise_anon_huge(&self, on: bool) {
        if self.len < HUGE_PAGE || !matches!(self.backing, Backing::Anonymous) {
            return;
        }
        let advice = if on { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        let len = self.len.div_ceil(page_size()) * page_size();
        // SAFETY: advice about our own live mapping (len stays inside `reserved`).
        let r = unsafe { libc::madvise(self.ptr as *mut libc::c_void, len, advice) };
        if on {
            let err = (r != 0).then(io::Error::last_os_error);
            THP_PROBED.call_once(|| {
                if let Some(why) = thp_refusal(self.ptr as usize, err) {
                    THP_REFUSED.store(true, std::sync::atomic::Ordering::Release);
                    notice(format!("memory of this process (in-memory indexes, a batch's build buffer) uses 4 KiB pages: {why}. Searches work, only without the TLB gain of huge pages."));
                }
            });
        }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// A mapping of its own (a file's, or an anonymous store of 2 MiB or more), rather than
    /// memory from the allocator, whose pages it may share with the rest of the process.
    pub fn is_own_mapping(&self) -> bool {
        matches!(self.backing, Backing::Mapped | Backing::Anonymous)
    }

    /// Give the memory of an anonymous store of 2 MiB or more back to the system, keeping its
    /// addresses: it reads as zeros afterwards (MADV_DONTNEED), so a reference into it stays
    /// valid. Returns false, changing nothing, for anything else (a file's mapping, a store from
    /// the allocator, a system without the advice).
    pub fn discard(&self) -> bool {
        if !cfg!(target_os = "linux") || !matches!(self.backing, Backing::Anonymous) {
            return false;
        }
        let len = self.len.div_ceil(page_size()) * page_size();
        // SAFETY: advice about our own live private anonymous mapping (len stays inside
        // `reserved`); its pages read as zeros afterwards, which any value of the store may be.
        unsafe { libc::madvise(self.ptr as *mut libc::c_void, len, libc::MADV_DONTNEED) == 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// msync the mapping (systems where fdatasync does not cover shared mappings).
    pub fn flush(&self) -> io::Result<()> {
        if matches!(self.backing, Backing::Heap(_)) {
            return Ok(());
        }
        // SAFETY: msync of our own live mapping.
        if unsafe { libc::msync(self.ptr as *mut libc::c_void, self.len, libc::MS_SYNC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for AlignedMap {
    fn drop(&mut self) {
        // SAFETY: frees exactly what `new`/`anonymous` made (the whole reservation, spare head
        // and tail included); no reference into it outlives the AlignedMap (Storage hands out
        // references tied to its own lifetime).
        unsafe {
            match self.backing {
                Backing::Mapped | Backing::Anonymous => {
                    libc::munmap(self.base as *mut libc::c_void, self.reserved);
                }
                Backing::Heap(layout) => std::alloc::dealloc(self.base, layout),
            }
        }
    }
}
