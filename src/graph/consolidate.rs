//! Consolidating deletes in the lists (FreshDiskANN's idea, on HNSW's lists): a live node
//! whose list holds deleted nodes keeps its live entries and, in the deleted ones' place,
//! takes as many of their live out-neighbors as the neighbor heuristic lets in beside them,
//! so that searches stop walking deleted nodes (the consolidation record:
//! `docs/design/consolidation.md`).

use super::*;
use crate::storage::lists;

/// Candidates weighed by the heuristic per entry of a list: the nearest of its deleted
/// neighbors' live neighbors. The heuristic's cost grows with
/// candidates times entries kept, and the farthest candidates are seldom kept.
const CANDIDATES_PER_ENTRY: usize = 2;

impl<'a> Graph<'a> {
    /// The list `p` should have on `layer` with the nodes `gone` says are deleted taken out,
    /// or None when it holds none of them. `cap`: the entries the layer's lists hold. Reads
    /// `p`'s own list and deleted nodes' lists only, so lists of other live nodes may change
    /// meanwhile.
    pub fn relinked(
        &self,
        p: u32,
        layer: usize,
        gone: &(dyn Fn(u32) -> bool + Sync),
        cap: usize,
        sc: &mut Scratch,
    ) -> Option<Vec<u32>> {
        let list = lists::list_of(self.st, p, layer)?;
        let cur: Vec<u32> = lists::entries(list)
            .iter()
            .map(|e| e.load(Relaxed))
            .filter(|&e| e < self.limit)
            .collect();
        if !cur.iter().any(|&e| gone(e)) {
            return None;
        }
        // The live entries stay; each deleted one is replaced by at most one of the deleted
        // nodes' live neighbors, those the heuristic keeps beside the entries that stay.
        let live: Vec<u32> = cur.iter().copied().filter(|&e| !gone(e)).collect();
        let lost = cur.len() - live.len();
        let mut cands: Vec<u32> = Vec::with_capacity(lost * cap);
        for &e in cur.iter().filter(|&&e| gone(e)) {
            let Some(theirs) = lists::list_of(self.st, e, layer) else { continue };
            cands.extend(
                lists::entries(theirs)
                    .iter()
                    .map(|x| x.load(Relaxed))
                    .filter(|&x| x < self.limit && x != p && !gone(x) && !live.contains(&x)),
            );
        }
        cands.sort_unstable();
        cands.dedup();
        let mut buf = std::mem::take(&mut sc.vec_a);
        let mut prep = std::mem::take(&mut sc.prep_b);
        let (pv, bias) = self.prepared(self.vector_f32(p, &mut buf), &mut prep);
        let mut stay = self.dists_to(pv, &live);
        let mut weighed = self.dists_to(pv, &cands);
        (sc.vec_a, sc.prep_b) = (buf, prep);
        for c in stay.iter_mut().chain(weighed.iter_mut()) {
            c.0 += bias;
        }
        stay.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        weighed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        weighed.truncate(CANDIDATES_PER_ENTRY * cap);
        if !crate::tuning::get().relink_keep.unwrap_or(true) {
            // The whole list weighed anew (the switch's control).
            stay.extend(weighed);
            stay.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
            stay.truncate(CANDIDATES_PER_ENTRY * cap);
            return Some(self.select(&stay, cap, sc).iter().map(|c| c.1).collect());
        }
        let fixed = stay.len();
        stay.extend(weighed.iter().copied());
        let keep = (fixed + lost).min(cap);
        let mut out: Vec<u32> =
            self.select_after(&stay, fixed, keep, sc).iter().map(|c| c.1).collect();
        if crate::tuning::get().relink_fill.unwrap_or(true) {
            // As many entries as before and at least half the capacity (M at layer 0), the
            // nearest candidates the heuristic passed over next (HNSW's "keep pruned
            // connections"): on clustered data the heuristic lets few in beside the entries
            // that stay, and lists thinned round after round; lists left short made a churned
            // index compute fewer distances per ef than a fresh build, for less recall (the
            // consolidation record: filled to half, it finds more for fewer).
            let fill = keep.max(cap / 2);
            for &(_, c) in &weighed {
                if out.len() >= fill {
                    break;
                }
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        Some(out)
    }
}
