//! What goes over NATS: one message per log record, and heartbeats, on one subject per collector.
//!
//! - Subjects `krait.<collector>` (records) and `krait.<collector>.beat` (heartbeats), for the proxy's
//!   `[log] collector`, in one JetStream stream (`KRAIT` by default) that holds `krait.>`. A consumer of
//!   the stream reads a collector's messages in the order its shipper published them, so a heartbeat comes
//!   after the records it covers. Heartbeats have a subject of their own so that a restarted shipper can
//!   ask for the last one: everything below its `below` was acknowledged before it was sent, which the
//!   last *record* cannot say (see [`crate::shipper`]).
//! - A record message: header `Krait-Kind: record`, `Krait-Seq: <seq>`, `Nats-Msg-Id: <collector>:<seq>`
//!   (JetStream drops a second copy within its duplicate window, so a shipper that restarts after a
//!   publish whose ack it lost does not ship a record twice), and the record as the log stores it
//!   ([`LogRecord::encode`]: format version and CRC included).
//! - A heartbeat message: header `Krait-Kind: heartbeat` and a JSON [`Heartbeat`].

use async_nats::HeaderMap;
use bytes::Bytes;
use history::log::merge::Heartbeat;
use history::{CollectorId, LogRecord};

use crate::ShipError;

/// The prefix of every collector's subject.
pub const SUBJECT_PREFIX: &str = "krait";
/// The header that says what a message carries.
pub const KIND_HEADER: &str = "Krait-Kind";
/// The header that carries a record's sequence number in its collector's log.
pub const SEQ_HEADER: &str = "Krait-Seq";

/// The stream `name` as a shipper creates it when it is missing: every Krait subject, JetStream's defaults
/// otherwise (limits are the operator's to set).
pub fn stream_config(name: &str) -> async_nats::jetstream::stream::Config {
    async_nats::jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![format!("{SUBJECT_PREFIX}.>")],
        ..Default::default()
    }
}

/// The subject of `collector`'s messages.
pub fn subject(collector: CollectorId) -> String {
    format!("{SUBJECT_PREFIX}.{}", collector.0)
}

/// The subject of `collector`'s heartbeats.
pub fn beat_subject(collector: CollectorId) -> String {
    format!("{SUBJECT_PREFIX}.{}.{BEAT_SUFFIX}", collector.0)
}

/// The last token of a heartbeat subject.
const BEAT_SUFFIX: &str = "beat";

/// The collector a subject (of records or of heartbeats) belongs to, if it is one of ours.
pub fn collector_of(subject: &str) -> Option<CollectorId> {
    let rest = subject.strip_prefix(SUBJECT_PREFIX)?.strip_prefix('.')?;
    let id = rest.strip_suffix(BEAT_SUFFIX).and_then(|r| r.strip_suffix('.')).unwrap_or(rest);
    id.parse().ok().map(CollectorId)
}

/// A message as the verifier reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// Record `seq` of the collector's log.
    Record {
        /// The collector.
        collector: CollectorId,
        /// Its sequence number in the collector's log.
        seq: u64,
        /// The record.
        record: LogRecord,
    },
    /// A heartbeat, after the records it covers.
    Heartbeat {
        /// The collector.
        collector: CollectorId,
        /// What it says.
        beat: Heartbeat,
    },
}

/// The headers and payload of record `seq` of `collector`.
pub fn record_message(
    collector: CollectorId,
    seq: u64,
    record: &LogRecord,
) -> Result<(HeaderMap, Bytes), ShipError> {
    let bytes = record.encode().map_err(|e| ShipError::Encode(e.to_string()))?;
    let mut headers = HeaderMap::new();
    headers.insert(KIND_HEADER, "record");
    headers.insert(SEQ_HEADER, seq.to_string().as_str());
    headers.insert(async_nats::header::NATS_MESSAGE_ID, format!("{}:{seq}", collector.0).as_str());
    Ok((headers, Bytes::from(bytes)))
}

/// The headers and payload of a heartbeat.
pub fn heartbeat_message(beat: &Heartbeat) -> Result<(HeaderMap, Bytes), ShipError> {
    let mut headers = HeaderMap::new();
    headers.insert(KIND_HEADER, "heartbeat");
    let json = serde_json::to_vec(beat).map_err(|e| ShipError::Encode(e.to_string()))?;
    Ok((headers, Bytes::from(json)))
}

/// Reads a message of `subject`; an error says what is wrong with it.
pub fn decode(subject: &str, headers: Option<&HeaderMap>, payload: &[u8]) -> Result<Incoming, ShipError> {
    let bad = |why: String| ShipError::BadMessage { subject: subject.to_owned(), why };
    let collector = collector_of(subject).ok_or_else(|| bad("not a krait.<collector> subject".into()))?;
    let header = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
    match header(KIND_HEADER).as_deref() {
        Some("record") => {
            let seq = header(SEQ_HEADER)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad(format!("a record without a numeric {SEQ_HEADER} header")))?;
            let record = LogRecord::decode(payload).map_err(|e| bad(format!("record {seq}: {e}")))?;
            Ok(Incoming::Record { collector, seq, record })
        }
        Some("heartbeat") => {
            let beat = serde_json::from_slice(payload).map_err(|e| bad(format!("heartbeat: {e}")))?;
            Ok(Incoming::Heartbeat { collector, beat })
        }
        other => Err(bad(format!("{KIND_HEADER} is {other:?}, not record or heartbeat"))),
    }
}

/// How far a stored message says shipping got: after a record, or what a heartbeat covered.
pub fn resume_after(last: &Incoming) -> u64 {
    match last {
        Incoming::Record { seq, .. } => seq + 1,
        Incoming::Heartbeat { beat, .. } => beat.below,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::{LoggedTxn, Outcome, SessionId, TxnId};

    #[test]
    fn a_record_and_a_heartbeat_read_back_as_sent() {
        let c = CollectorId(3);
        let record = LogRecord::Finished {
            txn: LoggedTxn::new(TxnId(9), SessionId(1), 0),
            outcome: Outcome::Committed,
            commit_ns: Some(5),
        };
        let (headers, payload) = record_message(c, 41, &record).unwrap();
        assert_eq!(headers.get(async_nats::header::NATS_MESSAGE_ID).unwrap().as_str(), "3:41");
        let got = decode(&subject(c), Some(&headers), &payload).unwrap();
        assert_eq!(got, Incoming::Record { collector: c, seq: 41, record });
        assert_eq!(resume_after(&got), 42);
        let beat = Heartbeat { below: 42, appended_before_ns: 7, read_at_ns: 8 };
        let (headers, payload) = heartbeat_message(&beat).unwrap();
        assert_eq!(beat_subject(c), "krait.3.beat");
        let got = decode(&beat_subject(c), Some(&headers), &payload).unwrap();
        assert_eq!(got, Incoming::Heartbeat { collector: c, beat });
        assert_eq!(resume_after(&got), 42);
    }

    #[test]
    fn a_message_that_is_not_ours_is_an_error_that_says_why() {
        let err = decode("other.3", None, b"").unwrap_err().to_string();
        assert!(err.contains("not a krait.<collector> subject"), "{err}");
        let err = decode("krait.3.other", None, b"").unwrap_err().to_string();
        assert!(err.contains("not a krait.<collector> subject"), "{err}");
        let err = decode("krait.3", None, b"").unwrap_err().to_string();
        assert!(err.contains("not record or heartbeat"), "{err}");
        let mut headers = HeaderMap::new();
        headers.insert(KIND_HEADER, "record");
        headers.insert(SEQ_HEADER, "4");
        let err = decode("krait.3", Some(&headers), b"\x01garbage").unwrap_err().to_string();
        assert!(err.contains("record 4"), "{err}");
    }
}
