//! `cargo bench -p verifier --bench levels`: checking time per isolation level on the Cobra histories of the
//! shared corpus, side by side in one run: serializable (the polygraph and the solver) against snapshot
//! isolation (the split polygraph), `declared` (the corpus records no levels, so every transaction is held to
//! serializable on the split polygraph) and the weak levels (saturation, docs/levels.md), with ops per second
//! and each level's time as a fraction of serializability's. Nothing is asserted.
//!
//! Set `KRAIT_CORPUS` to the corpus folder if it is not at `<workspace>/../shared/corpus`. Pass a substring
//! as the first argument to run only matching histories; `KRAIT_BENCH_REPEAT` (default 3) sets how many
//! runs each level gets (the best is shown).

mod common;

use std::time::Instant;

use common::{cobra_histories, corpus};
use history::codec::read_history;
use verifier::{Level, Options, verify};

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let repeat: usize = std::env::var("KRAIT_BENCH_REPEAT").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let root = corpus().join("cobra");
    let mut paths = Vec::new();
    cobra_histories(&root, &mut paths);
    let levels = [
        Level::Serializable,
        Level::SnapshotIsolation,
        Level::Declared,
        Level::Causal,
        Level::ReadAtomic,
        Level::ReadCommitted,
    ];
    println!(
        "{:<34} {:>9} {:>16} {:>9} {:>12} {:>7}  verdict",
        "history", "ops", "level", "ms", "ops/s", "÷ ser"
    );
    for path in paths {
        let name = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let h = match read_history(&path, None) {
            Ok(h) => h,
            Err(e) => {
                println!("{name:<34} cannot read: {e}");
                continue;
            }
        };
        let ops: usize = h.transactions.iter().map(|t| t.ops.len()).sum();
        let mut ser_ms = f64::NAN;
        for level in levels {
            let mut best = f64::INFINITY;
            let mut verdict = String::new();
            for _ in 0..repeat.max(1) {
                let start = Instant::now();
                match verify(&h, &Options { level, ..Options::default() }) {
                    Ok(r) => verdict = if r.is_accept() { "accept".into() } else { "reject".into() },
                    Err(e) => verdict = format!("error: {e}"),
                }
                best = best.min(start.elapsed().as_secs_f64() * 1e3);
            }
            if level == Level::Serializable {
                ser_ms = best;
            }
            println!(
                "{name:<34} {ops:>9} {:>16} {best:>9.1} {:>12.0} {:>7.2}  {verdict}",
                level.name(),
                ops as f64 / (best / 1e3),
                best / ser_ms
            );
        }
    }
}
