//! What a proxy's history log costs in bytes, against the native encoding of the history it replays to
//! (issue 16, item 5): `cargo run --release -p history --example log_cost -- LOG_DIR`.
//!
//! Prints the record bytes (header and payload, as stored: what the proxy appended) per record kind, the
//! part of transaction records spent on statement texts, the log directory's size on disk, and the native
//! encoding of the replayed history, each per 1k transactions; and what recorded values (issue 18) take of
//! the transaction records, before compression, with how many rows cite an earlier record's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use history::log::{CompactOp, LogReader, LogRecord};
use history::{HistoryLog, codec::native};

fn kind(record: &LogRecord) -> &'static str {
    match record {
        LogRecord::Intent(_) => "Intent",
        LogRecord::Outcome { .. } => "Outcome",
        LogRecord::Finished { .. } => "Finished",
        LogRecord::Recovery { .. } => "Recovery",
        LogRecord::SessionEnded { .. } => "SessionEnded",
        LogRecord::LateOps { .. } => "LateOps",
        LogRecord::Horizon { .. } => "Horizon",
        LogRecord::HorizonSnapshot(_) => "HorizonSnapshot",
        LogRecord::DiscoveredWrite { .. } => "DiscoveredWrite",
        LogRecord::Xids { .. } => "Xids",
        LogRecord::Resolved { .. } => "Resolved",
        LogRecord::Isolation { .. } => "Isolation",
        LogRecord::IsolationUnknown { .. } => "IsolationUnknown",
        LogRecord::Statement { .. } => "Statement",
        LogRecord::Namespace { .. } => "Namespace",
        LogRecord::CompactIntent(_) => "CompactIntent",
        LogRecord::CompactFinished { .. } => "CompactFinished",
        LogRecord::CompactLateOps { .. } => "CompactLateOps",
        LogRecord::RowsForgotten => "RowsForgotten",
        LogRecord::TextsForgotten => "TextsForgotten",
        LogRecord::Columns { .. } => "Columns",
        LogRecord::SessionsOpen { .. } => "SessionsOpen",
    }
}

/// Bytes of the statement texts a record carries inline (with their length prefixes, roughly).
fn inline_text_bytes(record: &LogRecord) -> usize {
    let texts: &[String] = match record {
        LogRecord::Intent(txn) | LogRecord::Finished { txn, .. } => &txn.statements,
        LogRecord::LateOps { statements, .. } => statements,
        _ => &[],
    };
    texts.iter().map(|t| t.len() + 1).sum()
}

/// The plain (uncompressed) bytes of a record's value ops (runs and rows), and how many of its rows cite
/// an earlier record's.
fn value_bytes(record: &LogRecord) -> (u64, u64) {
    let ops = match record {
        LogRecord::CompactIntent(txn) | LogRecord::CompactFinished { txn, .. } => &txn.ops.ops,
        LogRecord::CompactLateOps { ops, .. } => &ops.ops,
        _ => return (0, 0),
    };
    let (mut bytes, mut cited) = (0, 0);
    for op in ops {
        match op {
            CompactOp::Read { .. }
            | CompactOp::Write { .. }
            | CompactOp::Opaque { .. }
            | CompactOp::ReadOfParams { .. }
            | CompactOp::WriteOfParams { .. } => continue,
            CompactOp::CitedRow { .. } => cited += 1,
            CompactOp::Run { .. }
            | CompactOp::RunCitingColumns { .. }
            | CompactOp::Row { .. }
            | CompactOp::PackedRow { .. }
            | CompactOp::PackedRun { .. }
            | CompactOp::RowOfParams { .. } => {}
        }
        bytes += postcard::to_allocvec(op).map_or(0, |b| b.len() as u64);
    }
    (bytes, cited)
}

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: log_cost LOG_DIR");
        return ExitCode::from(2);
    };
    let disk = history::log::disk_bytes(&dir);
    let reader = match LogReader::open(&dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("log_cost: {e}");
            return ExitCode::from(2);
        }
    };
    let mut by_kind: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let (mut total, mut texts, mut values, mut cited) = (0u64, 0u64, 0u64, 0u64);
    for item in reader.log().tail(0) {
        let record = match item {
            Ok((_, r)) => r,
            Err(e) => {
                eprintln!("log_cost: {e}");
                return ExitCode::from(2);
            }
        };
        let bytes = record.encode().map(|b| b.len() as u64).unwrap_or(0);
        let entry = by_kind.entry(kind(&record)).or_default();
        entry.0 += 1;
        entry.1 += bytes;
        total += bytes;
        texts += inline_text_bytes(&record) as u64;
        let (v, c) = value_bytes(&record);
        values += v;
        cited += c;
    }
    let history = match reader.log().replay() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("log_cost: {e}");
            return ExitCode::from(2);
        }
    };
    let native_bytes = native::encode(&history).map(|b| b.len() as u64).unwrap_or(0);
    let _ = reader.close();
    let txns = history.transactions.len().max(1) as f64;
    let per_1k = |b: u64| b as f64 / txns; // bytes per txn = KB per 1k txns
    println!(
        "transactions {}  statements {}  keys {}",
        history.transactions.len(),
        history.statements.len(),
        history.keys.len()
    );
    println!("{:<16} {:>9} {:>12} {:>12}", "record", "count", "bytes", "KB/1k txns");
    for (k, (count, bytes)) in &by_kind {
        println!("{k:<16} {count:>9} {bytes:>12} {:>12.1}", per_1k(*bytes));
    }
    println!("{:<16} {:>9} {total:>12} {:>12.1}", "all records", "", per_1k(total));
    println!("{:<16} {:>9} {texts:>12} {:>12.1}", "  inline texts", "", per_1k(texts));
    println!("{:<16} {cited:>9} {values:>12} {:>12.1}", "  values, plain", per_1k(values));
    println!("{:<16} {:>9} {disk:>12} {:>12.1}", "log dir on disk", "", per_1k(disk));
    println!("{:<16} {:>9} {native_bytes:>12} {:>12.1}", "native history", "", per_1k(native_bytes));
    println!(
        "records / native {:.2}   disk / native {:.2}",
        total as f64 / native_bytes.max(1) as f64,
        disk as f64 / native_bytes.max(1) as f64
    );
    ExitCode::SUCCESS
}
