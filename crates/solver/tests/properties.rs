//! Property tests (proptest): the propagator engine agrees with brute force, its answers re-check, and
//! answers do not depend on the order of the constraints.

use proptest::prelude::*;
use solver::{
    Constraint, Edge, Polygraph, Solution, SolveOptions, brute_force, check_core_brute_force, check_model,
    solve_with,
};

fn polygraph() -> impl Strategy<Value = Polygraph> {
    (1u32..=6).prop_flat_map(|n| {
        let edge = (0..n, 0..n).prop_map(|(a, b)| Edge::new(a, b));
        let side = proptest::collection::vec(edge.clone(), 0..=3);
        let constraint = (side.clone(), side).prop_map(|(side_a, side_b)| Constraint { side_a, side_b });
        // Known edges go forward (a < b) so most known graphs are acyclic and the solver has work to do.
        let known =
            proptest::collection::vec((0..n, 0..n).prop_map(|(a, b)| Edge::new(a.min(b), a.max(b))), 0..=4)
                .prop_map(|k| k.into_iter().filter(|e| e.from != e.to).collect::<Vec<_>>());
        (known, proptest::collection::vec(constraint, 0..=6))
            .prop_map(move |(known, constraints)| Polygraph { vertices: n, known, constraints })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn propagator_agrees_with_brute_force(p in polygraph(), budget in prop_oneof![Just(0usize), Just(1), Just(64)]) {
        let opts = SolveOptions { propagation_budget: budget, ..SolveOptions::default() };
        let got = solve_with(&p, &opts).expect("valid input");
        match (got, brute_force(&p)) {
            (Solution::Acyclic(m), Some(_)) => prop_assert!(check_model(&p, &m)),
            (Solution::Cyclic(core), None) => prop_assert!(check_core_brute_force(&p, &core), "{core:?}"),
            (got, oracle) => prop_assert!(false, "disagreement: {got:?} vs {oracle:?}"),
        }
    }

    #[test]
    fn verdict_does_not_depend_on_constraint_order(p in polygraph()) {
        let mut reversed = p.clone();
        reversed.constraints.reverse();
        let a = solve_with(&p, &SolveOptions::default()).expect("valid input");
        let b = solve_with(&reversed, &SolveOptions::default()).expect("valid input");
        prop_assert_eq!(matches!(a, Solution::Acyclic(_)), matches!(b, Solution::Acyclic(_)));
    }
}
