//! What a caller chooses: construction and search parameters, where an in-memory index's
//! pages go (the NUMA note, `docs/design/numa-placement.md`), and what to do when a file is
//! missing.

use crate::error::{Error, Result};
use crate::format::{self, Metric, Precision, Quantization};

/// Largest k and ef a call accepts.
pub const MAX_K: usize = format::MAX_EF;

/// Construction and search parameters. `max_connections`, `metric`, `precision` and
/// `quantization` are fixed when a file is created.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub max_connections: usize,
    pub ef_construction: usize,
    pub ef_search: usize,
    pub metric: Metric,
    pub precision: Precision,
    /// 8-bit codes beside the vectors (`crate::quant`): searches walk them and rerank.
    pub quantization: Quantization,
    /// ADR-0016: None = let `warm` decide (vectors of 2 KB and more), Some(b) = asked for or not.
    pub huge_pages: Option<bool>,
    /// ADR-0019: read the index in on a background thread from opening.
    pub warm: bool,
    /// The NUMA note: who writes an in-memory index's new pages first (file-backed indexes
    /// live in the page cache, which first touch does not place: there it changes nothing).
    pub placement: Placement,
}

/// Where an in-memory index's pages go (NOTE-numa-placement-and-huge-pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Bulk writes of `BALANCED_MIN` items or more (a large `add_batch`, loading a file) are
    /// made by every thread of the pool, each a contiguous stretch, so that first touch
    /// spreads the pages over the NUMA nodes.
    Balanced,
    /// Everything written by one thread: the pages lie on that thread's node.
    Local,
}

impl Placement {
    pub fn parse(s: &str) -> Result<Placement> {
        match s {
            "balanced" => Ok(Placement::Balanced),
            "local" => Ok(Placement::Local),
            _ => Err(Error::invalid(
                format!("unknown placement {s:?}"),
                "use \"balanced\" or \"local\"",
            )),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Placement::Balanced => "balanced",
            Placement::Local => "local",
        }
    }
}

/// Bulk writes below this many items are made by one thread whatever the placement: there is
/// nothing worth spreading (the NUMA note).
pub const BALANCED_MIN: usize = 16_384;

impl Default for Options {
    fn default() -> Self {
        Options {
            max_connections: 16,
            ef_construction: 200,
            ef_search: 50,
            metric: Metric::Euclidean,
            precision: Precision::Full,
            quantization: Quantization::None,
            huge_pages: None,
            warm: false,
            placement: Placement::Balanced,
        }
    }
}

impl Options {
    /// These options as an index keeps them, once checked (`validate`, on the options as
    /// given: a contradiction is refused before anything is implied): codes-only storage
    /// (`precision="int8"`) is 8-bit codes (`quantization="int8"`) without the float vectors.
    pub fn normalized(&self) -> Result<Options> {
        self.validate()?;
        let mut o = self.clone();
        if o.precision == Precision::CodesOnly {
            o.quantization = Quantization::Int8;
        }
        Ok(o)
    }

    pub fn validate(&self) -> Result<()> {
        if self.precision == Precision::CodesOnly && self.quantization == Quantization::Int4 {
            return Err(Error::invalid(
                "precision=\"int8\" keeps 8-bit codes only, and quantization=\"int4\" asks for 4-bit",
                "use precision=\"full\" or \"half\" with quantization=\"int4\", or drop quantization",
            ));
        }
        if !(2..=format::MAX_M).contains(&self.max_connections) {
            // chassisdb accepted up to 32,767; the format keeps at most MAX_M (docs/format.md).
            let why = if self.max_connections > format::MAX_M {
                format!(
                    ": Chassis keeps at most {} links per node ({} on the bottom layer; \
                     chassisdb accepted up to 32,767, where each node's lists alone take \
                     hundreds of kilobytes)",
                    format::MAX_M,
                    2 * format::MAX_M
                )
            } else {
                String::new()
            };
            return Err(Error::invalid(
                format!("max_connections={} is out of range{why}", self.max_connections),
                format!(
                    "use a value from 2 to {} (16 is usual; 32 to 64 for higher recall)",
                    format::MAX_M
                ),
            ));
        }
        for (name, v) in [("ef_construction", self.ef_construction), ("ef_search", self.ef_search)]
        {
            if !(1..=MAX_K).contains(&v) {
                return Err(Error::invalid(
                    format!("{name}={v} is out of range"),
                    format!("use a value from 1 to {MAX_K}"),
                ));
            }
        }
        Ok(())
    }
}

/// What to do when a file is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Open for writing; create when missing (dimensions needed).
    Write,
    /// Open read-only, without the lock; the file must exist.
    Read,
}
