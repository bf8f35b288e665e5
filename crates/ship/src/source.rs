//! The verifier's side: read every collector's messages from JetStream, in order, from the start.
//!
//! One ordered consumer on `krait.>` delivers the stream in stream order, so each collector's records and
//! heartbeats arrive in the order its shipper published them. The verifier re-verifies from the start at
//! every start (it has no checkpoint yet), so the consumer is ephemeral and begins at the stream's first
//! message; after a failure it reconnects and resumes after the last stream sequence it delivered, or from
//! the start again if the server lost messages it had delivered.
//!
//! Messages go to the caller over a bounded channel ([`Deliveries`]) that a plain thread can read (the
//! verifier runs on its own OS thread, never on an async runtime). The bound holds the reader back when the
//! verifier is slower, so a verifier that starts on a long stream does not pull all of it into memory.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use history::CollectorId;
use tokio::sync::mpsc;
use tracing::warn;

use crate::ShipError;
use crate::message::{self, Incoming};

/// The first wait before reading again.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long the consumer may deliver nothing before it is made again. Shippers send a heartbeat at least
/// every [`crate::shipper::IDLE_HEARTBEAT`], so a longer silence means NATS lost the consumer (a server
/// restart) or every shipper is down; reading again costs one request either way.
const SILENCE: Duration = Duration::from_secs(3);

/// Why one reading of the stream ended.
enum Stop {
    /// Nothing arrived for [`SILENCE`].
    Silent,
    /// Something failed.
    Failed(ShipError),
}

/// What the channel carries: a message, or a problem the reader cannot get past.
pub type Delivery = Result<Incoming, ShipError>;

/// The most messages read ahead of the verifier.
const READ_AHEAD: usize = 65_536;

/// The receiving end, for a thread outside the async runtime.
pub struct Deliveries {
    rx: mpsc::Receiver<Delivery>,
    runtime: tokio::runtime::Handle,
}

/// The reader is gone: it stopped, or its runtime did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl Deliveries {
    /// The next message, waiting at most `wait`; `Ok(None)` when none came in time. Call it from a thread
    /// that is not running async code (a plain or `spawn_blocking` thread).
    pub fn recv_timeout(&mut self, wait: Duration) -> Result<Option<Delivery>, Closed> {
        let rx = &mut self.rx;
        match self.runtime.block_on(async { tokio::time::timeout(wait, rx.recv()).await }) {
            Ok(Some(delivery)) => Ok(Some(delivery)),
            Ok(None) => Err(Closed),
            Err(_elapsed) => Ok(None),
        }
    }

    /// The next message if one is waiting.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        self.rx.try_recv().ok()
    }
}

/// A reader of shipped logs.
pub struct Source {
    task: tokio::task::JoinHandle<()>,
}

impl Source {
    /// Starts reading `stream` at `url` on the current tokio runtime (call it inside one); messages of
    /// collectors not in
    /// `collectors` (when it is not empty) are skipped. Connection failures are retried (and logged); a
    /// message that cannot be read is sent as an error, since skipping it would verify a history with a
    /// record missing.
    pub fn spawn(url: String, stream: String, collectors: &[CollectorId]) -> (Self, Deliveries) {
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        let deliveries = Deliveries { rx, runtime: tokio::runtime::Handle::current() };
        let only: BTreeSet<CollectorId> = collectors.iter().copied().collect();
        let task = tokio::spawn(async move {
            let mut next = 1;
            let mut backoff = MIN_BACKOFF;
            loop {
                let from = next;
                match read(&url, &stream, &only, &mut next, &tx).await {
                    Ok(()) => return,
                    // Quiet: every live shipper sends a heartbeat at least every half second, so a silent
                    // consumer is one NATS lost (a restart); read again from where it stopped.
                    Err(Stop::Silent) => {}
                    Err(Stop::Failed(e)) => {
                        warn!("reading shipped logs stopped, retrying in {backoff:?}: {e}")
                    }
                }
                if next > from {
                    backoff = MIN_BACKOFF;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        });
        (Source { task }, deliveries)
    }

    /// Stops reading.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Delivers messages from stream sequence `next` on; returns `Ok` once the receiver is gone.
async fn read(
    url: &str,
    stream: &str,
    only: &BTreeSet<CollectorId>,
    next: &mut u64,
    tx: &mpsc::Sender<Delivery>,
) -> Result<(), Stop> {
    let nats = |why: String| Stop::Failed(ShipError::Nats { url: url.to_owned(), why });
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .map_err(|e| nats(e.to_string()))?;
    let js = jetstream::new(client);
    let mut stream_handle = js.get_stream(stream).await.map_err(|e| nats(format!("stream {stream}: {e}")))?;
    let last =
        stream_handle.info().await.map_err(|e| nats(format!("stream {stream}: {e}")))?.state.last_sequence;
    if last + 1 < *next {
        // The server lost messages it had delivered (a crash within its sync interval, a stream deleted
        // and made again) and gives their sequence numbers to what shippers send now, some of which may
        // already be stored: where the loss began is unknown, so read the stream again from its start. The
        // merger drops every record it already has.
        warn!(
            "stream {stream} ends at message {last}, before the {} already read: it lost messages; reading \
             it again from the start",
            *next - 1
        );
        *next = 1;
    }
    let consumer = stream_handle
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: format!("{}.>", message::SUBJECT_PREFIX),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence: *next },
            ..Default::default()
        })
        .await
        .map_err(|e| nats(format!("cannot read stream {stream}: {e}")))?;
    let mut messages =
        consumer.messages().await.map_err(|e| nats(format!("cannot read stream {stream}: {e}")))?;
    loop {
        let Ok(msg) = tokio::time::timeout(SILENCE, messages.next()).await else { return Err(Stop::Silent) };
        let Some(msg) = msg else { break };
        let msg = msg.map_err(|e| nats(format!("reading stream {stream}: {e}")))?;
        if let Ok(info) = msg.info() {
            *next = info.stream_sequence + 1;
        }
        let subject = msg.subject.as_str();
        let wanted = message::collector_of(subject).is_none_or(|c| only.is_empty() || only.contains(&c));
        if !wanted {
            continue;
        }
        let delivery = message::decode(subject, msg.headers.as_ref(), &msg.payload);
        if tx.send(delivery).await.is_err() {
            return Ok(());
        }
    }
    Err(nats(format!("stream {stream} ended")))
}
