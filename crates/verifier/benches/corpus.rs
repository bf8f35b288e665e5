//! `cargo bench -p verifier`: verifies every Cobra-format history in the shared corpus and prints, per
//! history, its size, the verdict, the time per stage (construct, prune, solve — the split of Cobra Fig. 7)
//! and the peak memory (VmHWM) of a process that only loads and verifies that history, both after loading
//! and after verifying. Nothing is asserted.
//!
//! Set `KRAIT_CORPUS` to the corpus folder if it is not at `<workspace>/../shared/corpus`. Pass a substring
//! as the first argument to run only matching histories; `KRAIT_BENCH_REPEAT` (default 3) sets how many
//! runs each history gets (the best is shown).

mod common;

use std::path::Path;
use std::time::Instant;

use common::{cobra_histories, corpus};
use history::codec::read_history;
use verifier::{Options, verify};

/// Peak resident memory of this process so far, in MiB, from /proc (Linux only).
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Verifies one history in this process and prints its row; the parent runs one child per history so that
/// each row's peak memory is that history's own.
fn run_one(path: &Path, name: &str, repeat: usize) {
    let load = Instant::now();
    let h = match read_history(path, None) {
        Ok(h) => h,
        Err(e) => {
            println!("{name:<34} cannot read: {e}");
            return;
        }
    };
    let load_ms = load.elapsed().as_secs_f64() * 1e3;
    let loaded_mib = peak_mib().unwrap_or(f64::NAN);
    let mut best: Option<verifier::Report> = None;
    for _ in 0..repeat.max(1) {
        match verify(&h, &Options::default()) {
            Ok(r) => {
                let total =
                    |r: &verifier::Report| r.timings.construct_ms + r.timings.prune_ms + r.timings.solve_ms;
                if best.as_ref().is_none_or(|b| total(&r) < total(b)) {
                    best = Some(r);
                }
            }
            Err(e) => {
                println!("{name:<34} verify failed: {e}");
                return;
            }
        }
    }
    let Some(r) = best else { return };
    if std::env::var_os("KRAIT_BENCH_COUNTS").is_some() {
        println!("{}", serde_json::to_string(&r.counts).unwrap_or_default());
    }
    println!(
        "{name:<34} {:>7} {:>7} {:>7} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.0} {:>8.0}",
        r.counts.vertices,
        if r.is_accept() { "accept" } else { "reject" },
        r.counts.constraints_before_prune,
        r.counts.constraints_after_prune,
        load_ms,
        r.timings.construct_ms,
        r.timings.prune_ms,
        r.timings.solve_ms,
        r.timings.construct_ms + r.timings.prune_ms + r.timings.solve_ms + r.timings.report_ms,
        loaded_mib,
        peak_mib().unwrap_or(f64::NAN)
    );
}

fn main() {
    if let (Ok(path), Ok(name)) = (std::env::var("KRAIT_BENCH_ONE"), std::env::var("KRAIT_BENCH_NAME")) {
        let repeat: usize =
            std::env::var("KRAIT_BENCH_REPEAT").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
        run_one(Path::new(&path), &name, repeat);
        return;
    }
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_default();
    let repeat: usize = std::env::var("KRAIT_BENCH_REPEAT").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let root = corpus().join("cobra");
    let mut histories = Vec::new();
    cobra_histories(&root, &mut histories);
    if histories.is_empty() {
        eprintln!("no Cobra histories under {} (set KRAIT_CORPUS)", root.display());
        std::process::exit(1);
    }
    println!(
        "{:<34} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "history",
        "txns",
        "verdict",
        "cons",
        "left",
        "load ms",
        "constr ms",
        "prune ms",
        "solve ms",
        "total ms",
        "load MiB",
        "peak MiB"
    );
    println!("(cons: constraints generated; left: after pruning; total: verification without loading)");
    for path in histories {
        let name = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        if !name.contains(&filter) {
            continue;
        }
        let Ok(exe) = std::env::current_exe() else { return run_one(&path, &name, repeat) };
        let status = std::process::Command::new(exe)
            .env("KRAIT_BENCH_ONE", &path)
            .env("KRAIT_BENCH_NAME", &name)
            .env("KRAIT_BENCH_REPEAT", repeat.to_string())
            .status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            println!("{name:<34} the run failed: {status:?}");
        }
    }
}
