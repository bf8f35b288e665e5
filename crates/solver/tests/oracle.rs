//! Differential tests: every engine against the brute-force oracle on random polygraphs.
//!
//! Each instance is solved by the propagator engine and by the plain encoding. Both must agree with
//! `brute_force` on SAT/UNSAT; every model is re-checked for acyclicity, and every core is re-checked by brute
//! force, including minimality (dropping any one constraint makes it satisfiable) and that its cycles are
//! real cycles of the polygraph. Seeds are fixed, so a failure names its instance and reproduces.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use solver::{
    Constraint, Edge, Engine, Polygraph, Solution, SolveOptions, brute_force, check_core_brute_force,
    check_model, solve_with,
};

/// Solves `p` with every CDCL engine and checks each answer against the oracle. Returns whether it is SAT.
fn check_instance(p: &Polygraph, tag: &str) -> bool {
    let oracle = brute_force(p);
    for engine in [Engine::Propagator, Engine::Plain] {
        for budget in [2048, 1] {
            if engine == Engine::Plain && budget != 2048 {
                continue;
            }
            let opts = SolveOptions { engine, propagation_budget: budget, ..SolveOptions::default() };
            let got = solve_with(p, &opts).unwrap_or_else(|e| panic!("{tag} {engine:?}: error {e}\n{p:?}"));
            match (&got, &oracle) {
                (Solution::Acyclic(m), Some(_)) => {
                    assert!(check_model(p, m), "{tag} {engine:?}: model not acyclic\n{p:?}\n{m:?}")
                }
                (Solution::Cyclic(core), None) => {
                    assert!(
                        core.constraints.len() <= solver::CORE_CHECK_LIMIT,
                        "{tag}: core too large to check: {core:?}"
                    );
                    assert!(
                        check_core_brute_force(p, core),
                        "{tag} {engine:?} budget {budget}: core fails the brute-force check\n{p:?}\n{core:?}"
                    );
                }
                _ => panic!("{tag} {engine:?}: disagrees with the oracle ({oracle:?})\n{p:?}\n{got:?}"),
            }
        }
    }
    oracle.is_some()
}

fn random_edge(rng: &mut StdRng, n: u32, self_loops: bool) -> Edge {
    loop {
        let e = Edge::new(rng.gen_range(0..n), rng.gen_range(0..n));
        if self_loops || e.from != e.to || rng.gen_ratio(1, 40) {
            return e;
        }
    }
}

/// Small, unstructured polygraphs: a few vertices, random known edges (sometimes cyclic), random sides.
fn random_uniform(rng: &mut StdRng) -> Polygraph {
    let n = rng.gen_range(1..=7u32);
    let known_count = rng.gen_range(0..=n as usize + 1);
    let mut known = Vec::new();
    for _ in 0..known_count {
        // Mostly forward edges, so the known graph is usually acyclic and the search has work to do.
        let e = random_edge(rng, n, false);
        let forward = Edge::new(e.from.min(e.to), e.from.max(e.to));
        known.push(if rng.gen_ratio(9, 10) && forward.from != forward.to { forward } else { e });
    }
    let m = rng.gen_range(0..=7);
    let constraints = (0..m)
        .map(|_| {
            let side = |rng: &mut StdRng| {
                let k = rng.gen_range(0..=3);
                let mut s: Vec<Edge> = (0..k).map(|_| random_edge(rng, n, false)).collect();
                if !s.is_empty() && rng.gen_ratio(1, 8) {
                    s.push(s[0]); // a duplicate edge
                }
                s
            };
            Constraint { side_a: side(rng), side_b: side(rng) }
        })
        .collect();
    Polygraph { vertices: n, known, constraints }
}

/// History-like polygraphs: sessions are chains (session order), reads add wr edges, and each constraint
/// orders two writes of one key as Cobra §3.2 builds them: side A sends the readers of the first write (or the
/// write itself) to the second, side B the other way round.
fn random_history(rng: &mut StdRng) -> Polygraph {
    let sessions = rng.gen_range(1..=4u32);
    let len = rng.gen_range(1..=5u32);
    let n = sessions * len;
    let mut known = Vec::new();
    for s in 0..sessions {
        for i in 0..len - 1 {
            known.push(Edge::new(s * len + i, s * len + i + 1));
        }
    }
    let writes: Vec<u32> = (0..rng.gen_range(2..=5)).map(|_| rng.gen_range(0..n)).collect();
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); writes.len()];
    for (w, rs) in writes.iter().zip(readers.iter_mut()) {
        for _ in 0..rng.gen_range(0..=2) {
            let r = rng.gen_range(0..n);
            if r != *w {
                rs.push(r);
                known.push(Edge::new(*w, r)); // wr
            }
        }
    }
    let mut constraints = Vec::new();
    for i in 0..writes.len() {
        for j in i + 1..writes.len() {
            if rng.gen_ratio(1, 4) {
                continue;
            }
            let to = |from: usize, to: usize| -> Vec<Edge> {
                if readers[from].is_empty() {
                    vec![Edge::new(writes[from], writes[to])]
                } else {
                    readers[from].iter().map(|&r| Edge::new(r, writes[to])).collect()
                }
            };
            constraints.push(Constraint { side_a: to(i, j), side_b: to(j, i) });
        }
    }
    constraints.truncate(8);
    Polygraph { vertices: n, known, constraints }
}

/// Dense, contradictory ones: few vertices, many single-edge constraints, so UNSAT cores are common.
fn random_dense(rng: &mut StdRng) -> Polygraph {
    let n = rng.gen_range(3..=5u32);
    let m = rng.gen_range(3..=9);
    let constraints = (0..m)
        .map(|_| Constraint {
            side_a: vec![random_edge(rng, n, false)],
            side_b: (0..rng.gen_range(1..=2)).map(|_| random_edge(rng, n, false)).collect(),
        })
        .collect();
    let known = if rng.gen_bool(0.5) { vec![Edge::new(0, 1)] } else { vec![] };
    Polygraph { vertices: n, known, constraints }
}

fn run(shape: &str, count: u64, seed: u64, make: fn(&mut StdRng) -> Polygraph) {
    let mut sat = 0;
    for i in 0..count {
        let mut rng = StdRng::seed_from_u64(seed ^ (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let p = make(&mut rng);
        if check_instance(&p, &format!("{shape} #{i}")) {
            sat += 1;
        }
    }
    // Both verdicts must be exercised, or the comparison proves little.
    assert!(
        sat > count / 20 && sat < count - count / 20,
        "{shape}: {sat} of {count} SAT; shapes need tuning"
    );
}

#[test]
fn uniform_instances_agree_with_the_oracle() {
    run("uniform", 4000, 1, random_uniform);
}

#[test]
fn history_like_instances_agree_with_the_oracle() {
    run("history", 4000, 2, random_history);
}

#[test]
fn dense_instances_agree_with_the_oracle() {
    run("dense", 2500, 3, random_dense);
}

/// Larger instances than brute force can judge quickly: the two CaDiCaL encodings judge each other. Sides
/// follow a hidden order most of the time, with noise, so some are satisfiable only after real search.
fn random_medium(rng: &mut StdRng) -> Polygraph {
    let n = rng.gen_range(12..=40u32);
    let mut perm: Vec<u32> = (0..n).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, rng.gen_range(0..=i));
    }
    let before = |a: u32, b: u32| perm[a as usize] < perm[b as usize];
    let mut known = Vec::new();
    for _ in 0..n {
        let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
        if a != b && before(a, b) {
            known.push(Edge::new(a, b));
        }
    }
    let noise = rng.gen_range(0..=45);
    let m = rng.gen_range(n as usize..=4 * n as usize);
    let constraints = (0..m)
        .map(|_| {
            let side = |rng: &mut StdRng| -> Vec<Edge> {
                (0..rng.gen_range(1..=3))
                    .map(|_| {
                        let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
                        if rng.gen_range(0..100) < noise || before(a, b) {
                            Edge::new(a, b)
                        } else {
                            Edge::new(b, a)
                        }
                    })
                    .filter(|e| e.from != e.to)
                    .collect()
            };
            let (a, b) = (side(rng), side(rng));
            // One side consistent with the hidden order keeps many instances satisfiable.
            if rng.gen_bool(0.5) {
                Constraint { side_a: a, side_b: b }
            } else {
                Constraint { side_a: b, side_b: a }
            }
        })
        .collect();
    Polygraph { vertices: n, known, constraints }
}

#[test]
fn propagator_and_plain_encoding_agree_on_medium_instances() {
    let (mut sat, mut unsat, count) = (0, 0, 400u64);
    for i in 0..count {
        let mut rng = StdRng::seed_from_u64(4 ^ (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let p = random_medium(&mut rng);
        let tag = format!("medium #{i}");
        let prop = SolveOptions::default();
        let plain = SolveOptions { engine: Engine::Plain, ..SolveOptions::default() };
        let a = solve_with(&p, &prop).unwrap_or_else(|e| panic!("{tag}: {e}"));
        let b = solve_with(&p, &plain).unwrap_or_else(|e| panic!("{tag}: {e}"));
        match (&a, &b) {
            (Solution::Acyclic(ma), Solution::Acyclic(mb)) => {
                assert!(check_model(&p, ma) && check_model(&p, mb), "{tag}: bad model");
                sat += 1;
            }
            (Solution::Cyclic(ca), Solution::Cyclic(cb)) => {
                for core in [ca, cb] {
                    // The core alone must be unsatisfiable, and each one-smaller subset satisfiable, as judged
                    // by the other encoding.
                    let sub = |skip: Option<usize>| Polygraph {
                        vertices: p.vertices,
                        known: core.known.clone(),
                        constraints: core
                            .constraints
                            .iter()
                            .enumerate()
                            .filter(|&(j, _)| Some(j) != skip)
                            .map(|(_, &i)| p.constraints[i].clone())
                            .collect(),
                    };
                    let judge = if std::ptr::eq(core, ca) { &plain } else { &prop };
                    let whole = solve_with(&sub(None), judge).expect("solves");
                    assert!(
                        matches!(whole, Solution::Cyclic(_)),
                        "{tag}: core of {} is satisfiable\n{p:?}\n{core:?}",
                        if judge.engine == Engine::Plain { "propagator" } else { "plain" }
                    );
                    for j in 0..core.constraints.len() {
                        let smaller = solve_with(&sub(Some(j)), judge).expect("solves");
                        assert!(matches!(smaller, Solution::Acyclic(_)), "{tag}: core not minimal\n{core:?}");
                    }
                    if core.constraints.len() <= solver::CORE_CHECK_LIMIT {
                        assert!(check_core_brute_force(&p, core), "{tag}: core fails brute force\n{core:?}");
                    }
                }
                unsat += 1;
            }
            _ => panic!("{tag}: engines disagree\n{p:?}\n{a:?}\n{b:?}"),
        }
    }
    assert!(sat > 20 && unsat > 20, "medium: {sat} SAT, {unsat} UNSAT; shapes need tuning");
}
