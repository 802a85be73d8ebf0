//! The on-disk format, in one place. Everything is little-endian.
//!
//! ```text
//! file offset
//! 0        header copy 0 (64 KiB)  } double-buffered: each copy is checksummed and carries
//! 64 KiB   header copy 1 (64 KiB)  } a sequence number; the valid copy with the higher one is current
//! 128 KiB  regions, appended in allocation order and never moved once written:
//!          - segments: [vectors | slot headers | level-0 records] for a run of slots
//!            (with 8-bit codes: [codes | vectors | ...])
//!          - heap chunks: upper-layer neighbor lists
//!          - a quantizer (8-bit codes only): its stored form (`quant::Quantizer::to_bytes`)
//! ```
//!
//! **Versions.** A file without codes is written as version 1, exactly as before codes
//! existed, so older builds keep opening it; a file created with `quantization="int8"` is
//! version 2: its header names the codes mode (byte 30) and the quantizer region in effect
//! (bytes 96..104, its file offset, 0 until trained), and each segment holds a codes area
//! ahead of its vectors: `[codes | vectors | slot headers | level-0 records]`
//! (`Geometry::with_codes`). A code is the encoding of its vector under the quantizer: `check`
//! verifies exactly that, which is stronger than a checksum of the code. A file with 4-bit
//! codes (`quantization="int4"`, byte 30 = 2) is version 3, the same layout with shorter
//! codes: a build from before 4-bit codes then says the file is newer than it reads, not that
//! both header copies are damaged. A header whose last slots are a tail (stored and committed,
//! not linked yet: `Header::linked`, bytes 104..112) is version 4 whatever its codes mode, so
//! that a build that would walk the graph and miss them refuses the file; once the tail is
//! linked the header goes back to its mode's version. A file in which a deleted row's slot took
//! a new row is version 5 from then on (`Header::reused`), with or without a tail: its rows
//! carry born markers (below), which an older build would read as damage and skip.
//!
//! A flush writes the *older* header copy with `seq + 1`, so the current copy is never being
//! overwritten; a torn or damaged copy fails its checksum and the other one is used (and the
//! damage reported). Each copy is decoded on its own: a damaged field in one copy never makes
//! the other unusable.
//!
//! **Segments.** Segment `k` holds `1024 << k` slots until that reaches [`Geometry::cap_slots`]
//! (about 256 MiB of vectors), then every segment holds `cap_slots`. A segment whose vectors
//! fill at least 2 MiB starts on a 2 MiB boundary of the file, and its vectors come first, so
//! that whole 2 MiB pieces hold nothing but vectors (ADR-0016 asks for huge pages only for
//! those). Each vector starts on a 64-byte boundary (`stride` is a multiple of 64 from 64 bytes
//! up; shorter vectors get the next power of two so none straddles a cache line).
//!
//! **Slot header** (32 bytes, four little-endian u64 words):
//! `id | upper (heap reference of the upper-layer lists, or NONE) | delete marker |
//! vec_crc (low 32 bits) + hdr_crc (high 32 bits)`. `vec_crc` is the checksum of the stored
//! vector bytes; `hdr_crc` covers id, upper and vec_crc. The delete marker is 0 for a live slot,
//! else `seq << 16 | check`, where `seq` is the commit that makes the delete durable and
//! `check` 16 bits of a checksum of (seq, slot): one word, so that it changes atomically and a
//! snapshot older than `seq` still sees the slot live. Version 5 adds the born marker,
//! `seq << 16 | check ^ 0x5a5a`: the row is visible from commit `seq` on (`born_marker`).
//!
//! **Level-0 record** (`2 + 2M` u32 words): `count (low 16 bits) | level (bits 16..24) |
//! laid out by locality (bit 24, [`L0_LOCALITY`])`, `list_crc`, then `2M` neighbor slots.
//! Unused entries hold [`EMPTY`].
//!
//! **Upper lists** live in heap chunks: a node of level `L >= 1` owns `L` consecutive lists of
//! `2 + M` u32 words (`count`, `list_crc`, `M` slots), for layers 1..=L. A heap reference is
//! `(chunk_number << 40) | byte offset in the chunk`.
//!
//! **Crash consistency.** Slots at or past the committed count are ignored by readers and
//! reused by the next writer. Lists of committed nodes are changed in place, so before the
//! first change after a commit the writer appends the node's old lists to `<path>.undo`
//! (see `undo.rs`); a writer that opens a file whose undo log belongs to the committed
//! sequence puts them back.
//!
//! | file          | what it holds                                                          |
//! |---------------|------------------------------------------------------------------------|
//! | `mod.rs`      | this page; metric, precision and codes mode; the limits of a file      |
//! | `header.rs`   | a header copy: its byte layout beside its constants, encode and decode |
//! | `geometry.rs` | sizes and offsets inside segments and heap chunks, code lengths        |
//! | `records.rs`  | stored vectors, slot headers, delete markers, lists: their words       |
//!
//! Every byte offset of the header is named in `header.rs`; nothing else decodes header bytes.

use crate::error::{Error, ErrorKind, Result};

mod geometry;
mod header;
mod records;

pub use geometry::*;
pub use header::*;
pub use records::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Euclidean = 1,
    Cosine = 2,
    InnerProduct = 3,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Euclidean => "euclidean",
            Metric::Cosine => "cosine",
            Metric::InnerProduct => "inner_product",
        }
    }
    pub fn parse(s: &str) -> Result<Metric> {
        match s {
            "euclidean" | "l2" => Ok(Metric::Euclidean),
            "cosine" => Ok(Metric::Cosine),
            "inner_product" | "ip" | "dot" => Ok(Metric::InnerProduct),
            _ => Err(Error::invalid(
                format!("unknown metric {s:?}"),
                "use \"euclidean\", \"cosine\" or \"inner_product\"",
            )),
        }
    }
    fn from_u8(v: u8) -> Option<Metric> {
        match v {
            1 => Some(Metric::Euclidean),
            2 => Some(Metric::Cosine),
            3 => Some(Metric::InnerProduct),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 storage.
    Full = 1,
    /// f16 storage, f32 queries.
    Half = 2,
    /// Codes only (`precision="int8"`; version 2, with `Quantization::Int8`): the stored
    /// vector is its 8-bit code under the quantizer in effect, and distances are the codes'.
    /// Not to be confused with `Quantization::Int8`, codes kept beside full vectors.
    CodesOnly = 3,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Full => "full",
            Precision::Half => "half",
            Precision::CodesOnly => "int8",
        }
    }
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "full" | "f32" | "float32" => Ok(Precision::Full),
            "half" | "f16" | "float16" => Ok(Precision::Half),
            "int8" | "i8" => Ok(Precision::CodesOnly),
            _ => Err(Error::invalid(
                format!("unknown precision {s:?}"),
                "use \"full\", \"half\" or \"int8\" (8-bit codes only)",
            )),
        }
    }
    pub fn bytes(self) -> usize {
        match self {
            Precision::Full => 4,
            Precision::Half => 2,
            Precision::CodesOnly => 1,
        }
    }
    fn from_u8(v: u8) -> Option<Precision> {
        match v {
            1 => Some(Precision::Full),
            2 => Some(Precision::Half),
            3 => Some(Precision::CodesOnly),
            _ => None,
        }
    }
}

/// Whether an index keeps 8-bit (or 4-bit) codes of its vectors (`crate::quant`). Fixed at
/// creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantization {
    None = 0,
    /// An 8-bit code per dimension beside the full vectors: searches walk the codes and
    /// rerank their best candidates on the vectors.
    Int8 = 1,
    /// A 4-bit code per dimension beside the full (or half) vectors, as `Int8` otherwise
    /// (`quant/nibbles.rs`). Written as format version 3, which builds before it refuse as
    /// newer than they read.
    Int4 = 2,
}

impl Quantization {
    pub fn name(self) -> Option<&'static str> {
        match self {
            Quantization::None => None,
            Quantization::Int8 => Some("int8"),
            Quantization::Int4 => Some("int4"),
        }
    }
    pub fn parse(s: Option<&str>) -> Result<Quantization> {
        match s {
            None | Some("none") => Ok(Quantization::None),
            Some("int8" | "i8" | "sq8" | "scalar") => Ok(Quantization::Int8),
            Some("int4" | "i4" | "sq4") => Ok(Quantization::Int4),
            Some(s) => Err(Error::invalid(
                format!("unknown quantization {s:?}"),
                "use \"int8\" (8-bit codes, reranked with the full vectors), \"int4\" (4-bit \
                 codes, half their size, reranked further) or None",
            )),
        }
    }
    /// Bits of a code: 8, 4, or 0 without codes.
    pub fn bits(self) -> u32 {
        match self {
            Quantization::None => 0,
            Quantization::Int8 => 8,
            Quantization::Int4 => 4,
        }
    }
    fn from_u8(v: u8) -> Option<Quantization> {
        match v {
            0 => Some(Quantization::None),
            1 => Some(Quantization::Int8),
            2 => Some(Quantization::Int4),
            _ => None,
        }
    }
}

pub const MAX_M: usize = 256;
/// The longest tail (`Header::linked`) a header may name: searches scan the tail whole, and a
/// writer links it once it holds `index::TAIL_MAX` rows, far fewer. A longer one is damage.
pub const MAX_TAIL: u64 = 1 << 16;
/// Most dimensions a vector may have.
pub const MAX_DIMS: usize = 1 << 16;
/// Highest layer a node may reach (the level draw is capped here).
pub const MAX_LEVEL: usize = 15;
/// Largest ef (and k) a header or a call may ask for.
pub const MAX_EF: usize = 1 << 24;
/// The highest commit sequence a writer commits or writes from: a delete marker carries the
/// next sequence in its top 48 bits (`delete_marker`), so sequences stop below 2^48 - 1 and
/// never wrap (2^48 flushes are 8,900 years at 1,000 flushes a second).
pub const MAX_WRITABLE_SEQ: u64 = (1 << 48) - 2;

#[cfg(target_endian = "big")]
compile_error!("the Chassis file format is little-endian; big-endian targets are not supported");

#[cfg(test)]
mod tests;
