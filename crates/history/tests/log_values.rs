//! Recorded values in the log (issue 18, item 1): a statement run's parameters and columns, and the row
//! behind each op, survive the compact encoding and replay, land beside the ops they belong to (a row of a
//! join is behind each of its reads), and late ops' values move past the intent's ops.

use history::values::{StatementRun, Value};
use history::{
    DiskLog, Durability, HistoryLog, KeyName, LoggedOp, LoggedTxn, Observed, Outcome, SessionId, TxnId,
    WriteId,
};

fn key(ns: &str, k: &str) -> KeyName {
    KeyName { namespace: ns.into(), bytes: k.as_bytes().to_vec() }
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

/// The ops of statement 0, `SELECT id, body FROM tweets WHERE id = $1` with `$1 = '1'`, reading `row`.
fn read_tweet(row: Vec<Value>) -> [LoggedOp; 3] {
    [
        LoggedOp::Run { stmt: Some(0), params: vec![text("1")], columns: vec!["id".into(), "body".into()] },
        LoggedOp::Read { key: key("tweets", "1"), observed: Observed::PreHistory(0), stmt: Some(0) },
        LoggedOp::Row { ops: 1, values: row },
    ]
}

#[test]
fn values_replay_beside_their_ops_through_the_compact_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let mut t = LoggedTxn::new(TxnId(7), SessionId(1), 0);
    t.statements = vec![
        "SELECT a.v, b.v FROM a JOIN b ON a.id = b.id WHERE a.id = $1".into(),
        "UPDATE a SET v = $1 WHERE id = $2 RETURNING v".into(),
    ];
    t.ops = vec![
        LoggedOp::Run { stmt: Some(0), params: vec![text("1")], columns: vec!["v".into(), "w".into()] },
        LoggedOp::Read { key: key("a", "1"), observed: Observed::PreHistory(0), stmt: Some(0) },
        LoggedOp::Read { key: key("b", "1"), observed: Observed::PreHistory(0), stmt: Some(0) },
        LoggedOp::Row { ops: 2, values: vec![text("10"), Value::Null] },
        LoggedOp::Opaque { kind: "predicate".into(), stmt: Some(0) },
        LoggedOp::Run { stmt: Some(1), params: vec![text("11"), text("1")], columns: vec!["v".into()] },
        LoggedOp::Write { key: key("a", "1"), write: WriteId(70), stmt: Some(1) },
        LoggedOp::Row { ops: 1, values: vec![text("11")] },
    ];
    drop(log.append_intent(t.clone()).unwrap());
    // An autocommit statement's row comes after the intent.
    let late = vec![
        LoggedOp::Run {
            stmt: Some(2),
            params: vec![Value::Redacted("sha256:00".into())],
            columns: vec!["v".into()],
        },
        LoggedOp::Write { key: key("b", "1"), write: WriteId(71), stmt: Some(2) },
        LoggedOp::Row { ops: 1, values: vec![Value::Truncated { prefix: "ab".into(), len: 300 }] },
    ];
    let mut statements = t.statements.clone();
    statements.push("UPDATE b SET v = $1 WHERE id = 1 RETURNING v".into());
    drop(log.append_late_ops(TxnId(7), late, statements).unwrap());
    drop(log.append_outcome(TxnId(7), Outcome::Committed, Some(9)).unwrap());

    let h = log.replay().unwrap();
    let txn = &h.transactions[0];
    assert_eq!(txn.ops.len(), 4, "values are not ops: {:?}", txn.ops);
    let values = txn.values.as_deref().expect("values recorded");
    assert_eq!(values.runs.len(), 3);
    assert_eq!(
        values.runs[1],
        StatementRun {
            stmt: txn.ops[2].stmt(),
            params: vec![text("11"), text("1")],
            columns: vec!["v".into()],
            before_op: 2
        }
    );
    assert_eq!(values.runs[2].before_op, 3, "a late run is placed after the intent's ops");
    // The join's row is behind both of its reads.
    assert_eq!(values.describe_row(0).as_deref(), Some("v = '10', w = NULL"));
    assert_eq!(values.describe_row(1).as_deref(), Some("v = '10', w = NULL"));
    assert_eq!(values.describe_row(2).as_deref(), Some("v = '11'"));
    assert_eq!(values.describe_row(3).as_deref(), Some("v = 'ab…' (300 bytes)"));
    assert_eq!(values.describe_params(1, txn.ops[1].stmt()).as_deref(), Some("$1 = '1'"));
    assert_eq!(values.describe_params(3, txn.ops[3].stmt()).as_deref(), Some("$1 = <redacted sha256:00>"));
}

#[test]
fn a_transaction_without_values_carries_none() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let mut t = LoggedTxn::new(TxnId(1), SessionId(1), 0);
    t.ops = vec![LoggedOp::Write { key: key("a", "1"), write: WriteId(1), stmt: None }];
    drop(log.append_finished(t, Outcome::Committed, None).unwrap());
    let h = log.replay().unwrap();
    assert_eq!(h.transactions[0].values, None);
}

/// A row read again and a statement's columns are written once (the rows cited, the columns defined), and
/// replay gives every transaction its own rows back, across a reopen of the log, whose writer starts a new
/// table of rows and never cites the last run's.
#[test]
fn repeated_rows_and_columns_are_stored_once_and_replay_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let body = text("a tweet body long enough to be worth citing, 140 bytes or so in the workload");
    let reading = |id: u64, session: u64| {
        let mut t = LoggedTxn::new(TxnId(id), SessionId(session), id);
        t.statements = vec!["SELECT id, body FROM tweets WHERE id = $1".into()];
        t.ops = read_tweet(vec![text("1"), body.clone()]).to_vec();
        t
    };
    let stored = |log: &DiskLog| -> Vec<history::LogRecord> { log.tail(0).map(|r| r.unwrap().1).collect() };
    {
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        for id in 1..=3 {
            drop(log.append_finished(reading(id, id), Outcome::Committed, Some(id)).unwrap());
        }
        let records = stored(&log);
        let count = |f: fn(&history::LogRecord) -> bool| records.iter().filter(|r| f(r)).count();
        assert_eq!(count(|r| matches!(r, history::LogRecord::Columns { .. })), 1, "{records:?}");
        assert_eq!(count(|r| matches!(r, history::LogRecord::RowsForgotten)), 1);
        let cited = records
            .iter()
            .filter_map(|r| match r {
                history::LogRecord::CompactFinished { txn, .. } => Some(&txn.ops.ops),
                _ => None,
            })
            .filter(|ops| ops.iter().any(|op| matches!(op, history::log::CompactOp::CitedRow { .. })))
            .count();
        assert_eq!(cited, 2, "the second and third reads cite the first one's row");
    }
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    drop(log.append_finished(reading(4, 4), Outcome::Committed, Some(4)).unwrap());
    let records = stored(&log);
    assert!(
        matches!(records.last(), Some(history::LogRecord::CompactFinished { txn, .. })
            if txn.ops.ops.iter().any(|op| matches!(op,
                history::log::CompactOp::Row { .. }
                    | history::log::CompactOp::PackedRow { .. }
                    | history::log::CompactOp::RowOfParams { .. }))),
        "a new run writes the row inline again: {:?}",
        records.last()
    );
    let h = log.replay().unwrap();
    assert_eq!(h.transactions.len(), 4);
    for txn in &h.transactions {
        let values = txn.values.as_deref().expect("values recorded");
        assert_eq!(values.runs[0].columns, ["id", "body"]);
        assert_eq!(values.rows[0].values, [text("1"), body.clone()], "{}", txn.id);
    }
}

/// A stretch lost in transit that held a row later records cite (the shipped log's hole): replay told of
/// the hole keeps every later transaction and its ops, leaves out the cited row and a parameter packed
/// against it, and counts them (`Replayer::values_lost_to_holes`, which the merger's status shows).
#[test]
fn values_that_cite_a_lost_stretch_are_left_out_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let row = vec![text("1"), text("a tweet body long enough to be worth citing")];
    let read_then_write = |id: u64| {
        let mut t = LoggedTxn::new(TxnId(id), SessionId(id), 0);
        t.statements = vec![
            "SELECT id, body FROM tweets WHERE id = $1".into(),
            "UPDATE tweets SET body = $1 WHERE id = $2".into(),
        ];
        t.ops = read_tweet(row.clone()).to_vec();
        t.ops.extend([
            LoggedOp::Run { stmt: Some(1), params: vec![row[1].clone(), text("1")], columns: vec![] },
            LoggedOp::Write { key: key("tweets", "1"), write: WriteId(id), stmt: Some(1) },
        ]);
        t
    };
    for id in 1..=2 {
        drop(log.append_finished(read_then_write(id), Outcome::Committed, Some(id)).unwrap());
    }
    let raw: Vec<(u64, history::LogRecord)> = log.tail(0).collect::<Result<_, _>>().unwrap();
    let holds_row = |r: &history::LogRecord| matches!(r, history::LogRecord::CompactFinished { txn, .. } if txn.id == TxnId(1));
    let lost = raw.iter().position(|(_, r)| holds_row(r)).expect("the first transaction's record");
    let mut replayer = history::log::Replayer::new();
    let mut replayed = Vec::new();
    for (i, (seq, record)) in raw.iter().cloned().enumerate() {
        if i == lost {
            continue;
        }
        if i == lost + 1 {
            replayer.skip_to(seq);
        }
        let out = replayer.apply(seq, record).expect("replay goes on after the hole");
        replayed.extend(out.into_iter().filter_map(|r| match r {
            history::log::Replayed::Transaction(t) => Some(t.txn),
            _ => None,
        }));
    }
    assert_eq!(replayed.len(), 1, "the second transaction is kept");
    let txn = &replayed[0];
    assert_eq!(txn.ops.len(), 2, "its read and write");
    let values = txn.values.as_deref().expect("its runs");
    assert!(values.rows.is_empty(), "the row it cites was in the lost stretch: {values:?}");
    assert_eq!(values.runs[1].params, [] as [Value; 0], "the parameter packed against that row is unknown");
    assert_eq!(replayer.values_lost_to_holes(), 2);
}
