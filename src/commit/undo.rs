//! The undo log, `<index path>.undo`: the lists of committed nodes as they were at the last
//! commit, saved before their first change after it.
//!
//! ```text
//! header (24 bytes): magic "CHUNDO\0\x03" | base_seq u64 | xxh3 of the first 16 bytes
//! records:           slot u32 | n u32 | n x u32 | xxh3 (u64) of slot, n and data, seeded
//!                    with base_seq
//!   lists:           n = the node's list words
//!   markers:         n with bit 30 set: the low bits are 3 x k words, k old delete markers
//!                    as (slot, marker low half, high half); `slot` is k
//! ```
//!
//! Versions 1 ("CHUNDO\0\x01", checksums unseeded) and 2 (markers one per record, n with
//! bit 31 set and 2 words) are still read. Markers go k to a record so that a batch delete
//! hashes and writes 12 bytes per row, not 24 and a checksum each.
//!
//! Records are written with `pwrite` before the list changes, so they are in the page cache
//! (and survive the writer being killed) before the mapping is touched; a flush syncs this file
//! before the index's data, then commits the header, after which the log is stale (its
//! `base_seq` is no longer the committed one). It is not truncated: the next cycle writes over
//! it from the start (a truncation and the regrowth cost a metadata sync each flush), and the
//! records of an earlier cycle past the new ones fail their checksum, which is seeded with the
//! cycle's `base_seq`. A writer that opens a file whose
//! log's `base_seq` equals the committed sequence puts the lists back, syncs, and removes it.
//! A torn last record (the writer died while appending it) fails its checksum; the list it
//! would have covered had not been changed yet, so replay stops there.

use crate::error::{Error, Result};
use crate::os;
use std::fs::File;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

const MAGIC: [u8; 8] = *b"CHUNDO\0\x03";
/// Version 2: one marker per record (`MARKER`); 1: record checksums not seeded too.
const MAGIC_V2: [u8; 8] = *b"CHUNDO\0\x02";
const MAGIC_V1: [u8; 8] = *b"CHUNDO\0\x01";
const HEADER: u64 = 24;
/// A version-2 record of one marker.
const MARKER: u32 = 1 << 31;
/// A record of k markers (version 3).
const MARKERS: u32 = 1 << 30;
/// Words a record holds at most (a list, or the markers of `MAX_WORDS / 3` slots).
const MAX_WORDS: usize = 1 << 20;

/// One saved thing: a node's lists, or a slot's delete marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Lists(u32, Vec<u32>),
    Marker(u32, u64),
}

pub fn undo_path(index: &Path) -> PathBuf {
    let mut p = index.as_os_str().to_owned();
    p.push(".undo");
    PathBuf::from(p)
}

pub struct UndoLog {
    path: PathBuf,
    file: Option<File>,
    /// Append position; 0 means nothing recorded since the last commit.
    cursor: u64,
    /// Records not yet synced.
    dirty: bool,
}

impl UndoLog {
    pub fn new(index: &Path) -> UndoLog {
        UndoLog { path: undo_path(index), file: None, cursor: 0, dirty: false }
    }

    pub fn is_empty(&self) -> bool {
        self.cursor == 0
    }

    fn file(&mut self) -> Result<&File> {
        if self.file.is_none() {
            self.file = Some(super::open_log(&self.path)?);
        }
        Ok(self.file.as_ref().unwrap())
    }

    /// Save `words` (a node's lists) for `slot`, restoring to commit `base_seq`.
    pub fn record(&mut self, base_seq: u64, slot: u32, words: &[u32]) -> Result<()> {
        self.append(base_seq, &[(slot, words.len() as u32, words)])
    }

    /// Save several nodes' lists with one write.
    pub fn record_many(&mut self, base_seq: u64, lists: &[(u32, Vec<u32>)]) -> Result<()> {
        let recs: Vec<(u32, u32, &[u32])> =
            lists.iter().map(|(s, w)| (*s, w.len() as u32, &w[..])).collect();
        self.append(base_seq, &recs)
    }

    /// Save the delete marker of `slot` before it changes.
    pub fn record_marker(&mut self, base_seq: u64, slot: u32, old: u64) -> Result<()> {
        self.record_markers(base_seq, [(slot, old)])
    }

    /// Save the delete markers of several slots, (slot, marker) each, with one write.
    pub fn record_markers(
        &mut self,
        base_seq: u64,
        old: impl IntoIterator<Item = (u32, u64)>,
    ) -> Result<()> {
        let mut buf = self.start_buf(base_seq);
        let mut old = old.into_iter().peekable();
        while old.peek().is_some() {
            let start = buf.len();
            buf.extend_from_slice(&[0; 8]);
            let mut k = 0u32;
            for (s, m) in old.by_ref().take(MAX_WORDS / 3) {
                buf.extend(s.to_le_bytes().into_iter().chain(m.to_le_bytes()));
                k += 1;
            }
            buf[start..start + 4].copy_from_slice(&k.to_le_bytes());
            buf[start + 4..start + 8].copy_from_slice(&(MARKERS | (3 * k)).to_le_bytes());
            let c = xxh3_64_with_seed(&buf[start..], base_seq);
            buf.extend_from_slice(&c.to_le_bytes());
        }
        self.write_buf(&buf)
    }

    /// Append records (slot, n, words) with one write.
    fn append(&mut self, base_seq: u64, recs: &[(u32, u32, &[u32])]) -> Result<()> {
        let mut buf = self.start_buf(base_seq);
        for &(slot, n, words) in recs {
            let start = buf.len();
            buf.extend_from_slice(&slot.to_le_bytes());
            buf.extend_from_slice(&n.to_le_bytes());
            buf.extend(words.iter().flat_map(|w| w.to_le_bytes()));
            let c = xxh3_64_with_seed(&buf[start..], base_seq);
            buf.extend_from_slice(&c.to_le_bytes());
        }
        self.write_buf(&buf)
    }

    /// A buffer for the next records: the first of a cycle carries the header too (after
    /// every small commit, each add starts a cycle).
    fn start_buf(&self, base_seq: u64) -> Vec<u8> {
        let mut buf = Vec::new();
        if self.cursor == 0 {
            buf.extend_from_slice(&MAGIC);
            buf.extend_from_slice(&base_seq.to_le_bytes());
            let c = xxh3_64(&buf[..16]);
            buf.extend_from_slice(&c.to_le_bytes());
            debug_assert_eq!(buf.len(), HEADER as usize);
        }
        buf
    }

    fn write_buf(&mut self, buf: &[u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let at = self.cursor;
        let path = self.path.clone();
        os::write_all_at(self.file()?, buf, at).map_err(|e| Error::io(e, "writing", &path))?;
        self.cursor += buf.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// Make the records durable (before the index's data is synced).
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            let path = self.path.clone();
            self.file()?.sync_data().map_err(|e| Error::io(e, "syncing", &path))?;
            self.dirty = false;
        }
        Ok(())
    }

    /// After a commit: the records are stale (a log left by a crash is recognised as such by
    /// its `base_seq`); the next record starts a new cycle over them. Nothing is written.
    pub fn clear(&mut self) {
        self.cursor = 0;
        self.dirty = false;
    }

    /// Remove the file (on close, or after a replay).
    pub fn remove(&mut self) {
        let _ = self.try_remove();
    }

    /// `remove`, saying whether the file is gone (a log that was not there is).
    pub fn try_remove(&mut self) -> Result<()> {
        self.file = None;
        self.cursor = 0;
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(e, "removing", &self.path))
            }
            _ => Ok(()),
        }
    }

    /// The valid records of the log at `index`'s undo path if it restores to `base_seq`;
    /// an empty list if there is no log, or it belongs to another commit.
    pub fn read(index: &Path, base_seq: u64) -> Result<Vec<Record>> {
        let path = undo_path(index);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(e, "reading", &path)),
        };
        parse(std::io::BufReader::new(file), base_seq).map_err(|e| Error::io(e, "reading", &path))
    }
}

/// The valid records of a log read from `r`, one at a time: a log of another commit is not
/// read past its header, and memory holds no more than the valid records (a log's stale or
/// crafted tail, however long, is not read into memory whole).
fn parse(mut r: impl std::io::Read, base_seq: u64) -> std::io::Result<Vec<Record>> {
    let mut out = Vec::new();
    // Exactly `buf.len()` bytes, or false at the end of the log (a torn tail included).
    let mut fill = |buf: &mut [u8]| -> std::io::Result<bool> {
        match r.read_exact(buf) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    };
    let mut head = [0u8; HEADER as usize];
    if !fill(&mut head)?
        || ![MAGIC, MAGIC_V2, MAGIC_V1].iter().any(|m| head[0..8] == *m)
        || xxh3_64(&head[..16]).to_le_bytes() != head[16..24]
        || u64::from_le_bytes(head[8..16].try_into().unwrap()) != base_seq
    {
        return Ok(out);
    }
    let seeded = head[0..8] != MAGIC_V1;
    let markers = if head[0..8] == MAGIC { MARKERS } else { MARKER };
    let mut rec = Vec::new();
    loop {
        rec.resize(8, 0);
        if !fill(&mut rec[..8])? {
            break;
        }
        let slot = u32::from_le_bytes(rec[0..4].try_into().unwrap());
        let raw_n = u32::from_le_bytes(rec[4..8].try_into().unwrap());
        let n = (raw_n & !markers) as usize;
        if n > MAX_WORDS {
            break;
        }
        let end = 8 + 4 * n;
        rec.resize(end + 8, 0);
        if !fill(&mut rec[8..])? {
            break;
        }
        let c =
            if seeded { xxh3_64_with_seed(&rec[..end], base_seq) } else { xxh3_64(&rec[..end]) };
        if c.to_le_bytes() != rec[end..end + 8] {
            break;
        }
        let words: Vec<u32> = rec[8..end]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        if raw_n & markers == 0 {
            out.push(Record::Lists(slot, words));
        } else if markers == MARKER {
            if words.len() == 2 {
                out.push(Record::Marker(slot, words[0] as u64 | (words[1] as u64) << 32));
            }
        } else {
            let marker = |w: &[u32]| Record::Marker(w[0], w[1] as u64 | (w[2] as u64) << 32);
            out.extend(words.chunks_exact(3).map(marker));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log whose tail is 16 GiB of zeros (sparse: a crafted file, or a stale tail): read one
    /// record at a time, it gives its valid records without holding the tail in memory (read
    /// whole, it asked for 16 GiB and aborted the process). Oracle: the records written.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_huge_tail_is_not_read_into_memory() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("a.chassis");
        let mut u = UndoLog::new(&idx);
        u.record(5, 3, &[1, 2, 3]).unwrap();
        drop(u);
        let f = std::fs::OpenOptions::new().write(true).open(undo_path(&idx)).unwrap();
        f.set_len(16 << 30).unwrap();
        drop(f);
        assert_eq!(UndoLog::read(&idx, 5).unwrap(), vec![Record::Lists(3, vec![1, 2, 3])]);
        assert!(UndoLog::read(&idx, 4).unwrap().is_empty());
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("a.chassis");
        let mut u = UndoLog::new(&idx);
        u.record(5, 3, &[1, 2, 3]).unwrap();
        u.record(5, 9, &[4]).unwrap();
        u.record_marker(5, 11, 0xdead_beef_0000_0001).unwrap();
        u.record_markers(5, [(20, 1), (21, u64::MAX)]).unwrap();
        u.record(5, 12, &[7]).unwrap();
        assert_eq!(
            UndoLog::read(&idx, 5).unwrap(),
            vec![
                Record::Lists(3, vec![1, 2, 3]),
                Record::Lists(9, vec![4]),
                Record::Marker(11, 0xdead_beef_0000_0001),
                Record::Marker(20, 1),
                Record::Marker(21, u64::MAX),
                Record::Lists(12, vec![7])
            ]
        );
        assert!(UndoLog::read(&idx, 6).unwrap().is_empty(), "a log for another commit is stale");
        let len = std::fs::metadata(undo_path(&idx)).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(undo_path(&idx)).unwrap();
        f.set_len(len - 3).unwrap();
        drop(f); // (Windows without POSIX delete semantics keeps a removed open file's name)
        assert_eq!(UndoLog::read(&idx, 5).unwrap().len(), 5);
        u.clear();
        // Its handle closed: a file removed while another handle has it open keeps its name
        // until that handle closes on Windows without POSIX delete semantics (and Wine).
        drop(u);
        // The next cycle writes over the old one without truncating it: the old records past
        // the new one fail the new cycle's seed.
        let mut u = UndoLog::new(&idx);
        u.record(6, 4, &[8, 8]).unwrap();
        assert!(std::fs::metadata(undo_path(&idx)).unwrap().len() > 100, "not truncated");
        assert_eq!(UndoLog::read(&idx, 6).unwrap(), vec![Record::Lists(4, vec![8, 8])]);
        assert!(UndoLog::read(&idx, 5).unwrap().is_empty());
        u.remove();
        assert!(!undo_path(&idx).exists());
    }

    /// A log a writer of version 2 left (one marker per record, bit 31) still rolls back.
    #[test]
    fn version_2_logs_are_read() {
        let mut bytes = b"CHUNDO\0\x02".to_vec();
        bytes.extend_from_slice(&7u64.to_le_bytes());
        let c = xxh3_64(&bytes);
        bytes.extend_from_slice(&c.to_le_bytes());
        let record = |slot: u32, n: u32, words: &[u32]| {
            let mut r = [slot.to_le_bytes(), n.to_le_bytes()].concat();
            r.extend(words.iter().flat_map(|w| w.to_le_bytes()));
            let c = xxh3_64_with_seed(&r, 7);
            r.extend_from_slice(&c.to_le_bytes());
            r
        };
        bytes.extend(record(4, MARKER | 2, &[0xbeef, 0xdead]));
        bytes.extend(record(6, 2, &[1, 2]));
        assert_eq!(
            parse(&bytes[..], 7).unwrap(),
            vec![Record::Marker(4, 0xdead_0000_beef), Record::Lists(6, vec![1, 2])]
        );
    }
}
