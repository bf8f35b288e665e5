//! The session state machine: a queue of expected replies that matches every backend message to the frontend
//! request that caused it, and the transaction tracking built on top of it. Pure code, no I/O: the session
//! task feeds it each message in the order it forwards them and acts on what it returns.
//!
//! # Reply matching
//!
//! Every forwarded request that the server answers is queued in the session's one [`ReplyQueue`]
//! ([`crate::replies`] lists the server's rules it follows), with tagging's reading of it when tagging is
//! on. Each reply is offered to the tagger with the head request's reading (what the client gets instead,
//! and the ops it reveals), then checked against the head, which it pops when it is the request's last
//! reply. A reply that fits nothing means the proxy misunderstood the stream: the machine then stops
//! tracking ([`Desync`]), the session keeps relaying bytes (unrewritten and unrecorded from then on), and
//! the open transaction is recorded as indeterminate.
//!
//! # Transactions
//!
//! Boundaries and outcomes come from the server: the ReadyForQuery status byte (`I` idle, `T` in a block,
//! `E` failed block) and the CommandComplete tags `COMMIT`, `ROLLBACK` and `PREPARE TRANSACTION`. A statement
//! run while idle is an implicit transaction that ends at the next ReadyForQuery `I` (Sync in the extended
//! protocol) and commits unless an error came first.
//!
//! Two things must be known *before* the server answers, and for those the machine reads the statements'
//! leading keywords ([`crate::sql`]), erring on the safe side:
//! - whether forwarding a message may commit, because the write-ahead intent must reach the log first
//!   (DESIGN.md §3). With tagging in step, a transaction that wrote nothing and runs nothing that may
//!   write needs none: it is logged once, at its end (see `needs_intent`);
//! - whether it may end the transaction. While such a message is unanswered, the next statement-bearing
//!   message waits ([`FrontendStep::Wait`]), so each statement is attributed to the transaction it really
//!   ran in. Clients that do not pipeline across transaction boundaries never wait.

use std::sync::Arc;

use bytes::Bytes;
use history::Outcome;
use wire::pg::{FrontendMessage, Target, TxnStatus};

use crate::interpret::StmtPlan;
use crate::interpret::ops::{TxnOps, reads_only};
use crate::interpret::tagger::{Outgoing, PortalPlan, Reading, Tagger};
use crate::interpret::values::Secrecy;
use crate::isolation::{LevelEffect, Levels, TxnLevel, effect_of_one, effects};
pub use crate::replies::Expect;
use crate::replies::ReplyQueue;
use crate::sql::{StmtKind, classify, classify_one, redact_secrets, session_only};

/// How many prepared statement or portal names a session tracks before it forgets them in bulk. An Execute of
/// a forgotten name is still matched; only its SQL text is missing from the record.
const MAX_TRACKED_NAMES: usize = 10_000;

/// A prepared statement's text and kind, classified once at Parse rather than at every Execute, and its
/// tagging plan (with tagging on), made once at Parse for every Bind.
#[derive(Debug, Clone)]
struct Prepared {
    sql: Arc<str>,
    /// The text as recorded, secrets redacted ([`redact_secrets`]; the same allocation as `sql` when it has
    /// none): redacting at every Execute scanned the text once per transaction of a prepared workload.
    recorded: Arc<str>,
    kind: StmtKind,
    /// Whether it only touches session state ([`session_only`]): asked of every Execute outside a
    /// transaction, where splitting the text into words allocated once per autocommit statement.
    session_only: bool,
    plan: Option<Arc<StmtPlan>>,
    /// What its text says about the secrecy of its values, with tagging on ([`Tagger::secrecy`]).
    secrecy: Secrecy,
    level: Option<LevelEffect>,
}

impl Prepared {
    /// What a Parse of `query` prepares, with tagging's plan when it is on.
    fn parsed(query: &[u8], plan: Option<Arc<StmtPlan>>) -> Self {
        let sql: Arc<str> = Arc::from(wire::pg::text(query).as_ref());
        let recorded = match redact_secrets(&sql) {
            std::borrow::Cow::Borrowed(_) => sql.clone(),
            std::borrow::Cow::Owned(redacted) => Arc::from(redacted),
        };
        Prepared {
            recorded,
            kind: classify_one(query),
            session_only: session_only(query),
            plan,
            secrecy: Secrecy::default(),
            level: effect_of_one(query),
            sql,
        }
    }

    fn unknown() -> Self {
        Prepared::parsed(b"", None)
    }
}

/// A bound portal: its statement, and with tagging on its plan and parameters.
#[derive(Debug, Clone)]
struct Portal {
    prepared: Prepared,
    tagging: Option<PortalPlan>,
}

/// A transaction as far as it has run: what an intent records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnSnapshot {
    /// Its position within the session, counting from 0.
    pub seq: u64,
    /// The statement texts sent in it, in order.
    pub statements: Vec<String>,
    /// When its first statement was forwarded, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// Its reads and writes of rows, when tagging is on ([`crate::interpret`]): in an intent, those so
    /// far; at the end, those not already in its intent.
    pub ops: Vec<history::log::LoggedOp>,
    /// The database transaction ids it owns, as far as tagging learnt them (the `xmin` of rows it wrote,
    /// and its own id when asked for): in an intent, those so far; at the end, all of them.
    pub xids: Vec<u32>,
    /// Its top-level id among them, when known (see `TxnOps::top_xid`).
    pub top_xid: Option<u32>,
    /// The isolation level it asked for, when known ([`crate::isolation`]).
    pub isolation: Option<history::IsolationLevel>,
}

/// A transaction that ended, with how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnEnd {
    /// The transaction.
    pub txn: TxnSnapshot,
    /// Whether an intent was logged for it (then its end is an outcome record, else a finished record).
    pub intent_written: bool,
    /// How it ended.
    pub outcome: Outcome,
    /// When the end was observed.
    pub end_ns: u64,
}

#[derive(Debug, Clone)]
struct OpenTxn {
    snap: TxnSnapshot,
    intent_written: bool,
    had_error: bool,
    /// Whether the database was asked for its id ([`FrontendStep::LearnXid`]).
    xid_asked: bool,
    level: TxnLevel,
    /// How many requests had been pushed when it opened: a ReadyForQuery answers a Sync or Query pushed
    /// earlier, and then says nothing about this transaction (see [`SessionMachine::answers`]).
    opened_tick: u64,
}

/// What to do with a frontend message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendStep {
    /// Forward it. When `intent` is set, append that intent to the history log first.
    Forward {
        /// The write-ahead intent to log before forwarding.
        intent: Option<TxnSnapshot>,
        /// The frame to forward instead of the client's, when tagging rewrote it.
        frame: Option<Bytes>,
    },
    /// Do not forward it yet: it may commit a transaction that ran a statement which may have written rows
    /// the proxy could not see (a SQL function, an unparsed statement). Ask the database for the
    /// transaction's id first (an injected `pg_current_xact_id_if_assigned()`, see `versions`, "Discovered
    /// writes"), give the answer to [`SessionMachine::learned_xid`], then offer the same message again.
    LearnXid,
    /// Do not forward it yet: a request that may end the transaction is unanswered, or (with tagging) the
    /// message may commit and rows of earlier statements are still to come, which its write-ahead intent
    /// must carry. Make sure the server flushes its output (send it a Flush), wait for more replies, then
    /// offer the same message again.
    Wait,
}

/// What a backend message ends and what the client gets instead of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The transactions it ended; a committed one must be durable in the log before the message goes on.
    pub ends: Vec<TxnEnd>,
    /// What to send the client in its place.
    pub outgoing: Outgoing,
}

/// The machine lost track of the protocol; the session should relay bytes without recording from now on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reply matching lost track: {reason}")]
pub struct Desync {
    /// What did not fit.
    pub reason: String,
    /// The open transaction, ended as indeterminate: it must still be recorded.
    pub ends: Vec<TxnEnd>,
}

/// A session's prepared statements or portals by name: a client that prepares its statements names one
/// at every Bind and binds a portal at every execution. Each session's names only cost that session.
type NameMap<V> = history::FastMap<Bytes, V>;

/// One session's protocol and transaction state. See the module docs.
#[derive(Debug)]
pub struct SessionMachine {
    replies: ReplyQueue,
    server_skipping: bool,
    copy_in: bool,
    passthrough: bool,
    /// The status the server will be in once it has run everything forwarded so far, as far as the
    /// leading keywords tell; reset to the server's word whenever the queue drains.
    predicted: TxnStatus,
    /// An Execute ran while idle since the last Sync: that Sync commits an implicit transaction.
    implicit_pending: bool,
    /// The server's last word was ReadyForQuery `I` with nothing outstanding, and the client has sent nothing
    /// but Flush since: the one point where the proxy may run a query of its own without touching the
    /// client's protocol state (a pipeline half sent, a server skipping to Sync after an error).
    at_rest: bool,
    txn: Option<OpenTxn>,
    /// The open transaction's ops, collected beside its statements (with tagging on).
    ops: TxnOps,
    next_seq: u64,
    statements: NameMap<Prepared>,
    portals: NameMap<Portal>,
    suspended: NameMap<()>,
    /// Version tagging, when on: it rewrites requests and reads replies by the queue's readings.
    tagger: Option<Tagger>,
    /// The session's isolation levels.
    levels: Levels,
}

impl Default for SessionMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionMachine {
    /// A machine for a session that has just finished startup (the server sent ReadyForQuery `I`).
    pub fn new() -> Self {
        Self::with_tagging(None)
    }

    /// A machine whose requests and replies also go through `tagger`.
    pub fn with_tagging(tagger: Option<Tagger>) -> Self {
        SessionMachine {
            replies: ReplyQueue::default(),
            server_skipping: false,
            copy_in: false,
            passthrough: false,
            predicted: TxnStatus::Idle,
            implicit_pending: false,
            at_rest: true,
            txn: None,
            ops: TxnOps::default(),
            next_seq: 0,
            statements: NameMap::default(),
            portals: NameMap::default(),
            suspended: NameMap::default(),
            tagger,
            levels: Levels::default(),
        }
    }

    /// A machine that records nothing and relays everything: a session to a database other than the
    /// recorded one.
    pub fn unrecorded() -> Self {
        SessionMachine { passthrough: true, ..Self::new() }
    }

    /// Sets the default isolation level the database reported at the session's start (`None` if it could
    /// not tell: then no transaction of the session has a known level until the client sets one).
    pub fn learnt_default_isolation(&mut self, level: Option<history::IsolationLevel>) {
        self.levels.learnt(level);
    }

    /// The session's tagging, when on.
    pub fn tagger(&self) -> Option<&Tagger> {
        self.tagger.as_ref()
    }

    /// Whether tagging is on and has not lost track, so the ops tell the transaction's whole story.
    pub fn tagging_in_step(&self) -> bool {
        self.tagger.as_ref().is_some_and(|t| !t.is_broken())
    }

    /// The ops collected so far and not yet in an intent or an end (with tagging on).
    pub fn ops(&self) -> &[history::log::LoggedOp] {
        self.ops.as_slice()
    }

    /// The index of the open transaction's latest statement text (the one just offered), for op records.
    pub fn current_statement(&self) -> Option<u32> {
        let n = self.txn.as_ref()?.snap.statements.len();
        u32::try_from(n.checked_sub(1)?).ok()
    }

    /// Takes the next position in session order for a transaction the proxy runs itself (a fence), between
    /// two client transactions.
    pub fn reserve_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Whether the connection is between two client transactions at a protocol rest point: the server has
    /// answered everything with ReadyForQuery `I` and the client has sent nothing since (Flush aside). Only
    /// here may the proxy inject a query: anywhere else the server may be skipping to the client's Sync
    /// after an error (and would drop the injected query unanswered), or be inside the client's pipeline.
    pub fn at_rest(&self) -> bool {
        self.at_rest
            && self.replies.is_empty()
            && self.txn.is_none()
            && !self.passthrough
            && !self.server_skipping
            && !self.copy_in
    }

    /// Whether forwarding `msg` now may commit the open transaction (the same keyword guess
    /// [`SessionMachine::on_frontend`] makes, without changing anything). Messages the server will skip or
    /// ignore (after an error, during COPY FROM STDIN) commit nothing.
    pub fn may_commit(&self, msg: &FrontendMessage) -> bool {
        if self.passthrough || self.copy_in {
            return false;
        }
        match msg {
            FrontendMessage::Sync => self.implicit_pending && self.txn.is_some(),
            _ if self.server_skipping => false,
            FrontendMessage::Query { sql } => self.query_effect(&classify(sql)).1,
            FrontendMessage::Execute { portal, .. } => {
                let kind = self.portals.get(portal).map_or(StmtKind::Plain, |p| p.prepared.kind);
                match kind {
                    StmtKind::Commit | StmtKind::PrepareTxn => true,
                    StmtKind::Other => self.predicted == TxnStatus::Idle,
                    _ => false,
                }
            }
            FrontendMessage::FunctionCall { .. } => self.predicted == TxnStatus::Idle,
            _ => false,
        }
    }

    /// The status a query string leaves the server in, and whether it may commit, as its statements'
    /// leading keywords tell.
    fn query_effect(&self, kinds: &[StmtKind]) -> (TxnStatus, bool) {
        let mut status = self.predicted;
        let (mut may_commit, mut implicit) = (false, false);
        for kind in kinds {
            match kind {
                StmtKind::Begin => status = TxnStatus::InTransaction,
                StmtKind::Commit | StmtKind::PrepareTxn => {
                    may_commit = true;
                    status = TxnStatus::Idle;
                }
                StmtKind::Rollback => status = TxnStatus::Idle,
                StmtKind::Other => {
                    may_commit = true;
                    implicit |= status == TxnStatus::Idle;
                }
                StmtKind::Plain | StmtKind::Savepoint | StmtKind::RollbackTo => {
                    implicit |= status == TxnStatus::Idle;
                }
            }
        }
        may_commit |= implicit && status == TxnStatus::Idle;
        (status, may_commit)
    }

    /// How many requests still wait for replies.
    pub fn outstanding(&self) -> usize {
        self.replies.len()
    }

    /// Whether the machine gave up tracking after a [`Desync`].
    pub fn is_passthrough(&self) -> bool {
        self.passthrough
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    /// Whether the server is in COPY FROM STDIN mode (Flush must not be injected then; it would be ignored
    /// anyway, but the client owns the stream).
    pub fn in_copy_in(&self) -> bool {
        self.copy_in
    }

    /// The expected replies, head first (for tests and diagnostics).
    pub fn expected(&self) -> Vec<Expect> {
        self.replies.expected()
    }

    /// Whether `msg` must wait for the rows of earlier statements: it may commit, and rows still to come are
    /// writes, which its write-ahead intent must hold (DESIGN.md §3). Rows that are reads need no wait: they
    /// follow the intent as late ops, and a crash that loses them can hide an anomaly, never fake one. The
    /// server runs messages in order, so a wait costs a pipelining client one round trip and never waits on
    /// anything the server would not answer ([`Self::may_commit`] is false for messages it skips or
    /// ignores). A tagger that lost track does not wait: its ops are given up anyway.
    fn must_wait_for_rows(&self, msg: &FrontendMessage) -> bool {
        self.tagging_in_step() && self.replies.writes_pending() && self.may_commit(msg)
    }

    /// Whether a commit point needs a write-ahead intent: unless tagging (in step) shows that the transaction
    /// wrote nothing so far and that nothing still to run (the unanswered requests and `next`) writes. A
    /// transaction that only read is then logged once, when it ends: a crash before that loses a reader,
    /// which can hide an anomaly, never fake one (the same argument as the recorder's read-only commits).
    fn needs_intent(&self, next: &Reading) -> bool {
        let reads_only = self.tagging_in_step()
            && reads_only(self.ops.as_slice())
            && self.replies.writes_nothing()
            && next.writes_nothing();
        !reads_only
    }

    /// Whether `msg` may commit an explicit transaction block that ran a statement which may have written
    /// rows unseen, whose id the database was not asked for yet. Only where the database told the
    /// recording horizon (so it has `pg_current_xact_id_if_assigned()`, PostgreSQL 13 and later), and only
    /// in a block that has not failed: the injected query must not be what fails the client's transaction.
    fn wants_xid(&self, msg: &FrontendMessage) -> bool {
        let asks = |t: &OpenTxn| !t.xid_asked && !t.had_error;
        self.tagging_in_step()
            && self.txn.as_ref().is_some_and(asks)
            && self.predicted == TxnStatus::InTransaction
            && !self.server_skipping
            && !self.copy_in
            && self.tagger.as_ref().is_some_and(|t| t.shared().book.horizon().is_some())
            && self.may_commit(msg)
            && self.ops.may_have_written_unseen()
    }

    /// The database's answer to [`FrontendStep::LearnXid`]: the transaction's id (its low 32 bits, as
    /// `xmin` shows it), or `None` when it has none (it wrote nothing) or the question failed.
    pub fn learned_xid(&mut self, xid: Option<u32>) {
        if let Some(x) = xid {
            self.ops.top_level(x);
        }
    }

    /// Notes, once the recorded transaction `id` is in the log, that it owns the database ids `xids`, so
    /// that reads by any session of versions they stamped are discovered writes of `id`.
    pub fn own_xids(&self, xids: &[u32], id: history::TxnId) {
        if let (false, Some(t)) = (xids.is_empty(), &self.tagger) {
            t.shared().book.own(xids, id);
        }
    }

    /// Notes that a discovered write is in the log: later reads of it, by any session, are plain reads of
    /// a recorded version.
    pub fn discovered_logged(&self, key: &history::KeyName, write: history::WriteId) {
        if let Some(t) = &self.tagger {
            t.shared().book.insert(write);
            t.shared().book.set_tombstone(key, None);
        }
    }

    /// Writes of other transactions that this session's reads discovered since the last call, to be
    /// logged before any record of this session that cites them.
    pub fn take_discovered(&mut self) -> Vec<crate::interpret::DiscoveredWrite> {
        self.ops.take_discovered()
    }

    /// Offers one frontend message that is about to be forwarded. On [`FrontendStep::Wait`] nothing changed.
    pub fn on_frontend(&mut self, msg: &FrontendMessage, now_ns: u64) -> FrontendStep {
        if self.must_wait_for_rows(msg) {
            return FrontendStep::Wait;
        }
        if self.wants_xid(msg) {
            // Only at rest inside the block: an injected query must not land in the client's pipeline.
            if !self.replies.is_empty() {
                return FrontendStep::Wait;
            }
            if let Some(t) = self.txn.as_mut() {
                t.xid_asked = true;
            }
            return FrontendStep::LearnXid;
        }
        let step = self.offer(msg, now_ns);
        if matches!(step, FrontendStep::Forward { .. }) && !matches!(msg, FrontendMessage::Flush) {
            self.at_rest = false;
        }
        step
    }

    fn offer(&mut self, msg: &FrontendMessage, now_ns: u64) -> FrontendStep {
        let forward = FrontendStep::Forward { intent: None, frame: None };
        if self.passthrough {
            return forward;
        }
        match msg {
            FrontendMessage::CopyData(_) | FrontendMessage::Flush | FrontendMessage::Password(_) => forward,
            FrontendMessage::Terminate => forward,
            FrontendMessage::CopyDone | FrontendMessage::CopyFail { .. } => {
                self.copy_in = false;
                forward
            }
            FrontendMessage::Sync => {
                if self.copy_in {
                    return forward;
                }
                self.server_skipping = false;
                let commits = self.implicit_pending && self.txn.is_some();
                self.implicit_pending = false;
                if commits {
                    self.predicted = TxnStatus::Idle;
                }
                let intent =
                    if commits && self.needs_intent(&Reading::Nothing) { self.intent() } else { None };
                let ends = commits | self.levels.sync_ends();
                self.replies.push(Expect::Sync, Reading::Nothing, ends, commits);
                FrontendStep::Forward { intent, frame: None }
            }
            _ if self.server_skipping => forward,
            FrontendMessage::Parse { name, query, param_types } => {
                if self.statements.len() >= MAX_TRACKED_NAMES && !self.statements.contains_key(name) {
                    self.statements.clear();
                }
                let (plan, reading, frame) = match self.tagger.as_mut() {
                    Some(t) => {
                        let (plan, reading, frame) = t.parse(name, query, param_types);
                        (Some(plan), reading, frame)
                    }
                    None => (None, Reading::Nothing, None),
                };
                let mut prepared = Prepared::parsed(query, plan);
                if let Some(t) = &self.tagger {
                    prepared.secrecy = t.secrecy(&prepared.sql);
                }
                self.statements.insert(owned(name), prepared);
                self.replies.push(Expect::Parse, reading, false, false);
                FrontendStep::Forward { intent: None, frame }
            }
            FrontendMessage::Bind { portal, statement, .. } => {
                let known = self.statements.get(statement).cloned();
                let (tagging, reading, frame) = match self.tagger.as_mut() {
                    Some(t) => {
                        let plan = match &known {
                            Some(p) => Some(p.plan.clone().unwrap_or_else(|| Arc::new(StmtPlan::Control))),
                            // The unnamed statement of a session that prepared nothing yet: an error reply.
                            None if statement.is_empty() && self.statements.is_empty() => {
                                Some(Arc::new(StmtPlan::Control))
                            }
                            None => None,
                        };
                        let secrecy = known.as_ref().map(|p| p.secrecy).unwrap_or_default();
                        let bound = t.bind(msg, plan, secrecy, &mut self.ops);
                        (Some(bound.portal), bound.reading, bound.frame)
                    }
                    None => (None, Reading::Nothing, None),
                };
                if self.portals.len() >= MAX_TRACKED_NAMES {
                    // Named portals that are never closed die with their transaction on the server; forget
                    // them in bulk rather than grow without bound.
                    self.portals.clear();
                }
                let prepared = known.unwrap_or_else(Prepared::unknown);
                self.portals.insert(owned(portal), Portal { prepared, tagging });
                self.suspended.remove(portal);
                self.replies.push(Expect::Bind, reading, false, false);
                FrontendStep::Forward { intent: None, frame }
            }
            FrontendMessage::Describe { target, name } => {
                let reading = if self.tagger.is_some() {
                    let plan = match target {
                        Target::Statement => self.statements.get(name).and_then(|p| p.plan.clone()),
                        Target::Portal => {
                            self.portals.get(name).and_then(|p| p.tagging.as_ref()).map(|t| t.plan().clone())
                        }
                    };
                    Reading::Describe(plan.unwrap_or_else(|| Arc::new(StmtPlan::Control)))
                } else {
                    Reading::Nothing
                };
                self.replies.push(Expect::Describe(*target), reading, false, false);
                forward
            }
            FrontendMessage::Close { target, name } => {
                match target {
                    Target::Statement => self.statements.remove(name).map(drop),
                    Target::Portal => self.portals.remove(name).map(drop),
                };
                self.replies.push(Expect::Close, Reading::Nothing, false, false);
                forward
            }
            FrontendMessage::Query { sql } => {
                if self.replies.ends_in_flight() > 0 {
                    return FrontendStep::Wait;
                }
                let kinds = classify(sql);
                let records_nothing = self.records_nothing(|| session_only(sql), &kinds);
                let (status, may_commit) = self.query_effect(&kinds);
                let before = std::mem::replace(&mut self.predicted, status);
                if !records_nothing {
                    self.add_statement(sql, now_ns);
                }
                let txn = self.txn.as_mut().map(|t| &mut t.level);
                let levels = self.levels.forwarded(&kinds, &effects(sql, &kinds), before, txn);
                let may_commit = may_commit && !records_nothing;
                let stmt = self.current_statement();
                let (reading, frame) = match self.tagger.as_mut() {
                    Some(t) => t.query(sql, stmt, &mut self.ops),
                    None => (Reading::Nothing, None),
                };
                let intent = if may_commit && self.needs_intent(&reading) { self.intent() } else { None };
                // Every Query may end the transaction: it ends with ReadyForQuery, which closes an implicit one.
                let text = Arc::from(wire::pg::text(sql).as_ref());
                let expect = Expect::Query { sql: text, kinds, levels, done: 0, recorded: !records_nothing };
                self.replies.push(expect, reading, true, may_commit);
                FrontendStep::Forward { intent, frame }
            }
            FrontendMessage::Execute { portal, .. } => {
                if self.replies.ends_in_flight() > 0 {
                    return FrontendStep::Wait;
                }
                let Portal { prepared: Prepared { recorded, kind, session_only, level, .. }, tagging } = self
                    .portals
                    .get(portal)
                    .cloned()
                    // Built only for a portal it does not know: classifying even an empty text allocates.
                    .unwrap_or_else(|| Portal { prepared: Prepared::unknown(), tagging: None });
                let (idle, before) = (self.predicted == TxnStatus::Idle, self.predicted);
                let (may_end, may_commit) = match kind {
                    StmtKind::Begin => {
                        self.predicted = TxnStatus::InTransaction;
                        (false, false)
                    }
                    StmtKind::Commit | StmtKind::PrepareTxn => {
                        self.predicted = TxnStatus::Idle;
                        (true, true)
                    }
                    StmtKind::Rollback => {
                        self.predicted = TxnStatus::Idle;
                        (true, false)
                    }
                    StmtKind::Other => (idle, idle),
                    StmtKind::Plain | StmtKind::Savepoint | StmtKind::RollbackTo => {
                        self.implicit_pending |= idle;
                        (false, false)
                    }
                };
                // Re-executing a suspended portal fetches more rows of the same statement.
                let records_nothing = self.records_nothing(|| session_only, &[kind]);
                if (self.suspended.remove(portal).is_none() || self.txn.is_none()) && !records_nothing {
                    self.add_recorded_at(recorded.to_string(), now_ns, self.replies.ticks());
                }
                let txn = self.txn.as_mut().map(|t| &mut t.level);
                let level = self.levels.forwarded(&[kind], &[level], before, txn).first().copied().flatten();
                let may_commit = may_commit && !records_nothing;
                let reading = match &self.tagger {
                    Some(_) => Reading::Execute {
                        portal: tagging.unwrap_or_else(PortalPlan::unknown),
                        rows: 0,
                        stmt: self.current_statement(),
                        run_logged: false,
                    },
                    None => Reading::Nothing,
                };
                let intent = if may_commit && self.needs_intent(&reading) { self.intent() } else { None };
                let expect =
                    Expect::Execute { portal: portal.clone(), kind, level, recorded: !records_nothing };
                self.replies.push(expect, reading, may_end, may_commit);
                FrontendStep::Forward { intent, frame: None }
            }
            FrontendMessage::FunctionCall { oid, .. } => {
                if self.replies.ends_in_flight() > 0 {
                    return FrontendStep::Wait;
                }
                let idle = self.predicted == TxnStatus::Idle;
                self.add_statement(format!("-- fast-path function call, oid {oid}").as_bytes(), now_ns);
                let intent = if idle { self.intent() } else { None };
                self.replies.push(Expect::FunctionCall, Reading::Nothing, true, idle);
                FrontendStep::Forward { intent, frame: None }
            }
        }
    }

    /// Offers one backend message, before it is forwarded to the client. Returns the transactions it ended
    /// (a committed one must be durable in the log before this message is forwarded) and what the client
    /// gets in its place.
    pub fn on_backend(&mut self, tag: u8, body: &Bytes, now_ns: u64) -> Result<Reply, Desync> {
        if self.passthrough {
            return Ok(Reply { ends: Vec::new(), outgoing: Outgoing::Same });
        }
        // Tagging reads the reply first, by the reading of the request it answers, before matching pops it.
        let outgoing = match self.tagger.as_mut() {
            Some(t) => t.on_reply(tag, body, self.replies.head_mut().map(|r| &mut r.reading), &mut self.ops),
            None => Outgoing::Same,
        };
        match self.match_reply(tag, body, now_ns) {
            Ok(ends) => Ok(Reply { ends, outgoing }),
            Err(reason) => {
                self.passthrough = true;
                let ends = self.end_txn(Outcome::Indeterminate, now_ns, false).into_iter().collect();
                Err(Desync { reason, ends })
            }
        }
    }

    /// The connection is gone (either side). Ends the open transaction: indeterminate when a request that
    /// may have committed it was forwarded and not answered, else aborted (the server rolls back a
    /// transaction whose connection dies before COMMIT).
    pub fn on_disconnect(&mut self, now_ns: u64) -> Option<TxnEnd> {
        // A request that may have committed it is unanswered (with or without an intent: a transaction that
        // only read has none).
        let in_doubt = self.replies.commits_in_flight() > 0 && self.txn.is_some();
        let outcome = if in_doubt { Outcome::Indeterminate } else { Outcome::Aborted };
        self.passthrough = true;
        self.end_txn(outcome, now_ns, false)
    }

    /// Whether a statement about to be forwarded outside any transaction opens none worth recording: a
    /// query that only touches session state (`SET`, `SHOW`, …; [`crate::sql::session_only`]) or a lone
    /// COMMIT or ROLLBACK, which PostgreSQL answers with "there is no transaction in progress".
    fn records_nothing(&self, session_only: impl FnOnce() -> bool, kinds: &[StmtKind]) -> bool {
        let outside =
            self.txn.is_none() && self.predicted == TxnStatus::Idle && self.replies.ends_in_flight() == 0;
        outside
            && (session_only()
                || (!kinds.is_empty()
                    && kinds.iter().all(|k| matches!(k, StmtKind::Commit | StmtKind::Rollback))))
    }

    fn add_statement(&mut self, sql: &[u8], now_ns: u64) {
        self.add_statement_at(sql, now_ns, self.replies.ticks());
    }

    /// Adds a statement to the open transaction, or opens one as if `opened_tick` requests had been pushed.
    ///
    /// Every statement text enters what is recorded through here or [`SessionMachine::add_recorded_at`],
    /// whose texts were redacted at Parse ([`Prepared::recorded`]), so passwords are redacted here.
    fn add_statement_at(&mut self, sql: &[u8], now_ns: u64, opened_tick: u64) {
        self.add_recorded_at(redact_secrets(&wire::pg::text(sql)).into_owned(), now_ns, opened_tick);
    }

    /// [`SessionMachine::add_statement_at`] with the text already redacted, as recorded: an Execute of a
    /// prepared statement.
    fn add_recorded_at(&mut self, text: String, now_ns: u64, opened_tick: u64) {
        match &mut self.txn {
            Some(t) => t.snap.statements.push(text),
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let level = self.levels.opening();
                self.txn = Some(OpenTxn {
                    snap: TxnSnapshot {
                        seq,
                        statements: vec![text],
                        start_ns: now_ns,
                        ops: Vec::new(),
                        xids: Vec::new(),
                        top_xid: None,
                        isolation: None,
                    },
                    intent_written: false,
                    had_error: false,
                    xid_asked: false,
                    level,
                    opened_tick,
                });
            }
        }
    }

    /// The intent to log for the open transaction, once per transaction. A second commit point of the same
    /// transaction (a keyword guess that did not commit) keeps the first intent; its outcome still comes.
    fn intent(&mut self) -> Option<TxnSnapshot> {
        let t = self.txn.as_mut()?;
        if t.intent_written {
            return None;
        }
        t.intent_written = true;
        let mut snap = t.snap.clone();
        snap.ops = self.ops.for_intent();
        snap.xids = self.ops.xids().to_vec();
        snap.top_xid = self.ops.top_xid();
        snap.isolation = t.level.asked();
        Some(snap)
    }

    /// Ends the open transaction. `settled`: no request the client sent after the one that ended it is
    /// outstanding, so the tagger's session state (its `search_path`) has seen nothing planned after it.
    fn end_txn(&mut self, outcome: Outcome, now_ns: u64, settled: bool) -> Option<TxnEnd> {
        // Told even when no transaction is tracked (a block of SETs only): its ROLLBACK still undoes them.
        if let Some(tagger) = self.tagger.as_mut() {
            tagger.transaction_ended(outcome, settled);
        }
        let mut t = self.txn.take()?;
        t.snap.isolation = t.level.asked();
        self.levels.ended(&t.level);
        t.snap.xids = self.ops.xids().to_vec();
        t.snap.top_xid = self.ops.top_xid();
        t.snap.ops = self.ops.take_at_end(t.intent_written);
        if let (true, Some(tagger)) = (t.intent_written, &self.tagger) {
            let late = t.snap.ops.len() as u64;
            tagger.shared().metrics.late_ops.fetch_add(late, std::sync::atomic::Ordering::Relaxed);
        }
        Some(TxnEnd { txn: t.snap, intent_written: t.intent_written, outcome, end_ns: now_ns })
    }

    /// Whether a ReadyForQuery answering the request pushed as `tick` speaks for the open transaction: it
    /// does unless the transaction opened after that request was forwarded. That happens when a COMMIT's
    /// CommandComplete ends a transaction and the client's next statement is let through before the Sync
    /// behind the COMMIT is answered; that Sync's `I` must not end the new transaction.
    fn answers(&self, tick: Option<u64>) -> bool {
        match (&self.txn, tick) {
            (Some(t), Some(tick)) => t.opened_tick < tick,
            _ => false,
        }
    }

    fn head(&self) -> Option<&Expect> {
        self.replies.head().map(|r| &r.expect)
    }
}

/// A name to keep for as long as the session may use it, in its own allocation: the decoded message's
/// `Bytes` is a slice of the read buffer it arrived in, and would keep all of that buffer (up to a whole large
/// message, or a read of many pipelined ones) alive for as long as the name is tracked.
fn owned(name: &Bytes) -> Bytes {
    Bytes::copy_from_slice(name)
}

mod reply;

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
