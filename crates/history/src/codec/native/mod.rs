//! The native history format: compact, binary, checksummed, and exact.
//!
//! # Layout (version 1)
//!
//! ```text
//! magic "\0KRHIST" (7 bytes) · version (1 byte)
//! chunk*  where chunk = tag (1 byte) · payload length (varint) · payload · CRC-32 of tag+payload (4 bytes, LE)
//! ```
//!
//! From version 3 each chunk's CRC-32 covers the version byte first (version+tag+payload), so a flipped
//! version byte that names another readable version is still caught.
//!
//! The chunks come in this order; a section with no items has no chunk, and a long section is split over
//! several chunks of about 64 KiB, each holding whole items:
//!
//! | tag | payload |
//! |---|---|
//! | `H` | counts: statements, namespaces, keys, transactions, gaps (varints); from version 2, then 0 or 1 and the recording horizon if 1 (version 2: its xmin; from 3: xmin, xmax, the count of running ids and the ids); from version 4, then the count of isolation-level runs |
//! | `S` | statement texts: length + UTF-8 bytes each |
//! | `N` | namespaces of the key table: length + UTF-8 bytes each |
//! | `K` | the key table as runs: count, namespace index, key length, then `count × length` key bytes |
//! | `T` | transactions (below) |
//! | `G` | gaps: `after_txns` as zigzag deltas |
//! | `L` | (version 4 on) isolation levels: runs of transactions in file order, each a count (varint) and a level byte (0 none, 1 read uncommitted, 2 read committed, 3 repeatable read, 4 serializable); the counts sum to the transaction count. The header says how many runs; a history without levels has none, and no chunk |
//! | `E` | empty: the end. Nothing may follow it. |
//!
//! Why it is small (a Cobra history takes about a quarter of its own log, see `benches/import.rs`):
//! - keys are interned once in the key table; ops name them by a 4-bit code relative to the *key frontier*
//!   (one past the largest key seen so far). Importers intern keys in order of first use, so a first use
//!   costs nothing, and a read of a version usually costs nothing either: its key is implied by the op that
//!   introduced the write id.
//! - write ids are interned too, in order of first appearance (the *ordinals*). A first appearance carries
//!   the id itself, as a zigzag delta from the previous new id (sequential ids take one byte) or as 8 raw
//!   bytes (random ids, as Cobra's are); later references are a distance back in the ordinal table.
//! - a transaction header is one flag byte plus deltas: the id from the previous transaction's, the
//!   session only when it changes, the sequence number only when it is not the next in its session.
//!
//! A transaction is, with optional parts in parentheses: flags · id delta · (session delta) · (seq) ·
//! (start) · (commit) · (collector) · op count · ops. Flags: bits 0–1 the outcome, 2 fence, 3 has start,
//! 4 has commit, 5 has collector, 6 explicit seq, 7 same session as the previous transaction.
//!
//! An op is a header byte `kind | stmt << 3 | key_code << 4`, then the write id part, the key escape and the
//! statement reference, as each needs. Kinds: 0/1 write of a new write id (delta/raw), 2 write of a known
//! one, 3 read of a known version, 4/5 read of a new one (delta/raw), 6 read of a pre-history version (tag
//! follows), 7 read of an absent row. Key codes: 0 the key of the referenced write id's first op, 1 the key
//! frontier, 2 the previous op's key, 3–14 the frontier minus 1–12, 15 an explicit zigzag delta from the
//! frontier.
//!
//! From version 2, kind 6's tag is followed by a class byte: 0 a pre-history version, 1 a version of an
//! unrecorded writer ([`Observed::Unrecorded`](crate::model::Observed::Unrecorded)), 2 a version no recorded
//! transaction wrote under `[record] exclusive` ([`Observed::Foreign`](crate::model::Observed::Foreign);
//! files with none read as before).
//!
//! # Failure
//!
//! Every chunk is checksummed, so a flipped byte is reported as a checksum mismatch in the chunk that holds
//! it (with its offset), never decoded into a different history. A truncated file ends in the middle of a
//! chunk or before the `E` chunk, and the error names the offset where the bytes ran out. Decoding never
//! panics and allocates no more than the input can justify.

mod framing;
mod reader;
mod writer;

use std::collections::HashMap;

use thiserror::Error;

use crate::model::History;

pub use framing::{frame_chunks, frame_chunks_as};
pub use reader::decode;
pub use writer::encode;

/// The first bytes of every native history file. The leading NUL keeps it from ever looking like text.
pub const MAGIC: [u8; 7] = *b"\0KRHIST";
/// The format version this build writes. Version 2 added the recording horizon (a header field) and
/// unrecorded-writer reads (a class byte after each pre-history tag); version 3 made the horizon a whole
/// snapshot (xmin, xmax, the running ids); version 4 added each transaction's isolation level (the `L` section).
pub const VERSION: u8 = 4;
/// The oldest format version this build still reads.
pub const OLDEST_VERSION: u8 = 1;
/// After a pre-history tag (version 2 on): the version is pre-history.
const CLASS_PRE_HISTORY: u8 = 0;
/// After a pre-history tag (version 2 on): the version's writer was not recorded.
const CLASS_UNRECORDED: u8 = 1;
/// After a pre-history tag: the version's writer was not recorded, though every writer should have been.
const CLASS_FOREIGN: u8 = 2;

/// A chunk is closed once its payload reaches this size, so that a corrupt byte is located within 64 KiB.
const CHUNK_TARGET: usize = 64 * 1024;

const TAG_HEADER: u8 = b'H';
const TAG_STATEMENTS: u8 = b'S';
const TAG_NAMESPACES: u8 = b'N';
const TAG_KEYS: u8 = b'K';
const TAG_TXNS: u8 = b'T';
const TAG_GAPS: u8 = b'G';
const TAG_LEVELS: u8 = b'L';
const TAG_END: u8 = b'E';

const OP_WRITE_NEW_DELTA: u8 = 0;
const OP_WRITE_NEW_RAW: u8 = 1;
const OP_WRITE_KNOWN: u8 = 2;
const OP_READ_KNOWN: u8 = 3;
const OP_READ_NEW_DELTA: u8 = 4;
const OP_READ_NEW_RAW: u8 = 5;
const OP_READ_PRE: u8 = 6;
const OP_READ_ABSENT: u8 = 7;
const OP_HAS_STMT: u8 = 1 << 3;

const KEY_IMPLIED: u8 = 0;
const KEY_FRONTIER: u8 = 1;
const KEY_PREVIOUS: u8 = 2;
const KEY_NEAR_FIRST: u8 = 3;
const KEY_NEAR_MAX_DISTANCE: u64 = 12;
const KEY_ESCAPE: u8 = 15;

const TXN_HAS_START: u8 = 1 << 3;
const TXN_FENCE: u8 = 1 << 2;
const TXN_HAS_COMMIT: u8 = 1 << 4;
const TXN_HAS_COLLECTOR: u8 = 1 << 5;
const TXN_EXPLICIT_SEQ: u8 = 1 << 6;
const TXN_SAME_SESSION: u8 = 1 << 7;

/// The byte an isolation level is written as in the `L` section (0 is "not known").
fn level_code(level: Option<crate::model::IsolationLevel>) -> u8 {
    use crate::model::IsolationLevel::*;
    match level {
        None => 0,
        Some(ReadUncommitted) => 1,
        Some(ReadCommitted) => 2,
        Some(RepeatableRead) => 3,
        Some(Serializable) => 4,
    }
}

/// The level a byte of the `L` section stands for; `Err` for a byte no version defines.
fn level_of_code(code: u8) -> Result<Option<crate::model::IsolationLevel>, u8> {
    use crate::model::IsolationLevel::*;
    Ok(match code {
        0 => None,
        1 => Some(ReadUncommitted),
        2 => Some(ReadCommitted),
        3 => Some(RepeatableRead),
        4 => Some(Serializable),
        other => return Err(other),
    })
}

/// A native history could not be decoded. `offset` is the absolute byte offset in the file.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("native history, byte offset {offset}: {kind}")]
pub struct NativeError {
    /// Where in the file the problem was found.
    pub offset: u64,
    /// What the problem is.
    pub kind: NativeErrorKind,
}

/// What went wrong while decoding a native history.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NativeErrorKind {
    /// The file does not start with [`MAGIC`].
    #[error("not a native Krait history (the magic bytes are missing)")]
    BadMagic,
    /// The file was written by a newer (or unknown) version of the format.
    #[error("unsupported format version {0}; this build reads versions {OLDEST_VERSION} to {VERSION}")]
    UnsupportedVersion(u8),
    /// The bytes ran out.
    #[error("the file is truncated: {what} needs {needed} more bytes, {left} left")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// How many bytes it needed.
        needed: usize,
        /// How many there were.
        left: usize,
    },
    /// A varint was longer than 64 bits.
    #[error("a varint is longer than 64 bits")]
    VarintOverflow,
    /// A chunk's checksum does not match its bytes.
    #[error(
        "checksum mismatch in the '{tag}' chunk of {len} payload bytes starting here (stored {stored:#010x}, \
         computed {computed:#010x}): the file is corrupt"
    )]
    Checksum {
        /// The chunk's tag.
        tag: char,
        /// Its payload length.
        len: u64,
        /// The checksum in the file.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// A chunk came that does not belong here.
    #[error("expected a '{expected}' chunk, found tag byte {found:#04x}")]
    UnexpectedChunk {
        /// The tag the format requires here.
        expected: char,
        /// The byte found.
        found: u8,
    },
    /// Bytes follow the end chunk.
    #[error("{0} unexpected bytes after the end chunk")]
    TrailingBytes(u64),
    /// The bytes are well-formed but say something impossible.
    #[error("{0}")]
    Invalid(String),
}

impl NativeError {
    fn at(offset: u64, kind: NativeErrorKind) -> Self {
        NativeError { offset, kind }
    }

    fn invalid(offset: u64, msg: impl Into<String>) -> Self {
        NativeError::at(offset, NativeErrorKind::Invalid(msg.into()))
    }
}

/// The per-stream state that both sides of the transaction encoding keep in step.
#[derive(Default)]
struct Delta {
    prev_id: u64,
    prev_session: u64,
    prev_start: u64,
    prev_commit: u64,
    next_seq: HashMap<u64, u64>,
    /// Write id ordinals: each write id in order of first appearance, with the key of the op that brought it.
    ords: Vec<(u64, u32)>,
    last_new_write: u64,
    /// One past the largest key seen so far.
    frontier: u64,
    prev_key: Option<u32>,
    /// The format version being decoded (the encoder always writes [`VERSION`]).
    version: u8,
}

impl Delta {
    fn expected_seq(&self, session: u64) -> u64 {
        self.next_seq.get(&session).copied().unwrap_or(0)
    }
    fn saw_key(&mut self, key: u32) {
        self.frontier = self.frontier.max(u64::from(key) + 1);
        self.prev_key = Some(key);
    }
}

/// A history refers to a key or statement its own tables lack, so it cannot be written faithfully.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the history is inconsistent: {0}")]
pub struct InvalidHistory(pub String);

/// Checks that every op names a key in the key table and a statement in the statement list.
pub(crate) fn check_references(history: &History) -> Result<(), InvalidHistory> {
    let keys = history.keys.len();
    let stmts = history.statements.len();
    for txn in &history.transactions {
        for op in &txn.ops {
            if op.key().0 as usize >= keys {
                return Err(InvalidHistory(format!(
                    "transaction {} names key {} but the key table has {keys} keys",
                    txn.id,
                    op.key().0
                )));
            }
            if let Some(s) = op.stmt()
                && s.0 as usize >= stmts
            {
                return Err(InvalidHistory(format!(
                    "transaction {} names statement {} but there are {stmts} statements",
                    txn.id, s.0
                )));
            }
        }
    }
    Ok(())
}
