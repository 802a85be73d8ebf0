//! The index a caller uses: one type, [`Index`], whose `impl` is split over the files of this
//! folder by responsibility. Python-free; `src/python/` wraps it.
//!
//! | file             | what it holds                                                        |
//! |------------------|----------------------------------------------------------------------|
//! | `mod.rs`         | the struct, its snapshots ([`Snap`]) and writer state, accessors      |
//! | `options.rs`     | [`Options`], [`Placement`], [`Mode`]: what a caller chooses           |
//! | `open.rs`        | open, create, in-memory, load; recovery when a writer opens           |
//! | `reader.rs`      | a reader following the writer: refresh to each commit, reopen         |
//! | `input.rs`       | checks of dimensions, values, k and ef; query and row encoding        |
//! | `ids.rs`         | the id -> slot map, contains, get, ids in insertion order             |
//! | `write.rs`       | add, add_batch as steps (plan, reserve, write, link, publish), delete |
//! | `link.rs`        | linking a batch (the tail among them) with a savepoint               |
//! | `consolidate.rs` | deletes consolidated: live nodes re-linked around deleted ones        |
//! | `reuse.rs`       | slot reuse: free slots, which a batch may take, deletes of reused rows |
//! | `codes.rs`       | learning, storing and encoding with a quantizer                       |
//! | `search.rs`      | search, filtered search, search_batch and its query order             |
//! | `filter.rs`      | [`Filter`] in ids, turned into sets of slots                          |
//! | `plan.rs`        | a filtered search's plan: scan, walk or two-hop walk, from its costs  |
//! | `flush.rs`       | flush, rollback, close: the index's side of `crate::commit`           |
//! | `maintenance.rs` | save, backup, compact                                                 |
//! | `changes.rs`     | the last commits' changes, for a copy of the file kept elsewhere      |
//! | `rewind.rs`      | rewind: the rows of an earlier commit back, as a new change           |
//! | `check.rs`       | check: checksums, lists and reachability                              |
//! | `memory.rs`      | memory policies: huge pages, warm, memory_stats                       |
//! | `residency.rs`   | larger than memory: which areas are short of it, sampled              |
//!
//! Graph linking and repair live beside the graph (`crate::graph::insert`), the commit order
//! in `crate::commit`, and every raw pointer into the mappings in `crate::storage`.

mod changes;
mod check;
mod codes;
mod consolidate;
mod filter;
mod flush;
mod ids;
mod input;
mod link;
mod maintenance;
mod memory;
mod open;
mod options;
pub mod plan;
mod reader;
mod residency;
mod reuse;
mod rewind;
mod search;
mod write;

pub use crate::control::{with_threads, Control};
pub use changes::Changes;
pub use check::CheckReport;
pub(crate) use codes::stored_quantizer;
pub use filter::{BatchFilter, Filter, Ids};
pub use memory::MemoryStats;
pub use options::{Mode, Options, Placement, BALANCED_MIN, MAX_K};
pub use rewind::Rewound;
pub use write::TAIL_MAX;

use crate::commit::redo::{self, RedoLog};
use crate::commit::undo::UndoLog;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{self, Geometry, Header, Metric, Precision, Quantization};
use crate::quant::Quantizer;
use crate::storage::{Older, Pin, Storage};
use crate::warm::Warm;
use filter::{FastMap, FastSet};
use fixedbitset::FixedBitSet;
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// A hit: caller id and distance (true L2 for euclidean, 1 - cos, -dot).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub id: u64,
    pub distance: f32,
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
    saved: FastSet<u32>,
    /// Committed slots whose delete marker changed since the last commit (the log holds the
    /// committed marker of each, recorded once): one bit per slot, as a batch delete of
    /// thousands of rows checks and sets one each.
    marked: FixedBitSet,
    /// Committed slots a batch reused since the last commit (their rows are new).
    reused: FastSet<u32>,
    /// Small commits since the last checkpoint (`commit::redo`).
    redo: RedoLog,
    /// The last commits' changes, for copies kept elsewhere (`changes.rs`).
    changes: changes::Chain,
}

impl UndoState {
    /// Save the markers (slot, marker now) of the committed slots (below `committed_slots`)
    /// among `markers` not saved since the last commit, with one write: the log then gives
    /// back the committed marker whatever changes after.
    fn save_markers(
        &mut self,
        base_seq: u64,
        committed_slots: u64,
        markers: impl Iterator<Item = (u32, u64)> + Clone,
    ) -> Result<()> {
        let committed = |&(s, _): &(u32, u64)| (s as u64) < committed_slots;
        let marked = &self.marked;
        let first = markers.clone().filter(committed).filter(|m| !marked.contains(m.0 as usize));
        if first.clone().next().is_none() {
            return Ok(());
        }
        self.log.record_markers(base_seq, first)?;
        // Every committed slot given is saved now (setting a bit set already changes nothing).
        self.marked.grow(committed_slots as usize);
        for (s, _) in markers.filter(committed) {
            self.marked.insert(s as usize);
        }
        Ok(())
    }
}

/// id -> slot for live slots below `upto` of one storage, built on first use (opening stays
/// O(1)). Lookups also check the slot against the snapshot asking.
#[derive(Default)]
struct IdMap {
    storage: usize,
    /// In a reader of a file whose slots were reused: the commit the map was made for (a
    /// slot may hold another id in another commit, whatever the slot count).
    seq: u64,
    map: ids::SlotsById,
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
    /// Slots linked into the graph: those from here to `slots` (the tail, at most `TAIL_MAX`)
    /// are stored but not linked yet, and searches scan them (the deferred-linking record).
    pub linked: u64,
    pub live: u64,
    pub entry: u32,
    pub max_level: usize,
    pub user_version: u64,
    /// The file's slots were reused by this commit or before (version 5).
    pub reused: bool,
    /// Deletes committed by this sequence or earlier hide a slot: a reader's own commit; in a
    /// writer, the next one (its pending deletes count).
    pub del_visible: u64,
    /// Rows born (`format::born_marker`) by this sequence or earlier are visible: a reader's
    /// own commit; in a writer, the commit until a batch after it publishes, then the next
    /// one, so that a snapshot from before a batch does not see the slots it reuses.
    pub born_visible: u64,
    /// The quantizer in effect (8-bit codes, trained): searches walk the codes. None: they
    /// walk the vectors.
    pub quant: Option<Arc<Quantizer>>,
    /// A walk may meet a node this state does not return (a deleted one still in a list), so
    /// it checks each node it meets. A writer knows when none can be (every delete
    /// consolidated), and says so in the commits it writes (`format::FLAG_LISTS_CLEAN`) for
    /// readers; a walk that meets one anyway is run again with the checks
    /// (`search_prepared`).
    pub hides: bool,
    /// A reader's hold on `seq` (`storage::pins`): no writer reuses a slot this commit can
    /// reach while it lives. A writer's own snapshots hold one only when a caller keeps them
    /// (`Index::snapshot`).
    pub pin: Option<Arc<Pin>>,
    /// A writer's snapshot that a caller keeps: the rows the writer deleted after it was
    /// taken, which it still holds (their markers say deleted from the writer's next commit,
    /// as do those of the deletes before it).
    pub kept: Option<Arc<DeletedAfter>>,
}

/// Rows a writer deleted after one of its snapshots was taken (`Snap::kept`): by slot for
/// `Snap::visible`, by id for lookups (the id map has let them go, or maps the id to the row
/// an upsert gave it since). No slot of these is reused while the snapshot lives: its pin
/// holds the commit they were live in.
pub struct DeletedAfter {
    /// The snapshot's storage and slots: deletes in another storage (after a compaction), or
    /// of rows stored after it (an id upserted twice), are not of its rows.
    storage: usize,
    slots: u64,
    rows: RwLock<(FastSet<u32>, FastMap<u64, u32>)>,
}

impl DeletedAfter {
    fn new(snap: &Snap) -> DeletedAfter {
        let storage = Arc::as_ptr(&snap.st) as usize;
        DeletedAfter { storage, slots: snap.slots, rows: Default::default() }
    }

    fn add(&self, st: &Arc<Storage>, gone: &[(u32, u64, u64)]) {
        if Arc::as_ptr(st) as usize != self.storage {
            return;
        }
        let mut rows = self.rows.write();
        // (No slot below `slots` takes a new row while the snapshot lives: `slots_to_reuse`.)
        for &(s, _, id) in gone.iter().filter(|g| (g.0 as u64) < self.slots) {
            rows.0.insert(s);
            rows.1.entry(id).or_insert(s);
        }
    }

    fn is_empty(&self) -> bool {
        self.rows.read().0.is_empty()
    }

    fn holds(&self, slot: u32) -> bool {
        self.rows.read().0.contains(&slot)
    }

    /// The slot of `id` if it is one of these rows.
    fn slot_of(&self, id: u64) -> Option<u32> {
        self.rows.read().1.get(&id).copied()
    }
}

impl Snap {
    /// The state committed by header `h`; `writer`: pending deletes of this process count.
    fn of(st: Arc<Storage>, h: &Header, writer: bool) -> Snap {
        let st_quant = |h: &Header| stored_quantizer(&st, h.quantizer).ok().flatten();
        Snap {
            seq: h.seq,
            slots: h.slots,
            linked: h.linked,
            live: h.live,
            entry: h.entry,
            max_level: h.max_level as usize,
            user_version: h.user_version,
            reused: h.reused,
            hides: h.live < h.slots && !h.lists_clean,
            del_visible: if writer { h.seq + 1 } else { h.seq },
            born_visible: h.seq,
            // A damaged quantizer was refused when the header was read (`quantizer_of`);
            // should it fail here anyway, searches walk the vectors.
            quant: st_quant(h),
            pin: (!writer).then(|| st.pins.pin(h.seq)),
            kept: None,
            st,
        }
    }

    fn clone_of(s: &Snap) -> Snap {
        let (quant, pin, kept) = (s.quant.clone(), s.pin.clone(), s.kept.clone());
        Snap { st: s.st.clone(), quant, pin, kept, ..*s }
    }

    /// The id of a slot visible in this state; None for deleted or damaged slots.
    #[inline]
    pub fn live_id(&self, slot: u32) -> Option<u64> {
        // The marker first: a reused slot's marker is stored after its new id (release), so a
        // marker that makes the row visible comes with its id.
        if !self.visible(slot) {
            return None;
        }
        let h = self.st.header(slot);
        let (id, upper, crcs) = (h[0].load(Relaxed), h[1].load(Relaxed), h[3].load(Relaxed));
        (format::header_crc(id, upper, crcs as u32) == (crcs >> 32) as u32).then_some(id)
    }

    /// Whether a slot's row is visible in this state, by its marker alone: a walk's check of
    /// the nodes it meets, whose hits then go through `live_id` (which checks their headers).
    #[inline]
    pub fn visible(&self, slot: u32) -> bool {
        let word = crate::storage::acquire_u64(&self.st.header(slot)[2]);
        word == 0
            || format::read_marker(word, slot).visible(self.del_visible, self.born_visible)
            || self.kept.as_ref().is_some_and(|k| k.holds(slot))
    }

    /// The rows deleted after this snapshot, when it is a kept writer snapshot with some.
    fn deleted_after(&self) -> Option<&DeletedAfter> {
        self.kept.as_deref().filter(|k| !k.is_empty())
    }
}

/// The writer's bookkeeping (a reader keeps its snapshot's header here).
struct Writer {
    committed: Header,
    /// Which header copy holds `committed`.
    copy: usize,
    slots: u64,
    /// Slots linked into the graph (the rest of `slots` are the tail; see `Snap::linked`).
    linked: u64,
    live: u64,
    next_id: u64,
    user_version: u64,
    /// Deletes since the last commit.
    deletes: u64,
    /// Rows linked since the last repair (see `add_batch`; this process only).
    unrepaired: u64,
    /// This handle's deletes not yet consolidated (`consolidate.rs`), now and at the last
    /// commit (what a rollback returns to).
    unconsolidated: u64,
    unconsolidated_committed: u64,
    /// A consolidation changed lists (or the entry point) since the last commit.
    relinked: bool,
    /// Free slots and those reused since the last commit (`reuse.rs`).
    reuse: reuse::Reuse,
    /// File offset of the quantizer region in effect (0: none yet), committed by the next
    /// flush (see `crate::quant`).
    quantizer: u64,
    /// A commit failed: what the disk holds is one of two commits, the page cache is not to
    /// be trusted, and nothing more is written (not even by rollback or close).
    poisoned: Option<Poison>,
    /// The slot headers' pages may be clean (written back, or not mapped yet): no large batch
    /// of deletes wrote to them since the open or the last commit through the index file. The
    /// next one takes their faults on a second thread; after a small commit they are still
    /// writable, and the thread would only cost its start (the batch-delete record).
    headers_clean: bool,
}

impl Writer {
    /// Whether anything stored changed since the last commit: rows, links, deletes, lists
    /// re-linked, `user_version` or the quantizer (what a flush commits and a rollback undoes;
    /// the next default id aside, which only a flush writes).
    fn changed(&self) -> bool {
        let c = &self.committed;
        self.slots != c.slots
            || self.linked != c.linked
            || self.user_version != c.user_version
            || self.deletes != 0
            || self.relinked
            || self.quantizer != c.quantizer
            || self.reuse.born != c.reused
    }
}

/// Why a writer refuses to write after a failed commit.
#[derive(Debug, Clone)]
struct Poison {
    /// The failed commit's error, as it was first reported.
    message: String,
    errno: Option<i32>,
    /// The new header may reach the disk (see `commit::Failed`).
    header_may_land: bool,
}

impl Poison {
    /// The poison of a failed write or sync `e`.
    fn of(e: &Error, header_may_land: bool) -> Self {
        Poison { message: e.message.clone(), errno: e.errno, header_may_land }
    }

    /// What a reopen finds, in words.
    fn reopens_as(&self) -> &'static str {
        if self.header_may_land {
            "it reopens as of either the last successful flush or the failed one, whichever \
             header the disk kept (each whole, never a mixture)"
        } else {
            "it reopens as of the last successful flush"
        }
    }
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
    /// Whether each commit's changes are kept for copies elsewhere (`changes.rs`): from the
    /// first `lineage()`.
    keep_changes: AtomicBool,
    /// A writer: a deleted node may still be in a list (not consolidated since its delete,
    /// or since the file was opened), so walks check the nodes they meet (`Snap::hides`).
    unlinked_deletes: AtomicBool,
    /// The slot filters of the last filters searched with (`filter::FilterCache`).
    filters: Mutex<filter::FilterCache>,
    /// A writer's snapshots that callers keep, told of each delete (`Snap::kept`).
    kept: Mutex<Vec<std::sync::Weak<DeletedAfter>>>,
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
    /// What `warm` last asked for: everything, or all but the full vectors.
    warm_vectors: AtomicBool,
    residency: residency::Residency,
    /// Values clipped to the quantizer's range by the encodes of this handle (training and
    /// adds; `check` counts them over the whole index).
    clipped: AtomicU64,
    /// Things the caller should be told about once (a damaged header copy, a replayed log).
    pub warnings: Vec<String>,
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl Index {
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

    pub fn quantization(&self) -> Quantization {
        self.opts.quantization
    }

    /// Whether searches walk 8-bit codes now (a quantized index whose quantizer is trained).
    pub fn is_trained(&self) -> bool {
        self.snap().quant.is_some()
    }

    /// Values clipped to the quantizer's range by this handle's encodes so far.
    pub fn clipped(&self) -> u64 {
        self.clipped.load(Relaxed)
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
        // A file shrunk underneath would be grown back by the next slots' preallocation,
        // zeros where committed rows were: refuse before writing (one fstat).
        self.view.read().st.check_size()
    }

    /// `Closed` once `close` ran: for calls of a wrapper that reach no method checking it.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Acquire) {
            return Err(Error::closed());
        }
        self.view.read().st.intact()
    }

    /// The state searches use now. A reader moves to the newest commit first.
    pub fn snap(&self) -> Arc<Snap> {
        if self.read_only {
            // An error here (say, the file was removed) leaves the last good snapshot in use.
            let _ = self.refresh();
        }
        self.view.read().clone()
    }

    /// The state searches use now, held for a caller that keeps it (a `Snapshot`): no writer
    /// reuses a slot it can reach until it is dropped.
    pub fn snapshot(&self) -> Arc<Snap> {
        if self.read_only {
            return self.snap();
        }
        // Under the lock a delete holds from its first change to its publication: the state
        // taken is from before a delete that this snapshot is then told of, or after one.
        let mut all = self.kept.lock();
        let snap = self.snap();
        let kept = Arc::new(DeletedAfter::new(&snap));
        all.retain(|k| k.strong_count() > 0);
        all.push(Arc::downgrade(&kept));
        drop(all);
        let pin = Some(snap.st.pins.pin(snap.seq));
        Arc::new(Snap { pin, kept: Some(kept), ..Snap::clone_of(&snap) })
    }

    /// Whether a snapshot of a commit before `seq` may still be searched: by this process or,
    /// where the system can say, by a reader anywhere (`storage::pins`).
    pub fn readers_older_than(&self, seq: u64) -> Older {
        self.view.read().st.pins.older_than(seq)
    }

    fn publish(&self, mut snap: Snap) {
        if !self.read_only {
            snap.hides = snap.live < snap.slots && self.unlinked_deletes.load(Relaxed);
        }
        *self.view.write() = Arc::new(snap);
    }
}
