//! Chassis: an embedded vector index in one memory-mapped file (vectors plus an HNSW graph).
//!
//! The core never touches Python; `src/python/` wraps it in a native module when built with
//! the `python` feature, and `src/capi/` in the C API of `include/chassis.h` with the `capi`
//! feature (on by default; neither wrapper imports the other).
//!
//! | module       | what it holds                                                            |
//! |--------------|--------------------------------------------------------------------------|
//! | [`index`]    | the index a caller uses, its `impl` split by responsibility               |
//! | [`graph`]    | HNSW search and insertion, the half-precision copy, locality layout       |
//! | [`commit`]   | the commit protocol: flush order, rollback, undo log, copies of a commit |
//! | [`warm`]     | background read-in (ADR-0019)                                            |
//! | [`storage`]  | the file's mappings and every reference into them (`# Safety` there)      |
//! | [`quant`]    | 8-bit and 4-bit codes: the quantizer, distances of a query to codes      |
//! | [`distance`] | SIMD kernels for float vectors, chosen at run time                       |
//! | [`format`]   | the on-disk layout, in one place                                         |
//! | [`control`]  | cancellation, progress and thread pools of long calls                    |
//! | [`cpu`]      | CPU facts and the prefetch policy (ADR-0015)                             |
//! | [`error`]    | typed errors with a `help:` line                                         |
//! | [`tuning`]   | switches read from the environment, for measuring (one place)           |
//! | [`os`]       | the platform: system calls, locks, memory advice (ADR-0016)              |
//! | `capi`       | the C API (`include/chassis.h`): handles, statuses, `#[repr(C)]` structs  |
//! | `python`     | the Python module (feature `python`; the only user of pyo3)               |
//!
//! **Layers.** A module uses only modules of lower layers, never one above
//! (`tests/layers.rs` checks every `crate::` path against this order):
//!
//! ```text
//! capi, python          the two front ends; neither imports the other
//! index                 the index a caller uses
//! graph                 HNSW over a storage: distances to vectors, a half copy or codes
//! commit, warm          the commit protocol; background read-in
//! storage, quant        the file's mappings; codes and their kernels (neither uses the other)
//! distance              float kernels
//! format, control       the layout of the file; long calls
//! error, cpu, tuning    typed errors; CPU facts; switches for measuring
//! os                    the platform
//! ```
//!
//! Design records the code cites, in `docs/design/`: ADR-0015 (prefetch depth), ADR-0016
//! (huge pages on request), ADR-0019 (background warm), the NUMA note (placement of an
//! in-memory index's pages) and the THP note (huge pages for anonymous buffers), and one record
//! per larger decision (`docs/design/README.md` lists them).
//!
//! Unsafe code: raw pointers into the mappings and into anonymous tables of rows are made only
//! in `storage`. The other `unsafe` blocks are SIMD kernels and their calls (`distance`,
//! `quant::kernels`, `quant::nibbles`, `graph`'s `dist`), prefetch instructions (`cpu`),
//! system calls (`os`, `warm`), reinterpretations of plain arrays (`format::records`: stored
//! half-precision bytes as u16; `index::input`: f32 rows as bytes; the aligned query copy in
//! `graph::search`), NumPy's buffers (`python`) and a C caller's pointers (`capi`, turned into
//! references only in `capi::types`). Each states the invariant that makes it sound
//! (`clippy::undocumented_unsafe_blocks` is denied).

pub mod commit;
pub mod control;
pub mod cpu;
pub mod distance;
pub mod error;
pub mod format;
pub mod graph;
pub mod index;
pub mod os;
pub mod quant;
pub mod storage;
pub mod tuning;
pub mod warm;

#[cfg(feature = "capi")]
pub mod capi;
#[cfg(feature = "python")]
mod python;

pub use error::{Error, ErrorKind, Result};
pub use format::{Metric, Precision};
pub use index::{Control, Hit, Index, Mode, Options};
