//! The log's one reader, record by record: what each record finishes (transactions, session ends, gaps),
//! and the one-shot replay as a fold over it.

use history::log::{Replayed, ReplayedTxn, Replayer, replay::replay};
use history::{
    KeyName, LogError, LogGap, LogRecord, LoggedOp, LoggedTxn, Op, Outcome, SessionId, TxnId, WriteId,
};

fn key(name: &str) -> KeyName {
    KeyName { namespace: "accounts".into(), bytes: name.as_bytes().to_vec() }
}

/// A transaction of `session` at position `seq` that writes `k` with one statement.
fn writes(id: u64, session: u64, seq: u64, k: &str) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(session), seq);
    t.statements = vec![format!("UPDATE accounts SET v = {id} WHERE k = '{k}'")];
    t.ops = vec![LoggedOp::Write { key: key(k), write: WriteId(id), stmt: Some(0) }];
    t
}

fn intent(t: LoggedTxn) -> LogRecord {
    LogRecord::Intent(t)
}

fn finished(t: LoggedTxn) -> LogRecord {
    LogRecord::Finished { txn: t, outcome: Outcome::Committed, commit_ns: None }
}

fn outcome(id: u64, outcome: Outcome) -> LogRecord {
    LogRecord::Outcome { txn: TxnId(id), outcome, commit_ns: None }
}

fn session_ended(session: u64) -> LogRecord {
    LogRecord::SessionEnded { session: SessionId(session), last_seq: None }
}

fn recovery(indeterminate: &[u64], gap: bool) -> LogRecord {
    LogRecord::Recovery {
        indeterminate: indeterminate.iter().map(|&i| TxnId(i)).collect(),
        gap,
        previous: None,
    }
}

/// What each record finished, the records numbered from 0: `T<id> <outcome> @<position>`, `end S<session>`,
/// `gap after <n>`.
fn events(replayer: &mut Replayer, records: Vec<LogRecord>) -> Vec<Vec<String>> {
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let finished = replayer.apply(i as u64, r).expect("a consistent record");
            finished.iter().map(describe).collect()
        })
        .collect()
}

/// What record `seq` finished, as [`describe`] writes it.
fn applied(replayer: &mut Replayer, seq: u64, record: LogRecord) -> Vec<String> {
    replayer.apply(seq, record).expect("a record replay takes").iter().map(describe).collect()
}

fn describe(event: &Replayed) -> String {
    match event {
        Replayed::Transaction(ReplayedTxn { txn, position, .. }) => {
            format!("T{} {:?} @{position}", txn.id.0, txn.outcome)
        }
        Replayed::SessionEnded(s) => format!("end S{}", s.0),
        Replayed::Gap(LogGap { after_txns }) => format!("gap after {after_txns}"),
        Replayed::DiscoveredWrite { txn, write, .. } => format!("T{} wrote {write}", txn.0),
        Replayed::Resolved { txn, outcome } => format!("T{} resolved {outcome:?}", txn.0),
    }
}

#[test]
fn a_resolution_after_a_restart_closes_a_crash_window_and_never_names_a_stranger() {
    let resolved = |id: u64, outcome: Outcome| LogRecord::Resolved { txn: TxnId(id), outcome };
    let records = vec![
        intent(writes(1, 1, 0, "a")),
        intent(writes(2, 2, 0, "b")),
        LogRecord::Xids { txn: TxnId(1), top: Some(700), xids: vec![700] },
        recovery(&[1, 2], false),
        resolved(1, Outcome::Committed),
        resolved(2, Outcome::Aborted),
    ];
    let mut replayer = Replayer::new();
    let got = events(&mut replayer, records.clone());
    assert_eq!(
        got,
        [
            vec![],
            vec![],
            vec![],
            vec!["T1 Indeterminate @0", "T2 Indeterminate @1", "end S1", "end S2"],
            vec!["T1 resolved Committed"],
            vec!["T2 resolved Aborted"],
        ]
    );
    for bad in [resolved(9, Outcome::Committed), resolved(1, Outcome::Indeterminate)] {
        assert!(replayer.apply(6, bad).is_err());
    }
    let h = replay(records.into_iter().enumerate().map(|(i, r)| Ok((i as u64, r)))).expect("replays");
    let outcomes: Vec<Outcome> = h.transactions.iter().map(|t| t.outcome).collect();
    assert_eq!(outcomes, [Outcome::Committed, Outcome::Aborted]);
}

fn discovered(id: u64, k: &str, write: u64) -> LogRecord {
    LogRecord::DiscoveredWrite { txn: TxnId(id), key: key(k), write: WriteId(write) }
}

#[test]
fn a_discovered_write_joins_its_transaction_once_pending_or_finished_and_never_a_stranger() {
    let mut replayer = Replayer::new();
    let got = events(
        &mut replayer,
        vec![
            intent(writes(1, 1, 0, "a")),
            // Read while T1's outcome is on its way: it joins the pending intent.
            discovered(1, "f", 100),
            outcome(1, Outcome::Committed),
            // Read after T1 finished: an event for whoever holds T1 now; two readers may log it twice.
            discovered(1, "g", 101),
            discovered(1, "g", 101),
        ],
    );
    assert_eq!(got, [vec![], vec![], vec!["T1 Committed @0"], vec!["T1 wrote w101"], vec!["T1 wrote w101"]]);
    let err = replayer.apply(5, discovered(9, "a", 102)).unwrap_err();
    assert!(err.to_string().contains("T9, which has no record"), "{err}");

    // The one-shot replay gives T1 both writes, each once, after its own.
    let records = vec![
        intent(writes(1, 1, 0, "a")),
        discovered(1, "f", 100),
        discovered(1, "f", 100),
        outcome(1, Outcome::Committed),
        discovered(1, "g", 101),
        discovered(1, "g", 101),
    ];
    let h = replay(records.into_iter().enumerate().map(|(i, r)| Ok((i as u64, r)))).expect("replays");
    let written: Vec<(String, WriteId)> = h.transactions[0]
        .ops
        .iter()
        .filter_map(|op| match *op {
            Op::Write { key, write, .. } => Some((h.keys.name(key)?.to_string(), write)),
            _ => None,
        })
        .collect();
    let want = [("accounts:a", WriteId(1)), ("accounts:f", WriteId(100)), ("accounts:g", WriteId(101))];
    assert_eq!(written, want.map(|(k, w)| (k.to_owned(), w)));
}

#[test]
fn each_transaction_comes_out_when_its_outcome_is_known_and_replay_keeps_log_order() {
    let records = vec![
        intent(writes(1, 1, 0, "a")),
        finished(writes(2, 2, 0, "b")),
        outcome(1, Outcome::Committed),
        intent(writes(3, 2, 1, "a")),
    ];
    let mut replayer = Replayer::new();
    let got = events(&mut replayer, records.clone());
    assert_eq!(got, [vec![], vec!["T2 Committed @1"], vec!["T1 Committed @0"], vec![]]);
    assert_eq!(replayer.pending().collect::<Vec<_>>(), [TxnId(3)]);
    assert_eq!(replayer.end_of_log().iter().map(describe).collect::<Vec<_>>(), ["T3 Indeterminate @2"]);
    // Keys and statements are interned once, in the replayer's own tables.
    assert_eq!(replayer.keys().len(), 2);
    assert_eq!(replayer.statements().len(), 3);

    // The one-shot replay lists transactions by their first record, not by when they finished.
    let h = replay(records.into_iter().enumerate().map(|(i, r)| Ok((i as u64, r)))).expect("replays");
    let order: Vec<(u64, Outcome)> = h.transactions.iter().map(|t| (t.id.0, t.outcome)).collect();
    assert_eq!(order, [(1, Outcome::Committed), (2, Outcome::Committed), (3, Outcome::Indeterminate)]);
    let Op::Write { key: a, .. } = h.transactions[2].ops[0] else { panic!("T3 writes") };
    assert_eq!(h.keys.name(a), Some(&key("a")));
}

#[test]
fn an_intent_left_pending_at_its_session_end_finishes_indeterminate_before_the_end() {
    let mut replayer = Replayer::new();
    // T1's outcome append failed; the session ended; the clean close then lists T1 as pending.
    let got = events(
        &mut replayer,
        vec![
            intent(writes(1, 1, 0, "a")),
            finished(writes(2, 2, 0, "b")),
            session_ended(1),
            recovery(&[1], false),
        ],
    );
    assert_eq!(got, [vec![], vec!["T2 Committed @1"], vec!["T1 Indeterminate @0", "end S1"], vec!["end S2"]]);

    // No outcome may follow the session's end.
    let mut replayer = Replayer::new();
    events(&mut replayer, vec![intent(writes(1, 1, 0, "a")), session_ended(1)]);
    let err = replayer.apply(2, outcome(1, Outcome::Committed)).unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { seq: 2, .. }), "{err}");
    assert!(err.to_string().contains("session already ended"), "{err}");
}

#[test]
fn a_recovery_record_finishes_its_pending_intents_ends_the_sessions_of_its_run_and_marks_a_gap() {
    let mut replayer = Replayer::new();
    let got = events(
        &mut replayer,
        vec![
            finished(writes(1, 3, 0, "a")),
            finished(writes(2, 4, 0, "b")),
            session_ended(4),
            intent(writes(3, 5, 0, "c")),
            recovery(&[3], true),
            finished(writes(4, 6, 0, "a")),
        ],
    );
    assert_eq!(
        got,
        [
            vec!["T1 Committed @0"],
            vec!["T2 Committed @1"],
            vec!["end S4"],
            vec![],
            vec!["T3 Indeterminate @2", "end S3", "end S5", "gap after 3"],
            vec!["T4 Committed @3"],
        ]
    );
}

#[test]
fn an_outcome_or_a_recovery_listing_with_no_pending_intent_is_an_error_naming_the_record() {
    let after = |record: LogRecord| {
        let mut replayer = Replayer::new();
        events(&mut replayer, vec![finished(writes(1, 1, 0, "a"))]);
        replayer.apply(1, record).unwrap_err()
    };
    let err = after(outcome(1, Outcome::Committed));
    assert!(matches!(err, LogError::Inconsistent { seq: 1, .. }), "{err}");
    assert!(err.to_string().contains("already has an outcome"), "{err}");
    let err = after(outcome(7, Outcome::Aborted));
    assert!(matches!(err, LogError::Inconsistent { seq: 1, .. }), "{err}");
    assert!(err.to_string().contains("has no intent"), "{err}");
    let err = after(recovery(&[7], false));
    assert!(matches!(err, LogError::Inconsistent { seq: 1, .. }), "{err}");
}

#[test]
fn a_second_record_for_a_transaction_is_an_error_whatever_order_the_ids_come_in() {
    let ids = [5, 3, 4, 7, 1, 6, 2];
    let records = |extra: u64| {
        let mut r: Vec<LogRecord> = ids.iter().map(|&id| finished(writes(id, id, 0, "a"))).collect();
        r.push(intent(writes(extra, 99, 0, "a")));
        r
    };
    for fresh in [8, 0, u64::MAX] {
        let mut replayer = Replayer::new();
        events(&mut replayer, records(fresh));
        assert_eq!(replayer.pending().collect::<Vec<_>>(), [TxnId(fresh)]);
    }
    for reused in ids {
        let mut replayer = Replayer::new();
        let err = records(reused)
            .into_iter()
            .enumerate()
            .find_map(|(seq, r)| replayer.apply(seq as u64, r).err())
            .expect("the reused id is refused");
        assert!(matches!(err, LogError::Inconsistent { seq: 7, .. }), "T{reused}: {err}");
        assert!(err.to_string().contains("a second record"), "{err}");
    }
}

/// After a stretch of the log was skipped ([`Replayer::skip_to`]), a session's next transaction says that its
/// pending intent ended inside the stretch (a session runs one transaction at a time): the intent finishes
/// then, as Indeterminate, before the new one. Otherwise it would stay pending until its session ends, and
/// a reader of its writes would wait for it; an intent of another session stays pending.
#[test]
fn after_a_skipped_stretch_a_sessions_next_transaction_finishes_its_orphaned_intent() {
    let mut replayer = Replayer::new();
    let first = applied;
    assert!(first(&mut replayer, 0, intent(writes(1, 1, 0, "a"))).is_empty());
    assert!(first(&mut replayer, 1, intent(writes(2, 2, 0, "b"))).is_empty());
    // Records 2 and 3 (T1's outcome, say) never arrive.
    replayer.skip_to(4);
    assert_eq!(
        first(&mut replayer, 4, finished(writes(3, 1, 1, "c"))),
        ["T1 Indeterminate @0", "T3 Committed @2"]
    );
    assert_eq!(replayer.pending().collect::<Vec<_>>(), [TxnId(2)]);
    assert_eq!(first(&mut replayer, 5, outcome(1, Outcome::Committed)), Vec::<String>::new());
    assert_eq!(replayer.lost_to_holes(), 1, "the outcome of an intent already finished is dropped");
}

#[test]
fn a_tail_passes_on_what_it_says_of_earlier_transactions_and_refuses_anything_else() {
    use history::log::replay::replay_tail;
    let numbered =
        |records: Vec<LogRecord>| records.into_iter().enumerate().map(|(i, r)| Ok((40 + i as u64, r)));
    // T1–T9 had their records before the tail: its run resolves T3, logs a write of T4 a read discovered,
    // and runs T10, which a crash leaves pending.
    let tail = vec![
        LogRecord::Resolved { txn: TxnId(3), outcome: Outcome::Committed },
        intent(writes(10, 7, 0, "a")),
        discovered(4, "b", 44),
        LogRecord::Xids { txn: TxnId(10), top: Some(900), xids: vec![900] },
    ];
    let t = replay_tail(numbered(tail.clone()), TxnId(10)).expect("the tail replays");
    assert_eq!(t.earlier.resolved, vec![(TxnId(3), Outcome::Committed)]);
    assert_eq!(t.earlier.discovered, vec![(TxnId(4), key("b"), WriteId(44))]);
    let ids: Vec<(TxnId, Outcome)> = t.history.transactions.iter().map(|t| (t.id, t.outcome)).collect();
    assert_eq!(ids, vec![(TxnId(10), Outcome::Indeterminate)]);
    assert_eq!(t.xids[&TxnId(10)].top, Some(900));
    // Read as a whole log, the same records name strangers.
    assert!(replay(numbered(tail.clone())).is_err());
    // An outcome or late ops of an earlier transaction cannot come from a later run, nor a second record
    // of one the tail has seen.
    for bad in [outcome(3, Outcome::Committed), intent(writes(10, 1, 1, "c")), discovered(12, "b", 1)] {
        let mut records = tail.clone();
        records.push(bad.clone());
        assert!(replay_tail(numbered(records), TxnId(10)).is_err(), "{bad:?}");
    }
    // The first record of a transaction whose id is below the tail's start: it took its id before a cut
    // in the middle of a run and appended after it.
    let mut records = tail.clone();
    records.push(intent(writes(5, 1, 1, "c")));
    let t = replay_tail(numbered(records), TxnId(10)).expect("a transaction begun before a cut replays");
    assert!(t.history.transactions.iter().any(|t| t.id == TxnId(5)));
}

/// A session whose end record fell in a skipped stretch would stay open for ever, and hold the verifier's
/// epochs back. The proxy's list of open sessions ([`LogRecord::SessionsOpen`]) ends it: every session
/// below the list's bound that it leaves out, with any intent still pending finished first as
/// Indeterminate. A session it lists, or one at or above its bound, stays open.
#[test]
fn a_list_of_open_sessions_ends_a_session_whose_end_fell_in_a_skipped_stretch() {
    let mut r = Replayer::new();
    let open = |below: u64, open: &[u64]| LogRecord::SessionsOpen {
        below: SessionId(below),
        open: open.iter().map(|&s| SessionId(s)).collect(),
    };
    assert!(applied(&mut r, 0, intent(writes(1, 1, 0, "a"))).is_empty());
    assert_eq!(applied(&mut r, 1, finished(writes(2, 2, 0, "b"))), ["T2 Committed @1"]);
    assert_eq!(applied(&mut r, 2, finished(writes(3, 9, 0, "c"))), ["T3 Committed @2"]);
    assert!(applied(&mut r, 3, open(5, &[1, 2])).is_empty(), "both sessions below the bound are listed");
    // Records 4 and 5 (T1's outcome and S1's end) never arrive.
    r.skip_to(6);
    assert_eq!(applied(&mut r, 6, open(5, &[2])), ["T1 Indeterminate @0", "end S1"]);
    assert!(applied(&mut r, 7, open(5, &[2])).is_empty(), "a session ends once");
    assert_eq!(applied(&mut r, 8, open(10, &[9])), ["end S2"]);
    assert_eq!(applied(&mut r, 9, open(10, &[])), ["end S9"]);
}
