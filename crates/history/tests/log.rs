//! Behaviour of the durable history log: append order, tail, replay, recovery after a crash, and group
//! commit sharing fsyncs.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use history::log::{LogOptions, Replayer};
use history::{
    CollectorId, DiskLog, Durability, HistoryLog, IsolationLevel, KeyName, LogError, LogGap, LogRecord,
    LoggedOp, LoggedTxn, Observed, Op, Outcome, SessionId, TxnId, WriteId,
};

fn key(name: &str) -> KeyName {
    KeyName { namespace: "accounts".into(), bytes: name.as_bytes().to_vec() }
}

/// A transaction that reads `k` (observing `read`) and then writes it, with one statement per op.
fn rmw(id: u64, session: u64, seq: u64, k: &str, read: Observed, write: u64) -> LoggedTxn {
    let mut txn = LoggedTxn::new(TxnId(id), SessionId(session), seq);
    txn.statements =
        vec![format!("SELECT v FROM accounts WHERE k = '{k}'"), "UPDATE accounts SET v = v + 1".into()];
    txn.ops = vec![
        LoggedOp::Read { key: key(k), observed: read, stmt: Some(0) },
        LoggedOp::Write { key: key(k), write: WriteId(write), stmt: Some(1) },
    ];
    txn.start_ns = Some(1_000 * id);
    txn.collector = CollectorId(7);
    txn
}

fn collect_tail(log: &dyn HistoryLog, from: u64) -> Vec<(u64, LogRecord)> {
    log.tail(from).collect::<Result<Vec<_>, _>>().expect("tail of a healthy log")
}

/// The whole log as the proxy handed its records over: compact records expanded, definitions left out.
fn resolved_tail(log: &dyn HistoryLog) -> Vec<(u64, LogRecord)> {
    history::log::resolved(log.tail(0)).collect::<Result<Vec<_>, _>>().expect("a resolvable log")
}

#[test]
fn tail_returns_records_in_append_order_with_consecutive_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let t1 = log.append_intent(rmw(1, 1, 0, "a", Observed::PreHistory(0), 10)).unwrap();
    let t2 = log.append_outcome(TxnId(1), Outcome::Committed, Some(5_000)).unwrap();
    let t3 = log.append_finished(LoggedTxn::new(TxnId(2), SessionId(2), 0), Outcome::Aborted, None).unwrap();
    // The intent's two statement texts and its namespace are defined first, in records 0 to 2.
    assert_eq!((t1.seq(), t2.seq(), t3.seq()), (3, 4, 5));
    assert_eq!(log.next_seq(), 6);
    t3.wait().unwrap();

    let all = collect_tail(&log, 0);
    assert_eq!(all.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4, 5]);
    assert!(matches!(&all[0].1, LogRecord::Statement { text } if text.starts_with("SELECT")));
    assert!(matches!(&all[2].1, LogRecord::Namespace { name } if name == "accounts"));
    assert!(matches!(&all[3].1, LogRecord::CompactIntent(t) if t.id == TxnId(1)));
    // Resolved, the records read as the proxy handed them over.
    let resolved: Vec<_> = history::log::resolved(all.into_iter().map(Ok)).collect::<Result<_, _>>().unwrap();
    assert_eq!(resolved.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![3, 4, 5]);
    assert_eq!(resolved[0].1, LogRecord::Intent(rmw(1, 1, 0, "a", Observed::PreHistory(0), 10)));
    assert_eq!(
        resolved[1].1,
        LogRecord::Outcome { txn: TxnId(1), outcome: Outcome::Committed, commit_ns: Some(5_000) }
    );
    assert!(
        matches!(&resolved[2].1, LogRecord::Finished { txn, outcome: Outcome::Aborted, .. } if txn.id == TxnId(2))
    );

    let from_five = collect_tail(&log, 5);
    assert_eq!(from_five.len(), 1);
    assert_eq!(from_five[0].0, 5);
    assert!(collect_tail(&log, 6).is_empty());
}

#[test]
fn tail_order_survives_reopen_and_numbers_continue() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = DiskLog::open(dir.path(), Durability::Group).unwrap();
        for i in 0..300 {
            let _ = log
                .append_finished(LoggedTxn::new(TxnId(i), SessionId(0), i), Outcome::Committed, None)
                .unwrap();
        }
        log.close().unwrap();
    }
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    assert_eq!(log.next_seq(), 300, "a clean reopen adds no record");
    let ticket =
        log.append_finished(LoggedTxn::new(TxnId(300), SessionId(0), 300), Outcome::Committed, None).unwrap();
    assert_eq!(ticket.seq(), 300);
    let ids: Vec<u64> = collect_tail(&log, 0).iter().map(|(_, r)| r.txn_id().unwrap().0).collect();
    assert_eq!(ids, (0..=300).collect::<Vec<_>>(), "big-endian keys keep numeric order past 255");
}

#[test]
fn replay_interns_keys_and_statements_and_assembles_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let _ = log.append_intent(rmw(1, 1, 0, "a", Observed::PreHistory(0), 10)).unwrap();
    let _ = log.append_intent(rmw(2, 2, 0, "b", Observed::Absent, 20)).unwrap();
    log.append_outcome(TxnId(2), Outcome::Aborted, None).unwrap().wait().unwrap();
    log.append_outcome(TxnId(1), Outcome::Committed, Some(99)).unwrap().wait().unwrap();
    let mut fence = rmw(3, 1, 1, "a", Observed::Version(WriteId(10)), 30);
    fence.fence = true;
    let _ = log.append_intent(fence).unwrap();

    let h = log.replay().unwrap();
    assert_eq!(h.transactions.len(), 3);
    assert_eq!(h.keys.len(), 2, "key a is interned once although two transactions use it");
    // The UPDATE text is shared by all three; the SELECTs differ by key.
    assert_eq!(h.statements.len(), 3);

    let t1 = &h.transactions[0];
    assert_eq!(
        (t1.id, t1.outcome, t1.commit_ns, t1.start_ns),
        (TxnId(1), Outcome::Committed, Some(99), Some(1_000))
    );
    assert_eq!(t1.collector, CollectorId(7));
    let Op::Read { key: ka, observed, stmt } = t1.ops[0] else {
        panic!("first op is a read: {:?}", t1.ops[0])
    };
    assert_eq!(h.keys.name(ka), Some(&key("a")));
    assert_eq!(observed, Observed::PreHistory(0));
    assert_eq!(h.statement(stmt.unwrap()), Some("SELECT v FROM accounts WHERE k = 'a'"));
    let Op::Write { write, stmt, .. } = t1.ops[1] else { panic!("second op is a write") };
    assert_eq!(write, WriteId(10));
    assert_eq!(h.statement(stmt.unwrap()), Some("UPDATE accounts SET v = v + 1"));

    assert_eq!(h.transactions[1].outcome, Outcome::Aborted);
    let t3 = &h.transactions[2];
    assert!(t3.fence);
    assert_eq!(t3.outcome, Outcome::Indeterminate, "an intent still in flight replays as Indeterminate");
    assert_eq!(t3.ops[0].key(), ka);
    assert!(h.gaps.is_empty());
}

#[test]
fn appends_that_would_make_the_log_inconsistent_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::None).unwrap();
    let err = log.append_outcome(TxnId(5), Outcome::Committed, None).unwrap_err();
    assert!(matches!(err, LogError::Refused(_)), "{err}");
    let _ = log.append_intent(LoggedTxn::new(TxnId(5), SessionId(0), 0)).unwrap();
    let err = log.append_intent(LoggedTxn::new(TxnId(5), SessionId(0), 0)).unwrap_err();
    assert!(matches!(err, LogError::Refused(_)), "{err}");
    let err =
        log.append_finished(LoggedTxn::new(TxnId(5), SessionId(0), 0), Outcome::Aborted, None).unwrap_err();
    assert!(matches!(err, LogError::Refused(_)), "{err}");
    assert_eq!(log.next_seq(), 1, "refused appends take no sequence number");
    let _ = log.append_outcome(TxnId(5), Outcome::Committed, None).unwrap();
    let err = log.append_outcome(TxnId(5), Outcome::Committed, None).unwrap_err();
    assert!(matches!(err, LogError::Refused(_)), "a second outcome is refused: {err}");
}

#[test]
fn replay_rejects_a_record_that_contradicts_earlier_ones() {
    let mut replayer = Replayer::new();
    replayer.apply(0, LogRecord::Intent(LoggedTxn::new(TxnId(1), SessionId(0), 0))).unwrap();
    let err = replayer
        .apply(1, LogRecord::Outcome { txn: TxnId(9), outcome: Outcome::Committed, commit_ns: None })
        .unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { seq: 1, .. }), "{err}");

    let mut replayer = Replayer::new();
    replayer.apply(4, LogRecord::Intent(LoggedTxn::new(TxnId(1), SessionId(0), 0))).unwrap();
    let err = replayer.apply(6, LogRecord::Intent(LoggedTxn::new(TxnId(2), SessionId(0), 1))).unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { seq: 6, .. }), "a hole in the seqs: {err}");

    let mut replayer = Replayer::new();
    let mut txn = LoggedTxn::new(TxnId(1), SessionId(0), 0);
    txn.ops.push(LoggedOp::Write { key: key("a"), write: WriteId(1), stmt: Some(3) });
    let err = replayer.apply(0, LogRecord::Intent(txn)).unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { seq: 0, .. }), "a dangling statement index: {err}");

    let mut replayer = Replayer::new();
    replayer
        .apply(
            0,
            LogRecord::Finished {
                txn: LoggedTxn::new(TxnId(1), SessionId(0), 0),
                outcome: Outcome::Committed,
                commit_ns: None,
            },
        )
        .unwrap();
    let err = replayer.apply(1, LogRecord::Intent(LoggedTxn::new(TxnId(1), SessionId(0), 1))).unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { seq: 1, .. }), "a reused transaction id: {err}");
}

#[test]
fn recovery_after_a_strict_crash_marks_pending_intents_indeterminate_without_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        let _ = log.append_intent(rmw(1, 1, 0, "a", Observed::PreHistory(0), 10)).unwrap();
        let _ = log.append_intent(rmw(2, 2, 0, "b", Observed::PreHistory(0), 20)).unwrap();
        let _ = log.append_intent(rmw(3, 3, 0, "c", Observed::PreHistory(0), 30)).unwrap();
        log.append_outcome(TxnId(2), Outcome::Committed, Some(1)).unwrap().wait().unwrap();
        log.drop_as_if_crashed();
    }
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let records = resolved_tail(&log);
    assert_eq!(records.len(), 5);
    assert_eq!(
        records[4].1,
        LogRecord::Recovery {
            indeterminate: vec![TxnId(1), TxnId(3)],
            gap: false,
            previous: Some(Durability::Strict)
        }
    );
    assert_eq!(records[4].0, log.next_seq() - 1, "the recovery record is the last one");
    let h = log.replay().unwrap();
    let outcomes: Vec<_> = h.transactions.iter().map(|t| (t.id.0, t.outcome)).collect();
    assert_eq!(
        outcomes,
        vec![(1, Outcome::Indeterminate), (2, Outcome::Committed), (3, Outcome::Indeterminate)]
    );
    assert!(h.gaps.is_empty(), "strict durability loses nothing acknowledged, so there is no gap");

    // The next run's outcomes cannot resolve a recovered intent.
    let err = log.append_outcome(TxnId(1), Outcome::Committed, None).unwrap_err();
    assert!(matches!(err, LogError::Refused(_)), "{err}");
}

#[test]
fn recovery_after_a_group_crash_records_a_gap_at_the_crash_point() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = DiskLog::open(dir.path(), Durability::Group).unwrap();
        for i in 0..3 {
            let _ = log
                .append_finished(LoggedTxn::new(TxnId(i), SessionId(0), i), Outcome::Committed, None)
                .unwrap();
        }
        log.drop_as_if_crashed();
    }
    {
        let log = DiskLog::open(dir.path(), Durability::None).unwrap();
        let _ =
            log.append_finished(LoggedTxn::new(TxnId(3), SessionId(0), 3), Outcome::Committed, None).unwrap();
        log.drop_as_if_crashed();
    }
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let h = log.replay().unwrap();
    assert_eq!(h.transactions.len(), 4);
    assert_eq!(h.gaps, vec![LogGap { after_txns: 3 }, LogGap { after_txns: 4 }]);
    let recoveries: Vec<_> = collect_tail(&log, 0)
        .into_iter()
        .filter_map(|(seq, r)| match r {
            LogRecord::Recovery { gap, previous, .. } => Some((seq, gap, previous)),
            _ => None,
        })
        .collect();
    assert_eq!(recoveries, vec![(3, true, Some(Durability::Group)), (5, true, Some(Durability::None))]);
}

#[test]
fn a_clean_close_records_no_crash_but_resolves_intents_left_pending() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = DiskLog::open(dir.path(), Durability::Group).unwrap();
        let _ = log.append_intent(rmw(1, 1, 0, "a", Observed::PreHistory(0), 10)).unwrap();
        let _ = log.append_intent(rmw(2, 1, 1, "a", Observed::Version(WriteId(10)), 11)).unwrap();
        let _ = log.append_outcome(TxnId(1), Outcome::Committed, None).unwrap();
        log.close().unwrap();
        let err = log
            .append_finished(LoggedTxn::new(TxnId(9), SessionId(0), 0), Outcome::Aborted, None)
            .unwrap_err();
        assert!(matches!(err, LogError::Closed), "{err}");
        log.close().unwrap();
    }
    let log = DiskLog::open(dir.path(), Durability::Group).unwrap();
    let records = resolved_tail(&log);
    assert_eq!(records.len(), 4, "the reopen after a clean close appends nothing");
    assert_eq!(
        records[3].1,
        LogRecord::Recovery { indeterminate: vec![TxnId(2)], gap: false, previous: Some(Durability::Group) }
    );
    let h = log.replay().unwrap();
    assert!(h.gaps.is_empty());
    assert_eq!(h.transactions[1].outcome, Outcome::Indeterminate);
}

#[test]
fn recovery_scans_only_the_run_that_crashed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        let _ = log.append_intent(LoggedTxn::new(TxnId(1), SessionId(0), 0)).unwrap();
        log.drop_as_if_crashed();
    }
    {
        // This run's recovery resolves T1; the crash of this run must not list T1 again.
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        let _ = log.append_intent(LoggedTxn::new(TxnId(2), SessionId(0), 1)).unwrap();
        log.drop_as_if_crashed();
    }
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let lists: Vec<Vec<TxnId>> = collect_tail(&log, 0)
        .into_iter()
        .filter_map(|(_, r)| match r {
            LogRecord::Recovery { indeterminate, .. } => Some(indeterminate),
            _ => None,
        })
        .collect();
    assert_eq!(lists, vec![vec![TxnId(1)], vec![TxnId(2)]]);
    log.replay().expect("no transaction is listed twice");
}

#[test]
fn strict_group_commit_shares_fsyncs_between_concurrent_sessions() {
    const THREADS: u64 = 8;
    const COMMITS: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(DiskLog::open(dir.path(), Durability::Strict).unwrap());
    let before = log.stats();
    let handles: Vec<_> = (0..THREADS)
        .map(|s| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for i in 0..COMMITS {
                    let id = s * 1_000 + i;
                    let _ = log.append_intent(rmw(id, s, i, &format!("k{s}"), Observed::Absent, id)).unwrap();
                    let ticket = log.append_outcome(TxnId(id), Outcome::Committed, None).unwrap();
                    let seq = ticket.seq();
                    ticket.wait().unwrap();
                    // Strict: acknowledged means an fsync covered it.
                    assert!(log.durable_below() > seq);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = log.stats();
    let commits = THREADS * COMMITS;
    let fsyncs = stats.fsyncs - before.fsyncs;
    println!("{commits} strict commits from {THREADS} threads took {fsyncs} fsyncs; {stats:?}");
    assert_eq!(stats.durable_waits, commits);
    assert!(fsyncs >= 1);
    assert!(fsyncs < commits, "group commit shared no fsync: {fsyncs} fsyncs for {commits} commits");
    assert_eq!(stats.fsync_histogram.iter().sum::<u64>(), stats.fsyncs);
    assert!(stats.fsync_ns_max >= stats.fsync_ns_mean());
    assert_eq!(log.replay().unwrap().stats().committed, commits);
}

#[test]
fn group_durability_acknowledges_at_once_and_fsyncs_within_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = LogOptions::new(Durability::Group);
    options.group_interval = Duration::from_millis(5);
    let log = DiskLog::open_with(dir.path(), options).unwrap();
    let ticket =
        log.append_finished(LoggedTxn::new(TxnId(1), SessionId(0), 0), Outcome::Committed, None).unwrap();
    let seq = ticket.seq();
    ticket.wait().unwrap();
    assert_eq!(log.stats().durable_waits, 0, "group tickets do not wait for an fsync");
    // Nobody asks for durability; the flusher's timer must get there on its own.
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.durable_below() <= seq {
        assert!(Instant::now() < deadline, "the group flusher never fsynced record {seq}");
        thread::sleep(Duration::from_millis(1));
    }
    assert!(log.stats().fsyncs >= 1);
}

#[test]
fn none_durability_never_fsyncs_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::None).unwrap();
    for i in 0..20 {
        log.append_finished(LoggedTxn::new(TxnId(i), SessionId(0), i), Outcome::Committed, None)
            .unwrap()
            .wait()
            .unwrap();
    }
    thread::sleep(Duration::from_millis(30));
    assert_eq!(log.stats().fsyncs, 0);
    assert_eq!(log.durable_below(), 0);
    log.sync().unwrap();
    assert_eq!(log.stats().fsyncs, 1);
    assert_eq!(log.durable_below(), 20);
}

/// A minimal executor: the future must complete through its waker, without any runtime.
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

#[test]
fn async_waiters_are_woken_by_the_flusher() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(DiskLog::open(dir.path(), Durability::Strict).unwrap());
    let handles: Vec<_> = (0..4u64)
        .map(|s| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for i in 0..25 {
                    let id = s * 100 + i;
                    let ticket = log
                        .append_finished(LoggedTxn::new(TxnId(id), SessionId(s), i), Outcome::Committed, None)
                        .unwrap();
                    let seq = ticket.seq();
                    block_on(ticket.wait_async()).unwrap();
                    assert!(log.durable_below() > seq);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(log.stats().durable_waits, 100);
}

#[test]
fn durability_parses_from_configuration_strings() {
    assert_eq!("strict".parse::<Durability>().unwrap(), Durability::Strict);
    assert_eq!("group".parse::<Durability>().unwrap(), Durability::Group);
    assert_eq!("none".parse::<Durability>().unwrap(), Durability::None);
    assert!("fsync".parse::<Durability>().is_err());
    assert_eq!(Durability::default(), Durability::Strict);
    for d in [Durability::Strict, Durability::Group, Durability::None] {
        assert_eq!(d.to_string().parse::<Durability>().unwrap(), d);
    }
}

#[test]
fn a_restarted_proxy_learns_where_transaction_ids_continue_and_cannot_reuse_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        assert_eq!(log.txn_id_floor(), TxnId(0));
        let _ = log
            .append_finished(LoggedTxn::new(TxnId(41), SessionId(0), 0), Outcome::Committed, None)
            .unwrap();
        let _ =
            log.append_finished(LoggedTxn::new(TxnId(7), SessionId(1), 0), Outcome::Committed, None).unwrap();
        assert_eq!(log.txn_id_floor(), TxnId(42));
        log.close().unwrap();
    }
    {
        // After a clean close the floor comes from the metadata; after a crash, from the recovery scan.
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        assert_eq!(log.txn_id_floor(), TxnId(42));
        let err = log.append_intent(LoggedTxn::new(TxnId(7), SessionId(2), 0)).unwrap_err();
        assert!(matches!(err, LogError::Refused(_)), "an id of an earlier run is refused: {err}");
        let _ = log.append_intent(LoggedTxn::new(TxnId(100), SessionId(2), 0)).unwrap();
        log.drop_as_if_crashed();
    }
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    assert_eq!(log.txn_id_floor(), TxnId(101));
    let err =
        log.append_finished(LoggedTxn::new(TxnId(100), SessionId(2), 1), Outcome::Aborted, None).unwrap_err();
    assert!(matches!(err, LogError::Refused(_)), "{err}");
    assert_eq!(log.replay().unwrap().transactions.len(), 3);
}

#[test]
fn durability_reads_from_configuration_files_in_lowercase() {
    assert_eq!(serde_json::to_string(&Durability::Group).unwrap(), "\"group\"");
    assert_eq!(serde_json::from_str::<Durability>("\"none\"").unwrap(), Durability::None);
    assert!(serde_json::from_str::<Durability>("\"Strict\"").is_err());
}

#[test]
fn open_waits_out_a_lock_that_is_released_shortly() {
    // A lock held a moment longer (sled, for logs written before the segment store, releases its own only
    // when a background thread exits, a moment after a close): open must ride that out rather than fail.
    let dir = tempfile::tempdir().unwrap();
    let holder = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        holder.close().unwrap();
        drop(holder);
    });
    let log = DiskLog::open(dir.path(), Durability::Strict).expect("open waits for the lock to be released");
    release.join().unwrap();
    log.close().unwrap();
}

#[test]
fn opening_a_log_that_another_handle_holds_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let _held = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    let err = DiskLog::open(dir.path(), Durability::Strict).unwrap_err();
    assert!(matches!(err, history::log::LogError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("in use by another process"), "{err}");
}

#[test]
fn session_ended_is_tailed_in_order_and_ignored_by_replay() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Group).unwrap();
    let _ =
        log.append_finished(LoggedTxn::new(TxnId(1), SessionId(3), 0), Outcome::Committed, Some(1)).unwrap();
    let ended = log.append_session_ended(SessionId(3), Some(0)).unwrap();
    assert_eq!(ended.seq(), 1);
    let all = collect_tail(&log, 0);
    assert_eq!(all[1], (1, LogRecord::SessionEnded { session: SessionId(3), last_seq: Some(0) }));
    let history = log.replay().unwrap();
    assert_eq!(history.transactions.len(), 1);
    assert_eq!(history.transactions[0].id, TxnId(1));
    log.close().unwrap();
    // A reopened log scans it without taking it for a crash or a pending intent.
    drop(log);
    let log = DiskLog::open(dir.path(), Durability::Group).unwrap();
    assert!(collect_tail(&log, 0).iter().all(|(_, r)| !matches!(r, LogRecord::Recovery { .. })));
}

#[test]
fn isolation_records_label_the_sessions_later_transactions_until_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Group).unwrap();
    let finish = |id: u64, session: u64, seq: u64| {
        let txn = LoggedTxn::new(TxnId(id), SessionId(session), seq);
        let _ = log.append_finished(txn, Outcome::Committed, Some(id)).unwrap();
    };
    // Session 1 logs one transaction before any level is known, then changes level; session 2's level does
    // not leak into session 1, and a session's level ends with it.
    finish(1, 1, 0);
    let _ = log.append_isolation(SessionId(1), Some(IsolationLevel::RepeatableRead)).unwrap();
    let _ = log.append_isolation(SessionId(2), Some(IsolationLevel::Serializable)).unwrap();
    finish(2, 1, 1);
    finish(3, 2, 0);
    let _ = log.append_isolation(SessionId(1), Some(IsolationLevel::ReadCommitted)).unwrap();
    finish(4, 1, 2);
    // A level the proxy could not follow: session 1's next transaction has none, not the last one logged.
    let _ = log.append_isolation(SessionId(1), None).unwrap();
    finish(6, 1, 3);
    let _ = log.append_session_ended(SessionId(2), Some(0)).unwrap();
    let _ = log.append_intent(LoggedTxn::new(TxnId(5), SessionId(2), 1)).unwrap();
    let _ = log.append_outcome(TxnId(5), Outcome::Committed, Some(5)).unwrap();
    let history = log.replay().unwrap();
    let levels: Vec<(u64, Option<IsolationLevel>)> =
        history.transactions.iter().map(|t| (t.id.0, t.isolation)).collect();
    assert_eq!(
        levels,
        vec![
            (1, None),
            (2, Some(IsolationLevel::RepeatableRead)),
            (3, Some(IsolationLevel::Serializable)),
            (4, Some(IsolationLevel::ReadCommitted)),
            (6, None),
            (5, None),
        ]
    );
    log.close().unwrap();
}

#[test]
fn isolation_levels_parse_as_sql_and_settings_spell_them() {
    for (text, level) in [
        ("read committed", IsolationLevel::ReadCommitted),
        ("READ   UNCOMMITTED", IsolationLevel::ReadUncommitted),
        ("'repeatable read'", IsolationLevel::RepeatableRead),
        ("repeatable-read", IsolationLevel::RepeatableRead),
        ("Serializable", IsolationLevel::Serializable),
    ] {
        assert_eq!(IsolationLevel::parse_sql(text), Some(level), "{text}");
    }
    for bad in ["", "read", "committed read", "snapshot", "serializable read"] {
        assert_eq!(IsolationLevel::parse_sql(bad), None, "{bad}");
    }
}

#[test]
fn late_ops_join_their_pending_intent_through_the_log_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
    // An autocommit UPDATE: the intent goes out with the statement and no ops; its row comes after.
    let mut intent = LoggedTxn::new(TxnId(1), SessionId(1), 0);
    intent.statements = vec!["UPDATE accounts SET v = 1 WHERE k = 'a'".into()];
    let _ = log.append_intent(intent).unwrap();
    let late = vec![LoggedOp::Write { key: key("a"), write: WriteId(11), stmt: Some(0) }];
    let statements = vec!["UPDATE accounts SET v = 1 WHERE k = 'a'".to_owned(), "SELECT 1".to_owned()];
    let err = log.append_late_ops(TxnId(2), late.clone(), statements.clone()).unwrap_err();
    assert!(matches!(err, LogError::Refused(_)), "late ops need a pending intent: {err}");
    let _ = log.append_late_ops(TxnId(1), late, statements).unwrap();
    log.append_outcome(TxnId(1), Outcome::Committed, Some(9)).unwrap().wait().unwrap();
    let h = log.replay().unwrap();
    log.close().unwrap();
    assert_eq!(h.transactions.len(), 1);
    let t = &h.transactions[0];
    assert_eq!(t.outcome, Outcome::Committed);
    assert!(matches!(t.ops.as_slice(), [Op::Write { write: WriteId(11), stmt: Some(_), .. }]), "{:?}", t.ops);

    // Late ops with no pending intent contradict the log.
    let mut replayer = Replayer::new();
    let err = replayer
        .apply(0, LogRecord::LateOps { txn: TxnId(3), ops: Vec::new(), statements: Vec::new() })
        .unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { seq: 0, .. }), "{err}");
}

/// The log holds statement texts and values: its directory is its owner's alone (0700), and so are the files
/// the store makes in it (0600), even where the directory existed before with looser bits.
#[cfg(unix)]
#[test]
fn the_log_directory_and_its_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt;
    fn mode(p: &std::path::Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }
    fn check(dir: &std::path::Path) {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                check(&path);
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
            }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let fresh = tmp.path().join("fresh").join("log");
    let log = DiskLog::open(&fresh, Durability::Strict).unwrap();
    log.append_finished(rmw(1, 1, 0, "a", Observed::Absent, 1), Outcome::Committed, Some(5))
        .unwrap()
        .wait()
        .unwrap();
    log.close().unwrap();
    check(&fresh);
    // An existing directory, and files left 0644 by a run before this one, are narrowed at open.
    let old = tmp.path().join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    DiskLog::open(&old, Durability::Strict).unwrap().close().unwrap();
    std::fs::set_permissions(old.join("LOCK"), std::fs::Permissions::from_mode(0o644)).unwrap();
    DiskLog::open(&old, Durability::Strict).unwrap().close().unwrap();
    check(&old);
}

/// Under `strict`, the fsync a commit waits for is held back while another transaction's COMMIT is in
/// flight (its intent logged, its outcome not yet), so that one fsync covers both outcomes.
#[test]
fn a_commit_fsync_waits_for_commits_in_flight_and_covers_them_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = LogOptions::new(Durability::Strict);
    // Far longer than the test needs, so that it does not depend on the machine's speed.
    options.commit_delay = Duration::from_secs(20);
    let log = Arc::new(DiskLog::open_with(dir.path(), options).unwrap());
    let _ = log.append_intent(rmw(1, 1, 0, "a", Observed::PreHistory(0), 10)).unwrap();
    let _ = log.append_intent(rmw(2, 2, 0, "b", Observed::PreHistory(0), 20)).unwrap();
    let before = log.stats().fsyncs;
    let first = log.append_outcome(TxnId(1), Outcome::Committed, Some(1)).unwrap();
    let waiter = thread::spawn(move || first.wait());
    thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished(), "T2's COMMIT is in flight, so T1's fsync waits for its outcome");
    let started = Instant::now();
    log.append_outcome(TxnId(2), Outcome::Committed, Some(2)).unwrap().wait().unwrap();
    waiter.join().unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "T2's outcome ended the delay");
    assert_eq!(log.stats().fsyncs - before, 1, "one fsync covered both commits");
}

/// The delay is bounded: an intent whose outcome does not come (a long statement that may commit as it
/// runs) holds another commit's fsync back for at most `commit_delay`; with nothing in flight there is none.
#[test]
fn the_commit_delay_is_bounded_and_taken_only_with_commits_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = LogOptions::new(Durability::Strict);
    options.commit_delay = Duration::from_millis(300);
    let log = DiskLog::open_with(dir.path(), options).unwrap();
    let alone = Instant::now();
    log.append_finished(rmw(1, 1, 0, "a", Observed::PreHistory(0), 10), Outcome::Committed, None)
        .unwrap()
        .wait()
        .unwrap();
    assert!(
        alone.elapsed() < Duration::from_millis(250),
        "nothing in flight, no delay: {:?}",
        alone.elapsed()
    );
    let _ = log.append_intent(rmw(2, 2, 0, "b", Observed::PreHistory(0), 20)).unwrap();
    let held = Instant::now();
    log.append_finished(rmw(3, 3, 0, "c", Observed::PreHistory(0), 30), Outcome::Committed, None)
        .unwrap()
        .wait()
        .unwrap();
    let waited = held.elapsed();
    assert!(waited >= Duration::from_millis(250), "T2 in flight, the fsync waited for it: {waited:?}");
    assert!(waited < Duration::from_secs(10), "but not for ever: {waited:?}");
}

/// Under `group`, a record's ticket does not wait (the flusher fsyncs within its interval), but the ticket
/// `fsynced` gives waits until an fsync covers the record: what a fence's intent needs, since a crash that
/// lost a committed fence would stop garbage collection for good. Under `none` it does not wait.
#[test]
fn an_fsynced_ticket_waits_for_an_fsync_under_group_durability() {
    let dir = tempfile::tempdir().unwrap();
    let options =
        LogOptions { group_interval: Duration::from_secs(3600), ..LogOptions::new(Durability::Group) };
    let log = DiskLog::open_with(dir.path(), options).unwrap();
    let txn = |i| LoggedTxn::new(TxnId(i), SessionId(0), i);
    let ticket = log.append_intent(txn(0)).unwrap();
    let seq = ticket.seq();
    ticket.wait().unwrap();
    assert!(log.durable_below() <= seq, "a group ticket resolves before any fsync (the interval is an hour)");
    let ticket = log.append_intent(txn(1)).unwrap();
    let seq = ticket.seq();
    log.fsynced(ticket).wait().unwrap();
    assert!(log.durable_below() > seq, "the fsynced ticket resolved before an fsync covered its record");

    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path(), Durability::None).unwrap();
    let ticket = log.append_intent(txn(0)).unwrap();
    let seq = ticket.seq();
    log.fsynced(ticket).wait().unwrap();
    assert!(log.durable_below() <= seq, "under none nothing is fsynced on its own");
}
