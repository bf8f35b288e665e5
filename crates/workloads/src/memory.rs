//! Offline generation: the workloads' transaction logic run on a serial in-memory store that records a
//! [`History`].
//!
//! Each row is a key (namespace = table, bytes = primary key). Every insert or update makes a new version
//! with a fresh [`WriteId`]; a read of a row still in its initial state observes `PreHistory(0)` (Cobra's
//! INIT), and a read of a row that does not exist observes `Absent`. Sessions interleave, round-robin or in a
//! seeded random order, but each transaction runs alone from its first op to its commit, so the history is
//! serializable by construction (the serial order is the generation order). This feeds verifier benchmarks
//! of any size without a database.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use history::{History, KeyName, Observed, Op, Outcome, SessionId, StmtRef, Transaction, TxnId, WriteId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

use crate::{Row, StoreError, TableDef, Txn, TxnEnd, Val, Workload, client_rng};

/// How sessions take turns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Interleave {
    /// Session 0, 1, …, n−1, 0, 1, …
    RoundRobin,
    /// A seeded random session each time.
    #[default]
    Random,
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Client transactions in the history, rolled-back ones included (fences come on top).
    pub txns: u64,
    /// Sessions (Cobra §6.1 used 24 clients).
    pub clients: u32,
    /// The seed: the same seed gives the same history.
    pub seed: u64,
    /// How sessions take turns.
    pub interleave: Interleave,
    /// Run a fence transaction (Cobra §4.2) in a session before its first transaction and then after every
    /// this many of its transactions, as Krait's proxy does; `None` for no fences.
    pub fence_every: Option<u32>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            txns: 1000,
            clients: 24,
            seed: 0,
            interleave: Interleave::Random,
            fence_every: None,
        }
    }
}

/// A generated history and what went into it.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The history, serializable by construction.
    pub history: History,
    /// How many transactions of each type were run.
    pub mix: BTreeMap<&'static str, u64>,
    /// How many of them the logic rolled back (they are in the history as aborted).
    pub rollbacks: u64,
}

/// Why generation failed.
#[derive(Debug, Error)]
pub enum GenerateError {
    /// At least one session is needed.
    #[error("at least one client is needed")]
    NoClients,
    /// The transaction logic failed on the in-memory store: a bug in the workload.
    #[error("transaction {txn} ({kind}) failed: {source}")]
    Logic {
        /// The transaction's position in the history.
        txn: u64,
        /// Its type.
        kind: &'static str,
        /// What failed.
        source: StoreError,
    },
    /// The logic waited on something, which the in-memory store never makes it do.
    #[error("internal error: a transaction on the in-memory store did not complete at once")]
    Pending,
}

/// Generates a history of `opts.txns` transactions of `workload`.
pub fn generate(workload: &Workload, opts: &GenerateOptions) -> Result<Generated, GenerateError> {
    if opts.clients == 0 {
        return Err(GenerateError::NoClients);
    }
    let mut store = MemStore::new(workload);
    let mut rngs: Vec<ChaCha8Rng> = (0..opts.clients).map(|c| client_rng(opts.seed, c)).collect();
    let mut seqs = vec![0u64; opts.clients as usize];
    let mut sched = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut mix: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut rollbacks = 0;
    let mut ran = vec![0u64; opts.clients as usize];
    let mut next_id = 0u64;
    for i in 0..opts.txns {
        let client = match opts.interleave {
            Interleave::RoundRobin => (i % u64::from(opts.clients)) as u32,
            Interleave::Random => sched.gen_range(0..opts.clients),
        };
        if let Some(every) = opts.fence_every
            && ran[client as usize].is_multiple_of(u64::from(every.max(1)))
        {
            let mut txn = MemTxn { store: &mut store, ops: Vec::new(), writes: HashMap::new() };
            run_now(fence(&mut txn))?.map_err(|source| GenerateError::Logic {
                txn: i,
                kind: "fence",
                source,
            })?;
            let MemTxn { ops, writes, .. } = txn;
            store.rows.extend(writes);
            let seq = &mut seqs[client as usize];
            let mut t = Transaction::new(TxnId(next_id), SessionId(u64::from(client)), *seq);
            *seq += 1;
            t.ops = ops;
            t.fence = true;
            t.start_ns = Some(next_id * 1_000_000);
            t.commit_ns = Some(next_id * 1_000_000 + 500_000);
            next_id += 1;
            store.history.transactions.push(t);
        }
        ran[client as usize] += 1;
        let spec = workload.next_txn(&mut rngs[client as usize], client);
        *mix.entry(spec.kind()).or_default() += 1;
        let mut txn = MemTxn { store: &mut store, ops: Vec::new(), writes: HashMap::new() };
        let end = run_now(workload.execute(&mut txn, &spec))?.map_err(|source| GenerateError::Logic {
            txn: i,
            kind: spec.kind(),
            source,
        })?;
        let MemTxn { ops, writes, .. } = txn;
        let outcome = match end {
            TxnEnd::Commit => {
                store.rows.extend(writes);
                Outcome::Committed
            }
            TxnEnd::Rollback => {
                rollbacks += 1;
                Outcome::Aborted
            }
        };
        let seq = &mut seqs[client as usize];
        let mut t = Transaction::new(TxnId(next_id), SessionId(u64::from(client)), *seq);
        *seq += 1;
        t.ops = ops;
        t.outcome = outcome;
        // A logical clock, one millisecond per transaction: the serial order is also the real-time order.
        t.start_ns = Some(next_id * 1_000_000);
        t.commit_ns = Some(next_id * 1_000_000 + 500_000);
        next_id += 1;
        store.history.transactions.push(t);
    }
    Ok(Generated { history: store.history, mix, rollbacks })
}

/// The fence table, as Krait's proxy creates it: one row, id 0, whose epoch each fence increments.
pub static FENCE: TableDef = TableDef {
    name: "krait_fence",
    columns: &[crate::schema::int("id"), crate::schema::int("epoch")],
    pk_len: 1,
};

/// A fence transaction: a read-modify-write of the fence row (Cobra §4.2).
async fn fence<T: Txn>(t: &mut T) -> Result<(), StoreError> {
    let mut row = crate::read_existing(t, &FENCE, &[Val::Int(0)]).await?;
    row[1] = Val::Int(row[1].int("epoch")? + 1);
    t.update(&FENCE, row).await
}

/// Polls a future that never waits to completion: the in-memory store's operations are plain function
/// calls wearing `async`, so one poll finishes the transaction.
fn run_now<F: Future>(fut: F) -> Result<F::Output, GenerateError> {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Ok(out),
        Poll::Pending => Err(GenerateError::Pending),
    }
}

type RowKey = (&'static str, Vec<Val>);

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum StmtKind {
    Select,
    Insert,
    Update,
}

/// The committed state and the history recorded so far.
struct MemStore<'w> {
    workload: &'w Workload,
    rows: HashMap<RowKey, (Row, WriteId)>,
    history: History,
    next_write: u64,
    stmts: HashMap<(&'static str, StmtKind), StmtRef>,
}

impl<'w> MemStore<'w> {
    fn new(workload: &'w Workload) -> Self {
        MemStore {
            workload,
            rows: HashMap::new(),
            history: History::default(),
            next_write: 1,
            stmts: HashMap::new(),
        }
    }

    /// The SQL statement the SQL backend would run for this op, so reports can show it.
    fn stmt(&mut self, table: &'static TableDef, kind: StmtKind) -> StmtRef {
        let history = &mut self.history;
        *self.stmts.entry((table.name, kind)).or_insert_with(|| {
            history.add_statement(match kind {
                StmtKind::Select => table.select_sql(),
                StmtKind::Insert => table.insert_sql(),
                StmtKind::Update => table.update_sql(),
            })
        })
    }

    fn key(&mut self, table: &'static TableDef, pk: &[Val]) -> history::Key {
        self.history.keys.intern(KeyName { namespace: table.name.to_owned(), bytes: TableDef::key_bytes(pk) })
    }
}

/// One transaction on the in-memory store: its writes stay private until it commits.
struct MemTxn<'a, 'w> {
    store: &'a mut MemStore<'w>,
    ops: Vec<Op>,
    writes: HashMap<RowKey, (Row, WriteId)>,
}

impl MemTxn<'_, '_> {
    /// The row as this transaction sees it, and which version that is.
    fn lookup(&self, table: &'static TableDef, pk: &[Val]) -> (Option<Row>, Observed) {
        let rk = (table.name, pk.to_vec());
        if let Some((row, w)) = self.writes.get(&rk).or_else(|| self.store.rows.get(&rk)) {
            return (Some(row.clone()), Observed::Version(*w));
        }
        let initial = if table.name == FENCE.name {
            (pk == [Val::Int(0)]).then(|| vec![Val::Int(0), Val::Int(0)])
        } else {
            self.store.workload.initial_row(table, pk)
        };
        match initial {
            Some(row) => (Some(row), Observed::PreHistory(0)),
            None => (None, Observed::Absent),
        }
    }

    fn write(&mut self, table: &'static TableDef, row: Row, kind: StmtKind) {
        let write = WriteId(self.store.next_write);
        self.store.next_write += 1;
        let pk = table.pk(&row).to_vec();
        let key = self.store.key(table, &pk);
        let stmt = Some(self.store.stmt(table, kind));
        self.ops.push(Op::Write { key, write, stmt });
        self.writes.insert((table.name, pk), (row, write));
    }
}

impl Txn for MemTxn<'_, '_> {
    async fn read(&mut self, table: &'static TableDef, pk: &[Val]) -> Result<Option<Row>, StoreError> {
        table.check_pk(pk)?;
        let (row, observed) = self.lookup(table, pk);
        let key = self.store.key(table, pk);
        let stmt = Some(self.store.stmt(table, StmtKind::Select));
        self.ops.push(Op::Read { key, observed, stmt });
        Ok(row)
    }

    async fn insert(&mut self, table: &'static TableDef, row: Row) -> Result<(), StoreError> {
        table.check_row(&row)?;
        if self.lookup(table, table.pk(&row)).0.is_some() {
            return Err(StoreError::Data(format!("{}: duplicate key {:?}", table.name, table.pk(&row))));
        }
        self.write(table, row, StmtKind::Insert);
        Ok(())
    }

    async fn update(&mut self, table: &'static TableDef, row: Row) -> Result<(), StoreError> {
        table.check_row(&row)?;
        if self.lookup(table, table.pk(&row)).0.is_none() {
            return Err(StoreError::Data(format!(
                "{}: update of missing row {:?}",
                table.name,
                table.pk(&row)
            )));
        }
        self.write(table, row, StmtKind::Update);
        Ok(())
    }
}
