//! The file and its mappings: one mapping per region (see `format`), never moved once made,
//! and the accessors that turn a slot number into references into them.
//!
//! | file        | what it holds                                                             |
//! |-------------|---------------------------------------------------------------------------|
//! | `mod.rs`    | [`Storage`]: opening, mapping regions, allocating slots and heap lists,     |
//! |             | header I/O and sync                                                        |
//! | `access.rs` | slot -> vector, slot header and list references (the hot accessors); the |
//! |             | header pages' write faults taken ahead of a batch of deletes               |
//! | `lists.rs`  | reading and writing a node's neighbor lists through those references       |
//! | `pins.rs`   | readers' pins on the commits they search, so a writer knows what is unseen |
//! | `ranges.rs` | address and file ranges (memory policies, backup) and bytes by file offset |
//! | `rows.rs`   | [`RowTable`]: rows in anonymous memory filled in parallel (the half copy)  |
//! | `shadow.rs` | a large batch's level-0 lists held in anonymous memory until it is linked   |
//!
//! # Safety
//!
//! This module is the only one that makes references or raw pointers into the index's
//! mappings and into the anonymous tables beside them (`RowTable`, `ShadowLists`); the graph
//! and the distance kernels only read through pointers handed out here. What makes that sound:
//! - A mapping is made once per region and lives, unmoved, as long as the `Storage`: cells of
//!   `segments` and `heaps` are set once, before `seg_count` / `heap_count` is raised past them
//!   (release/acquire), and never cleared.
//! - Every slot accessor checks, in release builds too, that the slot's segment is mapped,
//!   and `Geometry::locate` keeps the offset inside that segment; a bad slot panics, never
//!   reads outside a mapping. Heap references are bounds-checked (`upper_checked`).
//! - Alignment: segment areas start on 4096-byte boundaries of page-aligned mappings; slot
//!   headers are 32 bytes (u64-aligned), lists whole u32 words, vectors `stride`-aligned with
//!   a stride that is a multiple of 4 (of 64 from 64 bytes up).
//! - Mutation: lists, slot headers and markers are atomics, changed under the writer's stripe
//!   locks; a vector is written only before its slot is published, never after. A writer in
//!   another process writes only slots past its committed count, which readers use for
//!   routing at most: a torn read there gives a wrong distance, never unsafety. A reader's
//!   mappings are read-only: what it reads through atomics it reads with relaxed loads (the
//!   only atomic access Rust allows on read-only memory), ordered by fences where needed.
//! - Loads past a file's end would raise SIGBUS (on Windows, a writable mapping would grow the
//!   file and a read-only one fail): a region is mapped only after the file was checked (or
//!   grown) to cover it. Another program may shrink it afterwards: `os::Watch` then catches
//!   the fault, zeros are read, and `intact` turns it into an error at the end of the call.

mod access;
pub mod lists;
pub mod pins;
mod ranges;
mod rows;
mod shadow;

pub use access::{Area, Prefault};
pub use pins::{Older, Pin, Pins};
pub use ranges::{SequentialScan, Written};
pub use rows::{ChunkRows, RowTable};
pub use shadow::{ShadowLists, SHADOW_MIN};

use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    self, align_up, Geometry, Header, RegionEntry, RegionKind, SegmentLayout, FIRST_HEAP_CHUNK,
    HEADER_COPY_SIZE, HUGE_PAGE, MAX_HEAP_CHUNK, MAX_REGIONS, REGION_ALIGN, SLOT_HEADER,
};
use crate::os;
use memmap2::{MmapOptions, MmapRaw};
use parking_lot::Mutex;
use std::any::Any;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock};

/// A word of the mapped file read with acquire ordering, as a reader may: a relaxed load (the
/// only atomic access Rust allows on read-only memory, which a reader's mappings are), then an
/// acquire fence, which pairs with the writer's release store as an acquire load would.
#[inline(always)]
pub fn acquire_u32(word: &AtomicU32) -> u32 {
    let v = word.load(Relaxed);
    std::sync::atomic::fence(Acquire);
    v
}

/// As [`acquire_u32`], for a 64-bit word (a slot header's marker).
#[inline(always)]
pub fn acquire_u64(word: &AtomicU64) -> u64 {
    let v = word.load(Relaxed);
    std::sync::atomic::fence(Acquire);
    v
}

/// A mapped segment of `layout.slots` slots. Mapped at a 2 MiB-aligned address when its file
/// offset is 2 MiB-aligned, so that its vectors can sit on huge pages (ADR-0016).
struct Segment {
    /// Dropped first: the range stops being watched before it is unmapped.
    _watched: os::Watched,
    map: os::AlignedMap,
    layout: SegmentLayout,
    /// File offset of the segment.
    offset: u64,
}

/// A mapped heap chunk of upper-layer lists.
struct HeapChunk {
    _watched: os::Watched,
    map: os::AlignedMap,
    len: u64,
}

/// A mapped quantizer region: its stored form, and what the layer above decoded it into on
/// first use (readers ask again on every refresh; a loaded copy is filled after it is mapped).
struct QuantRegion {
    _watched: os::Watched,
    map: os::AlignedMap,
    offset: u64,
    len: u64,
    decoded: OnceLock<Arc<dyn Any + Send + Sync>>,
}

pub struct Storage {
    pub path: PathBuf,
    /// The index file; None for an in-memory index, whose regions are anonymous stores laid
    /// out exactly as a file's would be (region offsets are then positions in the file that
    /// `save` writes).
    pub file: Option<File>,
    pub writable: bool,
    pub geo: Geometry,
    /// Mapped segments and heap chunks, append-only: a slot is filled once and never emptied
    /// while the Storage lives, so readers index them without a lock while a writer appends.
    segments: Box<[OnceLock<Segment>]>,
    heaps: Box<[OnceLock<HeapChunk>]>,
    seg_count: AtomicUsize,
    heap_count: AtomicUsize,
    /// Quantizer regions (8-bit codes; normally one, more only after a rolled-back training).
    quants: Mutex<Vec<Arc<QuantRegion>>>,
    /// ADR-0016: whether huge pages are asked for under the vectors. Everything else is
    /// always told MADV_NOHUGEPAGE (our mappings are 2 MiB-aligned, and a kernel with large
    /// page-cache folios would otherwise map some of the graph with them).
    pub huge: AtomicBool,
    /// Whether the file mappings are marked as read at random (the index is larger than the
    /// memory it may use: see `index::residency`); else the kernel reads around a fault.
    random: AtomicBool,
    /// Dropped before `header_view`, which it watches.
    _header_watched: Option<os::Watched>,
    /// A reader's read-only view of the two header copies, so that checking for a new commit
    /// costs two loads instead of two system calls.
    header_view: Option<MmapRaw>,
    /// Allocation state (the writer's, or a reader's view of the table): one lock, taken by
    /// whoever adds regions, never by searches.
    alloc: Mutex<Alloc>,
    /// A large batch's level-0 lists while it is linked (see `shadow.rs`).
    shadow: shadow::Shadow,
    /// Readers' pins on the commits they search (`pins.rs`).
    pub pins: Arc<Pins>,
    /// Faults caught in this file's mappings (`os::Watch`: the file shrank underneath). Last,
    /// so dropped after every watched range.
    watch: os::Watch,
}

struct Alloc {
    /// The region table as this process knows it: committed regions plus any a writer added
    /// since (those become durable with the next header).
    regions: Vec<RegionEntry>,
    /// Slots whose bytes have real blocks behind them (see `os::preallocate`).
    prealloc_slots: u64,
    /// Per heap chunk, the bytes from its start that have real blocks (a chunk is preallocated
    /// whole when made; `give_back` punches its unused tail).
    heap_blocks: Vec<u64>,
}

// SAFETY: the raw mappings are plain memory shared by design; every access goes through the
// accessors of this module, whose invariants the module's `# Safety` states. Concurrent
// mutation only happens through atomics (lists, slot headers) or to slots not yet published.
// Mappings are only added (never removed) while the Storage lives.
unsafe impl Send for Storage {}
// SAFETY: as for Send: shared references read plain bytes or use atomics. Plain bytes are
// written through `&self` only where nothing else reads them meanwhile: the `unsafe fn`s
// `write_vector`, `write_code`, `fill_from` and `write_at`, whose callers promise it, and
// this module's own writes of a quantizer region before it is published and of a shadow's
// lists as it ends (under the writer lock, after the batch's threads are done).
unsafe impl Sync for Storage {}

impl Storage {
    /// Map the regions of `header` from an open file whose length has been checked.
    pub fn open(path: &Path, file: File, writable: bool, header: &Header) -> Result<Storage> {
        // Only over bytes the file has: a load past its end would raise SIGBUS.
        let long_enough =
            file.metadata().map(|m| m.len() >= 2 * HEADER_COPY_SIZE as u64).unwrap_or(false);
        let header_view = if writable || !long_enough {
            None
        } else {
            MmapOptions::new().len(2 * HEADER_COPY_SIZE).map_raw_read_only(&file).ok()
        };
        let s = Self::unmapped(
            path.to_path_buf(),
            Some(file),
            writable,
            header,
            false,
            header_view,
            header.slots,
        );
        s.map_new_regions(header)?;
        Ok(s)
    }

    /// A Storage with nothing mapped yet.
    fn unmapped(
        path: PathBuf,
        file: Option<File>,
        writable: bool,
        header: &Header,
        huge: bool,
        header_view: Option<MmapRaw>,
        prealloc_slots: u64,
    ) -> Storage {
        let watch = if file.is_some() { os::Watch::new() } else { os::Watch::none() };
        let header_watched = header_view.as_ref().map(|v| watch.range(v.as_ptr(), v.len()));
        Storage {
            path,
            pins: Pins::new(file.as_ref()),
            file,
            writable,
            geo: header.geometry(),
            segments: (0..MAX_REGIONS).map(|_| OnceLock::new()).collect(),
            heaps: (0..MAX_REGIONS).map(|_| OnceLock::new()).collect(),
            seg_count: AtomicUsize::new(0),
            heap_count: AtomicUsize::new(0),
            quants: Mutex::new(Vec::new()),
            huge: AtomicBool::new(huge),
            random: AtomicBool::new(false),
            _header_watched: header_watched,
            header_view,
            alloc: Mutex::new(Alloc {
                regions: Vec::new(),
                prealloc_slots,
                heap_blocks: Vec::new(),
            }),
            shadow: shadow::Shadow::default(),
            watch,
        }
    }

    /// An in-memory store for the regions of `header` (none for a new index), all zero;
    /// `huge`: ask for huge pages under stores of 2 MiB and more.
    pub fn memory(header: &Header, huge: bool) -> Result<Storage> {
        // Nothing to preallocate: no file.
        let s = Self::unmapped(PathBuf::new(), None, true, header, huge, None, u64::MAX);
        {
            let mut a = s.alloc.lock();
            for r in &header.regions {
                s.map_region(&mut a, *r)?;
            }
        }
        Ok(s)
    }

    pub fn is_memory(&self) -> bool {
        self.file.is_none()
    }

    /// The index file (only file-backed code paths call this).
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("a file-backed index")
    }

    fn no_memory() -> Error {
        Error::new(
            ErrorKind::Io,
            "cannot allocate memory for the index",
            "free memory, or use a file-backed index",
        )
    }

    /// Map regions that `header` lists and this process has not mapped yet (a reader following
    /// the writer). Regions never move, so the ones already mapped stay valid. Err if the
    /// table disagrees with what is mapped: the file was laid out anew (replaced).
    pub fn map_new_regions(&self, header: &Header) -> Result<()> {
        let mut a = self.alloc.lock();
        let known = a.regions.len().min(header.regions.len());
        if a.regions
            .iter()
            .zip(&header.regions)
            .any(|(x, y)| x.offset != y.offset || x.len != y.len || x.kind != y.kind)
        {
            return Err(Error::new(
                ErrorKind::CorruptIndex,
                "the index file was laid out anew",
                "open it again",
            ));
        }
        for (mine, theirs) in a.regions.iter_mut().zip(&header.regions) {
            mine.used = theirs.used;
        }
        if header.regions.len() > known {
            let file_len = self
                .file()
                .metadata()
                .map_err(|e| Error::io(e, "reading the size of", &self.path))?
                .len();
            for r in &header.regions[known..] {
                if r.offset + r.len > file_len {
                    return Err(Error::corrupt(format!(
                        "{} is truncated: it is {file_len} bytes, but its region table needs {}",
                        self.path.display(),
                        r.offset + r.len
                    )));
                }
                self.map_region(&mut a, *r)?;
            }
        }
        Ok(())
    }

    fn map_region(&self, a: &mut Alloc, r: RegionEntry) -> Result<()> {
        match r.kind {
            RegionKind::Segment => {
                let k = self.seg_count.load(Acquire);
                let layout = self.geo.segment_layout(self.geo.segment_slots(k));
                if layout.len != r.len {
                    return Err(Error::corrupt(format!(
                        "{}: a segment has the wrong size",
                        self.path.display()
                    )));
                }
                let map = match &self.file {
                    Some(file) => {
                        let align = if r.offset.is_multiple_of(HUGE_PAGE) {
                            HUGE_PAGE as usize
                        } else {
                            os::page_size()
                        };
                        os::AlignedMap::new(file, r.offset, r.len as usize, self.writable, align)
                            .map_err(|e| Error::io(e, "mapping", &self.path))?
                    }
                    None => os::AlignedMap::anonymous(r.len as usize, self.huge.load(Acquire))
                        .map_err(|_| Self::no_memory())?,
                };
                // Slot headers and lists never on huge pages; vectors only when asked (and then
                // only whole pieces, see `vector_pieces`).
                // (In memory the whole store asked for huge pages when it was made: nothing is
                // written back, so the graph gains from them too.)
                let p = map.as_ptr();
                if self.file.is_some() {
                    // One call for the whole mapping unless the vectors may have huge pages
                    // (an open makes one per segment: 26 at 10M vectors).
                    if self.huge.load(Acquire) {
                        // SAFETY: pointer arithmetic only; both offsets lie inside (or one past)
                        // the mapping.
                        let (hdr, end) =
                            unsafe { (p.add(layout.headers as usize), p.add(map.len())) };
                        os::advise_huge(hdr, end as usize - hdr as usize, false);
                    } else {
                        os::advise_huge(p, map.len(), false);
                    }
                    // An index larger than memory is read at random: a fault reads its own
                    // page, not read_ahead_kb around it (`set_random`).
                    if self.random.load(Acquire) {
                        os::advise_random(p, map.len());
                    }
                }
                let cell = self.segments.get(k).ok_or_else(Self::full)?;
                let _watched = self.watch.range(map.as_ptr(), map.len());
                let _ = cell.set(Segment { _watched, map, layout, offset: r.offset });
                self.seg_count.store(k + 1, Release);
            }
            RegionKind::Heap => {
                let map = match &self.file {
                    Some(file) => {
                        let map = os::AlignedMap::new(
                            file,
                            r.offset,
                            r.len as usize,
                            self.writable,
                            os::page_size(),
                        )
                        .map_err(|e| Error::io(e, "mapping", &self.path))?;
                        os::advise_huge(map.as_ptr(), map.len(), false);
                        if self.random.load(Acquire) {
                            os::advise_random(map.as_ptr(), map.len());
                        }
                        map
                    }
                    None => os::AlignedMap::anonymous(r.len as usize, self.huge.load(Acquire))
                        .map_err(|_| Self::no_memory())?,
                };
                let k = self.heap_count.load(Acquire);
                let cell = self.heaps.get(k).ok_or_else(Self::full)?;
                let _watched = self.watch.range(map.as_ptr(), map.len());
                let _ = cell.set(HeapChunk { _watched, map, len: r.len });
                self.heap_count.store(k + 1, Release);
                // Made whole by `alloc_upper` (or, opened, by whoever made it).
                a.heap_blocks.push(r.len);
            }
            RegionKind::Quantizer => {
                let map = match &self.file {
                    Some(file) => os::AlignedMap::new(
                        file,
                        r.offset,
                        r.len as usize,
                        self.writable,
                        os::page_size(),
                    )
                    .map_err(|e| Error::io(e, "mapping", &self.path))?,
                    None => os::AlignedMap::anonymous(r.len as usize, false)
                        .map_err(|_| Self::no_memory())?,
                };
                self.quants.lock().push(Arc::new(QuantRegion {
                    _watched: self.watch.range(map.as_ptr(), map.len()),
                    map,
                    offset: r.offset,
                    len: r.len,
                    decoded: OnceLock::new(),
                }));
            }
        }
        a.regions.push(r);
        Ok(())
    }

    fn full() -> Error {
        Error::new(
            ErrorKind::IndexFull,
            format!("the index has the most regions a header can list ({MAX_REGIONS})"),
            "start another index file",
        )
    }

    fn end_of_regions(a: &Alloc) -> u64 {
        a.regions.last().map(|r| r.offset + r.len).unwrap_or(format::DATA_START)
    }

    fn add_region(&self, a: &mut Alloc, kind: RegionKind, offset: u64, len: u64) -> Result<()> {
        if a.regions.len() >= MAX_REGIONS {
            return Err(Self::full());
        }
        if let Some(file) = &self.file {
            let file_len =
                file.metadata().map_err(|e| Error::io(e, "reading the size of", &self.path))?.len();
            if file_len < offset + len {
                // Grows the file sparsely; the blocks are given when slots are reserved.
                file.set_len(offset + len).map_err(|e| Error::io(e, "growing", &self.path))?;
            }
        }
        self.map_region(a, RegionEntry { kind, used: 0, offset, len })
    }

    /// The region table as this process knows it (for the next header).
    pub fn regions(&self) -> Vec<RegionEntry> {
        self.alloc.lock().regions.clone()
    }

    /// Slots the mapped segments can hold.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.geo.slots_in_segments(self.seg_count.load(Acquire))
    }

    /// Make slots `[from, to)` writable: add segments and give the bytes real blocks.
    pub fn reserve_slots(&self, from: u64, to: u64) -> Result<()> {
        if to > u32::MAX as u64 - 1 {
            return Err(Error::new(
                ErrorKind::IndexFull,
                "an index holds at most 2**32 - 2 slots",
                "start another index file",
            ));
        }
        let mut a = self.alloc.lock();
        while self.capacity() < to {
            let slots = self.geo.segment_slots(self.seg_count.load(Acquire));
            let layout = self.geo.segment_layout(slots);
            let offset = self.geo.segment_start(Self::end_of_regions(&a), slots);
            self.add_region(&mut a, RegionKind::Segment, offset, layout.len)?;
        }
        // Preallocate ahead in steps so that single adds do not make a call each.
        if to > a.prealloc_slots {
            let from = from.min(a.prealloc_slots);
            let to = to.max(a.prealloc_slots + 1024).min(self.capacity());
            self.preallocate_slots(from, to)?;
            a.prealloc_slots = to;
        }
        Ok(())
    }

    fn preallocate_slots(&self, from: u64, to: u64) -> Result<()> {
        let l0b = self.geo.l0_words as u64 * 4;
        let (cs, vs) = (self.geo.code_stride as u64, self.geo.stride as u64);
        for (seg, _, a, b) in self.segments_spanning(from, to) {
            let n = b - a;
            for (start, size) in [
                (seg.layout.codes + a * cs, n * cs),
                (seg.layout.vectors + a * vs, n * vs),
                (seg.layout.headers + a * SLOT_HEADER as u64, n * SLOT_HEADER as u64),
                (seg.layout.l0 + a * l0b, n * l0b),
            ] {
                os::preallocate(self.file(), seg.offset + start, size)
                    .map_err(|e| Error::io(e, "allocating space in", &self.path))?;
            }
        }
        Ok(())
    }

    /// The current heap chunk's index and used bytes, if any.
    pub fn heap_state(&self) -> Option<(usize, u32)> {
        Self::heap_state_of(&self.alloc.lock())
    }

    fn heap_state_of(a: &Alloc) -> Option<(usize, u32)> {
        a.regions
            .iter()
            .filter(|r| r.kind == RegionKind::Heap)
            .enumerate()
            .last()
            .map(|(i, r)| (i, r.used))
    }

    /// How many heap chunks are mapped.
    pub fn heap_chunks(&self) -> usize {
        self.heap_count.load(Acquire)
    }

    /// Set the used bytes of heap chunk `chunk` (giving back the space of a failed batch or a
    /// rollback; nothing is unmapped, since searches may still route through it).
    pub fn set_heap_used(&self, chunk: usize, used: u32) {
        if let Some(r) =
            self.alloc.lock().regions.iter_mut().filter(|r| r.kind == RegionKind::Heap).nth(chunk)
        {
            r.used = used;
        }
    }

    /// Allocate the upper-layer lists of a node of `level >= 1`, all empty. Returns the heap
    /// reference. Only the writer calls this.
    pub fn alloc_upper(&self, slot: u32, level: usize) -> Result<u64> {
        let bytes = self.geo.upper_bytes(level);
        let mut a = self.alloc.lock();
        let fits = Self::heap_state_of(&a)
            .map(|(i, used)| used as u64 + bytes <= self.heaps[i].get().map(|h| h.len).unwrap_or(0))
            .unwrap_or(false);
        if !fits {
            let n = self.heap_count.load(Acquire);
            let prev = if n == 0 {
                FIRST_HEAP_CHUNK / 2
            } else {
                self.heaps[n - 1].get().map(|h| h.len).unwrap_or(0)
            };
            let len = align_up(
                (prev * 2).clamp(FIRST_HEAP_CHUNK, MAX_HEAP_CHUNK).max(bytes),
                REGION_ALIGN,
            );
            let offset = align_up(Self::end_of_regions(&a), REGION_ALIGN);
            self.add_region(&mut a, RegionKind::Heap, offset, len)?;
            if let Some(file) = &self.file {
                if let Err(e) = os::preallocate(file, offset, len) {
                    // Not backed: the next allocation in the chunk asks for its blocks again
                    // (below) rather than writing into a hole of a full disk.
                    if let Some(b) = a.heap_blocks.last_mut() {
                        *b = 0;
                    }
                    return Err(Error::io(e, "allocating space in", &self.path));
                }
            }
        }
        let (chunk, used) = Self::heap_state_of(&a).unwrap();
        // A tail that `give_back` punched gets its blocks back before anything is written there.
        if let (Some(file), Some(len)) = (&self.file, self.heaps[chunk].get().map(|h| h.len)) {
            let blocks = a.heap_blocks[chunk];
            if used as u64 + bytes > blocks {
                let offset = a.regions.iter().filter(|r| r.kind == RegionKind::Heap).nth(chunk);
                let offset = offset.map(|r| r.offset).unwrap_or(0);
                os::preallocate(file, offset + blocks, len - blocks)
                    .map_err(|e| Error::io(e, "allocating space in", &self.path))?;
                a.heap_blocks[chunk] = len;
            }
        }
        let r = format::heap_ref(chunk, used as u64);
        let idx = a.regions.iter().rposition(|r| r.kind == RegionKind::Heap).unwrap();
        a.regions[idx].used = used + bytes as u32;
        drop(a);
        for layer in 1..=level {
            let list = self.upper_at(r, layer);
            lists::write_list(list, slot, layer, &[], 0);
        }
        Ok(r)
    }

    /// Give back the disk blocks of what was reserved and never committed: slots from
    /// `slots` on (their vectors, headers and lists, preallocated ahead of the adds) and the
    /// unused tail of every heap chunk (after a rollback has set what each uses). The holes
    /// read as zeros, so a search still routing there reads empty lists; nothing is unmapped.
    /// Best effort (a filesystem without hole punching keeps the blocks). File-backed only.
    pub fn give_back(&self, slots: u64) {
        let Some(file) = &self.file else { return };
        let page = os::page_size() as u64;
        let punch = |start: u64, end: u64| {
            let (start, end) = (align_up(start, page), end / page * page);
            if end > start {
                let _ = os::punch_hole(file, start, end - start);
            }
        };
        let mut a = self.alloc.lock();
        let mut first = 0u64;
        for k in 0..self.seg_count.load(Acquire) {
            let Some(seg) = self.segments[k].get() else { break };
            let cap = seg.layout.slots;
            let local = slots.saturating_sub(first).min(cap);
            first += cap;
            if local == cap {
                continue;
            }
            let l = &seg.layout;
            let l0_bytes = self.geo.l0_words as u64 * 4;
            for (area, size) in [
                (l.codes, self.geo.code_stride as u64),
                (l.vectors, self.geo.stride as u64),
                (l.headers, SLOT_HEADER as u64),
                (l.l0, l0_bytes),
            ] {
                punch(seg.offset + area + local * size, seg.offset + area + cap * size);
            }
        }
        a.prealloc_slots = a.prealloc_slots.min(slots);
        let heaps: Vec<RegionEntry> =
            a.regions.iter().filter(|r| r.kind == RegionKind::Heap).copied().collect();
        for (chunk, r) in heaps.iter().enumerate() {
            let used = align_up(r.used as u64, page);
            if used < a.heap_blocks[chunk] {
                punch(r.offset + used, r.offset + r.len);
                a.heap_blocks[chunk] = used;
            }
        }
    }

    /// The stored form in the quantizer region at file offset `offset` (at most `max_len`
    /// bytes of it), decoded by `decode` on the first call and kept for every later one. None
    /// for offset 0 (no region named). Err if no quantizer region is mapped there, or what
    /// `decode` returns.
    pub fn decoded_region<T: Any + Send + Sync>(
        &self,
        offset: u64,
        max_len: usize,
        decode: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<Option<Arc<T>>> {
        if offset == 0 {
            return Ok(None);
        }
        let region = self.quants.lock().iter().find(|q| q.offset == offset).cloned();
        let Some(q) = region else {
            return Err(Error::corrupt(format!(
                "{}: no quantizer region at offset {offset}",
                self.path.display()
            )));
        };
        // One caller type per region kind (the quantizer), so the downcast cannot fail.
        let cached = |d: &Arc<dyn Any + Send + Sync>| {
            d.clone().downcast::<T>().expect("a region decoded as one type")
        };
        if let Some(d) = q.decoded.get() {
            return Ok(Some(cached(d)));
        }
        let used = max_len.min(q.len as usize);
        let bytes: std::borrow::Cow<'_, [u8]> = match &self.file {
            // Read, not touched through the mapping: a fault there would read the kernel's
            // read-around of what lies beside the region (docs/design/larger-than-memory.md).
            Some(file) => {
                let mut buf = vec![0u8; used];
                os::read_exact_at(file, &mut buf, q.offset)
                    .map_err(|e| Error::io(e, "reading the quantizer of", &self.path))?;
                buf.into()
            }
            // SAFETY: the mapping covers `len` bytes and lives as long as `q`; a quantizer
            // region is written once, before any header names it, and never after.
            None => unsafe { std::slice::from_raw_parts(q.map.as_ptr(), used) }.into(),
        };
        let decoded: Arc<dyn Any + Send + Sync> = Arc::new(decode(&bytes)?);
        Ok(Some(cached(q.decoded.get_or_init(|| decoded))))
    }

    /// Store `bytes` in a new quantizer region (written and given blocks; durable with the
    /// next sync) and return its file offset, which a header then names. Only the writer calls
    /// this.
    pub fn write_quantizer_region(&self, bytes: &[u8]) -> Result<u64> {
        let mut a = self.alloc.lock();
        let offset = align_up(Self::end_of_regions(&a), REGION_ALIGN);
        let len = align_up(bytes.len() as u64, REGION_ALIGN);
        self.add_region(&mut a, RegionKind::Quantizer, offset, len)?;
        if let Some(file) = &self.file {
            os::preallocate(file, offset, len)
                .map_err(|e| Error::io(e, "allocating space in", &self.path))?;
        }
        let region = self.quants.lock().last().cloned().expect("mapped just now");
        // SAFETY: a writable mapping of `len >= bytes.len()` bytes that no header names yet,
        // so nothing else reads it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), region.map.as_ptr(), bytes.len()) };
        if let Some(r) = a.regions.last_mut() {
            r.used = bytes.len() as u32;
        }
        Ok(offset)
    }

    /// Read both header copies (or as much of them as the file has).
    pub fn read_header_bytes(file: &File, path: &Path) -> Result<Vec<u8>> {
        // What a copy's checksum covers: the fixed fields and the region table, within the
        // first page for tables of up to 165 regions. So the first page of each copy is read
        // (both asked for at once), and the rest of a copy only when its table is longer:
        // one read of both whole copies makes the kernel read around them too (measured:
        // `docs/design/scale.md`).
        const FIRST: usize = 4096;
        let len = file.metadata().map_err(|e| Error::io(e, "reading", path))?.len();
        let end = len.min(2 * HEADER_COPY_SIZE as u64) as usize;
        let mut buf = vec![0u8; end];
        // Shorter than its length said: what was read is all there is (the rest stays zero).
        let read = |buf: &mut [u8], from: usize, to: usize| -> Result<()> {
            os::read_up_to(file, &mut buf[from..to], from as u64)
                .map(drop)
                .map_err(|e| Error::io(e, "reading", path))
        };
        let copies = [0, HEADER_COPY_SIZE].map(|c| (c, (c + FIRST).min(end)));
        for &(from, to) in &copies {
            if from < to {
                os::fadvise_willneed(file, from as u64, to - from);
            }
        }
        for (from, to) in copies {
            if from >= to {
                continue;
            }
            read(&mut buf, from, to)?;
            let copy_end = (from + HEADER_COPY_SIZE).min(end);
            if let Some(len) = format::copy_len(&buf[from..to]) {
                let need = from.saturating_add(len).min(copy_end);
                if need > to {
                    read(&mut buf, to, need)?;
                }
            }
        }
        Ok(buf)
    }

    /// The highest sequence number among the header copies that carry the magic (not yet
    /// checked against their checksums). A reader calls this on every call.
    pub fn newest_seq(&self) -> u64 {
        let mut best = 0;
        for copy in 0..2 {
            let off = copy * HEADER_COPY_SIZE;
            let (magic, seq) = match &self.header_view {
                // SAFETY: the view covers both header copies (the file is at least that long
                // from creation on); offsets 0 and 16 of a copy are 8-byte aligned; the view is
                // read-only, so the words are read as a reader may (`acquire_u64`); a torn read
                // of a copy being written is caught by the checksum when the copy is decoded.
                Some(m) => unsafe {
                    let p = m.as_ptr().add(off);
                    let word = |at: usize| acquire_u64(&*(p.add(at) as *const AtomicU64));
                    (word(format::at::MAGIC).to_le_bytes(), word(format::at::SEQ))
                },
                None => {
                    let mut b = [0u8; 24];
                    if self
                        .file
                        .as_ref()
                        .is_none_or(|f| os::read_exact_at(f, &mut b, off as u64).is_err())
                    {
                        continue;
                    }
                    match format::copy_seq(&b) {
                        Some(seq) => (format::MAGIC, seq),
                        None => continue,
                    }
                }
            };
            if magic == format::MAGIC {
                best = best.max(seq);
            }
        }
        best
    }

    pub fn write_header(&self, copy: usize, h: &Header) -> Result<()> {
        let bytes = h.encode();
        os::write_all_at(self.file(), &bytes, (copy * HEADER_COPY_SIZE) as u64)
            .map_err(|e| Error::io(e, "writing the header of", &self.path))
    }

    /// Whether the file is still what this process mapped: an error once a load from one of its
    /// mappings found the file shorter (`os::Watch` caught the fault and read zeros there) or
    /// `check_size` found it smaller than its regions. The answer of a call that read zeros is
    /// never returned: callers ask at their end, and a writer before it commits.
    pub fn intact(&self) -> Result<()> {
        if self.watch.faults() == 0 {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::CorruptIndex,
            format!(
                "{} changed underneath this process: it is shorter than the regions mapped from \
                 it (another program truncated it, or copied a file over it in place)",
                self.path.display()
            ),
            "close this index and open the file again (a writer's changes since its last flush \
             are lost); to replace an index, write the new file beside it and rename it over",
        ))
    }

    /// Check the file's size against the regions mapped (a reader does at most every 50 ms):
    /// smaller marks the storage as changed underneath, before any load faults.
    pub fn check_size(&self) -> Result<()> {
        if let Some(file) = &self.file {
            let end = Self::end_of_regions(&self.alloc.lock()).max(2 * HEADER_COPY_SIZE as u64);
            if file.metadata().is_ok_and(|m| m.len() < end) {
                self.watch.mark();
            }
        }
        self.intact()
    }

    /// Make everything written through the mappings durable.
    pub fn sync_data(&self) -> Result<()> {
        let Some(file) = &self.file else { return Ok(()) };
        #[cfg(not(target_os = "linux"))]
        {
            for s in self.segments[..self.seg_count.load(Acquire)].iter().filter_map(|s| s.get()) {
                s.map.flush().map_err(|e| Error::io(e, "writing", &self.path))?;
            }
            for h in self.heaps[..self.heap_count.load(Acquire)].iter().filter_map(|h| h.get()) {
                h.map.flush().map_err(|e| Error::io(e, "writing", &self.path))?;
            }
        }
        os::sync_data(file).map_err(|e| Error::io(e, "syncing", &self.path))
    }
}
