//! The acyclicity theory: an incremental cycle detector that a CDCL search drives through callbacks.
//!
//! Each edge of a constraint side that is not a known edge is a SAT variable ("edge variable"). The
//! propagator keeps the graph `G` of the known edges plus the edge variables assigned true, and maintains these
//! invariants between callbacks:
//!
//! 1. **Topological order.** `ord` is a topological order of `G` (Pearce–Kelly, "A dynamic topological sort
//!    algorithm for directed acyclic graphs", JEA 2006). Inserting `u → v` with `ord[u] < ord[v]` costs O(1);
//!    otherwise only the affected region `ord[v]..=ord[u]` is searched and renumbered.
//! 2. **No stale edges.** Every edge in `G` is assigned true in the SAT solver. An edge is recorded at the
//!    propagator's own decision level, which is never below the solver's level for it, so backtracking removes
//!    it no later than the solver unassigns it. Every reason and lemma is therefore built from literals that are
//!    really false, as IPASIR-UP requires. (The converse may lag: an edge the solver reassigns out of order may
//!    be missing from `G` for a while; that only weakens propagation, and the model check catches the rest.)
//! 3. **Conflicts.** An edge variable assigned true whose insertion would close a cycle is *not* inserted; it
//!    is kept as pending, and the cycle is returned as a lemma `¬e₁ ∨ … ∨ ¬eₖ` over the cycle's edge variables
//!    (known edges are always true and drop out). Pending edges are retried after backtracking.
//! 4. **Propagation.** After inserting `u → v`, an unassigned edge variable `x → y` with `x` reachable from `v`
//!    and `y` reaching `u` would close a cycle, so it is propagated false. Its reason is the path
//!    `y ⇝ u → v ⇝ x` plus the edge itself. The searches are bounded by a work budget, so propagation may be
//!    incomplete (never unsound); conflicts are always detected on insertion.
//! 5. **Final check.** A complete model is re-checked from scratch (Kahn's algorithm over the known edges and the
//!    model's true edges); a cycle found there becomes one more lemma. So a model the search accepts is acyclic
//!    even if the incremental state were wrong.
//!
//! Every lemma and reason is a real cycle of the polygraph's edges, so every clause the theory adds is valid.

use std::collections::{HashMap, VecDeque};

use crate::Edge;
use crate::graph::{find_cycle, is_acyclic, topological_positions};

/// A theory that a CDCL SAT engine drives, in the shape of IPASIR-UP (Fazekas et al., SAT 2023). Literals
/// are DIMACS integers. Implementations must not panic; the engine adapter still catches panics as a last line
/// of defence.
pub trait Theory {
    /// The engine assigned `lit`. The same assignment may be reported more than once.
    fn notify_assignment(&mut self, lit: i32);
    /// The engine opened a new decision level.
    fn notify_new_decision_level(&mut self);
    /// The engine backtracked to `new_level`; every assignment above it is undone.
    fn notify_backtrack(&mut self, new_level: usize);
    /// A literal implied by the theory under the current assignment, if any.
    fn propagate(&mut self) -> Option<i32>;
    /// The reason clause for a literal that [`Theory::propagate`] returned: it contains `lit`, and all its
    /// other literals are false. `None` if the theory has no such reason (an internal error).
    fn reason(&mut self, lit: i32) -> Option<Vec<i32>>;
    /// A clause the theory wants added now (a conflict lemma), if any.
    fn next_lemma(&mut self) -> Option<Vec<i32>>;
    /// Whether the complete assignment `model` (one literal per observed variable) is consistent with the
    /// theory. When it is not, a lemma excluding it must be available from [`Theory::next_lemma`].
    fn check_model(&mut self, model: &[i32]) -> bool;
}

/// Counters of what the theory did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TheoryStats {
    /// Cycles closed by an insertion (conflict lemmas).
    pub conflicts: u64,
    /// Edge variables propagated false.
    pub propagations: u64,
    /// Insertions that needed a Pearce–Kelly reordering.
    pub reorders: u64,
    /// Complete models checked, and of those rejected.
    pub model_checks: u64,
    /// Complete models that the final check rejected.
    pub model_rejections: u64,
    /// Vertices visited by Pearce–Kelly reordering searches.
    pub order_visits: u64,
    /// Vertices visited by propagation searches.
    pub propagation_visits: u64,
}

const NONE: u32 = u32::MAX;

/// An arc of the current graph: the other endpoint, and the edge variable's index (`NONE` for known edges).
#[derive(Clone, Copy, Debug)]
struct Arc {
    other: u32,
    edge: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EdgeState {
    Unassigned,
    False,
    /// True and in the graph.
    Inserted,
    /// True, but its insertion would close a cycle; a lemma was issued.
    Pending,
}

/// The acyclicity propagator over a fixed set of vertices, known edges and edge variables.
pub struct AcyclicityPropagator {
    known: Vec<Edge>,
    /// Edge variables: the edge and its (positive) SAT variable.
    edges: Vec<(Edge, i32)>,
    /// Edge index by variable (`NONE` for variables that are not edge variables).
    edge_of_var: Vec<u32>,
    edge_index: HashMap<Edge, u32>,
    state: Vec<EdgeState>,
    /// Whether the edge's negation is queued for propagation.
    queued: Vec<bool>,
    ord: Vec<u32>,
    out: Vec<Vec<Arc>>,
    inn: Vec<Vec<Arc>>,
    /// Every edge variable by its tail, for propagation.
    out_vars: Vec<Vec<u32>>,
    trail: Vec<u32>,
    levels: Vec<usize>,
    pending: Vec<u32>,
    /// Set by a backtrack that left pending edges assigned: their cycle may be broken now.
    retry: bool,
    lemmas: VecDeque<Vec<i32>>,
    props: VecDeque<i32>,
    /// For each propagated edge variable (by edge index), its cycle as (tail, edge tag) steps, the propagated
    /// edge first.
    reasons: Vec<Vec<(u32, u32)>>,
    record: bool,
    cycles: Vec<Vec<Edge>>,
    budget: usize,
    stats: TheoryStats,
    // Search scratch space, stamped by epoch so it is never cleared.
    epoch: u32,
    fstamp: Vec<u32>,
    fparent: Vec<(u32, u32)>,
    bstamp: Vec<u32>,
    bparent: Vec<(u32, u32)>,
    stack: Vec<u32>,
}

impl AcyclicityPropagator {
    /// A propagator over `n` vertices whose known edges are `known` (which must form a DAG) and whose edge
    /// variables are `edges`, each a distinct, non-known edge with its positive variable. `budget` bounds the
    /// vertices each propagation search visits (0 turns propagation off). Returns `None` if `known` is cyclic,
    /// an endpoint is not below `n`, or a variable is not positive.
    pub fn new(n: usize, known: &[Edge], edges: Vec<(Edge, i32)>, budget: usize) -> Option<Self> {
        let in_range = |e: &Edge| (e.from as usize) < n && (e.to as usize) < n;
        if !known.iter().all(in_range) || !edges.iter().all(|(e, v)| in_range(e) && *v > 0) {
            return None;
        }
        let ord = topological_positions(n, known)?;
        let mut out = vec![Vec::new(); n];
        let mut inn = vec![Vec::new(); n];
        for e in known {
            out[e.from as usize].push(Arc { other: e.to, edge: NONE });
            inn[e.to as usize].push(Arc { other: e.from, edge: NONE });
        }
        let mut out_vars = vec![Vec::new(); n];
        let max_var = edges.iter().map(|&(_, v)| v.unsigned_abs() as usize).max().unwrap_or(0);
        let mut edge_of_var = vec![NONE; max_var + 1];
        let mut edge_index = HashMap::with_capacity(edges.len());
        for (i, &(e, var)) in edges.iter().enumerate() {
            out_vars[e.from as usize].push(i as u32);
            edge_of_var[var.unsigned_abs() as usize] = i as u32;
            edge_index.insert(e, i as u32);
        }
        let m = edges.len();
        Some(AcyclicityPropagator {
            known: known.to_vec(),
            edges,
            edge_of_var,
            edge_index,
            state: vec![EdgeState::Unassigned; m],
            queued: vec![false; m],
            ord,
            out,
            inn,
            out_vars,
            trail: Vec::new(),
            levels: Vec::new(),
            pending: Vec::new(),
            retry: false,
            lemmas: VecDeque::new(),
            props: VecDeque::new(),
            reasons: vec![Vec::new(); m],
            record: false,
            cycles: Vec::new(),
            budget,
            stats: TheoryStats::default(),
            epoch: 0,
            fstamp: vec![0; n],
            fparent: vec![(NONE, NONE); n],
            bstamp: vec![0; n],
            bparent: vec![(NONE, NONE); n],
            stack: Vec::new(),
        })
    }

    /// Record every cycle that a lemma or a propagation stands for (see [`Self::cycles`]).
    pub fn set_recording(&mut self, record: bool) {
        self.record = record;
    }

    /// The cycles recorded so far: each lemma and each propagation's reason, as edges.
    pub fn cycles(&self) -> &[Vec<Edge>] {
        &self.cycles
    }

    /// The counters.
    pub fn stats(&self) -> TheoryStats {
        self.stats
    }

    fn next_epoch(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.fstamp.fill(0);
            self.bstamp.fill(0);
            self.epoch = 1;
        }
        self.epoch
    }

    fn edge(&self, lit: i32) -> Option<u32> {
        edge_index_of(&self.edge_of_var, lit)
    }

    fn lit_of(&self, edge: u32) -> i32 {
        self.edges[edge as usize].1
    }

    /// The clause `¬e₁ ∨ … ∨ ¬eₖ` over the edge variables among `edges`.
    fn clause_of(&self, edges: &[u32]) -> Vec<i32> {
        edges.iter().filter(|&&e| e != NONE).map(|&e| -self.lit_of(e)).collect()
    }

    fn record_cycle(&mut self, cycle: Vec<Edge>) {
        if self.record {
            self.cycles.push(cycle);
        }
    }

    /// Inserts edge variable `ei` (assigned true) into the graph, or issues a cycle lemma and keeps it
    /// pending.
    fn insert(&mut self, ei: u32) {
        let (e, _) = self.edges[ei as usize];
        let (u, v) = (e.from, e.to);
        if u == v {
            self.conflict(vec![(u, ei)], ei);
            return;
        }
        if self.ord[u as usize] > self.ord[v as usize] {
            // Pearce–Kelly: forward from v within ord < ord[u]; reaching u closes a cycle.
            let ub = self.ord[u as usize];
            let epoch = self.next_epoch();
            self.fstamp[v as usize] = epoch;
            self.stack.clear();
            self.stack.push(v);
            let mut delta_f = vec![v];
            while let Some(w) = self.stack.pop() {
                for k in 0..self.out[w as usize].len() {
                    let a = self.out[w as usize][k];
                    let x = a.other;
                    if x == u {
                        // The cycle u → v ⇝ w → u, as (tail, edge tag) steps.
                        let mut steps = vec![(w, a.edge)];
                        let mut y = w;
                        while y != v {
                            let (p, tag) = self.fparent[y as usize];
                            steps.push((p, tag));
                            y = p;
                        }
                        steps.push((u, ei));
                        steps.reverse();
                        self.conflict(steps, ei);
                        return;
                    }
                    if self.fstamp[x as usize] != epoch && self.ord[x as usize] < ub {
                        self.fstamp[x as usize] = epoch;
                        self.fparent[x as usize] = (w, a.edge);
                        self.stack.push(x);
                        delta_f.push(x);
                    }
                }
            }
            // Backward from u within ord > ord[v].
            let lb = self.ord[v as usize];
            self.bstamp[u as usize] = epoch;
            self.stack.push(u);
            let mut delta_b = vec![u];
            while let Some(w) = self.stack.pop() {
                for k in 0..self.inn[w as usize].len() {
                    let x = self.inn[w as usize][k].other;
                    if self.bstamp[x as usize] != epoch && self.ord[x as usize] > lb {
                        self.bstamp[x as usize] = epoch;
                        self.stack.push(x);
                        delta_b.push(x);
                    }
                }
            }
            self.stats.order_visits += (delta_f.len() + delta_b.len()) as u64;
            // Renumber: the backward region keeps its relative order and goes first, then the forward one.
            delta_b.sort_unstable_by_key(|&x| self.ord[x as usize]);
            delta_f.sort_unstable_by_key(|&x| self.ord[x as usize]);
            let mut pool: Vec<u32> = delta_b.iter().chain(&delta_f).map(|&x| self.ord[x as usize]).collect();
            pool.sort_unstable();
            for (&x, &o) in delta_b.iter().chain(&delta_f).zip(&pool) {
                self.ord[x as usize] = o;
            }
            self.stats.reorders += 1;
        }
        self.out[u as usize].push(Arc { other: v, edge: ei });
        self.inn[v as usize].push(Arc { other: u, edge: ei });
        self.state[ei as usize] = EdgeState::Inserted;
        if self.budget > 0 {
            self.propagate_after(u, v, ei);
        }
    }

    /// Issues the lemma for a cycle given as (tail, edge tag) steps, and leaves `ei` pending.
    fn conflict(&mut self, steps: Vec<(u32, u32)>, ei: u32) {
        self.stats.conflicts += 1;
        let tags: Vec<u32> = steps.iter().map(|&(_, t)| t).collect();
        self.lemmas.push_back(self.clause_of(&tags));
        if self.record {
            let cycle = self.steps_to_edges(&steps);
            self.record_cycle(cycle);
        }
        self.state[ei as usize] = EdgeState::Pending;
        self.pending.push(ei);
    }

    /// Turns (tail, tag) steps of a closed walk into edges: each step's head is the next step's tail.
    fn steps_to_edges(&self, steps: &[(u32, u32)]) -> Vec<Edge> {
        (0..steps.len())
            .map(|i| {
                let (from, tag) = steps[i];
                if tag == NONE {
                    Edge::new(from, steps[(i + 1) % steps.len()].0)
                } else {
                    self.edges[tag as usize].0
                }
            })
            .collect()
    }

    /// Propagates false every unassigned edge variable that would now close a cycle through `u → v`, within
    /// the work budget.
    fn propagate_after(&mut self, u: u32, v: u32, ei: u32) {
        let ord_u = self.ord[u as usize];
        let epoch = self.next_epoch();
        let mut candidates: Vec<u32> = Vec::new();
        let mut min_y = u32::MAX;
        self.fstamp[v as usize] = epoch;
        self.fparent[v as usize] = (NONE, NONE);
        self.stack.clear();
        self.stack.push(v);
        let mut visited = 1usize;
        'forward: while let Some(w) = self.stack.pop() {
            for &c in &self.out_vars[w as usize] {
                if self.state[c as usize] == EdgeState::Unassigned && !self.queued[c as usize] {
                    let y = self.edges[c as usize].0.to;
                    if self.ord[y as usize] <= ord_u {
                        candidates.push(c);
                        min_y = min_y.min(self.ord[y as usize]);
                    }
                }
            }
            for k in 0..self.out[w as usize].len() {
                let a = self.out[w as usize][k];
                let x = a.other;
                if self.fstamp[x as usize] != epoch {
                    self.fstamp[x as usize] = epoch;
                    self.fparent[x as usize] = (w, a.edge);
                    self.stack.push(x);
                    visited += 1;
                    if visited > self.budget {
                        break 'forward;
                    }
                }
            }
        }
        self.stack.clear();
        self.stats.propagation_visits += visited as u64;
        if candidates.is_empty() {
            return;
        }
        // Backward from u, only through vertices ordered at or after the earliest candidate head: a path
        // y ⇝ u only passes through such vertices.
        self.bstamp[u as usize] = epoch;
        self.bparent[u as usize] = (NONE, NONE);
        self.stack.push(u);
        let mut visited = 1usize;
        'backward: while let Some(w) = self.stack.pop() {
            for k in 0..self.inn[w as usize].len() {
                let a = self.inn[w as usize][k];
                let x = a.other;
                if self.bstamp[x as usize] != epoch && self.ord[x as usize] >= min_y {
                    self.bstamp[x as usize] = epoch;
                    self.bparent[x as usize] = (w, a.edge);
                    self.stack.push(x);
                    visited += 1;
                    if visited > self.budget {
                        break 'backward;
                    }
                }
            }
        }
        self.stack.clear();
        self.stats.propagation_visits += visited as u64;
        for c in candidates {
            let (ce, var) = self.edges[c as usize];
            if self.bstamp[ce.to as usize] != epoch || self.queued[c as usize] {
                continue;
            }
            // The cycle x → y ⇝ u → v ⇝ x, as (tail, edge tag) steps.
            let mut steps = vec![(ce.from, c)];
            let mut y = ce.to;
            while y != u {
                let (next, tag) = self.bparent[y as usize];
                steps.push((y, tag));
                y = next;
            }
            steps.push((u, ei));
            let mut back = Vec::new();
            let mut x = ce.from;
            while x != v {
                let (p, tag) = self.fparent[x as usize];
                back.push((p, tag));
                x = p;
            }
            back.reverse();
            steps.extend(back);
            self.queued[c as usize] = true;
            self.props.push_back(-var);
            if self.record {
                // Record at propagation time: CaDiCaL may rely on a propagation without ever asking for its
                // reason, so recording only requested reasons can miss a cycle the refutation depends on.
                let cycle = self.steps_to_edges(&steps);
                self.record_cycle(cycle);
            }
            self.reasons[c as usize] = steps;
            self.stats.propagations += 1;
        }
    }

    fn undo(&mut self, ei: u32) {
        let (e, _) = self.edges[ei as usize];
        match self.state[ei as usize] {
            EdgeState::Inserted => {
                remove_arc(&mut self.out[e.from as usize], ei);
                remove_arc(&mut self.inn[e.to as usize], ei);
            }
            EdgeState::Pending => {
                if let Some(p) = self.pending.iter().rposition(|&x| x == ei) {
                    self.pending.swap_remove(p);
                }
            }
            EdgeState::False | EdgeState::Unassigned => {}
        }
        self.state[ei as usize] = EdgeState::Unassigned;
    }

    /// Retries pending edges whose cycle may have been broken by backtracking.
    fn retry_pending(&mut self) {
        if !std::mem::take(&mut self.retry) || self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        for ei in pending {
            if self.state[ei as usize] == EdgeState::Pending {
                self.state[ei as usize] = EdgeState::Unassigned;
                self.insert(ei);
            }
        }
    }
}

/// The edge index of `lit`'s variable, if it is an edge variable.
fn edge_index_of(edge_of_var: &[u32], lit: i32) -> Option<u32> {
    edge_of_var.get(lit.unsigned_abs() as usize).copied().filter(|&e| e != NONE)
}

fn remove_arc(list: &mut Vec<Arc>, ei: u32) {
    if let Some(p) = list.iter().rposition(|a| a.edge == ei) {
        list.swap_remove(p);
    }
}

impl Theory for AcyclicityPropagator {
    fn notify_assignment(&mut self, lit: i32) {
        let Some(ei) = self.edge(lit) else { return };
        if self.state[ei as usize] != EdgeState::Unassigned {
            return;
        }
        self.trail.push(ei);
        if lit < 0 {
            self.state[ei as usize] = EdgeState::False;
        } else {
            self.insert(ei);
        }
    }

    fn notify_new_decision_level(&mut self) {
        self.levels.push(self.trail.len());
    }

    fn notify_backtrack(&mut self, new_level: usize) {
        while self.levels.len() > new_level {
            let Some(start) = self.levels.pop() else { break };
            while self.trail.len() > start {
                if let Some(ei) = self.trail.pop() {
                    self.undo(ei);
                }
            }
        }
        self.retry = !self.pending.is_empty();
        for lit in self.props.drain(..) {
            if let Some(ei) = edge_index_of(&self.edge_of_var, lit) {
                self.queued[ei as usize] = false;
            }
        }
    }

    fn propagate(&mut self) -> Option<i32> {
        self.retry_pending();
        // A conflict first: propagating further under a falsified lemma is wasted work.
        if !self.lemmas.is_empty() {
            return None;
        }
        while let Some(lit) = self.props.pop_front() {
            let ei = self.edge(lit)?;
            self.queued[ei as usize] = false;
            if self.state[ei as usize] == EdgeState::Unassigned {
                return Some(lit);
            }
        }
        None
    }

    fn reason(&mut self, lit: i32) -> Option<Vec<i32>> {
        let steps = self.reasons.get(self.edge(lit)? as usize)?;
        if steps.is_empty() {
            return None;
        }
        let tags: Vec<u32> = steps.iter().skip(1).map(|&(_, t)| t).collect();
        let mut clause = vec![lit];
        clause.extend(self.clause_of(&tags));
        Some(clause)
    }

    fn next_lemma(&mut self) -> Option<Vec<i32>> {
        self.lemmas.pop_front()
    }

    fn check_model(&mut self, model: &[i32]) -> bool {
        self.stats.model_checks += 1;
        let mut graph = self.known.clone();
        for &lit in model {
            if lit > 0
                && let Some(ei) = self.edge(lit)
            {
                graph.push(self.edges[ei as usize].0);
            }
        }
        let n = self.ord.len();
        if is_acyclic(n, graph.iter().copied()) {
            return true;
        }
        self.stats.model_rejections += 1;
        let Some(cycle) = find_cycle(n, &graph) else { return true };
        let clause: Vec<i32> =
            cycle.iter().filter_map(|e| self.edge_index.get(e).map(|&ei| -self.lit_of(ei))).collect();
        self.lemmas.push_back(clause);
        self.record_cycle(cycle);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Checks the invariants from the module docs against the simulated solver's assignment.
    fn check_invariants(t: &AcyclicityPropagator, value: &[i8]) {
        let n = t.ord.len();
        // `ord` is a permutation.
        let mut seen = vec![false; n];
        for &o in &t.ord {
            assert!(!std::mem::replace(&mut seen[o as usize], true), "ord is not a permutation");
        }
        // `ord` is a topological order of the known edges plus the inserted ones, and the adjacency lists hold
        // exactly those.
        for (v, arcs) in t.out.iter().enumerate() {
            for a in arcs {
                assert!(t.ord[v] < t.ord[a.other as usize], "arc {v}->{} against the order", a.other);
                if a.edge != NONE {
                    assert_eq!(t.state[a.edge as usize], EdgeState::Inserted);
                }
            }
        }
        for (ei, &(e, var)) in t.edges.iter().enumerate() {
            let solver_true = value[var as usize] > 0;
            match t.state[ei] {
                EdgeState::Inserted => {
                    assert!(solver_true, "stale edge {e:?} in the graph");
                    assert!(t.out[e.from as usize].iter().any(|a| a.edge == ei as u32));
                    assert!(t.inn[e.to as usize].iter().any(|a| a.edge == ei as u32));
                }
                EdgeState::Pending => assert!(solver_true && t.pending.contains(&(ei as u32))),
                EdgeState::False => assert!(value[var as usize] < 0),
                EdgeState::Unassigned => {
                    assert!(!t.out[e.from as usize].iter().any(|a| a.edge == ei as u32));
                }
            }
        }
    }

    /// A clause is falsified except for `except`.
    fn all_false_but(clause: &[i32], value: &[i8], except: Option<i32>) -> bool {
        clause.iter().all(|&l| Some(l) == except || value[l.unsigned_abs() as usize] == -(l.signum() as i8))
    }

    /// A closed walk over known edges and true edge variables.
    fn is_cycle_of(t: &AcyclicityPropagator, cycle: &[Edge]) -> bool {
        crate::graph::is_closed_walk(cycle)
            && cycle.iter().all(|e| t.known.contains(e) || t.edge_index.contains_key(e))
    }

    /// Drives the propagator like a CDCL solver would, at random: decisions, assignments, theory
    /// propagations, conflicts, and backtracking, checking every invariant, reason and lemma on the way.
    #[test]
    fn random_trails_keep_every_invariant() {
        for seed in 0..300u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let n = rng.gen_range(2..=9u32);
            let perm: Vec<u32> = {
                let mut p: Vec<u32> = (0..n).collect();
                for i in (1..p.len()).rev() {
                    p.swap(i, rng.gen_range(0..=i));
                }
                p
            };
            let mut known = Vec::new();
            for _ in 0..rng.gen_range(0..n) {
                let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
                if perm[a as usize] < perm[b as usize] {
                    known.push(Edge::new(a, b));
                }
            }
            let mut edges: Vec<(Edge, i32)> = Vec::new();
            for _ in 0..rng.gen_range(1..=14) {
                let e = Edge::new(rng.gen_range(0..n), rng.gen_range(0..n));
                if !known.contains(&e) && !edges.iter().any(|&(x, _)| x == e) {
                    edges.push((e, edges.len() as i32 + 1));
                }
            }
            let m = edges.len();
            let budget = [0, 1, 3, 1000][rng.gen_range(0..4)];
            let mut t = AcyclicityPropagator::new(n as usize, &known, edges, budget).expect("acyclic known");
            t.set_recording(true);
            // The simulated solver: value per var, and its trail by level.
            let mut value = vec![0i8; m + 1];
            let mut trail: Vec<Vec<i32>> = vec![Vec::new()];
            let assign =
                |t: &mut AcyclicityPropagator, value: &mut Vec<i8>, trail: &mut Vec<Vec<i32>>, l: i32| {
                    value[l.unsigned_abs() as usize] = l.signum() as i8;
                    if let Some(last) = trail.last_mut() {
                        last.push(l);
                    }
                    t.notify_assignment(l);
                };
            let backtrack =
                |t: &mut AcyclicityPropagator, value: &mut Vec<i8>, trail: &mut Vec<Vec<i32>>, to| {
                    while trail.len() > to + 1 {
                        for l in trail.pop().unwrap_or_default() {
                            value[l.unsigned_abs() as usize] = 0;
                        }
                    }
                    t.notify_backtrack(to);
                };
            for _step in 0..200 {
                // Lemmas first: each is falsified now; a solver backtracks below the conflict.
                if let Some(lemma) = t.next_lemma() {
                    assert!(
                        all_false_but(&lemma, &value, None),
                        "seed {seed}: lemma {lemma:?} not falsified"
                    );
                    // Every assignment is a decision at its own level, so a falsified lemma has a literal above
                    // level 0, and the solver backtracks below the conflict level.
                    assert!(trail.len() > 1);
                    let to = rng.gen_range(0..trail.len() - 1);
                    backtrack(&mut t, &mut value, &mut trail, to);
                    // Lemmas queued before a backtrack need no longer be falsified; they are still cycles, and
                    // an engine may take them as ordinary clauses.
                    while t.next_lemma().is_some() {}
                    check_invariants(&t, &value);
                    continue;
                }
                if let Some(lit) = t.propagate() {
                    let reason = t.reason(lit).expect("a reason for every propagation");
                    assert!(reason.contains(&lit));
                    assert!(all_false_but(&reason, &value, Some(lit)), "seed {seed}: reason {reason:?}");
                    if value[lit.unsigned_abs() as usize] == 0 {
                        assign(&mut t, &mut value, &mut trail, lit);
                    }
                    check_invariants(&t, &value);
                    continue;
                }
                let unassigned: Vec<i32> = (1..=m as i32).filter(|&v| value[v as usize] == 0).collect();
                if unassigned.is_empty() || rng.gen_ratio(1, 10) {
                    let to = rng.gen_range(0..trail.len());
                    backtrack(&mut t, &mut value, &mut trail, to);
                    while t.next_lemma().is_some() {}
                } else {
                    trail.push(Vec::new());
                    t.notify_new_decision_level();
                    let v = unassigned[rng.gen_range(0..unassigned.len())];
                    // Mostly true, so cycles happen.
                    let lit = if rng.gen_ratio(3, 4) { v } else { -v };
                    assign(&mut t, &mut value, &mut trail, lit);
                    // Sometimes repeat a notification, as CaDiCaL does after some backtracks.
                    if rng.gen_ratio(1, 8) {
                        t.notify_assignment(lit);
                    }
                }
                check_invariants(&t, &value);
            }
            for c in t.cycles() {
                assert!(is_cycle_of(&t, c), "seed {seed}: recorded {c:?} is not a cycle");
            }
        }
    }

    #[test]
    fn complete_cyclic_model_is_rejected_with_a_lemma() {
        let known = [Edge::new(0, 1)];
        let edges = vec![(Edge::new(1, 2), 1), (Edge::new(2, 0), 2), (Edge::new(0, 2), 3)];
        let mut t = AcyclicityPropagator::new(3, &known, edges, 16).expect("acyclic");
        assert!(t.check_model(&[1, -2, 3]));
        assert!(t.next_lemma().is_none());
        assert!(!t.check_model(&[1, 2, -3]));
        let mut lemma = t.next_lemma().expect("lemma");
        lemma.sort();
        assert_eq!(lemma, vec![-2, -1]);
    }

    #[test]
    fn closing_edge_is_propagated_false_with_the_path_as_reason() {
        // Known 0 -> 1; once 1 -> 2 holds, 2 -> 0 would close 0 -> 1 -> 2 -> 0.
        let known = [Edge::new(0, 1)];
        let edges = vec![(Edge::new(1, 2), 1), (Edge::new(2, 0), 2)];
        let mut t = AcyclicityPropagator::new(3, &known, edges, 16).expect("acyclic");
        t.notify_new_decision_level();
        t.notify_assignment(1);
        assert_eq!(t.propagate(), Some(-2));
        let mut reason = t.reason(-2).expect("reason");
        reason.sort();
        assert_eq!(reason, vec![-2, -1]);
        // After backtracking, the propagation is gone and the edge can be inserted.
        t.notify_backtrack(0);
        assert_eq!(t.propagate(), None);
        t.notify_new_decision_level();
        t.notify_assignment(2);
        assert_eq!(t.propagate(), Some(-1));
    }
}
