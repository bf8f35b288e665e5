//! The data model of a history (DESIGN.md §3): sessions of transactions, each an ordered list of reads and
//! writes on interned keys, with the identity of every version read and written.

use std::fmt;
use std::hash::BuildHasher;

use serde::{Deserialize, Serialize};

use crate::values::TxnValues;

/// Identifies one transaction within a history. Unique across sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TxnId(pub u64);

/// Identifies one client session (one connection, or one Cobra client log file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub u64);

/// Identifies one version of one key. Unique across the whole history: two writes never share a write id,
/// and the verifier reports it when they do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WriteId(pub u64);

/// Identifies the proxy instance (or importer) that recorded a transaction's timestamps; clocks of different
/// collectors may drift apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CollectorId(pub u32);

/// How far the collectors' clocks may be from true time, which decides when one transaction's commit
/// and another's start are far enough apart to order them in real time (Cobra §3.5, across collectors).
///
/// Each collector's clock is within an error bound of true time: its own, or half the uniform drift
/// threshold. A commit and a start read by collectors `a` and `b` are ordered only when the start is later
/// than the commit by more than `error(a) + error(b)` ([`ClockBounds::drift_ns`]); with no bound of its
/// own that is the uniform threshold, as for one clock. Bounds per collector, not per pair, because that
/// is what a clock's discipline reports (chrony's and NTP's maximum error are per host), and because one
/// sweep in time order then finds every real-time edge: shifting each start earlier and each commit later
/// by its collector's bound turns "far enough apart" into plain order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockBounds {
    /// The drift threshold between two clocks that have no bound of their own, in nanoseconds.
    pub uniform_drift_ns: u64,
    /// Collectors whose clock has a bound of its own, in nanoseconds.
    pub errors_ns: std::collections::BTreeMap<CollectorId, u64>,
}

impl ClockBounds {
    /// Every clock within half of `drift_ns` (rounded up to a nanosecond) of true time: two readings are
    /// ordered when more than `drift_ns` apart.
    pub fn uniform(drift_ns: u64) -> Self {
        ClockBounds { uniform_drift_ns: drift_ns, errors_ns: Default::default() }
    }

    /// The bounds given in milliseconds, as options and reports carry them.
    pub fn from_ms(uniform_drift_ms: u64, errors_ms: &std::collections::BTreeMap<CollectorId, u64>) -> Self {
        let ns = |ms: u64| ms.saturating_mul(1_000_000);
        ClockBounds {
            uniform_drift_ns: ns(uniform_drift_ms),
            errors_ns: errors_ms.iter().map(|(&c, &ms)| (c, ns(ms))).collect(),
        }
    }

    /// How far `collector`'s clock may be from true time.
    pub fn error_ns(&self, collector: CollectorId) -> u64 {
        self.errors_ns.get(&collector).copied().unwrap_or(self.uniform_drift_ns.div_ceil(2))
    }

    /// How much later than a commit read by `from` a start read by `to` must be to follow it in real time.
    pub fn drift_ns(&self, from: CollectorId, to: CollectorId) -> u64 {
        self.error_ns(from).saturating_add(self.error_ns(to))
    }

    /// The time a start read by `collector` surely came after.
    pub fn earliest(&self, collector: CollectorId, start_ns: u64) -> u64 {
        start_ns.saturating_sub(self.error_ns(collector))
    }

    /// The time a commit read by `collector` surely came before (never before `earliest_start`, the
    /// transaction's own start shifted the other way: a commit read before its start is a broken reading).
    pub fn latest(&self, collector: CollectorId, commit_ns: u64, earliest_start: u64) -> u64 {
        commit_ns.saturating_add(self.error_ns(collector)).max(earliest_start)
    }
}

/// An interned key: an index into the history's [`KeyTable`]. Cheap to copy, hash and compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Key(pub u32);

/// An index into the history's statement texts, so that reports can show the SQL an op came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StmtRef(pub u32);

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}", self.0)
    }
}

impl fmt::Display for WriteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S{}", self.0)
    }
}

/// The full name of a key: a namespace (for SQL, the table) and the key's bytes (for SQL, the encoded
/// primary key).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeyName {
    /// The table, or `""` where the source has a flat key space.
    pub namespace: String,
    /// The key itself.
    pub bytes: Vec<u8>,
}

impl fmt::Display for KeyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Show a key as text only when it looks like one: hashed keys (Cobra's are 8 bytes of xxHash) are
        // often valid UTF-8 by chance, and would print as noise.
        let looks_like_text = !self.bytes.is_empty()
            && self.bytes.iter().all(|b| b.is_ascii_alphanumeric() || b"_-.:/@ ,".contains(b));
        let shown = match std::str::from_utf8(&self.bytes) {
            Ok(s) if looks_like_text => s.to_owned(),
            _ => self.bytes.iter().map(|b| format!("{b:02x}")).collect(),
        };
        if self.namespace.is_empty() { write!(f, "{shown}") } else { write!(f, "{}:{shown}", self.namespace) }
    }
}

/// Interns key names, so that the rest of the system handles a `Key` (four bytes) instead of strings.
/// Serialized as its names in `Key` order: the index is rebuilt from them.
///
/// Each name is stored once: the index holds key numbers, hashed by their names. It held a second copy of
/// every name, about 150 bytes a key with its slot, and every row ever inserted is a key for ever.
#[derive(Clone, Default)]
pub struct KeyTable {
    names: Vec<KeyName>,
    /// foldhash, not SipHash: every op of every transaction read or replayed is interned here. On a
    /// 100,000-transaction TPC-C history (5.2M ops, 700k keys), `krait history stats` took 1.07–1.11 s with
    /// SipHash and 0.97–1.00 s with foldhash.
    hasher: foldhash::fast::RandomState,
    index: hashbrown::HashTable<Key>,
}

impl fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyTable").field("names", &self.names).finish()
    }
}

/// Two tables are equal when they name the same keys the same way; the index follows from the names.
impl PartialEq for KeyTable {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names
    }
}

impl Eq for KeyTable {}

impl KeyTable {
    /// Returns the key for `name`, adding it if it is new.
    pub fn intern(&mut self, name: KeyName) -> Key {
        let (hash, found) = self.find(&name);
        if let Some(key) = found {
            return key;
        }
        let key = Key(u32::try_from(self.names.len()).expect("more than 2^32 distinct keys"));
        self.names.push(name);
        let (names, hasher) = (&self.names, &self.hasher);
        self.index.insert_unique(hash, key, |k| hasher.hash_one(&names[k.0 as usize]));
        key
    }

    /// The hash of `name` and its key, if it was interned.
    fn find(&self, name: &KeyName) -> (u64, Option<Key>) {
        let hash = self.hasher.hash_one(name);
        (hash, self.index.find(hash, |k| self.names[k.0 as usize] == *name).copied())
    }

    /// Interns a key with an empty namespace, named by a string.
    pub fn intern_str(&mut self, name: &str) -> Key {
        self.intern(KeyName { namespace: String::new(), bytes: name.as_bytes().to_vec() })
    }

    /// The key for `name`, if it was interned.
    pub fn get(&self, name: &KeyName) -> Option<Key> {
        self.find(name).1
    }

    /// The name of an interned key. Keys come from this table, so the lookup cannot miss for them.
    pub fn name(&self, key: Key) -> Option<&KeyName> {
        self.names.get(key.0 as usize)
    }

    /// Makes room for `additional` more keys, exactly: a table cloned whole has none, and its first new key
    /// would copy every name into a table twice the size.
    pub fn reserve(&mut self, additional: usize) {
        self.names.reserve_exact(additional);
        let (names, hasher) = (&self.names, &self.hasher);
        self.index.reserve(additional, |k| hasher.hash_one(&names[k.0 as usize]));
    }

    /// How many distinct keys are interned.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no key is interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// All key names, in `Key` order.
    pub fn names(&self) -> &[KeyName] {
        &self.names
    }
}

impl Serialize for KeyTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.names.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for KeyTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let names = Vec::<KeyName>::deserialize(deserializer)?;
        let mut table = KeyTable::default();
        for name in names {
            let len = table.len();
            if table.intern(name).0 as usize != len {
                return Err(serde::de::Error::custom("a key name appears twice in a key table"));
            }
        }
        Ok(table)
    }
}

/// Which version a read observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Observed {
    /// A version written by a recorded transaction.
    Version(WriteId),
    /// The row did not exist.
    Absent,
    /// A version written before recording began; treated like Cobra's INIT transaction. The tag tells
    /// different pre-history versions of one key apart (Cobra's initial state uses tag 0).
    PreHistory(u64),
    /// A version written after recording began by a writer the collector did not record (DESIGN.md §3,
    /// "every version has an owner"): a SQL function or trigger, a statement it could not map, a session
    /// whose replies it lost track of, the window of a crash, or a client that bypassed it. The tag tells
    /// such versions apart. A read of one is *unverifiable*: it is counted, and never becomes a stale read,
    /// a garbage read or an edge, because its writer's place in the history is unknown. Appended last:
    /// postcard encodes variants by index, so logs written before it existed still decode.
    Unrecorded(u64),
    /// A version written after this proxy run began, by a writer it did not record, while the operator
    /// asserted that every writer goes through it (`[record] exclusive`) and nothing it saw could explain
    /// the version (DESIGN.md §3). The tag is the write id the version would have if a recorded transaction
    /// had written it: replay resolves the read to that write when some transaction did (the reader's row
    /// overtook the writer's), and the verifier reports any other as a version no recorded transaction
    /// wrote. Appended last, so logs written before it existed still decode.
    Foreign(u64),
}

/// One read or write, in the order the transaction issued it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Op {
    /// A read of `key` that observed one version.
    Read {
        /// The key read.
        key: Key,
        /// The version it returned.
        observed: Observed,
        /// The statement the read came from, if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stmt: Option<StmtRef>,
    },
    /// A write of a new version of `key`.
    Write {
        /// The key written.
        key: Key,
        /// The identity of the new version.
        write: WriteId,
        /// The statement the write came from, if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stmt: Option<StmtRef>,
    },
}

impl Op {
    /// The key this op touches.
    pub fn key(&self) -> Key {
        match *self {
            Op::Read { key, .. } | Op::Write { key, .. } => key,
        }
    }

    /// The statement this op came from, if known.
    pub fn stmt(&self) -> Option<StmtRef> {
        match *self {
            Op::Read { stmt, .. } | Op::Write { stmt, .. } => stmt,
        }
    }
}

/// How a transaction ended, as far as the collector knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The database acknowledged the commit.
    Committed,
    /// The transaction rolled back, or its commit failed.
    Aborted,
    /// The collector never learned the outcome (a crash or a lost connection while COMMIT was in flight).
    /// A read from it proves it committed; the verifier never rejects because of one alone.
    Indeterminate,
}

/// The isolation level a transaction asked the database for, in SQL's terms (`BEGIN ISOLATION LEVEL …`, `SET
/// TRANSACTION`, the session's default). The database may run it at a stronger level: PostgreSQL runs READ
/// UNCOMMITTED as READ COMMITTED, and its REPEATABLE READ is snapshot isolation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationLevel {
    /// READ UNCOMMITTED.
    ReadUncommitted,
    /// READ COMMITTED.
    ReadCommitted,
    /// REPEATABLE READ.
    RepeatableRead,
    /// SERIALIZABLE.
    Serializable,
}

impl IsolationLevel {
    /// Every level, weakest first.
    pub const ALL: [IsolationLevel; 4] = [
        IsolationLevel::ReadUncommitted,
        IsolationLevel::ReadCommitted,
        IsolationLevel::RepeatableRead,
        IsolationLevel::Serializable,
    ];

    /// The level's SQL name, as `SHOW transaction_isolation` prints it (`read committed`).
    pub fn sql_name(self) -> &'static str {
        match self {
            IsolationLevel::ReadUncommitted => "read uncommitted",
            IsolationLevel::ReadCommitted => "read committed",
            IsolationLevel::RepeatableRead => "repeatable read",
            IsolationLevel::Serializable => "serializable",
        }
    }

    /// Parses a level as SQL or PostgreSQL's settings spell it: any case, words separated by spaces,
    /// hyphens or underscores, optionally quoted (`'REPEATABLE READ'`, `repeatable-read`).
    pub fn parse_sql(text: &str) -> Option<IsolationLevel> {
        let trimmed = text.trim().trim_matches(|c| c == '\'' || c == '"').trim();
        let words: Vec<String> = trimmed
            .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        IsolationLevel::ALL.into_iter().find(|level| {
            let name: Vec<&str> = level.sql_name().split(' ').collect();
            name.len() == words.len() && name.iter().zip(&words).all(|(a, b)| a == b)
        })
    }
}

impl std::fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.sql_name().to_ascii_uppercase())
    }
}

/// One transaction, as a client observed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// Unique within the history.
    pub id: TxnId,
    /// The session that ran it.
    pub session: SessionId,
    /// Its position within the session, counting from 0; session order follows it.
    pub seq: u64,
    /// Reads and writes, in the order issued.
    pub ops: Vec<Op>,
    /// How it ended.
    pub outcome: Outcome,
    /// When it started, in nanoseconds since the Unix epoch, by the collector's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// When its commit was acknowledged, in nanoseconds since the Unix epoch, by the collector's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ns: Option<u64>,
    /// The collector whose clock took the timestamps.
    #[serde(default)]
    pub collector: CollectorId,
    /// Whether this is a fence transaction (Cobra §4.2), injected to cut the history into epochs.
    #[serde(default)]
    pub fence: bool,
    /// The isolation level it asked for, where the collector knew it (the proxy records it; other formats
    /// may not carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationLevel>,
    /// The parameters and row values the collector recorded for people and for replay (issue 18); the
    /// verifier never reads them. Boxed: most transactions of most histories carry none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Box<TxnValues>>,
}

impl Transaction {
    /// An empty committed transaction with no timestamps.
    pub fn new(id: TxnId, session: SessionId, seq: u64) -> Self {
        Transaction {
            id,
            session,
            seq,
            ops: Vec::new(),
            outcome: Outcome::Committed,
            start_ns: None,
            commit_ns: None,
            collector: CollectorId::default(),
            fence: false,
            isolation: None,
            values: None,
        }
    }

    /// Whether the transaction has no write.
    pub fn is_read_only(&self) -> bool {
        !self.ops.iter().any(|op| matches!(op, Op::Write { .. }))
    }

    /// Keeps only the ops `keep` says to, in order, and moves the recorded values with them (each row
    /// stays with its op, each statement run before the same ops): a verifier that drops ops it cannot use
    /// (reads of collected versions, of unrecorded writers) must not leave the rest showing another op's
    /// row and parameters. Returns how many were dropped.
    pub fn retain_ops(&mut self, mut keep: impl FnMut(&Op) -> bool) -> usize {
        let mut dropped = Vec::new();
        let mut index = 0u32;
        self.ops.retain(|op| {
            let kept = keep(op);
            if !kept {
                dropped.push(index);
            }
            index += 1;
            kept
        });
        if let Some(values) = self.values.as_deref_mut()
            && !dropped.is_empty()
        {
            values.drop_ops(&dropped);
        }
        dropped.len()
    }

    /// The statements it cites: its ops' and its statement runs', in that order (repeats included).
    pub fn cited_statements(&self) -> impl Iterator<Item = StmtRef> + '_ {
        let runs = self.values.iter().flat_map(|v| v.runs.iter().filter_map(|r| r.stmt));
        self.ops.iter().filter_map(Op::stmt).chain(runs)
    }

    /// Renumbers every statement it cites, its ops' and its statement runs' alike, with `to` (after its
    /// table of texts was rebuilt). The runs go with the ops: a run finds its ops by their statement
    /// ([`crate::values::Values::describe_params`]).
    pub fn renumber_statements(&mut self, mut to: impl FnMut(StmtRef) -> StmtRef) {
        let Ok(()) = self.try_renumber_statements(|s| Ok::<_, std::convert::Infallible>(to(s)));
    }

    /// As [`Transaction::renumber_statements`], with a renumbering that can fail (into another table of
    /// texts, which may lack one); stops at `to`'s first error.
    pub fn try_renumber_statements<E>(
        &mut self,
        mut to: impl FnMut(StmtRef) -> Result<StmtRef, E>,
    ) -> Result<(), E> {
        for op in &mut self.ops {
            let (Op::Read { stmt, .. } | Op::Write { stmt, .. }) = op;
            if let Some(s) = stmt {
                *s = to(*s)?;
            }
        }
        for run in self.values.iter_mut().flat_map(|v| v.runs.iter_mut()) {
            if let Some(s) = &mut run.stmt {
                *s = to(*s)?;
            }
        }
        Ok(())
    }
}

/// A point in the log where transactions may have been lost (a crash under `group` or `none` durability).
/// After a gap, a read of an unknown version is unverifiable rather than a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogGap {
    /// The number of transactions recorded before the gap.
    pub after_txns: u64,
}

/// A whole history: what the clients observed. It serializes for compact binary encodings (the online
/// verifier's checkpoint; transactions in the [`crate::plain`] shape); the exchange formats are its codecs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The interned key names.
    pub keys: KeyTable,
    /// Statement texts that ops refer to through [`StmtRef`].
    pub statements: Vec<String>,
    /// Every transaction, committed or not, in the order recorded. Session order is given by
    /// `(session, seq)`, not by position here.
    #[serde(with = "crate::plain::transactions")]
    pub transactions: Vec<Transaction>,
    /// Places where the log may have lost transactions.
    pub gaps: Vec<LogGap>,
    /// Statements the collector could not map to reads and writes, so the verifier cannot check them. Only
    /// the proxy's log carries them; the exchange formats (native, JSON Lines, Cobra, PolySI) do not.
    pub unchecked: Vec<UncheckedStatement>,
    /// The recording horizon, when the collector noted one (see [`RecordingHorizon`]). Versions whose
    /// writer had ended before it are pre-history; any other version no recorded transaction wrote is
    /// [`Observed::Unrecorded`]. With a horizon, pre-history is decided rather than guessed, so the verifier
    /// may trust it; without one (imported histories, logs of older proxies) it stays as it was.
    pub horizon: Option<RecordingHorizon>,
}

/// The recording horizon (DESIGN.md §3, "every version has an owner"): the database's snapshot when
/// recording began (PostgreSQL's `pg_current_snapshot()`), taken before the first client statement went
/// through the proxy. A transaction that had ended by then is pre-history; any other one may have written
/// after recording began.
///
/// The whole snapshot is kept, not only its `xmin`: one long-running transaction anywhere in the database
/// holds `xmin` back, and every row written after it (before recording began) would then look as if an
/// unrecorded writer made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingHorizon {
    /// Every transaction id below it had ended (the snapshot's `xmin`).
    pub xmin: u64,
    /// No transaction id at or above it had started (the snapshot's `xmax`).
    pub xmax: u64,
    /// The ids between the two still running (the snapshot's `xip`); every other one had ended.
    pub running: Vec<u64>,
}

/// A snapshot's text (`xmin:xmax:xip,…`) did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a PostgreSQL snapshot (xmin:xmax:xip,…): {0:?}")]
pub struct SnapshotParseError(pub String);

impl RecordingHorizon {
    /// The horizon of a log written before whole snapshots were kept: only `xmin`, nothing known above it.
    pub fn from_xmin(xmin: u64) -> Self {
        RecordingHorizon { xmin, xmax: xmin, running: Vec::new() }
    }

    /// Parses `pg_current_snapshot()::text`, e.g. `748:752:748,750`.
    pub fn parse_snapshot(text: &str) -> Result<Self, SnapshotParseError> {
        let bad = || SnapshotParseError(text.to_owned());
        let mut parts = text.trim().splitn(3, ':');
        let id = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
        let xmin = id(parts.next())?;
        let xmax = id(parts.next())?;
        let running = match parts.next().ok_or_else(bad)? {
            "" => Vec::new(),
            list => list.split(',').map(|s| s.parse::<u64>().map_err(|_| bad())).collect::<Result<_, _>>()?,
        };
        if xmin > xmax || running.iter().any(|&x| x < xmin || x >= xmax) {
            return Err(bad());
        }
        Ok(RecordingHorizon { xmin, xmax, running })
    }

    /// Whether transaction `xid` (64-bit) had ended when recording began.
    pub fn had_ended(&self, xid: u64) -> bool {
        xid < self.xmin || (xid < self.xmax && !self.running.contains(&xid))
    }
}

/// A statement recorded without row operations (an aggregate, a predicate read, DDL, COPY, …), kept so that
/// a report can say what it did not check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UncheckedStatement {
    /// The transaction it ran in.
    pub txn: TxnId,
    /// Why it could not be mapped, as the collector labels it (`aggregate`, `predicate`, `ddl`, …).
    pub kind: String,
    /// The statement text, if the collector logged it.
    pub statement: Option<String>,
}

impl History {
    /// Adds a statement text and returns its reference.
    pub fn add_statement(&mut self, text: impl Into<String>) -> StmtRef {
        let r = StmtRef(u32::try_from(self.statements.len()).expect("more than 2^32 statements"));
        self.statements.push(text.into());
        r
    }

    /// The text of a statement.
    pub fn statement(&self, stmt: StmtRef) -> Option<&str> {
        self.statements.get(stmt.0 as usize).map(String::as_str)
    }

    /// The transactions of each session, in session order, keyed by session.
    pub fn sessions(&self) -> std::collections::BTreeMap<SessionId, Vec<&Transaction>> {
        let mut sessions: std::collections::BTreeMap<SessionId, Vec<&Transaction>> = Default::default();
        for txn in &self.transactions {
            sessions.entry(txn.session).or_default().push(txn);
        }
        for txns in sessions.values_mut() {
            txns.sort_by_key(|t| t.seq);
        }
        sessions
    }

    /// Counts of what the history holds, as `krait history stats` prints them.
    pub fn stats(&self) -> HistoryStats {
        let mut stats = HistoryStats { transactions: self.transactions.len() as u64, ..Default::default() };
        let mut sessions = std::collections::HashSet::new();
        let mut keys = std::collections::HashSet::new();
        for txn in &self.transactions {
            sessions.insert(txn.session);
            match txn.outcome {
                Outcome::Committed => stats.committed += 1,
                Outcome::Aborted => stats.aborted += 1,
                Outcome::Indeterminate => stats.indeterminate += 1,
            }
            for op in &txn.ops {
                keys.insert(op.key());
                match op {
                    Op::Read { .. } => stats.reads += 1,
                    Op::Write { .. } => stats.writes += 1,
                }
                if txn.fence {
                    stats.fence_ops += 1;
                }
            }
        }
        stats.sessions = sessions.len() as u64;
        stats.keys = keys.len() as u64;
        stats
    }
}

/// Counts of a history's contents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryStats {
    /// Distinct sessions.
    pub sessions: u64,
    /// All transactions, whatever their outcome.
    pub transactions: u64,
    /// Committed transactions.
    pub committed: u64,
    /// Aborted transactions.
    pub aborted: u64,
    /// Transactions whose outcome is unknown.
    pub indeterminate: u64,
    /// Read ops.
    pub reads: u64,
    /// Write ops.
    pub writes: u64,
    /// Distinct keys touched by any op.
    pub keys: u64,
    /// Ops inside fence transactions.
    pub fence_ops: u64,
}

/// The time now in nanoseconds since the Unix epoch, by this machine's clock: what [`Transaction::start_ns`],
/// [`Transaction::commit_ns`] and a collector's heartbeats carry. A clock before 1970 reads as 0.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::KeyName;

    fn name(namespace: &str, bytes: &[u8]) -> String {
        KeyName { namespace: namespace.to_owned(), bytes: bytes.to_vec() }.to_string()
    }

    #[test]
    fn key_names_that_look_like_text_print_as_text_and_hashes_print_as_hex() {
        assert_eq!(name("", b"x"), "x");
        assert_eq!(name("accounts", b"42"), "accounts:42");
        // Eight hash bytes that happen to be valid UTF-8 still print as hex.
        assert_eq!(name("", &[0x41, 0x7e, 0x20, 0x21, 0x5b, 0x00, 0x10, 0x7f]), "417e20215b00107f");
    }
}
