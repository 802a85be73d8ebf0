//! The write path: `add` and `add_batch` as a pipeline of named steps (plan, reserve, write,
//! link, publish), all or nothing and published whole when linked; and `delete`.

use super::codes::{encode_stored, store_quantizer, TRAIN_MIN, TRAIN_SAMPLE};
use super::*;
use crate::format::NO_UPPER;
use crate::graph::{self, locality};
use crate::storage::lists;
use rayon::prelude::*;

/// The most rows a tail holds: a search scans it whole, so it stays a small share of a
/// search, and a call that finds it full links it as one batch, so it stays a short pause
/// (measured: `docs/design/deferred-linking.md`).
pub const TAIL_MAX: u64 = 256;
const _: () = assert!(TAIL_MAX <= format::MAX_TAIL);
/// The largest batch stored as the tail instead of linked in the call.
const DEFER_MAX: u64 = TAIL_MAX / 4;
/// Batch deletes of this many rows or more take their header pages' write faults on a second
/// thread (`Storage::prefault_headers_beside`): below it, starting the thread costs more.
const PREFAULT_MIN: usize = 1024;

/// `CHASSIS_DEFER_LINK=0`: every add links before it returns, with no tail (to measure what
/// the tail gives).
fn defer_on() -> bool {
    crate::tuning::get().defer_link.unwrap_or(true)
}
/// Free slots a batch reuses, each with the commit that freed it (`Plan::reused`).
type FreeSlots = Vec<(u32, u64)>;
/// Free slots are chosen by where their old rows lay (`Index::locality_order`).
fn reuse_locality_on() -> bool {
    crate::tuning::get().reuse_locality.unwrap_or(true)
}
/// Per-thread buffers of the row writes.
#[derive(Default)]
pub(super) struct RowBufs {
    pub bytes: Vec<u8>,
    pub values: Vec<f32>,
    pub codes: Vec<u8>,
}

/// Rows to add: caller values (checked, normalised, rounded) or stored bytes copied as they
/// are (compaction).
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Values(&'a [f32]),
    Stored(&'a [u8]),
}

/// What a batch does, decided before anything is touched (`Index::plan_batch`).
struct Plan<'a> {
    rows: Rows<'a>,
    n: usize,
    snap: Arc<Snap>,
    ids: Vec<u64>,
    /// Stored as the tail, linked later (the deferred-linking record).
    defer: bool,
    /// Laid out by locality (`graph::locality`): set in each new slot's level-0 head.
    by_locality: bool,
    /// `order[j]` is the row written into slot offset `j` (`Plan::slot`), `pos[i]` the slot
    /// offset of row `i`; rows are still linked in their order.
    order: Vec<u32>,
    pos: Vec<u32>,
    /// Each row's level, by slot offset: the level its place among the batch's appended rows
    /// draws (as if the `r`-th of them had gone into slot `start + r`), so the layout does not
    /// change the graph; a reused slot's own (its upper lists are reused too).
    levels: Vec<usize>,
    /// Slot offsets below `reused.len()` are free slots reused (`reuse.rs`), with the commit
    /// that freed each; the rest are appended from `start` on.
    reused: Vec<(u32, u64)>,
    start: u64,
    /// Rows are marked with the commit they are visible from (`format::born_marker`).
    born: bool,
    /// A codes-only index's first quantizer, learned from this batch.
    early: Option<Quantizer>,
}

/// The room a batch takes (`Index::reserve_batch`): its slots' blocks, its nodes' upper lists
/// and, for a codes-only index's first batch, its quantizer's region. Dropped before `keep`,
/// it gives the heap space and the blocks back and puts the entry point back; regions it
/// added stay (searches may already route into them, and they hold nothing).
struct Reservation<'a> {
    index: &'a Index,
    st: &'a Storage,
    start: u64,
    heap_before: Option<(usize, u32)>,
    entry_before: (u32, usize),
    /// Each new slot's upper lists (by slot offset), or NO_UPPER.
    uppers: Vec<u64>,
    /// A quantizer stored for this batch: its region's offset and itself.
    trained: Option<(u64, Arc<Quantizer>)>,
    kept: bool,
}

impl Plan<'_> {
    /// The slot of slot offset `j`.
    fn slot(&self, j: usize) -> u32 {
        match self.reused.get(j) {
            Some(&(s, _)) => s,
            None => (self.start + (j - self.reused.len()) as u64) as u32,
        }
    }

    /// Every slot offset's slot.
    fn slots(&self) -> Vec<u32> {
        (0..self.n).map(|j| self.slot(j)).collect()
    }

    /// Where the appended slots end.
    fn end(&self) -> u64 {
        self.start + (self.n - self.reused.len()) as u64
    }
}

impl Reservation<'_> {
    fn keep(mut self) -> Option<(u64, Arc<Quantizer>)> {
        self.kept = true;
        self.trained.take()
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        // Heap chunks back to where the batch found them (chunks it added hold nothing), and
        // the blocks reserved for the batch back to the filesystem.
        let st = self.st;
        let first_new = self.heap_before.map_or(0, |(chunk, _)| chunk + 1);
        if let Some((chunk, used)) = self.heap_before {
            st.set_heap_used(chunk, used);
        }
        for chunk in first_new..st.heap_chunks() {
            st.set_heap_used(chunk, 0);
        }
        st.give_back(self.start);
        *self.index.entry.lock() = self.entry_before;
    }
}

impl Index {
    /// Add one vector; returns its id.
    pub fn add(&self, v: &[f32], id: Option<u64>) -> Result<u64> {
        let ids = id.map(|i| [i]);
        let out = self.add_batch(v, 1, ids.as_ref().map(|a| &a[..]), None, &Control::default())?;
        Ok(out[0])
    }

    /// Add `n` vectors (`data` is n x dims, row-major). All or nothing: on any error or a
    /// cancel, nothing of the batch remains and the error is returned. Searches meanwhile see
    /// the state before the batch; it is published whole when it is linked.
    pub fn add_batch(
        &self,
        data: &[f32],
        n: usize,
        ids: Option<&[u64]>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Vec<u64>> {
        self.writable()?;
        // A writer that only adds samples as searches do (at most once a second), so that an
        // index larger than memory is linked with its mappings read at random (`residency`).
        self.cold(&self.snap());
        let mut w = self.writer.lock();
        if n > 0 {
            self.consolidate_if_due(&mut w, threads, ctl)?;
        }
        self.add_rows(&mut w, Rows::Values(data), n, ids, threads, ctl)
    }

    /// Add rows: plan (everything checked first), reserve room, write the rows, link them (or
    /// keep them as the tail), publish. On an error or a cancel at any step nothing of the
    /// batch remains: the reservation gives its room back when dropped.
    pub(super) fn add_rows(
        &self,
        w: &mut Writer,
        rows: Rows<'_>,
        n: usize,
        ids: Option<&[u64]>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Vec<u64>> {
        let Some(plan) = self.plan_batch(w, rows, n, ids, threads, ctl)? else {
            return Ok(Vec::new());
        };
        let st = &*plan.snap.st.clone();
        let mut room = self.reserve_batch(st, &plan)?;
        // The pieces this batch fills whole are written once: ask for huge pages before writing
        // them (ADR-0016, 4), so that a batch-built index is on huge pages from the start.
        Self::advise_slots(st, plan.start, plan.end());
        // A large batch's level-0 lists are built in anonymous memory and written to the file
        // once, after linking (storage/shadow.rs); on any other way out they are dropped.
        let shadow = st.shadow_lists(plan.start, plan.end());
        // Reused slots' committed markers and lists to the undo log before anything of them
        // changes.
        let reused = self.save_reused(w, st, &plan)?;
        self.write_batch(st, &plan, &room, threads)?;
        // A quantized index without a quantizer learns one once it holds enough rows, and
        // encodes every vector so far; searches walk the codes from the publish on.
        let end = plan.end();
        if self.geo.code_stride > 0 && plan.snap.quant.is_none() && end >= TRAIN_MIN {
            room.trained = Some(
                with_threads(threads, || self.learn_codes(st, None, end, ctl)).and_then(|r| r)?,
            );
        }
        if !plan.defer {
            let quant = room.trained.as_ref().map(|t| &*t.1).or(plan.snap.quant.as_deref());
            let slots = plan.slots();
            let (pos, levels) = (&plan.pos, &plan.levels);
            self.link_slots(w, st, &slots, plan.start, pos, levels, quant, threads, ctl)?;
        }
        // The batch's lists to the file, before anything can read them there.
        shadow.keep();
        let trained = room.keep();
        Ok(self.publish_batch(w, plan, trained, &reused))
    }

    /// Step 1: check the rows and ids, link a tail that this batch does not join, choose each
    /// row's slot and level. None for an empty batch.
    fn plan_batch<'a>(
        &self,
        w: &mut Writer,
        rows: Rows<'a>,
        n: usize,
        ids: Option<&[u64]>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Option<Plan<'a>>> {
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        let data = match rows {
            Rows::Values(v) => v,
            Rows::Stored(_) => &[][..],
        };
        if let Rows::Stored(b) = rows {
            assert_eq!(b.len(), n * self.geo.vec_bytes);
        } else {
            self.check_rows(data, n)?;
        }
        if n == 0 {
            return Ok(None);
        }
        let snap = self.view.read().clone();
        let new_ids = self.assign_ids(w, &snap, n, ids)?;
        // A small batch on a graph that has a node is stored as the tail, searchable at once
        // and linked later (the deferred-linking record); any other batch, or one the tail has
        // no room for, links the tail first (ids and rows are not touched by that).
        let defer =
            matches!(rows, Rows::Values(_)) && n as u64 <= DEFER_MAX && w.linked > 0 && defer_on();
        let snap = if w.slots > w.linked && (!defer || w.slots - w.linked + n as u64 > TAIL_MAX) {
            self.link_tail(w, threads, ctl)?;
            // The progress shown is the batch's own rows.
            ctl.done.store(0, Relaxed);
            self.view.read().clone()
        } else {
            snap
        };
        // Only a batch whose ids rise along its rows, above every id so far, so that its
        // insertion order can be read back from its ids (`live_in_order`).
        let by_locality = n >= locality::LOCALITY_MIN
            && new_ids[0] >= w.next_id
            && new_ids.windows(2).all(|p| p[0] < p[1]);
        // Free slots first (none for a tail, nor for stored rows a compaction copies); a batch
        // laid out by locality chooses among twice as many as it has rows.
        let choose = by_locality && reuse_locality_on();
        let free = if defer || matches!(rows, Rows::Stored(_)) {
            Vec::new()
        } else {
            self.slots_to_reuse(w, &snap, if choose { 2 * n } else { n })
        };
        let early = self.first_quantizer(&snap, data, n)?;
        let (reused, order) = if choose || (by_locality && free.is_empty()) {
            self.locality_order(&snap, rows, n, &free, threads, ctl)?
        } else {
            (free, (0..n as u32).collect())
        };
        let k = reused.len();
        let mut pos = vec![0u32; n];
        for (j, &i) in order.iter().enumerate() {
            pos[i as usize] = j as u32;
        }
        let start = w.slots;
        if start + (n - k) as u64 > u32::MAX as u64 - 1 {
            return Err(Error::new(
                ErrorKind::IndexFull,
                "an index holds at most 2**32 - 2 vectors",
                "start another index file",
            ));
        }
        let m = self.geo.m;
        let st = &snap.st;
        // An appended row's rank among the appended rows, in row order.
        let mut rank = vec![0u64; n];
        let mut next = 0;
        for (i, r) in rank.iter_mut().enumerate() {
            if pos[i] as usize >= k {
                *r = next;
                next += 1;
            }
        }
        let levels = (order.iter().enumerate())
            .map(|(j, &i)| match reused.get(j) {
                Some(&(s, _)) => lists::level_of(st, s),
                None => graph::level_for(start + rank[i as usize], m),
            })
            .collect();
        let born = w.reuse.born || k > 0;
        Ok(Some(Plan {
            rows,
            n,
            snap,
            ids: new_ids,
            defer,
            by_locality,
            order,
            pos,
            levels,
            reused,
            start,
            born,
            early,
        }))
    }

    /// A codes-only index stores codes: it needs its quantizer before the first row is
    /// written, learned from that first batch when it is large enough.
    fn first_quantizer(&self, snap: &Snap, data: &[f32], n: usize) -> Result<Option<Quantizer>> {
        if self.precision() != Precision::CodesOnly || snap.quant.is_some() {
            return Ok(None);
        }
        if n < TRAIN_MIN as usize || data.is_empty() {
            return Err(Error::invalid(
                format!(
                    "a codes-only index (precision=\"int8\") learns its codes' ranges from \
                     its first batch, and {n} rows are too few"
                ),
                "add at least 1,000 rows in the first add_batch, or call train(sample) first",
            ));
        }
        let d = self.dims();
        let form = self.search_form(data, d);
        let take = n.min(TRAIN_SAMPLE as usize);
        let sample = (0..take).map(|i| &form[(i * n / take) * d..(i * n / take + 1) * d]);
        Quantizer::train(d, sample, 1.0).map(Some)
    }

    /// The layout of a batch laid out by locality (see `graph::locality`): the free slots of
    /// `free` it reuses, lowest first, each taking a row near the row it held (whose
    /// neighbors sit in the slots around it), and the slot order (`Plan::order`), which
    /// appends the rows left over in the order of their locality.
    fn locality_order(
        &self,
        snap: &Snap,
        rows: Rows<'_>,
        n: usize,
        free: &[(u32, u64)],
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<(FreeSlots, Vec<u32>)> {
        let (d, vb, precision) = (self.dims(), self.geo.vec_bytes, self.precision());
        let codes_only = precision == Precision::CodesOnly;
        let quant = snap.quant.clone();
        let decode = |bytes: &[u8], out: &mut [f32]| match &quant {
            // A codes-only index's stored rows are codes of its quantizer.
            Some(q) if codes_only => q.decode(bytes, out),
            _ => format::decode_vector(bytes, precision, out),
        };
        let st = &snap.st;
        // Stored vectors of a cosine index are unit vectors: the rows too, to be ordered with
        // the free slots' old ones.
        let unit = self.metric() == Metric::Cosine;
        let row = |i: usize, out: &mut [f32]| match rows {
            Rows::Values(v) if i < n => {
                out.copy_from_slice(&v[i * d..(i + 1) * d]);
                if unit {
                    crate::distance::normalize(out);
                }
            }
            Rows::Stored(b) if i < n => decode(&b[i * vb..(i + 1) * vb], out),
            // A free slot's old row; one a reuse cut short by a crash left torn may hold
            // anything, and the order only needs finite values.
            _ => {
                decode(st.vector_bytes(free[i - n].0), out);
                out.iter_mut().filter(|x| !x.is_finite()).for_each(|x| *x = 0.0);
            }
        };
        let cancelled = || ctl.cancelled();
        let all =
            with_threads(threads, || locality::slot_order(n + free.len(), d, &row, &cancelled))?
                .ok_or_else(Error::interrupted)?;
        let (mut pairs, left) = locality::pair_with_free(&all, n);
        pairs.sort_unstable_by_key(|p| free[p.1 as usize].0);
        let reused = pairs.iter().map(|p| free[p.1 as usize]).collect();
        let order = pairs.iter().map(|p| p.0).chain(left).collect();
        Ok((reused, order))
    }

    /// Step 2: room for the batch (see [`Reservation`]).
    fn reserve_batch<'s>(&'s self, st: &'s Storage, plan: &Plan<'_>) -> Result<Reservation<'s>> {
        let (start, n, k) = (plan.start, plan.n, plan.reused.len());
        let mut room = Reservation {
            index: self,
            st,
            start,
            heap_before: st.heap_state(),
            entry_before: *self.entry.lock(),
            uppers: vec![NO_UPPER; n],
            trained: None,
            kept: false,
        };
        st.reserve_slots(start, plan.end())?;
        for (j, &level) in plan.levels.iter().enumerate() {
            if j < k {
                // A reused slot keeps its upper lists: its level is its own.
                room.uppers[j] = st.header(plan.slot(j))[1].load(Relaxed);
            } else if level > 0 {
                room.uppers[j] = st.alloc_upper(plan.slot(j), level)?;
            }
        }
        if let Some(q) = &plan.early {
            room.trained = Some(store_quantizer(st, q)?);
        }
        Ok(room)
    }

    /// Step 3: write the vectors, codes (once a quantizer is in effect), slot headers and
    /// empty lists of the new slots (not yet reachable).
    fn write_batch(
        &self,
        st: &Storage,
        plan: &Plan<'_>,
        room: &Reservation<'_>,
        threads: Option<usize>,
    ) -> Result<()> {
        let (d, vb, n) = (self.dims(), self.geo.vec_bytes, plan.n);
        let (k, next) = (plan.reused.len(), plan.snap.seq + 1);
        let codes_only = self.precision() == Precision::CodesOnly;
        let clipped = AtomicU64::new(0);
        let quant_now: Option<Arc<Quantizer>> =
            room.trained.as_ref().map(|t| t.1.clone()).or_else(|| plan.snap.quant.clone());
        let write_row = |bufs: &mut RowBufs, j: usize| {
            let (slot, i) = (plan.slot(j), plan.order[j] as usize);
            let bytes = match plan.rows {
                // A codes-only index stores the row's code.
                Rows::Values(data) if codes_only => {
                    let q = quant_now.as_ref().expect("learned first");
                    let form = self.search_form(&data[i * d..(i + 1) * d], d);
                    bufs.bytes.resize(d, 0);
                    clipped.fetch_add(q.encode(&form, &mut bufs.bytes) as u64, Relaxed);
                    &bufs.bytes[..]
                }
                Rows::Values(data) => self.encode(&data[i * d..(i + 1) * d], &mut bufs.bytes),
                Rows::Stored(b) => &b[i * vb..(i + 1) * vb],
            };
            // SAFETY: the batch's slots are reserved and not published, and each row `j` is
            // written by one thread.
            unsafe { st.write_vector(slot, bytes) };
            if let (Some(q), false) = (&plan.snap.quant, codes_only) {
                let c =
                    encode_stored(q, bytes, self.precision(), &mut bufs.values, &mut bufs.codes);
                clipped.fetch_add(c as u64, Relaxed);
                // SAFETY: as for the vector just above.
                unsafe { st.write_code(slot, &bufs.codes) };
            }
            let (id, upper) = (plan.ids[i], room.uppers[j]);
            let vcrc = format::vector_crc(bytes);
            let h = st.header(slot);
            h[0].store(id, Relaxed);
            h[1].store(upper, Relaxed);
            // A reused slot keeps its delete marker until the batch is published, which marks
            // it visible from the next commit (after its id: `live_id` reads the marker first).
            if j >= k {
                let marker = if plan.born { format::born_marker(next, slot) } else { 0 };
                h[2].store(marker, Relaxed);
            }
            h[3].store(vcrc as u64 | (format::header_crc(id, upper, vcrc) as u64) << 32, Relaxed);
            // The head's locality bit first: write_list keeps it (a reused slot may hold an old one).
            let head = if plan.by_locality { format::L0_LOCALITY } else { 0 };
            st.l0(slot)[0].store(head, Relaxed);
            let level = plan.levels[j];
            lists::write_list(st.l0(slot), slot, 0, &[], level);
            for layer in (1..=level).filter(|_| j < k) {
                if let Some(list) = lists::list_of(st, slot, layer) {
                    lists::write_list(list, slot, layer, &[], level);
                }
            }
        };
        // Who writes the new slots first decides where an in-memory index's pages lie (the
        // NUMA note): balanced, every thread one contiguous stretch; local, or a small batch,
        // or one thread, this thread alone. A file's pages are the page cache's: any thread.
        let write_rows = || {
            let pool = rayon::current_num_threads();
            if !st.is_memory() {
                (0..n)
                    .into_par_iter()
                    .with_min_len(256)
                    .for_each_init(RowBufs::default, |buf, i| write_row(buf, i));
            } else if self.opts.placement == Placement::Balanced && n >= BALANCED_MIN && pool > 1 {
                rayon::broadcast(|ctx| {
                    let (t, k) = (ctx.num_threads(), ctx.index());
                    let mut buf = RowBufs::default();
                    (n * k / t..n * (k + 1) / t).for_each(|i| write_row(&mut buf, i));
                });
            } else {
                let mut buf = RowBufs::default();
                (0..n).for_each(|i| write_row(&mut buf, i));
            }
        };
        with_threads(threads, write_rows)?;
        self.clipped.fetch_add(clipped.into_inner(), Relaxed);
        Ok(())
    }

    /// Before the reused slots are written: their committed markers (each recorded once per
    /// commit, so the log gives back the committed one) and lists to the undo log, and the
    /// slots listed for the next commit's ranges. Returns (slot, freeing commit, marker) of
    /// each.
    fn save_reused(
        &self,
        w: &Writer,
        st: &Storage,
        plan: &Plan<'_>,
    ) -> Result<Vec<(u32, u64, u64)>> {
        if plan.reused.is_empty() {
            return Ok(Vec::new());
        }
        let taken: Vec<(u32, u64, u64)> =
            plan.reused.iter().map(|&(s, c)| (s, c, st.header(s)[2].load(Acquire))).collect();
        let slots: Vec<u32> = taken.iter().map(|t| t.0).collect();
        self.before_modify(st, w.committed.slots, w.committed.seq, &slots)?;
        let mut u = self.undo.lock();
        u.save_markers(w.committed.seq, w.committed.slots, taken.iter().map(|t| (t.0, t.2)))?;
        u.reused.extend(taken.iter().map(|t| t.0));
        Ok(taken)
    }

    /// Step 5: the batch becomes visible: counts, ids, entry point and quantizer published in
    /// one new snapshot; reused slots marked visible from the next commit.
    fn publish_batch(
        &self,
        w: &mut Writer,
        plan: Plan<'_>,
        trained: Option<(u64, Arc<Quantizer>)>,
        reused: &[(u32, u64, u64)],
    ) -> Vec<u64> {
        if !reused.is_empty() {
            let (st, next) = (&plan.snap.st, w.committed.seq + 1);
            for &(s, _, _) in reused {
                st.header(s)[2].store(format::born_marker(next, s), Release);
            }
            self.take_free(w, reused);
            let mut map = self.ids.lock();
            for (j, &(s, _, _)) in reused.iter().enumerate() {
                map.map.insert(plan.ids[plan.order[j] as usize], s);
            }
            drop(map);
            self.filters.lock().clear();
        }
        w.reuse.born |= plan.born;
        let quant = match trained {
            Some((offset, q)) => {
                w.quantizer = offset;
                Some(q)
            }
            None => plan.snap.quant.clone(),
        };
        w.slots = plan.end();
        if !plan.defer {
            w.linked = w.slots;
        }
        w.live += plan.n as u64;
        let max_new = *plan.ids.iter().max().expect("a batch of rows");
        w.next_id = w.next_id.max(max_new.saturating_add(1));
        let (entry, max_level) = *self.entry.lock();
        self.publish(Snap {
            born_visible: w.committed.seq + 1,
            slots: w.slots,
            linked: w.linked,
            live: w.live,
            entry,
            max_level,
            user_version: w.user_version,
            quant,
            ..Snap::clone_of(&plan.snap)
        });
        plan.ids
    }

    /// Delete `id`: hidden from searches at once (in this handle), durable at the next flush.
    /// Returns false if no live vector has that id. The node still routes searches until a
    /// compaction removes it.
    pub fn delete(&self, id: u64) -> Result<bool> {
        Ok(self.delete_batch(&[id])? == 1)
    }

    /// Delete every id of `ids` a live vector has, as one change: the markers' old values go
    /// to the undo log in one write, and searches see all the deletes at once. Returns how
    /// many ids were present (ids absent, and repeats, are skipped).
    pub fn delete_batch(&self, ids: &[u64]) -> Result<u64> {
        self.writable()?;
        let mut w = self.writer.lock();
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        let snap = self.view.read().clone();
        Ok(self.delete_in(&mut w, &snap, ids)?.len() as u64)
    }

    /// Replace rows: each id of `ids` a live vector has is deleted, then all `n` rows are added
    /// under `ids`, as `add_batch` adds them. Everything a caller can get wrong is checked
    /// before anything changes; if adding fails (a cancel, a full disk), the deleted rows are
    /// restored, so the call is all or nothing. Returns how many ids were present.
    pub fn upsert(
        &self,
        data: &[f32],
        n: usize,
        ids: &[u64],
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<u64> {
        self.writable()?;
        // What the add would refuse, refused before the deletes.
        self.check_rows(data, n)?;
        ids::check_ids(ids, n)?;
        self.cold(&self.snap());
        let mut w = self.writer.lock();
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        // With a tail not linked yet, the add may link it before it fails, and the lists
        // could not be put back as they were: then only the earlier deletes are consolidated,
        // before this call's.
        let tail = w.linked < w.slots;
        if tail {
            self.consolidate_if_due(&mut w, threads, ctl)?;
        }
        let snap = self.view.read().clone();
        let gone = self.delete_in(&mut w, &snap, ids)?;
        // This call's deletes consolidated with the earlier ones (when due) before the add
        // links, as `delete_batch` then `add_batch` do: rows linked beside deleted nodes had
        // their lists patched by the next consolidation instead of chosen, and recall per ef
        // drifted under upsert churn (the consolidation record). Kept undoable: if the add
        // fails, the deleted rows come back with their links.
        let relinked = if tail {
            None
        } else {
            match self.consolidate_if_due_undoably(&mut w, threads, ctl) {
                Ok(r) => r,
                Err(e) => {
                    self.restore_deleted(&mut w, &gone);
                    return Err(e);
                }
            }
        };
        match self.add_rows(&mut w, Rows::Values(data), n, Some(ids), threads, ctl) {
            Ok(_) => Ok(gone.len() as u64),
            Err(e) => {
                if let Some(before) = relinked {
                    self.unconsolidate(&mut w, before);
                }
                self.restore_deleted(&mut w, &gone);
                Err(e)
            }
        }
    }

    /// `n` rows of values: their number, and each finite (`check_vector`).
    fn check_rows(&self, data: &[f32], n: usize) -> Result<()> {
        let d = self.dims();
        if data.len() != n * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("got {} values for {n} vectors of {d} dimensions", data.len()),
                format!("pass an array of shape (n, {d})"),
            ));
        }
        for (r, row) in data.chunks_exact(d).enumerate() {
            let what = if n == 1 { "the vector".to_string() } else { format!("row {r}") };
            self.check_vector(row, &what)?;
        }
        Ok(())
    }

    /// The deletes of `delete_batch` under the writer lock: (slot, marker before, id) of each
    /// row deleted. The undo log holds the old markers of committed slots before any changes.
    pub(super) fn delete_in(
        &self,
        w: &mut Writer,
        snap: &Snap,
        ids: &[u64],
    ) -> Result<Vec<(u32, u64, u64)>> {
        let st = &snap.st;
        // Held until the deletes are published, so that a snapshot taken meanwhile is either
        // told of them or taken after (`Index::snapshot`).
        let kept = self.kept.lock();
        // Each id whose slot holds it, visible: (slot, its marker, id), then out of the map;
        // an id given twice leaves it once (the batch-delete record). Kept snapshots are told
        // before the map lets go of their rows (a lookup of theirs tries the map first).
        let mut faults = None;
        let gone: Vec<(u32, u64, u64)> = self.with_ids_mut(snap, |m| {
            // The slots first, then their headers, each fetched `AHEAD` reads early: a batch's
            // headers are random reads, and waiting for each was most of a delete's time.
            const AHEAD: usize = 16;
            let found: Vec<(u32, u64)> = (ids.iter())
                .filter_map(|&id| m.get(id).filter(|&s| (s as u64) < snap.slots).map(|s| (s, id)))
                .collect();
            // After a commit wrote the header pages back, each traps at its first write: a
            // thousand ids or more take those faults on a second thread while this one checks
            // their headers, unless a batch did since (the batch-delete record).
            if found.len() >= PREFAULT_MIN && w.headers_clean {
                let (st, slots) = (Arc::clone(st), found.iter().map(|f| f.0).collect::<Vec<_>>());
                faults = st.prefault_headers_beside(slots);
            }
            let mut gone = Vec::with_capacity(found.len());
            for (i, &(s, id)) in found.iter().enumerate() {
                if let Some(&(next, _)) = found.get(i + AHEAD) {
                    crate::cpu::prefetch(st.header(next).as_ptr().cast(), 1, true);
                }
                if snap.live_id(s) == Some(id) {
                    gone.push((s, st.header(s)[2].load(Acquire), id));
                }
            }
            for k in kept.iter().filter_map(|k| k.upgrade()) {
                k.add(st, &gone);
            }
            gone.retain(|g| m.remove(g.2).is_some());
            gone
        });
        if gone.is_empty() {
            return Ok(gone);
        }
        let markers = gone.iter().map(|g| (g.0, g.1));
        if let Err(e) = self.undo.lock().save_markers(w.committed.seq, w.committed.slots, markers) {
            self.with_ids_mut(snap, |m| gone.iter().for_each(|g| m.insert(g.2, g.0)));
            // A filter made while the ids were out of the map lacks them.
            self.filters.lock().clear();
            return Err(e);
        }
        let mut behind = FastMap::default();
        for &(s, old, _) in &gone {
            st.header(s)[2].store(self.delete_word(w, st, s, old, &mut behind), Release);
        }
        // Joined here (dropped), so that no page is made writable after the call.
        if faults.take().is_some() {
            w.headers_clean = false;
        }
        w.live -= gone.len() as u64;
        w.deletes += gone.len() as u64;
        w.unconsolidated += gone.len() as u64;
        self.unlinked_deletes.store(true, Relaxed);
        // Slot filters made before hold the slots of these ids.
        self.filters.lock().clear();
        self.publish(Snap { live: w.live, ..Snap::clone_of(snap) });
        drop(kept);
        Ok(gone)
    }

    /// Undo `delete_in` in memory (an upsert whose add failed): the markers as they were, the
    /// ids mapped again. Their undo records stay; they restore the same values.
    pub(super) fn restore_deleted(&self, w: &mut Writer, gone: &[(u32, u64, u64)]) {
        if gone.is_empty() {
            return;
        }
        let snap = self.view.read().clone();
        for &(s, old, _) in gone {
            snap.st.header(s)[2].store(old, Release);
        }
        let mut map = self.ids.lock();
        for &(s, _, id) in gone {
            map.map.insert(id, s);
        }
        drop(map);
        self.filters.lock().clear();
        w.live += gone.len() as u64;
        w.deletes -= gone.len() as u64;
        w.unconsolidated = w.unconsolidated.saturating_sub(gone.len() as u64);
        self.publish(Snap { live: w.live, ..Snap::clone_of(&snap) });
    }

    /// Slots deleted and not yet compacted away (in this handle's view).
    pub fn deleted_count(&self) -> Result<u64> {
        self.check_open()?;
        let s = self.snap();
        Ok(s.slots - s.live)
    }
}
