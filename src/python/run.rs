//! The one helper every long call goes through: run the work without the GIL, and meanwhile,
//! every 50 ms with the GIL, check for Ctrl-C (which cancels the work; it undoes itself and
//! the caller gets `KeyboardInterrupt`) and move the progress bar.

use super::errors::to_py;
use crate::error::Result;
use crate::index::Control;
use pyo3::prelude::*;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::time::Duration;

/// Work below this many items runs on the calling thread: it is over before a Ctrl-C would
/// matter, and a helper thread would cost more than it.
const INLINE_BELOW: u64 = 64;

/// A progress bar: the one `chassis._progress.progress_bar` picks (tqdm's widget bar in Jupyter
/// with ipywidgets, tqdm's text bar elsewhere, else a line on stderr).
struct Progress<'py> {
    bar: Option<Bound<'py, PyAny>>,
    shown: u64,
}

impl<'py> Progress<'py> {
    fn new(py: Python<'py>, on: bool, total: u64, desc: &str, unit: &str) -> Progress<'py> {
        let bar = if on {
            let kw = pyo3::types::PyDict::new(py);
            let _ = kw.set_item("total", total);
            let _ = kw.set_item("desc", desc);
            let _ = kw.set_item("unit", unit);
            if unit == "B" {
                let _ = kw.set_item("unit_scale", true);
            }
            py.import("chassis._progress")
                .and_then(|m| m.getattr("progress_bar"))
                .and_then(|t| t.call((), Some(&kw)))
                .or_else(|_| {
                    py.import("chassis._progress")
                        .and_then(|m| m.getattr("TextProgress"))
                        .and_then(|t| t.call((), Some(&kw)))
                })
                .ok()
        } else {
            None
        };
        Progress { bar, shown: 0 }
    }
    fn show(&mut self, done: u64) {
        if let Some(b) = &self.bar {
            if done > self.shown {
                let _ = b.call_method1("update", (done - self.shown,));
                self.shown = done;
            }
        }
    }
    fn close(&mut self) {
        if let Some(b) = self.bar.take() {
            let _ = b.call_method0("close");
        }
    }
}

/// What a long call counts on its progress bar, and where it runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Vectors; fewer than `INLINE_BELOW` without a bar run on the calling thread.
    Vectors,
    /// Vectors, for work their number does not bound (a scan, a rebuild, encoding the stored
    /// vectors): always on a helper thread, so that Ctrl-C stops it.
    VectorsThreaded,
    /// Bytes (a copy, a load, warming), on a helper thread.
    Bytes,
}

/// Run `work` (given the cancel/progress control) without the GIL, `total` items of `count`
/// long; with `progress`, a bar titled `desc`.
pub fn run_long<T: Send>(
    py: Python<'_>,
    total: u64,
    count: Count,
    progress: bool,
    desc: &str,
    work: impl FnOnce(&Control) -> Result<T> + Send,
) -> PyResult<T> {
    let ctl = Control::default();
    if count == Count::Vectors && total < INLINE_BELOW && !progress {
        return py.detach(|| work(&ctl)).map_err(to_py);
    }
    let unit = if count == Count::Bytes { "B" } else { "vec" };
    let mut bar = Progress::new(py, progress, total, desc, unit);
    let mut interrupt: Option<PyErr> = None;
    let out = std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        // A Receiver is not Sync; the detached closure borrows it through a lock.
        let rx = parking_lot::Mutex::new(rx);
        let ctl = &ctl;
        s.spawn(move || {
            let _ = tx.send(work(ctl));
        });
        loop {
            match py.detach(|| rx.lock().recv_timeout(Duration::from_millis(50))) {
                Ok(r) => return r,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(crate::error::Error::new(
                        crate::error::ErrorKind::Io,
                        "the worker thread died",
                        "report this as a bug",
                    ))
                }
            }
            if interrupt.is_none() {
                if let Err(e) = py.check_signals() {
                    ctl.cancel.store(true, Relaxed);
                    interrupt = Some(e);
                }
            }
            bar.show(ctl.done.load(Relaxed));
        }
    });
    if out.is_ok() {
        bar.show(ctl.done.load(Relaxed));
    }
    bar.close();
    match (out, interrupt) {
        // The signal handler's own exception (KeyboardInterrupt, or what it raised).
        (Err(_), Some(e)) => Err(e),
        // The work was done before it saw the cancel: its result stands, and a Ctrl-C is
        // raised again for Python to raise just after this call returns (as after any call),
        // not swallowed.
        (Ok(v), Some(e)) => {
            // Only under Python's own SIGINT handler, which raising again cannot surprise (a
            // handler of the caller's would run twice for one key press).
            let default = (|| -> PyResult<bool> {
                let signal = py.import("signal")?;
                let now = signal.call_method1("getsignal", (signal.getattr("SIGINT")?,))?;
                Ok(now.is(&signal.getattr("default_int_handler")?))
            })()
            .unwrap_or(false);
            if default && e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                // SAFETY: called with the GIL held (`py`); it only sets a flag the
                // interpreter checks.
                unsafe { pyo3::ffi::PyErr_SetInterrupt() };
            }
            Ok(v)
        }
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(to_py(e)),
    }
}
