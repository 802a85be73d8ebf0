//! A file changed underneath: a load from a mapping of the index whose file has shrunk (another
//! program truncated it, or copied a smaller file over it in place) raises SIGBUS, which would
//! kill the process. This SIGBUS handler recognises faults inside the index's own mappings,
//! maps zeroed anonymous memory over the rest of that mapping so the load completes, and
//! counts the fault for the index that owns it ([`Watch`]); the index turns the count into an
//! error at the end of the call (`Storage::intact`). Any other SIGBUS goes to the handler that
//! was there before, or kills the process as it would have.
//!
//! What this does not do: catch a change in place that keeps the size (checksums catch that,
//! nothing prevents it); protect a mapping made when the tables below are full (it then dies
//! as before); stay first if another SIGBUS handler is installed after the first index opened
//! (Python's `faulthandler.enable()` later, say: that one runs first and ends the process).
//!
//! The handler only loads and stores atomics and calls `mmap` and `sigaction`, which are
//! system calls on Linux and macOS. The decision and its limits: the changed-underneath record
//! (`docs/design/changed-underneath.md`).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering::*};

/// Mapped ranges watched at once in a process (an index uses one per region and one for its
/// header view).
const RANGES: usize = 4096;
/// Indexes watched at once in a process.
const CELLS: usize = 1024;

const NONE: usize = usize::MAX;

#[allow(clippy::declare_interior_mutable_const)] // only as the arrays' initialisers
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NO_CELL: AtomicUsize = AtomicUsize::new(NONE);
#[allow(clippy::declare_interior_mutable_const)]
const FREE: AtomicBool = AtomicBool::new(false);
#[allow(clippy::declare_interior_mutable_const)]
const NO_FAULT: AtomicU32 = AtomicU32::new(0);

/// A range is live while its start is non-zero; its length and cell are stored before the
/// start and read after it.
static STARTS: [AtomicUsize; RANGES] = [ZERO; RANGES];
static LENS: [AtomicUsize; RANGES] = [ZERO; RANGES];
static RANGE_CELL: [AtomicUsize; RANGES] = [NO_CELL; RANGES];
static CELL_USED: [AtomicBool; CELLS] = [FREE; CELLS];
static FAULTS: [AtomicU32; CELLS] = [NO_FAULT; CELLS];

/// The SIGBUS action before ours, set once when ours is installed (never freed).
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
static INSTALLED: std::sync::Once = std::sync::Once::new();
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// The faults caught in one index's mappings. None when the process already watches as many
/// indexes as it can (the index then works unwatched).
pub struct Watch {
    cell: Option<usize>,
    /// Changes found another way (`mark`).
    marks: AtomicU32,
}

impl Watch {
    pub fn new() -> Watch {
        install();
        let cell = (0..CELLS)
            .find(|&c| CELL_USED[c].compare_exchange(false, true, AcqRel, Relaxed).is_ok());
        if let Some(c) = cell {
            FAULTS[c].store(0, Release);
        }
        Watch { cell, marks: AtomicU32::new(0) }
    }

    /// A watch that watches nothing (an index in memory has no file to shrink); `mark` still
    /// counts.
    pub fn none() -> Watch {
        Watch { cell: None, marks: AtomicU32::new(0) }
    }

    /// Faults caught so far in the ranges watched for this index (and `mark`s).
    pub fn faults(&self) -> u32 {
        self.marks.load(Acquire) + self.cell.map_or(0, |c| FAULTS[c].load(Acquire))
    }

    /// Count a change found another way (the file's size checked smaller than its mappings).
    pub fn mark(&self) {
        self.marks.fetch_add(1, AcqRel);
    }

    /// Watch `[start, start + len)`, a mapping of this index's file, until the guard drops:
    /// drop it before unmapping the range.
    pub fn range(&self, start: *const u8, len: usize) -> Watched {
        let Some(cell) = self.cell else { return Watched { slot: None } };
        if start.is_null() || len == 0 {
            return Watched { slot: None };
        }
        // A free slot is one whose cell is NONE; claiming it sets the cell first.
        let slot = (0..RANGES)
            .find(|&i| RANGE_CELL[i].compare_exchange(NONE, cell, AcqRel, Relaxed).is_ok());
        if let Some(i) = slot {
            LENS[i].store(len, Release);
            STARTS[i].store(start as usize, Release);
        }
        Watched { slot }
    }
}

impl Default for Watch {
    fn default() -> Watch {
        Watch::new()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(c) = self.cell {
            CELL_USED[c].store(false, Release);
        }
    }
}

/// A watched range; dropping it stops watching (before the range is unmapped).
pub struct Watched {
    slot: Option<usize>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            STARTS[i].store(0, Release);
            LENS[i].store(0, Release);
            RANGE_CELL[i].store(NONE, Release);
        }
    }
}

fn install() {
    INSTALLED.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Relaxed);
        }
        // SAFETY: zeroed sigaction structs are valid (empty mask, no flags); `on_sigbus` has
        // the SA_SIGINFO signature; the old action is written into memory that is never freed
        // and published before our handler can run (it is installed by the same call, and
        // reads PREVIOUS only when it finds it set).
        unsafe {
            let old: *mut libc::sigaction = Box::into_raw(Box::new(std::mem::zeroed()));
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), old) == 0 {
                PREVIOUS.store(old, Release);
                libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut());
            }
        }
    });
}

/// The address a SIGBUS was raised for.
///
/// # Safety
/// `info` is the siginfo_t the kernel passed to an SA_SIGINFO handler.
unsafe fn fault_address(info: *const libc::siginfo_t) -> usize {
    // SAFETY: the caller's guarantee; si_addr is the fault's address for SIGBUS.
    unsafe { (*info).si_addr() as usize }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel calls this as an SA_SIGINFO handler with a valid siginfo_t.
    let addr = if info.is_null() { 0 } else { unsafe { fault_address(info) } };
    let page = PAGE.load(Relaxed);
    for i in 0..RANGES {
        let start = STARTS[i].load(Acquire);
        if start == 0 || addr < start {
            continue;
        }
        let len = LENS[i].load(Acquire);
        let cell = RANGE_CELL[i].load(Acquire);
        if addr >= start + len || cell >= CELLS {
            continue;
        }
        // The file ends before this page: zeros over the rest of the range, so the load (and
        // every later one) completes.
        let from = addr & !(page - 1);
        let to = (start + len).div_ceil(page) * page;
        // SAFETY: MAP_FIXED over pages of a mapping this process made for the index and still
        // watches (its guard drops before it is unmapped); the index's data there is gone.
        let m = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                to - from,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANON | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if m != libc::MAP_FAILED {
            FAULTS[cell].fetch_add(1, AcqRel);
            return;
        }
        break;
    }
    // SAFETY: forwarding a signal this handler does not own, with the kernel's arguments.
    unsafe { chain(sig, info, ctx) }
}

/// Hand a SIGBUS that is not ours to the action before ours; where that was the default (or
/// to ignore it, which the kernel does not honour for a fault), put the default back and
/// return, so the fault happens again and ends the process as it would have without us.
///
/// # Safety
/// Called from the SIGBUS handler with the kernel's arguments.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = PREVIOUS.load(Acquire);
    let (handler, flags) = if prev.is_null() {
        (libc::SIG_DFL, 0)
    } else {
        // SAFETY: PREVIOUS points to a sigaction that is never freed (see `install`).
        unsafe { ((*prev).sa_sigaction, (*prev).sa_flags) }
    };
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: a zeroed sigaction with SIG_DFL is the default action.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
        }
    } else if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO handler has this signature.
        unsafe {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler);
            f(sig, info, ctx);
        }
    } else {
        // SAFETY: a plain handler takes the signal number.
        unsafe {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            f(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Oracles: the value read back from a mapping of a file truncated underneath it (zeros,
    //! and the process alive), the watch's count, and a fault outside any watched range
    //! ending a child process with SIGBUS as it would without the handler.
    use super::*;
    use std::os::unix::io::AsRawFd;

    fn map(file: &std::fs::File, len: usize) -> *mut u8 {
        // SAFETY: a new shared read-only mapping of the file at an address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as *mut u8
    }

    #[test]
    fn a_read_past_a_truncated_end_is_counted_and_reads_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let len = 16 * 4096;
        std::fs::write(&path, vec![7u8; len]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let p = map(&file, len);
        let watch = Watch::new();
        let other = Watch::new();
        let guard = watch.range(p, len);
        // SAFETY: inside the mapping, which the file covers.
        assert_eq!(unsafe { std::ptr::read_volatile(p.add(5 * 4096)) }, 7);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(3 * 4096).unwrap();
        // SAFETY: inside the mapping; past the file's new end, so it faults and the handler
        // maps zeros there.
        let past = unsafe { std::ptr::read_volatile(p.add(9 * 4096 + 17)) };
        assert_eq!(past, 0);
        assert_eq!(watch.faults(), 1);
        assert_eq!(other.faults(), 0);
        // SAFETY: before the new end: still the file's bytes.
        assert_eq!(unsafe { std::ptr::read_volatile(p.add(4096)) }, 7);
        drop(guard);
        // SAFETY: unmapping what `map` made (the guard is gone).
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    }

    #[test]
    fn a_fault_outside_the_watched_ranges_still_ends_the_process() {
        if std::env::var_os("CHASSIS_SIGBUS_CHILD").is_some() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            std::fs::write(&path, vec![1u8; 8 * 4096]).unwrap();
            let file = std::fs::File::open(&path).unwrap();
            let p = map(&file, 8 * 4096);
            let _watch = Watch::new(); // the handler installed, this range not watched
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
            // SAFETY: deliberately faults (the file is empty): the test's subject.
            let v = unsafe { std::ptr::read_volatile(p.add(4096)) };
            std::process::exit(i32::from(v) + 10); // not reached
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "os::sigbus::tests::a_fault_outside_the_watched_ranges_still_ends_the_process",
                "--nocapture",
            ])
            .env("CHASSIS_SIGBUS_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{out:?}");
    }
}
