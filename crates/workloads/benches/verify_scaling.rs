//! Verification time against history size for every workload, on generated histories (the shape of Cobra
//! Fig. 5). Prints a table; never asserts a time.
//!
//! `cargo bench -p workloads --bench verify_scaling -- 1000 2000 5000` picks the sizes (default 1k, 2k,
//! 5k, 10k). 24 sessions, as in Cobra §6.1.

mod common;

use std::time::Instant;

use common::{for_each_generated, sizes};

fn main() {
    let sizes = sizes(&[1000, 2000, 5000, 10_000]);
    println!("{:<10} {:>7} {:>10} {:>10} {:>8}", "workload", "txns", "gen ms", "verify ms", "verdict");
    for_each_generated(&sizes, |name, txns, g, gen_ms| {
        let t = Instant::now();
        let verdict = match verifier::verify(&g.history, &verifier::Options::default()) {
            Ok(r) if r.is_accept() => "accept",
            Ok(_) => "REJECT",
            Err(_) => "error",
        };
        let verify_ms = t.elapsed().as_secs_f64() * 1e3;
        println!("{name:<10} {txns:>7} {gen_ms:>10.1} {verify_ms:>10.1} {verdict:>8}");
    });
}
