//! Crash test for the durable log: a child process appends intents and outcomes and prints every
//! acknowledged one; the parent kills it with SIGKILL mid-stream, reopens the log, and checks that
//! nothing acknowledged is missing (strict), that the log opens cleanly, and that pending intents replay as
//! Indeterminate.
//!
//! The child is this same test binary, re-run with `KRAIT_LOG_CRASH_CHILD` set; that is why the test has
//! its own `main` (`harness = false` in Cargo.toml). A SIGKILL tests a process crash: the kernel keeps what
//! the store wrote, and loses what it still buffered in memory. It does not simulate a power loss.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use history::{
    DiskLog, Durability, HistoryLog, KeyName, LogRecord, LoggedOp, LoggedTxn, Observed, Outcome, SessionId,
    TxnId, WriteId,
};

const CHILD_ENV: &str = "KRAIT_LOG_CRASH_CHILD";
const THREADS: u64 = 4;

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    strict_crash_loses_nothing_acknowledged();
    group_crash_records_a_gap();
    println!("log_crash: 2 crash scenarios passed");
}

/// Every 7th transaction of a session stops after its intent, as if its COMMIT were still in flight.
fn is_left_pending(i: u64) -> bool {
    i % 7 == 3
}

fn txn(id: u64, session: u64, i: u64) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(session), i);
    let key = KeyName { namespace: "t".into(), bytes: format!("row{}", id % 50).into_bytes() };
    t.statements = vec![format!("UPDATE t SET v = v + 1 WHERE k = 'row{}' RETURNING xmin", id % 50)];
    t.ops = vec![
        LoggedOp::Read { key: key.clone(), observed: Observed::PreHistory(0), stmt: Some(0) },
        LoggedOp::Write { key, write: WriteId(id), stmt: Some(0) },
    ];
    t.start_ns = Some(id);
    t
}

/// The child: append forever from several sessions; print each acknowledgement after it is acknowledged.
fn child(spec: &str) {
    let (durability, dir) = spec.split_once(' ').expect("spec is '<durability> <dir>'");
    let durability: Durability = durability.parse().expect("durability");
    let log = Arc::new(DiskLog::open(dir, durability).expect("child opens the log"));
    let threads: Vec<_> = (0..THREADS)
        .map(|s| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for i in 0.. {
                    let id = s * 1_000_000 + i;
                    let intent = log.append_intent(txn(id, s, i)).expect("intent");
                    if is_left_pending(i) {
                        intent.wait().expect("intent durable");
                        println!("pending {id}");
                        continue;
                    }
                    let ticket =
                        log.append_outcome(TxnId(id), Outcome::Committed, Some(id)).expect("outcome");
                    let seq = ticket.seq();
                    ticket.wait().expect("outcome durable");
                    // Only now may the "client" see the commit.
                    println!("ack {id} {seq}");
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

struct Run {
    acked: BTreeMap<u64, u64>,
    pending: BTreeSet<u64>,
}

/// Runs the child until it has acknowledged `enough` commits, kills it with SIGKILL, and returns what it
/// printed (including lines already in the pipe when it died).
fn run_child_and_kill(dir: &Path, durability: Durability, enough: usize) -> Run {
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .env(CHILD_ENV, format!("{durability} {}", dir.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut run = Run { acked: BTreeMap::new(), pending: BTreeSet::new() };
    let note = |line: &str, run: &mut Run| {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["ack", id, seq] => {
                run.acked.insert(id.parse().unwrap(), seq.parse().unwrap());
            }
            ["pending", id] => {
                run.pending.insert(id.parse().unwrap());
            }
            _ => panic!("unexpected child output {line:?}"),
        }
    };
    while run.acked.len() < enough {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => note(&line, &mut run),
            Err(e) => {
                let _ = child.kill();
                panic!("the child stopped acknowledging after {} commits: {e}", run.acked.len());
            }
        }
    }
    // `Child::kill` sends SIGKILL on Unix: no destructor, no clean close, no final flush.
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap the child");
    assert!(!status.success(), "the child was killed, not finished: {status}");
    reader.join().expect("reader thread");
    for line in rx.try_iter() {
        note(&line, &mut run);
    }
    run
}

fn strict_crash_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = run_child_and_kill(dir.path(), Durability::Strict, 400);

    let log = DiskLog::open(dir.path(), Durability::Strict).expect("the log opens after SIGKILL");
    let records: Vec<(u64, LogRecord)> =
        log.tail(0).collect::<Result<_, _>>().expect("every record reads back intact");

    // Every acknowledged outcome is there, under the sequence number it was acknowledged with.
    let by_seq: BTreeMap<u64, &LogRecord> = records.iter().map(|(s, r)| (*s, r)).collect();
    for (&id, &seq) in &run.acked {
        match by_seq.get(&seq) {
            Some(LogRecord::Outcome { txn, outcome: Outcome::Committed, .. }) if *txn == TxnId(id) => {}
            other => panic!("acknowledged outcome of T{id} at seq {seq} is missing; found {other:?}"),
        }
    }

    // The crash point is marked, and lists every intent the child left pending.
    let Some((_, LogRecord::Recovery { indeterminate, gap, previous })) = records.last() else {
        panic!("no recovery record at the end of the log: {:?}", records.last());
    };
    assert!(!gap, "strict durability records no gap");
    assert_eq!(*previous, Some(Durability::Strict));
    let listed: BTreeSet<u64> = indeterminate.iter().map(|t| t.0).collect();
    assert!(run.pending.is_subset(&listed), "pending intents missing from the recovery record");

    let history = log.replay().expect("replay after a crash");
    let outcome: BTreeMap<u64, Outcome> = history.transactions.iter().map(|t| (t.id.0, t.outcome)).collect();
    for id in run.acked.keys() {
        assert_eq!(outcome.get(id), Some(&Outcome::Committed), "T{id}");
    }
    for id in &run.pending {
        assert_eq!(outcome.get(id), Some(&Outcome::Indeterminate), "T{id}");
    }
    assert!(history.transactions.iter().all(|t| t.outcome != Outcome::Aborted));
    assert!(history.gaps.is_empty());
    let max_id = run.acked.keys().chain(&run.pending).max().copied().unwrap_or(0);
    assert!(log.txn_id_floor().0 > max_id, "a restarted proxy must not reuse T{max_id}");
    log.close().expect("clean close");
    drop(log);

    // Recovery happened once: the next open finds a clean log and appends nothing.
    let again = DiskLog::open(dir.path(), Durability::Strict).expect("reopen");
    assert_eq!(again.next_seq(), records.len() as u64);
    let (indeterminate, unlisted) = (listed.len(), listed.len() - run.pending.len());
    println!(
        "strict: {} acknowledged commits all present after SIGKILL; {} records; {indeterminate} indeterminate \
         ({unlisted} were in flight when killed)",
        run.acked.len(),
        records.len(),
    );
    let _ = std::io::stdout().flush();
}

fn group_crash_records_a_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = run_child_and_kill(dir.path(), Durability::Group, 3_000);

    let log = DiskLog::open(dir.path(), Durability::Group).expect("the log opens after SIGKILL");
    let history = log.replay().expect("replay after a crash");
    assert_eq!(history.gaps.len(), 1, "a crash under group durability leaves exactly one gap");
    assert_eq!(
        history.gaps[0].after_txns,
        history.transactions.len() as u64,
        "the gap is at the crash point"
    );
    let committed: BTreeSet<u64> =
        history.transactions.iter().filter(|t| t.outcome == Outcome::Committed).map(|t| t.id.0).collect();
    let lost = run.acked.keys().filter(|id| !committed.contains(id)).count();
    println!("group: {lost} of {} acknowledged commits lost to SIGKILL; gap recorded", run.acked.len());
}
