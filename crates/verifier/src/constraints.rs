//! Stage 4: constraints (Cobra §3.2, `Coalesce`; §2.3 without coalescing).
//!
//! In: the chains of each key and the known graph's session order. Out: one constraint per key and unordered
//! pair of chains whose order session order does not already settle (below), deciding which chain comes
//! first. Side A ("first before second") holds the edges from the readers of `first`'s tail to the
//! writer of `second`'s head, or, when that tail has no other reader, the edge from the tail's writer to the
//! head's writer; side B is the mirror image. A chain that starts with an initial version precedes every
//! other chain of its key, so its pairs are not choices: their side-A edges go straight into the known graph.
//!
//! With coalescing off, each pair of chains yields one constraint per pair of edges (one from each side), the
//! uncoalesced form of §2.3; any acyclic choice of these contains one whole coalesced side, so the two forms
//! accept the same histories.
//!
//! **Chains that session order already sorts.** Generating a constraint for every pair of chains costs
//! O(c²) for c chains of one key, and blind writes make one chain each: 100,000 blind writes of one key in
//! one session made 5·10⁹ constraints, and the verifier ran out of memory before pruning could drop them all.
//! So the chains of a key that lie in one session, each after the one before it in session order (a *run*,
//! see [`runs`]), get a constraint only between neighbours of the run; every other pair gets its constraint
//! as before. Why skipping `C_i`, `C_j` (j > i + 1, one run) accepts and rejects exactly what the full
//! polygraph does, and so can never turn a reject into an accept:
//! - *Its side B is never taken.* Every edge of "`C_j` before `C_i`" ends at the writer of `C_i`'s head and
//!   starts at the writer of `C_j`'s tail or at a reader of that tail, which the head's writer already
//!   reaches along session order and the wr edge of the read. So side B closes a cycle with the known graph,
//!   and no acyclic compatible graph contains it; pruning would take side A (Cobra §3.3, Fig. 3 lines
//!   75–85), and under snapshot isolation the cycle is made of dependencies alone (session order and the ww
//!   edge every SI side holds, see `si::si_side`), which SI forbids too.
//! - *Its side A is implied by the neighbours' constraints.* The neighbours' constraints are forced to their
//!   side A the same way, so every compatible graph holds "`C_i` before `C_{i+1}`": each reader `r` of
//!   `C_i`'s tail has an edge to the writer of `C_{i+1}`'s head (or is that writer), and that writer reaches
//!   the writer of `C_j`'s head along session order. So every edge `r → head(C_j)` of side A, and the ww edge
//!   `tail(C_i) → head(C_j)` when the tail has no other reader, is already a path of the graph (under SI too:
//!   a path that enters `head(C_{i+1})` by an anti-dependency leaves it along session order, a dependency).
//!   Adding side A would change no reachability, hence no cycle, and no choice of any other constraint.
//!
//! The same holds pair of edges by pair of edges without coalescing. With pruning on, its first pass would
//! have taken side A of every skipped pair and dropped it, so the constraints pruning leaves live, which the
//! solver and garbage collection (Cobra §4.3) read, are the same as before.
//!
//! Chains of one key in different sessions still get a constraint for every pair, unless one of them starts
//! with an initial version (below), or both are unread (next): c chains spread evenly over s sessions make
//! about c²(1 − 1/s)/2.
//!
//! **Two unread blind writes need no constraint, under serializability.** A chain is *unread* when it is one
//! version that no transaction but its writer reads: a blind write nobody read, such as `UPDATE t SET v = v +
//! 1`, whose read PostgreSQL cannot report (the proxy records it as a blind write, and its read as not
//! checked). pgbench's branch and teller updates have this shape, and 11,000 of them over 5 rows made 12
//! million constraints and a 259 s solve. A pair of unread chains gets no constraint when
//! [`PairRule::SkipUnread`] is asked for, which accepts and rejects exactly what the full polygraph does:
//! - Every compatible graph of the full polygraph is one of the reduced one, so a reject stays a reject.
//! - Take an acyclic compatible graph of the reduced polygraph and any topological order S of it: S is a
//!   serial order that explains every read. A read `r` of version x (chain c) must see x as the last write
//!   of its key before `r` in S. Some reader of c exists, so c is not unread, and every other chain d of the
//!   key shares a constraint with c, whose taken side puts all of d before c's head or after `r` (and after
//!   every other reader of c's tail; inside c, the chain's own edges keep d out). An unread chain is one
//!   write, so it cannot straddle c either. The order of the unread writes among themselves is what S says:
//!   nobody read them, so no read can tell.
//!
//! So the skip holds for (strict) serializability, where S is the witness. It does not hold for snapshot
//! isolation, where two transactions that write one key must not be concurrent even if nobody reads it: a
//! write skew (T1 reads a and writes b, T2 reads b and writes a, each reading the initial version) is allowed,
//! but not when both also blind-write x, and only x's ww edge says so. [`PairRule::All`] keeps every pair
//! there. Garbage collection still treats a pair of unread chains that the known graph leaves unordered as
//! a live constraint while both versions are on the frontier (`gc::entangled::unread_pairs`, which also says
//! why a superseded one needs no pair).

use history::Key;
use solver::Side;

use crate::chains::Chains;
use crate::known_graph::{KnownGraph, Origin};
use crate::normalize::{Label, Normalized};

/// One edge of a constraint side: an rw edge (a reader of `from_version` to the writer of `to_version`) or
/// a ww edge (the writer of `from_version` to the writer of `to_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CEdge {
    pub from: u32,
    pub to: u32,
    pub rw: bool,
    pub from_version: u32,
    pub to_version: u32,
}

/// A choice between the two orders of two chains of one key. Side A is `first` before `second`, side B the
/// opposite. The edges are not stored: they are recomputed from the chains when needed ([`Constraint::side`]),
/// which keeps a constraint at 16 bytes, as most of them are pruned after one look.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Constraint {
    pub key: Key,
    pub first: u32,
    pub second: u32,
    /// Without coalescing: the one edge of each side this constraint keeps (indices into the full sides).
    pub pick: Option<(u32, u32)>,
}

impl Constraint {
    /// The edges of one side.
    pub(crate) fn side(&self, norm: &Normalized, chains: &Chains, side: Side) -> Vec<CEdge> {
        let (c1, c2, pick) = match side {
            Side::A => (self.first, self.second, self.pick.map(|p| p.0)),
            Side::B => (self.second, self.first, self.pick.map(|p| p.1)),
        };
        let edges = chain_to_chain(norm, chains, c1, c2);
        match pick {
            Some(i) => edges.get(i as usize).copied().into_iter().collect(),
            None => edges,
        }
    }
}

/// The edges implied by chain `c1` preceding chain `c2` (Cobra Fig. 3, GenChainToChainEdges). A reader of the
/// tail that is the head's own writer (a read-modify-write) needs no edge, nor does one whose
/// anti-dependencies do not count ([`Normalized::counts_anti_dependencies`]); where no reader's does, the side
/// is the ww edge between the two writers.
pub(crate) fn chain_to_chain(norm: &Normalized, chains: &Chains, c1: u32, c2: u32) -> Vec<CEdge> {
    let (Some(&tail), Some(&head)) =
        (chains.list[c1 as usize].versions.last(), chains.list[c2 as usize].versions.first())
    else {
        return Vec::new();
    };
    let Some(head_writer) = norm.versions[head as usize].writer else { return Vec::new() };
    let mut edges: Vec<CEdge> = norm.versions[tail as usize]
        .readers
        .iter()
        .filter(|&&r| r != head_writer && norm.counts_anti_dependencies(r))
        .map(|&r| CEdge { from: r, to: head_writer, rw: true, from_version: tail, to_version: head })
        .collect();
    if edges.is_empty()
        && let Some(tail_writer) = norm.versions[tail as usize].writer
    {
        edges.push(CEdge {
            from: tail_writer,
            to: head_writer,
            rw: false,
            from_version: tail,
            to_version: head,
        });
    }
    edges
}

/// A vertex's place in session order: its session (an index into `KnownGraph::sessions`) and its position.
type Place = (u32, u32);

/// Splits the chains of one key (`group`) into units whose pairs need a constraint (see the module comment):
/// each *run* is a list of chains of one session in session order, each chain's head after the previous
/// chain's tail, and every other chain is a run of its own. Only neighbours within a run need a constraint;
/// any two chains of different runs do.
fn runs(norm: &Normalized, chains: &Chains, g: &KnownGraph, group: &[u32]) -> Vec<Vec<u32>> {
    let place = |v: u32| g.place.get(v as usize).copied().flatten();
    let writer_place = |version: u32| norm.versions[version as usize].writer.and_then(place);
    // The chains whose head and tail writers lie in one session: (head's place, tail's place, chain).
    let mut placed: Vec<(Place, Place, u32)> = Vec::new();
    let mut out: Vec<Vec<u32>> = Vec::new();
    for &c in group {
        let versions = &chains.list[c as usize].versions;
        let (Some(&head), Some(&tail)) = (versions.first(), versions.last()) else { continue };
        match (writer_place(head), writer_place(tail)) {
            (Some(h), Some(t)) if h.0 == t.0 && h.1 <= t.1 => placed.push((h, t, c)),
            _ => out.push(vec![c]),
        }
    }
    placed.sort_unstable();
    let mut last_tail: Option<Place> = None;
    for (head, tail, c) in placed {
        match (last_tail, out.last_mut()) {
            (Some(t), Some(run)) if t.0 == head.0 && t.1 < head.1 => run.push(c),
            _ => out.push(vec![c]),
        }
        last_tail = Some(tail);
    }
    out
}

/// Which pairs of chains get a constraint (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PairRule {
    /// Every pair that session order does not settle (snapshot isolation and the split polygraph).
    All,
    /// As `All`, less the pairs of two unread chains ((strict) serializability).
    SkipUnread,
}

/// Whether chain `c` is unread: one version that no transaction but its writer reads.
pub(crate) fn is_unread(norm: &Normalized, chains: &Chains, c: u32) -> bool {
    let [x] = chains.list[c as usize].versions[..] else { return false };
    let version = &norm.versions[x as usize];
    version.writer.is_some_and(|w| version.readers.iter().all(|&r| r == w))
}

/// The pairs of chains of one key that need a constraint, each as (lower index, higher index), sorted (the
/// order in which the constraints were made when every pair got one), and how many pairs of two unread
/// chains `rule` skipped. Unread chains are set apart per run first, so the skipped pairs cost nothing.
fn pairs(
    norm: &Normalized,
    chains: &Chains,
    g: &KnownGraph,
    group: &[u32],
    rule: PairRule,
) -> (Vec<(u32, u32)>, u64) {
    let runs = runs(norm, chains, g, group);
    let needs = |c: u32| rule == PairRule::All || !is_unread(norm, chains, c);
    // Each run's chains that need a constraint with every chain of another run.
    let read: Vec<Vec<u32>> =
        runs.iter().map(|run| run.iter().copied().filter(|&c| needs(c)).collect()).collect();
    let ordered = |a: u32, b: u32| (a.min(b), a.max(b));
    let mut out = Vec::new();
    let mut skipped = 0u64;
    for (i, run) in runs.iter().enumerate() {
        for w in run.windows(2) {
            match needs(w[0]) || needs(w[1]) {
                true => out.push(ordered(w[0], w[1])),
                false => skipped += 1,
            }
        }
        let unread_here = (run.len() - read[i].len()) as u64;
        for (j, other) in runs.iter().enumerate().skip(i + 1) {
            for &a in &read[i] {
                out.extend(other.iter().map(|&b| ordered(a, b)));
            }
            for &a in run.iter().filter(|&&a| !needs(a)) {
                out.extend(read[j].iter().map(|&b| ordered(a, b)));
            }
            skipped += unread_here * (other.len() - read[j].len()) as u64;
        }
    }
    out.sort_unstable();
    (out, skipped)
}

/// What [`generate`] made besides the constraints.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Generated {
    /// Edges that initial versions forced into the known graph.
    pub initial_edges: u64,
    /// Pairs of two unread chains that got no constraint ([`PairRule::SkipUnread`]).
    pub unread_pairs: u64,
}

/// Generates the constraints, and adds the edges that initial versions force to the known graph.
pub(crate) fn generate(
    norm: &Normalized,
    chains: &Chains,
    g: &mut KnownGraph,
    coalesce: bool,
    rule: PairRule,
) -> (Vec<Constraint>, Generated) {
    let is_initial = |c: u32| {
        matches!(norm.versions[chains.list[c as usize].versions[0] as usize].label, Label::Initial(_))
    };
    let mut out = Vec::new();
    let mut made = Generated::default();
    for group in &chains.by_key {
        // A key of one chain has no pair (most of TPC-C's keys: each written once in a round, or only
        // read), and finding that out allocated five times.
        if group.len() < 2 {
            continue;
        }
        let (group_pairs, skipped) = pairs(norm, chains, g, group, rule);
        made.unread_pairs += skipped;
        for (c1, c2) in group_pairs {
            let key = chains.list[c1 as usize].key;
            let (first, second) = if is_initial(c2) { (c2, c1) } else { (c1, c2) };
            let side_a = chain_to_chain(norm, chains, first, second);
            if is_initial(first) {
                for e in side_a {
                    let origin = Origin::Initial {
                        first,
                        second,
                        from_version: e.from_version,
                        to_version: e.to_version,
                        rw: e.rw,
                    };
                    g.push(e.from, e.to, origin, 0);
                    made.initial_edges += 1;
                }
                continue;
            }
            let side_b = chain_to_chain(norm, chains, second, first);
            if side_a.is_empty() || side_b.is_empty() {
                // An empty side can always be chosen, so the constraint constrains nothing.
                continue;
            }
            if coalesce {
                out.push(Constraint { key, first, second, pick: None });
            } else {
                for a in 0..side_a.len() as u32 {
                    for b in 0..side_b.len() as u32 {
                        out.push(Constraint { key, first, second, pick: Some((a, b)) });
                    }
                }
            }
        }
    }
    (out, made)
}
