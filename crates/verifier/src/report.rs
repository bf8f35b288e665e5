//! Stage 7 (output side): the reject/accept report. The JSON schema is documented in `REPORT.md` next to
//! this crate's manifest; every field here is part of it, so rename nothing without bumping
//! [`SCHEMA_VERSION`].

use std::collections::BTreeMap;

use history::values::Value;
use history::{CollectorId, IsolationLevel, Observed, Outcome, SessionId, TxnId};
use serde::{Deserialize, Serialize};

use crate::options::Level;

/// The version of the report's JSON schema.
pub const SCHEMA_VERSION: u32 = 4;

/// Accept or reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Some serial order explains every read.
    Accept,
    /// No serial order does; the anomalies say why.
    Reject,
}

/// The name of an anomaly, as in the literature (Adya; Elle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AnomalyClass {
    /// A cycle of write-write dependencies only (with session/real-time order).
    G0,
    /// Aborted read: a read of a write by an aborted transaction.
    G1a,
    /// Intermediate read: a read of a write its transaction later overwrote.
    G1b,
    /// A cycle of write-write and write-read dependencies.
    G1c,
    /// A cycle with exactly one anti-dependency (rw) edge.
    #[serde(rename = "G-single")]
    GSingle,
    /// A cycle with two or more anti-dependency edges.
    #[serde(rename = "G2-item")]
    G2Item,
    /// Two read-modify-writes read the same version of a key.
    #[serde(rename = "lost update")]
    LostUpdate,
    /// Two transactions each overwrote what the other read.
    #[serde(rename = "write skew")]
    WriteSkew,
    /// Two readers saw two independent writes in opposite orders (a G2 cycle wr, rw, wr, rw).
    #[serde(rename = "long fork")]
    LongFork,
    /// A read returned a version already overwritten before it started (real time), or one of two initial
    /// versions of a key.
    #[serde(rename = "stale read")]
    StaleRead,
    /// Two reads of one key in one transaction, before any own write, returned different versions.
    #[serde(rename = "non-repeatable read")]
    NonRepeatableRead,
    /// A read of a write id that no transaction wrote to that key.
    #[serde(rename = "garbage read")]
    GarbageRead,
    /// Two writes carry the same write id.
    #[serde(rename = "duplicate write")]
    DuplicateWrite,
    /// A read returned the transaction's own later write.
    #[serde(rename = "future read")]
    FutureRead,
    /// A read after an own write of the key did not return that write.
    #[serde(rename = "internal read")]
    InternalRead,
    /// Read atomic: a transaction saw some writes of another transaction (or followed it in its session)
    /// but read an older version of a key it also wrote.
    #[serde(rename = "fractured read")]
    FracturedRead,
    /// Causal: a transaction read a version older than a write it causally depends on.
    #[serde(rename = "causality violation")]
    CausalityViolation,
    /// A read of a version no recorded transaction wrote, while the operator asserted that every writer
    /// goes through the proxy (`[record] exclusive`, DESIGN.md §3): the database invented it, or something
    /// wrote behind the proxy's back.
    #[serde(rename = "unowned version")]
    UnownedVersion,
}

impl AnomalyClass {
    /// The class's name as the report prints it.
    pub fn name(self) -> &'static str {
        match self {
            AnomalyClass::G0 => "G0",
            AnomalyClass::G1a => "G1a",
            AnomalyClass::G1b => "G1b",
            AnomalyClass::G1c => "G1c",
            AnomalyClass::GSingle => "G-single",
            AnomalyClass::G2Item => "G2-item",
            AnomalyClass::LostUpdate => "lost update",
            AnomalyClass::WriteSkew => "write skew",
            AnomalyClass::LongFork => "long fork",
            AnomalyClass::StaleRead => "stale read",
            AnomalyClass::NonRepeatableRead => "non-repeatable read",
            AnomalyClass::GarbageRead => "garbage read",
            AnomalyClass::DuplicateWrite => "duplicate write",
            AnomalyClass::FutureRead => "future read",
            AnomalyClass::InternalRead => "internal read",
            AnomalyClass::FracturedRead => "fractured read",
            AnomalyClass::CausalityViolation => "causality violation",
            AnomalyClass::UnownedVersion => "unowned version",
        }
    }
}

/// One op of one transaction: `txn`'s op number `op` (from 0, in issue order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OpRef {
    /// The transaction.
    pub txn: TxnId,
    /// The op's index within the transaction.
    pub op: usize,
}

impl OpRef {
    /// Op `op` of `txn`.
    pub fn new(txn: TxnId, op: usize) -> Self {
        OpRef { txn, op }
    }
}

/// The kind of a dependency edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// `to` read a version `from` wrote.
    Wr,
    /// `to` overwrote a version `from` wrote.
    Ww,
    /// `from` read a version that `to` overwrote (anti-dependency).
    Rw,
    /// `from` precedes `to` in their session.
    So,
    /// `from` committed before `to` started, by more than the clock-drift threshold.
    Rt,
}

impl EdgeKind {
    /// The short name (`wr`, `ww`, `rw`, `so`, `rt`).
    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Wr => "wr",
            EdgeKind::Ww => "ww",
            EdgeKind::Rw => "rw",
            EdgeKind::So => "so",
            EdgeKind::Rt => "rt",
        }
    }
}

/// One edge of a cycle: `from` must precede `to` in any serial order, for the reason given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleEdge {
    /// The earlier transaction.
    pub from: TxnId,
    /// The later transaction.
    pub to: TxnId,
    /// Why, in one word.
    pub kind: EdgeKind,
    /// The key, for wr/ww/rw edges (its printable name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The key's index in the history's key table, for re-checking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<u32>,
    /// wr: the version read; ww: the version `from` wrote; rw: the version `from` read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<Observed>,
    /// wr: the version read; ww and rw: the version `to` wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_version: Option<Observed>,
    /// ww/rw: the index in [`Report::derivations`] of the version-order fact the edge rests on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derivation: Option<usize>,
    /// Set on the one edge of an alternative cycle that follows from the *opposite* of the derivation
    /// being proved (see [`Basis::OtherOrderCycle`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hypothetical: bool,
    /// Only inside a [`Refutation`]: the index of the choice whose assumed order (on the path from the
    /// root to this cycle) implies the edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumption: Option<usize>,
    /// The reason as a sentence a person can check.
    pub reason: String,
}

impl CycleEdge {
    /// An edge with no key or versions (session order, real time), or the base to fill them in.
    pub(crate) fn plain(from: TxnId, to: TxnId, kind: EdgeKind, reason: String) -> Self {
        CycleEdge {
            from,
            to,
            kind,
            key: None,
            key_id: None,
            from_version: None,
            to_version: None,
            derivation: None,
            hypothetical: false,
            assumption: None,
            reason,
        }
    }
}

/// A choice between the two orders of two chains of one key (a constraint, Cobra §3.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// The key's printable name.
    pub key: String,
    /// The key's index in the history's key table.
    pub key_id: u32,
    /// One chain of versions.
    pub first: Vec<Observed>,
    /// The other chain.
    pub second: Vec<Observed>,
}

/// A node of a case-split proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefutationNode {
    /// The choices assumed on the way here close this cycle.
    Cycle {
        /// The cycle; edges implied by an assumed choice carry `assumption`.
        cycle: Vec<CycleEdge>,
    },
    /// Both orders of choice `choice` lead to a cycle.
    Split {
        /// Index into [`Refutation::choices`].
        choice: usize,
        /// Assuming every version of `first` precedes every version of `second`.
        first_before_second: Box<RefutationNode>,
        /// Assuming the opposite.
        second_before_first: Box<RefutationNode>,
    },
}

/// A proof by cases that no version order avoids a cycle: the solver's unsatisfiable core, replayed as a
/// tree of choices whose every leaf is a cycle (Cobra §3.4's "set of unsatisfiable clauses", made checkable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refutation {
    /// The choices split on.
    pub choices: Vec<Choice>,
    /// The tree.
    pub tree: RefutationNode,
}

/// Why one run of versions of a key precedes another in every serial order that could explain the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "basis", rename_all = "snake_case")]
pub enum Basis {
    /// `after[0]`'s writer read `before`'s last version and then wrote the key (a read-modify-write), so its
    /// version directly follows (Cobra §3.1).
    Rmw,
    /// `before` starts with a version from before recording began, which precedes every recorded write.
    InitialFirst,
    /// The opposite order (every version of `after` before every version of `before`) closes this cycle;
    /// its `hypothetical` edge is the one the opposite order implies (Cobra §3.3, pruning).
    OtherOrderCycle {
        /// The cycle.
        cycle: Vec<CycleEdge>,
    },
    /// The SAT solver's refutation chose this order in the branch shown (Cobra §3.4); the other branches
    /// were refuted by the solver and are not reproduced.
    Solver,
    /// Derived during pruning, but the report's size limit left its proof out.
    Omitted,
    /// `reader` read `after`'s first version (op `read`) after it had *seen* the writer of `before`'s last
    /// version, as `how` says; every level that counts that as seeing puts `before` first (Biswas and
    /// Enea's axioms; docs/levels.md).
    Seen {
        /// The transaction whose read forces the order.
        reader: TxnId,
        /// The index of its read of `after`'s version.
        read: usize,
        /// How it saw `before`'s writer.
        how: SeenHow,
    },
}

/// How a transaction saw another's write, for [`Basis::Seen`]. Each level counts some of these as seeing:
/// read committed only [`SeenHow::EarlierRead`]; read atomic also [`SeenHow::Read`] and
/// [`SeenHow::Session`]; causal consistency and stronger levels all of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeenHow {
    /// An earlier read of the same transaction (op `op`) returned a write of it.
    EarlierRead {
        /// The index of that read.
        op: usize,
    },
    /// A read of the transaction (op `op`, earlier or later) returned a write of it.
    Read {
        /// The index of that read.
        op: usize,
    },
    /// It precedes the reader in their session.
    Session,
    /// It happens before the reader: each transaction of `path` (from the writer to the reader) precedes
    /// the next in its session or wrote a version the next read.
    HappensBefore {
        /// The path, writer first, reader last.
        path: Vec<TxnId>,
    },
}

impl SeenHow {
    /// Whether `level` counts this as seeing.
    pub fn counts_at(&self, level: Level) -> bool {
        match self {
            SeenHow::EarlierRead { .. } => true,
            SeenHow::Read { .. } | SeenHow::Session => level != Level::ReadCommitted,
            SeenHow::HappensBefore { .. } => !matches!(level, Level::ReadCommitted | Level::ReadAtomic),
        }
    }
}

/// A version-order fact on one key: every version in `before` precedes every version in `after`. Each list
/// is a chain (each version after the first was written by a read-modify-write of the one before it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Derivation {
    /// The key's printable name.
    pub key: String,
    /// The key's index in the history's key table.
    pub key_id: u32,
    /// The earlier chain of versions.
    pub before: Vec<Observed>,
    /// The later chain of versions.
    pub after: Vec<Observed>,
    /// Why.
    #[serde(flatten)]
    pub basis: Basis,
}

/// One finding. A reject report has at least one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    /// The anomaly's name.
    pub class: AnomalyClass,
    /// One sentence.
    pub summary: String,
    /// The ops that show it (for anomalies without a cycle, these are the evidence).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<OpRef>,
    /// The dependency cycle, in order; the last edge returns to the first edge's `from`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cycle: Vec<CycleEdge>,
    /// Whether the cycle uses a real-time edge (so the verdict depends on the clock-drift threshold).
    #[serde(default)]
    pub uses_real_time: bool,
    /// Whether the cycle uses a session-order edge.
    #[serde(default)]
    pub uses_session_order: bool,
    /// For a reject found by the solver: a proof by cases over the core's choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refutation: Option<Refutation>,
}

/// One op, as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpReport {
    /// The op's index in its transaction.
    pub index: usize,
    /// `r(key) = version` or `w(key) = version`.
    pub text: String,
    /// The SQL it came from, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    /// The version it read or wrote, as `text` names it (`w…`, `init`, …). Schema 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The row behind it as the client saw it (`column = value, …`), where the collector recorded values.
    /// Schema 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
    /// The parameters of the statement run it came from (`$1 = value, …`), where recorded. Schema 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    /// Whether it is a write (else a read). Schema 3.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub write: bool,
    /// The row's table and primary key, where the key is a SQL row's. Schema 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<RowKey>,
    /// The row behind it, value by value, where recorded (what `row` prints). Schema 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<ColumnValue>,
    /// The key's index in the history's key table, as edges and derivations name it: so that the report's
    /// own transactions can be checked against its edges without the history ([`Report::cited_history`]),
    /// even where two keys print alike. Schema 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<u32>,
}

/// A SQL row's key: its table and its primary-key values in text format.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RowKey {
    /// The table as the history names it: `table` for a table in `public`, else `schema.table`.
    pub table: String,
    /// The primary key's values, in its columns' order.
    pub pk: Vec<String>,
}

/// One column of a recorded row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnValue {
    /// The column's name (`$N` where the row description was not seen).
    pub column: String,
    /// Its value.
    pub value: Value,
}

/// One statement of a transaction, in the order it ran: what a replay sends. Schema 3.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementReport {
    /// Its text, when logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    /// Its parameters (`$1`, `$2`, …), where recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<Value>,
    /// The index of its first op in the transaction's ops.
    pub first_op: usize,
    /// How many ops it produced.
    pub ops: usize,
}

/// A transaction involved in some anomaly, with all its ops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnReport {
    /// Its id.
    pub id: TxnId,
    /// Its session.
    pub session: SessionId,
    /// Its position in the session.
    pub seq: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Start timestamp (ns), if recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// Commit timestamp (ns), if recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ns: Option<u64>,
    /// Its ops.
    pub ops: Vec<OpReport>,
    /// The isolation level it asked for, where recorded. Schema 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationLevel>,
    /// Its statements in the order it ran them, as far as the record shows (`history::values::statement_steps`).
    /// Schema 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statements: Vec<StatementReport>,
    /// The collector (proxy) that recorded it, where several ship to one verifier; 0, and not written,
    /// for a lone proxy.
    #[serde(default, skip_serializing_if = "is_lone_collector")]
    pub collector: CollectorId,
}

fn is_lone_collector(c: &CollectorId) -> bool {
    *c == CollectorId::default()
}

/// The options the run used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptionsUsed {
    /// Pruning (Cobra §3.3) on.
    pub prune: bool,
    /// Coalescing (Cobra §3.2) on.
    pub coalesce: bool,
    /// Combining writes (Cobra §3.1) on.
    pub combine: bool,
    /// The clock-drift threshold (strict serializability only).
    pub clock_drift_ms: u64,
    /// Collectors whose clock had an error bound of its own, in milliseconds (strict serializability only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clock_errors_ms: BTreeMap<CollectorId, u64>,
    /// The reachability backend used for pruning.
    pub reachability: String,
}

impl OptionsUsed {
    /// The clocks' bounds the run used, in nanoseconds.
    pub fn clocks(&self) -> history::ClockBounds {
        history::ClockBounds::from_ms(self.clock_drift_ms, &self.clock_errors_ms)
    }
}

/// Sizes at each stage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// All transactions in the history.
    pub transactions: u64,
    /// Committed ones.
    pub committed: u64,
    /// Aborted ones.
    pub aborted: u64,
    /// Indeterminate ones proved committed by a read.
    pub indeterminate_included: u64,
    /// Indeterminate ones nobody read from (dropped).
    pub indeterminate_dropped: u64,
    /// Vertices of the known graph (included transactions).
    pub vertices: u64,
    /// Versions (visible writes and initial versions read).
    pub versions: u64,
    /// wr edges.
    pub wr_edges: u64,
    /// Session-order edges.
    pub so_edges: u64,
    /// Real-time edges.
    pub rt_edges: u64,
    /// ww pairs from read-modify-writes.
    pub ww_pairs: u64,
    /// rw edges inferred inside chains.
    pub chain_rw_edges: u64,
    /// Edges forced by initial versions preceding recorded writes.
    pub initial_edges: u64,
    /// Chains after combining writes.
    pub chains: u64,
    /// Pairs of two unread blind writes of one key that needed no constraint (serializability only; see
    /// `constraints`).
    #[serde(default)]
    pub unread_pairs: u64,
    /// Constraints generated.
    pub constraints_before_prune: u64,
    /// Constraints left for the solver.
    pub constraints_after_prune: u64,
    /// Pruning passes.
    pub prune_iterations: u64,
    /// Known edges when the solver starts.
    pub known_edges_at_solve: u64,
    /// Weak levels: commit-order edges the level's axiom forced (saturation, docs/levels.md).
    #[serde(default)]
    pub forced_edges: u64,
}

/// Time per stage, in milliseconds (Cobra Fig. 7's split).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Normalisation, known graph, chains, constraints.
    pub construct_ms: f64,
    /// Pruning.
    pub prune_ms: f64,
    /// Solving.
    pub solve_ms: f64,
    /// Certificate and report.
    pub report_ms: f64,
}

/// What strict serializability added.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealTime {
    /// The clock-drift threshold that commit timestamps were pushed by.
    pub clock_drift_ms: u64,
    /// Collectors whose clock had an error bound of its own, in milliseconds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clock_errors_ms: BTreeMap<CollectorId, u64>,
    /// Real-time edges added (the minimal set, Cobra §3.5).
    pub edges: u64,
    /// Included transactions without both timestamps (they get no real-time edges).
    pub without_timestamps: u64,
}

impl RealTime {
    /// The clocks' bounds in words: the drift threshold, and each collector's own bound.
    pub fn threshold(&self) -> String {
        let mut words = format!("clock-drift threshold {} ms", self.clock_drift_ms);
        if !self.clock_errors_ms.is_empty() {
            let own: Vec<String> = self
                .clock_errors_ms
                .iter()
                .map(|(c, ms)| format!("collector {}'s clock within {ms} ms of true time", c.0))
                .collect();
            words.push_str(&format!(" ({})", own.join(", ")));
        }
        words
    }
}

/// Under `declared`: how many transactions asked for each isolation level, and so which level each was held
/// to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredLevels {
    /// Asked for SERIALIZABLE: held to serializability.
    pub serializable: u64,
    /// Asked for REPEATABLE READ (PostgreSQL's snapshot isolation): held to snapshot isolation.
    pub repeatable_read: u64,
    /// Asked for READ COMMITTED: held to Adya's PL-2 (no G0, G1a, G1b, G1c).
    pub read_committed: u64,
    /// Asked for READ UNCOMMITTED, which PostgreSQL runs as READ COMMITTED: held to PL-2 as well.
    pub read_uncommitted: u64,
    /// No level was recorded (a log from before levels were, or a format without them): held to
    /// serializability, the strongest, so that nothing unknown is taken as allowed.
    pub unrecorded: u64,
    /// Fences, whatever level they asked for: their one read locks its row, so they are held to
    /// serializability. Not counted in the fields above. Absent (0) in reports from before fences were
    /// counted apart.
    #[serde(default)]
    pub fences: u64,
}

impl DeclaredLevels {
    /// Counts the levels of `h`'s transactions, fences apart.
    pub fn count(h: &history::History) -> Self {
        let mut c = DeclaredLevels::default();
        for t in &h.transactions {
            use history::IsolationLevel::*;
            *match t.isolation {
                _ if t.fence => &mut c.fences,
                Some(Serializable) => &mut c.serializable,
                Some(RepeatableRead) => &mut c.repeatable_read,
                Some(ReadCommitted) => &mut c.read_committed,
                Some(ReadUncommitted) => &mut c.read_uncommitted,
                None => &mut c.unrecorded,
            } += 1;
        }
        c
    }
}

/// The verifier's answer, with its evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Accept or reject.
    pub verdict: Verdict,
    /// The level checked.
    pub level: Level,
    /// The options used.
    pub options: OptionsUsed,
    /// Why it was rejected (empty on accept). The first is the main finding.
    #[serde(default)]
    pub anomalies: Vec<Anomaly>,
    /// Anomalies found but left out of the report.
    #[serde(default)]
    pub anomalies_omitted: u64,
    /// Version-order facts that ww/rw edges cite by index; a derivation only cites lower indices.
    #[serde(default)]
    pub derivations: Vec<Derivation>,
    /// Every transaction the report cites, with all its ops: those its anomalies and proofs mention, the
    /// writers of the versions its derivations chain, and what else the checker reads (schema 4), so that
    /// the report can be re-checked on its own ([`check_cited`]).
    #[serde(default)]
    pub transactions: Vec<TxnReport>,
    /// On accept: a serial order of the included transactions that explains every read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_order: Option<Vec<TxnId>>,
    /// Reads that could not be judged (verified in rounds: the first [`InRounds::UNVERIFIABLE_LISTED`]).
    #[serde(default)]
    pub unverifiable: Vec<Unverifiable>,
    /// Verified in rounds: reads that could not be judged beyond those listed in `unverifiable`, by cause.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unverifiable_unlisted: BTreeMap<UnverifiableCause, u64>,
    /// Indeterminate transactions that nobody read from; left out of the check.
    #[serde(default)]
    pub dropped_indeterminate: Vec<TxnId>,
    /// Statements the history records without row operations (aggregates, predicate reads, DDL, …), by
    /// kind: their effects were not checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_checked: Vec<NotChecked>,
    /// Sizes.
    pub counts: Counts,
    /// Time per stage.
    pub timings: Timings,
    /// Present when checking strict serializability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_time: Option<RealTime>,
    /// Present when checking `declared`: the levels the transactions asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<DeclaredLevels>,
    /// Present on an accept reached in rounds (Cobra §4), which has no serial order: collection deleted
    /// what the rounds had settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<InRounds>,
}

impl Report {
    /// Whether the history was accepted.
    pub fn is_accept(&self) -> bool {
        self.verdict == Verdict::Accept
    }

    /// How many reads could not be judged, by cause, in cause order: those listed and those only counted.
    pub fn unverifiable_by_cause(&self) -> Vec<(UnverifiableCause, u64)> {
        let mut counts = self.unverifiable_unlisted.clone();
        for u in &self.unverifiable {
            *counts.entry(u.cause).or_insert(0u64) += 1;
        }
        counts.into_iter().collect()
    }

    /// How many reads could not be judged, listed or not.
    pub fn unverifiable_total(&self) -> u64 {
        self.unverifiable.len() as u64 + self.unverifiable_unlisted.values().sum::<u64>()
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Parses a report written by [`Report::to_json`].
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

pub(crate) mod as_json;
pub(crate) mod carried;
mod cited;
mod coverage;
pub use cited::{CitedError, CitedHistory, CitedSummary, check_cited};
pub use coverage::{Coverage, InRounds, NotChecked, Unverifiable, UnverifiableCause};
mod dot;
mod html;
mod labels;
pub use labels::Labels;
mod svg;
mod text;
mod values;

pub use html::{REPORT_CSP, escape};
