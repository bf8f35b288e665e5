//! The records of the durable log and their byte format.
//!
//! The proxy interns nothing, so the records it hands to the log carry key *names* ([`KeyName`]) and
//! statement *texts*; replay interns them (see [`super::replay`]). The log stores transaction records in
//! the compact encoding of [`super::compact`] (each statement text and namespace once, cited by sequence
//! number) and the reader expands them back, so what replay yields does not depend on the encoding.
//!
//! # Byte format of one record value
//!
//! ```text
//! offset 0      1                5
//!        ┌──────┬────────────────┬──────────────────────────────┐
//!        │ ver  │ crc32 (LE)     │ postcard payload (LogRecord) │
//!        └──────┴────────────────┴──────────────────────────────┘
//! ```
//!
//! - `ver` is [`FORMAT_VERSION`] for a plain payload, or [`ZSTD_FORMAT_VERSION`] for one compressed with
//!   zstd (its uncompressed length first as a little-endian `u32`, then one zstd frame without checksum or
//!   content size: the header's CRC covers it). A record is compressed when it is at least
//!   [`COMPRESS_FROM`] bytes and compression makes it smaller: small records (outcomes, ids) would only grow.
//! - [`LZ4_FORMAT_VERSION`] (the LZ4 block format behind the same length) is what logs written before zstd
//!   hold; it is still read, never written. zstd stores the same records about a fifth smaller than LZ4
//!   did: a transaction record is mostly short varints, enum tags and digits, which only an entropy coder
//!   shortens (LZ4 finds repeats, and a record repeats little within itself). Measured on logs of the four
//!   benchmark workloads; see `docs/benchmarks.md`, "What recording values costs the log".
//! - A reader meets a version it does not know as "written by a newer Krait", never as corruption. The
//!   header layout (one version byte, then a CRC-32 over the version byte and the payload) is frozen for
//!   every future version, so an old reader can always tell "corrupt" from "written by a newer Krait".
//! - The checksum is checked before the version, so a flipped version byte is reported as corruption.
//! - The payload is [postcard](https://docs.rs/postcard): serde with varint integers and no field names. It
//!   is compact (a typical one-row intent is well under 100 bytes), its format is specified and stable
//!   across postcard 1.x, and it decodes without `deserialize_any`, so every type here must be a plain
//!   struct or an externally tagged enum (no `#[serde(tag = ...)]`). That is why [`LoggedOp`] exists
//!   beside the model's [`crate::Op`].
//! - A payload must be consumed exactly; trailing bytes are an error, not ignored.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::Durability;
use super::compact::{CompactOps, CompactTxn};
use crate::values::{OpRow, StatementRun, TxnValues, Value};
use crate::{
    CollectorId, IsolationLevel, KeyName, KeyTable, Observed, Op, Outcome, RecordingHorizon, SessionId,
    StmtRef, Transaction, TxnId, UncheckedStatement, WriteId,
};

/// The version byte of a record value whose payload is plain postcard.
pub const FORMAT_VERSION: u8 = 1;

/// The version byte of a record value whose payload is postcard compressed with LZ4: read, no longer
/// written (see the module doc).
pub const LZ4_FORMAT_VERSION: u8 = 2;

/// The version byte of a record value whose payload is postcard compressed with zstd.
pub const ZSTD_FORMAT_VERSION: u8 = 3;

/// The smallest payload worth compressing: below it a zstd frame's own header eats what it saves.
pub const COMPRESS_FROM: usize = 128;

/// zstd's first fast level, below the regular ones: the proxy appends on its clients' path. Level 3 stored
/// the benchmark logs 2% smaller than level 1 for about 1.5× the CPU. Level 1 Huffman-codes every record's
/// literals, building its tables afresh for each small frame; level -1 does not. Under pgbench tpcb-like
/// with full recording, −1 cut the proxy's instructions per transaction by a tenth (zstd's own share from
/// 17% to 7%) for a log 1.6% larger.
const ZSTD_LEVEL: i32 = -1;

/// The largest payload a compressed record may expand to. No record comes near it (a record is one
/// transaction's ops); the bound keeps a forged length from allocating without limit.
pub const MAX_PAYLOAD_BYTES: usize = 256 << 20;

/// Bytes before the payload: the version byte and the CRC-32.
pub const HEADER_LEN: usize = 5;

/// One op as the proxy logs it: like [`crate::Op`], but naming its key instead of interning it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoggedOp {
    /// A read of `key` that observed one version.
    Read {
        /// The key read.
        key: KeyName,
        /// The version it returned.
        observed: Observed,
        /// Index into [`LoggedTxn::statements`] of the statement the read came from.
        stmt: Option<u32>,
    },
    /// A write of a new version of `key`.
    Write {
        /// The key written.
        key: KeyName,
        /// The identity of the new version.
        write: WriteId,
        /// Index into [`LoggedTxn::statements`] of the statement the write came from.
        stmt: Option<u32>,
    },
    /// A statement the proxy could not map to row reads and writes (an aggregate, a predicate read whose
    /// phantoms cannot be checked, DDL, COPY, a function call, …). It carries no key: it is logged so that
    /// reports can say plainly what was not checked (DESIGN.md §3). Appended last: postcard encodes variants
    /// by index, so logs written before it existed still decode.
    Opaque {
        /// Why it could not be mapped, as the proxy's `/metrics` labels it (`aggregate`, `predicate`, …).
        kind: String,
        /// Index into [`LoggedTxn::statements`] of the statement.
        stmt: Option<u32>,
    },
    /// A statement run's values (issue 18, [`crate::values`]): the parameters it was bound with and the
    /// columns of the rows it returned. Written before the ops of its rows. Not an op of the model: replay
    /// turns it into a [`StatementRun`]. Appended last, so logs written before it existed still decode.
    Run {
        /// Index into [`LoggedTxn::statements`] of the statement.
        stmt: Option<u32>,
        /// Its parameters, empty for a simple-protocol statement.
        params: Vec<Value>,
        /// The names of the columns of its rows, when a row description was seen.
        columns: Vec<String>,
    },
    /// The row behind the last `ops` reads and writes before it (one row may be a read of several tables'
    /// versions), as values of the columns of the last [`LoggedOp::Run`] before it. Not an op of the model:
    /// replay turns it into an [`OpRow`] per op. Appended last, so logs written before it existed still
    /// decode.
    Row {
        /// How many of the reads and writes just before it the row is behind.
        ops: u32,
        /// One value per column.
        values: Vec<Value>,
    },
}

impl LoggedOp {
    /// The statement index this op refers to, if any.
    pub fn stmt(&self) -> Option<u32> {
        match self {
            LoggedOp::Read { stmt, .. }
            | LoggedOp::Write { stmt, .. }
            | LoggedOp::Opaque { stmt, .. }
            | LoggedOp::Run { stmt, .. } => *stmt,
            LoggedOp::Row { .. } => None,
        }
    }

    /// Whether it is a read or write of a row, an op of the model.
    pub fn is_row_op(&self) -> bool {
        matches!(self, LoggedOp::Read { .. } | LoggedOp::Write { .. })
    }
}

/// A transaction as the proxy logs it, before its outcome is known: everything of a
/// [`crate::Transaction`] except the outcome and the commit timestamp.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedTxn {
    /// Unique within the history.
    pub id: TxnId,
    /// The session that ran it.
    pub session: SessionId,
    /// Its position within the session, counting from 0.
    pub seq: u64,
    /// Reads and writes, in the order issued.
    pub ops: Vec<LoggedOp>,
    /// The statement texts the ops refer to by index. Local to this transaction; replay adds them to the
    /// history (once per distinct text) and rewrites the indices into [`crate::StmtRef`]s.
    pub statements: Vec<String>,
    /// When it started, in nanoseconds since the Unix epoch, by the collector's clock.
    pub start_ns: Option<u64>,
    /// The collector whose clock took the timestamps.
    pub collector: CollectorId,
    /// Whether this is a fence transaction (Cobra §4.2).
    pub fence: bool,
}

impl LoggedTxn {
    /// An empty transaction with no ops, statements or timestamps.
    pub fn new(id: TxnId, session: SessionId, seq: u64) -> Self {
        LoggedTxn {
            id,
            session,
            seq,
            ops: Vec::new(),
            statements: Vec::new(),
            start_ns: None,
            collector: CollectorId::default(),
            fence: false,
        }
    }

    /// The transaction in the verifier's model, with the statements it could not map. Keys are interned in
    /// `keys`; a statement text is interned through `intern_statement` once per transaction, the first time
    /// one of its ops cites it. The log's one reader, [`super::Replayer`], uses this, offline and online
    /// alike.
    pub fn into_transaction(
        self,
        outcome: Outcome,
        commit_ns: Option<u64>,
        keys: &mut KeyTable,
        mut intern_statement: impl FnMut(&str) -> StmtRef,
    ) -> Result<(Transaction, Vec<UncheckedStatement>), BadStatementIndex> {
        let mut refs: Vec<Option<StmtRef>> = vec![None; self.statements.len()];
        let mut ops = Vec::with_capacity(self.ops.len());
        let mut unchecked = Vec::new();
        let mut values = TxnValues::default();
        for op in self.ops {
            match op {
                LoggedOp::Opaque { kind, stmt: index } => {
                    // Not an op of the model: its text goes with it, not into the statement table.
                    let statement = index.and_then(|i| self.statements.get(i as usize)).cloned();
                    unchecked.push(UncheckedStatement { txn: self.id, kind, statement });
                    continue;
                }
                LoggedOp::Row { ops: n, values: row } => {
                    // Behind the last `n` ops, as values of the last run's columns.
                    let Some(run) = values.runs.len().checked_sub(1) else { continue };
                    let first = ops.len().saturating_sub(n as usize);
                    for op in first..ops.len() {
                        values.rows.push(OpRow { op: op as u32, run: run as u32, values: row.clone() });
                    }
                    continue;
                }
                _ => {}
            }
            let stmt = match op.stmt() {
                None => None,
                Some(i) => {
                    let slot = refs.get_mut(i as usize).ok_or(BadStatementIndex {
                        txn: self.id,
                        index: i,
                        statements: self.statements.len(),
                    })?;
                    if slot.is_none() {
                        *slot = Some(intern_statement(&self.statements[i as usize]));
                    }
                    *slot
                }
            };
            match op {
                LoggedOp::Read { key, observed, .. } => {
                    ops.push(Op::Read { key: keys.intern(key), observed, stmt })
                }
                LoggedOp::Write { key, write, .. } => {
                    ops.push(Op::Write { key: keys.intern(key), write, stmt })
                }
                LoggedOp::Run { params, columns, .. } => {
                    values.runs.push(StatementRun { stmt, params, columns, before_op: ops.len() as u32 })
                }
                LoggedOp::Opaque { .. } | LoggedOp::Row { .. } => {}
            }
        }
        let txn = Transaction {
            id: self.id,
            session: self.session,
            seq: self.seq,
            ops,
            outcome,
            start_ns: self.start_ns,
            commit_ns,
            collector: self.collector,
            fence: self.fence,
            isolation: None,
            values: (!values.is_empty()).then(|| Box::new(values)),
        };
        Ok((txn, unchecked))
    }
}

/// A logged op cites a statement its transaction did not log: the record contradicts itself.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{txn} has an op citing statement {index}, but logs only {statements} statements")]
pub struct BadStatementIndex {
    /// The transaction.
    pub txn: TxnId,
    /// The statement index the op cites.
    pub index: u32,
    /// How many statements the transaction logged.
    pub statements: usize,
}

/// One entry of the durable log. Sequence numbers are not part of the record; they are its key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogRecord {
    /// "Commit pending": written before the proxy forwards COMMIT. An outcome record follows when the
    /// reply arrives; if none ever does, the transaction is Indeterminate.
    Intent(LoggedTxn),
    /// The outcome of an earlier [`LogRecord::Intent`].
    Outcome {
        /// The transaction whose intent this resolves.
        txn: TxnId,
        /// How it ended. `Indeterminate` is allowed: the proxy may lose the upstream connection while
        /// COMMIT is in flight.
        outcome: Outcome,
        /// When the commit was acknowledged, by the collector's clock.
        commit_ns: Option<u64>,
    },
    /// A transaction logged in one append, with no commit phase to wait for: one that rolled back, or a
    /// read-only one that ended without COMMIT.
    Finished {
        /// The transaction.
        txn: LoggedTxn,
        /// How it ended.
        outcome: Outcome,
        /// When it ended, by the collector's clock.
        commit_ns: Option<u64>,
    },
    /// Written when the log is opened after a crash (or closed with intents still pending): it marks the
    /// crash point. Listed intents will never get an outcome and replay as Indeterminate.
    Recovery {
        /// Intents that had no outcome when the previous run ended.
        indeterminate: Vec<TxnId>,
        /// Whether acknowledged appends may have been lost: the previous run crashed under `group` or
        /// `none` durability. Replay turns it into a [`crate::LogGap`].
        gap: bool,
        /// The durability setting of the run that ended here, if it was known.
        previous: Option<Durability>,
    },
    /// Written when a client session ends (connection closed, failed, or proxy shutdown), after the
    /// records of all its transactions, including the one open at disconnect. It lets an online verifier
    /// stop waiting for the session, so that a quiet session does not hold `epoch_agree` (and so garbage
    /// collection) back for ever (the verifier's `OnlineVerifier::session_ended`). Appended last to the enum: postcard encodes variants by
    /// index, so logs written before it existed still decode.
    SessionEnded {
        /// The session that ended.
        session: SessionId,
        /// The position in session order of the session's last logged transaction; `None` if it logged none.
        last_seq: Option<u64>,
    },
    /// Ops of a transaction whose intent was already logged, written just before its outcome. An
    /// autocommit statement (or a COMMIT in the same query string as its statements) may commit as it
    /// runs, so its intent goes to the log before the statement is forwarded, and its rows arrive after.
    /// Appended last to the enum, so logs written before it existed still decode.
    LateOps {
        /// The transaction, whose intent is pending.
        txn: TxnId,
        /// The ops that arrived after the intent, in order.
        ops: Vec<LoggedOp>,
        /// The transaction's whole statement list now (the intent's, plus any added since), which the ops'
        /// statement indices refer to.
        statements: Vec<String>,
    },
    /// The recording horizon as proxies wrote it before [`LogRecord::HorizonSnapshot`]: only the
    /// snapshot's `xmin`. Still read ([`RecordingHorizon::from_xmin`]); no longer written.
    Horizon {
        /// The 64-bit transaction id (PostgreSQL's `xid8`).
        xid: u64,
    },
    /// The recording horizon (DESIGN.md §3): the database's snapshot when this log's recording began.
    /// Written once, by the first run that learns it; later runs read it back, so that versions written in
    /// a crash window stay unrecorded writers instead of becoming pre-history. Appended last to the enum,
    /// so logs written before it existed still decode.
    HorizonSnapshot(RecordingHorizon),
    /// A write the proxy learnt of after the fact (DESIGN.md §3, "every version has an owner"): a read
    /// found a version of `key` stamped with a database transaction id that belongs to the recorded
    /// transaction `txn`, which wrote it through something the proxy could not map (a SQL function, a
    /// trigger). Logged by the reading session before any record of its own that cites `write`; a version
    /// read by several sessions may be logged once by each. Appended last to the enum, so logs written
    /// before it existed still decode.
    DiscoveredWrite {
        /// The transaction that wrote the version; it has an intent (pending or finished) earlier in the log.
        txn: TxnId,
        /// The key written.
        key: KeyName,
        /// The identity of the version.
        write: WriteId,
    },
    /// The database transaction ids (32 bits, as a row's `xmin` shows them) of a recorded transaction,
    /// appended after its intent (or finished record) and again when more are learnt before its outcome. A
    /// restarted proxy owns them again (discovered writes across restarts) and resolves a transaction left
    /// Indeterminate by a crash through its `top` id. Appended last to the enum, so logs written before it
    /// existed still decode.
    Xids {
        /// The transaction.
        txn: TxnId,
        /// Its top-level id, if known (a subtransaction's id can be aborted while its transaction commits).
        top: Option<u32>,
        /// Every id it owns (the top-level one among them), as far as known.
        xids: Vec<u32>,
    },
    /// The outcome of a transaction that an earlier run left without one (a crash, or a lost connection,
    /// while its COMMIT was in flight), learnt from the database after a restart (`pg_xact_status`). Only
    /// `Committed` or `Aborted`. Appended last to the enum, so logs written before it existed still decode.
    Resolved {
        /// The transaction.
        txn: TxnId,
        /// How it ended.
        outcome: Outcome,
    },
    /// The isolation level a session's transactions asked for from here on: every transaction of `session`
    /// whose record comes after this one, until the session's next such record (issue 17, the `declared`
    /// level). The proxy writes one before a session's first transaction and again whenever the level
    /// changes, not one per transaction. Appended last to the enum, so logs written before it existed still
    /// decode; their transactions have no recorded level.
    Isolation {
        /// The session.
        session: SessionId,
        /// The level its next transactions asked for.
        level: IsolationLevel,
    },
    /// A statement text, written once (per open of the log, at most once more each time the writer's table
    /// of texts fills) before the first record that cites it. Records cite it by this record's sequence
    /// number (see [`super::compact`]). Appended last to the enum, so logs written before it existed
    /// still decode.
    Statement {
        /// The text.
        text: String,
    },
    /// A key namespace (a table's name), written once as [`LogRecord::Statement`] is. Appended last to the
    /// enum, so logs written before it existed still decode.
    Namespace {
        /// The name.
        name: String,
    },
    /// [`LogRecord::Intent`] in the compact encoding, which the log writes instead: statement texts and
    /// namespaces cited by the sequence numbers of their definitions. Appended last to the enum, so logs
    /// written before it existed still decode.
    CompactIntent(CompactTxn),
    /// [`LogRecord::Finished`] in the compact encoding, which the log writes instead. Appended last to the
    /// enum, so logs written before it existed still decode.
    CompactFinished {
        /// The transaction.
        txn: CompactTxn,
        /// How it ended.
        outcome: Outcome,
        /// When it ended, by the collector's clock.
        commit_ns: Option<u64>,
    },
    /// [`LogRecord::LateOps`] in the compact encoding, which the log writes instead. Appended last to the
    /// enum, so logs written before it existed still decode.
    CompactLateOps {
        /// The transaction, whose intent is pending.
        txn: TxnId,
        /// The ops that arrived after the intent, and the transaction's whole statement list now.
        ops: CompactOps,
    },
    /// A session's isolation level became one the proxy could not follow (`set_config` with a computed
    /// value, a level it could not parse): its transactions whose records come after this one have no
    /// recorded level, until its next [`LogRecord::Isolation`]. Without it they would inherit the level
    /// last recorded, and `declared` would hold them to a level they may not have asked for: a false
    /// reject if it was stronger, a false accept if weaker. Appended last to the enum, so logs written
    /// before it existed still decode.
    IsolationUnknown {
        /// The session.
        session: SessionId,
    },
    /// The writer forgot the rows it could cite (see [`super::compact`]): no record after this one cites a
    /// row written before it, so the reader forgets them too and its memory stays bounded. Appended last to
    /// the enum, so logs written before it existed still decode.
    RowsForgotten,
    /// The column names of statement runs' rows, written once as [`LogRecord::Statement`] is and cited
    /// by this record's sequence number (see [`super::compact`]). Appended last to the enum, so logs
    /// written before it existed still decode.
    Columns {
        /// The names, in column order.
        names: Vec<String>,
    },
    /// Which of the run's sessions are open, written every few seconds by a proxy that ships its log: every
    /// session below `below` (of this run or an earlier one) that is not in `open` has logged its last
    /// record, its end included, before this one. A reader that lost a session's end in a hole of a shipped
    /// log ([`super::Replayer::skip_to`]) ends the session here; without it the session would stay open for
    /// ever and hold `epoch_agree`, and so garbage collection, back (issue 21). In a whole log it ends
    /// nothing: every session it leaves out has ended already. Appended last to the enum, so logs written
    /// before it existed still decode.
    SessionsOpen {
        /// Every session id below this one had been taken when the list was made; later ones are not in it.
        below: SessionId,
        /// The sessions below `below` still open, in id order.
        open: Vec<SessionId>,
    },
    /// The writer started a new table of texts (see [`super::compact`]): no record after this one cites a
    /// statement, namespace or column definition before it, so the reader forgets them and its memory
    /// stays bounded, as at [`LogRecord::RowsForgotten`]. Without it a reader kept every text the log ever
    /// defined: with clients that put their values in the text (the simple protocol), one per statement
    /// run. Appended last to the enum, so logs written before it existed still decode.
    TextsForgotten,
}

/// Why a record value could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RecordError {
    /// The value is shorter than the fixed header.
    #[error("record is truncated: {len} bytes, the header alone needs {HEADER_LEN}")]
    Truncated {
        /// The value's length.
        len: usize,
    },
    /// The stored checksum does not match the bytes.
    #[error("record checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// The record was written in a format this build does not read.
    #[error(
        "record format version {found} is not supported (this build reads versions {FORMAT_VERSION} to \
         {ZSTD_FORMAT_VERSION}); was the log written by a newer Krait?"
    )]
    Version {
        /// The version byte found.
        found: u8,
    },
    /// The payload does not decode as a record.
    #[error("record payload is malformed: {reason}")]
    Malformed {
        /// The decoder's explanation.
        reason: String,
    },
    /// The payload decoded but bytes were left over.
    #[error("record payload has {count} trailing bytes")]
    Trailing {
        /// How many bytes were left.
        count: usize,
    },
    /// The record could not be serialized (does not happen for well-formed values; kept as an error rather
    /// than a panic).
    #[error("record could not be encoded: {reason}")]
    Encode {
        /// The encoder's explanation.
        reason: String,
    },
}

fn checksum(version: u8, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[version]);
    hasher.update(payload);
    hasher.finalize()
}

/// Whether `bytes` begins with a whole header whose checksum matches the rest (the version is not looked
/// at): how the log's storage tells a whole last record from one a crash tore.
pub fn header_checks_out(bytes: &[u8]) -> bool {
    bytes.split_at_checked(HEADER_LEN).is_some_and(|(header, payload)| {
        u32::from_le_bytes([header[1], header[2], header[3], header[4]]) == checksum(header[0], payload)
    })
}

/// Puts the header (version byte and checksum) in front of `payload`. [`LogRecord::encode`] uses it; tests
/// and fuzzers use it to wrap arbitrary payloads, so that the decoder gets past the checksum.
pub fn frame(version: u8, payload: &[u8]) -> Vec<u8> {
    frame_after(&[], version, payload)
}

/// `prefix`, then [`frame`]'s header and `payload`, in one buffer of the right size.
fn frame_after(prefix: &[u8], version: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + HEADER_LEN + payload.len());
    out.extend_from_slice(prefix);
    out.push(version);
    out.extend_from_slice(&checksum(version, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload as a record stores it, with its format version: compressed from [`COMPRESS_FROM`] bytes on
/// when that makes it smaller, as it is otherwise. The uncompressed encoding is let go of once compressed.
fn stored_payload(payload: Vec<u8>) -> Result<(u8, Vec<u8>), RecordError> {
    Ok(match compressed_if_smaller(&payload)? {
        Some(compressed) => (ZSTD_FORMAT_VERSION, compressed),
        None => (FORMAT_VERSION, payload),
    })
}

/// `payload` as a [`ZSTD_FORMAT_VERSION`] record stores it, where it is at least [`COMPRESS_FROM`] bytes
/// and compression makes it smaller; `None` where it is to be stored as it is.
fn compressed_if_smaller(payload: &[u8]) -> Result<Option<Vec<u8>>, RecordError> {
    if payload.len() < COMPRESS_FROM {
        return Ok(None);
    }
    Ok(Some(compress(payload)?).filter(|c| c.len() < payload.len()))
}

/// `prefix`, then `value` as [`encode_framed`] frames it, in one buffer, for a large value (a checkpoint
/// of a whole state): it sizes the encoding first (a second pass over the value, which a small record would
/// not repay) instead of growing a buffer by doubling, lets go of the encoding once compressed, and frames
/// straight into the buffer it returns. A checkpoint of millions of known versions held up to four copies
/// of itself at once, and each one showed as a jump in `krait serve`'s resident memory.
pub fn encode_framed_large<T: Serialize>(prefix: &[u8], value: &T) -> Result<Vec<u8>, RecordError> {
    let failed = |e: postcard::Error| RecordError::Encode { reason: e.to_string() };
    let size = postcard::experimental::serialized_size(value).map_err(failed)?;
    let payload = postcard::to_extend(value, Vec::with_capacity(size)).map_err(failed)?;
    let (version, body) = stored_payload(payload)?;
    Ok(frame_after(prefix, version, &body))
}

/// Serializes `value` as a record is, with the header: for what the log stores beside its records
/// ([`super::HistoryLog::store_checkpoint`]).
///
/// The payload is serialized into a buffer this thread keeps (a record is framed into a buffer of its own
/// size anyway): grown from empty for every record, a one-row transaction's payload reallocated five or six
/// times on the proxy's path.
pub fn encode_framed<T: Serialize>(value: &T) -> Result<Vec<u8>, RecordError> {
    PAYLOAD.with_borrow_mut(|kept| {
        let mut scratch = std::mem::take(kept);
        scratch.clear();
        let payload =
            postcard::to_extend(value, scratch).map_err(|e| RecordError::Encode { reason: e.to_string() })?;
        let framed = match &compressed_if_smaller(&payload)? {
            Some(body) => frame(ZSTD_FORMAT_VERSION, body),
            None => frame(FORMAT_VERSION, &payload),
        };
        if payload.capacity() <= KEPT_PAYLOAD_BYTES {
            *kept = payload;
        }
        Ok(framed)
    })
}

/// The largest payload buffer a thread keeps for its next record ([`encode_framed`]): a rare large record
/// (a transaction of thousands of rows) is not held on to.
const KEPT_PAYLOAD_BYTES: usize = 64 << 10;

thread_local! {
    /// The buffer [`encode_framed`] serializes into, kept between records.
    static PAYLOAD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// One zstd context per thread, reused: making one per record would cost more than compressing it.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// A [`ZSTD_FORMAT_VERSION`] payload: `payload`'s length, then its zstd frame.
fn compress(payload: &[u8]) -> Result<Vec<u8>, RecordError> {
    let failed = |e: std::io::Error| RecordError::Encode { reason: format!("zstd: {e}") };
    let len = u32::try_from(payload.len())
        .map_err(|_| RecordError::Encode { reason: format!("a payload of {} bytes", payload.len()) })?;
    COMPRESSOR.with_borrow_mut(|slot| {
        let compressor = match slot {
            Some(c) => c,
            None => {
                use zstd::zstd_safe::CParameter;
                let mut c = zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(failed)?;
                // The header's CRC covers the frame, and the length is ours: no need for zstd's own.
                c.set_parameter(CParameter::ChecksumFlag(false)).map_err(failed)?;
                c.set_parameter(CParameter::ContentSizeFlag(false)).map_err(failed)?;
                c.set_parameter(CParameter::DictIdFlag(false)).map_err(failed)?;
                slot.insert(c)
            }
        };
        let mut out = vec![0; 4 + zstd::zstd_safe::compress_bound(payload.len())];
        out[..4].copy_from_slice(&len.to_le_bytes());
        let written = compressor.compress_to_buffer(payload, &mut out[4..]).map_err(failed)?;
        out.truncate(4 + written);
        Ok(out)
    })
}

/// The postcard payload of a compressed record (`version` [`LZ4_FORMAT_VERSION`] or
/// [`ZSTD_FORMAT_VERSION`]): its stated length checked against [`MAX_PAYLOAD_BYTES`] before anything is
/// allocated, and against what the frame really expands to.
fn decompress(version: u8, compressed: &[u8]) -> Result<Vec<u8>, RecordError> {
    let malformed = |reason: String| RecordError::Malformed { reason };
    let (len, block) = compressed
        .split_first_chunk::<4>()
        .ok_or_else(|| malformed("a compressed payload without its length".into()))?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_PAYLOAD_BYTES {
        return Err(malformed(format!(
            "a compressed payload states {len} bytes, above the {MAX_PAYLOAD_BYTES} a record may take"
        )));
    }
    let mut payload = vec![0; len];
    let written = if version == LZ4_FORMAT_VERSION {
        lz4_flex::block::decompress_into(block, &mut payload)
            .map_err(|e| malformed(format!("a compressed payload does not expand: {e}")))?
    } else {
        DECOMPRESSOR.with_borrow_mut(|slot| {
            let decompressor = match slot {
                Some(d) => d,
                None => slot.insert(
                    zstd::bulk::Decompressor::new()
                        .map_err(|e| malformed(format!("no zstd decompressor: {e}")))?,
                ),
            };
            // Into exactly `len` bytes: a frame that would expand further fails instead of growing.
            decompressor
                .decompress_to_buffer(block, &mut payload[..])
                .map_err(|e| malformed(format!("a compressed payload does not expand to {len} bytes: {e}")))
        })?
    };
    if written != len {
        return Err(malformed(format!("a compressed payload states {len} bytes but expands to {written}")));
    }
    Ok(payload)
}

/// Decodes what [`encode_framed`] wrote, checking the header. Never panics, whatever the bytes.
pub fn decode_framed<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RecordError> {
    let (header, payload) =
        bytes.split_at_checked(HEADER_LEN).ok_or(RecordError::Truncated { len: bytes.len() })?;
    let version = header[0];
    let stored = u32::from_le_bytes([header[1], header[2], header[3], header[4]]);
    let computed = checksum(version, payload);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    let expanded;
    let payload = match version {
        FORMAT_VERSION => payload,
        LZ4_FORMAT_VERSION | ZSTD_FORMAT_VERSION => {
            expanded = decompress(version, payload)?;
            &expanded[..]
        }
        _ => return Err(RecordError::Version { found: version }),
    };
    let (value, rest) = postcard::take_from_bytes::<T>(payload)
        .map_err(|e| RecordError::Malformed { reason: e.to_string() })?;
    if !rest.is_empty() {
        return Err(RecordError::Trailing { count: rest.len() });
    }
    Ok(value)
}

impl LogRecord {
    /// Serializes the record with its header (see the module doc).
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        encode_framed(self)
    }

    /// Decodes a record value. Never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<LogRecord, RecordError> {
        decode_framed(bytes)
    }

    /// The transaction this record is about, if it is about one.
    pub fn txn_id(&self) -> Option<TxnId> {
        match self {
            LogRecord::Intent(txn) | LogRecord::Finished { txn, .. } => Some(txn.id),
            LogRecord::CompactIntent(txn) | LogRecord::CompactFinished { txn, .. } => Some(txn.id),
            LogRecord::Outcome { txn, .. }
            | LogRecord::LateOps { txn, .. }
            | LogRecord::CompactLateOps { txn, .. }
            | LogRecord::DiscoveredWrite { txn, .. }
            | LogRecord::Xids { txn, .. }
            | LogRecord::Resolved { txn, .. } => Some(*txn),
            LogRecord::Recovery { .. }
            | LogRecord::SessionEnded { .. }
            | LogRecord::Horizon { .. }
            | LogRecord::HorizonSnapshot(_)
            | LogRecord::Isolation { .. }
            | LogRecord::IsolationUnknown { .. }
            | LogRecord::Statement { .. }
            | LogRecord::Namespace { .. }
            | LogRecord::RowsForgotten
            | LogRecord::Columns { .. }
            | LogRecord::SessionsOpen { .. }
            | LogRecord::TextsForgotten => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> KeyName {
        KeyName { namespace: "t".into(), bytes: s.as_bytes().to_vec() }
    }

    #[test]
    fn a_logged_transaction_converts_with_its_unchecked_statements() {
        let mut logged = LoggedTxn::new(TxnId(7), SessionId(1), 0);
        logged.statements = vec!["SELECT v FROM t WHERE k = 1".into(), "SELECT sum(v) FROM t".into()];
        logged.ops = vec![
            LoggedOp::Read { key: key("1"), observed: Observed::PreHistory(0), stmt: Some(0) },
            LoggedOp::Opaque { kind: "aggregate".into(), stmt: Some(1) },
            LoggedOp::Write { key: key("1"), write: WriteId(9), stmt: Some(0) },
        ];
        let mut keys = KeyTable::default();
        let mut interned = Vec::new();
        let (txn, unchecked) = logged
            .into_transaction(Outcome::Committed, Some(5), &mut keys, |text| {
                interned.push(text.to_owned());
                StmtRef(interned.len() as u32 - 1)
            })
            .unwrap();
        // Both row ops cite statement 0, which is interned once; the aggregate is not an op.
        assert_eq!(interned, vec!["SELECT v FROM t WHERE k = 1".to_owned()]);
        assert_eq!(txn.ops.len(), 2);
        assert_eq!(txn.ops.iter().map(|op| op.stmt()).collect::<Vec<_>>(), vec![Some(StmtRef(0)); 2]);
        assert_eq!((txn.id, txn.outcome, txn.commit_ns), (TxnId(7), Outcome::Committed, Some(5)));
        assert_eq!(unchecked.len(), 1);
        assert_eq!(unchecked[0].kind, "aggregate");
        assert_eq!(unchecked[0].statement.as_deref(), Some("SELECT sum(v) FROM t"));
    }

    /// The large-value path frames exactly as the record path does, after its prefix: compressed, and not.
    #[test]
    fn a_large_value_frames_as_a_record_does_after_its_prefix() {
        let compressible: Vec<u64> = (0..10_000).map(|i| i % 7).collect();
        let small = vec![1u64, 2, 3];
        for value in [&compressible, &small] {
            let framed = encode_framed(value).unwrap();
            for prefix in [&b""[..], &b"krai"[..]] {
                let large = encode_framed_large(prefix, value).unwrap();
                assert_eq!(&large[..prefix.len()], prefix);
                assert_eq!(&large[prefix.len()..], &framed[..]);
                assert_eq!(decode_framed::<Vec<u64>>(&large[prefix.len()..]).unwrap(), *value);
            }
        }
        assert_eq!(encode_framed(&compressible).unwrap()[0], ZSTD_FORMAT_VERSION, "the first is compressed");
    }

    #[test]
    fn an_op_citing_a_statement_that_was_not_logged_is_an_error() {
        let mut logged = LoggedTxn::new(TxnId(3), SessionId(1), 0);
        logged.statements = vec!["SELECT 1".into()];
        logged.ops = vec![LoggedOp::Write { key: key("1"), write: WriteId(1), stmt: Some(4) }];
        let err = logged
            .into_transaction(Outcome::Committed, None, &mut KeyTable::default(), |_| StmtRef(0))
            .unwrap_err();
        assert_eq!(err, BadStatementIndex { txn: TxnId(3), index: 4, statements: 1 });
    }
}
