//! SAT modulo graph acyclicity: does some choice of one side of every constraint leave the graph acyclic?
//!
//! This crate knows nothing about databases. Its input is a [`Polygraph`]: `n` vertices, known edges, and
//! constraints ⟨A, B⟩, each a choice between two edge sets (Cobra §2.3). Its output is a [`Solution`]:
//! either a model (the chosen side of every constraint, re-checkable as a DAG) or a minimal core of
//! constraints for which no choice is acyclic.
//!
//! The default engine is CaDiCaL with our own acyclicity propagator ([`AcyclicityPropagator`], behind the
//! [`Theory`] and [`SatEngine`] traits); `README.md` beside this crate explains the encoding, the propagator's
//! invariants and how cores and their cycles are certified.
//!
//! ```
//! use solver::{Constraint, Edge, Polygraph, Solution, Side, check_core_brute_force, solve};
//!
//! // Known: 0 → 1. Constraint 0: either 1 → 2 or 1 → 0 (which would close a cycle).
//! let p = Polygraph {
//!     vertices: 3,
//!     known: vec![Edge::new(0, 1)],
//!     constraints: vec![Constraint { side_a: vec![Edge::new(1, 2)], side_b: vec![Edge::new(1, 0)] }],
//! };
//! let Solution::Acyclic(model) = solve(&p)? else { panic!("satisfiable") };
//! assert_eq!(model.choices, vec![Side::A]);
//!
//! // Adding "2 → 0 or 2 → 1" makes every choice cyclic; both constraints form the core.
//! let mut q = p.clone();
//! q.constraints.push(Constraint { side_a: vec![Edge::new(2, 0)], side_b: vec![Edge::new(2, 1)] });
//! let Solution::Cyclic(core) = solve(&q)? else { panic!("unsatisfiable") };
//! assert_eq!(core.constraints, vec![0, 1]);
//! assert!(check_core_brute_force(&q, &core));
//! # Ok::<(), solver::SolverError>(())
//! ```

use thiserror::Error;

mod encode;
mod engine;
mod graph;
mod oracle;
mod propagator;
mod solve;

pub use engine::{Cadical, SatEngine, SatResult};
pub use graph::strongly_connected_components;
pub use oracle::{CORE_CHECK_LIMIT, brute_force, check_core_brute_force, check_model};
pub use propagator::{AcyclicityPropagator, Theory, TheoryStats};
pub use solve::{Engine, SolveOptions, Stats, solve, solve_with, solve_with_stats};

/// A directed edge between two vertices, numbered `0..n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Edge {
    /// The tail.
    pub from: u32,
    /// The head.
    pub to: u32,
}

impl Edge {
    /// The edge `from → to`.
    pub const fn new(from: u32, to: u32) -> Self {
        Edge { from, to }
    }
}

/// A choice between two edge sets: either every edge of `side_a` holds, or every edge of `side_b` does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Constraint {
    /// The first alternative.
    pub side_a: Vec<Edge>,
    /// The second alternative.
    pub side_b: Vec<Edge>,
}

/// The solver's input: vertices, edges that must exist, and constraints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Polygraph {
    /// The number of vertices; every edge's endpoints are below it.
    pub vertices: u32,
    /// Edges that exist whatever the choices.
    pub known: Vec<Edge>,
    /// The choices to make.
    pub constraints: Vec<Constraint>,
}

/// Which side of a constraint was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// `side_a` holds.
    A,
    /// `side_b` holds.
    B,
}

/// An acyclic choice: `choices[i]` is the side chosen for constraint `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    /// One side per constraint, in input order.
    pub choices: Vec<Side>,
}

/// A proof that no choice is acyclic: a minimal set of constraints that, with the known edges, always
/// closes a cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Core {
    /// Indices into the input's constraints. Empty when the known graph alone is cyclic.
    pub constraints: Vec<usize>,
    /// The known edges involved in the conflicts.
    pub known: Vec<Edge>,
    /// Explicit cycles found while refuting the core; when `constraints` is empty, one cycle of known edges.
    pub cycles: Vec<Vec<Edge>>,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Solution {
    /// Some choice leaves the graph acyclic.
    Acyclic(Model),
    /// No choice does.
    Cyclic(Core),
}

/// Why the solver could not answer.
#[derive(Debug, Error)]
pub enum SolverError {
    /// An edge names a vertex outside `0..vertices`.
    #[error("edge {from} -> {to} names a vertex outside 0..{vertices}")]
    VertexOutOfRange {
        /// The edge's tail.
        from: u32,
        /// The edge's head.
        to: u32,
        /// The number of vertices.
        vertices: u32,
    },
    /// The SAT engine gave up or failed.
    #[error("SAT engine failed: {0}")]
    Engine(String),
    /// The search ran past `SolveOptions::time_limit`.
    #[error("solver time limit reached")]
    TimedOut,
    /// The plain encoding would exceed its clause limit (see `SolveOptions::plain_clause_limit`).
    #[error("plain encoding too large: {clauses} clauses (limit {limit})")]
    TooLarge {
        /// The clauses the encoding would need.
        clauses: u64,
        /// The limit it was given.
        limit: u64,
    },
}
