//! Linking a batch of stored rows into the graph (the tail among them), with a savepoint of
//! the nodes it changes: on an error or a cancel they are put back.

use super::*;
use crate::format::EMPTY;
use crate::graph::{self, insert::Linker};
use crate::storage::lists;
use rayon::prelude::*;

impl Index {
    /// Link the rows of `slots` (by slot offset: reused slots below `start`, then new ones
    /// from `start` on; `pos`: each row's slot offset, `levels` by slot offset), on `threads`
    /// threads, with a savepoint for the nodes linked before them: on an error or a cancel
    /// those nodes' lists are put back, reused slots' too (the new slots' own lists are the
    /// caller's to undo), and the entry point is the caller's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn link_slots(
        &self,
        w: &mut Writer,
        st: &Storage,
        slots: &[u32],
        start: u64,
        pos: &[u32],
        levels: &[usize],
        quant: Option<&Quantizer>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        let n = pos.len();
        let entry_before = *self.entry.lock();
        *self.savepoint.lock() = Some(Savepoint { start: start as u32, saved: HashMap::new() });
        // A reused slot's lists change as any committed node's: saved first.
        let reused: Vec<u32> = slots.iter().copied().filter(|&s| (s as u64) < start).collect();
        if let Err(e) = self.before_modify(st, w.committed.slots, w.committed.seq, &reused) {
            self.savepoint.lock().take();
            return Err(e);
        }
        // Then give nodes the pruning left without a way in one. The whole graph is walked
        // (`Linker::repair`, O(slots)) once the rows linked since the last walk reach an eighth
        // of the index, or 1,000 and a sixty-fourth of it: a large batch at once, small ones
        // together, since counting only large batches left the nodes small ones' reverse links
        // pushed out of full lists unreachable. Every other batch looks at the nodes its links
        // took out of lists, and at its own (`Linker::repair_around`), since a walk of a large
        // index takes seconds (measured: `docs/design/small-commits.md`).
        let total = start + slots.iter().filter(|&&s| s as u64 >= start).count() as u64;
        let due = w.unrepaired + n as u64;
        let around = graph::insert::repair_around();
        let every = if around { (total / 64).max(1000) } else { 1000 };
        let repair = due * 8 >= total || due >= every;
        let dropped = Mutex::new(Vec::new());
        // A full repair neither gives deleted rows a way in nor routes through them: those a
        // consolidation took out of every list stay out (their slots may be reused).
        let gone: Vec<bool> = if repair {
            let view = self.view.read().clone();
            let mut g: Vec<bool> =
                (0..total as u32).into_par_iter().map(|s| view.live_id(s).is_none()).collect();
            slots.iter().for_each(|&s| g[s as usize] = false);
            g
        } else {
            Vec::new()
        };
        let linker = Linker {
            gone: repair.then_some(&gone[..]),
            ..self.linker(st, w, quant, (!repair && around).then_some(&dropped))
        };
        let result = with_threads(threads, || linker.link(slots, total, pos, levels, ctl));
        let result = result.and_then(|r| r);
        let result = result.and_then(|on_copy| {
            if repair {
                linker.repair(total as u32)?;
                // Its reads mapped some vectors back (and the kernel's fault-around the pages
                // beside them): let go of them again, as the copy did.
                if on_copy {
                    st.release_vectors(0, total);
                }
            } else if linker.dropped.is_some() {
                let mut nodes = std::mem::take(&mut *dropped.lock());
                nodes.extend_from_slice(slots);
                let replaced = entry_before.0;
                if replaced != EMPTY && self.entry.lock().0 != replaced {
                    nodes.push(replaced);
                }
                linker.repair_around(total as u32, nodes)?;
            }
            Ok(())
        });
        let sp = self.savepoint.lock().take().unwrap();
        if let Err(e) = result {
            for (slot, words) in &sp.saved {
                lists::restore_lists(st, *slot, words);
            }
            return Err(e);
        }
        w.unrepaired = if repair { 0 } else { due };
        Ok(())
    }

    /// A linker over `st` for the writer `w`: the index's metric, entry point and locks, its
    /// lists saved (`before_modify`) as of `w`'s last commit; every node counts (`gone`).
    pub(super) fn linker<'a>(
        &'a self,
        st: &'a Storage,
        w: &Writer,
        quant: Option<&'a Quantizer>,
        dropped: Option<&'a Mutex<Vec<u32>>>,
    ) -> Linker<'a, impl Fn(&[u32]) -> Result<()> + Sync + 'a> {
        let (cslots, cseq) = (w.committed.slots, w.committed.seq);
        Linker {
            st,
            metric: self.metric(),
            ef_construction: self.opts.ef_construction,
            entry: &self.entry,
            locks: &self.locks,
            before_modify: move |nodes: &[u32]| self.before_modify(st, cslots, cseq, nodes),
            quant,
            dropped,
            gone: None,
        }
    }

    /// Link the tail (the rows stored past `w.linked`, see the deferred-linking record) as a
    /// batch, and publish the graph with it. On an error or a cancel the tail stays the tail:
    /// its rows' own lists empty again, the nodes they reached put back, the entry as it was.
    pub(super) fn link_tail(
        &self,
        w: &mut Writer,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        let (start, end) = (w.linked, w.slots);
        if start >= end {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let st = &*snap.st;
        let tail: Vec<u32> = (start as u32..end as u32).collect();
        let levels: Vec<usize> = tail.iter().map(|&s| lists::level_of(st, s)).collect();
        let pos: Vec<u32> = (0..tail.len() as u32).collect();
        // The tail's slots are its own (it reuses none), from `start` on.
        // The committed rows of the tail change their (empty) lists: saved for the undo log
        // and the next small commit, as any committed node's.
        self.before_modify(st, w.committed.slots, w.committed.seq, &tail)?;
        // Rows of the tail deleted before it is linked are linked all the same: deleted
        // nodes in lists, which walks must check for (`Snap::hides`) until consolidated.
        if tail.iter().any(|&s| !snap.visible(s)) {
            self.unlinked_deletes.store(true, Relaxed);
        }
        let entry_before = *self.entry.lock();
        let quant = snap.quant.as_deref();
        if let Err(e) = self.link_slots(w, st, &tail, start, &pos, &levels, quant, threads, ctl) {
            for (&s, &level) in tail.iter().zip(&levels) {
                for layer in 0..=level {
                    if let Some(list) = lists::list_of(st, s, layer) {
                        lists::write_list(list, s, layer, &[], level);
                    }
                }
            }
            *self.entry.lock() = entry_before;
            return Err(e);
        }
        w.linked = end;
        let (entry, max_level) = *self.entry.lock();
        self.publish(Snap { linked: end, entry, max_level, ..Snap::clone_of(&snap) });
        Ok(())
    }

    /// Called before existing nodes' lists change (a single node under its stripe lock): save
    /// them for the undo log (committed nodes, one write for all) and for the batch's
    /// savepoint. A node not yet saved has not changed since: whoever changes it saves it
    /// first, under the same locks taken here.
    pub(super) fn before_modify(
        &self,
        st: &Storage,
        committed_slots: u64,
        committed_seq: u64,
        nodes: &[u32],
    ) -> Result<()> {
        if nodes.iter().any(|&n| (n as u64) < committed_slots) {
            let mut u = self.undo.lock();
            let mut records: Vec<(u32, Vec<u32>)> = Vec::new();
            for &n in nodes {
                if (n as u64) < committed_slots
                    && !u.saved.contains(&n)
                    && !records.iter().any(|r| r.0 == n)
                {
                    records.push((n, lists::snapshot_lists(st, n)));
                }
            }
            if !records.is_empty() {
                u.log.record_many(committed_seq, &records)?;
                u.saved.extend(records.iter().map(|r| r.0));
            }
        }
        let mut sp = self.savepoint.lock();
        if let Some(sp) = sp.as_mut() {
            for &n in nodes {
                if n < sp.start {
                    sp.saved.entry(n).or_insert_with(|| lists::snapshot_lists(st, n));
                }
            }
        }
        Ok(())
    }
}
