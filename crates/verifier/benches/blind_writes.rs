//! `cargo bench -p verifier --bench blind_writes`: blind writes of one key, no reads, round-robin over some
//! sessions (the shape of the out-of-memory report: one chain per write, Cobra §3.1). For each (sessions,
//! transactions): the verdict, the time, the chains, and the constraints before and after pruning. With one
//! session only neighbours get a constraint (`constraints.rs`); across sessions every pair still does, so
//! keep those sizes small. Nothing is asserted.
//!
//! Arguments: optional `SESSIONSxTRANSACTIONS` pairs (default `1x10000 1x100000 4x500 24x500 24x1000`).

use std::time::Instant;

use history::{CollectorId, History, KeyName, Op, Outcome, SessionId, Transaction, TxnId, WriteId};
use verifier::{Options, verify};

/// `n` blind writes of the key `x`, transaction `i` in session `i mod sessions`.
fn blind_writes(sessions: u64, n: u64) -> History {
    let mut h = History::default();
    let key = h.keys.intern(KeyName { namespace: String::new(), bytes: b"x".to_vec() });
    h.transactions = (0..n)
        .map(|i| {
            let mut t = Transaction::new(TxnId(i + 1), SessionId(i % sessions), i / sessions);
            t.outcome = Outcome::Committed;
            t.collector = CollectorId(0);
            t.ops.push(Op::Write { key, write: WriteId(i + 1), stmt: None });
            t
        })
        .collect();
    h
}

fn main() {
    let mut shapes: Vec<(u64, u64)> = std::env::args()
        .skip(1)
        .filter_map(|a| a.split_once('x').and_then(|(s, n)| Some((s.parse().ok()?, n.parse().ok()?))))
        .collect();
    if shapes.is_empty() {
        shapes = vec![(1, 10_000), (1, 100_000), (4, 500), (24, 500), (24, 1_000)];
    }
    println!("| sessions | transactions | verdict | ms | chains | constraints | after pruning |");
    println!("|---:|---:|---|---:|---:|---:|---:|");
    for (sessions, n) in shapes {
        let h = blind_writes(sessions.max(1), n);
        let start = Instant::now();
        let r = verify(&h, &Options::default()).expect("verification");
        let c = &r.counts;
        println!(
            "| {sessions} | {n} | {:?} | {:.0} | {} | {} | {} |",
            r.verdict,
            start.elapsed().as_secs_f64() * 1e3,
            c.chains,
            c.constraints_before_prune,
            c.constraints_after_prune
        );
    }
}
