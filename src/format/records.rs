//! The words of stored records: vectors, slot headers and their checksums, delete markers,
//! neighbor lists and heap references.

use super::*;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// A stored vector's bytes as f32 values, into `out` (`dims` long).
pub fn decode_vector(bytes: &[u8], precision: Precision, out: &mut [f32]) {
    match precision {
        Precision::Full => out
            .iter_mut()
            .zip(bytes.chunks_exact(4))
            .for_each(|(o, c)| *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        Precision::CodesOnly => {
            panic!("8-bit codes decode through their quantizer (Quantizer::decode)")
        }
        Precision::Half => {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            let n = out.len().min(bytes.len() / 2);
            // Stored vectors are 64-byte aligned: as u16s (the format is little-endian, and so is
            // every target it builds for) they convert in one pass
            // of the half crate's slice conversion (F16C, eight at a time, where the CPU has
            // it); one `to_f32` per element checks the CPU each time, which slows a build of a
            // half-precision index, whose every candidate is decoded (measured:
            // `docs/design/search-path.md`).
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
        Precision::CodesOnly => {
            panic!("8-bit codes encode through their quantizer (Quantizer::encode)")
        }
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

/// The marker of a row stored into `slot` for commit `seq` in a version-5 file (one that
/// reuses slots): the row is visible to snapshots of `seq` and later only. Its check is the
/// delete marker's with bits flipped, so the two never coincide.
#[inline]
pub fn born_marker(seq: u64, slot: u32) -> u64 {
    delete_marker(seq, slot) ^ BORN_FLIP
}
const BORN_FLIP: u64 = 0x5a5a;

/// What a marker says: live, deleted by commit `seq`, live from commit `seq` (a version-5
/// file's rows), or damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Live,
    Deleted(u64),
    Born(u64),
    Damaged,
}

#[inline]
pub fn read_marker(word: u64, slot: u32) -> Marker {
    if word == 0 {
        return Marker::Live;
    }
    let seq = word >> 16;
    let deleted = delete_marker(seq, slot);
    if deleted == word {
        Marker::Deleted(seq)
    } else if deleted ^ BORN_FLIP == word {
        Marker::Born(seq)
    } else {
        Marker::Damaged
    }
}

impl Marker {
    /// Whether the slot's row is visible to a snapshot that counts deletes committed by
    /// `del_visible` or earlier (a reader's own commit; a writer's next one) and rows born by
    /// `born_visible` or earlier.
    #[inline]
    pub fn visible(self, del_visible: u64, born_visible: u64) -> bool {
        match self {
            Marker::Live => true,
            Marker::Deleted(seq) => seq > del_visible,
            Marker::Born(seq) => seq <= born_visible,
            Marker::Damaged => false,
        }
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
