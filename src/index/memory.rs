//! Memory policies: huge pages on request (ADR-0016, `docs/design/adr-0016-huge-pages-on-request.md`),
//! background warm (ADR-0019, `docs/design/adr-0019-background-warm.md`) and what the system
//! holds of the mappings.

use super::*;
use crate::os;

/// What the system holds of an index's mappings (`memory_stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStats {
    /// Address space of the index's mappings (mostly never touched: the file is sparse).
    pub mapped_bytes: u64,
    /// What the index has written: the ranges warm reads.
    pub written_bytes: u64,
    /// Of the written ranges, bytes in memory now (mincore).
    pub resident_bytes: u64,
    pub vector_bytes: u64,
    /// Of the vectors (not the codes), bytes in memory now.
    pub resident_vector_bytes: u64,
    /// Slot headers, lists, upper layers and the quantizer: what a search walks besides the
    /// rows whose distances it computes; and of them bytes in memory now.
    pub graph_bytes: u64,
    pub resident_graph_bytes: u64,
    /// Whether searches prefetch their next pages (`WILLNEED` advice), the index being short of memory
    /// at the last sample (see `residency`).
    pub prefetching_pages: bool,
    /// Bytes of the codes area written (8- or 4-bit codes, rows `code_stride` apart), and of
    /// them bytes in memory now (0 without codes).
    pub code_bytes: u64,
    pub resident_code_bytes: u64,
    /// Of the vectors, bytes mapped by huge pages (FilePmdMapped of a file; AnonHugePages in
    /// memory), where the system says.
    pub vector_huge_bytes: Option<u64>,
    /// Of the slot headers, lists and heap, bytes mapped by huge pages: 0 for a file by
    /// ADR-0016; in memory the graph's stores ask for them too.
    pub graph_huge_bytes: Option<u64>,
    /// Of everything written, bytes on huge pages.
    pub huge_bytes: Option<u64>,
    pub huge_pages_asked: bool,
    /// "file" or "memory".
    pub backing: &'static str,
    /// In memory: the kernel refused huge pages to this process (warned once).
    pub huge_pages_refused: bool,
    pub warm_running: bool,
    pub warm_done_bytes: u64,
    pub warm_total_bytes: u64,
    /// How warm reads pages in on this system.
    pub populate: &'static str,
}

impl Index {
    /// Slots whose vectors will not be written again: the committed ones.
    pub(super) fn committed_slots(&self) -> u64 {
        if self.read_only {
            self.view.read().slots
        } else {
            self.writer.lock().committed.slots
        }
    }

    /// ADR-0016: ask for huge pages under the whole 2 MiB pieces of committed vectors.
    pub(super) fn advise_committed(&self, st: &Storage, slots: u64) {
        Self::advise_slots(st, 0, slots);
    }

    /// Ask for huge pages under the whole vector pieces of slots `[from, to)`, if asked for.
    /// (Faults in the slot headers and lists never read into those pieces: an index that fits
    /// reads around a fault only where it is not larger than memory, and then the pieces are
    /// in memory already; see `residency`.)
    pub(super) fn advise_slots(st: &Storage, from: u64, to: u64) {
        st.advise_huge_pieces(from, to);
    }

    /// Ask for huge pages under the index's vectors from now on (ADR-0016): the committed
    /// ones now, those committed later at each commit (a reader: at each new snapshot), and a
    /// batch's before it writes them. A request: the system may grant it or not
    /// (see `memory_stats`).
    pub fn use_huge_pages(&self) {
        let st = self.view.read().st.clone();
        if st.is_memory() {
            return st.advise_stores(true);
        }
        st.huge.store(true, Release);
        self.advise_committed(&st, self.committed_slots());
    }

    /// Stop asking for huge pages; ranges asked for before are told not to use them
    /// (MADV_NOHUGEPAGE), which keeps the huge pages the kernel already gave.
    pub fn keep_small_pages(&self) {
        let st = self.view.read().st.clone();
        if st.is_memory() {
            return st.advise_stores(false);
        }
        st.huge.store(false, Release);
        for (p, len) in st.vector_areas() {
            os::advise_huge(p as *const u8, len, false);
        }
    }

    /// ADR-0019: read the written part of the file into memory on a background thread. Asking
    /// while it runs does nothing; asking once it is done reads what the index holds then.
    /// In memory: nothing to read (the index is in memory already). Without `vectors`, all
    /// but the full-precision vectors: what a search walks when they do not fit (see
    /// `residency`), and with codes all a search reads but the rerank's few vectors.
    /// Returns whether this call started a pass (false: one was running, or in memory).
    pub fn warm(&self, vectors: bool) -> bool {
        if self.memory {
            return false;
        }
        self.warm_on.store(true, Release);
        self.warm_vectors.store(vectors, Release);
        let mut w = self.warm.lock();
        if w.as_ref().is_some_and(|w| w.running()) {
            return false;
        }
        let snap = self.view.read().clone();
        let slots = snap.slots.max(if self.read_only { 0 } else { self.writer.lock().slots });
        *w = Some(Warm::start(snap.st.clone(), slots, vectors));
        true
    }

    /// Stop a running warm (waits for at most one 8 MiB step).
    pub fn stop_warm(&self) {
        drop(self.warm.lock().take());
    }

    /// Bytes the running (or last) warm reads in all, and has read: the length of a wait's
    /// progress.
    pub fn warm_progress(&self) -> (u64, u64) {
        let w = self.warm.lock();
        w.as_ref().map(|w| (w.total, w.done.load(Relaxed))).unwrap_or((0, 0))
    }

    /// Wait until the running warm is done, counting its bytes in `ctl.done`. Cancelled: the
    /// warm is stopped (what it read stays in memory) and this returns `Interrupted`.
    pub fn wait_warm(&self, ctl: &Control) -> Result<()> {
        loop {
            let (running, done) = {
                let w = self.warm.lock();
                (w.as_ref().is_some_and(|w| w.running()), w.as_ref().map(|w| w.done.load(Relaxed)))
            };
            ctl.done.store(done.unwrap_or(0), Relaxed);
            if !running {
                return Ok(());
            }
            if ctl.cancelled() {
                self.stop_warm();
                return Err(Error::interrupted());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// What the system holds of this index's mappings now.
    pub fn memory_stats(&self) -> Result<MemoryStats> {
        self.check_open()?;
        let snap = self.snap();
        let st = &snap.st;
        // The warm state first: a warm that finishes while the rest is measured then shows as
        // running, never as done with the residency from before.
        let (warm_running, warm_done_bytes, warm_total_bytes) = {
            let w = self.warm.lock();
            (
                w.as_ref().is_some_and(|w| w.running()),
                w.as_ref().map(|w| w.done.load(Relaxed)).unwrap_or(0),
                w.as_ref().map(|w| w.total).unwrap_or(0),
            )
        };
        let mapped = st.mapped_ranges();
        let written = st.written_ranges(snap.slots);
        // Huge pages are counted in mappings of the index's own only: a store below 2 MiB comes
        // from the allocator (the THP note), and what smaps says of the allocator's memory
        // (huge pages under THP `always`) is about other data as much as the index's.
        let own = |vectors: Option<bool>| -> Vec<(usize, usize)> {
            written
                .iter()
                .filter(|r| r.own && vectors.is_none_or(|v| r.vectors == v))
                .map(|r| (r.addr, r.addr + r.len))
                .collect()
        };
        let (vectors, others, all) = (own(Some(true)), own(Some(false)), own(None));
        let huge = |r: &[(usize, usize)]| {
            if st.is_memory() {
                os::anon_huge_pages(r)
            } else {
                os::file_pmd_mapped(r)
            }
        };
        Ok(MemoryStats {
            mapped_bytes: mapped.iter().map(|r| r.1 as u64).sum(),
            written_bytes: written.iter().map(|r| r.len as u64).sum(),
            resident_bytes: written.iter().map(|r| os::resident(r.addr as *const u8, r.len)).sum(),
            vector_bytes: written
                .iter()
                .filter(|r| r.vectors && !r.codes)
                .map(|r| r.len as u64)
                .sum(),
            resident_vector_bytes: written
                .iter()
                .filter(|r| r.vectors && !r.codes)
                .map(|r| os::resident(r.addr as *const u8, r.len))
                .sum(),
            graph_bytes: written.iter().filter(|r| !r.vectors).map(|r| r.len as u64).sum(),
            resident_graph_bytes: written
                .iter()
                .filter(|r| !r.vectors)
                .map(|r| os::resident(r.addr as *const u8, r.len))
                .sum(),
            prefetching_pages: self.prefetching_pages(),
            code_bytes: written.iter().filter(|r| r.codes).map(|r| r.len as u64).sum(),
            resident_code_bytes: written
                .iter()
                .filter(|r| r.codes)
                .map(|r| os::resident(r.addr as *const u8, r.len))
                .sum(),
            vector_huge_bytes: huge(&vectors),
            graph_huge_bytes: huge(&others),
            huge_bytes: huge(&all),
            huge_pages_asked: st.huge.load(Acquire),
            backing: if st.is_memory() { "memory" } else { "file" },
            huge_pages_refused: st.is_memory() && os::thp_refused(),
            warm_running,
            warm_done_bytes,
            warm_total_bytes,
            populate: match os::populate_mode() {
                os::Populate::PopulateRead => "MADV_POPULATE_READ",
                os::Populate::WillNeed => "MADV_WILLNEED",
                os::Populate::Nothing => "none",
            },
        })
    }
}
