//! Importer for Cobra's binary client logs (the CobraLogs artifact; format in the corpus README).
//!
//! A history is a folder with one file per client session, `T<n>.log`; `n` becomes the [`SessionId`]. A file
//! is a stream of records, each an ASCII tag byte followed by big-endian u64 fields:
//!
//! | tag | fields |
//! |---|---|
//! | `S` | txn id (then a timestamp, in the timestamped variant) |
//! | `W` | write id, key hash, value hash |
//! | `R` | writer txn id, write id, key hash, value hash |
//! | `C` | txn id (then a timestamp, in the timestamped variant) |
//!
//! How records map to the model:
//! - A Cobra txn id becomes the [`TxnId`] unchanged, and a write id the [`WriteId`] unchanged (Cobra's
//!   client makes both unique). Transactions keep their order within a file, which is session order; files
//!   are taken in the order of `n`.
//! - A key hash becomes a key in namespace `""` whose bytes are the hash's 8 big-endian bytes.
//! - A read whose writer txn id and write id are `0xbebeebee` (the initial state) or `0xdeadbeef` (NULL)
//!   observed [`Observed::PreHistory`]`(0)`, like Cobra's INIT transaction.
//! - Transactions that touch key hash `0xb8873aa82ef6c6d3` (`FZVERSION`) are fences (Cobra §4.2).
//! - Logs hold committed transactions only (aborted ones are absent), so every transaction is Committed.
//! - The timestamped variant's two timestamps go into `start_ns` and `commit_ns` unchanged.
//! - Value hashes are dropped: write ids identify versions.
//!
//! **The writer txn id of a read.** The model names a version by its write id alone, so a read's writer txn
//! id has nowhere to go. The importer checks it instead: once every file is read, a read of a write id that
//! some transaction in the history wrote must name that transaction, and a read that names a transaction in
//! the history must read one of its writes. A mismatch means the log contradicts itself (the value bytes
//! carry both ids together), so the import fails with [`CobraErrorKind::WriterMismatch`], naming the file
//! and offset of the read. A read whose writer and write id are both unknown (an aborted or lost writer,
//! as in `cock-blog`) is kept as a read of that write id, for the verifier to judge.
//!
//! Anything malformed (an unknown tag, a record cut short, a write outside a transaction, a commit of a
//! transaction that did not start) fails with the file and the byte offset of the record.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::bytes::Cursor;
use crate::model::{History, Key, KeyName, Observed, Op, SessionId, Transaction, TxnId, WriteId};

/// The writer txn id and write id of a read of the initial state.
pub const INIT_MARKER: u64 = 0xbebe_ebee;
/// The writer txn id and write id of a read of NULL, which Cobra treats as the initial state too.
pub const NULL_MARKER: u64 = 0xdead_beef;
/// The key hash of `FZVERSION`, the key that Cobra's fence transactions read and write.
pub const FENCE_KEY_HASH: u64 = 0xb887_3aa8_2ef6_c6d3;

/// Which of Cobra's two log layouts to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CobraOptions {
    /// `S` and `C` records carry a u64 timestamp after the txn id.
    pub timestamped: bool,
}

/// A Cobra log could not be imported.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("Cobra log {}{}: {kind}", file.display(), at_offset(*offset))]
pub struct CobraError {
    /// The file (or folder) with the problem.
    pub file: PathBuf,
    /// The byte offset of the record with the problem, where there is one.
    pub offset: Option<u64>,
    /// What is wrong.
    pub kind: CobraErrorKind,
}

/// What went wrong while importing a Cobra log.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CobraErrorKind {
    /// The folder could not be listed or a file could not be read.
    #[error("cannot read: {0}")]
    Io(String),
    /// The folder holds no `T<n>.log` file.
    #[error("no T<n>.log session files")]
    NoSessions,
    /// Read as timestamped, the log fails, but it reads cleanly without timestamps.
    #[error(
        "the log appears to have no timestamps (it reads cleanly as a plain Cobra log); read it with \
         --format cobra"
    )]
    NoTimestamps,
    /// A record starts with a byte that is not `S`, `W`, `R` or `C`.
    #[error("unknown record tag byte {0:#04x}")]
    UnknownTag(u8),
    /// The file ends inside a record.
    #[error("truncated '{tag}' record: it needs {needed} bytes, {left} left in the file")]
    Truncated {
        /// The record's tag.
        tag: char,
        /// The bytes its fields need.
        needed: usize,
        /// The bytes that were left.
        left: usize,
    },
    /// A `W` or `R` record outside a transaction.
    #[error("a '{0}' record outside a transaction")]
    OutsideTransaction(char),
    /// An `S` record while a transaction is open.
    #[error(
        "transaction {started:#x} starts while transaction {open:#x} (started at byte {open_at}) is open"
    )]
    NestedStart {
        /// The txn id of the new `S`.
        started: u64,
        /// The txn id of the open transaction.
        open: u64,
        /// Where the open transaction started.
        open_at: u64,
    },
    /// A `C` record that does not match the open transaction.
    #[error("commit of transaction {committed:#x}, but {}", open_txn(*open))]
    CommitMismatch {
        /// The txn id of the `C`.
        committed: u64,
        /// The open transaction, if any.
        open: Option<u64>,
    },
    /// The file ends while a transaction is open.
    #[error("the file ends inside transaction {txn:#x}, which started at this offset and never committed")]
    Unterminated {
        /// The open transaction.
        txn: u64,
    },
    /// Two transactions share a txn id.
    #[error("txn id {txn:#x} was already used in {first}")]
    DuplicateTxn {
        /// The txn id.
        txn: u64,
        /// Where it was first used.
        first: String,
    },
    /// A read's marker fields disagree: one says initial state, the other does not.
    #[error(
        "a read with writer txn id {writer:#x} and write id {write:#x}: only one is an initial-state marker"
    )]
    HalfMarker {
        /// The read's writer txn id.
        writer: u64,
        /// The read's write id.
        write: u64,
    },
    /// A write uses a write id that reads use as a marker.
    #[error("write id {0:#x} is reserved as a marker of the initial state")]
    MarkerWrite(u64),
    /// A read's writer txn id contradicts who wrote the write id.
    #[error(
        "a read in transaction {reader:#x} names write id {write:#x} with writer {claimed:#x}, but {}",
        actual_writer(*actual, *claimed)
    )]
    WriterMismatch {
        /// The reading transaction.
        reader: u64,
        /// The write id read.
        write: u64,
        /// The writer txn id the read carries.
        claimed: u64,
        /// The transaction that wrote the write id, if any did.
        actual: Option<u64>,
    },
}

fn at_offset(offset: Option<u64>) -> String {
    offset.map(|o| format!(", byte offset {o}")).unwrap_or_default()
}

fn open_txn(open: Option<u64>) -> String {
    match open {
        Some(t) => format!("transaction {t:#x} is open"),
        None => "no transaction is open".to_owned(),
    }
}

fn actual_writer(actual: Option<u64>, claimed: u64) -> String {
    match actual {
        Some(a) => format!("transaction {a:#x} wrote it"),
        None => format!("transaction {claimed:#x} never wrote it"),
    }
}

/// A read's claim about its writer, kept until every file is read.
struct WriterClaim {
    file: usize,
    offset: u64,
    reader: u64,
    write: u64,
    claimed: u64,
}

/// Builds a history from Cobra session files, one at a time.
#[derive(Default)]
pub struct CobraImporter {
    options: CobraOptions,
    history: History,
    files: Vec<PathBuf>,
    keys: HashMap<u64, Key>,
    txn_where: HashMap<u64, (usize, u64)>,
    writer_of: HashMap<u64, u64>,
    claims: Vec<WriterClaim>,
}

impl CobraImporter {
    /// An importer for logs in the given layout.
    pub fn new(options: CobraOptions) -> Self {
        CobraImporter { options, ..Default::default() }
    }

    fn key(&mut self, hash: u64) -> Key {
        if let Some(&k) = self.keys.get(&hash) {
            return k;
        }
        let k = self
            .history
            .keys
            .intern(KeyName { namespace: String::new(), bytes: hash.to_be_bytes().to_vec() });
        self.keys.insert(hash, k);
        k
    }

    /// Adds one session's log. `name` is what errors call the file.
    pub fn add_session(
        &mut self,
        name: impl Into<PathBuf>,
        session: SessionId,
        bytes: &[u8],
    ) -> Result<(), CobraError> {
        let name = name.into();
        let file = self.files.len();
        self.files.push(name.clone());
        let err = |offset: u64, kind| CobraError { file: name.clone(), offset: Some(offset), kind };
        self.parse_session(file, session, bytes, err)
    }

    fn parse_session(
        &mut self,
        file: usize,
        session: SessionId,
        bytes: &[u8],
        err: impl Fn(u64, CobraErrorKind) -> CobraError,
    ) -> Result<(), CobraError> {
        let stamp_fields = usize::from(self.options.timestamped);
        let mut c = Cursor::new(bytes, 0);
        let mut open: Option<(Transaction, u64)> = None;
        let mut seq = 0u64;
        while let Ok(tag) = c.u8("a record tag") {
            let at = c.offset() - 1;
            let fields = match tag {
                b'S' | b'C' => 1 + stamp_fields,
                b'W' => 3,
                b'R' => 4,
                other => return Err(err(at, CobraErrorKind::UnknownTag(other))),
            };
            let body = c.bytes(8 * fields, "a record").map_err(|_| {
                let left = 1 + c.remaining();
                err(at, CobraErrorKind::Truncated { tag: char::from(tag), needed: 1 + 8 * fields, left })
            })?;
            let mut f = [0u64; 4];
            for (slot, field) in f.iter_mut().zip(body.chunks_exact(8)) {
                let mut be = [0u8; 8];
                be.copy_from_slice(field);
                *slot = u64::from_be_bytes(be);
            }
            match tag {
                b'S' => {
                    if let Some((t, open_at)) = &open {
                        return Err(err(
                            at,
                            CobraErrorKind::NestedStart { started: f[0], open: t.id.0, open_at: *open_at },
                        ));
                    }
                    if let Some(&(first_file, first_at)) = self.txn_where.get(&f[0]) {
                        let first = format!("{}, byte offset {first_at}", self.files[first_file].display());
                        return Err(err(at, CobraErrorKind::DuplicateTxn { txn: f[0], first }));
                    }
                    self.txn_where.insert(f[0], (file, at));
                    let mut t = Transaction::new(TxnId(f[0]), session, seq);
                    if self.options.timestamped {
                        t.start_ns = Some(f[1]);
                    }
                    open = Some((t, at));
                }
                b'C' => match open.take() {
                    Some((mut t, _)) if t.id.0 == f[0] => {
                        if self.options.timestamped {
                            t.commit_ns = Some(f[1]);
                        }
                        self.history.transactions.push(t);
                        seq += 1;
                    }
                    other => {
                        return Err(err(
                            at,
                            CobraErrorKind::CommitMismatch {
                                committed: f[0],
                                open: other.map(|(t, _)| t.id.0),
                            },
                        ));
                    }
                },
                b'W' => {
                    let (write, hash) = (f[0], f[1]);
                    if write == INIT_MARKER || write == NULL_MARKER {
                        return Err(err(at, CobraErrorKind::MarkerWrite(write)));
                    }
                    let key = self.key(hash);
                    let Some((t, _)) = open.as_mut() else {
                        return Err(err(at, CobraErrorKind::OutsideTransaction('W')));
                    };
                    t.fence |= hash == FENCE_KEY_HASH;
                    t.ops.push(Op::Write { key, write: WriteId(write), stmt: None });
                    self.writer_of.entry(write).or_insert(t.id.0);
                }
                _ => {
                    let (writer, write, hash) = (f[0], f[1], f[2]);
                    let is_marker = |v: u64| v == INIT_MARKER || v == NULL_MARKER;
                    let key = self.key(hash);
                    let Some((t, _)) = open.as_mut() else {
                        return Err(err(at, CobraErrorKind::OutsideTransaction('R')));
                    };
                    let observed = match (is_marker(writer), is_marker(write)) {
                        (true, true) => Observed::PreHistory(0),
                        (false, false) => {
                            let claim =
                                WriterClaim { file, offset: at, reader: t.id.0, write, claimed: writer };
                            self.claims.push(claim);
                            Observed::Version(WriteId(write))
                        }
                        _ => return Err(err(at, CobraErrorKind::HalfMarker { writer, write })),
                    };
                    t.fence |= hash == FENCE_KEY_HASH;
                    t.ops.push(Op::Read { key, observed, stmt: None });
                }
            }
        }
        if let Some((t, open_at)) = open {
            return Err(err(open_at, CobraErrorKind::Unterminated { txn: t.id.0 }));
        }
        Ok(())
    }

    /// Checks every read's writer txn id and returns the history.
    pub fn finish(self) -> Result<History, CobraError> {
        let txns: HashSet<u64> = self.txn_where.keys().copied().collect();
        for claim in &self.claims {
            let actual = self.writer_of.get(&claim.write).copied();
            let consistent = match actual {
                Some(a) => a == claim.claimed,
                None => !txns.contains(&claim.claimed),
            };
            if !consistent {
                return Err(CobraError {
                    file: self.files[claim.file].clone(),
                    offset: Some(claim.offset),
                    kind: CobraErrorKind::WriterMismatch {
                        reader: claim.reader,
                        write: claim.write,
                        claimed: claim.claimed,
                        actual,
                    },
                });
            }
        }
        Ok(self.history)
    }
}

/// The session number of a Cobra log file name, `T<n>.log`.
pub fn session_of_file_name(name: &str) -> Option<u64> {
    let n = name.strip_prefix('T')?.strip_suffix(".log")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// The `T<n>.log` files of a folder, sorted by session number. Other files are not Cobra logs and are left
/// alone.
pub fn session_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, CobraError> {
    let io = |e: std::io::Error| CobraError {
        file: dir.to_owned(),
        offset: None,
        kind: CobraErrorKind::Io(e.to_string()),
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if let Some(n) = entry.file_name().to_str().and_then(session_of_file_name) {
            files.push((n, entry.path()));
        }
    }
    files.sort();
    Ok(files)
}

/// Imports a Cobra log folder.
pub fn import_dir(dir: &Path, options: CobraOptions) -> Result<History, CobraError> {
    let files = session_files(dir)?;
    if files.is_empty() {
        return Err(CobraError { file: dir.to_owned(), offset: None, kind: CobraErrorKind::NoSessions });
    }
    let mut importer = CobraImporter::new(options);
    for (n, path) in files {
        let bytes = std::fs::read(&path).map_err(|e| CobraError {
            file: path.clone(),
            offset: None,
            kind: CobraErrorKind::Io(e.to_string()),
        })?;
        importer.add_session(path, SessionId(n), &bytes)?;
    }
    importer.finish()
}

/// Imports one session's log from memory, as session 0 (for tests and fuzzing).
pub fn import_bytes(bytes: &[u8], options: CobraOptions) -> Result<History, CobraError> {
    let mut importer = CobraImporter::new(options);
    importer.add_session("<memory>", SessionId(0), bytes)?;
    importer.finish()
}
