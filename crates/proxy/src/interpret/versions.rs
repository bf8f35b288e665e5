//! Version identity: from the tags the database returns to the history's [`WriteId`] and [`Observed`].
//!
//! # The rule (strategy `xmin`)
//!
//! A version of a row is (table, primary key, `xmin`): PostgreSQL stamps every new tuple with the id of
//! the (sub)transaction that wrote it, and the proxy reads it back with RETURNING (writes) or in the target
//! list (reads).
//!
//! - The write id of the version that (table, pk, xmin) names is a 64-bit FNV-1a hash of the three
//!   ([`version_id`]). Deterministic, so the writer (which sees RETURNING) and every later reader (which sees
//!   the tuple) compute the same id without talking to each other.
//! - A DELETE leaves no tuple to stamp, so its tombstone's id hashes (table, pk, the deleter's transaction
//!   id from `pg_current_xact_id()`) with a different domain byte ([`tombstone_id`]): unique per key and
//!   deleting transaction, and never equal to a live version's id.
//! - A read maps to `Observed::Version(id)` only when this proxy recorded a write of that id (the
//!   [`VersionBook`]). A writer's RETURNING reaches the proxy before its COMMIT is sent, so no reader can
//!   see a recorded version before the book holds it.
//! - Any other version has an owner Krait did not record, and the *recording horizon* decides which
//!   (DESIGN.md §3, "every version has an owner"). The horizon is the database's snapshot when recording
//!   began (`pg_current_snapshot()`, [`HORIZON_QUERY`]), learnt by the first session before any client
//!   statement goes through the proxy, and kept in the log, so later runs use the same one. A transaction
//!   the snapshot shows as ended (below its `xmin`, or below its `xmax` and not running) had ended before
//!   recording began. So a version whose `xmin` (widened to 64 bits in PostgreSQL's circular order) names
//!   such a transaction, or is one of the special ids 0–2 (invalid, bootstrap, frozen), is pre-history:
//!   `Observed::PreHistory(id)`, ordered before every
//!   recorded transaction like Cobra's INIT. Any later one was written by an *unrecorded writer* (a
//!   function, a trigger, a statement the interpreter could not map, a lost session, a crash window, a
//!   client that bypassed Krait): `Observed::Unrecorded(id)`, which the verifier counts and never uses as
//!   evidence. Until the horizon is known (or where the database cannot tell it, like the reference store),
//!   every such version is pre-history, as before the horizon existed.
//! - A point lookup that finds no row reads `Absent` (the initial "no row" version) if the proxy never
//!   saw a version of that key. If it recorded a DELETE of that key and no live version since, it read that
//!   tombstone. If it saw a version and recorded no DELETE since, something it did not record deleted the
//!   row: `Observed::Unrecorded`, again never evidence.
//! - The book is shared by all sessions and a write enters it when its RETURNING row reaches the proxy. A
//!   client that pipelines COMMIT behind its writes (one query string) lets the database commit before the
//!   proxy has read that row; another session's read of the new version can then be processed first and
//!   be recorded as pre-history. Fences avoid this by sending COMMIT only after their row is in.
//! - **Discovered writes.** A write the interpreter could not map (a SQL function, a trigger) still
//!   stamps its version with its transaction's id. The proxy learns the ids of recorded transactions: the
//!   `xmin` of each row a mapped INSERT or UPDATE returned, and, for a transaction that ran a statement
//!   that may write unseen, `pg_current_xact_id_if_assigned()` asked before its COMMIT. Once a transaction
//!   has an intent in the log, its ids are its own in the book ([`VersionBook::own`]). A read of a version
//!   whose `xmin` one of them owns is a read of that transaction's write: the reading session logs the
//!   write as discovered ([`history::log::LogRecord::DiscoveredWrite`]) before any record of its own, and
//!   the verifier checks it like any other (a transaction reading its own such write gets the write in its
//!   ops first). The book keeps the latest [`MAX_OWNED_XIDS`] ids.
//! - **Exclusive recording** (`[record] exclusive`). When the operator asserts that every writer goes
//!   through this proxy, a version no recorded transaction owns is not simply unverifiable if its writer
//!   had not ended by the *run horizon* (the database's snapshot when this run of the proxy began, learnt
//!   by its first session): it is `Observed::Foreign`, which the verifier reports as a version no recorded
//!   transaction wrote, unless a recorded write of the same id turns up (an autocommit write commits before
//!   its RETURNING row reaches the proxy, so another session may read it first). Older ones may come from
//!   a crash window of an earlier run, and stay unverifiable. The assertion is suspended for the rest of
//!   the run ([`VersionBook::suspend_exclusive`]) once something the proxy saw could have written versions
//!   whose ids it cannot learn: a statement it cannot map that may write, or a session it lost track of.
//!   Ids forgotten from the book (beyond [`MAX_OWNED_XIDS`]) stay unverifiable too.
//! - The book lives in memory. After a restart, the proxy seeds it from the log's write ops
//!   ([`VersionBook::seed_from`]), so versions written by an earlier run stay `Version`, not pre-history:
//!   from the checkpoint the previous start stored and the records after it ([`seed`]).
//!
//! # Limits of `xmin`
//!
//! - Several versions of one row written by one transaction share its `xmin`, so they get one id. The
//!   interpreter records the second write of the same id in a transaction once; the verifier sees the last
//!   state, which is all other transactions can see.
//! - Subtransactions: a write inside a SAVEPOINT is stamped with the subtransaction's xid. Readers see the
//!   same xid, so ids still agree. A write undone by ROLLBACK TO SAVEPOINT leaves the transaction's
//!   recorded ops, with its reads of it (the tagger keeps each savepoint's place in the ops).
//! - Frozen rows: since PostgreSQL 9.4 freezing keeps the raw `xmin` (it sets a flag bit), so the id does
//!   not change when VACUUM freezes a row. Before 9.4 a frozen row reported `xmin = 2`.
//! - Wraparound: `xmin` is 32 bits. Two versions of one key written 2^32 transactions apart collide.
//! - UPDATE on PostgreSQL before 18 cannot return the replaced tuple's `xmin`; the rewriter asks for it with
//!   a scalar subquery on the statement's snapshot. At REPEATABLE READ and SERIALIZABLE that is exactly the
//!   replaced version (otherwise the UPDATE fails with a serialization error). At READ COMMITTED, when a
//!   concurrent update committed in between, PostgreSQL updates the newer version (EvalPlanQual) while the
//!   snapshot still shows the older one. So there the subquery returns the snapshot's version only when its
//!   `xmax` is the new version's `xmin` (this UPDATE replaced it), and [`READ_COMMITTED_MARK`] otherwise.

use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::Bytes;
use history::log::LoggedOp;
use history::{FastMap, FastSet, KeyName, Observed, RecordingHorizon, TxnId, WriteId, WriteIdMap};

use super::plan::{PkValue, RowKind, RowPlan};

pub mod seed;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn hash_parts(domain: u8, parts: &[&[u8]]) -> u64 {
    let mut h = fnv(FNV_OFFSET, &[domain]);
    for p in parts {
        // Length-prefix every part so ("ab","c") and ("a","bc") differ.
        h = fnv(h, &(p.len() as u64).to_le_bytes());
        h = fnv(h, p);
    }
    h
}

/// The write id of the live version (table, pk, xmin).
pub fn version_id(key: &KeyName, xmin: &[u8]) -> WriteId {
    WriteId(hash_parts(b'v', &[key.namespace.as_bytes(), &key.bytes, xmin]))
}

/// The write id of the tombstone a DELETE by transaction `deleter` left for `key`.
pub fn tombstone_id(key: &KeyName, deleter: &[u8]) -> WriteId {
    WriteId(hash_parts(b't', &[key.namespace.as_bytes(), &key.bytes, deleter]))
}

/// The key name of a row: its table's namespace and its primary-key values as text, joined by the unit
/// separator (0x1f), which never appears in an identifier-like key but keeps (1,23) and (12,3) apart.
pub fn key_name(namespace: &str, pk: &[&[u8]]) -> KeyName {
    let mut bytes = Vec::new();
    for (i, p) in pk.iter().enumerate() {
        if i > 0 {
            bytes.push(0x1f);
        }
        bytes.extend_from_slice(p);
    }
    KeyName { namespace: namespace.to_owned(), bytes }
}

/// What the replaced-version column of an UPDATE holds at READ COMMITTED when the statement's snapshot does
/// not show the version the UPDATE replaced (a concurrent update committed in between): no read is recorded
/// for it, and, when its SET reads the row, the statement is listed as not checked (opaque kind
/// `read_committed_update`); a blind one is a plain write.
pub const READ_COMMITTED_MARK: &str = "read committed";

/// The query that learns the recording horizon: the database's snapshot (`xmin:xmax:xip,…`, 64-bit
/// `xid8`s). It assigns no transaction id of its own.
pub const HORIZON_QUERY: &str = "SELECT pg_current_snapshot()::text";

/// The write ids this proxy recorded, shared by all sessions, and the recording horizon, so a read can
/// tell a recorded version from a pre-history one and from one of an unrecorded writer.
#[derive(Debug, Default)]
pub struct VersionBook {
    /// The recorded write ids: one per version this proxy ever recorded, compactly (8 bytes each), in
    /// shards by the id's low bits. A map merges its newest ids into its sorted array under the lock, which
    /// at 4M ids in one map stalled every recording session for about 40 ms; a shard merges a sixteenth.
    written: [Mutex<WriteIdMap<()>>; WRITTEN_SHARDS],
    /// The last tombstone recorded per key, cleared when a live version of the key is recorded. A point
    /// lookup that finds no row after a recorded DELETE read that tombstone, not the initial "no row".
    tombstones: Mutex<FastMap<KeyName, WriteId>>,
    /// Keys (hashed) of which a version was seen, read or written: a later "no row" without a recorded
    /// DELETE is an unrecorded writer's delete, not the initial absence. A hash collision only makes a
    /// read unverifiable, never a verdict wrong.
    seen: Mutex<FastSet<u64>>,
    /// The recording horizon, once known.
    horizon: std::sync::OnceLock<RecordingHorizon>,
    /// Which recorded transaction owns which database transaction id (32 bits, as `xmin` shows it).
    owners: Mutex<OwnedXids>,
    /// The database's snapshot when this run of the proxy began (see "Exclusive recording").
    run_horizon: std::sync::OnceLock<RecordingHorizon>,
    /// `[record] exclusive`: asserted by the operator, and why it was suspended, if it was.
    exclusive: std::sync::atomic::AtomicBool,
    exclusive_suspended: std::sync::OnceLock<String>,
}

/// How many shards the book's recorded write ids are split into (a power of two).
const WRITTEN_SHARDS: usize = 16;

/// The shard of the book's recorded write ids that holds `w`: by its low bits, since the proxy's ids are
/// hashes, and a map's lookup index wants its ids spread over the whole range.
fn written_shard(w: WriteId) -> usize {
    (w.0 as usize) & (WRITTEN_SHARDS - 1)
}

/// How many database transaction ids the book remembers owners for; older ones are forgotten first, and a
/// read of a version they stamped is then an unrecorded writer's again (unverifiable, never wrong).
pub const MAX_OWNED_XIDS: usize = 1 << 18;

/// A bounded map from database transaction id to the recorded transaction that owns it.
#[derive(Debug, Default)]
struct OwnedXids {
    owner: FastMap<u32, TxnId>,
    /// Insertion order, oldest first, for eviction.
    order: VecDeque<u32>,
    /// The newest id evicted so far (in PostgreSQL's circular order): an unowned id up to it may have
    /// been owned.
    newest_evicted: Option<u32>,
}

/// Whether `a` precedes or is `b` in PostgreSQL's circular order of 32-bit transaction ids.
fn xid_at_or_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

/// What a read of a version found: the [`Observed`] it records, and whether the version's writer was
/// discovered by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sighting {
    /// A recorded, pre-history or unrecorded writer's version, as the module docs classify it.
    Plain(Observed),
    /// A version the reading transaction itself wrote through something unmapped.
    Own(WriteId),
    /// A version the recorded transaction `writer` wrote through something unmapped.
    Theirs {
        /// Its writer.
        writer: TxnId,
        /// Its identity.
        write: WriteId,
    },
}

/// A write of another recorded transaction that a read revealed, for the session to log before any
/// record of its own (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredWrite {
    /// The transaction that wrote it.
    pub writer: TxnId,
    /// The key written.
    pub key: KeyName,
    /// The version.
    pub write: WriteId,
}

/// The 32-bit transaction id in an `xmin` value (its text), if it is one.
pub fn parse_xid(xmin: &[u8]) -> Option<u32> {
    std::str::from_utf8(xmin).ok()?.parse::<u32>().ok()
}

/// The 64-bit id of the 32-bit transaction id `xid` nearest to `near` (PostgreSQL's circular order:
/// within 2^31 of it), as `TransactionIdPrecedes` would place it.
pub fn widen_xid(xid: u32, near: u64) -> u64 {
    let delta = xid.wrapping_sub(near as u32) as i32;
    near.saturating_add_signed(i64::from(delta))
}

/// The first normal transaction id; 0–2 are invalid, bootstrap and frozen, all older than any other.
const FIRST_NORMAL_XID: u32 = 3;

impl VersionBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the recording horizon, if it is not set yet (from the log at start, or once it is durable in
    /// the log); returns whether this call set it.
    pub fn set_horizon(&self, horizon: RecordingHorizon) -> bool {
        self.horizon.set(horizon).is_ok()
    }

    /// The recording horizon, once known.
    pub fn horizon(&self) -> Option<&RecordingHorizon> {
        self.horizon.get()
    }

    fn saw(&self, key: &KeyName) {
        if let Ok(mut s) = self.seen.lock() {
            s.insert(hash_parts(b's', &[key.namespace.as_bytes(), &key.bytes]));
        }
    }

    fn was_seen(&self, key: &KeyName) -> bool {
        let h = hash_parts(b's', &[key.namespace.as_bytes(), &key.bytes]);
        self.seen.lock().map(|s| s.contains(&h)).unwrap_or(true)
    }

    /// Notes a recorded write.
    pub fn insert(&self, w: WriteId) {
        if let Ok(mut s) = self.written[written_shard(w)].lock() {
            s.insert(w, ());
        }
    }

    /// Whether this proxy recorded a write of `w`.
    pub fn contains(&self, w: WriteId) -> bool {
        self.written[written_shard(w)].lock().map(|s| s.contains(w)).unwrap_or(false)
    }

    /// How many write ids the book holds.
    pub fn len(&self) -> usize {
        self.written.iter().map(|shard| shard.lock().map(|s| s.len()).unwrap_or(0)).sum()
    }

    /// Whether the book is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Notes that `key`'s newest recorded version is the tombstone `w` (`Some`) or a live one (`None`).
    pub fn set_tombstone(&self, key: &KeyName, w: Option<WriteId>) {
        self.saw(key);
        if let Ok(mut t) = self.tombstones.lock() {
            match w {
                Some(w) => {
                    t.insert(key.clone(), w);
                }
                None => {
                    t.remove(key);
                }
            }
        }
    }

    /// What a read that found no row for `key` observed: the last recorded tombstone; else, if a version
    /// of the key was seen, an unrecorded writer's delete; else Absent.
    pub fn absent(&self, key: &KeyName) -> Observed {
        match self.tombstones.lock().ok().and_then(|t| t.get(key).copied()) {
            Some(w) => Observed::Version(w),
            None if self.was_seen(key) => {
                Observed::Unrecorded(hash_parts(b'u', &[key.namespace.as_bytes(), &key.bytes]))
            }
            None => Observed::Absent,
        }
    }

    /// Notes that the recorded transaction `txn` owns the database transaction ids `xids`: call once its
    /// intent (or outcome) is in the log, so that a reader's discovery never names a transaction the log
    /// does not hold yet.
    pub fn own(&self, xids: &[u32], txn: TxnId) {
        let Ok(mut owned) = self.owners.lock() else { return };
        for &xid in xids {
            if owned.owner.insert(xid, txn).is_none() {
                owned.order.push_back(xid);
                if owned.order.len() > MAX_OWNED_XIDS
                    && let Some(old) = owned.order.pop_front()
                {
                    owned.owner.remove(&old);
                    if owned.newest_evicted.is_none_or(|n| xid_at_or_before(n, old)) {
                        owned.newest_evicted = Some(old);
                    }
                }
            }
        }
    }

    fn owner(&self, xid: u32) -> Option<TxnId> {
        self.owners.lock().ok()?.owner.get(&xid).copied()
    }

    /// Whether `xid` may have had an owner the book forgot.
    fn maybe_forgotten(&self, xid: u32) -> bool {
        self.owners.lock().map_or(true, |o| o.newest_evicted.is_some_and(|n| xid_at_or_before(xid, n)))
    }

    /// Sets the run horizon (see "Exclusive recording"), if it is not set yet; returns whether this call
    /// set it.
    pub fn set_run_horizon(&self, horizon: RecordingHorizon) -> bool {
        self.run_horizon.set(horizon).is_ok()
    }

    /// The run horizon, once known.
    pub fn run_horizon(&self) -> Option<&RecordingHorizon> {
        self.run_horizon.get()
    }

    /// The operator asserts that every writer goes through this proxy (`[record] exclusive`).
    pub fn assert_exclusive(&self) {
        self.exclusive.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Suspends the exclusive assertion for the rest of the run: the proxy saw something that may have
    /// written versions whose ids it cannot learn. The first reason is kept and logged.
    pub fn suspend_exclusive(&self, reason: impl FnOnce() -> String) {
        if self.exclusive.load(std::sync::atomic::Ordering::Relaxed)
            && self.exclusive_suspended.get().is_none()
        {
            let reason = reason();
            if self.exclusive_suspended.set(reason.clone()).is_ok() {
                tracing::warn!(
                    "[record] exclusive is suspended for the rest of this run: {reason}; versions no recorded \
                     transaction wrote are unverifiable from now on"
                );
            }
        }
    }

    /// Whether an unowned version written during this run is reported (see "Exclusive recording").
    pub fn exclusive_active(&self) -> bool {
        self.exclusive.load(std::sync::atomic::Ordering::Relaxed)
            && self.exclusive_suspended.get().is_none()
            && self.run_horizon.get().is_some()
    }

    /// Why the exclusive assertion was suspended, if it was.
    pub fn exclusive_suspended(&self) -> Option<&str> {
        self.exclusive_suspended.get().map(String::as_str)
    }

    /// What a read of the version (`key`, `xmin`) observed, by the rule in the module docs, for a reader
    /// that knows of none of its own transaction's ids.
    pub fn observed(&self, key: &KeyName, xmin: &[u8]) -> Observed {
        match self.sighting(key, xmin, &[]) {
            Sighting::Plain(o) => o,
            Sighting::Own(w) | Sighting::Theirs { write: w, .. } => Observed::Version(w),
        }
    }

    /// What a read of the version (`key`, `xmin`) found, by a transaction whose own database ids (so far)
    /// are `own`: see the module docs.
    pub fn sighting(&self, key: &KeyName, xmin: &[u8], own: &[u32]) -> Sighting {
        self.saw(key);
        let w = version_id(key, xmin);
        if self.contains(w) {
            return Sighting::Plain(Observed::Version(w));
        }
        let Some(horizon) = self.horizon() else { return Sighting::Plain(Observed::PreHistory(w.0)) };
        // xmin is the 32-bit id as text; anything else cannot be placed, so it is not evidence.
        let Some(xid) = parse_xid(xmin) else { return Sighting::Plain(Observed::Unrecorded(w.0)) };
        if xid < FIRST_NORMAL_XID || horizon.had_ended(widen_xid(xid, horizon.xmax)) {
            return Sighting::Plain(Observed::PreHistory(w.0));
        }
        if own.contains(&xid) {
            return Sighting::Own(w);
        }
        if let Some(writer) = self.owner(xid) {
            return Sighting::Theirs { writer, write: w };
        }
        let during_this_run =
            |run: &RecordingHorizon| !run.had_ended(widen_xid(xid, run.xmax)) && !self.maybe_forgotten(xid);
        if self.exclusive_active() && self.run_horizon().is_some_and(during_this_run) {
            Sighting::Plain(Observed::Foreign(w.0))
        } else {
            Sighting::Plain(Observed::Unrecorded(w.0))
        }
    }
}

/// What one result row revealed: its ops, the database ids it showed the transaction owns, and writes of
/// other transactions its reads discovered.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RowOps {
    /// Reads and writes, in table order.
    pub ops: Vec<LoggedOp>,
    /// The `xmin` of each row the statement wrote: ids of the writing transaction (or its subtransaction).
    pub xids: Vec<u32>,
    /// Writes of other recorded transactions that its reads found.
    pub discovered: Vec<DiscoveredWrite>,
}

impl RowOps {
    /// A read of the version (`key`, `xmin`) by a transaction owning `own`.
    fn read(&mut self, key: KeyName, xmin: &[u8], stmt: Option<u32>, own: &[u32], book: &VersionBook) {
        match book.sighting(&key, xmin, own) {
            Sighting::Plain(observed) => self.ops.push(LoggedOp::Read { key, observed, stmt }),
            Sighting::Own(write) => {
                // Its own unmapped write, read back: the write goes into its ops first.
                book.insert(write);
                self.ops.push(LoggedOp::Write { key: key.clone(), write, stmt });
                self.ops.push(LoggedOp::Read { key, observed: Observed::Version(write), stmt });
            }
            Sighting::Theirs { writer, write } => {
                self.discovered.push(DiscoveredWrite { writer, key: key.clone(), write });
                self.ops.push(LoggedOp::Read { key, observed: Observed::Version(write), stmt });
            }
        }
    }
}

/// A row's extra values did not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version columns of a {kind:?} row: {reason}")]
pub struct TagError {
    /// The statement kind.
    pub kind: RowKind,
    /// What was wrong.
    pub reason: String,
}

/// Turns one result row's extra values into ops, in table order, for a transaction that owns the
/// database ids `own` so far. A table whose columns are NULL (the missing side of an outer join)
/// contributes nothing. Writes are noted in `book`.
pub fn row_ops(
    plan: &RowPlan,
    extras: &[Option<Bytes>],
    stmt: Option<u32>,
    book: &VersionBook,
    own: &[u32],
) -> Result<RowOps, TagError> {
    let err = |reason: String| TagError { kind: plan.kind, reason };
    if extras.len() != plan.extra_columns() {
        return Err(err(format!("{} values for {} columns", extras.len(), plan.extra_columns())));
    }
    let mut found = RowOps::default();
    let mut at = 0;
    for t in &plan.tables {
        let cols = &extras[at..at + t.width()];
        at += t.width();
        let Some(xmin) = cols[0].as_ref() else { continue };
        let pk: Option<Vec<&[u8]>> = cols[1..=t.pk_arity].iter().map(|v| v.as_deref()).collect();
        let Some(pk) = pk else { return Err(err("NULL primary key".into())) };
        let key = key_name(&t.namespace, &pk);
        let mut extra = cols[1 + t.pk_arity..].iter();
        match plan.kind {
            RowKind::Read => found.read(key, xmin, stmt, own, book),
            RowKind::Insert | RowKind::Update => {
                if t.replaced {
                    // NULL: the row was not visible to the statement's snapshot (inserted by this statement's
                    // own earlier effects); there is no replaced version to record.
                    match extra.next() {
                        // A blind write (`SET v = $1`) needs no replaced version to be checked.
                        Some(Some(old))
                            if old.as_ref() == READ_COMMITTED_MARK.as_bytes() && !t.set_reads_row => {}
                        Some(Some(old)) if old.as_ref() == READ_COMMITTED_MARK.as_bytes() => {
                            let kind = "read_committed_update".to_owned();
                            if !found.ops.contains(&LoggedOp::Opaque { kind: kind.clone(), stmt }) {
                                found.ops.push(LoggedOp::Opaque { kind, stmt });
                            }
                        }
                        Some(Some(old)) => found.read(key.clone(), old, stmt, own, book),
                        _ => {}
                    }
                }
                let w = version_id(&key, xmin);
                book.insert(w);
                book.set_tombstone(&key, None);
                if let Some(xid) = parse_xid(xmin)
                    && !found.xids.contains(&xid)
                {
                    found.xids.push(xid);
                }
                found.ops.push(LoggedOp::Write { key, write: w, stmt });
            }
            RowKind::Delete => {
                let Some(Some(deleter)) = extra.next() else { return Err(err("no deleter id".into())) };
                let w = tombstone_id(&key, deleter);
                book.insert(w);
                book.set_tombstone(&key, Some(w));
                found.ops.push(LoggedOp::Write { key, write: w, stmt });
            }
        }
    }
    Ok(found)
}

/// The Absent read a point lookup that returned no row records, if its key values are known: literals,
/// or parameters sent in text format. A parameter in binary format, or missing, gives `None`.
pub fn absent_read(
    plan: &RowPlan,
    params: &[Option<Bytes>],
    param_formats: &[i16],
    stmt: Option<u32>,
    book: &VersionBook,
) -> Option<LoggedOp> {
    let point = plan.point.as_ref()?;
    let mut vals: Vec<Vec<u8>> = Vec::with_capacity(point.values.len());
    for v in &point.values {
        match v {
            PkValue::Literal(s) => vals.push(s.as_bytes().to_vec()),
            PkValue::Param(i) => {
                let format = match param_formats {
                    [] => 0,
                    [one] => *one,
                    many => *many.get(*i)?,
                };
                if format != 0 {
                    return None;
                }
                vals.push(params.get(*i)?.as_ref()?.to_vec());
            }
        }
    }
    let refs: Vec<&[u8]> = vals.iter().map(Vec::as_slice).collect();
    let key = key_name(&point.namespace, &refs);
    let observed = book.absent(&key);
    Some(LoggedOp::Read { key, observed, stmt })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpret::plan::{PointLookup, TableTag};

    fn plan(kind: RowKind, replaced: bool, deleter: bool) -> RowPlan {
        RowPlan {
            kind,
            tables: vec![TableTag {
                namespace: "accounts".into(),
                pk_arity: 1,
                replaced,
                set_reads_row: replaced,
                deleter,
            }],
            hidden_result: true,
            hidden_row: false,
            point: Some(PointLookup { namespace: "accounts".into(), values: vec![PkValue::Param(0)] }),
            notes: vec![],
            splice: None,
        }
    }

    fn ops_of(
        plan: &RowPlan,
        extras: &[Option<Bytes>],
        stmt: Option<u32>,
        book: &VersionBook,
    ) -> Result<Vec<LoggedOp>, TagError> {
        row_ops(plan, extras, stmt, book, &[]).map(|found| found.ops)
    }

    fn b(s: &str) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn a_recorded_write_is_read_as_a_version_and_anything_else_as_prehistory() {
        let book = VersionBook::new();
        let read = plan(RowKind::Read, false, false);
        let before = ops_of(&read, &[b("100"), b("7")], Some(0), &book).unwrap_or_default();
        let key = key_name("accounts", &[b"7"]);
        let v100 = version_id(&key, b"100");
        assert_eq!(
            before,
            vec![LoggedOp::Read { key: key.clone(), observed: Observed::PreHistory(v100.0), stmt: Some(0) }]
        );
        let upd = plan(RowKind::Update, true, false);
        let ops = ops_of(&upd, &[b("200"), b("7"), b("100")], Some(1), &book).unwrap_or_default();
        let v200 = version_id(&key, b"200");
        assert_eq!(
            ops,
            vec![
                LoggedOp::Read { key: key.clone(), observed: Observed::PreHistory(v100.0), stmt: Some(1) },
                LoggedOp::Write { key: key.clone(), write: v200, stmt: Some(1) },
            ]
        );
        let after = ops_of(&read, &[b("200"), b("7")], None, &book).unwrap_or_default();
        assert_eq!(
            after,
            vec![LoggedOp::Read { key: key.clone(), observed: Observed::Version(v200), stmt: None }]
        );
        let del = plan(RowKind::Delete, false, true);
        let ops = ops_of(&del, &[b("200"), b("7"), b("901")], None, &book).unwrap_or_default();
        assert_eq!(
            ops,
            vec![LoggedOp::Write { key: key.clone(), write: tombstone_id(&key, b"901"), stmt: None }]
        );
        assert_ne!(tombstone_id(&key, b"200"), version_id(&key, b"200"));
        assert!(ops_of(&read, &[b("1")], None, &book).is_err());
        assert!(ops_of(&read, &[b("1"), None], None, &book).is_err());
        assert_eq!(ops_of(&read, &[None, None], None, &book), Ok(vec![]));
    }

    /// Every UPDATE records the version it replaced, a blind one (`SET v = $1`) too, so that the verifier
    /// knows the key's version order. At READ COMMITTED, where that version is not known, a blind UPDATE is
    /// a plain write, and one whose SET reads the row is noted as not checked.
    #[test]
    fn a_blind_update_records_what_it_replaced_and_at_read_committed_is_a_plain_write() {
        let book = VersionBook::new();
        let key = key_name("accounts", &[b"7"]);
        let (v100, v200) = (version_id(&key, b"100"), version_id(&key, b"200"));
        let mut blind = plan(RowKind::Update, true, false);
        blind.tables[0].set_reads_row = false;
        let ops = ops_of(&blind, &[b("200"), b("7"), b("100")], Some(1), &book).unwrap_or_default();
        assert_eq!(
            ops,
            vec![
                LoggedOp::Read { key: key.clone(), observed: Observed::PreHistory(v100.0), stmt: Some(1) },
                LoggedOp::Write { key: key.clone(), write: v200, stmt: Some(1) },
            ]
        );
        let mark = b(READ_COMMITTED_MARK);
        let ops = ops_of(&blind, &[b("300"), b("7"), mark.clone()], Some(1), &book).unwrap_or_default();
        assert_eq!(
            ops,
            vec![LoggedOp::Write { key: key.clone(), write: version_id(&key, b"300"), stmt: Some(1) }]
        );
        let reading = plan(RowKind::Update, true, false);
        let ops = ops_of(&reading, &[b("400"), b("7"), mark], Some(1), &book).unwrap_or_default();
        assert_eq!(ops[0], LoggedOp::Opaque { kind: "read_committed_update".into(), stmt: Some(1) });
    }

    #[test]
    fn keys_and_ids_keep_parts_apart() {
        assert_ne!(key_name("t", &[b"1", b"23"]), key_name("t", &[b"12", b"3"]));
        let k = key_name("t", &[b"1"]);
        assert_ne!(version_id(&k, b"12"), version_id(&key_name("t", &[b"11"]), b"2"));
    }

    #[test]
    fn absent_needs_text_parameters() {
        let p = plan(RowKind::Read, false, false);
        let want =
            LoggedOp::Read { key: key_name("accounts", &[b"9"]), observed: Observed::Absent, stmt: None };
        let book = VersionBook::new();
        assert_eq!(absent_read(&p, &[b("9")], &[], None, &book), Some(want));
        assert_eq!(absent_read(&p, &[b("9")], &[1], None, &book), None);
        assert_eq!(absent_read(&p, &[], &[], None, &book), None);
        // After a recorded DELETE, "no row" is the tombstone; after a new insert, a live version again, so
        // "no row" then means something Krait did not record deleted it.
        let del = plan(RowKind::Delete, false, true);
        let ops = ops_of(&del, &[b("5"), b("9"), b("700")], None, &book).unwrap_or_default();
        let Some(LoggedOp::Write { write, .. }) = ops.first() else { panic!("{ops:?}") };
        let got = absent_read(&p, &[b("9")], &[], None, &book);
        assert!(matches!(got, Some(LoggedOp::Read { observed: Observed::Version(w), .. }) if w == *write));
        let ins = plan(RowKind::Insert, false, false);
        let _ = ops_of(&ins, &[b("800"), b("9")], None, &book);
        let got = absent_read(&p, &[b("9")], &[], None, &book);
        assert!(matches!(got, Some(LoggedOp::Read { observed: Observed::Unrecorded(_), .. })), "{got:?}");
        // A key never seen reads the initial "no row".
        let got = absent_read(&p, &[b("10")], &[], None, &book);
        assert!(matches!(got, Some(LoggedOp::Read { observed: Observed::Absent, .. })), "{got:?}");
    }

    #[test]
    fn the_horizon_tells_pre_history_from_unrecorded_writers() {
        let book = VersionBook::new();
        let key = key_name("accounts", &[b"1"]);
        // Without a horizon, every version no recorded transaction wrote is taken as pre-history.
        assert!(matches!(book.observed(&key, b"5000"), Observed::PreHistory(_)));
        let epoch = 7u64 << 32;
        assert!(book.set_horizon(RecordingHorizon::from_xmin(epoch | 1000)));
        assert!(!book.set_horizon(RecordingHorizon::from_xmin(1)), "the first horizon stays");
        for (xmin, pre) in [
            ("999", true),
            ("1000", false),
            ("1001", false),
            ("2", true),
            ("0", true),
            // Circular order: 2^31 ids before the horizon wrap round to "before".
            ("4294967295", true),
            ("2147484648", true),
            ("2147484647", false),
            ("not a number", false),
        ] {
            let o = book.observed(&key, xmin.as_bytes());
            assert_eq!(matches!(o, Observed::PreHistory(_)), pre, "xmin {xmin}: {o:?}");
            assert_eq!(matches!(o, Observed::Unrecorded(_)), !pre, "xmin {xmin}: {o:?}");
        }
        // A version this proxy recorded is a version whatever its xmin.
        book.insert(version_id(&key, b"5000"));
        assert_eq!(book.observed(&key, b"5000"), Observed::Version(version_id(&key, b"5000")));
    }

    #[test]
    fn an_owned_xid_turns_an_unrecorded_version_into_its_owners_discovered_write() {
        let book = VersionBook::new();
        assert!(book.set_horizon(RecordingHorizon::from_xmin(1000)));
        let key = key_name("accounts", &[b"7"]);
        let w = version_id(&key, b"1500");
        let read = plan(RowKind::Read, false, false);
        let row = [b("1500"), b("7")];
        let before = row_ops(&read, &row, None, &book, &[]).unwrap_or_default();
        assert!(matches!(before.ops[..], [LoggedOp::Read { observed: Observed::Unrecorded(_), .. }]));
        // The reader's own id: its own write, read back.
        let own = row_ops(&read, &row, Some(2), &book, &[1500]).unwrap_or_default();
        assert_eq!(
            own.ops,
            vec![
                LoggedOp::Write { key: key.clone(), write: w, stmt: Some(2) },
                LoggedOp::Read { key: key.clone(), observed: Observed::Version(w), stmt: Some(2) },
            ]
        );
        // Another transaction's id, once it owns it: a discovery for the session to log.
        let other = VersionBook::new();
        assert!(other.set_horizon(RecordingHorizon::from_xmin(1000)));
        other.own(&[1500], TxnId(42));
        let theirs = row_ops(&read, &row, None, &other, &[]).unwrap_or_default();
        assert_eq!(
            theirs.ops,
            vec![LoggedOp::Read { key: key.clone(), observed: Observed::Version(w), stmt: None }]
        );
        assert_eq!(
            theirs.discovered,
            vec![DiscoveredWrite { writer: TxnId(42), key: key.clone(), write: w }]
        );
        // A pre-history version stays one whoever owns its id; a write tells the writer's ids.
        other.own(&[900], TxnId(43));
        let old = row_ops(&read, &[b("900"), b("7")], None, &other, &[]).unwrap_or_default();
        assert!(matches!(old.ops[..], [LoggedOp::Read { observed: Observed::PreHistory(_), .. }]));
        let upd = plan(RowKind::Update, true, false);
        let wrote = row_ops(&upd, &[b("1600"), b("7"), b("1500")], None, &other, &[]).unwrap_or_default();
        assert_eq!(wrote.xids, vec![1600]);
        assert_eq!(wrote.discovered.len(), 1, "the replaced version is a discovered write too");
    }

    #[test]
    fn under_exclusive_an_unowned_version_of_this_run_is_foreign_until_suspended() {
        let book = VersionBook::new();
        assert!(book.set_horizon(RecordingHorizon::from_xmin(1000)));
        book.assert_exclusive();
        let key = key_name("accounts", &[b"7"]);
        // Until the run horizon is known, nothing is foreign.
        assert!(matches!(book.observed(&key, b"2500"), Observed::Unrecorded(_)));
        assert!(book.set_run_horizon(RecordingHorizon::from_xmin(2000)));
        assert!(book.exclusive_active());
        assert!(matches!(book.observed(&key, b"2500"), Observed::Foreign(_)));
        // Written before this run began (a crash window of an earlier run): unverifiable.
        assert!(matches!(book.observed(&key, b"1500"), Observed::Unrecorded(_)));
        // Owned ids are discovered writes; forgotten ones may have been owned.
        book.own(&[2600], TxnId(1));
        assert!(matches!(book.observed(&key, b"2600"), Observed::Version(_)));
        book.owners.lock().map(|mut o| o.newest_evicted = Some(2550)).unwrap_or_default();
        assert!(matches!(book.observed(&key, b"2500"), Observed::Unrecorded(_)));
        assert!(matches!(book.observed(&key, b"2700"), Observed::Foreign(_)));
        book.suspend_exclusive(|| "a test".into());
        assert_eq!(book.exclusive_suspended(), Some("a test"));
        assert!(matches!(book.observed(&key, b"2700"), Observed::Unrecorded(_)));
    }

    #[test]
    fn the_book_forgets_the_oldest_owners_first() {
        let book = VersionBook::new();
        for xid in 0..(MAX_OWNED_XIDS as u32 + 2) {
            book.own(&[xid], TxnId(u64::from(xid)));
        }
        assert_eq!(book.owner(0), None);
        assert_eq!(book.owner(1), None);
        assert_eq!(book.owner(2), Some(TxnId(2)));
    }

    #[test]
    fn a_long_running_transaction_does_not_make_older_commits_unrecorded() {
        // Snapshot 1000:1010:1000,1005 — transaction 1000 (say, an idle-in-transaction client) holds xmin
        // back; 1001–1009 other than 1005 had ended before recording began.
        let book = VersionBook::new();
        let key = key_name("accounts", &[b"1"]);
        let epoch = 3u64 << 32;
        let running = vec![epoch | 1000, epoch | 1005];
        assert!(book.set_horizon(RecordingHorizon { xmin: epoch | 1000, xmax: epoch | 1010, running }));
        for (xmin, pre) in [
            ("999", true),
            ("1000", false),
            ("1001", true),
            ("1005", false),
            ("1009", true),
            ("1010", false),
            ("4294967295", true),
        ] {
            let o = book.observed(&key, xmin.as_bytes());
            assert_eq!(matches!(o, Observed::PreHistory(_)), pre, "xmin {xmin}: {o:?}");
        }
    }
}
