//! Real-time edges for strict serializability (Cobra §3.5).
//!
//! In: the included transactions' timestamps. Out: the minimal set of real-time edges (the transitive
//! reduction of "committed before started"), built in O(n log n + z) by sweeping start and commit events in
//! time order, as in Orochi [Cobra ref. 131, Fig. 6]. Each start is first moved earlier, and each commit
//! later, by its collector's clock error bound ([`ClockBounds`]), so an edge is only inferred when the gap
//! exceeds what the two clocks' errors could explain. The sweep's argument survives the shift: a shifted
//! start is never after the same transaction's shifted commit, so "u before v and v before w" still gives
//! "u before w".
//!
//! The sweep keeps a *frontier*: the transactions that have committed and are not yet known to precede
//! another committed transaction. A transaction that starts gets an edge from every frontier member; when it
//! commits, its own predecessors leave the frontier (it now stands for them) and it joins.

use history::{ClockBounds, History};

use crate::normalize::Normalized;

/// Returns the real-time edges and the number of included transactions without usable timestamps.
pub(crate) fn realtime_edges(h: &History, norm: &Normalized, clocks: &ClockBounds) -> (Vec<(u32, u32)>, u64) {
    // (time, 0 = start / 1 = commit, vertex): at equal times starts go first, since an edge needs the
    // (pushed) commit to be strictly earlier than the start.
    let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(norm.txns.len() * 2);
    let mut missing = 0;
    for (v, nt) in norm.txns.iter().enumerate() {
        let t = &h.transactions[nt.hist];
        let Some(start) = t.start_ns else {
            missing += 1;
            continue;
        };
        let start = clocks.earliest(t.collector, start);
        events.push((start, 0, v as u32));
        match t.commit_ns {
            // A commit before the start is a broken clock reading; it must not order the transaction
            // before itself.
            Some(commit) => events.push((clocks.latest(t.collector, commit, start), 1, v as u32)),
            None => missing += 1,
        }
    }
    events.sort_unstable();
    let n = norm.txns.len();
    let mut frontier: Vec<u32> = Vec::new();
    let mut slot: Vec<usize> = vec![usize::MAX; n];
    let mut parents: Vec<(usize, usize)> = vec![(0, 0); n];
    let mut edges: Vec<(u32, u32)> = Vec::new();
    for (_, kind, v) in events {
        if kind == 0 {
            let begin = edges.len();
            edges.extend(frontier.iter().map(|&u| (u, v)));
            parents[v as usize] = (begin, edges.len());
        } else {
            let (begin, end) = parents[v as usize];
            for &(u, _) in &edges[begin..end] {
                let at = slot[u as usize];
                if at != usize::MAX {
                    let last = frontier.len() - 1;
                    frontier.swap(at, last);
                    slot[frontier[at] as usize] = at;
                    frontier.pop();
                    slot[u as usize] = usize::MAX;
                }
            }
            slot[v as usize] = frontier.len();
            frontier.push(v);
        }
    }
    (edges, missing)
}

#[cfg(test)]
mod tests {
    use history::{ClockBounds, CollectorId, HistoryBuilder};
    use kernels::{Backend, Graph, reachability};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::realtime_edges;
    use crate::normalize::normalize;

    /// The sweep's edges must have exactly the naive pairwise relation as their transitive closure, and none
    /// of them may be implied by the others (the set is minimal): with one uniform drift, and with clocks
    /// of several collectors, some with error bounds of their own.
    #[test]
    fn sweep_edges_are_the_transitive_reduction_of_the_pairwise_relation() {
        let mut rng = StdRng::seed_from_u64(3);
        for case in 0..600 {
            let n = rng.gen_range(1..30);
            let mut clocks = ClockBounds::uniform(rng.gen_range(0..5u64));
            if case % 2 == 1 {
                for c in 0..3 {
                    if rng.gen_bool(0.6) {
                        clocks.errors_ns.insert(CollectorId(c), rng.gen_range(0..4u64));
                    }
                }
            }
            let mut b = HistoryBuilder::new();
            let mut times = Vec::new();
            for i in 0..n {
                let start = rng.gen_range(0..100u64);
                let commit = start + rng.gen_range(0..20u64);
                times.push((start, commit, CollectorId(rng.gen_range(0..3))));
                b = b.txn(i, |t| t).at(start, commit);
            }
            let mut h = b.build();
            for (t, &(_, _, c)) in h.transactions.iter_mut().zip(&times) {
                t.collector = c;
            }
            let norm = normalize(&h);
            let (edges, missing) = realtime_edges(&h, &norm, &clocks);
            assert_eq!(missing, 0);
            let g = Graph::from_edges(n as u32, &edges).unwrap();
            let reach = reachability(&g, None, Backend::Dfs).unwrap();
            for u in 0..n as usize {
                for v in 0..n as usize {
                    let naive = times[u].1 + clocks.drift_ns(times[u].2, times[v].2) < times[v].0;
                    assert_eq!(u != v && reach.reaches(u as u32, v as u32), naive, "{u} -> {v} in {times:?}");
                }
            }
            for (i, &(u, v)) in edges.iter().enumerate() {
                let others: Vec<(u32, u32)> =
                    edges.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &e)| e).collect();
                let without =
                    reachability(&Graph::from_edges(n as u32, &others).unwrap(), None, Backend::Dfs).unwrap();
                assert!(!without.reaches(u, v), "edge {u} -> {v} is redundant in {times:?}");
            }
        }
    }
}
