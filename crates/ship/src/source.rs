//! The verifier's side: read every collector's messages from JetStream, in order.
//!
//! One ordered consumer on `krait.>` delivers the stream in stream order, so each collector's records and
//! heartbeats arrive in the order its shipper published them. Each delivery carries its place in the
//! stream ([`Delivered::message`] and the stream's [`Delivered::generation`]), which a verifier stores
//! with its checkpoint and gives back at its next start ([`StreamStart`]): reading then begins after the
//! last message the checkpoint covers. The consumer is ephemeral: where it begins is kept with the
//! verifier's state, in one file written at once, so that the two can never disagree (a durable consumer's
//! acknowledged position would be a second record of the same thing, stored elsewhere and at other times).
//!
//! After a failure it reconnects and resumes after the last stream sequence it delivered. It reads the
//! stream again from its first message when the server lost messages it had delivered, or when the stream
//! was deleted and made again (its generation, the time it was made, changed): the merger drops every
//! record it already has, so reading again costs time, never correctness.
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
pub type Delivery = Result<Delivered, ShipError>;

/// A message, with its place in the stream.
#[derive(Debug)]
pub struct Delivered {
    /// Its stream sequence number.
    pub message: u64,
    /// The stream's generation: when it was made, as the server says. A stream deleted and made again
    /// numbers its messages from 1 again, so a position is a generation and a sequence number.
    pub generation: String,
    /// What it says.
    pub incoming: Incoming,
}

/// Where to begin reading: after the messages a verifier's checkpoint covers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStart {
    /// The stream's generation when the checkpoint was made (`None`: no checkpoint, read from the start).
    pub generation: Option<String>,
    /// The first message to read (messages below it are covered).
    pub next: u64,
}

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
    /// Starts reading `stream` at `url` on the current tokio runtime (call it inside one), at `start`;
    /// messages of collectors not in `collectors` (when it is not empty) are skipped. Connection failures
    /// are retried (and logged); a message that cannot be read is sent as an error, since skipping it would
    /// verify a history with a record missing.
    pub fn spawn(
        url: String,
        stream: String,
        collectors: &[CollectorId],
        start: StreamStart,
    ) -> (Self, Deliveries) {
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        let deliveries = Deliveries { rx, runtime: tokio::runtime::Handle::current() };
        let only: BTreeSet<CollectorId> = collectors.iter().copied().collect();
        let task = tokio::spawn(async move {
            let mut at = Position { generation: start.generation, next: start.next.max(1) };
            let mut backoff = MIN_BACKOFF;
            loop {
                let from = at.next;
                match read(&url, &stream, &only, &mut at, &tx).await {
                    Ok(()) => return,
                    // Quiet: every live shipper sends a heartbeat at least every half second, so a silent
                    // consumer is one NATS lost (a restart); read again from where it stopped.
                    Err(Stop::Silent) => {}
                    Err(Stop::Failed(e)) => {
                        warn!("reading shipped logs stopped, retrying in {backoff:?}: {e}")
                    }
                }
                if at.next > from {
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

/// Where the reader is: the generation of the stream it read last, and the next message to read.
struct Position {
    generation: Option<String>,
    next: u64,
}

/// Delivers messages from `at` on; returns `Ok` once the receiver is gone.
async fn read(
    url: &str,
    stream: &str,
    only: &BTreeSet<CollectorId>,
    at: &mut Position,
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
    let info = stream_handle.info().await.map_err(|e| nats(format!("stream {stream}: {e}")))?;
    let (last, generation) = (info.state.last_sequence, info.created.to_string());
    if at.generation.as_ref().is_some_and(|read| *read != generation) && at.next > 1 {
        // Deleted and made again: its sequence numbers start again at 1 and name other messages. The
        // merger drops every record it already has, so reading from the start loses nothing.
        warn!(
            "stream {stream} was made again (at {generation}) since message {} was read; reading it from \
             the start",
            at.next - 1
        );
        at.next = 1;
    }
    at.generation = Some(generation.clone());
    let next = &mut at.next;
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
        // An ordered consumer delivers in stream order, so without its own number (never seen) a message
        // is the one after the last.
        let message = msg.info().map_or(*next, |info| info.stream_sequence);
        *next = message + 1;
        let subject = msg.subject.as_str();
        let wanted = message::collector_of(subject).is_none_or(|c| only.is_empty() || only.contains(&c));
        if !wanted {
            continue;
        }
        let delivery = message::decode(subject, msg.headers.as_ref(), &msg.payload)
            .map(|incoming| Delivered { message, generation: generation.clone(), incoming });
        if tx.send(delivery).await.is_err() {
            return Ok(());
        }
    }
    Err(nats(format!("stream {stream} ended")))
}
