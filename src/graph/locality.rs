//! Where a batch's vectors go: near vectors into near slots.
//!
//! A search reads the vectors of a few hundred nodes that lie close together in space. Written
//! in the order they arrive, those vectors are scattered over the whole file: every one is its
//! own page (a TLB miss) and its own DRAM row. Laid out so that near vectors sit in near slots,
//! a search's reads fall on fewer pages, and the queries of a batch, which run in the order of
//! where they enter the graph (`Index::batch_starts`), find them still cached.
//!
//! Only the *slots* follow this order. Nodes are still linked in the order the rows came in: a
//! graph built by inserting clustered data cluster by cluster is worse (measured:
//! `docs/design/search-path.md`), and with the insertion order unchanged the graph is the
//! one it would have been but for what slot numbers decide: ties between equal distances, and
//! the order in which `repair` looks at the nodes it gives a way in (so after small batches, an
//! island `repair_around` leaves to the next walk may differ). Recall is the same.
//!
//! The order is a recursive bisection of the rows themselves: a 2-means clustering of an evenly
//! spaced sample of a group gives a direction (between the two means) and a cut (halfway);
//! the group's rows are split there (never nearer an end than an eighth), and each half again,
//! down to [`LEAF`] rows. Each split follows the group's own widest separation and falls
//! between clusters, not through one, so clusters that no handful of global directions tells
//! apart still end up in runs of slots. The same rows always give the same order.
//!
//! A query's nearest nodes and their neighbours then lie on fewer pages than under a k-d split
//! on principal components or a breadth-first order of the finished graph, which makes searches
//! of an index larger than memory faster and costs those in memory nothing (measured, with
//! the order's share of a build: `docs/design/larger-than-memory.md`).

use crate::distance::{dot, l2_squared};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Batches at least this large are laid out by locality; smaller ones are in cache anyway.
pub const LOCALITY_MIN: usize = 1024;
/// Rows of a group its 2-means is learned from.
const SAMPLE: usize = 256;
/// Lloyd iterations of each 2-means: the split needs the direction roughly, not exactly.
const ITERATIONS: usize = 3;
/// Rows below which a group is not split further (a few pages of vectors).
const LEAF: usize = 16;
/// Groups at least this large project their rows, and split their halves, on two threads.
const PARALLEL: usize = 4096;

/// `order[j]` = the row of the batch that goes into its `j`-th slot: a permutation of `0..n`.
/// `row(i, out)` writes row `i` (as f32) into `out` (`dims` long); it is called from several
/// threads. Returns None if `cancelled()` turned true meanwhile.
pub fn slot_order(
    n: usize,
    dims: usize,
    row: &(dyn Fn(usize, &mut [f32]) + Sync),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Option<Vec<u32>> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    if n <= LEAF || dims == 0 {
        return Some(order);
    }
    let stopped = AtomicBool::new(false);
    bisect(&mut order, dims, row, cancelled, &stopped);
    (!stopped.load(Relaxed)).then_some(order)
}

/// A batch's rows paired with free slots near them (slot reuse): `order` is [`slot_order`]
/// over the batch's `n` rows followed by the free slots' old vectors (items `n..`), whose
/// neighbors in space sit in the slots around them. Walking it, a row takes the nearest free
/// slot before it not yet taken, or else the next one after it (a stack of whichever waits).
/// Returns the (row, free slot index) pairs and the rows left over, in `order`'s order.
pub fn pair_with_free(order: &[u32], n: usize) -> (Vec<(u32, u32)>, Vec<u32>) {
    let mut pairs = Vec::new();
    let (mut rows, mut free) = (Vec::new(), Vec::new());
    let mut paired = vec![false; n];
    for &x in order {
        if (x as usize) < n {
            match free.pop() {
                Some(f) => {
                    pairs.push((x, f));
                    paired[x as usize] = true;
                }
                None => rows.push(x),
            }
        } else {
            let f = x - n as u32;
            match rows.pop() {
                Some(r) => {
                    pairs.push((r, f));
                    paired[r as usize] = true;
                }
                None => free.push(f),
            }
        }
    }
    let left = order.iter().copied().filter(|&x| (x as usize) < n && !paired[x as usize]);
    (pairs, left.collect())
}

/// Order `rows` by recursive splits along each group's 2-means direction.
fn bisect(
    rows: &mut [u32],
    dims: usize,
    row: &(dyn Fn(usize, &mut [f32]) + Sync),
    cancelled: &(dyn Fn() -> bool + Sync),
    stopped: &AtomicBool,
) {
    if rows.len() <= LEAF || stopped.load(Relaxed) {
        return;
    }
    let (dir, cut) = direction(rows, dims, row);
    // Each 1,024 rows (and each smaller group) look at `cancelled` first, so that a pass over a
    // large group stops soon.
    let project = |chunk: &[u32]| {
        if cancelled() {
            stopped.store(true, Relaxed);
        }
        let mut buf = vec![0f32; dims];
        chunk
            .iter()
            .map(|&r| {
                row(r as usize, &mut buf);
                (dot(&buf, &dir), r)
            })
            .collect::<Vec<_>>()
    };
    let mid = {
        let mut keyed: Vec<(f32, u32)> = if rows.len() >= PARALLEL {
            rows.par_chunks(1024).flat_map_iter(project).collect()
        } else {
            project(rows)
        };
        if stopped.load(Relaxed) {
            return;
        }
        // At the 2-means boundary, so that a cluster on one side is not cut by a median that
        // falls among the clusters on that side, but never nearer an end than an eighth (a
        // lone far row would otherwise peel off one level at a time). A group the boundary
        // does not split (its sample's rows all equal) splits in half. Ties go by row, so the
        // order is total.
        let near = keyed.iter().filter(|k| k.0 <= cut).count();
        let mid = if near == 0 || near == rows.len() {
            rows.len() / 2
        } else {
            near.clamp(rows.len() / 8, rows.len() - rows.len() / 8)
        };
        keyed.select_nth_unstable_by(mid, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        rows.iter_mut().zip(&keyed).for_each(|(r, k)| *r = k.1);
        mid
    };
    let (lo, hi) = rows.split_at_mut(mid);
    if lo.len() + hi.len() >= PARALLEL {
        rayon::join(
            || bisect(lo, dims, row, cancelled, stopped),
            || bisect(hi, dims, row, cancelled, stopped),
        );
    } else {
        bisect(lo, dims, row, cancelled, stopped);
        bisect(hi, dims, row, cancelled, stopped);
    }
}

/// The difference of the two means of a 2-means clustering of an evenly spaced sample of
/// `rows`, started from a far pair (the row farthest from the first, and the row farthest
/// from that), and the projection on it of the point halfway between them. Zero where the
/// sample's rows are all equal.
fn direction(
    rows: &[u32],
    dims: usize,
    row: &(dyn Fn(usize, &mut [f32]) + Sync),
) -> (Vec<f32>, f32) {
    let s = rows.len().min(SAMPLE);
    let mut y = vec![0f32; s * dims];
    for (t, out) in y.chunks_exact_mut(dims).enumerate() {
        row(rows[t * rows.len() / s] as usize, out);
    }
    let sample: Vec<&[f32]> = y.chunks_exact(dims).collect();
    // The first of the sample's rows farthest from `from`.
    let farthest = |from: &[f32]| {
        let mut best = (f32::NEG_INFINITY, sample[0]);
        for &x in &sample {
            let d = l2_squared(from, x);
            if d > best.0 {
                best = (d, x);
            }
        }
        best.1
    };
    let a = farthest(sample[0]);
    let mut means = [a.to_vec(), farthest(a).to_vec()];
    for _ in 0..ITERATIONS {
        // Nearer mean 1 than mean 0 <=> x . (m1 - m0) > ((m0 + m1) / 2) . (m1 - m0).
        let (dir, cut) = boundary(&means);
        let mut sums = [vec![0f32; dims], vec![0f32; dims]];
        let mut counts = [0usize; 2];
        for x in &sample {
            let side = usize::from(dot(x, &dir) > cut);
            sums[side].iter_mut().zip(*x).for_each(|(a, b)| *a += b);
            counts[side] += 1;
        }
        for side in 0..2 {
            if counts[side] > 0 {
                let inv = 1.0 / counts[side] as f32;
                means[side] = sums[side].iter().map(|x| x * inv).collect();
            }
        }
    }
    boundary(&means)
}

/// The direction `m1 - m0` between two means and the projection on it of their midpoint (taken
/// as such, not as `(|m1|^2 - |m0|^2) / 2`, which loses the digits that matter for data far
/// from the origin).
fn boundary(means: &[Vec<f32>; 2]) -> (Vec<f32>, f32) {
    let dir: Vec<f32> = means[1].iter().zip(&means[0]).map(|(x, y)| x - y).collect();
    let mid: Vec<f32> = means[1].iter().zip(&means[0]).map(|(x, y)| (x + y) / 2.0).collect();
    let cut = dot(&dir, &mid);
    (dir, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gaussian blobs around well-separated centres, rows shuffled: (rows, blob of each row).
    fn blobs(n: usize, dims: usize, blobs: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let centres: Vec<f32> = (0..blobs * dims).map(|_| next() * 40.0).collect();
        let mut data = Vec::with_capacity(n * dims);
        let mut label = Vec::with_capacity(n);
        for i in 0..n {
            let b = (i * 7919) % blobs;
            label.push(b);
            data.extend((0..dims).map(|j| centres[b * dims + j] + next()));
        }
        (data, label)
    }

    fn order_of(data: &[f32], n: usize, dims: usize) -> Vec<u32> {
        let row = |i: usize, out: &mut [f32]| out.copy_from_slice(&data[i * dims..(i + 1) * dims]);
        slot_order(n, dims, &row, &|| false).unwrap()
    }

    #[test]
    fn the_order_is_a_permutation_and_the_same_for_the_same_rows() {
        for (n, dims) in [(1, 4), (16, 3), (17, 3), (1000, 1), (3000, 37), (5000, 128)] {
            let (data, _) = blobs(n, dims, 10, n as u64);
            let order = order_of(&data, n, dims);
            let mut seen = vec![false; n];
            for &r in &order {
                assert!(!seen[r as usize], "row {r} twice");
                seen[r as usize] = true;
            }
            assert!(seen.iter().all(|&s| s));
            assert_eq!(order, order_of(&data, n, dims));
        }
    }

    /// Oracle: the blob labels. Rows and free slots drawn from the same blobs pair within
    /// their blob almost always, every row once, every free slot at most once.
    #[test]
    fn rows_pair_with_free_slots_of_their_own_blob() {
        let (dims, blobs_n) = (24, 12);
        for (n, f) in [(3000, 3000), (3000, 1200), (1500, 3000)] {
            let (data, label) = blobs(n + f, dims, blobs_n, 11);
            let order = order_of(&data, n + f, dims);
            let (pairs, left) = pair_with_free(&order, n);
            assert_eq!(pairs.len(), n.min(f));
            assert_eq!(pairs.len() + left.len(), n);
            let mut rows: Vec<u32> = pairs.iter().map(|p| p.0).chain(left.clone()).collect();
            rows.sort_unstable();
            assert!(rows.iter().copied().eq(0..n as u32), "every row once");
            let mut free: Vec<u32> = pairs.iter().map(|p| p.1).collect();
            free.sort_unstable();
            free.dedup();
            assert_eq!(free.len(), pairs.len(), "a free slot twice");
            let same =
                pairs.iter().filter(|p| label[p.0 as usize] == label[n + p.1 as usize]).count();
            // Blob sizes differ between rows and free slots by chance: a few pairs cross.
            assert!(same * 100 >= pairs.len() * 90, "{same} of {} pairs in one blob", pairs.len());
        }
    }

    /// Runs of rows of one blob in the order of `blobs(n, dims, k, seed)`.
    fn blob_runs(n: usize, dims: usize, k: usize, seed: u64) -> usize {
        let (data, label) = blobs(n, dims, k, seed);
        let order = order_of(&data, n, dims);
        1 + order.windows(2).filter(|w| label[w[0] as usize] != label[w[1] as usize]).count()
    }

    #[test]
    fn rows_of_one_blob_end_up_next_to_each_other() {
        // The oracle is the blob each row was drawn from: laid out in order, a blob's rows
        // form a few runs; in arrival order (round robin) every row starts a new run.
        let (n, dims, k) = (8000, 64, 20);
        let runs = blob_runs(n, dims, k, 3);
        let (_, label) = blobs(n, dims, k, 3);
        let arrival = 1 + (1..n).filter(|&i| label[i] != label[i - 1]).count();
        assert_eq!(arrival, n);
        assert!(runs <= 4 * k, "{runs} runs of one blob for {k} blobs");
    }

    #[test]
    fn many_clusters_in_many_dimensions_end_up_in_runs() {
        // Embeddings' case: more clusters than any few global directions tell apart (200 blobs
        // in 128 dimensions, centres drawn at random). The oracle is again each row's blob.
        let (n, dims, k) = (12_000, 128, 200);
        let runs = blob_runs(n, dims, k, 5);
        assert!(runs <= 2 * k, "{runs} runs of one blob for {k} blobs");
    }

    #[test]
    fn constant_rows_and_cancellation() {
        let (n, dims) = (2000, 8);
        let data = vec![1.5f32; n * dims];
        let order = order_of(&data, n, dims);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n as u32).collect::<Vec<_>>());
        let row = |i: usize, out: &mut [f32]| out.copy_from_slice(&data[i * dims..(i + 1) * dims]);
        assert!(slot_order(n, dims, &row, &|| true).is_none());
    }
}
