//! An input is a whole index file (header copies, region table, regions): written into a
//! scratch directory, opened as a reader and then, from the same bytes, as a writer, and used
//! as a caller would (`chassis_fuzz::exercise`: searches, `get`, `check`; the writer adds and
//! flushes). Every refusal must be a typed error; a panic, abort, hang or runaway allocation
//! is a finding. Each input runs as given and, when that differs, again with both header
//! copies' checksums recomputed (`chassis_fuzz::reseal_headers`), so that changed header
//! fields and region tables reach the checks behind the checksum. Seeds: indexes of each kind
//! the library wrote (`make_corpus`) and the fixtures.
#![no_main]

use chassis::Mode;
use chassis_fuzz::{fresh, init, open_and_use, reseal_headers, write_index};
use libfuzzer_sys::fuzz_target;

fn run(file: &[u8]) {
    for mode in [Mode::Read, Mode::Write] {
        // A fresh copy per mode: the writer may repair, truncate or extend the file.
        let path = fresh("input.chassis");
        write_index(&path, file);
        open_and_use(&path, mode, true);
    }
}

fuzz_target!(|data: &[u8]| {
    // The writer's flush goes through the index file (no redo log per input).
    init(false);
    run(data);
    let resealed = reseal_headers(data);
    if resealed != data {
        run(&resealed);
    }
});
