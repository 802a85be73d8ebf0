//! The write path: add and add_batch (checked whole before anything is touched, all or
//! nothing, published whole when linked) and delete.

use super::*;
use crate::format::{EMPTY, NO_UPPER, RESERVED_ID};
use crate::graph::{self, insert::Linker, locality};
use crate::quant::quantizer;
use crate::storage::lists;
use rayon::prelude::*;

/// A quantized index learns its quantizer once it holds this many rows (see `add_rows`).
pub const TRAIN_MIN: u64 = 1000;

/// The most rows a tail holds (the deferred-linking record): a search scans it whole, which
/// cost 0.031-0.034 ms per query at 1,024 rows of 384 dimensions and 0.13-0.21 ms at 4,096
/// (float32, half, int8; one thread). At 256 it costs a search about 0.01 ms, and a call that
/// finds it full links 256 rows as one batch (about 0.15 s at 10,000,000 x 384).
pub const TAIL_MAX: u64 = 256;
const _: () = assert!(TAIL_MAX <= format::MAX_TAIL);
/// The largest batch stored as the tail instead of linked in the call.
const DEFER_MAX: u64 = TAIL_MAX / 4;

/// `CHASSIS_DEFER_LINK=0`: every add links before it returns, as before the tail (to measure
/// what it gives).
fn defer_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CHASSIS_DEFER_LINK").map_or(true, |v| v != "0"))
}
/// Rows a quantizer is learned from at most (evenly spread over the index).
const TRAIN_SAMPLE: u64 = 100_000;

/// Per-thread buffers of the row writes.
#[derive(Default)]
struct RowBufs {
    bytes: Vec<u8>,
    values: Vec<f32>,
    codes: Vec<u8>,
}

/// The codes of a stored vector (`bytes` at `precision`) into `codes`; returns the values
/// clipped.
fn encode_stored(
    q: &Quantizer,
    bytes: &[u8],
    precision: Precision,
    values: &mut Vec<f32>,
    codes: &mut Vec<u8>,
) -> usize {
    values.resize(q.dims(), 0.0);
    codes.resize(q.code_len(), 0);
    format::decode_vector(bytes, precision, values);
    q.encode(values, codes)
}

/// Rows to add: caller values (checked, normalised, rounded) or stored bytes copied as they
/// are (compaction).
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Values(&'a [f32]),
    Stored(&'a [u8]),
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
        self.add_rows(&mut w, Rows::Values(data), n, ids, threads, ctl)
    }

    pub(super) fn add_rows(
        &self,
        w: &mut Writer,
        rows: Rows<'_>,
        n: usize,
        ids: Option<&[u64]>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<Vec<u64>> {
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        let d = self.dims();
        let data = match rows {
            Rows::Values(v) => v,
            Rows::Stored(_) => &[][..],
        };
        if let Rows::Stored(b) = rows {
            assert_eq!(b.len(), n * self.geo.vec_bytes);
        } else if data.len() != n * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("got {} values for {n} vectors of {d} dimensions", data.len()),
                format!("pass an array of shape (n, {d})"),
            ));
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let snap = self.view.read().clone();
        // 1. Check everything before touching anything.
        for (r, row) in data.chunks_exact(d).enumerate() {
            let what = if n == 1 { "the vector".to_string() } else { format!("row {r}") };
            self.check_vector(row, &what)?;
        }
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
        let st = &snap.st;
        // Where each row goes: `order[j]` is the row written into slot `start + j`, `pos[i]`
        // the slot offset of row `i` (see locality.rs). Rows are still linked in their order.
        let vb = self.geo.vec_bytes;
        // Only a batch whose ids rise along its rows, above every id so far, so that its
        // insertion order can be read back from its ids (`live_in_order`).
        let by_locality = n >= locality::LOCALITY_MIN
            && new_ids[0] >= w.next_id
            && new_ids.windows(2).all(|p| p[0] < p[1]);
        // A codes-only index stores codes: it needs its quantizer before the first row is
        // written, learned from that first batch when it is large enough.
        let codes_only = self.precision() == Precision::Int8;
        let mut early: Option<Quantizer> = None;
        if codes_only && snap.quant.is_none() {
            if n < TRAIN_MIN as usize || data.is_empty() {
                return Err(Error::invalid(
                    format!(
                        "a codes-only index (precision=\"int8\") learns its codes' ranges from \
                         its first batch, and {n} rows are too few"
                    ),
                    "add at least 1,000 rows in the first add_batch, or call train(sample) first",
                ));
            }
            let form = self.search_form(data, d);
            let take = n.min(TRAIN_SAMPLE as usize);
            early = Some(Quantizer::train(
                d,
                (0..take).map(|i| &form[(i * n / take) * d..(i * n / take + 1) * d]),
                1.0,
            )?);
        }
        let order: Vec<u32> = if by_locality {
            let precision = self.precision();
            let quant = snap.quant.clone();
            let row = |i: usize, out: &mut [f32]| match rows {
                Rows::Values(v) => out.copy_from_slice(&v[i * d..(i + 1) * d]),
                // A codes-only index's stored rows (compaction) are codes of its quantizer.
                Rows::Stored(b) if codes_only => {
                    quant.as_ref().expect("installed first").decode(&b[i * vb..(i + 1) * vb], out)
                }
                Rows::Stored(b) => format::decode_vector(&b[i * vb..(i + 1) * vb], precision, out),
            };
            let cancelled = || ctl.cancelled();
            with_threads(threads, || locality::slot_order(n, d, &row, &cancelled))?
                .ok_or_else(Error::interrupted)?
        } else {
            (0..n as u32).collect()
        };
        let mut pos = vec![0u32; n];
        for (j, &i) in order.iter().enumerate() {
            pos[i as usize] = j as u32;
        }
        let start = w.slots;
        if start + n as u64 > u32::MAX as u64 - 1 {
            return Err(Error::new(
                ErrorKind::IndexFull,
                "an index holds at most 2**32 - 2 vectors",
                "start another index file",
            ));
        }
        // 2. Room: segments, preallocated blocks, heap lists. Regions added stay (searches may
        // already route into them); heap space is given back on failure.
        let heap_before = st.heap_state();
        let entry_before = *self.entry.lock();
        let give_back = || {
            // Heap chunks back to where the batch found them (chunks it added hold nothing),
            // and the blocks reserved for the batch back to the filesystem.
            let first_new = heap_before.map_or(0, |(chunk, _)| chunk + 1);
            if let Some((chunk, used)) = heap_before {
                st.set_heap_used(chunk, used);
            }
            for chunk in first_new..st.heap_chunks() {
                st.set_heap_used(chunk, 0);
            }
            st.give_back(start);
            *self.entry.lock() = entry_before;
        };
        let m = st.geo.m;
        // By slot offset; each row keeps the level its place in the batch draws (as if it had
        // gone into slot `start + i`), so the layout does not change the graph.
        let levels: Vec<usize> =
            order.iter().map(|&i| graph::level_for(start + i as u64, m)).collect();
        let mut uppers = vec![NO_UPPER; n];
        let mut trained: Option<(u64, Arc<Quantizer>)> = None;
        let room = (|| -> Result<()> {
            st.reserve_slots(start, start + n as u64)?;
            for i in 0..n {
                if levels[i] > 0 {
                    uppers[i] = st.alloc_upper((start + i as u64) as u32, levels[i])?;
                }
            }
            if let Some(q) = &early {
                let offset = st.write_quantizer(q)?;
                trained = Some((offset, st.quantizer(offset)?.expect("stored just now")));
            }
            Ok(())
        })();
        if let Err(e) = room {
            give_back();
            return Err(e);
        }
        // The pieces this batch fills whole are written once: ask for huge pages before writing
        // them (ADR-0016, 4), so that a batch-built index is on huge pages from the start.
        Self::advise_slots(st, start, start + n as u64);
        // A large batch's level-0 lists are built in anonymous memory and written to the file
        // once, after linking (storage/shadow.rs); on any other way out they are dropped.
        let shadow = st.shadow_lists(start, start + n as u64);
        // 3. Write vectors, codes (once a quantizer is in effect), slot headers and empty lists
        // of the new slots (not yet reachable).
        let clipped = AtomicU64::new(0);
        let quant_now: Option<Arc<Quantizer>> =
            trained.as_ref().map(|t| t.1.clone()).or_else(|| snap.quant.clone());
        let write_row = |bufs: &mut RowBufs, j: usize| {
            let (slot, i) = ((start + j as u64) as u32, order[j] as usize);
            let bytes = match rows {
                // A codes-only index stores the row's code.
                Rows::Values(_) if codes_only => {
                    let q = quant_now.as_ref().expect("learned above");
                    let form = self.search_form(&data[i * d..(i + 1) * d], d);
                    bufs.bytes.resize(d, 0);
                    clipped.fetch_add(q.encode(&form, &mut bufs.bytes) as u64, Relaxed);
                    &bufs.bytes[..]
                }
                Rows::Values(_) => self.encode(&data[i * d..(i + 1) * d], &mut bufs.bytes),
                Rows::Stored(b) => &b[i * vb..(i + 1) * vb],
            };
            st.write_vector(slot, bytes);
            if let (Some(q), false) = (&snap.quant, codes_only) {
                let c =
                    encode_stored(q, bytes, self.precision(), &mut bufs.values, &mut bufs.codes);
                clipped.fetch_add(c as u64, Relaxed);
                st.write_code(slot, &bufs.codes);
            }
            let vcrc = format::vector_crc(bytes);
            let h = st.header(slot);
            h[0].store(new_ids[i], Relaxed);
            h[1].store(uppers[j], Relaxed);
            h[2].store(0, Relaxed);
            h[3].store(
                vcrc as u64 | (format::header_crc(new_ids[i], uppers[j], vcrc) as u64) << 32,
                Relaxed,
            );
            // The head's locality bit first: write_list keeps it (a reused slot may hold an old one).
            st.l0(slot)[0].store(if by_locality { format::L0_LOCALITY } else { 0 }, Relaxed);
            lists::write_list(st.l0(slot), slot, 0, &[], levels[j]);
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
        // 3b. A quantized index without a quantizer learns one once it holds enough rows, and
        // encodes every vector so far; searches walk the codes from the publish on.
        if self.geo.code_stride > 0 && snap.quant.is_none() && start + n as u64 >= TRAIN_MIN {
            match with_threads(threads, || self.learn_codes(st, None, start + n as u64, ctl))
                .and_then(|r| r)
            {
                Ok(t) => trained = Some(t),
                Err(e) => {
                    give_back();
                    return Err(e);
                }
            }
        }
        // 4. Link, on `threads` threads, with a savepoint for the nodes that existed before; a
        // deferred batch is stored whole (vectors, codes, headers, empty lists) as the tail.
        if !defer {
            let quant = trained.as_ref().map(|t| &*t.1).or(snap.quant.as_deref());
            if let Err(e) = self.link_slots(w, st, start, &pos, &levels, quant, threads, ctl) {
                give_back();
                return Err(e);
            }
        }
        // The batch's lists to the file, before anything can read them there.
        shadow.keep();
        // 5. Publish.
        let quant = match trained {
            Some((offset, q)) => {
                w.quantizer = offset;
                Some(q)
            }
            None => snap.quant.clone(),
        };
        w.slots += n as u64;
        if !defer {
            w.linked = w.slots;
        }
        w.live += n as u64;
        let max_new = *new_ids.iter().max().unwrap();
        w.next_id = w.next_id.max(max_new.saturating_add(1));
        let (entry, max_level) = *self.entry.lock();
        self.publish(Snap {
            slots: w.slots,
            linked: w.linked,
            live: w.live,
            entry,
            max_level,
            user_version: w.user_version,
            quant,
            ..Snap::clone_of(&snap)
        });
        Ok(new_ids)
    }

    /// Link the rows of slots `start..start + pos.len()` (`pos`: each row's slot offset,
    /// `levels` by slot offset), on `threads` threads, with a savepoint for the nodes linked
    /// before them: on an error or a cancel those nodes' lists are put back (the new rows'
    /// own lists are the caller's to undo), and the entry point is the caller's too.
    #[allow(clippy::too_many_arguments)]
    fn link_slots(
        &self,
        w: &mut Writer,
        st: &Storage,
        start: u64,
        pos: &[u32],
        levels: &[usize],
        quant: Option<&Quantizer>,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        let n = pos.len();
        let entry_before = *self.entry.lock();
        *self.savepoint.lock() = Some(Savepoint { start: start as u32, saved: HashMap::new() });
        let (cslots, cseq) = (w.committed.slots, w.committed.seq);
        // Then give nodes the pruning left without a way in one. The whole graph is walked
        // (`Linker::repair`, O(slots)) once the rows linked since the last walk reach an eighth
        // of the index, or 1,000 and a sixty-fourth of it: a large batch at once, small ones
        // together (100 batches of 100 rows into 10,000 vectors at max_connections=8 left 42
        // nodes unreachable when only large batches counted; the nodes their reverse links
        // pushed out of full lists, mostly). Every other batch looks at the nodes its links
        // took out of lists, and at its own (`Linker::repair_around`): at 10,000,000 vectors
        // a walk took 3 s, every 1,000 single adds.
        let total = start + n as u64;
        let due = w.unrepaired + n as u64;
        let around = graph::insert::repair_around();
        let every = if around { (total / 64).max(1000) } else { 1000 };
        let repair = due * 8 >= total || due >= every;
        let dropped = Mutex::new(Vec::new());
        let linker = Linker {
            st,
            metric: self.metric(),
            ef_construction: self.opts.ef_construction,
            entry: &self.entry,
            locks: &self.locks,
            before_modify: |nodes: &[u32]| self.before_modify(st, cslots, cseq, nodes),
            quant,
            dropped: (!repair && around).then_some(&dropped),
        };
        let result = with_threads(threads, || linker.link(start, pos, levels, ctl)).and_then(|r| r);
        let result = result.and_then(|on_copy| {
            if repair {
                linker.repair(total as u32)?;
                // Its reads mapped some vectors back (and the kernel's fault-around the pages
                // beside them): let go of them again, as the copy did.
                if on_copy {
                    st.release_vectors(0, total);
                }
            } else if linker.dropped.is_some() {
                let mut nodes = std::mem::take(&mut *dropped.lock());
                nodes.extend(start as u32..total as u32);
                let replaced = entry_before.0;
                if replaced != EMPTY && self.entry.lock().0 != replaced {
                    nodes.push(replaced);
                }
                linker.repair_around(total as u32, nodes)?;
            }
            Ok(())
        });
        let sp = self.savepoint.lock().take().unwrap();
        if let Err(e) = result {
            for (slot, words) in &sp.saved {
                lists::restore_lists(st, *slot, words);
            }
            return Err(e);
        }
        w.unrepaired = if repair { 0 } else { due };
        Ok(())
    }

    /// Link the tail (the rows stored past `w.linked`, see the deferred-linking record) as a
    /// batch, and publish the graph with it. On an error or a cancel the tail stays the tail:
    /// its rows' own lists empty again, the nodes they reached put back, the entry as it was.
    pub(super) fn link_tail(
        &self,
        w: &mut Writer,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        let (start, end) = (w.linked, w.slots);
        if start >= end {
            return Ok(());
        }
        let snap = self.view.read().clone();
        let st = &*snap.st;
        let tail: Vec<u32> = (start as u32..end as u32).collect();
        let levels: Vec<usize> = tail.iter().map(|&s| lists::level_of(st, s)).collect();
        let pos: Vec<u32> = (0..tail.len() as u32).collect();
        // The committed rows of the tail change their (empty) lists: saved for the undo log
        // and the next small commit, as any committed node's.
        self.before_modify(st, w.committed.slots, w.committed.seq, &tail)?;
        let entry_before = *self.entry.lock();
        if let Err(e) =
            self.link_slots(w, st, start, &pos, &levels, snap.quant.as_deref(), threads, ctl)
        {
            for (&s, &level) in tail.iter().zip(&levels) {
                for layer in 0..=level {
                    if let Some(list) = lists::list_of(st, s, layer) {
                        lists::write_list(list, s, layer, &[], level);
                    }
                }
            }
            *self.entry.lock() = entry_before;
            return Err(e);
        }
        w.linked = end;
        let (entry, max_level) = *self.entry.lock();
        self.publish(Snap { linked: end, entry, max_level, ..Snap::clone_of(&snap) });
        Ok(())
    }

    /// Learn a quantizer (from `sample`, n x dims values in search form, or else from up to
    /// `TRAIN_SAMPLE` (4-bit codes: `QUANTILE_ROWS`) of the stored vectors of slots `0..slots`,
    /// evenly spread), store it, and
    /// write the codes of every slot below `slots`. Returns its region's offset and itself; in
    /// effect only once published (nothing walks codes before). On threads of the caller's pool.
    pub(super) fn learn_codes(
        &self,
        st: &Storage,
        sample: Option<&[f32]>,
        slots: u64,
        ctl: &Control,
    ) -> Result<(u64, Arc<Quantizer>)> {
        let d = self.dims();
        // 8-bit codes cover each dimension's whole range; 4-bit ones give up its rarest
        // values for a finer step (`QUANTILE_4BIT`), learned from at most `QUANTILE_ROWS` rows
        // (so a half-precision index decodes no more than that). A codes-only index's are 8-bit.
        let bits = self.geo.code_bits;
        let (quantile, most) = if bits == 4 {
            (quantizer::QUANTILE_4BIT, quantizer::QUANTILE_ROWS as u64)
        } else {
            (1.0, TRAIN_SAMPLE)
        };
        let take = slots.min(most);
        let spread = move |i: u64| (i * slots / take) as u32;
        let q = match sample {
            // A user's sample as it is: `train_bits` takes quantiles from an even part of it.
            Some(s) => Quantizer::train_bits(d, s.chunks_exact(d), quantile, bits)?,
            // Full precision: the stored rows as they are, no copy.
            None if self.precision() == Precision::Full => Quantizer::train_bits(
                d,
                (0..take).map(|i| st.vector_f32(spread(i))),
                quantile,
                bits,
            )?,
            None => {
                let rows: Vec<f32> = (0..take)
                    .into_par_iter()
                    .flat_map_iter(|i| {
                        let mut v = vec![0f32; d];
                        format::decode_vector(st.vector_bytes(spread(i)), self.precision(), &mut v);
                        v
                    })
                    .collect();
                Quantizer::train_bits(d, rows.chunks_exact(d), quantile, bits)?
            }
        };
        let offset = st.write_quantizer(&q)?;
        let q = st.quantizer(offset)?.expect("stored just now");
        if self.geo.code_stride == 0 {
            // A codes-only index: its rows are encoded as they are added.
            return Ok((offset, q));
        }
        let clipped = AtomicU64::new(0);
        (0..slots as u32).into_par_iter().with_min_len(256).for_each_init(
            RowBufs::default,
            |b, s| {
                if ctl.cancelled() {
                    return;
                }
                let c = encode_stored(
                    &q,
                    st.vector_bytes(s),
                    self.precision(),
                    &mut b.values,
                    &mut b.codes,
                );
                clipped.fetch_add(c as u64, Relaxed);
                st.write_code(s, &b.codes);
            },
        );
        if ctl.cancelled() {
            return Err(Error::interrupted());
        }
        self.clipped.fetch_add(clipped.into_inner(), Relaxed);
        Ok((offset, q))
    }

    /// Learn the quantizer of a quantized index from `sample` (n x dims), instead of from the
    /// first 1,000 rows added; the vectors already added are encoded with it. Searches walk
    /// the codes from now on; the next flush makes it durable.
    pub fn train(
        &self,
        sample: &[f32],
        n: usize,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        self.writable()?;
        let mut w = self.writer.lock();
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        self.train_locked(&mut w, sample, n, threads, ctl)
    }

    pub(super) fn train_locked(
        &self,
        w: &mut Writer,
        sample: &[f32],
        n: usize,
        threads: Option<usize>,
        ctl: &Control,
    ) -> Result<()> {
        if !self.geo.has_codes() {
            return Err(Error::invalid(
                "this index keeps no codes to train a quantizer for",
                "create it with IndexOptions(quantization=\"int8\") or quantization=\"int4\"",
            ));
        }
        let snap = self.view.read().clone();
        if snap.quant.is_some() {
            return Err(Error::invalid(
                "the quantizer of this index is already trained",
                "compact() learns it again from the live vectors",
            ));
        }
        let d = self.dims();
        if n == 0 || sample.len() != n * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!(
                    "got {} values for a sample of {n} vectors of {d} dimensions",
                    sample.len()
                ),
                format!("pass a non-empty array of shape (n, {d})"),
            ));
        }
        for (r, row) in sample.chunks_exact(d).enumerate() {
            self.check_vector(row, &format!("sample row {r}"))?;
        }
        let sample = self.search_form(sample, d);
        let (offset, q) =
            with_threads(threads, || self.learn_codes(&snap.st, Some(&sample), w.slots, ctl))??;
        w.quantizer = offset;
        self.publish(Snap { quant: Some(q), ..Snap::clone_of(&snap) });
        Ok(())
    }

    /// Put `q` in effect as it is (a codes-only index compacted: its codes are copied, so the
    /// quantizer they were made with goes with them).
    pub(super) fn install_quantizer_locked(&self, w: &mut Writer, q: &Quantizer) -> Result<()> {
        let snap = self.view.read().clone();
        let offset = snap.st.write_quantizer(q)?;
        let q = snap.st.quantizer(offset)?.expect("stored just now");
        w.quantizer = offset;
        self.publish(Snap { quant: Some(q), ..Snap::clone_of(&snap) });
        Ok(())
    }

    pub(super) fn assign_ids(
        &self,
        w: &Writer,
        snap: &Snap,
        n: usize,
        ids: Option<&[u64]>,
    ) -> Result<Vec<u64>> {
        match ids {
            None => {
                let first = w.next_id;
                if first.checked_add(n as u64 - 1).is_none_or(|last| last == RESERVED_ID) {
                    return Err(Error::new(
                        ErrorKind::IndexFull,
                        "no default ids are left (the largest id in use is near 2**64-1)",
                        "pass explicit ids",
                    ));
                }
                Ok((first..first + n as u64).collect())
            }
            Some(ids) => {
                if ids.len() != n {
                    return Err(Error::invalid(
                        format!("got {} ids for {n} vectors", ids.len()),
                        "pass one id per vector",
                    ));
                }
                if let Some(i) = ids.iter().position(|&x| x == RESERVED_ID) {
                    return Err(Error::invalid(
                        format!("id {} (position {i}) is reserved", RESERVED_ID),
                        "use ids from 0 to 2**64-2",
                    ));
                }
                let mut seen = HashSet::with_capacity(n);
                for (i, id) in ids.iter().enumerate() {
                    if !seen.insert(*id) {
                        return Err(Error::new(
                            ErrorKind::IdInUse,
                            format!("id {id} appears twice in the batch (again at position {i})"),
                            "pass distinct ids",
                        ));
                    }
                }
                let taken = self.with_ids(snap, |m| {
                    ids.iter()
                        .find(|id| {
                            m.get(id).is_some_and(|&s| {
                                (s as u64) < snap.slots && snap.live_id(s) == Some(**id)
                            })
                        })
                        .copied()
                });
                if let Some(id) = taken {
                    return Err(Error::new(
                        ErrorKind::IdInUse,
                        format!("id {id} is already in the index"),
                        "pass an id not in use, or id=None for the next free one",
                    ));
                }
                Ok(ids.to_vec())
            }
        }
    }

    /// Called before existing nodes' lists change (a single node under its stripe lock): save
    /// them for the undo log (committed nodes, one write for all) and for the batch's
    /// savepoint. A node not yet saved has not changed since: whoever changes it saves it
    /// first, under the same locks taken here.
    pub(super) fn before_modify(
        &self,
        st: &Storage,
        committed_slots: u64,
        committed_seq: u64,
        nodes: &[u32],
    ) -> Result<()> {
        if nodes.iter().any(|&n| (n as u64) < committed_slots) {
            let mut u = self.undo.lock();
            let mut records: Vec<(u32, Vec<u32>)> = Vec::new();
            for &n in nodes {
                if (n as u64) < committed_slots
                    && !u.saved.contains(&n)
                    && !records.iter().any(|r| r.0 == n)
                {
                    records.push((n, lists::snapshot_lists(st, n)));
                }
            }
            if !records.is_empty() {
                u.log.record_many(committed_seq, &records)?;
                u.saved.extend(records.iter().map(|r| r.0));
            }
        }
        let mut sp = self.savepoint.lock();
        if let Some(sp) = sp.as_mut() {
            for &n in nodes {
                if n < sp.start {
                    sp.saved.entry(n).or_insert_with(|| lists::snapshot_lists(st, n));
                }
            }
        }
        Ok(())
    }

    /// Delete `id`: hidden from searches at once (in this handle), durable at the next flush.
    /// Returns false if no live vector has that id. The node still routes searches until a
    /// compaction removes it.
    pub fn delete(&self, id: u64) -> Result<bool> {
        self.writable()?;
        let mut w = self.writer.lock();
        if let Some(poison) = &w.poisoned {
            return Err(self.poisoned_error(poison));
        }
        let snap = self.view.read().clone();
        let Some(slot) = self.slot_of(&snap, id) else { return Ok(false) };
        let word = &snap.st.header(slot)[2];
        if (slot as u64) < w.committed.slots {
            let old = word.load(Acquire);
            let mut u = self.undo.lock();
            u.log.record_marker(w.committed.seq, slot, old)?;
            u.marked.insert(slot);
        }
        word.store(format::delete_marker(w.committed.seq + 1, slot), Release);
        w.live -= 1;
        w.deletes += 1;
        self.ids.lock().map.remove(&id);
        self.publish(Snap { live: w.live, ..Snap::clone_of(&snap) });
        Ok(true)
    }

    /// Slots deleted and not yet compacted away (in this handle's view).
    pub fn deleted_count(&self) -> Result<u64> {
        self.check_open()?;
        let s = self.snap();
        Ok(s.slots - s.live)
    }
}
