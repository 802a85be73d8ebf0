//! The commit protocol: the order in which a flush makes a writer's changes durable, and how
//! the changes made since the last commit are undone (rollback, close, a writer that died).
//! A writer killed at any moment leaves the file exactly as last committed because of the
//! order of the steps in [`commit`] and the undo log they rely on.
//!
//! | file      | what it holds                                                               |
//! |-----------|-----------------------------------------------------------------------------|
//! | `mod.rs`  | [`commit`] (the flush order), [`roll_back`], [`retire_after_rollback`],      |
//! |           | [`replay_after_crash`], [`clear_stale_markers`], [`restore`]                |
//! | `undo.rs` | the undo log: committed contents of lists and markers, saved before a change |
//! | `copy.rs` | a commit copied to another file or into memory (save, backup, load)          |
//!
//! The index (`crate::index::flush`) decides when to commit and keeps its bookkeeping; this
//! module owns what reaches the disk and in which order.

pub mod copy;
pub mod undo;

use crate::error::Result;
use crate::format::{self, Header, RegionKind};
use crate::storage::{lists, Storage};
use std::path::Path;
use std::sync::atomic::Ordering::*;
use undo::{undo_path, Record, UndoLog};

/// Commit `next` (the writer's state, sequence one past the committed one) into header copy
/// `next_copy` (the copy not holding the last commit). On an error the caller must treat what
/// the disk holds as unknown (the page cache may hold the new header): it poisons the writer.
pub fn commit(
    storage: &Storage,
    undo_log: &mut UndoLog,
    next_copy: usize,
    next: &Header,
) -> Result<()> {
    // 1. The undo log first. It holds the committed contents of every list and delete marker
    //    changed since the last commit; from step 2 on those changes may reach the disk, and a
    //    crash must find the log there to put them back.
    undo_log.sync()?;
    // 2. The data: vectors, slot headers, lists and markers written through the mappings. The
    //    committed header does not count the new slots yet, so a crash here reopens as the last
    //    commit (new slots unreachable, changed lists put back from the log).
    storage.sync_data()?;
    // 3. The new header, into the other copy: a torn write leaves that copy failing its
    //    checksum, and an opener then takes the old copy, which is untouched.
    storage.write_header(next_copy, next)?;
    // 4. The header made durable: from here a reopen finds the new commit.
    storage.sync_data()?;
    // 5. Retire the log: its base sequence is no longer the committed one, so it is stale
    //    whether or not this truncation succeeds (an opener ignores a stale log).
    let _ = undo_log.clear();
    Ok(())
}

/// Undo every change since `committed`: the lists and delete markers the undo log saved are
/// put back, and the heap's used bytes return to the commit's. The log stays: the restored
/// lists are only in the page cache until the next sync, and it still describes the commit.
pub fn roll_back(storage: &Storage, path: &Path, committed: &Header) -> Result<()> {
    restore(storage, committed.slots, &UndoLog::read(path, committed.seq)?);
    let heaps = committed.regions.iter().filter(|r| r.kind == RegionKind::Heap);
    for (chunk, region) in heaps.enumerate() {
        storage.set_heap_used(chunk, region.used);
    }
    Ok(())
}

/// Closing after a rollback: the restored lists and markers made durable, then the log that
/// could restore them removed (in that order: a crash between the two finds the log and
/// restores the same contents again).
pub fn retire_after_rollback(storage: &Storage, undo_log: &mut UndoLog) -> Result<()> {
    storage.sync_data()?;
    undo_log.remove();
    Ok(())
}

/// A writer opening after a crash: put back the lists and markers the dead writer changed
/// after commit `seq` (of `slots` slots), make that durable, and remove the log. Returns how
/// many records were applied.
pub fn replay_after_crash(
    storage: &Storage,
    path: &Path,
    undo_log: &mut UndoLog,
    seq: u64,
    slots: u64,
) -> Result<usize> {
    if !undo_path(path).exists() {
        return Ok(0);
    }
    // 1. Records whose base is this commit (a stale log, from before it, holds none).
    let records = UndoLog::read(path, seq)?;
    // 2. Put them back, then sync, so that the log can go.
    let applied = restore(storage, slots, &records);
    if applied > 0 {
        storage.sync_data()?;
    }
    // 3. Remove the log.
    undo_log.remove();
    Ok(applied)
}

/// A writer opening on the older header copy (the newer one is damaged): the lost commit's
/// deletes left markers newer than the commit in use; clear them, so that the next commit
/// does not make them count. O(slots), and only in this case.
pub fn clear_stale_markers(storage: &Storage, seq: u64, slots: u64) -> Result<()> {
    let mut cleared = 0;
    for slot in 0..slots as u32 {
        let word = &storage.header(slot)[2];
        if let format::Marker::Deleted(marked) = format::read_marker(word.load(Relaxed), slot) {
            if marked > seq {
                word.store(0, Release);
                cleared += 1;
            }
        }
    }
    if cleared > 0 {
        storage.sync_data()?;
    }
    Ok(())
}

/// Put back what an undo log saved (records of slots below `committed_slots`); returns how
/// many records applied.
pub fn restore(storage: &Storage, committed_slots: u64, records: &[Record]) -> usize {
    let mut applied = 0;
    for record in records {
        match record {
            Record::Lists(slot, words)
                if (*slot as u64) < committed_slots && words.len() >= storage.geo.l0_words =>
            {
                lists::restore_lists(storage, *slot, words);
                applied += 1;
            }
            Record::Marker(slot, old) if (*slot as u64) < committed_slots => {
                storage.header(*slot)[2].store(*old, Release);
                applied += 1;
            }
            _ => {}
        }
    }
    applied
}
