//! Slot -> reference accessors: a slot's vector, header words and level-0 list, and a heap
//! reference's upper-layer list. The hot path of every search; see the module's `# Safety`.

use super::{Segment, Storage};
use crate::format::{self, SLOT_HEADER};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

/// The thread of `Storage::prefault_headers_beside`, joined when this is dropped, on every
/// way out of the caller: no page is made writable after the call that started it.
pub struct Prefault(Option<std::thread::JoinHandle<()>>);

impl Drop for Prefault {
    fn drop(&mut self) {
        // A panic there took no fault more: nothing to report.
        if let Some(t) = self.0.take() {
            let _ = t.join();
        }
    }
}

impl Storage {
    /// The mapped segment holding `slot`, and the slot's place in it. Checked in release
    /// builds too: a slot beyond the mapped segments panics instead of reading outside them
    /// (callers bound slots read from lists by the slot count first, so this never fires on
    /// a sound path; the check is two predictable branches).
    #[inline(always)]
    pub(super) fn seg_of(&self, slot: u32) -> (&Segment, u64) {
        let (k, local) = self.geo.locate(slot as u64);
        // A cell is set before seg_count is raised past it (release/acquire) and never cleared;
        // `locate` keeps `local` below the segment's slot count.
        match self.segments.get(k).and_then(std::sync::OnceLock::get) {
            Some(seg) => (seg, local),
            None => beyond_mappings(slot),
        }
    }

    /// Pointer to a slot's stored vector (`geo.vec_bytes` bytes).
    #[inline(always)]
    pub fn vector_ptr(&self, slot: u32) -> *const u8 {
        let (seg, local) = self.seg_of(slot);
        // SAFETY: inside the segment's vector area (local < layout.slots).
        unsafe {
            seg.map.as_ptr().add((seg.layout.vectors + local * self.geo.stride as u64) as usize)
        }
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

    /// A slot's stored vector as f32s: full-precision indexes only (panics otherwise).
    #[inline(always)]
    pub fn vector_f32(&self, slot: u32) -> &[f32] {
        assert!(
            self.geo.precision == format::Precision::Full,
            "vector_f32 of a half-precision index"
        );
        // SAFETY: a full-precision vector is `dims` little-endian f32s (the format refuses
        // big-endian targets) at a `stride`-aligned address, stride a multiple of 4, so the
        // cast is aligned and in bounds; aliasing as for `vector_bytes`.
        unsafe { std::slice::from_raw_parts(self.vector_ptr(slot) as *const f32, self.geo.dims) }
    }

    /// Pointer to a slot's codes (`geo.code_len` bytes: 8- or 4-bit): in the codes area, or the stored
    /// vector of a codes-only index; an index with codes only (panics otherwise).
    #[inline(always)]
    pub fn code_ptr(&self, slot: u32) -> *const u8 {
        if self.geo.precision == format::Precision::CodesOnly {
            return self.vector_ptr(slot);
        }
        assert!(self.geo.code_stride > 0, "codes of an index without codes");
        let (seg, local) = self.seg_of(slot);
        // SAFETY: inside the segment's codes area (local < layout.slots).
        unsafe {
            seg.map.as_ptr().add((seg.layout.codes + local * self.geo.code_stride as u64) as usize)
        }
    }

    /// A slot's codes. Written as a vector is (before the slot is published), or for every
    /// slot at once when the quantizer is trained, before any snapshot uses the codes.
    #[inline(always)]
    pub fn code_bytes(&self, slot: u32) -> &[u8] {
        // SAFETY: as for `vector_bytes`; the range lies inside the mapping.
        unsafe { std::slice::from_raw_parts(self.code_ptr(slot), self.geo.code_len) }
    }

    /// Write a slot's codes. Not for a codes-only index, whose codes are its vectors
    /// (`write_vector`).
    ///
    /// # Safety
    /// Nothing reads or writes the slot's codes meanwhile, and no `&[u8]` of them
    /// (`code_bytes`) is alive: the slot is not published yet, or no snapshot in use walks the
    /// codes (training).
    pub unsafe fn write_code(&self, slot: u32, codes: &[u8]) {
        assert!(self.writable && codes.len() == self.geo.code_len && self.geo.code_stride > 0);
        // SAFETY: writable mapping, in bounds (`code_ptr` checks the slot); nothing reads these
        // bytes meanwhile (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(
                codes.as_ptr(),
                self.code_ptr(slot) as *mut u8,
                codes.len(),
            )
        }
    }

    /// Write a slot's vector.
    ///
    /// # Safety
    /// The slot is not published: nothing reads or writes its vector meanwhile, and no
    /// `&[u8]` of it (`vector_bytes`) is alive.
    pub unsafe fn write_vector(&self, slot: u32, bytes: &[u8]) {
        assert!(self.writable && bytes.len() == self.geo.vec_bytes);
        // SAFETY: writable mapping, in bounds (`vector_ptr` checks the slot); nobody reads the
        // slot meanwhile (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.vector_ptr(slot) as *mut u8,
                bytes.len(),
            )
        }
    }

    /// The four u64 words of a slot header.
    #[inline(always)]
    pub fn header(&self, slot: u32) -> &[AtomicU64; 4] {
        let (seg, local) = self.seg_of(slot);
        // SAFETY: in bounds, 8-byte aligned (see the invariant above); AtomicU64 has u64's layout.
        unsafe {
            &*(seg.map.as_ptr().add((seg.layout.headers + local * SLOT_HEADER as u64) as usize)
                as *const [AtomicU64; 4])
        }
    }

    /// Take the write faults of the header pages `slots` (any order) will be written on, on a
    /// thread of its own (`os::spawn_elsewhere`), while the caller goes on; a page is taken
    /// only if 4 of the slots or more lie on it, so that few pages are made dirty that no write
    /// changes (each is written back at the next commit). None where nothing is started: an
    /// in-memory store, a system without `populate_write`, or no thread given.
    pub fn prefault_headers_beside(self: Arc<Self>, slots: Vec<u32>) -> Option<Prefault> {
        if crate::os::populate_write_refused() || self.is_memory() || !self.writable {
            return None;
        }
        crate::os::spawn_elsewhere(move || self.prefault_headers(&slots)).map(|t| Prefault(Some(t)))
    }

    /// `prefault_headers_beside`'s work: per segment, each page's count of slots, then each run
    /// of pages with 4 or more in one call.
    fn prefault_headers(&self, slots: &[u32]) {
        let page = crate::os::page_size() as u64;
        // Per mapped segment, its header pages' counts (made as slots come).
        let mut counts: Vec<Vec<u16>> = Vec::new();
        for &s in slots {
            let (k, local) = self.geo.locate(s as u64);
            let Some(seg) = self.segments.get(k).and_then(std::sync::OnceLock::get) else {
                continue;
            };
            if counts.len() <= k {
                counts.resize_with(k + 1, Vec::new);
            }
            let c = &mut counts[k];
            if c.is_empty() {
                let first = seg.layout.headers / page;
                let end =
                    (seg.layout.headers + seg.layout.slots * SLOT_HEADER as u64).div_ceil(page);
                c.resize((end - first) as usize, 0);
            }
            let p = ((seg.layout.headers + local * SLOT_HEADER as u64) / page
                - seg.layout.headers / page) as usize;
            c[p] = c[p].saturating_add(1);
        }
        for (k, c) in counts.iter().enumerate() {
            let Some(seg) = self.segments.get(k).and_then(std::sync::OnceLock::get) else {
                continue;
            };
            let first = seg.layout.headers / page;
            let mut p = 0;
            while p < c.len() {
                if c[p] < 4 {
                    p += 1;
                    continue;
                }
                let run = p;
                while p < c.len() && c[p] >= 4 {
                    p += 1;
                }
                let start = (first + run as u64) * page;
                let end = ((first + p as u64) * page).min(seg.map.len() as u64);
                // SAFETY: [start, end) lies inside the segment's mapping (pages of its header
                // area, cut at the mapping's end); the call takes faults and changes no byte.
                crate::os::populate_write(
                    unsafe { seg.map.as_ptr().add(start as usize) },
                    (end - start) as usize,
                );
            }
        }
    }

    /// A slot's level-0 record: head word, crc, then 2M neighbor slots (from the shadow of the
    /// batch being linked while one holds it: `shadow.rs`).
    #[inline(always)]
    pub fn l0(&self, slot: u32) -> &[AtomicU32] {
        if let Some(list) = self.shadow_l0(slot) {
            return list;
        }
        let (seg, local) = self.seg_of(slot);
        let words = self.geo.l0_words;
        // SAFETY: in bounds, 4-byte aligned; AtomicU32 has u32's layout.
        unsafe {
            std::slice::from_raw_parts(
                seg.map.as_ptr().add((seg.layout.l0 + local * words as u64 * 4) as usize)
                    as *const AtomicU32,
                words,
            )
        }
    }

    /// The list of `layer >= 1` at heap reference `r`, or `None` if `r` points outside the heap
    /// (a damaged slot header): searches skip such a node rather than fail.
    #[inline(always)]
    pub fn upper_checked(&self, r: u64, layer: usize) -> Option<&[AtomicU32]> {
        let (chunk, off) = format::heap_ref_parts(r);
        let bytes = (self.geo.upper_words * 4) as u64;
        // Checked sums: a damaged reference or layer 0 is outside the heap, not a wrap.
        let start = off.checked_add((layer.checked_sub(1)? as u64).checked_mul(bytes)?)?;
        let h = self.heaps.get(chunk)?.get()?;
        if start.checked_add(bytes)? > h.len || !start.is_multiple_of(4) {
            return None;
        }
        let words = self.geo.upper_words;
        // SAFETY: bounds (without overflow) and alignment checked just above.
        Some(unsafe {
            std::slice::from_raw_parts(
                h.map.as_ptr().add(start as usize) as *const AtomicU32,
                words,
            )
        })
    }

    pub(super) fn upper_at(&self, r: u64, layer: usize) -> &[AtomicU32] {
        self.upper_checked(r, layer).expect("heap reference made by alloc_upper")
    }
}

#[cold]
#[inline(never)]
fn beyond_mappings(slot: u32) -> ! {
    panic!("slot {slot} is beyond the mapped segments of the index")
}

/// What part of a slot a search is about to read, for [`Storage::will_need`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// The stored vector (a codes-only index's codes).
    Vector,
    /// The codes (8- or 4-bit) beside the vectors (the vector where there are only codes).
    Code,
    /// The level-0 record (the node's list).
    List,
}

impl Storage {
    /// Ask the system to start reading the file pages under `area` of `slot` (no wait; a page
    /// already in memory costs a lookup): a search of an index not in memory prefetches the pages
    /// of what it reads next, so that their reads overlap instead of coming one fault at a
    /// time. Nothing for an in-memory index.
    pub fn will_need(&self, slot: u32, area: Area) {
        let Some(file) = &self.file else { return };
        let (seg, local) = self.seg_of(slot);
        let l = &seg.layout;
        let (at, len) = match area {
            Area::Code if self.geo.precision != format::Precision::CodesOnly => {
                (l.codes + local * self.geo.code_stride as u64, self.geo.code_len)
            }
            Area::Vector | Area::Code => {
                (l.vectors + local * self.geo.stride as u64, self.geo.vec_bytes)
            }
            Area::List => (l.l0 + local * self.geo.l0_words as u64 * 4, self.geo.l0_words * 4),
        };
        crate::os::fadvise_willneed(file, seg.offset + at, len);
    }
}
