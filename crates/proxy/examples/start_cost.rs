//! What a proxy's start costs as its log grows (issue 19, item 5): seeding the version book by replaying
//! the whole log, against seeding it from the checkpoint the previous start stored and the records after
//! it. Prints one line per log size; figures, not assertions.
//!
//! `cargo run --release -p proxy --example start_cost [TRANSACTIONS_PER_RUN] [RUNS]`

use std::time::Instant;

use history::log::{DiskLog, Durability, HistoryLog, LoggedOp, LoggedTxn};
use history::{KeyName, Observed, Outcome, SessionId, TxnId, WriteId};
use proxy::interpret::versions::{VersionBook, seed};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let per_run: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20_000);
    let runs: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let dir = tempfile::tempdir()?;
    println!(
        "| transactions in the log | whole-log replay (ms) | checkpoint + last run (ms) | records read |"
    );
    println!("|---:|---:|---:|---:|");
    for run in 0..runs {
        let log = DiskLog::open(dir.path(), Durability::None)?;
        // This start, as the proxy makes it: from the checkpoint the previous start stored.
        let started = Instant::now();
        let (_, seeded) = seed::seed(&VersionBook::new(), &log)?;
        let from_checkpoint = started.elapsed();
        // The same log replayed whole, as every start did before checkpoints.
        let started = Instant::now();
        let (h, _) = history::log::replay::replay_keeping_xids(log.tail(0))?;
        VersionBook::new().seed_from(&h);
        let whole = started.elapsed();
        if run > 0 {
            println!(
                "| {} | {:.0} | {:.0} | {} of {} |",
                log.txn_id_floor().0,
                whole.as_secs_f64() * 1e3,
                from_checkpoint.as_secs_f64() * 1e3,
                seeded.records_replayed,
                log.next_seq()
            );
        }
        let base = log.txn_id_floor().0;
        for i in 0..per_run {
            let id = TxnId(base + i);
            let mut txn = LoggedTxn::new(id, SessionId(1 + run), i);
            let key = KeyName { namespace: "accounts".into(), bytes: (i % 10_000).to_string().into_bytes() };
            txn.ops.push(LoggedOp::Read { key: key.clone(), observed: Observed::PreHistory(1), stmt: None });
            txn.ops.push(LoggedOp::Write {
                key,
                write: WriteId(id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                stmt: None,
            });
            let _ = log.append_finished(txn, Outcome::Committed, Some(id.0))?;
            let xid = id.0 as u32;
            let _ = log.append_xids(id, Some(xid), vec![xid])?;
        }
        let _ = log.append_session_ended(SessionId(1 + run), Some(per_run - 1))?;
        log.close()?;
    }
    Ok(())
}
