//! Oracles: exact f64 arithmetic on the decoded vectors (what a code stands for), counts made
//! here value by value, and the scalar kernels for the SIMD ones.

use super::kernels::available;
use super::*;
use crate::distance::tests::uniform as data;

fn codes(n: usize, seed: u64) -> Vec<u8> {
    data(n, seed, 0.0, 256.0).into_iter().map(|x| x as u8).collect()
}

const LENGTHS: [usize; 9] = [127, 128, 129, 383, 384, 385, 768, 1536, 1537];

/// Each kernel of `sets` against exact f64 arithmetic on the values its codes stand for, at
/// every length: `code(n)` gives a code's values and its stored bytes (`code_len(n)`), `query(n)`
/// the prepared query (`b = q - offset`, then the steps: 2n f32s).
fn kernels_match_exact_math(
    sets: &[CodeKernels],
    code: impl Fn(usize) -> (Vec<u8>, Vec<u8>),
    query: impl Fn(usize) -> Vec<f32>,
) {
    for k in sets {
        for n in (0..=70).chain(LENGTHS) {
            let ((c, stored), q) = (code(n), query(n));
            let exact_l2: f64 =
                (0..n).map(|i| (q[i] as f64 - q[n + i] as f64 * c[i] as f64).powi(2)).sum();
            let exact_dot: f64 = (0..n).map(|i| q[i] as f64 * c[i] as f64).sum();
            // SAFETY: the query holds 2n f32s, the code what its kernels read for n; the sets
            // are this CPU's.
            let (l2, dot) = unsafe {
                (
                    (k.l2)(q.as_ptr(), stored.as_ptr(), n) as f64,
                    (k.dot)(q.as_ptr(), stored.as_ptr(), n) as f64,
                )
            };
            let tol = |x: f64, scale: f64| 1e-5 * (1.0 + x.abs() + scale);
            assert!(
                (l2 - exact_l2).abs() < tol(exact_l2, 0.0),
                "{} l2 n={n}: {l2} vs {exact_l2}",
                k.level
            );
            // a dot of +-2 against codes up to 255 (15): cancellation, so scaled by the magnitudes
            let scale: f64 = (0..n).map(|i| (q[i] as f64 * c[i] as f64).abs()).sum();
            assert!(
                (dot - exact_dot).abs() < tol(exact_dot, scale),
                "{} dot n={n}: {dot} vs {exact_dot}",
                k.level
            );
        }
    }
}

/// A prepared query of `n` dimensions: `b` in [-2, 2) from `seed`, steps in [0, step) from
/// `seed_steps`.
fn prepared(n: usize, seed: u64, seed_steps: u64, step: f32) -> Vec<f32> {
    let mut q = data(n, seed, -2.0, 2.0);
    q.extend(data(n, seed_steps, 0.0, step));
    q
}

#[test]
fn every_available_code_kernel_matches_exact_math_at_every_length() {
    let code = |n: usize| {
        let c = codes(n, 3 + n as u64);
        (c.clone(), c)
    };
    kernels_match_exact_math(&available(), code, |n| {
        prepared(n, 1 + n as u64, 50 + n as u64, 0.02)
    });
}

/// Each grouped kernel of `sets` against four calls of its single kernel, bitwise, at each of
/// `lengths`; `code(n, seed)` makes a code of `n` dimensions, `step` bounds the query's steps.
fn grouped_match_singles(
    sets: &[CodeKernels],
    lengths: &[usize],
    code: impl Fn(usize, u64) -> Vec<u8>,
    step: f32,
) {
    for k in sets {
        for &n in lengths {
            let mut q = data(n, 9 + n as u64, -1.0, 1.0);
            q.extend(data(n, 90 + n as u64, 0.0, step));
            let cs: Vec<Vec<u8>> = (0..4).map(|t| code(n, 100 * t + n as u64)).collect();
            let p: [*const u8; 4] = std::array::from_fn(|t| cs[t].as_ptr());
            for (one, four) in [(k.l2, k.l2_x4), (k.dot, k.dot_x4)] {
                // SAFETY: the query holds 2n f32s and each code what its kernels read for n.
                let (got, want) =
                    unsafe { (four(q.as_ptr(), &p, n), p.map(|c| one(q.as_ptr(), c, n))) };
                assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{} n={n}", k.level);
            }
        }
    }
}

#[test]
fn grouped_code_kernels_give_bitwise_the_single_kernels_distances() {
    // 40, 47, 72: steps of 32 then of 8, whose order in accumulator 0 the grouped kernels keep.
    grouped_match_singles(
        &available(),
        &[1, 15, 16, 17, 40, 47, 64, 72, 100, 384, 385, 1537],
        codes,
        0.01,
    );
}

#[test]
fn a_prepared_query_gives_the_distance_to_the_decoded_vector_exactly_for_every_metric() {
    // Oracle: the float distance from the query to the vector the code stands for.
    let dims = 77;
    let rows: Vec<Vec<f32>> = (0..300).map(|r| data(dims, 1000 + r, -0.3, 0.5)).collect();
    let quantizer = Quantizer::train(dims, rows.iter().map(|r| r.as_slice()), 1.0).unwrap();
    let q = data(dims, 7, -0.4, 0.4);
    for k in available() {
        for metric in [Metric::Euclidean, Metric::Cosine, Metric::InnerProduct] {
            let p = Prepared::new(&quantizer, metric, &q);
            for row in rows.iter().take(20) {
                let mut code = vec![0u8; dims];
                quantizer.encode(row, &mut code);
                let mut x = vec![0f32; dims];
                quantizer.decode(&code, &mut x);
                let want: f64 = match metric {
                    Metric::Euclidean => {
                        q.iter().zip(&x).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum()
                    }
                    Metric::Cosine => {
                        1.0 - q.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()
                    }
                    Metric::InnerProduct => {
                        -q.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()
                    }
                };
                let kernel = if metric == Metric::Euclidean { k.l2 } else { k.dot };
                // SAFETY: the prepared values are 2 x dims (euclidean) or dims f32s.
                let got =
                    p.bias + p.sign * unsafe { kernel(p.values.as_ptr(), code.as_ptr(), dims) };
                assert!(
                    (got as f64 - want).abs() < 1e-4,
                    "{} {metric:?}: {got} vs {want}",
                    k.level
                );
            }
        }
    }
}

#[test]
fn codes_of_the_training_data_are_within_half_a_step_and_nothing_is_clipped() {
    let dims = 40;
    let rows: Vec<Vec<f32>> = (0..500).map(|r| data(dims, r, -3.0, 7.0)).collect();
    let quantizer = Quantizer::train(dims, rows.iter().map(|r| r.as_slice()), 1.0).unwrap();
    let mut code = vec![0u8; dims];
    let mut back = vec![0f32; dims];
    for row in &rows {
        assert_eq!(quantizer.encode(row, &mut code), 0);
        quantizer.decode(&code, &mut back);
        for i in 0..dims {
            let err = (row[i] - back[i]).abs();
            assert!(err <= quantizer.step()[i] * 0.5 + 1e-6, "dim {i}: {} -> {}", row[i], back[i]);
        }
    }
    // min and max of each dimension are the codes 0 and 255
    for i in 0..dims {
        let lo = rows.iter().map(|r| r[i]).fold(f32::INFINITY, f32::min);
        let hi = rows.iter().map(|r| r[i]).fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(quantizer.offset()[i], lo);
        assert!(quantizer.decode_one(i, 255) >= hi && quantizer.decode_one(i, 255) - hi < 1e-5);
    }
}

#[test]
fn values_beyond_the_learned_range_are_clipped_to_its_ends_and_counted() {
    let dims = 8;
    let rows: Vec<Vec<f32>> = (0..1000).map(|r| data(dims, r, -1.0, 1.0)).collect();
    let quantizer = Quantizer::train(dims, rows.iter().map(|r| r.as_slice()), 0.99).unwrap();
    let mut total = 0;
    let mut code = vec![0u8; dims];
    for row in &rows {
        // oracle: the values more than half a step outside [offset, offset + 255 step]
        let expected = (0..dims)
            .filter(|&i| {
                let t = (row[i] - quantizer.offset()[i]) / quantizer.step()[i];
                !(-0.5..=255.5).contains(&t)
            })
            .count();
        let clipped = quantizer.encode(row, &mut code);
        assert_eq!(clipped, expected);
        total += clipped;
        for i in 0..dims {
            let t = (row[i] - quantizer.offset()[i]) / quantizer.step()[i];
            if t < 0.0 {
                assert_eq!(code[i], 0);
            } else if t > 255.0 {
                assert_eq!(code[i], 255);
            }
        }
    }
    // 1% at each end of each dimension, about: 2% of 8,000 values
    assert!((100..=220).contains(&total), "{total} clipped");
    let far = vec![1e30f32; dims];
    assert_eq!(quantizer.encode(&far, &mut code), dims);
    assert!(code.iter().all(|&c| c == 255));
    let nan = vec![f32::NAN; dims];
    assert_eq!(quantizer.encode(&nan, &mut code), dims);
}

#[test]
fn a_dimension_holding_one_value_gets_step_zero_and_decodes_to_it() {
    let rows = [[1.5f32, 0.0], [1.5, 1.0], [1.5, 2.0]];
    let quantizer = Quantizer::train(2, rows.iter().map(|r| r.as_slice()), 1.0).unwrap();
    assert_eq!(quantizer.step()[0], 0.0);
    let mut code = [9u8; 2];
    assert_eq!(quantizer.encode(&[1.5, 1.0], &mut code), 0);
    assert_eq!(code[0], 0);
    assert_eq!(quantizer.decode_one(0, code[0]), 1.5);
    assert_eq!(quantizer.encode(&[2.5, 1.0], &mut code), 1); // off the only value: clipped
}

#[test]
fn a_dimension_mostly_one_value_keeps_its_whole_range_at_a_quantile() {
    // Oracle: the minimum and maximum counted here. Dimension 0 is 0 in 995 rows of 1,000
    // (its 0.99 quantiles meet at 0); dimension 1 is spread.
    let n = 1000;
    let spread = data(n, 5, -1.0, 1.0);
    let rows: Vec<[f32; 2]> = (0..n)
        .map(|i| [if i % 200 == 7 { 0.25 + i as f32 / 1000.0 } else { 0.0 }, spread[i]])
        .collect();
    let (lo0, hi0) = rows
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), r| (l.min(r[0]), h.max(r[0])));
    for bits in [8, 4] {
        let z = Quantizer::train_bits(2, rows.iter().map(|r| r.as_slice()), 0.99, bits).unwrap();
        assert_eq!(z.offset()[0], lo0, "{bits}-bit");
        let top = if bits == 4 { 15.0 } else { 255.0 };
        assert!(z.step()[0] > 0.0 && z.offset()[0] + top * z.step()[0] >= hi0, "{bits}-bit");
        // The rare values get codes of their own, not the common one's.
        let mut code = [0u8; 16];
        z.encode(&[hi0, 0.0], &mut code[..z.code_len()]);
        assert_ne!(z.code_at(&code, 0), 0, "{bits}-bit");
        // The spread dimension still gives up its extremes.
        let (lo1, hi1) = (z.offset()[1], z.offset()[1] + top * z.step()[1]);
        assert!(lo1 > -1.0 && hi1 < 1.0 && lo1 < -0.9 && hi1 > 0.9, "{bits}-bit: {lo1} {hi1}");
    }
}

#[test]
fn quantile_ranges_of_many_rows_come_from_an_even_sample_of_them() {
    // Oracle: quantiles of all the rows, counted here. 60,000 rows are sampled one in three
    // (QUANTILE_ROWS 20,000); the ranges learned must still sit at about the 0.01 / 0.99
    // quantiles of the whole set, and be values of the rows sampled.
    let n = 60_000;
    let rows = data(n, 9, -3.0, 3.0);
    let z = Quantizer::train(1, rows.chunks_exact(1), 0.99).unwrap();
    let mut sorted = rows.clone();
    sorted.sort_by(f32::total_cmp);
    let at = |q: f64| sorted[(q * (n - 1) as f64) as usize];
    let (lo, hi) = (z.offset()[0], z.offset()[0] + 255.0 * z.step()[0]);
    assert!(lo >= at(0.005) && lo <= at(0.015), "lo {lo} against {} .. {}", at(0.005), at(0.015));
    assert!(hi >= at(0.985) && hi <= at(0.995) + 1e-4, "hi {hi}");
    assert!(rows.iter().step_by(3).any(|&x| x == lo), "lo is a sampled value");
}

#[test]
fn bad_training_input_and_bad_parts_are_refused_with_what_was_wrong() {
    let e = Quantizer::train(3, std::iter::empty(), 1.0).unwrap_err();
    assert!(e.message.contains("no rows"), "{}", e.message);
    let rows = [[1.0f32, f32::NAN, 0.0]];
    let e = Quantizer::train(3, rows.iter().map(|r| r.as_slice()), 1.0).unwrap_err();
    assert!(e.message.contains("row 0") && e.message.contains("dimension 1"), "{}", e.message);
    let rows = [[1.0f32, 2.0]];
    let e = Quantizer::train(3, rows.iter().map(|r| r.as_slice()), 1.0).unwrap_err();
    assert!(e.message.contains("2 values for 3"), "{}", e.message);
    let e = Quantizer::train(2, rows.iter().map(|r| r.as_slice()), 0.2).unwrap_err();
    assert!(e.message.contains("quantile"), "{}", e.message);
    assert!(Quantizer::from_parts(vec![0.0], vec![-1.0]).is_err());
    assert!(Quantizer::from_parts(vec![f32::INFINITY], vec![1.0]).is_err());
    assert!(Quantizer::from_parts(vec![0.0, 1.0], vec![1.0]).is_err());
}

#[test]
fn a_stored_quantizer_reads_back_bitwise_and_damage_is_refused() {
    // Oracle: the parts it was made from; every single-byte change and every truncation of the
    // stored form is refused as corrupt, naming the stored quantizer.
    let dims = 9;
    let rows: Vec<Vec<f32>> = (0..50).map(|r| data(dims, 300 + r, -1.0, 3.0)).collect();
    let q = Quantizer::train(dims, rows.iter().map(|r| r.as_slice()), 1.0).unwrap();
    let b = q.to_bytes();
    assert_eq!(b.len(), Quantizer::stored_len(dims));
    let back = Quantizer::from_bytes(&b, dims, 8).unwrap();
    assert_eq!(
        back.offset().iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        q.offset().iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(
        back.step().iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        q.step().iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    for i in 0..b.len() {
        let mut d = b.clone();
        d[i] ^= 0x40;
        let e = Quantizer::from_bytes(&d, dims, 8).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::CorruptIndex, "byte {i}");
        assert!(e.message.contains("stored quantizer"), "{}", e.message);
    }
    for n in 0..b.len() {
        assert!(Quantizer::from_bytes(&b[..n], dims, 8).is_err(), "truncated to {n}");
    }
    assert!(Quantizer::from_bytes(&b, dims + 1, 8).is_err());
    // A crafted form with a valid checksum but a negative step is refused too.
    let mut crafted = Quantizer::from_parts(vec![0.0; 2], vec![1.0; 2]).unwrap().to_bytes();
    crafted[STORED_STEP0..STORED_STEP0 + 4].copy_from_slice(&(-1.0f32).to_le_bytes());
    let body = crafted.len() - 8;
    let crc = xxhash_rust::xxh3::xxh3_64(&crafted[..body]);
    crafted[body..].copy_from_slice(&crc.to_le_bytes());
    let e = Quantizer::from_bytes(&crafted, 2, 8).unwrap_err();
    assert!(e.message.contains("step"), "{}", e.message);
}

/// The first step's byte offset in the stored form (head, then the first offset).
const STORED_STEP0: usize = 8 + 4;

#[test]
fn the_full_range_kept_as_rows_stream_equals_the_selected_extremes() {
    // Quantile 1 keeps a running minimum and maximum; a quantile a hair below 1 selects the
    // same ranks (0 and n - 1) from whole columns: the two must agree bitwise.
    let dims = 37;
    let mut rows = data(500 * dims, 9, -3.0, 3.0);
    rows[5 * dims + 2] = -40.0; // one extreme low value
    rows[400 * dims + 36] = 1e6; // one extreme high value
    for row in rows.chunks_exact_mut(dims).skip(100).take(50) {
        row[7] = 0.25; // a dimension that holds one value in part of the rows
    }
    let streamed = Quantizer::train(dims, rows.chunks_exact(dims), 1.0).unwrap();
    let selected = Quantizer::train(dims, rows.chunks_exact(dims), 1.0 - 1e-12).unwrap();
    assert_eq!(streamed, selected);
    assert_eq!(streamed.offset()[2], -40.0);
    assert!(streamed.decode_one(36, 255) >= 1e6);
}

/// Every 4-bit kernel set this CPU can run (the level of each 8-bit set, scalar where
/// `nibbles.rs` has none).
fn nibble_sets() -> Vec<CodeKernels> {
    available().iter().map(|k| nibbles::for_level(k.level)).collect()
}

/// `n` 4-bit codes (0..=15) and their packed form, packed here dimension by dimension from the
/// layout's rule (byte `16 (i / 32) + i % 16`, high nibble where `i % 32 >= 16`).
fn nibble_codes(n: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let values: Vec<u8> = data(n, seed, 0.0, 16.0).into_iter().map(|x| x as u8).collect();
    let mut packed = vec![0u8; nibbles::code_len(n)];
    for (i, &v) in values.iter().enumerate() {
        let byte = 16 * (i / 32) + i % 16;
        packed[byte] |= if i % 32 >= 16 { v << 4 } else { v };
    }
    (values, packed)
}

#[test]
fn every_4bit_kernel_matches_exact_math_at_every_length() {
    kernels_match_exact_math(
        &nibble_sets(),
        |n| nibble_codes(n, 5 + n as u64),
        |n| prepared(n, 2 + n as u64, 60 + n as u64, 0.3),
    );
}

#[test]
fn grouped_4bit_kernels_give_bitwise_the_single_kernels_distances() {
    let lengths = [1, 15, 16, 17, 31, 32, 33, 100, 384, 385];
    grouped_match_singles(&nibble_sets(), &lengths, |n, seed| nibble_codes(n, seed).1, 0.1);
}

#[test]
fn a_4bit_code_is_within_half_a_step_inside_the_range_and_a_prepared_query_gives_its_distance() {
    // Oracles: the value each code stands for, recomputed from offset and step; the float
    // distance from the query to the decoded vector.
    for dims in [1, 31, 33, 77, 384] {
        let rows: Vec<Vec<f32>> = (0..400).map(|r| data(dims, 3000 + r, -0.3, 0.5)).collect();
        let z = Quantizer::train_bits(dims, rows.iter().map(|r| r.as_slice()), 0.99, 4).unwrap();
        assert_eq!((z.bits(), z.code_len()), (4, nibbles::code_len(dims)));
        let mut code = vec![0u8; z.code_len()];
        let mut back = vec![0f32; dims];
        let (mut clipped, mut counted) = (0, 0);
        for row in &rows {
            clipped += z.encode(row, &mut code);
            z.decode(&code, &mut back);
            for i in 0..dims {
                let c = z.code_at(&code, i);
                assert!(c <= 15);
                assert_eq!(back[i], z.offset()[i] + z.step()[i] * c as f32);
                let t = (row[i] - z.offset()[i]) / z.step()[i];
                if (-0.5..=15.5).contains(&t) {
                    assert!((row[i] - back[i]).abs() <= z.step()[i] * 0.5 + 1e-6, "dim {i}");
                } else {
                    counted += 1;
                }
            }
        }
        // Values given up at the ends (quantile 0.99) are counted as clipped, and only they.
        assert_eq!(clipped, counted);
        let q = data(dims, 7, -0.4, 0.4);
        let k = nibbles::for_level(code_kernels().level);
        for metric in [Metric::Euclidean, Metric::Cosine, Metric::InnerProduct] {
            let p = Prepared::new(&z, metric, &q);
            for row in rows.iter().take(10) {
                z.encode(row, &mut code);
                z.decode(&code, &mut back);
                let ip: f64 = q.iter().zip(&back).map(|(a, b)| *a as f64 * *b as f64).sum();
                let want = match metric {
                    Metric::Euclidean => {
                        q.iter().zip(&back).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum()
                    }
                    Metric::Cosine => 1.0 - ip,
                    Metric::InnerProduct => -ip,
                };
                let kernel = if metric == Metric::Euclidean { k.l2 } else { k.dot };
                // SAFETY: the prepared values are 2 x dims or dims f32s; the code code_len.
                let got =
                    p.bias + p.sign * unsafe { kernel(p.values.as_ptr(), code.as_ptr(), dims) };
                assert!(
                    (got as f64 - want).abs() < 1e-4,
                    "{metric:?} dims {dims}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn a_stored_4bit_quantizer_reads_back_and_is_refused_as_8bit() {
    let dims = 50;
    let rows: Vec<Vec<f32>> = (0..100).map(|r| data(dims, 40 + r, -1.0, 1.0)).collect();
    let z = Quantizer::train_bits(dims, rows.iter().map(|r| r.as_slice()), 1.0, 4).unwrap();
    let b = z.to_bytes();
    assert_eq!(Quantizer::from_bytes(&b, dims, 4).unwrap(), z);
    let e = Quantizer::from_bytes(&b, dims, 8).unwrap_err();
    assert!(e.message.contains("8-bit"), "{}", e.message);
    let z8 = Quantizer::train(dims, rows.iter().map(|r| r.as_slice()), 1.0).unwrap();
    assert!(Quantizer::from_bytes(&z8.to_bytes(), dims, 4).is_err());
    assert!(Quantizer::train_bits(dims, rows.iter().map(|r| r.as_slice()), 1.0, 5).is_err());
}
