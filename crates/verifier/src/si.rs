//! Snapshot isolation: the split polygraph, solving it, and the evidence of a reject (PolySI, Huang et al.,
//! VLDB'23, §3–4).
//!
//! **Characterisation** (PolySI Theorem 1, after Cerone and Gotsman, J. ACM'18): a history satisfies
//! (strong-session) snapshot isolation iff some version order makes `(SO ∪ WR ∪ WW) ; RW?` acyclic. Call SO,
//! WR and WW edges *dependencies* and RW edges *anti-dependencies*: a cycle of that composed relation is a
//! cycle of dependencies and anti-dependencies in which no two anti-dependencies are adjacent. Write skew (two
//! adjacent rw edges) is allowed; lost updates, long forks and causality violations are not.
//!
//! **Encoding.** PolySI's generalized polygraph has edges whose existence depends on two choices (a
//! dependency, then an anti-dependency). Here each transaction `v` gets two vertices instead: `v` and `v°`
//! ("entered by an anti-dependency"). A dependency `u → v` becomes `u → v` and `u° → v`; an anti-dependency
//! `u → v` becomes `u → v°`. From `v°` only dependencies leave, so a cycle of this *split graph* is exactly a
//! closed walk with no two adjacent anti-dependencies, and every constraint stays a plain choice between two
//! edge sets: the `solver` crate decides SI unchanged, with twice the vertices.
//!
//! **What is shared with serializability.** Stages 1–4 are reused: normalisation (a snapshot returns one
//! version per key, so the same reads are malformed), lost updates and chains (a read-modify-write that read
//! `v` and wrote `w` puts `w` directly after `v` under SI too: a writer between them would be overwritten by a
//! transaction that did not see it, a lost update, which SI forbids), and one constraint per key and pair of
//! chains. One difference: serializability's side of a constraint omits the ww edge from a chain's tail to the
//! next chain's head when the tail has readers (the wr and rw edges through a reader imply it), but under SI a
//! ww edge may be followed by an anti-dependency where that wr-then-rw path may not, so [`si_side`] keeps it.
//!
//! **Pruning** (PolySI §4.2) runs on the split graph, not on serializability's known graph (whose cycles need
//! not be SI violations), and only to find an accept's order faster: a reject is derived again without it, so
//! that its evidence cites only known edges and the solver's core. Verification in rounds does not check SI
//! (garbage collection's argument in `gc.rs` is made for serializability).

use std::collections::{HashMap, VecDeque};

use kernels::{Graph, KernelError};
use solver::{Constraint as SConstraint, Edge, Polygraph, Side, Solution};

use crate::certificate::{Certifier, classify};
use crate::chains::Chains;
use crate::constraints::{CEdge, Constraint, chain_to_chain};
use crate::error::VerifyError;
use crate::known_graph::{KnownGraph, Origin};
use crate::normalize::{Label, Normalized, key_name};
use crate::report::{Anomaly, AnomalyClass, Basis, Choice, CycleEdge, EdgeKind, Refutation, RefutationNode};
use crate::solve::{pairs, topo};

/// How many case splits an SI refutation may use (as for serializability's).
const MAX_SPLITS: usize = 1024;

/// The edges implied by chain `c1` preceding chain `c2` under SI: serializability's, plus the ww edge from
/// the tail's writer to the head's writer where serializability left it implied.
pub(crate) fn si_side(norm: &Normalized, chains: &Chains, c1: u32, c2: u32) -> Vec<CEdge> {
    let mut edges = chain_to_chain(norm, chains, c1, c2);
    if let Some(&first) = edges.first()
        && edges.iter().all(|e| e.rw)
        && let Some(tail_writer) = norm.versions[first.from_version as usize].writer
        && tail_writer != first.to
    {
        edges.push(CEdge { from: tail_writer, to: first.to, rw: false, ..first });
    }
    edges
}

/// Adds to the known graph the ww edges serializability left implied between a chain that starts with an
/// initial version and the other chains of its key (see [`crate::constraints::generate`]).
pub(crate) fn add_initial_ww(norm: &Normalized, chains: &Chains, g: &mut KnownGraph) {
    let is_initial = |c: u32| {
        matches!(norm.versions[chains.list[c as usize].versions[0] as usize].label, Label::Initial(_))
    };
    for group in &chains.by_key {
        for &first in group.iter().filter(|&&c| is_initial(c)) {
            for &second in group.iter().filter(|&&c| c != first) {
                for e in si_side(norm, chains, first, second).into_iter().filter(|e| !e.rw) {
                    let exists = g.edges.iter().any(|k| {
                        k.from == e.from
                            && k.to == e.to
                            && matches!(k.origin, Origin::Initial { rw: false, .. })
                    });
                    if !exists {
                        let origin = Origin::Initial {
                            first,
                            second,
                            from_version: e.from_version,
                            to_version: e.to_version,
                            rw: false,
                        };
                        g.push(e.from, e.to, origin, 0);
                    }
                }
            }
        }
    }
}

/// Whether a known edge is an anti-dependency.
fn is_rw(origin: &Origin) -> bool {
    matches!(origin, Origin::ChainRw { .. } | Origin::Initial { rw: true, .. })
}

/// What an anti-dependency leaving a transaction may follow in a cycle, by the level the transaction is held
/// to (the reader of the version the anti-dependency overwrites owns it). Under `snapshot-isolation` every
/// transaction is [`Reader::Snapshot`]; under `declared` each is held to the level it asked for (Adya's mixing
/// theorem, thesis §4.3: a transaction's own level decides which of its conflicts count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// Serializable: its anti-dependencies count after any edge, an anti-dependency too (from `v` and `v°`).
    Serializable,
    /// Snapshot isolation: its anti-dependencies count only after a dependency (from `v`).
    Snapshot,
    /// Read committed (Adya's PL-2): its anti-dependencies never count; only dependency cycles (G0, G1c) do.
    ReadCommitted,
}

impl Reader {
    /// The level `declared` holds `t` to: a fence as serializable, any other transaction as
    /// [`Reader::declared`] says.
    ///
    /// A fence reads its one row with a lock (`SELECT … FOR UPDATE`, `proxy::interpret::fence`), which returns
    /// the latest committed version whatever level the fence's `BEGIN` names (the proxy's says READ
    /// COMMITTED, so that two fences queue on the lock instead of failing): its read-modify-write puts its
    /// version right after the one it read, as a serializable one does. Held to read committed, fences formed
    /// no chain, and a history of SERIALIZABLE transactions recorded through the proxy was not one held to
    /// serializability throughout, so rounds could not collect it (`rounds`).
    pub(crate) fn of(t: &history::Transaction) -> Reader {
        match t.fence {
            true => Reader::Serializable,
            false => Reader::declared(t.isolation),
        }
    }

    /// The level `declared` holds a transaction to, from the level it asked for. No recorded level is checked
    /// as serializable, the strongest, so that nothing the history cannot show is taken as allowed.
    pub(crate) fn declared(isolation: Option<history::IsolationLevel>) -> Reader {
        use history::IsolationLevel::*;
        match isolation {
            None | Some(Serializable) => Reader::Serializable,
            Some(RepeatableRead) => Reader::Snapshot,
            Some(ReadUncommitted | ReadCommitted) => Reader::ReadCommitted,
        }
    }
}

/// The split graph's encoding: its size and each transaction's [`Reader`].
#[derive(Clone, Debug)]
pub(crate) struct Encoding {
    /// Transactions; the split graph has twice as many vertices.
    pub n: u32,
    /// Each vertex's reader kind.
    pub readers: Vec<Reader>,
}

impl Encoding {
    /// The split graph's edges for one transaction-graph edge (see the module comment); returns how many.
    fn split(&self, from: u32, to: u32, rw: bool, out: &mut Vec<(u32, u32)>) -> usize {
        let n = self.n;
        if !rw {
            out.push((from, to));
            out.push((from + n, to));
            return 2;
        }
        match self.readers[from as usize] {
            Reader::Serializable => {
                out.push((from, to + n));
                out.push((from + n, to + n));
                2
            }
            Reader::Snapshot => {
                out.push((from, to + n));
                1
            }
            Reader::ReadCommitted => 0,
        }
    }

    /// The split graph's known edges.
    fn known(&self, g: &KnownGraph) -> Vec<(u32, u32)> {
        let mut known = Vec::with_capacity(g.edges.len() * 2);
        for e in &g.edges {
            self.split(e.from, e.to, is_rw(&e.origin), &mut known);
        }
        known.sort_unstable();
        known.dedup();
        known
    }

    fn side(&self, edges: &[CEdge]) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        for e in edges {
            self.split(e.from, e.to, e.rw, &mut out);
        }
        out
    }
}

/// The solver's answer for SI.
pub(crate) enum SiSolved {
    /// A commit order of the transactions whose restriction to each key's writers is a version order that
    /// satisfies the characterisation, and how many constraints pruning left to the solver.
    Acyclic { order: Vec<u32>, residual: u64 },
    /// A cycle of the split graph (as split-vertex pairs) under some choice of the core's constraints.
    Cyclic { cycle: Vec<(u32, u32)>, core: Vec<u32> },
}

/// The two sides of one constraint, as split-graph edges.
type SplitSides = [Vec<(u32, u32)>; 2];

/// How many pruning passes run before the solver takes what is left.
const MAX_PASSES: u32 = 8;

/// Solves the split polygraph. With `prune`, pruning runs first (see [`solve_pruned`]); a reject is always
/// derived from the unpruned polygraph, so its evidence cites no pruning decision.
pub(crate) fn solve(
    g: &KnownGraph,
    constraints: &[Constraint],
    norm: &Normalized,
    chains: &Chains,
    encoding: &Encoding,
    prune: bool,
) -> Result<SiSolved, VerifyError> {
    let n = g.vertices;
    n.checked_mul(2).ok_or_else(|| VerifyError::Internal("too many transactions".into()))?;
    if encoding.n != n || encoding.readers.len() != n as usize {
        return Err(VerifyError::Internal("the split encoding does not match the known graph".into()));
    }
    let sides: Vec<SplitSides> = constraints
        .iter()
        .map(|c| {
            [(c.first, c.second), (c.second, c.first)]
                .map(|(c1, c2)| encoding.side(&si_side(norm, chains, c1, c2)))
        })
        .collect();
    let known = encoding.known(g);
    if prune && let Some((order, residual)) = solve_pruned(g, known.clone(), &sides)? {
        return Ok(SiSolved::Acyclic { order, residual });
    }
    solve_all(g, known, &sides)
}

/// Pruning on the split graph (PolySI §4.2, as Cobra §3.3): a side with an edge `u → v` where `v` already
/// reaches `u` through known split edges would close a cycle, so the other side holds and its edges become
/// known; repeated to a fixpoint, then the solver takes the rest. `None` when this finds a cycle or the
/// solver does, and the caller derives the reject without pruning.
fn solve_pruned(
    g: &KnownGraph,
    mut known: Vec<(u32, u32)>,
    sides: &[SplitSides],
) -> Result<Option<(Vec<u32>, u64)>, VerifyError> {
    let (n, vertices) = (g.vertices, g.vertices * 2);
    let mut live = vec![true; sides.len()];
    for _ in 0..MAX_PASSES {
        let graph = Graph::from_edges(vertices, &known).map_err(|e| VerifyError::Internal(e.to_string()))?;
        let reach = match kernels::reachability(&graph, Some(&g.sessions), kernels::Backend::Auto) {
            Err(KernelError::Cyclic { .. }) => return Ok(None),
            Err(e) => return Err(VerifyError::Reachability(e)),
            Ok(r) => r,
        };
        let closes = |side: &[(u32, u32)]| side.iter().any(|&(u, v)| reach.reaches(v, u));
        let mut added = false;
        for (ci, [a, b]) in sides.iter().enumerate() {
            if !live[ci] {
                continue;
            }
            let holds = match (closes(a), closes(b)) {
                (true, true) => return Ok(None),
                (true, false) => b,
                (false, true) => a,
                (false, false) => continue,
            };
            known.extend(holds.iter().filter(|&&(u, v)| !reach.reaches(u, v)));
            live[ci] = false;
            added = true;
        }
        if !added {
            break;
        }
    }
    known.sort_unstable();
    known.dedup();
    let residual: Vec<usize> = (0..sides.len()).filter(|&ci| live[ci]).collect();
    let edges = |list: &[(u32, u32)]| list.iter().map(|&(a, b)| Edge::new(a, b)).collect::<Vec<_>>();
    let mut all = known.clone();
    if !residual.is_empty() {
        let p = Polygraph {
            vertices,
            known: edges(&known),
            constraints: residual
                .iter()
                .map(|&ci| SConstraint { side_a: edges(&sides[ci][0]), side_b: edges(&sides[ci][1]) })
                .collect(),
        };
        let Solution::Acyclic(model) = solver::solve(&p).map_err(VerifyError::Solver)? else {
            return Ok(None);
        };
        for (&ci, choice) in residual.iter().zip(&model.choices) {
            all.extend(&sides[ci][side_index(*choice)]);
        }
    }
    match topo(vertices, &all)? {
        Ok(order) => Ok(Some((order.into_iter().filter(|&v| v < n).collect(), residual.len() as u64))),
        Err(_) => Ok(None),
    }
}

fn side_index(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

/// Solves every constraint at once: an order, or a cycle and the solver's core.
fn solve_all(g: &KnownGraph, known: Vec<(u32, u32)>, sides: &[SplitSides]) -> Result<SiSolved, VerifyError> {
    let (n, vertices) = (g.vertices, g.vertices * 2);
    if sides.is_empty() {
        return match topo(vertices, &known)? {
            Ok(order) => Ok(SiSolved::Acyclic {
                order: order.into_iter().filter(|&v| v < n).collect(),
                residual: sides.len() as u64,
            }),
            Err(cycle) => Ok(SiSolved::Cyclic { cycle: pairs(&cycle), core: Vec::new() }),
        };
    }
    let edges = |list: &[(u32, u32)]| list.iter().map(|&(a, b)| Edge::new(a, b)).collect::<Vec<_>>();
    let p = Polygraph {
        vertices,
        known: edges(&known),
        constraints: sides.iter().map(|[a, b]| SConstraint { side_a: edges(a), side_b: edges(b) }).collect(),
    };
    match solver::solve(&p).map_err(VerifyError::Solver)? {
        Solution::Acyclic(model) => {
            let mut all = known;
            for (s, choice) in sides.iter().zip(&model.choices) {
                all.extend(&s[side_index(*choice)]);
            }
            match topo(vertices, &all)? {
                Ok(order) => Ok(SiSolved::Acyclic {
                    order: order.into_iter().filter(|&v| v < n).collect(),
                    residual: sides.len() as u64,
                }),
                Err(_) => Err(VerifyError::Internal("the solver's model is cyclic".to_owned())),
            }
        }
        Solution::Cyclic(core) => {
            let core_ids: Vec<u32> = core.constraints.iter().map(|&c| c as u32).collect();
            if let Some(best) = core.cycles.iter().filter(|c| !c.is_empty()).min_by_key(|c| c.len()) {
                let cycle = best.iter().map(|e| (e.from, e.to)).collect();
                return Ok(SiSolved::Cyclic { cycle, core: core_ids });
            }
            for side in [Side::A, Side::B] {
                let mut all = known.clone();
                for &ci in &core_ids {
                    all.extend(&sides[ci as usize][side_index(side)]);
                }
                if let Err(cycle) = topo(vertices, &all)? {
                    return Ok(SiSolved::Cyclic { cycle: pairs(&cycle), core: core_ids });
                }
            }
            Err(VerifyError::Internal("the solver's core has an acyclic choice".to_owned()))
        }
    }
}

/// Where an edge of a reject's cycle comes from.
#[derive(Clone, Copy)]
enum Link {
    /// Known edge number `ei`.
    Known(u32),
    /// An edge of a constraint's side: the constraint, the side and the edge.
    Side(u32, Side, CEdge),
}

/// Explains SI rejects with serializability's certifier: the same edges, derivations and refutations, with
/// cycles found in the split graph.
pub(crate) struct SiEvidence<'c, 'a> {
    cert: &'c mut Certifier<'a>,
    encoding: &'c Encoding,
    /// Known edges by (from, to, anti-dependency), simplest first.
    known: HashMap<(u32, u32, bool), u32>,
}

impl<'c, 'a> SiEvidence<'c, 'a> {
    /// Evidence built with `cert`.
    pub(crate) fn new(cert: &'c mut Certifier<'a>, encoding: &'c Encoding) -> Self {
        let mut known: HashMap<(u32, u32, bool), u32> = HashMap::new();
        for (i, e) in cert.g.edges.iter().enumerate() {
            let slot = known.entry((e.from, e.to, is_rw(&e.origin))).or_insert(i as u32);
            if e.origin.priority() < cert.g.edges[*slot as usize].origin.priority() {
                *slot = i as u32;
            }
        }
        SiEvidence { cert, encoding, known }
    }

    fn n(&self) -> u32 {
        self.cert.g.vertices
    }

    /// The side edges of constraint `ci` under SI.
    fn side(&self, ci: u32, side: Side) -> Vec<CEdge> {
        let c = self.cert.constraints[ci as usize];
        let (c1, c2) = match side {
            Side::A => (c.first, c.second),
            Side::B => (c.second, c.first),
        };
        si_side(self.cert.norm, self.cert.chains, c1, c2)
    }

    /// What a split edge is, among the known edges and the sides of `core`'s constraints.
    fn link(&self, a: u32, b: u32, core: &[u32]) -> Option<Link> {
        let n = self.n();
        let (from, to, rw) = (a % n, b % n, b >= n);
        if let Some(&ei) = self.known.get(&(from, to, rw)) {
            return Some(Link::Known(ei));
        }
        core.iter().find_map(|&ci| {
            [Side::A, Side::B].into_iter().find_map(|side| {
                let edges = self.side(ci, side);
                edges
                    .into_iter()
                    .find(|e| e.from == from && e.to == to && e.rw == rw)
                    .map(|e| Link::Side(ci, side, e))
            })
        })
    }

    /// The anomaly for a cycle of the split graph found under some choice of `core`'s constraints, with a
    /// refutation by cases where one fits in [`MAX_SPLITS`] splits.
    pub(crate) fn anomaly(&mut self, cycle: &[(u32, u32)], core: &[u32]) -> Anomaly {
        let mut edges = Vec::new();
        for &(a, b) in cycle {
            match self.link(a, b, core) {
                Some(Link::Known(ei)) => edges.push(self.cert.known_edge(ei)),
                Some(Link::Side(ci, side, ce)) => {
                    let c = self.cert.constraints[ci as usize];
                    let (before, after) = match side {
                        Side::A => (c.first, c.second),
                        Side::B => (c.second, c.first),
                    };
                    let key = c.key;
                    let d = self.cert.memo_derivation((4, before, after), |s| {
                        s.push_derivation(key, before, after, Basis::Solver)
                    });
                    edges.push(self.cert.constraint_edge(
                        &ce,
                        d,
                        false,
                        "the order the solver's refutation chose",
                    ));
                }
                None => {}
            }
        }
        let mixed = self.encoding.readers.iter().any(|&r| r != Reader::Snapshot);
        let mut anomaly = name(classify(edges), mixed);
        if !core.is_empty() {
            anomaly.summary.push_str(&format!(
                " The SAT solver showed that no choice of order for the {} chain pair(s) in its core avoids such a \
                 cycle; this is the cycle for one choice.",
                core.len()
            ));
            anomaly.refutation = self.refutation(core);
        }
        anomaly
    }

    /// A proof by cases that no choice of the core's constraints avoids a split-graph cycle.
    fn refutation(&mut self, core: &[u32]) -> Option<Refutation> {
        let n = self.n();
        let mut adj: Vec<Vec<(u32, Option<usize>)>> = vec![Vec::new(); 2 * n as usize];
        for (a, b) in self.encoding.known(self.cert.g) {
            adj[a as usize].push((b, None));
        }
        let mut choices = Vec::new();
        let mut budget = MAX_SPLITS;
        let tree = self.refute(core, 0, &mut adj, &mut Vec::new(), &mut choices, &mut budget)?;
        Some(Refutation { choices, tree })
    }

    /// Splits on `core[depth]` until the assumed sides close a cycle. `assumed` holds, per assumed edge, the
    /// choice number and the edge.
    fn refute(
        &mut self,
        core: &[u32],
        depth: usize,
        adj: &mut Vec<Vec<(u32, Option<usize>)>>,
        assumed: &mut Vec<(usize, CEdge)>,
        choices: &mut Vec<Choice>,
        budget: &mut usize,
    ) -> Option<RefutationNode> {
        if let Some(cycle) = self.leaf_cycle(adj, assumed) {
            return Some(RefutationNode::Cycle { cycle });
        }
        if depth >= core.len() || *budget == 0 {
            return None;
        }
        *budget -= 1;
        let ci = core[depth];
        let c = self.cert.constraints[ci as usize];
        choices.push(Choice {
            key: key_name(self.cert.h, c.key),
            key_id: c.key.0,
            first: self.cert.chain_observed(c.first),
            second: self.cert.chain_observed(c.second),
        });
        let choice = choices.len() - 1;
        let mut branch = |s: &mut Self, side: Side, choices: &mut Vec<Choice>, budget: &mut usize| {
            let edges = s.side(ci, side);
            let mark = assumed.len();
            let mut pushed = Vec::new();
            for e in &edges {
                let added = s.encoding.split(e.from, e.to, e.rw, &mut pushed);
                for &(a, b) in &pushed[pushed.len() - added..] {
                    adj[a as usize].push((b, Some(assumed.len())));
                }
                assumed.push((choice, *e));
            }
            let node = s.refute(core, depth + 1, adj, assumed, choices, budget);
            assumed.truncate(mark);
            for &(a, _) in pushed.iter().rev() {
                adj[a as usize].pop();
            }
            node
        };
        let a = branch(self, Side::A, choices, budget)?;
        let b = branch(self, Side::B, choices, budget)?;
        Some(RefutationNode::Split {
            choice,
            first_before_second: Box::new(a),
            second_before_first: Box::new(b),
        })
    }

    /// The shortest split-graph cycle through an assumed edge, explained.
    fn leaf_cycle(
        &mut self,
        adj: &[Vec<(u32, Option<usize>)>],
        assumed: &[(usize, CEdge)],
    ) -> Option<Vec<CycleEdge>> {
        let n = self.n();
        let mut best: Option<Vec<(u32, u32, Option<usize>)>> = None;
        for (a, list) in adj.iter().enumerate() {
            for &(b, tag) in list {
                let Some(_) = tag else { continue };
                // A shortest path back from b to a closes a cycle through this assumed split edge.
                let mut via: Vec<Option<(u32, Option<usize>)>> = vec![None; adj.len()];
                let mut queue = VecDeque::from([b]);
                let mut seen = vec![false; adj.len()];
                seen[b as usize] = true;
                while let Some(v) = queue.pop_front() {
                    if v == a as u32 {
                        break;
                    }
                    for &(w, t) in &adj[v as usize] {
                        if !seen[w as usize] {
                            seen[w as usize] = true;
                            via[w as usize] = Some((v, t));
                            queue.push_back(w);
                        }
                    }
                }
                if !seen[a] {
                    continue;
                }
                let mut hops = vec![(a as u32, b, tag)];
                let mut back = Vec::new();
                let mut w = a as u32;
                while w != b {
                    let (v, t) = via[w as usize]?;
                    back.push((v, w, t));
                    w = v;
                }
                back.reverse();
                hops.extend(back);
                if best.as_ref().is_none_or(|x| hops.len() < x.len()) {
                    best = Some(hops);
                }
            }
        }
        let mut cycle = Vec::new();
        for (a, b, tag) in best? {
            match tag {
                Some(i) => {
                    let (choice, ce) = assumed[i];
                    let mut edge = self.cert.constraint_edge(&ce, 0, false, "assumed in this branch");
                    edge.derivation = None;
                    edge.assumption = Some(choice);
                    edge.reason =
                        edge.reason.replace(" [0]: assumed in this branch", " (assumed in this branch)");
                    cycle.push(edge);
                }
                None => {
                    let ei = *self.known.get(&(a % n, b % n, b >= n))?;
                    cycle.push(self.cert.known_edge(ei));
                }
            }
        }
        Some(cycle)
    }
}

/// SI's names for a cycle's anomaly: with one anti-dependency, a causality violation (Adya's G-SIb, "missed
/// effects"); with none, G0 or G1c; a four-cycle wr, rw, wr, rw, a long fork. Under `declared` (`mixed`) a
/// cycle may also have adjacent anti-dependencies out of serializable transactions, and keeps
/// serializability's name then (write skew, G2-item).
fn name(mut a: Anomaly, mixed: bool) -> Anomaly {
    let n = a.cycle.len();
    let rw = a.cycle.iter().filter(|e| e.kind == EdgeKind::Rw).count();
    let adjacent =
        (0..n).any(|i| a.cycle[i].kind == EdgeKind::Rw && a.cycle[(i + 1) % n].kind == EdgeKind::Rw);
    if rw == 1 {
        a.class = AnomalyClass::CausalityViolation;
    }
    if mixed {
        a.summary.push_str(
            ". Each transaction in it is held to the isolation level it asked for, and every anti-dependency \
             (rw) in it leaves a transaction whose level forbids that edge there, so no execution at the \
             declared levels explains it.",
        );
    } else if !adjacent {
        a.summary.push_str(". No two anti-dependencies (rw) are adjacent in it, so no snapshot explains it.");
    }
    a
}
