//! Opening: an index file (created under a temporary name and linked into place), an
//! in-memory index, a file loaded into memory; a reader's move to each new commit.

use super::reuse;
use super::*;
use crate::commit::undo::undo_path;
use crate::commit::{self, copy};
use crate::format::{choose_header, DATA_START, EMPTY, HEADER_COPY_SIZE};
use crate::graph::LOCK_STRIPES;
use crate::os;
use crate::storage::Pins;
use input::check_dims_arg;
use std::fs::{File, OpenOptions};

impl Index {
    /// Open (or, in write mode, create) the index at `path`.
    /// `dims`: required to create; checked against the file when given.
    /// `opts`: fixed fields are checked against the file; tunables apply to this handle.
    pub fn open(
        path: &Path,
        dims: Option<usize>,
        opts: Option<&Options>,
        mode: Mode,
    ) -> Result<Index> {
        // An error names the index's file (Python's `OSError.filename`), unless it names
        // another already (a log, a temporary sibling).
        Self::open_inner(path, dims, opts, mode).map_err(|e| {
            if e.path.is_none() {
                e.at(path)
            } else {
                e
            }
        })
    }

    fn open_inner(
        path: &Path,
        dims: Option<usize>,
        opts: Option<&Options>,
        mode: Mode,
    ) -> Result<Index> {
        let normalized = opts.map(Options::normalized).transpose()?;
        let opts = normalized.as_ref();
        if let Some(d) = dims {
            check_dims_arg(d)?;
        }
        if path.as_os_str().is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidPath,
                "the path is empty",
                "pass a file path such as \"vectors.chassis\"",
            ));
        }
        if path.is_dir() {
            return Err(Error::new(
                ErrorKind::InvalidPath,
                format!("{} is a directory", path.display()),
                "pass a file path inside it, such as \"vectors.chassis\"",
            ));
        }
        let mut file = None;
        if !path.exists() {
            if mode == Mode::Read {
                return Err(Error::new(
                    ErrorKind::IndexNotFound,
                    format!("no index at {}", path.display()),
                    "check the path; a writer creates the file (VectorIndex(path, dimensions))",
                ));
            }
            let Some(d) = dims else {
                return Err(Error::new(
                    ErrorKind::IndexNotFound,
                    format!("no index at {}", path.display()),
                    "pass dimensions to create one: VectorIndex(path, dimensions)",
                ));
            };
            let parent =
                path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(Error::new(
                    ErrorKind::InvalidPath,
                    format!("directory {} does not exist", parent.display()),
                    "create the directory first",
                ));
            }
            file = Self::create(path, d, opts.cloned().unwrap_or_default())?;
        }
        let recovered = match (mode, &file) {
            (Mode::Read, None) => Self::recover_for_reader(path)?,
            _ => Vec::new(),
        };
        let file = match file {
            Some(f) => f,
            None => Self::open_file(path, mode)?,
        };
        let mut idx = Self::from_file(path, file, dims, opts, mode)?;
        idx.warnings.splice(0..0, recovered);
        Ok(idx)
    }

    /// SQLite's rule for a hot journal, for readers: logs a writer left beside the file (its
    /// undo log, whose lists no commit wrote, or a redo log of flushes the file may lack) are
    /// applied before a reader maps the file, by opening it as a writer for the moment, which
    /// recovers it under the writer's lock. A writer that holds the lock is alive: its logs are
    /// its own, and readers read its commits. Where the file may not be written (permissions,
    /// a read-only file system), a reader refuses a file whose undo log holds changes after
    /// its commit (a redo log the file lacks is refused by `redo::verify`). Returns what the
    /// recovery said (`Index::warnings`).
    fn recover_for_reader(path: &Path) -> Result<Vec<String>> {
        let undo = undo_path(path);
        let undo_left = undo.metadata().is_ok_and(|m| m.len() > 0);
        if !undo_left && !redo::redo_path(path).exists() {
            return Ok(Vec::new());
        }
        match Index::open(path, None, None, Mode::Write) {
            Ok(writer) => {
                let said = writer.warnings.clone();
                writer.close()?;
                Ok(said)
            }
            Err(e) if e.kind == ErrorKind::IndexLocked => Ok(Vec::new()),
            // Not to be written here (EPERM, EACCES, EROFS: the same numbers on every platform
            // built for), or not by a writer at all (a sequence past a writer's limit): read
            // as it is unless the undo log holds changes after the file's commit.
            Err(e) if matches!(e.errno, Some(1 | 13 | 30)) || e.kind == ErrorKind::IndexFull => {
                let file = Self::open_file(path, Mode::Read)?;
                let (h, _) = Self::read_header(&file, path, &mut Vec::new())?;
                if !undo_left || UndoLog::read(path, h.seq)?.is_empty() {
                    return Ok(Vec::new()); // none, or a log of a commit made since: stale
                }
                Err(Error {
                    kind: ErrorKind::CorruptIndex,
                    message: format!(
                        "{}: its last writer stopped in the middle of a change, and its undo \
                         log ({}) must be applied before the file can be read, and this process \
                         cannot apply it ({})",
                        path.display(),
                        undo.display(),
                        e.message
                    ),
                    help: "open it once as a writer (VectorIndex(path)) where the file can be \
                           written, which applies the log; then readers can open it"
                        .into(),
                    errno: e.errno,
                    path: None,
                })
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn open_file(path: &Path, mode: Mode) -> Result<File> {
        let f =
            OpenOptions::new().read(true).write(mode == Mode::Write).open(path).map_err(|e| {
                let mut err = Error::io(e, "opening", path);
                if err.kind == ErrorKind::IndexNotFound {
                    err.help = "check the path".into();
                }
                err
            })?;
        if mode == Mode::Write
            && !os::try_lock_exclusive(&f).map_err(|e| Error::io(e, "locking", path))?
        {
            return Err(Error::new(
                ErrorKind::IndexLocked,
                format!(
                    "{} is open for writing elsewhere (in this or another process)",
                    path.display()
                ),
                "close the other writer first, or open with read_only=True to search",
            )
            .at(path));
        }
        Ok(f)
    }

    /// Create a new file: write it under a temporary name, then link it into place, so that
    /// nobody ever sees a half-made index. Returns None if someone else created it first.
    pub(super) fn create(path: &Path, dims: usize, opts: Options) -> Result<Option<File>> {
        let tmp = copy::tmp_sibling(path, "creating");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io(e, "creating", &tmp))?;
        let cleanup = |e: Error| {
            let _ = std::fs::remove_file(&tmp);
            e
        };
        if !os::try_lock_exclusive(&f).map_err(|e| cleanup(Error::io(e, "locking", &tmp)))? {
            return Err(cleanup(Error::new(
                ErrorKind::IndexLocked,
                "could not lock a new file",
                "retry",
            )));
        }
        let mut h = Self::new_header(dims, &opts, 0);
        let write = |h: &Header, copy: usize| {
            os::write_all_at(&f, &h.encode(), (copy * HEADER_COPY_SIZE) as u64)
        };
        write(&h, 1).map_err(|e| cleanup(Error::io(e, "writing", &tmp)))?;
        h.seq = 1;
        write(&h, 0).map_err(|e| cleanup(Error::io(e, "writing", &tmp)))?;
        f.set_len(DATA_START).map_err(|e| cleanup(Error::io(e, "writing", &tmp)))?;
        f.sync_all().map_err(|e| cleanup(Error::io(e, "syncing", &tmp)))?;
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                // The name durable before any flush is promised through it (the file stays:
                // it is an empty index, which opening again takes).
                os::sync_dir(path).map_err(|e| Error::io(e, "syncing the folder of", path))?;
                Ok(Some(f))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(Error::io(e, "creating", path)),
        }
    }

    /// Read and choose the header of an open file, with a warning if a copy is damaged.
    pub(super) fn read_header(
        file: &File,
        path: &Path,
        warnings: &mut Vec<String>,
    ) -> Result<(Header, usize)> {
        let bytes = Storage::read_header_bytes(file, path)?;
        let choice = choose_header(&bytes, path)?;
        if let Some(d) = &choice.other_damage {
            warnings.push(format!(
                "{}: header copy {} is damaged ({d}); using copy {} (commit {})",
                path.display(),
                1 - choice.copy,
                choice.copy,
                choice.header.seq
            ));
        }
        Ok((choice.header, choice.copy))
    }

    pub(super) fn from_file(
        path: &Path,
        file: File,
        dims: Option<usize>,
        opts: Option<&Options>,
        mode: Mode,
    ) -> Result<Index> {
        let mut warnings = Vec::new();
        // A reader holds the opening pin until its snapshot pins the commit it reads
        // (`storage::pins`).
        let opening = (mode == Mode::Read).then(|| Pins::opening(&file)).flatten();
        // A writer first applies the small commits the redo log holds and the file may lack
        // (the machine stopped before the kernel wrote them back); a reader checks the file
        // holds them (`commit::redo`).
        let recovered = match mode {
            Mode::Write => redo::recover(path, &file)?,
            Mode::Read => redo::Recovered::default(),
        };
        let (h, copy) = Self::read_header(&file, path, &mut warnings)?;
        let fell_back = !warnings.is_empty();
        if mode == Mode::Read {
            redo::verify(path, &file, h.seq)?;
        }
        if recovered.applied > 0 {
            warnings.push(format!(
                "{}: the machine stopped before the last flushes reached the index file; they \
                 were applied from its redo log ({} flushes)",
                path.display(),
                recovered.applied
            ));
        }
        if recovered.foreign {
            warnings.push(format!(
                "{}: the redo log beside it was written for other contents (a file copied over \
                 this one?) and was removed without being applied",
                path.display()
            ));
        }
        if mode == Mode::Write && h.seq > format::MAX_WRITABLE_SEQ {
            return Err(Error::new(
                ErrorKind::IndexFull,
                format!(
                    "{}: the commit sequence is {}, beyond the {} a writer commits up to",
                    path.display(),
                    h.seq,
                    format::MAX_WRITABLE_SEQ
                ),
                "open it read-only (read_only=True) to search it or back it up",
            ));
        }
        if let Some(d) = dims {
            if d != h.dims as usize {
                return Err(Error::new(
                    ErrorKind::DimensionMismatch,
                    format!("{} holds {}-dimensional vectors, not {d}", path.display(), h.dims),
                    format!("pass dimensions={} (or None) to open it", h.dims),
                ));
            }
        }
        let mut eff = Options {
            max_connections: h.max_connections as usize,
            ef_construction: h.ef_construction.max(1) as usize,
            ef_search: h.ef_search.max(1) as usize,
            metric: h.metric,
            precision: h.precision,
            quantization: h.quantization,
            huge_pages: None,
            warm: false,
            placement: Placement::Balanced,
        };
        if let Some(o) = opts {
            // A read-only open takes the fixed options from the file, as chassisdb does.
            if mode == Mode::Write {
                Self::check_fixed(path, o, &eff, "open")?;
            }
            eff.ef_construction = o.ef_construction;
            eff.ef_search = o.ef_search;
            eff.huge_pages = o.huge_pages;
            eff.warm = o.warm;
            eff.placement = o.placement;
        }
        if mode == Mode::Write && !fell_back {
            // A writer that died (or was rolled back) may have grown the file with regions it
            // never committed: nothing maps them (readers map committed regions only), so the
            // file goes back to the committed end. Best effort: a longer file is only sparse.
            let end = h.end_of_regions().max(DATA_START);
            if file.metadata().is_ok_and(|m| m.len() > end) {
                let _ = file.set_len(end);
            }
        }
        let committed_slots = h.slots;
        let st = Arc::new(Storage::open(path, file, mode == Mode::Write, &h)?);
        // A damaged quantizer is refused here rather than silently walked around.
        stored_quantizer(&st, h.quantizer)?;
        let mut idx = Self::assemble(path, eff, st, h, copy, mode == Mode::Read, warnings);
        drop(opening);
        if mode == Mode::Write {
            idx.replay_undo()?;
            if fell_back {
                idx.forget_lost_commit()?;
            }
            idx.remove_leftovers();
            // Blocks a dead writer reserved past the commit go back to the filesystem.
            idx.view.read().st.give_back(committed_slots);
        }
        // huge_pages=None: on when warm is and vectors are 2 KB or longer (as chassisdb).
        if idx.opts.huge_pages.unwrap_or(idx.opts.warm && idx.geo.vec_bytes >= 2048) {
            idx.use_huge_pages();
        }
        if idx.opts.warm {
            idx.warm(true);
        }
        Ok(idx)
    }

    /// Err if `want` asks for other fixed options (metric, precision, max_connections) than the
    /// file at `path` has (`have`); `verb`: what the caller was doing, for the help text.
    pub(super) fn check_fixed(
        path: &Path,
        want: &Options,
        have: &Options,
        verb: &str,
    ) -> Result<()> {
        for (name, w, h) in [
            ("metric", want.metric.name().to_string(), have.metric.name().to_string()),
            ("precision", want.precision.name().to_string(), have.precision.name().to_string()),
            ("max_connections", want.max_connections.to_string(), have.max_connections.to_string()),
            (
                "quantization",
                want.quantization.name().unwrap_or("None").to_string(),
                have.quantization.name().unwrap_or("None").to_string(),
            ),
        ] {
            if w != h {
                return Err(Error::new(
                    ErrorKind::OptionsMismatch,
                    format!("{} was created with {name}={h}, not {w}", path.display()),
                    format!("{verb} it with {name}={h}, or options=None"),
                ));
            }
        }
        Ok(())
    }

    /// An Index over storage `st` whose committed state is `h` (header copy `copy`).
    pub(super) fn assemble(
        path: &Path,
        opts: Options,
        st: Arc<Storage>,
        h: Header,
        copy: usize,
        read_only: bool,
        warnings: Vec<String>,
    ) -> Index {
        let memory = st.is_memory();
        let st_file_id = st.file.as_ref().map_or(0, redo::file_id);
        let snap = Snap::of(st, &h, !read_only);
        // Deleted nodes may be left in lists (`Snap::hides`).
        let hides = snap.hides;
        let mut committed = h;
        let committed_seq = committed.seq;
        if memory {
            // Nothing of an in-memory index is ever committed: no list needs saving before it
            // changes (no undo log), and `pending` counts nothing.
            committed.slots = 0;
            committed.live = 0;
        }
        Index {
            path: path.to_path_buf(),
            opts,
            geo: snap.st.geo,
            read_only,
            memory,
            entry: Mutex::new((snap.entry, snap.max_level)),
            writer: Mutex::new(Writer {
                copy,
                slots: snap.slots,
                linked: snap.linked,
                live: snap.live,
                next_id: committed.next_id,
                user_version: committed.user_version,
                deletes: 0,
                unrepaired: 0,
                // Which deleted slots earlier writers consolidated is not stored, and counting
                // them all would make the first batch scan the whole graph (a file of 2^32
                // mostly empty slots among them): this handle counts its own deletes.
                unconsolidated: 0,
                unconsolidated_committed: 0,
                relinked: false,
                reuse: reuse::Reuse::new(committed.reused),
                quantizer: committed.quantizer,
                poisoned: None,
                headers_clean: true,
                committed,
            }),
            view: RwLock::new(Arc::new(snap)),
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            undo: Mutex::new(UndoState {
                log: UndoLog::new(path),
                saved: FastSet::default(),
                marked: FixedBitSet::new(),
                reused: FastSet::default(),
                redo: RedoLog::new(path, st_file_id),
                changes: changes::Chain::new(committed_seq),
            }),
            savepoint: Mutex::new(None),
            ids: Mutex::new(IdMap::default()),
            filters: Mutex::new(Default::default()),
            kept: Mutex::new(Vec::new()),
            keep_changes: AtomicBool::new(false),
            unlinked_deletes: AtomicBool::new(hides),
            closed: AtomicBool::new(false),
            opened: std::time::Instant::now(),
            checked_path_ms: AtomicU64::new(0),
            unusable_seq: AtomicU64::new(u64::MAX),
            warm: Mutex::new(None),
            warm_on: AtomicBool::new(false),
            warm_vectors: AtomicBool::new(true),
            residency: Default::default(),
            clipped: AtomicU64::new(0),
            warnings,
        }
    }

    /// A new in-memory index: the whole writer API with no file (see `save` and `load`).
    pub fn memory(dims: usize, opts: Option<&Options>) -> Result<Index> {
        let opts = opts.cloned().unwrap_or_default().normalized()?;
        check_dims_arg(dims)?;
        let h = Self::new_header(dims, &opts, 1);
        let st = Storage::memory(&h, opts.huge_pages != Some(false))?;
        Ok(Self::assemble(Path::new(""), opts, Arc::new(st), h, 0, false, Vec::new()))
    }

    pub(super) fn new_header(dims: usize, opts: &Options, seq: u64) -> Header {
        Header {
            seq,
            dims: dims as u32,
            metric: opts.metric,
            precision: opts.precision,
            max_connections: opts.max_connections as u32,
            ef_construction: opts.ef_construction as u32,
            ef_search: opts.ef_search as u32,
            page_size: os::page_size() as u32,
            slots: 0,
            live: 0,
            next_id: 0,
            entry: EMPTY,
            max_level: 0,
            user_version: 0,
            quantization: opts.quantization,
            quantizer: 0,
            linked: 0,
            reused: false,
            lists_clean: false,
            regions: Vec::new(),
        }
    }

    /// Copy the last flush of the index file at `path` into anonymous memory (a writer may be
    /// writing it meanwhile: lists it changed since are put back from its undo log, as a
    /// reader's backup does). With balanced placement every thread of the pool copies one
    /// contiguous stretch of the bytes (the NUMA note's copy of an index read from disk).
    pub fn load(
        path: &Path,
        opts: Option<&Options>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Index> {
        let reader = Index::open(path, None, opts, Mode::Read)?;
        let mut eff = reader.opts.clone();
        let normalized = opts.map(Options::normalized).transpose()?;
        if let Some(o) = normalized.as_ref() {
            Self::check_fixed(path, o, &eff, "load")?;
            eff.placement = o.placement;
            eff.huge_pages = o.huge_pages;
        }
        eff.warm = false;
        reader.stop_warm();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let file =
            reader.view.read().st.file().try_clone().map_err(|e| Error::io(e, "opening", path))?;
        loop {
            if std::time::Instant::now() > deadline {
                return Err(Error::new(
                    ErrorKind::Io,
                    "the writer flushed during every load attempt for 10 s",
                    "retry when it flushes less often",
                ));
            }
            let snap = reader.snap();
            let h = reader.writer.lock().committed.clone();
            if h.seq != snap.seq {
                continue;
            }
            let mem = Storage::memory(&h, eff.huge_pages != Some(false))?;
            let ranges = copy::commit_ranges(&mem, &h);
            let balanced = eff.placement == Placement::Balanced && h.slots as usize >= BALANCED_MIN;
            with_threads(threads, || {
                // SAFETY: `mem` was made just above and nothing else holds it yet; a
                // commit's ranges do not overlap.
                unsafe { copy::copy_ranges(&mem, &file, path, &ranges, balanced, ctl) }
            })??;
            let records = UndoLog::read(path, h.seq)?;
            if Self::newest_seq_on_disk(&snap.st) != h.seq {
                continue; // a flush ran meanwhile: the log may be gone; copy again
            }
            // SAFETY: `mem` is still this call's alone, and the records are applied one at a time.
            copy::apply_records(&mem, &h, &records, |bytes, at| unsafe {
                mem.write_at(bytes, at)
            })?;
            return Ok(Self::assemble(
                Path::new(""),
                eff,
                Arc::new(mem),
                h,
                0,
                false,
                reader.warnings.clone(),
            ));
        }
    }

    /// Whether this index lives in memory, without a file.
    pub fn is_memory(&self) -> bool {
        self.memory
    }

    /// A writer opening after a crash: put back the lists the dead writer changed after the
    /// last commit (`commit::replay_after_crash`).
    pub(super) fn replay_undo(&mut self) -> Result<()> {
        let snap = self.snap();
        let log = &mut self.undo.get_mut().log;
        let n = commit::replay_after_crash(&snap.st, &self.path, log, snap.seq, snap.slots)?;
        if n > 0 {
            self.warnings.push(format!(
                "{}: the last writer stopped without flushing; its unflushed changes were \
                 discarded ({n} lists restored)",
                self.path.display()
            ));
        }
        Ok(())
    }

    /// A writer opening on the older header copy (the newer one is damaged): forget what the
    /// lost commit left (`commit::forget_lost_commit`).
    pub(super) fn forget_lost_commit(&self) -> Result<()> {
        let snap = self.view.read().clone();
        commit::forget_lost_commit(&snap.st, snap.seq, snap.slots)
    }

    /// Temporary files a killed writer may have left next to the index.
    pub(super) fn remove_leftovers(&self) {
        let Some(dir) =
            self.path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p })
        else {
            return;
        };
        let Some(name) = self.path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return;
        };
        let prefixes = [format!(".{name}.creating-"), format!(".{name}.compacting-")];
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let f = e.file_name().to_string_lossy().into_owned();
                if prefixes.iter().any(|p| f.starts_with(p.as_str())) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}
