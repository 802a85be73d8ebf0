//! check(): a full scan of checksums, lists and reachability.

use super::*;
use crate::format::{EMPTY, NO_UPPER};
use crate::graph::{Graph, MAX_LEVEL};
use crate::storage::lists;
use rayon::prelude::*;
use std::sync::atomic::AtomicU32;

/// Lists a reader's `check` reads again after a pause of 2 ms; later ones at once.
const PAUSES: u32 = 64;

/// What `check()` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Ids of live vectors that no search can reach.
    pub unreachable: Vec<u64>,
    /// Ids of live vectors holding NaN or infinity.
    pub not_finite: Vec<u64>,
    /// Slots whose vector, header, delete marker or lists fail their checksums or refer
    /// outside the index, or (8-bit codes) whose code is not the encoding of their vector. A
    /// deleted row's vector and header are not counted (a reuse of its slot may have written
    /// them when a crash cut it short).
    pub corrupt: Vec<u32>,
    /// 8-bit codes: values of the stored vectors outside the quantizer's range (stored
    /// clipped to its ends). 0 without codes.
    pub clipped: u64,
}

impl Index {
    /// A full scan of the vectors and the graph: slots whose stored bytes fail a checksum or
    /// whose lists refer outside the index (`corrupt`, by slot), live vectors holding NaN or
    /// infinity (`not_finite`, by id), and live vectors no search can reach from the entry
    /// point (`unreachable`, by id). A writer's adds wait while it runs; searches do not.
    pub fn check(&self, ctl: &Control) -> Result<CheckReport> {
        self.check_open()?;
        // A writer: hold the writer lock so that no list changes under the scan.
        let w = if self.read_only { None } else { Some(self.writer.lock()) };
        let snap = self.snap();
        let st = &snap.st;
        // The quantizer the commit names (a damaged one is an error, not walked around).
        let named = match &w {
            Some(w) => w.quantizer,
            None => self.writer.lock().committed.quantizer,
        };
        if snap.quant.is_none() {
            stored_quantizer(st, named)?;
        }
        let n = snap.slots as u32;
        let codes_only = self.precision() == Precision::CodesOnly;
        let g = Graph::new(st, self.metric(), n);
        let clipped = AtomicU64::new(0);
        let pauses = AtomicU32::new(0);
        // Each thread reads a run of slots in order: readahead, not a fault per page.
        let scan = st.sequential_scan(snap.slots);
        let per_slot: Vec<(Option<u32>, Option<u64>)> = (0..n)
            .into_par_iter()
            .with_min_len(1024)
            .map_init(
                || (Vec::new(), Vec::new()),
                |(buf, codes), s| {
                    ctl.done.fetch_add(1, Relaxed);
                    if ctl.cancelled() {
                        return (None, None);
                    }
                    let h = st.header(s);
                    let (id, upper, del, crcs) = (
                        h[0].load(Relaxed),
                        h[1].load(Relaxed),
                        h[2].load(Relaxed),
                        h[3].load(Relaxed),
                    );
                    let vec_ok = format::vector_crc(st.vector_bytes(s)) == crcs as u32;
                    let hdr_ok = format::header_crc(id, upper, crcs as u32) == (crcs >> 32) as u32;
                    let marker = format::read_marker(del, s);
                    let marker_ok = marker != format::Marker::Damaged;
                    let lists_ok = self.lists_ok(st, s, n, &pauses);
                    // A deleted row's bytes may be those of a reuse that a crash cut short
                    // (`reuse.rs`): nothing reads them, only its marker and lists count.
                    if matches!(marker, format::Marker::Deleted(_)) && !(vec_ok && hdr_ok) {
                        return (if marker_ok && lists_ok { None } else { Some(s) }, None);
                    }
                    if !(vec_ok && hdr_ok && marker_ok && lists_ok) {
                        return (Some(s), None);
                    }
                    // A codes-only index's stored bytes are its codes: the checksum covers
                    // them, and a code is finite whatever its bytes.
                    if codes_only {
                        return (None, None);
                    }
                    let live = snap.live_id(s).is_some();
                    let v = g.vector_f32(s, buf);
                    let finite = v.iter().all(|x| x.is_finite());
                    if let Some(q) = &snap.quant {
                        codes.resize(q.code_len(), 0u8);
                        clipped.fetch_add(q.encode(v, codes) as u64, Relaxed);
                        if codes[..] != *st.code_bytes(s) {
                            return (Some(s), None);
                        }
                    }
                    (None, if live && !finite { Some(id) } else { None })
                },
            )
            .collect();
        drop(scan);
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        let corrupt: Vec<u32> = per_slot.iter().filter_map(|p| p.0).collect();
        let not_finite: Vec<u64> = per_slot.iter().filter_map(|p| p.1).collect();
        // Reachability on layer 0 from the entry point, through deleted nodes too.
        let mut seen = vec![false; n as usize];
        let mut stack = Vec::new();
        if snap.entry != EMPTY && snap.entry < n {
            seen[snap.entry as usize] = true;
            stack.push(snap.entry);
        }
        lists::mark_reachable(st, n, &mut stack, &mut seen);
        // The tail is not linked yet: searches scan it (the deferred-linking record).
        let linked = snap.linked.min(n as u64) as u32;
        let unreachable =
            (0..linked).filter(|&s| !seen[s as usize]).filter_map(|s| snap.live_id(s)).collect();
        st.intact()?;
        Ok(CheckReport { unreachable, not_finite, corrupt, clipped: clipped.into_inner() })
    }

    /// Whether a node's lists check out: counts in range, checksums, entries below `n`. A
    /// reader reads a list that fails again, a moment later for the first PAUSES of a scan
    /// (`pauses` counts them): a writer in another process may be changing it, and a damaged
    /// file must not cost a pause per slot.
    pub(super) fn lists_ok(&self, st: &Storage, s: u32, n: u32, pauses: &AtomicU32) -> bool {
        let once = || {
            let l0 = st.l0(s);
            let head = crate::storage::acquire_u32(&l0[0]);
            let level = lists::level_of(st, s);
            if (head & 0xffff) as usize > l0.len() - 2 || level > MAX_LEVEL {
                return false;
            }
            let ok = |list: &[AtomicU32], layer: usize| {
                let head = crate::storage::acquire_u32(&list[0]);
                let cnt = (head & 0xffff) as usize;
                if cnt > list.len() - 2 {
                    return false;
                }
                let entries: Vec<u32> = list[2..2 + cnt].iter().map(|e| e.load(Relaxed)).collect();
                entries.iter().all(|&e| e < n)
                    && format::list_crc(s, layer, head, &entries) == list[1].load(Relaxed)
            };
            if !ok(l0, 0) {
                return false;
            }
            let upper = st.header(s)[1].load(Relaxed);
            if level > 0 && upper == NO_UPPER {
                return false;
            }
            (1..=level).all(|layer| lists::list_of(st, s, layer).is_some_and(|l| ok(l, layer)))
        };
        if once() {
            return true;
        }
        if self.read_only {
            if pauses.fetch_add(1, Relaxed) < PAUSES {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            return once();
        }
        false
    }
}
