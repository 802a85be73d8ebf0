//! The exported functions of `include/chassis.h`, in the header's order. Each is a thin
//! wrapper: read the caller's arguments (`types`), look up the handle, call the core, write
//! the results, all inside `guard` (status, last error, no panic across the boundary).
//!
//! Every function taking pointers is `unsafe extern "C"`: the header states, call by call,
//! what the caller promises of them (valid for the lengths given, not written by another
//! thread during the call). Everything else is checked and refused with a status.

use super::types::*;
use super::{
    error_of, forget_errors, get, guard, guard_on, insert, last_errno, last_error_ptr, remove,
    ABI_VERSION,
};
use crate::error::{Error, ErrorKind, Result};
use crate::format::RESERVED_ID;
use crate::index::{BatchFilter, Control, Filter, Ids, Mode};
use crate::Index;
use std::ffi::c_char;
use std::sync::atomic::Ordering::AcqRel;

/// A `threads` argument: 0 means one per core.
fn pool(t: usize) -> Option<usize> {
    (t > 0).then_some(t)
}

/// A call that writes one value to `dest`: the handle looked up, a closed index refused, `f`
/// asked, the value written.
///
/// # Safety
/// `dest` is writable.
unsafe fn value_call<T>(
    handle: u64,
    dest: *mut T,
    what: &str,
    f: impl FnOnce(&Index) -> Result<T>,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        h.index.check_open()?;
        let v = f(&h.index)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { *out(dest, what)? = v };
        Ok(())
    })
}

/// `n` rows of `dims` floats at `data`, `dims` checked against the index first.
///
/// # Safety
/// `data` holds n x dims readable floats.
unsafe fn rows<'a>(
    index: &Index,
    data: *const f32,
    n: usize,
    dims: usize,
    what: &str,
) -> Result<&'a [f32]> {
    index.check_dims(dims, "each row")?;
    let Some(len) = n.checked_mul(dims) else {
        return Err(Error::invalid(format!("{what}: {n} x {dims} overflows"), "pass fewer rows"));
    };
    // SAFETY: the caller's promise, passed on.
    unsafe { slice(data, len, what) }
}

/// A call with nothing to return, on an open index.
fn unit_call(handle: u64, f: impl FnOnce(&Index)) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        h.index.check_open()?;
        f(&h.index);
        Ok(())
    })
}

/// # Safety
/// `options`, when not NULL, points to `options->size` readable bytes.
unsafe fn options_arg(options: *const COptions) -> Result<Option<crate::Options>> {
    if options.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's promise, passed on.
    let o = unsafe { read_sized(options, COptions::defaults(), "options")? };
    o.to_options().map(Some)
}

/// # Safety
/// `params`, when not NULL, points to `params->size` readable bytes, and its id arrays to
/// their lengths of readable ids.
unsafe fn params_arg(params: *const CSearchParams) -> Result<(CSearchParams, Option<Filter>)> {
    if params.is_null() {
        return Ok((CSearchParams::default(), None));
    }
    // SAFETY: the caller's promise, passed on.
    let p = unsafe { read_sized(params, CSearchParams::default(), "params")? };
    let allowed = if p.allowed.is_null() {
        if p.allowed_len > 0 {
            return Err(Error::invalid(
                format!("params->allowed is NULL with allowed_len={}", p.allowed_len),
                "pass the allowed ids, or NULL with allowed_len 0 to allow every id",
            ));
        }
        None
    } else {
        // SAFETY: the allowed ids are readable for their length (the caller's promise).
        Some(Ids::List(unsafe { slice(p.allowed, p.allowed_len, "params->allowed")? }.to_vec()))
    };
    // SAFETY: as above.
    let excluded =
        Ids::List(unsafe { slice(p.excluded, p.excluded_len, "params->excluded")? }.to_vec());
    let filter =
        (allowed.is_some() || !excluded.is_empty()).then_some(Filter { allowed, excluded });
    Ok((p, filter))
}

// ---- the library ------------------------------------------------------------------------

/// The ABI version (`CHASSIS_ABI_VERSION` of the header this library was built with).
#[no_mangle]
pub extern "C" fn chassis_abi_version() -> u32 {
    ABI_VERSION
}

/// The library's version, e.g. "0.1.0" (static storage).
#[no_mangle]
pub extern "C" fn chassis_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// The version as a number, SQLite's way: major x 1,000,000 + minor x 1,000 + patch
/// (`CHASSIS_VERSION_NUMBER` of the header it was built with).
#[no_mangle]
pub extern "C" fn chassis_libversion_number() -> u32 {
    VERSION_NUMBER
}

const fn parse(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

const VERSION_NUMBER: u32 = parse(env!("CARGO_PKG_VERSION_MAJOR")) * 1_000_000
    + parse(env!("CARGO_PKG_VERSION_MINOR")) * 1_000
    + parse(env!("CARGO_PKG_VERSION_PATCH"));

/// The OS error number (errno) of this thread's last error: ENOSPC, EIO, EACCES... for
/// `CHASSIS_STORAGE` and the like; 0 when that error had none.
#[no_mangle]
pub extern "C" fn chassis_last_errno() -> i32 {
    last_errno()
}

/// The last error of a call on `handle` (0: this thread's last error), whatever thread asks:
/// the message copied into `buf` (at most `len` bytes with its NUL; NULL with `len` 0 asks
/// only for the length) and its OS error number into `os_errno` (NULL: not wanted). Returns the
/// message's length without the NUL, as snprintf does; 0 when there is none.
///
/// # Safety
/// `buf` holds `len` writable bytes; `os_errno`, when not NULL, is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_error_message(
    handle: u64,
    buf: *mut c_char,
    len: usize,
    os_errno: *mut i32,
) -> usize {
    let (msg, errno) = error_of(handle);
    if !buf.is_null() && len > 0 {
        let n = msg.len().min(len - 1);
        // SAFETY: `buf` holds `len` writable bytes (the caller's promise) and n + 1 <= len;
        // the message is our own String, which does not overlap it.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr() as *const c_char, buf, n);
            *buf.add(n) = 0;
        }
    }
    if !os_errno.is_null() {
        // SAFETY: writable when not NULL (the caller's promise).
        unsafe { *os_errno = errno };
    }
    msg.len()
}

/// This thread's last error: one line naming what was wrong, then a `help:` line. Valid
/// until the next failing call on this thread; "" before any.
#[no_mangle]
pub extern "C" fn chassis_last_error() -> *const c_char {
    last_error_ptr()
}

/// The name of a status, e.g. "CHASSIS_ID_NOT_FOUND" (static storage; "CHASSIS_UNKNOWN" for a
/// number that is none).
#[no_mangle]
pub extern "C" fn chassis_status_name(status: i32) -> *const c_char {
    let s: &'static str = match status {
        0 => "CHASSIS_OK\0",
        1 => "CHASSIS_INVALID_ARGUMENT\0",
        2 => "CHASSIS_DIMENSION_MISMATCH\0",
        3 => "CHASSIS_OPTIONS_MISMATCH\0",
        4 => "CHASSIS_INDEX_NOT_FOUND\0",
        5 => "CHASSIS_NOT_AN_INDEX\0",
        6 => "CHASSIS_ID_IN_USE\0",
        7 => "CHASSIS_INDEX_LOCKED\0",
        8 => "CHASSIS_READ_ONLY\0",
        9 => "CHASSIS_CORRUPT_INDEX\0",
        10 => "CHASSIS_INDEX_FULL\0",
        11 => "CHASSIS_INVALID_PATH\0",
        12 => "CHASSIS_ERROR\0",
        13 => "CHASSIS_ID_NOT_FOUND\0",
        14 => "CHASSIS_INDEX_CLOSED\0",
        15 => "CHASSIS_STORAGE\0",
        16 => "CHASSIS_INTERRUPTED\0",
        _ => "CHASSIS_UNKNOWN\0",
    };
    s.as_ptr() as *const c_char
}

/// A struct's `size` given to its `_init`: room for the size field at least, checked before
/// anything is written (the caller owns only `size` bytes).
fn init_size<T: Versioned>(size: usize, what: &str) -> Result<()> {
    if size < size_of::<usize>() {
        return Err(Error::invalid(
            format!("{what}: size {size} is too small for a struct"),
            format!("pass sizeof({})", T::WHAT),
        ));
    }
    Ok(())
}

/// Fill `options` (of `size` bytes, `sizeof(chassis_options)`) with the defaults.
///
/// # Safety
/// `options` points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn chassis_options_init(options: *mut COptions, size: usize) -> i32 {
    guard(|| {
        init_size::<COptions>(size, "options")?;
        // SAFETY: `options` holds `size` writable bytes (the caller's promise), at least its
        // size field (checked above); that field is set first so that `write_sized` writes
        // just those bytes.
        unsafe {
            *out(options as *mut usize, "options")? = size;
            write_sized(options, &COptions::defaults(), "options")
        }
    })
}

/// Fill `params` (of `size` bytes, `sizeof(chassis_search_params)`) with the defaults.
///
/// # Safety
/// `params` points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn chassis_search_params_init(
    params: *mut CSearchParams,
    size: usize,
) -> i32 {
    guard(|| {
        init_size::<CSearchParams>(size, "params")?;
        // SAFETY: as in chassis_options_init.
        unsafe {
            *out(params as *mut usize, "params")? = size;
            write_sized(params, &CSearchParams::default(), "params")
        }
    })
}

/// The CPU as ADR-0015 sees it. The caller sets `info->size`.
///
/// # Safety
/// `info` points to `info->size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn chassis_get_cpu_info(info: *mut CCpuInfo) -> i32 {
    // SAFETY: the caller's promise, passed on.
    guard(|| unsafe { write_sized(info, &CCpuInfo::from(crate::cpu::info()), "info") })
}

// ---- opening and closing ----------------------------------------------------------------

/// An open call: the path and options read, `open` asked, the handle written.
///
/// # Safety
/// As `chassis_open`.
unsafe fn open_call(
    path: *const c_char,
    options: *const COptions,
    handle: *mut u64,
    open: impl FnOnce(&std::path::Path, Option<&crate::Options>) -> Result<Index>,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's promises, passed on.
        let (path, opts, handle) =
            unsafe { (self::path(path, "path")?, options_arg(options)?, out(handle, "handle")?) };
        *handle = insert(open(&path, opts.as_ref())?);
        Ok(())
    })
}

/// Open the index at `path` for writing, creating it (with `dims` dimensions) when missing.
///
/// # Safety
/// `path` is NUL-terminated; `options` is NULL or holds `options->size` bytes; `handle` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_open(
    path: *const c_char,
    dims: usize,
    options: *const COptions,
    handle: *mut u64,
) -> i32 {
    let dims = (dims > 0).then_some(dims);
    // SAFETY: the caller's promises, passed on.
    unsafe { open_call(path, options, handle, |p, o| Index::open(p, dims, o, Mode::Write)) }
}

/// Open the index at `path` read-only: a reader that sees each flush of the writer.
///
/// # Safety
/// As `chassis_open`.
#[no_mangle]
pub unsafe extern "C" fn chassis_open_read_only(
    path: *const c_char,
    options: *const COptions,
    handle: *mut u64,
) -> i32 {
    // SAFETY: the caller's promises, passed on.
    unsafe { open_call(path, options, handle, |p, o| Index::open(p, None, o, Mode::Read)) }
}

/// A new index in memory, with no file (`chassis_backup` writes it to one).
///
/// # Safety
/// `options` is NULL or holds `options->size` bytes; `handle` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_open_memory(
    dims: usize,
    options: *const COptions,
    handle: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's promises, passed on.
        let (opts, handle) = unsafe { (options_arg(options)?, out(handle, "handle")?) };
        *handle = insert(Index::memory(dims, opts.as_ref())?);
        Ok(())
    })
}

/// Close: unflushed changes are discarded, the file stays as last flushed, the writer lock
/// goes. The handle is invalid afterwards (calls on it return CHASSIS_INDEX_CLOSED).
#[no_mangle]
pub extern "C" fn chassis_close(handle: u64) -> i32 {
    let status = guard_on(handle, || remove(handle)?.index.close());
    if status == 0 {
        forget_errors(handle);
    }
    status
}

/// Make the long calls running on `handle` now return CHASSIS_INTERRUPTED (nothing they did
/// remains); calls that start later run as usual.
#[no_mangle]
pub extern "C" fn chassis_interrupt(handle: u64) -> i32 {
    guard_on(handle, || {
        get(handle)?.interrupts.fetch_add(1, AcqRel);
        Ok(())
    })
}

// ---- writing ----------------------------------------------------------------------------

/// Add one vector; its id (the caller's `*id`, or the next free one when `id` is NULL) goes
/// to `*out_id` when that is not NULL.
///
/// # Safety
/// `vector` holds `dims` floats; `id` is NULL or readable; `out_id` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_add(
    handle: u64,
    vector: *const f32,
    dims: usize,
    id: *const u64,
    out_id: *mut u64,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        h.index.check_dims(dims, "the vector")?;
        // SAFETY: the caller's promises, passed on.
        let (v, id) = unsafe {
            let id = if id.is_null() { None } else { Some(slice(id, 1, "id")?[0]) };
            (slice(vector, dims, "vector")?, id)
        };
        let got = h.index.add(v, id)?;
        if !out_id.is_null() {
            // SAFETY: non-null, writable by the caller's promise.
            unsafe { *out(out_id, "out_id")? = got };
        }
        Ok(())
    })
}

/// Add `n` vectors (`data` is n x dims, row-major), all or nothing, on `threads` threads (0:
/// one per core). `ids`: the caller's (n of them) or NULL for the next free ones; `out_ids`:
/// NULL, or n slots for the ids given.
///
/// # Safety
/// `data` holds n x dims floats, `ids` (when not NULL) n ids, `out_ids` (when not NULL) n
/// writable ids.
#[no_mangle]
pub unsafe extern "C" fn chassis_add_batch(
    handle: u64,
    data: *const f32,
    n: usize,
    dims: usize,
    ids: *const u64,
    out_ids: *mut u64,
    threads: usize,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: the caller's promises, passed on.
        let (data, ids) = unsafe {
            let ids = if ids.is_null() { None } else { Some(slice(ids, n, "ids")?) };
            (rows(&h.index, data, n, dims, "data")?, ids)
        };
        let ctl = Control::watching(&h.interrupts);
        let got = h.index.add_batch(data, n, ids, pool(threads), &ctl)?;
        if !out_ids.is_null() {
            // SAFETY: n writable ids (the caller's promise).
            unsafe { slice_mut(out_ids, n, "out_ids")? }.copy_from_slice(&got);
        }
        Ok(())
    })
}

/// 8-bit codes: learn the quantizer from `sample` (n x dims) instead of the first 1,000 rows.
///
/// # Safety
/// `sample` holds n x dims floats.
#[no_mangle]
pub unsafe extern "C" fn chassis_train(
    handle: u64,
    sample: *const f32,
    n: usize,
    dims: usize,
    threads: usize,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: the caller's promise, passed on.
        let sample = unsafe { rows(&h.index, sample, n, dims, "sample")? };
        let ctl = Control::watching(&h.interrupts);
        h.index.train(sample, n, pool(threads), &ctl)
    })
}

/// Delete the vector `id` (CHASSIS_ID_NOT_FOUND when there is none); flush makes it durable.
#[no_mangle]
pub extern "C" fn chassis_delete(handle: u64, id: u64) -> i32 {
    guard(|| if get(handle)?.index.delete(id)? { Ok(()) } else { Err(not_found(id)) })
}

/// Delete every id of `ids` (n of them) present; how many were goes to `*deleted` (NULL: not
/// wanted). Ids absent, and repeats, are skipped. One change: one undo write, one snapshot.
///
/// # Safety
/// `ids` holds n ids; `deleted` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_delete_batch(
    handle: u64,
    ids: *const u64,
    n: usize,
    deleted: *mut u64,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: the caller's promise, passed on.
        let ids = unsafe { slice(ids, n, "ids")? };
        let count = h.index.delete_batch(ids)?;
        if !deleted.is_null() {
            // SAFETY: non-null, writable by the caller's promise.
            unsafe { *out(deleted, "deleted")? = count };
        }
        Ok(())
    })
}

/// Replace the rows of the ids present and add the rest: `data` is n x dims, `ids` n distinct
/// ids; all or nothing. How many ids were present goes to `*replaced` (NULL: not wanted).
///
/// # Safety
/// `data` holds n x dims floats, `ids` n ids; `replaced` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_upsert(
    handle: u64,
    data: *const f32,
    n: usize,
    dims: usize,
    ids: *const u64,
    replaced: *mut u64,
    threads: usize,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: the caller's promises, passed on.
        let (data, ids) =
            unsafe { (rows(&h.index, data, n, dims, "data")?, slice(ids, n, "ids")?) };
        let ctl = Control::watching(&h.interrupts);
        let count = h.index.upsert(data, n, ids, pool(threads), &ctl)?;
        if !replaced.is_null() {
            // SAFETY: non-null, writable by the caller's promise.
            unsafe { *out(replaced, "replaced")? = count };
        }
        Ok(())
    })
}

fn not_found(id: u64) -> Error {
    Error::new(
        ErrorKind::IdNotFound,
        format!("no vector with id {id} in the index"),
        "check the id (chassis_contains says whether it is there)",
    )
}

// ---- searching --------------------------------------------------------------------------

/// The k nearest vectors to `query`, nearest first, into `ids` and `distances` (k each; the
/// slots past the results hold CHASSIS_NO_ID and infinity); their number to `*found` when
/// that is not NULL. `params`: NULL for the defaults.
///
/// # Safety
/// `query` holds dims floats; `params` is NULL or valid as the header says; `ids` and
/// `distances` hold k writable values each (`distances` may be NULL); `found` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_search(
    handle: u64,
    query: *const f32,
    dims: usize,
    k: usize,
    params: *const CSearchParams,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        h.index.check_dims(dims, "the query")?;
        // SAFETY: the caller's promises, passed on.
        let (q, (p, filter)) = unsafe { (slice(query, dims, "query")?, params_arg(params)?) };
        let idx = &h.index;
        let ef = (p.ef > 0).then_some(p.ef);
        let rerank = (p.rerank > 0).then_some(p.rerank);
        let hits = idx.search_in(&idx.snap(), q, k, ef, rerank, filter.as_ref())?;
        // SAFETY: k writable values each (the caller's promise).
        let ids = unsafe { slice_mut(ids, k, "ids")? };
        for (i, slot) in ids.iter_mut().enumerate() {
            *slot = hits.get(i).map_or(RESERVED_ID, |h| h.id);
        }
        if !distances.is_null() {
            // SAFETY: as above.
            let d = unsafe { slice_mut(distances, k, "distances")? };
            for (i, slot) in d.iter_mut().enumerate() {
                *slot = hits.get(i).map_or(f32::INFINITY, |h| h.distance);
            }
        }
        if !found.is_null() {
            // SAFETY: writable (the caller's promise).
            unsafe { *out(found, "found")? = hits.len() };
        }
        Ok(())
    })
}

/// `nq` queries (nq x dims, row-major) on `params->threads` threads: nq x k ids and distances,
/// row-major, padded as `chassis_search` pads. The filter applies to every query.
///
/// # Safety
/// `queries` holds nq x dims floats; `ids` and `distances` nq x k writable values each
/// (`distances` may be NULL); `params` as for `chassis_search`.
#[no_mangle]
pub unsafe extern "C" fn chassis_search_batch(
    handle: u64,
    queries: *const f32,
    nq: usize,
    dims: usize,
    k: usize,
    params: *const CSearchParams,
    ids: *mut u64,
    distances: *mut f32,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: the caller's promises, passed on.
        let (qs, (p, filter)) =
            unsafe { (rows(&h.index, queries, nq, dims, "queries")?, params_arg(params)?) };
        // nq x k fits: search_batch_in refuses more than 2^31 results.
        let idx = &h.index;
        let ctl = Control::watching(&h.interrupts);
        let (got_ids, got_d) = idx.search_batch_in(
            &idx.snap(),
            qs,
            nq,
            k,
            (p.ef > 0).then_some(p.ef),
            (p.rerank > 0).then_some(p.rerank),
            BatchFilter::Same(filter.as_ref()),
            pool(p.threads),
            &ctl,
        )?;
        let outs = got_ids.len();
        // SAFETY: nq x k writable values each (the caller's promise).
        unsafe { slice_mut(ids, outs, "ids")? }.copy_from_slice(&got_ids);
        if !distances.is_null() {
            // SAFETY: as above.
            unsafe { slice_mut(distances, outs, "distances")? }.copy_from_slice(&got_d);
        }
        Ok(())
    })
}

// ---- reading ----------------------------------------------------------------------------

/// The stored vector of `id` into `vector` (dims floats); CHASSIS_ID_NOT_FOUND when absent.
///
/// # Safety
/// `vector` holds dims writable floats.
#[no_mangle]
pub unsafe extern "C" fn chassis_get(handle: u64, id: u64, vector: *mut f32, dims: usize) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        h.index.check_dims(dims, "the output")?;
        // SAFETY: the caller's promise, passed on.
        let v = unsafe { slice_mut(vector, dims, "vector")? };
        let got = h.index.get(id)?.ok_or_else(|| not_found(id))?;
        v.copy_from_slice(&got);
        Ok(())
    })
}

/// `*contains` = 1 when `id` is in the index, else 0.
///
/// # Safety
/// `contains` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_contains(handle: u64, id: u64, contains: *mut i32) -> i32 {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        value_call(handle, contains, "contains", |i| {
            Ok((id != RESERVED_ID && i.contains(id)?) as i32)
        })
    }
}

/// `*count` = the live vectors searches see (a writer counts its unflushed adds).
///
/// # Safety
/// `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_count(handle: u64, count: *mut u64) -> i32 {
    // SAFETY: the caller's promise, passed on.
    unsafe { value_call(handle, count, "count", |i| Ok(i.len())) }
}

/// `*dims` = the index's dimensions.
///
/// # Safety
/// `dims` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_dims(handle: u64, dims: *mut usize) -> i32 {
    // SAFETY: the caller's promise, passed on.
    unsafe { value_call(handle, dims, "dims", |i| Ok(i.dims())) }
}

/// The live ids in insertion order: the first `capacity` into `ids`, their number to
/// `*count` (call with capacity 0 to learn it).
///
/// # Safety
/// `ids` holds `capacity` writable ids (NULL when capacity is 0); `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_ids(
    handle: u64,
    ids: *mut u64,
    capacity: usize,
    count: *mut u64,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: the caller's promises, passed on.
        let (buf, count) = unsafe { (slice_mut(ids, capacity, "ids")?, out(count, "count")?) };
        let all = h.index.ids()?;
        let n = all.len().min(capacity);
        buf[..n].copy_from_slice(&all[..n]);
        *count = all.len() as u64;
        Ok(())
    })
}

// ---- committing -------------------------------------------------------------------------

/// Make every change since the last flush durable (one commit).
#[no_mangle]
pub extern "C" fn chassis_flush(handle: u64) -> i32 {
    guard(|| get(handle)?.index.flush())
}

/// Discard every change since the last flush.
#[no_mangle]
pub extern "C" fn chassis_rollback(handle: u64) -> i32 {
    guard(|| get(handle)?.index.rollback())
}

/// `*version` = the application's own number (as of the last flush, for a reader).
///
/// # Safety
/// `version` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_user_version(handle: u64, version: *mut u64) -> i32 {
    // SAFETY: the caller's promise, passed on.
    unsafe { value_call(handle, version, "version", |i| Ok(i.user_version())) }
}

/// Set the application's own number; the next flush commits it, rollback restores it.
#[no_mangle]
pub extern "C" fn chassis_set_user_version(handle: u64, version: u64) -> i32 {
    guard(|| get(handle)?.index.set_user_version(version))
}

// ---- whole-index operations -------------------------------------------------------------

/// Write a consistent copy of the last flush to `dest` (a writer flushes first; an in-memory
/// index writes what it holds). An existing file at `dest` is replaced only when `overwrite`
/// is non-zero and no writer holds it.
///
/// # Safety
/// `dest` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn chassis_backup(handle: u64, dest: *const c_char, overwrite: i32) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: the caller's promise, passed on.
        let dest = unsafe { path(dest, "dest")? };
        h.index.save(&dest, overwrite != 0, &Control::watching(&h.interrupts))
    })
}

/// Take deleted vectors out of the graph's links on `threads` threads; how many live vectors
/// were re-linked goes to `*relinked` (NULL: not wanted).
///
/// # Safety
/// `relinked` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_consolidate(
    handle: u64,
    threads: usize,
    relinked: *mut u64,
) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        let count = h.index.consolidate(pool(threads), &Control::watching(&h.interrupts))?;
        if !relinked.is_null() {
            // SAFETY: non-null, writable by the caller's promise.
            unsafe { *out(relinked, "relinked")? = count };
        }
        Ok(())
    })
}

/// Rewrite the index without its deleted vectors (flushes first), on `threads` threads.
#[no_mangle]
pub extern "C" fn chassis_compact(handle: u64, threads: usize) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        h.index.compact(pool(threads), &Control::watching(&h.interrupts))
    })
}

/// Scan every vector and the whole graph. The caller sets `report->size`.
///
/// # Safety
/// `report` points to `report->size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn chassis_check(handle: u64, report: *mut CCheckReport) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        // SAFETY: checked before the scan, so a bad pointer costs no scan.
        unsafe { read_sized(report, CCheckReport::default(), "report")? };
        let r = h.index.check(&Control::watching(&h.interrupts))?;
        // SAFETY: the caller's promise, passed on.
        unsafe { write_sized(report, &CCheckReport::from(&r), "report") }
    })
}

// ---- memory (ADR-0016, ADR-0019) --------------------------------------------------------

/// ADR-0016: ask for huge pages under the committed vectors (a request; see the ADR).
#[no_mangle]
pub extern "C" fn chassis_use_huge_pages(handle: u64) -> i32 {
    unit_call(handle, |i| i.use_huge_pages())
}

/// ADR-0016: stop asking for huge pages (pieces already on them stay until reclaimed).
#[no_mangle]
pub extern "C" fn chassis_keep_small_pages(handle: u64) -> i32 {
    unit_call(handle, |i| i.keep_small_pages())
}

/// ADR-0019: read the index in on a background thread (returns at once). `vectors` 0: all
/// but the full vectors (what a search walks when they do not fit).
#[no_mangle]
pub extern "C" fn chassis_warm(handle: u64, vectors: i32) -> i32 {
    unit_call(handle, |i| {
        i.warm(vectors != 0);
    })
}

/// Wait until the running warm is done (CHASSIS_INTERRUPTED stops it).
#[no_mangle]
pub extern "C" fn chassis_wait_warm(handle: u64) -> i32 {
    guard_on(handle, || {
        let h = get(handle)?;
        h.index.wait_warm(&Control::watching(&h.interrupts))
    })
}

/// Stop a running warm (what it read stays in memory).
#[no_mangle]
pub extern "C" fn chassis_stop_warm(handle: u64) -> i32 {
    unit_call(handle, Index::stop_warm)
}

/// What the system holds of the index's mappings. The caller sets `stats->size`.
///
/// # Safety
/// `stats` points to `stats->size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn chassis_get_memory_stats(handle: u64, stats: *mut CMemoryStats) -> i32 {
    guard_on(handle, || {
        let m = get(handle)?.index.memory_stats()?;
        // SAFETY: the caller's promise, passed on.
        unsafe { write_sized(stats, &CMemoryStats::from(&m), "stats") }
    })
}
