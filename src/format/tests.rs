use super::*;
use xxhash_rust::xxh3::xxh3_64;

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
            assert_eq!(u16::from_le_bytes([c[0], c[1]]), half::f16::from_f32(*x).to_bits(), "{x}");
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
        reused: false,
        lists_clean: false,
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
    (h.precision, h.quantization) = (Precision::CodesOnly, Quantization::Int8);
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
        for p in [Precision::Full, Precision::Half, Precision::CodesOnly] {
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
fn born_markers_round_trip_never_read_as_deletes_and_set_visibility() {
    // Oracle: the definitions (visible from commit `seq` on; a delete's visible until then).
    for (seq, slot) in [(2u64, 0u32), (42, 7), ((1 << 48) - 2, u32::MAX - 1)] {
        let b = born_marker(seq, slot);
        assert_eq!(read_marker(b, slot), Marker::Born(seq));
        assert_ne!(b, delete_marker(seq, slot));
        assert_eq!(read_marker(b, slot ^ 1), Marker::Damaged, "copied to another slot");
        for bit in 0..64 {
            assert_ne!(read_marker(b ^ (1 << bit), slot), Marker::Born(seq), "flip of bit {bit}");
        }
    }
    let (born, gone) = (Marker::Born(10), Marker::Deleted(10));
    assert!(!born.visible(u64::MAX, 9) && born.visible(0, 10) && born.visible(0, 11));
    assert!(gone.visible(9, 0) && !gone.visible(10, 0) && !gone.visible(11, u64::MAX));
    assert!(Marker::Live.visible(0, 0) && !Marker::Damaged.visible(u64::MAX, u64::MAX));
}

#[test]
fn a_file_whose_slots_were_reused_is_version_5_with_or_without_a_tail() {
    // Oracle: docs/format.md (version 5 from the first reuse on, linked at bytes 104..112).
    for (linked, ok) in [(1500, true), (1400, true), (0, false), (1501, false)] {
        let h = Header { reused: true, linked, ..sample() };
        let e = h.encode();
        assert_eq!((get_u32(&e, 8), get_u64(&e, 104)), (5, linked));
        match Header::decode(&e) {
            Ok(back) => assert!(ok && back == h, "linked {linked}"),
            Err(d) => assert!(!ok && matches!(d, CopyDamage::Invalid(_)), "linked {linked}"),
        }
    }
}

#[test]
fn the_lists_clean_flag_is_bit_0_of_byte_31_in_every_version_and_other_bits_are_ignored() {
    // Oracle: docs/format.md (31 flags u8); builds from before it wrote the byte as zero.
    for base in [sample(), Header { reused: true, ..sample() }] {
        for clean in [false, true] {
            let h = Header { lists_clean: clean, ..base.clone() };
            let mut e = h.encode();
            assert_eq!(e[31], clean as u8);
            assert_eq!(Header::decode(&e).unwrap(), h);
            e[31] |= 0xfe;
            rechecksum(&mut e);
            assert_eq!(Header::decode(&e).unwrap().lists_clean, clean);
        }
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
