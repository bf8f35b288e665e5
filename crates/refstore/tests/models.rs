//! The reference store's models, checked against independent brute-force oracles (tests/common): every
//! history generated under serializability is serializable, weak models produce anomalies under contention,
//! and each model allows exactly the anomalies the literature says it allows.

mod common;

use common::*;
use refstore::{GenConfig, GenError, Model};

const SEEDS: u64 = 300;

fn share(hits: usize, total: usize) -> f64 {
    hits as f64 / total as f64
}

#[test]
fn same_seed_replays_the_same_history() {
    for model in Model::ALL {
        for seed in 0..20 {
            let config = GenConfig { model, clients: 4, txns: 30, keys: 3, seed, ..GenConfig::default() };
            let a = refstore::generate(&config).expect("generates");
            let b = refstore::generate(&config).expect("generates");
            assert_eq!(a, b, "{model} seed {seed} does not replay");
        }
        let histories: Vec<_> = (0..5)
            .map(|seed| refstore::generate(&GenConfig { model, txns: 30, seed, ..GenConfig::default() }))
            .collect::<Result<_, _>>()
            .expect("generates");
        assert!(histories.windows(2).any(|w| w[0] != w[1]), "{model}: seeds change nothing");
    }
}

#[test]
fn generated_histories_have_the_promised_shape() {
    for model in Model::ALL {
        let config = GenConfig { model, clients: 4, txns: 40, keys: 3, seed: 5, ..GenConfig::default() };
        let h = refstore::generate(&config).expect("generates");
        assert_eq!(h.stats().committed, 40, "{model}");
        assert!(h.stats().sessions <= 4);
        let mut writes = std::collections::HashSet::new();
        for t in &h.transactions {
            for op in &t.ops {
                if let history::Op::Write { write, .. } = op {
                    assert!(writes.insert(*write), "{model}: write id {write} reused");
                }
            }
        }
        for (_, txns) in h.sessions() {
            for (i, t) in txns.iter().enumerate() {
                assert_eq!(t.seq, i as u64, "{model}: sequence numbers have a gap");
            }
        }
        let unrecorded =
            refstore::generate(&GenConfig { record_aborted: false, ..config }).expect("generates");
        assert_eq!(unrecorded.stats().aborted, 0);
    }
}

#[test]
fn bad_configurations_are_errors() {
    let bad = [
        GenConfig { clients: 0, ..GenConfig::default() },
        GenConfig { keys: 0, ..GenConfig::default() },
        GenConfig { keys: usize::MAX, ..GenConfig::default() },
        GenConfig { clients: usize::MAX, ..GenConfig::default() },
        GenConfig { ops_per_txn: 0, ..GenConfig::default() },
        GenConfig { ops_per_txn: usize::MAX, ..GenConfig::default() },
        GenConfig { read_ratio: 1.5, ..GenConfig::default() },
        GenConfig { fresh_view_share: f64::NAN, ..GenConfig::default() },
        GenConfig { hot_key_share: -0.1, ..GenConfig::default() },
    ];
    for config in bad {
        assert!(matches!(refstore::generate(&config), Err(GenError::InvalidConfig(_))), "{config:?}");
    }
}

#[test]
fn serializability_generates_only_serializable_histories() {
    let configs = [
        |seed| contended(Model::Serializable, seed),
        |seed| GenConfig {
            clients: 4,
            txns: 7,
            keys: 3,
            ops_per_txn: 5,
            ..contended(Model::Serializable, seed)
        },
        |seed| GenConfig { read_ratio: 0.8, fresh_view_share: 0.0, ..contended(Model::Serializable, seed) },
    ];
    let mut not_strict = 0;
    for config in configs {
        for (seed, sim) in simulations(SEEDS, config) {
            assert!(serializable(&sim.history), "serializability, seed {seed}: {:#?}", sim.history);
            assert!(snapshot_isolated(&sim.history), "serializable but not SI? seed {seed}");
            if !strictly_serializable(&sim.history) {
                not_strict += 1;
            }
        }
    }
    println!("serializability: {not_strict} of {} histories are not strictly serializable", 3 * SEEDS);
    assert!(not_strict > 0, "stale read-only transactions never separated SER from strict SER");
}

#[test]
fn snapshot_isolation_generates_only_si_histories() {
    for (seed, sim) in simulations(SEEDS, |seed| contended(Model::SnapshotIsolation, seed)) {
        assert!(snapshot_isolated(&sim.history), "SI, seed {seed}: {:#?}", sim.history);
    }
}

/// The reject share of each model under the brute-force serializability and SI oracles, with a
/// high-contention configuration. Every model but serializability must produce some non-serializable
/// histories; the ones below SI must produce some non-SI ones.
#[test]
fn weak_models_produce_non_serializable_histories_under_contention() {
    println!("{:<5} {:>10} {:>10} {:>9}", "model", "not SER", "not SI", "aborted");
    for model in Model::ALL {
        let mut not_ser = 0;
        let mut not_si = 0;
        let mut aborted = 0;
        let mut attempts = 0;
        for (_, sim) in simulations(SEEDS, |seed| contended(model, seed)) {
            not_ser += usize::from(!serializable(&sim.history));
            not_si += usize::from(!snapshot_isolated(&sim.history));
            aborted += sim.history.stats().aborted;
            attempts += sim.history.stats().transactions;
        }
        let n = SEEDS as usize;
        println!(
            "{:<5} {:>9.1}% {:>9.1}% {:>8.1}%",
            model.name(),
            100.0 * share(not_ser, n),
            100.0 * share(not_si, n),
            100.0 * aborted as f64 / attempts as f64
        );
        match model {
            Model::Serializable => assert_eq!(not_ser, 0),
            Model::SnapshotIsolation => {
                assert_eq!(not_si, 0);
                assert!(not_ser > 0, "SI never produced a non-serializable history");
            }
            _ => {
                assert!(not_ser > 0, "{model} never produced a non-serializable history");
                if model != Model::ParallelSi {
                    assert!(not_si > 0, "{model} never produced a non-SI history");
                }
            }
        }
    }
}

#[test]
fn lost_updates_exactly_where_writes_may_conflict() {
    for model in Model::ALL {
        let found =
            simulations(SEEDS, |seed| contended(model, seed)).find(|(_, sim)| has_lost_update(&sim.history));
        let forbidden = matches!(
            model,
            Model::UpdateAtomic | Model::ParallelSi | Model::SnapshotIsolation | Model::Serializable
        );
        if forbidden {
            assert!(found.is_none(), "{model} produced a lost update at seed {:?}", found.map(|f| f.0));
        } else {
            assert!(found.is_some(), "{model} never produced a lost update");
        }
    }
}

#[test]
fn snapshot_isolation_allows_write_skew_and_serializability_does_not() {
    let skewed = |model| {
        let config = |seed| GenConfig { ops_per_txn: 5, keys: 2, ..contended(model, seed) };
        simulations(2 * SEEDS, config).find(|(_, sim)| has_write_skew(sim)).map(|(seed, _)| seed)
    };
    assert!(skewed(Model::SnapshotIsolation).is_some(), "SI never produced a write skew");
    assert_eq!(skewed(Model::Serializable), None, "serializability produced a write skew");
}

#[test]
fn only_read_committed_reads_a_key_twice_and_sees_two_versions() {
    for model in Model::ALL {
        let found = simulations(SEEDS, |seed| GenConfig { read_ratio: 0.7, ..contended(model, seed) })
            .any(|(_, sim)| has_non_repeatable_read(&sim.history));
        assert_eq!(found, model == Model::ReadCommitted, "{model}: non-repeatable read found: {found}");
    }
}

#[test]
fn views_are_atomic_so_only_read_committed_fractures_reads() {
    for model in Model::ALL {
        let found = simulations(SEEDS, |seed| GenConfig { ops_per_txn: 5, ..contended(model, seed) })
            .any(|(_, sim)| has_fractured_read(&sim));
        assert_eq!(found, model == Model::ReadCommitted, "{model}: fractured read found: {found}");
    }
}

#[test]
fn session_guarantees_hold_from_the_session_models_up() {
    for model in Model::ALL {
        let found =
            simulations(SEEDS, |seed| contended(model, seed)).find(|(_, sim)| has_session_violation(sim));
        // Read committed reads the latest version, so it keeps the session guarantees in this store.
        let weaker = matches!(model, Model::ReadAtomic | Model::UpdateAtomic);
        assert_eq!(found.is_some(), weaker, "{model}: session violation at {:?}", found.map(|f| f.0));
    }
}

#[test]
fn causality_holds_from_causal_consistency_up() {
    for model in Model::ALL {
        let found =
            simulations(SEEDS, |seed| contended(model, seed)).find(|(_, sim)| has_causality_violation(sim));
        // Read committed reads each key at a different moment, so it can miss a cause it read the effect of.
        let weaker = matches!(
            model,
            Model::ReadCommitted | Model::ReadAtomic | Model::UpdateAtomic | Model::SessionGuarantees
        );
        assert_eq!(found.is_some(), weaker, "{model}: causality violation at {:?}", found.map(|f| f.0));
    }
}
