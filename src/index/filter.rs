//! Filters: the ids a search may or may not return, turned into sets of slots.

use super::plan::{self, Choice, Plan};
use super::Snap;
use crate::format::Metric;
use std::collections::{HashMap, HashSet};

/// Which ids a search may return: only `allowed` ones (when given), never `excluded` ones.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub allowed: Option<Vec<u64>>,
    pub excluded: Vec<u64>,
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
