//! Control of a long call: cancellation and progress shared with the thread that waits for it
//! (Ctrl-C and progress bars in Python), and the thread pools that batch calls run on.

use crate::error::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// Cancellation and progress of a long call, shared with the thread that waits for it.
#[derive(Default)]
pub struct Control {
    pub cancel: AtomicBool,
    pub done: AtomicU64,
    /// A count of interrupts kept by the caller (the C API's `chassis_interrupt`, one per
    /// handle) and its value when the call began: the call is cancelled once it has moved.
    /// A counter, not a flag, so that nothing has to clear it and an interrupt reaches every
    /// call running at that moment and none that starts later.
    pub interrupts: Option<(Arc<AtomicU64>, u64)>,
}

impl Control {
    /// A control cancelled by any interrupt counted on `counter` from now on.
    pub fn watching(counter: &Arc<AtomicU64>) -> Control {
        let now = counter.load(Acquire);
        Control { interrupts: Some((counter.clone(), now)), ..Control::default() }
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Relaxed)
            || self.interrupts.as_ref().is_some_and(|(c, at)| c.load(Relaxed) != *at)
    }
}

fn pools() -> &'static Mutex<HashMap<usize, Arc<rayon::ThreadPool>>> {
    static P: std::sync::OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> =
        std::sync::OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Run `f` on a pool of `threads` threads (None: the global pool of one per core).
pub fn with_threads<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> Result<R> {
    match threads {
        None => Ok(f()),
        Some(0) => Err(Error::invalid(
            "threads=0",
            "pass a positive number of threads, or None for one per core",
        )),
        Some(t) if t > 1024 => {
            Err(Error::invalid(format!("threads={t} is too many"), "pass at most 1024"))
        }
        Some(t) => {
            let pool = {
                let mut p = pools().lock();
                match p.get(&t) {
                    Some(pool) => pool.clone(),
                    None => {
                        let pool = Arc::new(
                            rayon::ThreadPoolBuilder::new()
                                .num_threads(t)
                                .thread_name(|i| format!("chassis-{i}"))
                                .build()
                                .map_err(|e| {
                                    Error::new(
                                        ErrorKind::Io,
                                        format!("cannot start threads: {e}"),
                                        "pass fewer threads",
                                    )
                                })?,
                        );
                        p.insert(t, pool.clone());
                        pool
                    }
                }
            };
            Ok(pool.install(f))
        }
    }
}
