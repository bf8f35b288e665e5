//! BlindW (Cobra §6): many blind writes, the fundamental source of uncertainty in the constraints (§3).
//!
//! 10k keys; every transaction is either read-only or write-only, with eight operations each. Three mixes:
//! BlindW-RM (90% read-only), BlindW-RW (50%) and BlindW-WM (10%).

use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use crate::schema::{TableDef, int, int_kv_initial_keys, int_kv_initial_row};
use crate::{Row, StoreError, Txn, TxnEnd, Val};

/// `blindw_kv(k, v)`: the key space.
pub static KV: TableDef = TableDef { name: "blindw_kv", columns: &[int("k"), int("v")], pk_len: 1 };

/// The tables of BlindW.
pub static TABLES: &[&TableDef] = &[&KV];

/// Operations per transaction (Cobra §6).
pub const OPS_PER_TXN: usize = 8;

/// Default number of keys (Cobra §6).
pub const DEFAULT_KEYS: u64 = 10_000;

/// The share of read-only transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// BlindW-RM: 90% read-only.
    ReadMostly,
    /// BlindW-RW: 50% read-only.
    ReadWrite,
    /// BlindW-WM: 10% read-only.
    WriteMostly,
}

impl Mix {
    /// The percentage of read-only transactions.
    pub fn read_only_percent(self) -> u32 {
        match self {
            Mix::ReadMostly => 90,
            Mix::ReadWrite => 50,
            Mix::WriteMostly => 10,
        }
    }
}

/// The BlindW workload.
#[derive(Clone, Debug, PartialEq)]
pub struct BlindW {
    /// The mix of read-only and write-only transactions.
    pub mix: Mix,
    /// How many keys exist (`0..keys`).
    pub keys: u64,
}

/// One BlindW transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// Read these keys.
    ReadOnly(Vec<i64>),
    /// Write these values to these keys, without reading them.
    WriteOnly(Vec<(i64, i64)>),
}

impl Spec {
    /// `read_only` or `write_only`.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::ReadOnly(_) => "read_only",
            Spec::WriteOnly(_) => "write_only",
        }
    }
}

impl BlindW {
    /// BlindW with `mix` over `keys` keys (default 10,000).
    pub fn new(mix: Mix, keys: Option<u64>) -> Self {
        BlindW { mix, keys: keys.unwrap_or(DEFAULT_KEYS).max(1) }
    }

    pub(crate) fn initial_row(&self, table: &TableDef, pk: &[Val]) -> Option<Row> {
        int_kv_initial_row(&KV, self.keys, table, pk)
    }

    pub(crate) fn initial_keys(&self, table: &TableDef) -> Box<dyn Iterator<Item = Vec<Val>> + '_> {
        int_kv_initial_keys(&KV, self.keys, table)
    }

    pub(crate) fn next_txn(&self, rng: &mut ChaCha8Rng, client: u32) -> Spec {
        let n = OPS_PER_TXN.min(self.keys as usize);
        let keys: Vec<i64> = sample(rng, self.keys as usize, n).into_iter().map(|k| k as i64).collect();
        if rng.gen_range(0..100) < self.mix.read_only_percent() {
            Spec::ReadOnly(keys)
        } else {
            // Values carry the client, so that two clients never write the same value (Cobra's benchmarks
            // assume unique values; Krait does not need it, but passive `value` mode does).
            let base = i64::from(client) << 40;
            Spec::WriteOnly(keys.into_iter().map(|k| (k, base | rng.gen_range(0..1i64 << 40))).collect())
        }
    }

    pub(crate) async fn execute<T: Txn>(&self, t: &mut T, spec: &Spec) -> Result<TxnEnd, StoreError> {
        match spec {
            Spec::ReadOnly(keys) => {
                for &k in keys {
                    t.read(&KV, &[Val::Int(k)]).await?;
                }
            }
            Spec::WriteOnly(writes) => {
                for &(k, v) in writes {
                    t.update(&KV, vec![Val::Int(k), Val::Int(v)]).await?;
                }
            }
        }
        Ok(TxnEnd::Commit)
    }
}
