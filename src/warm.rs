//! ADR-0019: reading an index into memory on a background thread, on request.
//!
//! One thread is given the ranges the index has written (never the holes of the sparse file),
//! in file order, and asks the system to read them in through the index's own mappings, 8 MiB
//! at a time (MADV_POPULATE_READ on Linux 5.14+, MADV_WILLNEED before it and on macOS; see
//! `os::populate`), checking between steps whether to stop. Off Linux, a writer's mappings are
//! writable, and advice through them would mark every page changed; there the thread reads
//! through a read-only view of the file instead. The thread holds the storage, so the mappings
//! it advises cannot go while it runs; stopping waits for at most one step.
//!
//! What it does not do (as the ADR says): keep the index in memory, read in the order searches
//! need, help an index larger than memory or one already in memory, or anything on Windows.

use crate::os;
use crate::storage::Storage;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;

pub const STEP: usize = 8 << 20;

pub struct Warm {
    stop: Arc<AtomicBool>,
    pub done: Arc<AtomicU64>,
    pub total: u64,
    handle: Option<JoinHandle<()>>,
    /// The process that started the thread: a forked child has no such thread to wait for.
    pid: u32,
}

impl Warm {
    /// Start reading `slots` slots' written ranges of `st` in; without `vectors`, all but the
    /// full-precision vectors (the lists, the upper layers and the codes: what a search of an
    /// index with codes walks).
    pub fn start(st: Arc<Storage>, slots: u64, vectors: bool) -> Warm {
        let mut ranges = st.written_ranges(slots);
        ranges.retain(|r| vectors || !r.vectors || r.codes);
        let total = ranges.iter().map(|r| r.len as u64).sum();
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let (stop2, done2) = (stop.clone(), done.clone());
        let handle = std::thread::Builder::new()
            .name("chassis-warm".into())
            .spawn(move || {
                #[cfg(not(target_os = "linux"))]
                let view = if st.writable { ReadView::new(&st) } else { None };
                let huge = st.huge.load(Acquire);
                for r in ranges {
                    let (p, len) = (r.addr, r.len);
                    let mut at = 0;
                    while at < len {
                        if stop2.load(Relaxed) {
                            return;
                        }
                        let n = STEP.min(len - at);
                        #[cfg(not(target_os = "linux"))]
                        let addr =
                            view.as_ref().and_then(|v| v.translate(p + at)).unwrap_or(p + at);
                        #[cfg(target_os = "linux")]
                        let addr = p + at;
                        // Ask the file for exactly this step first, and fault it in marked as
                        // read at random: a fault would otherwise also read around it
                        // (read_ahead_kb, 8 MiB on some disks), into the holes of the sparse
                        // file or the parts `vectors` leaves out. Not for vectors asked for
                        // huge pages: they are read by their own 2 MiB faults (already
                        // MADV_RANDOM), which readahead would pre-empt with small pages. An
                        // index larger than memory is read at random throughout
                        // (`Storage::set_random`).
                        if !(r.vectors && huge) {
                            os::fadvise_willneed(st.file(), r.file_offset + at as u64, n);
                            if !huge {
                                os::advise_random(addr as *const u8, n);
                            }
                        }
                        os::populate(addr as *const u8, n);
                        if !huge && !st.is_random() {
                            os::advise_normal(addr as *const u8, n);
                        }
                        done2.fetch_add(n as u64, Relaxed);
                        at += n;
                    }
                }
                drop(st);
            })
            .ok();
        Warm { stop, done, total, handle, pid: std::process::id() }
    }

    /// Whether the thread is reading (never, in a forked child: the thread is not there).
    pub fn running(&self) -> bool {
        std::process::id() == self.pid && self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(h) = self.handle.take() {
            if std::process::id() == self.pid {
                let _ = h.join();
            }
        }
    }
}

/// A read-only view of a writer's file, so that advice does not dirty its pages (off Linux).
#[cfg(not(target_os = "linux"))]
struct ReadView {
    maps: Vec<(usize, usize, memmap2::Mmap)>,
}

#[cfg(not(target_os = "linux"))]
impl ReadView {
    fn new(st: &Storage) -> Option<ReadView> {
        let file = std::fs::File::open(&st.path).ok()?;
        let mut maps = Vec::new();
        for (addr, len, off) in st.mapped_regions_with_offsets() {
            // SAFETY: a read-only mapping of a file region; only advice is given through it.
            let m = unsafe { memmap2::MmapOptions::new().offset(off).len(len).map(&file) }.ok()?;
            maps.push((addr, len, m));
        }
        Some(ReadView { maps })
    }
    fn translate(&self, addr: usize) -> Option<usize> {
        self.maps
            .iter()
            .find(|(a, l, _)| addr >= *a && addr < a + l)
            .map(|(a, _, m)| m.as_ptr() as usize + (addr - a))
    }
}
