//! The 32-bit slot boundary on a sparse file. Slots are u32 (an index holds at most 2^32 - 2;
//! `EMPTY` is u32::MAX), file offsets u64. A real index of 200 four-dimensional vectors gets
//! a header claiming 2^32 - 4 slots, its region table extended by the segments that takes
//! (placed as the storage places them: `segment_start`, `segment_layout`) and the file grown
//! sparsely to their end (about 360 GiB of address, a few MiB of disk). Then the last slots
//! are written through the real write path: an add lands at slot 2^32 - 4 and one at 2^32 - 3,
//! a batch that would pass the last slot is refused whole with `IndexFull` and changes
//! nothing, and each added vector is found by a search, after a flush, in a reopened index.
//! The oracle: the ids `add` returned, searched for by their own vectors (exact match, distance
//! 0) in the index as reopened from disk; the length the refusals leave; and the process's
//! peak RSS, which a visited table written whole for 2^32 slots (8 GiB) would break.
//! Linux only: it reads /proc/self/status, and other systems may not keep a file sparse.
#![cfg(target_os = "linux")]

mod common;

use chassis::format::{self, RegionEntry, RegionKind, HEADER_COPY_SIZE};
use chassis::index::{Control, Index, Mode, Options};
use common::rand_vecs;
use std::os::unix::fs::FileExt;

const D: usize = 4;

#[test]
fn the_last_slots_below_2_pow_32_are_written_found_and_never_passed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("edge.chassis");
    let opts = Options { max_connections: 4, ..Options::default() };
    {
        let idx = Index::open(&p, Some(D), Some(&opts), Mode::Write).unwrap();
        idx.add_batch(&rand_vecs(200, D, 1), 200, None, Some(1), &Control::default()).unwrap();
        idx.flush().unwrap();
    }
    // The header as the file holds it, then the segments of 2^32 - 4 slots after its regions.
    let bytes = std::fs::read(&p).unwrap();
    let mut h = format::choose_header(&bytes, &p).unwrap().header;
    let geo = h.geometry();
    let target = u32::MAX as u64 - 3;
    let mut segments = h.regions.iter().filter(|r| r.kind == RegionKind::Segment).count();
    let mut end = h.regions.iter().map(|r| r.offset + r.len).max().unwrap();
    while geo.slots_in_segments(segments) < target {
        let slots = geo.segment_slots(segments);
        let offset = geo.segment_start(end, slots);
        let len = geo.segment_layout(slots).len;
        h.regions.push(RegionEntry { kind: RegionKind::Segment, used: 0, offset, len });
        end = offset + len;
        segments += 1;
    }
    assert!(h.regions.len() <= format::MAX_REGIONS, "{} regions", h.regions.len());
    assert!(end > 1 << 38, "the file should pass 256 GiB: {end}");
    // The slots between the real ones and the target stay zeros (no way leads to them).
    (h.slots, h.linked) = (target, target);
    h.seq += 1;
    let file = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    file.set_len(end).unwrap();
    let encoded = h.encode();
    for copy in 0..2 {
        file.write_all_at(&encoded, (copy * HEADER_COPY_SIZE) as u64).unwrap();
    }
    file.sync_all().unwrap();
    drop(file);

    let added = rand_vecs(3, D, 9);
    let row = |i: usize| &added[i * D..(i + 1) * D];
    let idx = Index::open(&p, None, None, Mode::Write).unwrap();
    assert_eq!(idx.len(), 200);
    let first = idx.add(row(0), None).unwrap();
    // Two more would take slots 2^32 - 3 and 2^32 - 2: refused whole, nothing added.
    let err = idx.add_batch(&added[D..], 2, None, None, &Control::default()).unwrap_err();
    assert_eq!(err.kind, chassis::ErrorKind::IndexFull, "{}", err.message);
    assert!(err.message.contains("2**32 - 2"), "{}", err.message);
    assert_eq!(idx.len(), 201);
    let second = idx.add(row(1), None).unwrap();
    let err = idx.add(row(2), None).unwrap_err();
    assert_eq!(err.kind, chassis::ErrorKind::IndexFull, "{}", err.message);
    assert_eq!(idx.len(), 202);
    idx.flush().unwrap();
    drop(idx);

    // Reopened from disk: both found by their own vectors, at distance 0.
    let idx = Index::open(&p, None, None, Mode::Read).unwrap();
    assert_eq!(idx.len(), 202);
    for (i, id) in [(0, first), (1, second)] {
        let hits = idx.search(row(i), 1, Some(64)).unwrap();
        assert_eq!((hits[0].id, hits[0].distance), (id, 0.0), "row {i}");
    }
    // The searches' visited table covers 2^32 slots (8 GiB of u16) but holds only the pages
    // they touched: this process (the test binary runs this test alone) never held 1 GiB.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(peak_kib < 1 << 20, "peak RSS {peak_kib} KiB");
    // The disk holds only what was written: the file is sparse.
    use std::os::unix::fs::MetadataExt;
    let blocks = std::fs::metadata(&p).unwrap().blocks();
    assert!(blocks * 512 < 64 << 20, "{} bytes on disk", blocks * 512);
}
