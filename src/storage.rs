//! The file and its mappings: one mapping per region (see `format.rs`), never moved once made,
//! and the accessors that turn a slot number into pointers into them. Every unsafe pointer
//! access of the index is here, next to the layout it relies on.

use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    self, align_up, Geometry, Header, RegionEntry, RegionKind, SegmentLayout, FIRST_HEAP_CHUNK, HEADER_COPY_SIZE,
    MAX_HEAP_CHUNK, MAX_REGIONS, NO_UPPER, REGION_ALIGN, SLOT_HEADER,
};
use crate::os;
use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A mapped segment: `layout.slots` slots starting at slot `first_slot`.
struct Segment {
    map: MmapRaw,
    layout: SegmentLayout,
}

/// A mapped heap chunk of upper-layer lists.
struct HeapChunk {
    map: MmapRaw,
    len: u64,
}

pub struct Storage {
    pub path: PathBuf,
    pub file: File,
    pub writable: bool,
    pub geo: Geometry,
    segments: Vec<Segment>,
    heaps: Vec<HeapChunk>,
    /// The region table as this process knows it: committed regions plus any a writer added
    /// since (those become durable with the next header).
    pub regions: Vec<RegionEntry>,
    /// Slots whose bytes have real blocks behind them (see `os::preallocate`).
    prealloc_slots: u64,
}

// SAFETY: the raw mappings are plain memory shared by design; every access goes through the
// accessors below, whose invariants are stated there. Concurrent mutation only happens
// through atomics (lists, slot headers) or to slots not yet published.
unsafe impl Send for Storage {}
unsafe impl Sync for Storage {}

impl Storage {
    /// Map the regions of `header` from an open file whose length has been checked.
    pub fn open(path: &Path, file: File, writable: bool, header: &Header) -> Result<Storage> {
        let geo = Geometry::new(header.dims as usize, header.precision, header.max_connections as usize);
        let mut s = Storage {
            path: path.to_path_buf(),
            file,
            writable,
            geo,
            segments: Vec::new(),
            heaps: Vec::new(),
            regions: Vec::new(),
            prealloc_slots: header.slots,
        };
        let file_len = s.file.metadata().map_err(|e| Error::io(e, "reading the size of", path))?.len();
        for r in &header.regions {
            if r.offset + r.len > file_len {
                return Err(Error::corrupt(format!(
                    "{} is truncated: it is {file_len} bytes, but its region table needs {}",
                    path.display(),
                    r.offset + r.len
                )));
            }
            s.map_region(*r)?;
        }
        Ok(s)
    }

    /// Map regions that a newer header lists and this process has not mapped yet (a reader
    /// following the writer). Regions never move, so the ones already mapped stay valid.
    pub fn map_new_regions(&mut self, header: &Header) -> Result<()> {
        if header.regions.len() < self.regions.len() || header.regions[..self.regions.len()] != self.regions[..] {
            // A heap chunk's `used` grows in place; anything else differing means the file
            // was laid out anew (a restarted writer or a compaction).
            let same_layout = header.regions.len() >= self.regions.len()
                && self.regions.iter().zip(&header.regions).all(|(a, b)| a.offset == b.offset && a.len == b.len && a.kind == b.kind);
            if !same_layout {
                return Err(Error::new(ErrorKind::CorruptIndex, "the index file was laid out anew", "open it again"));
            }
        }
        let file_len = self.file.metadata().map_err(|e| Error::io(e, "reading the size of", &self.path))?.len();
        for (i, r) in header.regions.iter().enumerate() {
            if i < self.regions.len() {
                self.regions[i].used = r.used;
                continue;
            }
            if r.offset + r.len > file_len {
                return Err(Error::corrupt(format!("{} is shorter than its region table", self.path.display())));
            }
            self.map_region(*r)?;
        }
        Ok(())
    }

    fn map_region(&mut self, r: RegionEntry) -> Result<()> {
        let mut opts = MmapOptions::new();
        opts.offset(r.offset).len(r.len as usize);
        let map = if self.writable { opts.map_raw(&self.file) } else { opts.map_raw_read_only(&self.file) }
            .map_err(|e| Error::io(e, "mapping", &self.path))?;
        match r.kind {
            RegionKind::Segment => {
                let slots = self.geo.segment_slots(self.segments.len());
                let layout = self.geo.segment_layout(slots);
                if layout.len != r.len {
                    return Err(Error::corrupt(format!("{}: a segment has the wrong size", self.path.display())));
                }
                self.segments.push(Segment { map, layout });
            }
            RegionKind::Heap => self.heaps.push(HeapChunk { map, len: r.len }),
        }
        self.regions.push(r);
        Ok(())
    }

    fn end_of_regions(&self) -> u64 {
        self.regions.last().map(|r| r.offset + r.len).unwrap_or(format::DATA_START)
    }

    fn add_region(&mut self, kind: RegionKind, offset: u64, len: u64) -> Result<()> {
        if self.regions.len() >= MAX_REGIONS {
            return Err(Error::new(
                ErrorKind::IndexFull,
                format!("{} has the most regions a header can list ({MAX_REGIONS})", self.path.display()),
                "start another index file",
            ));
        }
        let file_len = self.file.metadata().map_err(|e| Error::io(e, "reading the size of", &self.path))?.len();
        if file_len < offset + len {
            // Grows the file sparsely; the blocks are given when slots are reserved.
            self.file.set_len(offset + len).map_err(|e| Error::io(e, "growing", &self.path))?;
        }
        self.map_region(RegionEntry { kind, used: 0, offset, len })
    }

    /// Slots the mapped segments can hold.
    pub fn capacity(&self) -> u64 {
        self.geo.slots_in_segments(self.segments.len())
    }

    /// Make slots `[from, to)` writable: add segments and give the bytes real blocks.
    pub fn reserve_slots(&mut self, from: u64, to: u64) -> Result<()> {
        if to > u32::MAX as u64 - 1 {
            return Err(Error::new(ErrorKind::IndexFull, "an index holds at most 2**32 - 2 slots", "start another index file"));
        }
        while self.capacity() < to {
            let slots = self.geo.segment_slots(self.segments.len());
            let layout = self.geo.segment_layout(slots);
            let offset = self.geo.segment_start(self.end_of_regions(), slots);
            self.add_region(RegionKind::Segment, offset, layout.len)?;
        }
        // Preallocate ahead in steps so that single adds do not make a call each.
        if to > self.prealloc_slots {
            let from = from.min(self.prealloc_slots);
            let to = to.max(self.prealloc_slots + 1024).min(self.capacity());
            self.preallocate_slots(from, to)?;
            self.prealloc_slots = to;
        }
        Ok(())
    }

    fn preallocate_slots(&self, from: u64, to: u64) -> Result<()> {
        let mut s = from;
        while s < to {
            let (k, local) = self.geo.locate(s);
            let seg = &self.segments[k];
            let n = (seg.layout.slots - local).min(to - s);
            let base = self.regions_of(RegionKind::Segment).nth(k).unwrap().offset;
            let l0b = self.geo.l0_words as u64 * 4;
            for (start, size) in [
                (seg.layout.vectors + local * self.geo.stride as u64, n * self.geo.stride as u64),
                (seg.layout.headers + local * SLOT_HEADER as u64, n * SLOT_HEADER as u64),
                (seg.layout.l0 + local * l0b, n * l0b),
            ] {
                os::preallocate(&self.file, base + start, size).map_err(|e| Error::io(e, "allocating space in", &self.path))?;
            }
            s += n;
        }
        Ok(())
    }

    fn regions_of(&self, kind: RegionKind) -> impl Iterator<Item = &RegionEntry> {
        self.regions.iter().filter(move |r| r.kind == kind)
    }

    /// The current heap chunk's index and used bytes, if any.
    pub fn heap_state(&self) -> Option<(usize, u32)> {
        self.regions_of(RegionKind::Heap).enumerate().last().map(|(i, r)| (i, r.used))
    }

    /// Set the used bytes of heap chunk `chunk` (rollback of a batch).
    pub fn set_heap_used(&mut self, chunk: usize, used: u32) {
        if let Some(r) = self.regions.iter_mut().filter(|r| r.kind == RegionKind::Heap).nth(chunk) {
            r.used = used;
        }
    }

    /// Drop regions added after the first `n` (rollback); their mappings go too.
    pub fn truncate_regions(&mut self, n: usize) {
        while self.regions.len() > n {
            match self.regions.pop().unwrap().kind {
                RegionKind::Segment => drop(self.segments.pop()),
                RegionKind::Heap => drop(self.heaps.pop()),
            }
        }
        self.prealloc_slots = self.prealloc_slots.min(self.capacity());
    }

    /// Allocate the upper-layer lists of a node of `level >= 1`, all empty. Returns the heap
    /// reference. Only the writer calls this, single-threaded.
    pub fn alloc_upper(&mut self, slot: u32, level: usize) -> Result<u64> {
        let bytes = self.geo.upper_bytes(level);
        let fits = self.heap_state().map(|(i, used)| used as u64 + bytes <= self.heaps[i].len).unwrap_or(false);
        if !fits {
            let prev = self.heaps.last().map(|h| h.len).unwrap_or(FIRST_HEAP_CHUNK / 2);
            let len = align_up((prev * 2).clamp(FIRST_HEAP_CHUNK, MAX_HEAP_CHUNK).max(bytes), REGION_ALIGN);
            let offset = align_up(self.end_of_regions(), REGION_ALIGN);
            self.add_region(RegionKind::Heap, offset, len)?;
            os::preallocate(&self.file, offset, len).map_err(|e| Error::io(e, "allocating space in", &self.path))?;
        }
        let (chunk, used) = self.heap_state().unwrap();
        let r = format::heap_ref(chunk, used as u64);
        let idx = self.regions.iter().rposition(|r| r.kind == RegionKind::Heap).unwrap();
        self.regions[idx].used = used + bytes as u32;
        for layer in 1..=level {
            let list = self.upper_at(r, layer);
            crate::graph::write_list(list, slot, layer, &[], 0);
        }
        Ok(r)
    }

    // ------------------------------------------------------------------ accessors
    //
    // Invariant for all of them: `slot < self.capacity()` (callers bounds-check slots read
    // from lists against the slot count first), so the pointer lies inside a live mapping,
    // which lives as long as `&self`. Alignment: segment areas start on 4096-byte boundaries
    // of a page-aligned mapping; slot headers are 32 bytes (u64-aligned), level-0 records are
    // whole u32 words, vectors are `stride`-aligned with stride a multiple of 4.

    #[inline(always)]
    fn seg_of(&self, slot: u32) -> (&Segment, u64) {
        let (k, local) = self.geo.locate(slot as u64);
        debug_assert!(k < self.segments.len(), "slot {slot} beyond the mapped segments");
        // SAFETY: callers keep slot < capacity(), so k < segments.len().
        (unsafe { self.segments.get_unchecked(k) }, local)
    }

    /// Pointer to a slot's stored vector (`geo.vec_bytes` bytes).
    #[inline(always)]
    pub fn vector_ptr(&self, slot: u32) -> *const u8 {
        let (seg, local) = self.seg_of(slot);
        // SAFETY: inside the segment's vector area (local < layout.slots).
        unsafe { seg.map.as_ptr().add((seg.layout.vectors + local * self.geo.stride as u64) as usize) }
    }

    /// A slot's stored vector bytes. Within this process a vector is written only before its
    /// slot is published (linked or committed), never after, so no `&mut` aliases this; a
    /// writer in another process writes only slots past its committed count, which readers
    /// use for routing at most (a torn read there yields a wrong distance, never unsafety).
    #[inline(always)]
    pub fn vector_bytes(&self, slot: u32) -> &[u8] {
        // SAFETY: see above; the range lies inside the mapping.
        unsafe { std::slice::from_raw_parts(self.vector_ptr(slot), self.geo.vec_bytes) }
    }

    /// Write a slot's vector. Only for unpublished slots (see `vector_bytes`).
    pub fn write_vector(&self, slot: u32, bytes: &[u8]) {
        assert!(self.writable && bytes.len() == self.geo.vec_bytes);
        // SAFETY: writable mapping, in bounds; the slot is not yet published so nobody in this
        // process reads it concurrently.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.vector_ptr(slot) as *mut u8, bytes.len()) }
    }

    /// The four u64 words of a slot header.
    #[inline(always)]
    pub fn header(&self, slot: u32) -> &[AtomicU64; 4] {
        let (seg, local) = self.seg_of(slot);
        // SAFETY: in bounds, 8-byte aligned (see the invariant above); AtomicU64 has u64's layout.
        unsafe { &*(seg.map.as_ptr().add((seg.layout.headers + local * SLOT_HEADER as u64) as usize) as *const [AtomicU64; 4]) }
    }

    /// A slot's level-0 record: head word, crc, then 2M neighbor slots.
    #[inline(always)]
    pub fn l0(&self, slot: u32) -> &[AtomicU32] {
        let (seg, local) = self.seg_of(slot);
        let words = self.geo.l0_words;
        // SAFETY: in bounds, 4-byte aligned; AtomicU32 has u32's layout.
        unsafe {
            std::slice::from_raw_parts(
                seg.map.as_ptr().add((seg.layout.l0 + local * words as u64 * 4) as usize) as *const AtomicU32,
                words,
            )
        }
    }

    /// The list of `layer >= 1` at heap reference `r`, or `None` if `r` points outside the heap
    /// (a damaged slot header): searches skip such a node rather than fail.
    #[inline(always)]
    pub fn upper_checked(&self, r: u64, layer: usize) -> Option<&[AtomicU32]> {
        let (chunk, off) = format::heap_ref_parts(r);
        let words = self.geo.upper_words;
        let start = off + ((layer - 1) * words * 4) as u64;
        let h = self.heaps.get(chunk)?;
        if start + (words * 4) as u64 > h.len || start % 4 != 0 {
            return None;
        }
        // SAFETY: bounds and alignment checked just above.
        Some(unsafe { std::slice::from_raw_parts(h.map.as_ptr().add(start as usize) as *const AtomicU32, words) })
    }

    fn upper_at(&self, r: u64, layer: usize) -> &[AtomicU32] {
        self.upper_checked(r, layer).expect("heap reference made by alloc_upper")
    }

    // ------------------------------------------------------------------ headers and sync

    /// Read both header copies (or as much of them as the file has).
    pub fn read_header_bytes(file: &File, path: &Path) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 2 * HEADER_COPY_SIZE];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(e, "reading", path)),
            }
        }
        buf.truncate(got);
        Ok(buf)
    }

    pub fn write_header(&self, copy: usize, h: &Header) -> Result<()> {
        let bytes = h.encode();
        self.file.write_all_at(&bytes, (copy * HEADER_COPY_SIZE) as u64).map_err(|e| Error::io(e, "writing the header of", &self.path))
    }

    /// Make everything written through the mappings durable.
    pub fn sync_data(&self) -> Result<()> {
        #[cfg(not(target_os = "linux"))]
        for m in self.segments.iter().map(|s| &s.map).chain(self.heaps.iter().map(|h| &h.map)) {
            m.flush().map_err(|e| Error::io(e, "writing", &self.path))?;
        }
        os::sync_data(&self.file).map_err(|e| Error::io(e, "syncing", &self.path))
    }

    pub fn no_upper() -> u64 {
        NO_UPPER
    }
}
