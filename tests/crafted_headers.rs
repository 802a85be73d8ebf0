//! Crafted headers with valid checksums: every header field set to 0, 1, its largest value and
//! values just past what the rest of the file allows, written into the current header copy or
//! into both, then opened as a reader and as a writer in a child process (this test binary run
//! again) with a time and an address-space bound. Each must be refused with a typed error or
//! work (len, ids, a search, check; a writer also adds and flushes); a hang, a crash or a panic
//! fails the case. The oracle is the child's exit: typed outcomes print a line, anything else
//! does not exit 0.

mod common;

use chassis::format::{self, Header, HEADER_FIXED, MAX_EF, MAX_LEVEL, REGION_ENTRY};
use chassis::index::{Control, Index, Mode};
use common::{base_file, craft, rand_vecs, run_child};

/// (name, byte offset, width in bytes) of the header's fixed fields (docs/format.md).
const FIELDS: &[(&str, usize, usize)] = &[
    ("seq", 16, 8),
    ("dims", 24, 4),
    ("metric", 28, 1),
    ("precision", 29, 1),
    ("max_connections", 32, 4),
    ("ef_construction", 36, 4),
    ("ef_search", 40, 4),
    ("page_size", 44, 4),
    ("slots", 48, 8),
    ("live", 56, 8),
    ("next_id", 64, 8),
    ("entry", 72, 4),
    ("max_level", 76, 4),
    ("user_version", 80, 8),
    ("region_count", 88, 4),
    ("region0_kind", HEADER_FIXED, 4),
    ("region0_used", HEADER_FIXED + 4, 4),
    ("region0_offset", HEADER_FIXED + 8, 8),
    ("region0_len", HEADER_FIXED + 16, 8),
    ("region1_kind", HEADER_FIXED + REGION_ENTRY, 4),
    ("region1_used", HEADER_FIXED + REGION_ENTRY + 4, 4),
    ("region1_offset", HEADER_FIXED + REGION_ENTRY + 8, 8),
    ("region1_len", HEADER_FIXED + REGION_ENTRY + 16, 8),
];

/// The values a field is set to: 0, 1, its largest, and values just past what the file allows.
fn values(name: &str, width: usize, h: &Header) -> Vec<u64> {
    let max = if width == 8 { u64::MAX } else { (1u64 << (8 * width)) - 1 };
    let mut v = vec![0, 1, max];
    let capacity = 1024u64; // the first segment's slots, all this file has
    v.extend(match name {
        "seq" => vec![format::MAX_WRITABLE_SEQ, format::MAX_WRITABLE_SEQ + 1],
        "dims" => vec![h.dims as u64 + 1, format::MAX_DIMS as u64 + 1],
        "metric" | "precision" => vec![3],
        "max_connections" => vec![h.max_connections as u64 + 1, format::MAX_M as u64 + 1],
        "ef_construction" | "ef_search" => vec![MAX_EF as u64 + 1],
        "slots" => vec![h.slots + 1, capacity, capacity + 1],
        "live" => vec![h.slots + 1, h.live - 1],
        "next_id" => vec![h.live - 1],
        "entry" => vec![h.slots, h.slots - 1, format::EMPTY as u64],
        "max_level" => vec![MAX_LEVEL as u64 + 1, h.max_level as u64 + 1],
        "region_count" => vec![h.regions.len() as u64 + 1, format::MAX_REGIONS as u64 + 1],
        n if n.ends_with("_kind") => vec![3],
        n if n.ends_with("_used") => vec![1 << 20, (1 << 20) + 1],
        n if n.ends_with("_offset") => vec![format::DATA_START - 4096, 1 << 40],
        n if n.ends_with("_len") => vec![1 << 40, 4096],
        _ => vec![],
    });
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn every_crafted_header_is_refused_or_works_within_bounds() {
    if common::child_main() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.chassis");
    let original = base_file(&base, 300, 8);
    let choice = format::choose_header(&original, &base).unwrap();
    let (current, h) = (choice.copy, choice.header);
    assert!(h.max_level > 0 && h.regions.len() >= 2, "the base file needs upper layers and a heap");

    let (mut cases, mut works, mut refused) = (0, 0, 0);
    let mut failures = Vec::new();
    let crafted = dir.path().join("crafted.chassis");
    for &(name, at, width) in FIELDS {
        for value in values(name, width, &h) {
            for both in [false, true] {
                let mut bytes = original.clone();
                let copies = if both { vec![0, 1] } else { vec![current] };
                craft(&mut bytes, &copies, at, width, value);
                for mode in ["read", "write"] {
                    std::fs::write(&crafted, &bytes).unwrap();
                    let _ = std::fs::remove_file(dir.path().join("crafted.chassis.undo"));
                    cases += 1;
                    match run_child(
                        "every_crafted_header_is_refused_or_works_within_bounds",
                        &crafted,
                        mode,
                    ) {
                        Ok(line) if line.starts_with("OUTCOME works") => works += 1,
                        Ok(_) => refused += 1,
                        Err(why) => failures.push(format!(
                            "{name}={value} ({}, {mode}): {why}",
                            if both { "both copies" } else { "current copy" }
                        )),
                    }
                }
            }
        }
    }
    println!("crafted header cases: {cases} ({works} work, {refused} refused with a typed error)");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(cases > 300 && works > 0 && refused > 0);
}

/// The two corners found by hand, with the answer each must get: a top layer of 2^32-1 (every
/// search hung for about 26 s) is refused naming the field, and a sequence at its limit (the
/// next flush wrapped to 0 and was lost) is refused to a writer while a reader still opens it.
#[test]
fn a_huge_top_layer_and_a_sequence_at_its_limit_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    {
        let idx = Index::open(&p, Some(4), None, Mode::Write).unwrap();
        idx.add_batch(&rand_vecs(200, 4, 5), 200, None, Some(1), &Control::default()).unwrap();
        idx.flush().unwrap();
    }
    let original = std::fs::read(&p).unwrap();
    let current = format::choose_header(&original, &p).unwrap().copy;
    let write_crafted = |at: usize, width: usize, value: u64, copies: &[usize]| {
        let mut bytes = original.clone();
        craft(&mut bytes, copies, at, width, value);
        std::fs::write(&p, &bytes).unwrap();
    };
    write_crafted(76, 4, u32::MAX as u64, &[0, 1]);
    for mode in [Mode::Read, Mode::Write] {
        let err = Index::open(&p, None, None, mode).err().expect("refused");
        assert_eq!(err.kind, chassis::ErrorKind::CorruptIndex);
        assert!(err.message.contains("max_level=4294967295"), "{}", err.message);
    }
    // In the current copy (both copies at one sequence would tie, and the first wins).
    write_crafted(16, 8, u64::MAX, &[current]);
    let err = Index::open(&p, None, None, Mode::Write).err().expect("refused");
    assert_eq!(err.kind, chassis::ErrorKind::IndexFull);
    assert!(err.message.contains("commit sequence"), "{}", err.message);
    let reader = Index::open(&p, None, None, Mode::Read).unwrap();
    assert_eq!(reader.len(), 200);
    assert_eq!(reader.search(&[0.0; 4], 5, None).unwrap().len(), 5);
}
