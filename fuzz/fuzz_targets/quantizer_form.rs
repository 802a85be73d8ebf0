//! An input is a quantizer's stored form (`Quantizer::to_bytes`, `src/quant/quantizer.rs`:
//! magic, dims, an offset and a step per dimension, xxh3). It is parsed directly for 8-bit
//! and 4-bit codes, at the dimensions it names and at the fixture's; a form that parses must
//! round-trip byte for byte and encode and decode without a panic. Then it is written over
//! the quantizer region of a fixed index with 8-bit codes (`fixtures/int8.chassis`; cut to
//! the region, zero-padded to the stored length), which is opened as a reader and as a
//! writer and used (searches walk the codes, `check` compares each code with its vector's
//! encoding, the writer adds and flushes, encoding with it). Without the checksum a parse
//! ends early, so each input also runs with its checksum recomputed when that differs.
//! Seeds: the quantizer regions of 8-bit, 4-bit and codes-only indexes (`make_corpus`).
#![no_main]

use chassis::quant::Quantizer;
use chassis::Mode;
use chassis_fuzz::{fresh, init, open_and_use, quantizer_region, write_fixture, write_index, DIMS};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const INT8: &[u8] = include_bytes!("../fixtures/int8.chassis");

/// Values that push an encoding to its ends: zero, the extremes of f32, tiny and huge steps'
/// products, negative zero.
const PROBES: [f32; 8] = [0.0, -0.0, 1.0, -1.0, f32::MAX, f32::MIN, 1e-30, 3.0e38];

fn parse(form: &[u8], dims: usize) {
    for bits in [8, 4] {
        let Ok(q) = Quantizer::from_bytes(form, dims, bits) else { continue };
        assert_eq!(q.to_bytes(), form, "a stored form that parses writes back as itself");
        let mut codes = vec![0u8; q.code_len()];
        let mut out = vec![0f32; dims];
        for p in PROBES {
            let v = vec![p; dims];
            q.encode(&v, &mut codes);
            q.decode(&codes, &mut out);
        }
    }
}

fn in_file(form: &[u8]) {
    static REGION: OnceLock<(usize, usize)> = OnceLock::new();
    let &(at, len) = REGION.get_or_init(|| {
        write_fixture(&fresh("int8.chassis"), "int8.chassis", INT8);
        quantizer_region(INT8).expect("fixtures/int8.chassis has a quantizer: run make_corpus")
    });
    let stored = Quantizer::stored_len(DIMS).min(len);
    let mut file = INT8.to_vec();
    let n = form.len().min(stored);
    file[at..at + stored].fill(0);
    file[at..at + n].copy_from_slice(&form[..n]);
    for mode in [Mode::Read, Mode::Write] {
        let path = fresh("int8.chassis");
        write_index(&path, &file);
        open_and_use(&path, mode, true);
    }
}

fn run(form: &[u8]) {
    let named = form.get(4..8).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    // Dimensions the index allows at most: beyond them no form is of any index.
    if named != DIMS && named <= chassis::format::MAX_DIMS {
        parse(form, named);
    }
    parse(form, DIMS);
    in_file(form);
}

fuzz_target!(|data: &[u8]| {
    init(false);
    run(data);
    // The checksum (the last 8 bytes) recomputed over what precedes it.
    if data.len() >= 16 {
        let body = data.len() - 8;
        let mut sealed = data.to_vec();
        let c = xxhash_rust::xxh3::xxh3_64(&data[..body]);
        sealed[body..].copy_from_slice(&c.to_le_bytes());
        if sealed != data {
            run(&sealed);
        }
    }
});
