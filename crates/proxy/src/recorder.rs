//! The recorder: turns the state machine's transactions into history-log records with the write-ahead
//! protocol of DESIGN.md §3.
//!
//! - Before a message that may commit is forwarded, the transaction so far goes to the log as an intent.
//! - When the transaction ends, its outcome follows (or, for one that never had an intent, a single finished
//!   record). For a commit, the session holds the client's reply until the returned ticket says the outcome
//!   is as durable as `log.durability` promises.
//! - A session that ends with a transaction open records it as aborted or indeterminate, never nothing.
//! - Before a transaction's first record, the isolation level it asked for, when it differs from the last
//!   one logged for the session (one record per change, not per transaction; see [`crate::isolation`]).
//!
//! Ids must not collide with those of earlier runs that wrote to the same log, so session and transaction
//! ids start at the microseconds since the Unix epoch when the proxy started: a later run starts above
//! everything an earlier one allocated unless that run averaged more than one id per microsecond.
//!
//! A session is open from when its id is taken until its recorder is dropped, after its last record. A
//! proxy that ships its log lists the open ones now and then ([`Recorder::list_open_sessions`]), so that a
//! verifier that lost a session's end in a hole of the shipped log can end it (issue 21).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use history::log::{DurabilityTicket, HistoryLog, LogError, LoggedTxn};
use history::{CollectorId, IsolationLevel, Outcome, SessionId, TxnId, now_ns};

use crate::interpret::DiscoveredWrite;
use crate::interpret::ops::reads_only;
use crate::machine::{TxnEnd, TxnSnapshot};
use crate::metrics::Metrics;

/// Shared by all sessions: the log, the id counters and the open sessions.
pub struct Recorder {
    log: Arc<dyn HistoryLog>,
    collector: CollectorId,
    next_txn: AtomicU64,
    sessions: Mutex<Sessions>,
    metrics: Arc<Metrics>,
}

/// The sessions of this run: the next id to take, and those taken whose recorder is not dropped yet. One
/// lock covers both, so that a list of open sessions ([`LogRecord::SessionsOpen`]) names every session
/// below its `below` that can still append.
///
/// [`LogRecord::SessionsOpen`]: history::LogRecord::SessionsOpen
struct Sessions {
    next: u64,
    open: BTreeSet<SessionId>,
}

impl Recorder {
    /// A recorder writing to `log`, stamping `collector` on every transaction.
    pub fn new(log: Arc<dyn HistoryLog>, collector: CollectorId, metrics: Arc<Metrics>) -> Self {
        let base = now_ns() / 1_000;
        Recorder {
            log,
            collector,
            next_txn: AtomicU64::new(base),
            sessions: Mutex::new(Sessions { next: base, open: BTreeSet::new() }),
            metrics,
        }
    }

    /// The log, for the admin server and for shutdown.
    pub fn log(&self) -> &Arc<dyn HistoryLog> {
        &self.log
    }

    /// A recorder for one new session, open until it is dropped.
    pub fn session(self: &Arc<Self>) -> SessionRecorder {
        let id = {
            let mut sessions = self.sessions();
            let id = SessionId(sessions.next);
            sessions.next += 1;
            sessions.open.insert(id);
            id
        };
        SessionRecorder {
            rec: self.clone(),
            id,
            intents: HashMap::new(),
            last_seq: None,
            ended: false,
            level: None,
            fence_pending: None,
        }
    }

    /// Logs which sessions are open ([`history::LogRecord::SessionsOpen`]). A session leaves the list only
    /// when its recorder is dropped, after its last append, so every session the list leaves out has its
    /// records before this one. The ticket is asked for, not waited on: a shipping proxy that falls idle
    /// still ships the list.
    pub fn list_open_sessions(&self) -> Result<(), LogError> {
        let (below, open) = {
            let sessions = self.sessions();
            (SessionId(sessions.next), sessions.open.iter().copied().collect())
        };
        let result = self.log.append_sessions_open(below, open);
        if result.is_err() {
            Metrics::inc(&self.metrics.log_errors);
        }
        result.map(DurabilityTicket::request)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // The set stays consistent whatever panicked while holding the lock: each change is one call.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn logged(&self, session: SessionId, id: TxnId, snap: TxnSnapshot) -> LoggedTxn {
        let mut txn = LoggedTxn::new(id, session, snap.seq);
        txn.statements = snap.statements;
        txn.ops = snap.ops;
        txn.start_ns = Some(snap.start_ns);
        txn.collector = self.collector;
        txn
    }
}

/// A transaction whose intent is in the log.
#[derive(Clone, Copy)]
struct LoggedIntent {
    id: TxnId,
    /// Whether the intent's ops may have written (a write or an opaque statement).
    may_have_written: bool,
    /// The top-level database id and how many ids were logged with it.
    xids_logged: (Option<u32>, usize),
}

/// One session's view of the recorder: which of its transactions have an intent in the log.
pub struct SessionRecorder {
    rec: Arc<Recorder>,
    /// The session id in the history.
    pub id: SessionId,
    /// Transactions with an intent in the log, by session-order position.
    intents: HashMap<u64, LoggedIntent>,
    /// The session-order position of the latest transaction logged, for the session-ended record.
    last_seq: Option<u64>,
    /// Whether the session-ended record is logged (at disconnect, or earlier when the session was lost).
    ended: bool,
    /// The isolation level last logged for the session: every later transaction record of the session
    /// asked for it, as far as the log tells.
    level: Option<IsolationLevel>,
    /// A fence whose intent is logged and whose outcome is not yet ([`SessionRecorder::fence_intent`]).
    fence_pending: Option<TxnId>,
}

impl SessionRecorder {
    /// Logs the intent of a transaction about to (maybe) commit, and returns its id with the database ids
    /// it owns so far, for the caller to name their owner once the intent is in the log. The ticket is not
    /// waited on: the outcome's fsync covers the intent too.
    pub fn intent(&mut self, mut snap: TxnSnapshot) -> Result<(TxnId, Vec<u32>), LogError> {
        let id = TxnId(self.rec.next_txn.fetch_add(1, Ordering::Relaxed));
        let seq = snap.seq;
        let (top, xids) = (snap.top_xid, std::mem::take(&mut snap.xids));
        self.isolation(snap.isolation)?;
        let txn = self.rec.logged(self.id, id, snap);
        let may_have_written = !reads_only(&txn.ops);
        let result = self.rec.log.append_intent(txn);
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        let _ticket = result?;
        // Its ids, for a restart: to own them again, and to resolve it if the run ends before its outcome.
        let _ticket = self.xids(id, top, &xids)?;
        self.intents.insert(seq, LoggedIntent { id, may_have_written, xids_logged: (top, xids.len()) });
        self.saw(seq);
        Ok((id, xids))
    }

    /// Logs the isolation level of the transaction whose first record comes next, unless the log already
    /// says so. An unknown level is counted, and logged as unknown when a level was logged before: the
    /// transaction must not inherit a level it may not have asked for (a session whose level was never
    /// known has none in the log already).
    fn isolation(&mut self, level: Option<IsolationLevel>) -> Result<(), LogError> {
        if level.is_none() {
            Metrics::inc(&self.rec.metrics.isolation_unknown);
        }
        if self.level == level {
            return Ok(());
        }
        let result = self.rec.log.append_isolation(self.id, level);
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        // Not waited on: the transaction's own record comes after it and carries the durability.
        drop(result?);
        self.level = level;
        Ok(())
    }

    /// Logs the database ids of a recorded transaction, if it has any.
    fn xids(
        &mut self,
        id: TxnId,
        top: Option<u32>,
        xids: &[u32],
    ) -> Result<Option<DurabilityTicket>, LogError> {
        if xids.is_empty() {
            return Ok(None);
        }
        let result = self.rec.log.append_xids(id, top, xids.to_vec());
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        result.map(Some)
    }

    /// Logs a write of another transaction that a read of this session discovered. Call before logging
    /// anything of this session that cites it. The ticket is not waited on: the records that cite it come
    /// later and carry their own durability.
    pub fn discovered(&mut self, found: DiscoveredWrite) -> Result<(), LogError> {
        let result = self.rec.log.append_discovered_write(found.writer, found.key, found.write);
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        result.map(drop)
    }

    /// Logs the intent of a fence the proxy runs itself at position `seq` of the session, before its
    /// COMMIT goes out (DESIGN.md §3, "Durability", as for a client transaction), with its transaction id
    /// so that a restart can ask the database how it ended. Returns the ticket to wait on before sending
    /// the COMMIT: once it resolves, a crash leaves the fence without an outcome rather than without a
    /// record, and the next fence's read of its version continues the chain of epochs (the verifier
    /// resolves it). [`SessionRecorder::fence_outcome`] logs how it ended.
    ///
    /// The ticket waits for an fsync under `group` durability too ([`HistoryLog::fsynced`]): a crash
    /// there may lose client transactions, which costs only their reads, but a lost fence breaks the chain
    /// and stops garbage collection for good (seen in the crash harness under `group`).
    pub fn fence_intent(
        &mut self,
        seq: u64,
        ops: Vec<history::log::LoggedOp>,
        statements: Vec<String>,
        xid: Option<u32>,
    ) -> Result<DurabilityTicket, LogError> {
        // Fences run at READ COMMITTED (`fence_sql`); see `fence`.
        if self.level.is_some() {
            self.isolation(Some(IsolationLevel::ReadCommitted))?;
        }
        let id = TxnId(self.rec.next_txn.fetch_add(1, Ordering::Relaxed));
        let mut txn = LoggedTxn::new(id, self.id, seq);
        txn.ops = ops;
        txn.statements = statements;
        txn.start_ns = Some(now_ns());
        txn.collector = self.rec.collector;
        txn.fence = true;
        let result = self.rec.log.append_intent(txn);
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        let mut ticket = result?;
        if let Some(xid) = xid {
            // Its transaction id comes after the intent, and waiting for it covers both.
            ticket = self.xids(id, Some(xid), &[xid])?.unwrap_or(ticket);
        }
        let ticket = self.rec.log.fsynced(ticket);
        self.fence_pending = Some(id);
        self.saw(seq);
        Ok(ticket)
    }

    /// Logs how the fence whose intent [`SessionRecorder::fence_intent`] logged ended; `false` (and nothing
    /// logged) when no fence intent is pending. No one waits on a fence's outcome.
    pub fn fence_outcome(&mut self, committed: bool) -> Result<bool, LogError> {
        let Some(id) = self.fence_pending.take() else { return Ok(false) };
        let outcome = if committed { Outcome::Committed } else { Outcome::Aborted };
        let result = self.rec.log.append_outcome(id, outcome, committed.then(now_ns));
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        result?.request();
        Ok(true)
    }

    /// Logs a fence transaction the proxy ran itself at position `seq` of the session (DESIGN.md §3
    /// "Fences without client changes"), whole, when it ended before its intent was logged (it failed
    /// before returning its rows). Committed fences are not acknowledged to anyone, so the ticket is not
    /// waited on.
    pub fn fence(
        &mut self,
        seq: u64,
        ops: Vec<history::log::LoggedOp>,
        statements: Vec<String>,
        committed: bool,
    ) -> Result<(), LogError> {
        // Fences run at READ COMMITTED (`fence_sql`). Only in a session with a level logged: in one whose
        // level is unknown, the client transactions after the fence would inherit it.
        if self.level.is_some() {
            self.isolation(Some(IsolationLevel::ReadCommitted))?;
        }
        let id = TxnId(self.rec.next_txn.fetch_add(1, Ordering::Relaxed));
        let now = now_ns();
        let mut txn = LoggedTxn::new(id, self.id, seq);
        txn.ops = ops;
        txn.statements = statements;
        txn.start_ns = Some(now);
        txn.collector = self.rec.collector;
        txn.fence = true;
        let outcome = if committed { Outcome::Committed } else { Outcome::Aborted };
        let result = self.rec.log.append_finished(txn, outcome, committed.then_some(now));
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        // No one waits on a fence, but the verifier reads it only once durable.
        result.map(|ticket| {
            ticket.request();
            self.saw(seq)
        })
    }

    /// Logs how a transaction ended (after an intent, with the ops that came after it, if any). Returns its
    /// id, and the ticket to wait on before the client may see a commit: none for a commit that wrote
    /// nothing, when
    /// `ops_known` says the ops are the transaction's whole story (row-level tagging on and in step). A
    /// read-only transaction lost in a crash can hide an anomaly, never fake one, so its client need not
    /// wait for an fsync; its record is still flushed with the next one (DESIGN.md §3, durability).
    pub fn end(
        &mut self,
        end: TxnEnd,
        ops_known: bool,
    ) -> Result<(TxnId, Option<DurabilityTicket>), LogError> {
        let commit_ns = (end.outcome == Outcome::Committed).then_some(end.end_ns);
        let outcome = end.outcome;
        let seq = end.txn.seq;
        let intent = self.intents.remove(&end.txn.seq);
        let read_only = ops_known && !intent.is_some_and(|i| i.may_have_written) && reads_only(&end.txn.ops);
        let id = match intent {
            Some(i) => i.id,
            None => TxnId(self.rec.next_txn.fetch_add(1, Ordering::Relaxed)),
        };
        let (top, xids) = (end.txn.top_xid, end.txn.xids.clone());
        let logged_before = intent.map(|i| i.xids_logged);
        if intent.is_none() {
            self.isolation(end.txn.isolation)?;
        }
        let result = match intent {
            // Ops that came after the intent go first; the outcome's ticket covers them.
            Some(_) if !end.txn.ops.is_empty() => self
                .rec
                .log
                .append_late_ops(id, end.txn.ops, end.txn.statements)
                .and_then(|_| self.rec.log.append_outcome(id, outcome, commit_ns)),
            Some(_) => self.rec.log.append_outcome(id, outcome, commit_ns),
            None => self.rec.log.append_finished(self.rec.logged(self.id, id, end.txn), outcome, commit_ns),
        };
        let ticket = match result {
            Ok(t) => t,
            Err(e) => {
                Metrics::inc(&self.rec.metrics.log_errors);
                return Err(e);
            }
        };
        if outcome != Outcome::Aborted && logged_before != Some((top, xids.len())) {
            let _ticket = self.xids(id, top, &xids)?;
        }
        self.saw(seq);
        let m = &self.rec.metrics;
        Metrics::inc(match outcome {
            Outcome::Committed => &m.txns_committed,
            Outcome::Aborted => &m.txns_aborted,
            Outcome::Indeterminate => &m.txns_indeterminate,
        });
        if outcome == Outcome::Committed && !read_only {
            Ok((id, Some(ticket)))
        } else {
            if outcome == Outcome::Committed {
                Metrics::inc(&m.read_only_commits_unwaited);
            }
            // No one waits on an abort or a read-only commit, but the verifier reads it only once durable.
            ticket.request();
            Ok((id, None))
        }
    }

    /// Logs that the session is over. Call after its open transaction has been recorded, so that a tailing
    /// verifier sees every transaction of the session before its end. The ticket is not waited on (a lost
    /// record only delays garbage collection), only asked for, so that the verifier gets to read it.
    pub fn ended(&mut self) -> Result<(), LogError> {
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        let result = self.rec.log.append_session_ended(self.id, self.last_seq);
        if result.is_err() {
            Metrics::inc(&self.rec.metrics.log_errors);
        }
        result.map(DurabilityTicket::request)
    }

    fn saw(&mut self, seq: u64) {
        self.last_seq = Some(self.last_seq.map_or(seq, |s| s.max(seq)));
    }
}

impl Drop for SessionRecorder {
    /// The session appends nothing more: the next list of open sessions leaves it out, which ends it for a
    /// reader that never saw its end record (one lost in a hole, or whose append failed).
    fn drop(&mut self) {
        self.rec.sessions().open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use history::LogRecord;
    use history::log::{DiskLog, Durability, LogOptions};

    use super::*;

    /// The list names every session whose recorder is alive and bounds the ids it speaks for, so that a
    /// reader ends exactly the sessions that can append nothing more.
    #[test]
    fn the_list_of_open_sessions_leaves_out_a_session_once_its_recorder_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let log: Arc<dyn HistoryLog> =
            Arc::new(DiskLog::open_with(dir.path(), LogOptions::new(Durability::None)).unwrap());
        let recorder = Arc::new(Recorder::new(log.clone(), CollectorId(0), Arc::new(Metrics::default())));
        let (first, mut second) = (recorder.session(), recorder.session());
        let (a, b) = (first.id, second.id);
        second.ended().unwrap();
        drop(first);
        recorder.list_open_sessions().unwrap();
        let third = recorder.session();
        recorder.list_open_sessions().unwrap();
        drop((second, third));
        recorder.list_open_sessions().unwrap();
        let lists: Vec<(SessionId, Vec<SessionId>)> = log
            .tail(0)
            .filter_map(|r| match r.unwrap().1 {
                LogRecord::SessionsOpen { below, open } => Some((below, open)),
                _ => None,
            })
            .collect();
        let c = SessionId(b.0 + 1);
        assert_eq!(
            lists,
            [(c, vec![b]), (SessionId(c.0 + 1), vec![b, c]), (SessionId(c.0 + 1), vec![])],
            "sessions {a:?}, {b:?} (ended, not yet dropped) and {c:?}"
        );
    }
}
