//! flush, rollback and close: the index's bookkeeping around the commit protocol, whose order
//! of writes and syncs is in `crate::commit`.

use super::*;
use crate::commit::{self, redo};
use crate::os;
use crate::storage::Storage;

impl Index {
    /// The header that commits the writer's state now (the next sequence number; refused,
    /// never wrapped, at the sequence's limit).
    pub(super) fn next_header(&self, writer: &Writer, snap: &Snap) -> Result<Header> {
        let mut next = writer.committed.clone();
        next.seq = match next.seq.checked_add(1) {
            Some(seq) if seq <= format::MAX_WRITABLE_SEQ => seq,
            _ => return Err(self.seq_at_limit(next.seq)),
        };
        next.slots = writer.slots;
        next.linked = writer.linked;
        next.live = writer.live;
        next.next_id = writer.next_id;
        next.entry = snap.entry;
        next.max_level = snap.max_level as u32;
        next.user_version = writer.user_version;
        next.quantizer = writer.quantizer;
        next.reused = writer.reuse.born;
        next.lists_clean = !self.unlinked_deletes.load(Relaxed);
        next.regions = snap.st.regions();
        Ok(next)
    }

    /// A commit sequence too high to commit after (only a crafted or damaged header has one).
    pub(super) fn seq_at_limit(&self, seq: u64) -> Error {
        Error::new(
            ErrorKind::IndexFull,
            format!(
                "{}: the commit sequence is {seq}, at its limit; nothing more can be committed \
                 to this file",
                self.path.display()
            ),
            "open it read-only and back it up (the copy keeps the sequence), or build a new \
             index from its vectors",
        )
    }

    /// The error every write of a poisoned writer gets: the original failure, its errno, and
    /// what a reopen finds.
    pub(super) fn poisoned_error(&self, poison: &Poison) -> Error {
        Error {
            kind: ErrorKind::Io,
            message: format!(
                "an earlier flush of {} failed ({}); nothing more is written to it",
                self.path.display(),
                poison.message
            ),
            help: format!("close the index and open it again: {}", poison.reopens_as()),
            errno: poison.errno,
            path: Some(self.path.clone()),
        }
    }

    /// Make every change durable. Does nothing when nothing changed. Searches go on meanwhile.
    /// In memory: nothing to do (there is no file; `save` writes one).
    pub fn flush(&self) -> Result<()> {
        self.writable()?;
        if self.memory {
            return Ok(());
        }
        let mut writer = self.writer.lock();
        self.flush_locked(&mut writer)
    }

    /// `flush` under the writer lock: commit (`commit::commit`), then publish the commit.
    pub(super) fn flush_locked(&self, writer: &mut Writer) -> Result<()> {
        if self.memory {
            return Ok(());
        }
        if let Some(poison) = &writer.poisoned {
            return Err(self.poisoned_error(poison));
        }
        if !writer.changed() && writer.next_id == writer.committed.next_id {
            return Ok(());
        }
        let committed = &writer.committed;
        let first_tail = committed.linked >= committed.slots && writer.linked < writer.slots;
        let first_reuse = !committed.reused && writer.reuse.born;
        self.commit_next(writer)?;
        if first_tail || first_reuse {
            // The same state once more, so that both header copies are version 4 (or 5): a
            // build that reads only lower versions would otherwise open the older copy
            // (reporting the other as damaged), and as a writer give back the tail's slots, or
            // take the born markers for damage.
            self.commit_next(writer)?;
        }
        Ok(())
    }

    /// Commit the writer's state as the next sequence (`flush_locked` decided there is one).
    fn commit_next(&self, writer: &mut Writer) -> Result<()> {
        let snap = self.view.read().clone();
        let next = self.next_header(writer, &snap)?;
        let mut undo = self.undo.lock();
        let u = &mut *undo;
        // What this commit changes, for the redo log when small enough, and for copies kept
        // elsewhere once one was asked for (`changes.rs`); not listed for a large batch else.
        let keep = self.keep_changes.load(Acquire);
        let may_be_small = self.may_be_small(writer, &next, u);
        let changed = (keep || may_be_small)
            .then(|| Self::commit_ranges(&snap.st, &self.geo, writer, &next, u))
            .flatten();
        let small = may_be_small.then(|| self.small_commit(&next, u, changed.as_deref())).flatten();
        let result = match small {
            Some(changed) if u.redo.prepare().is_ok() => commit::commit_logged(
                &snap.st,
                &mut u.log,
                &mut u.redo,
                1 - writer.copy,
                &next,
                &changed,
            ),
            _ => commit::commit(&snap.st, &mut u.log, 1 - writer.copy, &next).map(|()| {
                // Everything is durable through the index file: the redo log's records are
                // stale (a checkpoint), and the pages written back are clean.
                u.redo.reset();
                writer.headers_clean = true;
            }),
        };
        if let Err(failed) = result {
            // What the disk holds is one of two commits now: write nothing more.
            let poison = Poison::of(&failed.error, failed.header_may_land);
            let error = Error {
                help: format!(
                    "close the index and open it again: {}; check the disk ({})",
                    poison.reopens_as(),
                    failed.error.help
                ),
                ..failed.error
            };
            writer.poisoned = Some(poison);
            return Err(error);
        }
        undo.saved.clear();
        undo.marked.clear();
        undo.reused.clear();
        undo.changes.add(writer.committed.seq, next.seq, changed.filter(|_| keep));
        drop(undo);
        writer.copy = 1 - writer.copy;
        self.publish(Snap::of(snap.st.clone(), &next, true));
        writer.deletes = 0;
        writer.relinked = false;
        writer.unconsolidated_committed = writer.unconsolidated;
        writer.reuse.committed(next.seq);
        self.advise_committed(&snap.st, next.slots);
        writer.committed = next;
        Ok(())
    }

    /// The file ranges a commit of `next` changes, the header aside: the new rows, the heap
    /// the lists of new nodes took, the saved lists and the changed delete markers (a slot's
    /// header is written once, with its row). None when it changes more than that: a quantizer learned (every
    /// code), or a region table that lost a segment.
    fn commit_ranges(
        st: &Storage,
        g: &Geometry,
        w: &Writer,
        next: &Header,
        u: &UndoState,
    ) -> Option<Vec<(u64, usize)>> {
        let c = &w.committed;
        if next.quantizer != c.quantizer {
            return None;
        }
        let mut out = st.slot_rows(&next.regions, c.slots.min(next.slots), next.slots)?;
        for (i, r) in next.regions.iter().enumerate() {
            if r.kind != format::RegionKind::Heap {
                continue;
            }
            match c.regions.get(i).filter(|old| old.offset == r.offset) {
                Some(old) if r.used > old.used => {
                    out.push((r.offset + old.used as u64, (r.used - old.used) as usize))
                }
                Some(_) => {}
                None => out.push((r.offset, r.used as usize)),
            }
        }
        for &s in &u.saved {
            out.push((st.slot_offsets(&next.regions, s)?.1, g.l0_words * 4));
            let level = crate::storage::lists::level_of(st, s);
            let r = st.header(s)[1].load(Relaxed);
            if level > 0 && r != format::NO_UPPER {
                out.push((st.upper_offset(&next.regions, r, 1)?, level * g.upper_words * 4));
            }
        }
        for s in u.marked.ones().map(|s| s as u32) {
            out.push((st.slot_offsets(&next.regions, s)?.0, format::SLOT_HEADER));
        }
        // A reused slot's row is new: codes, vector, header and level-0 list.
        for &s in &u.reused {
            out.extend(st.slot_rows(&next.regions, s as u64, s as u64 + 1)?);
        }
        Some(out)
    }

    /// Whether a commit of `next` may go through the redo log (`commit::redo`), before its
    /// ranges are listed: not with new regions or a new quantizer (their blocks, and every
    /// code), nor a batch of more bytes than the log has room for, for which syncing the index
    /// file's pages costs about the same.
    fn may_be_small(&self, w: &Writer, next: &Header, u: &UndoState) -> bool {
        let c = &w.committed;
        let Some(new_slots) = next.slots.checked_sub(c.slots) else { return false };
        let g = &self.geo;
        let row = g.code_stride + g.stride + format::SLOT_HEADER + g.l0_words * 4;
        let lists = g.l0_words * 4 + 3 * g.upper_words * 4;
        !(u.redo.disabled
            || next.quantizer != c.quantizer
            || next.regions.len() != c.regions.len()
            || next.regions.iter().zip(&c.regions).any(|(a, b)| a.offset != b.offset)
            || new_slots as usize * row + u.saved.len() * lists > redo::CAPACITY as usize)
    }

    /// The ranges `changed` if they fit in the redo log; None sends the commit through the
    /// index file.
    fn small_commit(
        &self,
        next: &Header,
        u: &UndoState,
        changed: Option<&[(u64, usize)]>,
    ) -> Option<Vec<(u64, usize)>> {
        let out = changed?.to_vec();
        let header = format::HEADER_FIXED + format::REGION_ENTRY * next.regions.len() + 8;
        u.redo.fits(redo::record_len(out.iter().map(|r| r.1).chain([header]))).then_some(out)
    }

    /// Discard everything since the last flush; keep the writer lock.
    pub fn rollback(&self) -> Result<()> {
        self.writable()?;
        if self.memory {
            return Err(Error::invalid(
                "an in-memory index has no flushed state to roll back to (flush does nothing in memory)",
                "keep a copy with save(path) and load it back, or use a file-backed index",
            ));
        }
        let mut writer = self.writer.lock();
        if let Some(poison) = &writer.poisoned {
            return Err(self.poisoned_error(poison));
        }
        self.rollback_locked(&mut writer)
    }

    /// `rollback` under the writer lock: the stored changes undone (`commit::roll_back`), then
    /// the writer's state and the published snapshot back at the commit.
    pub(super) fn rollback_locked(&self, writer: &mut Writer) -> Result<()> {
        if !writer.changed() && self.undo.lock().log.is_empty() {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let committed = writer.committed.clone();
        commit::roll_back(&snap.st, &self.path, &committed)?;
        writer.slots = committed.slots;
        writer.linked = committed.linked;
        writer.live = committed.live;
        writer.next_id = committed.next_id;
        writer.user_version = committed.user_version;
        writer.quantizer = committed.quantizer;
        writer.deletes = 0;
        writer.relinked = false;
        writer.unconsolidated = writer.unconsolidated_committed;
        // What the commit says of its lists (`next_header` wrote it).
        self.unlinked_deletes.store(!committed.lists_clean, Relaxed);
        writer.reuse.rolled_back(committed.reused);
        *self.entry.lock() = (committed.entry, committed.max_level as usize);
        // Slots past the commit will be reused under other ids, and deleted ids come back: the
        // map and the filters made from it are forgotten once the commit is published, so
        // that no search extends them from the snapshot before it (`with_ids`).
        self.publish(Snap::of(snap.st.clone(), &committed, true));
        self.forget_ids();
        Ok(())
    }

    /// Close: discard unflushed changes (as a crash would), leave the file as last flushed,
    /// and release the writer lock. Later calls on this index raise `Closed`.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, AcqRel) {
            return Ok(());
        }
        self.stop_warm();
        if self.read_only || self.memory {
            return Ok(());
        }
        let mut writer = self.writer.lock();
        let storage = self.view.read().st.clone();
        if writer.poisoned.is_none() {
            let had_log = !self.undo.lock().log.is_empty();
            self.rollback_locked(&mut writer)?;
            if had_log {
                commit::retire_after_rollback(&storage, &mut self.undo.lock().log)?;
            } else {
                // Empty or stale: nothing in it to keep.
                self.undo.lock().log.remove();
            }
            // The small commits reach the index file's blocks; the redo log goes.
            commit::checkpoint(&storage, &mut self.undo.lock().redo)?;
        }
        // A poisoned writer writes nothing, not even the rollback: the next open sorts out
        // which commit the disk holds (see `commit::commit`).
        // Snapshots may keep the mappings alive; the lock goes now.
        os::unlock(storage.file());
        Ok(())
    }
}
