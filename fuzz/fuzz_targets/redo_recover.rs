//! An input is a redo log (`<index>.redo`, `src/commit/redo.rs`) put beside a fixed index
//! file, the checkpoint its seeds start from (`fixtures/base.chassis`). A reader opens it
//! while the writer lock is held (so it verifies the file against the log rather than
//! recovering), then a writer's open recovers from it (judges it against the header copies
//! and applies its records), the index is used (searches, `get`, `check`), closed and opened
//! again as a reader.
//!
//! A log names the index file it belongs to by inode, which differs with every file written,
//! so the target rebinds the input to the scratch file (`chassis_fuzz::rebind_redo`): it sets
//! the log's file id (header bytes 16..24) and recomputes the checksums that depend on it,
//! only those that held under the id the input named. The rest of the log (base sequence,
//! boot, base hash, records) is the input's. Each input runs so and, when that differs,
//! again with every checksum recomputed, as a crafted log would carry them. The boot id is
//! fixed (`chassis_fuzz::init`), so a seed is a log of this boot and an input that changes
//! the boot field one of an earlier boot. Seeds: live logs of writers that made small flushes
//! on that file (`make_corpus`).
#![no_main]

use chassis::Mode;
use chassis_fuzz::{fresh, init, inode, open_and_use, rebind_redo, write_fixture};
use libfuzzer_sys::fuzz_target;

const BASE: &[u8] = include_bytes!("../fixtures/base.chassis");

fn run(data: &[u8], reseal_all: bool) {
    let path = fresh("base.chassis");
    write_fixture(&path, "base.chassis", BASE);
    let log = rebind_redo(data, inode(&path), reseal_all);
    std::fs::write(chassis::commit::redo::redo_path(&path), &log).expect("writing the log");
    // A reader beside a live writer (this lock stands for it) reads the file as it is and
    // checks it holds the log's records (`redo::verify`, for a log of an earlier boot).
    let writer = std::fs::File::open(&path).expect("opening the fixture");
    if writer.try_lock().is_ok() {
        open_and_use(&path, Mode::Read, false);
    }
    drop(writer);
    open_and_use(&path, Mode::Write, false);
    open_and_use(&path, Mode::Read, false);
}

fuzz_target!(|data: &[u8]| {
    // Small flushes could write a log of their own; the target flushes nothing.
    init(false);
    run(data, false);
    // Which checksums are recomputed does not depend on the id the log is bound to.
    if rebind_redo(data, 0, true) != rebind_redo(data, 0, false) {
        run(data, true);
    }
});
