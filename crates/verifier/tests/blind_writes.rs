//! Blind writes of one key make one chain each (Cobra §3.1 combines only read-modify-writes), so a
//! constraint for every pair of chains would be quadratic: 100,000 of them in one session once made the
//! verifier use over 20 GiB. Session order already sorts them; only neighbours need a constraint.

use std::time::Instant;

use history::{CollectorId, History, KeyName, Op, Outcome, SessionId, Transaction, TxnId, WriteId};
use verifier::{Options, check_report_detailed, verify};

/// `n` committed transactions in one session, each a blind write of the key `x`, and no reads.
fn blind_writes_of_one_key(n: u64) -> History {
    let mut h = History::default();
    let key = h.keys.intern(KeyName { namespace: String::new(), bytes: b"x".to_vec() });
    h.transactions = (0..n)
        .map(|i| {
            let mut t = Transaction::new(TxnId(i + 1), SessionId(0), i);
            t.outcome = Outcome::Committed;
            t.collector = CollectorId(0);
            t.ops.push(Op::Write { key, write: WriteId(i + 1), stmt: None });
            t
        })
        .collect();
    h
}

#[test]
fn a_hundred_thousand_blind_writes_of_one_key_in_one_session_are_accepted_with_a_constraint_per_neighbour() {
    let n = 100_000;
    let h = blind_writes_of_one_key(n);
    let start = Instant::now();
    let report = verify(&h, &Options::default()).unwrap();
    let c = &report.counts;
    println!(
        "{n} blind writes of one key in one session: {:?} in {:.0} ms (construct {:.0}, prune {:.0}, solve \
         {:.0}); {} chains, {} constraints before pruning, {} after",
        report.verdict,
        start.elapsed().as_secs_f64() * 1e3,
        report.timings.construct_ms,
        report.timings.prune_ms,
        report.timings.solve_ms,
        c.chains,
        c.constraints_before_prune,
        c.constraints_after_prune
    );
    assert!(report.is_accept(), "{}", report.render_text());
    assert_eq!(c.chains, n);
    // One constraint per pair of neighbours in session order, not one per pair of chains (n²/2 = 5·10⁹).
    assert!(c.constraints_before_prune < n, "{} constraints", c.constraints_before_prune);
    check_report_detailed(&h, &report).unwrap();
}

/// `n` committed transactions in `sessions` sessions, round robin, each a blind write of one of `keys` keys
/// and nobody reading them: what the proxy records for `UPDATE t SET v = v + 1 WHERE k = $1` (PostgreSQL
/// cannot report the row's old version) and for pgbench's branch and teller updates.
fn blind_increments(n: u64, sessions: u64, keys: u64) -> History {
    let mut h = History::default();
    let names: Vec<_> = (0..keys)
        .map(|k| h.keys.intern(KeyName { namespace: "t".into(), bytes: k.to_string().into_bytes() }))
        .collect();
    h.transactions = (0..n)
        .map(|i| {
            let mut t = Transaction::new(TxnId(i + 1), SessionId(i % sessions), i / sessions);
            t.outcome = Outcome::Committed;
            t.collector = CollectorId(0);
            t.ops.push(Op::Write { key: names[(i % keys) as usize], write: WriteId(i + 1), stmt: None });
            t
        })
        .collect();
    h
}

#[test]
fn blind_increments_of_few_rows_from_many_sessions_need_no_constraint_under_serializability() {
    // 3,000 writes of 5 keys from 12 sessions: 600 writes a key, 50 of them per session. The full polygraph
    // has a constraint for every pair of writes of a key in different sessions.
    let (n, sessions, keys) = (3_000u64, 12u64, 5u64);
    let h = blind_increments(n, sessions, keys);
    let per_key = n / keys;
    let per_key_session = per_key / sessions;
    let cross_session = keys * (per_key * (per_key - per_key_session) / 2);
    let start = Instant::now();
    let report = verify(&h, &Options::default()).unwrap();
    let c = &report.counts;
    println!(
        "{n} blind increments of {keys} keys from {sessions} sessions: {:?} in {:.0} ms; {} pairs of unread \
         writes skipped, {} constraints",
        report.verdict,
        start.elapsed().as_secs_f64() * 1e3,
        c.unread_pairs,
        c.constraints_before_prune
    );
    assert!(report.is_accept(), "{}", report.render_text());
    assert_eq!(c.constraints_before_prune, 0);
    // Every cross-session pair, and each session's neighbours (the pairs session order would have sorted).
    assert_eq!(c.unread_pairs, cross_session + keys * sessions * (per_key_session - 1));
    check_report_detailed(&h, &report).unwrap();

    // Snapshot isolation keeps them: two writers of one key must not be concurrent there. (Without pruning,
    // which would first try serializability and take its verdict.)
    let small = blind_increments(120, 4, 3);
    let options = Options { level: verifier::Level::SnapshotIsolation, prune: false, ..Options::default() };
    let si = verify(&small, &options).unwrap();
    assert!(si.is_accept(), "{}", si.render_text());
    assert_eq!(si.counts.unread_pairs, 0);
    // 40 writes a key, 10 per session: 40·30/2 cross-session pairs a key, and 9 neighbours per session.
    assert_eq!(si.counts.constraints_before_prune, 3 * (600 + 4 * 9));
}
