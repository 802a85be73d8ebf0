//! Rewind: the rows of an earlier commit of this file brought back as a new change, for a
//! caller that commits several files as one (the sharded index, `chassis.ray`), whose flush
//! failed after some files had committed (the sharded-commit record).
//!
//! Rows are never rewritten in place and, in an index that rewinds, slots are never reused
//! (`reuse.rs`: a sharded index turns reuse off), so every row an earlier
//! commit held is still in its slot: a row added since is in a slot at or past that commit's
//! slot count, and a row deleted since carries a delete marker of a later sequence. A rewind
//! deletes the first kind and adds the second kind again, into new slots under their own ids,
//! so readers of the current commit see nothing change until the flush that commits it.
//!
//! The commit named must be one of this file's own: a compaction writes another file (its
//! sequences start again), and the caller must not rewind across one.

use super::*;
use write::Rows;

/// What a rewind changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewound {
    /// Rows added since the commit, deleted.
    pub removed: u64,
    /// Rows deleted since the commit, added again under their ids.
    pub restored: u64,
}

impl Index {
    /// The last commit: its sequence, slot count (live and deleted) and `user_version`.
    pub fn committed_state(&self) -> Result<(u64, u64, u64)> {
        self.check_open()?;
        let w = self.writer.lock();
        Ok((w.committed.seq, w.committed.slots, w.committed.user_version))
    }

    /// Take the rows back to those of this file's commit `seq`, which held `slots` slots, as
    /// one change committed by the next flush (`rollback()` undoes it). Nothing may be
    /// pending. A failure leaves the index as it was before the call.
    pub fn rewind(
        &self,
        slots: u64,
        seq: u64,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Rewound> {
        self.writable()?;
        if self.memory {
            return Err(Error::invalid(
                "an in-memory index has no commits to rewind to",
                "use a file-backed index",
            ));
        }
        let mut w = self.writer.lock();
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        if w.changed() {
            return Err(Error::invalid(
                "rewind needs an index with nothing pending",
                "call flush() or rollback() first",
            ));
        }
        if w.reuse.born {
            return Err(Error::invalid(
                "cannot rewind an index whose deleted rows' slots were reused: the rows of \
                 earlier commits are no longer all in their slots",
                "open the files a sharded index commits together with slot reuse off (as \
                 chassis.ray does)",
            ));
        }
        let c = &w.committed;
        if slots > c.slots || seq > c.seq {
            return Err(Error::invalid(
                format!(
                    "cannot rewind to commit {seq} of {slots} slots: the last commit is {} of {} \
                     slots",
                    c.seq, c.slots
                ),
                "pass a commit of this file no later than its last one (not one from before a \
                 compaction, which wrote another file)",
            ));
        }
        let snap = self.view.read().clone();
        let st = &snap.st;
        // Rows deleted by a later commit, in slots the commit held: their bytes and ids.
        let (mut bytes, mut ids) = (Vec::new(), Vec::new());
        for s in 0..slots as u32 {
            let h = st.header(s);
            let (id, upper, crcs) = (h[0].load(Relaxed), h[1].load(Relaxed), h[3].load(Relaxed));
            let later = matches!(
                format::read_marker(h[2].load(Acquire), s),
                format::Marker::Deleted(q) if q > seq
            );
            if !later {
                continue;
            }
            let row = st.vector_bytes(s);
            if format::header_crc(id, upper, crcs as u32) != (crcs >> 32) as u32
                || format::vector_crc(row) != crcs as u32
            {
                return Err(Error::new(
                    ErrorKind::CorruptIndex,
                    format!("slot {s} (id {id}) fails its checksum; it cannot be restored"),
                    "restore the index from a backup",
                ));
            }
            bytes.extend_from_slice(row);
            ids.push(id);
        }
        // Rows added since: every live row at or past the commit's slot count.
        let added: Vec<u64> = (slots..snap.slots).filter_map(|s| snap.live_id(s as u32)).collect();
        let result = (|| {
            let removed = self.delete_in(&mut w, &snap, &added)?.len() as u64;
            if !ids.is_empty() {
                self.consolidate_if_due(&mut w, threads, ctl)?;
                self.add_rows(&mut w, Rows::Stored(&bytes), ids.len(), Some(&ids), threads, ctl)?;
            }
            Ok(Rewound { removed, restored: ids.len() as u64 })
        })();
        if result.is_err() {
            // Everything it changed is in the undo log or past the commit.
            self.rollback_locked(&mut w)?;
        }
        result
    }
}
