//! What the generated-history benches share: the sizes to run, and every workload generated at each size.

use std::time::Instant;

use workloads::memory::{GenerateOptions, Generated, Interleave, generate};
use workloads::{Sizes, Workload, WorkloadName};

/// The sizes (in transactions) given as the bench's arguments, or `default` when none are.
pub fn sizes(default: &[u64]) -> Vec<u64> {
    let sizes: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() { default.to_vec() } else { sizes }
}

/// Generates every workload at each of `sizes` transactions (24 sessions, as in Cobra §6.1, randomly
/// interleaved) and hands `each` the workload's name, the size, the history and how long generating it
/// took in milliseconds. A generation that fails is a row of the table saying so.
pub fn for_each_generated(sizes: &[u64], mut each: impl FnMut(WorkloadName, u64, &Generated, f64)) {
    for name in WorkloadName::ALL {
        let workload = Workload::new(name, &Sizes::default());
        for &txns in sizes {
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
            each(name, txns, &g, gen_ms);
        }
    }
}
