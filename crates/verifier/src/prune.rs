//! Stage 5: pruning to a fixpoint (Cobra §3.3, Fig. 3 lines 75–85; §5).
//!
//! In: the known graph and the constraints. Out: a larger known graph and fewer constraints, or a reject.
//! Each pass computes reachability in the known graph (with a `kernels` backend). If the graph has a cycle,
//! the history is rejected. A constraint side with an edge (u, v) where v already reaches u would close a
//! cycle, so the other side must hold: its edges join the known graph (tagged with the pass, so that a
//! certificate can cite only edges that existed when the decision was made) and the constraint is dropped.
//! If both sides would close a cycle, the history is rejected. Passes repeat until nothing changes.

use kernels::{Backend, Graph, KernelError, Reachability, reachability};
use solver::Side;

use crate::chains::Chains;
use crate::constraints::{CEdge, Constraint};
use crate::error::VerifyError;
use crate::known_graph::{KnownGraph, Origin};
use crate::normalize::Normalized;

/// A pruning decision: constraint `constraint` takes `chosen`, because `witness` (an edge of the other side)
/// would close a cycle with the known edges of passes up to `round`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decision {
    pub constraint: u32,
    pub chosen: Side,
    pub witness: CEdge,
    pub round: u32,
}

/// How pruning ended.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    /// No more progress; the live constraints go to the solver.
    Done,
    /// The known graph (edges of passes up to `round`) has this cycle of vertices.
    Cyclic { round: u32, cycle: Vec<u32> },
    /// Neither side of `constraint` can hold: `a` (of side A) and `b` (of side B) each close a cycle with
    /// known edges of passes up to `round`.
    Conflict { constraint: u32, a: CEdge, b: CEdge, round: u32 },
}

/// What pruning did.
#[derive(Default)]
pub(crate) struct PruneResult {
    pub decisions: Vec<Decision>,
    pub live: Vec<bool>,
    pub passes: u64,
    pub edges_added: u64,
    pub backend: Option<Backend>,
    /// The known graph as pruning left it, when its last pass added no edge; `None` otherwise.
    pub settled: Option<SettledGraph>,
}

/// The known graph's adjacency (each edge once) and reachability, as the last pass of pruning computed
/// them. A pass that adds no edge leaves the graph it read, so these are the final graph's: solving and
/// garbage collection read them instead of building both again (on TPC-C's rounds, where pruning decides
/// nothing, building them a second time was a sixteenth of verification).
pub(crate) struct SettledGraph {
    pub graph: Graph,
    pub reach: Box<dyn Reachability>,
}

/// The most passes; Cobra bounds them too (§5). The last pass's leftovers go to the solver.
const MAX_PASSES: u32 = 64;

/// Checks the known graph for a cycle and, when `enabled`, prunes to a fixpoint.
pub(crate) fn prune(
    g: &mut KnownGraph,
    constraints: &[Constraint],
    norm: &Normalized,
    chains: &Chains,
    enabled: bool,
    backend: Backend,
) -> Result<(Outcome, PruneResult), VerifyError> {
    let mut result = PruneResult { live: vec![true; constraints.len()], ..PruneResult::default() };
    let mut round = 0u32;
    loop {
        let pairs: Vec<(u32, u32)> = g.edges.iter().map(|e| (e.from, e.to)).collect();
        let graph =
            Graph::from_edges(g.vertices, &pairs).map_err(|e| VerifyError::Internal(e.to_string()))?;
        if !enabled {
            // Without pruning only the known graph's own acyclicity is checked here.
            return Ok(match graph.topo_order() {
                Err(KernelError::Cyclic { cycle }) => (Outcome::Cyclic { round, cycle }, result),
                Err(e) => return Err(VerifyError::Internal(e.to_string())),
                Ok(_) => (Outcome::Done, result),
            });
        }
        let reach = match reachability(&graph, Some(&g.sessions), backend) {
            Err(KernelError::Cyclic { cycle }) => return Ok((Outcome::Cyclic { round, cycle }, result)),
            Err(e) => return Err(VerifyError::Reachability(e)),
            Ok(r) => r,
        };
        result.backend = Some(reach.backend());
        result.passes += 1;
        let closes_cycle = |e: &CEdge| reach.reaches(e.to, e.from);
        let mut added = false;
        for (ci, c) in constraints.iter().enumerate() {
            if !result.live[ci] {
                continue;
            }
            let (side_a, side_b) = (c.side(norm, chains, Side::A), c.side(norm, chains, Side::B));
            let a = side_a.iter().find(|e| closes_cycle(e));
            let b = side_b.iter().find(|e| closes_cycle(e));
            let (chosen, witness, edges) = match (a, b) {
                (Some(a), Some(b)) => {
                    return Ok((Outcome::Conflict { constraint: ci as u32, a: *a, b: *b, round }, result));
                }
                (Some(a), None) => (Side::B, *a, &side_b),
                (None, Some(b)) => (Side::A, *b, &side_a),
                (None, None) => continue,
            };
            let decision = result.decisions.len() as u32;
            result.decisions.push(Decision { constraint: ci as u32, chosen, witness, round });
            for (i, e) in edges.iter().enumerate() {
                // An edge whose tail already reaches its head adds nothing to reachability or to any cycle;
                // leaving it out keeps the known graph (and the solver's input) small.
                if !reach.reaches(e.from, e.to) {
                    g.push(
                        e.from,
                        e.to,
                        Origin::Decided { decision, side: chosen, edge: i as u32 },
                        round + 1,
                    );
                    result.edges_added += 1;
                }
            }
            result.live[ci] = false;
            added = true;
        }
        round += 1;
        if !added {
            result.settled = Some(SettledGraph { graph, reach });
            return Ok((Outcome::Done, result));
        }
        if round >= MAX_PASSES {
            // Edges were added in the last allowed pass: one more acyclicity check.
            let pairs: Vec<(u32, u32)> = g.edges.iter().map(|e| (e.from, e.to)).collect();
            let graph =
                Graph::from_edges(g.vertices, &pairs).map_err(|e| VerifyError::Internal(e.to_string()))?;
            if let Err(KernelError::Cyclic { cycle }) = graph.topo_order() {
                return Ok((Outcome::Cyclic { round, cycle }, result));
            }
            return Ok((Outcome::Done, result));
        }
    }
}

#[cfg(test)]
mod tests {
    use history::HistoryBuilder;

    use crate::options::Options;
    use crate::pipeline::{Built, build_polygraph};
    use crate::solve::known_adjacency;

    /// Solving and collection read the graph and reachability of pruning's last pass in place of building
    /// them again, so that pass must have decided nothing: here the first pass decides a constraint, and
    /// what pruning keeps is the second pass's, with the decided edge.
    #[test]
    fn the_settled_graph_is_the_known_graph_pruning_ends_with() {
        // Cobra §3.3's example: T3 reads x from T1, so T2's write of x must precede T1's.
        let h = HistoryBuilder::new()
            .txn(1, |t| t.write("x", 1))
            .txn(2, |t| t.write("x", 2).write("y", 3))
            .txn(3, |t| t.read("x", 1).read("y", 3))
            .build();
        let (Built::Pruned { poly, settled: Some(settled), .. }, _) =
            build_polygraph(&h, &Options::default()).unwrap()
        else {
            panic!("pruning ends with a pass that decides nothing");
        };
        assert_eq!(poly.decisions.len(), 1);
        assert_eq!(settled.graph, known_adjacency(&poly.g).unwrap());
        let vertex = |i: usize| poly.norm.vertex_of[i].unwrap();
        assert!(settled.reach.reaches(vertex(1), vertex(0)), "T2 reaches T1 by the decided edge");
    }
}
