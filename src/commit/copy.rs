//! Copies of a commit: to a new file (save, backup), into anonymous memory (load), and the
//! undo records that patch a copy made while a writer in another process kept writing. Also
//! the temporary names copies are made under and the rename that puts them in place.

use super::undo::Record;
use crate::control::Control;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{self, Header, RegionKind, HEADER_COPY_SIZE};
use crate::os;
use crate::storage::Storage;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::*};

/// `.<name>.<what>-<pid>-<nanos><n>` beside `path`: unique to this process and call.
pub fn tmp_sibling(path: &Path, what: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    path.with_file_name(format!(
        ".{name}.{what}-{}-{nanos}{}",
        std::process::id(),
        N.fetch_add(1, Relaxed)
    ))
}

pub fn same_file(a: &Path, b: &Path) -> bool {
    match (os::path_id(a), os::path_id(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

pub fn sync_file(p: &Path) -> Result<()> {
    os::sync_file(p).map_err(|e| Error::io(e, "syncing", p))
}

/// Whether a finished copy may be renamed over `dest`: yes if nothing is there, or an empty
/// file, or an index that no writer holds; any other file only when `overwrite`; never a file
/// that a writer holds (in this or another process), whose next flush would then go to the
/// replaced file and be lost. Asked before the copy starts and again just before the rename.
pub fn check_replaceable(dest: &Path, overwrite: bool) -> Result<()> {
    let file = match File::open(dest) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(e, "opening", dest)),
    };
    if !os::try_lock_exclusive(&file).map_err(|e| Error::io(e, "locking", dest))? {
        return Err(Error::new(
            ErrorKind::IndexLocked,
            format!(
                "{} is open for writing (in this or another process): replacing it would lose \
                 that writer's next flush",
                dest.display()
            ),
            "close that writer first, or pass another path",
        )
        .at(dest));
    }
    os::unlock(&file);
    let mut magic = [0u8; 8];
    let is_index = os::read_exact_at(&file, &mut magic, 0).is_ok() && magic == format::MAGIC;
    let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
    if is_index || empty || overwrite {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::NotAnIndex,
        format!(
            "{} exists and is not a Chassis index; writing there would replace it",
            dest.display()
        ),
        "pass overwrite=True to replace it, or another path",
    ))
}

/// Rename a finished copy `tmp` (if `made` is Ok) to `dest` and make that durable; remove
/// `tmp` on any failure.
pub fn put_in_place(made: Result<()>, tmp: &Path, dest: &Path, overwrite: bool) -> Result<()> {
    let res = made.and_then(|()| {
        check_replaceable(dest, overwrite)?;
        std::fs::rename(tmp, dest).map_err(|e| Error::io(e, "renaming the copy to", dest))?;
        os::sync_dir(dest).map_err(|e| Error::io(e, "syncing the directory of", dest))
    });
    if res.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    res
}

/// The byte ranges (file offset, length) commit `h` has written: the used slots of each
/// segment (codes, vectors, headers, lists), the used bytes of each heap chunk and quantizer. The rest is unused capacity (a hole in a file).
pub fn commit_ranges(st: &Storage, h: &Header) -> Vec<(u64, u64)> {
    let g = st.geo;
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut first = 0u64;
    for (k, r) in h.regions.iter().filter(|r| r.kind == RegionKind::Segment).enumerate() {
        let cap = g.segment_slots(k);
        let n = h.slots.saturating_sub(first).min(cap);
        first += cap;
        let l = g.segment_layout(cap);
        ranges.push((r.offset + l.codes, n * g.code_stride as u64));
        ranges.push((r.offset + l.vectors, n * g.stride as u64));
        ranges.push((r.offset + l.headers, n * format::SLOT_HEADER as u64));
        ranges.push((r.offset + l.l0, n * g.l0_words as u64 * 4));
    }
    ranges.extend(
        h.regions
            .iter()
            .filter(|r| r.kind == RegionKind::Heap || r.kind == RegionKind::Quantizer)
            .map(|r| (r.offset, r.used as u64)),
    );
    ranges.retain(|r| r.1 > 0);
    ranges
}

/// Copy commit `h` of `st` (a file's mappings, or an in-memory index) to a new file `tmp`: what
/// it has written (the rest stays a hole) and `h` as both header copies. Not synced. Counts the
/// bytes copied in `ctl.done`; cancelled between 1 MiB pieces (`tmp` is then left for the
/// caller to remove, as on any error).
pub fn copy_commit(st: &Storage, h: &Header, tmp: &Path, ctl: &Control) -> Result<()> {
    let out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| Error::io(e, "creating", tmp))?;
    out.set_len(h.end_of_regions()).map_err(|e| Error::io(e, "writing", tmp))?;
    let mut buf = vec![0u8; 1 << 20];
    for (start, len) in commit_ranges(st, h) {
        let mut at = start;
        while at < start + len {
            if ctl.cancelled() {
                return Err(Error::interrupted());
            }
            let n = ((start + len - at) as usize).min(buf.len());
            st.read_at(&mut buf[..n], at)?;
            os::write_all_at(&out, &buf[..n], at).map_err(|e| Error::io(e, "writing", tmp))?;
            ctl.done.fetch_add(n as u64, Relaxed);
            at += n as u64;
        }
    }
    let enc = h.encode();
    os::write_all_at(&out, &enc, 0).map_err(|e| Error::io(e, "writing", tmp))?;
    os::write_all_at(&out, &enc, HEADER_COPY_SIZE as u64).map_err(|e| Error::io(e, "writing", tmp))
}

/// Fill in-memory storage `mem` with `ranges` of `file`. Balanced: the bytes, taken in file
/// order, are cut into one contiguous stretch per thread of the pool and each thread reads its
/// own (first touch places each stretch on its thread's node). Otherwise this thread reads all.
/// Cancellable between 8 MiB pieces.
///
/// # Safety
/// `mem` belongs to an index being loaded: nothing else reads or writes it meanwhile, and
/// `ranges` do not overlap (each thread's stretch is its own).
pub unsafe fn copy_ranges(
    mem: &Storage,
    file: &File,
    path: &Path,
    ranges: &[(u64, u64)],
    balanced: bool,
    ctl: &Control,
) -> Result<()> {
    const PIECE: u64 = 8 << 20;
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    // Copy the bytes `[from, to)` of the concatenated ranges.
    let stretch = |from: u64, to: u64| -> Result<()> {
        let mut pos = 0u64;
        for &(off, len) in ranges {
            let (a, b) = (from.max(pos), to.min(pos + len));
            if a < b {
                let mut at = a;
                while at < b {
                    if ctl.cancelled() {
                        return Err(Error::interrupted());
                    }
                    let n = (b - at).min(PIECE);
                    // SAFETY: this stretch is this thread's alone, in a store nobody else
                    // sees (the function's contract).
                    unsafe { mem.fill_from(file, path, off + (at - pos), n as usize)? };
                    ctl.done.fetch_add(n, Relaxed);
                    at += n;
                }
            }
            pos += len;
        }
        Ok(())
    };
    let threads = rayon::current_num_threads();
    if !balanced || threads <= 1 {
        return stretch(0, total);
    }
    let err: Mutex<Option<Error>> = Mutex::new(None);
    rayon::broadcast(|ctx| {
        let (i, t) = (ctx.index() as u64, ctx.num_threads() as u64);
        if let Err(e) = stretch(total * i / t, total * (i + 1) / t) {
            err.lock().get_or_insert(e);
        }
    });
    err.into_inner().map_or(Ok(()), Err)
}

/// Apply undo records (committed contents of lists and markers changed since commit `h`) to a
/// copy of the index made while the writer kept writing; `put(bytes, file offset)` writes.
pub fn apply_records(
    st: &Storage,
    h: &Header,
    records: &[Record],
    mut put: impl FnMut(&[u8], u64) -> Result<()>,
) -> Result<()> {
    let mut put_words = |at: u64, words: &[u32]| -> Result<()> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        put(&bytes, at)
    };
    for r in records {
        match r {
            Record::Lists(slot, words)
                if (*slot as u64) < h.slots && words.len() >= st.geo.l0_words =>
            {
                let Some((_, l0)) = st.slot_offsets(&h.regions, *slot) else { continue };
                put_words(l0, &words[..st.geo.l0_words])?;
                let upper = st.header(*slot)[1].load(Relaxed);
                for (i, chunk) in words[st.geo.l0_words..].chunks(st.geo.upper_words).enumerate() {
                    if let Some(at) = st.upper_offset(&h.regions, upper, i + 1) {
                        put_words(at, chunk)?;
                    }
                }
            }
            Record::Marker(slot, old) if (*slot as u64) < h.slots => {
                if let Some((hdr, _)) = st.slot_offsets(&h.regions, *slot) {
                    put_words(hdr + 16, &[*old as u32, (*old >> 32) as u32])?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `apply_records` to a copy in a file.
pub fn patch_copy(st: &Storage, h: &Header, tmp: &Path, records: &[Record]) -> Result<()> {
    let out = OpenOptions::new().write(true).open(tmp).map_err(|e| Error::io(e, "opening", tmp))?;
    apply_records(st, h, records, |bytes, at| {
        os::write_all_at(&out, bytes, at).map_err(|e| Error::io(e, "writing", tmp))
    })
}
