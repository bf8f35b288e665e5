//! Property tests over the whole configuration space: whatever the knobs, a seed replays exactly, the run
//! commits what was asked, serializability stays serializable and SI stays snapshot-isolated (by the
//! brute-force oracles in tests/common).

mod common;

use proptest::prelude::*;
use refstore::{GenConfig, Model};

fn model() -> impl Strategy<Value = Model> {
    prop::sample::select(Model::ALL.to_vec())
}

/// Small configurations: at most 7 committed transactions, so the oracles can enumerate every order.
fn small_config(model: impl Strategy<Value = Model>) -> impl Strategy<Value = GenConfig> {
    (
        model,
        1usize..5,
        1usize..=7,
        1usize..5,
        1usize..6,
        0.0f64..=1.0,
        0.1f64..=1.0,
        any::<u64>(),
        any::<bool>(),
        0.0f64..=1.0,
    )
        .prop_map(
            |(model, clients, txns, keys, ops_per_txn, read_ratio, fresh, seed, record_aborted, hot)| {
                GenConfig {
                    model,
                    clients,
                    txns,
                    keys,
                    ops_per_txn,
                    read_ratio,
                    seed,
                    fresh_view_share: fresh,
                    hot_key_share: hot,
                    record_aborted,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_seed_replays_exactly_and_commits_what_was_asked(config in small_config(model())) {
        let a = refstore::generate(&config).expect("generates");
        prop_assert_eq!(&a, &refstore::generate(&config).expect("generates"));
        prop_assert_eq!(a.stats().committed, config.txns as u64);
    }

    #[test]
    fn serializability_is_serializable_whatever_the_knobs(
        config in small_config(Just(Model::Serializable))
    ) {
        let h = refstore::generate(&config).expect("generates");
        prop_assert!(common::serializable(&h), "{:?}", config);
    }

    #[test]
    fn snapshot_isolation_is_snapshot_isolated_whatever_the_knobs(
        config in small_config(Just(Model::SnapshotIsolation))
    ) {
        let h = refstore::generate(&config).expect("generates");
        prop_assert!(common::snapshot_isolated(&h), "{:?}", config);
    }
}
