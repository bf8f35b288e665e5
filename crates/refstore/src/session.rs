//! Interactive sessions on the reference store: what the PostgreSQL-wire front ([`crate::pg`]) runs each
//! connection on.
//!
//! The generator ([`crate::generate`]) runs a whole transaction in one scheduling step, as the paper's rule
//! CAtomicTrans does (Xiong–Cerone–Raad–Gardner §3). Here clients run transactions statement by statement
//! and several are open at once, so the step is split without changing what it allows:
//! - the view shift happens when the transaction begins, drawn from the seeded RNG as the generator draws it;
//! - reads take the snapshot of that view (read committed: the latest committed version at the moment of the
//!   read) and writes stay private to the transaction;
//! - at COMMIT the model's vshift and can-commit tests both run against the store *as it is then*. The
//!   snapshot of a view never changes when later transactions commit (their versions are not in the view),
//!   so the transaction could have run atomically at its commit, on the view it took: every committed
//!   history is one the model allows.
//!
//! The keys and values are 64-bit integers (`kv(k int8, v int8)`, and the proxy's fence table, see
//! [`Table`]). A row that was never written reads as the
//! key's initial version, `Observed::Absent`; DELETE writes a new version that holds no row (a tombstone),
//! so a later read of the missing row still names the version it saw. What every client observed is kept
//! as a [`History`] in Krait's model: committed transactions, and aborted ones (rolled back, refused by the
//! execution test, or cut off by a closed connection) with the writes nobody can ever see.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use history::{History, Key, KeyName, Observed, Op, Outcome, SessionId, Transaction, TxnId, WriteId, now_ns};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::model::{ClientState, Model};
use crate::store::{KvStore, TxnIndex, View};

/// The key namespace of the `kv` table in recorded histories.
pub const NAMESPACE: &str = "kv";

/// The key namespace of the `krait_fence` table in recorded histories.
pub const FENCE_NAMESPACE: &str = "krait_fence";

/// The tables of the store. Both live in the one multi-version store, so the model's rules (views,
/// execution tests) treat their rows alike; they differ only in name, column names and key namespace.
///
/// `krait_fence(id int4 primary key, epoch int8 not null)` is the table the Krait proxy's fence
/// transactions read and rewrite (DESIGN.md §3 "Fences without client changes"). It is a table of its
/// own rather than a reserved range of `kv` keys because then: the recorded keys carry the namespace
/// `krait_fence` and the key text, exactly the key names the proxy records for the same rows, so the
/// store's own history and the proxy's can be compared key for key; and no `kv` key is taken away from
/// clients, nor can a client's `kv` statement read or clobber a fence row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// `kv(k int8 primary key, v int8 not null)`: the clients' table.
    Kv,
    /// `krait_fence(id int4 primary key, epoch int8 not null)`: the proxy's fence table.
    Fence,
}

impl Table {
    /// The table's name, also its key namespace in recorded histories.
    pub fn name(self) -> &'static str {
        match self {
            Table::Kv => NAMESPACE,
            Table::Fence => FENCE_NAMESPACE,
        }
    }

    /// The name of the primary-key column.
    pub fn key_column(self) -> &'static str {
        match self {
            Table::Kv => "k",
            Table::Fence => "id",
        }
    }

    /// The name of the value column.
    pub fn value_column(self) -> &'static str {
        match self {
            Table::Kv => "v",
            Table::Fence => "epoch",
        }
    }
}

/// A key of the `kv` table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowKey(pub i64);

/// A row of any table: the table and the primary-key value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Row {
    /// The table.
    pub table: Table,
    /// The primary-key value.
    pub key: i64,
}

impl From<RowKey> for Row {
    fn from(k: RowKey) -> Self {
        Row { table: Table::Kv, key: k.0 }
    }
}

/// How the shared store is set up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoreConfig {
    /// The consistency model every commit is tested against.
    pub model: Model,
    /// The seed of every random view choice.
    pub seed: u64,
    /// The probability that a transaction takes the freshest view its model allows; otherwise it takes a
    /// random allowed one (staler views, more anomalies under weak models).
    pub fresh_view_share: f64,
}

/// Why a statement or a commit failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The model's execution test refused the commit; the transaction is rolled back and may be retried.
    #[error(
        "could not serialize access: the {model} execution test refused this transaction's commit (the store \
         numbers it {txn})"
    )]
    Refused {
        /// The model in force.
        model: Model,
        /// The refused transaction.
        txn: TxnId,
    },
    /// An INSERT of a key whose row exists in the transaction's snapshot.
    #[error(
        "duplicate key value violates unique constraint \"{}_pkey\": key ({}) already exists",
        .0.table.name(),
        .0.key
    )]
    Duplicate(Row),
    /// The configuration is out of range.
    #[error("invalid store configuration: {0}")]
    InvalidConfig(&'static str),
    /// The store and the history disagree about key numbering (a bug, reported rather than panicking).
    #[error("internal error: {0}")]
    Internal(&'static str),
}

/// A value read from the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowRead {
    /// The row's value; `None` when the row does not exist.
    pub value: Option<i64>,
    /// The transaction number of the version's writer (0 for the initial version), which the front shows
    /// as the `xmin` system column.
    pub writer: u64,
}

/// The shared, lock-protected store that every session of one server runs on.
#[derive(Clone, Debug)]
pub struct SharedStore {
    inner: Arc<Mutex<Engine>>,
}

#[derive(Debug)]
struct Engine {
    config: StoreConfig,
    rng: ChaCha8Rng,
    store: KvStore,
    /// The value of every version, aligned with `store.versions(key)`.
    values: Vec<Vec<Option<i64>>>,
    keys: HashMap<Row, Key>,
    history: History,
    clients: Vec<ClientState>,
    seqs: Vec<u64>,
    next_write: u64,
    next_txn: u64,
}

impl SharedStore {
    /// An empty store: the `kv` table has no rows.
    pub fn new(config: StoreConfig) -> Result<Self, SessionError> {
        if !(0.0..=1.0).contains(&config.fresh_view_share) {
            return Err(SessionError::InvalidConfig("fresh_view_share must be between 0 and 1"));
        }
        let engine = Engine {
            config,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            store: KvStore::new(0),
            values: Vec::new(),
            keys: HashMap::new(),
            history: History::default(),
            clients: Vec::new(),
            seqs: Vec::new(),
            next_write: 1,
            next_txn: 1,
        };
        Ok(SharedStore { inner: Arc::new(Mutex::new(engine)) })
    }

    /// The model the store runs under.
    pub fn model(&self) -> Model {
        self.lock().config.model
    }

    /// A new client: one session of the history.
    pub fn connect(&self) -> Session {
        let mut e = self.lock();
        let client = e.clients.len();
        e.clients.push(ClientState::new());
        e.seqs.push(0);
        Session { store: self.clone(), client, txn: None }
    }

    /// What the clients observed so far: every transaction that ended, in the order they ended.
    pub fn history(&self) -> History {
        self.lock().history.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock leaves the engine as consistent as the last completed call; the
        // history is still worth writing out, so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Engine {
    fn key(&mut self, row: Row) -> Result<Key, SessionError> {
        if let Some(&k) = self.keys.get(&row) {
            return Ok(k);
        }
        // The key text is the decimal key, as PostgreSQL prints `k::text`: the name the proxy records.
        let name =
            KeyName { namespace: row.table.name().to_owned(), bytes: row.key.to_string().into_bytes() };
        let k = self.history.keys.intern(name);
        if self.store.add_key(Observed::Absent) != k {
            return Err(SessionError::Internal("store and history number keys differently"));
        }
        self.values.push(vec![None]);
        self.keys.insert(row, k);
        Ok(k)
    }

    fn writer_number(&self, t: TxnIndex) -> u64 {
        self.store.txn(t).and_then(|t| t.id).map_or(0, |id| id.0)
    }

    fn record(&mut self, client: usize, txn: OpenTxn, outcome: Outcome) {
        let mut t = Transaction::new(txn.id, SessionId(client as u64), self.seqs[client]);
        self.seqs[client] += 1;
        t.ops = txn.ops;
        t.outcome = outcome;
        t.start_ns = Some(txn.start_ns);
        t.commit_ns = Some(now_ns().max(txn.start_ns));
        self.history.transactions.push(t);
    }
}

/// A transaction in progress.
#[derive(Debug)]
struct OpenTxn {
    id: TxnId,
    /// The view it runs on; `None` under read committed, which has no views.
    view: Option<View>,
    ops: Vec<Op>,
    /// External reads, as (key, version index).
    reads: Vec<(Key, usize)>,
    /// The last write of each key, in first-write order, with the value written.
    writes: Vec<(Key, WriteId, Option<i64>)>,
    start_ns: u64,
}

/// One client's connection to the store. At most one transaction is open at a time; dropping the session
/// aborts it.
#[derive(Debug)]
pub struct Session {
    store: SharedStore,
    client: usize,
    txn: Option<OpenTxn>,
}

impl Session {
    /// The session's number: its [`SessionId`] in the history.
    pub fn id(&self) -> u64 {
        self.client as u64
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    /// Begins a transaction (the view shift) unless one is open already.
    pub fn begin(&mut self) {
        if self.txn.is_some() {
            return;
        }
        let mut e = self.store.lock();
        let id = TxnId(e.next_txn);
        e.next_txn += 1;
        let model = e.config.model;
        let view = if model == Model::ReadCommitted {
            None
        } else {
            let Engine { store, clients, rng, config, .. } = &mut *e;
            // Whether the transaction will write is not known yet; serializability then gives it the whole
            // store, which is what it gives an update transaction.
            Some(model.choose_view(store, &clients[self.client], true, config.fresh_view_share, rng))
        };
        drop(e);
        self.txn = Some(OpenTxn {
            id,
            view,
            ops: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            start_ns: now_ns(),
        });
    }

    /// The number of the open transaction (beginning one if none is open): what `xmin` shows for its writes.
    pub fn txn_number(&mut self) -> u64 {
        self.begin();
        self.txn.as_ref().map_or(0, |t| t.id.0)
    }

    /// Reads `row` in the open transaction (beginning one if none is open) and records the read.
    pub fn read(&mut self, row: impl Into<Row>) -> Result<RowRead, SessionError> {
        self.begin();
        let mut e = self.store.lock();
        let key = e.key(row.into())?;
        let txn = self.txn.as_mut().ok_or(SessionError::Internal("no open transaction"))?;
        if let Some(&(_, w, value)) = txn.writes.iter().find(|(k, _, _)| *k == key) {
            txn.ops.push(Op::Read { key, observed: Observed::Version(w), stmt: None });
            return Ok(RowRead { value, writer: txn.id.0 });
        }
        let index = match &txn.view {
            Some(view) => e.store.snapshot(view, key),
            None => e.store.latest(key),
        };
        let version = e.store.versions(key).get(index).ok_or(SessionError::Internal("no such version"))?;
        let (observed, writer) = (version.observed, version.writer);
        let value = e.values[key.0 as usize].get(index).copied().flatten();
        if !txn.reads.contains(&(key, index)) {
            txn.reads.push((key, index));
        }
        txn.ops.push(Op::Read { key, observed, stmt: None });
        Ok(RowRead { value, writer: e.writer_number(writer) })
    }

    /// Writes `value` to `row` (`None` deletes the row) in the open transaction and records the write.
    pub fn write(&mut self, row: impl Into<Row>, value: Option<i64>) -> Result<WriteId, SessionError> {
        self.begin();
        let mut e = self.store.lock();
        let key = e.key(row.into())?;
        let w = WriteId(e.next_write);
        e.next_write += 1;
        let txn = self.txn.as_mut().ok_or(SessionError::Internal("no open transaction"))?;
        match txn.writes.iter_mut().find(|(k, _, _)| *k == key) {
            Some(slot) => *slot = (key, w, value),
            None => txn.writes.push((key, w, value)),
        }
        txn.ops.push(Op::Write { key, write: w, stmt: None });
        Ok(w)
    }

    /// Commits the open transaction if the model's execution test allows it; otherwise records it as
    /// aborted and returns [`SessionError::Refused`]. Either way no transaction is open afterwards. A
    /// transaction that issued no read or write leaves no trace.
    pub fn commit(&mut self) -> Result<(), SessionError> {
        let Some(txn) = self.txn.take() else { return Ok(()) };
        if txn.ops.is_empty() {
            return Ok(());
        }
        let c = self.client;
        let mut e = self.store.lock();
        let model = e.config.model;
        let write_keys: Vec<Key> = txn.writes.iter().map(|&(k, _, _)| k).collect();
        let is_update = !write_keys.is_empty();
        let view = match &txn.view {
            Some(view) => {
                let allowed = model.vshift(&e.store, &e.clients[c], view, is_update)
                    && model.can_commit(&e.store, view, &write_keys);
                if !allowed {
                    let id = txn.id;
                    e.record(c, txn, Outcome::Aborted);
                    return Err(SessionError::Refused { model, txn: id });
                }
                view.clone()
            }
            None => e.store.full_view(),
        };
        let writes: Vec<(Key, WriteId)> = txn.writes.iter().map(|&(k, w, _)| (k, w)).collect();
        let prev = e.clients[c].last;
        let t = e.store.commit(txn.id, c, &txn.reads, &writes, prev);
        for &(k, _, value) in &txn.writes {
            e.values[k.0 as usize].push(value);
        }
        e.clients[c].committed(view, t, is_update);
        e.record(c, txn, Outcome::Committed);
        Ok(())
    }

    /// Rolls the open transaction back; it is recorded as aborted if it issued anything.
    pub fn rollback(&mut self) {
        let Some(txn) = self.txn.take() else { return };
        if txn.ops.is_empty() {
            return;
        }
        self.store.lock().record(self.client, txn, Outcome::Aborted);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.rollback();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(model: Model) -> SharedStore {
        SharedStore::new(StoreConfig { model, seed: 1, fresh_view_share: 1.0 }).unwrap()
    }

    #[test]
    fn a_missing_row_reads_absent_and_an_own_write_reads_back() {
        let s = store(Model::Serializable);
        let mut a = s.connect();
        assert_eq!(a.read(RowKey(1)).unwrap(), RowRead { value: None, writer: 0 });
        a.write(RowKey(1), Some(7)).unwrap();
        let n = a.txn_number();
        assert_eq!(a.read(RowKey(1)).unwrap(), RowRead { value: Some(7), writer: n });
        a.commit().unwrap();
        let mut b = s.connect();
        assert_eq!(b.read(RowKey(1)).unwrap(), RowRead { value: Some(7), writer: n });
        b.commit().unwrap();
        let h = s.history();
        assert_eq!(h.stats().committed, 2);
        assert_eq!(
            h.transactions[0].ops[0],
            Op::Read { key: Key(0), observed: Observed::Absent, stmt: None }
        );
    }

    #[test]
    fn snapshot_isolation_refuses_the_second_of_two_concurrent_writers() {
        let s = store(Model::SnapshotIsolation);
        let (mut a, mut b) = (s.connect(), s.connect());
        a.write(RowKey(1), Some(1)).unwrap();
        b.write(RowKey(1), Some(2)).unwrap();
        a.commit().unwrap();
        assert!(matches!(b.commit(), Err(SessionError::Refused { .. })));
        assert!(!b.in_transaction());
        let h = s.history();
        assert_eq!((h.stats().committed, h.stats().aborted), (1, 1));
    }

    #[test]
    fn read_committed_lets_both_concurrent_writers_commit() {
        let s = store(Model::ReadCommitted);
        let (mut a, mut b) = (s.connect(), s.connect());
        a.read(RowKey(1)).unwrap();
        b.read(RowKey(1)).unwrap();
        a.write(RowKey(1), Some(1)).unwrap();
        b.write(RowKey(1), Some(2)).unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
        let mut c = s.connect();
        assert_eq!(c.read(RowKey(1)).unwrap().value, Some(2), "the last writer wins");
    }

    #[test]
    fn a_dropped_session_records_its_open_transaction_as_aborted() {
        let s = store(Model::Serializable);
        let mut a = s.connect();
        a.write(RowKey(3), None).unwrap();
        drop(a);
        assert_eq!(s.history().transactions[0].outcome, Outcome::Aborted);
    }
}
