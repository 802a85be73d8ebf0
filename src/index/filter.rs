//! Filters: the ids a search may or may not return, turned into sets of slots, and the last
//! few of those kept for the next search that gives the same ids.

use super::plan::{self, Choice, Plan};
use super::Snap;
use crate::format::Metric;
use crate::storage::Storage;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Weak};

/// Which ids a search may return: only `allowed` ones (when given), never `excluded` ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub allowed: Option<Ids>,
    pub excluded: Ids,
}

/// Ids as a caller has them: a list, or a mask indexed by id (`mask[id]`: the id is in).
/// A mask is kept as given, so that a search given the same mask again finds its slots
/// made (`FilterCache`) after comparing its bytes, not after listing its ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ids {
    List(Vec<u64>),
    Mask(Vec<bool>),
}

impl Default for Ids {
    fn default() -> Ids {
        Ids::List(Vec::new())
    }
}

impl Ids {
    /// How many ids (those set, for a mask).
    pub fn len(&self) -> usize {
        match self {
            Ids::List(v) => v.len(),
            Ids::Mask(m) => m.iter().filter(|&&b| b).count(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Ids::List(v) => v.is_empty(),
            Ids::Mask(m) => !m.contains(&true),
        }
    }

    /// The ids, in the order given (ascending for a mask).
    pub fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Ids::List(v) => Box::new(v.iter().copied()),
            Ids::Mask(m) => Box::new(m.iter().enumerate().filter(|e| *e.1).map(|e| e.0 as u64)),
        }
    }

    /// About the memory it holds.
    fn bytes(&self) -> usize {
        match self {
            Ids::List(v) => v.len() * 8,
            Ids::Mask(m) => m.len(),
        }
    }
}

/// Filters of a batch: one for all queries, or one per query.
#[derive(Clone, Copy)]
pub enum BatchFilter<'a> {
    Same(Option<&'a Filter>),
    PerQuery(&'a [Filter]),
}

/// A hash map or set with a fast, seeded hash (ids and slots are plain integers; std's SipHash
/// cost more than the lookups it guards on filtered searches).
pub(super) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

pub(super) type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;

/// A set of slots: a bitmap when it holds more than one slot in 32 (one bit each is then less
/// memory than hashing), else a hash set.
pub(super) enum SlotSet {
    /// The bits and how many are set.
    Bits(Vec<u64>, usize),
    Hash(FastSet<u32>),
}

impl SlotSet {
    pub(super) fn new(slots: impl Iterator<Item = u32>, count: usize, total: u64) -> SlotSet {
        if count as u64 * 32 >= total {
            let mut bits = vec![0u64; (total as usize).div_ceil(64)];
            let mut n = 0;
            for s in slots {
                if let Some(w) = bits.get_mut(s as usize / 64) {
                    n += (*w >> (s % 64) & 1 == 0) as usize;
                    *w |= 1 << (s % 64);
                }
            }
            SlotSet::Bits(bits, n)
        } else {
            SlotSet::Hash(slots.collect())
        }
    }

    #[inline]
    pub(super) fn contains(&self, s: u32) -> bool {
        match self {
            SlotSet::Bits(b, _) => b.get(s as usize / 64).is_some_and(|w| w >> (s % 64) & 1 != 0),
            SlotSet::Hash(h) => h.contains(&s),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            SlotSet::Bits(_, n) => *n,
            SlotSet::Hash(h) => h.len(),
        }
    }

    /// About the memory it holds.
    fn bytes(&self) -> usize {
        match self {
            SlotSet::Bits(b, _) => b.len() * 8,
            SlotSet::Hash(h) => h.capacity() * 8,
        }
    }

    /// The slots, ascending for a bitmap.
    pub(super) fn iter(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match self {
            SlotSet::Bits(b, _) => Box::new(b.iter().enumerate().flat_map(|(i, &w)| {
                (0..64u32).filter(move |j| w >> j & 1 != 0).map(move |j| i as u32 * 64 + j)
            })),
            SlotSet::Hash(h) => Box::new(h.iter().copied()),
        }
    }
}

/// A filter in slots. Ids not in the index are simply never matched.
pub(super) struct SlotFilter {
    pub(super) allowed: Option<SlotSet>,
    pub(super) excluded: SlotSet,
    /// Allowed slots spread evenly over the allowed set, where a walk also starts
    /// (`Graph::seeded`): empty without an allowed set.
    pub(super) seeds: Vec<u32>,
}

/// How many allowed slots a filtered walk starts from besides the descent's end.
const SEEDS: usize = 32;

impl SlotFilter {
    pub(super) fn new(allowed: Option<SlotSet>, excluded: SlotSet) -> SlotFilter {
        let seeds = match &allowed {
            Some(a) if a.len() > 0 => {
                let step = a.len().div_ceil(SEEDS).max(1);
                a.iter().step_by(step).filter(|&s| !excluded.contains(s)).collect()
            }
            _ => Vec::new(),
        };
        SlotFilter { allowed, excluded, seeds }
    }
}

impl SlotFilter {
    /// About the memory it holds.
    fn bytes(&self) -> usize {
        self.allowed.as_ref().map_or(0, SlotSet::bytes)
            + self.excluded.bytes()
            + self.seeds.len() * 4
    }

    /// Whether the filter lets every one of `slots` through (a mask of all ids): a search then
    /// drops it, and walks as unfiltered.
    pub(super) fn lets_all(&self, slots: u64) -> bool {
        self.excluded.len() == 0 && self.allowed.as_ref().is_none_or(|a| a.len() as u64 >= slots)
    }

    /// About how many of `live` rows the filter lets through (exact without `excluded`).
    pub(super) fn allowed_count(&self, live: u64) -> u64 {
        let allowed = self.allowed.as_ref().map_or(live, |a| a.len() as u64);
        allowed.saturating_sub(self.excluded.len() as u64)
    }

    #[inline]
    pub(super) fn allows(&self, s: u32) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(s)) && !self.excluded.contains(s)
    }
}

/// The plan of a search filtered by `f` (`plan`): two hops are not planned under inner
/// product (see `plan::choose`).
pub(super) fn plan_of(snap: &Snap, k: usize, ef: usize, f: &SlotFilter, metric: Metric) -> Choice {
    let two_hops = metric != Metric::InnerProduct;
    plan::choose(f.allowed_count(snap.live), snap.live, ef.max(k), snap.st.geo.m, two_hops)
}

/// Whether a search scans exactly instead of walking the graph: its plan says so, or a beam
/// that would cover everything anyway.
pub(super) fn scans(
    snap: &Snap,
    k: usize,
    ef: usize,
    filter: Option<&SlotFilter>,
    metric: Metric,
) -> bool {
    ef as u64 >= snap.live
        || filter.is_some_and(|f| plan_of(snap, k, ef, f, metric).plan == Plan::Scan)
}

/// The slot filters of the last few filters searched with: a filter given again (the same
/// mask for every search of a loop) is not turned into slots again, which costs more than the
/// search it filters (`docs/design/filtered-search.md`). An entry is found by comparing the ids themselves, and
/// only for the storage (held weakly: a storage freed and another made at its address is
/// never taken for it) and the slots it was made for; whatever changes the ids of slots below
/// that (a delete, a rollback, a compaction) clears it.
#[derive(Default)]
pub(super) struct FilterCache {
    entries: VecDeque<Cached>,
    /// Raised by each `clear`: a filter made across a clear (from ids as they were before
    /// it) is not kept (`put`).
    generation: u64,
}

struct Cached {
    storage: Weak<Storage>,
    /// The slot count and commit it was made for (a commit that reuses slots keeps the count).
    slots: (u64, u64),
    filter: Filter,
    made: Arc<SlotFilter>,
    bytes: usize,
}

/// At most this many filters are kept...
const CACHED_FILTERS: usize = 8;
/// ... and this many bytes of ids and slot sets over all of them.
const CACHED_BYTES: usize = 64 << 20;

impl FilterCache {
    /// Forget every filter: the ids of some slots changed (a delete, a rollback, a new file).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.generation += 1;
    }

    /// What a filter made from now on passes to `put`.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    pub(super) fn get(
        &mut self,
        st: &Arc<Storage>,
        slots: (u64, u64),
        f: &Filter,
    ) -> Option<Arc<SlotFilter>> {
        let i = self.entries.iter().position(|c| {
            c.slots == slots
                && std::ptr::eq(c.storage.as_ptr(), Arc::as_ptr(st))
                && c.storage.strong_count() > 0
                && c.filter == *f
        })?;
        let c = self.entries.remove(i)?;
        let made = c.made.clone();
        self.entries.push_front(c);
        Some(made)
    }

    /// Keep `made`, the slots of `f` made for `st` up to `slots`, unless the cache was cleared
    /// since `generation` was read.
    pub(super) fn put(
        &mut self,
        st: &Arc<Storage>,
        slots: (u64, u64),
        f: &Filter,
        made: Arc<SlotFilter>,
        generation: u64,
    ) {
        if generation != self.generation {
            return;
        }
        let bytes = f.allowed.as_ref().map_or(0, Ids::bytes) + f.excluded.bytes() + made.bytes();
        if bytes > CACHED_BYTES / 2 {
            return;
        }
        self.entries.push_front(Cached {
            storage: Arc::downgrade(st),
            slots,
            filter: f.clone(),
            made,
            bytes,
        });
        while self.entries.len() > CACHED_FILTERS
            || self.entries.iter().map(|c| c.bytes).sum::<usize>() > CACHED_BYTES
        {
            self.entries.pop_back();
        }
    }
}
