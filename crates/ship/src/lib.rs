//! Shipping history logs from many proxies to one verifier over NATS JetStream (DESIGN.md §4, issue 21).
//!
//! Each proxy keeps its local log as its durability boundary: a commit is acknowledged when *its* log has
//! it, never when NATS has. A [`shipper`] tails that log and publishes every record a crash can no longer
//! take back, with heartbeats that say how far it has shipped ([`history::log::merge::Heartbeat`]); the
//! client path never waits for it. On the verifier's side a [`source`] reads every collector's subject, in
//! order, and hands the messages to a [`history::log::merge::Merger`]. [`message`] is what goes over the
//! wire.

pub mod local;
pub mod message;
pub mod shipper;
pub mod source;

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use message::Incoming;
pub use shipper::Shipper;
pub use source::{Delivered, Source, StreamStart};

/// The JetStream stream that holds every collector's subject, unless the configuration names another.
pub const DEFAULT_STREAM: &str = "KRAIT";

/// The `[ship]` section of a proxy's configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShipConfig {
    /// The NATS server, `nats://host:port`.
    pub nats: String,
    /// The JetStream stream (created if missing, with subjects `krait.>`).
    #[serde(default = "default_stream")]
    pub stream: String,
}

fn default_stream() -> String {
    DEFAULT_STREAM.to_owned()
}

/// Why shipping or reading a shipped log failed.
#[derive(Debug, Error)]
pub enum ShipError {
    /// NATS could not be reached, or refused a request.
    #[error("NATS at {url}: {why}")]
    Nats {
        /// The server.
        url: String,
        /// What failed.
        why: String,
    },
    /// A record could not be encoded.
    #[error("cannot encode a record to ship: {0}")]
    Encode(String),
    /// A message on a Krait subject is not one a shipper sends.
    #[error("message on {subject}: {why}")]
    BadMessage {
        /// Its subject.
        subject: String,
        /// What is wrong with it.
        why: String,
    },
    /// The stream already holds records of this collector beyond what its log holds: another log (a new
    /// one, or another proxy's) was shipped under the same collector id.
    #[error(
        "the stream already holds collector {collector}'s records up to {shipped}, but its log holds only \
         {log_next} records: give this proxy its own [log] collector id, or purge the stream"
    )]
    AnotherLog {
        /// The collector.
        collector: u32,
        /// Where the stream says shipping had got.
        shipped: u64,
        /// The log's next sequence number.
        log_next: u64,
    },
    /// The history log could not be read.
    #[error("cannot read the history log to ship it: {0}")]
    Log(#[from] history::LogError),
}

/// What a shipper has done, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// 1 while connected to NATS with the stream in place.
    pub connected: AtomicU64,
    /// Every record below this sequence number is in the stream.
    pub shipped_below: AtomicU64,
    /// Connection attempts and publishes that failed.
    pub errors: AtomicU64,
}

impl Counters {
    /// One counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Records `log` holds that are not in the stream yet, as far as this run knows: those after the last
    /// one shipping confirmed, or after the log's first record before this run confirmed any (retention
    /// deletes only what was shipped). Read from the log each time, so that it grows while NATS is down.
    pub fn backlog(&self, log: &dyn history::HistoryLog) -> u64 {
        let shipped = Self::get(&self.shipped_below).max(log.first_seq());
        log.next_seq().saturating_sub(shipped)
    }

    fn set(counter: &AtomicU64, value: u64) {
        counter.store(value, Ordering::Relaxed);
    }
}
