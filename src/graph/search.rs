//! The search loop: a greedy descent through the upper layers, a beam search of a layer (on
//! layer 0 of an index short of memory, several candidates expanded per round:
//! `search_beam`), the k nearest of layer 0, and exact scans of a set of slots.

use super::*;
use crate::format::EMPTY;
use crate::storage::lists;
use std::sync::atomic::{AtomicU32, Ordering::*};

impl<'a> Graph<'a> {
    /// Greedy walk on an upper layer: move to the nearest neighbor below `limit` until none is
    /// nearer. The walk moves to every nearer node it meets, so `cur_d` is the least distance
    /// met so far and a node met before (on this layer or above) can never be nearer: it is
    /// not computed again (visited in `sc`, whose epoch the descent starts). The walk ends
    /// where it would if it computed every neighbor's distance: same nodes, same order of
    /// comparisons.
    pub(super) fn greedy(
        &self,
        q: &[f32],
        mut cur: u32,
        mut cur_d: f32,
        layer: usize,
        limit: u32,
        sc: &mut Scratch,
    ) -> (u32, f32) {
        loop {
            let mut changed = false;
            if let Some(list) = lists::list_of(self.st, cur, layer) {
                self.gather(list, limit, sc);
                let buf = std::mem::take(&mut sc.buf);
                let seen = &mut sc.seen;
                self.each_dist(q, &buf, |nb, d| {
                    seen.push(pack(d, nb));
                    if d < cur_d {
                        (cur, cur_d, changed) = (nb, d, true);
                    }
                });
                sc.buf = buf;
            }
            if !changed {
                return (cur, cur_d);
            }
        }
    }

    /// The entries of `list` below `limit` not visited yet, into `sc.buf` in list order: marked
    /// visited, their vectors prefetched, counted as distances computed.
    #[inline(always)]
    pub(super) fn gather(&self, list: &[AtomicU32], limit: u32, sc: &mut Scratch) {
        sc.buf.clear();
        self.gather_more(list, limit, sc);
        if self.will_need {
            sc.buf.iter().for_each(|&nb| self.prefetch_row(nb));
        }
    }

    /// `gather` for a beam round (`search_beam`): appends to `sc.buf`, prefetches nothing (the
    /// round prefetches the rows of all its lists at once).
    #[inline(always)]
    fn gather_more(&self, list: &[AtomicU32], limit: u32, sc: &mut Scratch) {
        let from = sc.buf.len();
        for e in lists::entries(list) {
            let nb = e.load(Relaxed);
            if nb < limit && sc.visit(nb) {
                self.prefetch_vector(nb);
                if self.headers_ahead {
                    cpu::prefetch(self.st.header(nb).as_ptr() as *const u8, 1, false);
                }
                sc.buf.push(nb);
            }
        }
        sc.dists += (sc.buf.len() - from) as u64;
    }

    /// `f(slot, distance)` for each of `slots` in order; the distances four at a time where
    /// that pays (each bitwise the single kernel's, so the calls are what one by one gives).
    #[inline(always)]
    pub(super) fn each_dist(&self, q: &[f32], slots: &[u32], mut f: impl FnMut(u32, f32)) {
        let mut i = 0;
        while i < slots.len() {
            let (ds, m) = if self.grouped && i + 4 <= slots.len() {
                (self.dist4(q, &slots[i..i + 4]), 4)
            } else {
                ([self.dist(q, slots[i]), 0.0, 0.0, 0.0], 1)
            };
            for (t, &d) in ds[..m].iter().enumerate() {
                f(slots[i + t], d);
            }
            i += m;
        }
    }

    /// Beam search of one layer from `entries`, keeping the `ef` nearest nodes that `accept`
    /// allows (others still route). Leaves the results in `sc.top`.
    /// `lookahead` (layer 0 only): also prefetch the list of each neighbor that becomes the
    /// nearest candidate when it is found, not only the next candidate's when one is expanded:
    /// the node expanded next is then often that neighbor, whose list was otherwise a cache
    /// miss. Searches do; builds don't, since with a large ef_construction most such prefetches
    /// are wasted (measured: `docs/design/search-path.md`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn search_layer<F: Fn(u32) -> bool>(
        &self,
        q: &[f32],
        entries: impl IntoIterator<Item = (f32, u32)>,
        ef: usize,
        layer: usize,
        lookahead: bool,
        sc: &mut Scratch,
        accept: &F,
    ) {
        let mut bound = Self::begin_layer(entries, ef, self.limit, sc, accept);
        while let Some(std::cmp::Reverse(c)) = sc.cand.pop() {
            let cd = unkey(c);
            if cd > bound && sc.top.len() >= ef {
                break;
            }
            if sc.dists > self.budget {
                sc.over_budget = true;
                break;
            }
            if let Some(std::cmp::Reverse(next)) = sc.cand.peek() {
                if layer == 0 {
                    self.prefetch_list(slot_of(*next));
                    if self.lists_cold {
                        self.st.will_need(slot_of(*next), Area::List);
                    }
                }
            }
            let Some(list) = lists::list_of(self.st, slot_of(c), layer) else { continue };
            self.gather(list, self.limit, sc);
            if self.expect_share > 0.0 && self.rejecting(sc, accept) {
                sc.switch = true;
                break;
            }
            // Each neighbor in turn against the bound as it stands after the ones before it.
            let buf = std::mem::take(&mut sc.buf);
            let lookahead = lookahead && layer == 0;
            let mut best = sc.cand.peek().map(|c| unkey(c.0)).unwrap_or(f32::INFINITY);
            self.each_dist(q, &buf, |nb, d| {
                if sc.top.len() < ef || d < bound {
                    sc.cand.push(std::cmp::Reverse(pack(d, nb)));
                    if lookahead && d < best {
                        best = d;
                        self.prefetch_list(nb);
                        if self.lists_cold {
                            self.st.will_need(nb, Area::List);
                        }
                    }
                    if accept(nb) {
                        sc.top.push(pack(d, nb));
                        if sc.top.len() > ef {
                            sc.top.pop();
                        }
                    }
                    if let Some(t) = sc.top.peek() {
                        bound = unkey(*t);
                    }
                }
            });
            sc.buf = buf;
        }
    }

    /// A layer search's start: a new epoch, the candidates and results from `entries` (those
    /// below `limit`, each once; results only where `accept`). Returns the results' bound.
    #[inline(always)]
    pub(super) fn begin_layer<F: Fn(u32) -> bool>(
        entries: impl IntoIterator<Item = (f32, u32)>,
        ef: usize,
        limit: u32,
        sc: &mut Scratch,
        accept: &F,
    ) -> f32 {
        sc.new_epoch(limit as usize);
        sc.top.clear();
        sc.cand.clear();
        for (d, e) in entries {
            if e >= limit || !sc.visit(e) {
                continue;
            }
            if accept(e) {
                sc.top.push(pack(d, e));
                if sc.top.len() > ef {
                    sc.top.pop();
                }
            }
            sc.cand.push(std::cmp::Reverse(pack(d, e)));
        }
        sc.top.peek().map(|t| unkey(*t)).unwrap_or(f32::INFINITY)
    }

    /// Layer 0 of a search short of memory (`prefetching_pages`), DiskANN's beam: each round expands
    /// the `self.beam` nearest candidates together, so the reads of their lists and then of all
    /// their neighbors' rows are in flight at once, and a query waits a few disk round trips
    /// per round instead of per node. The lists of neighbors nearer than the round's farthest
    /// expanded node (the next round's likely nodes) are prefetched as soon as their distances
    /// are computed.
    /// The same results rule as `search_layer` (the `ef` nearest accepted); it expands more
    /// nodes than one at a time would (a round's later nodes are not held back by what its
    /// first finds), which costs distances, not recall.
    /// Apart from `search_layer`, which shares its start (`begin_layer`) and its gathering
    /// (`gather_more`) but keeps `offer` inline in its own loop: one function for both,
    /// dispatching on the width, slowed searches of an index in memory (measured:
    /// `docs/design/search-path.md`).
    #[inline(never)]
    fn search_beam<F: Fn(u32) -> bool>(
        &self,
        q: &[f32],
        entries: impl IntoIterator<Item = (f32, u32)>,
        ef: usize,
        sc: &mut Scratch,
        accept: &F,
    ) {
        let mut bound = Self::begin_layer(entries, ef, self.limit, sc, accept);
        let mut round = std::mem::take(&mut sc.round);
        loop {
            if sc.dists > self.budget {
                sc.over_budget = true;
                break;
            }
            round.clear();
            let mut farthest = f32::NEG_INFINITY;
            while round.len() < self.beam {
                let Some(&std::cmp::Reverse(c)) = sc.cand.peek() else { break };
                if unkey(c) > bound && sc.top.len() >= ef {
                    break;
                }
                sc.cand.pop();
                farthest = unkey(c);
                round.push(slot_of(c));
            }
            if round.is_empty() {
                break;
            }
            if self.lists_cold {
                round.iter().for_each(|&s| self.st.will_need(s, Area::List));
            }
            sc.buf.clear();
            for &s in &round {
                if let Some(list) = lists::list_of(self.st, s, 0) {
                    self.gather_more(list, self.limit, sc);
                }
            }
            if self.will_need {
                sc.buf.iter().for_each(|&nb| self.prefetch_row(nb));
            }
            let buf = std::mem::take(&mut sc.buf);
            self.each_dist(q, &buf, |nb, d| {
                if offer(sc, nb, d, ef, &mut bound, accept) && self.lists_cold && d < farthest {
                    self.st.will_need(nb, Area::List);
                }
            });
            sc.buf = buf;
        }
        sc.round = round;
    }

    /// Copy `q` to this scratch's 64-byte aligned query buffer and run `f` on the copy.
    pub(super) fn with_aligned<R>(
        sc: &mut Scratch,
        q: &[f32],
        f: impl FnOnce(&[f32], &mut Scratch) -> R,
    ) -> R {
        let mut query = std::mem::take(&mut sc.query);
        query.resize(q.len().div_ceil(16), Line([0.0; 16]));
        // SAFETY: `query` holds at least q.len() f32s (Line is 16 f32s, no padding).
        let aligned =
            unsafe { std::slice::from_raw_parts_mut(query.as_mut_ptr() as *mut f32, q.len()) };
        aligned.copy_from_slice(q);
        let r = f(aligned, sc);
        sc.query = query;
        r
    }

    /// The greedy descent through the upper layers from `entry`: where layer 0 starts, as
    /// (distance, slot). `path` (`max_level` long) receives the node the walk ended at on each
    /// layer, top first: queries with equal paths start in the same part of the graph. Stays
    /// below `published` (see `knn`).
    /// Counts its distances in `sc.dists`; `entry < limit`. Walks layers `max_level` down to
    /// `lowest` (1 for a search; an insertion stops above the new node's level).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn descend(
        &self,
        q: &[f32],
        entry: u32,
        max_level: usize,
        lowest: usize,
        published: u32,
        sc: &mut Scratch,
        mut path: Option<&mut [u32]>,
    ) -> (f32, u32) {
        sc.new_epoch(self.limit as usize);
        if entry < self.limit {
            sc.visit(entry);
        }
        let mut cur = entry;
        let mut cd = self.dist(q, entry);
        sc.dists += 1;
        sc.seen.clear();
        sc.seen.push(pack(cd, entry));
        for layer in (lowest.max(1)..=max_level).rev() {
            (cur, cd) = self.greedy(q, cur, cd, layer, published.min(self.limit), sc);
            if let Some(p) = path.as_deref_mut() {
                p[max_level - layer] = cur;
            }
        }
        (cd, cur)
    }

    /// `descend` on its own, for ordering a batch of queries: the path it took (into `path`,
    /// `max_level` long) and where layer 0 starts. Counts its distances toward the search
    /// counters.
    pub fn start_of(
        &self,
        q: &[f32],
        entry: u32,
        max_level: usize,
        published: u32,
        path: &mut [u32],
    ) -> Option<Start> {
        debug_assert_eq!(path.len(), max_level);
        if entry == EMPTY || entry >= self.limit {
            return None;
        }
        with_scratch(|sc| {
            Self::with_aligned(sc, q, |q, sc| {
                sc.dists = 0;
                self.descend(q, entry, max_level, 1, published, sc, Some(path));
                SEARCH_DISTANCES.fetch_add(sc.dists, Relaxed);
                Some(Start::from_seen(&mut sc.seen))
            })
        })
    }

    /// The `k` nearest accepted nodes to `q`, nearest first, as (distance, slot). The descent
    /// through the upper layers stays below `published`: a node being linked may be in other
    /// lists before its own level-0 list is written, and must not be where layer 0 starts.
    /// `start`: where layer 0 starts if the caller already descended (`start_of`).
    /// None: the search passed its budget (`filtered`) before it was done.
    #[allow(clippy::too_many_arguments)]
    pub fn knn<F: Fn(u32) -> bool>(
        &self,
        q: &[f32],
        k: usize,
        ef: usize,
        entry: u32,
        max_level: usize,
        published: u32,
        accept: &F,
        start: Option<&Start>,
    ) -> Option<Vec<(f32, u32)>> {
        if entry == EMPTY || entry >= self.limit {
            return Some(Vec::new());
        }
        with_scratch(|sc| {
            Self::with_aligned(sc, q, |q, sc| {
                sc.dists = 0;
                sc.lists_read = 0;
                sc.met = [0, 0];
                (sc.over_budget, sc.switch) = (false, false);
                let start = match start {
                    Some(s) if s.entries().next().is_some_and(|e| e.1 < self.limit) => *s,
                    _ => {
                        self.descend(q, entry, max_level, 1, published, sc, None);
                        Start::from_seen(&mut sc.seen)
                    }
                };
                // A filtered search also starts from allowed nodes spread over the index
                // (`seeded`): a filter correlated with the data may allow nothing near the
                // query, and the walk then needs a way into the regions it does allow.
                let seeds: Vec<(f32, u32)> = (self.seeds.iter())
                    .filter(|&&s| s < self.limit)
                    .map(|&s| (self.dist(q, s), s))
                    .collect();
                sc.dists += seeds.len() as u64;
                let entries = || start.entries().chain(seeds.iter().copied());
                if self.two_hop {
                    self.search_two_hop(q, entries(), ef.max(k), sc, accept);
                } else if self.beam > 1 {
                    self.search_beam(q, entries(), ef.max(k), sc, accept);
                } else {
                    self.search_layer(q, entries(), ef.max(k), 0, true, sc, accept);
                    if sc.switch {
                        // Few allowed nodes where the walk is: two hops on from what it found,
                        // with the beam twice as wide (the allowed rows are away from the
                        // query, in more than one region; measured: the filtered-search record).
                        let mut from: Vec<(f32, u32)> = (sc.top.iter())
                            .chain(sc.cand.iter().map(|c| &c.0))
                            .map(|&e| (unkey(e), slot_of(e)))
                            .collect();
                        from.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
                        from.truncate(ef.max(k));
                        from.extend_from_slice(&seeds);
                        self.search_two_hop(q, from, 2 * ef.max(k), sc, accept);
                    }
                }
                SEARCH_DISTANCES.fetch_add(sc.dists, Relaxed);
                SEARCHES.fetch_add(1, Relaxed);
                (!sc.over_budget).then(|| nearest(&mut sc.top, k))
            })
        })
    }

    /// Exact k-NN over the given slots (each below `limit`).
    pub fn scan(&self, q: &[f32], k: usize, slots: impl Iterator<Item = u32>) -> Vec<(f32, u32)> {
        let mut top: BinaryHeap<u64> = BinaryHeap::with_capacity(k.min(4096) + 1);
        for s in slots {
            if s >= self.limit {
                continue;
            }
            let e = pack(self.dist(q, s), s);
            if top.len() < k {
                top.push(e);
            } else if e < *top.peek().unwrap() {
                top.pop();
                top.push(e);
            }
        }
        let mut out: Vec<(f32, u32)> = top.into_iter().map(|e| (unkey(e), slot_of(e))).collect();
        out.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        out
    }
}

/// Offer a neighbor (its distance computed) to a layer search: a candidate (and a result where
/// `accept`) if the results are short of `ef` or it is nearer than their `bound`, which then
/// follows the results. Returns whether it was taken.
#[inline(always)]
pub(super) fn offer<F: Fn(u32) -> bool>(
    sc: &mut Scratch,
    nb: u32,
    d: f32,
    ef: usize,
    bound: &mut f32,
    accept: &F,
) -> bool {
    let taken = sc.top.len() < ef || d < *bound;
    if !taken {
        return false;
    }
    sc.cand.push(std::cmp::Reverse(pack(d, nb)));
    if accept(nb) {
        sc.top.push(pack(d, nb));
        if sc.top.len() > ef {
            sc.top.pop();
        }
    }
    if let Some(t) = sc.top.peek() {
        *bound = unkey(*t);
    }
    true
}
