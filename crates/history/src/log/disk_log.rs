//! [`DiskLog`]: the [`HistoryLog`] on a [`Store`]: the segment store for new logs, sled for logs written
//! before it (see [`super::store`]).
//!
//! Besides the records, the store's metadata hold the format marker, the run state and where the current run
//! started (see the module doc of [`super`] for what recovery does with them), and the checkpoints.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::compact::{CompactOps, CompactTxn, NewText, TextTable};
use super::group_commit::{FlushPolicy, GroupCommit};
use super::retention::{self, Compaction, Cut, Retain};
use super::store::segments::SegmentStore;
use super::store::sled_store::{SledStore, hex};
use super::store::{Store, StoredRecords, is_sled};
use super::{
    Durability, DurabilityTicket, HistoryLog, LogError, LogOptions, LogRecord, LogStats, LoggedOp, LoggedTxn,
    Tail,
};
use crate::{IsolationLevel, KeyName, Outcome, RecordingHorizon, SessionId, TxnId, WriteId};

const FORMAT_KEY: &str = "format";
const FORMAT_TAG: &[u8] = b"krait-history-log 1";
const STATE_KEY: &str = "state";
const RUN_START_KEY: &str = "run_start";
const TXN_FLOOR_KEY: &str = "txn_floor";

/// The meta key of the checkpoint named `name` ([`HistoryLog::store_checkpoint`]).
fn checkpoint_key(name: &str) -> String {
    format!("checkpoint/{name}")
}
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
    /// Intents of this run without an outcome, with their sequence numbers.
    pending: HashMap<TxnId, u64>,
    closed: bool,
    /// One more than the largest transaction id appended so far, in any run.
    txn_floor: u64,
    /// `txn_floor` when this run opened the log: ids below it belong to earlier runs.
    open_floor: u64,
    /// Set by [`DiskLog::drop_as_if_crashed`]: skip the clean close on drop.
    crashed: bool,
    /// The statement texts and namespaces this open has defined (see [`super::compact`]). Empty at every
    /// open, so that this run cites only definitions it appended itself.
    texts: TextTable,
    /// The latest cuts (see [`retention`]), oldest first; at most [`KEPT_CUTS`].
    cuts: VecDeque<Cut>,
    /// [`super::LogOptions::cut_every_bytes`].
    cut_every: u64,
    /// Bytes of records appended since the last cut.
    bytes_since_cut: u64,
}

/// How many of the latest cuts the log remembers: enough that one is durable while the newest waits for
/// its fsync.
const KEPT_CUTS: usize = 16;

impl Inner {
    /// Takes a cut at `next_seq` if one is due and no intent is pending: the writer's table of texts and
    /// rows starts afresh, so that the records from here on cite nothing before.
    fn cut_if_due(&mut self, next_seq: u64) {
        if self.bytes_since_cut < self.cut_every || !self.pending.is_empty() {
            return;
        }
        self.texts.start_over();
        self.bytes_since_cut = 0;
        if self.cuts.len() == KEPT_CUTS {
            self.cuts.pop_front();
        }
        self.cuts.push_back(Cut { seq: next_seq, txns_below: TxnId(self.txn_floor) });
    }
}

/// The durable history log. Cheap to share behind an `Arc`; appends from many threads are serialised by one
/// short lock, and fsyncs are shared through group commit.
pub struct DiskLog {
    dir: PathBuf,
    store: Arc<dyn Store>,
    durability: Durability,
    inner: Mutex<Inner>,
    gc: GroupCommit,
}

impl std::fmt::Debug for DiskLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskLog").field("durability", &self.durability).finish_non_exhaustive()
    }
}

impl DiskLog {
    /// Opens (or creates) the log in directory `dir` with default options. If the previous run crashed,
    /// appends a [`LogRecord::Recovery`] record first.
    pub fn open(dir: impl AsRef<Path>, durability: Durability) -> Result<Self, LogError> {
        Self::open_with(dir, LogOptions::new(durability))
    }

    /// Opens (or creates) the log with explicit options.
    ///
    /// The directory is made readable by its owner only (0700), and what the store created in it 0600
    /// (folders 0700): the records hold statement texts and the values clients read and wrote.
    pub fn open_with(dir: impl AsRef<Path>, options: LogOptions) -> Result<Self, LogError> {
        let dir = dir.as_ref();
        let private = |e: std::io::Error| {
            LogError::Storage(format!("cannot make {} private to its owner: {e}", dir.display()))
        };
        create_private_dir(dir).map_err(|e| match open_error(dir, e) {
            LogError::Storage(_) => private(std::io::Error::other("cannot create it")),
            other => other,
        })?;
        // Opening writes (the run state below, a recovery record): an I/O error in it says what is wrong with
        // the directory (full, read-only, not this user's), so that a reader can fall back to a copy.
        let opening = |e: LogError| match e {
            LogError::Io { source, .. } => open_error(dir, source),
            other => other,
        };
        let store: Arc<dyn Store> = match is_sled(dir) {
            true => Arc::new(SledStore::open(dir, options.cache_bytes)?),
            false => Arc::new(SegmentStore::open(dir, options.segment_bytes).map_err(opening)?),
        };
        // sled creates its files with the process's umask (0644 by the usual one); files made later sit in
        // the 0700 directory.
        make_private(dir).map_err(private)?;

        match store.get_meta(FORMAT_KEY)? {
            Some(tag) if tag == FORMAT_TAG => {}
            Some(tag) => {
                return Err(LogError::Meta {
                    key: FORMAT_KEY,
                    reason: format!("not a Krait history log of a known format: {:?}", hex(&tag)),
                });
            }
            None if store.next_seq() > 0 => {
                return Err(LogError::Meta { key: FORMAT_KEY, reason: "missing, but records exist".into() });
            }
            None => store.put_meta(FORMAT_KEY, FORMAT_TAG).map_err(opening)?,
        }

        let state = read_state(store.as_ref())?;
        store.recover_torn_tail(matches!(state, RunState::Crashed(_))).map_err(opening)?;
        let mut next_seq = store.next_seq();
        let stored_floor = read_u64(store.as_ref(), TXN_FLOOR_KEY)?;
        // A crashed run left no floor and no list of pending intents: scan what it appended. A log with
        // records but no stored floor at all is scanned whole.
        let scan = match (&state, stored_floor) {
            (_, None) if next_seq > 0 => scan_run(store.records_from(0))?,
            (RunState::Crashed(_), _) => {
                // Retention may have deleted the run's first records; none it deleted had an intent
                // pending (it deletes only below a cut), and the floor was stored before it did.
                let run_start = read_u64(store.as_ref(), RUN_START_KEY)?.unwrap_or(0);
                scan_run(store.records_from(run_start.max(store.first_seq())))?
            }
            _ => RunScan::default(),
        };
        let txn_floor = stored_floor.unwrap_or(0).max(scan.txn_floor);

        if let RunState::Crashed(previous) = state {
            let record = LogRecord::Recovery {
                indeterminate: scan.pending,
                gap: previous != Durability::Strict,
                previous: Some(previous),
            };
            let bytes = record.encode().map_err(|e| LogError::Storage(format!("recovery record: {e}")))?;
            next_seq = store.append(&bytes).map_err(opening)? + 1;
            // Durable before the run start moves past it: a second crash must not lose the record (and the
            // gap it may carry) while the metadata say the crashed run is already dealt with.
            store.flush().map_err(opening)?;
        }

        store.put_meta(RUN_START_KEY, &next_seq.to_be_bytes()).map_err(opening)?;
        store.put_meta(TXN_FLOOR_KEY, &txn_floor.to_be_bytes()).map_err(opening)?;
        store
            .put_meta(STATE_KEY, format!("{RUNNING_PREFIX}{}", options.durability).as_bytes())
            .map_err(opening)?;
        // The run state must be on disk before any append, or a crash in this run would look clean.
        store.flush().map_err(opening)?;

        let policy = match options.durability {
            Durability::Group => FlushPolicy::Every(options.group_interval),
            Durability::Strict | Durability::None => FlushPolicy::OnDemand,
        };
        let flush_store = Arc::clone(&store);
        let gc = GroupCommit::start(
            next_seq,
            policy,
            options.durability == Durability::Strict,
            options.commit_delay,
            Box::new(move || flush_store.flush().map_err(|e| e.to_string())),
        )?;

        Ok(DiskLog {
            dir: dir.to_owned(),
            store,
            durability: options.durability,
            inner: Mutex::new(Inner {
                pending: HashMap::new(),
                closed: false,
                txn_floor,
                open_floor: txn_floor,
                crashed: false,
                texts: TextTable::default(),
                // A run's start is a cut: nothing is pending and the text table is empty.
                cuts: VecDeque::from([Cut { seq: next_seq, txns_below: TxnId(txn_floor) }]),
                cut_every: options.cut_every_bytes.max(1),
                bytes_since_cut: 0,
            }),
            gc,
        })
    }

    /// Drops the log without the clean close, so that the next `open` runs crash recovery. The flusher
    /// still stops, and the store still writes its buffers to its files when dropped, so unlike a real crash
    /// nothing is lost; it exists to test recovery in-process. The SIGKILL test in `tests/log_crash.rs` covers real crashes.
    #[doc(hidden)]
    pub fn drop_as_if_crashed(self) {
        self.lock().crashed = true;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Appends update `Inner` only after the store accepted the record, so it stays consistent even if a
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
        inner.cut_if_due(self.store.next_seq());
        let seq = self.insert(&mut inner, &bytes)?;
        // Still under the lock, so the flusher sees appended seqs in order; before `after`, so that an
        // fsync the outcome's bookkeeping lets go covers the outcome itself.
        let ticket = self.gc.appended(seq);
        after(&mut inner, seq);
        Ok(ticket)
    }

    /// Appends a record that cites statement texts and namespaces (see [`super::compact`]): `build` makes
    /// it from the text table, under the append lock, and the definitions of texts new to this open go in
    /// first, so each has a smaller sequence number than any record citing it.
    fn append_citing(
        &self,
        check: impl FnOnce(&Inner) -> Result<(), LogError>,
        build: impl FnOnce(&mut TextTable, u64, &mut Vec<NewText>) -> LogRecord,
        after: impl FnOnce(&mut Inner, u64),
    ) -> Result<DurabilityTicket, LogError> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(LogError::Closed);
        }
        self.gc.check_usable()?;
        check(&inner)?;
        inner.cut_if_due(self.store.next_seq());
        let mut new = Vec::new();
        let first = self.store.next_seq();
        let record = build(&mut inner.texts, first, &mut new);
        let bytes = record.encode().map_err(|e| LogError::Refused(e.to_string()))?;
        for text in new {
            let definition = text.clone().record().encode().map_err(|e| LogError::Refused(e.to_string()))?;
            let seq = self.insert(&mut inner, &definition)?;
            // Only once it is in the engine: a definition that failed to go in is never cited.
            inner.texts.defined(&text, seq);
            let _ticket = self.gc.appended(seq);
        }
        let seq = self.insert(&mut inner, &bytes)?;
        inner.texts.appended(seq);
        let ticket = self.gc.appended(seq);
        after(&mut inner, seq);
        Ok(ticket)
    }

    /// Hands `bytes` to the store as the next record; returns its sequence number. Only under the append
    /// lock (`held` is its guard's contents), so that sequence numbers follow the order of appends.
    fn insert(&self, held: &mut Inner, bytes: &[u8]) -> Result<u64, LogError> {
        held.bytes_since_cut += bytes.len() as u64;
        self.store.append(bytes).inspect_err(|e| {
            // The store keeps a failed write and refuses every later one: the log has stopped. The failed
            // record got no number, so the next one is its.
            self.gc.fail(format!("cannot write record {}: {e}", self.store.next_seq()));
        })
    }
}

/// `txn` in the compact encoding, its texts looked up (or queued as new) in `texts`.
fn compact_txn(texts: &mut TextTable, txn: LoggedTxn, next_seq: u64, new: &mut Vec<NewText>) -> CompactTxn {
    let ops: CompactOps = texts.encode(txn.ops, txn.statements, next_seq, new);
    CompactTxn {
        id: txn.id,
        session: txn.session,
        seq: txn.seq,
        ops,
        start_ns: txn.start_ns,
        collector: txn.collector,
        fence: txn.fence,
    }
}

impl HistoryLog for DiskLog {
    fn append_intent(&self, txn: LoggedTxn) -> Result<DurabilityTicket, LogError> {
        let id = txn.id;
        self.append_citing(
            |inner| match inner.pending.contains_key(&id) {
                true => Err(LogError::Refused(format!("{id} already has a pending intent"))),
                false => check_fresh_id(inner, id),
            },
            |texts, next, new| LogRecord::CompactIntent(compact_txn(texts, txn, next, new)),
            |inner, seq| {
                inner.pending.insert(id, seq);
                inner.txn_floor = inner.txn_floor.max(id.0.saturating_add(1));
                self.gc.set_in_flight(inner.pending.len(), false);
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
                self.gc.set_in_flight(inner.pending.len(), true);
            },
        )
    }

    fn append_late_ops(
        &self,
        txn: TxnId,
        ops: Vec<LoggedOp>,
        statements: Vec<String>,
    ) -> Result<DurabilityTicket, LogError> {
        self.append_citing(
            |inner| match inner.pending.contains_key(&txn) {
                true => Ok(()),
                false => Err(LogError::Refused(format!("late ops for {txn}, which has no pending intent"))),
            },
            |texts, next, new| LogRecord::CompactLateOps {
                txn,
                ops: texts.encode(ops, statements, next, new),
            },
            |_, _| {},
        )
    }

    fn append_finished(
        &self,
        txn: LoggedTxn,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<DurabilityTicket, LogError> {
        let id = txn.id;
        self.append_citing(
            |inner| match inner.pending.contains_key(&id) {
                true => Err(LogError::Refused(format!("{id} has a pending intent; append its outcome"))),
                false => check_fresh_id(inner, id),
            },
            |texts, next, new| LogRecord::CompactFinished {
                txn: compact_txn(texts, txn, next, new),
                outcome,
                commit_ns,
            },
            |inner, _| inner.txn_floor = inner.txn_floor.max(id.0.saturating_add(1)),
        )
    }

    fn append_session_ended(
        &self,
        session: SessionId,
        last_seq: Option<u64>,
    ) -> Result<DurabilityTicket, LogError> {
        self.append(&LogRecord::SessionEnded { session, last_seq }, |_| Ok(()), |_, _| {})
    }

    fn append_sessions_open(
        &self,
        below: SessionId,
        open: Vec<SessionId>,
    ) -> Result<DurabilityTicket, LogError> {
        self.append(&LogRecord::SessionsOpen { below, open }, |_| Ok(()), |_, _| {})
    }

    fn append_horizon(&self, horizon: &RecordingHorizon) -> Result<DurabilityTicket, LogError> {
        self.append(&LogRecord::HorizonSnapshot(horizon.clone()), |_| Ok(()), |_, _| {})
    }

    fn append_discovered_write(
        &self,
        txn: TxnId,
        key: KeyName,
        write: WriteId,
    ) -> Result<DurabilityTicket, LogError> {
        self.append(&LogRecord::DiscoveredWrite { txn, key, write }, |_| Ok(()), |_, _| {})
    }

    fn append_xids(
        &self,
        txn: TxnId,
        top: Option<u32>,
        xids: Vec<u32>,
    ) -> Result<DurabilityTicket, LogError> {
        self.append(&LogRecord::Xids { txn, top, xids }, |_| Ok(()), |_, _| {})
    }

    fn append_isolation(
        &self,
        session: SessionId,
        level: Option<IsolationLevel>,
    ) -> Result<DurabilityTicket, LogError> {
        let record = match level {
            Some(level) => LogRecord::Isolation { session, level },
            None => LogRecord::IsolationUnknown { session },
        };
        self.append(&record, |_| Ok(()), |_, _| {})
    }

    fn append_resolved(&self, txn: TxnId, outcome: Outcome) -> Result<DurabilityTicket, LogError> {
        if outcome == Outcome::Indeterminate {
            return Err(LogError::Refused(format!("a resolution of {txn} must be committed or aborted")));
        }
        self.append(
            &LogRecord::Resolved { txn, outcome },
            |inner| match inner.pending.contains_key(&txn) {
                true => Err(LogError::Refused(format!("{txn} is pending in this run; append its outcome"))),
                false => Ok(()),
            },
            |_, _| {},
        )
    }

    fn tail(&self, from_seq: u64) -> Tail<'_> {
        Box::new(TailIter(self.store.records_from(from_seq)))
    }

    fn sync(&self) -> Result<(), LogError> {
        self.gc.sync()
    }

    fn fsynced(&self, ticket: DurabilityTicket) -> DurabilityTicket {
        match self.durability {
            Durability::Group => self.gc.fsynced(ticket.seq()),
            Durability::Strict | Durability::None => ticket,
        }
    }

    fn next_seq(&self) -> u64 {
        self.store.next_seq()
    }

    fn checkpoint(&self, name: &str) -> Result<Option<Vec<u8>>, LogError> {
        self.store.get_meta(&checkpoint_key(name))
    }

    fn store_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), LogError> {
        self.store.put_meta(&checkpoint_key(name), bytes)?;
        self.store.flush()
    }

    fn durable_below(&self) -> u64 {
        self.gc.durable_below()
    }

    fn first_seq(&self) -> u64 {
        self.store.first_seq()
    }

    fn clean_cut(&self) -> Option<Cut> {
        let durable = self.gc.durable_below();
        self.lock().cuts.iter().rev().find(|c| c.seq <= durable).copied()
    }

    fn compact(&self, keep_from: u64, retain: &Retain) -> Result<Compaction, LogError> {
        let segments = self.store.segments()?;
        let folder = super::disk_bytes(&self.dir);
        let now = std::time::SystemTime::now();
        let Some(first_kept) = retention::plan(&segments, keep_from, folder, retain, now) else {
            return Ok(Compaction { first_kept: self.store.first_seq(), ..Compaction::default() });
        };
        // The largest id used may be in what goes: a crashed run's scan must not lose it.
        let floor = self.lock().txn_floor;
        self.store.put_meta(TXN_FLOOR_KEY, &floor.to_be_bytes())?;
        self.store.flush()?;
        self.store.remove_before(first_kept)?;
        let gone = segments.iter().take_while(|s| s.first_seq < first_kept);
        let (count, bytes) = gone.fold((0, 0), |(n, b), s| (n + 1, b + s.bytes));
        Ok(Compaction { segments: count, bytes, first_kept })
    }

    fn txn_id_floor(&self) -> TxnId {
        TxnId(self.lock().txn_floor)
    }

    fn durability(&self) -> Durability {
        self.durability
    }

    fn stats(&self) -> LogStats {
        self.gc.stats()
    }

    fn failure(&self) -> Option<String> {
        self.gc.failure()
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
            let bytes = record.encode().map_err(|e| LogError::Storage(format!("recovery record: {e}")))?;
            let seq = self.insert(&mut inner, &bytes)?;
            let _ticket = self.gc.appended(seq);
        }
        inner.closed = true;
        // Makes every record durable; only then may the run be marked clean.
        self.gc.shutdown()?;
        self.store.put_meta(RUN_START_KEY, &self.store.next_seq().to_be_bytes())?;
        self.store.put_meta(TXN_FLOOR_KEY, &inner.txn_floor.to_be_bytes())?;
        self.store.put_meta(STATE_KEY, CLEAN)?;
        self.store.flush()
    }
}

impl Drop for DiskLog {
    fn drop(&mut self) {
        if !self.lock().crashed {
            // Errors here have nowhere to go; a caller who cares calls `close` first and sees them.
            let _ = self.close();
        }
    }
}

/// Decodes the store's record values as [`HistoryLog::tail`] yields them.
struct TailIter<'a>(StoredRecords<'a>);

impl Iterator for TailIter<'_> {
    type Item = Result<(u64, LogRecord), LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.0.next()?.and_then(|(seq, value)| {
            LogRecord::decode(&value)
                .map(|record| (seq, record))
                .map_err(|source| LogError::Corrupt { seq, source })
        }))
    }
}

fn read_state(meta: &dyn Store) -> Result<RunState, LogError> {
    let Some(value) = meta.get_meta(STATE_KEY)? else {
        return Ok(RunState::Fresh);
    };
    if value == CLEAN {
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

fn read_u64(meta: &dyn Store, key: &'static str) -> Result<Option<u64>, LogError> {
    match meta.get_meta(key)? {
        None => Ok(None),
        Some(value) => <[u8; 8]>::try_from(value.as_slice())
            .map(|b| Some(u64::from_be_bytes(b)))
            .map_err(|_| LogError::Meta { key, reason: format!("not 8 bytes: {}", hex(&value)) }),
    }
}

/// Refuses a transaction id that an earlier run already used: replay would reject the log.
fn check_fresh_id(inner: &Inner, id: TxnId) -> Result<(), LogError> {
    match id.0 < inner.open_floor {
        true => Err(LogError::Refused(format!(
            "{id} may belong to an earlier run; this run's ids must be at least {}",
            inner.open_floor
        ))),
        false => Ok(()),
    }
}

/// What recovery learns from the records of a run that crashed.
#[derive(Default)]
struct RunScan {
    /// Intents without an outcome, in append order.
    pending: Vec<TxnId>,
    /// One more than the largest transaction id seen.
    txn_floor: u64,
}

/// Scans `records` (a run's, to the end) for intents without an outcome and the largest transaction id.
fn scan_run(records: StoredRecords<'_>) -> Result<RunScan, LogError> {
    let mut pending: HashMap<TxnId, u64> = HashMap::new();
    let mut txn_floor = 0u64;
    for item in records {
        let (seq, value) = item?;
        match LogRecord::decode(&value).map_err(|source| LogError::Corrupt { seq, source })? {
            LogRecord::Intent(LoggedTxn { id, .. }) | LogRecord::CompactIntent(CompactTxn { id, .. }) => {
                txn_floor = txn_floor.max(id.0.saturating_add(1));
                pending.insert(id, seq);
            }
            LogRecord::Finished { txn: LoggedTxn { id, .. }, .. }
            | LogRecord::CompactFinished { txn: CompactTxn { id, .. }, .. } => {
                txn_floor = txn_floor.max(id.0.saturating_add(1))
            }
            LogRecord::Outcome { txn, .. } => {
                pending.remove(&txn);
            }
            LogRecord::SessionEnded { .. }
            | LogRecord::SessionsOpen { .. }
            | LogRecord::LateOps { .. }
            | LogRecord::CompactLateOps { .. }
            | LogRecord::Statement { .. }
            | LogRecord::Namespace { .. }
            | LogRecord::RowsForgotten
            | LogRecord::TextsForgotten
            | LogRecord::Columns { .. }
            | LogRecord::Horizon { .. }
            | LogRecord::HorizonSnapshot(_)
            | LogRecord::DiscoveredWrite { .. }
            | LogRecord::Xids { .. }
            | LogRecord::Resolved { .. }
            | LogRecord::Isolation { .. }
            | LogRecord::IsolationUnknown { .. } => {}
            LogRecord::Recovery { indeterminate, .. } => {
                for txn in indeterminate {
                    pending.remove(&txn);
                }
            }
        }
    }
    let mut pending: Vec<(u64, TxnId)> = pending.into_iter().map(|(t, s)| (s, t)).collect();
    pending.sort_unstable();
    Ok(RunScan { pending: pending.into_iter().map(|(_, t)| t).collect(), txn_floor })
}

/// Creates `dir` (and any missing parent) with mode 0700, or narrows an existing one to 0700.
#[cfg(unix)]
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Narrows everything under `dir` to its owner: files 0600, folders 0700. Symbolic links are left alone.
#[cfg(unix)]
fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700))?;
            make_private(&entry.path())?;
        } else if kind.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_private(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// What an I/O error while opening the log at `dir` means for the person opening it. Only sled's own lock
/// error names another process: a full disk, a read-only filesystem and a permission each say what they are.
pub(crate) fn open_error(dir: &Path, e: std::io::Error) -> LogError {
    use std::io::ErrorKind;
    let dir = dir.to_owned();
    let reason = match e.kind() {
        _ if e.to_string().starts_with("could not acquire lock") => return LogError::Locked { dir },
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => {
            "the disk is full (opening a log writes to its files, even to read it); free some space, or copy \
             the directory to a disk with room and open the copy"
        }
        ErrorKind::ReadOnlyFilesystem => {
            "it is on a read-only filesystem (opening a log writes to its files, even to read it); remount it \
             read-write, or copy the directory somewhere writable and open the copy"
        }
        ErrorKind::PermissionDenied => {
            "this user may not write to it (opening a log writes to its files, even to read it); run as the \
             log's owner, or copy the directory somewhere writable and open the copy"
        }
        _ => return LogError::Storage(format!("cannot open {}: {e}", dir.display())),
    };
    LogError::Unwritable { dir, reason: format!("{reason} ({e})") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each way an open can fail says what is wrong; only sled's lock suggests a running proxy.
    #[test]
    fn open_errors_say_what_is_wrong() {
        let dir = Path::new("/data/log");
        let full = open_error(dir, std::io::ErrorKind::StorageFull.into());
        assert!(
            matches!(&full, LogError::Unwritable { reason, .. } if reason.contains("disk is full")),
            "{full}"
        );
        let read_only = open_error(dir, std::io::ErrorKind::ReadOnlyFilesystem.into());
        assert!(read_only.to_string().contains("read-only filesystem"), "{read_only}");
        let denied = open_error(dir, std::io::ErrorKind::PermissionDenied.into());
        assert!(denied.to_string().contains("this user may not write to it"), "{denied}");
        let locked = open_error(dir, std::io::Error::other("could not acquire lock on \"/data/log/db\""));
        assert!(matches!(locked, LogError::Locked { .. }));
        for e in [&full, &read_only, &denied] {
            assert!(!e.to_string().contains("proxy"), "only the lock suggests a running proxy: {e}");
        }
    }
}
