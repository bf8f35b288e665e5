//! chengRW: every transaction reads some keys and writes some keys, all chosen uniformly from one key space.
//!
//! The shape of Cobra's chengRW history: each transaction reads 4 and writes 4 of 10,000 keys, with no hot
//! spot and no blind-write-only transactions. Unlike BlindW, reads and writes share a transaction, so a
//! transaction that reads a key it also writes is a read-modify-write; across sessions that makes dense,
//! random read-write dependencies, the case where collection of finished transactions is hardest.
//!
//! Within a transaction the reads come first, then the writes. The read keys are distinct, and so are the
//! written keys; the two sets are drawn independently, so they may overlap.

use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use crate::schema::{TableDef, int, int_kv_initial_keys, int_kv_initial_row};
use crate::{Row, StoreError, Txn, TxnEnd, Val};

/// `chengrw_kv(k, v)`: the key space.
pub static KV: TableDef = TableDef { name: "chengrw_kv", columns: &[int("k"), int("v")], pk_len: 1 };

/// The tables of chengRW.
pub static TABLES: &[&TableDef] = &[&KV];

/// Default number of keys.
pub const DEFAULT_KEYS: u64 = 10_000;

/// Default reads per transaction.
pub const DEFAULT_READS: u32 = 4;

/// Default writes per transaction.
pub const DEFAULT_WRITES: u32 = 4;

/// The chengRW workload.
#[derive(Clone, Debug, PartialEq)]
pub struct ChengRw {
    /// How many keys exist (`0..keys`).
    pub keys: u64,
    /// Distinct keys each transaction reads (at most `keys`).
    pub reads: u32,
    /// Distinct keys each transaction writes (at most `keys`).
    pub writes: u32,
}

/// One chengRW transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Read these keys, in this order.
    pub reads: Vec<i64>,
    /// Then write these values to these keys.
    pub writes: Vec<(i64, i64)>,
}

impl Spec {
    /// Every chengRW transaction is of one type.
    pub fn kind(&self) -> &'static str {
        "read_write"
    }
}

impl ChengRw {
    /// chengRW over `keys` keys (default 10,000), `reads` reads and `writes` writes per transaction
    /// (default 4 each). Counts above the number of keys are capped at it.
    pub fn new(keys: Option<u64>, reads: Option<u32>, writes: Option<u32>) -> Self {
        let keys = keys.unwrap_or(DEFAULT_KEYS).max(1);
        let cap = |n: u32| u32::try_from(keys).map_or(n, |k| n.min(k));
        ChengRw {
            keys,
            reads: cap(reads.unwrap_or(DEFAULT_READS)),
            writes: cap(writes.unwrap_or(DEFAULT_WRITES)),
        }
    }

    pub(crate) fn initial_row(&self, table: &TableDef, pk: &[Val]) -> Option<Row> {
        int_kv_initial_row(&KV, self.keys, table, pk)
    }

    pub(crate) fn initial_keys(&self, table: &TableDef) -> Box<dyn Iterator<Item = Vec<Val>> + '_> {
        int_kv_initial_keys(&KV, self.keys, table)
    }

    pub(crate) fn next_txn(&self, rng: &mut ChaCha8Rng, client: u32) -> Spec {
        let mut draw = |n: u32| -> Vec<i64> {
            sample(rng, self.keys as usize, n as usize).into_iter().map(|k| k as i64).collect()
        };
        let reads = draw(self.reads);
        let written = draw(self.writes);
        // Values carry the client, so that two clients never write the same value (as in BlindW).
        let base = i64::from(client) << 40;
        let writes = written.into_iter().map(|k| (k, base | rng.gen_range(0..1i64 << 40))).collect();
        Spec { reads, writes }
    }

    pub(crate) async fn execute<T: Txn>(&self, t: &mut T, spec: &Spec) -> Result<TxnEnd, StoreError> {
        for &k in &spec.reads {
            t.read(&KV, &[Val::Int(k)]).await?;
        }
        for &(k, v) in &spec.writes {
            t.update(&KV, vec![Val::Int(k), Val::Int(v)]).await?;
        }
        Ok(TxnEnd::Commit)
    }
}
