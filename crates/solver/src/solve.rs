//! The entry points: validate, take the known-graph shortcut, then search.

use std::collections::HashSet;

use crate::graph::find_cycle;
use crate::oracle::{brute_force, edges_in_range, refutes};
use crate::{Core, Edge, Polygraph, Solution, SolverError};

/// Which search answers the question.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// Exhaustive backtracking; exponential, for tiny inputs and as a cross-check.
    #[default]
    Backtracking,
}

impl Engine {
    /// Every engine, for tests that compare them.
    pub fn all() -> &'static [Engine] {
        &[Engine::Backtracking]
    }
}

/// How to solve.
#[derive(Clone, Debug)]
pub struct SolveOptions {
    /// The search to use.
    pub engine: Engine,
    /// Shrink an unsatisfiable core by deletion until it is minimal. When false, the first core found is
    /// returned as it is (still a valid refutation, but possibly not minimal).
    pub shrink_core: bool,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions { engine: Engine::default(), shrink_core: true }
    }
}

/// What a solve cost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls to the search (one for the answer, more while shrinking a core).
    pub solve_calls: u64,
}

/// Solves `p` with the default options.
pub fn solve(p: &Polygraph) -> Result<Solution, SolverError> {
    solve_with(p, &SolveOptions::default())
}

/// Solves `p` with `opts`.
pub fn solve_with(p: &Polygraph, opts: &SolveOptions) -> Result<Solution, SolverError> {
    solve_with_stats(p, opts).map(|(s, _)| s)
}

/// Solves `p` with `opts`, and reports what it cost.
pub fn solve_with_stats(p: &Polygraph, opts: &SolveOptions) -> Result<(Solution, Stats), SolverError> {
    validate(p)?;
    let mut stats = Stats::default();
    if let Some(cycle) = find_cycle(p.vertices as usize, &p.known) {
        return Ok((Solution::Cyclic(known_cycle_core(cycle)), stats));
    }
    match opts.engine {
        Engine::Backtracking => {
            stats.solve_calls += 1;
            if let Some(m) = brute_force(p) {
                return Ok((Solution::Acyclic(m), stats));
            }
            let mut core: Vec<usize> = (0..p.constraints.len()).collect();
            let mut i = 0;
            while opts.shrink_core && i < core.len() {
                let mut rest = core.clone();
                rest.remove(i);
                stats.solve_calls += 1;
                if refutes(p, &rest, &p.known).is_some() {
                    core = rest;
                } else {
                    i += 1;
                }
            }
            stats.solve_calls += 1;
            let cycles = refutes(p, &core, &p.known)
                .ok_or_else(|| SolverError::Engine("core became satisfiable while shrinking".into()))?;
            Ok((Solution::Cyclic(core_from_cycles(p, core, cycles)), stats))
        }
    }
}

/// Rejects edges that name a vertex outside `0..vertices`.
fn validate(p: &Polygraph) -> Result<(), SolverError> {
    if edges_in_range(p) {
        return Ok(());
    }
    let all = p.known.iter().chain(p.constraints.iter().flat_map(|c| c.side_a.iter().chain(&c.side_b)));
    let bad = all.copied().find(|e| e.from >= p.vertices || e.to >= p.vertices).unwrap_or(Edge::new(0, 0));
    Err(SolverError::VertexOutOfRange { from: bad.from, to: bad.to, vertices: p.vertices })
}

/// The certificate for a known graph that is cyclic on its own.
fn known_cycle_core(cycle: Vec<Edge>) -> Core {
    let mut known = cycle.clone();
    known.sort();
    known.dedup();
    Core { constraints: Vec::new(), known, cycles: vec![cycle] }
}

/// A core for the constraints `constraints`, refuted by `cycles`; its known edges are those the cycles use.
pub(crate) fn core_from_cycles(p: &Polygraph, mut constraints: Vec<usize>, cycles: Vec<Vec<Edge>>) -> Core {
    let known_set: HashSet<Edge> = p.known.iter().copied().collect();
    let mut known: Vec<Edge> = cycles.iter().flatten().copied().filter(|e| known_set.contains(e)).collect();
    known.sort();
    known.dedup();
    constraints.sort_unstable();
    Core { constraints, known, cycles }
}
