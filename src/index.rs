//! The index: opening and creating files, adds (single and batch, all or nothing), searches,
//! flush (commit), rollback and close. Python-free; `src/python/` wraps it.

use crate::distance;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    self, choose_header, Geometry, Header, Metric, Precision, RegionKind, DATA_START, EMPTY,
    HEADER_COPY_SIZE, NO_UPPER, RESERVED_ID,
};
use crate::graph::{self, Graph, Start, LOCK_STRIPES};
use crate::halfcopy::HalfCopy;
use crate::locality;
use crate::os;
use crate::storage::Storage;
use crate::undo::{undo_path, Record, UndoLog};
use crate::warm::Warm;
use parking_lot::{Mutex, RwLock};
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// A filtered search scans the allowed ids exactly when there are at most this many times ef.
pub const SCAN_FACTOR: usize = 8;
/// A batch of at least this many queries runs in the order of where the queries enter the
/// graph's bottom layer (`batch_starts`); a smaller one has too little to share.
const ORDER_MIN: usize = 32;
/// A batch's search order and each query's start on layer 0 (see `batch_starts`).
type BatchStarts = (Vec<u32>, Vec<Option<Start>>);
/// Largest k and ef a call accepts.
pub const MAX_K: usize = 1 << 24;
/// The largest half-precision value.
const F16_MAX: f32 = 65504.0;

/// Construction and search parameters. `max_connections`, `metric` and `precision` are fixed
/// when a file is created.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub max_connections: usize,
    pub ef_construction: usize,
    pub ef_search: usize,
    pub metric: Metric,
    pub precision: Precision,
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

/// A batch is linked on a half-precision copy of the vectors (`halfcopy`) when they are at
/// least HALFCOPY_MIN_BYTES long (a 2-thread build: 0.77-0.84x the time at 384 dimensions,
/// none gained at 128, whose 512 bytes the prefetch of ADR-0015 covers whole), has at
/// least HALFCOPY_MIN_ROWS rows and is at least 1/HALFCOPY_SHARE of the index it makes: the
/// copy reads every vector of the index twice, the batch gains about a fifth of its linking
/// (about 200 us an insertion at 384 dimensions on two threads).
const HALFCOPY_MIN_BYTES: usize = 1024;
const HALFCOPY_MIN_ROWS: u64 = 1024;
const HALFCOPY_SHARE: u64 = 32;
/// ... and when the copy takes at most 1/HALFCOPY_MEMORY_SHARE of the machine's memory.
const HALFCOPY_MEMORY_SHARE: u64 = 8;

/// Whether a batch of `rows` rows that makes an index of `total` slots is linked on a
/// half-precision copy. `CHASSIS_HALF_COPY=0` (never) or `1` (whenever the index is full
/// precision) overrides the rule, for tests and measurements; read once.
fn halfcopy_pays(geo: &format::Geometry, rows: u64, total: u64) -> bool {
    static FORCE: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    if geo.precision != Precision::Full {
        return false;
    }
    match FORCE.get_or_init(|| {
        std::env::var("CHASSIS_HALF_COPY").ok().and_then(|v| match v.trim() {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        })
    }) {
        Some(force) => *force,
        None => {
            let memory = os::physical_memory().unwrap_or(0);
            geo.vec_bytes >= HALFCOPY_MIN_BYTES
                && rows >= HALFCOPY_MIN_ROWS
                && rows * HALFCOPY_SHARE >= total
                && HalfCopy::bytes_for(geo, total) * HALFCOPY_MEMORY_SHARE <= memory
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_connections: 16,
            ef_construction: 200,
            ef_search: 50,
            metric: Metric::Euclidean,
            precision: Precision::Full,
            huge_pages: None,
            warm: false,
            placement: Placement::Balanced,
        }
    }
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        if !(2..=format::MAX_M).contains(&self.max_connections) {
            return Err(Error::invalid(
                format!("max_connections={} is out of range", self.max_connections),
                format!("use a value from 2 to {} (16 is usual)", format::MAX_M),
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

/// Cancellation and progress of a long call, shared with the thread that waits for it.
#[derive(Default)]
pub struct Control {
    pub cancel: AtomicBool,
    pub done: AtomicU64,
}

impl Control {
    fn cancelled(&self) -> bool {
        self.cancel.load(Relaxed)
    }
}

/// A hit: caller id and distance (true L2 for euclidean, 1 - cos, -dot).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub id: u64,
    pub distance: f32,
}

/// Which ids a search may return: only `allowed` ones (when given), never `excluded` ones.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub allowed: Option<Vec<u64>>,
    pub excluded: Vec<u64>,
}

/// Filters of a batch: one for all queries, or one per query.
#[derive(Clone, Copy)]
pub enum BatchFilter<'a> {
    Same(Option<&'a Filter>),
    PerQuery(&'a [Filter]),
}

/// A hash map or set with a fast, seeded hash (ids and slots are plain integers; std's SipHash
/// cost more than the lookups it guards on filtered searches).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;

/// A set of slots: a bitmap when it holds more than one slot in 32 (one bit each is then less
/// memory than hashing), else a hash set.
enum SlotSet {
    /// The bits and how many are set.
    Bits(Vec<u64>, usize),
    Hash(FastSet<u32>),
}

impl SlotSet {
    fn new(slots: impl Iterator<Item = u32>, count: usize, total: u64) -> SlotSet {
        if count as u64 * 32 >= total {
            let mut bits = vec![0u64; (total as usize).div_ceil(64)];
            let mut n = 0;
            for s in slots {
                if let Some(w) = bits.get_mut(s as usize / 64) {
                    n += (*w >> (s % 64) & 1 == 0) as usize;
                    *w |= 1 << (s % 64);
                }
            }
            SlotSet::Bits(bits, n)
        } else {
            SlotSet::Hash(slots.collect())
        }
    }

    #[inline]
    fn contains(&self, s: u32) -> bool {
        match self {
            SlotSet::Bits(b, _) => b.get(s as usize / 64).is_some_and(|w| w >> (s % 64) & 1 != 0),
            SlotSet::Hash(h) => h.contains(&s),
        }
    }

    fn len(&self) -> usize {
        match self {
            SlotSet::Bits(_, n) => *n,
            SlotSet::Hash(h) => h.len(),
        }
    }

    /// The slots, ascending for a bitmap.
    fn iter(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match self {
            SlotSet::Bits(b, _) => Box::new(b.iter().enumerate().flat_map(|(i, &w)| {
                (0..64u32).filter(move |j| w >> j & 1 != 0).map(move |j| i as u32 * 64 + j)
            })),
            SlotSet::Hash(h) => Box::new(h.iter().copied()),
        }
    }
}

/// A filter in slots. Ids not in the index are simply never matched.
struct SlotFilter {
    allowed: Option<SlotSet>,
    excluded: SlotSet,
}

/// The allowed set of `filter` if it is small enough to scan exactly instead of walking the
/// graph (at most [`SCAN_FACTOR`] x ef ids).
fn small_allowed(k: usize, ef: usize, filter: Option<&SlotFilter>) -> Option<&SlotSet> {
    filter.and_then(|f| f.allowed.as_ref()).filter(|a| a.len() <= SCAN_FACTOR * ef.max(k))
}

/// Whether a search scans exactly instead of walking the graph: a small allowed set, or a
/// beam that would cover everything anyway.
fn scans(snap: &Snap, k: usize, ef: usize, filter: Option<&SlotFilter>) -> bool {
    small_allowed(k, ef, filter).is_some() || ef as u64 >= snap.live
}

impl SlotFilter {
    #[inline]
    fn allows(&self, s: u32) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(s)) && !self.excluded.contains(s)
    }
}

/// Rows to add: caller values (checked, normalised, rounded) or stored bytes copied as they
/// are (compaction).
#[derive(Clone, Copy)]
enum Rows<'a> {
    Values(&'a [f32]),
    Stored(&'a [u8]),
}

/// What the system holds of an index's mappings (`memory_stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStats {
    /// Address space of the index's mappings (mostly never touched: the file is sparse).
    pub mapped_bytes: u64,
    /// What the index has written: the ranges warm reads.
    pub written_bytes: u64,
    /// Of the written ranges, bytes in memory now (mincore).
    pub resident_bytes: u64,
    pub vector_bytes: u64,
    /// Of the vectors, bytes mapped by huge pages (FilePmdMapped of a file; AnonHugePages in
    /// memory), where the system says.
    pub vector_huge_bytes: Option<u64>,
    /// Of the slot headers, lists and heap, bytes mapped by huge pages: 0 for a file by
    /// ADR-0016; in memory the graph's stores ask for them too.
    pub graph_huge_bytes: Option<u64>,
    /// Of everything written, bytes on huge pages.
    pub huge_bytes: Option<u64>,
    pub huge_pages_asked: bool,
    /// "file" or "memory".
    pub backing: &'static str,
    /// In memory: the kernel refused huge pages to this process (warned once).
    pub huge_pages_refused: bool,
    pub warm_running: bool,
    pub warm_done_bytes: u64,
    pub warm_total_bytes: u64,
    /// How warm reads pages in on this system.
    pub populate: &'static str,
}

/// What `check()` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Ids of live vectors that no search can reach.
    pub unreachable: Vec<u64>,
    /// Ids of live vectors holding NaN or infinity.
    pub not_finite: Vec<u64>,
    /// Slots whose vector, header, delete marker or lists fail their checksums or refer
    /// outside the index.
    pub corrupt: Vec<u32>,
}

/// What to do when a file is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Open for writing; create when missing (dimensions needed).
    Write,
    /// Open read-only, without the lock; the file must exist.
    Read,
}

/// A list saved before its first change since a savepoint.
struct Savepoint {
    /// Nodes below this existed before the savepoint.
    start: u32,
    saved: HashMap<u32, Vec<u32>>,
}

struct UndoState {
    log: UndoLog,
    /// Committed nodes whose lists the log already holds.
    saved: HashSet<u32>,
}

/// id -> slot for live slots below `upto` of one storage, built on first use (opening stays
/// O(1)). Lookups also check the slot against the snapshot asking.
#[derive(Default)]
struct IdMap {
    storage: usize,
    map: FastMap<u64, u32>,
    upto: u64,
}

/// One consistent state that searches run on: a storage and a commit (in the writer, the
/// commit plus the adds published since). Searches clone the current `Arc<Snap>` when they
/// start, so each sees one state from start to end, whatever is published meanwhile.
pub struct Snap {
    pub st: Arc<Storage>,
    pub seq: u64,
    /// Slots a search may return (the rest may still be routed through).
    pub slots: u64,
    pub live: u64,
    pub entry: u32,
    pub max_level: usize,
    pub user_version: u64,
    /// Deletes committed by this sequence or earlier hide a slot: a reader's own commit; in a
    /// writer, the next one (its pending deletes count).
    pub del_visible: u64,
}

impl Snap {
    /// The state committed by header `h`; `writer`: pending deletes of this process count.
    fn of(st: Arc<Storage>, h: &Header, writer: bool) -> Snap {
        Snap {
            st,
            seq: h.seq,
            slots: h.slots,
            live: h.live,
            entry: h.entry,
            max_level: h.max_level as usize,
            user_version: h.user_version,
            del_visible: if writer { h.seq + 1 } else { h.seq },
        }
    }

    fn clone_of(s: &Snap) -> Snap {
        Snap { st: s.st.clone(), ..*s }
    }

    /// The id of a slot visible in this state; None for deleted or damaged slots.
    #[inline]
    pub fn live_id(&self, slot: u32) -> Option<u64> {
        live_id(&self.st, slot, self.del_visible)
    }
}

/// The writer's bookkeeping (a reader keeps its snapshot's header here).
struct Writer {
    committed: Header,
    /// Which header copy holds `committed`.
    copy: usize,
    slots: u64,
    live: u64,
    next_id: u64,
    user_version: u64,
    /// Deletes since the last commit.
    deletes: u64,
    /// A failed sync leaves the page cache in an unknown state: refuse later flushes.
    poisoned: bool,
}

/// An open index. Every method takes `&self`: searches run while a batch links or a flush
/// syncs (they see the last published state), and writers serialise on an internal lock.
pub struct Index {
    path: PathBuf,
    opts: Options,
    /// Fixed at creation (a replacement file must agree), so read without the snapshot.
    geo: Geometry,
    read_only: bool,
    /// No file: anonymous stores (`Index::memory`, `Index::load`).
    memory: bool,
    view: RwLock<Arc<Snap>>,
    writer: Mutex<Writer>,
    /// Entry point and top layer while linking (the writer's, ahead of what is published).
    entry: Mutex<(u32, usize)>,
    locks: Box<[Mutex<()>]>,
    undo: Mutex<UndoState>,
    savepoint: Mutex<Option<Savepoint>>,
    ids: Mutex<IdMap>,
    closed: AtomicBool,
    /// A reader: when it opened, and when (ms after that) it last checked whether the path
    /// now names another file; a header sequence seen on disk whose copy does not check out.
    opened: std::time::Instant,
    checked_path_ms: AtomicU64,
    unusable_seq: AtomicU64,
    /// ADR-0019: the background read-in, and whether it was asked for (a reader that moves to
    /// a new file reads that in too).
    warm: Mutex<Option<Warm>>,
    warm_on: AtomicBool,
    /// Things the caller should be told about once (a damaged header copy, a replayed log).
    pub warnings: Vec<String>,
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

fn check_dims_arg(d: usize) -> Result<()> {
    if d == 0 || d > 1 << 16 {
        return Err(Error::invalid(
            format!("dimensions={d} is out of range"),
            "pass from 1 to 65536 dimensions",
        ));
    }
    Ok(())
}

fn check_k(k: usize) -> Result<()> {
    if !(1..=MAX_K).contains(&k) {
        return Err(Error::invalid(
            format!("k={k} is out of range"),
            format!("pass k from 1 to {MAX_K}"),
        ));
    }
    Ok(())
}

/// `.<name>.<what>-<pid>-<nanos><n>` beside `path`: unique to this process and call.
fn tmp_sibling(path: &Path, what: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    path.with_file_name(format!(
        ".{name}.{what}-{}-{nanos}{}",
        std::process::id(),
        N.fetch_add(1, Relaxed)
    ))
}

impl Index {
    // ------------------------------------------------------------------ opening

    /// Open (or, in write mode, create) the index at `path`.
    /// `dims`: required to create; checked against the file when given.
    /// `opts`: fixed fields are checked against the file; tunables apply to this handle.
    pub fn open(
        path: &Path,
        dims: Option<usize>,
        opts: Option<&Options>,
        mode: Mode,
    ) -> Result<Index> {
        if let Some(o) = opts {
            o.validate()?;
        }
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
        let file = match file {
            Some(f) => f,
            None => Self::open_file(path, mode)?,
        };
        Self::from_file(path, file, dims, opts, mode)
    }

    fn open_file(path: &Path, mode: Mode) -> Result<File> {
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
            ));
        }
        Ok(f)
    }

    /// Create a new file: write it under a temporary name, then link it into place, so that
    /// nobody ever sees a half-made index. Returns None if someone else created it first.
    fn create(path: &Path, dims: usize, opts: Options) -> Result<Option<File>> {
        let tmp = tmp_sibling(path, "creating");
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
        use std::os::unix::fs::FileExt;
        let write =
            |h: &Header, copy: usize| f.write_all_at(&h.encode(), (copy * HEADER_COPY_SIZE) as u64);
        write(&h, 1).map_err(|e| cleanup(Error::io(e, "writing", &tmp)))?;
        h.seq = 1;
        write(&h, 0).map_err(|e| cleanup(Error::io(e, "writing", &tmp)))?;
        f.set_len(DATA_START).map_err(|e| cleanup(Error::io(e, "writing", &tmp)))?;
        f.sync_all().map_err(|e| cleanup(Error::io(e, "syncing", &tmp)))?;
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                let _ = os::sync_dir(path);
                Ok(Some(f))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(Error::io(e, "creating", path)),
        }
    }

    /// Read and choose the header of an open file, with a warning if a copy is damaged.
    fn read_header(
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

    fn from_file(
        path: &Path,
        file: File,
        dims: Option<usize>,
        opts: Option<&Options>,
        mode: Mode,
    ) -> Result<Index> {
        let mut warnings = Vec::new();
        let (h, copy) = Self::read_header(&file, path, &mut warnings)?;
        let fell_back = !warnings.is_empty();
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
        let st = Arc::new(Storage::open(path, file, mode == Mode::Write, &h)?);
        let mut idx = Self::assemble(path, eff, st, h, copy, mode == Mode::Read, warnings);
        if mode == Mode::Write {
            idx.replay_undo()?;
            if fell_back {
                idx.clear_stale_markers()?;
            }
            idx.remove_leftovers();
        }
        // huge_pages=None: on when warm is and vectors are 2 KB or longer (as chassisdb).
        if idx.opts.huge_pages.unwrap_or(idx.opts.warm && idx.geo.vec_bytes >= 2048) {
            idx.use_huge_pages();
        }
        if idx.opts.warm {
            idx.warm();
        }
        Ok(idx)
    }

    /// Err if `want` asks for other fixed options (metric, precision, max_connections) than the
    /// file at `path` has (`have`); `verb`: what the caller was doing, for the help text.
    fn check_fixed(path: &Path, want: &Options, have: &Options, verb: &str) -> Result<()> {
        for (name, w, h) in [
            ("metric", want.metric.name().to_string(), have.metric.name().to_string()),
            ("precision", want.precision.name().to_string(), have.precision.name().to_string()),
            ("max_connections", want.max_connections.to_string(), have.max_connections.to_string()),
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

    /// The header that commits the writer's state now (the next sequence number).
    fn next_header(w: &Writer, snap: &Snap) -> Header {
        let mut h = w.committed.clone();
        h.seq += 1;
        h.slots = w.slots;
        h.live = w.live;
        h.next_id = w.next_id;
        h.entry = snap.entry;
        h.max_level = snap.max_level as u32;
        h.user_version = w.user_version;
        h.regions = snap.st.regions();
        h
    }

    /// Rename a finished copy `tmp` (if `made` is Ok) to `dest` and make that durable; remove
    /// `tmp` on any failure.
    fn put_in_place(made: Result<()>, tmp: &Path, dest: &Path) -> Result<()> {
        let res = made.and_then(|()| {
            std::fs::rename(tmp, dest).map_err(|e| Error::io(e, "renaming the copy to", dest))?;
            os::sync_dir(dest).map_err(|e| Error::io(e, "syncing the directory of", dest))
        });
        if res.is_err() {
            let _ = std::fs::remove_file(tmp);
        }
        res
    }

    /// An Index over storage `st` whose committed state is `h` (header copy `copy`).
    fn assemble(
        path: &Path,
        opts: Options,
        st: Arc<Storage>,
        h: Header,
        copy: usize,
        read_only: bool,
        warnings: Vec<String>,
    ) -> Index {
        let memory = st.is_memory();
        let snap = Snap::of(st, &h, !read_only);
        let mut committed = h;
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
                live: snap.live,
                next_id: committed.next_id,
                user_version: committed.user_version,
                deletes: 0,
                poisoned: false,
                committed,
            }),
            view: RwLock::new(Arc::new(snap)),
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            undo: Mutex::new(UndoState { log: UndoLog::new(path), saved: HashSet::new() }),
            savepoint: Mutex::new(None),
            ids: Mutex::new(IdMap::default()),
            closed: AtomicBool::new(false),
            opened: std::time::Instant::now(),
            checked_path_ms: AtomicU64::new(0),
            unusable_seq: AtomicU64::new(u64::MAX),
            warm: Mutex::new(None),
            warm_on: AtomicBool::new(false),
            warnings,
        }
    }

    /// A new in-memory index: the whole writer API with no file (see `save` and `load`).
    pub fn memory(dims: usize, opts: Option<&Options>) -> Result<Index> {
        let opts = opts.cloned().unwrap_or_default();
        opts.validate()?;
        check_dims_arg(dims)?;
        let h = Self::new_header(dims, &opts, 1);
        let st = Storage::memory(&h, opts.huge_pages != Some(false))?;
        Ok(Self::assemble(Path::new(""), opts, Arc::new(st), h, 0, false, Vec::new()))
    }

    fn new_header(dims: usize, opts: &Options, seq: u64) -> Header {
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
        if let Some(o) = opts {
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
            let ranges = commit_ranges(&mem, &h);
            let balanced = eff.placement == Placement::Balanced && h.slots as usize >= BALANCED_MIN;
            with_threads(threads, || copy_ranges(&mem, &file, path, &ranges, balanced, ctl))??;
            let records = UndoLog::read(path, h.seq)?;
            if Self::newest_seq_on_disk(&snap.st) != h.seq {
                continue; // a flush ran meanwhile: the log may be gone; copy again
            }
            apply_records(&mem, &h, &records, |bytes, at| mem.write_at(bytes, at))?;
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

    /// Write the index as an ordinary index file at `dest` (any reader or writer opens it),
    /// renamed into place only when whole and synced. A file-backed writer flushes first, as
    /// `backup` does; an in-memory index writes what it holds now.
    pub fn save(&self, dest: &Path) -> Result<()> {
        if !self.memory {
            return self.backup(dest);
        }
        self.check_open()?;
        Self::check_dest(dest, None)?;
        let w = self.writer.lock();
        let snap = self.view.read().clone();
        // Deletes are marked with the next sequence; the file's commit makes them count.
        let h = Self::next_header(&w, &snap);
        let tmp = tmp_sibling(dest, "saving");
        Self::put_in_place(
            copy_commit(&snap.st, &h, &tmp).and_then(|()| sync_file(&tmp)),
            &tmp,
            dest,
        )
    }

    fn check_dest(dest: &Path, itself: Option<&Path>) -> Result<()> {
        let dest_dir =
            dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if dest.as_os_str().is_empty() || dest.is_dir() || !dest_dir.is_dir() {
            return Err(Error::new(
                ErrorKind::InvalidPath,
                format!("cannot write an index to {:?}", dest.display().to_string()),
                "pass a file path in an existing directory",
            ));
        }
        if let Some(me) = itself {
            if dest.exists() && same_file(dest, me) {
                return Err(Error::invalid(
                    format!("{} is the index itself", dest.display()),
                    "pass another path",
                ));
            }
        }
        Ok(())
    }

    /// A writer opening after a crash: put back the lists the dead writer changed after the
    /// last commit.
    fn replay_undo(&mut self) -> Result<()> {
        if !undo_path(&self.path).exists() {
            return Ok(());
        }
        let snap = self.snap();
        let records = UndoLog::read(&self.path, snap.seq)?;
        let n = restore(&snap.st, snap.slots, &records);
        if n > 0 {
            snap.st.sync_data()?;
            self.warnings.push(format!(
                "{}: the last writer stopped without flushing; its unflushed changes were discarded ({n} lists restored)",
                self.path.display()
            ));
        }
        self.undo.get_mut().log.remove();
        Ok(())
    }

    /// A writer opening on the older header copy (the newer one is damaged): the lost commit's
    /// deletes left markers newer than the commit in use; clear them, so that the next commit
    /// does not make them count. O(slots), and only in this case.
    fn clear_stale_markers(&self) -> Result<()> {
        let snap = self.view.read().clone();
        let mut n = 0;
        for s in 0..snap.slots as u32 {
            let word = &snap.st.header(s)[2];
            if let format::Marker::Deleted(seq) = format::read_marker(word.load(Relaxed), s) {
                if seq > snap.seq {
                    word.store(0, Release);
                    n += 1;
                }
            }
        }
        if n > 0 {
            snap.st.sync_data()?;
        }
        Ok(())
    }

    /// Temporary files a killed writer may have left next to the index.
    fn remove_leftovers(&self) {
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

    // ------------------------------------------------------------------ properties

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn dims(&self) -> usize {
        self.geo.dims
    }
    pub fn metric(&self) -> Metric {
        self.opts.metric
    }
    pub fn precision(&self) -> Precision {
        self.opts.precision
    }
    pub fn options(&self) -> &Options {
        &self.opts
    }
    pub fn geometry(&self) -> Geometry {
        self.geo
    }
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
    /// Live vectors searches see (a writer counts its published, unflushed adds).
    pub fn len(&self) -> u64 {
        self.snap().live
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Slots added since the last flush.
    /// (In memory: none, there is nothing to flush.)
    pub fn pending(&self) -> u64 {
        if self.memory {
            return 0;
        }
        let w = self.writer.lock();
        w.slots - w.committed.slots
    }
    pub fn committed_seq(&self) -> u64 {
        self.writer.lock().committed.seq
    }
    pub fn user_version(&self) -> u64 {
        if self.read_only {
            self.snap().user_version
        } else {
            self.writer.lock().user_version
        }
    }
    /// The application's own number, committed by the next flush (rollback restores it).
    pub fn set_user_version(&self, v: u64) -> Result<()> {
        self.writable()?;
        self.writer.lock().user_version = v;
        Ok(())
    }

    fn writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                "this index is open read-only",
                "open it with VectorIndex(path) to write",
            ));
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Acquire) {
            return Err(Error::closed());
        }
        Ok(())
    }

    // ------------------------------------------------------------------ snapshots

    /// The state searches use now. A reader moves to the newest commit first.
    pub fn snap(&self) -> Arc<Snap> {
        if self.read_only {
            // An error here (say, the file was removed) leaves the last good snapshot in use.
            let _ = self.refresh();
        }
        self.view.read().clone()
    }

    fn publish(&self, snap: Snap) {
        *self.view.write() = Arc::new(snap);
    }

    /// The newest header sequence on disk, from the two copies' fixed fields.
    fn newest_seq_on_disk(st: &Storage) -> u64 {
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
        self.advise_committed(&cur.st, h.slots);
        self.publish(Snap::of(cur.st.clone(), &h, false));
        w.copy = copy;
        w.committed = h;
        Ok(())
    }

    /// Whether the path now names another file than the one mapped.
    fn path_replaced(&self, st: &Storage) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(&self.path), st.file().metadata()) {
            (Ok(a), Ok(b)) => a.ino() != b.ino() || a.dev() != b.dev(),
            _ => false,
        }
    }

    /// A reader whose file was replaced (a compaction renamed a new one over it): open the
    /// new file. Searches already running finish on the old mappings, which they hold.
    fn reopen(&self, w: &mut Writer) -> Result<()> {
        let file = Self::open_file(&self.path, Mode::Read)?;
        let mut warnings = Vec::new();
        let (h, copy) = Self::read_header(&file, &self.path, &mut warnings)?;
        if h.dims as usize != self.geo.dims
            || h.metric != self.opts.metric
            || h.precision != self.opts.precision
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
        st.huge.store(self.view.read().st.huge.load(Acquire), Release);
        self.advise_committed(&st, h.slots);
        let rewarm = self.warm_on.load(Acquire);
        drop(self.warm.lock().take()); // stop reading the old file before it goes
        if rewarm {
            *self.warm.lock() = Some(Warm::start(st.clone(), h.slots));
        }
        self.publish(Snap::of(st, &h, false));
        w.copy = copy;
        w.committed = h;
        Ok(())
    }

    // ------------------------------------------------------------------ input checks

    fn check_dims(&self, got: usize, what: &str) -> Result<()> {
        if got != self.dims() {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("{what} has {got} dimensions; this index holds {}", self.dims()),
                format!("pass vectors of length {}", self.dims()),
            ));
        }
        Ok(())
    }

    /// Refuse NaN/inf, values beyond half precision, and zero vectors under cosine.
    fn check_vector(&self, v: &[f32], what: &str) -> Result<()> {
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(
                format!("{what} holds {} at position {i}", v[i]),
                "remove or replace NaN and infinite values before adding or searching",
            ));
        }
        if self.precision() == Precision::Half {
            if let Some(i) = v.iter().position(|x| x.abs() > F16_MAX) {
                return Err(Error::invalid(
                    format!(
                        "{what} holds {} at position {i}, beyond half precision's range (+-65504)",
                        v[i]
                    ),
                    "scale the vectors down, or use precision=\"full\"",
                ));
            }
        }
        if self.metric() == Metric::Cosine && v.iter().all(|x| *x == 0.0) {
            return Err(Error::invalid(
                format!("{what} is the zero vector, which has no direction for cosine distance"),
                "remove zero vectors, or use metric=\"euclidean\"",
            ));
        }
        Ok(())
    }

    /// A query ready for the kernels: checked, and normalised for cosine (the one copy made).
    fn prepare_query<'q>(&self, q: &'q [f32], what: &str) -> Result<Cow<'q, [f32]>> {
        self.check_dims(q.len(), what)?;
        self.check_vector(q, what)?;
        Ok(self.search_form(q, q.len()))
    }

    /// Checked rows of `d` values as searches take them: for cosine one normalised copy (the
    /// caller's array is never changed), else the rows themselves.
    fn search_form<'q>(&self, rows: &'q [f32], d: usize) -> Cow<'q, [f32]> {
        if self.metric() != Metric::Cosine || d == 0 {
            return Cow::Borrowed(rows);
        }
        let mut v = rows.to_vec();
        v.chunks_exact_mut(d).for_each(|r| {
            distance::normalize(r);
        });
        Cow::Owned(v)
    }

    /// The bytes to store for `v` (normalised for cosine, rounded for half). Borrowed when the
    /// input is already in stored form.
    fn encode<'v>(&self, v: &'v [f32], buf: &'v mut Vec<u8>) -> &'v [u8] {
        if self.precision() == Precision::Full && self.metric() != Metric::Cosine {
            // SAFETY: reinterpreting f32s as their little-endian bytes (the target is LE).
            return unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) };
        }
        let src: Cow<[f32]> = if self.metric() == Metric::Cosine {
            let mut n = v.to_vec();
            distance::normalize(&mut n);
            Cow::Owned(n)
        } else {
            Cow::Borrowed(v)
        };
        buf.clear();
        format::encode_vector(&src, self.precision(), buf);
        buf
    }

    // ------------------------------------------------------------------ ids

    /// Run `f` on the id map, extended to cover `snap`'s slots.
    fn with_ids<R>(&self, snap: &Snap, f: impl FnOnce(&FastMap<u64, u32>) -> R) -> R {
        let mut m = self.ids.lock();
        let key = Arc::as_ptr(&snap.st) as usize;
        if m.storage != key {
            *m = IdMap { storage: key, ..Default::default() };
        }
        while m.upto < snap.slots {
            let s = m.upto as u32;
            if let Some(id) = snap.live_id(s) {
                m.map.insert(id, s);
            }
            m.upto += 1;
        }
        f(&m.map)
    }

    fn slot_of(&self, snap: &Snap, id: u64) -> Option<u32> {
        self.with_ids(snap, |m| m.get(&id).copied())
            .filter(|&s| (s as u64) < snap.slots && snap.live_id(s) == Some(id))
    }

    pub fn contains(&self, id: u64) -> Result<bool> {
        self.contains_in(&self.snap(), id)
    }

    pub fn contains_in(&self, snap: &Snap, id: u64) -> Result<bool> {
        self.check_open()?;
        Ok(self.slot_of(snap, id).is_some())
    }

    /// The stored vector of `id` (normalised for cosine, rounded for half), checked against
    /// its checksum.
    pub fn get(&self, id: u64) -> Result<Option<Vec<f32>>> {
        self.get_in(&self.snap(), id)
    }

    pub fn get_in(&self, snap: &Snap, id: u64) -> Result<Option<Vec<f32>>> {
        self.check_open()?;
        let Some(slot) = self.slot_of(snap, id) else { return Ok(None) };
        let bytes = snap.st.vector_bytes(slot);
        let crc = snap.st.header(slot)[3].load(Relaxed) as u32;
        if format::vector_crc(bytes) != crc {
            return Err(Error::corrupt(format!(
                "{}: the stored vector of id {id} (slot {slot}) fails its checksum",
                self.path.display()
            )));
        }
        let g = Graph::new(&snap.st, self.metric(), snap.slots as u32);
        let mut buf = Vec::new();
        Ok(Some(g.vector_f32(slot, &mut buf).to_vec()))
    }

    /// Live ids in insertion (slot) order.
    pub fn ids(&self) -> Result<Vec<u64>> {
        self.ids_in(&self.snap())
    }

    pub fn ids_in(&self, snap: &Snap) -> Result<Vec<u64>> {
        self.check_open()?;
        Ok(Self::live_in_order(snap).into_iter().map(|(_, id)| id).collect())
    }

    /// The live (slot, id) pairs in insertion order: slot order, except that a run of slots
    /// laid out by locality (`format::L0_LOCALITY`) came in the order of its ids.
    fn live_in_order(snap: &Snap) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = Vec::new();
        let mut run: Option<usize> = None;
        for s in 0..snap.slots as u32 {
            let Some(id) = snap.live_id(s) else { continue };
            if snap.st.l0(s)[0].load(Relaxed) & format::L0_LOCALITY != 0 {
                run.get_or_insert(out.len());
            } else if let Some(r) = run.take() {
                out[r..].sort_unstable_by_key(|p| p.1);
            }
            out.push((s, id));
        }
        if let Some(r) = run {
            out[r..].sort_unstable_by_key(|p| p.1);
        }
        out
    }

    // ------------------------------------------------------------------ adds

    /// Add one vector; returns its id.
    pub fn add(&self, v: &[f32], id: Option<u64>) -> Result<u64> {
        let ids = id.map(|i| [i]);
        let out = self.add_batch(v, 1, ids.as_ref().map(|a| &a[..]), None, &Control::default())?;
        Ok(out[0])
    }

    /// Add `n` vectors (`data` is n x dims, row-major). All or nothing: on any error or a
    /// cancel, nothing of the batch remains and the error is returned. Searches meanwhile see
    /// the state before the batch; it is published whole when it is linked.
    pub fn add_batch(
        &self,
        data: &[f32],
        n: usize,
        ids: Option<&[u64]>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Vec<u64>> {
        self.writable()?;
        let mut w = self.writer.lock();
        self.add_rows(&mut w, Rows::Values(data), n, ids, threads, ctl)
    }

    fn add_rows(
        &self,
        w: &mut Writer,
        rows: Rows<'_>,
        n: usize,
        ids: Option<&[u64]>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Vec<u64>> {
        if w.poisoned {
            return Err(self.poisoned_error());
        }
        let d = self.dims();
        let data = match rows {
            Rows::Values(v) => v,
            Rows::Stored(_) => &[][..],
        };
        if let Rows::Stored(b) = rows {
            assert_eq!(b.len(), n * self.geo.vec_bytes);
        } else if data.len() != n * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("got {} values for {n} vectors of {d} dimensions", data.len()),
                format!("pass an array of shape (n, {d})"),
            ));
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let snap = self.view.read().clone();
        let st = &snap.st;
        // 1. Check everything before touching anything.
        for (r, row) in data.chunks_exact(d).enumerate() {
            let what = if n == 1 { "the vector".to_string() } else { format!("row {r}") };
            self.check_vector(row, &what)?;
        }
        let new_ids = self.assign_ids(w, &snap, n, ids)?;
        // Where each row goes: `order[j]` is the row written into slot `start + j`, `pos[i]`
        // the slot offset of row `i` (see locality.rs). Rows are still linked in their order.
        let vb = self.geo.vec_bytes;
        // Only a batch whose ids rise along its rows, above every id so far, so that its
        // insertion order can be read back from its ids (`live_in_order`).
        let by_locality = n >= locality::LOCALITY_MIN
            && new_ids[0] >= w.next_id
            && new_ids.windows(2).all(|p| p[0] < p[1]);
        let order: Vec<u32> = if by_locality {
            let precision = self.precision();
            let row = |i: usize, out: &mut [f32]| match rows {
                Rows::Values(v) => out.copy_from_slice(&v[i * d..(i + 1) * d]),
                Rows::Stored(b) => format::decode_vector(&b[i * vb..(i + 1) * vb], precision, out),
            };
            let cancelled = || ctl.cancelled();
            with_threads(threads, || locality::slot_order(n, d, &row, &cancelled))?
                .ok_or_else(Error::interrupted)?
        } else {
            (0..n as u32).collect()
        };
        let mut pos = vec![0u32; n];
        for (j, &i) in order.iter().enumerate() {
            pos[i as usize] = j as u32;
        }
        let start = w.slots;
        if start + n as u64 > u32::MAX as u64 - 1 {
            return Err(Error::new(
                ErrorKind::IndexFull,
                "an index holds at most 2**32 - 2 vectors",
                "start another index file",
            ));
        }
        // 2. Room: segments, preallocated blocks, heap lists. Regions added stay (searches may
        // already route into them); heap space is given back on failure.
        let heap_before = st.heap_state();
        let entry_before = *self.entry.lock();
        let give_back = || {
            if let Some((chunk, used)) = heap_before {
                st.set_heap_used(chunk, used);
            }
            *self.entry.lock() = entry_before;
        };
        let m = st.geo.m;
        // By slot offset; each row keeps the level its place in the batch draws (as if it had
        // gone into slot `start + i`), so the layout does not change the graph.
        let levels: Vec<usize> =
            order.iter().map(|&i| graph::level_for(start + i as u64, m)).collect();
        let mut uppers = vec![NO_UPPER; n];
        let room = (|| -> Result<()> {
            st.reserve_slots(start, start + n as u64)?;
            for i in 0..n {
                if levels[i] > 0 {
                    uppers[i] = st.alloc_upper((start + i as u64) as u32, levels[i])?;
                }
            }
            Ok(())
        })();
        if let Err(e) = room {
            give_back();
            return Err(e);
        }
        // The pieces this batch fills whole are written once: ask for huge pages before writing
        // them (ADR-0016, 4), so that a batch-built index is on huge pages from the start.
        Self::advise_slots(st, start, start + n as u64);
        // 3. Write vectors, slot headers and empty lists of the new slots (not yet reachable).
        let write_row = |buf: &mut Vec<u8>, j: usize| {
            let (slot, i) = ((start + j as u64) as u32, order[j] as usize);
            let bytes = match rows {
                Rows::Values(_) => self.encode(&data[i * d..(i + 1) * d], buf),
                Rows::Stored(b) => &b[i * vb..(i + 1) * vb],
            };
            st.write_vector(slot, bytes);
            let vcrc = format::vector_crc(bytes);
            let h = st.header(slot);
            h[0].store(new_ids[i], Relaxed);
            h[1].store(uppers[j], Relaxed);
            h[2].store(0, Relaxed);
            h[3].store(
                vcrc as u64 | (format::header_crc(new_ids[i], uppers[j], vcrc) as u64) << 32,
                Relaxed,
            );
            // The head's locality bit first: write_list keeps it (a reused slot may hold an old one).
            st.l0(slot)[0].store(if by_locality { format::L0_LOCALITY } else { 0 }, Relaxed);
            graph::write_list(st.l0(slot), slot, 0, &[], levels[j]);
        };
        // Who writes the new slots first decides where an in-memory index's pages lie (the
        // NUMA note): balanced, every thread one contiguous stretch; local, or a small batch,
        // or one thread, this thread alone. A file's pages are the page cache's: any thread.
        let write_rows = || {
            let pool = rayon::current_num_threads();
            if !st.is_memory() {
                (0..n)
                    .into_par_iter()
                    .with_min_len(256)
                    .for_each_init(Vec::new, |buf, i| write_row(buf, i));
            } else if self.opts.placement == Placement::Balanced && n >= BALANCED_MIN && pool > 1 {
                rayon::broadcast(|ctx| {
                    let (t, k) = (ctx.num_threads(), ctx.index());
                    let mut buf = Vec::new();
                    (n * k / t..n * (k + 1) / t).for_each(|i| write_row(&mut buf, i));
                });
            } else {
                let mut buf = Vec::new();
                (0..n).for_each(|i| write_row(&mut buf, i));
            }
        };
        with_threads(threads, write_rows)?;
        // 4. Link, on `threads` threads, with a savepoint for the nodes that existed before.
        *self.savepoint.lock() = Some(Savepoint { start: start as u32, saved: HashMap::new() });
        let (cslots, cseq) = (w.committed.slots, w.committed.seq);
        let result =
            with_threads(threads, || self.link(st, cslots, cseq, start, &pos, &levels, ctl))
                .and_then(|r| r);
        // A large batch: give nodes the pruning left without a way in one (checked in O(slots),
        // so not after small adds).
        let total = start + n as u64;
        let result = result.and_then(|()| {
            if n >= 1000 || n as u64 * 8 >= total {
                self.repair(st, cslots, cseq, total as u32)
            } else {
                Ok(())
            }
        });
        let sp = self.savepoint.lock().take().unwrap();
        if let Err(e) = result {
            for (slot, words) in &sp.saved {
                graph::restore_lists(st, *slot, words);
            }
            give_back();
            return Err(e);
        }
        // 5. Publish.
        w.slots += n as u64;
        w.live += n as u64;
        let max_new = *new_ids.iter().max().unwrap();
        w.next_id = w.next_id.max(max_new.saturating_add(1));
        let (entry, max_level) = *self.entry.lock();
        self.publish(Snap {
            slots: w.slots,
            live: w.live,
            entry,
            max_level,
            user_version: w.user_version,
            ..Snap::clone_of(&snap)
        });
        Ok(new_ids)
    }

    fn assign_ids(
        &self,
        w: &Writer,
        snap: &Snap,
        n: usize,
        ids: Option<&[u64]>,
    ) -> Result<Vec<u64>> {
        match ids {
            None => {
                let first = w.next_id;
                if first.checked_add(n as u64 - 1).is_none_or(|last| last == RESERVED_ID) {
                    return Err(Error::new(
                        ErrorKind::IndexFull,
                        "no default ids are left (the largest id in use is near 2**64-1)",
                        "pass explicit ids",
                    ));
                }
                Ok((first..first + n as u64).collect())
            }
            Some(ids) => {
                if ids.len() != n {
                    return Err(Error::invalid(
                        format!("got {} ids for {n} vectors", ids.len()),
                        "pass one id per vector",
                    ));
                }
                if let Some(i) = ids.iter().position(|&x| x == RESERVED_ID) {
                    return Err(Error::invalid(
                        format!("id {} (position {i}) is reserved", RESERVED_ID),
                        "use ids from 0 to 2**64-2",
                    ));
                }
                let mut seen = HashSet::with_capacity(n);
                for (i, id) in ids.iter().enumerate() {
                    if !seen.insert(*id) {
                        return Err(Error::new(
                            ErrorKind::IdInUse,
                            format!("id {id} appears twice in the batch (again at position {i})"),
                            "pass distinct ids",
                        ));
                    }
                }
                let taken = self.with_ids(snap, |m| {
                    ids.iter()
                        .find(|id| {
                            m.get(id).is_some_and(|&s| {
                                (s as u64) < snap.slots && snap.live_id(s) == Some(**id)
                            })
                        })
                        .copied()
                });
                if let Some(id) = taken {
                    return Err(Error::new(
                        ErrorKind::IdInUse,
                        format!("id {id} is already in the index"),
                        "pass an id not in use, or id=None for the next free one",
                    ));
                }
                Ok(ids.to_vec())
            }
        }
    }

    /// Called (under n's stripe lock) before an existing node's lists change: save them for
    /// the undo log (committed nodes) and for the batch's savepoint.
    fn before_modify(
        &self,
        st: &Storage,
        committed_slots: u64,
        committed_seq: u64,
        n: u32,
    ) -> Result<()> {
        if (n as u64) < committed_slots {
            let mut u = self.undo.lock();
            if u.saved.insert(n) {
                let words = graph::snapshot_lists(st, n);
                if let Err(e) = u.log.record(committed_seq, n, &words) {
                    u.saved.remove(&n);
                    return Err(e);
                }
            }
        }
        let mut sp = self.savepoint.lock();
        if let Some(sp) = sp.as_mut() {
            if n < sp.start {
                sp.saved.entry(n).or_insert_with(|| graph::snapshot_lists(st, n));
            }
        }
        Ok(())
    }

    /// Make every node reachable on layer 0 from the entry point: for each node that is not,
    /// add it to the list of its nearest reachable out-neighbor (replacing that list's farthest
    /// entry when full). The pruning heuristic can leave a node with no way in.
    fn repair(&self, st: &Storage, cslots: u64, cseq: u64, n: u32) -> Result<()> {
        let (entry, max_level) = *self.entry.lock();
        if entry == EMPTY || entry >= n {
            return Ok(());
        }
        let g = Graph::new(st, self.metric(), n);
        let cap = 2 * st.geo.m;
        let mut buf = Vec::new();
        // A node whose out-neighbors are all unreachable yet, or whose new in-edge pushed out
        // another node's only one, is fixed by the next pass.
        for _pass in 0..3 {
            let mut seen = vec![false; n as usize];
            let mut stack = vec![entry];
            seen[entry as usize] = true;
            let walk = |stack: &mut Vec<u32>, seen: &mut Vec<bool>| {
                while let Some(s) = stack.pop() {
                    let l0 = st.l0(s);
                    for e in &l0[2..2 + graph::list_len(l0)] {
                        let nb = e.load(Relaxed);
                        if nb < n && !seen[nb as usize] {
                            seen[nb as usize] = true;
                            stack.push(nb);
                        }
                    }
                }
            };
            walk(&mut stack, &mut seen);
            if seen.iter().all(|&x| x) {
                return Ok(());
            }
            let mut indeg = vec![0u32; n as usize];
            for s in 0..n {
                let l0 = st.l0(s);
                for e in &l0[2..2 + graph::list_len(l0)] {
                    let nb = e.load(Relaxed);
                    if nb < n {
                        indeg[nb as usize] += 1;
                    }
                }
            }
            for u in 0..n {
                if seen[u as usize] {
                    continue;
                }
                let uv = g.vector_f32(u, &mut buf).to_vec();
                let l0 = st.l0(u);
                let best = l0[2..2 + graph::list_len(l0)]
                    .iter()
                    .map(|e| e.load(Relaxed))
                    .filter(|&v| v < n && seen[v as usize])
                    .map(|v| (g.dist(&uv, v), v))
                    .min_by(|a, b| a.0.total_cmp(&b.0))
                    // An island: its out-neighbors are unreachable too; find a way in by search.
                    .or_else(|| {
                        g.knn(&uv, 1, 64, entry, max_level, n, &|s| seen[s as usize], None)
                            .first()
                            .copied()
                    });
                let Some((_, v)) = best else { continue };
                let _lock = self.locks[v as usize % LOCK_STRIPES].lock();
                self.before_modify(st, cslots, cseq, v)?;
                let list = st.l0(v);
                let mut cur: Vec<u32> =
                    list[2..2 + graph::list_len(list)].iter().map(|e| e.load(Relaxed)).collect();
                if cur.len() >= cap {
                    // Drop the farthest entry that has another way in.
                    let vv = g.vector_f32(v, &mut buf).to_vec();
                    let Some(far) = (0..cur.len())
                        .filter(|&i| indeg[cur[i] as usize] > 1)
                        .max_by(|&a, &b| g.dist(&vv, cur[a]).total_cmp(&g.dist(&vv, cur[b])))
                    else {
                        continue;
                    };
                    indeg[cur[far] as usize] -= 1;
                    cur.remove(far);
                }
                indeg[u as usize] += 1;
                cur.push(u);
                graph::write_list(list, v, 0, &cur, graph::level_of(st, v));
                seen[u as usize] = true;
                stack.push(u);
                walk(&mut stack, &mut seen);
            }
        }
        Ok(())
    }

    /// Link the batch's nodes in the order of its rows: row `i` is slot `start + pos[i]`;
    /// `levels` are by slot offset.
    #[allow(clippy::too_many_arguments)]
    fn link(
        &self,
        st: &Storage,
        cslots: u64,
        cseq: u64,
        start: u64,
        pos: &[u32],
        levels: &[usize],
        ctl: &Control,
    ) -> Result<()> {
        let n = pos.len();
        let total = start + n as u64;
        let copy = if halfcopy_pays(&st.geo, n as u64, total) {
            HalfCopy::new(st, total as u32)
        } else {
            None
        };
        let g = match &copy {
            Some(c) => Graph::on_copy(st, self.metric(), total as u32, c),
            None => Graph::new(st, self.metric(), total as u32),
        };
        let ef = self.opts.ef_construction;
        let hook = |s: u32| self.before_modify(st, cslots, cseq, s);
        let insert = |i: usize| {
            let j = pos[i] as usize;
            g.insert((start + j as u64) as u32, levels[j], ef, &self.entry, &self.locks, &hook)
        };
        let first_err: Mutex<Option<Error>> = Mutex::new(None);
        let next = AtomicU64::new(0);
        let work = || loop {
            if ctl.cancelled() || first_err.lock().is_some() {
                return;
            }
            let i = next.fetch_add(1, Relaxed);
            if i >= n as u64 {
                return;
            }
            if let Err(e) = insert(i as usize) {
                first_err.lock().get_or_insert(e);
                return;
            }
            ctl.done.fetch_add(1, Relaxed);
        };
        // The first node of an empty index becomes the entry point before anyone links to it.
        if self.entry.lock().0 == EMPTY {
            insert(next.fetch_add(1, Relaxed) as usize)?;
            ctl.done.fetch_add(1, Relaxed);
        }
        let workers = rayon::current_num_threads().min(n);
        if workers <= 1 {
            work();
        } else {
            rayon::scope(|s| {
                for _ in 0..workers {
                    s.spawn(|_| work());
                }
            });
        }
        if let Some(e) = first_err.into_inner() {
            return Err(e);
        }
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        Ok(())
    }

    // ------------------------------------------------------------------ deletes

    /// Delete `id`: hidden from searches at once (in this handle), durable at the next flush.
    /// Returns false if no live vector has that id. The node still routes searches until a
    /// compaction removes it.
    pub fn delete(&self, id: u64) -> Result<bool> {
        self.writable()?;
        let mut w = self.writer.lock();
        if w.poisoned {
            return Err(self.poisoned_error());
        }
        let snap = self.view.read().clone();
        let Some(slot) = self.slot_of(&snap, id) else { return Ok(false) };
        let word = &snap.st.header(slot)[2];
        if (slot as u64) < w.committed.slots {
            let old = word.load(Acquire);
            self.undo.lock().log.record_marker(w.committed.seq, slot, old)?;
        }
        word.store(format::delete_marker(w.committed.seq + 1, slot), Release);
        w.live -= 1;
        w.deletes += 1;
        self.ids.lock().map.remove(&id);
        self.publish(Snap { live: w.live, ..Snap::clone_of(&snap) });
        Ok(true)
    }

    /// Slots deleted and not yet compacted away (in this handle's view).
    pub fn deleted_count(&self) -> Result<u64> {
        self.check_open()?;
        let s = self.snap();
        Ok(s.slots - s.live)
    }

    // ------------------------------------------------------------------ memory policies

    /// Slots whose vectors will not be written again: the committed ones.
    fn committed_slots(&self) -> u64 {
        if self.read_only {
            self.view.read().slots
        } else {
            self.writer.lock().committed.slots
        }
    }

    /// ADR-0016: ask for huge pages under the whole 2 MiB pieces of committed vectors.
    fn advise_committed(&self, st: &Storage, slots: u64) {
        Self::advise_slots(st, 0, slots);
    }

    /// Ask for huge pages under the whole vector pieces of slots `[from, to)`, if asked for.
    fn advise_slots(st: &Storage, from: u64, to: u64) {
        // (In memory every store asked for huge pages whole when it was made.)
        if st.huge.load(Acquire) && !st.is_memory() {
            for (p, len) in st.vector_pieces(from, to) {
                os::advise_huge(p as *const u8, len, true);
            }
            // A fault in the slot headers or lists would read around it (read_ahead_kb) into
            // the vector pieces beside them, with small pages, which then stay small.
            for (p, len) in st.graph_areas() {
                os::advise_random(p as *const u8, len);
            }
        }
    }

    /// Ask for huge pages under the index's vectors from now on (ADR-0016): the committed
    /// ones now, those committed later at each commit (a reader: at each new snapshot), and a
    /// batch's before it writes them. A request: the system may grant it or not
    /// (see `memory_stats`).
    pub fn use_huge_pages(&self) {
        let st = self.view.read().st.clone();
        if st.is_memory() {
            return st.advise_stores(true);
        }
        st.huge.store(true, Release);
        self.advise_committed(&st, self.committed_slots());
    }

    /// Stop asking for huge pages; ranges asked for before are told not to use them
    /// (MADV_NOHUGEPAGE), which keeps the huge pages the kernel already gave.
    pub fn keep_small_pages(&self) {
        let st = self.view.read().st.clone();
        if st.is_memory() {
            return st.advise_stores(false);
        }
        st.huge.store(false, Release);
        for (p, len) in st.vector_areas() {
            os::advise_huge(p as *const u8, len, false);
        }
    }

    /// ADR-0019: read the written part of the file into memory on a background thread. Asking
    /// while it runs does nothing; asking once it is done reads what the index holds then.
    /// In memory: nothing to read (the index is in memory already).
    pub fn warm(&self) {
        if self.memory {
            return;
        }
        self.warm_on.store(true, Release);
        let mut w = self.warm.lock();
        if w.as_ref().is_some_and(|w| w.running()) {
            return;
        }
        let snap = self.view.read().clone();
        let slots = snap.slots.max(if self.read_only { 0 } else { self.writer.lock().slots });
        *w = Some(Warm::start(snap.st.clone(), slots));
    }

    /// Stop a running warm (waits for at most one 8 MiB step).
    pub fn stop_warm(&self) {
        drop(self.warm.lock().take());
    }

    /// What the system holds of this index's mappings now.
    pub fn memory_stats(&self) -> Result<MemoryStats> {
        self.check_open()?;
        let snap = self.snap();
        let st = &snap.st;
        // The warm state first: a warm that finishes while the rest is measured then shows as
        // running, never as done with the residency from before.
        let (warm_running, warm_done_bytes, warm_total_bytes) = {
            let w = self.warm.lock();
            (
                w.as_ref().is_some_and(|w| w.running()),
                w.as_ref().map(|w| w.done.load(Relaxed)).unwrap_or(0),
                w.as_ref().map(|w| w.total).unwrap_or(0),
            )
        };
        let mapped = st.mapped_ranges();
        let written = st.written_ranges(snap.slots);
        let vectors: Vec<(usize, usize)> =
            written.iter().filter(|r| r.vectors).map(|r| (r.addr, r.addr + r.len)).collect();
        let others: Vec<(usize, usize)> =
            written.iter().filter(|r| !r.vectors).map(|r| (r.addr, r.addr + r.len)).collect();
        let all: Vec<(usize, usize)> = written.iter().map(|r| (r.addr, r.addr + r.len)).collect();
        let huge = |r: &[(usize, usize)]| {
            if st.is_memory() {
                os::anon_huge_pages(r)
            } else {
                os::file_pmd_mapped(r)
            }
        };
        Ok(MemoryStats {
            mapped_bytes: mapped.iter().map(|r| r.1 as u64).sum(),
            written_bytes: written.iter().map(|r| r.len as u64).sum(),
            resident_bytes: written.iter().map(|r| os::resident(r.addr as *const u8, r.len)).sum(),
            vector_bytes: vectors.iter().map(|r| (r.1 - r.0) as u64).sum(),
            vector_huge_bytes: huge(&vectors),
            graph_huge_bytes: huge(&others),
            huge_bytes: huge(&all),
            huge_pages_asked: st.huge.load(Acquire),
            backing: if st.is_memory() { "memory" } else { "file" },
            huge_pages_refused: st.is_memory() && os::thp_refused(),
            warm_running,
            warm_done_bytes,
            warm_total_bytes,
            populate: match os::populate_mode() {
                os::Populate::PopulateRead => "MADV_POPULATE_READ",
                os::Populate::WillNeed => "MADV_WILLNEED",
                os::Populate::Nothing => "none",
            },
        })
    }

    // ------------------------------------------------------------------ backup and compaction

    /// Write a consistent copy of the last flush to `dest` (a writer flushes first), renamed
    /// into place only when whole. A reader copies while the writer keeps writing: lists the
    /// writer changed meanwhile are put back from its undo log.
    pub fn backup(&self, dest: &Path) -> Result<()> {
        if self.memory {
            return self.save(dest);
        }
        self.check_open()?;
        Self::check_dest(dest, Some(&self.path))?;
        let tmp = tmp_sibling(dest, "backup");
        let res = if self.read_only {
            (|| {
                // The copy must fall between two flushes (a flush retires the undo log that
                // patches it), so nothing slow happens inside the window: the sync comes after.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while std::time::Instant::now() < deadline {
                    let snap = self.snap();
                    let h = self.writer.lock().committed.clone();
                    if h.seq != snap.seq {
                        continue;
                    }
                    let _ = std::fs::remove_file(&tmp); // an earlier attempt's
                    copy_commit(&snap.st, &h, &tmp)?;
                    // Lists changed since the commit: their committed contents are in the
                    // writer's undo log, saved before each change, so also before our copy.
                    let records = UndoLog::read(&self.path, h.seq)?;
                    if Self::newest_seq_on_disk(&snap.st) != h.seq {
                        continue; // a flush ran meanwhile: the log may be gone; copy again
                    }
                    patch_copy(&snap.st, &h, &tmp, &records)?;
                    return sync_file(&tmp);
                }
                Err(Error::new(
                    ErrorKind::Io,
                    "the writer flushed during every backup attempt for 10 s",
                    "retry when it flushes less often, or back up from the writer",
                ))
            })()
        } else {
            let mut w = self.writer.lock();
            (|| {
                self.flush_locked(&mut w)?;
                let snap = self.view.read().clone();
                copy_commit(&snap.st, &w.committed, &tmp)?;
                sync_file(&tmp)
            })()
        };
        Self::put_in_place(res, &tmp, dest)
    }

    /// Rewrite the index without its deleted vectors, with a rebuilt graph and the same ids,
    /// into a new file renamed over the old one (readers elsewhere follow by themselves).
    /// Flushes first. Cancelled or failed, it leaves the original untouched.
    pub fn compact(&self, threads: Option<usize>, ctl: &Control) -> Result<()> {
        self.writable()?;
        let mut w = self.writer.lock();
        self.flush_locked(&mut w)?;
        let snap = self.view.read().clone();
        // In insertion order, which the compacted index keeps.
        let live: Vec<u32> = Self::live_in_order(&snap).into_iter().map(|(s, _)| s).collect();
        let g = &self.geo;
        if self.memory {
            let new = Index::memory(g.dims, Some(&self.opts))?;
            Self::refill(&new, &snap, &live, &w, threads, ctl)?;
            self.adopt(&mut w, new, &snap);
            return Ok(());
        }
        let need = live.len() as u64
            * (g.stride + format::SLOT_HEADER + 4 * g.l0_words + 2 * 4 * g.upper_words) as u64
            + (8 << 20);
        if let Some(free) = os::free_space(&self.path) {
            if free < need {
                return Err(Error {
                    kind: ErrorKind::Io,
                    message: format!(
                        "compacting {} needs about {} MiB of free disk space; {} MiB are free",
                        self.path.display(),
                        need >> 20,
                        free >> 20
                    ),
                    help: "free disk space, then retry; the index is unchanged".into(),
                    errno: Some(libc::ENOSPC),
                });
            }
        }
        let tmp = tmp_sibling(&self.path, "compacting");
        let cleanup = || {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(undo_path(&tmp));
        };
        let built = (|| -> Result<Index> {
            let new = Index::open(&tmp, Some(g.dims), Some(&self.opts), Mode::Write)?;
            Self::refill(&new, &snap, &live, &w, threads, ctl)?;
            new.flush_locked(&mut new.writer.lock())?;
            Ok(new)
        })();
        let new = match built {
            Ok(n) => n,
            Err(e) => {
                cleanup();
                return Err(e);
            }
        };
        if let Err(e) = std::fs::rename(&tmp, &self.path) {
            drop(new);
            cleanup();
            return Err(Error::io(e, "renaming the compacted file over", &self.path));
        }
        let _ = os::sync_dir(&self.path);
        self.adopt(&mut w, new, &snap);
        let _ = std::fs::remove_file(undo_path(&tmp));
        Ok(())
    }

    /// Add the live vectors `live` of `snap` to the new, empty index `new` (compaction), with
    /// their ids, the next id and user_version of `w`.
    fn refill(
        new: &Index,
        snap: &Snap,
        live: &[u32],
        w: &Writer,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        let vb = new.geo.vec_bytes;
        let mut bytes = vec![0u8; live.len() * vb];
        let mut ids = Vec::with_capacity(live.len());
        for (i, &s) in live.iter().enumerate() {
            bytes[i * vb..(i + 1) * vb].copy_from_slice(snap.st.vector_bytes(s));
            ids.push(snap.live_id(s).expect("live"));
        }
        let mut nw = new.writer.lock();
        new.add_rows(&mut nw, Rows::Stored(&bytes), live.len(), Some(&ids), threads, ctl)?;
        nw.next_id = nw.next_id.max(w.next_id);
        nw.user_version = w.user_version;
        Ok(())
    }

    /// Take over a compacted index: its storage (and a file's writer lock) becomes ours.
    fn adopt(&self, w: &mut Writer, new: Index, old: &Snap) {
        new.closed.store(true, Release);
        let nsnap = new.view.read().clone();
        std::mem::swap(w, &mut *new.writer.lock());
        *self.entry.lock() = *new.entry.lock();
        *self.ids.lock() = IdMap::default();
        {
            let mut u = self.undo.lock();
            if !self.memory {
                u.log.remove();
            }
            u.saved.clear();
        }
        self.publish(Snap::clone_of(&nsnap));
        drop(new);
        if self.memory {
            nsnap.st.advise_stores(old.st.huge.load(Acquire));
            return;
        }
        nsnap.st.huge.store(old.st.huge.load(Acquire), Release);
        self.advise_committed(&nsnap.st, nsnap.slots);
        if self.warm_on.load(Acquire) {
            drop(self.warm.lock().take());
            *self.warm.lock() = Some(Warm::start(nsnap.st.clone(), nsnap.slots));
        }
    }

    // ------------------------------------------------------------------ check

    /// A full scan of the vectors and the graph: slots whose stored bytes fail a checksum or
    /// whose lists refer outside the index (`corrupt`, by slot), live vectors holding NaN or
    /// infinity (`not_finite`, by id), and live vectors no search can reach from the entry
    /// point (`unreachable`, by id). A writer's adds wait while it runs; searches do not.
    pub fn check(&self, ctl: &Control) -> Result<CheckReport> {
        self.check_open()?;
        // A writer: hold the writer lock so that no list changes under the scan.
        let _w = if self.read_only { None } else { Some(self.writer.lock()) };
        let snap = self.snap();
        let st = &snap.st;
        let n = snap.slots as u32;
        let g = Graph::new(st, self.metric(), n);
        let per_slot: Vec<(Option<u32>, Option<u64>)> = (0..n)
            .into_par_iter()
            .with_min_len(1024)
            .map_init(Vec::new, |buf, s| {
                ctl.done.fetch_add(1, Relaxed);
                if ctl.cancelled() {
                    return (None, None);
                }
                let h = st.header(s);
                let (id, upper, del, crcs) = (
                    h[0].load(Relaxed),
                    h[1].load(Relaxed),
                    h[2].load(Relaxed),
                    h[3].load(Relaxed),
                );
                let vec_ok = format::vector_crc(st.vector_bytes(s)) == crcs as u32;
                let hdr_ok = format::header_crc(id, upper, crcs as u32) == (crcs >> 32) as u32;
                let marker_ok = format::read_marker(del, s) != format::Marker::Damaged;
                let lists_ok = self.lists_ok(st, s, n);
                if !(vec_ok && hdr_ok && marker_ok && lists_ok) {
                    return (Some(s), None);
                }
                let live = snap.live_id(s).is_some();
                let finite = g.vector_f32(s, buf).iter().all(|x| x.is_finite());
                (None, if live && !finite { Some(id) } else { None })
            })
            .collect();
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        let corrupt: Vec<u32> = per_slot.iter().filter_map(|p| p.0).collect();
        let not_finite: Vec<u64> = per_slot.iter().filter_map(|p| p.1).collect();
        // Reachability on layer 0 from the entry point, through deleted nodes too.
        let mut seen = vec![false; n as usize];
        let mut stack = Vec::new();
        if snap.entry != EMPTY && snap.entry < n {
            seen[snap.entry as usize] = true;
            stack.push(snap.entry);
        }
        while let Some(s) = stack.pop() {
            let l0 = st.l0(s);
            for e in &l0[2..2 + graph::list_len(l0)] {
                let nb = e.load(Relaxed);
                if nb < n && !seen[nb as usize] {
                    seen[nb as usize] = true;
                    stack.push(nb);
                }
            }
        }
        let unreachable =
            (0..n).filter(|&s| !seen[s as usize]).filter_map(|s| snap.live_id(s)).collect();
        Ok(CheckReport { unreachable, not_finite, corrupt })
    }

    /// Whether a node's lists check out: counts in range, checksums, entries below `n`. A list
    /// that fails is read again a moment later: a writer in another process may be changing it.
    fn lists_ok(&self, st: &Storage, s: u32, n: u32) -> bool {
        let once = || {
            let l0 = st.l0(s);
            let head = l0[0].load(Acquire);
            let level = graph::level_of(st, s);
            if (head & 0xffff) as usize > l0.len() - 2 || level > graph::MAX_LEVEL {
                return false;
            }
            let ok = |list: &[std::sync::atomic::AtomicU32], layer: usize| {
                let head = list[0].load(Acquire);
                let cnt = (head & 0xffff) as usize;
                if cnt > list.len() - 2 {
                    return false;
                }
                let entries: Vec<u32> = list[2..2 + cnt].iter().map(|e| e.load(Relaxed)).collect();
                entries.iter().all(|&e| e < n)
                    && format::list_crc(s, layer, head, &entries) == list[1].load(Relaxed)
            };
            if !ok(l0, 0) {
                return false;
            }
            let upper = st.header(s)[1].load(Relaxed);
            if level > 0 && upper == NO_UPPER {
                return false;
            }
            (1..=level).all(|layer| graph::list_of(st, s, layer).is_some_and(|l| ok(l, layer)))
        };
        if once() {
            return true;
        }
        if self.read_only {
            std::thread::sleep(std::time::Duration::from_millis(2));
            return once();
        }
        false
    }

    // ------------------------------------------------------------------ searches

    /// The `k` nearest live vectors to `q`, nearest first.
    pub fn search(&self, q: &[f32], k: usize, ef: Option<usize>) -> Result<Vec<Hit>> {
        self.search_filtered(q, k, ef, None)
    }

    /// `search`, returning only ids the filter allows. With an `allowed` list of at most
    /// [`SCAN_FACTOR`] x ef ids, the allowed vectors are scanned exactly; otherwise the graph is
    /// walked (rejected nodes still route) and, if that finds fewer than k, scanned after all.
    pub fn search_filtered(
        &self,
        q: &[f32],
        k: usize,
        ef: Option<usize>,
        filter: Option<&Filter>,
    ) -> Result<Vec<Hit>> {
        self.search_in(&self.snap(), q, k, ef, filter)
    }

    /// `search_filtered` on a given snapshot.
    pub fn search_in(
        &self,
        snap: &Snap,
        q: &[f32],
        k: usize,
        ef: Option<usize>,
        filter: Option<&Filter>,
    ) -> Result<Vec<Hit>> {
        self.check_open()?;
        check_k(k)?;
        let ef = self.effective_ef(ef)?;
        let q = self.prepare_query(q, "the query")?;
        let f = filter.map(|f| self.slot_filter(snap, f));
        Ok(self.search_prepared(snap, &q, k, ef, f.as_ref(), None))
    }

    fn slot_filter(&self, snap: &Snap, f: &Filter) -> SlotFilter {
        self.with_ids(snap, |m| {
            let set = |ids: &[u64]| {
                SlotSet::new(ids.iter().filter_map(|id| m.get(id).copied()), ids.len(), snap.slots)
            };
            SlotFilter { allowed: f.allowed.as_deref().map(set), excluded: set(&f.excluded) }
        })
    }

    fn effective_ef(&self, ef: Option<usize>) -> Result<usize> {
        let ef = ef.unwrap_or(self.opts.ef_search);
        if !(1..=MAX_K).contains(&ef) {
            return Err(Error::invalid(
                format!("ef={ef} is out of range"),
                format!("pass ef from 1 to {MAX_K}"),
            ));
        }
        Ok(ef)
    }

    /// `start`: where layer 0 starts, if the caller already descended (`batch_starts`).
    fn search_prepared(
        &self,
        snap: &Snap,
        q: &[f32],
        k: usize,
        ef: usize,
        filter: Option<&SlotFilter>,
        start: Option<&Start>,
    ) -> Vec<Hit> {
        if snap.live == 0 {
            return Vec::new();
        }
        let st = &snap.st;
        let euclid = self.metric() == Metric::Euclidean;
        // Slots whose vector failed its checksum: their distance is wrong, so they are never
        // returned (check() names them); the search runs again without them to fill k.
        let mut bad: Vec<u32> = Vec::new();
        loop {
            let raw = self.search_slots(snap, q, k, ef, filter, &bad, start);
            // The results' headers are far apart and each read is a miss: ask for them all
            // first, so the misses overlap (1.02x on a minilm batch at ef 16-24, paired).
            for &(_, s) in &raw {
                crate::cpu::prefetch(st.header(s).as_ptr() as *const u8, 1, true);
            }
            let mut hits = Vec::with_capacity(raw.len());
            let before = bad.len();
            for (d, s) in raw {
                let Some(id) = snap.live_id(s) else { continue };
                if format::vector_crc(st.vector_bytes(s)) != st.header(s)[3].load(Relaxed) as u32 {
                    bad.push(s);
                    continue;
                }
                hits.push(Hit { id, distance: if euclid { d.max(0.0).sqrt() } else { d } });
            }
            if bad.len() == before || bad.len() > 64 {
                return hits;
            }
        }
    }

    /// The search proper: (distance, slot) of the k nearest accepted slots, nearest first.
    #[allow(clippy::too_many_arguments)]
    fn search_slots(
        &self,
        snap: &Snap,
        q: &[f32],
        k: usize,
        ef: usize,
        filter: Option<&SlotFilter>,
        bad: &[u32],
        start: Option<&Start>,
    ) -> Vec<(f32, u32)> {
        let visible = snap.slots as u32;
        let st = &snap.st;
        let exact = Graph::new(st, self.metric(), visible);
        // Deleted nodes route but are never returned (the check is skipped when none are).
        let any_deleted = snap.live < snap.slots;
        let accept = |s: u32| {
            s < visible
                && filter.is_none_or(|f| f.allows(s))
                && (!any_deleted || snap.live_id(s).is_some())
                && (bad.is_empty() || !bad.contains(&s))
        };
        match small_allowed(k, ef, filter) {
            Some(allowed) => exact.scan(q, k, allowed.iter().filter(|&s| accept(s))),
            // The beam would cover everything anyway: scan, which is exact even where the graph
            // is not connected.
            _ if ef as u64 >= snap.live => exact.scan(q, k, (0..visible).filter(|&s| accept(s))),
            _ => {
                // Route through every mapped slot (a batch in progress, or a writer elsewhere,
                // may have linked newer ones), but return only the snapshot's.
                let limit = st.capacity().min(u32::MAX as u64 - 1) as u32;
                let hits = Graph::new(st, self.metric(), limit).knn(
                    q,
                    k,
                    ef,
                    snap.entry,
                    snap.max_level,
                    visible,
                    &accept,
                    start,
                );
                if hits.len() < k && (filter.is_some() || !bad.is_empty()) {
                    exact.scan(q, k, (0..visible).filter(|&s| accept(s)))
                } else {
                    hits
                }
            }
        }
    }

    /// Search many queries (`qs` is nq x dims) on `threads` threads. Returns ids and distances,
    /// nq x k row-major, padded with `RESERVED_ID` and infinity.
    #[allow(clippy::too_many_arguments)]
    pub fn search_batch(
        &self,
        qs: &[f32],
        nq: usize,
        k: usize,
        ef: Option<usize>,
        filter: Option<&Filter>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        self.search_batch_in(&self.snap(), qs, nq, k, ef, BatchFilter::Same(filter), threads, ctl)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn search_batch_in(
        &self,
        snap: &Snap,
        qs: &[f32],
        nq: usize,
        k: usize,
        ef: Option<usize>,
        filter: BatchFilter<'_>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        self.check_open()?;
        if let BatchFilter::PerQuery(f) = filter {
            if f.len() != nq {
                return Err(Error::invalid(
                    format!("{} filters for {nq} queries", f.len()),
                    "pass one filter per query",
                ));
            }
        }
        check_k(k)?;
        let ef = self.effective_ef(ef)?;
        let d = self.dims();
        if qs.len() != nq * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("got {} values for {nq} queries of {d} dimensions", qs.len()),
                format!("pass an array of shape (n, {d})"),
            ));
        }
        if nq.checked_mul(k).is_none_or(|c| c > 1 << 31) {
            return Err(Error::invalid(
                format!("{nq} queries x k={k} results is too many"),
                "search in smaller batches or with a smaller k",
            ));
        }
        for (r, row) in qs.chunks_exact(d).enumerate() {
            self.check_vector(row, &format!("query {r}"))?;
        }
        // Prepared once for both passes (cosine: one normalised copy of the batch).
        let qs = self.search_form(qs, d);
        let qs: &[f32] = &qs;
        let same = match filter {
            BatchFilter::Same(f) => f.map(|f| self.slot_filter(snap, f)),
            BatchFilter::PerQuery(_) => None,
        };
        // Large unfiltered batches run in the order of where their queries enter layer 0, so
        // queries that walk the same part of the graph run one after another and find its
        // vectors and page translations still cached. Each query's search is the one it would
        // have had alone: the descent found its start, the order only changes when it runs.
        let ordered = match filter {
            BatchFilter::Same(_) => nq >= ORDER_MIN && !scans(snap, k, ef, same.as_ref()),
            BatchFilter::PerQuery(_) => false,
        };
        let starts = if ordered { self.batch_starts(snap, qs, nq, threads, ctl)? } else { None };
        let search_one = |i: usize| -> Vec<Hit> {
            if ctl.cancelled() {
                return Vec::new();
            }
            let q = &qs[i * d..(i + 1) * d];
            let own = match filter {
                BatchFilter::PerQuery(fs) => Some(self.slot_filter(snap, &fs[i])),
                BatchFilter::Same(_) => None,
            };
            let start = starts.as_ref().and_then(|(_, s)| s[i].as_ref());
            let hits = self.search_prepared(snap, q, k, ef, own.as_ref().or(same.as_ref()), start);
            ctl.done.fetch_add(1, Relaxed);
            hits
        };
        let mut ids = vec![RESERVED_ID; nq * k];
        let mut dists = vec![f32::INFINITY; nq * k];
        let mut put = |i: usize, hits: Vec<Hit>| {
            for (j, h) in hits.into_iter().enumerate() {
                ids[i * k + j] = h.id;
                dists[i * k + j] = h.distance;
            }
        };
        let identity: Vec<u32>;
        let order: &[u32] = match &starts {
            Some((o, _)) => o,
            None => {
                identity = (0..nq as u32).collect();
                &identity
            }
        };
        if threads == Some(1) {
            // On the calling thread: Python threads that each search with threads=1 then run
            // side by side instead of queueing for one shared worker.
            for &i in order {
                put(i as usize, search_one(i as usize));
            }
        } else {
            // Consecutive queries of the order go to one thread, 16 at a time.
            let found: Vec<Vec<Hit>> = with_threads(threads, || {
                order.par_iter().with_max_len(16).map(|&i| search_one(i as usize)).collect()
            })?;
            for (&i, hits) in order.iter().zip(found) {
                put(i as usize, hits);
            }
        }
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        Ok((ids, dists))
    }

    /// For a batch of prepared queries: the order to search them in (by the path of their
    /// descent through the upper layers, top layer first, which sorts them like the leaves of a
    /// tree) and where each enters layer 0. None where there is nothing to order by (one layer).
    fn batch_starts(
        &self,
        snap: &Snap,
        qs: &[f32],
        nq: usize,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Option<BatchStarts>> {
        let layers = snap.max_level;
        if layers == 0 {
            return Ok(None);
        }
        let d = self.dims();
        let st = &snap.st;
        let limit = st.capacity().min(u32::MAX as u64 - 1) as u32;
        let g = Graph::new(st, self.metric(), limit);
        let visible = snap.slots as u32;
        let descend = |q: &[f32], path: &mut [u32]| -> Option<Start> {
            if ctl.cancelled() {
                return None;
            }
            g.start_of(q, snap.entry, layers, visible, path)
        };
        let mut paths = vec![0u32; nq * layers];
        let starts: Vec<Option<Start>> = if threads == Some(1) {
            qs.chunks_exact(d).zip(paths.chunks_mut(layers)).map(|(q, p)| descend(q, p)).collect()
        } else {
            with_threads(threads, || {
                qs.par_chunks_exact(d)
                    .zip(paths.par_chunks_mut(layers))
                    .with_max_len(64)
                    .map(|(q, p)| descend(q, p))
                    .collect()
            })?
        };
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        let mut order: Vec<u32> = (0..nq as u32).collect();
        order.sort_by(|&a, &b| {
            paths[a as usize * layers..][..layers].cmp(&paths[b as usize * layers..][..layers])
        });
        Ok(Some((order, starts)))
    }

    // ------------------------------------------------------------------ commit, rollback, close

    fn poisoned_error(&self) -> Error {
        Error::new(
            ErrorKind::Io,
            format!(
                "an earlier flush of {} failed; what the disk holds is unknown",
                self.path.display()
            ),
            "close and reopen the index; it reopens as of the last successful flush",
        )
    }

    /// Make every change durable. Does nothing when nothing changed. Searches go on meanwhile.
    /// In memory: nothing to do (there is no file; `save` writes one).
    pub fn flush(&self) -> Result<()> {
        self.writable()?;
        if self.memory {
            return Ok(());
        }
        let mut w = self.writer.lock();
        self.flush_locked(&mut w)
    }

    fn flush_locked(&self, w: &mut Writer) -> Result<()> {
        if self.memory {
            return Ok(());
        }
        if w.poisoned {
            return Err(self.poisoned_error());
        }
        if w.slots == w.committed.slots
            && w.user_version == w.committed.user_version
            && w.deletes == 0
            && w.next_id == w.committed.next_id
        {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let h = Self::next_header(w, &snap);
        let res = (|| -> Result<()> {
            // Undo records before the data they protect, data before the header that commits it.
            self.undo.lock().log.sync()?;
            snap.st.sync_data()?;
            snap.st.write_header(1 - w.copy, &h)?;
            snap.st.sync_data()
        })();
        if let Err(e) = res {
            w.poisoned = true;
            return Err(e);
        }
        w.copy = 1 - w.copy;
        self.publish(Snap::of(snap.st.clone(), &h, true));
        w.deletes = 0;
        self.advise_committed(&snap.st, h.slots);
        w.committed = h;
        let mut u = self.undo.lock();
        u.saved.clear();
        // A failure here leaves a stale log (its base is no longer the committed sequence).
        let _ = u.log.clear();
        Ok(())
    }

    /// Discard everything since the last flush; keep the writer lock.
    pub fn rollback(&self) -> Result<()> {
        self.writable()?;
        if self.memory {
            return Err(Error::invalid(
                "an in-memory index has no flushed state to roll back to (flush does nothing in memory)",
                "keep a copy with save(path) and load it back, or use a file-backed index",
            ));
        }
        let mut w = self.writer.lock();
        self.rollback_locked(&mut w)
    }

    fn rollback_locked(&self, w: &mut Writer) -> Result<()> {
        let dirty = w.slots != w.committed.slots
            || w.user_version != w.committed.user_version
            || w.deletes != 0;
        if !dirty && self.undo.lock().log.is_empty() {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let h = w.committed.clone();
        restore(&snap.st, h.slots, &UndoLog::read(&self.path, h.seq)?);
        for (i, r) in h.regions.iter().filter(|r| r.kind == RegionKind::Heap).enumerate() {
            snap.st.set_heap_used(i, r.used);
        }
        w.slots = h.slots;
        w.live = h.live;
        w.next_id = h.next_id;
        w.user_version = h.user_version;
        w.deletes = 0;
        *self.entry.lock() = (h.entry, h.max_level as usize);
        // Slots past the commit will be reused under other ids, and deleted ids come back.
        *self.ids.lock() = IdMap::default();
        self.publish(Snap::of(snap.st.clone(), &h, true));
        // The log stays: the restored lists are only in the page cache until the next sync,
        // and the log still describes the committed state.
        Ok(())
    }

    /// Close: discard unflushed changes (as a crash would), leave the file as last flushed,
    /// and release the writer lock. Later calls on this index raise `Closed`.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, AcqRel) {
            return Ok(());
        }
        self.stop_warm();
        if self.read_only || self.memory {
            return Ok(());
        }
        let mut w = self.writer.lock();
        let had_log = !self.undo.lock().log.is_empty();
        self.rollback_locked(&mut w)?;
        let st = self.view.read().st.clone();
        if had_log && !w.poisoned {
            st.sync_data()?;
            self.undo.lock().log.remove();
        }
        // Snapshots may keep the mappings alive; the lock goes now.
        os::unlock(st.file());
        Ok(())
    }
}

/// The id of a slot that is live as of `del_visible` and whose header checks out; None for
/// deleted or damaged slots.
fn live_id(st: &Storage, slot: u32, del_visible: u64) -> Option<u64> {
    let h = st.header(slot);
    let (id, upper, del, crcs) =
        (h[0].load(Relaxed), h[1].load(Relaxed), h[2].load(Acquire), h[3].load(Relaxed));
    if format::header_crc(id, upper, crcs as u32) != (crcs >> 32) as u32 {
        return None;
    }
    match format::read_marker(del, slot) {
        format::Marker::Live => Some(id),
        format::Marker::Deleted(seq) if seq > del_visible => Some(id),
        _ => None,
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.ino() == y.ino() && x.dev() == y.dev(),
        _ => false,
    }
}

fn sync_file(p: &Path) -> Result<()> {
    File::open(p).and_then(|f| f.sync_all()).map_err(|e| Error::io(e, "syncing", p))
}

/// The byte ranges (file offset, length) commit `h` has written: the used slots of each
/// segment, the used bytes of each heap chunk. The rest is unused capacity (a hole in a file).
fn commit_ranges(st: &Storage, h: &Header) -> Vec<(u64, u64)> {
    let g = st.geo;
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut first = 0u64;
    for (k, r) in h.regions.iter().filter(|r| r.kind == RegionKind::Segment).enumerate() {
        let cap = g.segment_slots(k);
        let n = h.slots.saturating_sub(first).min(cap);
        first += cap;
        let l = g.segment_layout(cap);
        ranges.push((r.offset + l.vectors, n * g.stride as u64));
        ranges.push((r.offset + l.headers, n * format::SLOT_HEADER as u64));
        ranges.push((r.offset + l.l0, n * g.l0_words as u64 * 4));
    }
    ranges.extend(
        h.regions.iter().filter(|r| r.kind == RegionKind::Heap).map(|r| (r.offset, r.used as u64)),
    );
    ranges.retain(|r| r.1 > 0);
    ranges
}

/// Copy commit `h` of `st` (a file's mappings, or an in-memory index) to a new file `tmp`: what
/// it has written (the rest stays a hole) and `h` as both header copies. Not synced.
fn copy_commit(st: &Storage, h: &Header, tmp: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| Error::io(e, "creating", tmp))?;
    out.set_len(h.end_of_regions()).map_err(|e| Error::io(e, "writing", tmp))?;
    let mut buf = vec![0u8; 1 << 20];
    for (start, len) in commit_ranges(st, h) {
        let mut at = start;
        while at < start + len {
            let n = ((start + len - at) as usize).min(buf.len());
            st.read_at(&mut buf[..n], at)?;
            out.write_all_at(&buf[..n], at).map_err(|e| Error::io(e, "writing", tmp))?;
            at += n as u64;
        }
    }
    let enc = h.encode();
    out.write_all_at(&enc, 0).map_err(|e| Error::io(e, "writing", tmp))?;
    out.write_all_at(&enc, HEADER_COPY_SIZE as u64).map_err(|e| Error::io(e, "writing", tmp))
}

/// Fill in-memory storage `mem` with `ranges` of `file`. Balanced: the bytes, taken in file
/// order, are cut into one contiguous stretch per thread of the pool and each thread reads its
/// own (first touch places each stretch on its thread's node). Otherwise this thread reads all.
/// Cancellable between 8 MiB pieces.
fn copy_ranges(
    mem: &Storage,
    file: &File,
    path: &Path,
    ranges: &[(u64, u64)],
    balanced: bool,
    ctl: &Control,
) -> Result<()> {
    const PIECE: u64 = 8 << 20;
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    // Copy the bytes `[from, to)` of the concatenated ranges.
    let stretch = |from: u64, to: u64| -> Result<()> {
        let mut pos = 0u64;
        for &(off, len) in ranges {
            let (a, b) = (from.max(pos), to.min(pos + len));
            if a < b {
                let mut at = a;
                while at < b {
                    if ctl.cancelled() {
                        return Err(Error::interrupted());
                    }
                    let n = (b - at).min(PIECE);
                    mem.fill_from(file, path, off + (at - pos), n as usize)?;
                    ctl.done.fetch_add(n, Relaxed);
                    at += n;
                }
            }
            pos += len;
        }
        Ok(())
    };
    let threads = rayon::current_num_threads();
    if !balanced || threads <= 1 {
        return stretch(0, total);
    }
    let err: Mutex<Option<Error>> = Mutex::new(None);
    rayon::broadcast(|ctx| {
        let (i, t) = (ctx.index() as u64, ctx.num_threads() as u64);
        if let Err(e) = stretch(total * i / t, total * (i + 1) / t) {
            err.lock().get_or_insert(e);
        }
    });
    err.into_inner().map_or(Ok(()), Err)
}

/// Apply undo records (committed contents of lists and markers changed since commit `h`) to a
/// copy of the index made while the writer kept writing; `put(bytes, file offset)` writes.
fn apply_records(
    st: &Storage,
    h: &Header,
    records: &[Record],
    mut put: impl FnMut(&[u8], u64) -> Result<()>,
) -> Result<()> {
    let mut put_words = |at: u64, words: &[u32]| -> Result<()> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        put(&bytes, at)
    };
    for r in records {
        match r {
            Record::Lists(slot, words)
                if (*slot as u64) < h.slots && words.len() >= st.geo.l0_words =>
            {
                let Some((_, l0)) = st.slot_offsets(&h.regions, *slot) else { continue };
                put_words(l0, &words[..st.geo.l0_words])?;
                let upper = st.header(*slot)[1].load(Relaxed);
                for (i, chunk) in words[st.geo.l0_words..].chunks(st.geo.upper_words).enumerate() {
                    if let Some(at) = st.upper_offset(&h.regions, upper, i + 1) {
                        put_words(at, chunk)?;
                    }
                }
            }
            Record::Marker(slot, old) if (*slot as u64) < h.slots => {
                if let Some((hdr, _)) = st.slot_offsets(&h.regions, *slot) {
                    put_words(hdr + 16, &[*old as u32, (*old >> 32) as u32])?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `apply_records` to a copy in a file.
fn patch_copy(st: &Storage, h: &Header, tmp: &Path, records: &[Record]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let out = OpenOptions::new().write(true).open(tmp).map_err(|e| Error::io(e, "opening", tmp))?;
    apply_records(st, h, records, |bytes, at| {
        out.write_all_at(bytes, at).map_err(|e| Error::io(e, "writing", tmp))
    })
}

/// Put back what an undo log saved; returns how many records applied.
fn restore(st: &Storage, committed_slots: u64, records: &[Record]) -> usize {
    let mut n = 0;
    for r in records {
        match r {
            Record::Lists(slot, words)
                if (*slot as u64) < committed_slots && words.len() >= st.geo.l0_words =>
            {
                graph::restore_lists(st, *slot, words);
                n += 1;
            }
            Record::Marker(slot, old) if (*slot as u64) < committed_slots => {
                st.header(*slot)[2].store(*old, Release);
                n += 1;
            }
            _ => {}
        }
    }
    n
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vecs(n: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
        (0..n * d)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    fn brute(data: &[f32], d: usize, q: &[f32], k: usize) -> Vec<u64> {
        let mut v: Vec<(f32, u64)> = data
            .chunks_exact(d)
            .enumerate()
            .map(|(i, r)| (r.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum::<f32>(), i as u64))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.into_iter().take(k).map(|x| x.1).collect()
    }

    #[test]
    fn batch_build_reaches_high_recall_and_reopens_identically() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let (n, d) = (3000, 16);
        let data = rand_vecs(n, d, 1);
        let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        let ids = idx.add_batch(&data, n, None, Some(2), &Control::default()).unwrap();
        assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
        idx.flush().unwrap();
        let queries = rand_vecs(50, d, 2);
        let mut hit = 0;
        for q in queries.chunks_exact(d) {
            let got: Vec<u64> = idx.search(q, 10, Some(64)).unwrap().iter().map(|h| h.id).collect();
            let want = brute(&data, d, q, 10);
            hit += got.iter().filter(|g| want.contains(g)).count();
        }
        assert!(hit as f64 / 500.0 >= 0.95, "recall {}", hit as f64 / 500.0);
        drop(idx);
        let idx = Index::open(&p, None, None, Mode::Read).unwrap();
        assert_eq!(idx.len(), n as u64);
        assert_eq!(idx.get(17).unwrap().unwrap(), data[17 * d..18 * d].to_vec());
        let exact = idx.search(&queries[..d], 10, Some(n)).unwrap();
        assert_eq!(
            exact.iter().map(|h| h.id).collect::<Vec<_>>(),
            brute(&data, d, &queries[..d], 10)
        );
    }

    #[test]
    fn memory_index_saves_a_file_that_loads_back_with_the_same_bytes_and_results() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.chassis");
        // 20,000 rows: above BALANCED_MIN, so both the batch and the load take the balanced path.
        let (n, d) = (20_000, 8);
        let data = rand_vecs(n, d, 11);
        let queries = rand_vecs(5, d, 12);
        let mut results = Vec::new();
        for placement in [Placement::Balanced, Placement::Local] {
            let opts = Options { placement, ef_construction: 32, ..Default::default() };
            let mem = Index::memory(d, Some(&opts)).unwrap();
            assert!(mem.is_memory());
            mem.add_batch(&data, n, None, Some(2), &Control::default()).unwrap();
            assert!(mem.delete(5).unwrap());
            assert_eq!(mem.pending(), 0);
            mem.flush().unwrap(); // nothing to do, and no file appears
            mem.save(&p).unwrap();
            let file = Index::open(&p, None, None, Mode::Read).unwrap();
            assert_eq!(file.len(), n as u64 - 1);
            assert!(!file.contains(5).unwrap());
            let loaded = Index::load(&p, Some(&opts), Some(2), &Control::default()).unwrap();
            for idx in [&mem, &file, &loaded] {
                assert_eq!(idx.get(17).unwrap().unwrap(), data[17 * d..18 * d].to_vec());
                assert_eq!(idx.get(5).unwrap(), None);
                assert!(idx.check(&Control::default()).unwrap().corrupt.is_empty());
            }
            for q in queries.chunks_exact(d) {
                let want: Vec<u64> =
                    brute(&data, d, q, 11).into_iter().filter(|&i| i != 5).take(10).collect();
                let got: Vec<Vec<u64>> = [&mem, &file, &loaded]
                    .iter()
                    .map(|i| i.search(q, 10, Some(n)).unwrap().iter().map(|h| h.id).collect())
                    .collect();
                assert!(got.iter().all(|g| *g == want), "{got:?} vs {want:?}");
                results.push(want);
            }
            // The loaded copy is a writer of its own: adds and compaction work in memory.
            let extra = loaded.add(&data[..d], None).unwrap();
            assert_eq!(extra, n as u64);
            loaded.compact(Some(2), &Control::default()).unwrap();
            assert_eq!(loaded.deleted_count().unwrap(), 0);
            assert_eq!(loaded.len(), n as u64);
            assert!(loaded.rollback().is_err());
            drop(file);
            std::fs::remove_file(&p).unwrap();
        }
    }

    #[test]
    fn unflushed_adds_and_list_changes_are_gone_after_close() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 8;
        let data = rand_vecs(600, d, 3);
        let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        idx.add_batch(&data[..300 * d], 300, None, None, &Control::default()).unwrap();
        idx.flush().unwrap();
        let before: Vec<Vec<u32>> =
            (0..300).map(|s| graph::snapshot_lists(&idx.snap().st, s)).collect();
        idx.add_batch(&data[300 * d..], 300, None, None, &Control::default()).unwrap();
        assert!(undo_path(&p).exists(), "committed lists changed, so the undo log holds them");
        idx.close().unwrap();
        drop(idx);
        let idx = Index::open(&p, None, None, Mode::Write).unwrap();
        assert_eq!(idx.len(), 300);
        let after: Vec<Vec<u32>> =
            (0..300).map(|s| graph::snapshot_lists(&idx.snap().st, s)).collect();
        assert_eq!(before, after);
        assert!(!undo_path(&p).exists());
    }

    #[test]
    fn a_cancelled_batch_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 8;
        let data = rand_vecs(400, d, 4);
        let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        idx.add_batch(&data[..200 * d], 200, None, None, &Control::default()).unwrap();
        let before: Vec<Vec<u32>> =
            (0..200).map(|s| graph::snapshot_lists(&idx.snap().st, s)).collect();
        let ctl = Control::default();
        ctl.cancel.store(true, Relaxed);
        let e = idx.add_batch(&data[200 * d..], 200, None, None, &ctl).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Interrupted);
        assert_eq!(idx.len(), 200);
        let after: Vec<Vec<u32>> =
            (0..200).map(|s| graph::snapshot_lists(&idx.snap().st, s)).collect();
        assert_eq!(before, after);
        assert_eq!(idx.add(&data[..d], None).unwrap(), 200);
    }

    #[test]
    fn ids_after_a_rollback_name_the_new_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 4;
        let data = rand_vecs(20, d, 6);
        let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        idx.add_batch(&data[..5 * d], 5, None, None, &Control::default()).unwrap();
        idx.flush().unwrap();
        idx.add_batch(
            &data[5 * d..10 * d],
            5,
            Some(&[100, 101, 102, 103, 104]),
            None,
            &Control::default(),
        )
        .unwrap();
        assert!(idx.contains(102).unwrap());
        idx.rollback().unwrap();
        assert!(!idx.contains(102).unwrap());
        idx.add_batch(
            &data[10 * d..15 * d],
            5,
            Some(&[200, 201, 202, 203, 204]),
            None,
            &Control::default(),
        )
        .unwrap();
        assert!(!idx.contains(102).unwrap());
        assert_eq!(idx.get(202).unwrap().unwrap(), data[12 * d..13 * d].to_vec());
        assert_eq!(idx.ids().unwrap(), vec![0, 1, 2, 3, 4, 200, 201, 202, 203, 204]);
    }

    fn exact_ids(idx: &Index, q: &[f32], k: usize) -> Vec<u64> {
        idx.search(q, k, Some(100_000)).unwrap().iter().map(|h| h.id).collect()
    }

    #[test]
    fn deletes_hide_at_once_commit_at_flush_and_roll_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 8;
        let data = rand_vecs(500, d, 7);
        let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        w.add_batch(&data, 500, None, None, &Control::default()).unwrap();
        w.flush().unwrap();
        let r = Index::open(&p, None, None, Mode::Read).unwrap();
        let q = &data[42 * d..43 * d];
        assert_eq!(exact_ids(&w, q, 1), vec![42]);
        assert!(w.delete(42).unwrap());
        assert!(!w.delete(42).unwrap(), "deleting twice");
        assert_ne!(exact_ids(&w, q, 1), vec![42]);
        assert!(w.search(q, 10, Some(20)).unwrap().iter().all(|h| h.id != 42));
        assert_eq!((w.len(), w.deleted_count().unwrap()), (499, 1));
        assert_eq!(exact_ids(&r, q, 1), vec![42], "a reader sees the delete only after the flush");
        w.rollback().unwrap();
        assert_eq!(exact_ids(&w, q, 1), vec![42]);
        assert!(w.delete(42).unwrap());
        w.flush().unwrap();
        assert_ne!(exact_ids(&r, q, 1), vec![42]);
        assert_eq!(r.len(), 499);
        assert!(r.get(42).unwrap().is_none());
        // Replace: the id comes back with another vector.
        w.add(&data[7 * d..8 * d], Some(42)).unwrap();
        assert_eq!(w.get(42).unwrap().unwrap(), data[7 * d..8 * d].to_vec());
    }

    #[test]
    fn backup_and_compact_keep_exactly_the_live_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 8;
        let data = rand_vecs(2000, d, 8);
        let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        w.add_batch(&data, 2000, None, None, &Control::default()).unwrap();
        for id in (0..2000).step_by(3) {
            assert!(w.delete(id).unwrap());
        }
        w.set_user_version(77).unwrap();
        let b = dir.path().join("b.chassis");
        w.backup(&b).unwrap();
        let r = Index::open(&p, None, None, Mode::Read).unwrap();
        w.compact(Some(2), &Control::default()).unwrap();
        assert_eq!(w.deleted_count().unwrap(), 0);
        let live: Vec<u64> = (0..2000).filter(|i| i % 3 != 0).collect();
        assert_eq!(w.ids().unwrap(), live);
        assert_eq!(w.user_version(), 77);
        for &id in &live[..50] {
            assert_eq!(
                w.get(id).unwrap().unwrap(),
                data[id as usize * d..(id as usize + 1) * d].to_vec()
            );
        }
        assert_eq!(w.add(&data[..d], None).unwrap(), 2000, "default ids go on after the largest");
        w.flush().unwrap();
        let report = w.check(&Control::default()).unwrap();
        assert!(report.corrupt.is_empty() && report.not_finite.is_empty(), "{report:?}");
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(r.len(), 1334, "the reader moved to the compacted file");
        let bk = Index::open(&b, None, None, Mode::Read).unwrap();
        assert_eq!(bk.ids().unwrap(), live);
        assert_eq!(bk.user_version(), 77);
        let q = &data[5 * d..6 * d];
        let want: Vec<u64> =
            brute(&data, d, q, 2000).into_iter().filter(|i| i % 3 != 0).take(10).collect();
        assert_eq!(exact_ids(&bk, q, 10), want);
    }

    #[test]
    fn a_reader_backup_is_the_last_flush_although_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 8;
        let data = rand_vecs(3000, d, 9);
        let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        w.add_batch(&data[..1000 * d], 1000, None, None, &Control::default()).unwrap();
        w.flush().unwrap();
        let before: Vec<Vec<u32>> =
            (0..1000).map(|s| graph::snapshot_lists(&w.snap().st, s)).collect();
        w.add_batch(&data[1000 * d..], 2000, None, None, &Control::default()).unwrap(); // changes committed lists
        w.delete(5).unwrap();
        let r = Index::open(&p, None, None, Mode::Read).unwrap();
        let b = dir.path().join("b.chassis");
        r.backup(&b).unwrap();
        let bk = Index::open(&b, None, None, Mode::Write).unwrap();
        assert_eq!(bk.len(), 1000);
        assert!(bk.contains(5).unwrap());
        let after: Vec<Vec<u32>> =
            (0..1000).map(|s| graph::snapshot_lists(&bk.snap().st, s)).collect();
        assert_eq!(before, after, "the copy has the committed lists, not the writer's newer ones");
        assert!(bk.check(&Control::default()).unwrap().corrupt.is_empty());
    }

    #[test]
    fn check_names_damaged_slots() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 8;
        let data = rand_vecs(300, d, 10);
        let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        w.add_batch(&data, 300, None, None, &Control::default()).unwrap();
        w.flush().unwrap();
        let clean = w.check(&Control::default()).unwrap();
        assert!(clean.corrupt.is_empty() && clean.not_finite.is_empty());
        let st = w.snap().st.clone();
        // Flip a vector byte of slot 10 and a neighbor entry of slot 20, behind the index's back.
        // SAFETY: slot 10 is in a mapped, writable segment, and no search runs meanwhile.
        unsafe { *(st.vector_ptr(10) as *mut u8) ^= 0x40 };
        st.l0(20)[2].fetch_xor(1 << 20, Relaxed);
        let report = w.check(&Control::default()).unwrap();
        assert_eq!(report.corrupt, vec![10, 20]);
        assert!(w.get(10).is_err(), "get refuses a vector that fails its checksum");
        assert_eq!(w.search(&data[..d], 5, Some(10)).unwrap().len(), 5, "searches go on");
    }

    #[test]
    fn second_writer_is_refused_and_reader_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let _w = Index::open(&p, Some(4), None, Mode::Write).unwrap();
        let e = Index::open(&p, Some(4), None, Mode::Write).err().unwrap();
        assert_eq!(e.kind, ErrorKind::IndexLocked);
        assert!(Index::open(&p, None, None, Mode::Read).is_ok());
    }

    #[test]
    fn reader_follows_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.chassis");
        let d = 8;
        let data = rand_vecs(5000, d, 5);
        let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
        w.add_batch(&data[..10 * d], 10, None, None, &Control::default()).unwrap();
        w.flush().unwrap();
        let r = Index::open(&p, None, None, Mode::Read).unwrap();
        assert_eq!(r.len(), 10);
        w.add_batch(&data[10 * d..], 4990, None, None, &Control::default()).unwrap();
        assert_eq!(r.len(), 10, "a reader never sees unflushed adds");
        assert_eq!(w.len(), 5000, "the writer sees its own adds at once");
        let pinned = r.snap();
        w.flush().unwrap();
        assert_eq!(r.len(), 5000);
        assert_eq!(pinned.slots, 10, "a pinned snapshot keeps its state");
        assert_eq!(
            r.search_in(&pinned, &data[4000 * d..4001 * d], 3, Some(10), None).unwrap().len(),
            3
        );
        assert!(r
            .search_in(&pinned, &data[4000 * d..4001 * d], 3, Some(10), None)
            .unwrap()
            .iter()
            .all(|h| h.id < 10));
        assert_eq!(r.get(4999).unwrap().unwrap(), data[4999 * d..].to_vec());
    }
}
