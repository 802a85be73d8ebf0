//! A structure-aware fuzzer of opening and searching damaged files. Each input is a small
//! flushed index mutated by one to four mutations drawn from a fixed seed:
//! - header fields set to random or boundary values, the copy resealed (checksum valid);
//! - region table entries changed, resealed;
//! - a slot header's id or upper-layer reference changed, its checksum recomputed;
//! - a neighbor list's count or entries changed, its checksum recomputed;
//! - raw byte flips anywhere, and truncations.
//!
//! Every input runs in a child process (this binary again, fork per input), as a reader and
//! as a writer, with a time and an address-space bound; it must be refused with a typed
//! error or work (searches, get, check, an add and a flush). Oracle: the child's exit, as in
//! `crafted_headers.rs`. A failing input is written to `target/fuzz-failures/` with its seed:
//! copy it into `tests/data/fuzz-regressions/`, where every file is opened by
//! `regressions_stay_fixed` on every run.
//!
//!     CHASSIS_FUZZ_INPUTS=5000 CHASSIS_FUZZ_SEED=7 cargo test --release --test fuzz_open
//!
//! runs a longer campaign (the default, 150 inputs, takes about a minute in a debug build).

mod common;

use chassis::format::{self, Geometry, RegionKind, HEADER_COPY_SIZE, SLOT_HEADER};
use common::{get, put, reseal, run_child};
use std::path::{Path, PathBuf};

const DEFAULT_INPUTS: u64 = 150;

/// A small deterministic generator (xorshift64*), so that a seed names an input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A value a field of `width` bytes is likely to break on.
    fn value(&mut self, width: usize) -> u64 {
        let max = if width == 8 { u64::MAX } else { (1u64 << (8 * width)) - 1 };
        match self.below(6) {
            0 => 0,
            1 => 1,
            2 => max,
            3 => max / 2 + 1,
            4 => self.below(4096),
            _ => self.next() & max,
        }
    }
}

/// Fixed fields of a header copy as (offset, width): docs/format.md.
const HEADER_FIELDS: &[(usize, usize)] = &[
    (16, 8),
    (24, 4),
    (28, 1),
    (29, 1),
    (32, 4),
    (36, 4),
    (40, 4),
    (48, 8),
    (56, 8),
    (64, 8),
    (72, 4),
    (76, 4),
    (88, 4),
];

/// Where slot `slot`'s header and level-0 list are in the file, from the current header.
fn slot_offsets(bytes: &[u8], slot: u64) -> Option<(usize, usize, Geometry)> {
    let h = format::choose_header(bytes, Path::new("fuzz")).ok()?.header;
    let geo = Geometry::new(h.dims as usize, h.precision, h.max_connections as usize);
    let (k, local) = geo.locate(slot);
    let seg = h.regions.iter().filter(|r| r.kind == RegionKind::Segment).nth(k)?;
    let layout = geo.segment_layout(geo.segment_slots(k));
    let hdr = seg.offset + layout.headers + local * SLOT_HEADER as u64;
    let l0 = seg.offset + layout.l0 + local * geo.l0_words as u64 * 4;
    Some((hdr as usize, l0 as usize, geo)).filter(|&(_, l, _)| l + geo.l0_words * 4 <= bytes.len())
}

fn mutate(bytes: &mut Vec<u8>, rng: &mut Rng) {
    let copy = |rng: &mut Rng| rng.below(2) as usize * HEADER_COPY_SIZE;
    match rng.below(7) {
        0 | 1 => {
            // A header field, resealed: one copy or both.
            let (at, width) = HEADER_FIELDS[rng.below(HEADER_FIELDS.len() as u64) as usize];
            let v = rng.value(width);
            let both = rng.below(2) == 0;
            for c in if both { vec![0, HEADER_COPY_SIZE] } else { vec![copy(rng)] } {
                // (A copy an earlier truncation cut is left as it is.)
                let Some(h) = bytes.get_mut(c..c + HEADER_COPY_SIZE) else { continue };
                put(h, at, width, v);
                reseal(h);
            }
        }
        2 => {
            // A region table entry, resealed.
            let c = copy(rng);
            let Some(h) = bytes.get_mut(c..c + HEADER_COPY_SIZE) else { return };
            let n = get(h, 88, 4).min(8);
            let at = format::HEADER_FIXED + rng.below(n.max(1)) as usize * format::REGION_ENTRY;
            let (field, width) = [(0, 4), (4, 4), (8, 8), (16, 8)][rng.below(4) as usize];
            let v = rng.value(width);
            put(h, at + field, width, v);
            reseal(h);
        }
        3 => {
            // A slot header's id or upper reference, its checksum kept valid.
            let slot = rng.below(300);
            if let Some((hdr, _, _)) = slot_offsets(bytes, slot) {
                let word = if rng.below(2) == 0 { 0 } else { 8 };
                let v = rng.value(8);
                put(bytes, hdr + word, 8, v);
                let (id, upper) = (get(bytes, hdr, 8), get(bytes, hdr + 8, 8));
                let vcrc = get(bytes, hdr + 24, 4) as u32;
                put(bytes, hdr + 28, 4, format::header_crc(id, upper, vcrc) as u64);
            }
        }
        4 => {
            // A level-0 list's count or an entry, its checksum kept valid.
            let slot = rng.below(300);
            if let Some((_, l0, geo)) = slot_offsets(bytes, slot) {
                let words = geo.l0_words;
                if rng.below(2) == 0 {
                    let head = get(bytes, l0, 4) as u32;
                    let count = rng.value(2) as u32;
                    put(bytes, l0, 4, ((head & !0xffff) | count) as u64);
                } else {
                    let i = 2 + rng.below(words as u64 - 2) as usize;
                    let v = rng.value(4);
                    put(bytes, l0 + 4 * i, 4, v);
                }
                let head = get(bytes, l0, 4) as u32;
                let n = ((head & 0xffff) as usize).min(words - 2);
                let entries: Vec<u32> =
                    (0..n).map(|i| get(bytes, l0 + 8 + 4 * i, 4) as u32).collect();
                put(bytes, l0 + 4, 4, format::list_crc(slot as u32, 0, head, &entries) as u64);
            }
        }
        5 => {
            // Raw flips: 1 to 8 bytes anywhere.
            for _ in 0..=rng.below(8) {
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
        }
        _ => {
            // A truncation.
            let len = rng.below(bytes.len() as u64) as usize;
            bytes.truncate(len);
        }
    }
}

fn failures_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures")
}

#[test]
fn mutated_files_are_refused_or_work_within_bounds() {
    if common::child_main() {
        return;
    }
    let inputs: u64 = std::env::var("CHASSIS_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_INPUTS);
    let seed: u64 =
        std::env::var("CHASSIS_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let dir = tempfile::tempdir().unwrap();
    let original = common::base_file(&dir.path().join("base.chassis"), 300, 8);
    let file = dir.path().join("input.chassis");
    let (mut works, mut refused, mut failures) = (0, 0, Vec::new());
    // CHASSIS_FUZZ_ONE=<input seed>: that input alone (as a failure report names it).
    let one: Option<u64> = std::env::var("CHASSIS_FUZZ_ONE").ok().and_then(|v| v.parse().ok());
    let seeds: Vec<u64> = match one {
        Some(s) => vec![s],
        None => (0..inputs).map(|i| seed.wrapping_mul(1_000_003).wrapping_add(i) | 1).collect(),
    };
    for &input_seed in &seeds {
        let mut rng = Rng(input_seed);
        let mut bytes = original.clone();
        for _ in 0..=rng.below(4) {
            mutate(&mut bytes, &mut rng);
        }
        for mode in ["read", "write"] {
            std::fs::write(&file, &bytes).unwrap();
            let _ = std::fs::remove_file(dir.path().join("input.chassis.undo"));
            match run_child("mutated_files_are_refused_or_work_within_bounds", &file, mode) {
                Ok(line) if line.starts_with("OUTCOME works") => works += 1,
                Ok(_) => refused += 1,
                Err(why) => {
                    std::fs::create_dir_all(failures_dir()).unwrap();
                    let keep = failures_dir().join(format!("seed-{input_seed}.chassis"));
                    std::fs::write(&keep, &bytes).unwrap();
                    failures.push(format!(
                        "input seed {input_seed} ({mode}): {why}\n  kept as {}",
                        keep.display()
                    ));
                }
            }
        }
    }
    let runs = 2 * seeds.len();
    println!(
        "fuzzed inputs: {} from seed {seed}, {runs} runs: {works} work, {refused} refused",
        seeds.len()
    );
    assert!(failures.is_empty(), "{} runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// Every input that once failed, kept in `tests/data/fuzz-regressions/`.
#[test]
fn regressions_stay_fixed() {
    if common::child_main() {
        return;
    }
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz-regressions");
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&kept)
        .expect("tests/data/fuzz-regressions")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "chassis"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}: the test would check nothing", kept.display());
    for path in &files {
        let file = dir.path().join("input.chassis");
        for mode in ["read", "write"] {
            std::fs::copy(path, &file).unwrap();
            let _ = std::fs::remove_file(dir.path().join("input.chassis.undo"));
            if let Err(why) = run_child("regressions_stay_fixed", &file, mode) {
                failures.push(format!("{} ({mode}): {why}", path.display()));
            }
        }
    }
    println!("fuzz regressions: {} files", files.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
