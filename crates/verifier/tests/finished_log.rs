//! A finished history log verified in rounds as `krait serve` reads it, record by record
//! (`verifier::online::verify_log_in_rounds`, what `krait verify --rounds` runs on a log folder), gets the
//! verdict that one-shot verification gives the log replayed whole, on random logs with everything a proxy
//! writes (intents whose outcome never comes, fences, sessions that end, discovered writes, crashes, stale
//! reads), at serializability (which collects garbage) and at snapshot isolation (which does not).

mod common;

use history::log::HistoryLog;
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use verifier::online::verify_log_in_rounds;
use verifier::{Level, Options, RoundOptions, verify};

use common::random_log::random_log;

#[test]
fn a_finished_log_verified_in_rounds_gets_the_verdict_of_its_replayed_history() {
    let mut rng = StdRng::seed_from_u64(0xf1_0001);
    let (mut accepted, mut rejected, mut collected, mut unjudged, mut initial_stale) = (0, 0, 0, 0, 0);
    for case in 0..1000 {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = random_log(&mut rng, &dir.path().join("log"));
        let history = log.replay().expect("the log replays");
        assert!(history.gaps.is_empty(), "case {case}: strict logs have no gaps");
        for level in [Level::Serializable, Level::SnapshotIsolation] {
            let verify_options = Options { level, ..Options::default() };
            let one_shot = verify(&history, &verify_options).expect("one-shot verification runs");
            let options =
                RoundOptions { verify: verify_options, ..RoundOptions::offline(rng.gen_range(1..=40)) };
            let streamed = verify_log_in_rounds(&log, &options).expect("verification in rounds runs");
            let why = || {
                format!(
                    "case {case} at {level:?}, rounds of {}: streamed {:?} ({} reads not judged), one-shot {}",
                    options.round_size,
                    streamed.outcome.reports.first().map(|r| r.verdict_line()),
                    streamed.outcome.unverifiable_reads(),
                    one_shot.verdict_line()
                )
            };
            // Rounds reject only what one-shot rejects. They may accept what one-shot rejects only by not
            // judging a read, and then say so: a read of a version collected before the reader's session
            // had fenced (a session first seen after collection began) has no evidence left to judge by.
            if !streamed.outcome.is_accept() {
                assert!(!one_shot.is_accept(), "{}", why());
                let first = streamed.outcome.reports.first().map(|r| r.verdict_line()).unwrap_or_default();
                initial_stale +=
                    usize::from(first.contains("read the initial version") && first.contains("collected"));
            } else if !one_shot.is_accept() {
                assert!(streamed.outcome.unverifiable_reads() > 0, "{}", why());
                unjudged += 1;
            }
            if one_shot.is_accept() {
                // Stopped at a reject, the rest of a batch is read and not verified; accepted, every
                // transaction of the replayed history was read.
                assert_eq!(streamed.outcome.transactions, history.transactions.len(), "case {case}");
                accepted += 1;
            } else {
                rejected += 1;
            }
            collected += u64::from(streamed.outcome.deleted > 0);
        }
    }
    println!(
        "{accepted} accepted, {rejected} rejected, {collected} with transactions collected, {unjudged} accepted \
         in rounds with reads not judged, {initial_stale} rejected for a read of an initial version that a \
         collected write superseded"
    );
    // A key's initial version is superseded by its first recorded write, so once that write is collected a
    // covered read of the initial version is stale, whether or not a version of the key became its base.
    assert!(initial_stale > 0, "no stale read of a superseded initial version was found");
    assert!(accepted > 100 && rejected > 100, "{accepted} accepted, {rejected} rejected");
    assert!(collected > 50, "collection ran in {collected} cases only");
}
