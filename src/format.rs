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
//! linked the header goes back to its mode's version.
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
//! snapshot older than `seq` still sees the slot live.
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

use crate::error::{Error, ErrorKind, Result};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

pub const MAGIC: [u8; 8] = *b"CHASSIS\x1a";
/// The newest version this build writes and reads: a header whose last rows are not linked
/// yet (a tail, `Header::linked`), whatever its codes mode.
pub const FORMAT_VERSION: u32 = 4;
/// The version of files with 4-bit codes.
pub const FORMAT_VERSION_INT4: u32 = 3;
/// The version of files with 8-bit codes (and codes-only storage).
pub const FORMAT_VERSION_CODES: u32 = 2;
/// The version of files without codes, still written for them (older builds read it).
pub const FORMAT_VERSION_PLAIN: u32 = 1;
pub const HEADER_COPY_SIZE: usize = 64 * 1024;
/// Offset of the first region.
pub const DATA_START: u64 = 2 * HEADER_COPY_SIZE as u64;
/// Fixed part of a header copy; the region table follows it.
pub const HEADER_FIXED: usize = 128;
pub const REGION_ENTRY: usize = 24;
pub const MAX_REGIONS: usize = (HEADER_COPY_SIZE - HEADER_FIXED - 8) / REGION_ENTRY;
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
    /// 8-bit codes only (version 2, with `Quantization::Int8`): the stored vector is its code
    /// under the quantizer in effect, and distances are the codes'.
    Int8 = 3,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Full => "full",
            Precision::Half => "half",
            Precision::Int8 => "int8",
        }
    }
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "full" | "f32" | "float32" => Ok(Precision::Full),
            "half" | "f16" | "float16" => Ok(Precision::Half),
            "int8" | "i8" => Ok(Precision::Int8),
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
            Precision::Int8 => 1,
        }
    }
    fn from_u8(v: u8) -> Option<Precision> {
        match v {
            1 => Some(Precision::Full),
            2 => Some(Precision::Half),
            3 => Some(Precision::Int8),
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    Segment = 1,
    Heap = 2,
    /// A quantizer's stored form (`used`: its length).
    Quantizer = 3,
}

/// One entry of the region table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionEntry {
    pub kind: RegionKind,
    /// Heap chunks: bytes in use. Segments: 0.
    pub used: u32,
    pub offset: u64,
    pub len: u64,
}

/// One header copy, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub seq: u64,
    pub dims: u32,
    pub metric: Metric,
    pub precision: Precision,
    pub max_connections: u32,
    pub ef_construction: u32,
    pub ef_search: u32,
    pub page_size: u32,
    /// Committed slots (live and deleted).
    pub slots: u64,
    /// Committed live vectors.
    pub live: u64,
    /// Default id of the next add (max id + 1).
    pub next_id: u64,
    pub entry: u32,
    pub max_level: u32,
    pub user_version: u64,
    /// Version 2: whether the index keeps codes, and the file offset of the quantizer region
    /// in effect (0: not trained yet; searches walk the vectors).
    pub quantization: Quantization,
    pub quantizer: u64,
    /// Version 4: the slots below this are linked into the graph; the rest of the committed
    /// slots (the tail) are stored but not linked yet, and searches scan them. Equal to `slots`
    /// in every other version (where its bytes are zero).
    pub linked: u64,
    pub regions: Vec<RegionEntry>,
}

impl Header {
    /// The geometry of this header's segments: a codes area beside full or half vectors; a
    /// codes-only index's vectors are its codes.
    pub fn geometry(&self) -> Geometry {
        let g = Geometry::new(self.dims as usize, self.precision, self.max_connections as usize);
        if self.quantization == Quantization::None || self.precision == Precision::Int8 {
            g
        } else {
            g.with_codes(self.quantization.bits())
        }
    }

    /// The version this header is written as: 1 without codes, as before codes existed; 2
    /// with 8-bit codes; 3 with 4-bit codes.
    pub fn version(&self) -> u32 {
        if self.linked < self.slots {
            return FORMAT_VERSION;
        }
        version_of(self.quantization, self.quantizer)
    }

    /// Where region number `regions.len()` goes: after the last one, aligned.
    pub fn end_of_regions(&self) -> u64 {
        self.regions.last().map(|r| r.offset + r.len).unwrap_or(DATA_START)
    }

    pub fn encode(&self) -> Vec<u8> {
        let n = self.regions.len();
        let body = HEADER_FIXED + n * REGION_ENTRY;
        let mut b = vec![0u8; body + 8];
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, self.version());
        put_u32(&mut b, 12, body as u32);
        put_u64(&mut b, 16, self.seq);
        put_u32(&mut b, 24, self.dims);
        b[28] = self.metric as u8;
        b[29] = self.precision as u8;
        b[30] = self.quantization as u8;
        put_u64(&mut b, 96, self.quantizer);
        if self.linked < self.slots {
            put_u64(&mut b, 104, self.linked);
        }
        put_u32(&mut b, 32, self.max_connections);
        put_u32(&mut b, 36, self.ef_construction);
        put_u32(&mut b, 40, self.ef_search);
        put_u32(&mut b, 44, self.page_size);
        put_u64(&mut b, 48, self.slots);
        put_u64(&mut b, 56, self.live);
        put_u64(&mut b, 64, self.next_id);
        put_u32(&mut b, 72, self.entry);
        put_u32(&mut b, 76, self.max_level);
        put_u64(&mut b, 80, self.user_version);
        put_u32(&mut b, 88, n as u32);
        for (i, r) in self.regions.iter().enumerate() {
            let o = HEADER_FIXED + i * REGION_ENTRY;
            put_u32(&mut b, o, r.kind as u32);
            put_u32(&mut b, o + 4, r.used);
            put_u64(&mut b, o + 8, r.offset);
            put_u64(&mut b, o + 16, r.len);
        }
        let crc = xxh3_64(&b[..body]);
        put_u64(&mut b, body, crc);
        b
    }

    /// Decode one copy. `Err(why)` says what is wrong with it, for the report.
    pub fn decode(b: &[u8]) -> std::result::Result<Header, CopyDamage> {
        if b.len() < HEADER_FIXED + 8 || b[0..8] != MAGIC {
            return Err(CopyDamage::NoMagic);
        }
        let body = get_u32(b, 12) as usize;
        let n = get_u32(b, 88) as usize;
        if body < HEADER_FIXED
            || body + 8 > b.len()
            || n > MAX_REGIONS
            || body != HEADER_FIXED + n * REGION_ENTRY
        {
            return Err(CopyDamage::Checksum);
        }
        if xxh3_64(&b[..body]) != get_u64(b, body) {
            return Err(CopyDamage::Checksum);
        }
        let version = get_u32(b, 8);
        if !(FORMAT_VERSION_PLAIN..=FORMAT_VERSION).contains(&version) {
            return Err(CopyDamage::Version(version));
        }
        let bad = |what: &str| CopyDamage::Invalid(what.to_string());
        let metric = Metric::from_u8(b[28]).ok_or_else(|| bad("metric"))?;
        let precision = Precision::from_u8(b[29]).ok_or_else(|| bad("precision"))?;
        let quantization = Quantization::from_u8(b[30]).ok_or_else(|| bad("quantization"))?;
        let quantizer = get_u64(b, 96);
        // Version 1 has neither (its bytes were zero); version 2 is only written with 8-bit
        // codes, version 3 with 4-bit ones; version 4 (a tail) with any of them.
        if version != FORMAT_VERSION && version != version_of(quantization, quantizer) {
            return Err(bad("quantization for the format version"));
        }
        if precision == Precision::Int8 && quantization != Quantization::Int8 {
            return Err(bad("precision int8 without 8-bit codes"));
        }
        let mut regions = Vec::with_capacity(n);
        let mut end = DATA_START;
        for i in 0..n {
            let o = HEADER_FIXED + i * REGION_ENTRY;
            let kind = match get_u32(b, o) {
                1 => RegionKind::Segment,
                2 => RegionKind::Heap,
                3 => RegionKind::Quantizer,
                _ => return Err(bad("region kind")),
            };
            let r = RegionEntry {
                kind,
                used: get_u32(b, o + 4),
                offset: get_u64(b, o + 8),
                len: get_u64(b, o + 16),
            };
            if r.offset < end
                || !r.offset.is_multiple_of(REGION_ALIGN)
                || r.len == 0
                || (r.used as u64) > r.len
            {
                return Err(bad("region table"));
            }
            end = r.offset.checked_add(r.len).ok_or_else(|| bad("region table"))?;
            regions.push(r);
        }
        let h = Header {
            seq: get_u64(b, 16),
            dims: get_u32(b, 24),
            metric,
            precision,
            max_connections: get_u32(b, 32),
            ef_construction: get_u32(b, 36),
            ef_search: get_u32(b, 40),
            page_size: get_u32(b, 44),
            slots: get_u64(b, 48),
            live: get_u64(b, 56),
            next_id: get_u64(b, 64),
            entry: get_u32(b, 72),
            max_level: get_u32(b, 76),
            user_version: get_u64(b, 80),
            quantization,
            quantizer,
            linked: if version == FORMAT_VERSION { get_u64(b, 104) } else { get_u64(b, 48) },
            regions,
        };
        // Every field against what the rest of the header makes possible, before anything
        // uses it: a field out of range names itself (and a search never loops over it).
        let field = |name: &str, value: u64, limit: &str| {
            CopyDamage::Invalid(format!("{name}={value} ({limit})"))
        };
        if h.dims == 0 || h.dims as usize > MAX_DIMS {
            return Err(field("dims", h.dims as u64, &format!("must be 1 to {MAX_DIMS}")));
        }
        if h.max_connections < 2 || h.max_connections > MAX_M as u32 {
            let limit = format!("must be 2 to {MAX_M}");
            return Err(field("max_connections", h.max_connections as u64, &limit));
        }
        for (name, value) in [("ef_construction", h.ef_construction), ("ef_search", h.ef_search)] {
            if value as usize > MAX_EF {
                return Err(field(name, value as u64, &format!("must be at most {MAX_EF}")));
            }
        }
        // Version 4 is written only while there is a tail, and the graph it joins has a node.
        // Its entry point is a linked node (a walk from a tail row would find nothing).
        if version == FORMAT_VERSION
            && (h.linked == 0
                || h.linked >= h.slots
                || h.slots - h.linked > MAX_TAIL
                || h.entry as u64 >= h.linked)
        {
            let limit = format!(
                "a tail of 1 to {MAX_TAIL} slots must follow at least one linked slot, below {}, \
                 and the entry point {} must be linked",
                h.slots, h.entry
            );
            return Err(field("linked", h.linked, &limit));
        }
        if h.live > h.slots {
            let limit = format!("must be at most the slot count {}", h.slots);
            return Err(field("live", h.live, &limit));
        }
        // Live ids are distinct, so the largest is at least live - 1 and the next default id
        // at least live (a lower one would hand out ids in use).
        if h.next_id < h.live {
            let limit = format!("must be at least the live count {}", h.live);
            return Err(field("next_id", h.next_id, &limit));
        }
        if h.max_level as usize > MAX_LEVEL || (h.slots == 0 && h.max_level != 0) {
            let limit = format!("the top layer must be 0 to {MAX_LEVEL}, and 0 when empty");
            return Err(field("max_level", h.max_level as u64, &limit));
        }
        if h.quantizer != 0
            && (h.quantization == Quantization::None
                || !h.regions.iter().any(|r| {
                    r.kind == RegionKind::Quantizer && r.offset == h.quantizer && r.used > 0
                }))
        {
            let limit = "must be the offset of a quantizer region of an index with codes";
            return Err(field("quantizer", h.quantizer, limit));
        }
        // A codes-only index stores nothing before its quantizer: rows without one could not
        // be read (`get`) or searched.
        if h.precision == Precision::Int8 && h.slots > 0 && h.quantizer == 0 {
            let limit = "a codes-only index holds no rows before its quantizer is named";
            return Err(field("quantizer", 0, limit));
        }
        let geo = h.geometry();
        let segs = h.regions.iter().filter(|r| r.kind == RegionKind::Segment).count();
        if h.slots > geo.slots_in_segments(segs)
            || (h.slots > 0) != (h.entry != EMPTY)
            || (h.entry != EMPTY && h.entry as u64 >= h.slots)
        {
            let limit = format!(
                "the segments hold {} slots; the entry point {} must be below the slot count",
                geo.slots_in_segments(segs),
                h.entry
            );
            return Err(field("slots", h.slots, &limit));
        }
        Ok(h)
    }
}

/// Why one header copy cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyDamage {
    NoMagic,
    Checksum,
    Version(u32),
    Invalid(String),
}

impl std::fmt::Display for CopyDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyDamage::NoMagic => write!(f, "no Chassis magic"),
            CopyDamage::Checksum => write!(f, "checksum mismatch"),
            CopyDamage::Version(v) => {
                write!(f, "format version {v} (this build reads {FORMAT_VERSION_PLAIN} to {FORMAT_VERSION})")
            }
            CopyDamage::Invalid(what) => write!(f, "invalid {what}"),
        }
    }
}

/// The outcome of reading both header copies.
#[derive(Debug, Clone)]
pub struct HeaderChoice {
    pub header: Header,
    /// Which copy (0 or 1) is current.
    pub copy: usize,
    /// What is wrong with the other copy, if anything. A fresh file's second copy is valid.
    pub other_damage: Option<CopyDamage>,
}

/// Choose the current header from the first `2 * HEADER_COPY_SIZE` bytes of a file
/// (fewer if the file is shorter).
pub fn choose_header(bytes: &[u8], path: &std::path::Path) -> Result<HeaderChoice> {
    let copy = |i: usize| -> std::result::Result<Header, CopyDamage> {
        let start = i * HEADER_COPY_SIZE;
        if bytes.len() <= start {
            return Err(CopyDamage::NoMagic);
        }
        Header::decode(&bytes[start..bytes.len().min(start + HEADER_COPY_SIZE)])
    };
    let (a, b) = (copy(0), copy(1));
    let pick = match (&a, &b) {
        (Ok(x), Ok(y)) => Some(if y.seq > x.seq { 1 } else { 0 }),
        (Ok(_), Err(_)) => Some(0),
        (Err(_), Ok(_)) => Some(1),
        _ => None,
    };
    if let Some(i) = pick {
        let (h, other) = if i == 0 { (a.unwrap(), b) } else { (b.unwrap(), a) };
        return Ok(HeaderChoice { header: h, copy: i, other_damage: other.err() });
    }
    let (da, db) = (a.unwrap_err(), b.unwrap_err());
    let p = path.display();
    if bytes.len() < 8 || (da == CopyDamage::NoMagic && db == CopyDamage::NoMagic) {
        if bytes.is_empty() {
            return Err(Error::new(
                ErrorKind::NotAnIndex,
                format!("{p} is empty, not a Chassis index"),
                "pass the path of an index, or a new path to create one",
            ));
        }
        return Err(Error::new(
            ErrorKind::NotAnIndex,
            format!("{p} is not a Chassis index (no Chassis header)"),
            "pass the path of an index, or a new path to create one",
        ));
    }
    if let (CopyDamage::Version(v), _) | (_, CopyDamage::Version(v)) = (&da, &db) {
        if *v > FORMAT_VERSION {
            return Err(Error::new(ErrorKind::NotAnIndex,
                format!("{p} has Chassis format version {v}; this version of chassis reads up to {FORMAT_VERSION}"),
                "upgrade chassis-index to open it"));
        }
    }
    Err(Error::corrupt(format!("{p}: both header copies are damaged (copy 0: {da}; copy 1: {db})")))
}

/// The format version a header with this codes mode and quantizer offset is written as.
fn version_of(quantization: Quantization, quantizer: u64) -> u32 {
    match quantization {
        Quantization::None if quantizer == 0 => FORMAT_VERSION_PLAIN,
        Quantization::None | Quantization::Int8 => FORMAT_VERSION_CODES,
        Quantization::Int4 => FORMAT_VERSION_INT4,
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
            code_len: if precision == Precision::Int8 { dims } else { 0 },
            code_bits: 8,
        }
    }

    /// Whether the slots hold 8-bit codes: in a codes area, or as the vectors themselves.
    pub fn has_codes(&self) -> bool {
        self.code_stride > 0 || self.precision == Precision::Int8
    }

    /// Bytes from one slot's codes to the next: the codes area's rows, or, for a codes-only
    /// index (no codes area: `code_stride` 0), its vectors' rows, which are the codes.
    pub fn code_row_stride(&self) -> usize {
        if self.precision == Precision::Int8 {
            self.stride
        } else {
            self.code_stride
        }
    }

    /// This geometry with a codes area in every segment: one code of `bits` bits (8 or 4)
    /// per dimension, rows of whole 64-byte lines. Segment sizes stay those of the vectors.
    pub fn with_codes(mut self, bits: u32) -> Geometry {
        self.code_bits = bits;
        self.code_len = crate::quant::quantizer::code_len(self.dims, bits);
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

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// A stored vector's bytes as f32 values, into `out` (`dims` long).
pub fn decode_vector(bytes: &[u8], precision: Precision, out: &mut [f32]) {
    match precision {
        Precision::Full => out
            .iter_mut()
            .zip(bytes.chunks_exact(4))
            .for_each(|(o, c)| *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        Precision::Int8 => panic!("8-bit codes decode through their quantizer (Quantizer::decode)"),
        Precision::Half => {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            let n = out.len().min(bytes.len() / 2);
            // Stored vectors are 64-byte aligned: as u16s (the format is little-endian, and so is
            // every target it builds for) they convert in one pass
            // of the half crate's slice conversion (F16C, eight at a time, where the CPU has
            // it); one `to_f32` per element checked the CPU each time and made a build of a
            // half-precision index, which decodes every candidate, 1.2-1.6x as slow as full.
            if (bytes.as_ptr() as usize).is_multiple_of(2) {
                // SAFETY: n u16s lie within `bytes` (n <= bytes.len() / 2), the address is
                // 2-byte aligned, and every bit pattern is a valid u16.
                let bits = unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const u16, n) };
                bits.reinterpret_cast::<half::f16>().convert_to_f32_slice(&mut out[..n]);
            } else {
                out.iter_mut().zip(bytes.chunks_exact(2)).for_each(|(o, c)| {
                    *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()
                });
            }
        }
    }
}

/// Append the stored bytes of `v` at `precision` to `out` (half: rounded to nearest, as
/// `half::f16::from_f32`). Half converts through the half crate's slice conversion, 64 values
/// at a time, for the same reason `decode_vector` does.
pub fn encode_vector(v: &[f32], precision: Precision, out: &mut Vec<u8>) {
    match precision {
        Precision::Full => out.extend(v.iter().flat_map(|x| x.to_le_bytes())),
        Precision::Int8 => panic!("8-bit codes encode through their quantizer (Quantizer::encode)"),
        Precision::Half => {
            use half::slice::HalfFloatSliceExt;
            let mut h = [half::f16::ZERO; 64];
            for chunk in v.chunks(64) {
                let h = &mut h[..chunk.len()];
                h.convert_from_f32_slice(chunk);
                out.extend(h.iter().flat_map(|x| x.to_bits().to_le_bytes()));
            }
        }
    }
}

/// Checksum of a stored vector's bytes.
#[inline]
pub fn vector_crc(bytes: &[u8]) -> u32 {
    xxh3_64(bytes) as u32
}

/// Checksum of a slot header's fixed fields: id, upper reference, vector checksum.
#[inline]
pub fn header_crc(id: u64, upper: u64, vec_crc: u32) -> u32 {
    let mut b = [0u8; 20];
    b[0..8].copy_from_slice(&id.to_le_bytes());
    b[8..16].copy_from_slice(&upper.to_le_bytes());
    b[16..20].copy_from_slice(&vec_crc.to_le_bytes());
    xxh3_64(&b) as u32
}

/// The delete marker of `slot` for a delete committed by `seq`.
#[inline]
pub fn delete_marker(seq: u64, slot: u32) -> u64 {
    (seq << 16) | (xxh3_64_with_seed(&seq.to_le_bytes(), slot as u64) & 0xffff)
}

/// What a delete marker says: live, deleted by commit `seq`, or damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Live,
    Deleted(u64),
    Damaged,
}

#[inline]
pub fn read_marker(word: u64, slot: u32) -> Marker {
    if word == 0 {
        return Marker::Live;
    }
    let seq = word >> 16;
    if delete_marker(seq, slot) == word {
        Marker::Deleted(seq)
    } else {
        Marker::Damaged
    }
}

/// Checksum of a neighbor list: its head word and its `count` entries, seeded with the slot
/// and layer so that a list copied to the wrong place fails too.
#[inline]
pub fn list_crc(slot: u32, layer: usize, head: u32, entries: &[u32]) -> u32 {
    let mut buf = [0u8; 4 * (2 * MAX_M + 1)];
    buf[0..4].copy_from_slice(&head.to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        buf[4 + 4 * i..8 + 4 * i].copy_from_slice(&e.to_le_bytes());
    }
    xxh3_64_with_seed(&buf[..4 + 4 * entries.len()], ((slot as u64) << 8) | layer as u64) as u32
}

/// Bit 24 of a level-0 head: the slot is one of a batch laid out by locality (locality.rs)
/// whose ids rose in the order its rows came, so a run of such slots is in insertion order when
/// sorted by id (`Index::ids`). Kept by every rewrite of the list.
pub const L0_LOCALITY: u32 = 1 << 24;

/// Level-0 head word: count in the low 16 bits, level in bits 16..24.
#[inline]
pub fn l0_head(count: usize, level: usize) -> u32 {
    (count as u32 & 0xffff) | ((level as u32) << 16)
}

#[inline]
pub fn heap_ref(chunk: usize, offset: u64) -> u64 {
    ((chunk as u64) << 40) | offset
}

#[inline]
pub fn heap_ref_parts(r: u64) -> (usize, u64) {
    ((r >> 40) as usize, r & ((1 << 40) - 1))
}

fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn get_u64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

#[cfg(target_endian = "big")]
compile_error!("the Chassis file format is little-endian; big-endian targets are not supported");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_vectors_decode_like_one_value_at_a_time_at_any_alignment_and_length() {
        // Every f16 bit pattern, decoded from an even address (the slice conversion) and from
        // an odd one (element by element), against half's own per-value conversion.
        let bits: Vec<u16> = (0..=u16::MAX).collect();
        let mut buf = vec![0u8; bits.len() * 2 + 1];
        for odd in [0usize, 1] {
            let bytes = &mut buf[odd..odd + bits.len() * 2];
            for (c, b) in bytes.chunks_exact_mut(2).zip(&bits) {
                c.copy_from_slice(&b.to_le_bytes());
            }
            for len in [bits.len(), 1, 7, 9, 383] {
                let mut out = vec![0f32; len];
                decode_vector(&bytes[..len * 2], Precision::Half, &mut out);
                for (o, b) in out.iter().zip(&bits) {
                    let want = half::f16::from_bits(*b).to_f32();
                    assert!(
                        o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()),
                        "bits {b:#06x}: {o} against {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn half_vectors_encode_like_one_value_at_a_time_and_round_trip() {
        // Every finite f16 value (exact), and values between them and around the range's
        // ends (rounded), against half's own per-value conversion; chunk edges included.
        let mut v: Vec<f32> = (0..=u16::MAX)
            .map(half::f16::from_bits)
            .filter(|h| h.is_finite())
            .map(|h| h.to_f32())
            .collect();
        let exact = v.len();
        let mut x = 0x2545_f491u32;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push((x as f32 / u32::MAX as f32 - 0.5) * 131_000.0);
            v.push(f32::from_bits(x & 0x3fff_ffff) * if x & 1 == 1 { 1.0 } else { -1.0 });
        }
        for len in [v.len(), 1, 63, 64, 65, 383] {
            let mut out = Vec::new();
            encode_vector(&v[..len], Precision::Half, &mut out);
            assert_eq!(out.len(), len * 2);
            for (c, x) in out.chunks_exact(2).zip(&v[..len]) {
                assert_eq!(
                    u16::from_le_bytes([c[0], c[1]]),
                    half::f16::from_f32(*x).to_bits(),
                    "{x}"
                );
            }
        }
        let mut out = Vec::new();
        encode_vector(&v[..exact], Precision::Half, &mut out);
        let mut back = vec![0f32; exact];
        decode_vector(&out, Precision::Half, &mut back);
        assert!(back.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    fn sample() -> Header {
        Header {
            seq: 7,
            dims: 128,
            metric: Metric::Cosine,
            precision: Precision::Half,
            max_connections: 16,
            ef_construction: 200,
            ef_search: 50,
            page_size: 4096,
            slots: 1500,
            live: 1500,
            next_id: 1500,
            entry: 3,
            max_level: 2,
            user_version: 9,
            quantization: Quantization::None,
            quantizer: 0,
            linked: 1500,
            regions: vec![
                RegionEntry {
                    kind: RegionKind::Segment,
                    used: 0,
                    offset: DATA_START,
                    len: 4 * REGION_ALIGN,
                },
                RegionEntry {
                    kind: RegionKind::Heap,
                    used: 100,
                    offset: DATA_START + 4 * REGION_ALIGN,
                    len: REGION_ALIGN,
                },
                RegionEntry {
                    kind: RegionKind::Segment,
                    used: 0,
                    offset: DATA_START + 5 * REGION_ALIGN,
                    len: 8 * REGION_ALIGN,
                },
            ],
        }
    }

    #[test]
    fn a_codes_only_header_with_rows_and_no_quantizer_is_refused() {
        let mut h = sample();
        (h.precision, h.quantization) = (Precision::Int8, Quantization::Int8);
        let e = Header::decode(&h.encode()).unwrap_err();
        assert!(matches!(&e, CopyDamage::Invalid(w) if w.contains("quantizer")), "{e:?}");
        (h.slots, h.linked) = (0, 0);
        (h.live, h.next_id, h.entry, h.max_level) = (0, 0, EMPTY, 0);
        assert_eq!(Header::decode(&h.encode()).unwrap(), h, "empty: nothing to read yet");
    }

    /// `Storage::read_header_bytes` reads the first page of each copy and the rest of a copy
    /// only when its region table runs past it: a table of 300 regions in either copy, beside
    /// a short one in the other, decodes as written; cut short, it is refused, not misread.
    #[test]
    fn a_region_table_past_the_first_page_is_read_whole() {
        let short = sample();
        let mut long = sample();
        long.seq = 8;
        let mut at = DATA_START + 13 * REGION_ALIGN;
        while long.regions.len() < 300 {
            long.regions.push(RegionEntry {
                kind: RegionKind::Heap,
                used: 8,
                offset: at,
                len: REGION_ALIGN,
            });
            at += REGION_ALIGN;
        }
        assert!(long.encode().len() > 4096 && short.encode().len() < 4096);
        let path = std::path::Path::new("h");
        for (first, second, cut) in [
            (&long, &short, None),
            (&short, &long, None),
            (&short, &long, Some(HEADER_COPY_SIZE + 5000)),
        ] {
            let mut bytes = vec![0u8; 2 * HEADER_COPY_SIZE + 4096];
            let (a, b) = (first.encode(), second.encode());
            bytes[..a.len()].copy_from_slice(&a);
            bytes[HEADER_COPY_SIZE..HEADER_COPY_SIZE + b.len()].copy_from_slice(&b);
            bytes.truncate(cut.unwrap_or(bytes.len()));
            let f = tempfile::tempfile().unwrap();
            crate::os::write_all_at(&f, &bytes, 0).unwrap();
            let read = crate::storage::Storage::read_header_bytes(&f, path).unwrap();
            let choice = choose_header(&read, path).unwrap();
            if cut.is_none() {
                assert_eq!(choice.header, long);
                assert!(choice.other_damage.is_none());
            } else {
                // The long copy's table is cut: its checksum fails and the other is used.
                assert_eq!(choice.header, short);
                assert!(choice.other_damage.is_some());
            }
        }
    }

    #[test]
    fn header_round_trips() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn any_flipped_byte_fails_the_checksum() {
        let b = sample().encode();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(Header::decode(&c).is_err(), "flip at {i} accepted");
        }
    }

    fn file_with(a: Option<&Header>, b: Option<&Header>) -> Vec<u8> {
        let mut f = vec![0u8; 2 * HEADER_COPY_SIZE];
        if let Some(a) = a {
            let e = a.encode();
            f[..e.len()].copy_from_slice(&e);
        }
        if let Some(b) = b {
            let e = b.encode();
            f[HEADER_COPY_SIZE..HEADER_COPY_SIZE + e.len()].copy_from_slice(&e);
        }
        f
    }

    #[test]
    fn newest_valid_copy_wins_and_damage_is_reported() {
        let old = sample();
        let mut new = sample();
        new.seq = 8;
        new.slots = 1600;
        let p = std::path::Path::new("x");
        let c = choose_header(&file_with(Some(&old), Some(&new)), p).unwrap();
        assert_eq!((c.copy, c.header.seq, c.other_damage), (1, 8, None));
        let mut f = file_with(Some(&old), Some(&new));
        f[HEADER_COPY_SIZE + 20] ^= 1; // damage the newest copy's seq
        let c = choose_header(&f, p).unwrap();
        assert_eq!((c.copy, c.header.seq), (0, 7));
        assert_eq!(c.other_damage, Some(CopyDamage::Checksum));
    }

    #[test]
    fn damaged_version_in_one_copy_leaves_the_other_usable() {
        let old = sample();
        let mut new = sample();
        new.seq = 8;
        let mut f = file_with(Some(&old), Some(&new));
        f[8] = 0xee; // copy 0's version field
        let c = choose_header(&f, std::path::Path::new("x")).unwrap();
        assert_eq!(c.header.seq, 8);
        assert!(c.other_damage.is_some());
    }

    /// Rewrite a header copy's checksum after a field was changed on purpose.
    fn rechecksum(b: &mut [u8]) {
        let body = get_u32(b, 12) as usize;
        let sum = xxh3_64(&b[..body]);
        put_u64(b, body, sum);
    }

    #[test]
    fn each_codes_mode_is_written_as_its_version_and_a_mismatch_is_damage() {
        // Oracle: the table of docs/format.md (1 without codes, 2 with 8-bit, 3 with 4-bit).
        for (quantization, version) in
            [(Quantization::None, 1), (Quantization::Int8, 2), (Quantization::Int4, 3)]
        {
            let h = Header { quantization, ..sample() };
            let e = h.encode();
            assert_eq!(get_u32(&e, 8), version, "{quantization:?}");
            assert_eq!(Header::decode(&e).unwrap(), h);
            // A version of another codes mode, checksum made good: that copy is damaged.
            for other in (1..=FORMAT_VERSION).filter(|&v| v != version) {
                let mut b = e.clone();
                put_u32(&mut b, 8, other);
                rechecksum(&mut b);
                assert!(
                    matches!(Header::decode(&b), Err(CopyDamage::Invalid(_))),
                    "{quantization:?} as version {other}"
                );
            }
        }
        // Newer than this build reads, in both copies: not an index it can open, and the
        // message asks for an upgrade (what a build before 4-bit codes says of version 3).
        let mut f = file_with(Some(&sample()), Some(&sample()));
        for c in [0, HEADER_COPY_SIZE] {
            put_u32(&mut f[c..], 8, FORMAT_VERSION + 1);
            rechecksum(&mut f[c..]);
        }
        let e = choose_header(&f, std::path::Path::new("x")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotAnIndex);
        assert!(e.message.contains(&format!("version {}", FORMAT_VERSION + 1)), "{}", e.message);
        assert!(e.help.contains("upgrade"), "{}", e.help);
    }

    #[test]
    fn a_tail_is_written_as_version_4_in_every_codes_mode_and_a_bad_one_is_damage() {
        // Oracle: docs/format.md (version 4 while linked < slots, linked at bytes 104..112;
        // the mode's version, those bytes zero, once the tail is linked).
        for quantization in [Quantization::None, Quantization::Int8, Quantization::Int4] {
            let h = Header { quantization, linked: 1400, ..sample() };
            let e = h.encode();
            assert_eq!((get_u32(&e, 8), get_u64(&e, 104)), (4, 1400), "{quantization:?}");
            assert_eq!(Header::decode(&e).unwrap(), h);
            let whole = Header { quantization, ..sample() }.encode();
            assert!(get_u32(&whole, 8) < 4 && get_u64(&whole, 104) == 0, "{quantization:?}");
            // No tail, no graph before it, a tail past the slots, or one holding the entry
            // point (3): that copy is damaged.
            for bad in [0, 1500, 1501, u64::MAX, 3] {
                let mut b = e.clone();
                put_u64(&mut b, 104, bad);
                rechecksum(&mut b);
                assert!(
                    matches!(Header::decode(&b), Err(CopyDamage::Invalid(w)) if w.contains("linked")),
                    "{quantization:?} linked={bad}"
                );
            }
        }
    }

    #[test]
    fn both_copies_damaged_is_corrupt_and_no_magic_is_not_an_index() {
        let h = sample();
        let mut f = file_with(Some(&h), Some(&h));
        f[30] ^= 1;
        f[HEADER_COPY_SIZE + 30] ^= 1;
        let e = choose_header(&f, std::path::Path::new("x")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::CorruptIndex);
        let e = choose_header(b"hello world", std::path::Path::new("x")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotAnIndex);
        let e = choose_header(b"", std::path::Path::new("x")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotAnIndex);
    }

    #[test]
    fn segments_double_then_stay_at_the_cap_and_locate_agrees() {
        let g = Geometry::new(128, Precision::Full, 16); // 512-byte stride: cap 2^19 slots
        assert_eq!(g.stride, 512);
        assert_eq!(g.cap_slots, 1 << 19);
        let mut start = 0u64;
        for k in 0..14 {
            let n = g.segment_slots(k);
            assert_eq!(g.locate(start), (k, 0), "first slot of segment {k}");
            assert_eq!(g.locate(start + n - 1), (k, n - 1), "last slot of segment {k}");
            start += n;
        }
        assert_eq!(g.slots_in_segments(14), start);
    }

    /// The last slots below 2^32 (slots are u32; `EMPTY` is u32::MAX), for every stride: the
    /// segment and place `locate` gives add back up to the slot, with u64 offsets. The oracle
    /// is the sum of the segments' sizes. Also how many segments 2^32 - 2 slots take against
    /// the region table's room: short vectors reach the slot limit first, long ones the table
    /// (`Storage::full`, about 355 million vectors of 384 float32 dimensions).
    #[test]
    fn locate_agrees_at_the_32_bit_slot_limit() {
        let last = u32::MAX as u64 - 2;
        for dims in [1usize, 4, 16, 32, 100, 384, 1536] {
            for p in [Precision::Full, Precision::Half, Precision::Int8] {
                let g = Geometry::new(dims, p, 16);
                for slot in [(1u64 << 31) - 1, 1 << 31, last - 1, last] {
                    let (k, local) = g.locate(slot);
                    assert!(local < g.segment_slots(k), "dims {dims} {p:?} slot {slot}");
                    assert_eq!(g.slots_in_segments(k) + local, slot, "dims {dims} {p:?}");
                }
                let needed = g.locate(last).0 + 1;
                let layout = g.segment_layout(g.cap_slots);
                assert!(layout.len > g.cap_slots * g.stride as u64);
                if dims == 384 && p == Precision::Full {
                    assert!(needed > MAX_REGIONS, "{needed} segments");
                    let most = g.slots_in_segments(MAX_REGIONS);
                    assert!((350_000_000..360_000_000).contains(&most), "{most}");
                }
                // Up to 128 bytes a vector, every slot fits the table (with room for heaps).
                if g.stride <= 128 {
                    assert!(needed + 100 < MAX_REGIONS, "dims {dims} {p:?}: {needed} segments");
                }
            }
        }
    }

    #[test]
    fn stride_is_64_byte_aligned_and_big_segments_start_on_huge_pages() {
        for dims in [1usize, 3, 15, 16, 17, 100, 384, 1536] {
            for p in [Precision::Full, Precision::Half] {
                let g = Geometry::new(dims, p, 16);
                assert!(g.stride >= g.vec_bytes);
                if g.vec_bytes >= 64 {
                    assert_eq!(g.stride % 64, 0);
                } else {
                    assert!(g.stride.is_power_of_two());
                }
                let slots = g.cap_slots;
                assert_eq!(g.segment_start(DATA_START + 1, slots) % HUGE_PAGE, 0);
                let l = g.segment_layout(slots);
                assert!(
                    l.headers >= slots * g.stride as u64
                        && l.l0 > l.headers
                        && l.len.is_multiple_of(REGION_ALIGN)
                );
            }
        }
    }

    #[test]
    fn delete_markers_round_trip_and_flips_are_damage() {
        let m = delete_marker(42, 7);
        assert_eq!(read_marker(m, 7), Marker::Deleted(42));
        assert_eq!(read_marker(0, 7), Marker::Live);
        assert_eq!(read_marker(m, 8), Marker::Damaged, "a marker copied to another slot");
        for bit in 0..64 {
            assert_ne!(read_marker(m ^ (1 << bit), 7), Marker::Deleted(42), "flip of bit {bit}");
        }
    }

    #[test]
    fn list_crc_depends_on_place_and_content() {
        let a = list_crc(5, 0, l0_head(2, 1), &[1, 2]);
        assert_ne!(a, list_crc(6, 0, l0_head(2, 1), &[1, 2]));
        assert_ne!(a, list_crc(5, 1, l0_head(2, 1), &[1, 2]));
        assert_ne!(a, list_crc(5, 0, l0_head(2, 1), &[2, 1]));
        assert_eq!(a, list_crc(5, 0, l0_head(2, 1), &[1, 2]));
    }

    /// With codes: `[codes | vectors | headers | l0]` without overlap, codes and vectors on
    /// 64-byte lines, the codes area ending on a 2 MiB boundary whenever the vectors fill a
    /// huge page; without codes, the layout of format version 1 (computed here as it was).
    #[test]
    fn segment_layout_with_codes_keeps_every_area_apart_and_aligned() {
        for (dims, precision) in [
            (16, Precision::Full),
            (384, Precision::Full),
            (384, Precision::Half),
            (1536, Precision::Full),
            (100, Precision::Full),
        ] {
            let plain = Geometry::new(dims, precision, 16);
            // 4-bit codes: 16 bytes per 32 dimensions, in whole lines
            let half = plain.with_codes(4);
            assert_eq!((half.code_len, half.code_bits), (16 * dims.div_ceil(32), 4));
            assert!(half.code_stride.is_multiple_of(64) && half.code_stride >= half.code_len);
            assert!(half.code_stride < half.code_len + 64);
            let coded = plain.with_codes(8);
            assert_eq!((coded.code_len, coded.code_bits), (dims, 8));
            assert_eq!(coded.code_stride % 64, 0);
            assert!(coded.code_stride >= dims && coded.code_stride < dims + 64);
            for k in 0..12 {
                let slots = plain.segment_slots(k);
                // version 1, as it was: vectors first
                let p = plain.segment_layout(slots);
                let headers = align_up(slots * plain.stride as u64, 4096);
                let l0 = align_up(headers + slots * SLOT_HEADER as u64, 4096);
                assert_eq!((p.codes, p.vectors, p.headers, p.l0), (0, 0, headers, l0));
                let c = coded.segment_layout(slots);
                assert_eq!(c.codes, 0);
                assert!(c.vectors >= slots * coded.code_stride as u64);
                assert!(c.headers >= c.vectors + slots * coded.stride as u64);
                assert!(c.l0 >= c.headers + slots * SLOT_HEADER as u64);
                assert!(c.len >= c.l0 + slots * coded.l0_words as u64 * 4);
                assert_eq!(c.vectors % 64, 0);
                if slots * coded.stride as u64 >= HUGE_PAGE {
                    assert_eq!(c.vectors % HUGE_PAGE, 0, "dims {dims} segment {k}");
                    assert_eq!(coded.segment_start(DATA_START + 1, slots) % HUGE_PAGE, 0);
                }
            }
        }
    }
}
