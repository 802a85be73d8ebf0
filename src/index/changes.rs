//! The changes of the last commits, as byte ranges of the file, for a copy of it kept
//! elsewhere (a replica of a shard on another machine, `chassis.ray`): a copy at one of those
//! commits becomes a copy of the last one by writing the ranges' current bytes, then the
//! header. The same ranges a small commit writes to the redo log (`flush.rs`), for any commit
//! (the sharded-commit record).
//!
//! A chain of commits is kept, from the oldest a copy may be at: each commit adds its ranges.
//! It starts again (copies at older commits need the whole file) when a commit's changes are
//! not listed (a quantizer learned: every code changes), when it grows past `MAX_RANGES`, and
//! with every new file (a compaction), whose `lineage` is new.

use super::*;

/// Ranges kept before the chain starts again.
const MAX_RANGES: usize = 1 << 20;

/// The commits since `from`, as ranges of the file.
pub(super) struct Chain {
    /// Which file (a random number drawn for each storage this handle writes): sequences of
    /// another file (compacted) mean nothing here.
    pub lineage: u64,
    pub to: u64,
    pub ranges: Vec<(u64, usize)>,
    /// For each commit of the chain, the one before it and where its ranges start.
    pub starts: Vec<(u64, usize)>,
}

impl Chain {
    /// An empty chain at commit `seq` of a new lineage.
    pub fn new(seq: u64) -> Chain {
        use std::hash::BuildHasher;
        let lineage = std::collections::hash_map::RandomState::new().hash_one(seq);
        Chain { lineage, to: seq, ranges: Vec::new(), starts: Vec::new() }
    }

    /// Add commit `to`, made from commit `prev`; None: its changes are not listed.
    pub fn add(&mut self, prev: u64, to: u64, ranges: Option<Vec<(u64, usize)>>) {
        match ranges {
            Some(r) if prev == self.to && self.ranges.len() + r.len() <= MAX_RANGES => {
                self.starts.push((prev, self.ranges.len()));
                self.ranges.extend(r);
                self.to = to;
            }
            _ => {
                *self = Chain { lineage: self.lineage, to, ranges: Vec::new(), starts: Vec::new() }
            }
        }
    }

    /// The ranges changed since commit `seq`, if the chain reaches back to it.
    fn since(&self, seq: u64) -> Option<&[(u64, usize)]> {
        if seq == self.to {
            return Some(&[]);
        }
        let at = self.starts.iter().find(|s| s.0 == seq)?.1;
        Some(&self.ranges[at..])
    }
}

/// What a copy at an earlier commit writes to become a copy of the last one.
pub struct Changes {
    /// The commit it brings a copy to.
    pub seq: u64,
    /// The length the copy's file must have (its regions' end): set it first.
    pub len: u64,
    /// `(file offset, bytes)`, the header copy last: written in this order, the header after
    /// everything else is durable, a copy goes from one commit to the next as a flush does.
    pub pieces: Vec<(u64, Vec<u8>)>,
}

impl Index {
    /// `(lineage, seq)` of the last commit: what a copy of the file made now is a copy of.
    /// The first call starts keeping the changes of each commit (a large batch's are not
    /// listed otherwise).
    pub fn lineage(&self) -> Result<(u64, u64)> {
        self.check_open()?;
        let w = self.writer.lock();
        let mut u = self.undo.lock();
        if !self.keep_changes.swap(true, AcqRel) {
            u.changes.add(w.committed.seq, w.committed.seq, None);
        }
        Ok((u.changes.lineage, w.committed.seq))
    }

    /// What turns a copy of this file at commit `seq` of `lineage` into a copy of the last
    /// commit; None if that commit is not in the chain kept (the copy needs the whole file).
    /// Pending changes are not read: only a writer with nothing pending answers.
    pub fn changes_since(&self, lineage: u64, seq: u64) -> Result<Option<Changes>> {
        self.writable()?;
        if self.memory {
            return Err(Error::invalid(
                "an in-memory index has no file to keep a copy of",
                "use a file-backed index",
            ));
        }
        let w = self.writer.lock();
        if w.changed() {
            return Err(Error::invalid(
                "changes are read from a writer with nothing pending",
                "call flush() first",
            ));
        }
        let u = self.undo.lock();
        let c = &u.changes;
        if c.lineage != lineage || c.to != w.committed.seq {
            return Ok(None);
        }
        let Some(since) = c.since(seq) else { return Ok(None) };
        let mut ranges = since.to_vec();
        drop(u);
        let snap = self.view.read().clone();
        ranges.sort_unstable();
        let mut pieces: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut merged: Vec<(u64, usize)> = Vec::new();
        for (off, len) in ranges {
            match merged.last_mut() {
                Some(last) if off <= last.0 + last.1 as u64 => {
                    last.1 = last.1.max((off + len as u64 - last.0) as usize);
                }
                _ => merged.push((off, len)),
            }
        }
        for (off, len) in merged {
            let mut bytes = vec![0u8; len];
            snap.st.read_written(&mut bytes, off)?;
            pieces.push((off, bytes));
        }
        let header = crate::commit::header_copy_bytes(&snap.st, w.copy)?;
        pieces.push(((w.copy * format::HEADER_COPY_SIZE) as u64, header));
        snap.st.intact()?;
        let regions = &w.committed.regions;
        let len = regions.iter().map(|r| r.offset + r.len).max().unwrap_or(0);
        let len = len.max(2 * format::HEADER_COPY_SIZE as u64);
        Ok(Some(Changes { seq: w.committed.seq, len, pieces }))
    }
}
