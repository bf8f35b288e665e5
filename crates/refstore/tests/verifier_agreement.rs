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

/// Beyond the oracle's reach, the store's construction is the oracle: serializability generates only
/// serializable histories (checked by brute force on small ones above and in tests/models.rs), and with
/// every view fresh also only strictly serializable ones. The verifier must accept them all, and must reject
/// some histories of the weak models at the same size.
#[test]
fn verifier_accepts_large_serializable_histories_and_rejects_weak_ones() {
    let large = |model, seed| GenConfig {
        model,
        clients: 6,
        txns: 150,
        keys: 8,
        ops_per_txn: 5,
        read_ratio: 0.5,
        seed,
        fresh_view_share: 0.5,
        hot_key_share: 0.2,
        record_aborted: true,
    };
    let strict = Options { level: Level::StrictSerializable, clock_drift_ms: 0, ..Options::default() };
    for seed in 0..10 {
        let h = refstore::generate(&large(Model::Serializable, seed)).expect("generates");
        let report = verifier::verify(&h, &Options::default()).expect("verifies");
        assert!(report.is_accept(), "SER seed {seed} rejected:\n{}", report.to_json());

        let fresh = GenConfig { fresh_view_share: 1.0, ..large(Model::Serializable, seed) };
        let h = refstore::generate(&fresh).expect("generates");
        let report = verifier::verify(&h, &strict).expect("verifies");
        assert!(report.is_accept(), "fresh SER seed {seed} not strict:\n{}", report.to_json());
    }
    for model in [Model::SnapshotIsolation, Model::Causal, Model::ReadCommitted] {
        let rejected = (0..10)
            .filter(|&seed| {
                let h = refstore::generate(&large(model, seed)).expect("generates");
                !verifier::verify(&h, &Options::default()).expect("verifies").is_accept()
            })
            .count();
        println!("{model}: {rejected} of 10 histories of 150 transactions rejected");
        assert!(rejected > 0, "{model}: no large history rejected");
    }
}

/// The levels a model's histories must satisfy: the verifier level that model is, and every weaker one
/// (Cerone et al.'s hierarchy: SER ⊂ SI ⊂ PSI, prefix consistency ⊂ causal; all of them are read committed).
/// The verifier's read atomic is Biswas and Enea's, which keeps session order (a transaction sees the writes
/// of its session's earlier ones); the store's read atomic and update atomic are the paper's `ET_⊤`, without
/// session guarantees, so only the models that keep them (the session guarantees and up) are read atomic
/// there.
fn levels_of(model: Model) -> &'static [Level] {
    use Level::*;
    match model {
        Model::Serializable => &[Serializable, SnapshotIsolation, Causal, ReadAtomic, ReadCommitted],
        Model::SnapshotIsolation => &[SnapshotIsolation, Causal, ReadAtomic, ReadCommitted],
        Model::ParallelSi | Model::ConsistentPrefix | Model::Causal => &[Causal, ReadAtomic, ReadCommitted],
        Model::SessionGuarantees => &[ReadAtomic, ReadCommitted],
        Model::UpdateAtomic | Model::ReadAtomic | Model::ReadCommitted => &[ReadCommitted],
    }
}

/// Issue 17: each model's histories are accepted at that model's level and at every weaker one, and a
/// history held to `declared` with no recorded levels is judged as serializable; every accept's report
/// re-checks.
#[test]
fn every_models_histories_pass_its_level_and_every_weaker_one() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for model in Model::ALL {
        for (seed, sim) in simulations(SEEDS, |seed| contended(model, seed)) {
            let h = &sim.history;
            for &level in levels_of(model) {
                checked += 1;
                let report = verifier::verify(h, &Options { level, ..Options::default() }).expect("verifies");
                if !report.is_accept() {
                    failures.push(format!(
                        "{model}/seed {seed}: rejected at {}: {}",
                        level.name(),
                        report.verdict_line()
                    ));
                } else if let Err(e) = verifier::check_report(h, &report) {
                    failures.push(format!("{model}/seed {seed}/{}: accept fails: {e}", level.name()));
                }
            }
            let declared = Options { level: Level::Declared, ..Options::default() };
            let d = verifier::verify(h, &declared).expect("verifies").is_accept();
            let s = verifier::verify(h, &Options::default()).expect("verifies").is_accept();
            if d != s {
                failures.push(format!("{model}/seed {seed}: declared {d}, serializable {s}"));
            }
        }
    }
    println!("{checked} verdicts at the models' own and weaker levels, {} failures", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
