//! The compact log encoding (issue 16, item 5): statement texts and namespaces written once and cited by
//! the sequence number of their definition. What replay yields must not change: a log written compactly
//! replays to the history the same records written the old way replay to, logs written the old way still
//! read, each open of the log defines its own texts, and a citation the reader cannot resolve is an error.

use history::log::{LogOptions, Replayer, resolved};
use history::{
    DiskLog, Durability, History, HistoryLog, KeyName, LogError, LogRecord, LoggedOp, LoggedTxn, Observed,
    Outcome, SessionId, TxnId, WriteId,
};

fn key(ns: &str, k: &str) -> KeyName {
    KeyName { namespace: ns.into(), bytes: k.as_bytes().to_vec() }
}

/// A transaction over two tables, with a statement no op cites and an opaque one, so that every part of
/// the encoding is exercised: statement indices, namespaces, opaque ops, uncited texts.
fn txn(id: u64, session: u64, seq: u64, write: u64) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(session), seq);
    t.statements = vec![
        "SELECT * FROM tweets WHERE user_id = $1".into(),
        "SET LOCAL work_mem = '4MB'".into(),
        format!("SELECT count(*) FROM follows -- {}", id % 3),
        "INSERT INTO tweets (id, body) VALUES ($1, $2) RETURNING xmin".into(),
    ];
    t.ops = vec![
        LoggedOp::Read { key: key("tweets", "1"), observed: Observed::PreHistory(0), stmt: Some(0) },
        LoggedOp::Opaque { kind: "aggregate".into(), stmt: Some(2) },
        LoggedOp::Read { key: key("follows", &format!("{id}")), observed: Observed::Absent, stmt: Some(0) },
        LoggedOp::Write { key: key("tweets", &format!("t{id}")), write: WriteId(write), stmt: Some(3) },
        LoggedOp::Write { key: key("", "flat"), write: WriteId(write + 1), stmt: None },
    ];
    t.start_ns = Some(1_000 + id);
    t
}

fn late_ops(id: u64) -> (Vec<LoggedOp>, Vec<String>) {
    let mut statements = txn(id, 0, 0, 0).statements;
    statements.push("UPDATE users SET n = n + 1 WHERE id = $1 RETURNING xmin".into());
    let ops = vec![LoggedOp::Write { key: key("users", "7"), write: WriteId(900 + id), stmt: Some(4) }];
    (ops, statements)
}

/// What the test appends, in order, as the records the old log would have held for it.
fn classic_records() -> Vec<LogRecord> {
    let mut out = Vec::new();
    for i in 0..6u64 {
        let id = 10 + i;
        if i % 2 == 0 {
            out.push(LogRecord::Intent(txn(id, i % 3, i, 100 * id)));
            let (ops, statements) = late_ops(id);
            out.push(LogRecord::LateOps { txn: TxnId(id), ops, statements });
            out.push(LogRecord::Outcome { txn: TxnId(id), outcome: Outcome::Committed, commit_ns: Some(id) });
        } else {
            let outcome = if i == 3 { Outcome::Aborted } else { Outcome::Committed };
            out.push(LogRecord::Finished { txn: txn(id, i % 3, i, 100 * id), outcome, commit_ns: None });
        }
    }
    out
}

/// Appends `records` through the log's own API (which writes them compactly).
fn append_all(log: &DiskLog, records: Vec<LogRecord>) {
    for r in records {
        let ticket = match r {
            LogRecord::Intent(t) => log.append_intent(t),
            LogRecord::LateOps { txn, ops, statements } => log.append_late_ops(txn, ops, statements),
            LogRecord::Outcome { txn, outcome, commit_ns } => log.append_outcome(txn, outcome, commit_ns),
            LogRecord::Finished { txn, outcome, commit_ns } => log.append_finished(txn, outcome, commit_ns),
            other => panic!("not used here: {other:?}"),
        };
        drop(ticket.expect("append"));
    }
}

/// Replays records given without sequence numbers of their own (numbered from 0).
fn replay_classic(records: Vec<LogRecord>) -> History {
    history::log::replay::replay(records.into_iter().enumerate().map(|(i, r)| Ok((i as u64, r))))
        .expect("the classic records replay")
}

/// The same transactions replay to the same history, whether written compactly or the old way, and the
/// compact records resolve back to exactly the records handed to the log.
#[test]
fn compact_records_replay_as_the_classic_ones() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    append_all(&log, classic_records());
    let raw: Vec<(u64, LogRecord)> = log.tail(0).collect::<Result<_, _>>().unwrap();
    assert!(raw.iter().all(|(_, r)| !matches!(
        r,
        LogRecord::Intent(_) | LogRecord::Finished { .. } | LogRecord::LateOps { .. }
    )));
    let statements = raw.iter().filter(|(_, r)| matches!(r, LogRecord::Statement { .. })).count();
    // Four texts of the transaction (the commented one in three variants) and the late UPDATE: each once.
    assert_eq!(statements, 7, "each distinct text is written once");
    let namespaces = raw.iter().filter(|(_, r)| matches!(r, LogRecord::Namespace { .. })).count();
    assert_eq!(namespaces, 4, "tweets, follows, the flat namespace and users, each once");

    let back: Vec<LogRecord> = resolved(raw.into_iter().map(Ok)).map(|r| r.unwrap().1).collect();
    assert_eq!(back, classic_records());
    assert_eq!(log.replay().unwrap(), replay_classic(classic_records()));
}

/// The first four of [`classic_records`] as the log stored them before the compact encoding existed:
/// the bytes `LogRecord::encode` gave at commit d161e9d (main before issue 16, item 5), kept as bytes so
/// that a change to the enum that would misread old logs (a variant inserted before the old ones) fails here.
const OLD_RECORDS_HEX: [&str; 4] = [
    concat!(
        "01f2cd0d15000a0000050006747765657473013102000100020961676772656761746501020007666f6c6c6f77730231",
        "30010100010674776565747303743130e8070103010004666c6174e90700042753454c454354202a2046524f4d207477",
        "6565747320574845524520757365725f6964203d2024311a534554204c4f43414c20776f726b5f6d656d203d2027344d",
        "42272153454c45435420636f756e74282a292046524f4d20666f6c6c6f7773202d2d20313c494e5345525420494e544f",
        "20747765657473202869642c20626f6479292056414c554553202824312c202432292052455455524e494e4720786d69",
        "6e01f2070000",
    ),
    concat!(
        "019d87e8b1050a010105757365727301378e070104052753454c454354202a2046524f4d207477656574732057484552",
        "4520757365725f6964203d2024311a534554204c4f43414c20776f726b5f6d656d203d2027344d42272153454c454354",
        "20636f756e74282a292046524f4d20666f6c6c6f7773202d2d20313c494e5345525420494e544f207477656574732028",
        "69642c20626f6479292056414c554553202824312c202432292052455455524e494e4720786d696e3755504441544520",
        "757365727320534554206e203d206e202b2031205748455245206964203d2024312052455455524e494e4720786d696e",
    ),
    "018d638dd1010a00010a",
    concat!(
        "015dbbfb3f020b0101050006747765657473013102000100020961676772656761746501020007666f6c6c6f77730231",
        "31010100010674776565747303743131cc080103010004666c6174cd0800042753454c454354202a2046524f4d207477",
        "6565747320574845524520757365725f6964203d2024311a534554204c4f43414c20776f726b5f6d656d203d2027344d",
        "42272153454c45435420636f756e74282a292046524f4d20666f6c6c6f7773202d2d20323c494e5345525420494e544f",
        "20747765657473202869642c20626f6479292056414c554553202824312c202432292052455455524e494e4720786d69",
        "6e01f30700000000",
    ),
];

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Writes record values as a log written before the compact encoding existed: sled directly, as the old
/// `DiskLog` laid it out (format marker, records keyed by big-endian sequence numbers, a clean run state).
fn write_old_log(dir: &std::path::Path, values: &[Vec<u8>]) {
    let db = sled::open(dir).unwrap();
    let meta = db.open_tree(history::log::store::sled_store::META_TREE).unwrap();
    meta.insert("format", b"krait-history-log 1".as_slice()).unwrap();
    meta.insert("state", b"clean".as_slice()).unwrap();
    let tree = db.open_tree(history::log::store::sled_store::RECORDS_TREE).unwrap();
    for (seq, value) in values.iter().enumerate() {
        tree.insert((seq as u64).to_be_bytes(), value.as_slice()).unwrap();
    }
    db.flush().unwrap();
}

/// A log written the old way (texts inline in every record) still replays, and a new run appends to it
/// compactly: the whole log replays to what the same records, all written the old way, replay to.
#[test]
fn a_log_written_the_old_way_still_reads_and_takes_compact_appends() {
    let dir = tempfile::tempdir().unwrap();
    let old = classic_records();
    let (first, second) = old.split_at(4);
    let values: Vec<Vec<u8>> = OLD_RECORDS_HEX.iter().map(|h| unhex(h)).collect();
    let decoded: Vec<LogRecord> = values.iter().map(|v| LogRecord::decode(v).unwrap()).collect();
    assert_eq!(decoded, first, "old record bytes decode to the same records");
    write_old_log(dir.path(), &values);
    // sled lets go of its lock a moment after the store is dropped; `DiskLog::open` waits for it.
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    assert_eq!(log.replay().unwrap(), replay_classic(first.to_vec()));
    // The floor of transaction ids comes from the old records too (no stored floor: a scan found it).
    assert_eq!(log.txn_id_floor(), TxnId(12));
    append_all(&log, second.to_vec());
    assert_eq!(log.replay().unwrap(), replay_classic(old));
}

/// Each open defines the texts it cites again, after it opened: a run never cites a definition of an
/// earlier run (whose records a crash could have cut short), and replay still interns each text once.
#[test]
fn each_open_defines_its_own_texts() {
    let dir = tempfile::tempdir().unwrap();
    let records = classic_records();
    let (first, second) = records.split_at(4);
    let second_start;
    {
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        append_all(&log, first.to_vec());
        log.sync().unwrap();
        log.drop_as_if_crashed();
    }
    {
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        // The recovery record of the crashed run is the first record of this one.
        second_start = log.next_seq() - 1;
        append_all(&log, second.to_vec());
        log.close().unwrap();
    }
    let log = DiskLog::open_with(dir.path(), LogOptions::new(Durability::Strict)).unwrap();
    for (seq, r) in log.tail(second_start).map(Result::unwrap) {
        let cited = match r {
            LogRecord::CompactIntent(t) | LogRecord::CompactFinished { txn: t, .. } => t.ops,
            LogRecord::CompactLateOps { ops, .. } => ops,
            _ => continue,
        };
        for c in cited.statements.iter().chain(&cited.namespaces) {
            assert!(
                (second_start..seq).contains(c),
                "record {seq} cites {c}, which this run (from {second_start}) did not write"
            );
        }
    }
    let h = log.replay().unwrap();
    let committed = |h: &History| h.transactions.iter().map(|t| (t.id, t.outcome)).collect::<Vec<_>>();
    assert_eq!(committed(&h), committed(&replay_classic(records)));
    let mut texts = h.statements.clone();
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), h.statements.len(), "each text interned once across both runs");
}

/// A reader that did not read a text's definition refuses the records citing it, naming the record,
/// instead of guessing: here, a replay started after the definitions (as from a partial copy of a log).
#[test]
fn a_citation_the_reader_cannot_resolve_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    append_all(&log, classic_records());
    let raw: Vec<(u64, LogRecord)> = log.tail(0).collect::<Result<_, _>>().unwrap();
    let first_txn = raw.iter().position(|(_, r)| matches!(r, LogRecord::CompactIntent(_))).unwrap();
    let mut replayer = Replayer::new();
    let (seq, record) = raw[first_txn].clone();
    match replayer.apply(seq, record) {
        Err(LogError::Inconsistent { seq: at, reason }) => {
            assert_eq!(at, seq);
            assert!(reason.contains("no statement was defined"), "{reason}");
        }
        other => panic!("expected an inconsistency, got {other:?}"),
    }
    // A citation of a definition of the other kind is refused too: a namespace's record is no statement.
    let (ns_seq, _) = raw.iter().find(|(_, r)| matches!(r, LogRecord::Namespace { .. })).unwrap().clone();
    let mut replayer = Replayer::new();
    let mut bad = None;
    for (seq, record) in raw {
        let record = match record {
            LogRecord::CompactIntent(mut t) if bad.is_none() => {
                t.ops.statements[0] = ns_seq;
                bad = Some(seq);
                LogRecord::CompactIntent(t)
            }
            other => other,
        };
        if let Err(e) = replayer.apply(seq, record) {
            assert!(matches!(e, LogError::Inconsistent { seq, .. } if Some(seq) == bad), "{e}");
            return;
        }
    }
    panic!("a statement citation of a namespace record was accepted");
}

/// A stretch a shipped log lost in transit holds definitions and intents that later records cite. Replay
/// that was told of the hole ([`Replayer::skip_to`]) drops and counts what cites the stretch and goes on;
/// replay that was not refuses the log, as before.
#[test]
fn records_that_cite_a_skipped_stretch_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    append_all(&log, classic_records());
    // And one that cites nothing.
    let empty = LoggedTxn::new(TxnId(99), SessionId(9), 0);
    append_all(&log, vec![LogRecord::Finished { txn: empty, outcome: Outcome::Committed, commit_ns: None }]);
    let raw: Vec<(u64, LogRecord)> = log.tail(0).collect::<Result<_, _>>().unwrap();
    let (first, hole_end) = (raw[0].0, raw[8].0);
    let kept: Vec<(u64, LogRecord)> =
        raw.into_iter().filter(|(seq, _)| *seq == first || *seq >= hole_end).collect();

    let mut told = Replayer::new();
    let mut finished = 0;
    for (i, (seq, record)) in kept.iter().cloned().enumerate() {
        if i == 1 {
            told.skip_to(seq);
        }
        finished += told.apply(seq, record).expect("replay goes on after the hole").len();
    }
    assert!(told.lost_to_holes() > 0, "records citing the stretch were dropped");
    assert_eq!(finished, 1, "the transaction that cites nothing in the stretch still replays");

    let mut untold = Replayer::new();
    let refused = kept.into_iter().try_for_each(|(seq, record)| untold.apply(seq, record).map(drop));
    assert!(matches!(refused, Err(LogError::Inconsistent { .. })), "{refused:?}");
}

/// A client that puts its values in its statements (the simple protocol) makes a new text per run. The
/// writer's table starts over at every cut (here after every record) and marks that in the log, so the
/// log's reader holds the definitions since the last mark, not one per run, and the replay keeps every
/// text.
#[test]
fn the_reader_forgets_the_texts_the_writer_started_over_from() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = LogOptions::new(Durability::None);
    options.cut_every_bytes = 1;
    let log = DiskLog::open_with(dir.path(), options).unwrap();
    let text = |id: u64| format!("UPDATE accounts SET v = {id} WHERE k = 1");
    for id in 0..200 {
        let mut t = LoggedTxn::new(TxnId(id), SessionId(1), id);
        t.statements = vec![text(id)];
        t.ops = vec![LoggedOp::Write { key: key("accounts", "1"), write: WriteId(id + 1), stmt: Some(0) }];
        let _ = log.append_finished(t, Outcome::Committed, Some(id)).unwrap();
    }
    let mut replayer = Replayer::new();
    let mut most = 0;
    for item in log.tail(0) {
        let (seq, record) = item.unwrap();
        replayer.apply(seq, record).unwrap();
        most = most.max(replayer.definitions());
    }
    assert!(most <= 4, "the reader held {most} definitions at once");
    let h = log.replay().unwrap();
    assert_eq!(h.transactions.len(), 200);
    for t in &h.transactions {
        let stmt = t.ops[0].stmt().expect("the write cites its statement");
        assert_eq!(h.statement(stmt), Some(text(t.id.0).as_str()));
    }
}
