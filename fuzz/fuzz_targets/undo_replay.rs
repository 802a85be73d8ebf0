//! An input is an undo log (`<index>.undo`, `src/commit/undo.rs`) put beside a fixed index
//! file a killed writer left (`fixtures/crashed.chassis`). A load into memory beside a live
//! writer applies it to its copy; a writer's open replays it (the lists and delete markers it
//! names are put back); each index is used (searches, `get`, `check`), and the file is
//! opened again as a reader. Each input runs as given and, when that differs, again with
//! every checksum recomputed, as a crafted log would carry them: the checksums stop torn
//! writes, not a forger, and without them the fuzzer would rarely get past a record.
//! Seeds: live undo logs of writers on that file (`make_corpus`).
#![no_main]

use chassis::{Control, Index, Mode};
use chassis_fuzz::{exercise, fresh, init, open_and_use, reseal_undo, write_fixture};
use libfuzzer_sys::fuzz_target;

const CRASHED: &[u8] = include_bytes!("../fixtures/crashed.chassis");

fn run(log: &[u8]) {
    let path = fresh("crashed.chassis");
    write_fixture(&path, "crashed.chassis", CRASHED);
    std::fs::write(chassis::commit::undo::undo_path(&path), log).expect("writing the log");
    // A load into memory beside a live writer (this lock stands for it) applies the log to
    // its copy (`copy::apply_records`) instead of leaving it to a writer's open.
    let writer = std::fs::File::open(&path).expect("opening the fixture");
    if writer.try_lock().is_ok() {
        if let Ok(idx) = Index::load(&path, None, Some(1), &Control::default()) {
            let _ = exercise(&idx, false);
        }
    }
    drop(writer);
    open_and_use(&path, Mode::Write, false);
    open_and_use(&path, Mode::Read, false);
}

fuzz_target!(|data: &[u8]| {
    init(false);
    run(data);
    let resealed = reseal_undo(data);
    if resealed != data {
        run(&resealed);
    }
});
