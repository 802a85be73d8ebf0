//! What the fuzz targets (`fuzz_targets/`) and the corpus generator (`examples/make_corpus.rs`)
//! share: a scratch directory per process, writing an input as an index file, what a caller
//! does with an opened index, and the resealing of the checksums of header copies and of the
//! undo and redo logs.
//!
//! Oracle of every target: each call returns `Ok` or a typed `chassis::Error`; a panic, an
//! abort, a hang (`-timeout`) or resident memory past `-rss_limit_mb` is a finding.

use chassis::format::{self, HEADER_COPY_SIZE};
use chassis::{Control, Index, Metric, Mode, Options, Precision};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Dimensions of every fixture: small, so that an execution takes about a millisecond.
pub const DIMS: usize = 8;
/// Vectors in each fixture: enough for upper layers and a few segments' worth of lists.
pub const VECTORS: usize = 200;

/// Set the switches the library reads from the environment once per process, before any
/// call: a fixed boot id, so that a log written by `make_corpus` counts as this boot's on
/// every machine (an input that changes it plays a log of an earlier boot).
pub fn init(redo: bool) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        std::env::set_var("CHASSIS_BOOT_ID", "chassis-fuzz");
        if !redo {
            // A writer's flush goes through the index file: no 2 MiB log written per input.
            std::env::set_var("CHASSIS_REDO", "0");
        }
    });
}

/// A directory of this process's own (under `TMPDIR`), where each input is written.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("chassis-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

/// `name` in the scratch directory with nothing beside it: no index, undo or redo log, or
/// temporary file a previous input left.
pub fn fresh(name: &str) -> PathBuf {
    let dir = scratch();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    dir.join(name)
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Seeded vectors in [-0.5, 0.5) (xorshift): the same every run.
pub fn vectors(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    (0..n * d)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Write fixture `name` (`bytes`) as `path`, checking once per process that it still opens:
/// a fixture an older format wrote would make every input a refusal, and no finding possible.
pub fn write_fixture(path: &Path, name: &str, bytes: &[u8]) {
    static CHECKED: OnceLock<()> = OnceLock::new();
    write_index(path, bytes);
    CHECKED.get_or_init(|| {
        if let Err(e) = Index::open(path, None, None, Mode::Read) {
            panic!("fixtures/{name} no longer opens ({}): run make_corpus again", e.message);
        }
    });
}

/// Use an opened index as a caller would (as `tests/common`'s child does): length, ids,
/// searches, a batch search, `get`; a writer also checks, adds and flushes. Any error is a
/// typed refusal and ends the work.
pub fn exercise(idx: &Index, write: bool) -> chassis::Result<()> {
    let d = idx.dims();
    let queries = vectors(4, d, 11);
    let _ = idx.len();
    for q in queries.chunks_exact(d) {
        idx.search(q, 10, Some(64))?;
    }
    idx.search_batch(&queries, 4, 10, None, None, Some(1), &Control::default())?;
    let ids = idx.ids()?;
    for id in ids.iter().take(5).chain(ids.last()) {
        idx.get(*id)?;
    }
    // A writer's only: a reader's check pauses before it looks again at a slot that fails (a
    // writer may be changing it; up to 64 pauses a scan), time that buys no coverage; the
    // writer's open of the same bytes runs the same checks.
    if !idx.is_read_only() {
        idx.check(&Control::default())?;
    }
    if write {
        idx.add(&queries[..d], None)?;
        idx.flush()?;
    }
    Ok(())
}

/// Open `path` in `mode` and `exercise` it; the result is dropped (an error is an answer).
pub fn open_and_use(path: &Path, mode: Mode, write: bool) {
    if let Ok(idx) = Index::open(path, None, None, mode) {
        let _ = exercise(&idx, write && mode == Mode::Write);
        let _ = idx.close();
    }
}

/// `file` with each header copy's checksum recomputed over its body (the body length set from
/// its region count, as `tests/common`'s `reseal` does), as a crafted file would carry them:
/// without it nearly every change to a header field stops at the checksum.
pub fn reseal_headers(file: &[u8]) -> Vec<u8> {
    let mut b = file.to_vec();
    for c in 0..2 {
        let Some(copy) = b.get_mut(c * HEADER_COPY_SIZE..(c + 1) * HEADER_COPY_SIZE) else {
            break;
        };
        let n = u32_at(copy, format::at::REGIONS) as usize;
        let body = (format::HEADER_FIXED + n.min(format::MAX_REGIONS) * format::REGION_ENTRY)
            .min(HEADER_COPY_SIZE - 8);
        copy[format::at::BODY_LEN..format::at::BODY_LEN + 4]
            .copy_from_slice(&(body as u32).to_le_bytes());
        let sum = xxh3_64(&copy[..body]);
        copy[body..body + 8].copy_from_slice(&sum.to_le_bytes());
    }
    b
}

/// The undo log's layout (`src/commit/undo.rs`): a 24-byte header (magic, base_seq, xxh3 of
/// the first 16 bytes), then records (slot u32, n u32, n words, xxh3 seeded with base_seq in
/// version 2, unseeded in version 1).
const UNDO_MAGIC_V1: &[u8; 8] = b"CHUNDO\0\x01";

/// `log` with every checksum recomputed, record by record as `undo::parse` walks them: what a
/// crafted log would carry (the checksums stop torn writes, not a forger).
pub fn reseal_undo(log: &[u8]) -> Vec<u8> {
    let mut b = log.to_vec();
    if b.len() < 24 {
        return b;
    }
    let h = xxh3_64(&b[..16]);
    b[16..24].copy_from_slice(&h.to_le_bytes());
    let base = u64_at(&b, 8);
    let seeded = &b[0..8] != UNDO_MAGIC_V1;
    let mut at = 24;
    while at + 8 <= b.len() {
        let n = (u32_at(&b, at + 4) & !(1 << 31)) as usize;
        let end = at + 8 + 4 * n;
        if n > 1 << 20 || end + 8 > b.len() {
            break;
        }
        let c = if seeded { xxh3_64_with_seed(&b[at..end], base) } else { xxh3_64(&b[at..end]) };
        b[end..end + 8].copy_from_slice(&c.to_le_bytes());
        at = end + 8;
    }
    b
}

/// Where a redo log's records start (`src/commit/redo.rs`).
const REDO_RECORDS: usize = 4096;

/// A redo log written for another file made one for the index file whose id (inode) is
/// `file_id`: the log's identity field (bytes 16..24 of its header) set to it, and the
/// checksums that depend on it recomputed. Without `reseal_all`, only checksums that held
/// under the identity the input named are recomputed (a damaged record stays damaged: the
/// log means what it meant); with it, every checksum is (a crafted log).
pub fn rebind_redo(log: &[u8], file_id: u64, reseal_all: bool) -> Vec<u8> {
    let mut b = log.to_vec();
    if b.len() < 48 {
        return b;
    }
    let named = u64_at(&b, 16);
    let header_held = xxh3_64(&b[..40]) == u64_at(&b, 40);
    b[16..24].copy_from_slice(&file_id.to_le_bytes());
    if header_held || reseal_all {
        let h = xxh3_64(&b[..40]);
        b[40..48].copy_from_slice(&h.to_le_bytes());
    }
    let base = u64_at(&b, 8);
    let mut at = REDO_RECORDS;
    while at + 24 <= b.len() {
        let len = u32_at(&b, at) as usize;
        if len < 24 || !len.is_multiple_of(8) || at + len > b.len() {
            break;
        }
        let sum = at + len - 8;
        if !reseal_all && xxh3_64_with_seed(&b[at..sum], base ^ named) != u64_at(&b, sum) {
            break;
        }
        let c = xxh3_64_with_seed(&b[at..sum], base ^ file_id);
        b[sum..sum + 8].copy_from_slice(&c.to_le_bytes());
        at += len;
    }
    b
}

/// The inode `chassis::commit::redo::file_id` names an index file by.
pub fn inode(path: &Path) -> u64 {
    std::fs::File::open(path).map(|f| chassis::commit::redo::file_id(&f)).unwrap_or(0)
}

/// The quantizer region (offset, length) of a file's chosen header.
pub fn quantizer_region(bytes: &[u8]) -> Option<(usize, usize)> {
    let h = format::choose_header(bytes, Path::new("fixture")).ok()?.header;
    let r = h.regions.iter().find(|r| r.offset == h.quantizer && h.quantizer != 0)?;
    Some((r.offset as usize, r.len as usize))
}

/// The options of each kind of index the corpus and fixtures hold.
pub fn options(precision: Precision, quantization: format::Quantization) -> Options {
    Options {
        max_connections: 8,
        ef_construction: 64,
        metric: Metric::Euclidean,
        precision,
        quantization,
        ..Options::default()
    }
}

/// Files are stored and fuzzed without their zero tail (a 200-vector index is 1.3 MiB, of
/// which the regions' reserved room is zeros after the first 330 KiB): an input whose length
/// is a multiple of this was cut so, and is extended with zeros to the end of the regions its
/// header names; any other length is a truncated file, written as it is.
pub const CUT: usize = 4096;
/// No input is extended past this (a crafted region table can name any end).
pub const MAX_EXTENDED: u64 = 64 << 20;

/// `bytes` without their zero tail, in whole `CUT` blocks (what the corpus and fixtures keep).
pub fn cut_zeros(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &bytes[..end.next_multiple_of(CUT).min(bytes.len())]
}

/// Write `bytes` as the index file `path`: a cut file (`CUT`) is extended with zeros (sparse)
/// to the end of the regions of the header copy a reader would choose.
pub fn write_index(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("writing the input");
    if !bytes.len().is_multiple_of(CUT) {
        return;
    }
    let Ok(choice) = format::choose_header(bytes, path) else { return };
    let end = choice
        .header
        .regions
        .iter()
        .map(|r| r.offset.saturating_add(r.len))
        .fold(format::DATA_START, u64::max);
    if end > bytes.len() as u64 && end <= MAX_EXTENDED {
        let f = std::fs::OpenOptions::new().write(true).open(path).expect("reopening the input");
        f.set_len(end).expect("extending the input");
    }
}
