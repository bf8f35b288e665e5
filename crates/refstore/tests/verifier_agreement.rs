//! The verifier's verdict against the brute-force oracles (tests/common) on histories from every model:
//! serializability, and strict serializability with no clock-drift allowance (the store's timestamps are
//! exact). Zero disagreements are allowed; a failure lists the model, config and seed to replay.

mod common;

use common::{contended, serializable, simulations, strictly_serializable};
use refstore::{GenConfig, Model};
use verifier::{Level, Options};

const SEEDS: u64 = 200;

/// A named way to build a configuration for a model and a seed.
type NamedConfig = (&'static str, fn(Model, u64) -> GenConfig);

#[test]
fn verifier_agrees_with_the_brute_force_oracle_on_generated_histories() {
    let configs: [NamedConfig; 3] = [
        ("contended", contended),
        ("wide", |model, seed| GenConfig {
            clients: 4,
            txns: 7,
            keys: 3,
            ops_per_txn: 5,
            record_aborted: false,
            ..contended(model, seed)
        }),
        ("read-heavy", |model, seed| GenConfig {
            read_ratio: 0.8,
            fresh_view_share: 0.1,
            hot_key_share: 0.3,
            ..contended(model, seed)
        }),
    ];
    let ser = Options::default();
    let strict = Options { level: Level::StrictSerializable, clock_drift_ms: 0, ..Options::default() };
    let mut disagreements = Vec::new();
    let mut checked = 0;
    let mut rejected = 0;
    for (name, config) in configs {
        for model in Model::ALL {
            for (seed, sim) in simulations(SEEDS, |seed| config(model, seed)) {
                let h = &sim.history;
                for (level, options, oracle) in
                    [("ser", &ser, serializable(h)), ("strict", &strict, strictly_serializable(h))]
                {
                    checked += 1;
                    let report = match verifier::verify(h, options) {
                        Ok(report) => report,
                        Err(e) => {
                            disagreements.push(format!("{name}/{model}/seed {seed}/{level}: error {e}"));
                            continue;
                        }
                    };
                    if report.is_accept() != oracle {
                        disagreements.push(format!(
                            "{name}/{model}/seed {seed}/{level}: verifier {:?}, oracle {}",
                            report.verdict,
                            if oracle { "accept" } else { "reject" }
                        ));
                    } else if !oracle {
                        rejected += 1;
                        if let Err(e) = verifier::check_report(h, &report) {
                            disagreements
                                .push(format!("{name}/{model}/seed {seed}/{level}: report fails: {e}"));
                        }
                    }
                }
            }
        }
    }
    println!("{checked} verdicts compared, {rejected} rejects, {} disagreements", disagreements.len());
    assert!(disagreements.is_empty(), "verifier and oracle disagree:\n{}", disagreements.join("\n"));
}
