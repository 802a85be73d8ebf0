//! Measurement probe (an ignored test, as it needs the MiniLM data set): recall and QPS of a
//! walk on codes with a rerank of its `ef` best, and of codes alone, against the float walk, at
//! equal `ef`; it fails if the reranked recall falls more than 0.005 below the float one.
//! `cargo test --release --lib quant::probe -- --ignored --nocapture` (the data from
//! `$CHASSIS_MINILM`, else `../shared/data/debian-minilm` beside the repository)
//!
//! Measured (2 cores, one thread, cosine: `CHASSIS_PROBE_METRIC=cosine`; the modes alternate
//! pass by pass, QPS from each one's median of 5): the walk on codes reranked by its ef best
//! has the float walk's recall at every ef from 16 to 128 (0.9429 vs 0.9427 at 16, 0.9917 vs
//! 0.9916 at 64) at 1.35-1.81x its QPS (median 1.57x); codes alone 0.005-0.008 lower recall;
//! the integer kernel (`kernels::dot_i16_best`) as fast as the float one. Ranges from the min
//! and max of each dimension (quantile 1) did as well as 0.9999 or 0.999 with the rerank.
//! Reranking fewer than the beam: the best 20 (2k) or half the beam lost no recall from ef 24 up
//! and gained 3-15% QPS; half of a beam of 16 (10) lost 0.005. So the default to build:
//! `min(ef, max(2k, ef / 2))` (since `ef / 4`: `index::search::rerank_count`).

use super::*;
use crate::graph::Graph;
use crate::index::{Control, Index, Options};
use std::time::Instant;

fn npy(path: &std::path::Path) -> (String, Vec<usize>, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let (hlen, start) = if b[6] == 1 {
        (u16::from_le_bytes([b[8], b[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
    };
    let h = std::str::from_utf8(&b[start..start + hlen]).unwrap();
    let descr = h.split("'descr': '").nth(1).unwrap().split('\'').next().unwrap().to_string();
    let shape = h.split("'shape': (").nth(1).unwrap().split(')').next().unwrap();
    let shape = shape
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    (descr, shape, b[start + hlen..].to_vec())
}

fn f32s(path: &std::path::Path) -> (Vec<f32>, Vec<usize>) {
    let (d, shape, raw) = npy(path);
    let v = match d.as_str() {
        "<f2" => raw.chunks(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        "<f4" => raw.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        "<i4" => {
            raw.chunks(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect()
        }
        other => panic!("{other}"),
    };
    (v, shape)
}

/// Passes of each mode at each ef (the median one counts).
const PASSES: usize = 5;

#[test]
#[ignore = "a measurement, not a check of behaviour alone: builds the 45,056 MiniLM vectors and sweeps ef (about two minutes in release); run it by name"]
fn probe_minilm() {
    // $CHASSIS_MINILM, else the data beside the repository (../shared/data/debian-minilm)
    let dir =
        std::env::var_os("CHASSIS_MINILM").map(std::path::PathBuf::from).unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/debian-minilm")
        });
    let dir = dir.as_path();
    let (base, bs) = f32s(&dir.join("base.npy"));
    let (queries, qs) = f32s(&dir.join("queries.npy"));
    let (gt, gs) = f32s(&dir.join("gt_ids.npy"));
    let (n, dims, nq) = (bs[0], bs[1], qs[0]);
    let metric = match std::env::var("CHASSIS_PROBE_METRIC").as_deref() {
        Ok("cosine") => Metric::Cosine,
        _ => Metric::Euclidean,
    };
    let opts = Options { metric, ..Options::default() };
    let idx = Index::memory(dims, Some(&opts)).unwrap();
    let t = Instant::now();
    idx.add_batch(&base, n, None, None, &Control::default()).unwrap();
    eprintln!("build {:.1} s", t.elapsed().as_secs_f64());
    let snap = idx.snap();
    let st = &snap.st;
    let slots = snap.slots as u32;
    let limit = st.capacity().min(u32::MAX as u64 - 1) as u32;
    let float = Graph::new(st, opts.metric, limit);
    let accept = |s: u32| s < slots;
    let truth: Vec<std::collections::HashSet<u64>> =
        (0..nq).map(|i| (0..10).map(|j| gt[i * gs[1] + j] as u64).collect()).collect();
    for quantile in [1.0] {
        let quantizer =
            Quantizer::train(dims, (0..slots).map(|s| st.vector_f32(s)), quantile).unwrap();
        let table = CodeTable::new(st, &quantizer, slots).unwrap();
        let codes = Graph::on_codes(st, opts.metric, limit, &table);
        fn four_i16(q: *const f32, v: &[*const u8; 4], n: usize) -> [f32; 4] {
            let k = kernels::dot_i16_best();
            // SAFETY: as the single kernel's, for each of four rows.
            unsafe { [k(q, v[0], n), k(q, v[1], n), k(q, v[2], n), k(q, v[3], n)] }
        }
        let codes16 = (metric != Metric::Euclidean).then(|| {
            Graph::on_codes(st, opts.metric, limit, &table).with_kernel(
                kernels::dot_i16_best(),
                four_i16,
                dims.div_ceil(2),
            )
        });
        eprintln!("quantile {quantile}: clipped {}", table.clipped());
        let modes: Vec<&str> =
            ["float", "codes", "codes-only", "codes-i16", "codes-r2k", "codes-rhalf"]
                .into_iter()
                .filter(|m| *m != "codes-i16" || codes16.is_some())
                .collect();
        // One pass of every query in `mode`: (hits among the true top 10, seconds).
        let run = |mode: &str, ef: usize| -> (usize, f64) {
            let mut p = Prepared::new(&quantizer, opts.metric, &queries[..dims]);
            let rerank = |q: &[f32], cand: Vec<(f32, u32)>| {
                let mut exact: Vec<(f32, u32)> =
                    cand.iter().map(|&(_, s)| (float.dist(q, s), s)).collect();
                exact.sort_by(|a, b| a.0.total_cmp(&b.0));
                exact.truncate(10);
                exact
            };
            let (e, ml) = (snap.entry, snap.max_level);
            let t = Instant::now();
            let mut hit = 0;
            for i in 0..nq {
                let q = &queries[i * dims..(i + 1) * dims];
                let res = match mode {
                    "float" => float.knn(q, 10, ef, e, ml, slots, &accept, None),
                    "codes-i16" => {
                        let p16 = Prepared::int16(&quantizer, opts.metric, q);
                        let g = codes16.as_ref().unwrap();
                        rerank(q, g.knn(&p16.values, ef, ef, e, ml, slots, &accept, None))
                    }
                    "codes" => {
                        p.prepare(&quantizer, opts.metric, q);
                        rerank(q, codes.knn(&p.values, ef, ef, e, ml, slots, &accept, None))
                    }
                    "codes-r2k" | "codes-rhalf" => {
                        // rerank fewer: 2k, or half the beam
                        let r = if mode == "codes-r2k" { 20 } else { (ef / 2).max(10) };
                        p.prepare(&quantizer, opts.metric, q);
                        rerank(q, codes.knn(&p.values, r, ef, e, ml, slots, &accept, None))
                    }
                    _ => {
                        p.prepare(&quantizer, opts.metric, q);
                        codes.knn(&p.values, 10, ef, e, ml, slots, &accept, None)
                    }
                };
                hit += res
                    .iter()
                    .filter(|(_, s)| truth[i].contains(&snap.live_id(*s).unwrap()))
                    .count();
            }
            (hit, t.elapsed().as_secs_f64())
        };
        for ef in [16usize, 24, 32, 48, 64, 96, 128] {
            // The modes alternate pass by pass (the order rotating), so that the machine's
            // load falls on each alike; QPS from each mode's median pass.
            let mut secs: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
            let mut hits = vec![0usize; modes.len()];
            for pass in 0..PASSES {
                for t in 0..modes.len() {
                    let m = (t + pass) % modes.len();
                    let (h, sec) = run(modes[m], ef);
                    hits[m] = h;
                    secs[m].push(sec);
                }
            }
            let float_recall = hits[0] as f64 / (10 * nq) as f64;
            for (m, mode) in modes.iter().enumerate() {
                secs[m].sort_by(f64::total_cmp);
                let qps = nq as f64 / secs[m][PASSES / 2];
                let recall = hits[m] as f64 / (10 * nq) as f64;
                eprintln!("  ef {ef:4} {mode:10} recall {recall:.4} qps {qps:8.0}");
                if matches!(*mode, "codes" | "codes-i16") {
                    assert!(
                        recall >= float_recall - 0.005,
                        "ef {ef} {mode}: {recall} vs {float_recall}"
                    );
                }
            }
        }
    }
}
