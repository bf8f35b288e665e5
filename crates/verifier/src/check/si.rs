//! Re-checking a snapshot-isolation accept from the definition (PolySI Theorem 1; Cerone and Gotsman): the
//! report's order of the included transactions gives each key's version order (its writers in that order),
//! and with it the dependencies (so, wr, ww) and anti-dependencies (rw); no cycle of them may be free of two
//! adjacent anti-dependencies. The cycle search runs on a graph with two vertices per transaction (`v`, and
//! `v°` entered by an anti-dependency), written here afresh, apart from `crate::si`.
//!
//! Under `declared` the same check holds each transaction to the level it asked for: a serializable one's
//! anti-dependencies leave both of its vertices (they may follow another anti-dependency), a snapshot one's
//! leave `v` only, and a read-committed one's count not at all; a read-committed one may also read a key
//! twice.

use std::collections::{HashMap, HashSet};

use history::{Key, Observed, Op};

use super::{CheckError, CheckSummary, Facts, bad, final_write};
use crate::options::Level;
use crate::report::{OpRef, Report};

/// The level a transaction is held to in this check.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    Serializable,
    Snapshot,
    ReadCommitted,
}

/// The level `report` holds transaction `t` to: snapshot isolation for every one at that level; under
/// `declared`, what it asked for (PostgreSQL runs READ UNCOMMITTED as READ COMMITTED; no recorded level is
/// held to serializable), except a fence, whose one read locks its row and so returns the latest version:
/// serializable whatever its `BEGIN` said.
pub(super) fn held(report: &Report, t: &history::Transaction) -> Held {
    use history::IsolationLevel as L;
    if report.level != Level::Declared {
        return Held::Snapshot;
    }
    if t.fence {
        return Held::Serializable;
    }
    match t.isolation {
        Some(L::ReadCommitted | L::ReadUncommitted) => Held::ReadCommitted,
        Some(L::RepeatableRead) => Held::Snapshot,
        Some(L::Serializable) | None => Held::Serializable,
    }
}

/// Checks the accept's order (`position`: history index → place) as a witness of snapshot isolation.
pub(super) fn check_snapshot_order(
    f: &Facts<'_>,
    report: &Report,
    position: &HashMap<usize, usize>,
    summary: &mut CheckSummary,
) -> Result<(), CheckError> {
    let h = f.h;
    let mut order: Vec<usize> = position.keys().copied().collect();
    order.sort_by_key(|i| position[i]);
    let n = h.transactions.len();
    let skip: HashSet<OpRef> = report.unverifiable.iter().map(|u| u.op).collect();

    // Each key's writers, in the order: the version order.
    let mut writers: HashMap<Key, Vec<usize>> = HashMap::new();
    for &i in &order {
        let t = &h.transactions[i];
        let mut keys: Vec<Key> = t
            .ops
            .iter()
            .filter_map(|op| match *op {
                Op::Write { key, .. } => Some(key),
                _ => None,
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            writers.entry(k).or_default().push(i);
        }
    }
    let place_in_key = |k: Key, i: usize| writers.get(&k).and_then(|w| w.iter().position(|&x| x == i));

    // Dependencies and anti-dependencies, as (from, to, anti).
    let mut edges: Vec<(usize, usize, bool)> = Vec::new();
    for w in writers.values() {
        edges.extend(w.windows(2).map(|p| (p[0], p[1], false)));
    }
    let mut by_session: Vec<(u64, u64, usize)> =
        order.iter().map(|&i| (h.transactions[i].session.0, h.transactions[i].seq, i)).collect();
    by_session.sort_unstable();
    edges.extend(by_session.windows(2).filter(|p| p[0].0 == p[1].0).map(|p| (p[0].2, p[1].2, false)));
    let mut initial: HashMap<Key, Observed> = HashMap::new();
    for &i in &order {
        let t = &h.transactions[i];
        let mut own: HashMap<Key, Op> = HashMap::new();
        let mut snapshot: HashMap<Key, Observed> = HashMap::new();
        for (oi, op) in t.ops.iter().enumerate() {
            let (key, observed) = match *op {
                Op::Write { key, .. } => {
                    own.insert(key, *op);
                    continue;
                }
                Op::Read { key, observed, .. } => (key, observed),
            };
            if skip.contains(&OpRef::new(t.id, oi))
                || matches!(observed, Observed::Unrecorded(_) | Observed::Foreign(_))
            {
                continue;
            }
            if let Some(Op::Write { write, .. }) = own.get(&key) {
                if observed != Observed::Version(*write) {
                    return bad(format!("{} op {oi} did not read its own write {write}", t.id));
                }
                continue;
            }
            // One snapshot: every external read of a key returns the same version (read committed takes a
            // snapshot per statement).
            if held(report, t) != Held::ReadCommitted && *snapshot.entry(key).or_insert(observed) != observed
            {
                return bad(format!("{} read two versions of one key from its snapshot", t.id));
            }
            // The version read, and the writer that comes next in the version order.
            let next = match observed {
                Observed::Version(w) => {
                    let Some(&(j, k)) = f.writer.get(&w) else {
                        return bad(format!("{w} was never written"));
                    };
                    if k != key || j == i || !f.included[j] || final_write(&h.transactions[j], key) != Some(w)
                    {
                        return bad(format!(
                            "{} op {oi} read {w}, not a committed final write of another",
                            t.id
                        ));
                    }
                    edges.push((j, i, false));
                    place_in_key(key, j).map(|p| p + 1)
                }
                init => {
                    if *initial.entry(key).or_insert(init) != init {
                        return bad(format!("{} op {oi} read a second initial version of its key", t.id));
                    }
                    Some(0)
                }
            };
            if let Some(&s) = next.and_then(|p| writers.get(&key).and_then(|w| w.get(p)))
                && s != i
            {
                edges.push((i, s, true));
            }
        }
        summary.replayed += 1;
    }

    // The split graph: a dependency u → v is u → v and u° → v; an anti-dependency u → v is u → v° (and
    // u° → v° when u is held to serializability; nothing when it is held to read committed).
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); 2 * n];
    for (u, v, anti) in edges {
        if !anti {
            adj[u].push(v);
            adj[u + n].push(v);
            continue;
        }
        match held(report, &h.transactions[u]) {
            Held::Serializable => {
                adj[u].push(v + n);
                adj[u + n].push(v + n);
            }
            Held::Snapshot => adj[u].push(v + n),
            Held::ReadCommitted => {}
        }
    }
    let mut indegree = vec![0usize; 2 * n];
    for list in &adj {
        for &v in list {
            indegree[v] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..2 * n).filter(|&v| indegree[v] == 0).collect();
    let mut done = 0;
    while let Some(v) = ready.pop() {
        done += 1;
        for &w in &adj[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push(w);
            }
        }
    }
    if done < 2 * n {
        return bad(
            "under the version order the serial order gives, some cycle of dependencies has no two adjacent \
             anti-dependencies (or, under declared levels, none its transactions' levels allow): no \
             execution explains it",
        );
    }
    Ok(())
}
