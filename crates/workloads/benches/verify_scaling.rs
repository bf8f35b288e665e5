//! Verification time against history size for every workload, on generated histories (the shape of Cobra
//! Fig. 5). Prints a table; never asserts a time.
//!
//! `cargo bench -p workloads --bench verify_scaling -- 1000 2000 5000` picks the sizes (default 1k, 2k,
//! 5k, 10k). 24 sessions, as in Cobra §6.1.

use std::time::Instant;

use workloads::memory::{GenerateOptions, Interleave, generate};
use workloads::{Sizes, Workload, WorkloadName};

fn main() {
    let mut sizes: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![1000, 2000, 5000, 10_000];
    }
    println!("{:<10} {:>7} {:>10} {:>10} {:>8}", "workload", "txns", "gen ms", "verify ms", "verdict");
    for name in WorkloadName::ALL {
        let workload = Workload::new(name, &Sizes::default());
        for &txns in &sizes {
            let t = Instant::now();
            let opts = GenerateOptions {
                txns,
                clients: 24,
                seed: 1,
                interleave: Interleave::Random,
                fence_every: None,
            };
            let g = match generate(&workload, &opts) {
                Ok(g) => g,
                Err(e) => {
                    println!("{name:<10} {txns:>7} generation failed: {e}");
                    continue;
                }
            };
            let gen_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let verdict = match verifier::verify(&g.history, &verifier::Options::default()) {
                Ok(r) if r.is_accept() => "accept",
                Ok(_) => "REJECT",
                Err(_) => "error",
            };
            let verify_ms = t.elapsed().as_secs_f64() * 1e3;
            println!("{name:<10} {txns:>7} {gen_ms:>10.1} {verify_ms:>10.1} {verdict:>8}");
        }
    }
}
