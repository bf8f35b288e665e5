//! The proxy's side: tail the local log and publish it to JetStream, never in the client's way.
//!
//! Every [`TICK`] the shipper reads what the log has made durable since its last pass (records a crash
//! could still take back are never shipped: the verifier must not see a transaction the log then loses),
//! publishes each record and waits for JetStream's acks, then publishes a heartbeat. The heartbeat's
//! promise ([`Heartbeat::appended_before_ns`]) is a time read *before* a `next_seq` that everything shipped
//! now covers; since under `strict` the log makes records durable a little after they are appended, the
//! shipper keeps the recent (time, `next_seq`) pairs and promises the latest one its shipping has passed.
//!
//! After any failure (NATS down, a refused publish) it reconnects with a backoff and resumes after the last
//! record it saw acknowledged (after a restart of the proxy: after the last message its subject holds);
//! records published again carry the same message id, which JetStream's duplicate window drops. While it
//! cannot ship, the proxy serves and records as before: the backlog grows and `/metrics` shows it
//! ([`Counters`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use history::log::merge::Heartbeat;
use history::{CollectorId, Durability, HistoryLog, LogRecord};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::message;
use crate::{Counters, ShipConfig, ShipError, now_ns};

/// How often the shipper looks at the log.
pub const TICK: Duration = Duration::from_millis(50);
/// The longest a shipper with nothing to ship stays silent: its heartbeats let the verifier release the
/// other collectors' transactions.
pub const IDLE_HEARTBEAT: Duration = Duration::from_millis(500);
/// The most records one pass publishes before it waits for their acks.
const BATCH: usize = 2_000;
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A running shipper; see the module documentation.
pub struct Shipper {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    counters: Arc<Counters>,
}

impl Shipper {
    /// Starts shipping `log`, the log of `collector`, on the current tokio runtime.
    pub fn spawn(log: Arc<dyn HistoryLog>, collector: CollectorId, config: ShipConfig) -> Self {
        let counters = Arc::new(Counters::default());
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(log, collector, config, counters.clone(), stop_rx));
        Shipper { stop, task, counters }
    }

    /// What it has done, for `/metrics`.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Ships what the log holds (call after the log is closed, so that everything is durable), for at most
    /// `grace`, then stops. What is left is shipped by the next run.
    pub async fn finish(self, grace: Duration) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
            warn!("the shipper did not catch up within {grace:?}; the next run ships the rest");
        }
    }
}

async fn run(
    log: Arc<dyn HistoryLog>,
    collector: CollectorId,
    config: ShipConfig,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    // Every record below this one is acknowledged by JetStream, as far as this process knows.
    let mut acked = None;
    loop {
        match ship(&log, collector, &config, &counters, &mut stop, &mut acked).await {
            Ok(()) => return,
            Err(e) => {
                Counters::set(&counters.connected, 0);
                counters.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                warn!("shipping the history log to NATS stopped, retrying in {backoff:?}: {e}");
            }
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Connects, then ships until told to stop (`Ok`) or until something fails.
async fn ship(
    log: &Arc<dyn HistoryLog>,
    collector: CollectorId,
    config: &ShipConfig,
    counters: &Counters,
    stop: &mut watch::Receiver<bool>,
    acked: &mut Option<u64>,
) -> Result<(), ShipError> {
    let nats = |why: String| ShipError::Nats { url: config.nats.clone(), why };
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .connect(config.nats.as_str())
        .await
        .map_err(|e| nats(e.to_string()))?;
    let js = jetstream::new(client);
    let stream = js
        .get_or_create_stream(stream::Config {
            name: config.stream.clone(),
            subjects: vec![format!("{}.>", message::SUBJECT_PREFIX)],
            ..Default::default()
        })
        .await
        .map_err(|e| nats(format!("cannot create or open stream {}: {e}", config.stream)))?;
    let subject = message::subject(collector);
    let in_stream = match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(last) => {
            let incoming = message::decode(&subject, Some(&last.headers), &last.payload)?;
            message::resume_after(&incoming)
        }
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => 0,
        Err(e) => return Err(nats(format!("cannot read the last message of {subject}: {e}"))),
    };
    // After a lost connection, resume from what was acknowledged, not from the stream's last message: the
    // client may have sent records after the connection broke, and they can reach a restarted server while
    // earlier ones, written to the dead connection, never did. Records sent twice carry the same message
    // id, and the stream drops the second copy; the reader puts records back in order (the merger).
    let mut shipped = acked.map_or(in_stream, |acked| acked.min(in_stream));
    let log_next = log.next_seq();
    if shipped > log_next {
        return Err(ShipError::AnotherLog { collector: collector.0, shipped, log_next });
    }
    Counters::set(&counters.connected, 1);
    info!(nats = %config.nats, %subject, from = shipped, "shipping the history log");
    // (next_seq, a time read just before it): everything appended before the time is below the seq.
    let mut promises: VecDeque<(u64, u64)> = VecDeque::new();
    let mut promised_ns = 0;
    let mut last_beat = tokio::time::Instant::now();
    let mut stopping = false;
    loop {
        if !stopping {
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                _ = stop.changed() => stopping = true,
            }
        }
        let before_ns = now_ns();
        let next = log.next_seq();
        let limit = match log.durability() {
            Durability::None => log.next_seq(),
            _ => log.durable_below(),
        };
        let read_at_ns = now_ns();
        promises.push_back((next, before_ns));
        let records = read_records(log, shipped, limit).await?;
        let any = !records.is_empty();
        let mut acks = Vec::with_capacity(records.len());
        for (seq, record) in &records {
            let (headers, payload) = message::record_message(collector, *seq, record)?;
            let ack = js
                .publish_with_headers(subject.clone(), headers, payload)
                .await
                .map_err(|e| nats(format!("publishing record {seq}: {e}")))?;
            acks.push((*seq, ack));
        }
        for (seq, ack) in acks {
            ack.await.map_err(|e| nats(format!("no ack for record {seq}: {e}")))?;
            shipped = seq + 1;
            *acked = Some(shipped);
        }
        let caught_up = records.len() < BATCH;
        if caught_up {
            shipped = shipped.max(limit);
            *acked = Some(shipped);
        }
        while promises.front().is_some_and(|&(seq, _)| seq <= shipped) {
            if let Some((_, at)) = promises.pop_front() {
                promised_ns = at;
            }
        }
        Counters::set(&counters.shipped_below, shipped);
        Counters::set(&counters.backlog, log.next_seq().saturating_sub(shipped));
        if any || last_beat.elapsed() >= IDLE_HEARTBEAT || stopping {
            let beat = Heartbeat { below: shipped, appended_before_ns: promised_ns, read_at_ns };
            let (headers, payload) = message::heartbeat_message(&beat)?;
            js.publish_with_headers(subject.clone(), headers, payload)
                .await
                .map_err(|e| nats(format!("publishing a heartbeat: {e}")))?
                .await
                .map_err(|e| nats(format!("no ack for a heartbeat: {e}")))?;
            last_beat = tokio::time::Instant::now();
        }
        if stopping && caught_up {
            return Ok(());
        }
    }
}

/// The records from `from` up to `limit` (at most [`BATCH`]), read off the async runtime.
async fn read_records(
    log: &Arc<dyn HistoryLog>,
    from: u64,
    limit: u64,
) -> Result<Vec<(u64, LogRecord)>, ShipError> {
    if from >= limit {
        return Ok(Vec::new());
    }
    let log = log.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for item in log.tail(from) {
            let (seq, record) = item?;
            if seq >= limit || out.len() >= BATCH {
                break;
            }
            out.push((seq, record));
        }
        Ok(out)
    })
    .await
    .map_err(|e| ShipError::Encode(format!("the log reader failed: {e}")))?
}
