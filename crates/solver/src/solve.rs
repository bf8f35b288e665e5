//! The entry points: validate, take the known-graph shortcut, solve, then shrink a core by deletion.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::encode::{Layout, build_plain, build_propagator, plain_clause_count};
use crate::engine::{Cadical, SatEngine, SatResult};
use crate::graph::find_cycle;
use crate::oracle::{brute_force, check_model, edges_in_range, refutes};
use crate::{Core, Edge, Model, Polygraph, Side, Solution, SolverError};

/// Which search answers the question.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// CaDiCaL with the acyclicity propagator (IPASIR-UP). The default, and the one that scales.
    #[default]
    Propagator,
    /// CaDiCaL on a plain CNF with transitive-closure clauses and no propagator: the baseline of Cobra §6.
    /// Its size grows as edges × vertices, so it is refused above [`SolveOptions::plain_clause_limit`].
    Plain,
    /// Exhaustive backtracking; exponential, for tiny inputs and as a cross-check.
    Backtracking,
}

impl Engine {
    /// Every engine, for tests that compare them.
    pub fn all() -> &'static [Engine] {
        &[Engine::Propagator, Engine::Plain, Engine::Backtracking]
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
    /// How many vertices each propagation search of the propagator may visit; 0 turns edge-level propagation
    /// off (conflicts are still detected).
    pub propagation_budget: usize,
    /// The most clauses the plain encoding may have; larger instances get [`SolverError::TooLarge`].
    pub plain_clause_limit: u64,
    /// Give up with [`SolverError::TimedOut`] after this long (all SAT calls of one solve together; the CDCL
    /// engines only). `None` waits for the answer however long it takes.
    pub time_limit: Option<std::time::Duration>,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            engine: Engine::default(),
            shrink_core: true,
            propagation_budget: 32,
            plain_clause_limit: 5_000_000,
            time_limit: None,
        }
    }
}

/// What a solve cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Calls to the search: one for the answer, more while shrinking a core and collecting its cycles.
    pub solve_calls: u64,
    /// CDCL conflicts found by unit propagation over all calls (CaDiCaL's `conflicts` statistic; conflicts
    /// raised by a theory lemma are counted in `theory_conflicts` instead).
    pub conflicts: u64,
    /// Cycles the propagator closed (conflict lemmas), over all calls.
    pub theory_conflicts: u64,
    /// Edge variables the propagator set false, over all calls.
    pub theory_propagations: u64,
    /// Clauses of the plain encoding (0 for the other engines).
    pub plain_clauses: u64,
    /// Seconds for the first answer (SAT or UNSAT), excluding core shrinking.
    pub first_answer_secs: f64,
    /// Seconds in total.
    pub total_secs: f64,
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
    let start = Instant::now();
    validate(p)?;
    // Every search allocates per vertex. When most vertex numbers are unused (a sparse or hostile numbering),
    // solve a renumbered copy over the vertices the edges touch, and translate the answer back.
    if let Some((compact, original)) = compacted(p) {
        let (solution, stats) = solve_with_stats(&compact, opts)?;
        let back = |e: &Edge| Edge::new(original[e.from as usize], original[e.to as usize]);
        let solution = match solution {
            Solution::Acyclic(m) => Solution::Acyclic(m),
            Solution::Cyclic(core) => Solution::Cyclic(Core {
                constraints: core.constraints,
                known: core.known.iter().map(back).collect(),
                cycles: core.cycles.iter().map(|c| c.iter().map(back).collect()).collect(),
            }),
        };
        return Ok((solution, stats));
    }
    let mut stats = Stats::default();
    // Known-graph shortcut: a cyclic known graph needs no SAT call.
    if let Some(cycle) = find_cycle(p.vertices as usize, &p.known) {
        stats.total_secs = start.elapsed().as_secs_f64();
        return Ok((Solution::Cyclic(known_cycle_core(cycle)), stats));
    }
    let solution = match opts.engine {
        Engine::Backtracking => solve_backtracking(p, opts, &mut stats, start)?,
        Engine::Propagator | Engine::Plain => solve_cdcl(p, opts, &mut stats, start)?,
    };
    stats.total_secs = start.elapsed().as_secs_f64();
    Ok((solution, stats))
}

fn solve_backtracking(
    p: &Polygraph,
    opts: &SolveOptions,
    stats: &mut Stats,
    start: Instant,
) -> Result<Solution, SolverError> {
    stats.solve_calls += 1;
    let found = brute_force(p);
    stats.first_answer_secs = start.elapsed().as_secs_f64();
    if let Some(m) = found {
        return Ok(Solution::Acyclic(m));
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
    Ok(Solution::Cyclic(core_from_cycles(p, core, cycles)))
}

/// One CaDiCaL solver over all constraints, in the chosen flavour.
enum Cdcl {
    Propagator(crate::engine::Cadical, Layout, std::rc::Rc<std::cell::RefCell<crate::AcyclicityPropagator>>),
    Plain(crate::engine::Cadical, Layout),
}

impl Cdcl {
    fn parts(&mut self) -> (&mut crate::engine::Cadical, &Layout) {
        match self {
            Cdcl::Propagator(e, l, _) => (e, l),
            Cdcl::Plain(e, l) => (e, l),
        }
    }
}

fn solve_cdcl(
    p: &Polygraph,
    opts: &SolveOptions,
    stats: &mut Stats,
    start: Instant,
) -> Result<Solution, SolverError> {
    let all: Vec<usize> = (0..p.constraints.len()).collect();
    let deadline = opts.time_limit.map(|d| start + d);
    let mut cdcl = match opts.engine {
        Engine::Plain => {
            let clauses = plain_clause_count(p, &all, &p.known);
            if clauses > opts.plain_clause_limit {
                return Err(SolverError::TooLarge { clauses, limit: opts.plain_clause_limit });
            }
            stats.plain_clauses = clauses;
            let (e, l) = build_plain(p, &all, &p.known);
            Cdcl::Plain(e, l)
        }
        _ => {
            let (e, l, t) = build_propagator(p, &all, &p.known, opts.propagation_budget, false)?;
            Cdcl::Propagator(e, l, t)
        }
    };
    let (engine, layout) = cdcl.parts();
    engine.set_deadline(deadline);
    stats.solve_calls += 1;
    let result = engine.solve(&layout.act)?;
    stats.first_answer_secs = start.elapsed().as_secs_f64();
    let solution = match result {
        SatResult::Sat => {
            let choices: Vec<Side> =
                layout.choice.iter().map(|&c| if engine.value(c) { Side::A } else { Side::B }).collect();
            let model = Model { choices };
            // Re-check every model from scratch: a wrong "acyclic" must never leave this crate.
            if !check_model(p, &model) {
                return Err(SolverError::Engine("the engine's model is not acyclic".into()));
            }
            Solution::Acyclic(model)
        }
        SatResult::Unsat => {
            let core: Vec<usize> = (0..layout.act.len()).filter(|&k| engine.failed(layout.act[k])).collect();
            if core.is_empty() {
                return Err(SolverError::Engine("UNSAT without any failed assumption".into()));
            }
            let mut core: Vec<usize> = core.iter().map(|&k| layout.subset[k]).collect();
            if opts.shrink_core && core.len() > 1 {
                // Shrink on a solver over the first core only: with a few constraints instead of all of them,
                // each deletion step is a small solve even when the polygraph is huge.
                let mut sub = match opts.engine {
                    Engine::Plain => {
                        let (e, l) = build_plain(p, &core, &p.known);
                        Cdcl::Plain(e, l)
                    }
                    _ => {
                        let (e, l, t) = build_propagator(p, &core, &p.known, opts.propagation_budget, false)?;
                        Cdcl::Propagator(e, l, t)
                    }
                };
                let (sub_engine, sub_layout) = sub.parts();
                sub_engine.set_deadline(deadline);
                let all_sub: Vec<usize> = (0..sub_layout.act.len()).collect();
                let shrunk = shrink_by_deletion(sub_engine, sub_layout, all_sub, stats)?;
                stats.conflicts += sub_engine.conflicts();
                core = shrunk.iter().map(|&k| sub_layout.subset[k]).collect();
            }
            let cycles = core_cycles(p, &core, opts, deadline, stats)?;
            Solution::Cyclic(core_from_cycles(p, core, cycles))
        }
    };
    stats.conflicts += cdcl.parts().0.conflicts();
    if let Cdcl::Propagator(_, _, t) = &cdcl {
        let ts = t.borrow().stats();
        stats.theory_conflicts += ts.conflicts;
        stats.theory_propagations += ts.propagations;
    }
    Ok(solution)
}

/// Deletion-based core minimisation: drop each constraint in turn and keep it out if the rest is still
/// unsatisfiable (then also keep only the failed assumptions of that answer). At the end, dropping any one
/// constraint makes the core satisfiable, so it is minimal.
fn shrink_by_deletion<E: SatEngine>(
    engine: &mut E,
    layout: &Layout,
    mut core: Vec<usize>,
    stats: &mut Stats,
) -> Result<Vec<usize>, SolverError> {
    let mut confirmed: HashSet<usize> = HashSet::new();
    while let Some(&k) = core.iter().find(|k| !confirmed.contains(k)) {
        let assumptions: Vec<i32> = core.iter().filter(|&&j| j != k).map(|&j| layout.act[j]).collect();
        stats.solve_calls += 1;
        match engine.solve(&assumptions)? {
            SatResult::Sat => {
                confirmed.insert(k);
            }
            SatResult::Unsat => {
                core.retain(|&j| j != k && engine.failed(layout.act[j]));
            }
        }
    }
    Ok(core)
}

/// The cycles that refute `core`, as a small set that is checked to suffice.
///
/// A fresh propagator solver over only the core's constraints records the cycle behind every lemma and every
/// propagation. Those candidates are then handed to a plain CNF (the core's clauses plus one clause per cycle,
/// each behind a selector), which must be unsatisfiable: if it is not, the model's graph has a cycle, which
/// joins the candidates (counter-example guided, so the result never depends on what was recorded). The
/// failed selectors, shrunk by deletion when few, are the certificate. Only closed walks over known edges
/// and the core's sides are admitted, so an UNSAT answer rests on this theory-free CNF, not on the propagator.
fn core_cycles(
    p: &Polygraph,
    core: &[usize],
    opts: &SolveOptions,
    deadline: Option<Instant>,
    stats: &mut Stats,
) -> Result<Vec<Vec<Edge>>, SolverError> {
    let (mut engine, layout, theory) = build_propagator(p, core, &p.known, opts.propagation_budget, true)?;
    engine.set_deadline(deadline);
    stats.solve_calls += 1;
    if engine.solve(&layout.act)? != SatResult::Unsat {
        return Err(SolverError::Engine("the core is satisfiable on its own".into()));
    }
    stats.conflicts += engine.conflicts();
    let mut candidates: Vec<Vec<Edge>> = theory.borrow().cycles().to_vec();
    for &i in core {
        let c = &p.constraints[i];
        candidates.extend(c.side_a.iter().chain(&c.side_b).filter(|e| e.from == e.to).map(|&e| vec![e]));
    }
    candidates.sort();
    candidates.dedup();
    // Shortest first, so the certificate prefers short cycles.
    candidates.sort_by_key(|c| c.len());

    let known: HashSet<Edge> = p.known.iter().copied().collect();
    let mut cnf = Cadical::new();
    cnf.set_deadline(deadline);
    let mut edge_var: HashMap<Edge, i32> = HashMap::new();
    for &i in core {
        let c = &p.constraints[i];
        let choice = cnf.new_var();
        for (side, sign) in [(&c.side_a, -1), (&c.side_b, 1)] {
            for e in side.iter().filter(|e| !known.contains(e)) {
                let v = *edge_var.entry(*e).or_insert_with(|| cnf.new_var());
                cnf.add_clause(&[sign * choice, v]);
            }
        }
    }
    let mut cycles: Vec<Vec<Edge>> = Vec::new();
    let mut selectors: Vec<i32> = Vec::new();
    let add_cycle =
        |cnf: &mut Cadical, cycle: Vec<Edge>, cycles: &mut Vec<Vec<Edge>>, selectors: &mut Vec<i32>| {
            // Only real cycles may refute: the certificate must not trust the propagator.
            if !crate::graph::is_closed_walk(&cycle) {
                return;
            }
            let mut clause = Vec::with_capacity(cycle.len() + 1);
            for e in &cycle {
                match edge_var.get(e) {
                    Some(&v) => clause.push(-v),
                    None if known.contains(e) => {}
                    None => return, // an edge outside the core: not usable here
                }
            }
            let s = cnf.new_var();
            clause.push(-s);
            cnf.add_clause(&clause);
            selectors.push(s);
            cycles.push(cycle);
        };
    for c in candidates {
        add_cycle(&mut cnf, c, &mut cycles, &mut selectors);
    }
    let vars: Vec<(Edge, i32)> = edge_var.iter().map(|(&e, &v)| (e, v)).collect();
    let mut active: Vec<usize>;
    loop {
        stats.solve_calls += 1;
        let assumptions: Vec<i32> = selectors.clone();
        match cnf.solve(&assumptions)? {
            SatResult::Unsat => {
                active = (0..selectors.len()).filter(|&k| cnf.failed(selectors[k])).collect();
                break;
            }
            SatResult::Sat => {
                let mut graph: Vec<Edge> = p.known.clone();
                graph.extend(vars.iter().filter(|&&(_, v)| cnf.value(v)).map(|&(e, _)| e));
                let cycle = find_cycle(p.vertices as usize, &graph)
                    .ok_or_else(|| SolverError::Engine("the core has an acyclic choice".into()))?;
                let before = cycles.len();
                add_cycle(&mut cnf, cycle, &mut cycles, &mut selectors);
                if cycles.len() == before {
                    return Err(SolverError::Engine("a model's cycle leaves the core".into()));
                }
            }
        }
    }
    // Deletion, while it stays cheap: each step is one small solve.
    if active.len() <= 64 {
        let mut k = 0;
        while k < active.len() {
            let rest: Vec<i32> =
                active.iter().enumerate().filter(|&(j, _)| j != k).map(|(_, &a)| selectors[a]).collect();
            stats.solve_calls += 1;
            if cnf.solve(&rest)? == SatResult::Unsat {
                active.remove(k);
            } else {
                k += 1;
            }
        }
    }
    Ok(active.into_iter().map(|k| cycles[k].clone()).collect())
}

/// A copy of `p` over only the vertices its edges touch, numbered in increasing order (so edge order and
/// sortedness survive the translation back), with the original number of each; `None` when `p` is already
/// dense enough.
fn compacted(p: &Polygraph) -> Option<(Polygraph, Vec<u32>)> {
    let edges = || p.known.iter().chain(p.constraints.iter().flat_map(|c| c.side_a.iter().chain(&c.side_b)));
    let edge_count = edges().count();
    if (p.vertices as usize) <= 4 * edge_count + 1024 {
        return None;
    }
    let mut original: Vec<u32> = edges().flat_map(|e| [e.from, e.to]).collect();
    original.sort_unstable();
    original.dedup();
    let id: HashMap<u32, u32> = original.iter().enumerate().map(|(i, &v)| (v, i as u32)).collect();
    let map = |e: &Edge| Edge::new(id[&e.from], id[&e.to]);
    let compact = Polygraph {
        vertices: original.len() as u32,
        known: p.known.iter().map(map).collect(),
        constraints: p
            .constraints
            .iter()
            .map(|c| crate::Constraint {
                side_a: c.side_a.iter().map(map).collect(),
                side_b: c.side_b.iter().map(map).collect(),
            })
            .collect(),
    };
    Some((compact, original))
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
