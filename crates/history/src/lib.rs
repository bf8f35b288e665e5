//! The history model that the proxy and the verifier share (DESIGN.md §3), its codecs, and the durable log
//! between them.

mod builder;
pub mod codec;
pub mod html;
pub mod log;
mod model;
pub mod plain;
pub mod values;
mod write_ids;

pub use builder::{HistoryBuilder, TxnBuilder};
pub use codec::{CodecError, Format, read_history, write_history};
pub use log::{DiskLog, Durability, HistoryLog, LogError, LogRecord, LoggedOp, LoggedTxn};
pub use model::{
    ClockBounds, CollectorId, History, HistoryStats, IsolationLevel, Key, KeyName, KeyTable, LogGap,
    Observed, Op, Outcome, RecordingHorizon, SessionId, SnapshotParseError, StmtRef, Transaction, TxnId,
    UncheckedStatement, WriteId, now_ns,
};
pub use write_ids::WriteIdMap;

/// A hash map for the hot paths of recording and verifying: keyed by write ids, keys, statement texts and
/// names, looked up at every op or statement, where SipHash cost 180–400 instructions a lookup (and about 7%
/// of `verify --rounds` on chengRW). foldhash is seeded per process, so keys a client can influence cannot
/// be chosen to collide.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// See [`FastMap`].
pub type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
