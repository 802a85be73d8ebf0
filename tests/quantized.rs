//! Indexes with 8-bit codes (`quantization = Int8`; 4-bit `Int4` where named) through the
//! public Rust API. Oracles: exact k-NN and exact distances computed here in f64, the same data
//! in a float index, the same file reopened by a fresh `Index`, and bytes damaged on disk.

mod common;

use chassis::format::{Metric, Quantization};
use chassis::index::{Control, Index, Mode, Options};
use common::rand_vecs;

/// Clustered rows: `centers` random centres, each row one of them plus smaller noise (the
/// shape embeddings have; uniform noise would give every dimension the same range).
fn clustered(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let centers = rand_vecs(20, d, seed ^ 0x5eed);
    let noise = rand_vecs(n, d, seed);
    (0..n * d).map(|i| 2.0 * centers[(i / d) % 20 * d + i % d] + 0.5 * noise[i]).collect()
}

/// The metric's distance in f64 (what `Hit::distance` reports: L2, 1 - cos, -dot).
fn exact(metric: Metric, a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    match metric {
        Metric::Euclidean => {
            a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>().sqrt()
        }
        Metric::Cosine => {
            let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            1.0 - dot / (na * nb)
        }
        Metric::InnerProduct => -dot,
    }
}

fn brute(metric: Metric, data: &[f32], d: usize, q: &[f32], k: usize) -> Vec<u64> {
    let mut v: Vec<(f64, u64)> =
        data.chunks_exact(d).enumerate().map(|(i, r)| (exact(metric, q, r), i as u64)).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v.into_iter().take(k).map(|x| x.1).collect()
}

fn opts(metric: Metric, quantization: Quantization) -> Options {
    Options { metric, quantization, ef_construction: 64, max_connections: 8, ..Default::default() }
}

/// Recall@10 over `queries` at `ef`, and the largest gap between a returned distance and the
/// exact distance of the returned id.
fn measure(
    idx: &Index,
    metric: Metric,
    data: &[f32],
    d: usize,
    queries: &[f32],
    ef: usize,
) -> (f64, f64) {
    let (mut hit, mut total, mut gap) = (0, 0, 0f64);
    for q in queries.chunks_exact(d) {
        let got = idx.search(q, 10, Some(ef)).unwrap();
        let want = brute(metric, data, d, q, 10);
        hit += got.iter().filter(|h| want.contains(&h.id)).count();
        total += want.len();
        for h in &got {
            let row = &data[h.id as usize * d..(h.id as usize + 1) * d];
            let e = exact(metric, q, row);
            gap = gap.max((h.distance as f64 - e).abs() / e.abs().max(1.0));
        }
    }
    (hit as f64 / total as f64, gap)
}

#[test]
fn codes_walk_with_rerank_keeps_the_float_recall_and_returns_exact_distances() {
    let (n, d) = (4000, 48);
    let data = clustered(n, d, 1);
    let queries = clustered(60, d, 2);
    for metric in [Metric::Euclidean, Metric::Cosine, Metric::InnerProduct] {
        let dir = tempfile::tempdir().unwrap();
        let float = Index::open(
            &dir.path().join("f"),
            Some(d),
            Some(&opts(metric, Quantization::None)),
            Mode::Write,
        )
        .unwrap();
        float.add_batch(&data, n, None, Some(1), &Control::default()).unwrap();
        let path = dir.path().join("q");
        let quant =
            Index::open(&path, Some(d), Some(&opts(metric, Quantization::Int8)), Mode::Write)
                .unwrap();
        // Below 1,000 rows nothing is learned: the walk measures the vectors.
        quant.add_batch(&data[..500 * d], 500, None, Some(1), &Control::default()).unwrap();
        assert!(!quant.is_trained());
        quant.add_batch(&data[500 * d..], n - 500, None, Some(1), &Control::default()).unwrap();
        assert!(quant.is_trained(), "{metric:?}: trained at 1,000 rows");
        for ef in [16, 64] {
            let (rf, _) = measure(&float, metric, &data, d, &queries, ef);
            let (rq, gap) = measure(&quant, metric, &data, d, &queries, ef);
            assert!(
                rq >= rf - 0.03,
                "{metric:?} ef {ef}: recall {rq} against the float index's {rf}"
            );
            assert!(
                gap < 1e-4,
                "{metric:?} ef {ef}: a returned distance is {gap} from the exact one"
            );
        }
        // The file says what it holds: version 2 with 8-bit codes, version 1 without.
        quant.flush().unwrap();
        float.flush().unwrap();
        let version = |p: &std::path::Path| common::get(&std::fs::read(p).unwrap(), 8, 4);
        assert_eq!((version(&path), version(&dir.path().join("f"))), (2, 1));
        // A fresh reader walks the same codes: the same ids and distances.
        let reader = Index::open(&path, None, None, Mode::Read).unwrap();
        assert!(reader.is_trained());
        for q in queries.chunks_exact(d).take(10) {
            assert_eq!(
                quant.search(q, 10, Some(32)).unwrap(),
                reader.search(q, 10, Some(32)).unwrap()
            );
        }
        assert_eq!(reader.check(&Control::default()).unwrap().corrupt, Vec::<u32>::new());
    }
}

#[test]
fn a_rolled_back_training_is_forgotten_and_a_later_one_commits() {
    let (n, d) = (1500, 16);
    let data = clustered(n, d, 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let o = opts(Metric::Euclidean, Quantization::Int8);
    let idx = Index::open(&path, Some(d), Some(&o), Mode::Write).unwrap();
    idx.add_batch(&data[..200 * d], 200, None, Some(1), &Control::default()).unwrap();
    idx.flush().unwrap();
    idx.add_batch(&data[200 * d..], n - 200, None, Some(1), &Control::default()).unwrap();
    assert!(idx.is_trained());
    idx.rollback().unwrap();
    assert!(!idx.is_trained());
    assert_eq!(idx.len(), 200);
    let q = &data[7 * d..8 * d];
    assert_eq!(idx.search(q, 1, None).unwrap()[0].id, 7);
    idx.add_batch(&data[200 * d..], n - 200, None, Some(1), &Control::default()).unwrap();
    assert!(idx.is_trained());
    idx.flush().unwrap();
    drop(idx);
    let idx = Index::open(&path, None, Some(&o), Mode::Write).unwrap();
    assert!(idx.is_trained());
    let report = idx.check(&Control::default()).unwrap();
    assert!(report.corrupt.is_empty() && report.unreachable.is_empty(), "{report:?}");
    for i in [0usize, 199, 200, 1499] {
        assert_eq!(idx.search(&data[i * d..(i + 1) * d], 1, Some(32)).unwrap()[0].id, i as u64);
    }
}

#[test]
fn a_damaged_code_is_reported_by_check_and_never_changes_a_distance() {
    let (n, d) = (1200, 32);
    let data = clustered(n, d, 4);
    // 8-bit and 4-bit codes (16 bytes at 32 dims: byte 3's high nibble is dimension 19).
    for quantization in [Quantization::Int8, Quantization::Int4] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let idx =
            Index::open(&path, Some(d), Some(&opts(Metric::Euclidean, quantization)), Mode::Write)
                .unwrap();
        idx.add_batch(&data, n, None, Some(1), &Control::default()).unwrap();
        idx.flush().unwrap();
        drop(idx);
        // The first segment starts at 128 KiB with its codes area (rows of 64 bytes).
        let mut bytes = std::fs::read(&path).unwrap();
        let at = 128 * 1024 + 5 * 64 + 3;
        bytes[at] ^= 0x80;
        std::fs::write(&path, &bytes).unwrap();
        let idx = Index::open(&path, None, None, Mode::Read).unwrap();
        assert_eq!(idx.quantization(), quantization);
        assert_eq!(idx.check(&Control::default()).unwrap().corrupt, vec![5], "{quantization:?}");
        let q = &data[5 * d..6 * d];
        let hits = idx.search(q, 5, Some(64)).unwrap();
        assert_eq!(hits[0].id, 5, "{quantization:?}: the row itself is still found first");
        for h in hits {
            let row = &data[h.id as usize * d..(h.id as usize + 1) * d];
            assert!((h.distance as f64 - exact(Metric::Euclidean, q, row)).abs() < 1e-4);
        }
    }
}

#[test]
fn a_damaged_quantizer_refuses_to_open_with_a_corrupt_error() {
    let (n, d) = (1000, 8);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let idx = Index::open(
        &path,
        Some(d),
        Some(&opts(Metric::Euclidean, Quantization::Int8)),
        Mode::Write,
    )
    .unwrap();
    idx.add_batch(&clustered(n, d, 5), n, None, Some(1), &Control::default()).unwrap();
    idx.flush().unwrap();
    drop(idx);
    let mut bytes = std::fs::read(&path).unwrap();
    // The flush wrote header copy 1 (copy 0 holds the empty index it was created as).
    let quantizer = common::get(&bytes, 64 * 1024 + 96, 8) as usize;
    assert!(quantizer > 0);
    bytes[quantizer + 12] ^= 1; // an offset of the first dimension
    std::fs::write(&path, &bytes).unwrap();
    for mode in [Mode::Read, Mode::Write] {
        let e = Index::open(&path, None, None, mode).err().expect("a damaged quantizer");
        assert_eq!(e.kind, chassis::error::ErrorKind::CorruptIndex, "{e:?}");
        assert!(e.message.contains("quantizer"), "{}", e.message);
    }
}

#[test]
fn training_from_a_sample_compaction_and_memory_copies_keep_the_codes_right() {
    let (n, d) = (3000, 24);
    let data = clustered(n, d, 6);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let o = opts(Metric::Cosine, Quantization::Int8);
    let idx = Index::open(&path, Some(d), Some(&o), Mode::Write).unwrap();
    // Trained from a sample before the first add: every add is encoded as it is written.
    idx.train(&data[..500 * d], 500, Some(1), &Control::default()).unwrap();
    assert!(idx.is_trained());
    assert!(idx.train(&data[..500 * d], 500, None, &Control::default()).is_err(), "trained twice");
    for chunk in 0..30 {
        let rows = &data[chunk * 100 * d..(chunk + 1) * 100 * d];
        idx.add_batch(rows, 100, None, Some(1), &Control::default()).unwrap();
    }
    idx.flush().unwrap();
    let report = idx.check(&Control::default()).unwrap();
    assert!(report.corrupt.is_empty(), "{report:?}");
    // Values of rows 500.. outside the sample's range were clipped, and counted.
    assert!(
        report.clipped > 0 && idx.clipped() == report.clipped,
        "{} {}",
        report.clipped,
        idx.clipped()
    );
    for id in (0..n as u64).step_by(2) {
        idx.delete(id).unwrap();
    }
    if !common::wine_cannot(common::WINE_COMPACT) {
        idx.compact(Some(1), &Control::default()).unwrap();
        assert!(idx.is_trained());
        let report = idx.check(&Control::default()).unwrap();
        assert!(
            report.corrupt.is_empty() && report.clipped == 0,
            "learned from the live rows: {report:?}"
        );
    }
    let q = &data[7 * d..8 * d];
    let hits = idx.search(q, 3, Some(64)).unwrap();
    assert_eq!(hits[0].id, 7);
    // save and load: the codes and the quantizer travel with the file.
    let saved = dir.path().join("saved");
    idx.save(&saved, false, &Control::default()).unwrap();
    let mem = Index::load(&saved, None, None, &Control::default()).unwrap();
    assert!(mem.is_trained());
    assert_eq!(mem.search(q, 3, Some(64)).unwrap(), hits);
    assert!(mem.check(&Control::default()).unwrap().corrupt.is_empty());
    // An in-memory quantized index trains at 1,000 rows as a file does.
    let m = Index::memory(d, Some(&o)).unwrap();
    m.add_batch(&data, n, None, Some(1), &Control::default()).unwrap();
    assert!(m.is_trained());
    assert_eq!(m.search(q, 1, Some(32)).unwrap()[0].id, 7);
}

#[test]
fn train_refuses_an_index_without_codes_and_bad_samples() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Index::open(&dir.path().join("p"), Some(4), None, Mode::Write).unwrap();
    let e = plain.train(&[0.0; 8], 2, None, &Control::default()).unwrap_err();
    assert!(e.message.contains("no codes"), "{}", e.message);
    let q = Index::open(
        &dir.path().join("q"),
        Some(4),
        Some(&opts(Metric::Euclidean, Quantization::Int8)),
        Mode::Write,
    )
    .unwrap();
    assert!(q.train(&[0.0; 7], 2, None, &Control::default()).is_err());
    assert!(q.train(&[f32::NAN, 0.0, 0.0, 0.0], 1, None, &Control::default()).is_err());
    assert!(!q.is_trained());
}

#[test]
fn a_codes_only_index_returns_the_distances_of_what_its_codes_stand_for() {
    use chassis::format::Precision;
    let (n, d) = (4000, 64);
    let data = clustered(n, d, 8);
    let queries = clustered(40, d, 9);
    for metric in [Metric::Euclidean, Metric::Cosine, Metric::InnerProduct] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let o = Options { precision: Precision::CodesOnly, ..opts(metric, Quantization::None) };
        let idx = Index::open(&path, Some(d), Some(&o), Mode::Write).unwrap();
        assert_eq!(idx.quantization(), Quantization::Int8, "codes only implies codes");
        // Its ranges come from the first batch: 500 rows are too few, and nothing is added.
        let e = idx.add_batch(&data[..500 * d], 500, None, Some(1), &Control::default());
        let e = e.unwrap_err();
        assert!(e.message.contains("first batch") && e.help.contains("train"), "{e:?}");
        assert_eq!(idx.len(), 0);
        idx.add_batch(&data, n, None, Some(1), &Control::default()).unwrap();
        assert!(idx.is_trained());
        // A quarter of the bytes of float32 vectors.
        let g = idx.geometry();
        assert_eq!((g.vec_bytes, g.stride, g.code_stride), (d, 64, 0));
        // Two oracles: brute force over the rows added (what codes alone can reach), and over
        // what the codes stand for (`get`), which the graph's walk should find.
        let decoded: Vec<f32> =
            (0..n as u64).flat_map(|id| idx.get(id).unwrap().unwrap()).collect();
        let (mut hit, mut hit_decoded, mut total) = (0, 0, 0);
        for q in queries.chunks_exact(d) {
            let got = idx.search(q, 10, Some(64)).unwrap();
            let want = brute(metric, &data, d, q, 10);
            hit += got.iter().filter(|h| want.contains(&h.id)).count();
            let want = brute(metric, &decoded, d, q, 10);
            hit_decoded += got.iter().filter(|h| want.contains(&h.id)).count();
            total += want.len();
            for h in &got {
                // the distance to what the code stands for, which `get` returns (cosine:
                // 1 - the unit query's dot product with it, the rounded unit vector as it is)
                let v = idx.get(h.id).unwrap().unwrap();
                let e = if metric == Metric::Cosine {
                    let nq = q.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
                    1.0 - q.iter().zip(&v).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() / nq
                } else {
                    exact(metric, q, &v)
                };
                assert!(
                    (h.distance as f64 - e).abs() <= 1e-4 * e.abs().max(1.0),
                    "{metric:?}: {} against {e}",
                    h.distance
                );
            }
        }
        let (recall, walk) = (hit as f64 / total as f64, hit_decoded as f64 / total as f64);
        // The same rows in a float index, the same way: the walk on codes finds the codes'
        // own nearest about as well as the float walk finds the rows'.
        let float = Index::memory(d, Some(&opts(metric, Quantization::None))).unwrap();
        float.add_batch(&data, n, None, Some(1), &Control::default()).unwrap();
        let (rf, _) = measure(&float, metric, &data, d, &queries, 64);
        assert!(
            walk >= rf - 0.05,
            "{metric:?}: the walk found {walk} of the codes' own nearest, the float walk {rf}"
        );
        assert!(recall >= rf - 0.08, "{metric:?}: recall {recall} of the rows added, float {rf}");
        // `get` is within half a step of the row added (cosine: of the normalised row).
        let row = &data[17 * d..18 * d];
        let norm = if metric == Metric::Cosine {
            row.iter().map(|x| x * x).sum::<f32>().sqrt()
        } else {
            1.0
        };
        let back = idx.get(17).unwrap().unwrap();
        let span = |i: usize| {
            let col = data.chunks_exact(d).map(|r| {
                let s = if metric == Metric::Cosine {
                    r.iter().map(|x| x * x).sum::<f32>().sqrt()
                } else {
                    1.0
                };
                r[i] / s
            });
            let (lo, hi) = col.fold((f32::MAX, f32::MIN), |(a, b), x| (a.min(x), b.max(x)));
            hi - lo
        };
        for i in 0..d {
            let err = (back[i] - row[i] / norm).abs();
            assert!(err <= span(i) / 255.0 * 0.5 + 1e-5, "dimension {i}: off by {err}");
        }
        idx.flush().unwrap();
        assert!(idx.check(&Control::default()).unwrap().corrupt.is_empty());
        // A reader opens the codes with the file; compaction copies them with their quantizer.
        let reader = Index::open(&path, None, None, Mode::Read).unwrap();
        let q = &queries[..d];
        let before = idx.search(q, 10, Some(64)).unwrap();
        assert_eq!(reader.search(q, 10, Some(64)).unwrap(), before);
        drop(reader);
        if common::wine_cannot(common::WINE_COMPACT) {
            continue;
        }
        let kept = idx.get(16).unwrap().expect("row 16");
        for id in (0..n as u64).filter(|id| id % 2 == 1) {
            idx.delete(id).unwrap();
        }
        idx.compact(Some(1), &Control::default()).unwrap();
        // What row 16's codes stand for, bit for bit as before the compaction.
        let after = idx.get(16).unwrap().expect("row 16 after compaction");
        assert_eq!(
            after.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            kept.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        for h in idx.search(q, 5, Some(2000)).unwrap() {
            assert_eq!(h.id % 2, 0);
            let same = before.iter().find(|b| b.id == h.id);
            if let Some(b) = same {
                assert_eq!(b.distance, h.distance, "the codes were copied as they were");
            }
        }
        assert!(idx.check(&Control::default()).unwrap().corrupt.is_empty());
    }
    // Trained from a sample first, single adds work from the start.
    let dir = tempfile::tempdir().unwrap();
    let o =
        Options { precision: Precision::CodesOnly, ..opts(Metric::Euclidean, Quantization::None) };
    let idx = Index::open(&dir.path().join("s"), Some(d), Some(&o), Mode::Write).unwrap();
    idx.train(&data[..300 * d], 300, None, &Control::default()).unwrap();
    for i in 0..20 {
        idx.add(&data[i * d..(i + 1) * d], None).unwrap();
    }
    assert_eq!(idx.search(&data[7 * d..8 * d], 1, Some(20)).unwrap()[0].id, 7);
}

#[test]
fn whole_huge_pages_of_codes_are_asked_for_as_vectors_are() {
    // ADR-0016's rule for codes: segments whose vectors fill a huge page put their codes
    // area on 2 MiB boundaries too, and the pieces huge pages are asked for cover it.
    use chassis::format::HUGE_PAGE;
    let (n, d) = (3072, 1024); // segment 1: 2,048 rows, 8 MiB of vectors, 2 MiB of codes
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        max_connections: 4,
        ef_construction: 8,
        ..opts(Metric::Euclidean, Quantization::Int8)
    };
    let idx = Index::open(&dir.path().join("h"), Some(d), Some(&o), Mode::Write).unwrap();
    idx.add_batch(&rand_vecs(n, d, 3), n, None, Some(2), &Control::default()).unwrap();
    let snap = idx.snap();
    let pieces = snap.st.vector_pieces(0, n as u64);
    let first = snap.st.code_ptr(1024) as usize; // segment 1's first code
    if cfg!(unix) {
        // Unix maps a file 2 MiB-aligned; Windows where it likes (docs/platforms.md), so
        // there only the pieces below, at offsets from the mapping's start, are checked.
        assert_eq!(first % HUGE_PAGE as usize, 0, "the codes area starts on a huge page");
    }
    assert!(
        pieces.iter().any(|&(p, len)| p == first && len == HUGE_PAGE as usize),
        "the codes' whole huge page is asked for: {pieces:x?}"
    );
    let vectors = snap.st.vector_ptr(1024) as usize;
    assert!(pieces.iter().any(|&(p, _)| p == vectors), "and the vectors' pieces: {pieces:x?}");
}

#[test]
fn codes_only_storage_with_4_bit_codes_is_refused_on_every_way_in() {
    // Oracle: the option pair is contradictory (codes-only storage is 8-bit), so each
    // constructor must refuse it rather than quietly keep 8-bit codes.
    use chassis::error::ErrorKind;
    use chassis::format::Precision;
    let o =
        Options { precision: Precision::CodesOnly, ..opts(Metric::Euclidean, Quantization::Int4) };
    let err = Index::memory(16, Some(&o)).err().expect("memory must refuse");
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let err = Index::open(&dir.path().join("q"), Some(16), Some(&o), Mode::Write)
        .err()
        .expect("open must refuse");
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
    assert!(!dir.path().join("q").exists(), "nothing is created");
}
