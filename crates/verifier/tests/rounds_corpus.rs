//! Round-by-round verification gives every labelled corpus history its known verdict (the one one-shot
//! verification gives), and on the scaling history with fences garbage collection keeps the live set well
//! below the history's size.

use std::path::PathBuf;

use history::codec::read_history;
use verifier::{RoundOptions, verify_in_rounds};

fn corpus() -> PathBuf {
    if let Ok(dir) = std::env::var("KRAIT_CORPUS") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join("../shared/corpus")
}

fn load(path: &str) -> history::History {
    let full = corpus().join(path);
    assert!(full.exists(), "corpus history {} is missing (set KRAIT_CORPUS)", full.display());
    read_history(&full, None).unwrap_or_else(|e| panic!("{path}: cannot read: {e}"))
}

#[test]
fn corpus_histories_get_their_verdicts_in_rounds() {
    let cases = [
        ("cobra/ser-violation/cock-G2", false, 50),
        ("cobra/ser-violation/cock-blog", false, 5),
        ("polysi/galera-lost-update.txt", false, 50),
        ("polysi/yugabyte-si.txt", false, 50),
        ("cobra/one-shot-chengRW/chengRW-100", true, 10),
        ("cobra/one-shot-chengRW/chengRW-500", true, 50),
        ("cobra/one-shot-chengRW/chengRW-2000", true, 200),
        ("cobra/one-shot-10k/twitter-10000", true, 1_000),
        ("cobra/one-shot-10k/rubis-10000", true, 1_000),
    ];
    for (path, accept, size) in cases {
        let h = load(path);
        let out =
            verify_in_rounds(&h, &RoundOptions::offline(size)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            out.is_accept(),
            accept,
            "{path}: wrong verdict in rounds of {size}\n{}",
            out.reports.first().map(|r| r.render_text()).unwrap_or_default()
        );
        println!("{path}: {:?} in {} rounds of {size}", out.verdict, out.rounds.len());
    }
}

#[test]
fn the_scaling_history_is_accepted_in_rounds_with_bounded_memory() {
    let h = load("cobra/scaling/twitter-100000");
    let out = verify_in_rounds(&h, &RoundOptions::offline(5_000)).unwrap();
    assert!(out.is_accept(), "{}", out.reports.first().map(|r| r.render_text()).unwrap_or_default());
    assert!(out.gc_disabled.is_none(), "collection was off: {:?}", out.gc_disabled);
    println!(
        "twitter-100000 in rounds of 5000: {} transactions, {} deleted, at most {} live after a round ({:.1}%), \
         {} live at the end, {} tombstones, {} link reads, {} rounds",
        out.transactions,
        out.deleted,
        out.max_live,
        100.0 * out.max_live as f64 / out.transactions as f64,
        out.live_at_end,
        out.tombstones,
        out.links_added,
        out.rounds.len()
    );
    assert!(out.max_live < out.transactions / 4, "live set {} of {}", out.max_live, out.transactions);
    // Bounded, not merely smaller: every round's live set stays under a bound in round sizes, and the last
    // third of the rounds holds no more than the middle third (give or take a round). The earlier rules
    // (`gc_legacy_rules`) fail both: their live set grew by about 2,200 per round, to 44,464.
    let live: Vec<usize> = out.rounds.iter().map(|r| r.live_after).collect();
    println!("live after each round: {live:?}");
    for r in &out.rounds {
        assert!(
            r.live_after <= 2 * 5_000,
            "round {}: {} live ({:?}); per round: {live:?}",
            r.round,
            r.live_after,
            r.kept
        );
    }
    let third = live.len() / 3;
    let middle = live[third..2 * third].iter().max().copied().unwrap_or(0);
    let last = live[2 * third..].iter().max().copied().unwrap_or(0);
    assert!(last <= middle + 5_000, "the live set grows: middle third at most {middle}, last third {last}");
}
