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
