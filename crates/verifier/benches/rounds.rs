//! `cargo bench -p verifier --bench rounds`: verification capacity in rounds (Cobra §6.2, Fig. 10 shape) on
//! the scaling history `cobra/scaling/twitter-100000`: for each round size, the rounds, the time, the
//! capacity (`#tx / round time`, averaged over the run as transactions per second), the most transactions
//! held after collection, and the transactions left at the end. Nothing is asserted.
//!
//! Set `KRAIT_CORPUS` if the corpus is not at `<workspace>/../shared/corpus`. Arguments: an optional history
//! path under the corpus (default `cobra/scaling/twitter-100000`) and optional round sizes.

use std::path::PathBuf;

use history::codec::read_history;
use verifier::{RoundOptions, verify_in_rounds};

fn corpus() -> PathBuf {
    if let Ok(dir) = std::env::var("KRAIT_CORPUS") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    // Per-round lines (live transactions after collection, time per round) unless `--quiet`.
    let verbose = !std::env::args().any(|a| a == "--quiet");
    let name = args.iter().find(|a| a.parse::<usize>().is_err()).cloned();
    let name = name.unwrap_or_else(|| "cobra/scaling/twitter-100000".to_owned());
    let mut sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![500, 1_000, 2_500, 5_000, 10_000, 20_000];
    }
    let path = corpus().join(&name);
    let h = match read_history(&path, None) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("cannot read {}: {e} (set KRAIT_CORPUS)", path.display());
            std::process::exit(1);
        }
    };
    println!("{name}: {} transactions", h.transactions.len());
    println!(
        "{:>10} {:>7} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8}",
        "round size", "rounds", "verdict", "time (s)", "txn/s", "max live", "end live", "deleted", "links"
    );
    let mut adaptive = vec![false; sizes.len()];
    adaptive.push(true);
    sizes.push(5_000);
    for (size, adapt) in sizes.into_iter().zip(adaptive) {
        let options = RoundOptions { adaptive: adapt, ..RoundOptions::offline(size) };
        match verify_in_rounds(&h, &options) {
            Ok(out) => {
                if verbose {
                    for r in &out.rounds {
                        println!(
                            "    round {:>3}: admitted {:>6} verified {:>6} deleted {:>6} live after GC {:>6} \
                             waiting {:>5} epoch_agree {:>4} verify {:>8.1} ms gc {:>8.1} ms",
                            r.round,
                            r.admitted,
                            r.verified,
                            r.deleted,
                            r.live_after,
                            r.waiting,
                            r.epoch_agree,
                            r.verify_ms,
                            r.gc_ms
                        );
                    }
                }
                println!(
                    "{:>10} {:>7} {:>8} {:>10.2} {:>10.0} {:>9} {:>9} {:>9} {:>8}",
                    if adapt {
                        format!("adaptive{}", out.rounds.last().map_or(0, |r| r.round_size))
                    } else {
                        size.to_string()
                    },
                    out.rounds.len(),
                    if out.is_accept() { "accept" } else { "reject" },
                    out.elapsed_ms / 1e3,
                    out.throughput(),
                    out.max_live,
                    out.live_at_end,
                    out.deleted,
                    out.links_added,
                )
            }
            Err(e) => println!("{size:>10} error: {e}"),
        }
    }
}
