//! HNSW over the mapped storage: one type, [`Graph`] (the graph as one search or insertion
//! sees it), its `impl` split by responsibility.
//!
//! | file             | what it holds                                                             |
//! |------------------|---------------------------------------------------------------------------|
//! | `mod.rs`         | [`Graph`], [`Start`], per-thread [`Scratch`], distances to stored vectors |
//! |                  | (or to a half-precision copy, or to 8-bit codes: `crate::quant`)          |
//! | `search.rs`      | the search loop: greedy descent, layer search (a beam of candidates per   |
//! |                  | round where the index is short of memory), k-NN, exact scans              |
//! | `filtered.rs`    | layer 0 of a search whose filter allows few nodes (two hops)              |
//! | `insert.rs`      | insertion with the HNSW paper's neighbor heuristic; [`insert::Linker`]    |
//! |                  | links a batch on threads and repairs reachability                         |
//! | `consolidate.rs` | a live node's lists with deleted nodes taken out, their neighbors weighed |
//! | `halfcopy.rs`    | the half-precision copy a large batch is linked on, and when it pays      |
//! | `locality.rs`    | which slots a batch's vectors go to (near vectors in near slots)          |
//!
//! Lists are read and written through `crate::storage::lists`; the graph holds no pointer
//! into the mappings of its own making (see `crate::storage`'s `# Safety`).

mod consolidate;
mod filtered;
pub mod halfcopy;
pub mod insert;
pub mod locality;
mod search;
#[cfg(test)]
mod tests;

pub use insert::level_for;

use crate::cpu;
use crate::distance::{Kernel, Kernel4};
use crate::format;
use crate::quant::{Prepared, Quantizer};
use crate::storage::{Area, Storage};
use halfcopy::HalfCopy;
use std::cell::RefCell;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::*;

pub use crate::format::MAX_LEVEL;

pub const LOCK_STRIPES: usize = 1 << 14;

/// How many of the nodes whose distances the descent computed a search of layer 0 starts from
/// (see `Start`).
pub const SEEDS: usize = 16;

/// Where a search of layer 0 starts: the `SEEDS` nearest nodes whose distances the descent
/// through the upper layers computed (every node there is on layer 0 too), as packed keys,
/// unused ones `u64::MAX`. Starting from them rather than from the walk's end alone costs no
/// distance, and layer 0 does not compute theirs again: fewer distances at equal recall, since
/// the descent's nodes near the query are also met on layer 0 (measured:
/// `docs/design/search-path.md`).
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
    /// (it moves to every nearer node it meets), unless another node met at the same distance
    /// has a lower slot.
    pub fn entries(&self) -> impl Iterator<Item = (f32, u32)> + '_ {
        self.0.iter().take_while(|&&e| e != u64::MAX).map(|&e| (unkey(e), slot_of(e)))
    }
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
    /// The nodes of a beam round (`search_beam`).
    round: Vec<u32>,
    /// Nodes whose distances the current descent computed, as packed keys (see `Start`).
    seen: Vec<u64>,
    /// Decoded stored vectors (f16 storage) for node-to-node distances: a node's own
    /// (`vec_a`), and a kept neighbor's before it is made ready for the codes (`vec_b`).
    vec_a: Vec<f32>,
    vec_b: Vec<f32>,
    /// Linking on codes: a node's vector made ready for the codes.
    prep: Prepared,
    prep_b: Prepared,
    /// The kept neighbors as the queries of `select`'s comparisons: made ready for the codes
    /// (`qlen` values each), or decoded from half-precision rows (`dims` each).
    kept_prep: Vec<f32>,
    /// Distances computed by the current search (see `counters`).
    dists: u64,
    /// Lists a two-hop search read for their rejected owners (`search_two_hop`).
    lists_read: u64,
    /// The current search stopped at its budget (`Graph::budget`).
    over_budget: bool,
    /// Nodes a filtered walk met in its current window and how many were allowed
    /// (`rejecting`), and whether it switched to two hops.
    met: [usize; 2],
    switch: bool,
    /// Nodes a small batch's links took out of level-0 lists (see `Graph::track_dropped`).
    dropped: Vec<u32>,
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
            round: Vec::new(),
            seen: Vec::new(),
            vec_a: Vec::new(),
            vec_b: Vec::new(),
            prep: Prepared::default(),
            prep_b: Prepared::default(),
            kept_prep: Vec::new(),
            dists: 0,
            lists_read: 0,
            over_budget: false,
            met: [0, 0],
            switch: false,
            dropped: Vec::new(),
        }
    }
    fn new_epoch(&mut self, limit: usize) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.visited.len() < limit || self.epoch == 0 {
            // A fresh zeroed table rather than zeros written over the old one: the allocator
            // takes a large one from the kernel as zero pages given on first touch, so a thread
            // holds only the pages of the slots its searches visit (at 2^32 slots the table is
            // 8 GiB; a test on a sparse file searches one), and the first search of a thread
            // on a large index does not write the whole table.
            // With room to grow: single adds raise the limit by one each, and a table made
            // anew for each of them, taken from the kernel and faulted in again every time,
            // made every single add to a large index pay for a table of its size (measured:
            // `docs/design/scale.md`).
            let len = limit.saturating_add(limit / 16).saturating_add(1024).max(self.visited.len());
            self.visited = Vec::new(); // the old table goes before the new one is made
            self.visited = vec![0; len];
            self.epoch = 1;
        }
    }
    /// Mark `s` visited; true if it was not already.
    #[inline(always)]
    fn visit(&mut self, s: u32) -> bool {
        let v = &mut self.visited[s as usize];
        if *v == self.epoch {
            false
        } else {
            *v = self.epoch;
            true
        }
    }
}

/// Vectors at least this long get their distances computed four at a time in a search: the
/// prefetch of ADR-0015 covers only their first lines, and interleaving four lets the misses
/// on the rest overlap. Shorter vectors are whole in the prefetched lines.
const GROUP_MIN_BYTES: usize = 1024;

/// GROUP_MIN_BYTES, or `CHASSIS_GROUP_MIN_BYTES` (`crate::tuning`: 0 groups every search, a
/// large value none).
fn group_min_bytes() -> usize {
    crate::tuning::get().group_min_bytes.unwrap_or(GROUP_MIN_BYTES)
}

/// 8-bit codes of any length get their distances four at a time (the interleaved kernels of
/// `quant::kernels`): widening a code costs more work per byte than a float load, and four
/// codes' loads and conversions in flight together beat one at a time even where a code is
/// whole in the prefetched lines (measured: `docs/design/quantization.md`).
/// `CHASSIS_CODE_GROUP_MIN_BYTES` sets a floor instead (`crate::tuning`).
fn code_group_min_bytes() -> usize {
    crate::tuning::get().code_group_min_bytes.unwrap_or(0)
}

/// Candidates a search short of memory expands per round on layer 0 (see `search_beam`): wider
/// beams gain little past 8 and read more pages, which a disk bound by its reads per second
/// pays for (measured: `docs/design/larger-than-memory.md`).
const BEAM: usize = 8;

/// BEAM, or `CHASSIS_BEAM` (`crate::tuning`; 1: one candidate at a time, as a search of an
/// index in memory).
fn beam_width() -> usize {
    crate::tuning::get().beam.unwrap_or(BEAM).clamp(1, 64)
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
    /// f32s a query holds as the kernel reads it: `dims`, or `2 * dims` for codes under
    /// euclidean (see `crate::quant`).
    qlen: usize,
    half: bool,
    /// Slots below this may be visited (they exist in the mapped segments).
    pub limit: u32,
    pf_lines: usize,
    /// Lines of a whole row as a distance reads it (`prefetch_rows`).
    row_lines: usize,
    pf_l1: bool,
    pub m: usize,
    /// Linking on codes (`linking_on_codes`): the quantizer a node's own vector is made ready
    /// with before its distances to codes are computed, and the metric it is made ready for.
    quant: Option<&'a Quantizer>,
    metric: format::Metric,
    /// Where the vectors are read from, if not the storage: a batch's linking reads a
    /// half-precision copy (see `halfcopy`).
    copy: Option<&'a HalfCopy>,
    /// ... or a search's walk reads the codes the storage keeps (`on_stored_codes`).
    stored_codes: bool,
    /// The index is short of memory (`index::residency`): prefetch the pages of the rows a node's
    /// neighbors' distances are computed on (`will_need`), and of the next candidate's list
    /// (`lists_cold`), to the system before reading them.
    will_need: bool,
    lists_cold: bool,
    /// The walk's check of the nodes it meets reads their slot headers (deleted rows are
    /// hidden): their header lines are asked for with their vectors.
    headers_ahead: bool,
    /// Candidates layer 0 expands per round (`search_beam`): `beam_width()` while pages are
    /// prefetched, else 1 (one at a time, `search_layer`).
    beam: usize,
    /// Linking a small batch: the nodes its links push out of level-0 lists are noted in the
    /// thread's `Scratch::dropped` (see `Linker::repair_around`).
    track_dropped: bool,
    /// A filtered search: layer 0 in two hops (`search_two_hop`), and the distances (plus
    /// lists read for rejected nodes) after which `knn` gives up (`filtered`).
    two_hop: bool,
    budget: u64,
    /// A plain filtered walk's expected share of allowed nodes: it switches to two hops when
    /// it meets far fewer (`rejecting`). 0: no check.
    expect_share: f64,
    /// Allowed nodes a filtered search starts from besides the descent's (`seeded`).
    seeds: &'a [u32],
}

impl<'a> Graph<'a> {
    pub fn new(st: &'a Storage, metric: format::Metric, limit: u32) -> Graph<'a> {
        Self::reading(st, metric, limit, &st.geo, None)
    }

    /// A graph whose distances are computed on `copy` (slots below its length) instead of the
    /// stored vectors: for linking only (the lists are the storage's either way).
    /// Its rows get their distances four at a time whenever they are longer than the prefetched
    /// lines (a 768-byte row at 384 dimensions, which the search rule leaves to single
    /// distances): without that the copy gains a build nothing (measured:
    /// `docs/design/half-precision-copy.md`).
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
        let ci = cpu::info();
        // A codes-only storage gets its distances from the code kernels, whose queries are
        // prepared (`quant::Prepared` carries the query's own constant): twice the dimensions
        // under euclidean.
        let codes_only = geo.precision == format::Precision::CodesOnly;
        let l2 = metric == format::Metric::Euclidean;
        let k = if codes_only {
            let c = crate::quant::code_kernels();
            let ((one, four), sign) =
                if l2 { ((c.l2, c.l2_x4), 1.0) } else { ((c.dot, c.dot_x4), -1.0) };
            crate::distance::MetricKernels { one, four, bias: 0.0, sign }
        } else {
            crate::distance::kernels().for_metric(metric, geo.precision)
        };
        Graph {
            st,
            kernel: k.one,
            kernel4: k.four,
            grouped: geo.vec_bytes >= group_min_bytes(),
            bias: k.bias,
            sign: k.sign,
            dims: geo.dims,
            qlen: if codes_only && l2 { 2 * geo.dims } else { geo.dims },
            half: geo.precision == format::Precision::Half,
            limit: limit.min(st.capacity().min(u32::MAX as u64) as u32),
            pf_lines: ci.prefetch_lines.min(geo.vec_bytes.div_ceil(64)).max(1),
            row_lines: geo.vec_bytes.div_ceil(64).max(1),
            pf_l1: ci.prefetch_l1,
            m: st.geo.m,
            copy,
            stored_codes: false,
            quant: None,
            metric,
            will_need: false,
            lists_cold: false,
            headers_ahead: false,
            beam: 1,
            track_dropped: false,
            two_hop: false,
            budget: u64::MAX,
            expect_share: 0.0,
            seeds: &[],
        }
    }

    /// The walk's check reads each node's slot header: ask for it with the vector.
    pub fn prefetching_headers(mut self, on: bool) -> Self {
        self.headers_ahead = on;
        self
    }

    /// A search of an index short of memory: prefetch the pages of the rows whose distances it
    /// is about to compute (`rows`, on the storage only: never a copy or table in memory) and of
    /// the lists it is about to read (`lists`) to the system first, so that their reads overlap.
    pub fn prefetching_pages(mut self, rows: bool, lists: bool) -> Self {
        self.will_need = rows && self.copy.is_none();
        self.lists_cold = lists;
        self.beam = if self.will_need || lists { beam_width() } else { 1 };
        self
    }

    /// A filtered search: layer 0 in two hops (`filtered.rs`) or not, and a budget of work
    /// (distances, and lists read for rejected nodes) past which `knn` gives up (None) so
    /// that the caller can scan instead.
    pub fn filtered(mut self, two_hop: bool, budget: u64) -> Self {
        self.two_hop = two_hop;
        self.budget = budget;
        self
    }

    /// A plain filtered walk that expects `share` of the nodes allowed switches to two hops if
    /// it meets far fewer (`filtered.rs`); 0 never does.
    pub fn expecting(mut self, share: f64) -> Self {
        self.expect_share = share;
        self
    }

    /// A filtered search also starts layer 0 from `seeds`, allowed nodes spread over the index
    /// (their distances computed first).
    pub fn seeded(mut self, seeds: &'a [u32]) -> Self {
        self.seeds = seeds;
        self
    }

    /// Whether the last `knn` on this thread switched from a plain walk to two hops.
    pub fn switched() -> bool {
        with_scratch(|sc| sc.switch)
    }

    /// prefetch the pages of the row `dist` reads for `slot` (see `prefetching_pages`).
    #[inline]
    fn prefetch_row(&self, slot: u32) {
        let area = if self.stored_codes { Area::Code } else { Area::Vector };
        self.st.will_need(slot, area);
    }

    /// A graph whose distances are computed on the codes the storage keeps (an index created
    /// with codes, whose quantizer is trained: every slot a walk can reach has its code
    /// written), for a search's walk: its queries are `quant::Prepared` values, and its
    /// distances are the metric's up to the prepared query's `bias` (the same for every slot
    /// of one query, so the order is the codes' distance order).
    pub fn on_stored_codes(st: &'a Storage, metric: format::Metric, limit: u32) -> Graph<'a> {
        assert!(st.geo.has_codes(), "a storage without codes");
        let mut g = Self::reading(st, metric, limit, &st.geo, None).with_code_kernels(
            metric,
            st.geo.code_row_stride(),
            st.geo.code_bits,
        );
        g.stored_codes = true;
        g
    }

    /// A graph for linking a batch on the storage's codes (trained by `quantizer`, written for
    /// every slot below `limit`): each node's full vector, read from the storage, is made ready
    /// for the codes (`prepared`) before its distances to them are computed. The lists are the
    /// storage's either way.
    pub fn linking_on_codes(
        st: &'a Storage,
        metric: format::Metric,
        limit: u32,
        quantizer: &'a Quantizer,
    ) -> Graph<'a> {
        let mut g = Self::on_stored_codes(st, metric, limit);
        g.quant = Some(quantizer);
        g
    }

    /// A graph whose node-to-node distances are those of repairs and consolidation: on the
    /// codes for a codes-only index (its nodes' vectors, what their codes stand for, made
    /// ready for them; every comparison is between distances from one node), else on the
    /// stored vectors.
    pub fn between_nodes(
        st: &'a Storage,
        metric: format::Metric,
        limit: u32,
        quantizer: Option<&'a Quantizer>,
    ) -> Graph<'a> {
        match quantizer {
            Some(z) if st.geo.precision == format::Precision::CodesOnly => {
                Self::linking_on_codes(st, metric, limit, z)
            }
            _ => Self::new(st, metric, limit),
        }
    }

    /// `q` (a stored vector as f32) as this graph's distances take it, and what to add to
    /// them for the metric's distance: made ready for the codes in `buf` when linking on
    /// codes (the prepared query's `bias`: distances from different nodes are compared when
    /// neighbors are chosen, so it counts there), else `q` itself and 0.
    #[inline]
    pub(super) fn prepared<'b>(&self, q: &'b [f32], buf: &'b mut Prepared) -> (&'b [f32], f32) {
        match self.quant {
            Some(z) => {
                buf.prepare(z, self.metric, q);
                (&buf.values, buf.bias)
            }
            None => (q, 0.0),
        }
    }

    /// The code kernels of `bits`-bit codes and their query form for rows `stride` bytes apart.
    fn with_code_kernels(mut self, metric: format::Metric, stride: usize, bits: u32) -> Self {
        let k = crate::quant::code_kernels_bits(bits);
        let l2 = metric == format::Metric::Euclidean;
        (self.kernel, self.kernel4) = if l2 { (k.l2, k.l2_x4) } else { (k.dot, k.dot_x4) };
        (self.bias, self.sign) = (0.0, if l2 { 1.0 } else { -1.0 });
        self.qlen = if l2 { 2 * self.dims } else { self.dims };
        self.half = false;
        self.grouped = stride >= code_group_min_bytes();
        self.pf_lines = cpu::info().prefetch_lines.min(stride / 64).max(1);
        self.row_lines = (stride / 64).max(1);
        self
    }

    /// A slot's vector as this graph reads it (the copy's row, or the stored vector).
    #[inline(always)]
    fn vector_ptr(&self, slot: u32) -> *const u8 {
        if self.stored_codes {
            return self.st.code_ptr(slot);
        }
        match self.copy {
            Some(c) => c.ptr(slot),
            None => self.st.vector_ptr(slot),
        }
    }

    /// Distance from an f32 query to a stored vector (squared for euclidean).
    #[inline(always)]
    pub fn dist(&self, q: &[f32], slot: u32) -> f32 {
        assert!(q.len() == self.qlen, "a query of {} values for {} dimensions", q.len(), self.dims);
        // SAFETY: q has the f32s the kernel reads (`qlen`, checked above); `vector_ptr` points
        // at a whole vector of a live mapping, of the copy or of the code table (each checks
        // the slot); the kernel set was chosen for this CPU and for what `vector_ptr` points to.
        self.bias
            + self.sign * unsafe { (self.kernel)(q.as_ptr(), self.vector_ptr(slot), self.dims) }
    }

    /// Distances to four stored vectors (each bitwise what `dist` gives).
    #[inline(always)]
    fn dist4(&self, q: &[f32], slots: &[u32]) -> [f32; 4] {
        assert!(q.len() == self.qlen, "a query of {} values for {} dimensions", q.len(), self.dims);
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
        assert!(
            !self.stored_codes || self.quant.is_some(),
            "a graph on codes is for searching, not linking"
        );
        // Linking on codes reads a node's own vector from the storage (a codes-only index's:
        // what its code stands for).
        if let Some(z) = self.quant {
            if self.st.geo.precision == format::Precision::Full {
                return self.st.vector_f32(slot);
            }
            buf.resize(self.dims, 0.0);
            if self.st.geo.precision == format::Precision::CodesOnly {
                z.decode(self.st.code_bytes(slot), buf);
                return buf;
            }
            buf.resize(self.dims, 0.0);
            format::decode_vector(self.st.vector_bytes(slot), self.st.geo.precision, buf);
            return buf;
        }
        // The copy's rows are always half precision.
        if !self.half {
            return self.st.vector_f32(slot);
        }
        buf.resize(self.dims, 0.0);
        self.decode_half_row(slot, buf);
        buf
    }

    /// A slot's half-precision row as this graph reads it (the copy's, or the stored vector of
    /// a half-precision index), decoded into `out` (`dims` long).
    pub(super) fn decode_half_row(&self, slot: u32, out: &mut [f32]) {
        debug_assert!(self.half, "a graph on half-precision rows");
        let bytes = match self.copy {
            Some(c) => c.row(slot),
            None => self.st.vector_bytes(slot),
        };
        format::decode_vector(bytes, format::Precision::Half, out);
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

    /// Ask for the whole rows of `slots` (up to `WHOLE_ROW_LINES` lines each, at least the
    /// CPU's policy): rows that will all be read next, as a rerank's first candidates, and
    /// not guesses as a walk's neighbors are (ADR-0015's depth is for those), so a rerank's
    /// reads overlap (measured: `docs/design/quantization.md`).
    pub fn prefetch_rows(&self, slots: impl Iterator<Item = u32>) {
        let lines = self.row_lines.min(WHOLE_ROW_LINES.max(self.pf_lines));
        slots.for_each(|s| cpu::prefetch(self.vector_ptr(s), lines, false));
    }
}

/// The most lines of a row `prefetch_rows` asks for (a 384-dimension float32 vector is 24).
const WHOLE_ROW_LINES: usize = 32;
