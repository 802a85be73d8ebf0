//! The commit protocol: the order in which a flush makes a writer's changes durable, and how
//! the changes made since the last commit are undone (rollback, close, a writer that died).
//! A writer killed at any moment leaves the file exactly as last committed because of the
//! order of the steps in [`commit`] and the undo log they rely on.
//!
//! | file      | what it holds                                                               |
//! |-----------|-----------------------------------------------------------------------------|
//! | `mod.rs`  | [`commit`] (the flush order), [`commit_logged`] (a small commit's order),   |
//! |           | [`checkpoint`], [`roll_back`], [`retire_after_rollback`],                  |
//! |           | [`replay_after_crash`], [`forget_lost_commit`], [`restore`]                |
//! | `undo.rs` | the undo log: committed contents of lists and markers, saved before a change |
//! | `redo.rs` | the redo log: a small commit's new bytes, made durable by one sync           |
//! | `copy.rs` | a commit copied to another file or into memory (save, backup, load)          |
//!
//! The index (`crate::index::flush`) decides when to commit and keeps its bookkeeping; this
//! module owns what reaches the disk and in which order.

pub mod copy;
pub mod redo;
pub mod undo;

use crate::error::{Error, Result};
use crate::format::{self, Header, RegionKind, HEADER_COPY_SIZE};
use crate::storage::{lists, Storage};
use redo::RedoLog;
use std::path::Path;
use std::sync::atomic::Ordering::*;
use undo::{undo_path, Record, UndoLog};

/// Open (or create) a log beside the index (`<path>.undo`, `<path>.redo`) for reading and
/// writing, keeping what it holds.
fn open_log(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(e, "opening", path))
}

/// A commit that failed, and what the file reopens as after it.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    /// Whether the new header may reach the disk anyway (its write or its sync failed, so it
    /// may be in the page cache): a reopen then finds either the last commit or this one,
    /// each whole. False: a reopen finds the last commit.
    pub header_may_land: bool,
}

/// Commit `next` (the writer's state, sequence one past the committed one) into header copy
/// `next_copy` (the copy not holding the last commit).
///
/// On a failure nothing more is written, and the caller must write nothing more either: the
/// page cache may hold the new header, and putting back the last commit's lists beside it
/// (a rollback, a close) would make a file that no commit ever was. What the disk holds is
/// then sorted out by the next open: the undo log (kept) puts the lists back if the old
/// header is the one on disk, and is stale, so ignored, if the new one landed.
pub fn commit(
    storage: &Storage,
    undo_log: &mut UndoLog,
    next_copy: usize,
    next: &Header,
) -> std::result::Result<(), Failed> {
    let before_header = |error| Failed { error, header_may_land: false };
    let after_header = |error| Failed { error, header_may_land: true };
    // 1. The undo log first. It holds the committed contents of every list and delete marker
    //    changed since the last commit; from step 2 on those changes may reach the disk, and a
    //    crash must find the log there to put them back.
    undo_log.sync().map_err(before_header)?;
    // 2. The data: vectors, slot headers, lists and markers written through the mappings. The
    //    committed header does not count the new slots yet, so a crash here reopens as the last
    //    commit (new slots unreachable, changed lists put back from the log).
    storage.sync_data().map_err(before_header)?;
    //    No commit of a file that shrank underneath the mappings: what they wrote past its
    //    end went nowhere (`os::Watch`).
    storage.intact().map_err(before_header)?;
    // 3. The new header, into the other copy: a torn write leaves that copy failing its
    //    checksum, and an opener then takes the old copy, which is untouched.
    storage.write_header(next_copy, next).map_err(after_header)?;
    // 4. The header made durable: from here a reopen finds the new commit.
    storage.sync_data().map_err(after_header)?;
    // 5. Retire the log: its base sequence is no longer the committed one, so it is stale
    //    (an opener ignores a stale log); the next change starts a new cycle over it.
    undo_log.clear();
    Ok(())
}

/// Commit `next` through the redo log: a small commit (`redo.rs` says why), whose changes since
/// the last commit lie in the file ranges `changed` (new slots' rows, changed lists, markers,
/// new upper lists). One sync; the index file's pages reach the disk at the next
/// [`checkpoint`]. Failures are as for [`commit`]: after step 2 the record may land, and a
/// reopen then finds this commit.
pub fn commit_logged(
    storage: &Storage,
    undo_log: &mut UndoLog,
    redo: &mut RedoLog,
    next_copy: usize,
    next: &Header,
    changed: &[(u64, usize)],
) -> std::result::Result<(), Failed> {
    let before_header = |error| Failed { error, header_may_land: false };
    let after_header = |error| Failed { error, header_may_land: true };
    // 1. The new bytes, read back from the mapping (the caller holds the writer lock: nothing
    //    changes them meanwhile; a pread each cost more), and the new header, as the record's
    //    pieces.
    let mut pieces = Vec::with_capacity(changed.len() + 1);
    for &(offset, len) in changed {
        let mut bytes = vec![0u8; len];
        storage.read_written(&mut bytes, offset).map_err(before_header)?;
        pieces.push((offset, bytes));
    }
    pieces.push(((next_copy * HEADER_COPY_SIZE) as u64, next.encode()));
    // The first record of a cycle names the header it starts from by the hash of its bytes as
    // the file holds them (the other copy), so that a log is never applied to other contents.
    let base_header = if redo.has_records() {
        Vec::new()
    } else {
        read_header_copy(storage, 1 - next_copy).map_err(before_header)?
    };
    // Nor a record of bytes read as zeros where the file shrank underneath (`os::Watch`).
    storage.intact().map_err(before_header)?;
    // 2. The record, appended and synced: from here a reopen finds this commit (a writer
    //    applies the record where the index file lacks it). The undo log needs no sync: until
    //    the record is durable, a power loss is one before this flush, whose promise (links
    //    put back where their undo records reached the disk) is the same.
    redo.append(next.seq, &pieces, &base_header).map_err(after_header)?;
    // 3. The header into the older copy, through the page cache: readers see the commit now;
    //    the disk gets it at the checkpoint (the record stands for it meanwhile).
    storage.write_header(next_copy, next).map_err(after_header)?;
    // 4. The undo log is stale: the next change starts a new cycle.
    undo_log.clear();
    Ok(())
}

/// The bytes of header copy `copy` as the file holds them (its body length, then the body and
/// its checksum).
pub fn header_copy_bytes(storage: &Storage, copy: usize) -> Result<Vec<u8>> {
    read_header_copy(storage, copy)
}

fn read_header_copy(storage: &Storage, copy: usize) -> Result<Vec<u8>> {
    let at = (copy * HEADER_COPY_SIZE) as u64;
    let mut head = [0u8; 16];
    storage.read_at(&mut head, at)?;
    let len = format::copy_len(&head).unwrap_or(HEADER_COPY_SIZE);
    let mut bytes = vec![0u8; len.min(HEADER_COPY_SIZE)];
    storage.read_at(&mut bytes, at)?;
    Ok(bytes)
}

/// Make the commits in the redo log durable in the index file (sync its data: they are all in
/// the page cache), then remove the log (a stale one too). A crash before the log goes finds records the file
/// holds already: applying them again changes nothing.
pub fn checkpoint(storage: &Storage, redo: &mut RedoLog) -> Result<()> {
    if redo.has_records() {
        storage.sync_data()?;
    }
    redo.remove();
    Ok(())
}

/// Undo every change since `committed`: the lists and delete markers the undo log saved are
/// put back, the heap's used bytes return to the commit's, and the disk blocks reserved for
/// the slots and lists never committed are given back (`Storage::give_back`). The log stays: the restored
/// lists are only in the page cache until the next sync, and it still describes the commit.
pub fn roll_back(storage: &Storage, path: &Path, committed: &Header) -> Result<()> {
    restore(storage, committed.slots, &UndoLog::read(path, committed.seq)?);
    // Heap chunks back to what the commit used; chunks added since hold nothing committed.
    let committed_heaps: Vec<u32> =
        committed.regions.iter().filter(|r| r.kind == RegionKind::Heap).map(|r| r.used).collect();
    for chunk in 0..storage.heap_chunks() {
        storage.set_heap_used(chunk, committed_heaps.get(chunk).copied().unwrap_or(0));
    }
    // The blocks reserved for what was never committed go back to the filesystem.
    storage.give_back(committed.slots);
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

/// A writer opening on the older header copy (the newer one is damaged): what the lost
/// commit left behind is forgotten, so that the next commit does not make it count and
/// `check` does not report it as damage. O(slots), and only in this case.
/// - its deletes left markers newer than the commit in use: cleared; the slots it reused
///   (rows visible from a newer commit) are deleted rows again;
/// - its links into the slots it added (at or past the slot count in use) are dropped from
///   the lists of the slots before them.
pub fn forget_lost_commit(storage: &Storage, seq: u64, slots: u64) -> Result<()> {
    let mut changed = 0;
    for slot in 0..slots as u32 {
        let word = &storage.header(slot)[2];
        match format::read_marker(word.load(Relaxed), slot) {
            format::Marker::Deleted(marked) if marked > seq => {
                word.store(0, Release);
                changed += 1;
            }
            // A slot the lost commit reused held a row deleted by the commit in use (or an
            // earlier one, which a reader still open may hold: deleted from commit 1 on).
            format::Marker::Born(born) if born > seq => {
                word.store(format::delete_marker(1, slot), Release);
                changed += 1;
            }
            _ => {}
        }
        let level = lists::level_of(storage, slot);
        for layer in 0..=level.min(format::MAX_LEVEL) {
            let Some(list) = lists::list_of(storage, slot, layer) else { continue };
            let entries: Vec<u32> = lists::entries(list).iter().map(|e| e.load(Relaxed)).collect();
            if entries.iter().any(|&e| e as u64 >= slots) {
                let kept: Vec<u32> = entries.into_iter().filter(|&e| (e as u64) < slots).collect();
                lists::write_list(list, slot, layer, &kept, level);
                changed += 1;
            }
        }
    }
    if changed > 0 {
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
