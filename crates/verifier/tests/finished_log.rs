//! A finished history log verified in rounds as `krait serve` reads it, record by record
//! (`verifier::online::verify_log_in_rounds`, what `krait verify --rounds` runs on a log folder), gets the
//! verdict that one-shot verification gives the log replayed whole, on random logs with everything a proxy
//! writes (intents whose outcome never comes, fences, sessions that end, discovered writes, crashes, stale
//! reads), at serializability (which collects garbage) and at snapshot isolation (which does not); and on
//! logs with gaps, where a crash under `group` durability lost writers that later transactions read.

mod common;

use history::log::HistoryLog;
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use verifier::online::verify_log_in_rounds;
use verifier::{Level, Options, RoundOptions, verify};

use common::random_log::{random_log, random_log_losing_writers};
use verifier::UnverifiableCause;

/// What comparing rounds with one-shot verification on many logs found.
#[derive(Default)]
struct Tally {
    accepted: usize,
    rejected: usize,
    collected: u64,
    unjudged: usize,
    initial_stale: usize,
    with_gaps: usize,
    /// Cases where one-shot and rounds both left reads after a gap unjudged.
    gap_reads: usize,
}

#[test]
fn a_finished_log_verified_in_rounds_gets_the_verdict_of_its_replayed_history() {
    let t = compare(0xf1_0001, 1000, random_log);
    println!(
        "{} accepted, {} rejected, {} with transactions collected, {} accepted in rounds with reads not judged, \
         {} rejected for a read of an initial version that a collected write superseded",
        t.accepted, t.rejected, t.collected, t.unjudged, t.initial_stale
    );
    assert_eq!(t.with_gaps, 0, "strict logs have no gaps");
    // A key's initial version is superseded by its first recorded write, so once that write is collected a
    // covered read of the initial version is stale, whether or not a version of the key became its base.
    assert!(t.initial_stale > 0, "no stale read of a superseded initial version was found");
    assert!(t.accepted > 100 && t.rejected > 100, "{} accepted, {} rejected", t.accepted, t.rejected);
    assert!(t.collected > 50, "collection ran in {} cases only", t.collected);
}

/// A crash under `group` may lose writers whose versions later transactions read: rounds leave those reads
/// unjudged as one-shot does (`krait verify --rounds` refused such logs, and `krait serve`, which reads on
/// past a gap, reported them as garbage reads).
#[test]
fn a_finished_log_with_gaps_verified_in_rounds_gets_the_verdict_of_its_replayed_history() {
    let t = compare(0xf1_0002, 600, random_log_losing_writers);
    println!(
        "{} accepted, {} rejected, {} with gaps, {} with reads after a gap not judged both ways",
        t.accepted, t.rejected, t.with_gaps, t.gap_reads
    );
    assert!(t.with_gaps > 100, "only {} logs had a gap", t.with_gaps);
    assert!(t.gap_reads > 50, "reads of lost writes were left unjudged in {} cases only", t.gap_reads);
    assert!(t.accepted > 50 && t.rejected > 50, "{} accepted, {} rejected", t.accepted, t.rejected);
}

/// Verifies `cases` logs that `make` appends, one-shot and in rounds, and checks that the two agree.
fn compare(seed: u64, cases: usize, make: fn(&mut StdRng, &std::path::Path) -> history::DiskLog) -> Tally {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tally = Tally::default();
    for case in 0..cases {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = make(&mut rng, &dir.path().join("log"));
        let history = log.replay().expect("the log replays");
        tally.with_gaps += usize::from(!history.gaps.is_empty());
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
                tally.initial_stale +=
                    usize::from(first.contains("read the initial version") && first.contains("collected"));
            } else if !one_shot.is_accept() {
                assert!(streamed.outcome.unverifiable_reads() > 0, "{}", why());
                tally.unjudged += 1;
            }
            let one_shot_gap = one_shot.unverifiable.iter().any(|u| u.cause == UnverifiableCause::LogGap);
            let rounds_gap = streamed.outcome.not_judged.by_cause().contains_key(&UnverifiableCause::LogGap);
            tally.gap_reads += usize::from(one_shot_gap && rounds_gap);
            if one_shot.is_accept() {
                // Stopped at a reject, the rest of a batch is read and not verified; accepted, every
                // transaction of the replayed history was read.
                assert_eq!(streamed.outcome.transactions, history.transactions.len(), "case {case}");
                tally.accepted += 1;
            } else {
                tally.rejected += 1;
            }
            tally.collected += u64::from(streamed.outcome.deleted > 0);
        }
    }
    tally
}
