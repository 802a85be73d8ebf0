use super::*;
use crate::storage::lists;

#[test]
fn keys_order_like_floats() {
    let v = [-3.5f32, -1.0, -0.0, 0.0, 1e-30, 0.5, 2.0, f32::INFINITY];
    for w in v.windows(2) {
        assert!(key(w[0]) <= key(w[1]), "{} {}", w[0], w[1]);
    }
    for x in v {
        assert_eq!(unkey(pack(x, 7)).to_bits(), x.to_bits());
        assert_eq!(slot_of(pack(x, 7)), 7);
    }
}

/// An in-memory index of `n` vectors of `d` uniform values in [-0.5, 0.5) from an xorshift
/// generator seeded with `seed`, linked on `threads` threads; and the generator, to draw
/// queries from.
fn random_index(
    d: usize,
    n: usize,
    seed: u64,
    threads: usize,
) -> (crate::index::Index, impl FnMut() -> f32) {
    use crate::index::{Control, Index};
    let mut s = seed;
    let mut r = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let data: Vec<f32> = (0..n * d).map(|_| r()).collect();
    let idx = Index::memory(d, None).unwrap();
    idx.add_batch(&data, n, None, Some(threads), &Control::default()).unwrap();
    (idx, r)
}

/// The descent computes each node's distance once but ends where the textbook greedy walk
/// (every neighbor's distance computed at every hop) ends, with the same path, on short
/// vectors (one at a time) and long ones (four at a time).
#[test]
fn descent_ends_where_the_plain_greedy_walk_ends() {
    for d in [8usize, 300] {
        let (idx, mut r) = random_index(d, 4000, 0x9e37_79b9_7f4a_7c15u64 ^ d as u64, 2);
        let snap = idx.snap();
        let g = Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32);
        assert!(snap.max_level >= 2, "the test needs upper layers");
        let mut computed_fewer = false;
        for _ in 0..200 {
            let q: Vec<f32> = (0..d).map(|_| r()).collect();
            // The textbook walk.
            let (mut cur, mut cd, mut plain) = (snap.entry, g.dist(&q, snap.entry), 1u64);
            let mut want = Vec::new();
            for layer in (1..=snap.max_level).rev() {
                loop {
                    let mut changed = false;
                    let list = lists::list_of(g.st, cur, layer).unwrap();
                    for e in &list[2..2 + lists::list_len(list)] {
                        let nb = e.load(Relaxed);
                        plain += 1;
                        let dd = g.dist(&q, nb);
                        if dd < cd {
                            (cur, cd, changed) = (nb, dd, true);
                        }
                    }
                    if !changed {
                        break;
                    }
                }
                want.push(cur);
            }
            let mut path = vec![0u32; snap.max_level];
            let got = g
                .start_of(&q, snap.entry, snap.max_level, snap.slots as u32, &mut path)
                .unwrap()
                .entries()
                .next()
                .unwrap();
            // This thread's count of the descent's distances (the global counters would
            // also count other tests' searches).
            let used = with_scratch(|sc| sc.dists);
            assert_eq!((got.1, got.0.to_bits()), (cur, cd.to_bits()), "dims {d}");
            assert_eq!(path, want, "dims {d}");
            assert!(used <= plain);
            computed_fewer |= used < plain;
        }
        assert!(computed_fewer, "no node was met twice in 200 descents (dims {d})");
    }
}

/// Layer 0 starts from the descent's nearest nodes: the first is where the walk ended, the
/// rest are the nearest others whose distances it computed, and layer 0 computes none of those
/// again. With ef and k covering the whole graph every node's distance is computed exactly once
/// after the descent.
#[test]
fn layer_zero_starts_from_the_descents_nearest_nodes_without_computing_them_again() {
    let (d, n) = (8usize, 1500usize);
    let (idx, mut r) = random_index(d, n, 0x2545_f491_4f6c_dd1du64, 1);
    let snap = idx.snap();
    let g = Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32);
    assert!(snap.max_level >= 1, "the test needs upper layers");
    let all = |_: u32| true;
    for _ in 0..20 {
        let q: Vec<f32> = (0..d).map(|_| r()).collect();
        let mut path = vec![0u32; snap.max_level];
        let start =
            g.start_of(&q, snap.entry, snap.max_level, snap.slots as u32, &mut path).unwrap();
        let descent = with_scratch(|sc| sc.dists);
        let seeds: Vec<(f32, u32)> = start.entries().collect();
        assert_eq!(seeds.len(), SEEDS.min(descent as usize));
        assert!(seeds.len() > 1, "the test needs a descent that computes more than its end");
        assert!(seeds.windows(2).all(|w| w[0].0 <= w[1].0), "seeds nearest first");
        for &(dd, slot) in &seeds {
            assert_eq!(dd.to_bits(), g.dist(&q, slot).to_bits());
        }
        let given = g
            .knn(&q, n, n, snap.entry, snap.max_level, snap.slots as u32, &all, Some(&start))
            .unwrap();
        let layer0 = with_scratch(|sc| sc.dists);
        assert_eq!(given.len(), n, "every node reached");
        assert_eq!(
            layer0 as usize,
            n - seeds.len(),
            "a seed's distance was computed again on layer 0"
        );
        let own =
            g.knn(&q, n, n, snap.entry, snap.max_level, snap.slots as u32, &all, None).unwrap();
        assert_eq!(
            with_scratch(|sc| sc.dists),
            descent + layer0,
            "the search's own descent is the same"
        );
        assert_eq!(own, given);
    }
}

#[test]
fn levels_follow_the_geometric_law() {
    let n = 200_000u64;
    let above0 = (0..n).filter(|s| level_for(*s, 16) >= 1).count() as f64 / n as f64;
    assert!((above0 - 1.0 / 16.0).abs() < 0.005, "{above0}");
    assert!((0..n).all(|s| level_for(s, 16) <= MAX_LEVEL));
}

/// `n * d` Gaussian values (Box-Muller over an xorshift generator): uniform ones gave the
/// pruning heuristic fewer dead ends.
fn gaussian(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    let mut uniform = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n * d)
        .map(|_| {
            let (a, b) = (uniform(), uniform());
            ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32
        })
        .collect()
}

/// Linked slots with no way in on layer 0 (the tail is scanned, not walked): a breadth-first
/// walk of the level-0 lists from the entry point, made here (the oracle of the repair tests).
fn unreachable(idx: &crate::index::Index) -> usize {
    let snap = idx.snap();
    let n = snap.linked as usize;
    let mut seen = vec![false; n];
    let mut queue = std::collections::VecDeque::from([snap.entry]);
    seen[snap.entry as usize] = true;
    while let Some(u) = queue.pop_front() {
        let l0 = snap.st.l0(u);
        for e in &l0[2..2 + lists::list_len(l0)] {
            let v = e.load(Relaxed) as usize;
            if v < n && !seen[v] {
                seen[v] = true;
                queue.push_back(v as u32);
            }
        }
    }
    seen.iter().filter(|&&x| !x).count()
}

/// Linked slots but the entry point that no level-0 list holds, counted over every list (and
/// no list holds a slot twice).
fn without_way_in(idx: &crate::index::Index) -> Vec<u32> {
    let snap = idx.snap();
    let n = snap.linked as usize;
    let mut held = vec![false; n];
    held[snap.entry as usize] = true;
    for u in 0..n as u32 {
        let l0 = snap.st.l0(u);
        let mut list: Vec<u32> =
            l0[2..2 + lists::list_len(l0)].iter().map(|e| e.load(Relaxed)).collect();
        for &e in &list {
            if let Some(h) = held.get_mut(e as usize) {
                *h = true;
            }
        }
        let len = list.len();
        list.sort_unstable();
        list.dedup();
        assert_eq!(list.len(), len, "slot {u}'s list holds an entry twice");
    }
    (0..n as u32).filter(|&u| !held[u as usize]).collect()
}

/// Small batches after a large one: the nodes their reverse links push out of full lists get
/// a way in back after each batch (`repair_around`), and the whole graph is walked once the
/// rows since the last walk add up to 1,000 (each tenth batch here), which leaves every node
/// reachable. The single adds go to the tail, linked as a batch each time it is full: they
/// leave every linked node reachable, islands included (what weaker rules left here:
/// `docs/design/small-commits.md`).
#[test]
fn small_batches_leave_every_node_reachable() {
    use crate::index::{Control, Index, Options};
    let d = 16;
    let data = gaussian(21_100, d, 0x9e37_79b9_7f4a_7c15);
    let opts = Options { max_connections: 4, ef_construction: 8, ..Options::default() };
    let idx = Index::memory(d, Some(&opts)).unwrap();
    idx.add_batch(&data[..10_000 * d], 10_000, None, Some(1), &Control::default()).unwrap();
    for b in 0..100 {
        let rows = &data[(10_000 + 100 * b) * d..(10_100 + 100 * b) * d];
        idx.add_batch(rows, 100, None, Some(1), &Control::default()).unwrap();
        assert_eq!(without_way_in(&idx), Vec::<u32>::new(), "after batch {b}");
        if b % 10 == 9 {
            assert_eq!(unreachable(&idx), 0, "after batch {b}");
        }
    }
    // Single adds, the tail linked each time it is full and looked around at once (the fourth
    // tail's link also walks the whole graph: 1,024 rows since the last walk).
    let mut links = 0;
    for i in 0..1_100 {
        let linked = idx.snap().linked;
        idx.add(&data[(20_000 + i) * d..(20_001 + i) * d], None).unwrap();
        assert_eq!(without_way_in(&idx), Vec::<u32>::new(), "after single add {i}");
        assert_eq!(unreachable(&idx), 0, "after single add {i}");
        links += usize::from(idx.snap().linked != linked);
    }
    assert_eq!(links, 4);
    assert_eq!(unreachable(&idx), 0);
    let snap = idx.snap();
    assert_eq!(snap.slots, 21_100);
    assert!(snap.linked > 21_000 && snap.slots - snap.linked <= crate::index::TAIL_MAX);
}

/// Repair leaves no node without a way in, even where the pruning heuristic leaves many (few
/// connections, a small beam; what an earlier repair left: `docs/design/small-commits.md`).
/// Oracle: a breadth-first walk of the level-0 lists from the entry point, made here.
#[test]
fn a_batch_with_few_connections_leaves_every_node_reachable() {
    use crate::index::{Control, Index, Options};
    let (d, n) = (16usize, 17_000usize);
    let data = gaussian(n, d, 0x2545_f491_4f6c_dd1d);
    let opts = Options { max_connections: 4, ef_construction: 8, ..Options::default() };
    let idx = Index::memory(d, Some(&opts)).unwrap();
    idx.add_batch(&data, n, None, Some(1), &Control::default()).unwrap();
    assert_eq!(unreachable(&idx), 0, "nodes with no way in, of {n}");
    assert!(idx.check(&Control::default()).unwrap().unreachable.is_empty());
}

/// A search short of memory expands several candidates per round (`search_beam`). Oracle:
/// brute-force k-NN over every vector. Its recall at each ef is at least that of one candidate
/// at a time less 0.005 (it expands more nodes, never fewer), its results are distinct, in
/// order, at their true distances, and a filter holds.
#[test]
fn beam_rounds_find_what_one_at_a_time_finds() {
    let (d, n, k) = (24usize, 6000usize, 10usize);
    let (idx, mut r) = random_index(d, n, 0x5eed_bea4_u64, 2);
    let snap = idx.snap();
    let one = Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32);
    let mut beam = Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32);
    beam.beam = 4;
    let all = |_: u32| true;
    let even = |s: u32| s.is_multiple_of(2);
    for ef in [10usize, 24, 64] {
        let (mut hits_one, mut hits_beam, mut hits_even) = (0, 0, 0);
        for _ in 0..100 {
            let q: Vec<f32> = (0..d).map(|_| r()).collect();
            let mut exact: Vec<(f32, u32)> = (0..n as u32).map(|s| (one.dist(&q, s), s)).collect();
            exact.sort_by(|a, b| a.0.total_cmp(&b.0));
            let want: Vec<u32> = exact[..k].iter().map(|e| e.1).collect();
            let want_even: Vec<u32> =
                exact.iter().map(|e| e.1).filter(|&s| even(s)).take(k).collect();
            let run = |g: &Graph, accept: &dyn Fn(u32) -> bool| {
                g.knn(&q, k, ef, snap.entry, snap.max_level, snap.slots as u32, &accept, None)
                    .unwrap()
            };
            let a = run(&one, &all);
            let b = run(&beam, &all);
            let c = run(&beam, &even);
            for got in [&b, &c] {
                assert_eq!(got.len(), k);
                assert!(got.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 != w[1].1));
                for &(dd, s) in got.iter() {
                    assert_eq!(dd.to_bits(), one.dist(&q, s).to_bits());
                }
            }
            assert!(c.iter().all(|&(_, s)| even(s)));
            hits_one += a.iter().filter(|e| want.contains(&e.1)).count();
            hits_beam += b.iter().filter(|e| want.contains(&e.1)).count();
            hits_even += c.iter().filter(|e| want_even.contains(&e.1)).count();
        }
        let (r1, rb, re) =
            (hits_one as f64 / 1000.0, hits_beam as f64 / 1000.0, hits_even as f64 / 1000.0);
        assert!(rb >= r1 - 0.005, "ef {ef}: beam recall {rb} against {r1} one at a time");
        assert!(re >= r1 - 0.05, "ef {ef}: filtered beam recall {re} against {r1}");
        if ef == 64 {
            assert!(rb >= 0.9, "beam recall {rb} at ef 64");
        }
    }
}

/// A two-hop walk (`filtered.rs`) returns only allowed nodes, at their true distances, and
/// finds the allowed nearest where a fifth or a twentieth of the nodes is allowed; a budget
/// stops it (None) and no budget does not. Oracle: brute-force k-NN over the allowed vectors.
#[test]
fn two_hops_find_the_allowed_nearest_and_a_budget_stops_them() {
    let (d, n, k, ef) = (24usize, 6000usize, 10usize, 64usize);
    let (idx, mut r) = random_index(d, n, 0x7a0_4095_u64, 2);
    let snap = idx.snap();
    let g = Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32);
    let two =
        Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32).filtered(true, u64::MAX);
    for every in [5u32, 20] {
        let allow = |s: u32| s.is_multiple_of(every);
        let mut hits = 0;
        for _ in 0..100 {
            let q: Vec<f32> = (0..d).map(|_| r()).collect();
            let mut exact: Vec<(f32, u32)> =
                (0..n as u32).filter(|&s| allow(s)).map(|s| (g.dist(&q, s), s)).collect();
            exact.sort_by(|a, b| a.0.total_cmp(&b.0));
            let want: Vec<u32> = exact[..k].iter().map(|e| e.1).collect();
            let got = two
                .knn(&q, k, ef, snap.entry, snap.max_level, snap.slots as u32, &allow, None)
                .unwrap();
            assert_eq!(got.len(), k);
            for &(dd, s) in &got {
                assert!(allow(s), "slot {s} is not allowed");
                assert_eq!(dd.to_bits(), g.dist(&q, s).to_bits());
            }
            assert!(got.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 != w[1].1));
            hits += got.iter().filter(|e| want.contains(&e.1)).count();
        }
        let recall = hits as f64 / 1000.0;
        assert!(recall >= 0.9, "two-hop recall {recall} with 1 in {every} allowed");
    }
    let q: Vec<f32> = (0..d).map(|_| r()).collect();
    let tight =
        Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32).filtered(true, 50);
    let allow = |s: u32| s.is_multiple_of(5);
    let stopped = tight.knn(&q, k, ef, snap.entry, snap.max_level, snap.slots as u32, &allow, None);
    assert!(stopped.is_none(), "a budget of 50 distances did not stop a walk at ef {ef}");
}

/// The neighbor heuristic on half-precision rows (a half copy), which measures each candidate
/// from the kept nodes, keeps exactly what the textbook rule keeps: a candidate stays when its
/// own decoded vector is at least its distance `d` from every node kept before it (measured
/// the other way round, from the candidate). Oracle: that rule written out with `dist`, on
/// random candidate lists, with and without entries kept as they are, under each metric.
#[test]
fn select_on_half_rows_keeps_what_the_textbook_rule_keeps() {
    let (d, n) = (40usize, 3000usize);
    let (idx, mut r) = random_index(d, n, 0x51e1_ec7e_u64, 2);
    let snap = idx.snap();
    let copy = HalfCopy::new(&snap.st, snap.slots as u32).expect("a half copy");
    let mut sc = Scratch::new();
    for metric in [format::Metric::Euclidean, format::Metric::InnerProduct] {
        let g = Graph::on_copy(&snap.st, metric, snap.slots as u32, &copy);
        assert!(g.half, "the copy's rows are half precision");
        let (mut buf, mut kept_some) = (Vec::new(), 0);
        for round in 0..60 {
            let q: Vec<f32> = (0..d).map(|_| r()).collect();
            let mut cands: Vec<(f32, u32)> = (0..120)
                .map(|i| ((round * 977 + i * 31) % n) as u32)
                .map(|s| (g.dist(&q, s), s))
                .collect();
            cands.sort_by(|a, b| a.0.total_cmp(&b.0));
            cands.dedup_by_key(|c| c.1);
            for (fixed, m) in [(0usize, 8usize), (0, 32), (5, 16)] {
                let got = g.select_after(&cands, fixed, m, &mut sc);
                let mut want: Vec<(f32, u32)> = Vec::new();
                for (i, &(dc, c)) in cands.iter().enumerate() {
                    if want.len() >= m {
                        break;
                    }
                    let cv = g.vector_f32(c, &mut buf).to_vec();
                    if i < fixed || want.iter().all(|&(_, k)| g.dist(&cv, k) >= dc) {
                        want.push((dc, c));
                    }
                }
                assert_eq!(got, want, "{metric:?}, fixed {fixed}, m {m}");
                // some candidate was rejected: the kept are not the list's first ones
                kept_some += (got[..] != cands[..got.len()]) as usize;
            }
        }
        assert!(kept_some > 0, "{metric:?}: the rule never rejected a candidate");
    }
}
