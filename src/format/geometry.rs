//! Sizes and offsets of everything inside segments and heap chunks, from the parameters
//! fixed at creation.

use super::*;

/// Regions are aligned to this (a multiple of every page size in use: 4, 16 and 64 KiB).
pub const REGION_ALIGN: u64 = 64 * 1024;
pub const HUGE_PAGE: u64 = 2 * 1024 * 1024;
pub const SLOT_HEADER: usize = 32;
/// An unused neighbor entry; also "no entry point".
pub const EMPTY: u32 = u32::MAX;
/// No heap reference (a node of level 0).
pub const NO_UPPER: u64 = u64::MAX;
/// The one id callers may not use: it pads missing results.
pub const RESERVED_ID: u64 = u64::MAX;
pub const FIRST_SEGMENT_SLOTS: u64 = 1024;
pub const FIRST_HEAP_CHUNK: u64 = 1 << 20;
pub const MAX_HEAP_CHUNK: u64 = 64 << 20;
/// Target size of a full segment's vectors.
const SEGMENT_VECTOR_BYTES: u64 = 256 << 20;

/// Sizes and offsets of everything inside segments and heap chunks, derived from the
/// parameters fixed at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub dims: usize,
    pub precision: Precision,
    /// M: upper layers keep M neighbors, layer 0 keeps 2M.
    pub m: usize,
    /// Bytes of one stored vector.
    pub vec_bytes: usize,
    /// Distance between consecutive vectors (64-byte aligned from 64 bytes up).
    pub stride: usize,
    /// u32 words in a level-0 record: count/level, crc, 2M slots.
    pub l0_words: usize,
    /// u32 words in one upper-layer list: count, crc, M slots.
    pub upper_words: usize,
    /// Slots in a full segment (a power of two, at least 1024).
    pub cap_slots: u64,
    cap_log2: u32,
    /// Distance between consecutive codes in a segment's codes area (whole 64-byte lines), or
    /// 0 for an index without codes (`crate::quant`; `with_codes`).
    pub code_stride: usize,
    /// Bytes of one code (`dims` for 8-bit codes, a codes-only index's included; half that,
    /// in blocks of 16 bytes, for 4-bit ones), and bits of one value of it (8 or 4).
    pub code_len: usize,
    pub code_bits: u32,
}

impl Geometry {
    pub fn new(dims: usize, precision: Precision, m: usize) -> Geometry {
        let vec_bytes = dims * precision.bytes();
        let stride = if vec_bytes >= 64 {
            vec_bytes.div_ceil(64) * 64
        } else {
            vec_bytes.next_power_of_two().max(4)
        };
        let want = (SEGMENT_VECTOR_BYTES / stride as u64).max(FIRST_SEGMENT_SLOTS);
        let cap_log2 = 63 - want.leading_zeros();
        Geometry {
            dims,
            precision,
            m,
            vec_bytes,
            stride,
            l0_words: 2 + 2 * m,
            upper_words: 2 + m,
            cap_slots: 1 << cap_log2,
            cap_log2,
            code_stride: 0,
            code_len: if precision == Precision::CodesOnly { dims } else { 0 },
            code_bits: 8,
        }
    }

    /// Whether the slots hold 8-bit codes: in a codes area, or as the vectors themselves.
    pub fn has_codes(&self) -> bool {
        self.code_stride > 0 || self.precision == Precision::CodesOnly
    }

    /// Bytes from one slot's codes to the next: the codes area's rows, or, for a codes-only
    /// index (no codes area: `code_stride` 0), its vectors' rows, which are the codes.
    pub fn code_row_stride(&self) -> usize {
        if self.precision == Precision::CodesOnly {
            self.stride
        } else {
            self.code_stride
        }
    }

    /// This geometry with a codes area in every segment: one code of `bits` bits (8 or 4)
    /// per dimension, rows of whole 64-byte lines. Segment sizes stay those of the vectors.
    pub fn with_codes(mut self, bits: u32) -> Geometry {
        self.code_bits = bits;
        self.code_len = code_len(self.dims, bits);
        self.code_stride = self.code_len.div_ceil(64).max(1) * 64;
        self
    }

    /// Slots in segment `k`.
    pub fn segment_slots(&self, k: usize) -> u64 {
        if (k as u32) < self.cap_log2 - 10 {
            FIRST_SEGMENT_SLOTS << k
        } else {
            self.cap_slots
        }
    }

    /// Total slots in the first `n` segments.
    pub fn slots_in_segments(&self, n: usize) -> u64 {
        (0..n).map(|k| self.segment_slots(k)).sum()
    }

    /// Segment number and index inside it of a slot.
    #[inline]
    pub fn locate(&self, slot: u64) -> (usize, u64) {
        let doubling_end = self.cap_slots - FIRST_SEGMENT_SLOTS; // slots in the doubling segments
        if slot < doubling_end {
            let k = 63 - (slot / FIRST_SEGMENT_SLOTS + 1).leading_zeros();
            (k as usize, slot - FIRST_SEGMENT_SLOTS * ((1u64 << k) - 1))
        } else {
            let rest = slot - doubling_end;
            (
                (self.cap_log2 - 10) as usize + (rest >> self.cap_log2) as usize,
                rest & (self.cap_slots - 1),
            )
        }
    }

    /// Layout of a segment of `slots` slots, relative to its start: `[codes | vectors | slot
    /// headers | level-0 records]`, the codes area empty without codes. When the vectors fill
    /// a huge page the codes area ends on a 2 MiB boundary, so that (the segment starting on
    /// one: `segment_start`) whole huge pages hold only codes, or only vectors.
    pub fn segment_layout(&self, slots: u64) -> SegmentLayout {
        let codes = 0u64;
        let code_bytes = slots * self.code_stride as u64;
        let vectors = if code_bytes == 0 {
            0
        } else if slots * self.stride as u64 >= HUGE_PAGE {
            align_up(code_bytes, HUGE_PAGE)
        } else {
            align_up(code_bytes, 4096)
        };
        let headers = align_up(vectors + slots * self.stride as u64, 4096);
        let l0 = align_up(headers + slots * SLOT_HEADER as u64, 4096);
        let end = l0 + slots * (self.l0_words as u64 * 4);
        SegmentLayout { slots, codes, vectors, headers, l0, len: align_up(end, REGION_ALIGN) }
    }

    /// Where a new segment of `slots` slots starts if the regions end at `end`: on a 2 MiB
    /// boundary when its vectors (or codes) fill at least one huge page, so whole huge pages
    /// hold only vectors (or only codes).
    pub fn segment_start(&self, end: u64, slots: u64) -> u64 {
        let widest = self.stride.max(self.code_stride) as u64;
        if slots * widest >= HUGE_PAGE {
            align_up(end, HUGE_PAGE)
        } else {
            align_up(end, REGION_ALIGN)
        }
    }

    /// Bytes of the upper lists of a node of level `level`.
    pub fn upper_bytes(&self, level: usize) -> u64 {
        (level * self.upper_words * 4) as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentLayout {
    pub slots: u64,
    /// The codes area (empty without codes: `vectors` is then 0 too).
    pub codes: u64,
    pub vectors: u64,
    pub headers: u64,
    pub l0: u64,
    pub len: u64,
}

/// Bytes of one code of `dims` values at `bits` bits (8 or 4): a byte a value, or for 4-bit
/// codes two values a byte in blocks of 16 bytes (32 dimensions) that a kernel loads whole.
pub fn code_len(dims: usize, bits: u32) -> usize {
    if bits == 4 {
        16 * dims.div_ceil(32)
    } else {
        dims
    }
}

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}
