//! Stage 6: solving (Cobra §3.4).
//!
//! In: the known graph and the constraints pruning left. Out: a serial order (accept), or a cycle under some
//! choice of the constraints in the solver's unsatisfiable core (reject). The encoding is the natural one:
//! each constraint is a choice between its two edge sets, and the solver (`solver` crate) searches for a
//! choice that keeps the graph acyclic.

use kernels::{Graph, KernelError};
use solver::{Constraint as SConstraint, Edge, Polygraph, Side, Solution};

use crate::chains::Chains;
use crate::constraints::{CEdge, Constraint};
use crate::error::VerifyError;
use crate::known_graph::KnownGraph;
use crate::normalize::Normalized;

/// The solver's answer, in the verifier's terms.
pub(crate) enum Solved {
    /// A topological order of the vertices under an acyclic choice.
    Acyclic { order: Vec<u32> },
    /// A cycle (as vertex pairs) under some choice of the core's constraints (indices into all constraints).
    Cyclic { cycle: Vec<(u32, u32)>, core: Vec<u32> },
}

/// A topological order of the graph, or a cycle of it.
pub(crate) fn topo(vertices: u32, edges: &[(u32, u32)]) -> Result<Result<Vec<u32>, Vec<u32>>, VerifyError> {
    topo_of(&graph(vertices, edges)?)
}

/// The graph of `edges`, each edge once.
fn graph(vertices: u32, edges: &[(u32, u32)]) -> Result<Graph, VerifyError> {
    Graph::from_edges(vertices, edges).map_err(|e| VerifyError::Internal(e.to_string()))
}

/// A topological order of `graph`, or a cycle of it.
fn topo_of(graph: &Graph) -> Result<Result<Vec<u32>, Vec<u32>>, VerifyError> {
    match graph.topo_order() {
        Ok(order) => Ok(Ok(order)),
        Err(KernelError::Cyclic { cycle }) => Ok(Err(cycle)),
        Err(e) => Err(VerifyError::Internal(e.to_string())),
    }
}

/// A cycle of vertices as its edges.
pub(crate) fn pairs(cycle: &[u32]) -> Vec<(u32, u32)> {
    (0..cycle.len()).map(|i| (cycle[i], cycle[(i + 1) % cycle.len()])).collect()
}

/// The known graph's adjacency, each edge once and in (from, to) order: built by a counting sort on `from`,
/// it costs far less than sorting the edges (TPC-C's rounds have millions; a global sort of them, then a
/// second building the graph, were most of solving). Garbage collection reads the same adjacency.
pub(crate) fn known_adjacency(g: &KnownGraph) -> Result<Graph, VerifyError> {
    let edges: Vec<(u32, u32)> = g.edges.iter().map(|e| (e.from, e.to)).collect();
    graph(g.vertices, &edges)
}

/// Solves what is left after pruning. `known_graph` is `g`'s [`known_adjacency`].
pub(crate) fn solve(
    known_graph: &Graph,
    g: &KnownGraph,
    constraints: &[Constraint],
    norm: &Normalized,
    chains: &Chains,
    live: &[bool],
) -> Result<Solved, VerifyError> {
    let residual: Vec<u32> = (0..constraints.len() as u32).filter(|&c| live[c as usize]).collect();
    if residual.is_empty() {
        return match topo_of(known_graph)? {
            Ok(order) => Ok(Solved::Acyclic { order }),
            Err(cycle) => Ok(Solved::Cyclic { cycle: pairs(&cycle), core: Vec::new() }),
        };
    }
    let known: Vec<(u32, u32)> =
        (0..g.vertices).flat_map(|v| known_graph.successors(v).iter().map(move |&w| (v, w))).collect();
    let side = |edges: &[CEdge]| edges.iter().map(|e| Edge::new(e.from, e.to)).collect::<Vec<_>>();
    let p = Polygraph {
        vertices: g.vertices,
        known: known.iter().map(|&(a, b)| Edge::new(a, b)).collect(),
        constraints: residual
            .iter()
            .map(|&c| {
                let c = &constraints[c as usize];
                SConstraint {
                    side_a: side(&c.side(norm, chains, Side::A)),
                    side_b: side(&c.side(norm, chains, Side::B)),
                }
            })
            .collect(),
    };
    match solver::solve(&p).map_err(VerifyError::Solver)? {
        Solution::Acyclic(model) => {
            let mut all = known;
            for (i, choice) in model.choices.iter().enumerate() {
                let Some(&ci) = residual.get(i) else { continue };
                let edges = constraints[ci as usize].side(norm, chains, *choice);
                all.extend(edges.iter().map(|e| (e.from, e.to)));
            }
            match topo(g.vertices, &all)? {
                Ok(order) => Ok(Solved::Acyclic { order }),
                Err(_) => Err(VerifyError::Internal("the solver's model is cyclic".to_owned())),
            }
        }
        Solution::Cyclic(core) => {
            let core_ids: Vec<u32> =
                core.constraints.iter().filter_map(|&i| residual.get(i).copied()).collect();
            if let Some(best) = core.cycles.iter().filter(|c| !c.is_empty()).min_by_key(|c| c.len()) {
                return Ok(Solved::Cyclic {
                    cycle: best.iter().map(|e| (e.from, e.to)).collect(),
                    core: core_ids,
                });
            }
            // No explicit cycle: every choice of the core is cyclic, so any one shows a cycle.
            for pick_a in [true, false] {
                let mut all = known.clone();
                for &ci in &core_ids {
                    let side = if pick_a { Side::A } else { Side::B };
                    let edges = constraints[ci as usize].side(norm, chains, side);
                    all.extend(edges.iter().map(|e| (e.from, e.to)));
                }
                if let Err(cycle) = topo(g.vertices, &all)? {
                    return Ok(Solved::Cyclic { cycle: pairs(&cycle), core: core_ids });
                }
            }
            Err(VerifyError::Internal("the solver's core has an acyclic choice".to_owned()))
        }
    }
}
