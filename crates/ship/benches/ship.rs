//! Shipping throughput and the verifier's capacity fed by three proxies, through a real NATS server.
//!
//! `cargo bench -p ship --bench ship` (`KRAIT_BENCH_TXNS` transactions per collector, 30,000 by default).
//! It needs Debian's `nats-server` (`scripts/test` installs it) and starts one with JetStream on a
//! temporary store. Three logs, as three proxies would write them (collectors 1–3, 4 sessions each, every
//! transaction reading one of 2,000 keys of its own collector and writing it), are filled first; then:
//!
//! 1. **shipping**: three shippers publish them to JetStream at once; it prints records per second, from
//!    the shippers' start until the last record is acknowledged;
//! 2. **verifying**: one reader of the stream, the merger and the online verifier (rounds of 10,000,
//!    serializability) take everything; it prints transactions verified per second.
//!
//! Nothing is asserted: the figures depend on the machine. What shipping costs a commit is the proxy
//! bench's "shipping to NATS" row, side by side with the same path without it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use history::log::merge::Merger;
use history::{
    CollectorId, DiskLog, Durability, HistoryLog, KeyName, LoggedOp, LoggedTxn, Observed, Outcome, SessionId,
    TxnId, WriteId,
};
use ship::local::LocalNats;
use ship::{Counters, Incoming, ShipConfig, Shipper, Source, StreamStart};
use verifier::RoundOptions;
use verifier::online::Feeder;

const SESSIONS: u64 = 4;
const KEYS: u64 = 2_000;

/// A log of `txns` read-modify-write transactions of collector `c`, serializable by construction.
fn fill(dir: &Path, c: u32, txns: u64) -> Result<Arc<DiskLog>, String> {
    let log = DiskLog::open(dir, Durability::None).map_err(|e| e.to_string())?;
    let mut last: Vec<Option<WriteId>> = vec![None; KEYS as usize];
    for i in 0..txns {
        let id = i + 1;
        let mut txn = LoggedTxn::new(TxnId(id), SessionId(i % SESSIONS + 1), i / SESSIONS);
        let k = (i.wrapping_mul(2_654_435_761) >> 7) % KEYS;
        let key = KeyName { namespace: format!("c{c}"), bytes: k.to_string().into_bytes() };
        let observed = last[k as usize].map_or(Observed::Absent, Observed::Version);
        let write = WriteId(u64::from(c) << 40 | id);
        txn.ops.push(LoggedOp::Read { key: key.clone(), observed, stmt: None });
        txn.ops.push(LoggedOp::Write { key, write, stmt: None });
        last[k as usize] = Some(write);
        // Under `none` nothing is waited for; the sync below makes the log whole.
        let _ticket = log.append_finished(txn, Outcome::Committed, Some(id)).map_err(|e| e.to_string())?;
    }
    log.sync().map_err(|e| e.to_string())?;
    Ok(Arc::new(log))
}

fn main() {
    let txns: u64 = std::env::var("KRAIT_BENCH_TXNS").ok().and_then(|s| s.parse().ok()).unwrap_or(30_000);
    let tmp = tempfile::tempdir().expect("a temp dir");
    let nats = match LocalNats::start(tmp.path()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("bench ship: {e}");
            std::process::exit(1);
        }
    };
    let url = nats.url();
    let logs: Vec<(CollectorId, Arc<DiskLog>)> = (1..=3)
        .map(|c| {
            let log = fill(&tmp.path().join(format!("log{c}")), c, txns).expect("fills a log");
            (CollectorId(c), log)
        })
        .collect();
    let records: u64 = logs.iter().map(|(_, l)| l.next_seq()).sum();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    println!("three collectors, {txns} transactions each ({records} log records in all), NATS at {url}");

    // 1. Shipping.
    let started = Instant::now();
    let shippers: Vec<Shipper> = runtime.block_on(async {
        logs.iter()
            .map(|(c, log)| {
                let config = ShipConfig { nats: url.clone(), stream: ship::DEFAULT_STREAM.to_owned() };
                Shipper::spawn(log.clone() as Arc<dyn HistoryLog>, *c, config)
            })
            .collect()
    });
    let deadline = Instant::now() + Duration::from_secs(600);
    while shippers
        .iter()
        .zip(&logs)
        .any(|(s, (_, l))| Counters::get(&s.counters().shipped_below) < l.next_seq())
    {
        if Instant::now() > deadline {
            eprintln!("bench ship: shipping did not finish in 10 minutes");
            drop(nats);
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let shipping = started.elapsed();
    println!(
        "shipping   {:>10.0} records/s   ({records} records in {:.2} s, three shippers at once)",
        records as f64 / shipping.as_secs_f64(),
        shipping.as_secs_f64()
    );

    // 2. Verifying what three collectors shipped.
    let started = Instant::now();
    let (source, mut messages) = runtime.block_on(async {
        Source::spawn(url.clone(), ship::DEFAULT_STREAM.into(), &[], StreamStart::default())
    });
    let collectors: Vec<CollectorId> = logs.iter().map(|(c, _)| *c).collect();
    let mut merger = Merger::new(&collectors, history::ClockBounds::uniform(0));
    let mut options = RoundOptions::online(10_000, Duration::from_secs(1));
    options.verify.level = verifier::Level::Serializable;
    let mut feeder = Feeder::new(options, None);
    let total = txns * 3;
    let deadline = Instant::now() + Duration::from_secs(600);
    while feeder.status().verified < total && Instant::now() < deadline {
        let first = messages.recv_timeout(Duration::from_millis(50)).expect("the reader runs");
        let more: Vec<_> = std::iter::from_fn(|| messages.try_recv()).collect();
        for delivery in first.into_iter().chain(more) {
            match delivery.expect("a readable message").incoming {
                Incoming::Record { collector, seq, record } => {
                    merger.record(collector, seq, record).expect("merges")
                }
                Incoming::Heartbeat { collector, beat } => merger.heartbeat(collector, beat),
            }
        }
        let events = merger.release().expect("releases");
        feeder.feed_events(events, &merger).expect("feeds");
        feeder.poll().expect("verifies");
    }
    let verifying = started.elapsed();
    let status = feeder.status();
    println!(
        "verifying  {:>10.0} txn/s       ({} of {total} transactions verified in {:.2} s, {} rounds, {} rejects, \
         {} live after collection)",
        status.verified as f64 / verifying.as_secs_f64(),
        status.verified,
        verifying.as_secs_f64(),
        status.rounds,
        status.rejects,
        status.live
    );
    source.stop();
    runtime.block_on(async {
        for s in shippers {
            s.finish(Duration::from_secs(1)).await;
        }
    });
    drop(nats);
}
