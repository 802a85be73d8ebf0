//! A table of rows in anonymous memory, filled in parallel once and only read after: the
//! half-precision copy a large batch is linked on (`graph::halfcopy`). Its raw pointers are
//! made here, beside the file's (the `# Safety` section of `storage`).
//!
//! Anonymous memory, on huge pages where the kernel grants them (the THP note: a private
//! buffer, never written back).

use crate::os::AlignedMap;
use rayon::prelude::*;
use std::marker::PhantomData;
use std::ops::Range;

/// Rows filled per rayon task.
const ROWS_PER_TASK: u32 = 256;

pub struct RowTable {
    map: AlignedMap,
    stride: usize,
    row_bytes: usize,
    rows: u32,
}

/// The rows one task fills: only its own, one at a time.
pub struct ChunkRows<'a> {
    base: *mut u8,
    stride: usize,
    row_bytes: usize,
    range: Range<u32>,
    _rows: PhantomData<&'a mut [u8]>,
}

impl ChunkRows<'_> {
    /// The rows of this task.
    pub fn range(&self) -> Range<u32> {
        self.range.clone()
    }

    /// Row `r` (in `range()`), to write; one row at a time (the borrow of `self`).
    pub fn row(&mut self, r: u32) -> &mut [u8] {
        assert!(self.range.contains(&r), "row {r} is not one of this task's");
        // SAFETY: r < rows (the range lies below the table's rows), so the row lies inside the
        // map; no other task's range holds r, and `&mut self` gives out one row at a time.
        unsafe {
            std::slice::from_raw_parts_mut(self.base.add(r as usize * self.stride), self.row_bytes)
        }
    }

    /// Row `r` as 16-bit floats (`row_bytes / 2` of them).
    pub fn row_f16(&mut self, r: u32) -> &mut [half::f16] {
        let row = self.row(r);
        let (n, p) = (row.len() / 2, row.as_mut_ptr());
        assert!((p as usize).is_multiple_of(2), "a row of 16-bit values on an odd address");
        // SAFETY: the row's bytes, 2-byte aligned (checked), hold n 2-byte values; any bit
        // pattern is a valid f16, and the borrow is the row's.
        unsafe { std::slice::from_raw_parts_mut(p as *mut half::f16, n) }
    }
}

impl RowTable {
    /// `rows` rows of `row_bytes` bytes, `stride` bytes apart (at least `row_bytes`, and a
    /// multiple of 64 or a power of two, as the file's vectors: rows are aligned to 64 bytes or
    /// to their stride), each task's rows written by `fill`, whose results are summed. None if
    /// the memory cannot be had.
    pub fn filled<R, F>(
        rows: u32,
        row_bytes: usize,
        stride: usize,
        fill: F,
    ) -> Option<(RowTable, R)>
    where
        R: Send + std::iter::Sum<R>,
        F: Fn(&mut ChunkRows<'_>) -> R + Sync,
    {
        assert!(
            stride >= row_bytes && (stride.is_multiple_of(64) || stride.is_power_of_two()),
            "stride {stride} for rows of {row_bytes} bytes"
        );
        let map = AlignedMap::anonymous((rows as usize).checked_mul(stride)?, true).ok()?;
        let base = map.as_ptr() as usize;
        let chunks: Vec<Range<u32>> = (0..rows)
            .step_by(ROWS_PER_TASK as usize)
            .map(|a| a..a.saturating_add(ROWS_PER_TASK).min(rows))
            .collect();
        let total = chunks
            .into_par_iter()
            .map(|range| {
                let mut chunk = ChunkRows {
                    base: base as *mut u8,
                    stride,
                    row_bytes,
                    range,
                    _rows: PhantomData,
                };
                fill(&mut chunk)
            })
            .sum();
        Some((RowTable { map, stride, row_bytes, rows }, total))
    }

    /// Pointer to row `r` (`row_bytes` bytes, 64-byte aligned).
    #[inline(always)]
    pub fn ptr(&self, r: u32) -> *const u8 {
        assert!(r < self.rows, "row {r} is beyond the table's {}", self.rows);
        // SAFETY: r < rows (checked above), so the row lies inside the map.
        unsafe { self.map.as_ptr().add(r as usize * self.stride) }
    }

    /// Row `r`'s bytes.
    #[inline(always)]
    pub fn row(&self, r: u32) -> &[u8] {
        // SAFETY: as `ptr`; rows are written only in `filled`, before the table is shared.
        unsafe { std::slice::from_raw_parts(self.ptr(r), self.row_bytes) }
    }

    pub fn rows(&self) -> u32 {
        self.rows
    }
}
