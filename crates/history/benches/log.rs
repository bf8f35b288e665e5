//! Durable log throughput: commits (intent + outcome, waiting as the durability setting requires) per
//! second for each durability setting and number of concurrent sessions, with the fsyncs group commit
//! needed; then what recorded values (issue 18) cost an append, without and with values side by side in
//! one run (durability `none`, one session: the encoding's CPU, not the disk's); then how long opening a
//! closed log takes as it grows (open walks every segment's frames to find the end and build the seek
//! index; the files are in the page cache, as after a restart on the same machine, so this is the CPU and
//! memory side of it, not the disk's). Prints three tables; asserts nothing.
//!
//! `cargo bench -p history --bench log` (set `KRAIT_BENCH_COMMITS` to change the commits per session).

use std::sync::Arc;
use std::time::Instant;

use history::values::Value;
use history::{
    DiskLog, Durability, HistoryLog, KeyName, LoggedOp, LoggedTxn, Observed, Outcome, SessionId, TxnId,
    WriteId,
};

fn txn(id: u64, session: u64, i: u64) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(session), i);
    let key = KeyName { namespace: "accounts".into(), bytes: (id % 1_000).to_be_bytes().to_vec() };
    t.statements = vec!["UPDATE accounts SET balance = balance + $1 WHERE id = $2 RETURNING xmin".into()];
    t.ops = vec![
        LoggedOp::Read {
            key: key.clone(),
            observed: Observed::Version(WriteId(id.saturating_sub(1))),
            stmt: Some(0),
        },
        LoggedOp::Write { key, write: WriteId(id), stmt: Some(0) },
    ];
    t.start_ns = Some(id);
    t
}

/// A C-Twitter-like read-only transaction: four reads of tweets by key, each with its run (parameters and
/// columns) and its row (a 140-byte body) when `values` is set; one read in four sees a tweet seen before.
fn reading(id: u64, values: bool) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(id % 24), id);
    t.statements = vec!["SELECT t_uid, t_seq, body FROM tweets WHERE t_uid = $1 AND t_seq = $2".into()];
    for r in 0..4u64 {
        let tweet = if r == 0 { id / 4 } else { id * 4 + r };
        let key = KeyName { namespace: "tweets".into(), bytes: tweet.to_be_bytes().to_vec() };
        let (uid, seq) = ((tweet % 1000).to_string(), (tweet / 1000).to_string());
        if values {
            let params = vec![Value::Text(uid.clone()), Value::Text(seq.clone())];
            let columns = vec!["t_uid".into(), "t_seq".into(), "body".into()];
            t.ops.push(LoggedOp::Run { stmt: Some(0), params, columns });
        }
        t.ops.push(LoggedOp::Read { key, observed: Observed::PreHistory(tweet), stmt: Some(0) });
        if values {
            let words = ["chain", "epoch", "serial", "fence", "order", "krait", "graph", "cobra"];
            let body: Vec<&str> = (0..24).map(|w| words[((tweet >> (w % 16)) as usize + w) % 8]).collect();
            let row = vec![Value::Text(uid), Value::Text(seq), Value::Text(body.join(" "))];
            t.ops.push(LoggedOp::Row { ops: 1, values: row });
        }
    }
    t.start_ns = Some(id);
    t
}

/// Appends `count` finished reading transactions to a fresh log: (appends per second, bytes on disk per
/// transaction after closing).
fn append_readings(count: u64, values: bool) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = DiskLog::open(dir.path(), Durability::None).expect("open");
    let started = Instant::now();
    for id in 1..=count {
        drop(log.append_finished(reading(id, values), Outcome::Committed, Some(id)).expect("append"));
    }
    let took = started.elapsed();
    log.close().expect("close");
    let bytes = history::log::disk_bytes(dir.path());
    (count as f64 / took.as_secs_f64(), bytes as f64 / count as f64)
}

fn values_table(count: u64) {
    println!();
    println!("{:<10} {:>9} {:>12} {:>14}", "values", "txns", "appends/s", "disk bytes/txn");
    // Alternated, twice each, so that a noisy neighbour weighs on both.
    for values in [false, true, false, true] {
        let (rate, bytes) = append_readings(count, values);
        println!("{:<10} {count:>9} {rate:>12.0} {bytes:>14.0}", if values { "on" } else { "off" });
    }
}

/// Opening a closed log of `count` reading transactions (values on): (seconds, bytes on disk).
fn reopen(count: u64) -> (f64, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = DiskLog::open(dir.path(), Durability::None).expect("open");
    for id in 1..=count {
        drop(log.append_finished(reading(id, true), Outcome::Committed, Some(id)).expect("append"));
    }
    log.close().expect("close");
    drop(log);
    let bytes = history::log::disk_bytes(dir.path());
    let started = Instant::now();
    let log = DiskLog::open(dir.path(), Durability::None).expect("reopen");
    let took = started.elapsed().as_secs_f64();
    assert!(log.next_seq() >= count, "every record is found again");
    (took, bytes)
}

fn reopen_table() {
    println!();
    println!("{:>9} {:>10} {:>10} {:>12}", "txns", "MB", "open ms", "MB/s");
    for count in [100_000u64, 300_000, 1_000_000] {
        let (took, bytes) = reopen(count);
        let mb = bytes as f64 / 1e6;
        println!("{count:>9} {mb:>10.1} {:>10.1} {:>12.0}", took * 1e3, mb / took);
    }
}

fn main() {
    let per_session: u64 =
        std::env::var("KRAIT_BENCH_COMMITS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    println!(
        "{:<8} {:>8} {:>9} {:>12} {:>8} {:>14} {:>14} {:>12}",
        "durab.",
        "sessions",
        "commits",
        "commits/s",
        "fsyncs",
        "commits/fsync",
        "fsync mean µs",
        "fsync max µs"
    );
    for durability in [Durability::Strict, Durability::Group, Durability::None] {
        for sessions in [1u64, 4, 16] {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = Arc::new(DiskLog::open(dir.path(), durability).expect("open"));
            let started = Instant::now();
            let threads: Vec<_> = (0..sessions)
                .map(|s| {
                    let log = Arc::clone(&log);
                    std::thread::spawn(move || {
                        for i in 0..per_session {
                            let id = s * 10_000_000 + i;
                            let _ = log.append_intent(txn(id, s, i)).expect("intent");
                            let ticket =
                                log.append_outcome(TxnId(id), Outcome::Committed, Some(id)).expect("outcome");
                            ticket.wait().expect("durable");
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("session thread");
            }
            let took = started.elapsed();
            let stats = log.stats();
            let commits = sessions * per_session;
            let per_fsync = if stats.fsyncs == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", commits as f64 / stats.fsyncs as f64)
            };
            println!(
                "{:<8} {:>8} {:>9} {:>12.0} {:>8} {:>14} {:>14.1} {:>12.1}",
                durability.as_str(),
                sessions,
                commits,
                commits as f64 / took.as_secs_f64(),
                stats.fsyncs,
                per_fsync,
                stats.fsync_ns_mean() as f64 / 1e3,
                stats.fsync_ns_max as f64 / 1e3,
            );
            log.close().expect("close");
        }
    }
    values_table(per_session * 40);
    reopen_table();
}
