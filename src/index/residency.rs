//! Larger than memory: whether the pages searches read are in memory, so that a search of an
//! index that is not prefetches its next pages (`WILLNEED` advice) before it reads them.
//!
//! A search that faults on a page of the file waits for that read before it knows what to read
//! next: one disk round trip per page. Prefetching the pages of the neighbors whose distances it is
//! about to compute (`Storage::will_need`, POSIX_FADV_WILLNEED: no wait) puts their reads in flight
//! together, so a node's expansion waits about one round trip; layer 0 then also expands several
//! candidates per round (`Graph::prefetching_pages` sets the beam), so a round of them waits about
//! one. The advice is a system call per page, which costs more than a whole distance on a page
//! already in memory, so it is given only while the index is short of memory. Whether it is comes
//! from sampling: at most once a second, the search that finds the last sample stale asks `mincore`
//! about 64 pages picked at random in each area searches read (codes, vectors, graph: slot headers,
//! lists and the upper layers), a small cost once a second; an area with 2 or more of its 64 pages
//! out of memory (about 3%) is cold. An index read in by `warm`, or one that fits and has been
//! searched long enough, samples warm and searches as an index in memory does. (ADR-0019 left
//! paging in a node's neighbors from inside every search out, because it slowed the searches of a
//! file already in memory: this is that, only where the file is not.)
//!
//! The same sample first asks whether the index is larger than the memory it may use (more than
//! 3/4 of MemAvailable, or of the process's cgroup limit where lower: `os::memory_available`).
//! Only then are its mappings marked as read at random (`Storage::set_random`), so that a fault
//! reads its own page and not read_ahead_kb around it, and only then are pages prefetched. An index
//! that fits keeps the kernel's read-around, which brings a file opened cold in several times
//! faster than reading it at random (measured: `docs/design/larger-than-memory.md`).

use super::*;
use crate::os;
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Seconds between samples.
const EVERY: Duration = Duration::from_secs(1);
/// Pages sampled per area, and how many of them out of memory make it cold.
const SAMPLES: usize = 64;
const COLD_AT: usize = 2;

const WALK: u8 = 1;
const VECTORS: u8 = 2;
const LISTS: u8 = 4;

/// What a search should prefetch (`WILLNEED`) before reading it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cold {
    /// What the walk computes distances to: the codes where there are codes, else the vectors.
    pub walk: bool,
    /// The full vectors (the rerank of an index with codes beside them).
    pub vectors: bool,
    /// Level-0 lists.
    pub lists: bool,
}

/// The last sample and when the next is due (see the module's text).
#[derive(Default)]
pub struct Residency {
    state: AtomicU8,
    /// Nanoseconds since `epoch()` after which a search samples again.
    due: AtomicU64,
}

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// `CHASSIS_PREFETCH_PAGES=0` (`crate::tuning`) turns the prefetch advice off (to measure what
/// it gives; the sample still runs, and the mappings of an index larger than memory are still
/// read at random).
fn prefetch_on() -> bool {
    crate::tuning::get().prefetch_pages.unwrap_or(true)
}

impl Residency {
    /// Sample again at the next search (a new file, a compaction).
    pub fn reset(&self) {
        self.due.store(0, Relaxed);
    }
}

impl Index {
    /// Which areas of `snap` are short of memory, sampled at most once a second (see the
    /// module's text). Never for an in-memory index, nor off Linux, where the advice is not
    /// given (`os::WILL_NEED`).
    pub(super) fn cold(&self, snap: &Snap) -> Cold {
        let r = &self.residency;
        if self.memory || !os::WILL_NEED {
            return Cold::default();
        }
        let now = epoch().elapsed().as_nanos() as u64;
        let due = r.due.load(Relaxed);
        if now >= due
            && r.due.compare_exchange(due, now + EVERY.as_nanos() as u64, Relaxed, Relaxed).is_ok()
        {
            r.state.store(Self::sample(snap, now), Relaxed);
        }
        if !prefetch_on() {
            return Cold::default();
        }
        let s = r.state.load(Relaxed);
        let codes = snap.st.geo.has_codes() && self.precision() != Precision::CodesOnly;
        Cold {
            walk: s & WALK != 0,
            vectors: s & (if codes { VECTORS } else { WALK }) != 0,
            lists: s & LISTS != 0,
        }
    }

    /// Whether the last sample found an area searches walk short of memory (false before
    /// the first search).
    pub(super) fn prefetching_pages(&self) -> bool {
        let s = self.residency.state.load(Relaxed);
        !self.memory && os::WILL_NEED && prefetch_on() && s & (WALK | VECTORS | LISTS) != 0
    }

    /// One sample of the written ranges of `snap`: the cold bits. First whether the index is
    /// larger than the memory it may use (more than 3/4 of `os::memory_available`): only then
    /// are its mappings read at random and pages prefetched; an index that fits keeps the kernel's
    /// read-around, which brings a file in fastest.
    fn sample(snap: &Snap, seed: u64) -> u8 {
        let written = snap.st.written_ranges(snap.slots);
        let total: u64 = written.iter().map(|w| w.len as u64).sum();
        let larger = os::memory_available().is_some_and(|m| total > m / 4 * 3);
        snap.st.set_random(larger, snap.slots);
        if !larger {
            return 0;
        }
        let codes_beside = snap.st.geo.has_codes() && snap.st.geo.precision != Precision::CodesOnly;
        let ps = os::page_size();
        let mut rng = seed | 1;
        let mut cold_in = |keep: &dyn Fn(&crate::storage::Written) -> bool| -> bool {
            let ranges: Vec<_> = written.iter().filter(|w| keep(w)).collect();
            let pages: usize = ranges.iter().map(|w| w.len / ps).sum();
            if pages == 0 {
                return false;
            }
            let mut out = 0;
            for _ in 0..SAMPLES {
                // xorshift64: any spread will do.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let mut i = (rng % pages as u64) as usize;
                for w in &ranges {
                    if i < w.len / ps {
                        if os::resident((w.addr + i * ps) as *const u8, ps) == 0 {
                            out += 1;
                        }
                        break;
                    }
                    i -= w.len / ps;
                }
            }
            out >= COLD_AT
        };
        let (walk, vectors) = if codes_beside {
            (cold_in(&|w| w.codes), cold_in(&|w| w.vectors && !w.codes))
        } else {
            let v = cold_in(&|w| w.vectors);
            (v, v)
        };
        let lists = cold_in(&|w| !w.vectors);
        (if walk { WALK } else { 0 })
            | (if vectors { VECTORS } else { 0 })
            | (if lists { LISTS } else { 0 })
    }
}
