//! `krait serve --verify-only --source nats://…`: one verifier for the proxies at many edges (DESIGN.md §4).
//!
//! The proxies ship their logs to NATS JetStream (`[ship]`); this reads every collector's subject
//! ([`ship::Source`]), merges the collectors into one history ([`history::log::merge::Merger`]: ids
//! qualified by collector, reads of another proxy's writes joined to them, each transaction held until
//! every proxy has shipped what it recorded up to then) and verifies it online, in rounds, as `krait serve`
//! does ([`verifier::online::Feeder`]). Reject reports go into `DATA_DIR/reports/`, and the verifier's
//! checkpoint into `DATA_DIR/verifier.checkpoint` ([`verifier::online::edges`]), from which a restart
//! resumes. The status line says which collector holds the others back when one falls silent.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use history::log::merge::{CollectorStatus, Merger};
use history::{CollectorId, now_ns};
use ship::Incoming;
use verifier::online::edges::{EdgesCheckpoint, StreamPosition};
use verifier::online::{CheckpointSchedule, Feeder, POLL};
use verifier::{ReportStore, RoundOptions};

use crate::cmd::serve::{ServeArgs, chosen_level};

/// The most messages one pass takes before it releases and verifies.
const MAX_MESSAGES_PER_PASS: usize = 20_000;
/// How often the verifier thread publishes its state for `/api/status`.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

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
    options.verify.clock_errors_ms = crate::cmd::clocks::clock_errors(&args.clock_error_ms);
    let collectors: Vec<CollectorId> = args.collectors.iter().copied().map(CollectorId).collect();
    let checkpoint = EdgesCheckpoint::new(&data_dir, &args.stream, &collectors);
    let resumed = checkpoint.resume(options, Some(store));
    let start = ship::StreamStart {
        generation: resumed.at.as_ref().map(|at| at.generation.clone()),
        next: resumed.at.as_ref().map_or(1, |at| at.next_message),
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let (source, messages) =
        runtime.block_on(async { ship::Source::spawn(url.clone(), args.stream.clone(), &collectors, start) });
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
    eprintln!("krait serve: the verifier {}", resumed.started.line());
    let status = Arc::new(Mutex::new(serde_json::Value::Null));
    // The status server runs until this is dropped, when the command returns.
    let (_admin_running, admin_shutdown) = tokio::sync::watch::channel(false);
    if let Some(address) = args.admin {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(address))
            .with_context(|| format!("cannot listen on {address} for the status server"))?;
        let address = listener.local_addr().unwrap_or(address);
        eprintln!("krait serve: the verifier's status page is at http://{address}/ (JSON at /api/status)");
        let reports = ReportStore::open(&data_dir)
            .with_context(|| format!("cannot open the reports directory in {}", data_dir.display()))?;
        let served = crate::cmd::status_server::Served {
            source: url.clone(),
            stream: args.stream.clone(),
            reports: Arc::new(crate::cmd::report::StoredReports(reports)),
        };
        runtime.spawn(crate::cmd::status_server::serve(listener, status.clone(), served, admin_shutdown));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut verifier = {
        let stop = stop.clone();
        let status_every = Duration::from_secs(args.status_every.max(1));
        let mut feeder = resumed.feeder;
        feeder.started(resumed.started);
        let state = Verifying {
            schedule: CheckpointSchedule::new(&feeder),
            merger: resumed.merger,
            feeder,
            checkpoint,
            at: resumed.at,
            taken: 0,
        };
        let status = status.clone();
        let skip_holes_after =
            (args.skip_holes_after > 0).then(|| Duration::from_secs(args.skip_holes_after));
        let settings = Settings { status_every, skip_holes_after };
        runtime.spawn_blocking(move || verify(messages, state, &stop, settings, &status))
    };
    // Until Ctrl-C or SIGTERM, or until the verifier stops on its own (a shipped log it cannot read).
    let finished = runtime.block_on(async {
        tokio::select! {
            () = crate::cmd::proxy::shutdown_signal() => None,
            finished = &mut verifier => Some(finished),
        }
    });
    source.stop();
    let finished = match finished {
        Some(finished) => finished,
        None => {
            eprintln!("krait serve: shutting down");
            stop.store(true, Ordering::Relaxed);
            runtime.block_on(verifier)
        }
    };
    let line = finished.map_err(|_| anyhow::anyhow!("the verifier thread panicked"))??;
    eprintln!("krait serve: stopped; verifier: {line}");
    Ok(ExitCode::SUCCESS)
}

/// How the verifier thread reports and when it gives up on missing records.
#[derive(Clone, Copy)]
struct Settings {
    /// Between status lines.
    status_every: Duration,
    /// How long a collector's missing records are waited for (`--skip-holes-after`); `None`: for ever.
    skip_holes_after: Option<Duration>,
}

/// What the verifier thread works on.
struct Verifying {
    merger: Merger,
    feeder: Feeder,
    /// Where the checkpoint goes, and when.
    checkpoint: EdgesCheckpoint,
    schedule: CheckpointSchedule,
    /// After the last message taken (or where the checkpoint resumed): `None` until there is one.
    at: Option<StreamPosition>,
    /// Messages taken by this run: after a restart, only those after the checkpoint.
    taken: u64,
}

impl Verifying {
    /// Stores a checkpoint of what the merger and the feeder have taken; a failure is noted in the status
    /// (and said once), never fatal.
    fn store_checkpoint(&mut self) {
        let Some(at) = &self.at else { return };
        let before = self.feeder.checkpoint_error().map(str::to_owned);
        let (checkpoint, merger) = (&self.checkpoint, &self.merger);
        self.schedule.store(&mut self.feeder, |feeder| checkpoint.store(feeder, merger, at));
        if let Some(e) = self.feeder.checkpoint_error().filter(|e| before.as_deref() != Some(*e)) {
            eprintln!("krait serve: the verifier goes on without a new checkpoint: {e}");
        }
    }
}

/// The verifier thread: messages into the merger, released events into the feeder, rounds, checkpoints,
/// status lines. Returns the last status line.
fn verify(
    messages: ship::source::Deliveries,
    mut state: Verifying,
    stop: &AtomicBool,
    settings: Settings,
    published: &Mutex<serde_json::Value>,
) -> anyhow::Result<String> {
    let verified = verify_until(messages, &mut state, stop, settings, published);
    if let Err(e) = &verified {
        // The status server says why verification stopped, for whoever looks before the process is gone.
        let mut shown = status_json(&mut state);
        shown["stopped"] = format!("{e:#}").into();
        if let Ok(mut published) = published.lock() {
            *published = shown;
        }
    }
    verified
}

/// [`verify`] until told to stop or until a shipped log cannot be read.
fn verify_until(
    mut messages: ship::source::Deliveries,
    state: &mut Verifying,
    stop: &AtomicBool,
    settings: Settings,
    published: &Mutex<serde_json::Value>,
) -> anyhow::Result<String> {
    let mut last_status = Instant::now();
    let mut waiting = BTreeMap::new();
    let mut last_published = Instant::now() - PUBLISH_EVERY;
    let mut warned_horizons = false;
    let mut warned_gc = false;
    while !stop.load(Ordering::Relaxed) {
        let Ok(first) = messages.recv_timeout(POLL) else { break };
        let more = std::iter::from_fn(|| messages.try_recv()).take(MAX_MESSAGES_PER_PASS);
        let Verifying { merger, feeder, .. } = state;
        for delivery in first.into_iter().chain(more) {
            let delivered = delivery.context("a shipped log cannot be read")?;
            match delivered.incoming {
                Incoming::Record { collector, seq, record } => merger.record(collector, seq, record)?,
                Incoming::Heartbeat { collector, beat } => merger.heartbeat(collector, beat),
            }
            state.at = Some(StreamPosition {
                generation: delivered.generation,
                next_message: delivered.message + 1,
            });
            state.taken += 1;
        }
        if let Some(after) = settings.skip_holes_after {
            skip_old_holes(merger, &mut waiting, after)?;
        }
        let events = merger.release()?;
        feeder.feed_events(events, merger)?;
        feeder.poll()?;
        for (id, line) in feeder.new_rejects() {
            match id {
                Some(id) => eprintln!("krait serve: {line} (report {id})"),
                None => eprintln!("krait serve: {line}"),
            }
        }
        if state.schedule.due(&state.feeder) {
            state.store_checkpoint();
        }
        if last_published.elapsed() >= PUBLISH_EVERY {
            last_published = Instant::now();
            let shown = status_json(state);
            if let Ok(mut published) = published.lock() {
                *published = shown;
            }
        }
        let Verifying { merger, feeder, .. } = state;
        if !warned_gc && let Some(why) = feeder.verifier().gc_disabled() {
            warned_gc = true;
            eprintln!(
                "krait serve: garbage collection stopped ({why}); the verifier now keeps every transaction, \
                 so its memory grows with the history (each proxy fences a row of its own, and several fence \
                 chains give no epochs to trust: docs/deploy.md)"
            );
        }
        if !warned_horizons && merger.horizons_differ() {
            warned_horizons = true;
            eprintln!(
                "krait serve: the proxies began recording at different points of the database's history; a \
                 version that no proxy recorded, written between those points, is pre-history to the later \
                 ones (start every proxy before traffic flows)"
            );
        }
        if last_status.elapsed() >= settings.status_every {
            last_status = Instant::now();
            eprintln!("krait serve: verifier: {}", status_line(feeder, merger));
        }
    }
    state.feeder.finish()?;
    for (id, line) in state.feeder.new_rejects() {
        eprintln!("krait serve: {line}{}", id.map(|id| format!(" (report {id})")).unwrap_or_default());
    }
    // The next start reads on from here.
    state.store_checkpoint();
    let held: usize = state.merger.holding().iter().map(|c| c.held).sum();
    if held > 0 {
        eprintln!(
            "krait serve: {held} events were left unverified, waiting for other proxies' records; the \
             checkpoint (or else the stream) keeps them, and the next run verifies them"
        );
    }
    Ok(status_line(&mut state.feeder, &state.merger))
}

/// Gives up on the records a collector has waited for longer than `after` (see `--skip-holes-after`).
/// `waiting` keeps, for each collector that waits, the record it waits for and since when.
fn skip_old_holes(
    merger: &mut Merger,
    waiting: &mut BTreeMap<CollectorId, (u64, Instant)>,
    after: Duration,
) -> anyhow::Result<()> {
    for status in merger.holding() {
        let collector = status.collector;
        let Some(seq) = status.waiting_for else {
            waiting.remove(&collector);
            continue;
        };
        let since = waiting.entry(collector).or_insert((seq, Instant::now()));
        if since.0 != seq {
            *since = (seq, Instant::now());
        }
        if since.1.elapsed() < after {
            continue;
        }
        waiting.remove(&collector);
        if let Some(hole) = merger.skip_hole(collector)? {
            eprintln!(
                "krait serve: collector {}: records {}–{} never arrived within {} s of later ones; verifying on \
                 without them: reads of versions they may have written are unverifiable, and the status lists \
                 the hole",
                collector.0,
                hole.from,
                hole.to - 1,
                after.as_secs()
            );
        }
    }
    Ok(())
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

/// What `/api/status` shows: the verifier's progress and each collector's state.
fn status_json(state: &mut Verifying) -> serde_json::Value {
    let Verifying { feeder, merger, at, taken, .. } = state;
    let status = feeder.status();
    let now_ns = now_ns();
    let collectors: Vec<serde_json::Value> = merger
        .holding()
        .iter()
        .map(|c| {
            let silent_s = c.complete_before_ns.map(|at| now_ns.saturating_sub(at) as f64 / 1e9);
            serde_json::json!({
                "collector": c.collector.0,
                "records": c.records,
                "held": c.held,
                "heard_from": c.complete_before_ns.is_some(),
                "waiting_for_record": c.waiting_for,
                "holes": c.holes,
                "records_lost_to_holes": c.lost_to_holes,
                "values_lost_to_holes": c.values_lost_to_holes,
                "silent_s": silent_s,
                "holds_back_others": c.complete_before_ns.is_none_or(|at| now_ns.saturating_sub(at) > SILENT_AFTER_NS),
            })
        })
        .collect();
    serde_json::json!({
        "verifier": {
            "recorded": status.txns_read,
            "verified": status.verified,
            "committed": status.committed,
            "indeterminate": status.indeterminate,
            "lag_transactions": status.lag_txns,
            "lag_seconds": status.lag.as_secs_f64(),
            "rounds": status.rounds,
            "rejects": status.rejects,
            "report_ids": status.report_ids,
            "live_transactions": status.live,
            "checkpoint_covers": status.checkpoint_covers,
            "checkpoint_error": status.checkpoint_error,
        },
        "position": {
            "next_message": at.as_ref().map(|at| at.next_message),
            "messages_this_run": taken,
        },
        "collectors": collectors,
        "horizons_differ": merger.horizons_differ(),
        "garbage_collection_stopped": feeder.verifier().gc_disabled(),
        "stopped": null,
    })
}

/// Where each collector stands, for a status line.
fn holding(collectors: &[CollectorStatus]) -> String {
    if collectors.is_empty() {
        return "no collector has shipped yet".into();
    }
    let now_ns = now_ns();
    collectors
        .iter()
        .map(|c| {
            let (id, records, held) = (c.collector.0, c.records, c.held);
            let state = collector_state(c, now_ns);
            match holes(c) {
                Some(holes) => format!("collector {id}: {records} records, {held} held{state}, {holes}"),
                None => format!("collector {id}: {records} records, {held} held{state}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What holds a collector back, if anything: a missing record, or silence.
fn collector_state(c: &CollectorStatus, now_ns: u64) -> String {
    if let Some(seq) = c.waiting_for {
        return format!(", waiting for its record {seq}");
    }
    match c.complete_before_ns.map(|at| now_ns.saturating_sub(at)) {
        // A live shipper promises anew at least every half second (by its own clock).
        Some(silent) if silent > SILENT_AFTER_NS => {
            format!(", silent for {:.1} s (holds the others back)", silent as f64 / 1e9)
        }
        Some(_) => String::new(),
        None => ", no heartbeat yet (holds the others back)".into(),
    }
}

/// The holes given up on in a collector's log, if any.
fn holes(c: &CollectorStatus) -> Option<String> {
    let missing: u64 = c.holes.iter().map(|h| h.to - h.from).sum();
    match c.holes.len() {
        0 => None,
        n => Some(format!(
            "{n} hole{} ({missing} records never arrived, {} later records cited them and were dropped, {} \
             recorded values cited them and were left out; reads of what they wrote are unverifiable)",
            if n == 1 { "" } else { "s" },
            c.lost_to_holes,
            c.values_lost_to_holes
        )),
    }
}

/// How old a collector's latest promise may be before the status line calls it silent: its shipper's idle
/// heartbeat interval, and room for the clocks' drift and the way through NATS.
const SILENT_AFTER_NS: u64 = 2_000_000_000;

fn list(collectors: &[CollectorId]) -> String {
    collectors.iter().map(|c| c.0.to_string()).collect::<Vec<_>>().join(", ")
}
