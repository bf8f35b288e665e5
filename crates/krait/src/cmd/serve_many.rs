//! `krait serve --verify-only --source nats://…`: one verifier for the proxies at many edges (DESIGN.md §4).
//!
//! The proxies ship their logs to NATS JetStream (`[ship]`); this reads every collector's subject
//! ([`ship::Source`]), merges the collectors into one history ([`history::log::merge::Merger`]: ids
//! qualified by collector, reads of another proxy's writes joined to them, each transaction held until
//! every proxy has shipped what it recorded up to then) and verifies it online, in rounds, as `krait serve`
//! does ([`verifier::online::Feeder`]). Reject reports go into `DATA_DIR/reports/`. The status line says
//! which collector holds the others back when one falls silent.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Context;
use history::CollectorId;
use history::log::merge::{CollectorStatus, Merger};
use ship::Incoming;
use verifier::online::{Feeder, POLL};
use verifier::{ReportStore, RoundOptions};

use crate::cmd::serve::{ServeArgs, chosen_level};

/// The most messages one pass takes before it releases and verifies.
const MAX_MESSAGES_PER_PASS: usize = 20_000;

/// Runs the verifier until Ctrl-C or SIGTERM. Exit 0 after a clean stop, 2 if reading or verifying failed.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let url = args.source.clone().context("--verify-only needs --source nats://host:port")?;
    let config = match &args.config {
        Some(path) => Some(crate::cmd::proxy::load_config(path)?),
        None => None,
    };
    let level = chosen_level(&args, config.as_ref())?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| ".".into());
    let store = ReportStore::open(&data_dir)
        .with_context(|| format!("cannot open the reports directory in {}", data_dir.display()))?;
    let reports_dir = store.dir().to_path_buf();
    let interval = Duration::from_millis(args.round_interval_ms.max(1));
    let mut options = RoundOptions::online(args.round_size.max(1), interval);
    options.verify.level = level;
    options.verify.clock_drift_ms = args.drift_ms;
    let collectors: Vec<CollectorId> = args.collectors.iter().copied().map(CollectorId).collect();
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let (source, messages) =
        runtime.block_on(async { ship::Source::spawn(url.clone(), args.stream.clone(), &collectors) });
    eprintln!(
        "krait serve: verifying the logs shipped to {url} (stream {}), {}; reject reports in {}",
        args.stream,
        match collectors.is_empty() {
            true => "every collector that ships".to_owned(),
            false => format!("collectors {}", list(&collectors)),
        },
        reports_dir.display()
    );
    eprintln!("krait serve: the verifier checks {}", level.name());
    let stop = Arc::new(AtomicBool::new(false));
    let verifier = {
        let stop = stop.clone();
        let merger = Merger::new(&collectors, args.drift_ms.saturating_mul(1_000_000));
        let status_every = Duration::from_secs(args.status_every.max(1));
        std::thread::Builder::new()
            .name("krait-verifier".into())
            .spawn(move || verify(messages, merger, Feeder::new(options, Some(store)), &stop, status_every))
            .context("cannot start the verifier thread")?
    };
    runtime.block_on(crate::cmd::proxy::shutdown_signal());
    eprintln!("krait serve: shutting down");
    stop.store(true, Ordering::Relaxed);
    source.stop();
    let line = verifier.join().map_err(|_| anyhow::anyhow!("the verifier thread panicked"))??;
    eprintln!("krait serve: stopped; verifier: {line}");
    Ok(ExitCode::SUCCESS)
}

/// The verifier thread: messages into the merger, released events into the feeder, rounds, status lines.
/// Returns the last status line.
fn verify(
    messages: Receiver<ship::source::Delivery>,
    mut merger: Merger,
    mut feeder: Feeder,
    stop: &AtomicBool,
    status_every: Duration,
) -> anyhow::Result<String> {
    let mut last_status = Instant::now();
    let mut warned_horizons = false;
    while !stop.load(Ordering::Relaxed) {
        let first = match messages.recv_timeout(POLL) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        for delivery in first.into_iter().chain(messages.try_iter().take(MAX_MESSAGES_PER_PASS)) {
            match delivery.context("a shipped log cannot be read")? {
                Incoming::Record { collector, seq, record } => merger.record(collector, seq, record)?,
                Incoming::Heartbeat { collector, beat } => merger.heartbeat(collector, beat),
            }
        }
        let events = merger.release()?;
        feeder.feed_events(events, merger.keys(), merger.statements())?;
        feeder.poll()?;
        for (id, line) in feeder.new_rejects() {
            match id {
                Some(id) => eprintln!("krait serve: {line} (report {id})"),
                None => eprintln!("krait serve: {line}"),
            }
        }
        if !warned_horizons && merger.horizons_differ() {
            warned_horizons = true;
            eprintln!(
                "krait serve: the proxies began recording at different points of the database's history; a \
                 version that no proxy recorded, written between those points, is pre-history to the later \
                 ones (start every proxy before traffic flows)"
            );
        }
        if last_status.elapsed() >= status_every {
            last_status = Instant::now();
            eprintln!("krait serve: verifier: {}", status_line(&mut feeder, &merger));
        }
    }
    feeder.finish()?;
    for (id, line) in feeder.new_rejects() {
        eprintln!("krait serve: {line}{}", id.map(|id| format!(" (report {id})")).unwrap_or_default());
    }
    let held: usize = merger.holding().iter().map(|c| c.held).sum();
    if held > 0 {
        eprintln!(
            "krait serve: {held} events were left unverified, waiting for other proxies' records; they are in \
             the stream, and the next run verifies them"
        );
    }
    Ok(status_line(&mut feeder, &merger))
}

/// The verifier's state and each collector's, in one line.
fn status_line(feeder: &mut Feeder, merger: &Merger) -> String {
    let status = feeder.status();
    format!(
        "{}; {} client transactions committed, {} indeterminate; {}",
        status.line(),
        status.committed,
        status.indeterminate,
        holding(&merger.holding())
    )
}

/// Where each collector stands, for a status line.
fn holding(collectors: &[CollectorStatus]) -> String {
    if collectors.is_empty() {
        return "no collector has shipped yet".into();
    }
    collectors
        .iter()
        .map(|c| match c.complete_before_ns {
            Some(_) => format!("collector {}: {} records, {} held", c.collector.0, c.records, c.held),
            None => format!("collector {}: no heartbeat yet (holds the others back)", c.collector.0),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(collectors: &[CollectorId]) -> String {
    collectors.iter().map(|c| c.0.to_string()).collect::<Vec<_>>().join(", ")
}
