//! Codes: learning a quantizer, storing it in its region, and encoding the stored vectors
//! with it (`crate::quant` holds the quantizer and its kernels).

use super::write::RowBufs;
use super::*;
use crate::quant::quantizer;
use rayon::prelude::*;

/// A quantized index learns its quantizer once it holds this many rows (see `add_rows`).
pub const TRAIN_MIN: u64 = 1000;

/// Rows a quantizer is learned from at most (evenly spread over the index).
pub(super) const TRAIN_SAMPLE: u64 = 100_000;

/// The codes of a stored vector (`bytes` at `precision`) into `codes`; returns the values
/// clipped.
pub(super) fn encode_stored(
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

/// The quantizer stored in `st`'s region at file offset `offset` (None for 0: not trained),
/// decoded once per region. Err if no region is there or its stored form is damaged.
pub(crate) fn stored_quantizer(st: &Storage, offset: u64) -> Result<Option<Arc<Quantizer>>> {
    // The codes' bits: a codes-only index's are 8 (its geometry keeps the default).
    let (dims, bits) = (st.geo.dims, st.geo.code_bits);
    st.decoded_region(offset, Quantizer::stored_len(dims), |bytes| {
        Quantizer::from_bytes(bytes, dims, bits).map_err(|e| {
            Error::corrupt(format!(
                "{}: the quantizer is damaged ({})",
                st.path.display(),
                e.message
            ))
        })
    })
}

/// Store `q` in a new quantizer region of `st` and return it as stored (decoded from the
/// region, as a reader would) with the region's file offset, which a header then names.
pub(crate) fn store_quantizer(st: &Storage, q: &Quantizer) -> Result<(u64, Arc<Quantizer>)> {
    assert_eq!(q.bits(), st.geo.code_bits, "a quantizer for codes of another width");
    let offset = st.write_quantizer_region(&q.to_bytes())?;
    Ok((offset, stored_quantizer(st, offset)?.expect("stored just now")))
}

impl Index {
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
        let (offset, q) = store_quantizer(st, &q)?;
        if self.geo.code_stride == 0 {
            // A codes-only index: its rows are encoded as they are added.
            return Ok((offset, q));
        }
        let clipped = AtomicU64::new(0);
        // `train`'s progress counts the rows encoded; an add that trains counts its own rows.
        let counting = sample.is_some();
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
                // SAFETY: training, under the writer lock: no snapshot in use walks the codes
                // yet, and each slot is written by one thread of this loop.
                unsafe { st.write_code(s, &b.codes) };
                if counting {
                    ctl.done.fetch_add(1, Relaxed);
                }
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
        let (offset, q) = store_quantizer(&snap.st, q)?;
        w.quantizer = offset;
        self.publish(Snap { quant: Some(q), ..Snap::clone_of(&snap) });
        Ok(())
    }
}
