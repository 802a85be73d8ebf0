//! Layer 0 of a search whose filter allows few nodes: only allowed nodes are candidates and get
//! distances, and an expanded node's rejected neighbors are passed through to their own
//! neighbors (two hops), the idea of ACORN (Patel et al., SIGMOD 2024) on the graph as built,
//! with no links of its own. A plain filtered walk (`search_layer` with `accept`) computes
//! the distance of every node it meets and keeps the rejected ones as candidates too, so at a
//! small allowed share most of its work is on nodes it can never return.
//!
//! A plain walk that expected a small share allowed and meets far fewer (`rejecting`) goes on
//! in two hops from where it is.
//!
//! Which walk a filtered search takes, and when it gives up for an exact scan, is
//! `crate::index`'s plan (`docs/design/filtered-search.md`); the graph only counts the work.

use super::search::offer;
use super::*;
use crate::storage::lists;
use std::sync::atomic::Ordering::*;

/// A list read for a rejected node costs about a third of a distance (a line or two, and the
/// filter asked of each entry): the budget counts it so.
const LISTS_PER_DISTANCE: u64 = 3;

/// A walk that expects a share of allowed nodes checks what it met in each window of this many
/// nodes per link of layer 0 (a few expansions)...
const CHECK_AFTER_PER_LINK: usize = 4;

/// ... and switches to two hops when fewer than this fraction of the share it expected were
/// allowed: the allowed nodes are elsewhere (a filter correlated with the data), and a walk
/// routing through rejected nodes would widen for ever before it finds them.
const SWITCH_BELOW: f64 = 0.25;

impl<'a> Graph<'a> {
    /// A walk expecting `self.expect_share` of its nodes allowed: counts the allowed among the
    /// nodes just gathered (`sc.buf`), and at the end of each window of nodes met, whether so
    /// few were allowed in it that it should go on in two hops.
    #[inline]
    pub(super) fn rejecting<F: Fn(u32) -> bool>(&self, sc: &mut Scratch, accept: &F) -> bool {
        let [met, allowed] = &mut sc.met;
        *met += sc.buf.len();
        *allowed += sc.buf.iter().filter(|&&nb| accept(nb)).count();
        if *met < CHECK_AFTER_PER_LINK * 2 * self.m {
            return false;
        }
        let few = (*allowed as f64) < self.expect_share * SWITCH_BELOW * *met as f64;
        sc.met = [0, 0];
        few
    }

    /// Two-hop search of layer 0 from `entries`, keeping the `ef` nearest allowed nodes in
    /// `sc.top`. Rejected entries are expanded once (the descent may end on one), never kept.
    /// Each expansion gathers at most `2 * m` allowed nodes: the first hop's, then those of
    /// the rejected neighbors' lists, in list order. A rejected node's list is read at most
    /// once per search (it is marked visited when read). Stops early, with `sc.over_budget`,
    /// once the distances plus the lists read pass `self.budget`.
    pub(super) fn search_two_hop<F: Fn(u32) -> bool>(
        &self,
        q: &[f32],
        entries: impl IntoIterator<Item = (f32, u32)>,
        ef: usize,
        sc: &mut Scratch,
        accept: &F,
    ) {
        let mut bound = Self::begin_layer(entries, ef, self.limit, sc, accept);
        let cap = 2 * self.m;
        let mut hop = std::mem::take(&mut sc.round);
        while let Some(std::cmp::Reverse(c)) = sc.cand.pop() {
            if unkey(c) > bound && sc.top.len() >= ef {
                break;
            }
            if sc.dists + sc.lists_read / LISTS_PER_DISTANCE > self.budget {
                sc.over_budget = true;
                break;
            }
            if let Some(std::cmp::Reverse(next)) = sc.cand.peek() {
                self.prefetch_list(slot_of(*next));
            }
            sc.buf.clear();
            hop.clear();
            for e in lists::entries(self.st.l0(slot_of(c))) {
                let nb = e.load(Relaxed);
                if nb >= self.limit {
                    continue;
                }
                if accept(nb) {
                    if sc.visit(nb) {
                        self.prefetch_vector(nb);
                        sc.buf.push(nb);
                    }
                } else {
                    hop.push(nb);
                }
            }
            // The second hop: ask for every list first, so that their misses overlap.
            hop.retain(|&r| sc.visit(r));
            if sc.buf.len() < cap {
                hop.iter().for_each(|&r| self.prefetch_list(r));
            }
            'hop: for &r in &hop {
                if sc.buf.len() >= cap {
                    break;
                }
                sc.lists_read += 1;
                for e in lists::entries(self.st.l0(r)) {
                    let nb = e.load(Relaxed);
                    if nb < self.limit && accept(nb) && sc.visit(nb) {
                        self.prefetch_vector(nb);
                        sc.buf.push(nb);
                        if sc.buf.len() >= cap {
                            break 'hop;
                        }
                    }
                }
            }
            sc.dists += sc.buf.len() as u64;
            let buf = std::mem::take(&mut sc.buf);
            // Every node gathered is allowed: each is a result as well as a candidate.
            self.each_dist(q, &buf, |nb, d| {
                offer(sc, nb, d, ef, &mut bound, &|_| true);
            });
            sc.buf = buf;
        }
        sc.round = hop;
    }
}
