//! [`SledLog`]: the [`HistoryLog`] on sled.
//!
//! Two sled trees: `records` maps a sequence number (8 bytes, big-endian) to an encoded [`LogRecord`], and
//! `meta` holds the format marker, the run state and where the current run started (see the module doc of
//! [`super`] for what recovery does with them).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use super::group_commit::{FlushPolicy, GroupCommit};
use super::{
    Durability, DurabilityTicket, HistoryLog, LogError, LogOptions, LogRecord, LogStats, LoggedTxn, Tail,
};
use crate::{Outcome, TxnId};

const FORMAT_KEY: &str = "format";
const FORMAT_TAG: &[u8] = b"krait-history-log 1";
const STATE_KEY: &str = "state";
const RUN_START_KEY: &str = "run_start";
const CLEAN: &[u8] = b"clean";
const RUNNING_PREFIX: &str = "running ";

/// How the previous run ended, as the metadata tree says.
enum RunState {
    /// A new log.
    Fresh,
    /// Closed cleanly.
    Clean,
    /// Still marked running: it crashed, under this durability.
    Crashed(Durability),
}

struct Inner {
    next_seq: u64,
    /// Intents of this run without an outcome, with their sequence numbers.
    pending: HashMap<TxnId, u64>,
    closed: bool,
    /// Set by [`SledLog::drop_as_if_crashed`]: skip the clean close on drop.
    crashed: bool,
}

/// The durable history log on sled 0.34. Cheap to share behind an `Arc`; appends from many threads are
/// serialised by one short lock, and fsyncs are shared through group commit.
pub struct SledLog {
    db: sled::Db,
    records: sled::Tree,
    meta: sled::Tree,
    durability: Durability,
    inner: Mutex<Inner>,
    gc: GroupCommit,
}

impl std::fmt::Debug for SledLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledLog").field("durability", &self.durability).finish_non_exhaustive()
    }
}

impl SledLog {
    /// The sled tree that holds the records, for tools that inspect the store directly.
    pub const RECORDS_TREE: &'static str = "records";
    /// The sled tree that holds the log's own metadata.
    pub const META_TREE: &'static str = "meta";

    /// Opens (or creates) the log in directory `dir` with default options. If the previous run crashed,
    /// appends a [`LogRecord::Recovery`] record first.
    pub fn open(dir: impl AsRef<Path>, durability: Durability) -> Result<Self, LogError> {
        Self::open_with(dir, LogOptions::new(durability))
    }

    /// Opens (or creates) the log with explicit options.
    pub fn open_with(dir: impl AsRef<Path>, options: LogOptions) -> Result<Self, LogError> {
        let db = sled::Config::new()
            .path(dir.as_ref())
            .cache_capacity(options.cache_bytes)
            // The log fsyncs itself, so it can count fsyncs and share them; sled's own timer would add
            // uncounted ones.
            .flush_every_ms(None)
            .open()?;
        let records = db.open_tree(Self::RECORDS_TREE)?;
        let meta = db.open_tree(Self::META_TREE)?;

        match meta.get(FORMAT_KEY)? {
            Some(tag) if tag.as_ref() == FORMAT_TAG => {}
            Some(tag) => {
                return Err(LogError::Meta {
                    key: FORMAT_KEY,
                    reason: format!("not a Krait history log of a known format: {:?}", hex(&tag)),
                });
            }
            None if !records.is_empty() => {
                return Err(LogError::Meta { key: FORMAT_KEY, reason: "missing, but records exist".into() });
            }
            None => {
                meta.insert(FORMAT_KEY, FORMAT_TAG)?;
            }
        }

        let mut next_seq = match records.last()? {
            None => 0,
            Some((key, _)) => parse_key(&key, None)?.saturating_add(1),
        };

        if let RunState::Crashed(previous) = read_state(&meta)? {
            let run_start = read_run_start(&meta)?;
            let indeterminate = scan_pending(&records, run_start)?;
            let record = LogRecord::Recovery {
                indeterminate,
                gap: previous != Durability::Strict,
                previous: Some(previous),
            };
            let bytes = record.encode().map_err(|source| LogError::Corrupt { seq: next_seq, source })?;
            records.insert(next_seq.to_be_bytes(), bytes)?;
            next_seq += 1;
        }

        meta.insert(RUN_START_KEY, &next_seq.to_be_bytes())?;
        meta.insert(STATE_KEY, format!("{RUNNING_PREFIX}{}", options.durability).as_bytes())?;
        // The run state must be on disk before any append, or a crash in this run would look clean.
        db.flush()?;

        let policy = match options.durability {
            Durability::Group => FlushPolicy::Every(options.group_interval),
            Durability::Strict | Durability::None => FlushPolicy::OnDemand,
        };
        let flush_db = db.clone();
        let gc = GroupCommit::start(
            next_seq,
            policy,
            options.durability == Durability::Strict,
            Box::new(move || flush_db.flush().map(|_| ()).map_err(|e| e.to_string())),
        )?;

        Ok(SledLog {
            db,
            records,
            meta,
            durability: options.durability,
            inner: Mutex::new(Inner { next_seq, pending: HashMap::new(), closed: false, crashed: false }),
            gc,
        })
    }

    /// Every record below this sequence number is covered by an fsync.
    pub fn durable_below(&self) -> u64 {
        self.gc.durable_below()
    }

    /// Drops the log without the clean close, so that the next `open` runs crash recovery. The flusher
    /// still stops, and sled still writes its buffers when dropped, so unlike a real crash nothing is lost;
    /// it exists to test recovery in-process. The SIGKILL test in `tests/log_crash.rs` covers real crashes.
    #[doc(hidden)]
    pub fn drop_as_if_crashed(self) {
        self.lock().crashed = true;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Appends update `Inner` only after sled accepted the record, so it stays consistent even if a
        // thread panicked while holding the lock.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends one record under the append lock: `check` may refuse it, `after` updates the pending set.
    fn append(
        &self,
        record: &LogRecord,
        check: impl FnOnce(&Inner) -> Result<(), LogError>,
        after: impl FnOnce(&mut Inner, u64),
    ) -> Result<DurabilityTicket, LogError> {
        let bytes = record.encode().map_err(|e| LogError::Refused(e.to_string()))?;
        let mut inner = self.lock();
        if inner.closed {
            return Err(LogError::Closed);
        }
        self.gc.check_usable()?;
        check(&inner)?;
        let seq = inner.next_seq;
        self.records.insert(seq.to_be_bytes(), bytes)?;
        inner.next_seq += 1;
        after(&mut inner, seq);
        // Still under the lock, so the flusher sees appended seqs in order.
        Ok(self.gc.appended(seq))
    }
}

impl HistoryLog for SledLog {
    fn append_intent(&self, txn: LoggedTxn) -> Result<DurabilityTicket, LogError> {
        let id = txn.id;
        self.append(
            &LogRecord::Intent(txn),
            |inner| match inner.pending.contains_key(&id) {
                true => Err(LogError::Refused(format!("{id} already has a pending intent"))),
                false => Ok(()),
            },
            |inner, seq| {
                inner.pending.insert(id, seq);
            },
        )
    }

    fn append_outcome(
        &self,
        txn: TxnId,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<DurabilityTicket, LogError> {
        self.append(
            &LogRecord::Outcome { txn, outcome, commit_ns },
            |inner| match inner.pending.contains_key(&txn) {
                true => Ok(()),
                false => Err(LogError::Refused(format!("outcome for {txn}, which has no pending intent"))),
            },
            |inner, _| {
                inner.pending.remove(&txn);
            },
        )
    }

    fn append_finished(
        &self,
        txn: LoggedTxn,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<DurabilityTicket, LogError> {
        let id = txn.id;
        self.append(
            &LogRecord::Finished { txn, outcome, commit_ns },
            |inner| match inner.pending.contains_key(&id) {
                true => Err(LogError::Refused(format!("{id} has a pending intent; append its outcome"))),
                false => Ok(()),
            },
            |_, _| {},
        )
    }

    fn tail(&self, from_seq: u64) -> Tail<'_> {
        Box::new(TailIter { iter: self.records.range(from_seq.to_be_bytes()..), last: None })
    }

    fn sync(&self) -> Result<(), LogError> {
        self.gc.sync()
    }

    fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    fn durability(&self) -> Durability {
        self.durability
    }

    fn stats(&self) -> LogStats {
        self.gc.stats()
    }

    fn close(&self) -> Result<(), LogError> {
        let mut inner = self.lock();
        if inner.closed {
            return Ok(());
        }
        if !inner.pending.is_empty() {
            // The proxy is going away with COMMITs in flight: their outcomes will never be logged.
            let mut pending: Vec<(u64, TxnId)> = inner.pending.drain().map(|(t, s)| (s, t)).collect();
            pending.sort_unstable();
            let record = LogRecord::Recovery {
                indeterminate: pending.into_iter().map(|(_, t)| t).collect(),
                gap: false,
                previous: Some(self.durability),
            };
            let seq = inner.next_seq;
            let bytes = record.encode().map_err(|source| LogError::Corrupt { seq, source })?;
            self.records.insert(seq.to_be_bytes(), bytes)?;
            inner.next_seq += 1;
            let _ticket = self.gc.appended(seq);
        }
        inner.closed = true;
        // Makes every record durable; only then may the run be marked clean.
        self.gc.shutdown()?;
        self.meta.insert(RUN_START_KEY, &inner.next_seq.to_be_bytes())?;
        self.meta.insert(STATE_KEY, CLEAN)?;
        self.db.flush()?;
        Ok(())
    }
}

impl Drop for SledLog {
    fn drop(&mut self) {
        if !self.lock().crashed {
            // Errors here have nowhere to go; a caller who cares calls `close` first and sees them.
            let _ = self.close();
        }
    }
}

struct TailIter {
    iter: sled::Iter,
    last: Option<u64>,
}

impl Iterator for TailIter {
    type Item = Result<(u64, LogRecord), LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (key, value) = match self.iter.next()? {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e.into())),
        };
        let seq = match parse_key(&key, self.last) {
            Ok(seq) => seq,
            Err(e) => return Some(Err(e)),
        };
        self.last = Some(seq);
        Some(
            LogRecord::decode(&value)
                .map(|record| (seq, record))
                .map_err(|source| LogError::Corrupt { seq, source }),
        )
    }
}

fn parse_key(key: &[u8], after: Option<u64>) -> Result<u64, LogError> {
    <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .map_err(|_| LogError::BadKey { key_hex: hex(key), after })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn read_state(meta: &sled::Tree) -> Result<RunState, LogError> {
    let Some(value) = meta.get(STATE_KEY)? else {
        return Ok(RunState::Fresh);
    };
    if value.as_ref() == CLEAN {
        return Ok(RunState::Clean);
    }
    let text = std::str::from_utf8(&value)
        .map_err(|_| LogError::Meta { key: STATE_KEY, reason: format!("not text: {}", hex(&value)) })?;
    let durability = text
        .strip_prefix(RUNNING_PREFIX)
        .ok_or_else(|| LogError::Meta { key: STATE_KEY, reason: format!("unknown run state {text:?}") })?
        .parse::<Durability>()
        .map_err(|e| LogError::Meta { key: STATE_KEY, reason: e.to_string() })?;
    Ok(RunState::Crashed(durability))
}

fn read_run_start(meta: &sled::Tree) -> Result<u64, LogError> {
    match meta.get(RUN_START_KEY)? {
        None => Ok(0),
        Some(value) => <[u8; 8]>::try_from(value.as_ref()).map(u64::from_be_bytes).map_err(|_| {
            LogError::Meta { key: RUN_START_KEY, reason: format!("not 8 bytes: {}", hex(&value)) }
        }),
    }
}

/// The intents appended since `run_start` that have no outcome, in append order.
fn scan_pending(records: &sled::Tree, run_start: u64) -> Result<Vec<TxnId>, LogError> {
    let mut pending: HashMap<TxnId, u64> = HashMap::new();
    let mut last = None;
    for item in records.range(run_start.to_be_bytes()..) {
        let (key, value) = item?;
        let seq = parse_key(&key, last)?;
        last = Some(seq);
        match LogRecord::decode(&value).map_err(|source| LogError::Corrupt { seq, source })? {
            LogRecord::Intent(txn) => {
                pending.insert(txn.id, seq);
            }
            LogRecord::Outcome { txn, .. } => {
                pending.remove(&txn);
            }
            LogRecord::Recovery { indeterminate, .. } => {
                for txn in indeterminate {
                    pending.remove(&txn);
                }
            }
            LogRecord::Finished { .. } => {}
        }
    }
    let mut pending: Vec<(u64, TxnId)> = pending.into_iter().map(|(t, s)| (s, t)).collect();
    pending.sort_unstable();
    Ok(pending.into_iter().map(|(_, t)| t).collect())
}
