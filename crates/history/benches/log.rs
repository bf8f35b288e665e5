//! Durable log throughput: commits (intent + outcome, waiting as the durability setting requires) per
//! second for each durability setting and number of concurrent sessions, with the fsyncs group commit
//! needed. Prints a table; asserts nothing.
//!
//! `cargo bench -p history --bench log` (set `KRAIT_BENCH_COMMITS` to change the commits per session).

use std::sync::Arc;
use std::time::Instant;

use history::{
    Durability, HistoryLog, KeyName, LoggedOp, LoggedTxn, Observed, Outcome, SessionId, SledLog, TxnId,
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
            let log = Arc::new(SledLog::open(dir.path(), durability).expect("open"));
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
}
