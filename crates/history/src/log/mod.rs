//! The durable history log between the proxy and the verifier (DESIGN.md §3 "Durability").
//!
//! # What is written, and when
//!
//! For every transaction that reaches COMMIT, the proxy appends two records:
//! 1. an **intent** ([`LogRecord::Intent`], "commit pending": the transaction's ops, with key names and
//!    statement texts) before it forwards COMMIT to the database, and
//! 2. an **outcome** ([`LogRecord::Outcome`]: Committed or Aborted, and the commit timestamp) when the
//!    reply arrives. It forwards the reply to the client only after the outcome's [`DurabilityTicket`]
//!    resolves.
//!
//! A transaction with no commit phase (rolled back, or read-only and ended without COMMIT) is one
//! [`LogRecord::Finished`] record. Every record gets the next sequence number; the storage key is that
//! number as 8 big-endian bytes, so key order is append order and [`HistoryLog::tail`] reads in append
//! order.
//!
//! The log stores those three in their compact form ([`LogRecord::CompactIntent`],
//! [`LogRecord::CompactFinished`], [`LogRecord::CompactLateOps`]): each statement text and key namespace
//! is written once per open of the log, in a [`LogRecord::Statement`] or [`LogRecord::Namespace`] record
//! of its own just before the first record that cites it, and cited by that record's sequence number (see
//! [`compact`] for why that is sound across crashes, restarts and copies). Replay expands them back;
//! [`resolved`] does the same for tools that read the records themselves. Logs written before this still
//! read: their records are decoded as they were written.
//!
//! ```
//! use history::{
//!     Durability, HistoryLog, KeyName, LoggedOp, LoggedTxn, Outcome, SessionId, DiskLog, TxnId, WriteId,
//! };
//!
//! # fn main() -> Result<(), history::LogError> {
//! # let dir = tempfile::tempdir().unwrap();
//! let log = DiskLog::open(dir.path(), Durability::Strict)?;
//! // The proxy saw UPDATE … RETURNING xmin, then the client sent COMMIT.
//! let mut txn = LoggedTxn::new(TxnId(1), SessionId(3), 0);
//! txn.statements.push("UPDATE accounts SET balance = balance - 10 WHERE id = 7".into());
//! let row = KeyName { namespace: "accounts".into(), bytes: b"7".to_vec() };
//! txn.ops.push(LoggedOp::Write { key: row, write: WriteId(901), stmt: Some(0) });
//! let _ = log.append_intent(txn)?; // then forward COMMIT
//! // The database answered CommandComplete(COMMIT):
//! log.append_outcome(TxnId(1), Outcome::Committed, Some(1_700_000_000_000_000_000))?.wait()?;
//! // Only now does the client get its reply. Later, the verifier reads it all back:
//! let history = log.replay()?;
//! assert_eq!(history.transactions[0].outcome, Outcome::Committed);
//! # Ok(())
//! # }
//! ```
//!
//! # Durability settings
//!
//! - [`Durability::Strict`]: an outcome's ticket resolves only after an fsync that covers it. Concurrent
//!   sessions share fsyncs through group commit (see [`group_commit`]): a flusher thread covers every
//!   request that arrived during the previous fsync with the next one, and holds an fsync back briefly
//!   ([`LogOptions::commit_delay`]) while other COMMITs are in flight, so that it covers their outcomes
//!   too. Because the engine's fsync covers everything appended before it, an acknowledged outcome also
//!   makes every earlier intent durable, in particular the intent of any transaction whose writes the
//!   acknowledged one could have read.
//! - [`Durability::Group`]: tickets resolve at once; the flusher fsyncs at least every
//!   [`LogOptions::group_interval`] (10 ms by default).
//! - [`Durability::None`]: the log never fsyncs on its own (only on [`HistoryLog::sync`] and at close).
//!   For benchmarks only.
//!
//! # Recovery
//!
//! The log keeps a "run state" in its metadata: `running <durability>` from open until a clean
//! [`HistoryLog::close`], then `clean`. If `open` finds `running`, the previous run crashed, and `open`
//! appends one explicit [`LogRecord::Recovery`] record at the crash point, before anything new:
//! - it lists every intent without an outcome; they replay as Indeterminate, and the record tells a
//!   tailing verifier that no outcome will ever come for them;
//! - if the crashed run used `group` or `none`, it sets `gap`, and replay adds a [`crate::LogGap`], because
//!   acknowledged transactions may be missing after that point.
//!
//! Finding the pending intents scans the records appended since the previous open (the metadata
//! remember where that run started), not the whole log. A clean close with intents still pending writes a
//! Recovery record for them too (without a gap).
//!
//! The same scan finds the largest transaction id the crashed run used, so [`HistoryLog::txn_id_floor`]
//! tells a restarted proxy where to continue; a clean close stores it in the metadata.
//!
//! # Integrity
//!
//! Each record value carries a format version and a CRC-32 (see [`record`]). A value that fails either
//! check is reported as [`LogError::Corrupt`] with its sequence number, by `tail`, `replay` and the
//! recovery scan in `open`; nothing is skipped.
//!
//! # What the engine guarantees (and what it does not)
//!
//! [`DiskLog`] keeps new logs in the segment store ([`store::segments`]): records appended to files, made
//! durable with `fdatasync(2)`, the end a crash tore cut at the next open. So neither a process crash
//! (tested here with SIGKILL) nor a power loss loses anything acknowledged under `strict`, as far as the
//! drive honours the flush `fdatasync` sends it. Logs written before it stay on sled 0.34
//! ([`store::sled_store`]), whose `flush` syncs with `sync_file_range(2)`: that survives a process crash,
//! but flushes neither file metadata nor the drive's write cache, so a power loss may cost more there.

pub mod compact;
mod disk_log;
pub mod group_commit;
pub mod merge;
mod reader;
pub mod record;
pub mod replay;
pub mod retention;
pub mod store;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use compact::{CompactOp, CompactOps, CompactTxn, Resolver, resolved};
pub use disk_log::DiskLog;
pub use group_commit::{DurabilityTicket, DurableFuture, FSYNC_BUCKETS_US, LogStats};
pub use reader::LogReader;
pub use record::{
    BadStatementIndex, FORMAT_VERSION, LZ4_FORMAT_VERSION, LogRecord, LoggedOp, LoggedTxn, RecordError,
    ZSTD_FORMAT_VERSION, decode_framed, encode_framed, encode_framed_large,
};
pub use replay::{Earlier, IdMap, Replayed, ReplayedTail, ReplayedTxn, Replayer, TxnXids};

/// The bytes of every file under a log directory (0 for what cannot be read): what the log costs on disk,
/// for `/metrics` and for the history-size benchmark (Cobra Fig. 13).
pub fn disk_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

use crate::{History, IsolationLevel, KeyName, Outcome, RecordingHorizon, SessionId, TxnId, WriteId};

/// How hard the log works to keep acknowledged transactions across a crash (DESIGN.md §3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// A commit reply waits for the fsync of its outcome; concurrent sessions share each fsync.
    #[default]
    Strict,
    /// Replies go out at once; the log is fsynced within a bounded delay.
    Group,
    /// No fsync at all. For benchmarks only: a crash can lose anything.
    None,
}

impl Durability {
    /// The setting's name as configuration files spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Strict => "strict",
            Durability::Group => "group",
            Durability::None => "none",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A durability setting that is not `strict`, `group` or `none`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown durability {0:?}: expected strict, group or none")]
pub struct ParseDurabilityError(pub String);

impl FromStr for Durability {
    type Err = ParseDurabilityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Durability::Strict),
            "group" => Ok(Durability::Group),
            "none" => Ok(Durability::None),
            other => Err(ParseDurabilityError(other.to_owned())),
        }
    }
}

/// Settings for opening a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// The durability setting.
    pub durability: Durability,
    /// Under `group`, the longest time between an append and the fsync that covers it (plus the fsync's
    /// own duration).
    pub group_interval: Duration,
    /// The page cache size of sled, the engine of logs written before the segment store, in bytes.
    pub cache_bytes: u64,
    /// The segment store begins a new segment file once the current one holds this many bytes.
    pub segment_bytes: u64,
    /// Under `strict`, the longest an fsync that a commit waits for is held back while other transactions'
    /// COMMITs are in flight (their intents logged, their outcomes not yet), so that one fsync covers
    /// their outcomes too (the idea of PostgreSQL's `commit_delay`, taken only when there is a commit to
    /// wait for). Zero turns it off.
    pub commit_delay: Duration,
    /// A cut is taken at the first append with no intent pending once this many bytes of records were
    /// appended since the last ([`retention::Cut`]). Retention deletes up to a cut, so a quarter of a
    /// segment (the default) keeps at most about a segment more than the readers need.
    pub cut_every_bytes: u64,
}

impl LogOptions {
    /// Defaults for `durability`: a 10 ms group interval, a 64 MiB cache, 64 MiB segments, a 5 ms commit
    /// delay and a cut every 16 MiB.
    pub fn new(durability: Durability) -> Self {
        LogOptions {
            durability,
            group_interval: Duration::from_millis(10),
            cache_bytes: 64 << 20,
            segment_bytes: store::segments::SEGMENT_BYTES,
            commit_delay: Duration::from_millis(5),
            cut_every_bytes: store::segments::SEGMENT_BYTES / 4,
        }
    }
}

/// Why a log operation failed.
#[derive(Debug, Error)]
pub enum LogError {
    /// The storage engine failed.
    #[error("history log storage error: {0}")]
    Storage(String),
    /// Reading or writing the log's files failed.
    #[error("history log: {context}: {source}")]
    Io {
        /// What was being done, and to which file.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// A record failed its integrity checks.
    #[error("history log record {seq} is corrupt: {source}")]
    Corrupt {
        /// The record's sequence number.
        seq: u64,
        /// What is wrong with it.
        source: RecordError,
    },
    /// A storage key is not an 8-byte sequence number.
    #[error("history log key {key_hex} is not a sequence number (after record {after:?})")]
    BadKey {
        /// The key's bytes, in hex.
        key_hex: String,
        /// The last good sequence number before it, if any.
        after: Option<u64>,
    },
    /// The metadata the log keeps about itself is unreadable.
    #[error("history log metadata {key:?} is unreadable: {reason}")]
    Meta {
        /// The metadata key.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A record contradicts the records before it.
    #[error("history log record {seq}: {reason}")]
    Inconsistent {
        /// The record's sequence number.
        seq: u64,
        /// What it contradicts.
        reason: String,
    },
    /// An append that the log refused because it would make the log inconsistent.
    #[error("history log append refused: {0}")]
    Refused(String),
    /// An fsync failed. The log stops: nothing later can be acknowledged.
    #[error("history log fsync failed; the log accepts no more appends: {0}")]
    FsyncFailed(String),
    /// The log was closed.
    #[error("history log is closed")]
    Closed,
    /// Records asked for were deleted by retention ([`retention`]): the log now starts at `first`.
    #[error(
        "history log records {from}..{first} were deleted by retention ([log.retain]): the log now starts at \
         record {first}, and only the checkpoints stored in it (the verifier's, the proxy's version book) \
         reach back further"
    )]
    Compacted {
        /// The first record asked for.
        from: u64,
        /// The first record the log still holds.
        first: u64,
    },
    /// Another process holds the log open (its lock), most likely a proxy still running on it.
    #[error("history log {dir} is in use by another process (is a proxy still running on it?)")]
    Locked {
        /// The log's directory.
        dir: std::path::PathBuf,
    },
    /// The log cannot be opened where it lies: opening writes to its files (the run state, even to read;
    /// sled also rewrites its own metadata), so a full disk or a read-only directory stops it.
    #[error("history log {dir} cannot be opened: {reason}")]
    Unwritable {
        /// The log's directory.
        dir: std::path::PathBuf,
        /// What is wrong, and what to do.
        reason: String,
    },
}

impl From<sled::Error> for LogError {
    fn from(e: sled::Error) -> Self {
        LogError::Storage(e.to_string())
    }
}

/// Records in append order, with their sequence numbers; an item is an error where a record is unreadable.
pub type Tail<'a> = Box<dyn Iterator<Item = Result<(u64, LogRecord), LogError>> + Send + 'a>;

/// A durable, append-only log of transaction intents and outcomes. [`DiskLog`] is the implementation; the
/// trait lets another engine replace it (DESIGN.md §4).
pub trait HistoryLog: Send + Sync {
    /// Appends a transaction's "commit pending" intent. Call before forwarding COMMIT; the ticket need not
    /// be waited on (the outcome's fsync covers the intent too).
    fn append_intent(&self, txn: LoggedTxn) -> Result<DurabilityTicket, LogError>;

    /// Appends the outcome of an earlier intent. Under `strict`, wait on the ticket before forwarding the
    /// reply. Refused if `txn` has no pending intent from this run.
    fn append_outcome(
        &self,
        txn: TxnId,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<DurabilityTicket, LogError>;

    /// Appends ops of a pending intent's transaction that arrived after the intent (see
    /// [`LogRecord::LateOps`]); `statements` is the transaction's whole statement list now. Append it before
    /// the outcome, whose ticket then covers it. Refused if `txn` has no pending intent from this run.
    fn append_late_ops(
        &self,
        txn: TxnId,
        ops: Vec<LoggedOp>,
        statements: Vec<String>,
    ) -> Result<DurabilityTicket, LogError>;

    /// Appends a transaction that is already over, in one record.
    fn append_finished(
        &self,
        txn: LoggedTxn,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<DurabilityTicket, LogError>;

    /// Appends that a client session ended, after the records of all its transactions. The ticket need not
    /// be waited on: losing the record in a crash only delays garbage collection until the next run.
    fn append_session_ended(
        &self,
        session: SessionId,
        last_seq: Option<u64>,
    ) -> Result<DurabilityTicket, LogError>;

    /// Appends which sessions are open (see [`LogRecord::SessionsOpen`]): every session below `below` not
    /// in `open` must have appended its last record before this call. The ticket need not be waited on.
    fn append_sessions_open(
        &self,
        below: SessionId,
        open: Vec<SessionId>,
    ) -> Result<DurabilityTicket, LogError>;

    /// Appends the recording horizon (see [`LogRecord::HorizonSnapshot`]). Only the first one in a log counts. The
    /// ticket need not be waited on: a horizon lost in a crash is learnt again by the next run, and versions
    /// are classified against it only after it is known.
    fn append_horizon(&self, horizon: &RecordingHorizon) -> Result<DurabilityTicket, LogError>;

    /// Appends a write of `txn` that a later read discovered (see [`LogRecord::DiscoveredWrite`]). The ticket
    /// need not be waited on: the reader's own records come after it and carry its durability.
    fn append_discovered_write(
        &self,
        txn: TxnId,
        key: KeyName,
        write: WriteId,
    ) -> Result<DurabilityTicket, LogError>;

    /// Appends the database transaction ids of `txn` (see [`LogRecord::Xids`]). The ticket need not be
    /// waited on: the outcome's covers it.
    fn append_xids(&self, txn: TxnId, top: Option<u32>, xids: Vec<u32>)
    -> Result<DurabilityTicket, LogError>;

    /// Appends the outcome the database gave for a transaction an earlier run left without one (see
    /// [`LogRecord::Resolved`]).
    fn append_resolved(&self, txn: TxnId, outcome: Outcome) -> Result<DurabilityTicket, LogError>;

    /// Appends the isolation level `session`'s next transactions asked for (see [`LogRecord::Isolation`]),
    /// or with `None` that it is no longer known ([`LogRecord::IsolationUnknown`]). Append it before their
    /// records. The ticket need not be waited on: the transactions' records come after it and carry their
    /// durability.
    fn append_isolation(
        &self,
        session: SessionId,
        level: Option<IsolationLevel>,
    ) -> Result<DurabilityTicket, LogError>;

    /// The records from sequence number `from_seq` on, in append order. Under `group` and `none` it may
    /// return records not yet fsynced.
    fn tail(&self, from_seq: u64) -> Tail<'_>;

    /// The whole log as a history (see [`replay::replay`]).
    fn replay(&self) -> Result<History, LogError> {
        replay::replay(self.tail(0))
    }

    /// Blocks until everything appended so far is fsynced, whatever the durability setting.
    fn sync(&self) -> Result<(), LogError>;

    /// A ticket for the record of `ticket` that waits until an fsync covers it under `group` too: for a
    /// record whose loss costs more than its transaction, a fence's intent (the next fence would read a
    /// version no fence recorded, and garbage collection would stop for good). Under `strict` tickets
    /// already wait; under `none` the log fsyncs nothing on its own, and the ticket is returned as it is.
    fn fsynced(&self, ticket: DurabilityTicket) -> DurabilityTicket;

    /// The sequence number the next append will get.
    fn next_seq(&self) -> u64;

    /// Every record below this sequence number is covered by an fsync. A verifier that must never act on a
    /// record a crash could still take back tails only up to here.
    fn durable_below(&self) -> u64;

    /// One more than the largest transaction id in the log, counting this run's appends. A proxy that
    /// restarts allocates its transaction ids from here, since replay rejects a reused id; appends of an id
    /// below the floor found at open are refused.
    fn txn_id_floor(&self) -> TxnId;

    /// The durability setting the log was opened with.
    fn durability(&self) -> Durability;

    /// Fsync and append counters, for `/metrics`.
    fn stats(&self) -> LogStats;

    /// Why the log stopped accepting appends, once it has: an fsync or a write failed (a full disk, an I/O
    /// error). It is final for this open, as [`LogError::FsyncFailed`] says; opening the log again (a
    /// restart of the proxy, once the cause is fixed) runs crash recovery and appends resume.
    fn failure(&self) -> Option<String>;

    /// The checkpoint stored under `name` ([`HistoryLog::store_checkpoint`]), if any.
    fn checkpoint(&self, name: &str) -> Result<Option<Vec<u8>>, LogError>;

    /// Stores `bytes` under `name` in place of any earlier checkpoint of that name, durably: what a reader
    /// derived from the records below some sequence number, so that next time it reads only the records
    /// after it ([`record::encode_framed`] frames it with a checksum). The log never interprets it.
    fn store_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), LogError>;

    /// The first record the log holds: 0, unless retention deleted older ones ([`HistoryLog::compact`]).
    fn first_seq(&self) -> u64 {
        0
    }

    /// The latest [`retention::Cut`] whose records before it are all durable, if the log takes cuts.
    fn clean_cut(&self) -> Option<retention::Cut> {
        None
    }

    /// Deletes the oldest records below `keep_from`, whole segments at a time, as far as `retain` asks
    /// (see [`retention`]). A log whose engine cannot delete records (sled) deletes nothing.
    fn compact(&self, keep_from: u64, retain: &retention::Retain) -> Result<retention::Compaction, LogError> {
        let _ = (keep_from, retain);
        Ok(retention::Compaction { first_kept: self.first_seq(), ..Default::default() })
    }

    /// Makes everything durable and marks the log cleanly closed, so the next open records no crash.
    /// Later appends fail with [`LogError::Closed`]. Idempotent.
    fn close(&self) -> Result<(), LogError>;
}
