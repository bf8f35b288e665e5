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
