//! flush, rollback and close: the index's bookkeeping around the commit protocol, whose order
//! of writes and syncs is in `crate::commit`.

use super::*;
use crate::commit;
use crate::os;

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
        next.live = writer.live;
        next.next_id = writer.next_id;
        next.entry = snap.entry;
        next.max_level = snap.max_level as u32;
        next.user_version = writer.user_version;
        next.quantizer = writer.quantizer;
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
        let committed = &writer.committed;
        if writer.slots == committed.slots
            && writer.user_version == committed.user_version
            && writer.deletes == 0
            && writer.next_id == committed.next_id
            && writer.quantizer == committed.quantizer
        {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let next = self.next_header(writer, &snap)?;
        let mut undo = self.undo.lock();
        if let Err(failed) = commit::commit(&snap.st, &mut undo.log, 1 - writer.copy, &next) {
            // What the disk holds is one of two commits now: write nothing more.
            let poison = Poison {
                message: failed.error.message.clone(),
                errno: failed.error.errno,
                header_may_land: failed.header_may_land,
            };
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
        drop(undo);
        writer.copy = 1 - writer.copy;
        self.publish(Snap::of(snap.st.clone(), &next, true));
        writer.deletes = 0;
        self.advise_committed(&snap.st, next.slots);
        writer.committed = next;
        Ok(())
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
        let dirty = writer.slots != writer.committed.slots
            || writer.user_version != writer.committed.user_version
            || writer.deletes != 0
            || writer.quantizer != writer.committed.quantizer;
        if !dirty && self.undo.lock().log.is_empty() {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let committed = writer.committed.clone();
        commit::roll_back(&snap.st, &self.path, &committed)?;
        writer.slots = committed.slots;
        writer.live = committed.live;
        writer.next_id = committed.next_id;
        writer.user_version = committed.user_version;
        writer.quantizer = committed.quantizer;
        writer.deletes = 0;
        *self.entry.lock() = (committed.entry, committed.max_level as usize);
        // Slots past the commit will be reused under other ids, and deleted ids come back.
        *self.ids.lock() = IdMap::default();
        self.publish(Snap::of(snap.st.clone(), &committed, true));
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
        }
        // A poisoned writer writes nothing, not even the rollback: the next open sorts out
        // which commit the disk holds (see `commit::commit`).
        // Snapshots may keep the mappings alive; the lock goes now.
        os::unlock(storage.file());
        Ok(())
    }
}
