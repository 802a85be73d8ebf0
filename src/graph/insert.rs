//! Insertion: a node linked on each of its layers with the neighbor-selection heuristic of the
//! HNSW paper, links back from its neighbors, and [`Linker`], which links a batch on a thread
//! pool and then gives nodes the pruning left without a way in one.

use super::*;
use crate::control::Control;
use crate::error::{Error, Result};
use crate::format::{Metric, Precision, EMPTY};
use crate::storage::lists;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering::*};

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

/// How many candidates ahead the neighbor heuristic asks for a candidate's vector (see
/// `Graph::select`): enough to hide the misses, as more ahead gave no more (measured:
/// `docs/design/search-path.md`).
const SELECT_AHEAD: usize = 4;

impl<'a> Graph<'a> {
    /// The heuristic of the HNSW paper (algorithm 4): walk the candidates nearest first and
    /// keep one only if it is nearer to the base than to every node kept so far.
    /// Each candidate's vector is asked for SELECT_AHEAD candidates before it is weighed: an
    /// insertion's search meets more vectors than L2 holds, so most of the candidates have
    /// left the core's caches by now.
    pub(super) fn select(
        &self,
        cands: &[(f32, u32)],
        m: usize,
        sc: &mut Scratch,
    ) -> Vec<(f32, u32)> {
        self.select_after(cands, 0, m, sc)
    }

    /// [`select`](Self::select) with the first `fixed` candidates kept as they are, before any
    /// other is weighed (a list that keeps its entries and takes a few more).
    pub(super) fn select_after(
        &self,
        cands: &[(f32, u32)],
        fixed: usize,
        m: usize,
        sc: &mut Scratch,
    ) -> Vec<(f32, u32)> {
        let mut kept: Vec<(f32, u32)> = Vec::with_capacity(m);
        for &(_, c) in cands.iter().take(SELECT_AHEAD) {
            self.prefetch_vector(c);
        }
        if self.quant.is_some() {
            // On codes the comparison runs the other way: each kept node's vector, made ready
            // once when it is kept, against the candidate's code (the candidate's own vector
            // would have to be made ready for every candidate weighed).
            let mut buf = std::mem::take(&mut sc.vec_b);
            let mut kp = std::mem::take(&mut sc.kept_prep);
            let mut prep = std::mem::take(&mut sc.prep_b);
            kp.clear();
            let mut biases: Vec<f32> = Vec::with_capacity(m);
            let ql = self.qlen;
            for (i, &(d, c)) in cands.iter().enumerate() {
                if kept.len() >= m {
                    break;
                }
                if let Some(&(_, next)) = cands.get(i + SELECT_AHEAD) {
                    self.prefetch_vector(next);
                }
                if i < fixed
                    || kp.chunks_exact(ql).zip(&biases).all(|(r, b)| b + self.dist(r, c) >= d)
                {
                    kept.push((d, c));
                    let cv = self.vector_f32(c, &mut buf);
                    let (values, bias) = self.prepared(cv, &mut prep);
                    kp.extend_from_slice(values);
                    biases.push(bias);
                }
            }
            (sc.kept_prep, sc.prep_b, sc.vec_b) = (kp, prep, buf);
            return kept;
        }
        // On half-precision rows each kept node is the query of its comparisons, decoded once
        // when first compared, and each candidate weighed is the row read: only the kept nodes
        // are decoded, not every candidate. The distances are those of the other way round,
        // bitwise: each kernel squares a difference or multiplies a pair, the same values in
        // the same lanes (`every_kernel_is_symmetric_bitwise`). Full-precision rows are read
        // in place, the candidate as the query.
        debug_assert!(!self.stored_codes, "a graph on codes is for searching, not linking");
        let mut kv = std::mem::take(&mut sc.kept_prep);
        kv.clear();
        let dims = self.dims;
        for (i, &(d, c)) in cands.iter().enumerate() {
            if kept.len() >= m {
                break;
            }
            if let Some(&(_, next)) = cands.get(i + SELECT_AHEAD) {
                self.prefetch_vector(next);
            }
            let keep = if i < fixed {
                true
            } else if self.half {
                kept.iter().enumerate().all(|(j, &(_, r))| {
                    // kept nodes are decoded in order: `j` is the first not yet decoded
                    if kv.len() < (j + 1) * dims {
                        kv.resize((j + 1) * dims, 0.0);
                        self.decode_half_row(r, &mut kv[j * dims..]);
                    }
                    self.dist(&kv[j * dims..(j + 1) * dims], c) >= d
                })
            } else {
                let cv = self.st.vector_f32(c);
                kept.iter().all(|&(_, r)| self.dist(cv, r) >= d)
            };
            if keep {
                kept.push((d, c));
            }
        }
        sc.kept_prep = kv;
        kept
    }

    /// Link node `slot` (vector, header and empty lists already written, level `level`) into
    /// the graph. `entry` holds (entry point, max level); `locks` are the list stripe locks;
    /// `before_modify(nodes)` is called before existing nodes' lists change (under the lock of
    /// a single node; for several, before any of them changes).
    pub fn insert(
        &self,
        slot: u32,
        level: usize,
        ef_construction: usize,
        entry: &Mutex<(u32, usize)>,
        locks: &[Mutex<()>],
        before_modify: &(dyn Fn(&[u32]) -> Result<()> + Sync),
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
            // The node's own vector is the query (made ready for the codes when linking on
            // them): at a 64-byte boundary (see Scratch::query).
            let mut qbuf = std::mem::take(&mut sc.vec_a);
            let mut prep = std::mem::take(&mut sc.prep);
            let (q, qbias) = self.prepared(self.vector_f32(slot, &mut qbuf), &mut prep);
            let r = Self::with_aligned(sc, q, |q, sc| {
                self.link_node(
                    q,
                    qbias,
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
            sc.prep = prep;
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

    /// `insert`'s linking, with `q` the node's vector (prepared, on codes: its distances plus
    /// `qbias` are the metric's, see `prepared`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn link_node(
        &self,
        q: &[f32],
        qbias: f32,
        slot: u32,
        level: usize,
        ep: u32,
        max_level: usize,
        ef_construction: usize,
        locks: &[Mutex<()>],
        before_modify: &(dyn Fn(&[u32]) -> Result<()> + Sync),
        sc: &mut Scratch,
    ) -> Result<()> {
        let (cd, cur) = self.descend(q, ep, max_level, level + 1, self.limit, sc, None);
        let mut eps = vec![(cd, cur)];
        // Layer 1's candidates, offered again on layer 0 (`upper_candidates`): all of them
        // start the layer-0 search, so those it offers are the ones that fell out of its
        // nearest, the farther ones. None while the graph has no layer 1 yet.
        let mut upper: Vec<(f32, u32)> = Vec::new();
        for layer in (0..=level.min(max_level)).rev() {
            self.search_layer(q, eps.iter().copied(), ef_construction, layer, false, sc, &|s| {
                s != slot
            });
            let raw = nearest(&mut sc.top, usize::MAX);
            // The metric's distances for choosing neighbors; the walk's own for the next layer.
            let biased: Vec<(f32, u32)>;
            let cands: &[(f32, u32)] = if qbias != 0.0 {
                biased = raw.iter().map(|&(d, s)| (d + qbias, s)).collect();
                &biased
            } else {
                &raw
            };
            let offered: Vec<(f32, u32)>;
            let cands = if layer == 0 && !upper.is_empty() {
                offered = with_upper(cands, &upper);
                &offered
            } else {
                cands
            };
            if layer == 1 && upper_candidates() {
                upper = cands.to_vec();
            }
            // A new node keeps as many neighbors as its lists hold (2M on layer 0, as faiss
            // does; hnswlib keeps M there): higher recall at a given ef for a few more
            // distances (measured: `docs/design/search-path.md`).
            let cap = if layer == 0 { 2 * self.m } else { self.m };
            let chosen = self.select(cands, cap, sc);
            {
                let _g = locks[slot as usize % LOCK_STRIPES].lock();
                if let Some(list) = lists::list_of(self.st, slot, layer) {
                    // Another thread may already have linked a node of its own here (it
                    // found this one through a layer above): keep those links too.
                    let n = lists::list_len(list);
                    let mut ids: Vec<u32> = chosen.iter().map(|c| c.1).collect();
                    let extra: Vec<u32> = list[2..2 + n]
                        .iter()
                        .map(|e| e.load(Relaxed))
                        .filter(|e| *e < self.limit && !ids.contains(e))
                        .collect();
                    if !extra.is_empty() {
                        let mut all: Vec<(f32, u32)> = chosen.clone();
                        all.extend(
                            self.dists_to(q, &extra).into_iter().map(|(d, s)| (d + qbias, s)),
                        );
                        all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
                        ids = if all.len() <= cap {
                            all.iter().map(|c| c.1).collect()
                        } else {
                            self.select(&all, cap, sc).iter().map(|c| c.1).collect()
                        };
                        if self.track_dropped && layer == 0 {
                            sc.dropped.extend(extra.iter().filter(|e| !ids.contains(e)));
                        }
                    }
                    lists::write_list(list, slot, layer, &ids, level);
                }
            }
            // The lists about to change saved together (one write to the undo log, not one
            // per neighbor); `link_back` finds them saved.
            let nodes: Vec<u32> = chosen.iter().map(|c| c.1).collect();
            before_modify(&nodes)?;
            for &(d, n) in &chosen {
                self.link_back(n, slot, d, layer, cap, locks, before_modify, sc)?;
            }
            if !raw.is_empty() {
                eps = raw;
            }
        }
        Ok(())
    }

    /// Add `new` to `n`'s list at `layer`, pruning with the heuristic when it is full.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn link_back(
        &self,
        n: u32,
        new: u32,
        d_new: f32,
        layer: usize,
        cap: usize,
        locks: &[Mutex<()>],
        before_modify: &(dyn Fn(&[u32]) -> Result<()> + Sync),
        sc: &mut Scratch,
    ) -> Result<()> {
        let _g = locks[n as usize % LOCK_STRIPES].lock();
        let Some(list) = lists::list_of(self.st, n, layer) else { return Ok(()) };
        let count = lists::list_len(list);
        let mut cur: Vec<u32> = list[2..2 + count]
            .iter()
            .map(|e| e.load(Relaxed))
            .filter(|&e| e < self.limit)
            .collect();
        if cur.contains(&new) {
            return Ok(());
        }
        before_modify(&[n])?;
        let level = lists::level_of(self.st, n);
        if cur.len() < cap {
            cur.push(new);
            lists::write_list(list, n, layer, &cur, level);
            return Ok(());
        }
        let mut buf = std::mem::take(&mut sc.vec_a);
        let mut prep = std::mem::take(&mut sc.prep_b);
        let (nv, nbias) = self.prepared(self.vector_f32(n, &mut buf), &mut prep);
        let nv = nv.to_vec();
        sc.prep_b = prep;
        sc.vec_a = buf;
        let mut cands = self.dists_to(&nv, &cur);
        cands.iter_mut().for_each(|c| c.0 += nbias);
        cands.push((d_new, new));
        cands.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let kept: Vec<u32> = self.select(&cands, cap, sc).iter().map(|c| c.1).collect();
        lists::write_list(list, n, layer, &kept, level);
        if self.track_dropped && layer == 0 {
            sc.dropped.extend(cands.iter().map(|c| c.1).filter(|e| !kept.contains(e)));
        }
        Ok(())
    }
}

/// Whether a batch of an index with codes beside its vectors links on the codes rather than on
/// the vectors: `CHASSIS_LINK_CODES=1` always, `=0` never (for measuring); by default a batch
/// too small for the half copy (`halfcopy::large_batch`: single adds), when its codes are
/// 8-bit and its vectors float32 of 1 KiB or more.
/// - Large batches stay on the half copy: the neighbor heuristic reads each kept neighbor's
///   full vector to prepare it, and linking on codes gains nothing there.
/// - Single adds read their walk's vectors from the file, where the codes' fewer bytes pay;
///   not at 128 dimensions (preparing costs more than the shorter rows save), nor with 4-bit
///   codes (recall drops).
///
/// (Measured: `docs/design/quantization.md`.)
///
/// A codes-only index always links on its codes (it has nothing else). Read once.
fn link_on_codes() -> Option<bool> {
    crate::tuning::get().link_codes
}

/// Vectors from this size up link small batches on their 8-bit codes (`link_on_codes`).
const LINK_ON_CODES_MIN_BYTES: usize = 1024;

/// Whether small batches look at the nodes they took out of lists (`Linker::repair_around`)
/// and walk the whole graph once a sixty-fourth of it was added: `CHASSIS_REPAIR_AROUND=0`
/// walks it every 1,000 rows instead, for measuring. Read once.
pub fn repair_around() -> bool {
    crate::tuning::get().repair_around.unwrap_or(true)
}

/// What linking a batch needs from the index: its storage and metric, the shared entry point
/// (node and top layer, ahead of what is published), the stripe locks of the lists, and the
/// hook called (under a node's stripe lock) before an existing node's lists change, which
/// saves them for the undo log and the batch's savepoint.
pub struct Linker<'a, H: Fn(&[u32]) -> Result<()> + Sync> {
    pub st: &'a Storage,
    pub metric: Metric,
    pub ef_construction: usize,
    pub entry: &'a Mutex<(u32, usize)>,
    pub locks: &'a [Mutex<()>],
    pub before_modify: H,
    /// The quantizer in effect, when the storage keeps codes: the batch links on them (see
    /// `link`).
    pub quant: Option<&'a Quantizer>,
    /// Where a small batch's linking notes the nodes it takes out of level-0 lists, for
    /// `repair_around` (None: a batch that `repair` follows).
    pub dropped: Option<&'a Mutex<Vec<u32>>>,
    /// Deleted slots that `repair` neither gives a way in nor takes one through (after a
    /// consolidation, which took them out of every live list); None: every node counts.
    pub gone: Option<&'a [bool]>,
}

impl<H: Fn(&[u32]) -> Result<()> + Sync> Linker<'_, H> {
    /// Make every node reachable on layer 0 from the entry point: for each node `u` that is
    /// not, add it to the list of its nearest reachable out-neighbor `v` (or, with none, of
    /// the nearest reachable node a search finds; see `give_way_in`). The pruning heuristic
    /// can leave many nodes with no way in where lists are short and the beam small. A walk of
    /// the whole graph takes seconds at ten million nodes (measured:
    /// `docs/design/small-commits.md`).
    pub fn repair(&self, n: u32) -> Result<()> {
        let (entry, max_level) = *self.entry.lock();
        if entry == EMPTY || entry >= n {
            return Ok(());
        }
        let mut r = Repairer::new(self, n);
        let mut seen = vec![false; n as usize];
        let mut stack = vec![entry];
        seen[entry as usize] = true;
        lists::mark_reachable(self.st, n, &mut stack, &mut seen);
        let gone = |s: u32| self.gone.is_some_and(|g| g[s as usize]);
        for u in 0..n {
            if seen[u as usize] || gone(u) {
                continue;
            }
            let uv = r.vector(u);
            let mut out_u = r.entries(u);
            let way = out_u
                .iter()
                .filter(|&&v| seen[v as usize] && !gone(v))
                .map(|&v| (r.g.dist(&uv, v), v))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                // An island: its out-neighbors are unreachable too; find a way in by search.
                .or_else(|| {
                    r.g.knn(
                        &uv,
                        1,
                        64,
                        entry,
                        max_level,
                        n,
                        &|s| seen[s as usize] && !gone(s),
                        None,
                    )
                    .unwrap_or_default()
                    .first()
                    .copied()
                });
            let Some((_, v)) = way else { continue };
            // What u's list lets go of was nobody's way in: u was not reachable.
            r.give_way_in(u, &uv, &mut out_u, v)?;
            seen[u as usize] = true;
            stack.push(u);
            lists::mark_reachable(self.st, n, &mut stack, &mut seen);
        }
        Ok(())
    }

    /// After a small batch: give a way in to each node of `nodes` (the batch's own, the entry
    /// point it replaced, and those its links took out of level-0 lists) that none of its own
    /// out-neighbors links to any more, or that a search from the entry point for its own
    /// vector does not find (an island of nodes linking each other, which looking at the lists
    /// alone missed). That is where the pruning leaves nodes without a way in, and it costs a
    /// few list reads and one search a node where `repair` walks the whole graph (measured:
    /// `docs/design/small-commits.md`). A node without one gets it
    /// from the nearest node that search finds (so a reachable one), and what its own list
    /// lets go of then is looked at in turn. A way in from elsewhere is left to `repair`, which
    /// still runs once the rows since the last one reach a sixty-fourth of the index.
    pub fn repair_around(&self, n: u32, mut nodes: Vec<u32>) -> Result<()> {
        let (entry, max_level) = *self.entry.lock();
        if entry == EMPTY || entry >= n {
            return Ok(());
        }
        let mut r = Repairer::new(self, n);
        let mut looked = HashSet::new();
        while let Some(u) = nodes.pop() {
            if u >= n || u == entry || !looked.insert(u) {
                continue;
            }
            // A way in: an out-neighbor `w` that links back, and has a way in itself from one
            // of its own out-neighbors but `u` (links go both ways mostly; the second step
            // finds the pairs that lose their way in together, which the first alone misses:
            // `docs/design/small-commits.md`).
            let mut out_u = r.entries(u);
            let local = out_u
                .iter()
                .any(|&w| r.links_to(w, u) && r.each(w).any(|x| x != u && r.links_to(x, w)));
            // Reachable: a search from the entry point for u's own vector finds u. A way in
            // from a node that is itself cut off (an island of nodes linking each other) passes
            // the test above but not this one.
            let uv = r.vector(u);
            let found =
                r.g.knn(&uv, 2, 64, entry, max_level, n, &|_| true, None).unwrap_or_default();
            if local && found.iter().any(|h| h.1 == u) {
                continue;
            }
            let Some(&(_, v)) = found.iter().find(|h| h.1 != u) else { continue };
            if let Some(x) = r.give_way_in(u, &uv, &mut out_u, v)? {
                nodes.push(x);
            }
        }
        Ok(())
    }

    /// Link the batch's nodes in the order of its rows: row `i` is slot `slots[pos[i]]`, every
    /// one below `total`; `levels` are by slot offset. Returns whether they were linked on a
    /// half-precision copy, which let go of the stored vectors' pages
    /// (`Storage::release_vectors`).
    pub fn link(
        &self,
        slots: &[u32],
        total: u64,
        pos: &[u32],
        levels: &[usize],
        ctl: &Control,
    ) -> Result<bool> {
        let st = self.st;
        let n = pos.len();
        // A codes-only index has nothing else to link on.
        let codes_only = st.geo.precision == Precision::CodesOnly;
        let pays = halfcopy::pays(&st.geo, n as u64, total);
        // Small batches only: a large one that the half copy does not take (memory short, or
        // CHASSIS_HALF_COPY=0) links on the vectors, where codes gained nothing.
        let by_default = !halfcopy::large_batch(n as u64, total)
            && st.geo.code_bits == 8
            && st.geo.precision == Precision::Full
            && st.geo.vec_bytes >= LINK_ON_CODES_MIN_BYTES;
        let on_codes = self.quant.filter(|_| {
            codes_only || (st.geo.has_codes() && link_on_codes().unwrap_or(by_default))
        });
        let copy = if on_codes.is_none() && pays { HalfCopy::new(st, total as u32) } else { None };
        let mut g = match (on_codes, &copy) {
            (Some(z), _) => Graph::linking_on_codes(st, self.metric, total as u32, z),
            (None, Some(c)) => Graph::on_copy(st, self.metric, total as u32, c),
            (None, None) => Graph::new(st, self.metric, total as u32),
        };
        g.track_dropped = self.dropped.is_some();
        let ef = self.ef_construction;
        let insert = |i: usize| {
            let j = pos[i] as usize;
            let r = g.insert(slots[j], levels[j], ef, self.entry, self.locks, &self.before_modify);
            if let Some(dropped) = self.dropped {
                with_scratch(|sc| dropped.lock().append(&mut sc.dropped));
            }
            r
        };
        let first_err: Mutex<Option<Error>> = Mutex::new(None);
        let next = AtomicU64::new(0);
        let work = || loop {
            if ctl.cancelled() || first_err.lock().is_some() {
                return;
            }
            let i = next.fetch_add(1, Relaxed);
            if i >= n as u64 {
                return;
            }
            if let Err(e) = insert(i as usize) {
                first_err.lock().get_or_insert(e);
                return;
            }
            ctl.done.fetch_add(1, Relaxed);
        };
        // The first node of an empty index becomes the entry point before anyone links to it.
        if self.entry.lock().0 == EMPTY {
            insert(next.fetch_add(1, Relaxed) as usize)?;
            ctl.done.fetch_add(1, Relaxed);
        }
        let workers = rayon::current_num_threads().min(n);
        if workers <= 1 {
            work();
        } else {
            rayon::scope(|s| {
                for _ in 0..workers {
                    s.spawn(|_| work());
                }
            });
        }
        if let Some(e) = first_err.into_inner() {
            return Err(e);
        }
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        Ok(copy.is_some())
    }
}

/// What `repair` and `repair_around` share: the graph distances are computed on, a node's
/// entries and its vector, and the change that gives a node a way in.
struct Repairer<'l, 'a, H: Fn(&[u32]) -> Result<()> + Sync> {
    linker: &'l Linker<'a, H>,
    g: Graph<'a>,
    n: u32,
    prep: Prepared,
    buf: Vec<f32>,
}

impl<'l, 'a, H: Fn(&[u32]) -> Result<()> + Sync> Repairer<'l, 'a, H> {
    fn new(linker: &'l Linker<'a, H>, n: u32) -> Self {
        let g = Graph::between_nodes(linker.st, linker.metric, n, linker.quant);
        Repairer { linker, g, n, prep: Prepared::default(), buf: Vec::new() }
    }

    /// The level-0 entries of `s` that lie inside the graph (those of a damaged list outside
    /// it go).
    fn each(&self, s: u32) -> impl Iterator<Item = u32> + '_ {
        lists::entries(self.linker.st.l0(s)).iter().map(|e| e.load(Relaxed)).filter(|&e| e < self.n)
    }

    fn entries(&self, s: u32) -> Vec<u32> {
        self.each(s).collect()
    }

    /// Whether `w`'s level-0 list holds `u`.
    fn links_to(&self, w: u32, u: u32) -> bool {
        lists::entries(self.linker.st.l0(w)).iter().any(|e| e.load(Relaxed) == u)
    }

    /// `s`'s vector as the graph's distances take it.
    fn vector(&mut self, s: u32) -> Vec<f32> {
        let v = self.g.vector_f32(s, &mut self.buf).to_vec();
        self.g.prepared(&v, &mut self.prep).0.to_vec()
    }

    /// Add `u` (vector `uv`, level-0 entries `out_u`) to the list of `v`, a reachable node.
    /// When `v`'s list is full, `u` takes the place of its farthest entry `x`, and `x` goes
    /// into `u`'s list (in place of `u`'s farthest entry if that is full too): `x` stays
    /// reachable through `u`. Returns the entry `u`'s list let go of, if any. (Dropping `x`
    /// instead, when another list held it, stranded others again.)
    fn give_way_in(
        &mut self,
        u: u32,
        uv: &[f32],
        out_u: &mut Vec<u32>,
        v: u32,
    ) -> Result<Option<u32>> {
        let (st, locks) = (self.linker.st, self.linker.locks);
        let cap = 2 * st.geo.m;
        let stripe_v = v as usize % LOCK_STRIPES;
        let _lock_v = locks[stripe_v].lock();
        let mut out_v = self.entries(v);
        if out_v.contains(&u) {
            return Ok(None); // (`repair_around` looks at a few lists only)
        }
        (self.linker.before_modify)(&[v])?;
        let mut handed = None;
        if out_v.len() >= cap {
            let vv = self.vector(v);
            let g = &self.g;
            let far = (0..out_v.len())
                .max_by(|&a, &b| g.dist(&vv, out_v[a]).total_cmp(&g.dist(&vv, out_v[b])))
                .expect("a full list");
            handed = Some(out_v.remove(far));
        }
        out_v.push(u);
        lists::write_list(st.l0(v), v, 0, &out_v, lists::level_of(st, v));
        let mut let_go = None;
        if let Some(x) = handed.filter(|x| !out_u.contains(x)) {
            // u's own stripe, unless v's lock already covers it
            let _lock_u = (u as usize % LOCK_STRIPES != stripe_v)
                .then(|| locks[u as usize % LOCK_STRIPES].lock());
            (self.linker.before_modify)(&[u])?;
            if out_u.len() >= cap {
                let g = &self.g;
                let far = (0..out_u.len())
                    .max_by(|&a, &b| g.dist(uv, out_u[a]).total_cmp(&g.dist(uv, out_u[b])))
                    .expect("a full list");
                let_go = Some(out_u.remove(far));
            }
            out_u.push(x);
            lists::write_list(st.l0(u), u, 0, out_u, lists::level_of(st, u));
        }
        Ok(let_go)
    }
}

/// Whether a node of level 1 or more offers its layer-1 candidates to its layer-0 list too
/// (`CHASSIS_UPPER_CANDIDATES=0` turns it off, for measuring). They lie farther apart than
/// layer 0's, and the heuristic keeps those in directions layer 0's nearest do not cover: the
/// long edges that rows added into a populated graph lack, and consolidation cannot make
/// (the consolidation record, "Long edges from layer 1").
fn upper_candidates() -> bool {
    crate::tuning::get().upper_candidates.unwrap_or(true)
}

/// `cands` (nearest first) with the entries of `upper` it lacks, nearest first.
fn with_upper(cands: &[(f32, u32)], upper: &[(f32, u32)]) -> Vec<(f32, u32)> {
    let mut have: Vec<u32> = cands.iter().map(|c| c.1).collect();
    have.sort_unstable();
    let mut all = cands.to_vec();
    all.extend(upper.iter().filter(|u| have.binary_search(&u.1).is_err()));
    all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    all
}
