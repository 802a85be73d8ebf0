//! NumPy in and out. A C-contiguous float32 array of the right rank is read in place (no
//! copy); anything else (float64, float16, ints, lists, Fortran order, strided views) is
//! converted once to C-contiguous float32 (`chassis._interop.to_float32`), on purpose; a
//! float64 value beyond the float32 range is refused there, named by row and column, rather
//! than turned into infinity. Other libraries' arrays (`__dlpack__`, Arrow) are first made
//! NumPy views of the same memory (`chassis._interop.foreign_array`), so those holding float32
//! go in without a copy too. Results are Rust vectors handed to NumPy without a copy.
//!
//! rust-numpy's `as_slice` accepts Fortran-ordered arrays (they are contiguous too) and would
//! then read them transposed, so C order is checked explicitly.

use super::errors::{named, to_py, type_error};
use crate::error::{Error, ErrorKind};
use crate::index::Ids;
use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods,
    PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyFrozenSet, PyInt, PySet};

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NP: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(NP.get_or_try_init(py, || py.import("numpy").map(|m| m.unbind()))?.bind(py))
}

/// `chassis._interop`: conversions written in Python, where NumPy and Arrow have the words.
fn interop(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static INTEROP: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(INTEROP.get_or_try_init(py, || py.import("chassis._interop").map(|m| m.unbind()))?.bind(py))
}

fn invalid(py: Python<'_>, message: String, help: &str) -> PyErr {
    named(py, "InvalidArgumentError", message, help)
}

/// `obj` itself when it is an aligned, C-contiguous float32 array of rank `ndim`.
fn readable_in_place<'py>(
    obj: &Bound<'py, PyAny>,
    ndim: usize,
) -> Option<Bound<'py, PyArrayDyn<f32>>> {
    let a = obj.cast::<PyArrayDyn<f32>>().ok()?;
    let aligned = (a.data() as usize).is_multiple_of(align_of::<f32>());
    (a.ndim() == ndim && a.is_c_contiguous() && aligned).then(|| a.clone())
}

/// `numpy.asarray(obj)`; NumPy's refusal as InvalidArgumentError, `message (NumPy's reason)`.
fn asarray<'py>(obj: &Bound<'py, PyAny>, message: &str, help: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    numpy(py)?
        .call_method1("asarray", (obj,))
        .map_err(|e| invalid(py, format!("{message} ({})", e.value(py)), help))
}

/// `obj` as an aligned, C-contiguous float32 array of rank `ndim`, without a copy when it
/// already is one.
pub fn f32_array<'py>(
    obj: &Bound<'py, PyAny>,
    ndim: usize,
    what: &str,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let py = obj.py();
    if let Some(a) = readable_in_place(obj, ndim) {
        return Ok(a);
    }
    if obj.is_instance_of::<pyo3::types::PyString>() || obj.is_instance_of::<pyo3::types::PyBytes>()
    {
        return Err(type_error(
            py,
            format!("{what} is a string, not an array of numbers"),
            "pass a NumPy array or a list of floats",
        ));
    }
    let interop = interop(py)?;
    // Other libraries' arrays as NumPy views of their memory; a float32 one needs nothing more.
    let mut obj = obj.clone();
    if obj.cast::<PyUntypedArray>().is_err() {
        let view = interop.call_method1("foreign_array", (&obj, what))?;
        if !view.is_none() {
            obj = view;
            if let Some(a) = readable_in_place(&obj, ndim) {
                return Ok(a);
            }
        }
    }
    // Lists and other array-likes: see what NumPy makes of them before converting, so that
    // strings (which NumPy would parse) and objects are refused.
    let numbers = format!("{what} cannot be read as an array of numbers");
    let a = asarray(&obj, &numbers, "pass a NumPy array or a list of floats")?;
    let u = a.cast::<PyUntypedArray>()?;
    let kind = u.dtype().kind();
    if !matches!(kind, b'f' | b'i' | b'u') {
        return Err(invalid(
            py,
            format!("{what} has dtype {}, not a real number type", u.dtype().str()?),
            "pass a float32 array (other float and int arrays are converted)",
        ));
    }
    if u.ndim() != ndim {
        let shape = if ndim == 1 { "(dimensions,)" } else { "(n, dimensions)" };
        return Err(invalid(
            py,
            format!("{what} has {} axes (shape {:?}); expected {ndim}", u.ndim(), u.shape()),
            &format!("pass an array of shape {shape}"),
        ));
    }
    // The one conversion: to float32, C order, aligned.
    let conv = interop.call_method1("to_float32", (a, what))?;
    Ok(conv.cast_into::<PyArrayDyn<f32>>()?)
}

/// An integer argument (k, ef, threads, an id). bool and float are refused as chassisdb did.
pub fn int_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<i128> {
    let py = obj.py();
    if obj.is_instance_of::<PyBool>()
        || obj.is_instance_of::<PyFloat>()
        || !(obj.is_instance_of::<PyInt>() || obj.hasattr("__index__")?)
    {
        return Err(type_error(
            py,
            format!("{name}={} is not an int", obj.repr()?),
            &format!("pass an int for {name}"),
        ));
    }
    obj.call_method0("__index__")?.extract::<i128>().map_err(|_| {
        invalid(
            py,
            format!(
                "{name}={} is out of range",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
            "pass a smaller number",
        )
    })
}

/// A positive count (k, ef, threads) within `max`.
pub fn count_arg(obj: &Bound<'_, PyAny>, name: &str, max: usize) -> PyResult<usize> {
    let v = int_arg(obj, name)?;
    if v < 1 || v > max as i128 {
        return Err(invalid(
            obj.py(),
            format!("{name}={v} is out of range"),
            &format!("pass {name} from 1 to {max}"),
        ));
    }
    Ok(v as usize)
}

/// An id: 0 ..= 2**64-2.
pub fn id_arg(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let v = int_arg(obj, "id")?;
    if v < 0 || v >= u64::MAX as i128 {
        return Err(invalid(
            obj.py(),
            format!("id {v} is out of range"),
            "use ids from 0 to 2**64-2",
        ));
    }
    Ok(v as u64)
}

/// The items of a set as ids, if every one is a Python int from 0 to 2**64-1.
fn set_ids<'py>(n: usize, items: impl Iterator<Item = Bound<'py, PyAny>>) -> Option<Vec<u64>> {
    let mut out = Vec::with_capacity(n);
    for item in items {
        if !item.is_exact_instance_of::<PyInt>() {
            return None;
        }
        out.push(item.extract::<u64>().ok()?);
    }
    Some(out)
}

/// Whether `item` is a boolean, Python's or NumPy's (`np_bool`: `numpy.bool_`). A plain int,
/// the common item, is the cheapest to pass over.
fn is_bool(item: &Bound<'_, PyAny>, np_bool: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(!item.is_exact_instance_of::<PyInt>()
        && (item.is_instance_of::<PyBool>() || item.is_instance(np_bool)?))
}

/// The first boolean of a list or tuple, with its position.
fn bool_item<'py>(
    seq: &Bound<'py, PyAny>,
    np: &Bound<'py, PyAny>,
) -> PyResult<Option<(usize, Bound<'py, PyAny>)>> {
    let np_bool = np.getattr("bool_")?;
    let find = |items: &mut dyn Iterator<Item = Bound<'py, PyAny>>| -> PyResult<_> {
        for (i, item) in items.enumerate() {
            if is_bool(&item, &np_bool)? {
                return Ok(Some((i, item)));
            }
        }
        Ok(None)
    };
    if let Ok(l) = seq.cast::<pyo3::types::PyList>() {
        find(&mut l.iter())
    } else if let Ok(t) = seq.cast::<pyo3::types::PyTuple>() {
        find(&mut t.iter())
    } else {
        Ok(None)
    }
}

/// Ids for a batch: any sequence or array of non-negative integers.
pub fn ids_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let py = obj.py();
    // A set of Python ints read as it is: through NumPy it would be a list first, then an
    // array, at several times the cost. Anything else in it takes the way below, which says
    // what is wrong.
    let fast = if let Ok(s) = obj.cast::<PySet>() {
        set_ids(s.len(), s.iter())
    } else if let Ok(s) = obj.cast::<PyFrozenSet>() {
        set_ids(s.len(), s.iter())
    } else {
        None
    };
    if let Some(ids) = fast {
        return Ok(ids);
    }
    let np = numpy(py)?;
    // Arrays and sequences as they are; sets, dict keys, generators and other iterables as a
    // list of their items (NumPy would make one object of a set).
    let is_sequence = obj.cast::<PyUntypedArray>().is_ok()
        || obj.is_instance_of::<pyo3::types::PyList>()
        || obj.is_instance_of::<pyo3::types::PyTuple>()
        || obj.is_instance_of::<pyo3::types::PyRange>()
        || (obj.hasattr("__len__")? && obj.hasattr("__getitem__")?);
    let seq = if is_sequence {
        obj.clone()
    } else {
        py.import("builtins")?.getattr("list")?.call1((obj,))?
    };
    let a = asarray(&seq, "ids cannot be read as integers", "pass integers from 0 to 2**64-2")?;
    let u = a.cast::<PyUntypedArray>()?;
    if u.ndim() != 1 {
        return Err(invalid(
            py,
            format!("ids have shape {:?}; expected one axis", u.shape()),
            "pass one id per vector",
        ));
    }
    // NumPy reads a list mixing booleans and ints as ints (`[True, 3]` as `[1, 3]`): an id
    // 1 the caller never wrote. Such a list is refused, as a boolean id alone is.
    if matches!(u.dtype().kind(), b'u' | b'i') {
        if let Some((i, item)) = bool_item(&seq, np)? {
            return Err(type_error(
                py,
                format!("ids include {} (position {i}), a boolean", item.repr()?),
                "pass integer ids only",
            ));
        }
    }
    match u.dtype().kind() {
        b'u' => {}
        // Only in filters (see `filter_ids_arg`); as ids of vectors, booleans make no sense.
        b'b' => {
            return Err(type_error(
                py,
                "ids are booleans".into(),
                "pass integer ids (a boolean mask is accepted by allowed= and excluded=)",
            ))
        }
        b'i' => {
            if u.len() > 0 && a.call_method0("min")?.extract::<i64>()? < 0 {
                return Err(invalid(
                    py,
                    "ids include a negative number".into(),
                    "use ids from 0 to 2**64-2",
                ));
            }
        }
        _ if u.len() == 0 => {}
        // Python ints too large for any integer dtype (2**64 and up) make an object array:
        // name the first one out of range rather than the dtype.
        b'O' => {
            for (i, item) in a.try_iter()?.enumerate() {
                let item = item?;
                match int_arg(&item, "id") {
                    Ok(v) if (0..u64::MAX as i128).contains(&v) => {}
                    Ok(_) | Err(_) if item.is_instance_of::<PyInt>() => {
                        return Err(invalid(
                            py,
                            format!("id {} (position {i}) is out of range", item.repr()?),
                            "use ids from 0 to 2**64-2",
                        ))
                    }
                    Ok(_) | Err(_) => {
                        return Err(type_error(
                            py,
                            format!("ids include {} (position {i}), not an integer", item.repr()?),
                            "pass integers from 0 to 2**64-2",
                        ))
                    }
                }
            }
        }
        _ => {
            return Err(type_error(
                py,
                format!("ids have dtype {}, not an integer type", u.dtype().str()?),
                "pass integers from 0 to 2**64-2",
            ))
        }
    }
    let kw = PyDict::new(py);
    kw.set_item("dtype", np.getattr("uint64")?)?;
    let c = np.call_method("ascontiguousarray", (a,), Some(&kw))?.cast_into::<PyArray1<u64>>()?;
    Ok(c.readonly().as_slice()?.to_vec())
}

/// Ids for a filter: integer ids as in `ids_arg`, or a boolean mask indexed by id
/// (`mask[id]` true: the id is in the set), copied as it is (a contiguous one in one copy of
/// its bytes; see `Ids`).
pub fn filter_ids_arg(obj: &Bound<'_, PyAny>) -> PyResult<Ids> {
    // A list or tuple of booleans is a mask too, as its array is (one whose first item is a
    // boolean is read as an array once; a list of ints is not converted twice).
    let listed =
        obj.is_instance_of::<pyo3::types::PyList>() || obj.is_instance_of::<pyo3::types::PyTuple>();
    let np = numpy(obj.py())?;
    if listed && obj.len()? > 0 && is_bool(&obj.get_item(0)?, &np.getattr("bool_")?)? {
        let a = np.call_method1("asarray", (obj,))?;
        if a.cast::<PyUntypedArray>().is_ok_and(|u| u.dtype().kind() == b'b') {
            return filter_ids_arg(&a);
        }
    }
    if let Ok(u) = obj.cast::<PyUntypedArray>() {
        if u.dtype().kind() == b'b' {
            if u.ndim() != 1 {
                return Err(invalid(
                    obj.py(),
                    format!("the mask has shape {:?}; expected one axis", u.shape()),
                    "pass a 1-D boolean array indexed by id",
                ));
            }
            let mask = match obj.cast::<PyArray1<bool>>() {
                Ok(a) if a.is_contiguous() => a.clone(),
                _ => numpy(obj.py())?
                    .call_method1("ascontiguousarray", (obj,))?
                    .cast_into::<PyArray1<bool>>()?,
            };
            return Ok(Ids::Mask(mask.readonly().as_slice()?.to_vec()));
        }
    }
    ids_arg(obj).map(Ids::List)
}

/// Whether `obj` is a sparse matrix of rows in CSR form (SciPy's `csr_matrix` or
/// `csr_array`, or anything with their `format`, `shape`, `indptr`, `indices` and `data`).
pub fn is_csr(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj.hasattr("indptr")?
        && obj.hasattr("indices")?
        && obj.getattr("format").ok().and_then(|f| f.extract::<String>().ok()).as_deref()
            == Some("csr"))
}

/// Per-query allowed ids from a CSR matrix of `nq` rows: row `i`'s stored columns whose value
/// is not zero are the ids query `i` allows (an empty row allows none).
pub fn csr_rows(obj: &Bound<'_, PyAny>, nq: usize, name: &str) -> PyResult<Vec<Option<Ids>>> {
    let py = obj.py();
    let rows: usize = obj.getattr("shape")?.get_item(0)?.extract()?;
    if rows != nq {
        return Err(invalid(
            py,
            format!("{name} is a sparse matrix of {rows} rows for {nq} queries"),
            "pass one row per query (row i holds the ids of query i as its columns)",
        ));
    }
    let indptr = ids_arg(&obj.getattr("indptr")?)?;
    let indices = ids_arg(&obj.getattr("indices")?)?;
    let np = numpy(py)?;
    let kw = PyDict::new(py);
    kw.set_item("dtype", py.import("builtins")?.getattr("bool")?)?;
    let data = np.call_method("asarray", (obj.getattr("data")?,), Some(&kw))?;
    let data = np.call_method1("ascontiguousarray", (data,))?.cast_into::<PyArray1<bool>>()?;
    let data = data.readonly();
    let data = data.as_slice()?;
    let well_formed = indptr.len() == nq + 1
        && indptr.windows(2).all(|w| w[0] <= w[1])
        && indptr.last().is_some_and(|&e| e as usize == indices.len())
        && data.len() == indices.len();
    if !well_formed {
        return Err(invalid(
            py,
            format!("{name}'s indptr, indices and data do not describe {nq} rows"),
            "pass a CSR matrix as SciPy builds it (scipy.sparse.csr_array)",
        ));
    }
    Ok(indptr
        .windows(2)
        .map(|w| {
            let (a, b) = (w[0] as usize, w[1] as usize);
            let ids = (a..b).filter(|&j| data[j]).map(|j| indices[j]).collect();
            Some(Ids::List(ids))
        })
        .collect())
}

/// Whether `obj` is a sequence of per-query id collections (a list or tuple whose first item
/// is itself a sequence or array) rather than one collection of ids.
pub fn is_per_query(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if is_csr(obj)? {
        return Ok(true);
    }
    if !(obj.is_instance_of::<pyo3::types::PyList>()
        || obj.is_instance_of::<pyo3::types::PyTuple>())
        || obj.len()? == 0
    {
        return Ok(false);
    }
    let first = obj.get_item(0)?;
    Ok(first.is_none() || first.hasattr("__len__")? || first.cast::<PyUntypedArray>().is_ok())
}

/// A (rows, cols) matrix from a row-major Vec, handed over without a copy.
pub fn matrix<'py, T: numpy::Element>(
    py: Python<'py>,
    rows: usize,
    cols: usize,
    v: Vec<T>,
) -> Bound<'py, PyArray2<T>> {
    Array2::from_shape_vec((rows, cols), v).expect("rows * cols elements").into_pyarray(py)
}

pub fn vector<'py, T: numpy::Element>(py: Python<'py>, v: Vec<T>) -> Bound<'py, PyArray1<T>> {
    v.into_pyarray(py)
}

/// An optional positive count (`threads=None`, `ef=None`): None, or as `count_arg`.
pub fn opt_count(
    obj: Option<&Bound<'_, PyAny>>,
    name: &str,
    max: usize,
) -> PyResult<Option<usize>> {
    obj.filter(|o| !o.is_none()).map(|o| count_arg(o, name, max)).transpose()
}

/// A batch of `n` vectors `width` long for an index of `dims` dimensions (`what`: "vectors",
/// "queries"): DimensionMismatchError unless `width` is `dims` or the batch is empty.
pub fn check_width(what: &str, n: usize, width: usize, dims: usize) -> PyResult<()> {
    if width == dims || n == 0 {
        return Ok(());
    }
    Err(to_py(Error::new(
        ErrorKind::DimensionMismatch,
        format!("{what} have {width} dimensions; this index holds {dims}"),
        format!("pass an array of shape (n, {dims})"),
    )))
}
