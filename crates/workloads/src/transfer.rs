//! The transfer workload of `krait demo`: a few clients move money between the rows of a small table.
//!
//! Each transaction picks two different random rows, reads both balances and, if they hold at least 2 in
//! all, takes 1 from the first, computed from what it read; else it rolls back. That shape (read two rows,
//! write one) is the one that lets write skew commit below serializable, so a short run shows whether the
//! database kept it serializable. A transaction that the database aborts for a serialization failure or a
//! deadlock is run again (same rows) after a short random pause, at most [`MAX_ATTEMPTS`] times; every
//! retry is counted, and any other error is counted, logged and not retried.
//!
//! The clients run through any PostgreSQL endpoint; the caller connects them (through Krait's proxy, over
//! TLS, in the demo) and hands each one to [`run_client`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::sql::{Isolation, SchemaName};

/// The balance every row starts with.
pub const START_BALANCE: i64 = 100;

/// Attempts of one transaction before a serialization failure counts as an error.
pub const MAX_ATTEMPTS: u32 = 100;

/// The table the clients work on, and so the SQL they send.
#[derive(Clone, Debug)]
pub enum Table {
    /// PostgreSQL: `SCHEMA.accounts(id int4 primary key, balance int4)`, both rows read in one statement.
    Accounts {
        /// The run's own schema.
        schema: SchemaName,
    },
    /// The reference store's PostgreSQL-wire front: `kv(k int8 primary key, v int8)`, which takes point
    /// statements only. The store runs its own consistency model whatever isolation level is asked for.
    Kv,
}

/// The SQL that creates `schema.accounts` with `keys` rows (ids from 0) at [`START_BALANCE`], dropping an
/// earlier schema of the same name first. Run it directly against the database, so that the load stays out
/// of a recorded history.
pub fn accounts_setup_sql(schema: &SchemaName, keys: u32) -> String {
    format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.accounts (id INT PRIMARY KEY, balance INT NOT NULL); \
         INSERT INTO {schema}.accounts SELECT g, {START_BALANCE} FROM generate_series(0, {}) g",
        keys.saturating_sub(1)
    )
}

/// What the clients of one run have done so far; they update it as they go.
#[derive(Debug, Default)]
pub struct Counts {
    /// Transactions committed.
    pub committed: AtomicU64,
    /// Transactions the workload rolled back itself (too little money in the two rows).
    pub rolled_back: AtomicU64,
    /// Attempts aborted for a serialization failure or a deadlock and run again.
    pub retries: AtomicU64,
    /// Transactions that failed for another reason, or too many times.
    pub errors: AtomicU64,
    /// Transactions handed out to clients (each client takes the next until there are `txns`).
    issued: AtomicU64,
}

impl Counts {
    /// Transactions that ended, committed or rolled back by the workload.
    pub fn finished(&self) -> u64 {
        self.committed.load(Ordering::Relaxed) + self.rolled_back.load(Ordering::Relaxed)
    }
}

/// One run of the workload, shared by its clients.
#[derive(Debug)]
pub struct Transfers {
    /// Transactions to run in all (aborted attempts and retries come on top).
    pub txns: u64,
    /// Rows the clients contend on; at least 2.
    pub keys: u32,
    /// The isolation level every transaction asks for.
    pub isolation: Isolation,
    /// The table.
    pub table: Table,
    /// The seed of every random choice; each client draws from its own stream of it.
    pub seed: u64,
    /// What the clients have done so far.
    pub counts: Counts,
}

/// Runs client number `client` of `run` on `db` until the run's transactions are all handed out.
pub async fn run_client(run: Arc<Transfers>, client: u32, db: tokio_postgres::Client) {
    let sql = Sql::new(&run);
    let mut rng = run.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(client)) | 1;
    let keys = u64::from(run.keys.max(2));
    while run.counts.issued.fetch_add(1, Ordering::Relaxed) < run.txns {
        let a = (next(&mut rng) % keys) as i64;
        let b = ((a as u64 + 1 + next(&mut rng) % (keys - 1)) % keys) as i64;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let result: Result<bool, tokio_postgres::Error> = async {
                db.batch_execute(sql.begin).await?;
                let rows = sql.read_rows(&db, a, b).await?;
                let total: i64 = rows.iter().map(|r| r.1).sum();
                if total < 2 {
                    db.batch_execute("ROLLBACK").await?;
                    return Ok(false);
                }
                let from_balance = rows.iter().find(|r| r.0 == a).map_or(0, |r| r.1);
                sql.write_row(&db, a, from_balance - 1).await?;
                db.batch_execute("COMMIT").await?;
                Ok(true)
            }
            .await;
            let counts = &run.counts;
            match result {
                Ok(true) => {
                    counts.committed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(false) => {
                    counts.rolled_back.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    let _ = db.batch_execute("ROLLBACK").await;
                    let retryable = e.code().is_some_and(|c| {
                        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
                    });
                    if retryable && attempts < MAX_ATTEMPTS {
                        counts.retries.fetch_add(1, Ordering::Relaxed);
                        // A short random back-off, so that the same transactions do not collide again.
                        let pause = 1 + next(&mut rng) % (2 * u64::from(attempts.min(10)));
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                        continue;
                    }
                    let why = e
                        .as_db_error()
                        .map_or_else(|| e.to_string(), |d| format!("{}: {}", d.code().code(), d.message()));
                    tracing::warn!("transfer transaction failed after {attempts} attempts: {why}");
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }
}

/// A tiny xorshift generator: the key choices need no quality, only determinism per seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The SQL one client sends.
struct Sql {
    begin: &'static str,
    /// The `kv` table (else `schema.accounts`).
    kv: bool,
    /// Reads rows: both ids as `$1` and `$2` (accounts), or one key as `$1` (kv, run once per key).
    select: String,
    /// Sets the balance `$1` of the row `$2`.
    update: String,
}

impl Sql {
    fn new(run: &Transfers) -> Sql {
        match &run.table {
            Table::Kv => Sql {
                begin: "BEGIN",
                kv: true,
                select: "SELECT k, v FROM kv WHERE k = $1".to_owned(),
                update: "UPDATE kv SET v = $1 WHERE k = $2".to_owned(),
            },
            Table::Accounts { schema } => Sql {
                begin: run.isolation.begin_sql(),
                kv: false,
                select: format!("SELECT id, balance FROM {schema}.accounts WHERE id = $1 OR id = $2"),
                update: format!("UPDATE {schema}.accounts SET balance = $1 WHERE id = $2"),
            },
        }
    }

    /// Reads rows `a` and `b` in the open transaction: (id, balance) pairs.
    async fn read_rows(
        &self,
        db: &tokio_postgres::Client,
        a: i64,
        b: i64,
    ) -> Result<Vec<(i64, i64)>, tokio_postgres::Error> {
        if self.kv {
            let mut out = Vec::new();
            for k in [a, b] {
                for r in db.query(&self.select, &[&k]).await? {
                    out.push((r.try_get::<_, i64>(0)?, r.try_get::<_, i64>(1)?));
                }
            }
            return Ok(out);
        }
        // The ids are below the number of keys, a u32, and the balances start at 100 and only go down by 1
        // a commit.
        let (a, b) = (a as i32, b as i32);
        let rows = db.query(&self.select, &[&a, &b]).await?;
        rows.iter()
            .map(|r| Ok((i64::from(r.try_get::<_, i32>(0)?), i64::from(r.try_get::<_, i32>(1)?))))
            .collect()
    }

    /// Sets row `a`'s balance in the open transaction.
    async fn write_row(
        &self,
        db: &tokio_postgres::Client,
        a: i64,
        balance: i64,
    ) -> Result<u64, tokio_postgres::Error> {
        if self.kv {
            return db.execute(&self.update, &[&balance, &a]).await;
        }
        db.execute(&self.update, &[&(balance as i32), &(a as i32)]).await
    }
}
