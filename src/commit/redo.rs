//! The redo log, `<index path>.redo`: small commits made durable with one sync.
//!
//! Why: a commit through the index file (`commit::commit`) syncs the undo log, the index's
//! data and its header: three `fdatasync` calls, the second of which writes every page an add
//! touched (a new node links back into about 2M neighbors' lists, scattered over the file),
//! and that flush is most of an `add` + `flush()` (measured: `docs/design/small-commits.md`).
//! A small commit instead appends the new bytes of everything it changed (its
//! new slots' rows, the changed lists and markers, the new upper lists, the new header) to
//! this log in one record, and syncs this one file, written in place (so the sync carries no
//! metadata); the index file's pages are written back later, at a checkpoint (the next commit
//! through the index file, which syncs everything, or close).
//!
//! ```text
//! header (bytes 0..48 of a 4 KiB block): magic "CHREDO\0\x01" | base_seq u64 | file_id u64 |
//!                                        boot u64 | base_hash u64 |
//!                                        xxh3 of the first 40 bytes (u64)
//! records, from byte 4096, 8-byte aligned:
//!   len u32 (the whole record) | pieces u32 | seq u64
//!   pieces x { file offset u64 | n u32 | 0 u32 | n bytes, zero-padded to a multiple of 8 }
//!   xxh3-64 of the bytes before it, seeded with base_seq ^ file_id (u64)
//! ```
//!
//! `base_seq` is a commit the index file holds durably (the log's records start after it), and
//! the records are the commits `base_seq + 1, + 2, ...` in order; the seed makes records left
//! over from an earlier cycle of the file (before the last checkpoint) fail their checksum, and
//! `file_id` (the inode) and `base_hash` (xxh3 of the header bytes of commit `base_seq`) keep a
//! log from being applied to another file put in the index's place (`judge`). Records hold whole new bytes, so applying them again is harmless. `boot` names the
//! boot of the machine that wrote the log (Linux's `boot_id`): while it is the same boot, the
//! page cache holds every record's bytes, whatever the writer did since.
//!
//! Only on Linux, where the boot is known: elsewhere every commit goes through the index file.
//!
//! After a power loss the index file holds its last checkpoint plus whatever pages the kernel
//! wrote back since, in any order, its header copies included. A writer that opens it applies
//! every record (`recover`) when the header it finds is between `base_seq` and the last
//! record: the file is then exactly as of the last record, which is the last flush that
//! returned (or the one that was running); the undo log then puts back what the writer changed
//! after it, as after any crash. A log whose records all precede the header (a
//! checkpoint ran, then the writer stopped before resetting the log) is stale and ignored. A
//! reader cannot write: if the log was written in an earlier boot (the machine stopped since,
//! and no writer has opened the file), it checks (`verify`) that the file holds the bytes of
//! every record up to its header, and if not, asks for the file to be opened by a writer first.

use crate::error::{Error, ErrorKind, Result};
use crate::format::{choose_header, HEADER_COPY_SIZE};
use crate::os;
use std::fs::File;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

const MAGIC: [u8; 8] = *b"CHREDO\0\x01";
/// Where the records start.
const RECORDS: u64 = 4096;
/// The log's size: written once (zeros, synced) so that appends overwrite blocks the file
/// already has and a sync carries no metadata. Records past it go through the index file.
/// Records are written through the page cache: `O_DIRECT` gained nothing (tried:
/// `docs/design/small-commits.md`).
pub const CAPACITY: u64 = 2 << 20;
/// A record's fixed part: len, pieces, seq, and the trailing checksum.
const FIXED: usize = 16 + 8;
/// A piece's fixed part: offset, n, padding.
const PIECE: usize = 16;

pub fn redo_path(index: &Path) -> PathBuf {
    let mut p = index.as_os_str().to_owned();
    p.push(".redo");
    PathBuf::from(p)
}

/// What tells this index file from another one at the same path: its inode (0 where the
/// platform gives none).
pub fn file_id(file: &File) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        file.metadata().map(|m| m.ino()).unwrap_or(0)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        0
    }
}

/// This boot of the machine (a hash of Linux's `boot_id`, never 0); None where it is not
/// known, and then no redo log is written. `CHASSIS_BOOT_ID` stands in for it (tests play a
/// machine that restarted with it).
pub fn boot() -> Option<u64> {
    static BOOT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *BOOT.get_or_init(|| {
        let id = match &crate::tuning::get().boot_id {
            Some(v) => v.clone(),
            None => std::fs::read("/proc/sys/kernel/random/boot_id").ok()?,
        };
        Some(xxh3_64(&id).max(1))
    })
}

/// Bytes a record of pieces of these lengths takes in the log.
pub fn record_len(lens: impl Iterator<Item = usize>) -> usize {
    FIXED + lens.map(|n| PIECE + n.next_multiple_of(8)).sum::<usize>()
}

/// The writer's side: the log of the commits since the last checkpoint.
pub struct RedoLog {
    path: PathBuf,
    file: Option<File>,
    file_id: u64,
    /// The commit the records start after; None: no header written since the last reset (the
    /// next append starts a cycle).
    base: Option<u64>,
    /// Where the next record goes.
    cursor: u64,
    /// The file has been written out to `CAPACITY` (zeros) and synced.
    sized: bool,
    /// A record being written (kept to reuse its allocation).
    buf: Vec<u8>,
    /// Set when the log could not be made (the disk full, say): commits go through the index
    /// file for the rest of this handle's life.
    pub disabled: bool,
}

impl RedoLog {
    pub fn new(index: &Path, file_id: u64) -> RedoLog {
        let disabled = boot().is_none() || crate::tuning::get().redo == Some(false);
        RedoLog {
            path: redo_path(index),
            file: None,
            file_id,
            base: None,
            cursor: RECORDS,
            sized: false,
            buf: Vec::new(),
            disabled,
        }
    }

    /// Whether commits since the last checkpoint are in the log (the index file's pages are
    /// not all durable yet).
    pub fn has_records(&self) -> bool {
        self.base.is_some()
    }

    /// Whether a record of `len` bytes fits after the ones there.
    pub fn fits(&self, len: usize) -> bool {
        let at = if self.base.is_some() { self.cursor } else { RECORDS };
        !self.disabled && at + len as u64 <= CAPACITY
    }

    /// Create the file and write it out to its capacity, synced (once per handle). A failure
    /// here changes nothing of the index: the caller commits through the index file instead.
    pub fn prepare(&mut self) -> Result<()> {
        if self.sized {
            return Ok(());
        }
        let made = self.make();
        self.disabled = made.is_err();
        made
    }

    fn make(&mut self) -> Result<()> {
        let f = super::open_log(&self.path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < CAPACITY {
            let n = (CAPACITY - at).min(zeros.len() as u64) as usize;
            os::write_all_at(&f, &zeros[..n], at)
                .map_err(|e| Error::io(e, "writing", &self.path))?;
            at += n as u64;
        }
        os::sync_data(&f).map_err(|e| Error::io(e, "syncing", &self.path))?;
        // The new name made durable too: a record is only as durable as the file it is in.
        os::sync_dir(&self.path).map_err(|e| Error::io(e, "syncing the folder of", &self.path))?;
        self.file = Some(f);
        self.sized = true;
        Ok(())
    }

    /// Append commit `seq` (whose predecessor, `seq - 1`, the index file holds durably if this
    /// is the first record since a checkpoint): `pieces` are (file offset, new bytes), the new
    /// header among them; `base_header`: the bytes of the header of `seq - 1` as the file
    /// holds them (read only when this record starts a cycle).
    /// Returns once the record is on stable storage. On an error the record may or may not
    /// reach the disk later (whole or failing its checksum).
    pub fn append(
        &mut self,
        seq: u64,
        pieces: &[(u64, Vec<u8>)],
        base_header: &[u8],
    ) -> Result<()> {
        let len = record_len(pieces.iter().map(|(_, b)| b.len()));
        // A new cycle writes its header block with the first record, in one write (the same
        // sync makes both durable; a record that lands without its header fails the old
        // header's seed).
        let (base, at, head) = match self.base {
            Some(b) => (b, self.cursor, 0),
            None => (seq - 1, 0, RECORDS as usize),
        };
        let total = head + len;
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(total, 0);
        if head > 0 {
            buf[0..8].copy_from_slice(&MAGIC);
            buf[8..16].copy_from_slice(&base.to_le_bytes());
            buf[16..24].copy_from_slice(&self.file_id.to_le_bytes());
            buf[24..32].copy_from_slice(&boot().unwrap_or(0).to_le_bytes());
            buf[32..40].copy_from_slice(&xxh3_64(base_header).to_le_bytes());
            let c = xxh3_64(&buf[..40]);
            buf[40..48].copy_from_slice(&c.to_le_bytes());
        }
        let rec = &mut buf[head..head + len];
        rec[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&(pieces.len() as u32).to_le_bytes());
        rec[8..16].copy_from_slice(&seq.to_le_bytes());
        let mut p = 16;
        for (offset, bytes) in pieces {
            rec[p..p + 8].copy_from_slice(&offset.to_le_bytes());
            rec[p + 8..p + 12].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            rec[p + 16..p + 16 + bytes.len()].copy_from_slice(bytes);
            p += PIECE + bytes.len().next_multiple_of(8);
        }
        debug_assert_eq!(p + 8, len);
        let c = xxh3_64_with_seed(&rec[..p], base ^ self.file_id);
        rec[p..p + 8].copy_from_slice(&c.to_le_bytes());
        let file = self.file.as_ref().expect("prepare() first");
        os::write_all_at(file, buf, at).map_err(|e| Error::io(e, "writing", &self.path))?;
        os::sync_data(file).map_err(|e| Error::io(e, "syncing", &self.path))?;
        self.base = Some(base);
        self.cursor = at + total as u64;
        Ok(())
    }

    /// After a checkpoint (everything synced through the index file): the records are stale,
    /// and the next append starts a new cycle. Nothing is written now: a log left as it is
    /// ends before the index file's header, which makes it stale to `recover`.
    pub fn reset(&mut self) {
        self.base = None;
        self.cursor = RECORDS;
    }

    /// Remove the file (close, after a checkpoint; or a compaction that replaced the index).
    pub fn remove(&mut self) {
        if !self.sized {
            return; // this handle made none (a log found at open was removed then)
        }
        self.file = None;
        self.sized = false;
        self.reset();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One record: commit `seq`'s pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub pieces: Vec<(u64, Vec<u8>)>,
}

/// A parsed log: the commit its records start after, the boot that wrote it, the records.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed {
    pub base: u64,
    pub boot: u64,
    /// xxh3 of the header bytes of commit `base`.
    pub base_hash: u64,
    pub records: Vec<Record>,
}

/// The log at `index`'s redo path for the file `file_id`: its base and its valid records, in
/// order (consecutive sequence numbers from base + 1). None: no log, or another file's, or
/// a damaged header (nothing in it can be trusted, and nothing was promised by it: a record
/// is durable only with its header).
pub fn read(index: &Path, file_id: u64) -> Result<Option<Parsed>> {
    use std::io::Read;
    let path = redo_path(index);
    let mut bytes = Vec::new();
    // No more than a log holds: a larger file is not one, and its tail is never read.
    let read = File::open(&path).and_then(|f| f.take(CAPACITY).read_to_end(&mut bytes));
    match read {
        Ok(_) => Ok(parse(&bytes, file_id)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(e, "reading", &path)),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn parse(bytes: &[u8], file_id: u64) -> Option<Parsed> {
    if bytes.len() < 48
        || bytes[0..8] != MAGIC
        || xxh3_64(&bytes[..40]) != u64_at(bytes, 40)
        || u64_at(bytes, 16) != file_id
    {
        return None;
    }
    let base = u64_at(bytes, 8);
    let boot = u64_at(bytes, 24);
    let base_hash = u64_at(bytes, 32);
    let mut out = Vec::new();
    let mut at = RECORDS as usize;
    while at + FIXED <= bytes.len() {
        let len = u32_at(bytes, at) as usize;
        let n = u32_at(bytes, at + 4) as usize;
        let seq = u64_at(bytes, at + 8);
        if len < FIXED || !len.is_multiple_of(8) || at + len > bytes.len() {
            break;
        }
        let body = &bytes[at..at + len - 8];
        if xxh3_64_with_seed(body, base ^ file_id) != u64_at(bytes, at + len - 8)
            || Some(seq) != base.checked_add(out.len() as u64 + 1)
        {
            break;
        }
        // The checksum held: the pieces were written by this code, but a crafted file is
        // still read with every bound checked.
        let mut pieces = Vec::new();
        let mut p = at + 16;
        let mut whole = true;
        for _ in 0..n {
            if p + PIECE > at + len - 8 {
                whole = false;
                break;
            }
            let offset = u64_at(bytes, p);
            let k = u32_at(bytes, p + 8) as usize;
            let end = p + PIECE + k;
            if end > at + len - 8 {
                whole = false;
                break;
            }
            pieces.push((offset, bytes[p + PIECE..end].to_vec()));
            p = (p + PIECE + k.next_multiple_of(8)).min(at + len - 8);
        }
        if !whole {
            break;
        }
        out.push(Record { seq, pieces });
        at += len;
    }
    Some(Parsed { base, boot, base_hash, records: out })
}

/// What a log says about the index file as the disk holds it.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Its records reach the file's header or past it: apply them all.
    Apply,
    /// A checkpoint came after its last record (or it has none): nothing to do.
    Stale,
    /// It was written against other contents (a file copied over this one): never apply.
    Foreign,
}

/// Judge the log (`base`, `records`) against the header copies `file` holds. The file's
/// header is the newest valid copy, `h`:
/// - past the last record: stale;
/// - written by a record (`base < h`): that record's header bytes must be the copy's, byte
///   for byte, else the file is not the one the log was written for;
/// - `base`, the checkpoint the log starts from: apply if the copy's bytes hash to the log's
///   `base_hash`;
/// - older than `base`, or no valid copy: only a torn copy explains that (a small flush's
///   header reaches the disk whenever the kernel writes it back, and can be cut), so apply if
///   a copy is damaged; if both are whole, the file is another one.
fn judge(file: &File, index: &Path, log: &Parsed) -> Verdict {
    let (base, records) = (log.base, &log.records[..]);
    if records.is_empty() {
        return Verdict::Stale;
    }
    let mut buf = vec![0u8; 2 * HEADER_COPY_SIZE];
    let len = file.metadata().map_or(0, |m| m.len());
    let n = (len as usize).min(buf.len());
    if os::read_exact_at(file, &mut buf[..n], 0).is_err() {
        return Verdict::Foreign;
    }
    let buf = &buf[..n];
    let choice = choose_header(buf, index).ok();
    let damaged = choice.as_ref().is_none_or(|c| c.other_damage.is_some());
    let last = base + records.len() as u64;
    // The chosen copy's bytes as written.
    let copy_bytes = choice.as_ref().and_then(|c| {
        let at = c.copy * HEADER_COPY_SIZE;
        let len = crate::format::copy_len(buf.get(at..)?)?;
        buf.get(at..at.checked_add(len)?)
    });
    match choice.as_ref().map(|c| c.header.seq) {
        Some(h) if h > last => Verdict::Stale,
        Some(h) if h > base => {
            let ours = records[(h - base - 1) as usize].pieces.last().is_some_and(|(at, bytes)| {
                let at = *at as usize;
                at.checked_add(bytes.len()).is_some_and(|end| end <= buf.len())
                    && buf[at..at + bytes.len()] == bytes[..]
            });
            if ours {
                Verdict::Apply
            } else {
                Verdict::Foreign
            }
        }
        Some(h) if h == base => {
            if copy_bytes.is_some_and(|b| xxh3_64(b) == log.base_hash) {
                Verdict::Apply
            } else {
                Verdict::Foreign
            }
        }
        _ if damaged => Verdict::Apply,
        _ => Verdict::Foreign,
    }
}

fn out_of_file(path: &Path, offset: u64, n: usize) -> Error {
    Error::new(
        ErrorKind::CorruptIndex,
        format!(
            "{}: its redo log writes {n} bytes at offset {offset}, past the end of the index file",
            path.display()
        ),
        "the log does not belong to this file: move it aside and open the index again (its \
         last flushes before the machine stopped may then be missing)",
    )
}

/// What a writer's open did with a redo log (`recover`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Records that changed bytes of the file, when the log is from an earlier boot (the
    /// machine stopped; in this boot the page cache held them, and what differs is what the
    /// dead writer changed after them, which its undo log puts back).
    pub applied: usize,
    /// The log was written against other contents (a file copied over this one) and was
    /// removed unapplied.
    pub foreign: bool,
}

/// A writer opening `file` (locked): apply the log's records if they reach the header or past
/// it (`judge`), make the file durable, and remove the log.
pub fn recover(index: &Path, file: &File) -> Result<Recovered> {
    let path = redo_path(index);
    if !path.exists() {
        return Ok(Recovered::default());
    }
    let mut out = Recovered::default();
    if let Some(log) = read(index, file_id(file))? {
        let (written, records) = (log.boot, &log.records);
        match judge(file, index, &log) {
            Verdict::Stale => {}
            Verdict::Foreign => out.foreign = true,
            Verdict::Apply => {
                let len = file.metadata().map_err(|e| Error::io(e, "reading", index))?.len();
                let mut cur = Vec::new();
                for r in records {
                    let mut differs = false;
                    for (offset, bytes) in &r.pieces {
                        if offset.checked_add(bytes.len() as u64).is_none_or(|e| e > len) {
                            return Err(out_of_file(index, *offset, bytes.len()));
                        }
                        cur.resize(bytes.len(), 0);
                        os::read_exact_at(file, &mut cur, *offset)
                            .map_err(|e| Error::io(e, "reading", index))?;
                        differs |= cur != *bytes;
                        // Written even when the page cache already holds the bytes: after a
                        // failed sync the kernel keeps them in pages it marked clean, which the
                        // sync below would not write (a log is at most `CAPACITY`).
                        os::write_all_at(file, bytes, *offset)
                            .map_err(|e| Error::io(e, "writing", index))?;
                    }
                    out.applied += (differs && Some(written) != boot()) as usize;
                }
                os::sync_data(file).map_err(|e| Error::io(e, "syncing", index))?;
            }
        }
    }
    std::fs::remove_file(&path).map_err(|e| Error::io(e, "removing", &path))?;
    Ok(out)
}

/// A reader opening `file` at header `h`: Err if the log is from an earlier boot (the machine
/// stopped, and no writer has opened the file since) and has records past `h`, or the file
/// does not hold the bytes of every record up to `h`. In this boot the page cache holds them.
pub fn verify(index: &Path, file: &File, h: u64) -> Result<()> {
    let Some(log) = read(index, file_id(file))? else {
        return Ok(());
    };
    let (base, written, records) = (log.base, log.boot, &log.records);
    if Some(written) == boot() {
        return Ok(()); // written in this boot: the page cache holds every record's bytes
    }
    let missing = || {
        Error::new(
            ErrorKind::CorruptIndex,
            format!(
                "{}: its last flushes are in {} but not yet in the index file (the machine \
                 stopped before they were written back)",
                index.display(),
                redo_path(index).display()
            ),
            "open it once as a writer (VectorIndex(path)), which applies them; then readers \
             can open it",
        )
    };
    if judge(file, index, &log) != Verdict::Apply {
        return Ok(()); // stale, or another file's
    }
    if h < base + records.len() as u64 {
        // Flushes after the header the file holds (or a torn copy): no writer of this boot is
        // running one, so they are flushes that returned, which only a writer can apply.
        return Err(missing());
    }
    // The newest bytes at each offset win: check the records newest first, each byte only
    // where no newer piece covered it.
    let mut covered: Vec<(u64, u64)> = Vec::new(); // disjoint, sorted
    let mut cur = Vec::new();
    for r in records[..(h - base) as usize].iter().rev() {
        for (offset, bytes) in r.pieces.iter().rev() {
            let Some(hi) = offset.checked_add(bytes.len() as u64) else { return Err(missing()) };
            let lo = *offset;
            for (a, b) in uncovered(&covered, lo, hi) {
                cur.resize((b - a) as usize, 0);
                if os::read_exact_at(file, &mut cur, a).is_err()
                    || cur[..] != bytes[(a - lo) as usize..(b - lo) as usize]
                {
                    return Err(missing());
                }
            }
            insert(&mut covered, lo, hi);
        }
    }
    Ok(())
}

/// The parts of `[lo, hi)` outside the sorted, disjoint intervals `covered`.
fn uncovered(covered: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = lo;
    let first = covered.partition_point(|&(_, b)| b <= lo);
    for &(a, b) in &covered[first..] {
        if a >= hi {
            break;
        }
        if a > at {
            out.push((at, a));
        }
        at = at.max(b);
    }
    if at < hi {
        out.push((at, hi));
    }
    out
}

/// Add `[lo, hi)` to the sorted, disjoint intervals `covered`, merging what it touches.
fn insert(covered: &mut Vec<(u64, u64)>, lo: u64, hi: u64) {
    let first = covered.partition_point(|&(_, b)| b < lo);
    let mut last = first;
    let (mut a, mut b) = (lo, hi);
    while last < covered.len() && covered[last].0 <= hi {
        a = a.min(covered[last].0);
        b = b.max(covered[last].1);
        last += 1;
    }
    covered.splice(first..last, [(a, b)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_bytes(base: u64, id: u64, recs: &[Record]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("a.chassis");
        let mut l = RedoLog::new(&idx, id);
        l.disabled = false;
        l.prepare().unwrap();
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.seq, base + 1 + i as u64);
            l.append(r.seq, &r.pieces, b"the header of the base").unwrap();
        }
        std::fs::read(redo_path(&idx)).unwrap()
    }

    #[test]
    fn records_round_trip_and_stale_or_torn_ones_are_dropped() {
        let recs = vec![
            Record { seq: 8, pieces: vec![(4096, vec![1, 2, 3]), (0, vec![9; 20])] },
            Record { seq: 9, pieces: vec![(100, vec![7; 64])] },
            Record { seq: 10, pieces: vec![] },
        ];
        let bytes = log_bytes(7, 42, &recs);
        assert_eq!(bytes.len() as u64, CAPACITY, "written out to its capacity");
        let b = boot().unwrap_or(0);
        let bh = xxh3_64(b"the header of the base");
        assert_eq!(
            parse(&bytes, 42),
            Some(Parsed { base: 7, boot: b, base_hash: bh, records: recs.clone() })
        );
        assert_eq!(parse(&bytes, 43), None, "another file's log");
        // A torn second record: the first stays, nothing after it is read.
        let second = RECORDS as usize + record_len([3usize, 20].into_iter());
        let mut torn = bytes.clone();
        torn[second + 20] ^= 1;
        assert_eq!(
            parse(&torn, 42),
            Some(Parsed { base: 7, boot: b, base_hash: bh, records: recs[..1].to_vec() })
        );
        // A new cycle over an old one: the old records past the new ones fail the new seed.
        let newer = vec![Record { seq: 11, pieces: vec![(5, vec![1])] }];
        let fresh = log_bytes(10, 42, &newer);
        let mut mixed = bytes.clone();
        let n = RECORDS as usize + record_len([1usize].into_iter());
        mixed[..48].copy_from_slice(&fresh[..48]);
        mixed[RECORDS as usize..n].copy_from_slice(&fresh[RECORDS as usize..n]);
        assert_eq!(
            parse(&mixed, 42),
            Some(Parsed { base: 10, boot: b, base_hash: bh, records: newer })
        );
    }

    #[test]
    fn a_damaged_or_cut_log_gives_a_prefix_of_its_records_and_never_panics() {
        let recs: Vec<Record> = (0..6)
            .map(|i| Record {
                seq: 21 + i,
                pieces: (0..3)
                    .map(|j| (j * 1000 + i, vec![i as u8; 5 + 30 * j as usize]))
                    .collect(),
            })
            .collect();
        let bytes = log_bytes(20, 1, &recs);
        let is_prefix = |p: &Option<Parsed>| {
            p.as_ref().is_none_or(|p| p.base == 20 && recs.starts_with(&p.records))
        };
        // Where each record's bytes lie.
        let mut spans = Vec::new();
        let mut end = RECORDS as usize;
        for r in &recs {
            let len = record_len(r.pieces.iter().map(|p| p.1.len()));
            spans.push(end..end + len);
            end += len;
        }
        for cut in (0..end + 8).step_by(7) {
            assert!(is_prefix(&parse(&bytes[..cut], 1)), "cut at {cut}");
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut b = bytes[..end].to_vec();
            let at = (state % end as u64) as usize;
            b[at] ^= 1 << (state >> 61);
            let p = parse(&b, 1);
            assert!(is_prefix(&p), "flip at {at}");
            if let Some(k) = spans.iter().position(|r| r.contains(&at)) {
                assert_eq!(p.unwrap().records.len(), k, "a flipped record ends the log");
            }
        }
    }

    #[test]
    fn intervals_cover_and_merge() {
        let mut c = Vec::new();
        insert(&mut c, 10, 20);
        insert(&mut c, 30, 40);
        assert_eq!(uncovered(&c, 0, 50), vec![(0, 10), (20, 30), (40, 50)]);
        assert_eq!(uncovered(&c, 12, 18), vec![]);
        insert(&mut c, 15, 35);
        assert_eq!(c, vec![(10, 40)]);
        insert(&mut c, 40, 41);
        assert_eq!(c, vec![(10, 41)]);
        assert_eq!(uncovered(&c, 5, 45), vec![(5, 10), (41, 45)]);
    }
}
