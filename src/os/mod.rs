//! The platform: the few operating-system calls the core makes beyond std, each with its
//! fallback where the system lacks it, behind one interface that the rest of the crate calls.
//! Nothing outside this module names `std::os::unix`, `std::os::windows`, `libc` or
//! `windows-sys`. Probed results are cached.
//!
//! | file         | what it holds                                                             |
//! |--------------|---------------------------------------------------------------------------|
//! | `mod.rs`     | what every system shares: the populate mode, huge-page accounting read    |
//! |              | from /proc/self/smaps, notices for the user; the system's own re-exported |
//! | `unix.rs`    | Linux and macOS: libc (2 MiB-aligned mmap, madvise, mincore, fallocate,   |
//! |              | statvfs), pread/pwrite, (device, inode) identity, std's `flock` lock, a  |
//! |              | helper thread kept off the caller's CPU                                   |
//! | `windows.rs` | Windows: memmap2 mappings, no memory advice, `GetDiskFreeSpaceExW`, a     |
//! |              | lock on one byte far past the data, (volume, file id) identity            |
//! | `sigbus.rs`  | Unix: a SIGBUS in an index's mapping (its file shrank underneath) caught, |
//! |              | zeros mapped in its place and counted per index ([`Watch`])               |
//!
//! Both system files offer the same functions with the same signatures: page and memory size,
//! the writer lock, positional reads and writes, file identity, the OS error number, space on
//! disk (`preallocate`, `punch_hole`, `free_space`), durability (`sync_file`, `sync_dir`),
//! memory advice and [`AlignedMap`]; and `wine_version`, which tells the tests that Wine runs
//! them (only Windows' half can answer).
//!
//! # Windows
//!
//! What Windows has no equivalent for is done as nothing, and the index works the same
//! without the gain:
//! - Memory advice: no huge pages (`advise_huge` answers false, an in-memory store's
//!   `advise_anon_huge` does nothing), no `MADV_RANDOM`/`MADV_SEQUENTIAL`, no readahead
//!   advice;
//!   `warm` reads nothing in (`populate` does nothing, `populate_mode` is `Nothing`, as
//!   ADR-0019 says), though its thread still steps through the ranges and counts them.
//!   `populate_write` does nothing (a batch of deletes takes its faults as it writes), and
//!   `spawn_elsewhere` leaves the thread where Windows places it.
//! - `resident` is 0 (no `mincore`); the huge-page byte counts are None (no smaps).
//! - `preallocate` and `punch_hole` do nothing: a file grown by `set_len` is not sparse on
//!   NTFS, so its blocks are allocated (or the growth fails on a full disk) when it grows, a
//!   write through a mapping cannot meet a hole, and blocks given back are not returned.
//! - `sync_dir` does nothing: there is no directory sync; NTFS journals the create, link and
//!   rename, which become durable with its log. `sync_file` opens the file for writing, since
//!   `FlushFileBuffers` refuses a read-only handle.
//! - Mappings are made by memmap2 at whatever address Windows picks (no 2 MiB alignment,
//!   which only serves huge pages); `AlignedMap::flush` is `FlushViewOfFile`, then
//!   `sync_data` (`FlushFileBuffers`) makes it durable.
//! - The writer lock is an exclusive `LockFileEx` on one byte far past any data, not on the
//!   whole file: Windows byte-range locks are mandatory, and a lock on the whole file (what
//!   std's `File::try_lock` takes) would make every other handle's reads fail, readers' and
//!   backups' included.
//! - File identity is the volume serial number and file id (`GetFileInformationByHandleEx`);
//!   OS error numbers are the C runtime's `errno` values for the common cases (what Python's
//!   `errno` module holds), None for the rest.
//!
//! std opens files on Windows sharing read, write and delete (its documented default for
//! `OpenOptionsExt::share_mode`), so a file can be renamed over or removed while others
//! have it open, as on Unix.

use parking_lot::Mutex;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as sys;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as sys;

#[cfg(unix)]
mod sigbus;
#[cfg(unix)]
pub use sigbus::{Watch, Watched};
/// Windows refuses to shrink a file that is mapped, so there is no fault to catch: a watch
/// counts only the changes found another way (`mark`).
#[cfg(windows)]
#[derive(Default)]
pub struct Watch(std::sync::atomic::AtomicU32);
#[cfg(windows)]
pub struct Watched;
#[cfg(windows)]
impl Watch {
    pub fn new() -> Watch {
        Watch::default()
    }
    pub fn none() -> Watch {
        Watch::default()
    }
    pub fn faults(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }
    pub fn mark(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
    pub fn range(&self, _start: *const u8, _len: usize) -> Watched {
        Watched
    }
}

/// Whether `fadvise_willneed` asks the system for anything (Linux only): searches of an index
/// short of memory prefetch their next pages with it (`index::residency`).
pub const WILL_NEED: bool = cfg!(target_os = "linux");

pub use sys::{
    advise_huge, advise_normal, advise_random, advise_sequential, errno, fadvise_willneed, file_id,
    free_space, memory_available, page_size, path_id, physical_memory, pin_byte, pinned_by_other,
    populate, populate_write, populate_write_refused, preallocate, punch_hole, read_exact_at,
    release_shared, resident, spawn_elsewhere, sync_dir, sync_file, try_lock_exclusive, unlock,
    wine_version, write_all_at, AlignedMap, FileId, ENOSPC,
};

/// Read into `buf` from `offset` until it is full or the file ends (an interrupted read is
/// retried): how many bytes were read.
pub fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match sys::read_at(file, &mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Make the file's data durable. On Linux, `fdatasync` also writes back pages changed through
/// shared mappings; elsewhere the caller must flush its mappings first (`AlignedMap::flush`:
/// `msync` on macOS, `FlushViewOfFile` on Windows, where this is `FlushFileBuffers`).
pub fn sync_data(file: &File) -> io::Result<()> {
    file.sync_data()
}

// ---------------------------------------------------------------------- memory advice
//
// The requests of ADR-0016 (huge pages) and ADR-0019 (warm), behind one small interface.
// Each is a request: where the system has no such call, or refuses, nothing happens, and
// the index works the same, only without the gain. What the kernel granted is read back
// from /proc/self/smaps (`file_pmd_mapped`) and mincore (`resident`).

pub const HUGE_PAGE: usize = 2 << 20;

/// How `populate` reads pages in, probed on first use: MADV_POPULATE_READ (Linux 5.14+), or
/// MADV_WILLNEED where that is refused (older Linux: only in part; macOS: all of it); nothing
/// on Windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Populate {
    PopulateRead,
    WillNeed,
    Nothing,
}

/// The fallback `populate` settled on (0: none yet, 1: WillNeed, 2: Nothing).
static POPULATE: AtomicU8 = AtomicU8::new(0);

/// The way `populate` works on this system (after the first call; before it, the first choice).
pub fn populate_mode() -> Populate {
    match POPULATE.load(Ordering::Relaxed) {
        1 => Populate::WillNeed,
        2 => Populate::Nothing,
        _ if cfg!(target_os = "linux") => Populate::PopulateRead,
        _ if cfg!(unix) => Populate::WillNeed,
        _ => Populate::Nothing,
    }
}

/// Bytes of the given address ranges that the kernel maps with huge pages of a file
/// (`FilePmdMapped` in /proc/self/smaps); None where the system does not say.
pub fn file_pmd_mapped(ranges: &[(usize, usize)]) -> Option<u64> {
    smaps_sum(ranges, "FilePmdMapped:")
}

/// Bytes of the given address ranges on anonymous huge pages (`AnonHugePages`).
pub fn anon_huge_pages(ranges: &[(usize, usize)]) -> Option<u64> {
    smaps_sum(ranges, "AnonHugePages:")
}

/// The sum of a kB field of /proc/self/smaps over the mappings that overlap `ranges`. A mapping
/// partly inside the ranges counts for its overlap at most.
fn smaps_sum(ranges: &[(usize, usize)], field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut total = 0u64;
    let mut cur: Option<(usize, usize)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(field) {
            if let Some((s, e)) = cur {
                if ranges.iter().any(|&(a, b)| s < b && a < e) {
                    let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    let overlap: usize =
                        ranges.iter().map(|&(a, b)| b.min(e).saturating_sub(a.max(s))).sum();
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

// ---------------------------------------------------------------------- warnings
//
// Things the core must tell the user once per process (the THP refusal in `unix.rs`). The
// Python layer drains them after each call and raises each as a RuntimeWarning and a log line.

static NOTICES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static HAS_NOTICES: AtomicBool = AtomicBool::new(false);

#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // only Linux has notices so far
fn notice(msg: String) {
    NOTICES.lock().push(msg);
    HAS_NOTICES.store(true, Ordering::Release);
}

/// Messages for the user since the last call (usually none: one load).
pub fn take_notices() -> Vec<String> {
    if !HAS_NOTICES.swap(false, Ordering::AcqRel) {
        return Vec::new();
    }
    std::mem::take(&mut *NOTICES.lock())
}

/// Set once the kernel refused huge pages for an anonymous store (Linux's probe, `unix.rs`).
static THP_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether the kernel refused huge pages for anonymous stores (known after the first one).
pub fn thp_refused() -> bool {
    THP_REFUSED.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    //! The portable interface, as every system must honour it (run on Windows too).
    use super::*;
    use std::fs::OpenOptions;

    fn rw(path: &std::path::Path) -> File {
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap()
    }

    /// Under Wine: print what the test cannot show there (for `.ci/cross` to count) and
    /// answer true, so that the test stops (docs/platforms.md, "What Wine cannot show").
    fn wine_cannot(what: &str) -> bool {
        wine_version().inspect(|v| println!("skipped under Wine {v}: {what}")).is_some()
    }

    #[test]
    fn positional_io() {
        let dir = tempfile::tempdir().unwrap();
        let f = rw(&dir.path().join("f"));
        write_all_at(&f, b"hello", 4096).unwrap();
        let mut buf = [0u8; 5];
        read_exact_at(&f, &mut buf, 4096).unwrap();
        assert_eq!(&buf, b"hello");
        read_exact_at(&f, &mut buf[..4], 0).unwrap();
        assert_eq!(&buf[..4], &[0; 4]);
        let e = read_exact_at(&f, &mut buf, 4098).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(read_up_to(&f, &mut buf, 8192).unwrap(), 0);
        // Up to the end of the file, and no further.
        let mut long = [7u8; 16];
        assert_eq!(read_up_to(&f, &mut long, 4093).unwrap(), 8);
        assert_eq!(&long[..8], b"\0\0\0hello");
        assert_eq!(long[8..], [7; 8]);
    }

    #[test]
    fn one_writer_lock_per_file_and_reads_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let a = rw(&path);
        write_all_at(&a, b"data", 0).unwrap();
        let b = rw(&path);
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap(), "a second handle must not get the lock");
        // Another handle still reads the data while the lock is held.
        let mut buf = [0u8; 4];
        read_exact_at(&File::open(&path).unwrap(), &mut buf, 0).unwrap();
        assert_eq!(&buf, b"data");
        unlock(&a);
        assert!(try_lock_exclusive(&b).unwrap());
        unlock(&b);
    }

    #[test]
    fn identity_follows_a_rename_over_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let (path, other) = (dir.path().join("f"), dir.path().join("g"));
        let f = rw(&path);
        drop(rw(&other));
        let was = file_id(&f).unwrap();
        assert_eq!(was, path_id(&path).unwrap());
        assert_ne!(path_id(&other).unwrap(), was);
        drop(f);
        std::fs::rename(&other, &path).unwrap();
        assert_ne!(path_id(&path).unwrap(), was);
    }

    /// What a compaction does: rename a new file over one that is open, mapped and locked
    /// (on Windows this needs std's POSIX rename semantics, Windows 10 1607+ on NTFS).
    #[test]
    fn rename_over_an_open_mapped_file() {
        if wine_cannot("a rename over an open file (no POSIX rename in Wine)") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (path, other) = (dir.path().join("f"), dir.path().join("g"));
        let f = rw(&path);
        f.set_len(65536).unwrap();
        assert!(try_lock_exclusive(&f).unwrap());
        let m = AlignedMap::new(&f, 0, 65536, true, page_size()).unwrap();
        write_all_at(&rw(&other), b"new", 0).unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_ne!(file_id(&f).unwrap(), path_id(&path).unwrap());
        // The old file stays usable through what holds it.
        // SAFETY: the mapping is live, writable and 65536 bytes long.
        unsafe { m.as_ptr().write(1) };
        let mut b = [0u8; 3];
        read_exact_at(&File::open(&path).unwrap(), &mut b, 0).unwrap();
        assert_eq!(&b, b"new");
    }

    #[test]
    fn errors_and_space() {
        let dir = tempfile::tempdir().unwrap();
        let e = File::open(dir.path().join("missing")).unwrap_err();
        assert!(errno(&e).is_some());
        assert!(errno(&io::Error::other("no system call")).is_none());
        assert!(free_space(&dir.path().join("f")).is_some_and(|n| n > 0));
        sync_data(&rw(&dir.path().join("f"))).unwrap();
        sync_file(&dir.path().join("f")).unwrap();
        sync_dir(&dir.path().join("f")).unwrap();
        assert!(page_size() >= 4096 && page_size().is_power_of_two());
    }

    #[test]
    fn mappings() {
        let dir = tempfile::tempdir().unwrap();
        let f = rw(&dir.path().join("f"));
        f.set_len(2 * 65536).unwrap();
        let m = AlignedMap::new(&f, 65536, 4096, true, page_size()).unwrap();
        assert_eq!(m.len(), 4096);
        // SAFETY: the mapping is live, writable and 4096 bytes long.
        unsafe { m.as_ptr().add(10).write(7) };
        m.flush().unwrap();
        sync_data(&f).unwrap();
        let mut b = [0u8; 1];
        read_exact_at(&f, &mut b, 65536 + 10).unwrap();
        assert_eq!(b[0], 7);
        let a = AlignedMap::anonymous(3 << 20, false).unwrap();
        assert_eq!(a.len(), 3 << 20);
        // SAFETY: a live anonymous store of 3 MiB, zeroed.
        assert_eq!(unsafe { a.as_ptr().add((3 << 20) - 1).read() }, 0);
    }

    /// The helper runs its closure (joined, its result seen), and on Linux off the CPU the
    /// caller was on when more than one is allowed. Oracle: the helper's own affinity mask.
    #[test]
    fn spawn_elsewhere_runs_beside_the_caller() {
        let (tx, rx) = std::sync::mpsc::channel();
        // The helper reads its mask once told that spawn_elsewhere returned (its CPU set by then).
        let (go, wait) = std::sync::mpsc::channel::<()>();
        #[cfg(target_os = "linux")]
        let allowed = {
            // SAFETY: sched_getaffinity fills the zeroed bit set it is given.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set), 0);
                libc::CPU_COUNT(&set)
            }
        };
        let h = spawn_elsewhere(move || {
            wait.recv().unwrap();
            #[cfg(target_os = "linux")]
            // SAFETY: as above, for this thread.
            let mine = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set), 0);
                libc::CPU_COUNT(&set)
            };
            #[cfg(not(target_os = "linux"))]
            let mine = 0;
            tx.send(mine).unwrap();
        })
        .expect("a thread");
        go.send(()).unwrap();
        h.join().unwrap();
        let mine = rx.recv().unwrap();
        #[cfg(target_os = "linux")]
        assert_eq!(mine, if allowed > 1 { allowed - 1 } else { allowed }, "of {allowed} CPUs");
        let _ = mine;
    }
}
