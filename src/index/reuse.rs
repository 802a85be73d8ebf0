//! Slot reuse: the slot of a deleted row takes a new row once no reader can reach the old one,
//! so that a file under steady churn stops growing (the slot-reuse record:
//! `docs/design/slot-reuse.md`).
//!
//! A slot is free once its delete and a consolidation that took it out of every list are both
//! committed (by commit `c`), and no reader or snapshot holds a commit before `c`
//! (`storage::pins`). A batch takes free slots before it appends (those whose old rows lay
//! near its rows, `Index::locality_order`, or the lowest); each reused row is marked as
//! visible from the next commit (`format::born_marker`), and so is every row stored after it,
//! so that a reader of an older commit neither returns the new row nor loses the order of
//! insertion (`ids()`), which is by commit and then by slot.

use super::*;
use crate::storage::Older;
use std::collections::{BTreeMap, BTreeSet};

/// The writer's free slots and what it reused since the last commit.
#[derive(Default, Clone)]
pub(super) struct Reuse {
    /// Free slots, each with the commit that freed it.
    free: BTreeMap<u32, u64>,
    /// Out of every list by a consolidation since the last commit: free once it commits.
    freed: BTreeSet<u32>,
    /// Reused since the last commit: slot -> (the commit that freed it, its marker before).
    taken: HashMap<u32, (u64, u64)>,
    /// Whether rows are marked with their commit (the file is version 5, or becomes it at
    /// the next commit).
    pub born: bool,
    /// Off for an index that must keep every row's slot (a shard of a sharded index, whose
    /// rewind brings rows back from their slots).
    pub off: bool,
}

impl Reuse {
    pub fn new(born: bool) -> Reuse {
        Reuse { born, ..Default::default() }
    }

    /// Free slots now (what `memory_stats` reports).
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// After a consolidation of the slots below `gone.len()`: every deleted slot `gone` holds
    /// is out of every list now (rows deleted since the last commit too, whose delete commits
    /// with it), free from the next commit on, or from commit `committed` when that already
    /// holds them so (nothing changed since). A slot whose marker is damaged is left as it is,
    /// for `check` to report.
    pub fn consolidated(&mut self, st: &Storage, gone: &[bool], committed: Option<u64>) {
        for (s, &g) in gone.iter().enumerate() {
            let s = s as u32;
            let deleted = || {
                matches!(
                    format::read_marker(st.header(s)[2].load(Acquire), s),
                    format::Marker::Deleted(_)
                )
            };
            if g && !self.free.contains_key(&s) && deleted() {
                match committed {
                    Some(c) => drop(self.free.insert(s, c)),
                    None => drop(self.freed.insert(s)),
                }
            }
        }
    }

    /// After commit `seq`: what was freed since the last one is free from now on, and what was
    /// reused is committed.
    pub fn committed(&mut self, seq: u64) {
        for s in std::mem::take(&mut self.freed) {
            self.free.insert(s, seq);
        }
        self.taken.clear();
    }

    /// After a rollback to a commit of version 5 or not (`born`): reused slots are free again,
    /// and what a consolidation since freed is not.
    pub fn rolled_back(&mut self, born: bool) {
        for (s, (c, _)) in self.taken.drain() {
            self.free.insert(s, c);
        }
        self.freed.clear();
        self.born = born;
    }

    /// The marker a row reused since the last commit had before (to delete it again).
    pub fn marker_before(&self, slot: u32) -> Option<u64> {
        self.taken.get(&slot).map(|t| t.1)
    }
}

impl Index {
    /// Never reuse a slot from now on (for as long as this handle lives): a sharded index's
    /// files, whose rewind brings rows back from their slots, are opened so.
    pub fn keep_slots(&self) {
        self.writer.lock().reuse.off = true;
    }

    /// Slots free for new rows now (deleted, out of every list, committed).
    pub fn free_slots(&self) -> u64 {
        self.writer.lock().reuse.free_count() as u64
    }

    /// Up to `n` free slots for the next batch (the lowest), and the commit that freed each.
    /// None at all unless every condition holds: reuse is on; nothing was appended or reused
    /// since the last commit (so that the commit and then the slot give the order of
    /// insertion); this writer holds no snapshot (its snapshots see its unflushed rows); and
    /// no reader holds a commit before the one that freed the slot.
    pub(super) fn slots_to_reuse(&self, w: &Writer, snap: &Snap, n: usize) -> Vec<(u32, u64)> {
        let r = &w.reuse;
        if r.off
            || self.memory
            || r.free.is_empty()
            || w.slots != w.committed.slots
            || !r.taken.is_empty()
            || snap.st.pins.oldest_here().is_some()
            || !crate::tuning::get().reuse_slots.unwrap_or(true)
        {
            return Vec::new();
        }
        // Never the entry point (a consolidation that left it on a deleted node, none being
        // live, frees nothing; this is the second guard).
        let entry = self.entry.lock().0;
        // The newest freeing commit no reader is behind: slots freed by it or earlier.
        let mut commits: Vec<u64> = r.free.values().copied().collect();
        commits.sort_unstable();
        commits.dedup();
        let Some(upto) =
            commits.into_iter().rev().find(|&c| snap.st.pins.older_than(c) == Older::No)
        else {
            return Vec::new();
        };
        (r.free.iter())
            .filter(|(&s, &c)| c <= upto && s != entry)
            .take(n)
            .map(|(&s, &c)| (s, c))
            .collect()
    }

    /// Take `slots` (reused by the batch being published) out of the free ones.
    pub(super) fn take_free(&self, w: &mut Writer, slots: &[(u32, u64, u64)]) {
        for &(s, c, old) in slots {
            w.reuse.free.remove(&s);
            w.reuse.taken.insert(s, (c, old));
        }
        w.reuse.born = true;
    }

    /// The marker that deletes the row of `slot`, whose marker is `old`, in the next commit:
    /// a row reused since the last commit gets its marker from before back (it was never
    /// visible to a reader); a row visible from a commit that a reader may still be behind
    /// is marked deleted from the first commit on, since a reader behind it would take the
    /// delete of a later commit for a row it should see (readers of later commits then lose it
    /// before its delete commits, as a consolidated delete does).
    /// `behind` keeps what the pins said per commit, for a batch of deletes.
    pub(super) fn delete_word(
        &self,
        w: &Writer,
        st: &Storage,
        slot: u32,
        old: u64,
        behind: &mut FastMap<u64, bool>,
    ) -> u64 {
        let next = w.committed.seq + 1;
        match format::read_marker(old, slot) {
            format::Marker::Born(b) if b > w.committed.seq => {
                w.reuse.marker_before(slot).unwrap_or(format::delete_marker(next, slot))
            }
            format::Marker::Born(b)
                if *behind.entry(b).or_insert_with(|| st.pins.older_than(b) != Older::No) =>
            {
                format::delete_marker(1, slot)
            }
            _ => format::delete_marker(next, slot),
        }
    }
}
