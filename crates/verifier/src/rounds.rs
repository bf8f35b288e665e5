//! Verification in rounds, with garbage collection between them (Cobra §4, §6.2).
//!
//! An [`OnlineVerifier`] takes transactions as they are recorded and verifies them in rounds. A round starts
//! when enough transactions have arrived (the round size) or, online, when the round interval has passed
//! ([`OnlineVerifier::poll`]), whichever comes first. With [`RoundOptions::adaptive`] the round size moves
//! towards the best throughput: Cobra §6.2 defines capacity as the maximum over round sizes of
//! `#tx / round time`, so each round compares its rate with the last and keeps growing or shrinking the size
//! in the direction that improved it.
//!
//! **What a round verifies.** The verifier keeps a *residual history*: the transactions that garbage
//! collection has not deleted, with the reads of collected versions rewritten (see `gc`). A round runs the
//! one-shot pipeline over the residual history plus the new transactions; this first version re-runs it
//! from scratch each round rather than extending the previous round's graph (Cobra reuses its graph; the
//! cost here is one pipeline run over the live transactions, which garbage collection keeps bounded). Then
//! epochs are advanced from the fences (`epochs`, Cobra §4.2) and `gc` deletes what is safe to delete
//! (Cobra §4.3).
//!
//! **Admission.** A transaction joins the residual history only when every version it read is known
//! (written by an admitted transaction, or collected), and after the earlier transactions of its session; it
//! waits until then. This keeps each round's history closed under reads-from, so a serializable history is
//! never rejected because a round saw a reader before its writer. A transaction that reads a collected
//! version is rejected at admission: a **tombstone** read is a stale read (Cobra's longer text, §4), a read
//! of a collected aborted write is G1a, and a read of an initial version of a key whose base version has
//! moved on, or one of whose writes was collected (the initial versions precede it), is a stale read. Those reports have no cycle: their evidence is the read and the Guarantee of
//! Cobra §4.2.
//!
//! **Rejects.** On a reject the report (the same [`Report`] as one-shot verification) is kept, written to
//! the [`ReportStore`] when there is one, and counted; then the transactions it names are quarantined
//! (removed, and later reads of their writes are counted as unverifiable and dropped) and verification
//! carries on. `verify --rounds` stops at the first reject instead ([`RoundOptions::stop_at_first_reject`]).
//!
//! **Levels.** Every level is checked in rounds, but only serializability and strict serializability
//! collect garbage ([`crate::Level::collects_garbage`]), and `declared` while every transaction admitted so
//! far is held to serializability or to read committed (fences are held to serializability whatever their
//! `BEGIN` said). Such a mix has a polygraph of serializability's shape, in which a read-committed reader
//! gives no anti-dependencies (`pipeline::build_polygraph`); collection runs on it unchanged, except that a
//! read-committed reader is no participant of a live constraint (`gc`, rule 2), a kept one that read a
//! superseded version keeps no rw link (rule 3), and its reads of collected versions are unverifiable
//! rather than stale (PL-2 allows reading a superseded version). The
//! first transaction that asked for REPEATABLE READ stops collection for good: snapshot isolation lets an
//! anti-dependency count only after a dependency, which no polygraph of that shape can say. At the other
//! levels every transaction stays, and memory and each round's time grow with the history.
//!
//! **Memory.** On `cobra/scaling/twitter-100000` in rounds of 5,000, collection holds 1,000–3,000
//! transactions after each round (at most about 3% of the history, with no trend over the 20 rounds); each
//! round's [`RoundStats::kept`] says which rule kept what. Earlier rules (a kept reader kept the writer of the
//! superseded version it read, and fences went in session order; [`RoundOptions::gc_legacy_rules`]) let the
//! live set grow by about 2,200 transactions per round, to 44%: see the `gc` module for why they were
//! over-conservative and why dropping them is sound. On a chengRW history of 100,000 transactions with a
//! fence every 20 per session (`krait workload generate chengrw --fence-every 20`), in rounds of 10,000, it
//! holds at most about 6,700; Cobra's rule for live constraints (delete nothing on a cycle of g′ with a kept
//! transaction) held 97,617, nearly all of it, because both sides of one constraint make a cycle that every
//! transaction on a known path between its participants joins (`gc`, rule 2). On a BlindW-RW history (blind
//! writes ordered only by constraints) collection deletes little (measured before this change): unordered
//! blind writes all stay on the frontier, and there is no sound way to collect them sooner (`gc`, "Blind
//! writes"). Tombstones and the ids of collected writes are kept for ever (16 bytes per collected write,
//! `known`), and so is the fact that a session ended, once it has nothing else left (about 20 bytes per
//! session, `epochs`; an application that opens a connection per request paid about 180 bytes per
//! connection before, with the versions of both its fences). Links add one synthetic read per kept
//! ordering, and go when their source is collected (`links`). Statement texts that only collected
//! transactions cited are forgotten, when the caller asks (`statements`).
//!
//! **Sessions.** `epoch_agree` waits for every open session (`epochs`). The proxy calls
//! [`OnlineVerifier::session_ended`] when a client connection closes, so a quiet session does not stall
//! collection for ever, and fences a connection that stays open but idle (`[fence] idle_ms`). A session
//! first seen after collection began is only covered by the Guarantee from its first fence on: a read of a
//! collected version by a transaction before its session's first fence is counted as unverifiable, not
//! reported as a stale read, which under plain serializability (without real time) could be a false reject
//! (admission). The proxy therefore fences each connection before its first client message
//! (`[fence] at_open`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use history::{
    History, Key, KeyName, KeyTable, Observed, Op, Outcome, SessionId, Transaction, TxnId,
    UncheckedStatement, WriteId,
};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use thiserror::Error;

use crate::epochs::{EpochState, Epochs};
use crate::error::VerifyError;
use crate::gc::{self, KeptReasons, base_tag};
use crate::options::Options;
use crate::pipeline::{self, Accepted};
use crate::report::NotChecked;
use crate::report_store::{ReportStore, ReportStoreError};
use crate::{FastMap, FastSet};
use crate::{Report, verify};

mod admission;
mod base;
mod known;
mod links;
mod not_judged;
mod statements;
mod whole;

use base::{BaseVersions, SupersededInitials};
use known::{Known, KnownVersions};
pub use not_judged::NotJudged;
pub use whole::{RoundsOutcome, verify_in_rounds};

/// How to verify in rounds.
#[derive(Clone, Debug)]
pub struct RoundOptions {
    /// The one-shot options each round uses.
    pub verify: Options,
    /// Transactions per round (the size trigger), and the starting size when adaptive.
    pub round_size: usize,
    /// Online: a round also starts when this much time has passed since the last one (see
    /// [`OnlineVerifier::poll`]).
    pub round_interval: Option<Duration>,
    /// Adapt the round size towards the best transactions per second (Cobra §6.2).
    pub adaptive: bool,
    /// Bounds for the adaptive round size.
    pub min_round_size: usize,
    /// Bounds for the adaptive round size.
    pub max_round_size: usize,
    /// Garbage collection between rounds (Cobra §4.3). Off only for comparison.
    pub gc: bool,
    /// Stop at the first reject (for `verify --rounds`) instead of reporting it and carrying on.
    pub stop_at_first_reject: bool,
    /// The most transactions that may wait for their writers; beyond it the oldest waiting ones are admitted
    /// anyway (their reads of unknown versions are then reported by the pipeline).
    pub max_waiting: usize,
    /// For comparison only: collect with the earlier, over-conservative rules (a kept reader of a superseded
    /// version keeps its writer; a fence goes only after everything before it in its session), under which
    /// the live set grows without bound (see the `gc` module).
    pub gc_legacy_rules: bool,
    /// The most recent rounds whose [`RoundStats`] are kept ([`OnlineVerifier::rounds`]); older ones are
    /// only counted ([`OnlineVerifier::rounds_done`]), so that a verifier that runs for months does not keep
    /// (and checkpoint) a line per round. Offline, every round is kept.
    pub rounds_kept: usize,
    /// The most recent reject reports kept in memory ([`OnlineVerifier::rejects`]) with their ids; older
    /// ones are only counted ([`OnlineVerifier::rejects_found`]) and stay in the report store. A database
    /// that breaks its isolation level on every round would otherwise fill memory with reports. Offline,
    /// every report is kept.
    pub rejects_kept: usize,
}

impl Default for RoundOptions {
    fn default() -> Self {
        RoundOptions {
            verify: Options::default(),
            round_size: 5_000,
            round_interval: Some(Duration::from_secs(5)),
            adaptive: false,
            min_round_size: 500,
            max_round_size: 50_000,
            gc: true,
            stop_at_first_reject: false,
            max_waiting: 100_000,
            gc_legacy_rules: false,
            rounds_kept: 1_024,
            rejects_kept: 256,
        }
    }
}

impl RoundOptions {
    /// For a recorded history (`krait verify --rounds`, benchmarks, tests): rounds of `round_size`
    /// transactions with no clock trigger, stopping at the first reject; everything else as the default.
    pub fn offline(round_size: usize) -> Self {
        RoundOptions {
            round_size,
            round_interval: None,
            stop_at_first_reject: true,
            rounds_kept: usize::MAX,
            rejects_kept: usize::MAX,
            ..RoundOptions::default()
        }
    }
}

/// Why round-by-round verification stopped without a verdict.
#[derive(Debug, Error)]
pub enum RoundsError {
    /// A round's verification failed.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// A report could not be stored.
    #[error("cannot store a report: {0}")]
    Store(#[from] ReportStoreError),
}

/// What one round did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundStats {
    /// The round's number, from 1.
    pub round: u64,
    /// Transactions admitted since the previous round.
    pub admitted: usize,
    /// The round size in force.
    pub round_size: usize,
    /// Transactions the round verified (live ones plus new ones).
    pub verified: usize,
    /// Transactions garbage collection deleted.
    pub deleted: usize,
    /// Transactions held after collection.
    pub live_after: usize,
    /// Transactions waiting for their writers.
    pub waiting: usize,
    /// `epoch_agree` after the round (Cobra §4.2).
    pub epoch_agree: u64,
    /// Rejects found in the round (at admission and by the pipeline).
    pub rejects: usize,
    /// Milliseconds spent verifying.
    pub verify_ms: f64,
    /// Milliseconds spent collecting.
    pub gc_ms: f64,
    /// Why the transactions that collection kept were kept (all zero when it did not run).
    #[serde(default)]
    pub kept: KeptReasons,
    /// Live constraints (Cobra §3.2) that collection deleted with all their transactions (`gc` rule 2).
    #[serde(default)]
    pub constraints_collected: usize,
}

/// Verifies a growing history round by round; see the module documentation.
///
/// It serializes to its state, without its options, its report store or its clock: what the online
/// verifier's checkpoint stores ([`crate::online::Feeder::checkpoint`]).
#[derive(Serialize, Deserialize)]
pub struct OnlineVerifier {
    #[serde(skip)]
    options: RoundOptions,
    /// The residual history: keys, statements and the live transactions.
    work: History,
    new_in_round: usize,
    #[serde(with = "history::plain::queues")]
    waiting: BTreeMap<SessionId, VecDeque<Transaction>>,
    waiting_count: usize,
    /// For a session whose first waiting transaction could not be admitted: the version it waits for.
    /// Until that version is known the head is not searched again (every push searched every blocked
    /// head's reads). Checking rebuilds it, so checkpoints do not store it.
    #[serde(skip)]
    head_waits_for: FastMap<SessionId, WriteId>,
    /// The other way round: for each version a waiting head waits for, the sessions whose head it is.
    /// When the version becomes known they are woken, so admission looks at a session only when its head
    /// may have become admissible (it looked at every session on every push). Not stored, as above.
    #[serde(skip)]
    waiters: FastMap<WriteId, SmallVec<[SessionId; 2]>>,
    /// Sessions whose head may be admissible now and has not been looked at since: a transaction pushed
    /// onto an empty queue, a head whose version became known, a head behind one admitted by force.
    /// Restoring a checkpoint wakes every waiting session.
    #[serde(skip)]
    wake: Vec<SessionId>,
    /// Sessions that ended but still have waiting transactions.
    ending: HashSet<SessionId>,
    /// Waiting transactions recorded after a log gap ([`OnlineVerifier::push_after_log_gap`]), until
    /// admitted: a version one of them read that no transaction is known to have written may have been
    /// written by one the gap lost.
    after_log_gap: HashSet<TxnId>,
    known: KnownVersions,
    base: BaseVersions,
    superseded_initials: SupersededInitials,
    epochs: Epochs,
    /// The last rounds (at most twice [`RoundOptions::rounds_kept`]), oldest first.
    rounds: Vec<RoundStats>,
    /// Rounds run so far, kept or not.
    rounds_done: u64,
    /// The last reject reports (at most twice [`RoundOptions::rejects_kept`]), oldest first.
    #[serde(with = "crate::report::as_json")]
    rejects: Vec<Report>,
    /// Their ids in the store, one per report when there is a store.
    report_ids: Vec<String>,
    /// Reject reports found so far, kept or not.
    rejects_found: u64,
    rejects_in_round: usize,
    #[serde(skip)]
    store: Option<ReportStore>,
    deleted: u64,
    admitted: u64,
    /// Reads admission could not judge and dropped (see the module documentation).
    not_judged: NotJudged,
    max_live: usize,
    round_size: usize,
    #[serde(skip, default = "Instant::now")]
    last_round_at: Instant,
    last_rate: Option<f64>,
    growth: f64,
    stopped: bool,
    /// Under `declared`, why garbage collection stopped for good: the first transaction admitted that is
    /// held to snapshot isolation (see [`admission`]).
    snapshot_reader: Option<String>,
    /// Each linked transaction's synthetic key and write (`gc` rule 6).
    links: HashMap<TxnId, (Key, WriteId)>,
    /// Link keys whose links were retired, for the next links (`links`).
    free_link_keys: Vec<Key>,
    /// Link keys interned so far, which names the next one.
    link_keys_made: u64,
    next_link_write: u64,
    links_added: u64,
    /// Statements the collector could not map, summed by kind over every transaction noted so far (one
    /// entry per kind, so bounded), with the last transaction counted for each; every reject report carries
    /// the summary (DESIGN.md §3: a report says what it did not check).
    not_checked: Vec<(NotChecked, TxnId)>,
    /// Whether the texts of collected transactions may be forgotten (`statements`).
    #[serde(skip)]
    forget_statements: bool,
    /// How many times the statements were renumbered since this verifier was made or restored.
    #[serde(skip)]
    statements_renumbered: u64,
}

/// Keys a new verifier's table makes room for beyond those it is given (see [`OnlineVerifier::new`]).
const LINK_KEY_ROOM: usize = 4096;

impl OnlineVerifier {
    /// A verifier for transactions whose keys and statements refer to `keys` and `statements`; intern new
    /// keys through [`OnlineVerifier::intern_key`] and add statements through
    /// [`OnlineVerifier::add_statement`].
    pub fn new(mut keys: KeyTable, statements: Vec<String>, options: RoundOptions) -> Self {
        let round_size = options.round_size.max(1);
        // Collection interns link keys, a few thousand at most (they are reused): room for them up front,
        // so the first does not copy a table of hundreds of thousands of keys.
        keys.reserve(LINK_KEY_ROOM);
        OnlineVerifier {
            work: History { keys, statements, ..History::default() },
            options,
            new_in_round: 0,
            waiting: BTreeMap::new(),
            head_waits_for: FastMap::default(),
            waiters: FastMap::default(),
            wake: Vec::new(),
            waiting_count: 0,
            ending: HashSet::new(),
            after_log_gap: HashSet::new(),
            known: KnownVersions::default(),
            base: BaseVersions::default(),
            superseded_initials: SupersededInitials::default(),
            epochs: Epochs::default(),
            rounds: Vec::new(),
            rounds_done: 0,
            rejects: Vec::new(),
            report_ids: Vec::new(),
            rejects_found: 0,
            rejects_in_round: 0,
            store: None,
            deleted: 0,
            admitted: 0,
            not_judged: NotJudged::default(),
            max_live: 0,
            round_size,
            last_round_at: Instant::now(),
            last_rate: None,
            growth: 1.25,
            stopped: false,
            snapshot_reader: None,
            links: HashMap::new(),
            free_link_keys: Vec::new(),
            link_keys_made: 0,
            next_link_write: 0,
            links_added: 0,
            not_checked: Vec::new(),
            forget_statements: false,
            statements_renumbered: 0,
        }
    }

    /// After restoring its state from a checkpoint: the options and the report store, which the state does
    /// not hold, and a round interval that starts now.
    pub(crate) fn restored(&mut self, options: RoundOptions, store: Option<ReportStore>) {
        self.options = options;
        self.store = store;
        self.last_round_at = Instant::now();
        self.wake = self.waiting.keys().copied().collect();
    }

    /// The options it verifies with.
    pub fn options(&self) -> &RoundOptions {
        &self.options
    }

    /// Notes statements the collector could not map to row ops (an aggregate, a predicate read, DDL, …), so
    /// that reject reports say what was not checked. Statements of one transaction come together.
    pub fn note_unchecked(&mut self, unchecked: &[UncheckedStatement]) {
        for u in unchecked {
            match self.not_checked.iter_mut().find(|(n, _)| n.kind == u.kind) {
                Some((n, last)) => {
                    n.statements += 1;
                    if *last != u.txn {
                        n.transactions += 1;
                        *last = u.txn;
                    }
                }
                None => {
                    let first = NotChecked::new(&u.kind, 1, 1, u.statement.clone());
                    self.not_checked.push((first, u.txn));
                }
            }
        }
    }

    /// The unchecked statements noted so far, by kind, in the order each kind first appeared.
    pub fn not_checked(&self) -> Vec<NotChecked> {
        self.not_checked.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Writes every reject report into `store` as it is found.
    pub fn with_report_store(mut self, store: ReportStore) -> Self {
        self.store = Some(store);
        self
    }

    /// The key for `name` in the table that pushed transactions' keys refer to, added if it is new.
    pub fn intern_key(&mut self, name: KeyName) -> Key {
        self.work.keys.intern(name)
    }

    /// Adds a statement text for ops to refer to.
    pub fn add_statement(&mut self, text: impl Into<String>) -> history::StmtRef {
        self.work.add_statement(text)
    }

    /// Declares a session before its first transaction, so that it holds `epoch_agree` back until its
    /// first fence (sessions are otherwise declared by their first transaction).
    pub fn session_started(&mut self, session: SessionId) {
        self.epochs.declare(session);
    }

    /// Says that a session will add no more transactions (its connection closed), so that it no longer holds
    /// `epoch_agree` back. It takes effect once the session's waiting transactions are admitted.
    pub fn session_ended(&mut self, session: SessionId) {
        if self.waiting.get(&session).is_some_and(|q| !q.is_empty()) {
            self.ending.insert(session);
        } else {
            self.epochs.end(session);
        }
    }

    /// The outcome the database gave, after a restart, for a transaction that was pushed as Indeterminate.
    /// One still waiting for admission takes it; one admitted already stays Indeterminate (rounds have
    /// decided with that), which claims less, never more.
    pub fn resolved(&mut self, txn: TxnId, outcome: Outcome) {
        let waiting = self.waiting.values_mut().flat_map(|q| q.iter_mut()).find(|t| t.id == txn);
        if let Some(t) = waiting.filter(|t| t.outcome == Outcome::Indeterminate) {
            t.outcome = outcome;
        }
    }

    /// Adds a write of `txn` that a later read discovered (DESIGN.md §3, "every version has an owner"). A
    /// transaction still waiting for admission, or admitted since the last round, gets it as its last write
    /// of `key`; one that a round has verified does not (that round and its collection decided without
    /// it), so reads of `write` are then counted as unverifiable, never judged.
    pub fn discovered_write(&mut self, txn: TxnId, key: Key, write: WriteId) {
        let op = Op::Write { key, write, stmt: None };
        let waiting = self.waiting.values_mut().flat_map(|q| q.iter_mut()).find(|t| t.id == txn);
        match waiting {
            Some(t) if !t.ops.contains(&op) => {
                t.ops.push(op);
                // The new write may be the very version its session's head waits for (its own).
                let session = t.session;
                self.rewake(session);
            }
            Some(_) => {}
            None if self.known.contains(write) => {}
            None => {
                // Admitted since the last round: no round has verified it and no collection has decided
                // anything with it in the history, so it takes the write as if it had been recorded with it.
                let n = self.work.transactions.len();
                let unverified = &mut self.work.transactions[n - self.new_in_round.min(n)..];
                match unverified.iter_mut().rev().find(|t| t.id == txn) {
                    Some(t) => {
                        t.ops.push(op);
                        self.known.insert_live(write);
                    }
                    None => self.known.insert(write, Known::DiscoveredLate),
                }
                self.now_known(write);
            }
        }
    }

    /// Adds one recorded transaction (in session order within its session). A round runs when enough
    /// transactions have been admitted.
    pub fn push(&mut self, txn: Transaction) -> Result<(), RoundsError> {
        if self.stopped {
            return Ok(());
        }
        if !self.epochs.knows(txn.session) {
            self.epochs.declare(txn.session);
        }
        let session = txn.session;
        let queue = self.waiting.entry(session).or_default();
        queue.push_back(txn);
        if queue.len() == 1 {
            self.wake.push(session);
        }
        self.waiting_count += 1;
        self.admit_ready(false)?;
        if self.new_in_round >= self.round_size {
            self.run_round()?;
        }
        Ok(())
    }

    /// [`OnlineVerifier::push`] for a transaction recorded after a log gap (a proxy run that crashed under
    /// `group` or `none` durability may have lost acknowledged transactions there). A version it read that
    /// no transaction is known to have written when it is admitted is then not judged (cause `log_gap`)
    /// rather than reported as a garbage read: its writer may be one the gap lost. One-shot verification
    /// treats the reads of a history's transactions after its first gap the same way (`normalize`).
    pub fn push_after_log_gap(&mut self, txn: Transaction) -> Result<(), RoundsError> {
        if !self.stopped {
            self.after_log_gap.insert(txn.id);
        }
        self.push(txn)
    }

    /// Online: runs a round if the round interval has passed and something is waiting to be verified.
    pub fn poll(&mut self) -> Result<bool, RoundsError> {
        let due = self.options.round_interval.is_some_and(|i| self.last_round_at.elapsed() >= i);
        if due && self.new_in_round > 0 && !self.stopped {
            self.run_round()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Admits everything still waiting (reads of versions nobody wrote are then the pipeline's to report)
    /// and runs a last round.
    pub fn finish(&mut self) -> Result<(), RoundsError> {
        if self.stopped {
            return Ok(());
        }
        self.admit_ready(true)?;
        if self.new_in_round > 0 {
            self.run_round()?;
        }
        Ok(())
    }

    /// Whether verification stopped at a reject ([`RoundOptions::stop_at_first_reject`]).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Transactions held now (live, not yet collected).
    pub fn live_transactions(&self) -> usize {
        self.work.transactions.len()
    }

    /// The most transactions held right after any round's collection.
    pub fn max_live(&self) -> usize {
        self.max_live
    }

    /// Transactions waiting for their writers.
    pub fn waiting_transactions(&self) -> usize {
        self.waiting_count
    }

    /// Tombstones (collected versions a later read would be rejected for).
    pub fn tombstones(&self) -> usize {
        self.known.tombstones()
    }

    /// Transactions deleted so far.
    pub fn deleted(&self) -> u64 {
        self.deleted
    }

    /// Transactions admitted so far.
    pub fn admitted(&self) -> u64 {
        self.admitted
    }

    /// Versions known by write id: live transactions' writes, base versions and tombstones (see
    /// [`OnlineVerifier::tombstones`]); it grows with the collected writes.
    pub fn known_versions(&self) -> usize {
        self.known.len()
    }

    /// Link reads added so far (orderings kept across collection, `gc` rule 6).
    pub fn links_added(&self) -> u64 {
        self.links_added
    }

    /// Link keys made so far: each is used again once collection retires its link, so this stays near
    /// the most links live at once rather than growing with the links added.
    pub fn link_keys(&self) -> u64 {
        self.link_keys_made
    }

    /// Transactions per round now (it moves when adaptive).
    pub fn round_size(&self) -> usize {
        self.round_size
    }

    /// How many reads were dropped because they cannot be judged: of a quarantined transaction's write, of
    /// an unrecorded writer's version, of a write discovered after a round verified its writer, or of a
    /// collected version by a transaction its session's fences do not cover.
    pub fn unverifiable_reads(&self) -> u64 {
        self.not_judged.total()
    }

    /// The reads dropped because they cannot be judged, by cause, with the first few listed.
    pub fn not_judged(&self) -> &NotJudged {
        &self.not_judged
    }

    /// The last reject reports, oldest first: every one offline, and at least the last
    /// [`RoundOptions::rejects_kept`] online.
    pub fn rejects(&self) -> &[Report] {
        &self.rejects
    }

    /// The ids under which the reports of [`OnlineVerifier::rejects`] were stored, if there is a store.
    pub fn report_ids(&self) -> &[String] {
        &self.report_ids
    }

    /// How many reject reports have been found, kept or not.
    pub fn rejects_found(&self) -> u64 {
        self.rejects_found
    }

    /// The last rounds, oldest first: every round offline, and at least the last
    /// [`RoundOptions::rounds_kept`] ones online.
    pub fn rounds(&self) -> &[RoundStats] {
        &self.rounds
    }

    /// How many rounds have run.
    pub fn rounds_done(&self) -> u64 {
        self.rounds_done
    }

    /// `epoch_agree` now.
    pub fn epoch_agree(&self) -> u64 {
        self.epochs.epoch_agree()
    }

    /// Why garbage collection stopped for good, if it did: epochs broke, or, under `declared`, a
    /// transaction asked for REPEATABLE READ.
    pub fn gc_disabled(&self) -> Option<&str> {
        self.epochs.broken().or(self.snapshot_reader.as_deref())
    }

    /// Whether rounds collect garbage now: at a level that does ([`crate::Level::collects_garbage`]), and
    /// under `declared` only while every transaction admitted so far is held to serializability or to read
    /// committed.
    fn collecting(&self) -> bool {
        self.options.verify.level.collects_garbage() && self.snapshot_reader.is_none()
    }

    fn record_reject(&mut self, mut report: Report) -> Result<(), RoundsError> {
        report.not_checked = self.not_checked();
        let dropped = make_room(&mut self.rejects, self.options.rejects_kept);
        self.report_ids.drain(..dropped.min(self.report_ids.len()));
        if let Some(store) = &self.store {
            self.report_ids.push(store.save(&report)?);
        }
        self.rejects.push(report);
        self.rejects_found += 1;
        self.rejects_in_round += 1;
        if self.options.stop_at_first_reject {
            self.stopped = true;
        }
        Ok(())
    }

    /// Runs one round: verify the residual history, then collect.
    fn run_round(&mut self) -> Result<(), RoundsError> {
        let start = Instant::now();
        let admitted = self.new_in_round;
        let verified = self.work.transactions.len();
        // Garbage collection's argument (gc.rs) is made for serializability's polygraph; what a weaker level
        // (or a mix with snapshot isolation) lets a later transaction see of a deleted one has not been
        // argued, so at those levels nothing is deleted and each round verifies everything again, one-shot.
        // Under `declared`, while every transaction is held to serializability or read committed, the
        // round's polygraph has serializability's shape (`pipeline::build_polygraph`).
        let poly = if !self.collecting() {
            loop {
                let report = verify(&self.work, &self.options.verify)?;
                if report.is_accept() {
                    break None;
                }
                let live = self.work.transactions.len();
                self.quarantine(&report);
                if self.work.transactions.len() == live {
                    return Err(
                        VerifyError::Internal("a reject named no transaction to quarantine".into()).into()
                    );
                }
                self.record_reject(report)?;
                if self.stopped {
                    break None;
                }
            }
        } else {
            loop {
                match pipeline::accepted_polygraph(&self.work, &self.options.verify)? {
                    Some(p) => break Some(p),
                    None => {
                        let report = verify(&self.work, &self.options.verify)?;
                        if report.is_accept() {
                            return Err(VerifyError::Internal(
                                "the round's pipeline rejected a history that verify accepts".into(),
                            )
                            .into());
                        }
                        self.quarantine(&report);
                        self.record_reject(report)?;
                        if self.stopped {
                            break None;
                        }
                    }
                }
            }
        };
        let verify_ms = start.elapsed().as_secs_f64() * 1e3;
        let gc_start = Instant::now();
        let mut deleted = 0;
        let mut kept = KeptReasons::default();
        let mut constraints_collected = 0;
        if let Some(accepted) = poly
            && self.options.gc
            && self.epochs.broken().is_none()
        {
            (deleted, kept, constraints_collected) = self.collect(&accepted)?;
        }
        if deleted > 0 {
            self.forget_collected_statements();
        }
        let gc_ms = gc_start.elapsed().as_secs_f64() * 1e3;
        self.max_live = self.max_live.max(self.work.transactions.len());
        self.rounds_done += 1;
        make_room(&mut self.rounds, self.options.rounds_kept);
        self.rounds.push(RoundStats {
            round: self.rounds_done,
            admitted,
            round_size: self.round_size,
            verified,
            deleted,
            live_after: self.work.transactions.len(),
            waiting: self.waiting_count,
            epoch_agree: self.epochs.epoch_agree(),
            rejects: std::mem::take(&mut self.rejects_in_round),
            verify_ms,
            gc_ms,
            kept,
            constraints_collected,
        });
        self.new_in_round = 0;
        self.last_round_at = Instant::now();
        if self.options.adaptive {
            self.adapt(admitted, start.elapsed());
        }
        Ok(())
    }

    /// Cobra §6.2: capacity is the best `#tx / round time` over round sizes; climb towards it.
    fn adapt(&mut self, admitted: usize, took: Duration) {
        let rate = admitted as f64 / took.as_secs_f64().max(1e-6);
        if let Some(prev) = self.last_rate
            && rate < prev
        {
            self.growth = 1.0 / self.growth;
        }
        self.last_rate = Some(rate);
        let next = (self.round_size as f64 * self.growth).round() as usize;
        self.round_size = next.clamp(self.options.min_round_size.max(1), self.options.max_round_size.max(1));
    }

    /// Collects garbage after an accepted round; returns how many transactions it deleted, why it kept the
    /// others, and how many live constraints went with the deleted ones.
    fn collect(&mut self, accepted: &Accepted) -> Result<(usize, KeptReasons, usize), RoundsError> {
        let p = &accepted.poly;
        let epoch: Vec<EpochState> = self.work.transactions.iter().map(|t| self.epochs.state(t)).collect();
        let mut pinned = HashSet::new();
        for (i, t) in self.work.transactions.iter().enumerate() {
            if p.norm.vertex_of.get(i).copied().flatten().is_none() && t.outcome == Outcome::Indeterminate {
                for op in &t.ops {
                    if let Op::Read { observed: Observed::Version(w), .. } = *op {
                        pinned.insert(w);
                    }
                }
            }
        }
        let plan = gc::plan(
            &self.work,
            accepted,
            &epoch,
            self.epochs.epoch_agree(),
            &pinned,
            &self.options.verify,
            self.options.gc_legacy_rules,
        )?;
        if plan.delete.is_empty() {
            return Ok((0, plan.kept, 0));
        }
        self.link(&plan.links);
        for &(i, w) in &plan.drop_reads {
            self.work.transactions[i]
                .ops
                .retain(|op| !matches!(op, Op::Read { observed: Observed::Version(v), .. } if *v == w));
        }
        let ids: Vec<TxnId> = plan.delete.iter().map(|&i| self.work.transactions[i].id).collect();
        let retired = self.retire_links(&ids);
        let id = |i: usize| self.work.transactions[i].id;
        for &(w, key, i) in &plan.tombstones {
            if !retired.contains_key(&w) {
                self.known.insert(w, Known::Tombstone { writer: id(i) });
                if !self.base.contains(key) {
                    self.superseded_initials.note(key, id(i));
                }
            }
        }
        for &(w, _, i) in &plan.aborted {
            self.known.insert(w, Known::Aborted { writer: id(i) });
        }
        let mut promoted = FastSet::default();
        for &(key, w, i) in &plan.promote {
            if retired.contains_key(&w) {
                continue;
            }
            if let Some(old) = self.base.insert(key, w)
                && let Some(Known::Base { writer }) = self.known.get(old)
            {
                self.known.insert(old, Known::Tombstone { writer });
            }
            self.known.insert(w, Known::Base { writer: id(i) });
            self.superseded_initials.based(key);
            promoted.insert(w);
        }
        let mut doomed = vec![false; self.work.transactions.len()];
        for &i in &plan.delete {
            doomed[i] = true;
        }
        let deleted = doomed.iter().filter(|&&d| d).count();
        let mut i = 0;
        self.work.transactions.retain(|_| {
            let keep = !doomed[i];
            i += 1;
            keep
        });
        for t in &mut self.work.transactions {
            for op in &mut t.ops {
                if let Op::Read { observed, .. } = op
                    && let Observed::Version(w) = *observed
                    && promoted.contains(&w)
                {
                    *observed = Observed::PreHistory(base_tag(w));
                }
            }
        }
        self.drop_retired_reads(retired);
        self.epochs.forget(ids);
        self.deleted += deleted as u64;
        Ok((deleted, plan.kept, plan.constraints))
    }
}

/// Before a push onto a list that keeps at least its last `kept` entries: once it holds twice that, drops
/// the oldest down to `kept`, at once, so that pushes stay amortised O(1) while the list stays a slice.
/// Returns how many it dropped.
fn make_room<T>(list: &mut Vec<T>, kept: usize) -> usize {
    if list.len() < kept.saturating_mul(2) {
        return 0;
    }
    let dropped = list.len() - kept;
    list.drain(..dropped);
    dropped
}
