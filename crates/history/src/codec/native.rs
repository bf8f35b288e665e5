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
//! | `H` | counts: statements, namespaces, keys, transactions, gaps (varints); from version 2, then 0 or 1 and the recording horizon if 1 (version 2: its xmin; from 3: xmin, xmax, the count of running ids and the ids) |
//! | `S` | statement texts: length + UTF-8 bytes each |
//! | `N` | namespaces of the key table: length + UTF-8 bytes each |
//! | `K` | the key table as runs: count, namespace index, key length, then `count × length` key bytes |
//! | `T` | transactions (below) |
//! | `G` | gaps: `after_txns` as zigzag deltas |
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
//! unrecorded writer ([`Observed::Unrecorded`]).
//!
//! # Failure
//!
//! Every chunk is checksummed, so a flipped byte is reported as a checksum mismatch in the chunk that holds
//! it (with its offset), never decoded into a different history. A truncated file ends in the middle of a
//! chunk or before the `E` chunk, and the error names the offset where the bytes ran out. Decoding never
//! panics and allocates no more than the input can justify.

use std::collections::HashMap;

use thiserror::Error;

use super::bytes::{Cursor, CursorError, put_varint, unzigzag, varint_len, zigzag};
use crate::model::{
    CollectorId, History, KeyName, KeyTable, LogGap, Observed, Op, Outcome, RecordingHorizon, SessionId,
    StmtRef, Transaction, TxnId, WriteId,
};

/// The first bytes of every native history file. The leading NUL keeps it from ever looking like text.
pub const MAGIC: [u8; 7] = *b"\0KRHIST";
/// The format version this build writes. Version 2 added the recording horizon (a header field) and
/// unrecorded-writer reads (a class byte after each pre-history tag); version 3 made the horizon a whole
/// snapshot (xmin, xmax, the running ids).
pub const VERSION: u8 = 3;
/// The oldest format version this build still reads.
pub const OLDEST_VERSION: u8 = 1;
/// After a pre-history tag (version 2 on): the version is pre-history.
const CLASS_PRE_HISTORY: u8 = 0;
/// After a pre-history tag (version 2 on): the version's writer was not recorded.
const CLASS_UNRECORDED: u8 = 1;

/// A chunk is closed once its payload reaches this size, so that a corrupt byte is located within 64 KiB.
const CHUNK_TARGET: usize = 64 * 1024;

const TAG_HEADER: u8 = b'H';
const TAG_STATEMENTS: u8 = b'S';
const TAG_NAMESPACES: u8 = b'N';
const TAG_KEYS: u8 = b'K';
const TAG_TXNS: u8 = b'T';
const TAG_GAPS: u8 = b'G';
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

fn cursor_error(offset: u64, e: CursorError) -> NativeError {
    match e {
        CursorError::End { what, needed, left } => {
            NativeError::at(offset, NativeErrorKind::Truncated { what, needed, left })
        }
        CursorError::VarintOverflow => NativeError::at(offset, NativeErrorKind::VarintOverflow),
    }
}

/// Reads through a [`Cursor`] and turns its errors into [`NativeError`]s at the offset of the failed read.
struct Rd<'a> {
    c: Cursor<'a>,
}

impl<'a> Rd<'a> {
    fn offset(&self) -> u64 {
        self.c.offset()
    }
    fn varint(&mut self, what: &'static str) -> Result<u64, NativeError> {
        let at = self.c.offset();
        self.c.varint(what).map_err(|e| cursor_error(at, e))
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, NativeError> {
        let at = self.c.offset();
        self.c.u8(what).map_err(|e| cursor_error(at, e))
    }
    fn u64_le(&mut self, what: &'static str) -> Result<u64, NativeError> {
        let at = self.c.offset();
        self.c.u64_le(what).map_err(|e| cursor_error(at, e))
    }
    fn bytes(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], NativeError> {
        let at = self.c.offset();
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.c.bytes(n, what).map_err(|e| cursor_error(at, e))
    }
    fn string(&mut self, what: &'static str) -> Result<String, NativeError> {
        let len = self.varint(what)?;
        let at = self.c.offset();
        let bytes = self.bytes(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| NativeError::invalid(at, format!("{what} is not valid UTF-8")))
    }
    /// A varint that must fit a u32.
    fn varint_u32(&mut self, what: &'static str) -> Result<u32, NativeError> {
        let at = self.c.offset();
        let v = self.varint(what)?;
        u32::try_from(v).map_err(|_| NativeError::invalid(at, format!("{what} {v} does not fit 32 bits")))
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

/// Collects items into chunks of about [`CHUNK_TARGET`] bytes.
struct ChunkWriter {
    out: Vec<u8>,
    buf: Vec<u8>,
}

/// The checksum of a chunk in a file of format `version`.
fn chunk_checksum(version: u8, tag: u8, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    if version >= 3 {
        crc.update(&[version]);
    }
    crc.update(&[tag]);
    crc.update(payload);
    crc.finalize()
}

impl ChunkWriter {
    fn flush(&mut self, tag: u8) {
        self.out.push(tag);
        put_varint(&mut self.out, self.buf.len() as u64);
        let crc = chunk_checksum(VERSION, tag, &self.buf);
        self.out.extend_from_slice(&self.buf);
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.buf.clear();
    }
    fn item_done(&mut self, tag: u8) {
        if self.buf.len() >= CHUNK_TARGET {
            self.flush(tag);
        }
    }
    fn section_done(&mut self, tag: u8) {
        if !self.buf.is_empty() {
            self.flush(tag);
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Encodes a history in the native format.
pub fn encode(history: &History) -> Result<Vec<u8>, InvalidHistory> {
    check_references(history)?;
    let mut w = ChunkWriter { out: Vec::with_capacity(1024), buf: Vec::with_capacity(CHUNK_TARGET + 4096) };
    w.out.extend_from_slice(&MAGIC);
    w.out.push(VERSION);

    let names = history.keys.names();
    let mut namespaces: Vec<&str> = Vec::new();
    let mut ns_index: HashMap<&str, u64> = HashMap::new();
    for name in names {
        ns_index.entry(name.namespace.as_str()).or_insert_with(|| {
            namespaces.push(name.namespace.as_str());
            namespaces.len() as u64 - 1
        });
    }

    for n in [
        history.statements.len(),
        namespaces.len(),
        names.len(),
        history.transactions.len(),
        history.gaps.len(),
    ] {
        put_varint(&mut w.buf, n as u64);
    }
    match &history.horizon {
        Some(horizon) => {
            put_varint(&mut w.buf, 1);
            put_varint(&mut w.buf, horizon.xmin);
            put_varint(&mut w.buf, horizon.xmax);
            put_varint(&mut w.buf, horizon.running.len() as u64);
            for &xid in &horizon.running {
                put_varint(&mut w.buf, xid);
            }
        }
        None => put_varint(&mut w.buf, 0),
    }
    w.flush(TAG_HEADER);

    for s in &history.statements {
        put_str(&mut w.buf, s.as_bytes());
        w.item_done(TAG_STATEMENTS);
    }
    w.section_done(TAG_STATEMENTS);
    for ns in &namespaces {
        put_str(&mut w.buf, ns.as_bytes());
        w.item_done(TAG_NAMESPACES);
    }
    w.section_done(TAG_NAMESPACES);

    // Key runs: consecutive keys that share a namespace and a length are written as one run.
    let mut i = 0;
    while i < names.len() {
        let first = &names[i];
        let run = names[i..]
            .iter()
            .take_while(|n| n.namespace == first.namespace && n.bytes.len() == first.bytes.len())
            .take(4096)
            .count();
        put_varint(&mut w.buf, run as u64);
        put_varint(&mut w.buf, ns_index[first.namespace.as_str()]);
        put_varint(&mut w.buf, first.bytes.len() as u64);
        for n in &names[i..i + run] {
            w.buf.extend_from_slice(&n.bytes);
        }
        i += run;
        w.item_done(TAG_KEYS);
    }
    w.section_done(TAG_KEYS);

    let mut d = Delta::default();
    let mut ord_of: HashMap<u64, u32> = HashMap::new();
    for txn in &history.transactions {
        encode_txn(&mut w.buf, &mut d, &mut ord_of, txn);
        w.item_done(TAG_TXNS);
    }
    w.section_done(TAG_TXNS);

    let mut prev = 0u64;
    for gap in &history.gaps {
        put_varint(&mut w.buf, zigzag(gap.after_txns.wrapping_sub(prev) as i64));
        prev = gap.after_txns;
        w.item_done(TAG_GAPS);
    }
    w.section_done(TAG_GAPS);
    w.flush(TAG_END);
    Ok(w.out)
}

fn encode_txn(out: &mut Vec<u8>, d: &mut Delta, ord_of: &mut HashMap<u64, u32>, txn: &Transaction) {
    let session = txn.session.0;
    let mut flags = match txn.outcome {
        Outcome::Committed => 0,
        Outcome::Aborted => 1,
        Outcome::Indeterminate => 2,
    };
    if txn.fence {
        flags |= TXN_FENCE;
    }
    if txn.start_ns.is_some() {
        flags |= TXN_HAS_START;
    }
    if txn.commit_ns.is_some() {
        flags |= TXN_HAS_COMMIT;
    }
    if txn.collector.0 != 0 {
        flags |= TXN_HAS_COLLECTOR;
    }
    let explicit_seq = txn.seq != d.expected_seq(session);
    if explicit_seq {
        flags |= TXN_EXPLICIT_SEQ;
    }
    if session == d.prev_session {
        flags |= TXN_SAME_SESSION;
    }
    out.push(flags);
    put_varint(out, zigzag(txn.id.0.wrapping_sub(d.prev_id) as i64));
    d.prev_id = txn.id.0;
    if session != d.prev_session {
        put_varint(out, zigzag(session.wrapping_sub(d.prev_session) as i64));
        d.prev_session = session;
    }
    if explicit_seq {
        put_varint(out, txn.seq);
    }
    d.next_seq.insert(session, txn.seq.wrapping_add(1));
    if let Some(start) = txn.start_ns {
        put_varint(out, zigzag(start.wrapping_sub(d.prev_start) as i64));
        d.prev_start = start;
    }
    if let Some(commit) = txn.commit_ns {
        let base = txn.start_ns.unwrap_or(d.prev_commit);
        put_varint(out, zigzag(commit.wrapping_sub(base) as i64));
        d.prev_commit = commit;
    }
    if txn.collector.0 != 0 {
        put_varint(out, u64::from(txn.collector.0));
    }
    put_varint(out, txn.ops.len() as u64);
    for op in &txn.ops {
        encode_op(out, d, ord_of, op);
    }
}

/// How an op names its write id.
enum WritePart {
    New { raw: bool, value: u64 },
    Known { distance: u64, key: u32 },
    None,
}

fn encode_op(out: &mut Vec<u8>, d: &mut Delta, ord_of: &mut HashMap<u64, u32>, op: &Op) {
    let key = op.key().0;
    let mut new_or_known = |w: WriteId, d: &mut Delta| -> WritePart {
        if let Some(&ord) = ord_of.get(&w.0) {
            let (_, first_key) = d.ords[ord as usize];
            WritePart::Known { distance: d.ords.len() as u64 - u64::from(ord), key: first_key }
        } else {
            let delta = zigzag(w.0.wrapping_sub(d.last_new_write) as i64);
            let raw = varint_len(delta) > 8;
            ord_of.insert(w.0, d.ords.len() as u32);
            d.ords.push((w.0, key));
            d.last_new_write = w.0;
            WritePart::New { raw, value: if raw { w.0 } else { delta } }
        }
    };
    let (kind, part, tag) = match *op {
        Op::Write { write, .. } => {
            let part = new_or_known(write, d);
            let kind = match part {
                WritePart::New { raw: false, .. } => OP_WRITE_NEW_DELTA,
                WritePart::New { raw: true, .. } => OP_WRITE_NEW_RAW,
                _ => OP_WRITE_KNOWN,
            };
            (kind, part, None)
        }
        Op::Read { observed: Observed::Version(w), .. } => {
            let part = new_or_known(w, d);
            let kind = match part {
                WritePart::New { raw: false, .. } => OP_READ_NEW_DELTA,
                WritePart::New { raw: true, .. } => OP_READ_NEW_RAW,
                _ => OP_READ_KNOWN,
            };
            (kind, part, None)
        }
        Op::Read { observed: Observed::PreHistory(t), .. } => {
            (OP_READ_PRE, WritePart::None, Some((t, CLASS_PRE_HISTORY)))
        }
        Op::Read { observed: Observed::Unrecorded(t), .. } => {
            (OP_READ_PRE, WritePart::None, Some((t, CLASS_UNRECORDED)))
        }
        Op::Read { observed: Observed::Absent, .. } => (OP_READ_ABSENT, WritePart::None, None),
    };
    let k = u64::from(key);
    let code = match part {
        WritePart::Known { key: first_key, .. } if first_key == key => KEY_IMPLIED,
        _ if k == d.frontier => KEY_FRONTIER,
        _ if d.prev_key == Some(key) => KEY_PREVIOUS,
        _ if k < d.frontier && d.frontier - k <= KEY_NEAR_MAX_DISTANCE => {
            KEY_NEAR_FIRST + (d.frontier - k - 1) as u8
        }
        _ => KEY_ESCAPE,
    };
    let stmt = op.stmt();
    out.push(kind | if stmt.is_some() { OP_HAS_STMT } else { 0 } | (code << 4));
    match part {
        WritePart::New { raw: true, value } => out.extend_from_slice(&value.to_le_bytes()),
        WritePart::New { raw: false, value } => put_varint(out, value),
        WritePart::Known { distance, .. } => put_varint(out, distance),
        WritePart::None => {}
    }
    if let Some((t, class)) = tag {
        put_varint(out, t);
        out.push(class);
    }
    if code == KEY_ESCAPE {
        put_varint(out, zigzag(k.wrapping_sub(d.frontier) as i64));
    }
    if let Some(s) = stmt {
        put_varint(out, u64::from(s.0));
    }
    d.saw_key(key);
}

/// Walks the chunks of a native file.
struct Chunks<'a> {
    data: &'a [u8],
    pos: usize,
    /// The file's format version, which the checksums cover from version 3.
    version: u8,
}

impl<'a> Chunks<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// The next chunk, which must carry `expected`; its checksum is verified before its payload is read.
    /// Errors in the chunk's framing name the offset where the chunk starts.
    fn next(&mut self, expected: u8) -> Result<Rd<'a>, NativeError> {
        let start = self.pos;
        let at_start = |e: NativeError| NativeError { offset: start as u64, ..e };
        let mut head = Rd { c: Cursor::new(&self.data[start..], start as u64) };
        let tag = head.u8("a chunk tag")?;
        if tag != expected {
            return Err(NativeError::at(
                start as u64,
                NativeErrorKind::UnexpectedChunk { expected: char::from(expected), found: tag },
            ));
        }
        let len = head.varint("a chunk length").map_err(at_start)?;
        let payload_at = head.offset();
        let payload = head.bytes(len, "the chunk starting here").map_err(at_start)?;
        let stored = head.bytes(4, "the chunk's checksum").map_err(at_start)?;
        let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
        let computed = chunk_checksum(self.version, tag, payload);
        if stored != computed && (OLDEST_VERSION..=VERSION).any(|v| chunk_checksum(v, tag, payload) == stored)
        {
            // The chunk is whole under another version's rule: the version byte is what changed.
            return Err(NativeError::invalid(
                MAGIC.len() as u64,
                format!(
                    "the format version byte says {}, but the chunks were written by another version: the file \
                     is corrupt",
                    self.version
                ),
            ));
        }
        if stored != computed {
            return Err(NativeError::at(
                start as u64,
                NativeErrorKind::Checksum { tag: char::from(tag), len, stored, computed },
            ));
        }
        self.pos = head.offset() as usize;
        Ok(Rd { c: Cursor::new(payload, payload_at) })
    }

    /// Reads a section of `count` items spread over chunks tagged `tag`. `item` decodes one or more items
    /// from the front of a chunk and says how many.
    fn section(
        &mut self,
        tag: u8,
        count: u64,
        mut item: impl FnMut(&mut Rd<'a>, u64) -> Result<u64, NativeError>,
    ) -> Result<(), NativeError> {
        let mut done = 0u64;
        while done < count {
            let mut chunk = self.next(tag)?;
            if chunk.c.is_empty() {
                return Err(NativeError::invalid(chunk.offset(), "an empty chunk"));
            }
            while !chunk.c.is_empty() {
                let at = chunk.offset();
                let n = item(&mut chunk, count - done)?;
                done += n;
                if done > count {
                    return Err(NativeError::invalid(
                        at,
                        format!("the '{}' section holds more items than the {count} announced", tag as char),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Builds a file from raw chunk payloads, each framed with a valid checksum and followed by the end chunk.
/// The checksums make random bytes fail early; this lets fuzzers and tests reach the checks behind them.
pub fn frame_chunks(chunks: &[(u8, &[u8])]) -> Vec<u8> {
    let mut w = ChunkWriter { out: MAGIC.to_vec(), buf: Vec::new() };
    w.out.push(VERSION);
    for (tag, payload) in chunks {
        w.buf.extend_from_slice(payload);
        w.flush(*tag);
    }
    w.flush(TAG_END);
    w.out
}

/// Decodes a native history. Errors name the byte offset of the problem.
pub fn decode(data: &[u8]) -> Result<History, NativeError> {
    let mut head = Rd { c: Cursor::new(data, 0) };
    let magic = head.bytes(MAGIC.len() as u64, "the magic bytes");
    if magic.ok() != Some(&MAGIC[..]) {
        return Err(NativeError::at(0, NativeErrorKind::BadMagic));
    }
    let version = head.u8("the format version")?;
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(NativeError::at(MAGIC.len() as u64, NativeErrorKind::UnsupportedVersion(version)));
    }
    let mut chunks = Chunks { data, pos: MAGIC.len() + 1, version };

    let mut h = chunks.next(TAG_HEADER)?;
    let n_stmts = h.varint("the statement count")?;
    let n_namespaces = h.varint("the namespace count")?;
    let n_keys = h.varint("the key count")?;
    let n_txns = h.varint("the transaction count")?;
    let n_gaps = h.varint("the gap count")?;
    let horizon = match version {
        1 => None,
        _ => match h.varint("the horizon flag")? {
            0 => None,
            1 if version == 2 => Some(RecordingHorizon::from_xmin(h.varint("the recording horizon")?)),
            1 => {
                let xmin = h.varint("the horizon's xmin")?;
                let xmax = h.varint("the horizon's xmax")?;
                let n = h.varint("the horizon's running count")?;
                // Each id takes at least a byte: a count beyond the chunk is corrupt, not a reason to
                // allocate.
                if n > h.c.remaining() as u64 {
                    return Err(NativeError::invalid(
                        h.offset(),
                        format!("{n} running ids in a shorter chunk"),
                    ));
                }
                let running = (0..n).map(|_| h.varint("a running id")).collect::<Result<Vec<_>, _>>()?;
                Some(RecordingHorizon { xmin, xmax, running })
            }
            other => {
                return Err(NativeError::invalid(h.offset(), format!("horizon flag {other}, not 0 or 1")));
            }
        },
    };
    if !h.c.is_empty() {
        return Err(NativeError::invalid(h.offset(), "unexpected bytes at the end of the header chunk"));
    }
    // Every item takes at least one byte, so no count may exceed the file's length; this bounds allocation.
    let bound = data.len() as u64;
    for (what, n) in [("statements", n_stmts), ("namespaces", n_namespaces), ("transactions", n_txns)] {
        if n > bound {
            return Err(NativeError::invalid(
                h.offset(),
                format!("the header announces {n} {what}, more than the file could hold"),
            ));
        }
    }
    if n_keys > u64::from(u32::MAX) {
        return Err(NativeError::invalid(h.offset(), format!("{n_keys} keys do not fit 32-bit key ids")));
    }
    if n_stmts > u64::from(u32::MAX) {
        return Err(NativeError::invalid(h.offset(), format!("{n_stmts} statements do not fit 32 bits")));
    }

    let mut history = History::default();
    chunks.section(TAG_STATEMENTS, n_stmts, |c, _| {
        history.statements.push(c.string("a statement text")?);
        Ok(1)
    })?;
    let mut namespaces = Vec::new();
    chunks.section(TAG_NAMESPACES, n_namespaces, |c, _| {
        namespaces.push(c.string("a namespace")?);
        Ok(1)
    })?;
    let mut keys = KeyTable::default();
    chunks.section(TAG_KEYS, n_keys, |c, left| {
        let at = c.offset();
        let run = c.varint("a key run length")?;
        let ns = c.varint("a key run namespace")?;
        let len = c.varint("a key length")?;
        if run == 0 || run > left {
            return Err(NativeError::invalid(at, format!("a key run of {run} keys where {left} remain")));
        }
        let namespace = usize::try_from(ns).ok().and_then(|i| namespaces.get(i)).ok_or_else(|| {
            NativeError::invalid(at, format!("namespace {ns} is not in the namespace table"))
        })?;
        let total =
            run.checked_mul(len).ok_or_else(|| NativeError::invalid(at, "a key run longer than the file"))?;
        let bytes = c.bytes(total, "a key run")?;
        // Zero-length keys take no bytes, but a run of them repeats a name on its second key and fails, so a
        // crafted run cannot build many keys from few bytes.
        for i in 0..run {
            let start = (i * len) as usize;
            let name =
                KeyName { namespace: namespace.clone(), bytes: bytes[start..start + len as usize].to_vec() };
            let before = keys.len();
            keys.intern(name);
            if keys.len() == before {
                return Err(NativeError::invalid(at, "the key table names one key twice"));
            }
        }
        Ok(run)
    })?;
    history.keys = keys;

    let n_keys = n_keys as u32;
    let n_stmts = n_stmts as u32;
    history.horizon = horizon;
    let mut d = Delta { version, ..Delta::default() };
    // The count is only a hint: a crafted header must not make us allocate more than the input justifies.
    history.transactions.reserve(n_txns.min(1 << 16) as usize);
    chunks.section(TAG_TXNS, n_txns, |c, _| {
        history.transactions.push(decode_txn(c, &mut d, n_keys, n_stmts)?);
        Ok(1)
    })?;

    let mut prev = 0u64;
    chunks.section(TAG_GAPS, n_gaps, |c, _| {
        let after = prev.wrapping_add(unzigzag(c.varint("a gap")?) as u64);
        history.gaps.push(LogGap { after_txns: after });
        prev = after;
        Ok(1)
    })?;

    let end = chunks.next(TAG_END)?;
    if !end.c.is_empty() {
        return Err(NativeError::invalid(end.offset(), "the end chunk is not empty"));
    }
    let trailing = (data.len() - chunks.pos) as u64;
    if trailing > 0 {
        return Err(NativeError::at(chunks.offset(), NativeErrorKind::TrailingBytes(trailing)));
    }
    Ok(history)
}

fn decode_txn(c: &mut Rd<'_>, d: &mut Delta, n_keys: u32, n_stmts: u32) -> Result<Transaction, NativeError> {
    let at = c.offset();
    let flags = c.u8("transaction flags")?;
    let outcome = match flags & 3 {
        0 => Outcome::Committed,
        1 => Outcome::Aborted,
        2 => Outcome::Indeterminate,
        _ => return Err(NativeError::invalid(at, "transaction outcome code 3 is undefined")),
    };
    let id = d.prev_id.wrapping_add(unzigzag(c.varint("a transaction id")?) as u64);
    d.prev_id = id;
    if flags & TXN_SAME_SESSION == 0 {
        d.prev_session = d.prev_session.wrapping_add(unzigzag(c.varint("a session")?) as u64);
    }
    let session = d.prev_session;
    let seq =
        if flags & TXN_EXPLICIT_SEQ != 0 { c.varint("a sequence number")? } else { d.expected_seq(session) };
    d.next_seq.insert(session, seq.wrapping_add(1));
    let start_ns = if flags & TXN_HAS_START != 0 {
        d.prev_start = d.prev_start.wrapping_add(unzigzag(c.varint("a start time")?) as u64);
        Some(d.prev_start)
    } else {
        None
    };
    let commit_ns = if flags & TXN_HAS_COMMIT != 0 {
        let base = start_ns.unwrap_or(d.prev_commit);
        d.prev_commit = base.wrapping_add(unzigzag(c.varint("a commit time")?) as u64);
        Some(d.prev_commit)
    } else {
        None
    };
    let collector = if flags & TXN_HAS_COLLECTOR != 0 { c.varint_u32("a collector id")? } else { 0 };
    let n_ops = c.varint("an op count")?;
    if n_ops > c.c.remaining() as u64 {
        return Err(NativeError::invalid(
            c.offset(),
            format!("{n_ops} ops announced but only {} bytes left in the chunk", c.c.remaining()),
        ));
    }
    let mut ops = Vec::with_capacity(n_ops as usize);
    for _ in 0..n_ops {
        ops.push(decode_op(c, d, n_keys, n_stmts)?);
    }
    Ok(Transaction {
        id: TxnId(id),
        session: SessionId(session),
        seq,
        ops,
        outcome,
        start_ns,
        commit_ns,
        collector: CollectorId(collector),
        fence: flags & TXN_FENCE != 0,
    })
}

fn decode_op(c: &mut Rd<'_>, d: &mut Delta, n_keys: u32, n_stmts: u32) -> Result<Op, NativeError> {
    let at = c.offset();
    let h = c.u8("an op header")?;
    let kind = h & 7;
    let code = h >> 4;
    // The write id part: a new id (delta or raw), or a distance back to a known one.
    let mut new_write = None;
    let mut known: Option<(u64, u32)> = None;
    let mut pre_tag = None;
    match kind {
        OP_WRITE_NEW_DELTA | OP_READ_NEW_DELTA => {
            let delta = unzigzag(c.varint("a write id delta")?);
            new_write = Some(d.last_new_write.wrapping_add(delta as u64));
        }
        OP_WRITE_NEW_RAW | OP_READ_NEW_RAW => new_write = Some(c.u64_le("a write id")?),
        OP_WRITE_KNOWN | OP_READ_KNOWN => {
            let dist_at = c.offset();
            let distance = c.varint("a write id reference")?;
            if distance == 0 || distance > d.ords.len() as u64 {
                return Err(NativeError::invalid(
                    dist_at,
                    format!(
                        "write id reference {distance} back, but only {} write ids are known",
                        d.ords.len()
                    ),
                ));
            }
            known = Some(d.ords[d.ords.len() - distance as usize]);
        }
        OP_READ_PRE => {
            let tag = c.varint("a pre-history tag")?;
            let class = if d.version >= 2 { c.u8("a pre-history class")? } else { CLASS_PRE_HISTORY };
            pre_tag = Some(match class {
                CLASS_PRE_HISTORY => Observed::PreHistory(tag),
                CLASS_UNRECORDED => Observed::Unrecorded(tag),
                other => return Err(NativeError::invalid(c.offset(), format!("pre-history class {other}"))),
            });
        }
        _ => {}
    }
    let key = match code {
        KEY_IMPLIED => match known {
            Some((_, k)) => u64::from(k),
            None => return Err(NativeError::invalid(at, "key code 0 on an op without a known write id")),
        },
        KEY_FRONTIER => d.frontier,
        KEY_PREVIOUS => match d.prev_key {
            Some(k) => u64::from(k),
            None => return Err(NativeError::invalid(at, "key code 2 on the first op")),
        },
        KEY_ESCAPE => d.frontier.wrapping_add(unzigzag(c.varint("a key delta")?) as u64),
        near => {
            let distance = u64::from(near - KEY_NEAR_FIRST) + 1;
            d.frontier
                .checked_sub(distance)
                .ok_or_else(|| NativeError::invalid(at, format!("key code {near} reaches below key 0")))?
        }
    };
    if key >= u64::from(n_keys) {
        return Err(NativeError::invalid(at, format!("key {key} is not in the key table of {n_keys} keys")));
    }
    let key32 = key as u32;
    let stmt = if h & OP_HAS_STMT != 0 {
        let s_at = c.offset();
        let s = c.varint("a statement reference")?;
        if s >= u64::from(n_stmts) {
            return Err(NativeError::invalid(
                s_at,
                format!("statement {s} is not among the {n_stmts} statements"),
            ));
        }
        Some(StmtRef(s as u32))
    } else {
        None
    };
    let write = match (new_write, known) {
        (Some(w), _) => {
            d.ords.push((w, key32));
            d.last_new_write = w;
            Some(WriteId(w))
        }
        (None, Some((w, _))) => Some(WriteId(w)),
        (None, None) => None,
    };
    d.saw_key(key32);
    let key = crate::model::Key(key32);
    Ok(match (kind, write) {
        (OP_WRITE_NEW_DELTA | OP_WRITE_NEW_RAW | OP_WRITE_KNOWN, Some(write)) => {
            Op::Write { key, write, stmt }
        }
        (_, Some(w)) => Op::Read { key, observed: Observed::Version(w), stmt },
        (OP_READ_PRE, None) => Op::Read { key, observed: pre_tag.unwrap_or(Observed::PreHistory(0)), stmt },
        _ => Op::Read { key, observed: Observed::Absent, stmt },
    })
}
