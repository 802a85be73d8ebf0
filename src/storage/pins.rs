//! Readers' pins: which commits the readers of a file may still be searching, so that a writer
//! knows when no reader can reach a slot any more (the slot-reuse record).
//!
//! A reader holds a shared lock on the byte at `PIN_BASE + seq` of the index file for as long
//! as it holds a snapshot of commit `seq` (counted per open here, since one lock per byte is
//! all an open holds), and a writer asks whether any other open holds a lock below
//! `PIN_BASE + seq` (`os::pinned_by_other`). The locks are the system's: they go with a reader
//! that dies, so there is no table to clean up after one. The bytes lie far past any data and
//! below the Windows writer lock's byte (2^62), so no read or write ever meets them.
//!
//! A reader opening the file takes the byte just below `PIN_BASE` (an *opening* pin) before it
//! reads a header, and lets it go once it pinned the commit it read: a writer that looks in
//! between sees a reader older than anything and waits, and one that looked before the opening
//! pin was taken reused only slots the header the reader then reads no longer reaches.
//!
//! Where the system has no such lock (macOS, or a filesystem without byte-range locks), pins
//! are counted in this process only and [`Pins::older_than`] cannot answer for others: it
//! says so, and a writer then acts as if a reader held the oldest commit.

use crate::os;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

/// The byte of commit 0's pin; the opening pin is the byte before.
pub const PIN_BASE: u64 = 1 << 61;
const OPENING: u64 = PIN_BASE - 1;

/// The byte of commit `seq`'s pin. A crafted header's sequence past what a writer commits
/// shares the last one (readers may open such a file; no writer can write it).
fn byte(seq: u64) -> u64 {
    PIN_BASE + seq.min(crate::format::MAX_WRITABLE_SEQ + 1)
}

/// The pins of one open of an index file (or of an index in memory, counted only).
pub struct Pins {
    /// A second descriptor of the open the storage maps (the same open file description, so
    /// the same locks); None in memory or if it could not be made.
    file: Option<File>,
    /// Snapshots held in this process, by commit.
    counts: Mutex<BTreeMap<u64, usize>>,
}

/// One snapshot's hold on its commit; let go when dropped.
pub struct Pin {
    pins: Arc<Pins>,
    seq: u64,
}

/// Held while a reader opens (see the module text); let go when dropped.
pub struct Opening(File);

/// What a writer learns from [`Pins::older_than`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Older {
    /// No reader holds a commit older than the one asked about.
    No,
    /// A reader does, or is opening.
    Yes,
    /// The system cannot say for readers in other processes.
    Unknown,
}

impl Pins {
    /// The pins of `file` (None: an index in memory).
    pub fn new(file: Option<&File>) -> Arc<Pins> {
        Arc::new(Pins {
            file: file.and_then(|f| f.try_clone().ok()),
            counts: Mutex::new(BTreeMap::new()),
        })
    }

    /// Before a reader reads a header of `file`. None where the system has no such lock.
    pub fn opening(file: &File) -> Option<Opening> {
        // A second descriptor of the same open: the lock is the open's, and the caller moves
        // its own on (into the storage).
        let f = file.try_clone().ok()?;
        os::pin_byte(&f, OPENING, true).ok().map(|()| Opening(f))
    }

    /// Pin commit `seq` for as long as the result lives. A lock the system refuses leaves the
    /// pin counted in this process only (searches go on; a writer elsewhere may not see it,
    /// which `older_than` reports as `Unknown` on the same filesystem).
    pub fn pin(self: &Arc<Self>, seq: u64) -> Arc<Pin> {
        let mut counts = self.counts.lock();
        let n = counts.entry(seq).or_insert(0);
        if *n == 0 {
            if let Some(f) = &self.file {
                let _ = os::pin_byte(f, byte(seq), true);
            }
        }
        *n += 1;
        Arc::new(Pin { pins: self.clone(), seq })
    }

    /// Whether a snapshot of a commit before `seq` may be held: in this process, by this
    /// open's pins, or by another open of the file in any process.
    pub fn older_than(&self, seq: u64) -> Older {
        if self.counts.lock().range(..seq).next().is_some() {
            return Older::Yes;
        }
        let Some(f) = &self.file else {
            return Older::No;
        };
        match os::pinned_by_other(f, OPENING, byte(seq) - OPENING) {
            Ok(true) => Older::Yes,
            Ok(false) => Older::No,
            Err(_) => Older::Unknown,
        }
    }

    /// The oldest commit this process pins through this open (for `memory_stats` and tests).
    pub fn oldest_here(&self) -> Option<u64> {
        self.counts.lock().keys().next().copied()
    }
}

impl Pin {
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut counts = self.pins.counts.lock();
        let Some(n) = counts.get_mut(&self.seq) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            counts.remove(&self.seq);
            if let Some(f) = &self.pins.file {
                let _ = os::pin_byte(f, byte(self.seq), false);
            }
        }
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        let _ = os::pin_byte(&self.0, OPENING, false);
    }
}
