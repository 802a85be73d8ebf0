//! HNSW over the mapped storage: the search loop, insertion with the neighbor-selection
//! heuristic of the HNSW paper, and the list read/write helpers.
//!
//! Lists are read without locks through atomics: a list being rewritten may be seen half old,
//! half new, but every entry is a slot that existed when it was written and is bounds-checked
//! against `limit` before use, so a search can only route differently, never go out of bounds.
//! Writers of a list hold its stripe lock.

use crate::cpu;
use crate::distance::{Kernel, Kernel4};
use crate::error::Result;
use crate::format::{self, list_crc, EMPTY, NO_UPPER};
use crate::halfcopy::HalfCopy;
use crate::storage::Storage;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering::*};

pub const MAX_LEVEL: usize = 15;
pub const LOCK_STRIPES: usize = 1 << 14;
/// How many of the nodes the descent measured a search of layer 0 starts from (see `Start`).
pub const SEEDS: usize = 16;

/// Where a search of layer 0 starts: the `SEEDS` nearest nodes the descent through the upper
/// layers measured (every node there is on layer 0 too), as packed keys, unused ones
/// `u64::MAX`. Starting from them rather than from the walk's end alone costs no distance,
/// and layer 0 does not measure them again: on minilm and clustered data 1-2% fewer distances
/// at equal recall (the descent's nodes near the query are also met on layer 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start([u64; SEEDS]);

impl Start {
    /// The nearest `SEEDS` of `seen` (packed keys; reordered).
    fn from_seen(seen: &mut [u64]) -> Start {
        if seen.len() > SEEDS {
            seen.select_nth_unstable(SEEDS - 1);
        }
        let mut keys = [u64::MAX; SEEDS];
        let n = seen.len().min(SEEDS);
        keys[..n].copy_from_slice(&seen[..n]);
        keys.sort_unstable();
        Start(keys)
    }

    /// The seeds as (distance, slot), nearest first: the first is where the greedy walk ended
    /// (it moves to every nearer node it measures), unless another node measured at the same
    /// distance has a lower slot.
    pub fn entries(&self) -> impl Iterator<Item = (f32, u32)> + '_ {
        self.0.iter().take_while(|&&e| e != u64::MAX).map(|&e| (unkey(e), slot_of(e)))
    }
}

/// Write a list: entries first, then its checksum, then the head word (count, and the level
/// and the locality bit, kept from the old head, for layer 0) with release ordering, so a
/// reader that sees the new count sees the entries.
pub fn write_list(list: &[AtomicU32], slot: u32, layer: usize, entries: &[u32], level: usize) {
    debug_assert!(entries.len() <= list.len() - 2);
    for (i, e) in entries.iter().enumerate() {
        list[2 + i].store(*e, Relaxed);
    }
    let head = if layer == 0 {
        format::l0_head(entries.len(), level) | (list[0].load(Relaxed) & format::L0_LOCALITY)
    } else {
        entries.len() as u32
    };
    list[1].store(list_crc(slot, layer, head, entries), Relaxed);
    list[0].store(head, Release);
}

/// Number of entries of a list, clamped to its capacity (a damaged count cannot overrun).
#[inline(always)]
pub fn list_len(list: &[AtomicU32]) -> usize {
    ((list[0].load(Acquire) & 0xffff) as usize).min(list.len() - 2)
}

/// The level stored in a slot's level-0 head.
#[inline(always)]
pub fn level_of(st: &Storage, slot: u32) -> usize {
    ((st.l0(slot)[0].load(Relaxed) >> 16) & 0xff) as usize
}

/// The list of `slot` at `layer`, or None when the node has no such layer (or its heap
/// reference is damaged).
#[inline(always)]
pub fn list_of(st: &Storage, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
    if layer == 0 {
        return Some(st.l0(slot));
    }
    if level_of(st, slot) < layer {
        return None;
    }
    let r = st.header(slot)[1].load(Relaxed);
    if r == NO_UPPER {
        return None;
    }
    st.upper_checked(r, layer)
}

/// Every word of a node's lists (level 0, then layers 1..=level), for undo and savepoints.
pub fn snapshot_lists(st: &Storage, slot: u32) -> Vec<u32> {
    let mut out: Vec<u32> = st.l0(slot).iter().map(|w| w.load(Relaxed)).collect();
    for layer in 1..=level_of(st, slot) {
        if let Some(l) = list_of(st, slot, layer) {
            out.extend(l.iter().map(|w| w.load(Relaxed)));
        }
    }
    out
}

/// Put back what `snapshot_lists` took.
pub fn restore_lists(st: &Storage, slot: u32, words: &[u32]) {
    let l0 = st.l0(slot);
    let n0 = l0.len().min(words.len());
    for (w, v) in l0[1..n0].iter().zip(&words[1..n0]) {
        w.store(*v, Relaxed);
    }
    l0[0].store(words[0], Release);
    let mut rest = &words[n0..];
    let mut layer = 1;
    while !rest.is_empty() {
        let Some(l) = list_of(st, slot, layer) else { break };
        let n = l.len().min(rest.len());
        for (w, v) in l.iter().zip(&rest[..n]) {
            w.store(*v, Relaxed);
        }
        rest = &rest[n..];
        layer += 1;
    }
}

/// A level for a new node, from one number alone: the slot it would take if rows were laid
/// out in the order they came (`locality` may place it elsewhere; its level stays), so that
/// builds are reproducible: `floor(-ln(u) / ln(M))`, capped.
pub fn level_for(place: u64, m: usize) -> usize {
    let mut z = place.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    ((-u.ln() / (m as f64).ln()) as usize).min(MAX_LEVEL)
}

/// A distance as a u32 whose unsigned order is the float order (negative values included),
/// packed with a slot into one u64 heap entry.
#[inline(always)]
fn key(d: f32) -> u64 {
    let b = d.to_bits();
    (if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 }) as u64
}
#[inline(always)]
fn unkey(k: u64) -> f32 {
    let b = (k >> 32) as u32;
    f32::from_bits(if b & 0x8000_0000 != 0 { b & 0x7fff_ffff } else { !b })
}
#[inline(always)]
fn pack(d: f32, slot: u32) -> u64 {
    (key(d) << 32) | slot as u64
}
#[inline(always)]
fn slot_of(e: u64) -> u32 {
    e as u32
}

/// The `k` nearest entries of a result heap (emptied), nearest first, as (distance, slot).
/// Packed keys order as (distance by total_cmp, slot), so they are selected and sorted as
/// integers, and only the k kept are sorted.
fn nearest(top: &mut BinaryHeap<u64>, k: usize) -> Vec<(f32, u32)> {
    let mut keys: Vec<u64> = top.drain().collect();
    if keys.len() > k {
        keys.select_nth_unstable(k);
        keys.truncate(k);
    }
    keys.sort_unstable();
    keys.into_iter().map(|e| (unkey(e), slot_of(e))).collect()
}

/// One 64-byte line of f32s: a Vec of them is a 64-byte aligned buffer.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Per-thread buffers, reused across queries: no allocation per search once warm.
pub struct Scratch {
    /// The query, copied to a 64-byte boundary: stored vectors are 64-byte aligned, and so
    /// every 64-byte load of a distance kernel then reads one cache line, not two (a query
    /// from NumPy is usually only 16-byte aligned).
    query: Vec<Line>,
    visited: Vec<u16>,
    epoch: u16,
    /// Candidates, nearest first (min-heap through inverted keys).
    cand: BinaryHeap<std::cmp::Reverse<u64>>,
    /// Results so far, farthest on top.
    top: BinaryHeap<u64>,
    buf: Vec<u32>,
    /// Nodes the current descent measured, as packed keys (see `Start`).
    seen: Vec<u64>,
    /// A decoded stored vector (f16 storage) for node-to-node distances.
    vec_a: Vec<f32>,
    vec_b: Vec<f32>,
    /// Distances computed by the current search (see `counters`).
    dists: u64,
}

/// Distances computed by searches (`knn`) and how many searches, since the process started:
/// for benchmarks (distances per query measures the graph's efficiency). One relaxed add per
/// search, none per distance.
static SEARCH_DISTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SEARCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// (searches, distances computed by them) so far in this process.
pub fn counters() -> (u64, u64) {
    (SEARCHES.load(Relaxed), SEARCH_DISTANCES.load(Relaxed))
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            query: Vec::new(),
            visited: Vec::new(),
            epoch: 0,
            cand: BinaryHeap::new(),
            top: BinaryHeap::new(),
            buf: Vec::new(),
            seen: Vec::new(),
            vec_a: Vec::new(),
            vec_b: Vec::new(),
            dists: 0,
        }
    }
    fn new_epoch(&mut self, limit: usize) {
        if self.visited.len() < limit {
            self.visited.resize(limit, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.visited.iter_mut().for_each(|v| *v = 0);
            self.epoch = 1;
        }
    }
    /// Mark `s` visited; true if it was not already.
    #[inline(always)]
    fn visit(&mut self, s: u32) -> bool {
        // SAFETY: callers check s < limit <= visited.len().
        let v = unsafe { self.visited.get_unchecked_mut(s as usize) };
        if *v == self.epoch {
            false
        } else {
            *v = self.epoch;
            true
        }
    }
}

/// How many candidates ahead the neighbor heuristic asks for a candidate's vector (see
/// `Graph::select`). Measured on a one-thread minilm build, alternating processes: the layer-0
/// heuristic took 0.75-0.80x the time with 4 ahead (8 gave no more), about 3% of the build.
const SELECT_AHEAD: usize = 4;

/// Vectors at least this long get their distances computed four at a time in a search: the
/// prefetch of ADR-0015 covers only their first lines, and interleaving four lets the misses
/// on the rest overlap. Shorter vectors are whole in the prefetched lines.
const GROUP_MIN_BYTES: usize = 1024;

/// GROUP_MIN_BYTES, or `CHASSIS_GROUP_MIN_BYTES` from the environment (for measuring and tests:
/// 0 groups every search, a large value none). Read once.
fn group_min_bytes() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("CHASSIS_GROUP_MIN_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(GROUP_MIN_BYTES)
    })
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::new());
}

/// Run `f` with this thread's scratch buffers.
pub fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => f(&mut s),
        // Re-entered on this thread (not expected): use fresh buffers rather than fail.
        Err(_) => f(&mut Scratch::new()),
    })
}

/// The graph as one search or insertion sees it.
pub struct Graph<'a> {
    pub st: &'a Storage,
    kernel: Kernel,
    kernel4: Kernel4,
    /// Distances of an expanded node's neighbors are computed four at a time (see
    /// group_min_bytes).
    grouped: bool,
    bias: f32,
    sign: f32,
    dims: usize,
    half: bool,
    /// Slots below this may be visited (they exist in the mapped segments).
    pub limit: u32,
    pf_lines: usize,
    pf_l1: bool,
    pub m: usize,
    /// Where the vectors are read from, if not the storage: a batch's linking reads a
    /// half-precision copy (see `halfcopy`).
    copy: Option<&'a HalfCopy>,
}

impl<'a> Graph<'a> {
    pub fn new(st: &'a Storage, metric: format::Metric, limit: u32) -> Graph<'a> {
        Self::reading(st, metric, limit, &st.geo, None)
    }

    /// A graph whose distances are measured on `copy` (slots below its length) instead of the
    /// stored vectors: for linking only (the lists are the storage's either way).
    /// Its rows are measured four at a time whenever they are longer than the prefetched lines
    /// (a 768-byte row at 384 dimensions, which the search rule leaves to single distances):
    /// a 2-thread minilm build on the copy took 0.77-0.84x the time of one on the file with
    /// that, 0.73-1.05x (median 0.98x) without it.
    pub fn on_copy(
        st: &'a Storage,
        metric: format::Metric,
        limit: u32,
        copy: &'a HalfCopy,
    ) -> Graph<'a> {
        let geo = copy.geo();
        let mut g = Self::reading(st, metric, limit.min(copy.slots()), geo, Some(copy));
        g.grouped |= geo.vec_bytes > g.pf_lines * 64;
        g
    }

    /// `geo`: the geometry of the vectors read (the storage's, or the copy's).
    fn reading(
        st: &'a Storage,
        metric: format::Metric,
        limit: u32,
        geo: &format::Geometry,
        copy: Option<&'a HalfCopy>,
    ) -> Graph<'a> {
        let k = crate::distance::kernels().for_metric(metric, geo.precision);
        let ci = cpu::info();
        Graph {
            st,
            kernel: k.one,
            kernel4: k.four,
            grouped: geo.vec_bytes >= group_min_bytes(),
            bias: k.bias,
            sign: k.sign,
            dims: geo.dims,
            half: geo.precision == format::Precision::Half,
            limit: limit.min(st.capacity().min(u32::MAX as u64) as u32),
            pf_lines: ci.prefetch_lines.min(geo.vec_bytes.div_ceil(64)).max(1),
            pf_l1: ci.prefetch_l1,
            m: st.geo.m,
            copy,
        }
    }

    /// A slot's vector as this graph reads it (the copy's row, or the stored vector).
    #[inline(always)]
    fn vector_ptr(&self, slot: u32) -> *const u8 {
        match self.copy {
            Some(c) => c.ptr(slot),
            None => self.st.vector_ptr(slot),
        }
    }

    /// Distance from an f32 query to a stored vector (squared for euclidean).
    #[inline(always)]
    pub fn dist(&self, q: &[f32], slot: u32) -> f32 {
        debug_assert!(q.len() == self.dims && slot < self.limit);
        // SAFETY: q has `dims` f32s; the vector lies in a live mapping or the copy (slot <
        // limit, which is at most the copy's length); the kernel set was chosen for this CPU
        // and for the precision of what `vector_ptr` points to.
        self.bias
            + self.sign * unsafe { (self.kernel)(q.as_ptr(), self.vector_ptr(slot), self.dims) }
    }

    /// Distances to four stored vectors (each bitwise what `dist` gives).
    #[inline(always)]
    fn dist4(&self, q: &[f32], slots: &[u32]) -> [f32; 4] {
        debug_assert!(
            q.len() == self.dims && slots.len() == 4 && slots.iter().all(|&s| s < self.limit)
        );
        let v = [
            self.vector_ptr(slots[0]),
            self.vector_ptr(slots[1]),
            self.vector_ptr(slots[2]),
            self.vector_ptr(slots[3]),
        ];
        // SAFETY: as `dist`, for each of the four slots.
        unsafe { (self.kernel4)(q.as_ptr(), &v, self.dims) }.map(|d| self.bias + self.sign * d)
    }

    /// (distance, slot) from `q` to each of `slots`, four at a time where that pays.
    fn dists_to(&self, q: &[f32], slots: &[u32]) -> Vec<(f32, u32)> {
        let mut out = Vec::with_capacity(slots.len() + 1);
        self.each_dist(q, slots, |s, d| out.push((d, s)));
        out
    }

    /// A slot's vector as f32 as this graph reads it (the stored vector, or the copy's scaled
    /// row), decoding half precision into `buf`.
    pub fn vector_f32<'b>(&'b self, slot: u32, buf: &'b mut Vec<f32>) -> &'b [f32] {
        let bytes = match self.copy {
            Some(c) => c.row(slot),
            None => self.st.vector_bytes(slot),
        };
        if self.half {
            buf.resize(self.dims, 0.0);
            format::decode_vector(bytes, format::Precision::Half, buf);
            buf
        } else {
            // SAFETY: full-precision vectors are `dims` little-endian f32s at a 4-byte aligned
            // address (stride is a multiple of 4); see Storage::vector_bytes for aliasing.
            unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const f32, self.dims) }
        }
    }

    /// Every line of a level-0 record (136 bytes at M=16 lie across three lines wherever they
    /// start: asking for two left the last entries to a miss on every expansion).
    #[inline(always)]
    fn prefetch_list(&self, slot: u32) {
        let list = self.st.l0(slot);
        let p = list.as_ptr() as *const u8;
        let lines = (p as usize % 64 + list.len() * 4).div_ceil(64);
        cpu::prefetch(p.wrapping_sub(p as usize % 64), lines, false);
    }

    #[inline(always)]
    fn prefetch_vector(&self, slot: u32) {
        cpu::prefetch(self.vector_ptr(slot), self.pf_lines, self.pf_l1);
    }

    /// Greedy walk on an upper layer: move to the nearest neighbor below `limit` until none is
    /// nearer. The walk moves to every nearer node it meets, so `cur_d` is the least distance
    /// met so far and a node met before (on this layer or above) can never be nearer: it is
    /// not measured again (visited in `sc`, whose epoch the descent starts). The walk ends
    /// where it would if it measured every neighbor: same nodes, same order of comparisons.
    fn greedy(
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
            if let Some(list) = list_of(self.st, cur, layer) {
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
    /// visited, their vectors prefetched, counted as measured.
    #[inline(always)]
    fn gather(&self, list: &[AtomicU32], limit: u32, sc: &mut Scratch) {
        let n = list_len(list);
        sc.buf.clear();
        for e in &list[2..2 + n] {
            let nb = e.load(Relaxed);
            if nb < limit && sc.visit(nb) {
                self.prefetch_vector(nb);
                sc.buf.push(nb);
            }
        }
        sc.dists += sc.buf.len() as u64;
    }

    /// `f(slot, distance)` for each of `slots` in order; the distances four at a time where
    /// that pays (each bitwise the single kernel's, so the calls are what one by one gives).
    #[inline(always)]
    fn each_dist(&self, q: &[f32], slots: &[u32], mut f: impl FnMut(u32, f32)) {
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
    /// miss. Searches: paired in alternating processes, 0.97-1.26x (median 1.08x) over minilm
    /// and clustered, file and memory, batch and loop, identical results. Builds don't: with
    /// ef_construction 200 most such prefetches are wasted and a minilm build took 1.06x as long.
    #[allow(clippy::too_many_arguments)]
    fn search_layer<F: Fn(u32) -> bool>(
        &self,
        q: &[f32],
        entries: impl IntoIterator<Item = (f32, u32)>,
        ef: usize,
        layer: usize,
        lookahead: bool,
        sc: &mut Scratch,
        accept: &F,
    ) {
        sc.new_epoch(self.limit as usize);
        sc.top.clear();
        sc.cand.clear();
        for (d, e) in entries {
            if e >= self.limit || !sc.visit(e) {
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
        let mut bound = sc.top.peek().map(|t| unkey(*t)).unwrap_or(f32::INFINITY);
        while let Some(std::cmp::Reverse(c)) = sc.cand.pop() {
            let cd = unkey(c);
            if cd > bound && sc.top.len() >= ef {
                break;
            }
            if let Some(std::cmp::Reverse(next)) = sc.cand.peek() {
                if layer == 0 {
                    self.prefetch_list(slot_of(*next));
                }
            }
            let Some(list) = list_of(self.st, slot_of(c), layer) else { continue };
            self.gather(list, self.limit, sc);
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

    /// Copy `q` to this scratch's 64-byte aligned query buffer and run `f` on the copy.
    fn with_aligned<R>(
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
    fn descend(
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
    ) -> Vec<(f32, u32)> {
        if entry == EMPTY || entry >= self.limit {
            return Vec::new();
        }
        with_scratch(|sc| {
            Self::with_aligned(sc, q, |q, sc| {
                sc.dists = 0;
                let start = match start {
                    Some(s) if s.entries().next().is_some_and(|e| e.1 < self.limit) => *s,
                    _ => {
                        self.descend(q, entry, max_level, 1, published, sc, None);
                        Start::from_seen(&mut sc.seen)
                    }
                };
                self.search_layer(q, start.entries(), ef.max(k), 0, true, sc, accept);
                SEARCH_DISTANCES.fetch_add(sc.dists, Relaxed);
                SEARCHES.fetch_add(1, Relaxed);
                nearest(&mut sc.top, k)
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

    /// The heuristic of the HNSW paper (algorithm 4): walk the candidates nearest first and
    /// keep one only if it is nearer to the base than to every node kept so far.
    /// Each candidate's vector is asked for SELECT_AHEAD candidates before it is weighed: an
    /// insertion's search meets about 2,500 vectors (3.8 MB at 384 dimensions, more than L2),
    /// so most of the 200 candidates have left the core's caches by now.
    fn select(&self, cands: &[(f32, u32)], m: usize, sc: &mut Scratch) -> Vec<(f32, u32)> {
        let mut kept: Vec<(f32, u32)> = Vec::with_capacity(m);
        let mut buf = std::mem::take(&mut sc.vec_b);
        for &(_, c) in cands.iter().take(SELECT_AHEAD) {
            self.prefetch_vector(c);
        }
        for (i, &(d, c)) in cands.iter().enumerate() {
            if kept.len() >= m {
                break;
            }
            if let Some(&(_, next)) = cands.get(i + SELECT_AHEAD) {
                self.prefetch_vector(next);
            }
            let cv = self.vector_f32(c, &mut buf);
            if kept.iter().all(|&(_, r)| self.dist(cv, r) >= d) {
                kept.push((d, c));
            }
        }
        sc.vec_b = buf;
        kept
    }

    /// Link node `slot` (vector, header and empty lists already written, level `level`) into
    /// the graph. `entry` holds (entry point, max level); `locks` are the list stripe locks;
    /// `before_modify(n)` is called, under n's lock, before an existing node's lists change.
    pub fn insert(
        &self,
        slot: u32,
        level: usize,
        ef_construction: usize,
        entry: &Mutex<(u32, usize)>,
        locks: &[Mutex<()>],
        before_modify: &(dyn Fn(u32) -> Result<()> + Sync),
    ) -> Result<()> {
        let (ep, max_level) = *entry.lock();
        if ep == EMPTY {
            let mut e = entry.lock();
            if e.0 == EMPTY {
                *e = (slot, level);
                return Ok(());
            }
        }
        let (ep, max_level) = if ep == EMPTY { *entry.lock() } else { (ep, max_level) };
        with_scratch(|sc| -> Result<()> {
            // The node's own vector is the query: at a 64-byte boundary (see Scratch::query).
            let mut qbuf = std::mem::take(&mut sc.vec_a);
            let r = Self::with_aligned(sc, self.vector_f32(slot, &mut qbuf), |q, sc| {
                self.link_node(
                    q,
                    slot,
                    level,
                    ep,
                    max_level,
                    ef_construction,
                    locks,
                    before_modify,
                    sc,
                )
            });
            sc.vec_a = qbuf;
            r
        })?;
        if level > max_level {
            let mut e = entry.lock();
            if level > e.1 {
                *e = (slot, level);
            }
        }
        Ok(())
    }

    /// `insert`'s linking, with `q` the node's vector.
    #[allow(clippy::too_many_arguments)]
    fn link_node(
        &self,
        q: &[f32],
        slot: u32,
        level: usize,
        ep: u32,
        max_level: usize,
        ef_construction: usize,
        locks: &[Mutex<()>],
        before_modify: &(dyn Fn(u32) -> Result<()> + Sync),
        sc: &mut Scratch,
    ) -> Result<()> {
        let (cd, cur) = self.descend(q, ep, max_level, level + 1, self.limit, sc, None);
        let mut eps = vec![(cd, cur)];
        for layer in (0..=level.min(max_level)).rev() {
            self.search_layer(q, eps.iter().copied(), ef_construction, layer, false, sc, &|s| {
                s != slot
            });
            let cands = nearest(&mut sc.top, usize::MAX);
            // A new node keeps as many neighbors as its lists hold (2M on layer 0, as faiss
            // does; hnswlib keeps M there): on clustered data recall at a given ef rose from
            // 0.938 to 0.954 at ef=64 (hnswlib: 0.942) for 8% more distances.
            let cap = if layer == 0 { 2 * self.m } else { self.m };
            let chosen = self.select(&cands, cap, sc);
            {
                let _g = locks[slot as usize % LOCK_STRIPES].lock();
                if let Some(list) = list_of(self.st, slot, layer) {
                    // Another thread may already have linked a node of its own here (it
                    // found this one through a layer above): keep those links too.
                    let n = list_len(list);
                    let mut ids: Vec<u32> = chosen.iter().map(|c| c.1).collect();
                    let extra: Vec<u32> = list[2..2 + n]
                        .iter()
                        .map(|e| e.load(Relaxed))
                        .filter(|e| *e < self.limit && !ids.contains(e))
                        .collect();
                    if !extra.is_empty() {
                        let mut all: Vec<(f32, u32)> = chosen.clone();
                        all.extend(self.dists_to(q, &extra));
                        all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
                        ids = if all.len() <= cap {
                            all.iter().map(|c| c.1).collect()
                        } else {
                            self.select(&all, cap, sc).iter().map(|c| c.1).collect()
                        };
                    }
                    write_list(list, slot, layer, &ids, level);
                }
            }
            for &(d, n) in &chosen {
                self.link_back(n, slot, d, layer, cap, locks, before_modify, sc)?;
            }
            if !cands.is_empty() {
                eps = cands;
            }
        }
        Ok(())
    }

    /// Add `new` to `n`'s list at `layer`, pruning with the heuristic when it is full.
    #[allow(clippy::too_many_arguments)]
    fn link_back(
        &self,
        n: u32,
        new: u32,
        d_new: f32,
        layer: usize,
        cap: usize,
        locks: &[Mutex<()>],
        before_modify: &(dyn Fn(u32) -> Result<()> + Sync),
        sc: &mut Scratch,
    ) -> Result<()> {
        let _g = locks[n as usize % LOCK_STRIPES].lock();
        let Some(list) = list_of(self.st, n, layer) else { return Ok(()) };
        let count = list_len(list);
        let mut cur: Vec<u32> = list[2..2 + count]
            .iter()
            .map(|e| e.load(Relaxed))
            .filter(|&e| e < self.limit)
            .collect();
        if cur.contains(&new) {
            return Ok(());
        }
        before_modify(n)?;
        let level = level_of(self.st, n);
        if cur.len() < cap {
            cur.push(new);
            write_list(list, n, layer, &cur, level);
            return Ok(());
        }
        let mut buf = std::mem::take(&mut sc.vec_a);
        let nv = self.vector_f32(n, &mut buf).to_vec();
        sc.vec_a = buf;
        let mut cands = self.dists_to(&nv, &cur);
        cands.push((d_new, new));
        cands.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let kept: Vec<u32> = self.select(&cands, cap, sc).iter().map(|c| c.1).collect();
        write_list(list, n, layer, &kept, level);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The descent measures each node once but ends where the textbook greedy walk (every
    /// neighbor measured at every hop) ends, with the same path, on short vectors (one at a
    /// time) and long ones (four at a time).
    #[test]
    fn descent_ends_where_the_plain_greedy_walk_ends() {
        for d in [8usize, 300] {
            let (idx, mut r) = random_index(d, 4000, 0x9e37_79b9_7f4a_7c15u64 ^ d as u64, 2);
            let snap = idx.snap();
            let g = Graph::new(&snap.st, format::Metric::Euclidean, snap.slots as u32);
            assert!(snap.max_level >= 2, "the test needs upper layers");
            let mut measured_less = false;
            for _ in 0..200 {
                let q: Vec<f32> = (0..d).map(|_| r()).collect();
                // The textbook walk.
                let (mut cur, mut cd, mut plain) = (snap.entry, g.dist(&q, snap.entry), 1u64);
                let mut want = Vec::new();
                for layer in (1..=snap.max_level).rev() {
                    loop {
                        let mut changed = false;
                        let list = list_of(g.st, cur, layer).unwrap();
                        for e in &list[2..2 + list_len(list)] {
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
                measured_less |= used < plain;
            }
            assert!(measured_less, "no node was met twice in 200 descents (dims {d})");
        }
    }

    /// Layer 0 starts from the descent's nearest nodes: the first is where the walk ended, the
    /// rest are the nearest others it measured, and layer 0 measures none of them again. With
    /// ef and k covering the whole graph every node is measured exactly once after the descent.
    #[test]
    fn layer_zero_starts_from_the_descents_nearest_nodes_without_measuring_them_again() {
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
            assert!(seeds.len() > 1, "the test needs a descent that measures more than its end");
            assert!(seeds.windows(2).all(|w| w[0].0 <= w[1].0), "seeds nearest first");
            for &(dd, slot) in &seeds {
                assert_eq!(dd.to_bits(), g.dist(&q, slot).to_bits());
            }
            let given =
                g.knn(&q, n, n, snap.entry, snap.max_level, snap.slots as u32, &all, Some(&start));
            let layer0 = with_scratch(|sc| sc.dists);
            assert_eq!(given.len(), n, "every node reached");
            assert_eq!(layer0 as usize, n - seeds.len(), "a seed was measured again on layer 0");
            let own = g.knn(&q, n, n, snap.entry, snap.max_level, snap.slots as u32, &all, None);
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
}
