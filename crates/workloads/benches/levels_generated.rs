//! Checking time per isolation level on generated histories, side by side in one run: every workload at
//! 10,000 transactions (24 sessions, random interleaving), serializable against snapshot isolation,
//! `declared` (every transaction at REPEATABLE READ, and a mix of the three PostgreSQL levels) and the weak
//! levels, with ops per second and each level's time as a fraction of serializability's. Prints a table;
//! never asserts a time.
//!
//! `cargo bench -p workloads --bench levels_generated -- 2000 10000` picks the sizes (default 10k);
//! `KRAIT_BENCH_REPEAT` (default 3) the runs per level (the best is shown).

mod common;

use std::time::Instant;

use history::{History, IsolationLevel};
use verifier::{Level, Options, verify};

use common::{for_each_generated, sizes};

/// The history with every transaction's level set by `level` (from its position).
fn with_levels(h: &History, level: impl Fn(usize) -> IsolationLevel) -> History {
    let mut h = h.clone();
    for (i, t) in h.transactions.iter_mut().enumerate() {
        t.isolation = Some(level(i));
    }
    h
}

fn main() {
    let sizes = sizes(&[10_000]);
    let repeat: usize = std::env::var("KRAIT_BENCH_REPEAT").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    println!(
        "{:<10} {:>7} {:>9} {:>22} {:>9} {:>12} {:>7}  verdict",
        "workload", "txns", "ops", "level", "ms", "ops/s", "÷ ser"
    );
    for_each_generated(&sizes, |name, txns, g, _| {
        let ops: usize = g.history.transactions.iter().map(|t| t.ops.len()).sum();
        let repeatable = with_levels(&g.history, |_| IsolationLevel::RepeatableRead);
        let mixed = with_levels(&g.history, |i| match i % 3 {
            0 => IsolationLevel::ReadCommitted,
            1 => IsolationLevel::RepeatableRead,
            _ => IsolationLevel::Serializable,
        });
        let runs: [(&str, &History, Level); 7] = [
            ("serializable", &g.history, Level::Serializable),
            ("snapshot-isolation", &g.history, Level::SnapshotIsolation),
            ("declared (all RR)", &repeatable, Level::Declared),
            ("declared (RC/RR/SER)", &mixed, Level::Declared),
            ("causal", &g.history, Level::Causal),
            ("read-atomic", &g.history, Level::ReadAtomic),
            ("read-committed", &g.history, Level::ReadCommitted),
        ];
        let mut ser_ms = f64::NAN;
        for (label, h, level) in runs {
            let mut best = f64::INFINITY;
            let mut verdict = String::new();
            for _ in 0..repeat.max(1) {
                let start = Instant::now();
                verdict = match verify(h, &Options { level, ..Options::default() }) {
                    Ok(r) if r.is_accept() => "accept".into(),
                    Ok(_) => "REJECT".into(),
                    Err(e) => format!("error: {e}"),
                };
                best = best.min(start.elapsed().as_secs_f64() * 1e3);
            }
            if level == Level::Serializable {
                ser_ms = best;
            }
            println!(
                "{name:<10} {txns:>7} {ops:>9} {label:>22} {best:>9.1} {:>12.0} {:>7.2}  {verdict}",
                ops as f64 / (best / 1e3),
                best / ser_ms
            );
        }
    });
}
