//! Searches: one query, filtered, and batches (run in the order their queries enter the
//! bottom layer, so neighbouring queries find the same vectors cached).

use super::residency::Cold;
use super::*;
use crate::format::RESERVED_ID;
use crate::graph::{Graph, Start};
use crate::quant::{Prepared, Quantizer};
use crate::storage::Area;
use filter::{plan_of, scans, Ids, SlotFilter, SlotSet};
use input::check_k;
use plan::{Choice, Plan};
use rayon::prelude::*;

/// What one search asks, checked: the k nearest at beam width `ef`, how many candidates a code
/// walk reranks (`rerank_count`), the slots a filter allows, and where layer 0 starts if the
/// caller already descended (`batch_starts`).
#[derive(Clone, Copy)]
pub(super) struct Ask<'a> {
    pub k: usize,
    pub ef: usize,
    pub rerank: Option<usize>,
    pub filter: Option<&'a SlotFilter>,
    pub start: Option<&'a Start>,
}

/// A batch of at least this many queries runs in the order of where the queries enter the
/// graph's bottom layer (`batch_starts`); a smaller one has too little to share.
const ORDER_MIN: usize = 32;

/// How many of a code walk's best candidates get their distances computed again on the full
/// vectors: the caller's `rerank`, else at most `min(ef, max(2k, ef / 4))` (`rerank_found`
/// stops early once the rest cannot enter the k nearest), and never fewer than k. The best 2k
/// alone keep the float walk's recall; a quarter of the beam beyond that is a margin for data
/// whose codes are coarser, kept small because a search short of memory reads each reranked
/// vector from the disk. With 4-bit codes (`coarse`) at most `min(ef, max(8k, ef / 2))`: they
/// rank coarsely on some data, and `rerank_found` stops well before that where they rank
/// finely; the whole beam as the ceiling read more from the disk per query (measured:
/// `docs/design/quantization.md`).
pub fn rerank_count(k: usize, ef: usize, rerank: Option<usize>, coarse: bool) -> usize {
    let default = |ef: usize| {
        if coarse {
            ef.min((8 * k).max(ef / 2))
        } else {
            ef.min((2 * k).max(ef / 4))
        }
    };
    rerank.unwrap_or_else(|| default(ef)).max(k)
}

/// How far past the widest code error seen a default rerank still looks (see `rerank_found`):
/// one width lost recall, two lost none (measured: `docs/design/quantization.md`).
const ERROR_WIDTHS: f32 = 2.0;

/// The k nearest of a code walk's candidates `found` (nearest code first) by their exact
/// distances (`exact`); `prefetch(slot)` is called before reading a candidate's vector (an index
/// short of memory asks for the pages then), for candidates in runs so the reads overlap.
///
/// With `adaptive` (no `rerank=` from the caller), the rerank stops at the first candidate
/// beyond k + 1 that cannot enter the k nearest even if its code erred in its favour by the
/// most favourable error seen so far widened by `ERROR_WIDTHS` times the spread of the errors
/// seen: `code + lo - w (hi - lo) > kth exact`, where `lo..hi` is the range of `exact - code`
/// over the candidates reranked. The codes' error is per dimension and mostly bounded (half a
/// step; 4-bit codes also clip each dimension's rarest 1% of values, `QUANTILE_4BIT`, so a few
/// candidates err by more), so it varies little between neighbours of a query; the spread
/// learns how much, and `rerank_count` lets the rerank of 4-bit codes go further (up to
/// `max(8k, ef / 2)`) before the rule stops it. Candidates
/// come nearest code first, so none after the first that fails could pass either. It keeps
/// the recall of the fixed count with fewer vectors read (measured:
/// `docs/design/quantization.md`).
fn rerank_found(
    found: &[(f32, u32)],
    k: usize,
    adaptive: bool,
    prefetch: Option<&dyn Fn(u32)>,
    exact: impl Fn(u32) -> f32,
) -> Vec<(f32, u32)> {
    // Prefetches the vectors of `found[from..to]`.
    let prefetch_run = |from: usize, to: usize| {
        if let Some(prefetch) = prefetch {
            found[from.min(found.len())..to.min(found.len())]
                .iter()
                .for_each(|&(_, s)| prefetch(s));
        }
    };
    // The first run: what a rerank of this data usually reaches (2k on the sets above).
    let mut prefetched = 2 * k;
    prefetch_run(0, prefetched);
    let mut out: Vec<(f32, u32)> = Vec::with_capacity(found.len());
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    // The k least exact distances so far, ascending.
    let mut best: Vec<f32> = Vec::with_capacity(k + 1);
    for (i, &(code, s)) in found.iter().enumerate() {
        if adaptive && i > k && code + lo - ERROR_WIDTHS * (hi - lo) > best[k - 1] {
            break;
        }
        if i == prefetched {
            prefetch_run(prefetched, found.len());
            prefetched = found.len();
        }
        let d = exact(s);
        lo = lo.min(d - code);
        hi = hi.max(d - code);
        let at = best.partition_point(|&b| b <= d);
        if at < k {
            best.insert(at, d);
            best.truncate(k);
        }
        out.push((d, s));
    }
    out.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    out.truncate(k);
    out
}

/// The k nearest of the walk's hits `a` and the tail's `b` (each at most k), a slot once: a
/// node linked while a search ran can come from both. No allocation beyond `a`'s growth.
fn merge_nearest(mut a: Vec<(f32, u32)>, b: Vec<(f32, u32)>, k: usize) -> Vec<(f32, u32)> {
    for t in b {
        if !a.iter().any(|h| h.1 == t.1) {
            a.push(t);
        }
    }
    a.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    a.truncate(k);
    a
}

thread_local! {
    static PREPARED: std::cell::RefCell<Prepared> =
        std::cell::RefCell::new(Prepared::default());
}

/// `f(values, bias)` on `q` made ready for `quantizer` (`Prepared`), in this thread's buffer:
/// a search allocates nothing for it once warm (a fresh buffer each query showed in a
/// profile: `docs/design/quantization.md`).
fn with_prepared<R>(
    quantizer: &Quantizer,
    metric: Metric,
    q: &[f32],
    f: impl FnOnce(&[f32], f32) -> R,
) -> R {
    PREPARED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut p) => {
            p.prepare(quantizer, metric, q);
            f(&p.values, p.bias)
        }
        Err(_) => {
            let p = Prepared::new(quantizer, metric, q);
            f(&p.values, p.bias)
        }
    })
}

fn check_rerank(rerank: Option<usize>) -> Result<()> {
    if let Some(r) = rerank {
        if !(1..=MAX_K).contains(&r) {
            return Err(Error::invalid(
                format!("rerank={r} is out of range"),
                format!("pass rerank from 1 to {MAX_K}, or None for the default"),
            ));
        }
    }
    Ok(())
}

/// A batch's search order and each query's start on layer 0 (see `batch_starts`).
type BatchStarts = (Vec<u32>, Vec<Option<Start>>);

impl Index {
    /// The `k` nearest live vectors to `q`, nearest first.
    pub fn search(&self, q: &[f32], k: usize, ef: Option<usize>) -> Result<Vec<Hit>> {
        self.search_filtered(q, k, ef, None)
    }

    /// `search`, returning only ids the filter allows, by the plan its costs choose
    /// (`plan`): the allowed vectors scanned exactly, or a walk (in two hops where few are
    /// allowed) that is scanned after all if it passes the scan's cost or finds fewer than k.
    pub fn search_filtered(
        &self,
        q: &[f32],
        k: usize,
        ef: Option<usize>,
        filter: Option<&Filter>,
    ) -> Result<Vec<Hit>> {
        self.search_in(&self.snap(), q, k, ef, None, filter)
    }

    /// `search_filtered` on a given snapshot. `rerank`: with codes, how many of the
    /// walk's best candidates get their distances computed again on the full vectors (see
    /// `rerank_count`).
    pub fn search_in(
        &self,
        snap: &Snap,
        q: &[f32],
        k: usize,
        ef: Option<usize>,
        rerank: Option<usize>,
        filter: Option<&Filter>,
    ) -> Result<Vec<Hit>> {
        self.check_open()?;
        check_k(k)?;
        let ef = self.effective_ef(ef)?;
        check_rerank(rerank)?;
        let q = self.prepare_query(q, "the query")?;
        let f = filter.map(|f| self.slot_filter(snap, f));
        let hits = self.search_prepared(
            snap,
            &q,
            Ask { k, ef, rerank, filter: f.as_deref(), start: None },
        );
        // Never an answer computed from zeros read where the file shrank underneath.
        snap.st.intact()?;
        Ok(hits)
    }

    /// `f` in slots of `snap`: made, or found as the last search with the same ids made it.
    pub(super) fn slot_filter(&self, snap: &Snap, f: &Filter) -> Arc<SlotFilter> {
        if snap.deleted_after().is_some() {
            // Its own: another snapshot of the same slots and commit holds fewer rows.
            return Arc::new(self.make_slot_filter(snap, f));
        }
        let generation = {
            let mut cache = self.filters.lock();
            if let Some(made) = cache.get(&snap.st, (snap.slots, snap.seq), f) {
                return made;
            }
            cache.generation()
        };
        let made = Arc::new(self.make_slot_filter(snap, f));
        self.filters.lock().put(&snap.st, (snap.slots, snap.seq), f, made.clone(), generation);
        made
    }

    /// `f` in slots of `snap`, made here: a batch's per-query filters, each met once, would
    /// only push the kept ones out of the cache and wait on each other for its lock.
    fn make_slot_filter(&self, snap: &Snap, f: &Filter) -> SlotFilter {
        self.with_ids(snap, |m| {
            let slot = |id| ids::mapped_slot(snap, m, id);
            let set = |ids: &Ids| SlotSet::new(ids.iter().filter_map(slot), ids.len(), snap.slots);
            SlotFilter::new(f.allowed.as_ref().map(set), set(&f.excluded))
        })
    }

    /// The hits of one prepared query (`q` in the search form).
    pub(super) fn search_prepared(&self, snap: &Snap, q: &[f32], ask: Ask<'_>) -> Vec<Hit> {
        if snap.live == 0 {
            return Vec::new();
        }
        let st = &snap.st;
        let euclid = self.metric() == Metric::Euclidean;
        // Slots whose vector failed its checksum: their distance is wrong, so they are never
        // returned (check() names them); the search runs again without them to fill k.
        let mut bad: Vec<u32> = Vec::new();
        let mut checked: Option<Snap> = None;
        loop {
            let raw = self.search_slots(checked.as_ref().unwrap_or(snap), q, ask, &bad);
            // The results' headers are far apart and each read is a miss: ask for them all
            // first, so the misses overlap (measured: `docs/design/search-path.md`).
            for &(_, s) in &raw {
                crate::cpu::prefetch(st.header(s).as_ptr() as *const u8, 1, true);
            }
            let mut hits = Vec::with_capacity(raw.len());
            let before = bad.len();
            let mut unchecked = false;
            for (d, s) in raw {
                let Some(id) = snap.live_id(s) else {
                    if snap.visible(s) {
                        // Its header failed its checksum: never returned, like a vector that
                        // fails its own.
                        bad.push(s);
                    } else if !snap.hides && checked.is_none() {
                        // A walk that did not check the nodes it met (no deleted node should
                        // be in a list) returned a hidden one: a batch is linking a reused
                        // slot, or a list kept a deleted node.
                        unchecked = true;
                    }
                    continue;
                };
                if format::vector_crc(st.vector_bytes(s)) != st.header(s)[3].load(Relaxed) as u32 {
                    bad.push(s);
                    continue;
                }
                hits.push(Hit { id, distance: if euclid { d.max(0.0).sqrt() } else { d } });
            }
            if unchecked {
                // Again, checking every node met.
                checked = Some(Snap { hides: true, ..Snap::clone_of(snap) });
                continue;
            }
            if bad.len() == before || bad.len() > 64 {
                return hits;
            }
        }
    }

    /// The search proper: (distance, slot) of the k nearest accepted slots, nearest first,
    /// never one of `bad`.
    pub(super) fn search_slots(
        &self,
        snap: &Snap,
        q: &[f32],
        ask: Ask<'_>,
        bad: &[u32],
    ) -> Vec<(f32, u32)> {
        // A codes-only index computes distances to codes everywhere (walk and scans): the
        // query is made ready for them once, and its constant added to the distances found.
        if self.precision() == Precision::CodesOnly {
            let Some(z) = snap.quant.clone() else { return Vec::new() };
            return with_prepared(&z, self.metric(), q, |values, bias| {
                let mut out =
                    self.search_kernel_query(snap, values, Ask { rerank: None, ..ask }, bad);
                out.iter_mut().for_each(|h| h.0 += bias);
                out
            });
        }
        self.search_kernel_query(snap, q, ask, bad)
    }

    /// `search_slots` with `q` as the storage's kernels take it (a codes-only index's: made
    /// ready for the codes, distances without the query's constant).
    fn search_kernel_query(
        &self,
        snap: &Snap,
        q: &[f32],
        ask: Ask<'_>,
        bad: &[u32],
    ) -> Vec<(f32, u32)> {
        let Ask { k, ef, rerank, filter, start } = ask;
        let filter = filter.filter(|f| !f.lets_all(snap.slots));
        let visible = snap.slots as u32;
        let st = &snap.st;
        // Short of memory: sampled before the first read of any path (the scans' too), so the
        // mappings are read at random from it on, and pages prefetched (see `residency`).
        let cold = self.cold(snap);
        let exact = Graph::new(st, self.metric(), visible);
        // Codes beside float vectors: the walk computes distances to codes and the vectors
        // rerank.
        let rerank_on = snap.quant.as_ref().filter(|_| self.precision() != Precision::CodesOnly);
        // Deleted nodes route but are never returned. Scans check every slot's marker where
        // any is deleted; walks only where they may meet one (`Snap::hides`).
        let any_deleted = snap.live < snap.slots;
        let check = |s: u32, markers: bool| {
            s < visible
                && filter.is_none_or(|f| f.allows(s))
                && (!markers || snap.visible(s))
                && (bad.is_empty() || !bad.contains(&s))
        };
        let hides = snap.hides;
        let accept = |s: u32| check(s, any_deleted || hides);
        // Every row the filter allows, exactly: the plan's scan, and where a walk falls short.
        let scan = || match filter.and_then(|f| f.allowed.as_ref()) {
            Some(allowed) => exact.scan(q, k, allowed.iter().filter(|&s| accept(s))),
            None => exact.scan(q, k, (0..visible).filter(|&s| accept(s))),
        };
        // The beam would cover everything anyway: scan, which is exact even where the graph
        // is not connected.
        if ef as u64 >= snap.live {
            return scan();
        }
        let choice = filter.map(|f| plan_of(snap, k, ef, f, self.metric()));
        let (two_hop, budget) = match choice {
            Some(Choice { plan: Plan::Scan, .. }) => {
                plan::count(Plan::Scan, false, false);
                return scan();
            }
            Some(c) => (c.plan == Plan::TwoHop, c.budget),
            None => (false, u64::MAX),
        };
        let expect = choice.map_or(0.0, |c| c.expect);
        let seeds = filter.map_or(&[][..], |f| &f.seeds[..]);
        // Route through every mapped slot (a batch in progress, or a writer elsewhere, may have
        // linked newer ones), but return only the snapshot's.
        let limit = st.capacity().min(u32::MAX as u64 - 1) as u32;
        // The walk, with `$accept` as the check of every node it meets (a macro: each check
        // below gets a walk of its own, with the check inlined into it).
        macro_rules! walk {
            ($accept:expr) => {
                match rerank_on {
                    // Walk the codes, then rerank the best candidates on the vectors: the distances
                    // returned are the vectors' own.
                    Some(quantizer) => {
                        let r = rerank_count(k, ef, rerank, quantizer.bits() == 4);
                        let walk = Graph::on_stored_codes(st, self.metric(), limit)
                            .prefetching_pages(cold.walk, cold.lists)
                            .prefetching_headers(hides)
                            .filtered(two_hop, budget)
                            .expecting(expect)
                            .seeded(seeds);
                        let found = with_prepared(quantizer, self.metric(), q, |values, _| {
                            walk.knn(
                                values,
                                r,
                                ef,
                                snap.entry,
                                snap.max_level,
                                visible,
                                $accept,
                                start,
                            )
                        });
                        found.map(|found| {
                            let prefetch = |s: u32| st.will_need(s, Area::Vector);
                            let prefetch = cold.vectors.then_some(&prefetch as &dyn Fn(u32));
                            // The first k + 2 (about what a rerank reaches on MiniLM) come in
                            // together; see `Graph::prefetch_rows`.
                            exact.prefetch_rows(found.iter().take(k + 2).map(|c| c.1));
                            rerank_found(&found, k, rerank.is_none(), prefetch, |s| {
                                exact.dist(q, s)
                            })
                        })
                    }
                    None => Graph::new(st, self.metric(), limit)
                        .prefetching_pages(cold.walk, cold.lists)
                        .prefetching_headers(hides)
                        .filtered(two_hop, budget)
                        .expecting(expect)
                        .seeded(seeds)
                        .knn(q, k, ef, snap.entry, snap.max_level, visible, $accept, start),
                }
            };
        }
        // Where the check is one comparison (no filter) or one bit (an allowed bitmap alone: no
        // exclusions, deletes or refused rows), the walk gets it inlined: the whole check is a
        // call per node met, which a two-hop search pays for every entry of every list it
        // reads (docs/design/filtered-search.md).
        let bits = match filter {
            Some(SlotFilter { allowed: Some(SlotSet::Bits(b, _)), excluded, .. })
                if excluded.len() == 0 && !hides && bad.is_empty() =>
            {
                Some(&b[..])
            }
            _ => None,
        };
        let plain = filter.is_none() && !hides && bad.is_empty();
        let walked = match bits {
            Some(b) => walk!(&|s: u32| s < visible
                && b.get(s as usize / 64).is_some_and(|w| w >> (s % 64) & 1 != 0)),
            None if plain => walk!(&|s: u32| s < visible),
            None => walk!(&|s: u32| check(s, hides)),
        };
        if let Some(c) = choice {
            plan::count(c.plan, walked.is_none(), Graph::switched());
        }
        // The walk gave up (its work passed the scan's), or found fewer than k with a filter
        // (or rows refused): the exact scan, which covers the tail too.
        let Some(hits) = walked.filter(|h| h.len() >= k || (filter.is_none() && bad.is_empty()))
        else {
            return scan();
        };
        // The tail (stored, not linked yet: the deferred-linking record) scanned whole, at
        // most `TAIL_MAX` rows.
        if snap.linked < snap.slots {
            let tail = (snap.linked as u32..visible).filter(|&s| accept(s));
            return merge_nearest(hits, exact.scan(q, k, tail), k);
        }
        hits
    }

    /// Search many queries (`qs` is nq x dims) on `threads` threads. Returns ids and distances,
    /// nq x k row-major, padded with `RESERVED_ID` and infinity.
    #[allow(clippy::too_many_arguments)]
    pub fn search_batch(
        &self,
        qs: &[f32],
        nq: usize,
        k: usize,
        ef: Option<usize>,
        filter: Option<&Filter>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        let same = BatchFilter::Same(filter);
        self.search_batch_in(&self.snap(), qs, nq, k, ef, None, same, threads, ctl)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn search_batch_in(
        &self,
        snap: &Snap,
        qs: &[f32],
        nq: usize,
        k: usize,
        ef: Option<usize>,
        rerank: Option<usize>,
        filter: BatchFilter<'_>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        self.check_open()?;
        check_rerank(rerank)?;
        if let BatchFilter::PerQuery(f) = filter {
            if f.len() != nq {
                return Err(Error::invalid(
                    format!("{} filters for {nq} queries", f.len()),
                    "pass one filter per query",
                ));
            }
        }
        check_k(k)?;
        let ef = self.effective_ef(ef)?;
        let d = self.dims();
        if qs.len() != nq * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("got {} values for {nq} queries of {d} dimensions", qs.len()),
                format!("pass an array of shape (n, {d})"),
            ));
        }
        if nq.checked_mul(k).is_none_or(|c| c > 1 << 31) {
            return Err(Error::invalid(
                format!("{nq} queries x k={k} results is too many"),
                "search in smaller batches or with a smaller k",
            ));
        }
        for (r, row) in qs.chunks_exact(d).enumerate() {
            self.check_vector(row, &format!("query {r}"))?;
        }
        // Prepared once for both passes (cosine: one normalised copy of the batch).
        let qs = self.search_form(qs, d);
        let qs: &[f32] = &qs;
        let same = match filter {
            BatchFilter::Same(f) => f.map(|f| self.slot_filter(snap, f)),
            BatchFilter::PerQuery(_) => None,
        };
        // Large unfiltered batches run in the order of where their queries enter layer 0, so
        // queries that walk the same part of the graph run one after another and find its
        // vectors and page translations still cached. Each query's search is the one it would
        // have had alone: the descent found its start, the order only changes when it runs.
        let ordered = match filter {
            BatchFilter::Same(_) => {
                nq >= ORDER_MIN && !scans(snap, k, ef, same.as_deref(), self.metric())
            }
            BatchFilter::PerQuery(_) => false,
        };
        // Short of memory: the first sample marks the mappings as read at random before the
        // batch reads anything, its descents included (a fault that read around itself would
        // read the kernel's read-ahead window for every page the descents touch).
        let cold = self.cold(snap);
        let starts =
            if ordered { self.batch_starts(snap, qs, nq, cold, threads, ctl)? } else { None };
        let search_one = |i: usize| -> Vec<Hit> {
            if ctl.cancelled() {
                return Vec::new();
            }
            let q = &qs[i * d..(i + 1) * d];
            let own = match filter {
                BatchFilter::PerQuery(fs) => Some(Arc::new(self.make_slot_filter(snap, &fs[i]))),
                BatchFilter::Same(_) => None,
            };
            let start = starts.as_ref().and_then(|(_, s)| s[i].as_ref());
            let filter = own.as_deref().or(same.as_deref());
            let hits = self.search_prepared(snap, q, Ask { k, ef, rerank, filter, start });
            ctl.done.fetch_add(1, Relaxed);
            hits
        };
        let mut ids = vec![RESERVED_ID; nq * k];
        let mut dists = vec![f32::INFINITY; nq * k];
        let mut put = |i: usize, hits: Vec<Hit>| {
            for (j, h) in hits.into_iter().enumerate() {
                ids[i * k + j] = h.id;
                dists[i * k + j] = h.distance;
            }
        };
        let identity: Vec<u32>;
        let order: &[u32] = match &starts {
            Some((o, _)) => o,
            None => {
                identity = (0..nq as u32).collect();
                &identity
            }
        };
        if threads == Some(1) {
            // On the calling thread: Python threads that each search with threads=1 then run
            // side by side instead of queueing for one shared worker.
            for &i in order {
                put(i as usize, search_one(i as usize));
            }
        } else {
            // Consecutive queries of the order go to one thread, 16 at a time.
            let found: Vec<Vec<Hit>> = with_threads(threads, || {
                order.par_iter().with_max_len(16).map(|&i| search_one(i as usize)).collect()
            })?;
            for (&i, hits) in order.iter().zip(found) {
                put(i as usize, hits);
            }
        }
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        snap.st.intact()?;
        Ok((ids, dists))
    }

    /// For a batch of prepared queries: the order to search them in (by the path of their
    /// descent through the upper layers, top layer first, which sorts them like the leaves of a
    /// tree) and where each enters layer 0. None where there is nothing to order by (one layer).
    pub(super) fn batch_starts(
        &self,
        snap: &Snap,
        qs: &[f32],
        nq: usize,
        cold: Cold,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Option<BatchStarts>> {
        let layers = snap.max_level;
        if layers == 0 {
            return Ok(None);
        }
        let d = self.dims();
        let st = &snap.st;
        let limit = st.capacity().min(u32::MAX as u64 - 1) as u32;
        // The descent computes distances to what the search's walk will: codes, once
        // trained.
        let g = match snap.quant {
            Some(_) => Graph::on_stored_codes(st, self.metric(), limit),
            None => Graph::new(st, self.metric(), limit),
        }
        .prefetching_pages(cold.walk, cold.lists);
        let visible = snap.slots as u32;
        let quant: Option<&Quantizer> = snap.quant.as_deref();
        let descend = |q: &[f32], path: &mut [u32]| -> Option<Start> {
            if ctl.cancelled() {
                return None;
            }
            match quant {
                Some(z) => with_prepared(z, self.metric(), q, |values, _| {
                    g.start_of(values, snap.entry, layers, visible, path)
                }),
                None => g.start_of(q, snap.entry, layers, visible, path),
            }
        };
        let mut paths = vec![0u32; nq * layers];
        let starts: Vec<Option<Start>> = if threads == Some(1) {
            qs.chunks_exact(d).zip(paths.chunks_mut(layers)).map(|(q, p)| descend(q, p)).collect()
        } else {
            with_threads(threads, || {
                qs.par_chunks_exact(d)
                    .zip(paths.par_chunks_mut(layers))
                    .with_max_len(64)
                    .map(|(q, p)| descend(q, p))
                    .collect()
            })?
        };
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        let mut order: Vec<u32> = (0..nq as u32).collect();
        order.sort_by(|&a, &b| {
            paths[a as usize * layers..][..layers].cmp(&paths[b as usize * layers..][..layers])
        });
        Ok(Some((order, starts)))
    }
}

#[cfg(test)]
mod tests {
    //! `rerank_found` against its oracle: every candidate reranked and sorted by exact distance.
    use super::*;
    use std::cell::RefCell;

    /// Candidates nearest code first: exact distances spaced about `gap` apart in a shuffled
    /// order, codes each off by a uniform error in `-err..err` (a small LCG, seeded).
    fn candidates(n: usize, gap: f32, err: f32, seed: u64) -> (Vec<(f32, u32)>, Vec<f32>) {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 40) as f32 / (1u64 << 24) as f32
        };
        let exact: Vec<f32> = (0..n).map(|i| 1.0 + gap * (i as f32 + next())).collect();
        let mut found: Vec<(f32, u32)> =
            (0..n as u32).map(|s| (exact[s as usize] + err * (2.0 * next() - 1.0), s)).collect();
        found.sort_by(|a, b| a.0.total_cmp(&b.0));
        (found, exact)
    }

    fn oracle(found: &[(f32, u32)], exact: &[f32], k: usize) -> Vec<(f32, u32)> {
        let mut all: Vec<(f32, u32)> = found.iter().map(|&(_, s)| (exact[s as usize], s)).collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        all.truncate(k);
        all
    }

    /// (results, slots reranked in order, slots prefetched in order).
    fn run(
        found: &[(f32, u32)],
        exact: &[f32],
        k: usize,
        adaptive: bool,
    ) -> (Vec<(f32, u32)>, Vec<u32>, Vec<u32>) {
        let (reranked, prefetched) = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));
        let prefetch = |s: u32| prefetched.borrow_mut().push(s);
        let out = rerank_found(found, k, adaptive, Some(&prefetch), |s| {
            assert!(prefetched.borrow().contains(&s), "slot {s} reranked before it was prefetched");
            reranked.borrow_mut().push(s);
            exact[s as usize]
        });
        (out, reranked.into_inner(), prefetched.into_inner())
    }

    #[test]
    fn a_constant_code_error_needs_one_candidate_past_k() {
        let (found, _) = candidates(40, 0.01, 0.0, 1);
        let exact: Vec<f32> = {
            let mut e = vec![0.0; 40];
            found.iter().for_each(|&(c, s)| e[s as usize] = c + 0.25);
            e
        };
        let (out, reranked, _) = run(&found, &exact, 10, true);
        assert_eq!(out, oracle(&found, &exact, 10));
        assert_eq!(reranked.len(), 11);
    }

    #[test]
    fn adaptive_stops_only_where_the_rule_says_and_keeps_the_nearest_reranked() {
        let (k, w) = (10, ERROR_WIDTHS);
        let mut early = 0;
        for seed in 0..500 {
            // Errors from far below the gaps to several gaps wide.
            let err = 0.002 * (1 + seed % 25) as f32;
            let (found, exact) = candidates(48, 0.01, err, seed);
            let (out, reranked, prefetched) = run(&found, &exact, k, true);
            // What was reranked is a prefix of `found`, and every candidate was prefetched once.
            let prefix: Vec<u32> = found[..reranked.len()].iter().map(|c| c.1).collect();
            assert_eq!(reranked, prefix);
            let mut all_prefetched = prefetched.clone();
            all_prefetched.sort_unstable();
            all_prefetched.dedup();
            assert_eq!(all_prefetched.len(), prefetched.len());
            // The results: the k nearest of what was reranked, at their exact distances.
            assert_eq!(out, oracle(&found[..reranked.len()], &exact, k));
            if reranked.len() < found.len() {
                early += 1;
                // It stopped where the rule holds, and nowhere before it.
                let (mut lo, mut hi, mut best) = (f32::INFINITY, f32::NEG_INFINITY, Vec::new());
                for (i, &(code, s)) in found.iter().enumerate() {
                    let stop = i > k && code + lo - w * (hi - lo) > best[k - 1];
                    assert_eq!(stop, i == reranked.len(), "seed {seed}: candidate {i}");
                    if stop {
                        break;
                    }
                    let d = exact[s as usize];
                    (lo, hi) = (lo.min(d - code), hi.max(d - code));
                    best.push(d);
                    best.sort_by(f32::total_cmp);
                }
            }
            // Errors under half the mean gap: on these seeds, always the full rerank's answer.
            if err < 0.005 {
                assert_eq!(out, oracle(&found, &exact, k), "seed {seed}");
            }
        }
        assert!(early > 250, "the rule stopped early in only {early} of 500 cases");
    }

    #[test]
    fn a_caller_s_count_is_reranked_whole() {
        let (found, exact) = candidates(30, 0.01, 0.0, 7);
        let (out, reranked, prefetched) = run(&found, &exact, 10, false);
        assert_eq!(reranked.len(), 30);
        assert_eq!(prefetched.len(), 30);
        assert_eq!(out, oracle(&found, &exact, 10));
    }
}
