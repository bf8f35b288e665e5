//! Degenerate inputs: no constraints, empty sides, self-loops, duplicate edges, bad vertices.

use solver::{
    Constraint, Edge, Engine, Polygraph, Side, Solution, SolveOptions, SolverError, check_core_brute_force,
    check_model, solve_with,
};

fn e(a: u32, b: u32) -> Edge {
    Edge::new(a, b)
}

fn c(a: &[(u32, u32)], b: &[(u32, u32)]) -> Constraint {
    Constraint {
        side_a: a.iter().map(|&(x, y)| e(x, y)).collect(),
        side_b: b.iter().map(|&(x, y)| e(x, y)).collect(),
    }
}

/// Every engine, so each degenerate case is checked against all of them.
fn engines() -> Vec<SolveOptions> {
    solver::Engine::all().iter().map(|&engine| SolveOptions { engine, ..SolveOptions::default() }).collect()
}

fn solve_all(p: &Polygraph) -> Vec<Solution> {
    engines().iter().map(|o| solve_with(p, o).expect("solves")).collect()
}

#[test]
fn no_constraints_acyclic_known_graph_is_acyclic() {
    let p = Polygraph { vertices: 3, known: vec![e(0, 1), e(1, 2)], constraints: vec![] };
    for s in solve_all(&p) {
        assert_eq!(s, Solution::Acyclic(solver::Model { choices: vec![] }));
    }
}

#[test]
fn zero_vertices_is_acyclic() {
    let p = Polygraph::default();
    for s in solve_all(&p) {
        assert!(matches!(s, Solution::Acyclic(_)));
    }
}

#[test]
fn cyclic_known_graph_is_answered_with_its_cycle_and_no_constraints() {
    let p = Polygraph {
        vertices: 4,
        known: vec![e(0, 1), e(1, 2), e(2, 0), e(2, 3)],
        constraints: vec![c(&[(3, 0)], &[(0, 3)])],
    };
    for s in solve_all(&p) {
        let Solution::Cyclic(core) = s else { panic!("expected cyclic") };
        assert!(core.constraints.is_empty());
        assert_eq!(core.cycles.len(), 1);
        // Answered by the known-graph shortcut, without any SAT call.
        assert_eq!(solver::solve_with_stats(&p, &SolveOptions::default()).expect("solves").1.solve_calls, 0);
        assert_eq!(core.cycles[0].len(), 3);
        assert!(check_core_brute_force(&p, &core));
    }
}

#[test]
fn known_self_loop_is_an_immediate_cycle() {
    let p = Polygraph { vertices: 2, known: vec![e(0, 1), e(1, 1)], constraints: vec![] };
    for s in solve_all(&p) {
        let Solution::Cyclic(core) = s else { panic!("expected cyclic") };
        assert_eq!(core.cycles, vec![vec![e(1, 1)]]);
        assert_eq!(core.known, vec![e(1, 1)]);
        assert!(check_core_brute_force(&p, &core));
    }
}

#[test]
fn self_loop_in_a_side_makes_that_side_impossible() {
    let p = Polygraph { vertices: 2, known: vec![], constraints: vec![c(&[(0, 0)], &[(0, 1)])] };
    for s in solve_all(&p) {
        assert_eq!(s, Solution::Acyclic(solver::Model { choices: vec![Side::B] }));
    }
    let both = Polygraph { vertices: 2, known: vec![], constraints: vec![c(&[(0, 0)], &[(1, 1)])] };
    for s in solve_all(&both) {
        let Solution::Cyclic(core) = s else { panic!("expected cyclic") };
        assert_eq!(core.constraints, vec![0]);
        assert!(check_core_brute_force(&both, &core));
    }
}

#[test]
fn empty_sides_are_always_satisfiable() {
    let p =
        Polygraph { vertices: 2, known: vec![e(0, 1)], constraints: vec![c(&[], &[]), c(&[(1, 0)], &[])] };
    for s in solve_all(&p) {
        let Solution::Acyclic(m) = s else { panic!("expected acyclic") };
        assert!(check_model(&p, &m));
        assert_eq!(m.choices[1], Side::B);
    }
}

#[test]
fn duplicate_edges_are_harmless() {
    let p = Polygraph {
        vertices: 3,
        known: vec![e(0, 1), e(0, 1)],
        constraints: vec![
            c(&[(1, 2), (1, 2)], &[(1, 2)]),
            c(&[(2, 0), (2, 0)], &[(2, 0)]),
            c(&[(0, 1)], &[(0, 1), (0, 1)]),
        ],
    };
    for s in solve_all(&p) {
        let Solution::Cyclic(core) = s else { panic!("expected cyclic: got {s:?}") };
        assert!(check_core_brute_force(&p, &core), "{core:?}");
    }
    let sat = Polygraph { constraints: vec![p.constraints[0].clone()], ..p.clone() };
    for o in engines() {
        let Solution::Acyclic(m) = solve_with(&sat, &o).expect("solves") else { panic!("expected acyclic") };
        assert!(check_model(&sat, &m));
    }
}

#[test]
fn out_of_range_vertex_is_an_error() {
    let p = Polygraph { vertices: 2, known: vec![], constraints: vec![c(&[(0, 1)], &[(1, 2)])] };
    for o in engines() {
        let err = solve_with(&p, &o).expect_err("must reject");
        assert!(matches!(err, SolverError::VertexOutOfRange { from: 1, to: 2, vertices: 2 }));
    }
    assert!(solver::brute_force(&p).is_none());
}

#[test]
fn two_opposed_constraints_form_a_minimal_core() {
    // With the known edge 0->1, every choice of constraints 0 and 1 closes a cycle; constraint 2 is idle.
    let p = Polygraph {
        vertices: 3,
        known: vec![e(0, 1)],
        constraints: vec![c(&[(1, 2)], &[(1, 0)]), c(&[(2, 0)], &[(2, 1)]), c(&[], &[])],
    };
    for s in solve_all(&p) {
        let Solution::Cyclic(core) = s else { panic!("expected cyclic") };
        assert_eq!(core.constraints, vec![0, 1]);
        assert!(check_core_brute_force(&p, &core));
    }
    let _ = Engine::default();
}

#[test]
fn huge_sparse_vertex_numbers_are_renumbered_not_allocated() {
    let big = u32::MAX - 1;
    let p = Polygraph {
        vertices: u32::MAX,
        known: vec![e(big, 7)],
        constraints: vec![c(&[(7, big)], &[(7, 3)]), c(&[(3, big)], &[(7, big)])],
    };
    for o in engines() {
        let Solution::Cyclic(core) = solve_with(&p, &o).expect("solves") else { panic!("expected cyclic") };
        assert_eq!(core.constraints, vec![0, 1]);
        assert!(core.cycles.iter().flatten().all(|x| [big, 7, 3].contains(&x.from)));
        assert!(check_core_brute_force(&p, &core), "{core:?}");
    }
    let sat = Polygraph { constraints: vec![p.constraints[0].clone()], ..p.clone() };
    for o in engines() {
        let Solution::Acyclic(m) = solve_with(&sat, &o).expect("solves") else { panic!("expected acyclic") };
        assert!(check_model(&sat, &m));
    }
}

#[test]
fn an_expired_time_limit_gives_up_instead_of_answering() {
    // A ring of constraints, each "i → i+1 or i+1 → i": needs real search (decisions), so the terminator is
    // consulted before any answer.
    let n = 200u32;
    let constraints = (0..n).map(|i| c(&[(i, (i + 1) % n)], &[((i + 1) % n, i)])).collect();
    let p = Polygraph { vertices: n, known: vec![], constraints };
    for engine in [Engine::Propagator, Engine::Plain] {
        let opts =
            SolveOptions { engine, time_limit: Some(std::time::Duration::ZERO), ..SolveOptions::default() };
        let err = solve_with(&p, &opts).expect_err("must give up");
        assert!(matches!(err, SolverError::TimedOut), "{err}");
        // Without the limit it answers.
        let opts = SolveOptions { engine, ..SolveOptions::default() };
        let Solution::Acyclic(m) = solve_with(&p, &opts).expect("solves") else { panic!("satisfiable") };
        assert!(check_model(&p, &m));
    }
}
