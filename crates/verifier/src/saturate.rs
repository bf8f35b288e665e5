//! Stage 2 for the weak levels (read committed, read atomic, causal): saturation and a cycle search, in
//! polynomial time and with no solver. Follows Biswas and Enea, "On the Complexity of Checking
//! Transactional Consistency" (OOPSLA'19), §3's axioms and §4's saturation; AWDIT (Møldrup et al.) shows
//! the same checks in near-linear time.
//!
//! Each weak level is an axiom over a *commit order* `co`, a total order of the included transactions that
//! extends session order and write-read order: when transaction `T3` reads key `x` from `T1`, every other
//! writer `W` of `x` that `T3` has *seen* must come before `T1` in `co` (`W`'s version of `x` precedes the
//! one `T3` read). The levels differ only in what seeing is:
//! - read committed: an earlier read of `T3`, in program order, returned a write of `W`;
//! - read atomic: some read of `T3` returned a write of `W`, or `W` precedes `T3` in its session;
//! - causal: `W` happens before `T3` (a path of session-order and write-read edges).
//!
//! Seeing depends on the history alone, so every edge an axiom forces can be computed up front; the
//! history satisfies the level iff session order, write-read order and the forced edges have no cycle, and
//! no forced edge would put a write before an initial version (which precedes every recorded write). Any
//! topological order is then a witness commit order.
//!
//! Complexity, for n transactions, r reads, k sessions and e edges:
//! - read committed: O(r + Σ_t (s_t + f_t)) hash operations, s_t the writes of the transactions t read
//!   from and f_t the forced-edge candidates (pairs of a read and a seen writer of its key);
//! - read atomic: the same, plus O(r) lookups of the last writer of a key earlier in the session;
//! - causal: O((n + e)·k) for per-session clocks over a topological order of session and write-read
//!   order, then O(r·k·log n) to find, per read and session, the last writer of the key that happened
//!   before the reader (only the last one is needed: the earlier ones precede it in its session);
//! - the cycle search: O(n + e) (Kahn's algorithm, then a breadth-first search for one short cycle).

use std::collections::{HashMap, HashSet, VecDeque};

use history::{History, Key, Op};

use crate::normalize::{Normalized, key_name, show};
use crate::options::Level;
use crate::report::{Anomaly, AnomalyClass, Basis, CycleEdge, Derivation, EdgeKind, OpRef, SeenHow};

/// How the reader saw the writer whose version must come first (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// An earlier read of the reader (this op) returned one of the writer's writes.
    EarlierRead(usize),
    /// A read of the reader (this op) returned one of the writer's writes.
    Read(usize),
    /// The writer precedes the reader in their session.
    Session,
    /// The writer happens before the reader.
    HappensBefore,
}

/// An edge the axiom forced: `reader`'s read of `key` (op `read_op`) returned `read_version`, after it
/// saw the writer of `seen_version`, another version of `key`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Forced {
    pub key: Key,
    pub reader: u32,
    pub read_op: usize,
    pub read_version: u32,
    pub seen_version: u32,
    pub seen: Seen,
}

/// Why an edge is in the commit order.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Why {
    /// Session order (consecutive transactions of one session).
    So,
    /// `to` read `version` of `key`, which `from` wrote.
    Wr { key: Key, version: u32 },
    /// The level's axiom.
    Forced(Forced),
}

/// An edge of the commit order, between vertices (indices into `Normalized::txns`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Edge {
    pub from: u32,
    pub to: u32,
    pub why: Why,
}

/// What saturation found.
pub(crate) enum Outcome {
    /// A commit order that satisfies the level, as vertices.
    Order(Vec<u32>),
    /// A cycle of commit-order edges, closed (the last edge returns to the first's `from`).
    Cycle(Vec<Edge>),
    /// A reader saw a write of a key and then read the key's initial version, which precedes every write:
    /// `writer` wrote `forced.seen_version`.
    InitialAfterWrite { writer: u32, forced: Forced },
}

/// Saturation's result and sizes.
pub(crate) struct Saturated {
    pub outcome: Outcome,
    pub so_edges: u64,
    pub wr_edges: u64,
    pub forced_edges: u64,
    /// Every edge, for paths in reports (happens-before).
    edges: Vec<Edge>,
}

/// Session order: each session's included vertices in sequence order.
struct Sessions {
    /// Per vertex: (session index, position in the session).
    of: Vec<(u32, u32)>,
    /// Per session, its vertices in order.
    members: Vec<Vec<u32>>,
}

fn sessions(h: &History, norm: &Normalized) -> Sessions {
    let members = crate::normalize::session_paths(h, norm);
    let mut of = vec![(0, 0); norm.txns.len()];
    for (s, list) in members.iter().enumerate() {
        for (p, &v) in list.iter().enumerate() {
            of[v as usize] = (s as u32, p as u32);
        }
    }
    Sessions { of, members }
}

/// Collects forced edges, or the first read of an initial version after a seen write.
struct Forcing<'a> {
    norm: &'a Normalized,
    writes: Vec<HashMap<Key, u32>>,
    edges: Vec<Edge>,
    forced: u64,
    initial_after_write: Option<(u32, Forced)>,
}

impl Forcing<'_> {
    /// `writer` was seen by `reader` before its read (`op`, `key`, `read_version`): if it wrote `key` and
    /// is not the version's writer, its version comes first.
    fn force(&mut self, writer: u32, reader: u32, op: usize, key: Key, read_version: u32, seen: Seen) {
        let Some(&seen_version) = self.writes[writer as usize].get(&key) else { return };
        let read_writer = self.norm.versions[read_version as usize].writer;
        if read_writer == Some(writer) || writer == reader {
            return;
        }
        let forced = Forced { key, reader, read_op: op, read_version, seen_version, seen };
        match read_writer {
            Some(t1) => {
                self.forced += 1;
                self.edges.push(Edge { from: writer, to: t1, why: Why::Forced(forced) });
            }
            None => {
                self.initial_after_write.get_or_insert((writer, forced));
            }
        }
    }
}

/// Runs saturation for `level` (one of the weak levels) on a normalised history without anomalies.
pub(crate) fn saturate(h: &History, norm: &Normalized, level: Level) -> Saturated {
    let n = norm.txns.len();
    let sessions = sessions(h, norm);
    let mut base: Vec<Edge> = Vec::new();
    for list in &sessions.members {
        for pair in list.windows(2) {
            base.push(Edge { from: pair[0], to: pair[1], why: Why::So });
        }
    }
    let so_edges = base.len() as u64;
    for (v, t) in norm.txns.iter().enumerate() {
        for &(_, key, version) in &t.ordered_reads {
            if let Some(w) = norm.versions[version as usize].writer
                && w != v as u32
            {
                base.push(Edge { from: w, to: v as u32, why: Why::Wr { key, version } });
            }
        }
    }
    let wr_edges = base.len() as u64 - so_edges;
    let mut forcing = Forcing {
        norm,
        writes: norm.txns.iter().map(|t| t.writes.iter().copied().collect()).collect(),
        edges: Vec::new(),
        forced: 0,
        initial_after_write: None,
    };
    match level {
        Level::ReadCommitted => read_committed(norm, &mut forcing),
        Level::ReadAtomic => read_atomic(norm, &sessions, &mut forcing),
        _ => {
            // Causal: happens-before must itself be acyclic before clocks mean anything.
            match topological(n, &base) {
                Ok(order) => causal(norm, &sessions, &base, &order, &mut forcing),
                Err(remaining) => {
                    let cycle = find_cycle(n, &base, &remaining);
                    return Saturated {
                        outcome: Outcome::Cycle(cycle),
                        so_edges,
                        wr_edges,
                        forced_edges: 0,
                        edges: base,
                    };
                }
            }
        }
    }
    let forced_edges = forcing.forced;
    if let Some((writer, forced)) = forcing.initial_after_write {
        base.extend(forcing.edges);
        return Saturated {
            outcome: Outcome::InitialAfterWrite { writer, forced },
            so_edges,
            wr_edges,
            forced_edges,
            edges: base,
        };
    }
    base.extend(forcing.edges);
    let outcome = match topological(n, &base) {
        Ok(order) => Outcome::Order(order),
        Err(remaining) => Outcome::Cycle(find_cycle(n, &base, &remaining)),
    };
    Saturated { outcome, so_edges, wr_edges, forced_edges, edges: base }
}

/// Read committed: each read against the writers the transaction's earlier reads saw. The writers seen
/// are indexed by the keys they wrote, so a read looks only at those that wrote its key (a long scan sees
/// many writers, each of few keys).
fn read_committed(norm: &Normalized, f: &mut Forcing<'_>) {
    // Reused across transactions, so that their capacity is allocated once.
    let mut seen: HashSet<u32> = HashSet::new();
    let mut seen_by_key: HashMap<Key, Vec<(u32, usize)>> = HashMap::new();
    for (v, t) in norm.txns.iter().enumerate() {
        let v = v as u32;
        seen.clear();
        seen_by_key.clear();
        for &(op, key, version) in &t.ordered_reads {
            for &(w, w_op) in seen_by_key.get(&key).map(Vec::as_slice).unwrap_or_default() {
                f.force(w, v, op, key, version, Seen::EarlierRead(w_op));
            }
            if let Some(w) = norm.versions[version as usize].writer
                && w != v
                && seen.insert(w)
            {
                for &(k, _) in &norm.txns[w as usize].writes {
                    seen_by_key.entry(k).or_default().push((w, op));
                }
            }
        }
    }
}

/// Read atomic: each read against every writer the transaction read from (indexed by the keys they
/// wrote), and the last earlier writer of the key in its session.
fn read_atomic(norm: &Normalized, sessions: &Sessions, f: &mut Forcing<'_>) {
    // Reused across transactions, so that their capacity is allocated once.
    let mut sources: HashSet<u32> = HashSet::new();
    let mut by_key: HashMap<Key, Vec<(u32, usize)>> = HashMap::new();
    for list in &sessions.members {
        let mut last_writer: HashMap<Key, u32> = HashMap::new();
        for &v in list {
            let t = &norm.txns[v as usize];
            sources.clear();
            by_key.clear();
            for &(op, _, version) in &t.ordered_reads {
                if let Some(w) = norm.versions[version as usize].writer
                    && w != v
                    && sources.insert(w)
                {
                    for &(k, _) in &norm.txns[w as usize].writes {
                        by_key.entry(k).or_default().push((w, op));
                    }
                }
            }
            for &(op, key, version) in &t.ordered_reads {
                for &(w, w_op) in by_key.get(&key).map(Vec::as_slice).unwrap_or_default() {
                    f.force(w, v, op, key, version, Seen::Read(w_op));
                }
                if let Some(&w) = last_writer.get(&key) {
                    f.force(w, v, op, key, version, Seen::Session);
                }
            }
            for &(key, _) in &t.writes {
                last_writer.insert(key, v);
            }
        }
    }
}

/// Causal: each read against, per session, the last writer of the key that happened before the reader.
fn causal(norm: &Normalized, sessions: &Sessions, base: &[Edge], order: &[u32], f: &mut Forcing<'_>) {
    let n = norm.txns.len();
    let k = sessions.members.len();
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for e in base {
        preds[e.to as usize].push(e.from);
    }
    // clock[v·k + s]: how many of session s's transactions happen before v or are v.
    let mut clock = vec![0u32; n * k];
    for &v in order {
        let v = v as usize;
        for &p in &preds[v] {
            let p = p as usize;
            for s in 0..k {
                clock[v * k + s] = clock[v * k + s].max(clock[p * k + s]);
            }
        }
        let (s, pos) = sessions.of[v];
        clock[v * k + s as usize] = pos + 1;
    }
    // Per key and session, the writers' positions in order.
    let mut writers: HashMap<Key, HashMap<u32, Vec<(u32, u32)>>> = HashMap::new();
    for list in &sessions.members {
        for &v in list {
            let (s, pos) = sessions.of[v as usize];
            for &(key, _) in &norm.txns[v as usize].writes {
                writers.entry(key).or_default().entry(s).or_default().push((pos, v));
            }
        }
    }
    for v in 0..n {
        let (own, pos) = sessions.of[v];
        for &(op, key, version) in &norm.txns[v].ordered_reads {
            let Some(by_session) = writers.get(&key) else { continue };
            let t1 = norm.versions[version as usize].writer;
            for (&s, list) in by_session {
                let limit = if s == own { pos } else { clock[v * k + s as usize] };
                let before = list.partition_point(|&(p, _)| p < limit);
                let Some(&(w_pos, w)) = before.checked_sub(1).and_then(|i| list.get(i)) else { continue };
                // Already implied when the writer happens before T1: the edge would add nothing.
                if let Some(t1) = t1
                    && clock[t1 as usize * k + s as usize] > w_pos
                {
                    continue;
                }
                f.force(w, v as u32, op, key, version, Seen::HappensBefore);
            }
        }
    }
}

/// Kahn's algorithm: a topological order of all `n` vertices, or the vertices left on or behind a cycle.
fn topological(n: usize, edges: &[Edge]) -> Result<Vec<u32>, Vec<bool>> {
    let mut indegree = vec![0u32; n];
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
    for e in edges {
        indegree[e.to as usize] += 1;
        out[e.from as usize].push(e.to);
    }
    let mut ready: VecDeque<u32> = (0..n as u32).filter(|&v| indegree[v as usize] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop_front() {
        order.push(v);
        for &w in &out[v as usize] {
            indegree[w as usize] -= 1;
            if indegree[w as usize] == 0 {
                ready.push_back(w);
            }
        }
    }
    if order.len() == n { Ok(order) } else { Err(indegree.iter().map(|&d| d > 0).collect()) }
}

/// One short cycle among the `remaining` vertices (those Kahn's algorithm could not order): walk back
/// along edges between remaining vertices until a vertex repeats (it lies on a cycle), then find the
/// shortest cycle through it by breadth-first search.
fn find_cycle(n: usize, edges: &[Edge], remaining: &[bool]) -> Vec<Edge> {
    let mut into: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in edges.iter().enumerate() {
        if remaining[e.from as usize] && remaining[e.to as usize] {
            into[e.to as usize].push(i);
            out[e.from as usize].push(i);
        }
    }
    let Some(mut v) = (0..n).find(|&v| remaining[v]) else { return Vec::new() };
    let mut visited = HashSet::new();
    while visited.insert(v) {
        // Every remaining vertex has an edge from another remaining vertex (its indegree stayed positive).
        let Some(&i) = into[v].first() else { return Vec::new() };
        v = edges[i].from as usize;
    }
    let start = v;
    let mut via: Vec<Option<usize>> = vec![None; n];
    let mut queue = VecDeque::from([start]);
    while let Some(u) = queue.pop_front() {
        for &i in &out[u] {
            let w = edges[i].to as usize;
            if w == start {
                let mut cycle = vec![edges[i]];
                let mut at = u;
                while at != start {
                    let Some(j) = via[at] else { break };
                    cycle.push(edges[j]);
                    at = edges[j].from as usize;
                }
                cycle.reverse();
                return cycle;
            }
            if via[w].is_none() && w != start {
                via[w] = Some(i);
                queue.push_back(w);
            }
        }
    }
    Vec::new()
}

impl Saturated {
    /// A happens-before path from `from` to `to` (session-order and write-read edges), vertices in order;
    /// for the report of a causal edge. Empty if there is none.
    pub(crate) fn happens_before_path(&self, n: usize, from: u32, to: u32) -> Vec<u32> {
        let mut into: Vec<Vec<u32>> = vec![Vec::new(); n];
        for e in &self.edges {
            if matches!(e.why, Why::So | Why::Wr { .. }) {
                into[e.to as usize].push(e.from);
            }
        }
        let mut next: Vec<Option<u32>> = vec![None; n];
        let mut queue = VecDeque::from([to]);
        while let Some(v) = queue.pop_front() {
            for &p in &into[v as usize] {
                if next[p as usize].is_none() && p != to {
                    next[p as usize] = Some(v);
                    if p == from {
                        let mut path = vec![from];
                        let mut at = from;
                        while let Some(nx) = next[at as usize] {
                            path.push(nx);
                            if nx == to {
                                break;
                            }
                            at = nx;
                        }
                        return path;
                    }
                    queue.push_back(p);
                }
            }
        }
        Vec::new()
    }
}

/// The evidence of a weak-level reject, in the report's terms: the anomaly, the version-order facts its
/// forced edges cite (appended to `derivations`), and the history indices of the transactions involved.
pub(crate) fn evidence(
    h: &History,
    norm: &Normalized,
    level: Level,
    sat: &Saturated,
    derivations: &mut Vec<Derivation>,
) -> Option<(Anomaly, Vec<usize>)> {
    let id = |v: u32| h.transactions[norm.txns[v as usize].hist].id;
    let observed = |version: u32| norm.versions[version as usize].observed();
    let class = match level {
        Level::ReadAtomic => AnomalyClass::FracturedRead,
        Level::Causal => AnomalyClass::CausalityViolation,
        _ => AnomalyClass::G1c,
    };
    let how = |f: &Forced, writer: u32| match f.seen {
        Seen::EarlierRead(op) => SeenHow::EarlierRead { op },
        Seen::Read(op) => SeenHow::Read { op },
        Seen::Session => SeenHow::Session,
        Seen::HappensBefore => SeenHow::HappensBefore {
            path: sat.happens_before_path(norm.txns.len(), writer, f.reader).into_iter().map(id).collect(),
        },
    };
    let saw = |f: &Forced, writer: u32| match f.seen {
        Seen::EarlierRead(op) => format!("after its op {op} had read a write of {}", id(writer)),
        Seen::Read(op) => format!("while its op {op} read a write of {}", id(writer)),
        Seen::Session => format!("after {} in its session", id(writer)),
        Seen::HappensBefore => format!("after {}, which happens before it", id(writer)),
    };
    match &sat.outcome {
        Outcome::Order(_) => None,
        Outcome::InitialAfterWrite { writer, forced: f } => {
            let key = key_name(h, f.key);
            let write_op = write_op(h, norm, *writer, f.key);
            let mut ops = vec![OpRef::new(id(*writer), write_op), OpRef::new(id(f.reader), f.read_op)];
            if let Seen::EarlierRead(op) | Seen::Read(op) = f.seen {
                ops.push(OpRef::new(id(f.reader), op));
            }
            let summary = format!(
                "{} read {key}={} (from before recording began) {}, which wrote {key}={}: a version that \
                 precedes every write was read after a write of the key was seen",
                id(f.reader),
                show(observed(f.read_version)),
                saw(f, *writer),
                show(observed(f.seen_version)),
            );
            let involved = vec![norm.txns[*writer as usize].hist, norm.txns[f.reader as usize].hist];
            let anomaly = Anomaly {
                class,
                summary,
                ops,
                cycle: Vec::new(),
                uses_real_time: false,
                uses_session_order: matches!(f.seen, Seen::Session | Seen::HappensBefore),
                refutation: None,
            };
            Some((anomaly, involved))
        }
        Outcome::Cycle(edges) => {
            let mut cycle = Vec::with_capacity(edges.len());
            for e in edges {
                let (from, to) = (id(e.from), id(e.to));
                let edge = match e.why {
                    Why::So => CycleEdge::plain(
                        from,
                        to,
                        EdgeKind::So,
                        format!("{from} precedes {to} in their session"),
                    ),
                    Why::Wr { key, version } => {
                        let name = key_name(h, key);
                        let v = observed(version);
                        CycleEdge {
                            key: Some(name.clone()),
                            key_id: Some(key.0),
                            from_version: Some(v),
                            to_version: Some(v),
                            ..CycleEdge::plain(
                                from,
                                to,
                                EdgeKind::Wr,
                                format!("{to} read {name}={} written by {from}", show(v)),
                            )
                        }
                    }
                    Why::Forced(f) => {
                        let name = key_name(h, f.key);
                        let (before, after) = (observed(f.seen_version), observed(f.read_version));
                        derivations.push(Derivation {
                            key: name.clone(),
                            key_id: f.key.0,
                            before: vec![before],
                            after: vec![after],
                            basis: Basis::Seen {
                                reader: id(f.reader),
                                read: f.read_op,
                                how: how(&f, e.from),
                            },
                        });
                        CycleEdge {
                            key: Some(name.clone()),
                            key_id: Some(f.key.0),
                            from_version: Some(before),
                            to_version: Some(after),
                            derivation: Some(derivations.len() - 1),
                            ..CycleEdge::plain(
                                from,
                                to,
                                EdgeKind::Ww,
                                format!(
                                    "{} read {name}={} {}, which wrote {name}={}: at {} {from}'s version comes first",
                                    id(f.reader),
                                    show(after),
                                    saw(&f, e.from),
                                    show(before),
                                    level.name()
                                ),
                            )
                        }
                    }
                };
                cycle.push(edge);
            }
            let forced = edges.iter().any(|e| matches!(e.why, Why::Forced(_)));
            let path: Vec<String> =
                cycle.iter().map(|e| format!("{} -{}->", e.from, e.kind.name())).collect();
            let first = cycle.first().map(|e| e.from.to_string()).unwrap_or_default();
            let summary = if forced {
                format!(
                    "no commit order explains what each transaction saw at {}: {} {first}",
                    level.name(),
                    path.join(" ")
                )
            } else {
                format!(
                    "a cycle of session order and reads (circular information flow): {} {first}",
                    path.join(" ")
                )
            };
            // The readers whose reads forced an edge are involved too.
            let readers = edges.iter().filter_map(|e| match e.why {
                Why::Forced(f) => Some(f.reader),
                _ => None,
            });
            let mut involved: Vec<usize> = edges
                .iter()
                .flat_map(|e| [e.from, e.to])
                .chain(readers)
                .map(|v| norm.txns[v as usize].hist)
                .collect();
            involved.sort_unstable();
            involved.dedup();
            let anomaly = Anomaly {
                class: if forced { class } else { AnomalyClass::G1c },
                summary,
                ops: Vec::new(),
                uses_real_time: false,
                uses_session_order: cycle.iter().any(|e| e.kind == EdgeKind::So),
                cycle,
                refutation: None,
            };
            Some((anomaly, involved))
        }
    }
}

/// The op index of vertex `v`'s visible (last) write of `key`.
fn write_op(h: &History, norm: &Normalized, v: u32, key: Key) -> usize {
    let t = &h.transactions[norm.txns[v as usize].hist];
    t.ops.iter().rposition(|op| matches!(*op, Op::Write { key: k, .. } if k == key)).unwrap_or(0)
}
