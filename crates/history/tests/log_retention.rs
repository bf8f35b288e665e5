//! Retention (issue 20, item 5): the oldest segments of a log go once no reader needs them, and what stays
//! reads on its own from a cut, across a clean close and a crash.

use std::time::Duration;

use history::log::LogOptions;
use history::log::replay::{replay, replay_tail};
use history::log::retention::Retain;
use history::{
    DiskLog, Durability, HistoryLog, KeyName, LogError, LogRecord, LoggedOp, LoggedTxn, Observed, Outcome,
    SessionId, TxnId, WriteId,
};

fn key(k: u64) -> KeyName {
    KeyName { namespace: "accounts".into(), bytes: k.to_string().into_bytes() }
}

/// A transaction with statement texts and a row read, so that the records cite definitions.
fn txn(id: u64) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(id % 4), id);
    t.statements = vec![
        "SELECT balance FROM accounts WHERE id = $1".into(),
        "UPDATE accounts SET balance = balance + $2 WHERE id = $1 RETURNING xmin".into(),
    ];
    t.ops = vec![
        LoggedOp::Read { key: key(id % 7), observed: Observed::PreHistory(0), stmt: Some(0) },
        LoggedOp::Write { key: key(id % 5), write: WriteId(10_000 + id), stmt: Some(1) },
    ];
    t
}

fn options() -> LogOptions {
    let mut o = LogOptions::new(Durability::None);
    o.segment_bytes = 4 << 10;
    o.cut_every_bytes = 2 << 10;
    o
}

/// Appends transactions `ids`, half as one finished record, half as an intent and its outcome.
fn append(log: &DiskLog, ids: std::ops::Range<u64>) {
    for id in ids {
        match id % 2 {
            0 => drop(log.append_finished(txn(id), Outcome::Committed, Some(id)).unwrap()),
            _ => {
                drop(log.append_intent(txn(id)).unwrap());
                drop(log.append_outcome(TxnId(id), Outcome::Committed, Some(id)).unwrap());
            }
        }
    }
}

fn ids(h: &history::History) -> Vec<TxnId> {
    h.transactions.iter().map(|t| t.id).collect()
}

#[test]
fn segments_below_a_cut_go_and_the_rest_reads_from_the_cut_alone() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open_with(dir.path(), options()).unwrap();
    append(&log, 0..400);
    log.sync().unwrap();
    let cut = log.clean_cut().unwrap();
    assert!(cut.seq > 100, "{cut:?}: cuts are taken as the log grows");
    let whole = replay(log.tail(0)).unwrap();
    let after_cut: Vec<TxnId> = {
        let tail = replay_tail(log.tail(cut.seq), cut.txns_below).unwrap();
        ids(&tail.history)
    };
    let before = history::log::disk_bytes(dir.path());

    // A reader at record 0 holds everything.
    let none = log.compact(0, &Retain { max_age: Duration::ZERO, max_bytes: 0 }).unwrap();
    assert_eq!((none.segments, none.first_kept), (0, 0));

    // Over its bytes: everything below the cut may go, and does, a whole segment at a time.
    let done = log.compact(cut.seq, &Retain { max_age: Duration::from_secs(3_600), max_bytes: 0 }).unwrap();
    assert!(done.segments > 0 && done.first_kept <= cut.seq && done.first_kept > 0, "{done:?}");
    assert_eq!(log.first_seq(), done.first_kept);
    let after = history::log::disk_bytes(dir.path());
    assert!(after + done.bytes <= before + 4096, "{before} -> {after} after deleting {}", done.bytes);

    // What went is an error to ask for, never silently skipped.
    match log.tail(0).next() {
        Some(Err(LogError::Compacted { from: 0, first })) => assert_eq!(first, done.first_kept),
        other => panic!("reading from record 0 gave {other:?}"),
    }
    // From the cut, the records read alone, to what they gave before.
    let tail = replay_tail(log.tail(cut.seq), cut.txns_below).unwrap();
    assert_eq!(ids(&tail.history), after_cut);
    assert_eq!(&ids(&whole)[ids(&whole).len() - after_cut.len()..], &after_cut[..]);

    // A clean close and a reopen keep the log as it is, and appends go on.
    log.close().unwrap();
    drop(log);
    let log = DiskLog::open_with(dir.path(), options()).unwrap();
    assert_eq!(log.first_seq(), done.first_kept);
    append(&log, 400..420);
    // A crash with an intent pending: recovery finds it, though the run's first records are gone.
    drop(log.append_intent(txn(420)).unwrap());
    log.sync().unwrap();
    let cut = log.clean_cut().unwrap();
    log.compact(cut.seq, &Retain { max_age: Duration::ZERO, max_bytes: u64::MAX }).unwrap();
    log.drop_as_if_crashed();
    let log = DiskLog::open_with(dir.path(), options()).unwrap();
    assert!(log.txn_id_floor() >= TxnId(421));
    let recovery = log.tail(log.first_seq()).filter_map(Result::ok).find_map(|(_, r)| match r {
        LogRecord::Recovery { indeterminate, .. } => Some(indeterminate),
        _ => None,
    });
    assert_eq!(recovery, Some(vec![TxnId(420)]));
}

#[test]
fn no_segment_a_reader_still_needs_goes_and_no_cut_falls_inside_a_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open_with(dir.path(), options()).unwrap();
    // An intent held open across many appends: no cut can be taken while it is pending.
    drop(log.append_intent(txn(1_000)).unwrap());
    append(&log, 0..300);
    log.sync().unwrap();
    assert_eq!(log.clean_cut().unwrap().seq, 0, "only the run's start is a cut");
    let outcome_at = log.next_seq();
    drop(log.append_outcome(TxnId(1_000), Outcome::Committed, None).unwrap());
    append(&log, 300..400);
    log.sync().unwrap();
    let cut = log.clean_cut().unwrap();
    assert!(cut.seq > outcome_at, "{cut:?}: a cut once the intent has its outcome");
    // A reader at record 250: nothing at or after the segment holding it goes.
    let keep_from = 250;
    let done = log.compact(keep_from, &Retain { max_age: Duration::ZERO, max_bytes: 0 }).unwrap();
    assert!(done.first_kept <= keep_from, "{done:?}");
    let first = log.tail(keep_from).next().unwrap().unwrap();
    assert_eq!(first.0, keep_from);
}
