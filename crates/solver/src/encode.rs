//! The CNF encoding of a polygraph, in two flavours: with the acyclicity propagator, and "plain" with
//! transitive-closure clauses and no theory.
//!
//! Shared part, for the constraints in the chosen subset (Cobra §2.3, §3.4):
//! - each constraint `i` gets a choice variable `cᵢ` (true = side A) and an activation variable `aᵢ`;
//! - each distinct edge of a side that is not a known edge gets one edge variable `e`, shared by every
//!   constraint that mentions it;
//! - side A: `¬aᵢ ∨ ¬cᵢ ∨ e` for each of its edges; side B: `¬aᵢ ∨ cᵢ ∨ e`;
//! - a self-loop edge variable gets the unit clause `¬e`: a side with a self-loop is impossible.
//!
//! Constraints are switched on by assuming `aᵢ`, so after UNSAT the failed assumptions name a core, and the
//! same solver can be asked again about any subset while shrinking it.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use crate::engine::{Cadical, SatEngine};
use crate::propagator::AcyclicityPropagator;
use crate::{Edge, Polygraph, SolverError};

/// Variables of the shared part.
pub(crate) struct Layout {
    /// Constraint indices encoded, in order.
    pub subset: Vec<usize>,
    /// Choice variable per encoded constraint (parallel to `subset`).
    pub choice: Vec<i32>,
    /// Activation variable per encoded constraint (parallel to `subset`).
    pub act: Vec<i32>,
    /// Every edge variable: the edge and its variable.
    pub edges: Vec<(Edge, i32)>,
}

/// Allocates the shared variables and adds the shared clauses for the constraints `subset` of `p`.
fn encode_shared<E: SatEngine>(
    engine: &mut E,
    p: &Polygraph,
    subset: &[usize],
    known: &HashSet<Edge>,
    ord: &[u32],
) -> Layout {
    let mut edge_var: HashMap<Edge, i32> = HashMap::new();
    let mut edges = Vec::new();
    for &i in subset {
        let c = &p.constraints[i];
        for &e in c.side_a.iter().chain(&c.side_b) {
            if !known.contains(&e) && !edge_var.contains_key(&e) {
                let v = engine.new_var();
                edge_var.insert(e, v);
                edges.push((e, v));
            }
        }
    }
    let mut choice = Vec::with_capacity(subset.len());
    let mut act = Vec::with_capacity(subset.len());
    for &i in subset {
        let c = &p.constraints[i];
        let (ci, ai) = (engine.new_var(), engine.new_var());
        choice.push(ci);
        act.push(ai);
        for (side, sign) in [(&c.side_a, -1), (&c.side_b, 1)] {
            for e in side {
                if let Some(&v) = edge_var.get(e) {
                    engine.add_clause(&[-ai, sign * ci, v]);
                }
            }
        }
        // Try first the side with fewer edges against the known graph's topological order: in a history
        // that is serializable, that side is usually the right one.
        let backward = |s: &[Edge]| s.iter().filter(|e| ord[e.from as usize] >= ord[e.to as usize]).count();
        engine.set_phase(if backward(&c.side_a) <= backward(&c.side_b) { ci } else { -ci });
    }
    for &(e, v) in &edges {
        if e.from == e.to {
            engine.add_clause(&[-v]);
        }
        // Edges are only needed when a chosen side implies them.
        engine.set_phase(-v);
    }
    Layout { subset: subset.to_vec(), choice, act, edges }
}

/// A CaDiCaL solver with the acyclicity propagator, for the constraints `subset` of `p`. `known` must be
/// acyclic.
pub(crate) fn build_propagator(
    p: &Polygraph,
    subset: &[usize],
    known: &[Edge],
    budget: usize,
    record: bool,
) -> Result<(Cadical, Layout, Rc<RefCell<AcyclicityPropagator>>), SolverError> {
    let n = p.vertices as usize;
    let known_set: HashSet<Edge> = known.iter().copied().collect();
    let ord = crate::graph::topological_positions(n, known)
        .ok_or_else(|| SolverError::Engine("known graph is cyclic".into()))?;
    let mut engine = Cadical::new();
    let layout = encode_shared(&mut engine, p, subset, &known_set, &ord);
    let mut theory = AcyclicityPropagator::new(n, known, layout.edges.clone(), budget)
        .ok_or_else(|| SolverError::Engine("cannot build the propagator (cyclic known graph?)".into()))?;
    theory.set_recording(record);
    let theory = Rc::new(RefCell::new(theory));
    engine.attach_theory(theory.clone());
    for &(_, v) in &layout.edges {
        engine.observe(v);
    }
    Ok((engine, layout, theory))
}

/// The number of clauses [`build_plain`] would add for the constraints `subset` of `p`.
pub(crate) fn plain_clause_count(p: &Polygraph, subset: &[usize], known: &[Edge]) -> u64 {
    let (edges, vertices) = plain_graph(p, subset, known);
    let shared: u64 =
        subset.iter().map(|&i| (p.constraints[i].side_a.len() + p.constraints[i].side_b.len()) as u64).sum();
    edges.len() as u64 * (vertices.len() as u64 + 1) + vertices.len() as u64 + shared
}

/// The distinct edges the plain encoding reasons about (known ones and the subset's sides), and the vertices
/// they touch. Isolated vertices can lie on no cycle, so they get no reachability variables.
fn plain_graph(p: &Polygraph, subset: &[usize], known: &[Edge]) -> (Vec<Edge>, Vec<u32>) {
    let mut edges: Vec<Edge> = known.to_vec();
    for &i in subset {
        let c = &p.constraints[i];
        edges.extend(c.side_a.iter().chain(&c.side_b));
    }
    edges.sort_unstable();
    edges.dedup();
    let mut vertices: Vec<u32> = edges.iter().flat_map(|e| [e.from, e.to]).collect();
    vertices.sort_unstable();
    vertices.dedup();
    (edges, vertices)
}

/// A CaDiCaL solver with no theory: acyclicity is encoded with reachability variables `r(x, z)` ("x reaches
/// z") and transitive-closure clauses, the way the SAT baselines of Cobra §6 do. For each edge `x → y` with
/// literal `ℓ` (true for known edges): `ℓ → r(x, y)`, and for every vertex `z`, `ℓ ∧ r(y, z) → r(x, z)`;
/// for every vertex, `¬r(x, x)`. That is `|E|·|V|` clauses, so callers cap it with
/// [`plain_clause_count`] first.
pub(crate) fn build_plain(p: &Polygraph, subset: &[usize], known: &[Edge]) -> (Cadical, Layout) {
    let n = p.vertices as usize;
    let known_set: HashSet<Edge> = known.iter().copied().collect();
    let ord = crate::graph::topological_positions(n, known).unwrap_or_else(|| vec![0; n]);
    let mut engine = Cadical::new();
    let layout = encode_shared(&mut engine, p, subset, &known_set, &ord);
    let lit_of: HashMap<Edge, i32> = layout.edges.iter().copied().collect();
    let (edges, vertices) = plain_graph(p, subset, known);
    let mut reach: HashMap<(u32, u32), i32> = HashMap::new();
    let mut r = |engine: &mut Cadical, x: u32, z: u32| -> i32 {
        *reach.entry((x, z)).or_insert_with(|| engine.new_var())
    };
    for e in &edges {
        // Known edges have no literal: they always hold.
        let guard: Vec<i32> = match lit_of.get(e) {
            Some(&l) if !known_set.contains(e) => vec![-l],
            _ => vec![],
        };
        let rxy = r(&mut engine, e.from, e.to);
        let mut clause = guard.clone();
        clause.push(rxy);
        engine.add_clause(&clause);
        for &z in &vertices {
            let ryz = r(&mut engine, e.to, z);
            let rxz = r(&mut engine, e.from, z);
            let mut clause = guard.clone();
            clause.extend([-ryz, rxz]);
            engine.add_clause(&clause);
        }
    }
    for &x in &vertices {
        let rxx = r(&mut engine, x, x);
        engine.add_clause(&[-rxx]);
    }
    (engine, layout)
}
