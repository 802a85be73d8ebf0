//! Chassis: an embedded vector index in one memory-mapped file (vectors plus an HNSW graph).
//!
//! The core (this crate without features) never touches Python; `src/python/` wraps it in a
//! native module when built with the `python` feature.
//!
//! - [`format`]: the on-disk layout, in one place
//! - [`storage`]: the file's mappings and every unsafe pointer access into them
//! - [`undo`]: the log that makes a killed writer's changes disappear
//! - [`graph`]: HNSW search and insertion; [`locality`]: which slots a batch's vectors go to
//! - [`distance`]: SIMD kernels chosen at run time; [`cpu`]: the prefetch policy of ADR-0015
//! - [`index`]: the index a caller uses; [`warm`]: background read-in (ADR-0019);
//!   [`os`]: system calls and memory advice (huge pages, ADR-0016)

pub mod cpu;
pub mod distance;
pub mod error;
pub mod format;
pub mod graph;
pub mod halfcopy;
pub mod index;
pub mod locality;
pub mod os;
pub mod storage;
pub mod undo;
pub mod warm;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, ErrorKind, Result};
pub use format::{Metric, Precision};
pub use index::{Control, Hit, Index, Mode, Options};
