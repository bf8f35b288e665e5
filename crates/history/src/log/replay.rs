//! Replay: turns log records back into transactions, interning key names and statement texts.
//!
//! A [`Replayer`] is the one reader of the log. It takes records in sequence order and says what each one
//! finished, as [`Replayed`] events: a transaction whose outcome is now known, a session that will log
//! nothing more, a place where transactions may be missing. The one-shot [`replay`] folds those events into a
//! [`History`]; the online verifier feeds them to its rounds as they arrive. So a transaction reads the same
//! offline and online.
//!
//! **When a transaction is finished.** A [`LogRecord::Finished`] record finishes its transaction at once.
//! An intent waits for its [`LogRecord::Outcome`]; it finishes as Indeterminate instead when no outcome can
//! come any more:
//! - at its session's [`LogRecord::SessionEnded`]: the proxy logs a session's end after the records of all
//!   its transactions, so an outcome that was not logged by then never will be (its append failed);
//! - at a [`LogRecord::Recovery`] record that lists it: the run of the proxy that logged it ended first;
//! - at [`Replayer::end_of_log`], when replaying a log that is still being written: its COMMIT is in flight.
//!
//! A session cannot begin its next transaction before its COMMIT reply, so the transactions of one session
//! finish in session order.
//!
//! **When a session ends.** At its `SessionEnded` record, or at the next `Recovery` record: a Recovery
//! record marks where a run of the proxy ended (it is appended when the log is reopened after a crash, or at
//! a close with intents in flight), and no session of that run logs anything after it. A session that was
//! open at a crash never got its `SessionEnded` record; without this rule it would stay open for ever. And
//! at a [`LogRecord::SessionsOpen`] list that leaves it out: in a shipped log, its end may have fallen in a
//! stretch given up on ([`Replayer::skip_to`]).
//!
//! **Strictness.** A record that contradicts the ones before it (a second record for one transaction, an
//! outcome or late ops with no pending intent, an op pointing at a statement that is not there) is an error
//! that names the record's sequence number, never a skipped record: the proxy wrote the log, so a
//! contradiction in it is a bug to surface, and skipping it would verify a history the clients did not see.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::LogError;
use super::compact::Resolver;
use super::record::{LogRecord, LoggedTxn};
use crate::{
    History, IsolationLevel, Key, KeyTable, LogGap, Observed, Op, Outcome, RecordingHorizon, SessionId,
    StmtRef, Transaction, TxnId, UncheckedStatement, WriteId,
};

/// What a log record finished, in the order it finished it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Replayed {
    /// A transaction whose outcome is now known (Indeterminate when none will ever come).
    Transaction(ReplayedTxn),
    /// A session that will log no more transactions; every transaction of it came before.
    SessionEnded(SessionId),
    /// Acknowledged transactions may be missing here: the run of the proxy that ended at this point
    /// crashed under `group` or `none` durability.
    Gap(LogGap),
    /// The outcome the database gave, after a restart, for a transaction already finished as Indeterminate
    /// ([`LogRecord::Resolved`]).
    Resolved {
        /// The transaction.
        txn: TxnId,
        /// How it ended: committed or aborted.
        outcome: Outcome,
    },
    /// A write of an already finished transaction, discovered by a later read ([`LogRecord::DiscoveredWrite`]).
    /// Every record citing `write` comes after this event. The transaction was committed (or indeterminate
    /// and, since its version was read, committed after all); it is the transaction's last write of `key`,
    /// the version every other transaction could see.
    DiscoveredWrite {
        /// The transaction that wrote it.
        txn: TxnId,
        /// The key written, interned in [`Replayer::keys`].
        key: Key,
        /// The version.
        write: WriteId,
    },
}

/// A finished transaction, as [`Replayed::Transaction`] carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayedTxn {
    /// The transaction. Its keys and statements refer to the replayer's tables ([`Replayer::keys`] and
    /// [`Replayer::statements`]).
    #[serde(with = "crate::plain::transaction")]
    pub txn: Transaction,
    /// Its statements that the proxy could not map to reads and writes of rows.
    pub unchecked: Vec<UncheckedStatement>,
    /// Its place in log order: how many transactions had their first record (intent or finished) before
    /// its own. The one-shot [`replay`] lists transactions in this order.
    pub position: u64,
}

/// The database transaction ids a transaction owns, from its [`LogRecord::Xids`] records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnXids {
    /// Its top-level id, if known.
    pub top: Option<u32>,
    /// Every id it owns, as far as known.
    pub xids: Vec<u32>,
}

/// Turns log records, fed in sequence order, into [`Replayed`] events; see the module documentation.
///
/// It serializes to what it has read so far, so that a reader can stop, store it, and go on later from the
/// next record as if it had never stopped (the online verifier's checkpoint).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Replayer {
    /// Statement texts and namespaces defined so far, to expand compact records.
    resolver: Resolver,
    /// The key names interned so far.
    keys: KeyTable,
    /// The statement texts added so far, each once.
    statements: StatementTable,
    /// Every transaction that had a record so far, to refuse a second record for one.
    seen: IdRanges,
    /// Intents still waiting for an outcome.
    pending: HashMap<TxnId, ReplayedTxn>,
    /// The database ids of each transaction, when asked to keep them ([`Replayer::keeping_xids`]).
    xids: Option<HashMap<TxnId, TxnXids>>,
    /// Intents finished as Indeterminate at their session's end. The Recovery record that ends their run may
    /// still list them; no other record may mention them.
    abandoned: HashSet<TxnId>,
    /// Sessions that logged a transaction and have not ended.
    open_sessions: HashSet<SessionId>,
    /// The position the next new transaction takes.
    next_position: u64,
    /// The sequence number the next record must have, once one was seen.
    next_seq: Option<u64>,
    /// The first recording horizon the log holds ([`LogRecord::HorizonSnapshot`]).
    horizon: Option<RecordingHorizon>,
    /// The isolation level each open session's transactions asked for, from its last
    /// [`LogRecord::Isolation`].
    levels: HashMap<SessionId, IsolationLevel>,
    /// Stretches of records skipped with [`Replayer::skip_to`].
    holes: u32,
    /// Set by [`Replayer::after`]: transactions below it had their records before the first one fed.
    earlier: Option<TxnId>,
    /// Records after a hole that refer to what it held (an outcome of an intent in it, a text it defined),
    /// dropped.
    lost_to_holes: u64,
    /// Whether texts no pending intent cites may be forgotten ([`Replayer::forgetting_statements`]).
    #[serde(skip)]
    forget_statements: bool,
    /// How many times the statements were renumbered since this replayer was made or restored.
    #[serde(skip)]
    statements_renumbered: u64,
}

/// The table of statement texts is looked at only from this many texts on ([`Replayer::forgetting_statements`]).
const FORGET_STATEMENTS_FROM: usize = 4_096;

impl Replayer {
    /// A replayer for a log read from its first record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps the database ids of each transaction ([`LogRecord::Xids`]), which replay otherwise skips.
    pub fn keeping_xids(mut self) -> Self {
        self.xids = Some(HashMap::new());
        self
    }

    /// A replayer for the records from a run's start on (the first record a run of the proxy appended,
    /// or a Recovery record), when transactions below `earlier` had all their records before it: what a
    /// restarting proxy reads after its checkpoint. A later run refers to them only to resolve a crash
    /// window ([`LogRecord::Resolved`]), to log a write a read discovered ([`LogRecord::DiscoveredWrite`]),
    /// or in a Recovery record; those records pass on as [`Replayed`] events (the one-shot
    /// [`replay_tail`] collects them in [`ReplayedTail::earlier`]). Any other record about one is still an
    /// error, except its first: the records may also start at a cut in the middle of a run
    /// ([`super::retention::Cut`]), and a transaction whose id was taken before the cut may append its
    /// first record after it (ids are taken at `BEGIN`, records appended as statements run).
    pub fn after(mut self, earlier: TxnId) -> Self {
        self.earlier = Some(earlier);
        self
    }

    /// Whether `txn` had its records before the first record fed ([`Replayer::after`]).
    fn before_first(&self, txn: TxnId) -> bool {
        self.earlier.is_some_and(|e| txn < e) && !self.seen.contains(txn)
    }

    /// The key names interned so far; the keys of every replayed transaction refer to this table.
    pub fn keys(&self) -> &KeyTable {
        &self.keys
    }

    /// The statement texts added so far; the statements of every replayed transaction refer to this list.
    pub fn statements(&self) -> &[String] {
        self.statements.texts()
    }

    /// The recording horizon: the first one the log holds, once read. A later run's horizon is not when
    /// recording began, so it is ignored.
    pub fn horizon(&self) -> Option<&RecordingHorizon> {
        self.horizon.as_ref()
    }

    /// Transactions whose intent has no outcome yet.
    pub fn pending(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.pending.keys().copied()
    }

    /// The transaction of a pending intent, as recorded so far (its keys refer to [`Replayer::keys`]).
    pub fn pending_transaction(&self, txn: TxnId) -> Option<&Transaction> {
        self.pending.get(&txn).map(|p| &p.txn)
    }

    /// Gives up on the records from the next expected one up to `seq`, which never came (a shipped log
    /// with a stretch lost in transit): the next record is `seq`. Records after it that refer to what the
    /// stretch held (the outcome or late ops of an intent in it, a statement text it defined) are dropped
    /// and counted ([`Replayer::lost_to_holes`]), where a whole log would make them an error. An intent the
    /// stretch may have finished stays pending until its session's next transaction or its end.
    pub fn skip_to(&mut self, seq: u64) {
        self.next_seq = Some(seq);
        self.holes += 1;
        self.resolver.after_hole();
    }

    /// Lets the replayer forget, before it applies a record, the statement texts that no pending intent
    /// cites, once it holds many and at most half are cited (issue 20, bounded memory: a client that puts
    /// its values in its statements makes a text per run). The texts the pending intents cite are
    /// renumbered. So the caller must be done with every event returned so far (their statements refer to
    /// the table as it was), and must look statements up again whenever
    /// [`Replayer::statements_renumbered`] moves. The online verifier's feeder does both; a merger, which
    /// holds events back, does not ask.
    pub fn forgetting_statements(&mut self) {
        self.forget_statements = true;
    }

    /// How many times the statements were renumbered since this replayer was made or restored.
    pub fn statements_renumbered(&self) -> u64 {
        self.statements_renumbered
    }

    /// Rebuilds the table of texts from those the pending intents cite, if asked to and worth it (see
    /// [`Replayer::forgetting_statements`]). The rule reads only what a checkpoint stores, and renumbers in
    /// log order, so a restored replayer renumbers as one that never stopped does.
    fn forget_statements(&mut self) {
        if self.forget_statements {
            self.forget_uncited_statements();
        }
    }

    /// Forgets now, if worth it, the statement texts no pending intent cites, as
    /// [`Replayer::forgetting_statements`] lets it do before each record; returns whether it renumbered.
    /// For a caller that holds events back and knows when it holds none (a merger).
    pub fn forget_uncited_statements(&mut self) -> bool {
        let texts = self.statements.texts();
        if texts.len() < FORGET_STATEMENTS_FROM {
            return false;
        }
        let mut pending: Vec<&mut ReplayedTxn> = self.pending.values_mut().collect();
        pending.sort_unstable_by_key(|p| p.position);
        let mut kept = StatementTable::default();
        let mut renumbered: HashMap<StmtRef, StmtRef> = HashMap::new();
        for p in &pending {
            for old in p.txn.cited_statements() {
                renumbered.entry(old).or_insert_with(|| kept.intern(&texts[old.0 as usize]));
            }
        }
        if renumbered.len() * 2 > texts.len() {
            return false;
        }
        for p in pending {
            p.txn.renumber_statements(|s| renumbered[&s]);
        }
        self.statements = kept;
        self.statements_renumbered += 1;
        true
    }

    /// How many definitions of texts the log's reader holds to expand compact records (see
    /// [`super::compact`]).
    pub fn definitions(&self) -> usize {
        self.resolver.definitions()
    }

    /// Records dropped because they refer to what a skipped stretch held.
    pub fn lost_to_holes(&self) -> u64 {
        self.lost_to_holes
    }

    /// Recorded rows left out of transactions, and statement runs kept without their parameters, because
    /// their values were in a skipped stretch (the transactions themselves are kept: values never decide a
    /// verdict).
    pub fn values_lost_to_holes(&self) -> u64 {
        self.resolver.values_lost()
    }

    /// A record that refers to something the log never showed: after a skipped stretch, counted and
    /// dropped; otherwise the log is inconsistent.
    fn missing(&mut self, seq: u64, why: String) -> Result<(), LogError> {
        if self.holes == 0 {
            return Err(inconsistent(seq, why));
        }
        self.lost_to_holes += 1;
        Ok(())
    }

    /// The key table and the statement list, once replay is over.
    pub fn into_tables(self) -> (KeyTable, Vec<String>) {
        (self.keys, self.statements.into_texts())
    }

    /// Applies one record and returns what it finished, in order. Records must come in increasing sequence
    /// order; a hole in the sequence numbers is reported, since appends never leave one.
    pub fn apply(&mut self, seq: u64, record: LogRecord) -> Result<Vec<Replayed>, LogError> {
        if let Some(expected) = self.next_seq
            && seq != expected
        {
            return Err(inconsistent(seq, format!("expected record {expected} next; the log has a hole")));
        }
        self.next_seq = Some(seq.saturating_add(1));
        self.forget_statements();
        // Definitions are kept, compact records expanded; what follows sees records as the proxy made them.
        let record = match self.resolver.resolve(seq, record) {
            Ok(Some(record)) => record,
            Ok(None) => return Ok(Vec::new()),
            Err(LogError::Inconsistent { reason, .. }) => {
                self.missing(seq, reason)?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let mut finished = Vec::new();
        match record {
            LogRecord::Intent(txn) => {
                finished.extend(self.orphans_before(&txn));
                let intent = self.start(seq, txn, Outcome::Indeterminate, None)?;
                self.pending.insert(intent.txn.id, intent);
            }
            LogRecord::Finished { txn, outcome, commit_ns } => {
                finished.extend(self.orphans_before(&txn));
                let txn = self.start(seq, txn, outcome, commit_ns)?;
                finished.push(Replayed::Transaction(txn));
            }
            LogRecord::Outcome { txn, outcome, commit_ns } => {
                let Some(mut intent) = self.pending.remove(&txn) else {
                    let why = self.not_pending(txn, "an outcome");
                    return self.missing(seq, why).map(|()| finished);
                };
                intent.txn.outcome = outcome;
                intent.txn.commit_ns = commit_ns;
                finished.push(Replayed::Transaction(intent));
            }
            LogRecord::LateOps { txn, ops, statements } => {
                let Some(intent) = self.pending.get(&txn) else {
                    let why = self.not_pending(txn, "late ops");
                    return self.missing(seq, why).map(|()| finished);
                };
                let mut late = LoggedTxn::new(txn, intent.txn.session, intent.txn.seq);
                (late.ops, late.statements) = (ops, statements);
                let (late, unchecked) = self.convert(seq, late, Outcome::Indeterminate, None)?;
                if let Some(intent) = self.pending.get_mut(&txn) {
                    if let Some(values) = late.values {
                        let before = intent.txn.ops.len() as u32;
                        intent.txn.values.get_or_insert_default().append(*values, before);
                    }
                    intent.txn.ops.extend(late.ops);
                    intent.unchecked.extend(unchecked);
                }
            }
            LogRecord::SessionEnded { session, .. } => {
                // An intent of the session still pending will get no outcome: it finishes first, so that
                // every transaction of the session comes before its end.
                finished.extend(self.abandon(session, None));
                self.open_sessions.remove(&session);
                self.levels.remove(&session);
                finished.push(Replayed::SessionEnded(session));
            }
            LogRecord::SessionsOpen { below, mut open } => {
                // Sessions it leaves out ended before it; only a hole can have hidden their ends.
                open.sort_unstable();
                let mut ended: Vec<SessionId> = self
                    .open_sessions
                    .iter()
                    .copied()
                    .filter(|s| *s < below && open.binary_search(s).is_err())
                    .collect();
                ended.sort_unstable();
                for session in ended {
                    finished.extend(self.abandon(session, None));
                    self.open_sessions.remove(&session);
                    finished.push(Replayed::SessionEnded(session));
                }
                self.levels.retain(|s, _| *s >= below || open.binary_search(s).is_ok());
            }
            LogRecord::DiscoveredWrite { txn, key, write } => {
                let key = self.keys.intern(key);
                let op = Op::Write { key, write, stmt: None };
                if let Some(intent) = self.pending.get_mut(&txn) {
                    // Readers may each log the same discovery: the transaction gets the write once.
                    if !intent.txn.ops.contains(&op) {
                        intent.txn.ops.push(op);
                    }
                } else if self.seen.contains(txn) || self.before_first(txn) {
                    finished.push(Replayed::DiscoveredWrite { txn, key, write });
                } else {
                    self.missing(seq, format!("a discovered write of {txn}, which has no record"))?;
                }
            }
            // Only a restarting proxy reads them back (to own the ids again, and to resolve a crash window).
            LogRecord::Xids { txn, top, xids } => {
                if let Some(kept) = self.xids.as_mut() {
                    let entry = kept.entry(txn).or_default();
                    entry.top = entry.top.or(top);
                    for x in xids {
                        if !entry.xids.contains(&x) {
                            entry.xids.push(x);
                        }
                    }
                }
            }
            LogRecord::Resolved { txn, outcome } => {
                if outcome == Outcome::Indeterminate {
                    return Err(inconsistent(seq, format!("a resolution of {txn} as indeterminate")));
                }
                if let Some(mut intent) = self.pending.remove(&txn) {
                    intent.txn.outcome = outcome;
                    finished.push(Replayed::Transaction(intent));
                } else if self.seen.contains(txn) || self.before_first(txn) {
                    finished.push(Replayed::Resolved { txn, outcome });
                } else {
                    self.missing(seq, format!("a resolution of {txn}, which has no record"))?;
                }
            }
            LogRecord::Horizon { xid } => {
                self.horizon.get_or_insert(RecordingHorizon::from_xmin(xid));
            }
            LogRecord::HorizonSnapshot(horizon) => {
                self.horizon.get_or_insert(horizon);
            }
            LogRecord::Isolation { session, level } => {
                self.levels.insert(session, level);
            }
            LogRecord::IsolationUnknown { session } => {
                self.levels.remove(&session);
            }
            // The resolver keeps definitions and expands compact records; none of these gets here.
            LogRecord::Statement { .. }
            | LogRecord::Namespace { .. }
            | LogRecord::RowsForgotten
            | LogRecord::TextsForgotten
            | LogRecord::Columns { .. }
            | LogRecord::CompactIntent(_)
            | LogRecord::CompactFinished { .. }
            | LogRecord::CompactLateOps { .. } => {
                return Err(inconsistent(seq, "a compact record the resolver did not expand".into()));
            }
            LogRecord::Recovery { indeterminate, gap, previous: _ } => {
                for txn in indeterminate {
                    // Already Indeterminate; the record promises that no outcome will come.
                    match self.pending.remove(&txn) {
                        Some(intent) => finished.push(Replayed::Transaction(intent)),
                        None if self.abandoned.contains(&txn) || self.before_first(txn) => {}
                        None => {
                            let why =
                                format!("recovery lists {txn} as pending, but it has no pending intent");
                            self.missing(seq, why)?;
                        }
                    }
                }
                // The run ended here: nothing more comes from its sessions or its transactions.
                self.abandoned.clear();
                self.levels.clear();
                let mut open: Vec<SessionId> = self.open_sessions.drain().collect();
                open.sort_unstable();
                finished.extend(open.into_iter().map(Replayed::SessionEnded));
                if gap {
                    finished.push(Replayed::Gap(LogGap { after_txns: self.next_position }));
                }
            }
        }
        Ok(finished)
    }

    /// The records ran out (a log that is still being written): every intent still pending finishes as
    /// Indeterminate, in log order, since its COMMIT may be in flight. Records applied after this cannot
    /// refer to those intents any more.
    pub fn end_of_log(&mut self) -> Vec<Replayed> {
        let mut rest: Vec<ReplayedTxn> = self.pending.drain().map(|(_, intent)| intent).collect();
        rest.sort_unstable_by_key(|intent| intent.position);
        rest.into_iter().map(Replayed::Transaction).collect()
    }

    /// After a skipped stretch: the pending intents of `next`'s session that come before it, finished as
    /// Indeterminate (in session order). A session runs one transaction at a time, so `next` says they
    /// ended, and their outcomes were in the stretch. Without a stretch, an intent's outcome is never
    /// missing, and nothing is finished here.
    fn orphans_before(&mut self, next: &LoggedTxn) -> Vec<Replayed> {
        if self.holes == 0 {
            return Vec::new();
        }
        self.abandon(next.session, Some(next.seq))
    }

    /// Finishes `session`'s pending intents (those at positions before `before`, when given) as
    /// Indeterminate, in session order: no outcome will come for them. Only a recovery listing may name
    /// them later.
    fn abandon(&mut self, session: SessionId, before: Option<u64>) -> Vec<Replayed> {
        let mut orphans: Vec<(u64, TxnId)> = self
            .pending
            .values()
            .filter(|p| p.txn.session == session && before.is_none_or(|b| p.txn.seq < b))
            .map(|p| (p.txn.seq, p.txn.id))
            .collect();
        orphans.sort_unstable();
        orphans
            .into_iter()
            .filter_map(|(_, id)| {
                let orphan = self.pending.remove(&id)?;
                self.abandoned.insert(id);
                Some(Replayed::Transaction(orphan))
            })
            .collect()
    }

    /// Why a record about `txn` finds no pending intent.
    fn not_pending(&self, txn: TxnId, what: &str) -> String {
        if self.abandoned.contains(&txn) {
            format!("{what} for {txn}, whose session already ended")
        } else if self.seen.contains(txn) {
            format!("{what} for {txn}, which already has an outcome")
        } else {
            format!("{what} for {txn}, which has no intent")
        }
    }

    /// A transaction's first record: its place in log order, its session open.
    fn start(
        &mut self,
        seq: u64,
        logged: LoggedTxn,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<ReplayedTxn, LogError> {
        // Not `before_first`: an id below `earlier` whose first record comes now began before a cut
        // (see `after`); a second record of one seen here is still an error.
        if !self.seen.insert(logged.id) {
            return Err(inconsistent(seq, format!("a second record for {}", logged.id)));
        }
        let (mut txn, unchecked) = self.convert(seq, logged, outcome, commit_ns)?;
        txn.isolation = self.levels.get(&txn.session).copied();
        self.open_sessions.insert(txn.session);
        let position = self.next_position;
        self.next_position += 1;
        Ok(ReplayedTxn { txn, unchecked, position })
    }

    /// The transaction in the model, its keys and statements interned into the replayer's tables.
    fn convert(
        &mut self,
        seq: u64,
        logged: LoggedTxn,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<(Transaction, Vec<UncheckedStatement>), LogError> {
        let statements = &mut self.statements;
        logged
            .into_transaction(outcome, commit_ns, &mut self.keys, |text| statements.intern(text))
            .map_err(|e| inconsistent(seq, e.to_string()))
    }
}

/// Another table's id for each entry of a replayer's table (its keys, its statements), filled the first time
/// an entry is cited: how the merger of several logs and the online verifier move transactions into tables
/// of their own.
#[derive(Debug, Serialize, Deserialize)]
pub struct IdMap<T>(Vec<Option<T>>);

impl<T> Default for IdMap<T> {
    fn default() -> Self {
        IdMap(Vec::new())
    }
}

impl<T: Copy> IdMap<T> {
    /// The id of entry `at`, made by `make` the first time.
    pub fn get_or_try_insert<E>(&mut self, at: usize, make: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        if let Some(Some(id)) = self.0.get(at) {
            return Ok(*id);
        }
        let id = make()?;
        if self.0.len() <= at {
            self.0.resize_with(at + 1, || None);
        }
        self.0[at] = Some(id);
        Ok(id)
    }
}

/// Statement texts, each once, in the order first seen: what a [`StmtRef`] points into. Serialized as its
/// texts: the index is rebuilt from them.
#[derive(Debug, Default, Deserialize)]
#[serde(from = "Vec<String>")]
pub(crate) struct StatementTable {
    texts: Vec<String>,
    /// Where each text sits in `texts`.
    refs: HashMap<String, StmtRef>,
}

impl StatementTable {
    /// The reference of `text`, added if new.
    pub(crate) fn intern(&mut self, text: &str) -> StmtRef {
        if let Some(&r) = self.refs.get(text) {
            return r;
        }
        let r = StmtRef(u32::try_from(self.texts.len()).expect("more than 2^32 statements"));
        self.texts.push(text.to_owned());
        self.refs.insert(text.to_owned(), r);
        r
    }

    /// The texts, in reference order.
    pub(crate) fn texts(&self) -> &[String] {
        &self.texts
    }

    /// The texts, once nothing more is interned.
    pub(crate) fn into_texts(self) -> Vec<String> {
        self.texts
    }
}

impl Serialize for StatementTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.texts.serialize(serializer)
    }
}

impl From<Vec<String>> for StatementTable {
    fn from(texts: Vec<String>) -> Self {
        let mut table = StatementTable::default();
        for text in texts {
            table.intern(&text);
        }
        table
    }
}

/// A set of transaction ids kept as ranges. The proxy allocates a run's ids from a counter, so the ids seen
/// are a few long ranges (one per run, split only where an id was allocated and never logged, and briefly
/// where records arrive out of id order): an online verifier remembers every id without growing with them.
#[derive(Debug, Default, Serialize, Deserialize)]
struct IdRanges {
    /// The first id of each range and its last (inclusive); ranges neither overlap nor touch.
    ranges: BTreeMap<u64, u64>,
}

impl IdRanges {
    fn contains(&self, id: TxnId) -> bool {
        self.ranges.range(..=id.0).next_back().is_some_and(|(_, &last)| id.0 <= last)
    }

    /// Adds `id`; false if it was there already.
    fn insert(&mut self, id: TxnId) -> bool {
        let id = id.0;
        let below = self.ranges.range(..=id).next_back().map(|(&first, &last)| (first, last));
        if below.is_some_and(|(_, last)| id <= last) {
            return false;
        }
        // `last < id` here, so `last + 1` cannot overflow.
        let joins_below = below.filter(|&(_, last)| last + 1 == id).map(|(first, _)| first);
        let joins_above = id.checked_add(1).and_then(|next| self.ranges.get(&next).map(|&last| (next, last)));
        if let Some((next, _)) = joins_above {
            self.ranges.remove(&next);
        }
        let first = joins_below.unwrap_or(id);
        let last = joins_above.map_or(id, |(_, last)| last);
        self.ranges.insert(first, last);
        true
    }
}

/// Replays records given in sequence order into a [`History`]: the one-shot use of a [`Replayer`].
/// Transactions are listed in log order ([`ReplayedTxn::position`]), each with its unchecked statements;
/// an intent with no outcome is Indeterminate; session ends leave no trace (session order is already in the
/// transactions).
pub fn replay(
    records: impl IntoIterator<Item = Result<(u64, LogRecord), LogError>>,
) -> Result<History, LogError> {
    replay_with(records, Replayer::new()).map(|t| t.history)
}

/// [`replay`], and the database ids of each transaction: what a restarting proxy needs.
pub fn replay_keeping_xids(
    records: impl IntoIterator<Item = Result<(u64, LogRecord), LogError>>,
) -> Result<(History, HashMap<TxnId, TxnXids>), LogError> {
    replay_with(records, Replayer::new().keeping_xids()).map(|t| (t.history, t.xids))
}

/// A log's records from a run's start on, replayed ([`replay_tail`]).
#[derive(Clone, Debug, Default)]
pub struct ReplayedTail {
    /// The transactions that had their first record in the tail, as [`replay`] gives them.
    pub history: History,
    /// Their database ids.
    pub xids: HashMap<TxnId, TxnXids>,
    /// What the tail says about transactions before it.
    pub earlier: Earlier,
}

/// What a log's tail says about transactions that had their records before it (see [`Replayer::after`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Earlier {
    /// Outcomes the database gave for them after a restart, in log order.
    pub resolved: Vec<(TxnId, Outcome)>,
    /// Their writes that reads discovered, with their keys, in log order.
    pub discovered: Vec<(TxnId, crate::KeyName, WriteId)>,
}

/// Replays the records from a run's start on, where transactions below `earlier` had all their records
/// before them: [`replay_keeping_xids`] for the tail alone, with what it says about those transactions
/// (see [`Replayer::after`]).
pub fn replay_tail(
    records: impl IntoIterator<Item = Result<(u64, LogRecord), LogError>>,
    earlier: TxnId,
) -> Result<ReplayedTail, LogError> {
    replay_with(records, Replayer::new().keeping_xids().after(earlier))
}

fn replay_with(
    records: impl IntoIterator<Item = Result<(u64, LogRecord), LogError>>,
    mut replayer: Replayer,
) -> Result<ReplayedTail, LogError> {
    let mut earlier = Earlier::default();
    let mut discovered_keys = Vec::new();
    let mut slots: Vec<Option<ReplayedTxn>> = Vec::new();
    let mut gaps = Vec::new();
    let mut slot_of: HashMap<TxnId, usize> = HashMap::new();
    let mut fold = |event: Replayed| match event {
        Replayed::Transaction(t) => {
            let at = usize::try_from(t.position).unwrap_or(usize::MAX);
            if slots.len() <= at {
                slots.resize(at.saturating_add(1), None);
            }
            slot_of.insert(t.txn.id, at);
            slots[at] = Some(t);
        }
        Replayed::Resolved { txn, outcome } => match slot_of.get(&txn).and_then(|&at| slots[at].as_mut()) {
            // Only a transaction no outcome had reached; a crash window, now closed.
            Some(t) if t.txn.outcome == Outcome::Indeterminate => t.txn.outcome = outcome,
            Some(_) => {}
            None => earlier.resolved.push((txn, outcome)),
        },
        Replayed::DiscoveredWrite { txn, key, write } => {
            let op = Op::Write { key, write, stmt: None };
            match slot_of.get(&txn).and_then(|&at| slots[at].as_mut()) {
                Some(t) if !t.txn.ops.contains(&op) => t.txn.ops.push(op),
                Some(_) => {}
                None => discovered_keys.push((txn, key, write)),
            }
        }
        Replayed::SessionEnded(_) => {}
        Replayed::Gap(gap) => gaps.push(gap),
    };
    for item in records {
        let (seq, record) = item?;
        replayer.apply(seq, record)?.into_iter().for_each(&mut fold);
    }
    replayer.end_of_log().into_iter().for_each(&mut fold);
    let horizon = replayer.horizon().cloned();
    let xids = replayer.xids.take().unwrap_or_default();
    let (keys, statements) = replayer.into_tables();
    let mut history = History { keys, statements, gaps, horizon, ..History::default() };
    for t in slots.into_iter().flatten() {
        history.transactions.push(t.txn);
        history.unchecked.extend(t.unchecked);
    }
    resolve_foreign(&mut history);
    for (txn, key, write) in discovered_keys {
        if let Some(name) = history.keys.name(key) {
            earlier.discovered.push((txn, name.clone(), write));
        }
    }
    Ok(ReplayedTail { history, xids, earlier })
}

/// Turns each [`Observed::Foreign`] read whose tag some transaction wrote to the same key into a read of
/// that write: its row reached the proxy after a reader's (an autocommit write commits before its RETURNING
/// row is read), so the reader could not know it yet. What stays foreign, no recorded transaction wrote.
pub fn resolve_foreign(history: &mut History) {
    let foreign = |op: &Op| matches!(op, Op::Read { observed: Observed::Foreign(_), .. });
    if !history.transactions.iter().any(|t| t.ops.iter().any(foreign)) {
        return;
    }
    let written: HashSet<(crate::Key, WriteId)> = history
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match *op {
            Op::Write { key, write, .. } => Some((key, write)),
            Op::Read { .. } => None,
        })
        .collect();
    for op in history.transactions.iter_mut().flat_map(|t| t.ops.iter_mut()) {
        if let Op::Read { key, observed, .. } = op
            && let Observed::Foreign(tag) = *observed
            && written.contains(&(*key, WriteId(tag)))
        {
            *observed = Observed::Version(WriteId(tag));
        }
    }
}

fn inconsistent(seq: u64, reason: String) -> LogError {
    LogError::Inconsistent { seq, reason }
}
