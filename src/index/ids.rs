//! Ids: the id -> slot map (built on first use, so opening stays O(1)), membership, stored
//! vectors by id, and ids in insertion order.

use super::*;
use crate::format::RESERVED_ID;
use crate::graph::Graph;

/// id -> slot: a vector indexed by id for ids below its length, a hash map for the rest. Ids
/// are mostly dense (the default ids count up from 0), and a vector's lookup is one load where
/// a hash map's is a hash and a probe, which a batch delete of thousands of ids pays for each.
#[derive(Default)]
pub(super) struct SlotsById {
    /// Slot of each id below its length, `NONE` for ids not in the map.
    dense: Vec<u32>,
    sparse: FastMap<u64, u32>,
    len: usize,
}

const NONE: u32 = u32::MAX;

impl SlotsById {
    #[inline]
    pub(super) fn get(&self, id: u64) -> Option<u32> {
        if id < self.dense.len() as u64 {
            Some(self.dense[id as usize]).filter(|&s| s != NONE)
        } else {
            self.sparse.get(&id).copied()
        }
    }

    pub(super) fn insert(&mut self, id: u64, slot: u32) {
        debug_assert_ne!(slot, NONE, "slots are below u32::MAX");
        // The vector covers ids up to twice the map's size and 64Ki more (its 4 bytes per id
        // then stay within a hash map's 16 and more per entry); it doubles as it grows.
        let cover = 2 * (self.len as u64 + 1) + (1 << 16);
        // Grown only to twice its length or more (each growth moves ids out of the hash
        // map, a pass over it): ids dense but inserted out of order wait there till then.
        let grown = || (id as usize + 1).max(2 * self.dense.len()).min(cover as usize);
        if id >= self.dense.len() as u64 && id < cover && grown() >= 2 * self.dense.len() {
            let grown = grown();
            self.dense.resize(grown, NONE);
            // Ids the vector now covers leave the hash map.
            let moved: Vec<(u64, u32)> = (self.sparse.iter())
                .filter(|e| *e.0 < grown as u64)
                .map(|(&i, &s)| (i, s))
                .collect();
            for (i, s) in moved {
                self.sparse.remove(&i);
                self.dense[i as usize] = s;
            }
        }
        let before = if id < self.dense.len() as u64 {
            std::mem::replace(&mut self.dense[id as usize], slot)
        } else {
            self.sparse.insert(id, slot).unwrap_or(NONE)
        };
        self.len += (before == NONE) as usize;
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<u32> {
        let before = if id < self.dense.len() as u64 {
            Some(std::mem::replace(&mut self.dense[id as usize], NONE)).filter(|&s| s != NONE)
        } else {
            self.sparse.remove(&id)
        };
        self.len -= before.is_some() as usize;
        before
    }
}

impl Index {
    /// Run `f` on the id map, extended to cover `snap`'s slots.
    pub(super) fn with_ids<R>(&self, snap: &Snap, f: impl FnOnce(&SlotsById) -> R) -> R {
        self.with_ids_mut(snap, |m| f(m))
    }

    /// `with_ids`, for the writer's changes to the map (a delete takes its ids out).
    pub(super) fn with_ids_mut<R>(&self, snap: &Snap, f: impl FnOnce(&mut SlotsById) -> R) -> R {
        let mut m = self.ids.lock();
        let key = Arc::as_ptr(&snap.st) as usize;
        // A reader's snapshots of a file whose slots were reused each need their own map.
        let seq = if self.read_only && snap.reused { snap.seq } else { 0 };
        if m.storage != key || m.seq != seq {
            *m = IdMap { storage: key, seq, ..Default::default() };
        }
        // Never past the published snapshot: a snapshot from before a rollback covers slots
        // that later rows take under other ids, and the map would never read them again.
        let upto = snap.slots.min(self.view.read().slots);
        while m.upto < upto {
            let s = m.upto as u32;
            if let Some(id) = snap.live_id(s) {
                m.map.insert(id, s);
            }
            m.upto += 1;
        }
        f(&mut m.map)
    }

    /// Forget the id map and the filters made from it: slots may now hold other ids.
    pub(super) fn forget_ids(&self) {
        *self.ids.lock() = IdMap::default();
        self.filters.lock().clear();
    }

    pub(super) fn slot_of(&self, snap: &Snap, id: u64) -> Option<u32> {
        self.with_ids(snap, |m| mapped_slot(snap, m, id))
            .filter(|&s| (s as u64) < snap.slots && snap.live_id(s) == Some(id))
    }

    pub fn contains(&self, id: u64) -> Result<bool> {
        self.contains_in(&self.snap(), id)
    }

    pub fn contains_in(&self, snap: &Snap, id: u64) -> Result<bool> {
        self.check_open()?;
        Ok(self.slot_of(snap, id).is_some())
    }

    /// The stored vector of `id` (normalised for cosine, rounded for half), checked against
    /// its checksum.
    pub fn get(&self, id: u64) -> Result<Option<Vec<f32>>> {
        self.get_in(&self.snap(), id)
    }

    pub fn get_in(&self, snap: &Snap, id: u64) -> Result<Option<Vec<f32>>> {
        self.check_open()?;
        let Some(slot) = self.slot_of(snap, id) else { return Ok(None) };
        let bytes = snap.st.vector_bytes(slot);
        let crc = snap.st.header(slot)[3].load(Relaxed) as u32;
        if format::vector_crc(bytes) != crc {
            return Err(Error::corrupt(format!(
                "{}: the stored vector of id {id} (slot {slot}) fails its checksum",
                self.path.display()
            )));
        }
        if self.precision() == Precision::CodesOnly {
            // What the code stands for (a codes-only index keeps nothing else).
            let q = snap.quant.as_ref().expect("a codes-only index with rows has a quantizer");
            let mut v = vec![0f32; self.dims()];
            q.decode(bytes, &mut v);
            return Ok(Some(v));
        }
        let g = Graph::new(&snap.st, self.metric(), snap.slots as u32);
        let mut buf = Vec::new();
        let v = g.vector_f32(slot, &mut buf).to_vec();
        snap.st.intact()?;
        Ok(Some(v))
    }

    /// Live ids in insertion (slot) order.
    pub fn ids(&self) -> Result<Vec<u64>> {
        self.ids_in(&self.snap())
    }

    pub fn ids_in(&self, snap: &Snap) -> Result<Vec<u64>> {
        self.check_open()?;
        Ok(Self::live_in_order(snap).into_iter().map(|(_, id)| id).collect())
    }

    /// The live (slot, id) pairs in insertion order: slot order, except that a run of slots
    /// laid out by locality (`format::L0_LOCALITY`) came in the order of its ids, and rows
    /// marked with a commit (a file whose slots were reused) came in the order of commits.
    pub(super) fn live_in_order(snap: &Snap) -> Vec<(u32, u64)> {
        // Rows of a file whose slots were reused came by commit (rows from before the first
        // reuse have none, and came first), then as below (`reuse.rs`).
        let born = |s: u32| {
            let marker = crate::storage::acquire_u64(&snap.st.header(s)[2]);
            match format::read_marker(marker, s) {
                format::Marker::Born(b) => b,
                _ => 0,
            }
        };
        let mut live: Vec<(u64, u32, u64)> = (0..snap.slots as u32)
            .filter_map(|s| snap.live_id(s).map(|id| (born(s), s, id)))
            .collect();
        if live.iter().any(|r| r.0 != 0) {
            live.sort_by_key(|r| (r.0, r.1));
        }
        let mut out: Vec<(u32, u64)> = Vec::with_capacity(live.len());
        let mut run: Option<usize> = None;
        let mut group = 0;
        for (b, s, id) in live {
            let in_run = snap.st.l0(s)[0].load(Relaxed) & format::L0_LOCALITY != 0;
            if let Some(r) = run.filter(|_| !in_run || b != group) {
                out[r..].sort_unstable_by_key(|p| p.1);
                run = None;
            }
            if in_run {
                run.get_or_insert(out.len());
            }
            group = b;
            out.push((s, id));
        }
        if let Some(r) = run {
            out[r..].sort_unstable_by_key(|p| p.1);
        }
        out
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
                check_ids(ids, n)?;
                let taken = self.with_ids(snap, |m| {
                    ids.iter()
                        .find(|id| {
                            m.get(**id).is_some_and(|s| {
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
}

/// A caller's ids for `n` rows: one per row, none reserved, none twice.
pub(super) fn check_ids(ids: &[u64], n: usize) -> Result<()> {
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
    Ok(())
}

/// Where `snap` has `id`, as the map `m` says, unchecked (the caller checks the slot holds it,
/// or passes it to a search that does). In a kept snapshot, the map's slot only if it holds
/// the id there, else its row deleted since (the map has let it go, or has the id's new row).
pub(super) fn mapped_slot(snap: &Snap, m: &SlotsById, id: u64) -> Option<u32> {
    match snap.deleted_after() {
        None => m.get(id),
        Some(k) => (m.get(id))
            .filter(|&s| (s as u64) < snap.slots && snap.live_id(s) == Some(id))
            .or_else(|| k.slot_of(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::SlotsById;
    use std::collections::HashMap;

    /// Oracle: std's HashMap, through inserts, replacements and removes of ids dense (counting
    /// up from 0, as default ids do), far above the map's size, and moving between the two.
    #[test]
    fn slots_by_id_agrees_with_a_hash_map() {
        let (mut m, mut oracle) = (SlotsById::default(), HashMap::new());
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..200_000u64 {
            let r = next();
            let id = match r % 4 {
                0 => step / 2,             // dense, rising
                1 => r >> 40,              // up to 2^24: dense once the map has grown
                2 => u64::MAX - (r >> 50), // never dense
                _ => *oracle.keys().next().unwrap_or(&0),
            };
            if next() % 3 == 0 {
                assert_eq!(m.remove(id), oracle.remove(&id), "remove {id}");
            } else {
                let slot = (next() % 1_000_000) as u32;
                m.insert(id, slot);
                oracle.insert(id, slot);
            }
            if step % 997 == 0 {
                for (&id, &s) in &oracle {
                    assert_eq!(m.get(id), Some(s), "get {id}");
                }
                assert_eq!(m.len, oracle.len());
            }
            assert_eq!(m.get(id), oracle.get(&id).copied());
        }
        assert!(!m.dense.is_empty() && !m.sparse.is_empty(), "both parts were used");
    }
}
