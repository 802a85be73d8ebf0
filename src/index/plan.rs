//! The plan of a filtered search, chosen per query from what each way would cost: an exact
//! scan of the allowed rows, a walk of the graph that returns only allowed nodes, or a walk in
//! two hops that computes distances to allowed nodes only (`crate::graph`'s `filtered.rs`).
//! A walk carries a budget, the cost of the scan: one that passes it gives up and the query
//! is scanned, so a wrong estimate costs at most about 2.5 times the scan. The model and where its
//! constants come from: `docs/design/filtered-search.md`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The graph, every node routing, only allowed ones returned.
    Walk,
    /// The graph, only allowed nodes as candidates, rejected ones passed through.
    TwoHop,
    /// The allowed rows, every one, exactly.
    Scan,
}

impl Plan {
    pub fn name(self) -> &'static str {
        match self {
            Plan::Walk => "walk",
            Plan::TwoHop => "two_hop",
            Plan::Scan => "scan",
        }
    }

    fn parse(name: &str) -> Option<Plan> {
        [Plan::Walk, Plan::TwoHop, Plan::Scan].into_iter().find(|p| p.name() == name)
    }
}

/// A plan and, for a walk, the work (distances plus lists read) after which it gives up, and
/// the share of allowed nodes a plain walk expects to meet (it goes on in two hops if it meets
/// far fewer; 0: no such check).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    pub plan: Plan,
    pub budget: u64,
    pub expect: f64,
}

/// Costs are in rows of a scan (read in slot order, so the hardware prefetches them; the
/// time of one is in the filtered-search record). A distance in a walk costs DISTANCE_ROWS of
/// them: a random read, with a heap and a visited table (the budget is counted in distances).
const DISTANCE_ROWS: f64 = 1.8;

/// An unfiltered walk at beam width ef on a graph of m links per node computes about
/// START_DISTANCES + PER_LINK x m x ef distances: the descent and the start, then the beam.
const START_DISTANCES: f64 = 150.0;
const PER_LINK: f64 = 0.875;

/// A walk that routes through rejected nodes costs the unfiltered walk times
/// 1 + WALK_SHARE / share: the nodes within reach of the ef nearest allowed ones grow as the
/// share falls, and each costs its distance whether it is allowed or not.
const WALK_SHARE: f64 = 0.25;

/// A two-hop walk costs about TWO_HOP times the unfiltered walk (its lists of rejected nodes
/// and a beam needing more width for the same recall), whatever the share down to TWO_HOP_FLOOR;
/// below that its allowed subgraph falls apart and the cost grows as the share's square.
const TWO_HOP: f64 = 2.0;
const TWO_HOP_FLOOR: f64 = 0.03;

/// A walk gives up once its work passes the scan's cost times this.
const BUDGET_SLACK: f64 = 1.5;

/// The plan for one query: `allowed` of the `live` rows may be returned, at beam width `ef`
/// on a graph of `m` links per node (2m on layer 0). `two_hops`: whether a two-hop walk may be
/// planned (not under inner product, where it lost recall a plain walk kept; measured: the
/// filtered-search record). `CHASSIS_FILTER_PLAN` forces one (`crate::tuning`), with no
/// budget, for measuring.
pub fn choose(allowed: u64, live: u64, ef: usize, m: usize, two_hops: bool) -> Choice {
    if let Some(plan) = crate::tuning::get().filter_plan.as_deref().and_then(Plan::parse) {
        return Choice { plan, budget: u64::MAX, expect: 0.0 };
    }
    let share = (allowed as f64 / live.max(1) as f64).max(1e-9);
    let scan = allowed as f64;
    let unfiltered = DISTANCE_ROWS * (START_DISTANCES + PER_LINK * (m * ef) as f64);
    let walk = unfiltered * (1.0 + WALK_SHARE / share);
    let two_hop = if two_hops {
        unfiltered * TWO_HOP * (TWO_HOP_FLOOR / share).powi(2).max(1.0)
    } else {
        f64::INFINITY
    };
    let (plan, cost) = if walk <= two_hop { (Plan::Walk, walk) } else { (Plan::TwoHop, two_hop) };
    if scan <= cost {
        return Choice { plan: Plan::Scan, budget: 0, expect: 0.0 };
    }
    // A plain walk checks that it meets about the share it expected (a filter correlated with
    // the data would leave it far fewer near the query, and it would then go on in two hops).
    let expect = if plan == Plan::Walk && two_hops { share } else { 0.0 };
    Choice { plan, budget: (scan * BUDGET_SLACK / DISTANCE_ROWS).ceil() as u64, expect }
}

/// How often each plan ran in this process, how many walks gave up for a scan, and how many
/// plain walks went on in two hops.
static TAKEN: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Count a filtered search: the plan chosen, whether its walk gave up, whether it switched.
pub fn count(plan: Plan, gave_up: bool, switched: bool) {
    TAKEN[plan as usize].fetch_add(1, Relaxed);
    TAKEN[3].fetch_add(gave_up as u64, Relaxed);
    TAKEN[4].fetch_add(switched as u64, Relaxed);
}

/// (walks, two-hop walks, scans, walks that gave up for a scan, plain walks that went on in
/// two hops) so far in this process.
pub fn counters() -> [u64; 5] {
    std::array::from_fn(|i| TAKEN[i].load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_allowed_rows_are_scanned_and_many_walked() {
        let live = 1_000_000;
        assert_eq!(choose(100, live, 64, 16, true).plan, Plan::Scan);
        assert_eq!(choose(live, live, 64, 16, true).plan, Plan::Walk);
        assert_eq!(choose(live / 2, live, 64, 16, true).plan, Plan::Walk);
        let small = choose(live / 20, live, 64, 16, true);
        assert_eq!(small.plan, Plan::TwoHop);
        assert!(small.budget > 0 && small.budget < live / 20, "{small:?}");
        assert_eq!(choose(live / 20, live, 64, 16, false).plan, Plan::Walk, "no two hops asked");
    }

    /// The plans the measurement on 45,056 rows at ef 16 on AMD Zen 2 says are the fastest
    /// (Zen 3's had the walk ahead at 20%: `docs/design/filtered-search.md`).
    #[test]
    fn the_shares_of_the_measurement() {
        let plan = |share: f64| choose((share * 45_056.0) as u64, 45_056, 16, 16, true).plan;
        assert_eq!(
            [plan(0.01), plan(0.02), plan(0.05), plan(0.1), plan(0.2), plan(0.5)],
            [Plan::Scan, Plan::Scan, Plan::TwoHop, Plan::TwoHop, Plan::TwoHop, Plan::Walk]
        );
    }

    #[test]
    fn the_choice_moves_toward_the_scan_as_the_share_falls() {
        // Oracle: the order of the plans along the share, whatever the constants.
        let live = 100_000;
        let plans: Vec<Plan> = [1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.001]
            .iter()
            .map(|s| choose((s * live as f64) as u64, live, 32, 16, true).plan)
            .collect();
        let rank = |p: &Plan| match p {
            Plan::Walk => 0,
            Plan::TwoHop => 1,
            Plan::Scan => 2,
        };
        assert!(plans.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])), "{plans:?}");
        assert_eq!(plans.last(), Some(&Plan::Scan));
    }
}
