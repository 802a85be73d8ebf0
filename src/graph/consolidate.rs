//! Consolidating deletes in the lists (FreshDiskANN's idea, on HNSW's lists): a live node
//! whose list holds deleted nodes weighs, in their place, their live out-neighbors, and keeps
//! what the neighbor heuristic chooses, so that searches stop walking deleted nodes (the
//! consolidation record: `docs/design/consolidation.md`).

use super::*;
use crate::storage::lists;

/// Candidates weighed by the heuristic per entry of a list: the nearest of a node's live
/// neighbors and of its deleted neighbors' live neighbors. The heuristic's cost grows with
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
        let mut cands: Vec<u32> = Vec::with_capacity(cur.len() * 4);
        for &e in &cur {
            if !gone(e) {
                cands.push(e);
                continue;
            }
            let Some(theirs) = lists::list_of(self.st, e, layer) else { continue };
            cands.extend(
                lists::entries(theirs)
                    .iter()
                    .map(|x| x.load(Relaxed))
                    .filter(|&x| x < self.limit && x != p && !gone(x)),
            );
        }
        cands.sort_unstable();
        cands.dedup();
        let mut buf = std::mem::take(&mut sc.vec_a);
        let mut prep = std::mem::take(&mut sc.prep_b);
        let (pv, bias) = self.prepared(self.vector_f32(p, &mut buf), &mut prep);
        let mut weighed = self.dists_to(pv, &cands);
        (sc.vec_a, sc.prep_b) = (buf, prep);
        weighed.iter_mut().for_each(|c| c.0 += bias);
        weighed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        weighed.truncate(CANDIDATES_PER_ENTRY * cap);
        Some(self.select(&weighed, cap, sc).iter().map(|c| c.1).collect())
    }
}
