//! The online verifier on a history log: transactions are verified once their outcome is durable, reads
//! are bounded per call, and sessions end at their SessionEnded record or at the Recovery record of their
//! run, so that garbage collection can advance.

use std::time::Duration;

use history::log::{HistoryLog, LoggedOp, LoggedTxn};
use history::{DiskLog, Durability, KeyName, LogRecord, Observed, Op, Outcome, SessionId, TxnId, WriteId};
use verifier::online::Feeder;
use verifier::{ReportStore, RoundOptions};

fn key(name: &str) -> KeyName {
    KeyName { namespace: "accounts".into(), bytes: name.as_bytes().to_vec() }
}

/// A fresh log with `durability` in a temp dir of its own, which lives as long as the returned guard.
fn temp_log(durability: Durability) -> (tempfile::TempDir, DiskLog) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = DiskLog::open(dir.path().join("log"), durability).expect("the log opens");
    (dir, log)
}

/// Appends `t` as committed, without a commit time, and waits until it is durable.
fn commit(log: &DiskLog, t: LoggedTxn) {
    log.append_finished(t, Outcome::Committed, None).expect("finished").wait().expect("durable");
}

/// A logged transaction of `session` at position `seq` with the given ops.
fn logged(id: u64, session: u64, seq: u64, ops: Vec<LoggedOp>, fence: bool) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(session), seq);
    t.ops = ops;
    t.fence = fence;
    t
}

fn read(k: &str, observed: Observed) -> LoggedOp {
    LoggedOp::Read { key: key(k), observed, stmt: None }
}

fn write(k: &str, w: u64) -> LoggedOp {
    LoggedOp::Write { key: key(k), write: WriteId(w), stmt: None }
}

/// A transaction that reads `x` and `y` at their initial versions and writes `writes`.
fn skewed(id: u64, session: u64, writes: &str, write: u64) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(session), 0);
    t.statements.push(format!("UPDATE accounts SET v = v - 1 WHERE k = '{writes}'"));
    for k in ["x", "y"] {
        t.ops.push(LoggedOp::Read { key: key(k), observed: Observed::PreHistory(0), stmt: Some(0) });
    }
    t.ops.push(LoggedOp::Write { key: key(writes), write: WriteId(write), stmt: Some(0) });
    t
}

#[test]
fn a_write_skew_in_the_log_is_rejected_and_its_report_stored() {
    let (dir, log) = temp_log(Durability::Strict);
    let _durable_with_the_outcome = log.append_intent(skewed(1, 1, "x", 11)).expect("intent");
    let _durable_with_the_outcome = log.append_intent(skewed(2, 2, "y", 12)).expect("intent");
    // Only T1's outcome is logged so far: T2 must wait for its outcome, not be verified as it stands.
    log.append_outcome(TxnId(1), Outcome::Committed, Some(10)).expect("outcome").wait().expect("durable");
    let store = ReportStore::open(dir.path()).expect("a report store");
    let mut feeder = Feeder::new(RoundOptions::online(1_000, Duration::from_secs(3600)), Some(store.clone()));
    // Two intents and an outcome, and the definitions they cite: two statement texts and a namespace.
    assert_eq!(feeder.read_log(&log, usize::MAX).expect("reads"), 6);
    let s = feeder.status();
    assert_eq!((s.txns_read, s.ops_read, s.verified), (1, 3, 0));
    assert_eq!(s.lag_txns, 1);

    log.append_outcome(TxnId(2), Outcome::Committed, Some(20)).expect("outcome").wait().expect("durable");
    assert_eq!(feeder.read_log(&log, usize::MAX).expect("reads"), 1);
    feeder.finish().expect("a last round");
    let s = feeder.status();
    assert_eq!((s.txns_read, s.verified, s.rejects, s.lag_txns), (2, 2, 1, 0));
    let rejects = feeder.new_rejects();
    assert_eq!(rejects.len(), 1);
    assert!(rejects[0].1.starts_with("REJECT"), "{}", rejects[0].1);
    let id = rejects[0].0.clone().expect("the report was stored");
    assert!(!store.load(&id).expect("the stored report loads").is_accept());
    assert!(feeder.new_rejects().is_empty(), "each reject is announced once");
    // Reports quote statement texts: only their owner may read them, as the log.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(store.dir()), 0o700);
        assert_eq!(mode(&store.dir().join(format!("{id}.json"))), 0o600);
    }
}

#[test]
fn serial_transactions_are_accepted_and_a_recovery_record_releases_pending_intents() {
    let (_dir, log) = temp_log(Durability::Strict);
    // T1 writes x; T2 (same session, later) reads T1's x and writes y: serial, accepted.
    let mut t1 = LoggedTxn::new(TxnId(1), SessionId(1), 0);
    t1.ops.push(LoggedOp::Write { key: key("x"), write: WriteId(11), stmt: None });
    log.append_finished(t1, Outcome::Committed, Some(10)).expect("finished").wait().expect("durable");
    let mut t2 = LoggedTxn::new(TxnId(2), SessionId(1), 1);
    t2.ops.push(LoggedOp::Read { key: key("x"), observed: Observed::Version(WriteId(11)), stmt: None });
    t2.ops.push(LoggedOp::Write { key: key("y"), write: WriteId(12), stmt: None });
    let _durable_with_the_outcome = log.append_intent(t2).expect("intent");
    // The proxy closes with T2's COMMIT in flight: the log lists it as indeterminate.
    log.close().expect("a clean close");
    let mut feeder = Feeder::new(RoundOptions::online(1, Duration::from_secs(3600)), None);
    feeder.read_log(&log, usize::MAX).expect("reads");
    feeder.finish().expect("a last round");
    let s = feeder.status();
    assert_eq!((s.txns_read, s.verified, s.rejects), (2, 2, 0), "{s:?}");
    assert!(s.rounds >= 2, "one round per transaction at round size 1: {s:?}");
}

/// A database that breaks its isolation over and over: the verifier keeps only its last reports in memory,
/// and still counts, announces and stores every one.
#[test]
fn only_the_last_reject_reports_are_kept_and_every_one_is_stored_and_announced() {
    let (dir, log) = temp_log(Durability::None);
    let pairs = 20u64;
    for i in 0..pairs {
        // A write skew of its own per pair: each reads both keys' initial versions and writes one.
        let (x, y) = (format!("x{i}"), format!("y{i}"));
        for (n, writes) in [(0, &x), (1, &y)] {
            let ops = vec![
                read(&x, Observed::PreHistory(0)),
                read(&y, Observed::PreHistory(0)),
                write(writes, 100 + 2 * i + n),
            ];
            commit(&log, logged(2 * i + n + 1, n + 1, i, ops, false));
        }
    }
    let store = ReportStore::open(dir.path()).expect("a report store");
    let options = RoundOptions { rejects_kept: 3, ..RoundOptions::online(2, Duration::from_secs(3600)) };
    let mut feeder = Feeder::new(options, Some(store.clone()));
    let mut announced = Vec::new();
    while feeder.read_log(&log, 5).expect("reads") > 0 {
        announced.extend(feeder.new_rejects());
    }
    feeder.finish().expect("a last round");
    announced.extend(feeder.new_rejects());
    let s = feeder.status();
    assert_eq!(s.rejects, pairs, "{s:?}");
    assert_eq!(announced.len() as u64, pairs, "each reject announced once: {announced:?}");
    let mut ids: Vec<String> = announced.iter().map(|(id, _)| id.clone().expect("stored")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len() as u64, pairs, "one report per reject");
    assert_eq!(store.ids().expect("the store lists").len() as u64, pairs, "every report is in the store");
    let kept = feeder.rejects().len();
    assert!((3..=6).contains(&kept), "at least the last 3 reports, at most twice that: {kept}");
    assert_eq!((s.report_ids.len(), s.reject_lines.len()), (kept, kept));
    assert_eq!(s.report_ids.last(), announced.last().and_then(|(id, _)| id.as_ref()), "the newest is kept");
}

/// A verifier that runs for months keeps only its last rounds' lines, and still counts every round and every
/// verified transaction.
#[test]
fn only_the_last_rounds_are_kept_and_every_one_is_counted() {
    let (_dir, log) = temp_log(Durability::None);
    let n = 40u64;
    for i in 0..n {
        commit(&log, logged(i + 1, 1, i, vec![write("x", 100 + i)], false));
    }
    let options = RoundOptions { rounds_kept: 3, ..RoundOptions::online(1, Duration::from_secs(3600)) };
    let mut feeder = Feeder::new(options, None);
    // A few records per read, so that rounds are counted across reads as well as within one.
    while feeder.read_log(&log, 7).expect("reads") > 0 {}
    feeder.finish().expect("a last round");
    let s = feeder.status();
    assert_eq!((s.txns_read, s.verified, s.rejects), (n, n, 0), "{s:?}");
    assert_eq!(s.rounds, n, "one round per transaction at round size 1: {s:?}");
    let kept = feeder.verifier().rounds();
    assert!((3..=6).contains(&kept.len()), "at least the last 3 rounds, at most twice that: {}", kept.len());
    assert_eq!(kept.last().map(|r| r.round), Some(n), "the last round kept is the last run");
}

#[test]
fn reading_is_bounded_per_call() {
    let (_dir, log) = temp_log(Durability::Strict);
    for i in 0..10 {
        let t = LoggedTxn::new(TxnId(i + 1), SessionId(1), i);
        commit(&log, t);
    }
    let mut feeder = Feeder::new(RoundOptions::online(1_000, Duration::from_secs(3600)), None);
    assert_eq!(feeder.read_log(&log, 4).expect("reads"), 4);
    assert_eq!(feeder.status().lag_txns, 10, "4 read but unverified, 6 not read yet");
    assert_eq!(feeder.read_log(&log, 100).expect("reads"), 6);
    assert_eq!(feeder.read_log(&log, 100).expect("reads"), 0);
}

/// Session 3 runs one transaction (left as an intent with no outcome when `orphan`) and goes quiet;
/// session 1 writes x twice; then ten fences alternate between sessions 1 and 2. Returns the feeder
/// after a last round.
fn quiet_session(end: bool, orphan: bool) -> Feeder {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = quiet_session_log(dir.path(), end, orphan);
    let options = RoundOptions { round_size: 2, round_interval: None, ..RoundOptions::default() };
    let mut feeder = Feeder::new(options, None);
    feeder.read_log(&log, usize::MAX).expect("reads");
    feeder.finish().expect("a last round");
    feeder
}

/// The log of [`quiet_session`], in `dir`.
fn quiet_session_log(dir: &std::path::Path, end: bool, orphan: bool) -> DiskLog {
    let log = DiskLog::open(dir.join("log"), Durability::Strict).expect("the log opens");
    let quiet = logged(1, 3, 0, vec![write("s", 7)], false);
    if orphan {
        let _ = log.append_intent(quiet).expect("intent");
    } else {
        let _ = log.append_finished(quiet, Outcome::Committed, Some(1)).expect("finished");
    }
    if end {
        let _ = log.append_session_ended(SessionId(3), Some(0)).expect("session ended");
    }
    let t2 = logged(2, 1, 0, vec![write("x", 1)], false);
    let _ = log.append_finished(t2, Outcome::Committed, Some(2)).expect("finished");
    let t3 = logged(3, 1, 1, vec![read("x", Observed::Version(WriteId(1))), write("x", 2)], false);
    let _ = log.append_finished(t3, Outcome::Committed, Some(3)).expect("finished");
    append_fence_chain(&log, [(1, 2), (2, 0)]);
    log
}

/// Ten committed fences (transactions 10–19), alternating between two sessions given as (session, seq
/// of its first fence), each reading the fence row the one before wrote; then waits until durable.
fn append_fence_chain(log: &DiskLog, sessions: [(u64, u64); 2]) {
    let mut next_seq = sessions.map(|(_, seq)| seq);
    for i in 0..10u64 {
        let s = (i % 2) as usize;
        let prev = if i == 0 { Observed::PreHistory(0) } else { Observed::Version(WriteId(1000 + i - 1)) };
        let ops = vec![read("F", prev), write("F", 1000 + i)];
        let fence = logged(10 + i, sessions[s].0, next_seq[s], ops, true);
        next_seq[s] += 1;
        let _ = log.append_finished(fence, Outcome::Committed, Some(10 + i)).expect("finished");
    }
    log.sync().expect("durable");
}

/// Session 3 runs one transaction and the proxy crashes before the session ends (no SessionEnded
/// record); after the restart (a Recovery record) sessions 4 and 5 run ten fences. Without the restart
/// rule session 3 would hold `epoch_agree` at 0 for ever.
#[test]
fn sessions_open_at_a_crash_end_at_the_recovery_record() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("log");
    let log = DiskLog::open(&path, Durability::Strict).expect("the log opens");
    let quiet = logged(1, 3, 0, vec![write("s", 7)], false);
    log.append_finished(quiet, Outcome::Committed, Some(1)).expect("finished").wait().expect("durable");
    log.drop_as_if_crashed();
    let log = DiskLog::open(&path, Durability::Strict).expect("the log reopens after the crash");
    let t2 = logged(2, 4, 0, vec![write("x", 1)], false);
    let _ = log.append_finished(t2, Outcome::Committed, Some(2)).expect("finished");
    let t3 = logged(3, 4, 1, vec![read("x", Observed::Version(WriteId(1))), write("x", 2)], false);
    let _ = log.append_finished(t3, Outcome::Committed, Some(3)).expect("finished");
    append_fence_chain(&log, [(4, 2), (5, 0)]);
    let options = RoundOptions { round_size: 2, round_interval: None, ..RoundOptions::default() };
    let mut feeder = Feeder::new(options, None);
    feeder.read_log(&log, usize::MAX).expect("reads");
    feeder.finish().expect("a last round");
    let (agree, deleted) = (feeder.verifier().epoch_agree(), feeder.verifier().deleted());
    assert!(agree >= 8 && deleted > 0, "epoch_agree {agree}, deleted {deleted}");
    assert_eq!(feeder.status().txns_read, 13);
    assert!(feeder.new_rejects().is_empty());
}

#[test]
fn a_session_ended_record_lets_collection_advance_past_a_quiet_session() {
    let stalled = quiet_session(false, false);
    assert_eq!((stalled.verifier().epoch_agree(), stalled.verifier().deleted()), (0, 0), "no end: stalled");
    for orphan in [false, true] {
        let mut ended = quiet_session(true, orphan);
        let (agree, deleted) = (ended.verifier().epoch_agree(), ended.verifier().deleted());
        assert!(agree >= 8 && deleted > 0, "orphan {orphan}: epoch_agree {agree}, deleted {deleted}");
        // The quiet session's transaction was fed (as Indeterminate when its outcome never came).
        assert_eq!(ended.status().txns_read, 13, "orphan {orphan}");
        assert_eq!(ended.replayer().pending().count(), 0, "orphan {orphan}");
        assert!(ended.new_rejects().is_empty(), "orphan {orphan}");
    }
}

/// A shipped log can lose a stretch for good (issue 21), and with it a session's end record: the quiet
/// session would then hold `epoch_agree` at 0 for ever. The shipping proxy's list of open sessions, which
/// leaves it out, ends it, and collection advances as if its end had arrived.
#[test]
fn a_session_whose_end_fell_in_a_hole_ends_at_the_list_of_open_sessions() {
    use history::log::merge::{Heartbeat, Merger};
    use history::{ClockBounds, CollectorId, LogRecord};

    for listed in [false, true] {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = quiet_session_log(dir.path(), true, false);
        if listed {
            let _ = log.append_sessions_open(SessionId(6), vec![SessionId(1), SessionId(2)]).expect("listed");
            log.sync().expect("durable");
        }
        let records: Vec<(u64, LogRecord)> = log.tail(0).map(|r| r.expect("a readable record")).collect();
        let one = CollectorId(1);
        let mut merger = Merger::new(&[one], ClockBounds::default());
        for (seq, record) in records.iter().cloned() {
            // The session's end never arrives.
            if !matches!(record, LogRecord::SessionEnded { .. }) {
                merger.record(one, seq, record).expect("merges");
            }
        }
        merger.skip_hole(one).expect("skips").expect("a hole to give up on");
        let below = records.last().map_or(0, |(seq, _)| seq + 1);
        merger.heartbeat(one, Heartbeat { below, appended_before_ns: u64::MAX / 2, read_at_ns: 0 });
        let options = RoundOptions { round_size: 2, round_interval: None, ..RoundOptions::default() };
        let mut feeder = Feeder::new(options, None);
        let events = merger.release().expect("releases");
        feeder.feed_events(events, &merger).expect("feeds");
        feeder.finish().expect("a last round");
        let (agree, deleted) = (feeder.verifier().epoch_agree(), feeder.verifier().deleted());
        if listed {
            assert!(agree >= 8 && deleted > 0, "listed: epoch_agree {agree}, deleted {deleted}");
        } else {
            assert_eq!((agree, deleted), (0, 0), "not listed: the quiet session holds collection back");
        }
        assert_eq!(feeder.status().txns_read, 13, "listed {listed}");
        assert!(feeder.new_rejects().is_empty(), "listed {listed}");
    }
}

/// The verifier numbers keys and statements in the order transactions reach it, the log's reader in the
/// order their first records come; a report must still name what each transaction read and wrote.
#[test]
fn a_report_names_the_keys_and_statements_of_the_log_whatever_order_they_were_first_seen() {
    let (_dir, log) = temp_log(Durability::Strict);
    let _durable_with_the_outcome = log.append_intent(skewed(1, 1, "x", 11)).expect("intent");
    // T3, finished in between, is the first to reach the verifier: its key and statement come first there.
    let mut other = LoggedTxn::new(TxnId(3), SessionId(3), 0);
    other.statements.push("UPDATE accounts SET v = 0 WHERE k = 'z'".into());
    other.ops.push(LoggedOp::Write { key: key("z"), write: WriteId(13), stmt: Some(0) });
    let _ = log.append_finished(other, Outcome::Committed, Some(5)).expect("finished");
    let _durable_with_the_outcome = log.append_intent(skewed(2, 2, "y", 12)).expect("intent");
    log.append_outcome(TxnId(1), Outcome::Committed, Some(10)).expect("outcome").wait().expect("durable");
    log.append_outcome(TxnId(2), Outcome::Committed, Some(20)).expect("outcome").wait().expect("durable");
    let mut feeder = Feeder::new(RoundOptions::online(1_000, Duration::from_secs(3600)), None);
    feeder.read_log(&log, usize::MAX).expect("reads");
    feeder.finish().expect("a last round");
    let [report] = feeder.rejects() else { panic!("one reject: {:?}", feeder.status()) };
    let t1 = report.transactions.iter().find(|t| t.id == TxnId(1)).expect("T1 is in the report");
    let ops: Vec<&str> = t1.ops.iter().map(|op| op.text.as_str()).collect();
    assert_eq!(ops, ["r(accounts:x) = init", "r(accounts:y) = init", "w(accounts:x) = w11"]);
    let sql = t1.ops[2].sql.as_deref();
    assert_eq!(sql, Some("UPDATE accounts SET v = v - 1 WHERE k = 'x'"));
}

/// A statement run that produced no op (a read that found nothing) still has its text in the log's reader,
/// but not in the verifier, which adds only what ops cite: the two number statements differently from then
/// on. A report must still show each op the parameters of its own run, which the run finds by its
/// statement.
#[test]
fn a_report_shows_each_op_the_parameters_of_its_run_after_a_run_without_ops() {
    use history::values::Value;
    let (_dir, log) = temp_log(Durability::Strict);
    let run = |stmt: u32, param: &str| LoggedOp::Run {
        stmt: Some(stmt),
        params: vec![Value::Text(param.into())],
        columns: Vec::new(),
    };
    let mut empty = LoggedTxn::new(TxnId(3), SessionId(3), 0);
    empty.statements.push("SELECT v FROM accounts WHERE k = $1".into());
    empty.ops.push(run(0, "nobody"));
    let _ = log.append_finished(empty, Outcome::Committed, Some(5)).expect("finished");
    for (id, writes) in [(1, "x"), (2, "y")] {
        let mut t = skewed(id, id, writes, 10 + id);
        t.statements[0] = "UPDATE accounts SET v = v - 1 WHERE k = $1".into();
        t.ops.insert(0, run(0, writes));
        let _durable_with_the_outcome = log.append_intent(t).expect("intent");
    }
    log.append_outcome(TxnId(1), Outcome::Committed, Some(10)).expect("outcome").wait().expect("durable");
    log.append_outcome(TxnId(2), Outcome::Committed, Some(20)).expect("outcome").wait().expect("durable");
    // Read by the verifier's own reader, and through a merger of many edges' logs (collector 0 keeps its
    // ids), which numbers statements as the verifier does.
    for merged in [false, true] {
        let mut feeder = Feeder::new(RoundOptions::online(1_000, Duration::from_secs(3600)), None);
        if merged {
            use history::log::merge::{Heartbeat, Merger};
            use history::{ClockBounds, CollectorId};
            let mut merger = Merger::new(&[CollectorId(0)], ClockBounds::default());
            let mut below = 0;
            for item in log.tail(0) {
                let (seq, record) = item.expect("a readable record");
                merger.record(CollectorId(0), seq, record).expect("merges");
                below = seq + 1;
            }
            merger.heartbeat(
                CollectorId(0),
                Heartbeat { below, appended_before_ns: u64::MAX / 2, read_at_ns: 0 },
            );
            let events = merger.release().expect("releases");
            feeder.feed_events(events, &merger).expect("feeds");
        } else {
            feeder.read_log(&log, usize::MAX).expect("reads");
        }
        feeder.finish().expect("a last round");
        let [report] = feeder.rejects() else { panic!("merged {merged}: one reject: {:?}", feeder.status()) };
        for (id, writes) in [(1, "x"), (2, "y")] {
            let t = report.transactions.iter().find(|t| t.id == TxnId(id)).expect("in the report");
            for op in &t.ops {
                let params = op.params.as_deref();
                assert_eq!(
                    params,
                    Some(format!("$1 = '{writes}'").as_str()),
                    "merged {merged}, T{id}: {op:?}"
                );
            }
        }
    }
}

/// A client that puts its values in its statements cites a new text in every transaction. Once collection
/// has deleted most of the transactions that cited them, the verifier forgets their texts and renumbers
/// the statements of those it holds, and the log's reader forgets those of finished transactions: both
/// tables stay bounded, and every transaction held (live across a
/// renumbering, or pushed after it through the feeder's map, citing a text it has seen before or a new
/// one) still names its own texts.
#[test]
fn the_verifier_forgets_the_texts_of_collected_transactions() {
    let (_dir, log) = temp_log(Durability::None);
    // Every read runs one text, but the first, so that a stale map (which would take a text's new number
    // for its old one) names a wrong text.
    let read_text = |id: u64| match id {
        2 => "SELECT v FROM accounts WHERE k = 'x' -- the first".to_owned(),
        _ => "SELECT v FROM accounts WHERE k = 'x'".to_owned(),
    };
    let write_text = |id: u64| format!("UPDATE accounts SET v = {id} WHERE k = 'x'");
    let (mut seqs, mut last_x, mut last_fence) =
        ([0u64; 2], Observed::PreHistory(0), Observed::PreHistory(0));
    // Each client transaction is an intent whose outcome comes after the next transaction's record, so the
    // log's reader holds a pending intent, citing its texts, whenever it forgets.
    let mut pending: Option<u64> = None;
    for id in 1..=20_000u64 {
        let s = (id % 2) as usize;
        let t = if id % 10 < 2 {
            // Each session fences every fifth transaction of its own, so that epochs advance.
            let ops = vec![read("F", last_fence), write("F", 1_000_000 + id)];
            last_fence = Observed::Version(WriteId(1_000_000 + id));
            logged(id, s as u64 + 1, seqs[s], ops, true)
        } else {
            let ops = vec![
                LoggedOp::Read { key: key("x"), observed: last_x, stmt: Some(0) },
                LoggedOp::Write { key: key("x"), write: WriteId(id), stmt: Some(1) },
            ];
            last_x = Observed::Version(WriteId(id));
            let mut t = logged(id, s as u64 + 1, seqs[s], ops, false);
            t.statements = vec![read_text(id), write_text(id)];
            t
        };
        seqs[s] += 1;
        let previous = pending.take();
        if t.fence {
            let _ = log.append_finished(t, Outcome::Committed, Some(id)).expect("finished");
        } else {
            let _ = log.append_intent(t).expect("intent");
            pending = Some(id);
        }
        if let Some(p) = previous {
            let _ = log.append_outcome(TxnId(p), Outcome::Committed, Some(p)).expect("outcome");
        }
    }
    if let Some(p) = pending {
        let _ = log.append_outcome(TxnId(p), Outcome::Committed, Some(p)).expect("outcome");
    }
    forgetting_texts_keeps_every_held_op_naming_its_own(&log, read_text, write_text, false);
    forgetting_texts_keeps_every_held_op_naming_its_own(&log, read_text, write_text, true);
}

/// Reads `log` (see [`the_verifier_forgets_the_texts_of_collected_transactions`]) into a feeder, directly or
/// through a merger of many edges' logs, checking after every read that each held op names its own text,
/// and that the tables stay bounded.
fn forgetting_texts_keeps_every_held_op_naming_its_own(
    log: &DiskLog,
    read_text: impl Fn(u64) -> String,
    write_text: impl Fn(u64) -> String,
    merged: bool,
) {
    use history::log::merge::{Heartbeat, Merger};
    use history::{ClockBounds, CollectorId};

    let options = RoundOptions { round_size: 500, round_interval: None, ..RoundOptions::default() };
    let mut feeder = Feeder::new(options, None);
    let mut merger = Merger::new(&[CollectorId(0)], ClockBounds::default());
    let records: Vec<(u64, LogRecord)> = log.tail(0).map(|r| r.expect("a readable record")).collect();
    let mut chunks = records.chunks(300);
    let (mut most, mut checked) = (0, 0);
    loop {
        let read = if merged {
            let chunk = chunks.next().unwrap_or_default();
            for (seq, record) in chunk.iter().cloned() {
                merger.record(CollectorId(0), seq, record).expect("merges");
            }
            if let Some((last, _)) = chunk.last() {
                let beat = Heartbeat { below: last + 1, appended_before_ns: u64::MAX / 2, read_at_ns: 0 };
                merger.heartbeat(CollectorId(0), beat);
            }
            let events = merger.release().expect("releases");
            feeder.feed_events(events, &merger).expect("feeds");
            most = most.max(merger.statements().len()).max(merger.holding()[0].statements);
            chunk.len()
        } else {
            let read = feeder.read_log(log, 300).expect("reads");
            most = most.max(feeder.replayer().statements().len());
            read
        };
        let residual = feeder.verifier().residual();
        most = most.max(residual.statements.len());
        for t in &residual.transactions {
            for op in &t.ops {
                let Some(stmt) = op.stmt() else { continue };
                let expected = match op {
                    Op::Read { .. } => read_text(t.id.0),
                    Op::Write { .. } => write_text(t.id.0),
                };
                assert_eq!(residual.statement(stmt), Some(expected.as_str()), "{}", t.id);
                checked += 1;
            }
        }
        if read == 0 {
            break;
        }
    }
    feeder.finish().expect("a last round");
    assert!(feeder.new_rejects().is_empty());
    let v = feeder.verifier();
    assert!(v.deleted() > 18_000, "merged {merged}: collection deleted {}", v.deleted());
    let by_verifier = v.statements_renumbered();
    assert!(by_verifier > 1, "merged {merged}: the verifier forgot its texts {by_verifier} times");
    let by_reader = match merged {
        true => merger.statements_renumbered(),
        false => feeder.replayer().statements_renumbered(),
    };
    assert!(by_reader > 0, "merged {merged}: the reader forgot its texts {by_reader} times");
    // Of 16,001 texts: the readers start over from 4,096, a merger's table from 8,192.
    assert!(most < 9_000, "merged {merged}: {most} texts held at most");
    eprintln!("merged {merged}: {checked} ops checked; at most {most} texts held; renumbered {by_verifier}");
}

/// The lost update of `integration-tests/tests/proxy_unrecorded_writers.rs`, as the proxy logs it: T1 and
/// T2 write x through a SQL function (discovered by T3's and T4's reads), T1 having read x's initial
/// version first. One-shot, the discovered writes join their transactions and the cycle is found. Online,
/// the same while no round has verified T1 and T2 yet (rounds of 1,000); once rounds of one transaction have
/// verified them without their writes, the reads of those writes are unverifiable, never judged.
#[test]
fn writes_discovered_after_a_round_are_unverifiable_online_and_checked_before_one() {
    let (_dir, log) = temp_log(Durability::Strict);
    let t1 = logged(1, 1, 0, vec![read("x", Observed::PreHistory(0))], false);
    let t2 = logged(2, 2, 0, vec![], false);
    let _covered = log.append_intent(t1).expect("intent");
    let _ = log.append_finished(t2, Outcome::Committed, Some(10)).expect("finished");
    let _ = log.append_discovered_write(TxnId(2), key("x"), WriteId(12)).expect("discovered");
    let t3 = logged(3, 3, 0, vec![read("x", Observed::Version(WriteId(12)))], false);
    let _ = log.append_finished(t3, Outcome::Committed, Some(20)).expect("finished");
    let _ = log.append_outcome(TxnId(1), Outcome::Committed, Some(30)).expect("outcome");
    let _ = log.append_discovered_write(TxnId(1), key("x"), WriteId(11)).expect("discovered");
    let t4 = logged(4, 3, 1, vec![read("x", Observed::Version(WriteId(11)))], false);
    log.append_finished(t4, Outcome::Committed, Some(40)).expect("finished").wait().expect("durable");

    let h = log.replay().expect("replays");
    let report = verifier::verify(&h, &verifier::Options::default()).expect("verifies");
    assert!(!report.is_accept(), "{report}");

    for (round_size, rejects, not_judged) in [(1_000, 1, 0), (1, 0, 2)] {
        let mut feeder = Feeder::new(RoundOptions::online(round_size, Duration::from_secs(3600)), None);
        feeder.read_log(&log, usize::MAX).expect("reads");
        feeder.finish().expect("a last round");
        let s = feeder.status();
        assert_eq!((s.txns_read, s.rejects), (4, rejects), "rounds of {round_size}: {s:?}");
        assert_eq!(feeder.verifier().unverifiable_reads(), not_judged, "rounds of {round_size}");
    }
}

/// `[record] exclusive`: a foreign read (a version no recorded transaction owned when it was read) is
/// reported as an unowned version, one-shot and online, and the report re-checks; one whose tag a recorded
/// transaction did write (its row reached the proxy after the reader's) is a read of that write.
#[test]
fn a_foreign_read_is_an_unowned_version_unless_its_write_turns_up() {
    for writer_turns_up in [false, true] {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = DiskLog::open(dir.path().join("log"), Durability::Strict).expect("the log opens");
        let t1 = logged(1, 1, 0, vec![read("x", Observed::Foreign(77))], false);
        let _ = log.append_finished(t1, Outcome::Committed, Some(10)).expect("finished");
        let t2 = logged(2, 2, 0, if writer_turns_up { vec![write("x", 77)] } else { vec![] }, false);
        log.append_finished(t2, Outcome::Committed, Some(5)).expect("finished").wait().expect("durable");

        let h = log.replay().expect("replays");
        let report = verifier::verify(&h, &verifier::Options::default()).expect("verifies");
        assert_eq!(report.is_accept(), writer_turns_up, "{report}");
        if !writer_turns_up {
            assert_eq!(report.anomalies[0].class, verifier::AnomalyClass::UnownedVersion, "{report}");
            verifier::check_report(&h, &report).expect("the report re-checks");
            // The evidence must be a foreign read that no one wrote.
            let mut forged = h.clone();
            forged.transactions[1].ops.push(history::Op::Write {
                key: forged.keys.get(&key("x")).expect("x"),
                write: WriteId(77),
                stmt: None,
            });
            assert!(verifier::check_report(&forged, &report).is_err());
        }

        let mut feeder = Feeder::new(RoundOptions::online(1_000, Duration::from_secs(3600)), None);
        feeder.read_log(&log, usize::MAX).expect("reads");
        feeder.finish().expect("a last round");
        assert_eq!(feeder.status().rejects, u64::from(!writer_turns_up), "online, writer: {writer_turns_up}");
    }
}

/// A log of `n` transactions in one session, each writing a key of its own, as a stopped proxy leaves it.
/// (Not all one key: 100,000 blind writes of one key without fences took over 20 GiB to verify.)
fn backlog(dir: &std::path::Path, n: u64) -> std::sync::Arc<dyn HistoryLog> {
    let log = DiskLog::open(dir.join("log"), Durability::None).expect("the log opens");
    for i in 0..n {
        let t = logged(i + 1, 1, i, vec![write(&format!("k{i}"), i + 1)], false);
        log.append_finished(t, Outcome::Committed, None).expect("finished").wait().expect("logged");
    }
    std::sync::Arc::new(log)
}

#[test]
fn a_stopping_tailer_verifies_the_whole_backlog_unless_told_to_give_up() {
    use verifier::online::{MAX_RECORDS_PER_TICK, Tailer};
    let n = 3 * MAX_RECORDS_PER_TICK as u64;
    let options = || RoundOptions::online(10_000, Duration::from_millis(50));
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = backlog(dir.path(), n);
    let tailer = Tailer::spawn(log.clone(), options(), None, |_, _| {}).expect("the tailer starts");
    let all = tailer.finish().expect("the tailer finishes");
    assert_eq!((all.verified, all.lag_txns), (n, 0), "a plain stop verifies everything the log holds");
    // Given up at once: at most the tick under way is verified, and the rest is counted, not dropped silently.
    let tailer = Tailer::spawn(log, options(), None, |_, _| {}).expect("the tailer starts");
    tailer.give_up_handle().now();
    let cut = tailer.finish().expect("the tailer stops");
    assert!(cut.verified < n, "giving up should leave most of {n} unverified: {cut:?}");
    // The count is of records left unread: the transactions, and the one namespace definition they cite if it
    // was not read yet.
    let counted = cut.verified + cut.lag_txns;
    assert!((n..=n + 1).contains(&counted), "what was not verified is counted as left: {cut:?}");
}
