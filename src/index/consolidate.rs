//! Consolidating deletes: every live node whose lists hold deleted nodes is re-linked around
//! them (`Graph::relinked`), the entry point moves off a deleted node, and nodes left without
//! a way in get one, so that searches stop walking deleted nodes. A change of lists like a
//! batch's: saved to the undo log first, committed by the next flush, put back on an error or
//! a cancel (the consolidation record: `docs/design/consolidation.md`).

use super::*;
use crate::format::EMPTY;
use crate::graph::{self, insert::Linker, Graph};
use crate::storage::lists;
use rayon::prelude::*;

/// A batch consolidates the deletes first once those not yet consolidated reach a sixteenth
/// of the graph's nodes (and at least `DUE_MIN`): re-linking costs about the same whatever
/// the number of deletes, as nearly every list holds one of a sixteenth of the nodes.
const DUE_SHARE: u64 = 16;
const DUE_MIN: u64 = 64;

/// The state a consolidation changed, as it was before (`Index::unconsolidate`).
pub(super) struct Relinked {
    lists: HashMap<u32, Vec<u32>>,
    entry: (u32, usize),
    unconsolidated: u64,
    relinked: bool,
    reuse: reuse::Reuse,
}

impl Index {
    /// Consolidate every delete so far (see the module). Returns how many live nodes were
    /// re-linked. A no-op, cheap, when no live list holds a deleted node.
    pub fn consolidate(&self, threads: Option<usize>, ctl: &Control) -> Result<u64> {
        self.writable()?;
        let mut w = self.writer.lock();
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        self.consolidate_locked(&mut w, threads, ctl)
    }

    /// This handle's deletes not yet consolidated. (Which deleted slots an earlier writer
    /// left unconsolidated is not stored; any consolidation takes them out with the rest.)
    pub fn unconsolidated(&self) -> u64 {
        if self.read_only {
            return 0;
        }
        self.writer.lock().unconsolidated
    }

    /// Whether enough deletes wait for a batch to consolidate them first (see `DUE_SHARE`).
    pub(super) fn consolidation_due(&self, w: &Writer) -> bool {
        w.unconsolidated >= DUE_MIN.max(w.linked / DUE_SHARE)
    }

    /// Before a batch links: consolidate when due, so that the batch links among live nodes.
    pub(super) fn consolidate_if_due(
        &self,
        w: &mut Writer,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        self.consolidate_when_due(w, threads, ctl, false).map(drop)
    }

    /// `consolidate_if_due`, returning what to put back, when it ran, should the caller need
    /// the lists as they were (an upsert whose add fails brings its deleted rows back, with
    /// their links: `unconsolidate`).
    pub(super) fn consolidate_if_due_undoably(
        &self,
        w: &mut Writer,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Option<Relinked>> {
        self.consolidate_when_due(w, threads, ctl, true)
    }

    fn consolidate_when_due(
        &self,
        w: &mut Writer,
        threads: Option<usize>,
        ctl: &Control,
        undoable: bool,
    ) -> Result<Option<Relinked>> {
        let on = crate::tuning::get().consolidate.unwrap_or(true);
        if !(on && w.poisoned.is_none() && self.consolidation_due(w)) {
            return Ok(None);
        }
        // Only when asked: the free slots' copy costs as many entries as there are.
        let mut before = undoable.then(|| Relinked {
            lists: HashMap::new(),
            entry: *self.entry.lock(),
            unconsolidated: w.unconsolidated,
            relinked: w.relinked,
            reuse: w.reuse.clone(),
        });
        self.consolidate_keeping(w, threads, ctl, before.as_mut().map(|b| &mut b.lists))?;
        // The progress shown is the batch's own rows.
        ctl.done.store(0, Relaxed);
        Ok(before)
    }

    /// Undo a consolidation (`consolidate_if_due_undoably`): its lists, entry point and bookkeeping as
    /// they were. Only while nothing else changed lists since.
    pub(super) fn unconsolidate(&self, w: &mut Writer, before: Relinked) {
        let snap = self.view.read().clone();
        for (slot, words) in &before.lists {
            lists::restore_lists(&snap.st, *slot, words);
        }
        *self.entry.lock() = before.entry;
        w.unconsolidated = before.unconsolidated;
        w.relinked = before.relinked;
        w.reuse = before.reuse;
        self.unlinked_deletes.store(true, Relaxed);
        let (entry, max_level) = before.entry;
        self.publish(Snap { entry, max_level, ..Snap::clone_of(&snap) });
    }

    /// `consolidate` under the writer lock.
    pub(super) fn consolidate_locked(
        &self,
        w: &mut Writer,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<u64> {
        self.consolidate_keeping(w, threads, ctl, None)
    }

    /// `consolidate_locked`, giving the lists it changed as they were before to `keep`.
    fn consolidate_keeping(
        &self,
        w: &mut Writer,
        threads: Option<usize>,
        ctl: &Control,
        keep: Option<&mut HashMap<u32, Vec<u32>>>,
    ) -> Result<u64> {
        let snap = self.view.read().clone();
        let st = &*snap.st;
        let n = w.linked as u32;
        // Deleted as this writer sees it, its unflushed deletes too (what readers of the last
        // commit may still return loses its links early; the record says why that is kept).
        let gone: Vec<bool> = (0..n).into_par_iter().map(|s| snap.live_id(s).is_none()).collect();
        let is_gone = |s: u32| gone[s as usize];
        // (node, layer) of each live list holding a deleted node.
        let todo: Vec<(u32, usize)> = (0..n)
            .into_par_iter()
            .filter(|&s| !is_gone(s))
            .flat_map_iter(|s| {
                let holds = move |layer: usize| {
                    lists::list_of(st, s, layer).is_some_and(|l| {
                        lists::entries(l).iter().any(|e| {
                            let e = e.load(Relaxed);
                            e < n && is_gone(e)
                        })
                    })
                };
                (0..=lists::level_of(st, s)).filter(move |&l| holds(l)).map(move |l| (s, l))
            })
            .collect();
        let entry_saved = *self.entry.lock();
        let entry_gone = entry_saved.0 != EMPTY && entry_saved.0 < n && is_gone(entry_saved.0);
        if todo.is_empty() && !entry_gone {
            w.unconsolidated = 0;
            // Seen by the next state published.
            self.unlinked_deletes.store(false, Relaxed);
            // Nothing to re-link: with nothing pending either, the deleted slots are out of
            // every list of the last commit, so they are free now (`reuse.rs`).
            let committed = (!w.changed()).then_some(w.committed.seq);
            w.reuse.consolidated(st, &gone, committed);
            return Ok(0);
        }
        let mut nodes: Vec<u32> = todo.iter().map(|t| t.0).collect();
        nodes.dedup();
        *self.savepoint.lock() = Some(Savepoint { start: n, saved: HashMap::new() });
        let result = self.relink_all(w, st, &snap, &todo, &nodes, &gone, threads, ctl);
        let sp = self.savepoint.lock().take().expect("set above");
        if let Err(e) = result {
            for (slot, words) in &sp.saved {
                lists::restore_lists(st, *slot, words);
            }
            *self.entry.lock() = entry_saved;
            return Err(e);
        }
        if let Some(keep) = keep {
            *keep = sp.saved;
        }
        let (entry, max_level) = *self.entry.lock();
        // No deleted node is left in a list (the entry point aside, as when none is live).
        self.unlinked_deletes.store(entry != EMPTY && entry < n && is_gone(entry), Relaxed);
        self.publish(Snap { entry, max_level, ..Snap::clone_of(&snap) });
        // Unflushed deletes were consolidated too; only later ones wait. Every deleted slot
        // below `n` is out of every live list now: free once this commits (`reuse.rs`).
        w.unconsolidated = 0;
        w.relinked = true;
        // (Not while the entry point stays on a deleted node, as when none is live: a batch
        // would walk the deleted nodes from it and link to them.)
        if !(entry != EMPTY && entry < n && is_gone(entry)) {
            w.reuse.consolidated(st, &gone, None);
        }
        Ok(nodes.len() as u64)
    }

    /// The lists of `todo` re-linked on `threads`, the entry point moved off a deleted node,
    /// then a way in for every live node left without one.
    #[allow(clippy::too_many_arguments)]
    fn relink_all(
        &self,
        w: &Writer,
        st: &Storage,
        snap: &Snap,
        todo: &[(u32, usize)],
        nodes: &[u32],
        gone: &[bool],
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        let n = w.linked as u32;
        let (cslots, cseq) = (w.committed.slots, w.committed.seq);
        // Every list about to change saved in one write to the undo log.
        self.before_modify(st, cslots, cseq, nodes)?;
        let g = Graph::between_nodes(st, self.metric(), n, snap.quant.as_deref());
        let m = self.geo.m;
        let is_gone = |s: u32| gone[s as usize];
        let relink = |&(s, layer): &(u32, usize)| -> Result<()> {
            if ctl.cancelled() {
                return Err(Error::interrupted());
            }
            let cap = if layer == 0 { 2 * m } else { m };
            if let Some(new) = graph::with_scratch(|sc| g.relinked(s, layer, &is_gone, cap, sc)) {
                let _lock = self.locks[s as usize % graph::LOCK_STRIPES].lock();
                if let Some(list) = lists::list_of(st, s, layer) {
                    lists::write_list(list, s, layer, &new, lists::level_of(st, s));
                }
            }
            // Progress in live nodes (each has one level-0 list).
            if layer == 0 {
                ctl.done.fetch_add(1, Relaxed);
            }
            Ok(())
        };
        with_threads(threads, || todo.par_iter().try_for_each(relink)).and_then(|r| r)?;
        // A deleted entry point gives way to the live node of the highest level (the lowest
        // slot among equals); with no live node the entry stays, as a search returns nothing.
        let (entry, _) = *self.entry.lock();
        if entry != EMPTY && entry < n && is_gone(entry) {
            let best = (0..n)
                .into_par_iter()
                .filter(|&s| !is_gone(s))
                .map(|s| (lists::level_of(st, s), std::cmp::Reverse(s)))
                .max();
            if let Some((level, std::cmp::Reverse(s))) = best {
                *self.entry.lock() = (s, level);
            }
        }
        Linker { gone: Some(gone), ..self.linker(st, w, snap.quant.as_deref(), None) }.repair(n)
    }
}

#[cfg(test)]
mod tests {
    //! `unconsolidate` (an upsert whose add failed) against its oracle: every list, the entry
    //! point and the counts as they were before the deletes and the consolidation it undoes.
    use super::*;

    fn lists_now(idx: &Index) -> Vec<Vec<u32>> {
        let snap = idx.snap();
        let st = &*snap.st;
        (0..snap.slots as u32)
            .flat_map(|s| (0..=lists::level_of(st, s)).map(move |layer| (s, layer)))
            .map(|(s, layer)| {
                let list = lists::list_of(st, s, layer).unwrap_or(&[]);
                list.iter().map(|e| e.load(Relaxed)).collect()
            })
            .collect()
    }

    #[test]
    fn an_undone_consolidation_leaves_every_list_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let idx = Index::open(&dir.path().join("u.chassis"), Some(8), None, Mode::Write).unwrap();
        let mut x = 7u64;
        let rows: Vec<f32> = (0..2000 * 8)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect();
        idx.add_batch(&rows, 2000, None, None, &Control::default()).unwrap();
        idx.flush().unwrap();
        let (before, entry) = (lists_now(&idx), *idx.entry.lock());
        let mut w = idx.writer.lock();
        let snap = idx.view.read().clone();
        let ids: Vec<u64> = (0..2000).step_by(3).collect();
        let gone = idx.delete_in(&mut w, &snap, &ids).unwrap();
        assert_eq!(gone.len(), ids.len());
        let undo = idx.consolidate_if_due_undoably(&mut w, None, &Control::default()).unwrap();
        drop(w);
        assert_ne!(lists_now(&idx), before, "the consolidation changed lists");
        let mut w = idx.writer.lock();
        idx.unconsolidate(&mut w, undo.expect("a third of the rows deleted: due"));
        idx.restore_deleted(&mut w, &gone);
        assert_eq!(w.unconsolidated, 0);
        drop(w);
        assert!(lists_now(&idx) == before, "a list differs from before the consolidation");
        assert_eq!(*idx.entry.lock(), entry);
        assert_eq!(idx.len(), 2000);
        assert!(ids.iter().all(|&id| idx.contains(id).unwrap()));
    }
}
