//! The online verifier's side of the history log (DESIGN.md §2): it follows a log that the proxy is still
//! writing and verifies what it records, round by round (Cobra §4, §6.2).
//!
//! - [`Feeder`] reads the records the log has made durable, through the log's one reader
//!   ([`history::log::Replayer`]), pushes each finished transaction into an [`OnlineVerifier`] and tells it
//!   when a session ends (at its `SessionEnded` record, or at the `Recovery` record that ends the proxy run
//!   it belonged to, so that a session open at a crash does not hold `epoch_agree` and garbage collection
//!   back for ever). A transaction is pushed once its outcome is known; a session cannot begin its next
//!   transaction before its COMMIT reply, so this keeps session order. [`Status`] is what it has done.
//! - [`Tailer`] runs a feeder on its own OS thread, never on the proxy's async runtime: every [`POLL`] it
//!   reads the records made durable since the last one it saw, at most [`MAX_RECORDS_PER_TICK`] of them so
//!   that rounds and status keep running through a burst. The proxy only appends to the log and never waits
//!   for the verifier, so a slow round delays verification (the lag grows), not clients.
//!
//! This module reads `history::log` and never a socket: `krait serve` and `krait demo` wire it to the proxy
//! and format what it reports.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use history::log::merge::Merger;
use history::log::{HistoryLog, IdMap, LogError, Replayed, ReplayedTxn, Replayer};
use history::{Durability, Key, KeyTable, Op, Outcome, StmtRef, Transaction, TxnId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{OnlineVerifier, Report, ReportStore, RoundOptions, RoundsError};

mod checkpoint;
pub mod edges;
mod finished;

use checkpoint::with_causes;
pub use checkpoint::{
    CHECKPOINT_EVERY_ROUNDS, CHECKPOINT_INTERVAL, CHECKPOINT_NAME, CheckpointError, CheckpointSchedule,
    Input, Started, StoreCheckpointError,
};
pub use finished::{LogRounds, verify_log_in_rounds};

/// How often the verifier thread looks at the log.
pub const POLL: Duration = Duration::from_millis(100);
/// The most log records one tick reads, so a burst cannot starve rounds and status updates.
pub const MAX_RECORDS_PER_TICK: usize = 20_000;

/// Why the online verifier stopped.
#[derive(Debug, Error)]
pub enum OnlineError {
    /// A record could not be read, or contradicts the records before it.
    #[error("cannot read the history log")]
    Log(#[source] LogError),
    /// A round could not run or its report could not be stored.
    #[error("online verification failed")]
    Rounds(#[source] RoundsError),
    /// A transaction cites a key or statement that the log's reader never interned (a bug in this module).
    #[error("{txn} cites a key or statement that the history log never named")]
    UnknownName {
        /// The transaction.
        txn: TxnId,
    },
    /// The verifier thread could not be started.
    #[error("cannot start the verifier thread")]
    Spawn(#[source] std::io::Error),
    /// The verifier thread panicked.
    #[error("the verifier thread panicked")]
    Panicked,
}

impl RoundOptions {
    /// For verifying while the proxy records (`krait serve`, `krait demo`): a round every `round_size`
    /// transactions or every `interval`, whichever comes first, carrying on after a reject.
    pub fn online(round_size: usize, interval: Duration) -> Self {
        RoundOptions {
            round_size,
            round_interval: Some(interval),
            stop_at_first_reject: false,
            ..RoundOptions::default()
        }
    }
}

/// What the online verifier has done so far, as status lines, `/metrics` and the demo show it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Status {
    /// Log records read so far.
    pub records_read: u64,
    /// The log's next sequence number when last looked at (records appended so far).
    pub log_records: u64,
    /// Finished transactions read from the log (committed, aborted, indeterminate).
    pub txns_read: u64,
    /// Of those, the clients' transactions (not fences) recorded as committed.
    pub committed: u64,
    /// Of those, the clients' transactions whose outcome is not known (a crash, a lost reply).
    pub indeterminate: u64,
    /// Reads and writes (row-level ops) in those transactions.
    pub ops_read: u64,
    /// Statements in those transactions that the proxy could not map to row ops, so were not checked.
    pub unchecked: u64,
    /// Transactions verified by a completed round.
    pub verified: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Reject reports found.
    pub rejects: u64,
    /// Ids of the last stored reports ([`crate::RoundOptions::rejects_kept`]), in order found.
    pub report_ids: Vec<String>,
    /// The verdict line of each of the last rejects.
    pub reject_lines: Vec<String>,
    /// Transactions read but not yet verified, plus log records not yet read.
    pub lag_txns: u64,
    /// How long the oldest transaction not yet verified has been waiting since it was read.
    pub lag: Duration,
    /// When the oldest transaction not yet verified was read, so that the lag can be told between ticks
    /// (a long round publishes nothing while it runs).
    #[serde(skip)]
    pub oldest_unverified: Option<Instant>,
    /// Of the committed ones, those without a start or a commit time: real-time order (strict
    /// serializability) cannot place them.
    pub committed_without_timestamps: u64,
    /// Gaps read: places where a run of the proxy that crashed under `group` or `none` durability may have
    /// lost acknowledged transactions. Online, rounds verify on as if the log were whole.
    pub gaps: u64,
    /// Reads the verifier could not judge and left out: of a version no recorded transaction wrote (a
    /// SQL function's or trigger's write, a writer behind the proxy's back), of a write discovered after a
    /// round verified its writer, or of a collected version before the reader's session first fenced. An
    /// accept says nothing of them.
    pub reads_not_judged: u64,
    /// The same by cause, causes with none left out.
    #[serde(skip)]
    pub reads_not_judged_by_cause: std::collections::BTreeMap<crate::UnverifiableCause, u64>,
    /// Transactions held after the last garbage collection.
    pub live: u64,
    /// Versions the verifier knows by write id: those of live transactions, base versions, and the
    /// tombstones of collected ones, which stay for ever (a later read of one is a stale read).
    #[serde(default)]
    pub known_versions: u64,
    /// Why garbage collection stopped for good, if it did (epochs could not be trusted any more: a fence
    /// chain broke). The verifier then keeps every transaction.
    #[serde(skip)]
    pub gc_stopped: Option<String>,
    /// Why the verifier stopped, if it failed.
    #[serde(skip)]
    pub error: Option<String>,
    /// How this run's verifier started (from a checkpoint or not), once it has.
    #[serde(skip)]
    pub started: Option<Started>,
    /// The records the last checkpoint covers: the one this run stored last, or the one it resumed from.
    #[serde(skip)]
    pub checkpoint_covers: Option<u64>,
    /// Why the last checkpoint could not be stored, if it could not (verification goes on without it).
    #[serde(skip)]
    pub checkpoint_error: Option<String>,
}

impl Status {
    /// One line for a person.
    pub fn line(&self) -> String {
        format!(
            "recorded {} txns ({} row ops, {} statements not checked), verified {}, {} reads not judged, lag \
             {} txns / {:.1} s, {} rounds, {} rejects",
            self.txns_read,
            self.ops_read,
            self.unchecked,
            self.verified,
            self.reads_not_judged,
            self.lag_txns,
            self.lag.as_secs_f64(),
            self.rounds,
            self.rejects
        )
    }
}

/// The positions, in a list that keeps its last `kept` of `total` entries so far, of those after the first
/// `seen`: the verifier keeps only its last rounds and reports, and counts them all.
fn newest(kept: usize, total: u64, seen: u64) -> std::ops::Range<usize> {
    let new = usize::try_from(total.saturating_sub(seen)).unwrap_or(usize::MAX);
    kept.saturating_sub(new)..kept
}

/// Feeds an [`OnlineVerifier`] from a history log; see the module documentation. It serializes to its
/// state, for its checkpoint ([`Feeder::checkpoint`]).
#[derive(Serialize, Deserialize)]
pub struct Feeder {
    replayer: Replayer,
    verifier: OnlineVerifier,
    ids: VerifierIds,
    /// The sequence number of the next record to read.
    next_seq: u64,
    status: Status,
    /// `(cumulative transactions pushed, when)` for each read that pushed some, to measure the lag.
    #[serde(skip)]
    pushed_at: VecDeque<(u64, Instant)>,
    seen_rounds: u64,
    seen_rejects: u64,
    /// The clients' transactions counted as indeterminate, until a resolution says how they ended.
    indeterminate: HashSet<TxnId>,
    /// Whether a gap has been read: every transaction read after it is verified as recorded after a gap
    /// ([`OnlineVerifier::push_after_log_gap`]). In one log, those are the transactions one-shot verification
    /// of the replayed history places after its first gap: a run's Recovery record, which carries the gap,
    /// first finishes every intent of the crashed run.
    past_gap: bool,
}

impl Feeder {
    /// A feeder that reads the log from its first record, writing reject reports into `store` if given.
    pub fn new(options: RoundOptions, store: Option<ReportStore>) -> Self {
        let mut verifier = OnlineVerifier::new(Default::default(), Vec::new(), options);
        // Every statement it pushes is translated by `ids`, which follows the verifier's renumbering.
        verifier.forgetting_statements();
        if let Some(store) = store {
            verifier = verifier.with_report_store(store);
        }
        let mut replayer = Replayer::new();
        replayer.forgetting_statements();
        Feeder {
            replayer,
            verifier,
            ids: VerifierIds::default(),
            next_seq: 0,
            status: Status::default(),
            pushed_at: VecDeque::new(),
            seen_rounds: 0,
            seen_rejects: 0,
            indeterminate: HashSet::new(),
            past_gap: false,
        }
    }

    /// Reads what the log has made durable since the last call (at most `max` records); returns how many.
    pub fn read_log(&mut self, log: &dyn HistoryLog, max: usize) -> Result<usize, OnlineError> {
        // Act only on records a crash cannot take back; under `none` nothing is durable until close.
        let limit = match log.durability() {
            Durability::None => log.next_seq(),
            _ => log.durable_below(),
        };
        let mut n = 0;
        let pushed_before = self.status.txns_read;
        for item in log.tail(self.next_seq) {
            if n >= max {
                break;
            }
            let (seq, record) = item.map_err(OnlineError::Log)?;
            if seq >= limit {
                break;
            }
            self.next_seq = seq + 1;
            n += 1;
            let events = self.replayer.apply(seq, record).map_err(OnlineError::Log)?;
            self.feed_replayed(events)?;
        }
        self.status.records_read = self.next_seq;
        self.status.log_records = log.next_seq();
        if self.status.txns_read > pushed_before {
            self.pushed_at.push_back((self.status.txns_read, Instant::now()));
        }
        Ok(n)
    }

    /// The log is finished (read offline, after its last record): every intent still waiting for an outcome
    /// is pushed as Indeterminate, in log order, as one-shot replay does, and a last round runs. Online, an
    /// intent waits instead, since its outcome may still come.
    pub fn end_of_log(&mut self) -> Result<(), OnlineError> {
        let events = self.replayer.end_of_log();
        self.feed_replayed(events)?;
        self.finish()
    }

    /// Feeds events of its own log reader.
    fn feed_replayed(&mut self, events: Vec<Replayed>) -> Result<(), OnlineError> {
        if events.is_empty() {
            return Ok(());
        }
        // Lent out while its events are fed, since they cite its tables.
        let replayer = std::mem::take(&mut self.replayer);
        let fed = events.into_iter().try_for_each(|event| self.feed(event, Names::of(&replayer)));
        self.replayer = replayer;
        fed
    }

    /// Feeds the events `merger` just released (the merged logs of several collectors), whose keys and
    /// statements refer to its tables; returns how many transactions.
    pub fn feed_events(&mut self, events: Vec<Replayed>, merger: &Merger) -> Result<usize, OnlineError> {
        let pushed_before = self.status.txns_read;
        let names = Names {
            keys: merger.keys(),
            statements: merger.statements(),
            renumbered: merger.statements_renumbered(),
        };
        for event in events {
            self.feed(event, names)?;
        }
        let pushed = self.status.txns_read - pushed_before;
        if pushed > 0 {
            self.pushed_at.push_back((self.status.txns_read, Instant::now()));
        }
        Ok(pushed as usize)
    }

    fn feed(&mut self, event: Replayed, names: Names<'_>) -> Result<(), OnlineError> {
        match event {
            Replayed::Transaction(txn) => self.push(txn, names),
            // A quiet session no longer holds `epoch_agree` (and so collection) back (Cobra §4.2).
            Replayed::SessionEnded(session) => {
                self.verifier.session_ended(session);
                Ok(())
            }
            // Reads after it of versions no transaction is known to have written may be of writes the gap
            // lost: they are not judged, as one-shot verification of the replayed history has them.
            Replayed::Gap(_) => {
                self.status.gaps += 1;
                self.past_gap = true;
                Ok(())
            }
            Replayed::Resolved { txn, outcome } => {
                if self.indeterminate.remove(&txn) {
                    self.status.indeterminate -= 1;
                    self.status.committed += u64::from(outcome == Outcome::Committed);
                }
                self.verifier.resolved(txn, outcome);
                Ok(())
            }
            Replayed::DiscoveredWrite { txn, key, write } => {
                let key = self.ids.key(key, txn, names, &mut self.verifier)?;
                self.verifier.discovered_write(txn, key, write);
                Ok(())
            }
        }
    }

    fn push(&mut self, replayed: ReplayedTxn, names: Names<'_>) -> Result<(), OnlineError> {
        let ReplayedTxn { mut txn, unchecked, position: _ } = replayed;
        self.ids.translate(&mut txn, names, &mut self.verifier)?;
        self.status.txns_read += 1;
        if !txn.fence {
            match txn.outcome {
                Outcome::Committed => {
                    self.status.committed += 1;
                    if txn.start_ns.is_none() || txn.commit_ns.is_none() {
                        self.status.committed_without_timestamps += 1;
                    }
                }
                Outcome::Indeterminate => {
                    self.status.indeterminate += 1;
                    self.indeterminate.insert(txn.id);
                }
                Outcome::Aborted => {}
            }
        }
        self.status.ops_read += txn.ops.len() as u64;
        self.status.unchecked += unchecked.len() as u64;
        self.verifier.note_unchecked(&unchecked);
        let pushed =
            if self.past_gap { self.verifier.push_after_log_gap(txn) } else { self.verifier.push(txn) };
        pushed.map_err(OnlineError::Rounds)?;
        self.after_push();
        Ok(())
    }

    /// Runs a round if the round interval has passed.
    pub fn poll(&mut self) -> Result<(), OnlineError> {
        self.verifier.poll().map_err(OnlineError::Rounds)?;
        self.after_push();
        Ok(())
    }

    /// Admits everything still waiting and runs a last round.
    pub fn finish(&mut self) -> Result<(), OnlineError> {
        self.verifier.finish().map_err(OnlineError::Rounds)?;
        self.after_push();
        Ok(())
    }

    /// New reject verdict lines (with their report ids) since the last call.
    pub fn new_rejects(&mut self) -> Vec<(Option<String>, String)> {
        let (rejects, ids, found) =
            (self.verifier.rejects(), self.verifier.report_ids(), self.verifier.rejects_found());
        let new = newest(rejects.len(), found, self.seen_rejects);
        let out = new.map(|i| (ids.get(i).cloned(), rejects[i].verdict_line())).collect();
        self.seen_rejects = found;
        out
    }

    /// The last reject reports found ([`OnlineVerifier::rejects`]).
    pub fn rejects(&self) -> &[Report] {
        self.verifier.rejects()
    }

    /// The verifier it feeds, to look at (epochs, collection).
    pub fn verifier(&self) -> &OnlineVerifier {
        &self.verifier
    }

    /// The log's reader, to look at (intents still pending).
    pub fn replayer(&self) -> &Replayer {
        &self.replayer
    }

    fn after_push(&mut self) {
        let (rounds, done) = (self.verifier.rounds(), self.verifier.rounds_done());
        for r in &rounds[newest(rounds.len(), done, self.seen_rounds)] {
            self.status.verified += r.admitted as u64;
        }
        self.seen_rounds = done;
        self.status.rounds = done;
        // The lists change only with a new reject; rebuilding them on every read was work per reject kept.
        if self.status.rejects != self.verifier.rejects_found() {
            self.status.rejects = self.verifier.rejects_found();
            self.status.report_ids = self.verifier.report_ids().to_vec();
            self.status.reject_lines = self.verifier.rejects().iter().map(|r| r.verdict_line()).collect();
        }
        while self.pushed_at.front().is_some_and(|&(n, _)| n <= self.status.verified) {
            self.pushed_at.pop_front();
        }
        self.status.oldest_unverified = self.pushed_at.front().map(|&(_, at)| at);
        self.status.lag = self.pushed_at.front().map_or(Duration::ZERO, |&(_, at)| at.elapsed());
        self.status.live = self.verifier.live_transactions() as u64;
        self.status.reads_not_judged = self.verifier.unverifiable_reads();
        self.status.reads_not_judged_by_cause = self.verifier.not_judged().by_cause();
        self.status.known_versions = self.verifier.known_versions() as u64;
        self.status.gc_stopped = self.verifier.gc_disabled().map(str::to_owned);
        let unread = self.status.log_records.saturating_sub(self.status.records_read);
        self.status.lag_txns = self.status.txns_read.saturating_sub(self.status.verified) + unread;
    }

    /// Notes how it started, for its status: the checkpoint it resumed from, if any, is the one a restart
    /// now would use.
    pub fn started(&mut self, started: Started) {
        self.status.checkpoint_covers = started.resumed_at;
        self.status.started = Some(started);
    }

    /// Why the last checkpoint could not be stored, if it could not.
    pub fn checkpoint_error(&self) -> Option<&str> {
        self.status.checkpoint_error.as_deref()
    }

    /// After restoring a checkpoint: the transactions read and not yet verified count their lag from now.
    fn restored(&mut self) {
        self.verifier.forgetting_statements();
        self.replayer.forgetting_statements();
        if self.status.txns_read > self.status.verified {
            self.pushed_at.push_back((self.status.txns_read, Instant::now()));
        }
    }

    /// The state now.
    pub fn status(&mut self) -> Status {
        self.after_push();
        self.status.clone()
    }
}

/// The tables an event's keys and statements refer to: the feeder's own replayer's, or a merger's.
#[derive(Clone, Copy)]
struct Names<'a> {
    keys: &'a KeyTable,
    statements: &'a [String],
    /// How many times the reader renumbered `statements` ([`Replayer::statements_renumbered`]).
    renumbered: u64,
}

impl<'a> Names<'a> {
    fn of(replayer: &'a Replayer) -> Self {
        let renumbered = replayer.statements_renumbered();
        Names { keys: replayer.keys(), statements: replayer.statements(), renumbered }
    }
}

/// The verifier's own ids for the keys and statements of the replayer's tables. The verifier keeps its own
/// key table, since garbage collection adds keys of its own to it (links, `gc` rule 6), so a transaction's
/// keys and statements are translated as it is pushed, each interned the first time a pushed transaction
/// cites it.
#[derive(Default, Serialize, Deserialize)]
struct VerifierIds {
    keys: IdMap<Key>,
    statements: IdMap<StmtRef>,
    /// [`OnlineVerifier::statements_renumbered`] and the reader's [`Replayer::statements_renumbered`] when
    /// `statements` was last valid: once either moves, its numbers in `statements` are stale and the map
    /// starts over.
    #[serde(skip)]
    statements_renumbered: (u64, u64),
}

impl VerifierIds {
    /// The verifier's key for the replayer's `key`, which `txn` cites.
    fn key(
        &mut self,
        key: Key,
        txn: TxnId,
        names: Names<'_>,
        verifier: &mut OnlineVerifier,
    ) -> Result<Key, OnlineError> {
        self.keys.get_or_try_insert(key.0 as usize, || {
            let name = names.keys.name(key).ok_or(OnlineError::UnknownName { txn })?;
            Ok(verifier.intern_key(name.clone()))
        })
    }

    fn translate(
        &mut self,
        txn: &mut Transaction,
        names: Names<'_>,
        verifier: &mut OnlineVerifier,
    ) -> Result<(), OnlineError> {
        let id = txn.id;
        let renumbered = (verifier.statements_renumbered(), names.renumbered);
        if self.statements_renumbered != renumbered {
            self.statements = IdMap::default();
            self.statements_renumbered = renumbered;
        }
        for op in &mut txn.ops {
            let (Op::Read { key, .. } | Op::Write { key, .. }) = op;
            *key = self.key(*key, id, names, verifier)?;
        }
        // Runs' statements too: the reader numbers texts that only a run cites (a read that found nothing),
        // the verifier does not, and from the first such text the two numberings differ.
        txn.try_renumber_statements(|stmt| self.statement(stmt, id, names, verifier))
    }

    /// The verifier's statement for the reader's `stmt`, which `txn` cites.
    fn statement(
        &mut self,
        stmt: StmtRef,
        txn: TxnId,
        names: Names<'_>,
        verifier: &mut OnlineVerifier,
    ) -> Result<StmtRef, OnlineError> {
        let at = stmt.0 as usize;
        self.statements.get_or_try_insert(at, || {
            let text = names.statements.get(at).ok_or(OnlineError::UnknownName { txn })?;
            Ok(verifier.add_statement(text.clone()))
        })
    }
}

/// A [`Feeder`] on its own thread, tailing a live log until told to stop.
pub struct Tailer {
    stop: Arc<AtomicBool>,
    give_up: GiveUp,
    status: Arc<Mutex<Status>>,
    thread: Option<JoinHandle<Result<Status, OnlineError>>>,
}

impl Tailer {
    /// Starts tailing `log` on a new thread. `on_reject` is called (on that thread) once per reject with the
    /// report id and the verdict line.
    pub fn spawn(
        log: Arc<dyn HistoryLog>,
        options: RoundOptions,
        store: Option<ReportStore>,
        on_reject: impl Fn(Option<&str>, &str) + Send + 'static,
    ) -> Result<Tailer, OnlineError> {
        let stop = Arc::new(AtomicBool::new(false));
        let give_up = GiveUp::default();
        let status = Arc::new(Mutex::new(Status::default()));
        let (stop2, give_up2, status2) = (stop.clone(), give_up.clone(), status.clone());
        let thread = std::thread::Builder::new()
            .name("krait-verifier".into())
            .spawn(move || {
                let (mut feeder, started) = Feeder::resume(log.as_ref(), options, store);
                feeder.started(started);
                let publish = |feeder: &mut Feeder| {
                    let s = feeder.status();
                    if let Ok(mut g) = status2.lock() {
                        *g = s.clone();
                    }
                    s
                };
                publish(&mut feeder);
                let mut checkpoints = CheckpointSchedule::new(&feeder);
                let result = (|| -> Result<(), OnlineError> {
                    loop {
                        let stopping = stop2.load(Ordering::Acquire);
                        if stopping && give_up2.given_up() {
                            // What is left stays in the log, for the next run or `krait verify`; reading
                            // nothing still counts it, so that the final state says how much is left. The
                            // checkpoint lets the next run start where this one stopped.
                            feeder.read_log(log.as_ref(), 0)?;
                            checkpoints.store(&mut feeder, |f| f.store_checkpoint(log.as_ref()));
                            return Ok(());
                        }
                        // Once stopping, the proxy has closed the log: the rest is read a tick's worth at a
                        // time, so that giving up is seen between ticks, and the last read runs a last round.
                        let n = feeder.read_log(log.as_ref(), MAX_RECORDS_PER_TICK)?;
                        let done = stopping && n < MAX_RECORDS_PER_TICK;
                        if done {
                            feeder.finish()?;
                        } else {
                            feeder.poll()?;
                        }
                        for (id, line) in feeder.new_rejects() {
                            on_reject(id.as_deref(), &line);
                        }
                        if done || checkpoints.due(&feeder) {
                            checkpoints.store(&mut feeder, |f| f.store_checkpoint(log.as_ref()));
                        }
                        publish(&mut feeder);
                        if done {
                            return Ok(());
                        }
                        if n < MAX_RECORDS_PER_TICK {
                            std::thread::sleep(POLL);
                        }
                    }
                })();
                let mut s = publish(&mut feeder);
                if let Err(e) = &result {
                    s.error = Some(with_causes(e));
                    if let Ok(mut g) = status2.lock() {
                        g.error = s.error.clone();
                    }
                }
                result.map(|()| s)
            })
            .map_err(OnlineError::Spawn)?;
        Ok(Tailer { stop, give_up, status, thread: Some(thread) })
    }

    /// A handle that makes [`Tailer::finish`] stop at the next tick instead of verifying the rest of the log.
    pub fn give_up_handle(&self) -> GiveUp {
        self.give_up.clone()
    }

    /// The state at the last tick.
    pub fn status(&self) -> Status {
        self.status.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Tells the thread to read the rest of the log, run a last round and exit; returns the final state.
    /// Call after the proxy has shut down (so the log is closed and everything in it is durable). A
    /// [`GiveUp`] from [`Tailer::give_up_handle`] cuts that short at the next tick (a round under way runs to
    /// its end): the final state then counts what was left unverified in `lag_txns`.
    pub fn finish(mut self) -> Result<Status, OnlineError> {
        self.stop.store(true, Ordering::Release);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(OnlineError::Panicked),
            None => Ok(self.status()),
        }
    }
}

/// Tells a stopping [`Tailer`] not to verify the rest of the log: `krait serve` gives up after its grace
/// period, or at a second Ctrl-C, so that a backlog does not hold a stop for minutes. Nothing is lost: the
/// log keeps every record, and the next run reads it from its start.
#[derive(Clone, Debug, Default)]
pub struct GiveUp(Arc<AtomicBool>);

impl GiveUp {
    /// Gives up (from any thread).
    pub fn now(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`GiveUp::now`] was called.
    pub fn given_up(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for Tailer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
