//! The proxy's side: tail the local log and publish it to JetStream, never in the client's way.
//!
//! Every [`TICK`] the shipper reads what the log has made durable since its last pass (records a crash
//! could still take back are never shipped: the verifier must not see a transaction the log then loses),
//! publishes each record and waits for JetStream's acks, then publishes a heartbeat. The heartbeat's
//! promise ([`Heartbeat::appended_before_ns`]) is a time read *before* a `next_seq` that everything shipped
//! now covers; since under `strict` the log makes records durable a little after they are appended, the
//! shipper keeps the recent (time, `next_seq`) pairs and promises the latest one its shipping has passed.
//!
//! After any failure (NATS down, a refused publish, a connection the client made again on its own) it
//! reconnects with a backoff and resumes from the first record it cannot be sure the stream holds:
//!
//! - in the same process, the first record not acknowledged in order;
//! - after a restart of the proxy, what the last stored heartbeat covered. Not the last stored record: a
//!   batch is published before its acks are awaited, and across a NATS restart the client may deliver the
//!   end of a batch to the new server while the middle went down with the old connection. A shipper killed
//!   before its acks time out leaves that hole behind it, and resuming after the last record would leave it
//!   forever (the many-edges fault test hit this). A heartbeat is published only once every record below
//!   its `below` is acknowledged;
//! - never beyond the last record the stream holds, in case NATS lost acknowledged messages (a machine
//!   crash before its `sync_interval`).
//!
//! Records published again carry the same message id, which JetStream's duplicate window drops (and the
//! merger drops a copy that comes later). While it cannot ship, the proxy serves and records as before: the
//! backlog grows and `/metrics` shows it ([`Counters`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use history::log::merge::Heartbeat;
use history::{CollectorId, Durability, HistoryLog, LogRecord, now_ns};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::message;
use crate::{Counters, ShipConfig, ShipError};

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
    let statistics = client.statistics();
    let js = jetstream::new(client);
    let stream = js
        .get_or_create_stream(message::stream_config(&config.stream))
        .await
        .map_err(|e| nats(format!("cannot create or open stream {}: {e}", config.stream)))?;
    let connects = statistics.connects.load(Ordering::Relaxed);
    let subject = message::subject(collector);
    let beat_subject = message::beat_subject(collector);
    let after_last_record = shipped_after_last(&stream, &subject, config).await?;
    let log_next = log.next_seq();
    if after_last_record > log_next {
        return Err(ShipError::AnotherLog { collector: collector.0, shipped: after_last_record, log_next });
    }
    // Where to resume: see the module documentation. Records sent twice carry the same message id, and the
    // stream drops the second copy; the merger puts records back in order and drops late copies.
    let confirmed = match *acked {
        Some(acked) => acked,
        None => shipped_after_last(&stream, &beat_subject, config).await?,
    };
    let mut shipped = confirmed.min(after_last_record);
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
        if statistics.connects.load(Ordering::Relaxed) != connects {
            // The client reconnected on its own: records in flight may have been lost with the old
            // connection, or the server may have restarted without messages it had acknowledged. Promise
            // nothing until the stream says what it holds.
            return Err(nats(
                "the connection was lost and made again; resuming from what the stream holds".into(),
            ));
        }
        if any || last_beat.elapsed() >= IDLE_HEARTBEAT || stopping {
            let beat = Heartbeat { below: shipped, appended_before_ns: promised_ns, read_at_ns };
            let (headers, payload) = message::heartbeat_message(&beat)?;
            js.publish_with_headers(beat_subject.clone(), headers, payload)
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

/// How far the last message of `subject` says shipping got (0 when it holds none).
async fn shipped_after_last(
    stream: &stream::Stream,
    subject: &str,
    config: &ShipConfig,
) -> Result<u64, ShipError> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(last) => {
            let incoming = message::decode(subject, Some(&last.headers), &last.payload)?;
            Ok(message::resume_after(&incoming))
        }
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(e) => Err(ShipError::Nats {
            url: config.nats.clone(),
            why: format!("cannot read the last message of {subject}: {e}"),
        }),
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
