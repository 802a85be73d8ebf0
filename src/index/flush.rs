//! flush, rollback and close: the index's bookkeeping around the commit protocol, whose order
//! of writes and syncs is in `crate::commit`.

use super::*;
use crate::commit;
use crate::os;

impl Index {
    /// The header that commits the writer's state now (the next sequence number).
    pub(super) fn next_header(w: &Writer, snap: &Snap) -> Header {
        let mut h = w.committed.clone();
        h.seq += 1;
        h.slots = w.slots;
        h.live = w.live;
        h.next_id = w.next_id;
        h.entry = snap.entry;
        h.max_level = snap.max_level as u32;
        h.user_version = w.user_version;
        h.regions = snap.st.regions();
        h
    }

    pub(super) fn poisoned_error(&self) -> Error {
        Error::new(
            ErrorKind::Io,
            format!(
                "an earlier flush of {} failed; what the disk holds is unknown",
                self.path.display()
            ),
            "close and reopen the index; it reopens as of the last successful flush",
        )
    }

    /// Make every change durable. Does nothing when nothing changed. Searches go on meanwhile.
    /// In memory: nothing to do (there is no file; `save` writes one).
    pub fn flush(&self) -> Result<()> {
        self.writable()?;
        if self.memory {
            return Ok(());
        }
        let mut w = self.writer.lock();
        self.flush_locked(&mut w)
    }

    pub(super) fn flush_locked(&self, w: &mut Writer) -> Result<()> {
        if self.memory {
            return Ok(());
        }
        if w.poisoned {
            return Err(self.poisoned_error());
        }
        if w.slots == w.committed.slots
            && w.user_version == w.committed.user_version
            && w.deletes == 0
            && w.next_id == w.committed.next_id
        {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let h = Self::next_header(w, &snap);
        let mut undo = self.undo.lock();
        if let Err(e) = commit::commit(&snap.st, &mut undo.log, 1 - w.copy, &h) {
            w.poisoned = true;
            return Err(e);
        }
        undo.saved.clear();
        drop(undo);
        w.copy = 1 - w.copy;
        self.publish(Snap::of(snap.st.clone(), &h, true));
        w.deletes = 0;
        self.advise_committed(&snap.st, h.slots);
        w.committed = h;
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
        let mut w = self.writer.lock();
        self.rollback_locked(&mut w)
    }

    pub(super) fn rollback_locked(&self, w: &mut Writer) -> Result<()> {
        let dirty = w.slots != w.committed.slots
            || w.user_version != w.committed.user_version
            || w.deletes != 0;
        if !dirty && self.undo.lock().log.is_empty() {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let h = w.committed.clone();
        commit::roll_back(&snap.st, &self.path, &h)?;
        w.slots = h.slots;
        w.live = h.live;
        w.next_id = h.next_id;
        w.user_version = h.user_version;
        w.deletes = 0;
        *self.entry.lock() = (h.entry, h.max_level as usize);
        // Slots past the commit will be reused under other ids, and deleted ids come back.
        *self.ids.lock() = IdMap::default();
        self.publish(Snap::of(snap.st.clone(), &h, true));
        // The log stays: the restored lists are only in the page cache until the next sync,
        // and the log still describes the committed state.
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
        let mut w = self.writer.lock();
        let had_log = !self.undo.lock().log.is_empty();
        self.rollback_locked(&mut w)?;
        let st = self.view.read().st.clone();
        if had_log && !w.poisoned {
            st.sync_data()?;
            self.undo.lock().log.remove();
        }
        // Snapshots may keep the mappings alive; the lock goes now.
        os::unlock(st.file());
        Ok(())
    }
}
