//! The native module `chassis._chassis`: the only code that touches pyo3.
//!
//! | file            | what it holds                                                          |
//! |-----------------|------------------------------------------------------------------------|
//! | `mod.rs`        | the module: its classes, `cpu_info` and the private helpers            |
//! | `vector_index/` | `VectorIndex` (the writer, and the base of `IndexReader`), by part     |
//! | `snapshot.rs`   | `Snapshot`, one pinned state                                           |
//! | `reads.rs`      | the read methods both classes share, written once (a macro)            |
//! | `search.rs`     | query arguments, `SearchResult`, the search calls both classes make    |
//! | `options.rs`    | `IndexOptions` to the core's options and back                          |
//! | `convert.rs`    | NumPy in (the one conversion, other libraries' arrays) and out         |
//! | `errors.rs`     | the exception classes, each also a built-in exception; warnings        |
//! | `run.rs`        | long calls: without the GIL, with progress and Ctrl-C                  |
//! | `doc/`          | the docstrings longer than about 15 lines, each included once          |
//!
//! Docstrings are NumPy style; tests/test_docstrings.py walks the public API and checks each
//! against the stub `python/chassis/_chassis.pyi`. They are Python's reStructuredText, not
//! rustdoc's Markdown: a doctest's `>>>` reads to clippy as a quote, hence the allow below.
#![allow(clippy::doc_lazy_continuation)]

mod convert;
mod errors;
mod options;
mod reads;
mod run;
mod search;
mod snapshot;
mod vector_index;

use crate::error::Error;
use crate::index::Options;
use errors::{to_py, IntoPyResult};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// (searches, distances they computed) in this process so far: graph searches only (not exact
/// scans). For benchmarks: distances per query measure the graph's efficiency.
#[pyfunction]
fn _search_counters() -> (u64, u64) {
    crate::graph::counters()
}

/// How many filtered searches this process planned each way, since it started.
///
/// Unfiltered searches are not counted. For seeing which plan a filter gets
/// (``docs/design/filtered-search.md``).
///
/// Returns
/// -------
/// dict
///     ``walk`` (the graph, rejected nodes routing), ``two_hop`` (the graph, only allowed
///     nodes as candidates), ``scan`` (every allowed vector, exactly), ``gave_up`` (walks that
///     did more work than the scan would have, answered by the scan instead) and ``switched``
///     (walks that met far fewer allowed nodes than the share allowed, a filter correlated
///     with the data, and went on in two hops).
#[pyfunction]
fn search_plans(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let [walk, two_hop, scan, gave_up, switched] = crate::index::plan::counters();
    let d = PyDict::new(py);
    d.set_item("walk", walk)?;
    d.set_item("two_hop", two_hop)?;
    d.set_item("scan", scan)?;
    d.set_item("gave_up", gave_up)?;
    d.set_item("switched", switched)?;
    Ok(d)
}

/// Range checks of IndexOptions (one place for them: the core's).
#[pyfunction]
fn _check_options(max_connections: i64, ef_construction: i64, ef_search: i64) -> PyResult<()> {
    // A negative value is named as the caller gave it (not as the 0 it would clamp to).
    for (name, v) in [
        ("max_connections", max_connections),
        ("ef_construction", ef_construction),
        ("ef_search", ef_search),
    ] {
        if v < 0 {
            return Err(to_py(Error::invalid(
                format!("{name}={v} is out of range"),
                "use a positive value",
            )));
        }
    }
    let conv = |v: i64| v as usize;
    Options {
        max_connections: conv(max_connections),
        ef_construction: conv(ef_construction),
        ef_search: conv(ef_search),
        ..Default::default()
    }
    .validate()
    .py()
}

/// The CPU as Chassis sees it: the distance kernels chosen and the prefetch policy.
///
/// Returns
/// -------
/// dict
///     ``arch``, ``vendor``, ``family`` and ``model`` of the CPU; ``kernel``, the distance
///     kernels in use (the widest this CPU runs, such as ``"avx512"``; the environment
///     variable ``CHASSIS_KERNEL=scalar`` forces a lower one) and ``kernels_available``;
///     ``prefetch_policy``, ``prefetch_lines`` and ``prefetch_cache``, how far ahead
///     searches prefetch (design record ADR-0015); ``page_size`` in bytes.
#[pyfunction]
fn cpu_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let c = crate::cpu::info();
    let d = PyDict::new(py);
    d.set_item("arch", c.arch)?;
    d.set_item("vendor", &c.vendor)?;
    d.set_item("family", c.family)?;
    d.set_item("model", c.model)?;
    d.set_item("kernel", crate::distance::kernels().level)?;
    d.set_item(
        "kernels_available",
        crate::distance::available().iter().map(|k| k.level).collect::<Vec<_>>(),
    )?;
    d.set_item("prefetch_policy", c.policy)?;
    d.set_item("prefetch_lines", c.prefetch_lines)?;
    d.set_item("prefetch_cache", if c.prefetch_l1 { "L1" } else { "L2" })?;
    d.set_item("page_size", crate::os::page_size())?;
    Ok(d)
}

/// Safe without the GIL (free-threaded Python): the classes are frozen, `VectorIndex` keeps
/// its index behind its own lock and detaches before taking it, and module state is in
/// once-locks, mutexes and atomics.
#[pymodule(gil_used = false)]
fn _chassis(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<vector_index::VectorIndex>()?;
    m.add_class::<search::SearchResult>()?;
    m.add_class::<snapshot::Snapshot>()?;
    m.add_function(wrap_pyfunction!(cpu_info, m)?)?;
    m.add_function(wrap_pyfunction!(_check_options, m)?)?;
    m.add_function(wrap_pyfunction!(_search_counters, m)?)?;
    m.add_function(wrap_pyfunction!(search_plans, m)?)?;
    Ok(())
}
