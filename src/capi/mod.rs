//! The C API (`include/chassis.h`, feature `capi`): the same core as Python's, for C, C++,
//! Go, Zig or any language's FFI. Nothing here imports pyo3, and `src/python/` never imports
//! this.
//!
//! | file       | what it holds                                                            |
//! |------------|--------------------------------------------------------------------------|
//! | `mod.rs`   | handles, the guard every call runs in (panics, errors, last error)       |
//! | `types.rs` | the `#[repr(C)]` structs of the header and reading the caller's memory  |
//! | `calls.rs` | the exported functions, one per call of the header                      |
//!
//! **Handles, not pointers.** An index is a `chassis_handle`, a number like a file
//! descriptor, looked up in a table on every call. Closing removes it from the table, so a
//! call on a closed handle returns `CHASSIS_INDEX_CLOSED` and a number never issued
//! `CHASSIS_INVALID_ARGUMENT`: use after close is refused, never undefined. Numbers are never
//! reused (64 bits). A call holds its own reference to the index while it runs, so a close
//! from another thread makes it fail with `CHASSIS_INDEX_CLOSED` (the core checks), never
//! free what it uses. The lookup is a read lock and a hash probe, about 20 ns.
//!
//! **Errors.** Every call returns a status: 0 or the code of the Python exception of the
//! same error (`ErrorKind::code`). The message, with its `help:` line, and the OS error number
//! are kept per thread (`chassis_last_error`, `chassis_last_errno`) and, for a call on a
//! handle, per handle (`chassis_error_message`), which a runtime that moves a caller between
//! threads (Go, async) can ask from any thread. A panic is caught at the boundary and becomes
//! `CHASSIS_ERROR` (12) with the panic's message.
//!
//! **Unsafe.** The caller's pointers are turned into references only in `types.rs`, each
//! after its null, alignment and length checks; what remains is the caller's promise the
//! header states on every call (the memory is valid for the length given).

mod calls;
mod types;

pub use calls::*;
pub use types::*;

use crate::error::{Error, ErrorKind, Result, INTERNAL_CODE};
use crate::Index;
use parking_lot::RwLock;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, OnceLock};

/// The version of the ABI the header describes: bumped when a call or struct changes in a way
/// an old program would misread. Structs grow by their `size` field without a bump.
pub const ABI_VERSION: u32 = 1;

/// An open index as the C API holds it.
pub struct Handle {
    pub index: Index,
    /// Interrupts asked for by `chassis_interrupt` (see `Control::watching`).
    pub interrupts: Arc<AtomicU64>,
}

struct Table {
    open: RwLock<HashMap<u64, Arc<Handle>>>,
    /// The last number issued (numbers start at 1; 0 is never a handle).
    issued: AtomicU64,
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table { open: RwLock::new(HashMap::new()), issued: AtomicU64::new(0) })
}

/// Put an opened index in the table; its number.
pub(crate) fn insert(index: Index) -> u64 {
    let t = table();
    let h = Arc::new(Handle { index, interrupts: Arc::new(AtomicU64::new(0)) });
    let mut open = t.open.write();
    let n = t.issued.fetch_add(1, AcqRel) + 1;
    open.insert(n, h);
    n
}

/// The index behind `handle`, or why there is none.
pub(crate) fn get(handle: u64) -> Result<Arc<Handle>> {
    table().open.read().get(&handle).cloned().ok_or_else(|| missing(handle))
}

/// Take `handle` out of the table (the caller closes it). Of two closes racing, one takes
/// it and the other is told it was closed.
pub(crate) fn remove(handle: u64) -> Result<Arc<Handle>> {
    table().open.write().remove(&handle).ok_or_else(|| missing(handle))
}

/// Why `handle` is not in the table: closed, or never issued.
fn missing(handle: u64) -> Error {
    if handle == 0 || handle > table().issued.load(Acquire) {
        return Error::invalid(
            format!("{handle} is not a handle this library issued"),
            "pass the handle chassis_open, chassis_open_read_only or chassis_open_memory wrote",
        );
    }
    Error::new(
        ErrorKind::Closed,
        format!("handle {handle} was closed"),
        "open the index again with chassis_open",
    )
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_ERRNO: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// Keep `message` (and the OS error number, 0 for none) as this thread's last error (NUL
/// bytes inside it become spaces).
pub(crate) fn set_last_error(message: &str, errno: i32) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
    LAST_ERRNO.with(|e| e.set(errno));
}

/// The OS error number of this thread's last error (0: none).
pub(crate) fn last_errno() -> i32 {
    LAST_ERRNO.with(|e| e.get())
}

/// The last failing call's error on each handle (message, OS error number), for any thread
/// to ask. An entry goes when its handle is closed.
static HANDLE_ERRORS: parking_lot::Mutex<Option<HashMap<u64, (String, i32)>>> =
    parking_lot::Mutex::new(None);

/// The last error of a call on `handle` (0: this thread's last error).
pub(crate) fn error_of(handle: u64) -> (String, i32) {
    if handle == 0 {
        let msg = LAST_ERROR.with(|l| l.borrow().to_string_lossy().into_owned());
        return (msg, last_errno());
    }
    HANDLE_ERRORS.lock().as_ref().and_then(|m| m.get(&handle).cloned()).unwrap_or_default()
}

pub(crate) fn forget_errors(handle: u64) {
    if let Some(m) = HANDLE_ERRORS.lock().as_mut() {
        m.remove(&handle);
    }
}

/// `guard` for a call on `handle`: a failure is also kept as that handle's last error.
pub(crate) fn guard_on(handle: u64, f: impl FnOnce() -> Result<()>) -> i32 {
    let status = guard(f);
    // Only for a handle still open: a closed one's error would never be forgotten.
    if status != 0 && handle != 0 && get(handle).is_ok() {
        let msg = LAST_ERROR.with(|l| l.borrow().to_string_lossy().into_owned());
        HANDLE_ERRORS.lock().get_or_insert_with(HashMap::new).insert(handle, (msg, last_errno()));
    }
    status
}

/// This thread's last error message; valid until the next call on this thread that fails.
pub(crate) fn last_error_ptr() -> *const std::ffi::c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Run one call's body: its status, with any error or panic kept as the thread's last error.
/// Every exported function goes through here, so no panic crosses into C.
pub(crate) fn guard(f: impl FnOnce() -> Result<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_last_error(&e.to_string(), e.errno.unwrap_or(0));
            e.kind.code() as i32
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            set_last_error(
                &format!(
                    "internal error: {what}\nhelp: this is a bug in chassis; please report it \
                     with the call that caused it"
                ),
                0,
            );
            INTERNAL_CODE as i32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Oracle: the status and message a caller sees for a panic, an error and success.
    #[test]
    fn guard_turns_panics_and_errors_into_codes() {
        let code = guard(|| panic!("boom {}", 7));
        assert_eq!(code, 12);
        // SAFETY: last_error_ptr points to this thread's NUL-terminated message.
        let msg = unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) }.to_str().unwrap();
        assert!(msg.starts_with("internal error: boom 7\nhelp: "), "{msg}");
        let code = guard(|| Err(Error::new(ErrorKind::IdNotFound, "no id 5", "check the id")));
        assert_eq!(code, 13);
        // SAFETY: as above.
        let msg = unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) }.to_str().unwrap();
        assert_eq!(msg, "no id 5\nhelp: check the id");
        assert_eq!(guard(|| Ok(())), 0);
    }

    /// Oracle: the table's own bookkeeping — a closed number and one never issued differ.
    #[test]
    fn closed_and_unknown_handles_differ() {
        let n = insert(Index::memory(4, None).unwrap());
        assert!(get(n).is_ok());
        remove(n).unwrap().index.close().unwrap();
        assert_eq!(get(n).err().unwrap().kind, ErrorKind::Closed);
        assert_eq!(remove(n).err().unwrap().kind, ErrorKind::Closed);
        assert_eq!(get(0).err().unwrap().kind, ErrorKind::InvalidArgument);
        assert_eq!(get(u64::MAX).err().unwrap().kind, ErrorKind::InvalidArgument);
    }
}
