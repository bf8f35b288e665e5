//! How fast the reference store generates histories, per model: prints a table of committed transactions
//! per second for a few history sizes. Nothing is asserted.

use std::time::Instant;

use refstore::{GenConfig, Model};

fn main() {
    println!("{:<5} {:>8} {:>10} {:>12} {:>9}", "model", "txns", "ms", "txns/s", "aborted");
    for model in Model::ALL {
        for txns in [1_000usize, 5_000] {
            let config = GenConfig {
                model,
                clients: 8,
                txns,
                keys: 100,
                ops_per_txn: 6,
                read_ratio: 0.6,
                seed: 1,
                fresh_view_share: 0.7,
                hot_key_share: 0.1,
                record_aborted: true,
            };
            let start = Instant::now();
            let history = match refstore::generate(&config) {
                Ok(h) => h,
                Err(e) => {
                    println!("{:<5} {:>8} failed: {e}", model.name(), txns);
                    continue;
                }
            };
            let elapsed = start.elapsed();
            println!(
                "{:<5} {:>8} {:>10.1} {:>12.0} {:>9}",
                model.name(),
                txns,
                elapsed.as_secs_f64() * 1e3,
                txns as f64 / elapsed.as_secs_f64(),
                history.stats().aborted
            );
        }
    }
}
