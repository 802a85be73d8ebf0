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
//! | [`storage`]  | the file's mappings and every reference into them (`# Safety` there)      |
//! | [`format`]   | the on-disk layout, in one place                                         |
//! | [`distance`] | SIMD kernels chosen at run time                                          |
//! | [`cpu`]      | CPU facts and the prefetch policy (ADR-0015)                             |
//! | [`os`]       | the platform: system calls, locks, memory advice (ADR-0016)              |
//! | [`quant`]    | 8-bit codes: the quantizer, distances of a query to codes               |
//! | [`warm`]     | background read-in (ADR-0019)                                            |
//! | [`control`]  | cancellation, progress and thread pools of long calls                    |
//! | [`error`]    | typed errors with a `help:` line                                         |
//! | `capi`       | the C API (`include/chassis.h`): handles, statuses, `#[repr(C)]` structs  |
//!
//! Dependencies run one way: `index` -> `graph` -> `storage` -> `format` / `os`; `commit`
//! uses `storage`; nothing below `index` imports it.
//!
//! Design records the code cites, in `docs/design/`: ADR-0015 (prefetch depth), ADR-0016
//! (huge pages on request), ADR-0019 (background warm), the NUMA note (placement of an
//! in-memory index's pages) and the THP note (huge pages for anonymous buffers).
//!
//! Unsafe code: raw pointers into the mappings are made only in `storage`; the other
//! `unsafe` blocks are SIMD kernels (`distance`, `quant::kernels`), prefetch instructions
//! (`cpu`), system calls (`os`, `warm`), buffers of their own (`graph::halfcopy`, the aligned
//! query copy in `graph::search`), NumPy's buffers (`python`) and a C caller's pointers
//! (`capi`, turned into references only in `capi::types`). Each states the invariant that makes it
//! sound (`clippy::undocumented_unsafe_blocks` is denied).

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
pub mod warm;

#[cfg(feature = "capi")]
pub mod capi;
#[cfg(feature = "python")]
mod python;

pub use error::{Error, ErrorKind, Result};
pub use format::{Metric, Precision};
pub use index::{Control, Hit, Index, Mode, Options};
