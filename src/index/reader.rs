//! A reader following the writer: each call moves it to the newest valid commit (mapping the
//! regions added since), and to a new file when the path was replaced (a compaction).

use super::*;
use crate::os;
use crate::storage::Pins;
use crate::warm::Warm;

impl Index {
    /// The newest header sequence on disk, from the two copies' fixed fields.
    pub(super) fn newest_seq_on_disk(st: &Storage) -> u64 {
        st.newest_seq()
    }

    /// Readers: move to the newest valid commit, mapping regions added since; follow the path
    /// to a new file if it was replaced (checked at most every 50 ms).
    pub fn refresh(&self) -> Result<()> {
        if !self.read_only {
            return Ok(());
        }
        // The common case, without a lock: nothing newer, and the path not due for a check.
        let cur = self.view.read().clone();
        let newest = Self::newest_seq_on_disk(&cur.st);
        let path_due =
            self.checked_path_ms.load(Relaxed) + 50 <= self.opened.elapsed().as_millis() as u64;
        if !path_due && (newest == cur.seq || newest == self.unusable_seq.load(Relaxed)) {
            return Ok(());
        }
        let mut w = self.writer.lock();
        if path_due {
            self.checked_path_ms.store(self.opened.elapsed().as_millis() as u64, Relaxed);
            if self.path_replaced(&cur.st) {
                return self.reopen(&mut w);
            }
            // Shrunk in place (not renamed over): an error from now on, before a load faults.
            cur.st.check_size()?;
        }
        if newest == w.committed.seq || newest == self.unusable_seq.load(Relaxed) {
            return Ok(());
        }
        let mut warnings = Vec::new();
        let (h, copy) = Self::read_header(cur.st.file(), &self.path, &mut warnings)?;
        if h.seq == w.committed.seq {
            // The newest copy does not check out (being written, or damaged): do not read
            // both copies again on every call until the sequence on disk moves.
            self.unusable_seq.store(newest, Relaxed);
            return Ok(());
        }
        if cur.st.map_new_regions(&h).is_err() {
            return self.reopen(&mut w);
        }
        stored_quantizer(&cur.st, h.quantizer)?;
        self.advise_committed(&cur.st, h.slots);
        self.publish(Snap::of(cur.st.clone(), &h, false));
        w.copy = copy;
        w.committed = h;
        Ok(())
    }

    /// Whether the path now names another file than the one mapped.
    pub(super) fn path_replaced(&self, st: &Storage) -> bool {
        match (os::path_id(&self.path), os::file_id(st.file())) {
            (Ok(a), Ok(b)) => a != b,
            _ => false,
        }
    }

    /// A reader whose file was replaced (a compaction renamed a new one over it): open the
    /// new file. Searches already running finish on the old mappings, which they hold.
    pub(super) fn reopen(&self, w: &mut Writer) -> Result<()> {
        let file = Self::open_file(&self.path, Mode::Read)?;
        let opening = Pins::opening(&file);
        let mut warnings = Vec::new();
        let (h, copy) = Self::read_header(&file, &self.path, &mut warnings)?;
        if h.dims as usize != self.geo.dims
            || h.metric != self.opts.metric
            || h.precision != self.opts.precision
            || h.quantization != self.opts.quantization
            || h.max_connections as usize != self.geo.m
        {
            return Err(Error::new(
                ErrorKind::OptionsMismatch,
                format!(
                    "{} was replaced by an index with other dimensions or options",
                    self.path.display()
                ),
                "open it again",
            ));
        }
        let st = Arc::new(Storage::open(&self.path, file, false, &h)?);
        stored_quantizer(&st, h.quantizer)?;
        st.huge.store(self.view.read().st.huge.load(Acquire), Release);
        self.advise_committed(&st, h.slots);
        let rewarm = self.warm_on.load(Acquire);
        drop(self.warm.lock().take()); // stop reading the old file before it goes
        if rewarm {
            *self.warm.lock() =
                Some(Warm::start(st.clone(), h.slots, self.warm_vectors.load(Acquire)));
        }
        self.publish(Snap::of(st, &h, false));
        drop(opening);
        self.residency.reset();
        w.copy = copy;
        w.committed = h;
        Ok(())
    }
}
