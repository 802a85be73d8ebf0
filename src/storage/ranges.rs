//! Ranges: the address ranges memory policies advise (ADR-0016's whole vector pieces, the
//! graph areas, what was written), file offsets of lists and markers (patching a backup), and
//! stored bytes by file offset (copying a commit, loading into memory).

use super::{Segment, Storage};
use crate::error::{Error, Result};
use crate::format::{self, align_up, RegionEntry, RegionKind, HUGE_PAGE, SLOT_HEADER};
use crate::os;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering::*;

/// A range of the file the index has written, where it is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub addr: usize,
    pub len: usize,
    pub file_offset: u64,
    /// Vectors or codes: an area asked for huge pages (else slot headers, lists, heap, the
    /// quantizer).
    pub vectors: bool,
    /// Codes, 8- or 4-bit (then `vectors` too).
    pub codes: bool,
    /// In a mapping of its own (see `os::AlignedMap::is_own_mapping`): what the kernel says
    /// about its pages (smaps) is about the index's bytes alone.
    pub own: bool,
}

impl Storage {
    pub(super) fn segments_upto(&self, slots: u64) -> impl Iterator<Item = (&Segment, u64)> {
        let mut start = 0u64;
        (0..self.seg_count.load(Acquire)).map_while(move |k| {
            let seg = self.segments[k].get()?;
            let first = start;
            start += seg.layout.slots;
            // Lazily: past the last slot, `slots - first` would underflow.
            (first < slots).then(|| (seg, (slots - first).min(seg.layout.slots)))
        })
    }

    /// Each mapped segment that holds slots of `[from, to)`, with the first of those slots
    /// (counted from the index's first slot), and the first and the end of them counted from
    /// the segment's first slot.
    pub(super) fn segments_spanning(
        &self,
        from: u64,
        to: u64,
    ) -> impl Iterator<Item = (&Segment, u64, u64, u64)> {
        let mut first = 0u64;
        (0..self.seg_count.load(Acquire)).map_while(|k| self.segments[k].get()).filter_map(
            move |seg| {
                let base = first;
                first += seg.layout.slots;
                let (a, b) = (from.max(base), to.min(first));
                (a < b).then(|| (seg, a, a - base, b - base))
            },
        )
    }

    /// Address ranges of the whole 2 MiB pieces that hold nothing but the vectors (or the
    /// codes) of slots `[from, to)`: what ADR-0016 asks huge pages for. Up to two ranges per
    /// segment (codes, vectors).
    pub fn vector_pieces(&self, from: u64, to: u64) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (seg, _, a, b) in self.segments_spanning(from, to) {
            if seg.offset % HUGE_PAGE != 0 {
                continue;
            }
            let areas = [
                (seg.layout.codes, self.geo.code_stride as u64),
                (seg.layout.vectors, self.geo.stride as u64),
            ];
            for (area, stride) in areas {
                // Areas start on 2 MiB boundaries of the segment when they fill a huge page.
                if stride == 0 || area % HUGE_PAGE != 0 {
                    continue;
                }
                let lo = area + align_up(a * stride, HUGE_PAGE);
                let hi = area + (b * stride) / HUGE_PAGE * HUGE_PAGE;
                if hi > lo {
                    out.push((seg.map.as_ptr() as usize + lo as usize, (hi - lo) as usize));
                }
            }
        }
        out
    }

    /// Let go of the process's hold on the full-precision vectors of slots `[from, to)` (the
    /// whole pages under them): they stay in the page cache, changed ones too, and come back on
    /// the next access. A batch linked on the half-precision copy (`graph::halfcopy`) reads none
    /// of them until it is linked, so its peak resident set holds the copy or the vectors, not
    /// both. Nothing for an index in memory (its vectors live nowhere else) or one whose
    /// vectors were asked onto huge pages (ADR-0016 keeps those whole).
    pub fn release_vectors(&self, from: u64, to: u64) {
        if self.is_memory() || self.huge.load(Acquire) {
            return;
        }
        let ps = os::page_size();
        let stride = self.geo.stride;
        for (seg, _, a, b) in self.segments_spanning(from, to) {
            let map = seg.map.as_ptr() as usize;
            let start = map + seg.layout.vectors as usize + a as usize * stride;
            let end = start + (b - a) as usize * stride;
            let (lo, hi) = (start / ps * ps, (end.div_ceil(ps) * ps).min(map + seg.map.len()));
            // SAFETY: [lo, hi) lies inside this segment's mapping (the vectors of its slots,
            // widened to whole pages and clipped to its end), which is a MAP_SHARED mapping of
            // the index file: a file-backed storage maps every segment with AlignedMap::new.
            unsafe { os::release_shared(lo as *const u8, hi - lo) };
        }
    }

    /// Address ranges of every segment's whole vector area (to withdraw the huge-page request).
    pub fn vector_areas(&self) -> Vec<(usize, usize)> {
        (0..self.seg_count.load(Acquire))
            .filter_map(|k| self.segments[k].get())
            .map(|s| (s.map.as_ptr() as usize, s.layout.headers as usize))
            .collect()
    }

    /// The ranges the index has written for `slots` slots, in file order: each segment's
    /// vectors, slot headers and level-0 records up to the last slot, and each heap chunk up to
    /// its last entry (ADR-0019, 2). Page-aligned.
    pub fn written_ranges(&self, slots: u64) -> Vec<Written> {
        let ps = os::page_size();
        // A range at `rel` bytes into a mapping at `base` of file offset `file_base`.
        let page = |map: &os::AlignedMap, file_base: u64, rel: usize, len: usize, vectors: bool| {
            let base = map.as_ptr() as usize;
            let s = (base + rel) / ps * ps;
            Written {
                addr: s,
                len: (base + rel + len).div_ceil(ps) * ps - s,
                file_offset: file_base + (s - base) as u64,
                vectors,
                codes: false,
                own: map.is_own_mapping(),
            }
        };
        let mut out: Vec<Written> = Vec::new();
        for (seg, n) in self.segments_upto(slots) {
            let l = &seg.layout;
            if self.geo.code_stride > 0 {
                let len = (n * self.geo.code_stride as u64) as usize;
                out.push(Written {
                    codes: true,
                    ..page(&seg.map, seg.offset, l.codes as usize, len, true)
                });
            }
            out.push(page(
                &seg.map,
                seg.offset,
                l.vectors as usize,
                (n * self.geo.stride as u64) as usize,
                true,
            ));
            out.push(page(
                &seg.map,
                seg.offset,
                l.headers as usize,
                (n * SLOT_HEADER as u64) as usize,
                false,
            ));
            out.push(page(
                &seg.map,
                seg.offset,
                l.l0 as usize,
                (n * self.geo.l0_words as u64 * 4) as usize,
                false,
            ));
        }
        let a = self.alloc.lock();
        for (i, r) in a.regions.iter().filter(|r| r.kind == RegionKind::Heap).enumerate() {
            if let Some(h) = self.heaps[i].get() {
                out.push(page(&h.map, r.offset, 0, r.used as usize, false));
            }
        }
        for q in self.quants.lock().iter() {
            let used = a.regions.iter().find(|r| r.offset == q.offset).map_or(0, |r| r.used);
            out.push(page(&q.map, q.offset, 0, used as usize, false));
        }
        out.sort_by_key(|w| w.file_offset);
        out.retain(|w| w.len > 0);
        out
    }

    /// (address, length, file offset) of every mapping (the warm thread's read-only view).
    pub fn mapped_regions_with_offsets(&self) -> Vec<(usize, usize, u64)> {
        let a = self.alloc.lock();
        let mut heaps = a.regions.iter().filter(|r| r.kind == RegionKind::Heap);
        let segs = (0..self.seg_count.load(Acquire))
            .filter_map(|k| self.segments[k].get())
            .map(|s| (s.map.as_ptr() as usize, s.map.len(), s.offset));
        let hs: Vec<_> = (0..self.heap_count.load(Acquire))
            .filter_map(|k| {
                self.heaps[k].get().map(|h| {
                    (
                        h.map.as_ptr() as usize,
                        h.len as usize,
                        heaps.next().map(|r| r.offset).unwrap_or(0),
                    )
                })
            })
            .collect();
        segs.chain(hs).collect()
    }

    /// ADR-0016: ask for huge pages (and random reads) under the whole vector pieces of slots
    /// `[from, to)`, if huge pages are asked for. (In memory every store asked for them whole
    /// when it was made.)
    pub fn advise_huge_pieces(&self, from: u64, to: u64) {
        if self.huge.load(Acquire) && !self.is_memory() {
            for (p, len) in self.vector_pieces(from, to) {
                os::advise_huge(p as *const u8, len, true);
            }
        }
    }

    /// Give every file mapping the read advice of `self.random` (random, or the kernel's
    /// read-around), then ask again for the huge-page pieces of the first `slots` slots, whose
    /// random advice `MADV_NORMAL` or a scan's `MADV_SEQUENTIAL` cleared.
    fn restore_read_advice(&self, slots: u64) {
        let advise = if self.random.load(Acquire) { os::advise_random } else { os::advise_normal };
        for (p, len) in self.mapped_ranges() {
            advise(p as *const u8, len);
        }
        self.advise_huge_pieces(0, slots);
    }

    /// Mark every file mapping as read at random (a fault reads its own page), or give it the
    /// kernel's read-around again (`slots`: the committed ones, whose huge-page pieces keep
    /// theirs), if it is not so already. Mappings made later follow.
    pub fn set_random(&self, on: bool, slots: u64) {
        if self.file.is_some() && self.random.swap(on, AcqRel) != on {
            self.restore_read_advice(slots);
        }
    }

    /// Whether the file mappings are marked as read at random (`set_random`).
    pub fn is_random(&self) -> bool {
        self.random.load(Acquire)
    }

    /// Mark every file mapping as read in order for a whole-index scan (`check`, compaction's
    /// copy) of `slots` slots, so that a file not in memory comes in by readahead rather than a
    /// page per fault; the advice is as before when the guard drops. Searches of this process
    /// meanwhile read ahead too; other processes' mappings keep their own advice.
    pub fn sequential_scan(&self, slots: u64) -> SequentialScan<'_> {
        if self.file.is_some() {
            for (p, len) in self.mapped_ranges() {
                os::advise_sequential(p as *const u8, len);
            }
        }
        SequentialScan(self, slots)
    }

    /// Address ranges of every mapping of the index (for memory statistics).
    pub fn mapped_ranges(&self) -> Vec<(usize, usize)> {
        let segs = (0..self.seg_count.load(Acquire))
            .filter_map(|k| self.segments[k].get())
            .map(|s| (s.map.as_ptr() as usize, s.map.len()));
        let heaps = (0..self.heap_count.load(Acquire))
            .filter_map(|k| self.heaps[k].get())
            .map(|h| (h.map.as_ptr() as usize, h.len as usize));
        segs.chain(heaps).collect()
    }

    /// File offsets of a slot's header and level-0 record, from a region table.
    pub fn slot_offsets(&self, regions: &[RegionEntry], slot: u32) -> Option<(u64, u64)> {
        let (k, local) = self.geo.locate(slot as u64);
        let base = regions.iter().filter(|r| r.kind == RegionKind::Segment).nth(k)?.offset;
        let layout = self.geo.segment_layout(self.geo.segment_slots(k));
        Some((
            base + layout.headers + local * SLOT_HEADER as u64,
            base + layout.l0 + local * self.geo.l0_words as u64 * 4,
        ))
    }

    /// File ranges of the rows of slots `[from, to)` (codes, vectors, slot headers, level-0
    /// records), from a region table: one range per area of each segment they touch. None if
    /// the table lacks a segment.
    pub fn slot_rows(
        &self,
        regions: &[RegionEntry],
        from: u64,
        to: u64,
    ) -> Option<Vec<(u64, usize)>> {
        let g = &self.geo;
        let mut out = Vec::new();
        let mut s = from;
        while s < to {
            let (k, local) = g.locate(s);
            let slots = g.segment_slots(k);
            let n = (slots - local).min(to - s);
            let base = regions.iter().filter(|r| r.kind == RegionKind::Segment).nth(k)?.offset;
            let l = g.segment_layout(slots);
            for (area, size) in [
                (l.codes, g.code_stride as u64),
                (l.vectors, g.stride as u64),
                (l.headers, SLOT_HEADER as u64),
                (l.l0, g.l0_words as u64 * 4),
            ] {
                if size > 0 {
                    out.push((base + area + local * size, (n * size) as usize));
                }
            }
            s += n;
        }
        Some(out)
    }

    /// File offset of the list of `layer >= 1` at heap reference `r`.
    pub fn upper_offset(&self, regions: &[RegionEntry], r: u64, layer: usize) -> Option<u64> {
        let (chunk, off) = format::heap_ref_parts(r);
        let base = regions.iter().filter(|r| r.kind == RegionKind::Heap).nth(chunk)?.offset;
        Some(base + off + ((layer - 1) * self.geo.upper_words * 4) as u64)
    }

    /// The mapped bytes at file offset `[offset, offset + len)`, which must lie inside one
    /// region this storage has mapped. (In memory, offsets are where `save` puts the bytes.)
    pub(super) fn region_bytes(&self, offset: u64, len: usize) -> Option<*mut u8> {
        let a = self.alloc.lock();
        let (mut seg, mut heap) = (0usize, 0usize);
        for r in &a.regions {
            let k = match r.kind {
                RegionKind::Segment => seg,
                RegionKind::Heap => heap,
                RegionKind::Quantizer => 0,
            };
            match r.kind {
                RegionKind::Segment => seg += 1,
                RegionKind::Heap => heap += 1,
                RegionKind::Quantizer => {}
            }
            // Without a sum that could wrap: an offset near u64::MAX is outside every region.
            let inside = offset >= r.offset
                && len as u64 <= r.len
                && offset - r.offset <= r.len - len as u64;
            if inside {
                let base = match r.kind {
                    RegionKind::Segment => self.segments[k].get()?.map.as_ptr(),
                    RegionKind::Heap => self.heaps[k].get()?.map.as_ptr(),
                    RegionKind::Quantizer => {
                        let q = self.quants.lock();
                        q.iter().find(|q| q.offset == r.offset)?.map.as_ptr()
                    }
                };
                // SAFETY: pointer arithmetic only; the range lies inside this region's mapping.
                return Some(unsafe { base.add((offset - r.offset) as usize) });
            }
        }
        None
    }

    /// Copy the mapped bytes at file offset `offset` into `buf` when one region this storage
    /// has mapped covers them (a file's or an in-memory store's); false when none does.
    /// Callers hold the writer lock, so nothing writes these bytes meanwhile.
    fn copy_mapped(&self, buf: &mut [u8], offset: u64) -> bool {
        let Some(p) = self.region_bytes(offset, buf.len()) else { return false };
        // SAFETY: `p..p+len` lies inside a region this storage has mapped (`region_bytes`),
        // which stays mapped while `self` lives; the writer lock keeps writers out of it.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        true
    }

    /// Read stored bytes at a file offset: from the file (pread: a file-backed index's bytes
    /// are the page cache either way), or from an in-memory store.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match &self.file {
            Some(f) => {
                os::read_exact_at(f, buf, offset).map_err(|e| Error::io(e, "reading", &self.path))
            }
            None if self.copy_mapped(buf, offset) => Ok(()),
            None => Err(Error::corrupt(format!("offset {offset} is outside the index"))),
        }
    }

    /// Read bytes the writer has just written (a commit's changed ranges, under the writer
    /// lock): from the mapping where one region covers them, else as `read_at` does. A small
    /// commit reads a few dozen such ranges (a new row, the lists it changed), and one pread
    /// each cost more than the copies.
    pub fn read_written(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.copy_mapped(buf, offset) {
            return Ok(());
        }
        self.read_at(buf, offset)
    }

    /// Fill an in-memory store's bytes at a file offset from `file` (loading an index into
    /// memory): pread straight into the store, so the thread that calls this is the one whose
    /// first touch places the pages (the NUMA note's balanced placement).
    ///
    /// # Safety
    /// Nothing else reads or writes these bytes meanwhile: the store belongs to an index being
    /// loaded, which nobody else can see yet, and the ranges of concurrent calls are disjoint.
    pub unsafe fn fill_from(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        assert!(self.is_memory());
        let p = self.region_bytes(offset, len).ok_or_else(|| {
            Error::corrupt(format!("{}: offset {offset} is outside the index", path.display()))
        })?;
        // SAFETY: `p..p+len` lies inside a mapped store (`region_bytes`); nothing else touches
        // it meanwhile (the caller's contract).
        let dst = unsafe { std::slice::from_raw_parts_mut(p, len) };
        os::read_exact_at(file, dst, offset).map_err(|e| Error::io(e, "reading", path))
    }

    /// Write bytes at a file offset of an in-memory store (patching a loaded copy).
    ///
    /// # Safety
    /// As `fill_from`: nothing else reads or writes these bytes meanwhile.
    pub unsafe fn write_at(&self, bytes: &[u8], offset: u64) -> Result<()> {
        assert!(self.is_memory());
        let p = self
            .region_bytes(offset, bytes.len())
            .ok_or_else(|| Error::corrupt(format!("offset {offset} is outside the index")))?;
        // SAFETY: inside a mapped store (`region_bytes`); nothing else touches it (the caller's
        // contract).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        Ok(())
    }

    /// Ask for huge pages under every anonymous store, or for none (in memory only).
    pub fn advise_stores(&self, on: bool) {
        self.huge.store(on, Release);
        for s in self.segments[..self.seg_count.load(Acquire)].iter().filter_map(|s| s.get()) {
            s.map.advise_anon_huge(on);
        }
        for h in self.heaps[..self.heap_count.load(Acquire)].iter().filter_map(|h| h.get()) {
            h.map.advise_anon_huge(on);
        }
    }
}

/// See [`Storage::sequential_scan`].
pub struct SequentialScan<'a>(&'a Storage, u64);

impl Drop for SequentialScan<'_> {
    fn drop(&mut self) {
        if self.0.file.is_some() {
            self.0.restore_read_advice(self.1);
        }
    }
}
