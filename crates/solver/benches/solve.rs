//! `cargo bench -p solver`: the propagator engine against the plain transitive-closure encoding on generated,
//! history-shaped polygraphs. Prints a table; asserts nothing about time.
//!
//! Each polygraph comes from a simulated serial execution: sessions issue transactions in a random
//! interleaving, each transaction reads a key or two (the latest version in the serial order) and blind-writes
//! one key. The known graph has session-order and wr edges; every pair of writes to a key gets a constraint
//! built as Cobra §3.2 does (readers of one write → the other write, or write → write when unread), with no
//! pruning. Those are satisfiable by construction. The "stale" variant also plants one stale read (a session
//! reads an old version after its own newer write), which makes it unsatisfiable.
//!
//! Environment knobs: `SOLVER_BENCH_SIZES=300,1000` (history sizes), `SOLVER_BENCH_NOISY=0` (skip the noisy
//! family), `SOLVER_BENCH_PLAIN=0` (skip the plain engine), `SOLVER_BENCH_BUDGET=N` (propagation budget).

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use solver::{
    Constraint, Edge, Engine, Polygraph, Solution, SolveOptions, SolverError, Stats, solve_with_stats,
};

/// Generates a history-shaped polygraph with `n` transactions.
fn history(n: u32, stale: bool, seed: u64) -> Polygraph {
    let mut rng = StdRng::seed_from_u64(seed);
    let sessions = (n / 50).clamp(2, 64);
    let keys = (n / 3).max(2);
    let mut known = Vec::new();
    let mut last_in_session: Vec<Option<u32>> = vec![None; sessions as usize];
    let mut latest: Vec<Option<u32>> = vec![None; keys as usize];
    let mut writes: Vec<Vec<u32>> = vec![Vec::new(); keys as usize];
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
    for t in 0..n {
        let s = rng.gen_range(0..sessions) as usize;
        if let Some(prev) = last_in_session[s] {
            known.push(Edge::new(prev, t));
        }
        last_in_session[s] = Some(t);
        for _ in 0..rng.gen_range(1..=2) {
            let k = rng.gen_range(0..keys) as usize;
            if let Some(w) = latest[k] {
                known.push(Edge::new(w, t));
                readers[w as usize].push(t);
            }
        }
        let k = rng.gen_range(0..keys) as usize;
        latest[k] = Some(t);
        writes[k].push(t);
    }
    if stale {
        // Session 0 writes x twice and then reads the first version: no order of the two writes works.
        let (w1, w2, r) = (n, n + 1, n + 2);
        known.extend([Edge::new(w1, w2), Edge::new(w2, r), Edge::new(w1, r)]);
        readers.resize(n as usize + 3, Vec::new());
        readers[w1 as usize].push(r);
        writes.push(vec![w1, w2]);
    }
    let vertices = if stale { n + 3 } else { n };
    let mut constraints = Vec::new();
    for ws in &writes {
        for i in 0..ws.len() {
            for j in i + 1..ws.len() {
                let side = |a: u32, b: u32| -> Vec<Edge> {
                    let rs = &readers[a as usize];
                    if rs.is_empty() {
                        vec![Edge::new(a, b)]
                    } else {
                        rs.iter().filter(|&&r| r != b).map(|&r| Edge::new(r, b)).collect()
                    }
                };
                constraints.push(Constraint { side_a: side(ws[i], ws[j]), side_b: side(ws[j], ws[i]) });
            }
        }
    }
    Polygraph { vertices, known, constraints }
}

/// A denser, less structured family where the search has to work: `n` vertices in a hidden order, random
/// known edges along it, and `3n` constraints whose sides follow the order with `noise` percent exceptions.
fn noisy(n: u32, noise: u32, seed: u64) -> Polygraph {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rank: Vec<u32> = (0..n).collect();
    for i in (1..rank.len()).rev() {
        rank.swap(i, rng.gen_range(0..=i));
    }
    let before = |a: u32, b: u32| rank[a as usize] < rank[b as usize];
    let mut known = Vec::new();
    for _ in 0..n / 2 {
        let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
        if before(a, b) {
            known.push(Edge::new(a, b));
        }
    }
    let constraints = (0..3 * n)
        .map(|_| {
            let mut side = || -> Vec<Edge> {
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
            Constraint { side_a: side(), side_b: side() }
        })
        .collect();
    Polygraph { vertices: n, known, constraints }
}

fn run(p: &Polygraph, engine: Engine) -> Result<(Solution, Stats), SolverError> {
    let mut opts = SolveOptions { engine, plain_clause_limit: 10_000_000, ..SolveOptions::default() };
    if let Some(b) = std::env::var("SOLVER_BENCH_BUDGET").ok().and_then(|b| b.parse().ok()) {
        opts.propagation_budget = b;
    }
    solve_with_stats(p, &opts)
}

fn verdict(s: &Solution) -> String {
    match s {
        Solution::Acyclic(_) => "acyclic".into(),
        Solution::Cyclic(c) => format!("cyclic (core {})", c.constraints.len()),
    }
}

fn main() {
    let sizes: Vec<u32> = match std::env::var("SOLVER_BENCH_SIZES") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![300, 1_000, 3_000, 10_000, 100_000],
    };
    let mut rows: Vec<(String, Polygraph)> = Vec::new();
    for &n in &sizes {
        rows.push(("serial".into(), history(n, false, 7 + n as u64)));
        rows.push(("stale".into(), history(n, true, 7 + n as u64)));
    }
    if std::env::var("SOLVER_BENCH_NOISY").map_or(true, |v| v != "0") {
        for &(n, noise) in &[(100u32, 20u32), (100, 35), (200, 15), (200, 30), (400, 14), (400, 25)] {
            rows.push((format!("noisy{noise}"), noisy(n, noise, n as u64)));
        }
    }
    println!(
        "{:>8} {:>8} {:>7} | {:<16} {:>9} {:>9} {:>8} {:>8} | {:>42} | {:>10}",
        "vertices",
        "constr",
        "variant",
        "verdict",
        "prop ms",
        "sat confl",
        "th.confl",
        "th.props",
        "plain (ms, sat conflicts)",
        "plain/prop"
    );
    for (variant, p) in &rows {
        let t = Instant::now();
        let (sol, st) = match run(p, Engine::Propagator) {
            Ok(r) => r,
            Err(e) => {
                println!("{:>8} propagator error: {e}", p.vertices);
                continue;
            }
        };
        let prop_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let skip_plain = std::env::var("SOLVER_BENCH_PLAIN").is_ok_and(|v| v == "0");
        let (plain, ratio) = match if skip_plain { None } else { Some(run(p, Engine::Plain)) } {
            None => ("not run (SOLVER_BENCH_PLAIN=0)".into(), "-".into()),
            Some(Ok((psol, pst))) => {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                let agree = if verdict(&psol) == verdict(&sol) { "" } else { " DISAGREES" };
                (
                    format!("{ms:.1} ms, {} conflicts{agree}", pst.conflicts),
                    format!("{:.1}x", ms / prop_ms.max(1e-3)),
                )
            }
            Some(Err(SolverError::TooLarge { clauses, .. })) => {
                (format!("skipped (too large: {clauses} clauses)"), "-".into())
            }
            Some(Err(e)) => (format!("error: {e}"), "-".into()),
        };
        println!(
            "{:>8} {:>8} {:>7} | {:<16} {:>9.1} {:>9} {:>8} {:>8} | {:>42} | {:>10}",
            p.vertices,
            p.constraints.len(),
            variant,
            verdict(&sol),
            prop_ms,
            st.conflicts,
            st.theory_conflicts,
            st.theory_propagations,
            plain,
            ratio
        );
    }
}
