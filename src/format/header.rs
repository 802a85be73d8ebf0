//! One header copy: its byte layout beside its constants, encode, decode, and the choice
//! between the two copies.

use super::*;
use xxhash_rust::xxh3::xxh3_64;

pub const MAGIC: [u8; 8] = *b"CHASSIS\x1a";
/// The newest version this build writes and reads: a file whose slots were reused (rows
/// marked with the commit they are visible from, `format::born_marker`), whatever its codes
/// mode and whether it has a tail; it stays version 5 from its first reuse on.
pub const FORMAT_VERSION: u32 = 5;
/// A header whose last rows are not linked yet (a tail, `Header::linked`), whatever its codes
/// mode, in a file whose slots were never reused.
pub const FORMAT_VERSION_TAIL: u32 = 4;
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

/// Byte offsets of a header copy's fixed fields (all little-endian; the region table follows
/// at [`HEADER_FIXED`], [`REGION_ENTRY`] bytes an entry: kind u32, used u32, offset u64,
/// len u64; then the checksum, xxh3 of everything before it, at the body length).
///
/// ```text
/// 0 magic[8] | 8 version u32 | 12 body length u32 | 16 seq u64 | 24 dims u32 | 28 metric u8 |
/// 29 precision u8 | 30 quantization u8 | 31 flags u8 | 32 M u32 | 36 ef_construction u32 |
/// 40 ef_search u32 |
/// 44 page size u32 | 48 slots u64 | 56 live u64 | 64 next id u64 | 72 entry u32 |
/// 76 max level u32 | 80 user version u64 | 88 regions u32 | 96 quantizer offset u64 |
/// 104 linked u64 (versions 4 and 5)
/// ```
pub mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const BODY_LEN: usize = 12;
    pub const SEQ: usize = 16;
    pub const DIMS: usize = 24;
    pub const METRIC: usize = 28;
    pub const PRECISION: usize = 29;
    pub const QUANTIZATION: usize = 30;
    pub const FLAGS: usize = 31;
    pub const MAX_CONNECTIONS: usize = 32;
    pub const EF_CONSTRUCTION: usize = 36;
    pub const EF_SEARCH: usize = 40;
    pub const PAGE_SIZE: usize = 44;
    pub const SLOTS: usize = 48;
    pub const LIVE: usize = 56;
    pub const NEXT_ID: usize = 64;
    pub const ENTRY: usize = 72;
    pub const MAX_LEVEL: usize = 76;
    pub const USER_VERSION: usize = 80;
    pub const REGIONS: usize = 88;
    pub const QUANTIZER: usize = 96;
    pub const LINKED: usize = 104;
}

/// Bit of the flags byte: no row deleted by this commit is left in a list (a consolidation
/// took every one out), so walks of this commit need not check the nodes they meet
/// (`Snap::hides`). A hint only: a search that meets a hidden row anyway runs again, checking.
/// Zero in files of builds from before it, whatever their version, and when unsure.
pub const FLAG_LISTS_CLEAN: u8 = 1;

/// Bytes a header copy takes as written (body and checksum), from its first 16 bytes: what to
/// read of it. None when `head` is shorter than that or carries no magic.
pub fn copy_len(head: &[u8]) -> Option<usize> {
    if head.get(at::MAGIC..at::MAGIC + 8)? != MAGIC {
        return None;
    }
    let body = u32::from_le_bytes(head.get(at::BODY_LEN..at::BODY_LEN + 4)?.try_into().ok()?);
    (body as usize).checked_add(8)
}

/// The sequence number a header copy's first 24 bytes claim, unchecked (the checksum is checked
/// when the copy is decoded). None when `head` is shorter or carries no magic.
pub fn copy_seq(head: &[u8]) -> Option<u64> {
    if head.get(at::MAGIC..at::MAGIC + 8)? != MAGIC {
        return None;
    }
    Some(u64::from_le_bytes(head.get(at::SEQ..at::SEQ + 8)?.try_into().ok()?))
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
    /// Versions 4 and 5: the slots below this are linked into the graph; the rest of the
    /// committed slots (the tail) are stored but not linked yet, and searches scan them. Equal
    /// to `slots` in every other version (where its bytes are zero).
    pub linked: u64,
    /// Version 5: slots of deleted rows were reused, and rows carry the commit they are
    /// visible from (`format::born_marker`).
    pub reused: bool,
    /// [`FLAG_LISTS_CLEAN`]: no deleted row is left in a list.
    pub lists_clean: bool,
    pub regions: Vec<RegionEntry>,
}

impl Header {
    /// The geometry of this header's segments: a codes area beside full or half vectors; a
    /// codes-only index's vectors are its codes.
    pub fn geometry(&self) -> Geometry {
        let g = Geometry::new(self.dims as usize, self.precision, self.max_connections as usize);
        if self.quantization == Quantization::None || self.precision == Precision::CodesOnly {
            g
        } else {
            g.with_codes(self.quantization.bits())
        }
    }

    /// The version this header is written as: 1 without codes, as before codes existed; 2
    /// with 8-bit codes; 3 with 4-bit codes.
    pub fn version(&self) -> u32 {
        if self.reused {
            return FORMAT_VERSION;
        }
        if self.linked < self.slots {
            return FORMAT_VERSION_TAIL;
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
        b[at::MAGIC..at::MAGIC + 8].copy_from_slice(&MAGIC);
        put_u32(&mut b, at::VERSION, self.version());
        put_u32(&mut b, at::BODY_LEN, body as u32);
        put_u64(&mut b, at::SEQ, self.seq);
        put_u32(&mut b, at::DIMS, self.dims);
        b[at::METRIC] = self.metric as u8;
        b[at::PRECISION] = self.precision as u8;
        b[at::QUANTIZATION] = self.quantization as u8;
        b[at::FLAGS] = if self.lists_clean { FLAG_LISTS_CLEAN } else { 0 };
        put_u64(&mut b, at::QUANTIZER, self.quantizer);
        if self.linked < self.slots || self.reused {
            put_u64(&mut b, at::LINKED, self.linked);
        }
        put_u32(&mut b, at::MAX_CONNECTIONS, self.max_connections);
        put_u32(&mut b, at::EF_CONSTRUCTION, self.ef_construction);
        put_u32(&mut b, at::EF_SEARCH, self.ef_search);
        put_u32(&mut b, at::PAGE_SIZE, self.page_size);
        put_u64(&mut b, at::SLOTS, self.slots);
        put_u64(&mut b, at::LIVE, self.live);
        put_u64(&mut b, at::NEXT_ID, self.next_id);
        put_u32(&mut b, at::ENTRY, self.entry);
        put_u32(&mut b, at::MAX_LEVEL, self.max_level);
        put_u64(&mut b, at::USER_VERSION, self.user_version);
        put_u32(&mut b, at::REGIONS, n as u32);
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
        if b.len() < HEADER_FIXED + 8 || b[at::MAGIC..at::MAGIC + 8] != MAGIC {
            return Err(CopyDamage::NoMagic);
        }
        let body = get_u32(b, at::BODY_LEN) as usize;
        let n = get_u32(b, at::REGIONS) as usize;
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
        let version = get_u32(b, at::VERSION);
        if !(FORMAT_VERSION_PLAIN..=FORMAT_VERSION).contains(&version) {
            return Err(CopyDamage::Version(version));
        }
        let bad = |what: &str| CopyDamage::Invalid(what.to_string());
        let metric = Metric::from_u8(b[at::METRIC]).ok_or_else(|| bad("metric"))?;
        let precision = Precision::from_u8(b[at::PRECISION]).ok_or_else(|| bad("precision"))?;
        let quantization =
            Quantization::from_u8(b[at::QUANTIZATION]).ok_or_else(|| bad("quantization"))?;
        let quantizer = get_u64(b, at::QUANTIZER);
        // Version 1 has neither (its bytes were zero); version 2 is only written with 8-bit
        // codes, version 3 with 4-bit ones; version 4 (a tail) with any of them.
        if version < FORMAT_VERSION_TAIL && version != version_of(quantization, quantizer) {
            return Err(bad("quantization for the format version"));
        }
        if precision == Precision::CodesOnly && quantization != Quantization::Int8 {
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
            seq: get_u64(b, at::SEQ),
            dims: get_u32(b, at::DIMS),
            metric,
            precision,
            max_connections: get_u32(b, at::MAX_CONNECTIONS),
            ef_construction: get_u32(b, at::EF_CONSTRUCTION),
            ef_search: get_u32(b, at::EF_SEARCH),
            page_size: get_u32(b, at::PAGE_SIZE),
            slots: get_u64(b, at::SLOTS),
            live: get_u64(b, at::LIVE),
            next_id: get_u64(b, at::NEXT_ID),
            entry: get_u32(b, at::ENTRY),
            max_level: get_u32(b, at::MAX_LEVEL),
            user_version: get_u64(b, at::USER_VERSION),
            quantization,
            quantizer,
            linked: if version >= FORMAT_VERSION_TAIL {
                get_u64(b, at::LINKED)
            } else {
                get_u64(b, at::SLOTS)
            },
            reused: version == FORMAT_VERSION,
            // Other bits are left for later builds to give meaning to.
            lists_clean: b[at::FLAGS] & FLAG_LISTS_CLEAN != 0,
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
        if version == FORMAT_VERSION_TAIL
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
        // Version 5 may have a tail or none; a tail as version 4's.
        if version == FORMAT_VERSION
            && h.linked < h.slots
            && (h.linked == 0 || h.slots - h.linked > MAX_TAIL || h.entry as u64 >= h.linked)
        {
            let limit = format!(
                "a tail of at most {MAX_TAIL} slots must follow at least one linked slot, below \
                 {}, and the entry point {} must be linked",
                h.slots, h.entry
            );
            return Err(field("linked", h.linked, &limit));
        }
        if version == FORMAT_VERSION && h.linked > h.slots {
            let limit = format!("must be at most the slot count {}", h.slots);
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
        if h.precision == Precision::CodesOnly && h.slots > 0 && h.quantizer == 0 {
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

pub(crate) fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn get_u32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
pub(crate) fn get_u64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
