//! Whole-file operations: save (an in-memory index to a file), backup (a consistent copy of
//! the last flush, also from a reader while the writer goes on) and compact (a rewrite without
//! deleted vectors, renamed over the original).

use super::*;
use crate::commit::undo::undo_path;
use crate::commit::{self, copy};
use crate::os;
use write::Rows;

impl Index {
    /// Write the index as an ordinary index file at `dest` (any reader or writer opens it),
    /// renamed into place only when whole and synced. A file-backed writer flushes first, as
    /// `backup` does; an in-memory index writes what it holds now. `dest` may be an index no
    /// writer holds; another existing file only with `overwrite` (see
    /// `copy::check_replaceable`). `ctl` counts the bytes copied and cancels (nothing is left
    /// at `dest` then).
    pub fn save(&self, dest: &Path, overwrite: bool, ctl: &Control) -> Result<()> {
        if !self.memory {
            return self.backup(dest, overwrite, ctl);
        }
        self.check_open()?;
        Self::check_dest(dest, None, overwrite)?;
        let w = self.writer.lock();
        let snap = self.view.read().clone();
        // Deletes are marked with the next sequence; the file's commit makes them count.
        let h = self.next_header(&w, &snap)?;
        let tmp = copy::tmp_sibling(dest, "saving");
        copy::put_in_place(
            copy::copy_commit(&snap.st, &h, &tmp, ctl).and_then(|()| copy::sync_file(&tmp)),
            &tmp,
            dest,
            overwrite,
        )
    }

    pub(super) fn check_dest(dest: &Path, itself: Option<&Path>, overwrite: bool) -> Result<()> {
        let dest_dir =
            dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if dest.as_os_str().is_empty() || dest.is_dir() || !dest_dir.is_dir() {
            return Err(Error::new(
                ErrorKind::InvalidPath,
                format!("cannot write an index to {:?}", dest.display().to_string()),
                "pass a file path in an existing directory",
            )
            .at(dest));
        }
        if let Some(me) = itself {
            if dest.exists() && copy::same_file(dest, me) {
                return Err(Error::invalid(
                    format!("{} is the index itself", dest.display()),
                    "pass another path",
                ));
            }
        }
        copy::check_replaceable(dest, overwrite)
    }

    /// Write a consistent copy of the last flush to `dest` (a writer flushes first), renamed
    /// into place only when whole. A reader copies while the writer keeps writing: lists the
    /// writer changed meanwhile are put back from its undo log. `dest` and `ctl` as for `save`.
    pub fn backup(&self, dest: &Path, overwrite: bool, ctl: &Control) -> Result<()> {
        if self.memory {
            return self.save(dest, overwrite, ctl);
        }
        self.check_open()?;
        Self::check_dest(dest, Some(&self.path), overwrite)?;
        let tmp = copy::tmp_sibling(dest, "backup");
        let res = if self.read_only {
            (|| {
                // The copy must fall between two flushes (a flush retires the undo log that
                // patches it), so nothing slow happens inside the window: the sync comes after.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while std::time::Instant::now() < deadline {
                    let snap = self.snap();
                    let h = self.writer.lock().committed.clone();
                    if h.seq != snap.seq {
                        continue;
                    }
                    let _ = std::fs::remove_file(&tmp); // an earlier attempt's
                    ctl.done.store(0, Relaxed);
                    copy::copy_commit(&snap.st, &h, &tmp, ctl)?;
                    // Lists changed since the commit: their committed contents are in the
                    // writer's undo log, saved before each change, so also before our copy.
                    let records = UndoLog::read(&self.path, h.seq)?;
                    if Self::newest_seq_on_disk(&snap.st) != h.seq {
                        continue; // a flush ran meanwhile: the log may be gone; copy again
                    }
                    copy::patch_copy(&snap.st, &h, &tmp, &records)?;
                    snap.st.intact()?;
                    return copy::sync_file(&tmp);
                }
                Err(Error::new(
                    ErrorKind::Io,
                    "the writer flushed during every backup attempt for 10 s",
                    "retry when it flushes less often, or back up from the writer",
                ))
            })()
        } else {
            let mut w = self.writer.lock();
            (|| {
                self.flush_locked(&mut w)?;
                let snap = self.view.read().clone();
                copy::copy_commit(&snap.st, &w.committed, &tmp, ctl)?;
                snap.st.intact()?;
                copy::sync_file(&tmp)
            })()
        };
        copy::put_in_place(res, &tmp, dest, overwrite)
    }

    /// Bytes `save` or `backup` would copy now, the length of their progress: a reader's
    /// commit; a writer's after the flush they start with (in memory: what it holds).
    pub fn copy_bytes(&self) -> u64 {
        let w = self.writer.lock();
        let snap = self.view.read().clone();
        let h = if self.read_only {
            w.committed.clone()
        } else {
            self.next_header(&w, &snap).unwrap_or_else(|_| w.committed.clone())
        };
        copy::commit_ranges(&snap.st, &h).iter().map(|r| r.1).sum()
    }

    /// Rewrite the index without its deleted vectors, with a rebuilt graph and the same ids,
    /// into a new file renamed over the old one (readers elsewhere follow by themselves).
    /// Flushes first. Cancelled or failed, it leaves the original untouched; only a failed
    /// sync of the folder after the rename leaves the compacted file in place, with the
    /// writer poisoned (a reopen finds one of the two files, each whole).
    pub fn compact(&self, threads: Option<usize>, ctl: &Control) -> Result<()> {
        self.writable()?;
        let mut w = self.writer.lock();
        self.flush_locked(&mut w)?;
        let snap = self.view.read().clone();
        // In insertion order, which the compacted index keeps.
        let live: Vec<u32> = Self::live_in_order(&snap).into_iter().map(|(s, _)| s).collect();
        let g = &self.geo;
        if self.memory {
            let new = Index::memory(g.dims, Some(&self.opts))?;
            Self::refill(&new, &snap, &live, &w, threads, ctl)?;
            self.adopt(&mut w, new, &snap);
            return Ok(());
        }
        let need = live.len() as u64
            * (g.stride + format::SLOT_HEADER + 4 * g.l0_words + 2 * 4 * g.upper_words) as u64
            + (8 << 20);
        if let Some(free) = os::free_space(&self.path) {
            if free < need {
                return Err(Error {
                    kind: ErrorKind::Io,
                    message: format!(
                        "compacting {} needs about {} MiB of free disk space; {} MiB are free",
                        self.path.display(),
                        need >> 20,
                        free >> 20
                    ),
                    help: "free disk space, then retry; the index is unchanged".into(),
                    errno: Some(os::ENOSPC),
                    path: Some(self.path.clone()),
                });
            }
        }
        // The old file made durable and its redo log gone before the new file replaces it: a
        // log is never left beside a file it does not belong to.
        if let Err(e) = commit::checkpoint(&snap.st, &mut self.undo.lock().redo) {
            // A failed sync may leave pages marked clean that never reached the disk, and a
            // later sync would succeed without them: nothing more is written (the redo log,
            // kept, has them for the next open).
            w.poisoned = Some(Poison::of(&e, false));
            return Err(e);
        }
        let tmp = copy::tmp_sibling(&self.path, "compacting");
        let cleanup = || {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(undo_path(&tmp));
            let _ = std::fs::remove_file(redo::redo_path(&tmp));
        };
        let built = (|| -> Result<Index> {
            let new = Index::open(&tmp, Some(g.dims), Some(&self.opts), Mode::Write)?;
            Self::refill(&new, &snap, &live, &w, threads, ctl)?;
            new.flush_locked(&mut new.writer.lock())?;
            // A small flush (few live rows) went to the new file's redo log: the new file whole
            // on its own before it takes the index's name.
            commit::checkpoint(&new.view.read().st, &mut new.undo.lock().redo)?;
            Ok(new)
        })();
        let new = match built {
            Ok(n) => n,
            Err(e) => {
                cleanup();
                return Err(e);
            }
        };
        // The old file's undo log goes first, its removal durable: everything is committed (the
        // flush above), and the log names no file, only a sequence the new file may reach too.
        let gone = self.undo.lock().log.try_remove().and_then(|()| {
            os::sync_dir(&self.path).map_err(|e| Error::io(e, "syncing the folder of", &self.path))
        });
        if let Err(e) = gone {
            drop(new);
            cleanup();
            return Err(e);
        }
        if let Err(e) = std::fs::rename(&tmp, &self.path) {
            drop(new);
            cleanup();
            return Err(Error::io(e, "renaming the compacted file over", &self.path));
        }
        // The new name made durable: else a power loss could bring back the old file, and
        // the flushes made to the new one would be lost with it.
        let named =
            os::sync_dir(&self.path).map_err(|e| Error::io(e, "syncing the folder of", &self.path));
        self.adopt(&mut w, new, &snap);
        let _ = std::fs::remove_file(undo_path(&tmp));
        if let Err(e) = named {
            // The compacted file is in place, but its name may not survive a power loss: no
            // flush may be promised through it.
            w.poisoned = Some(Poison::of(&e, true));
            return Err(e);
        }
        Ok(())
    }

    /// Add the live vectors `live` of `snap` to the new, empty index `new` (compaction), with
    /// their ids, the next id and user_version of `w`.
    pub(super) fn refill(
        new: &Index,
        snap: &Snap,
        live: &[u32],
        w: &Writer,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        let vb = new.geo.vec_bytes;
        let mut bytes = vec![0u8; live.len() * vb];
        let mut ids = Vec::with_capacity(live.len());
        // Live slots in insertion order: mostly in file order, so read ahead.
        let scan = snap.st.sequential_scan(snap.slots);
        for (i, &s) in live.iter().enumerate() {
            bytes[i * vb..(i + 1) * vb].copy_from_slice(snap.st.vector_bytes(s));
            ids.push(snap.live_id(s).expect("live"));
        }
        drop(scan);
        let mut nw = new.writer.lock();
        // A codes-only index keeps its quantizer (its codes are copied as they are); beside
        // float vectors a trained quantizer is learned again, from the live vectors (evenly
        // spread).
        if let (Some(q), Precision::CodesOnly) = (&snap.quant, new.precision()) {
            new.install_quantizer_locked(&mut nw, q)?;
        } else if snap.quant.is_some() && !live.is_empty() {
            let d = new.geo.dims;
            let take = live.len().min(100_000);
            let mut sample = vec![0f32; take * d];
            for (i, row) in sample.chunks_exact_mut(d).enumerate() {
                let s = live[i * live.len() / take];
                format::decode_vector(snap.st.vector_bytes(s), new.precision(), row);
            }
            new.train_locked(&mut nw, &sample, take, threads, ctl)?;
        }
        new.add_rows(&mut nw, Rows::Stored(&bytes), live.len(), Some(&ids), threads, ctl)?;
        nw.next_id = nw.next_id.max(w.next_id);
        nw.user_version = w.user_version;
        Ok(())
    }

    /// Take over a compacted index: its storage (and a file's writer lock) becomes ours.
    pub(super) fn adopt(&self, w: &mut Writer, new: Index, old: &Snap) {
        new.closed.store(true, Release);
        let nsnap = new.view.read().clone();
        std::mem::swap(w, &mut *new.writer.lock());
        // The new file's free slots (none), this handle's choice of reuse.
        w.reuse.off = new.writer.lock().reuse.off;
        *self.entry.lock() = *new.entry.lock();
        self.forget_ids();
        {
            let mut u = self.undo.lock();
            if !self.memory {
                u.log.remove();
                u.redo.remove();
                u.redo = RedoLog::new(&self.path, nsnap.st.file.as_ref().map_or(0, redo::file_id));
            }
            u.saved.clear();
            u.marked.clear();
            u.reused.clear();
            // Another file: a copy of the old one cannot follow it.
            u.changes = changes::Chain::new(nsnap.seq);
        }
        // The compacted file holds no deleted row.
        self.unlinked_deletes.store(false, Relaxed);
        self.publish(Snap::clone_of(&nsnap));
        self.residency.reset();
        drop(new);
        if self.memory {
            nsnap.st.advise_stores(old.st.huge.load(Acquire));
            return;
        }
        nsnap.st.huge.store(old.st.huge.load(Acquire), Release);
        self.advise_committed(&nsnap.st, nsnap.slots);
        if self.warm_on.load(Acquire) {
            drop(self.warm.lock().take());
            *self.warm.lock() =
                Some(Warm::start(nsnap.st.clone(), nsnap.slots, self.warm_vectors.load(Acquire)));
        }
    }
}
