//! `IndexOptions` across the boundary: the Python dataclass (`chassis._options`, which
//! validates it) to the core's `Options` and back.

use super::errors::{type_error, IntoPyResult};
use crate::format::{Metric, Precision, Quantization};
use crate::index::{Options, Placement};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Options from a Python `IndexOptions` (or a dict of its fields), validated there.
pub fn options_from(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Options>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    let cls = py.import("chassis._options")?.getattr("IndexOptions")?;
    let obj = if let Ok(d) = obj.cast::<PyDict>() { cls.call((), Some(d))? } else { obj.clone() };
    if !obj.is_instance(&cls)? {
        return Err(type_error(
            py,
            format!("options={} is not an IndexOptions", obj.repr()?),
            "pass chassis.IndexOptions(...) or a dict of its fields",
        ));
    }
    obj.call_method0("validate")?;
    let metric: String = obj.getattr("metric")?.extract()?;
    let precision: String = obj.getattr("precision")?.extract()?;
    let o = Options {
        max_connections: obj.getattr("max_connections")?.extract()?,
        ef_construction: obj.getattr("ef_construction")?.extract()?,
        ef_search: obj.getattr("ef_search")?.extract()?,
        metric: Metric::parse(&metric).py()?,
        precision: Precision::parse(&precision).py()?,
        quantization: Quantization::parse(
            obj.getattr("quantization")?.extract::<Option<String>>()?.as_deref(),
        )
        .py()?,
        huge_pages: obj.getattr("huge_pages")?.extract()?,
        warm: obj.getattr("warm")?.extract()?,
        placement: Placement::parse(&obj.getattr("placement")?.extract::<String>()?).py()?,
    };
    Ok(Some(o))
}

pub fn options_to_py(py: Python<'_>, o: &Options) -> PyResult<Py<PyAny>> {
    let kw = PyDict::new(py);
    kw.set_item("max_connections", o.max_connections)?;
    kw.set_item("ef_construction", o.ef_construction)?;
    kw.set_item("ef_search", o.ef_search)?;
    kw.set_item("metric", o.metric.name())?;
    kw.set_item("precision", o.precision.name())?;
    kw.set_item("quantization", o.quantization.name())?;
    kw.set_item("huge_pages", o.huge_pages)?;
    kw.set_item("warm", o.warm)?;
    kw.set_item("placement", o.placement.name())?;
    Ok(py.import("chassis._options")?.getattr("IndexOptions")?.call((), Some(&kw))?.unbind())
}
