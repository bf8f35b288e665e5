//! The four benchmark workloads of Cobra's evaluation (Cobra §6): TPC-C, C-Twitter, C-RUBiS and
//! BlindW-RM/RW/WM, and chengRW, the uniform read-write shape of Cobra's chengRW history.
//!
//! Each workload's transaction logic is written once, against the small row-level [`Txn`] trait, and runs on
//! two backends:
//! - [`sql`]: real PostgreSQL sessions (`tokio-postgres`), one per client, running concurrently through any
//!   PostgreSQL endpoint: Krait's proxy or the database itself. Serialization failures are retried and
//!   counted.
//! - [`memory`]: a serial in-memory store that records what each transaction observed as a
//!   [`history::History`]. Sessions interleave but execute one transaction at a time, so the history is
//!   serializable by construction: verifier benchmarks of any size need no database.
//!
//! [`transfer`] stands apart: the small contended workload of `krait demo`, written straight against
//! `tokio-postgres`.
//!
//! ```
//! use workloads::{Workload, WorkloadName, Sizes, memory::{generate, GenerateOptions}};
//!
//! let w = Workload::new(WorkloadName::BlindWRw, &Sizes { keys: Some(100), ..Sizes::default() });
//! let g = generate(&w, &GenerateOptions { txns: 50, clients: 4, seed: 7, ..Default::default() }).unwrap();
//! assert_eq!(g.history.transactions.len(), 50);
//! ```

pub mod blindw;
pub mod chengrw;
pub mod memory;
pub mod rubis;
pub mod schema;
pub mod sql;
pub mod tpcc;
pub mod transfer;
pub mod twitter;
mod zipf;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

pub use schema::{Row, TableDef, Val};
pub use zipf::Zipf;

/// Why one transaction attempt failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The database aborted the transaction to keep it serializable (SQLSTATE 40001) or to break a deadlock
    /// (40P01); running it again may succeed.
    #[error("{kind} (SQLSTATE {sqlstate})")]
    Conflict {
        /// Which kind of conflict.
        kind: ConflictKind,
        /// The SQLSTATE the database sent.
        sqlstate: &'static str,
    },
    /// Any other database error; not retried.
    #[error("database error: {}", describe_db_error(.0))]
    Db(#[from] tokio_postgres::Error),
    /// A row that the workload's logic relies on is missing or malformed: a bug, or a database that lost
    /// data. Not retried.
    #[error("data error: {0}")]
    Data(String),
}

/// The server's SQLSTATE and message where there is one: `tokio_postgres::Error`'s own text is just
/// "db error".
fn describe_db_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {}): {}", db.severity(), db.code().code(), db.message()),
        None => e.to_string(),
    }
}

impl StoreError {
    /// Whether running the transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}

/// The two conflicts a serializable PostgreSQL transaction may be aborted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConflictKind {
    /// `serialization_failure` (40001).
    Serialization,
    /// `deadlock_detected` (40P01).
    Deadlock,
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConflictKind::Serialization => "serialization failure",
            ConflictKind::Deadlock => "deadlock",
        })
    }
}

/// One transaction's view of a store: point reads, inserts and whole-row updates by primary key.
///
/// Each call is one SQL statement on the SQL backend and one op of the history on the memory backend
/// (a read, or a write with a fresh write id).
pub trait Txn: Send {
    /// Reads the row of `table` whose primary key is `pk`; `None` if there is none.
    fn read(
        &mut self,
        table: &'static TableDef,
        pk: &[Val],
    ) -> impl Future<Output = Result<Option<Row>, StoreError>> + Send;

    /// Inserts a new row; its primary key must not exist yet.
    fn insert(
        &mut self,
        table: &'static TableDef,
        row: Row,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Replaces the row with the same primary key; the row must exist.
    fn update(
        &mut self,
        table: &'static TableDef,
        row: Row,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// How a transaction's logic ended (a conflict is an error, not an end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnEnd {
    /// Commit it.
    Commit,
    /// The logic itself asks to roll back (TPC-C's 1% of new orders with an unused item number).
    Rollback,
}

/// Reads a row that the logic requires to exist.
pub(crate) async fn read_existing<T: Txn>(
    t: &mut T,
    table: &'static TableDef,
    pk: &[Val],
) -> Result<Row, StoreError> {
    t.read(table, pk)
        .await?
        .ok_or_else(|| StoreError::Data(format!("{}: row {:?} is missing", table.name, pk)))
}

/// The workloads by name, as the command line spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadName {
    /// TPC-C, one warehouse.
    Tpcc,
    /// C-Twitter.
    Twitter,
    /// C-RUBiS.
    Rubis,
    /// BlindW, read mostly (90% read-only transactions).
    BlindWRm,
    /// BlindW, half read-only, half write-only.
    BlindWRw,
    /// BlindW, write mostly (90% write-only transactions).
    BlindWWm,
    /// chengRW: every transaction reads and writes uniformly chosen keys.
    ChengRw,
}

impl WorkloadName {
    /// Every workload, in the paper's order.
    pub const ALL: [WorkloadName; 7] = [
        WorkloadName::Tpcc,
        WorkloadName::Twitter,
        WorkloadName::Rubis,
        WorkloadName::BlindWRm,
        WorkloadName::BlindWRw,
        WorkloadName::BlindWWm,
        WorkloadName::ChengRw,
    ];

    /// The command-line name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadName::Tpcc => "tpcc",
            WorkloadName::Twitter => "twitter",
            WorkloadName::Rubis => "rubis",
            WorkloadName::BlindWRm => "blindw-rm",
            WorkloadName::BlindWRw => "blindw-rw",
            WorkloadName::BlindWWm => "blindw-wm",
            WorkloadName::ChengRw => "chengrw",
        }
    }
}

impl fmt::Display for WorkloadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A workload name that is not one of [`WorkloadName::ALL`].
#[derive(Debug, Error)]
#[error(
    "unknown workload {0:?} (expected one of: tpcc, twitter, rubis, blindw-rm, blindw-rw, blindw-wm, chengrw)"
)]
pub struct UnknownWorkload(pub String);

impl FromStr for WorkloadName {
    type Err = UnknownWorkload;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase().replace('_', "-");
        let lower = lower.strip_prefix("c-").unwrap_or(&lower);
        WorkloadName::ALL
            .into_iter()
            .find(|w| w.as_str() == lower || (lower == "tpc-c" && *w == WorkloadName::Tpcc))
            .ok_or_else(|| UnknownWorkload(s.to_owned()))
    }
}

/// Sizes of the initial state and of chengRW's transactions; `None` takes the workload's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// C-Twitter and C-RUBiS: initial users (defaults: 1,000 and 2,000; Cobra's RUBiS used 20k).
    pub users: Option<u64>,
    /// C-RUBiS: initial items (default 20,000; Cobra used 200k). TPC-C: items in the catalogue (default
    /// 100,000, as the specification says).
    pub items: Option<u64>,
    /// TPC-C: customers per district (default 3,000, as the specification says).
    pub customers: Option<u64>,
    /// BlindW and chengRW: keys (default 10,000).
    pub keys: Option<u64>,
    /// chengRW: reads per transaction (default 4).
    pub reads: Option<u32>,
    /// chengRW: writes per transaction (default 4).
    pub writes: Option<u32>,
}

/// A configured workload.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// TPC-C.
    Tpcc(tpcc::Tpcc),
    /// C-Twitter.
    Twitter(twitter::Twitter),
    /// C-RUBiS.
    Rubis(rubis::Rubis),
    /// BlindW, in one of its three mixes.
    BlindW(blindw::BlindW),
    /// chengRW.
    ChengRw(chengrw::ChengRw),
}

/// The parameters of one transaction, drawn before it runs so that a retry runs the same transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// A TPC-C transaction.
    Tpcc(tpcc::Spec),
    /// A C-Twitter transaction.
    Twitter(twitter::Spec),
    /// A C-RUBiS transaction.
    Rubis(rubis::Spec),
    /// A BlindW transaction.
    BlindW(blindw::Spec),
    /// A chengRW transaction.
    ChengRw(chengrw::Spec),
}

impl Spec {
    /// The transaction type, for the mix (e.g. `new_order`).
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::Tpcc(s) => s.kind(),
            Spec::Twitter(s) => s.kind(),
            Spec::Rubis(s) => s.kind(),
            Spec::BlindW(s) => s.kind(),
            Spec::ChengRw(s) => s.kind(),
        }
    }
}

impl Workload {
    /// The workload `name` with the initial state `sizes`.
    pub fn new(name: WorkloadName, sizes: &Sizes) -> Self {
        match name {
            WorkloadName::Tpcc => Workload::Tpcc(tpcc::Tpcc::new(sizes.customers, sizes.items)),
            WorkloadName::Twitter => Workload::Twitter(twitter::Twitter::new(sizes.users)),
            WorkloadName::Rubis => Workload::Rubis(rubis::Rubis::new(sizes.users, sizes.items)),
            WorkloadName::BlindWRm => {
                Workload::BlindW(blindw::BlindW::new(blindw::Mix::ReadMostly, sizes.keys))
            }
            WorkloadName::BlindWRw => {
                Workload::BlindW(blindw::BlindW::new(blindw::Mix::ReadWrite, sizes.keys))
            }
            WorkloadName::BlindWWm => {
                Workload::BlindW(blindw::BlindW::new(blindw::Mix::WriteMostly, sizes.keys))
            }
            WorkloadName::ChengRw => {
                Workload::ChengRw(chengrw::ChengRw::new(sizes.keys, sizes.reads, sizes.writes))
            }
        }
    }

    /// Which workload this is.
    pub fn name(&self) -> WorkloadName {
        match self {
            Workload::Tpcc(_) => WorkloadName::Tpcc,
            Workload::Twitter(_) => WorkloadName::Twitter,
            Workload::Rubis(_) => WorkloadName::Rubis,
            Workload::BlindW(b) => match b.mix {
                blindw::Mix::ReadMostly => WorkloadName::BlindWRm,
                blindw::Mix::ReadWrite => WorkloadName::BlindWRw,
                blindw::Mix::WriteMostly => WorkloadName::BlindWWm,
            },
            Workload::ChengRw(_) => WorkloadName::ChengRw,
        }
    }

    /// The name of the schema's family: the three BlindW mixes share one schema and initial state.
    pub fn family(&self) -> &'static str {
        match self {
            Workload::Tpcc(_) => "tpcc",
            Workload::Twitter(_) => "twitter",
            Workload::Rubis(_) => "rubis",
            Workload::BlindW(_) => "blindw",
            Workload::ChengRw(_) => "chengrw",
        }
    }

    /// Describes the initial state, so that setup can tell whether what is loaded is what is wanted.
    pub fn fingerprint(&self) -> String {
        match self {
            Workload::Tpcc(w) => format!("tpcc v1 customers={} items={}", w.customers, w.items),
            Workload::Twitter(w) => format!("twitter v1 users={}", w.users),
            Workload::Rubis(w) => format!("rubis v1 users={} items={}", w.users, w.items),
            Workload::BlindW(w) => format!("blindw v1 keys={}", w.keys),
            // Reads and writes per transaction do not change the initial state.
            Workload::ChengRw(w) => format!("chengrw v1 keys={}", w.keys),
        }
    }

    /// The tables, in the order they are created and loaded.
    pub fn tables(&self) -> &'static [&'static TableDef] {
        match self {
            Workload::Tpcc(_) => tpcc::TABLES,
            Workload::Twitter(_) => twitter::TABLES,
            Workload::Rubis(_) => rubis::TABLES,
            Workload::BlindW(_) => blindw::TABLES,
            Workload::ChengRw(_) => chengrw::TABLES,
        }
    }

    /// The initial row of `table` with key `pk`, if the initial state has one. The memory store asks this
    /// lazily instead of materialising the whole initial state; the SQL loader enumerates the same rows
    /// through [`Workload::initial_rows`], so both backends start from the same state.
    pub fn initial_row(&self, table: &TableDef, pk: &[Val]) -> Option<Row> {
        match self {
            Workload::Tpcc(w) => w.initial_row(table, pk),
            Workload::Twitter(w) => w.initial_row(table, pk),
            Workload::Rubis(w) => w.initial_row(table, pk),
            Workload::BlindW(w) => w.initial_row(table, pk),
            Workload::ChengRw(w) => w.initial_row(table, pk),
        }
    }

    /// The primary keys of the initial rows of `table`, in load order.
    pub fn initial_keys(&self, table: &TableDef) -> Box<dyn Iterator<Item = Vec<Val>> + '_> {
        match self {
            Workload::Tpcc(w) => w.initial_keys(table),
            Workload::Twitter(w) => w.initial_keys(table),
            Workload::Rubis(w) => w.initial_keys(table),
            Workload::BlindW(w) => w.initial_keys(table),
            Workload::ChengRw(w) => w.initial_keys(table),
        }
    }

    /// Every initial row of `table`, in load order.
    pub fn initial_rows<'a>(&'a self, table: &'a TableDef) -> impl Iterator<Item = Row> + 'a {
        self.initial_keys(table).filter_map(move |pk| self.initial_row(table, &pk))
    }

    /// Draws the next transaction of client `client` (clients count from 0).
    pub fn next_txn(&self, rng: &mut ChaCha8Rng, client: u32) -> Spec {
        match self {
            Workload::Tpcc(w) => Spec::Tpcc(w.next_txn(rng)),
            Workload::Twitter(w) => Spec::Twitter(w.next_txn(rng)),
            Workload::Rubis(w) => Spec::Rubis(w.next_txn(rng, client)),
            Workload::BlindW(w) => Spec::BlindW(w.next_txn(rng, client)),
            Workload::ChengRw(w) => Spec::ChengRw(w.next_txn(rng, client)),
        }
    }

    /// Runs the logic of one transaction on `t`. A `Spec` of another workload is a data error.
    pub async fn execute<T: Txn>(&self, t: &mut T, spec: &Spec) -> Result<TxnEnd, StoreError> {
        match (self, spec) {
            (Workload::Tpcc(w), Spec::Tpcc(s)) => w.execute(t, s).await,
            (Workload::Twitter(w), Spec::Twitter(s)) => w.execute(t, s).await,
            (Workload::Rubis(w), Spec::Rubis(s)) => w.execute(t, s).await,
            (Workload::BlindW(w), Spec::BlindW(s)) => w.execute(t, s).await,
            (Workload::ChengRw(w), Spec::ChengRw(s)) => w.execute(t, s).await,
            _ => Err(StoreError::Data(format!(
                "a {} transaction given to the {} workload",
                spec.kind(),
                self.name()
            ))),
        }
    }

    /// The intended share of each transaction type, for checking a run's mix.
    pub fn expected_mix(&self) -> BTreeMap<&'static str, f64> {
        match self {
            Workload::Tpcc(_) => tpcc::MIX.iter().map(|&(k, p)| (k, p as f64 / 100.0)).collect(),
            Workload::Twitter(_) => twitter::MIX.iter().map(|&(k, p)| (k, p as f64 / 100.0)).collect(),
            Workload::Rubis(_) => rubis::MIX.iter().map(|&(k, p)| (k, p as f64 / 100.0)).collect(),
            Workload::BlindW(w) => {
                let ro = w.mix.read_only_percent() as f64 / 100.0;
                [("read_only", ro), ("write_only", 1.0 - ro)].into_iter().collect()
            }
            Workload::ChengRw(_) => [("read_write", 1.0)].into_iter().collect(),
        }
    }
}

/// The random stream of client `client` under `seed`: the same on both backends, so a generated history
/// and a SQL run with the same seed draw the same transactions (until retries make them diverge in time).
pub fn client_rng(seed: u64, client: u32) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(u64::from(client) + 1);
    rng
}

/// Picks a label from `(label, percent)` pairs that add up to 100.
pub(crate) fn pick<T: Copy>(rng: &mut ChaCha8Rng, table: &[(T, u32)]) -> T {
    use rand::Rng;
    let total: u32 = table.iter().map(|&(_, p)| p).sum();
    let mut x = rng.gen_range(0..total.max(1));
    for &(label, p) in table {
        if x < p {
            return label;
        }
        x -= p;
    }
    table[table.len() - 1].0
}

/// Deterministic filler text of `len` characters, varied by `n` (Cobra's tweets are 140 words; the content
/// does not matter, only that rows have realistic sizes).
pub(crate) fn filler(n: i64, len: usize) -> String {
    const WORDS: [&str; 8] =
        ["krait ", "cobra ", "serial ", "order ", "graph ", "chain ", "fence ", "epoch "];
    let mut s = String::with_capacity(len + 8);
    let mut i = n.unsigned_abs() as usize;
    while s.len() < len {
        s.push_str(WORDS[i % WORDS.len()]);
        i = i / WORDS.len() + 3;
    }
    s.truncate(len);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for w in WorkloadName::ALL {
            assert_eq!(w.as_str().parse::<WorkloadName>().unwrap(), w);
        }
        assert_eq!("C-Twitter".parse::<WorkloadName>().unwrap(), WorkloadName::Twitter);
        assert_eq!("TPC-C".parse::<WorkloadName>().unwrap(), WorkloadName::Tpcc);
        assert_eq!("chengRW".parse::<WorkloadName>().unwrap(), WorkloadName::ChengRw);
        assert!("ycsb".parse::<WorkloadName>().is_err());
    }

    #[test]
    fn client_streams_differ_and_repeat() {
        use rand::RngCore;
        let a = client_rng(1, 0).next_u64();
        assert_eq!(a, client_rng(1, 0).next_u64());
        assert_ne!(a, client_rng(1, 1).next_u64());
        assert_ne!(a, client_rng(2, 0).next_u64());
    }
}
