//! Independent re-checks: the brute-force oracle, model checking, and core checking.
//!
//! Nothing here uses the SAT engine or the propagator, so these functions can judge their answers. The oracle
//! is a plain backtracking search: choose a side for each constraint in order and stop extending a partial
//! choice as soon as its edges close a cycle. Adding edges never removes a cycle, so that cut is exact.

use std::collections::HashMap;

use crate::graph::{find_cycle, is_acyclic, is_closed_walk};
use crate::{Constraint, Core, Edge, Model, Polygraph, Side};

/// The largest core, in constraints, that [`check_core_brute_force`] will re-check. Its search visits up to
/// `2^k` choices for each of the `k + 1` questions it asks, so larger cores are refused rather than run.
pub const CORE_CHECK_LIMIT: usize = 18;

/// Whether every endpoint of every edge of `p` is below `p.vertices`.
pub(crate) fn edges_in_range(p: &Polygraph) -> bool {
    let ok = |e: &Edge| e.from < p.vertices && e.to < p.vertices;
    p.known.iter().all(ok) && p.constraints.iter().all(|c| c.side_a.iter().chain(&c.side_b).all(ok))
}

/// The side's edges of constraint `c` for choice `s`.
pub(crate) fn side(c: &Constraint, s: Side) -> &[Edge] {
    match s {
        Side::A => &c.side_a,
        Side::B => &c.side_b,
    }
}

/// A choice of one side per constraint that leaves the graph acyclic, found by exhaustive search, or `None`
/// if there is none (or if an edge names a vertex outside `0..vertices`).
///
/// This is the test oracle: exponential in the number of constraints, and meant for small inputs.
pub fn brute_force(p: &Polygraph) -> Option<Model> {
    if !edges_in_range(p) {
        return None;
    }
    let small = Compact::new(p, &(0..p.constraints.len()).collect::<Vec<_>>(), &p.known);
    let mut choices = Vec::with_capacity(p.constraints.len());
    let mut edges = small.known.clone();
    search(&small, &mut choices, &mut edges, &mut |_| {}).then_some(Model { choices })
}

/// Depth-first search over the constraints of `small` in order. Returns true with `choices` filled when an
/// acyclic choice exists. `on_cycle` sees the cycle that cuts each dead branch.
fn search(
    small: &Compact,
    choices: &mut Vec<Side>,
    edges: &mut Vec<Edge>,
    on_cycle: &mut dyn FnMut(Vec<Edge>),
) -> bool {
    if !is_acyclic(small.n, edges.iter().copied()) {
        if let Some(c) = find_cycle(small.n, edges) {
            on_cycle(c);
        }
        return false;
    }
    let i = choices.len();
    let Some(c) = small.constraints.get(i) else { return true };
    for s in [Side::A, Side::B] {
        let before = edges.len();
        edges.extend_from_slice(side(c, s));
        choices.push(s);
        if search(small, choices, edges, on_cycle) {
            return true;
        }
        choices.pop();
        edges.truncate(before);
    }
    false
}

/// Whether `m` chooses one side for every constraint of `p` and the chosen edges plus the known edges form a
/// directed acyclic graph.
pub fn check_model(p: &Polygraph, m: &Model) -> bool {
    if !edges_in_range(p) || m.choices.len() != p.constraints.len() {
        return false;
    }
    // Over the touched vertices only, so a sparse numbering costs nothing.
    let small = Compact::new(p, &(0..p.constraints.len()).collect::<Vec<_>>(), &p.known);
    let chosen = small.constraints.iter().zip(&m.choices).flat_map(|(c, &s)| side(c, s).iter().copied());
    is_acyclic(small.n, small.known.iter().copied().chain(chosen))
}

/// Whether `core` is a correct, minimal refutation of `p`, re-checked by brute force:
/// - its constraint indices are distinct and in range, and its known edges are known edges of `p`;
/// - each of its cycles is a closed walk over its known edges and the sides of its constraints;
/// - with only its known edges, no choice for its constraints is acyclic;
/// - dropping any one of its constraints leaves a choice that is acyclic (minimality).
///
/// Returns false for cores of more than [`CORE_CHECK_LIMIT`] constraints, which it does not try.
pub fn check_core_brute_force(p: &Polygraph, core: &Core) -> bool {
    if !edges_in_range(p) || core.constraints.len() > CORE_CHECK_LIMIT {
        return false;
    }
    let mut seen = std::collections::HashSet::new();
    if !core.constraints.iter().all(|&i| i < p.constraints.len() && seen.insert(i)) {
        return false;
    }
    if !core.known.iter().all(|e| p.known.contains(e)) {
        return false;
    }
    let allowed: std::collections::HashSet<Edge> = core
        .known
        .iter()
        .copied()
        .chain(core.constraints.iter().flat_map(|&i| {
            let c = &p.constraints[i];
            c.side_a.iter().chain(&c.side_b).copied()
        }))
        .collect();
    if core.cycles.is_empty()
        || !core.cycles.iter().all(|c| is_closed_walk(c) && c.iter().all(|e| allowed.contains(e)))
    {
        return false;
    }
    if refutes(p, &core.constraints, &core.known).is_none() {
        return false;
    }
    (0..core.constraints.len()).all(|drop| {
        let rest: Vec<usize> =
            core.constraints.iter().enumerate().filter(|&(j, _)| j != drop).map(|(_, &i)| i).collect();
        refutes(p, &rest, &core.known).is_none()
    })
}

/// If no choice for the constraints `subset` of `p` is acyclic together with the edges `known`, the cycles
/// that cut the search (deduplicated); otherwise `None`.
pub(crate) fn refutes(p: &Polygraph, subset: &[usize], known: &[Edge]) -> Option<Vec<Vec<Edge>>> {
    let small = Compact::new(p, subset, known);
    let mut cycles = Vec::new();
    let mut choices = Vec::new();
    let mut edges = small.known.clone();
    let found = search(&small, &mut choices, &mut edges, &mut |c| cycles.push(c));
    if found {
        return None;
    }
    let mut out: Vec<Vec<Edge>> = cycles.into_iter().map(|c| small.original_cycle(&c)).collect();
    out.sort();
    out.dedup();
    Some(out)
}

/// A sub-polygraph over only the vertices that its edges touch, renumbered from 0, so searches over a few
/// constraints of a large polygraph stay cheap.
struct Compact {
    n: usize,
    known: Vec<Edge>,
    constraints: Vec<Constraint>,
    original: Vec<u32>,
}

impl Compact {
    fn new(p: &Polygraph, subset: &[usize], known: &[Edge]) -> Self {
        let mut ids: HashMap<u32, u32> = HashMap::new();
        let mut original = Vec::new();
        let mut map = |e: &Edge| {
            let mut id = |v: u32| {
                *ids.entry(v).or_insert_with(|| {
                    original.push(v);
                    original.len() as u32 - 1
                })
            };
            let from = id(e.from);
            Edge::new(from, id(e.to))
        };
        let known: Vec<Edge> = known.iter().map(&mut map).collect();
        let constraints = subset
            .iter()
            .map(|&i| {
                let c = &p.constraints[i];
                Constraint {
                    side_a: c.side_a.iter().map(&mut map).collect(),
                    side_b: c.side_b.iter().map(&mut map).collect(),
                }
            })
            .collect();
        Compact { n: original.len(), known, constraints, original }
    }

    fn original_cycle(&self, c: &[Edge]) -> Vec<Edge> {
        c.iter().map(|e| Edge::new(self.original[e.from as usize], self.original[e.to as usize])).collect()
    }
}
