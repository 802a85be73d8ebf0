//! A table of codes in memory: one row of `dims` bytes per slot, rows 64 bytes apart, made
//! from a full-precision storage's vectors with a quantizer.
//!
//! What the graph walks when it measures codes (`Graph::on_codes`). Anonymous memory, on huge
//! pages where the kernel grants them (the THP note: a private buffer, never written back).

use super::Quantizer;
use crate::format::Precision;
use crate::os::AlignedMap;
use crate::storage::Storage;
use rayon::prelude::*;

/// Rows encoded per rayon task.
const ROWS_PER_TASK: usize = 256;

pub struct CodeTable {
    map: AlignedMap,
    dims: usize,
    stride: usize,
    slots: u32,
    clipped: u64,
}

impl CodeTable {
    /// Row stride for `dims` codes: whole 64-byte lines, as the file's vectors.
    pub fn stride_for(dims: usize) -> usize {
        dims.div_ceil(64).max(1) * 64
    }

    /// The codes of the full-precision vectors of slots `0..slots` (below the storage's
    /// capacity), or None if the memory cannot be had or the storage is not full precision.
    pub fn new(st: &Storage, quantizer: &Quantizer, slots: u32) -> Option<CodeTable> {
        let dims = st.geo.dims;
        if st.geo.precision != Precision::Full
            || quantizer.dims() != dims
            || quantizer.bits() != 8
            || slots == 0
        {
            return None;
        }
        let stride = Self::stride_for(dims);
        let map = AlignedMap::anonymous(slots as usize * stride, true).ok()?;
        let base = map.as_ptr() as usize;
        let chunks: Vec<std::ops::Range<usize>> = (0..slots as usize)
            .step_by(ROWS_PER_TASK)
            .map(|a| a..(a + ROWS_PER_TASK).min(slots as usize))
            .collect();
        let clipped = chunks
            .par_iter()
            .map(|c| {
                let mut clipped = 0u64;
                for s in c.clone() {
                    // SAFETY: row s lies inside the map (s < slots, len = slots * stride);
                    // each task writes only its own rows, and nothing reads them before `new`
                    // returns.
                    let row = unsafe {
                        std::slice::from_raw_parts_mut((base + s * stride) as *mut u8, dims)
                    };
                    clipped += quantizer.encode(st.vector_f32(s as u32), row) as u64;
                }
                clipped
            })
            .sum();
        Some(CodeTable { map, dims, stride, slots, clipped })
    }

    /// Pointer to a slot's codes (`dims` bytes, 64-byte aligned).
    #[inline(always)]
    pub fn ptr(&self, slot: u32) -> *const u8 {
        assert!(slot < self.slots, "slot {slot} is beyond the code table");
        // SAFETY: slot < slots (checked above), so the row lies inside the map.
        unsafe { self.map.as_ptr().add(slot as usize * self.stride) }
    }

    /// A slot's codes.
    #[inline(always)]
    pub fn row(&self, slot: u32) -> &[u8] {
        // SAFETY: as `ptr`; the table is written only in `new`, before it is shared.
        unsafe { std::slice::from_raw_parts(self.ptr(slot), self.dims) }
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Values clipped when the table was made (outside the quantizer's range).
    pub fn clipped(&self) -> u64 {
        self.clipped
    }
}
