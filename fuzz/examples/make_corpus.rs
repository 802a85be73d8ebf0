//! Writes the fixtures (`fuzz/fixtures/`) and the seed corpus (`fuzz/corpus/<target>/`) from
//! files the library itself writes, through its public API:
//!
//!     cargo run --release --manifest-path fuzz/Cargo.toml --example make_corpus
//!
//! Run it again after a change to the file format or to the logs' layout (the targets refuse
//! to start on a fixture that no longer opens), and commit what it wrote. Every write is
//! single-threaded and seeded, so the output is the same bytes from run to run, but for the
//! order of the pieces in a redo record (the writer lists changed lists from a hash set).
//!
//! - `fixtures/base.chassis`: 200 x 8 vectors, flushed, three deleted, flushed, closed.
//! - `fixtures/crashed.chassis`: `base` as a writer left it when it stopped after unflushed
//!   adds and deletes (the file copied while the writer was still open).
//! - `fixtures/int8.chassis`: 200 x 8 vectors with 8-bit codes, trained, flushed.
//! - `corpus/open_file/`: indexes of the other kinds (half precision, 4-bit codes, codes
//!   only, empty); `.ci/fuzz` seeds `open_file` with the fixtures too (full, 8-bit codes, a
//!   killed writer's file).
//!
//! Index files are kept without their zero tail (`chassis_fuzz::cut_zeros`; the targets
//! extend them again, `chassis_fuzz::write_index`).
//! - `corpus/undo_replay/`: live undo logs of writers on `base` (adds, deletes, both).
//! - `corpus/redo_recover/`: live redo logs of writers on `base` (one and three small
//!   flushes), cut after their last record (the rest of a log is zeros) and bound to file
//!   id 0 (the target binds each input to its own file).
//! - `corpus/quantizer_form/`: the quantizer regions of 8-bit, 4-bit and codes-only indexes.

use chassis::format::Quantization;
use chassis::{Control, Index, Mode, Precision};
use chassis_fuzz::{
    cut_zeros, options, quantizer_region, rebind_redo, u32_at, vectors, DIMS, VECTORS,
};
use std::path::{Path, PathBuf};

fn build(path: &Path, n: usize, precision: Precision, q: Quantization, deletes: &[u64]) {
    let _ = std::fs::remove_file(path);
    let idx = Index::open(path, Some(DIMS), Some(&options(precision, q)), Mode::Write).unwrap();
    let data = vectors(n, DIMS, 3);
    let ctl = Control::default();
    if n > 0 {
        if q != Quantization::None {
            // Learned from these rows now rather than from the first 1,000 added.
            idx.train(&data, n, Some(1), &ctl).unwrap();
        }
        idx.add_batch(&data, n, None, Some(1), &ctl).unwrap();
    }
    idx.flush().unwrap();
    for &id in deletes {
        idx.delete(id).unwrap();
    }
    idx.flush().unwrap();
    idx.close().unwrap();
}

/// A redo log cut after its last record (`src/commit/redo.rs`: records from byte 4096, each
/// `len` bytes, a multiple of 8; the zeros after them end the log).
fn cut_redo(log: &[u8]) -> Vec<u8> {
    let mut at = 4096;
    while at + 24 <= log.len() {
        let len = u32_at(log, at) as usize;
        if len < 24 || !len.is_multiple_of(8) || at + len > log.len() {
            break;
        }
        at += len;
    }
    log[..at.min(log.len())].to_vec()
}

/// Write `bytes` as `dir/name`; an index file without its zero tail (`cut_zeros`).
fn put(dir: &Path, name: &str, bytes: &[u8]) {
    let bytes = if name.ends_with(".chassis") { cut_zeros(bytes) } else { bytes };
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
    println!("{:>8} bytes  {}", bytes.len(), dir.join(name).display());
}

fn main() {
    // Every add links before it returns, so that the undo log holds its lists at once.
    std::env::set_var("CHASSIS_DEFER_LINK", "0");
    std::env::set_var("CHASSIS_BOOT_ID", "chassis-fuzz");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let fixtures = root.join("fixtures");
    let corpus = root.join("corpus");
    let work = tempfile_dir();
    let file = work.join("a.chassis");
    let undo = work.join("a.chassis.undo");
    let redo = work.join("a.chassis.redo");
    let ctl = Control::default();

    // The fixtures.
    build(&file, VECTORS, Precision::Full, Quantization::None, &[3, 5, 8]);
    let base = std::fs::read(&file).unwrap();
    put(&fixtures, "base.chassis", &base);
    build(&file, VECTORS, Precision::Full, Quantization::Int8, &[]);
    let int8 = std::fs::read(&file).unwrap();
    put(&fixtures, "int8.chassis", &int8);

    // Undo logs: a writer on `base` changes lists and markers and is "killed" (its files
    // copied while it is open).
    let extra = vectors(6, DIMS, 17);
    let scenarios: [(&str, usize, &[u64]); 3] =
        [("adds", 4, &[]), ("deletes", 0, &[10, 11, 12]), ("adds-and-deletes", 6, &[20, 21])];
    for (name, adds, deletes) in scenarios {
        std::fs::write(&file, &base).unwrap();
        let _ = std::fs::remove_file(&undo);
        let idx = Index::open(&file, None, None, Mode::Write).unwrap();
        if adds > 0 {
            idx.add_batch(&extra[..adds * DIMS], adds, None, Some(1), &ctl).unwrap();
        }
        for &id in deletes {
            idx.delete(id).unwrap();
        }
        put(&corpus.join("undo_replay"), &format!("{name}.undo"), &std::fs::read(&undo).unwrap());
        if name == "adds-and-deletes" {
            put(&fixtures, "crashed.chassis", &std::fs::read(&file).unwrap());
        }
        idx.close().unwrap();
    }

    // Redo logs: a writer on `base` makes small flushes; the log is copied before its close
    // checkpoints and removes it.
    for (name, flushes) in [("one-flush", 1), ("three-flushes", 3)] {
        std::fs::write(&file, &base).unwrap();
        let _ = std::fs::remove_file(&redo);
        let idx = Index::open(&file, None, None, Mode::Write).unwrap();
        for f in 0..flushes {
            idx.add_batch(&extra[f * DIMS..(f + 1) * DIMS], 1, None, Some(1), &ctl).unwrap();
            if f == 1 {
                idx.delete(30).unwrap();
            }
            idx.flush().unwrap();
        }
        let log = std::fs::read(&redo).expect("small flushes write a redo log");
        // Bound to file id 0 rather than this run's inode, so that the seed is the same bytes
        // from run to run (the target binds every input to its own file).
        let seed = rebind_redo(&cut_redo(&log), 0, false);
        put(&corpus.join("redo_recover"), &format!("{name}.redo"), &seed);
        idx.close().unwrap();
    }

    // Quantizer regions, and indexes of each kind to open.
    let q_dir = corpus.join("quantizer_form");
    let o_dir = corpus.join("open_file");
    let (at, _) = quantizer_region(&int8).unwrap();
    let stored = chassis::quant::Quantizer::stored_len(DIMS);
    put(&q_dir, "int8.chq", &int8[at..at + stored]);
    let kinds = [
        ("half", 40, Precision::Half, Quantization::None),
        ("int4", 40, Precision::Full, Quantization::Int4),
        ("codes-only", 40, Precision::CodesOnly, Quantization::Int8),
        ("empty", 0, Precision::Full, Quantization::None),
    ];
    for (name, n, precision, q) in kinds {
        build(&file, n, precision, q, &[1]);
        let bytes = std::fs::read(&file).unwrap();
        put(&o_dir, &format!("{name}.chassis"), &bytes);
        if let Some((at, _)) = quantizer_region(&bytes) {
            put(&q_dir, &format!("{name}.chq"), &bytes[at..at + stored]);
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// A fresh directory under `TMPDIR` (the generator needs no crate for it).
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chassis-make-corpus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
