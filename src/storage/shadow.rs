//! A large batch's level-0 lists, built in anonymous memory and written to the file once.
//!
//! Why: linking a batch rewrites each new node's list many times (its own choice, then the
//! links back from the nodes linked after it). In the file's mapping every such write to a
//! page the kernel has written back since makes the page dirty again, with a fault to make it
//! writable. Once a build's dirty pages pass the kernel's background threshold (a tenth of
//! memory), writeback never stops, and a build of ten million vectors writes the file many
//! times over (measured: `docs/design/scale.md`). Held here, the lists cost 4 bytes per entry
//! of anonymous memory and reach the file in one pass, in order.
//!
//! While a shadow is in place, `Storage::l0` of its slots answers from it. Nothing but the
//! batch reads those slots: they lie past the published count, which every search stops at
//! (entries are bounds-checked against it), and flush, check and backup wait for the writer,
//! who links the batch. A buffer is never unmapped while the storage lives: when a batch is
//! done its memory is given back (`AlignedMap::discard`, the addresses then read zeros) and a
//! larger batch maps a new one, so no reference into a shadow can dangle. Linux only (where
//! memory can be given back so); elsewhere the lists are written in place.

use super::Storage;
use crate::format::HUGE_PAGE;
use crate::os::AlignedMap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering::*};

/// Batches of fewer rows write their lists in place: their lists are small (a few MB), and
/// copying them would cost all the gain (`docs/design/scale.md`).
pub const SHADOW_MIN: u64 = 65_536;

#[derive(Default)]
pub(super) struct Shadow {
    /// First slot in the low 32 bits, slot count in the high 32 (0: no shadow). One word, so
    /// that a reader never pairs one shadow's start with another's count.
    range: AtomicU64,
    /// The first list of the buffer in use, valid while `range` names slots.
    ptr: AtomicPtr<AtomicU32>,
    /// Every buffer mapped so far, the one in use last (see the module's text).
    bufs: Mutex<Vec<AlignedMap>>,
}

/// Whether large batches build their lists here: `CHASSIS_LIST_SHADOW=0` writes them in place,
/// for measuring. Read once.
fn enabled() -> bool {
    crate::tuning::get().list_shadow.unwrap_or(true)
}

impl Storage {
    /// The shadow list of `slot`, if a shadow holds it.
    #[inline(always)]
    pub(super) fn shadow_l0(&self, slot: u32) -> Option<&[AtomicU32]> {
        let r = self.shadow.range.load(Acquire);
        let off = slot.wrapping_sub(r as u32);
        if off >= (r >> 32) as u32 {
            return None;
        }
        let words = self.geo.l0_words;
        let p = self.shadow.ptr.load(Relaxed);
        // SAFETY: `ptr` was stored before `range` (release/acquire) and points at a buffer of
        // at least `count * words` u32s, mapped until the storage drops (never unmapped
        // earlier); `off < count`; AtomicU32 has u32's layout and the buffer is page-aligned.
        Some(unsafe { std::slice::from_raw_parts(p.add(off as usize * words), words) })
    }

    /// Hold the level-0 lists of slots `[from, to)` (not published, all reserved) in zeroed
    /// anonymous memory until the returned guard ends it: `ShadowLists::keep` copies them to
    /// the file; dropping the guard any other way (an error, a panic while linking) throws them
    /// away, so that no later batch writes its lists where the file never sees them. Only the
    /// writer calls it, for a batch of at least `SHADOW_MIN` rows of a file on Linux; with no
    /// memory for it, the lists are written in place (and the guard does nothing).
    pub fn shadow_lists(&self, from: u64, to: u64) -> ShadowLists<'_> {
        // The range is one word, start and count in 32 bits each (`shadow_l0` trusts it).
        assert!(from <= to && to <= u64::from(u32::MAX), "slots {from}..{to} for a shadow");
        let n = to - from;
        if !cfg!(target_os = "linux") || self.is_memory() || n < SHADOW_MIN || !enabled() {
            return ShadowLists(None);
        }
        // One shadow at a time: one whose guard was never dropped (leaked) holds nothing.
        self.end_shadow(false);
        let bytes = n as usize * self.geo.l0_words * 4;
        let mut bufs = self.shadow.bufs.lock();
        if bufs.last().is_none_or(|b| b.len() < bytes) {
            match AlignedMap::anonymous(bytes.max(HUGE_PAGE as usize), true) {
                Ok(b) => bufs.push(b),
                Err(_) => return ShadowLists(None),
            }
        }
        let buf = bufs.last().expect("just made");
        self.shadow.ptr.store(buf.as_ptr() as *mut AtomicU32, Relaxed);
        self.shadow.range.store(from | n << 32, Release);
        ShadowLists(Some(self))
    }

    /// End the shadow, if one is in place: with `keep`, its lists are first copied to the
    /// file's mapping (one pass, in slot order); then `l0` answers from the file again and the
    /// buffer's memory is given back. Called once every thread of the batch is done with it.
    fn end_shadow(&self, keep: bool) {
        let r = self.shadow.range.load(Acquire);
        let (from, n) = ((r as u32) as u64, r >> 32);
        if n == 0 {
            return;
        }
        let lb = self.geo.l0_words * 4;
        let src = self.shadow.ptr.load(Relaxed) as *const u8;
        if keep {
            for (seg, first, a, b) in self.segments_spanning(from, from + n) {
                // SAFETY: `src + (first - from) * lb`, `(b - a) * lb` bytes, lies in the shadow
                // buffer (slots `first..first + b - a` of the shadow's range); the destination
                // in the segment's writable mapping (its level-0 area, local slots `a..b`).
                // Nobody reads or writes either meanwhile: the slots are unpublished and the
                // batch's threads are done.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add((first - from) as usize * lb),
                        seg.map.as_ptr().add((seg.layout.l0 + a * lb as u64) as usize),
                        (b - a) as usize * lb,
                    );
                }
            }
        }
        self.shadow.range.store(0, Release);
        if let Some(b) = self.shadow.bufs.lock().last() {
            b.discard();
        }
    }
}

/// A batch's shadow of its level-0 lists (`Storage::shadow_lists`), ended on every way out of
/// the batch: kept (copied to the file) by `keep`, thrown away by a drop without it.
/// (None: the lists are written in place.)
#[must_use = "dropping the guard throws the batch's lists away"]
pub struct ShadowLists<'a>(Option<&'a Storage>);

impl ShadowLists<'_> {
    /// Copy the batch's lists to the file and end the shadow.
    pub fn keep(mut self) {
        if let Some(st) = self.0.take() {
            st.end_shadow(true);
        }
    }
}

impl Drop for ShadowLists<'_> {
    fn drop(&mut self) {
        if let Some(st) = self.0.take() {
            st.end_shadow(false);
        }
    }
}
