//! The workloads as real PostgreSQL clients: one `tokio-postgres` session per client, all running at once,
//! through any PostgreSQL endpoint (Krait's proxy, or the database itself).
//!
//! Setup (create the schema, load the initial state) is separate from running, and idempotent: a marker
//! table records what was loaded, and setup does nothing when the marker already matches. A transaction
//! that the database aborts for a serialization failure (SQLSTATE 40001) or a deadlock (40P01) is run again
//! with the same parameters, and every retry is counted; any other error is counted and reported, never
//! hidden.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use thiserror::Error;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

use crate::{ConflictKind, Row, StoreError, TableDef, Txn, TxnEnd, Val, Workload, client_rng};

/// Rows per `INSERT` when loading the initial state.
const LOAD_BATCH: usize = 1000;

/// Why setting up or running a workload failed (as a whole; single transactions fail into the summary).
#[derive(Debug, Error)]
pub enum SqlError {
    /// Could not connect to the endpoint.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The endpoint (without a password, if it had one: only what was given).
        url: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// A setup statement failed.
    #[error("setup failed while {step}: {source}")]
    Setup {
        /// What setup was doing.
        step: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// Neither a transaction count nor a duration was given, or zero clients.
    #[error("invalid run options: {0}")]
    Options(String),
    /// A client task panicked or was cancelled.
    #[error("a client task failed: {0}")]
    Task(String),
}

/// A PostgreSQL schema name that is safe to splice into SQL: `[a-z_][a-z0-9_]*`, at most 63 bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SchemaName(String);

/// A schema name that is not a plain lower-case identifier.
#[derive(Debug, Error)]
#[error("invalid schema name {0:?}: use lower-case letters, digits and '_', not starting with a digit")]
pub struct BadSchemaName(pub String);

impl FromStr for SchemaName {
    type Err = BadSchemaName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = !s.is_empty()
            && s.len() <= 63
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit());
        if ok { Ok(SchemaName(s.to_owned())) } else { Err(BadSchemaName(s.to_owned())) }
    }
}

impl SchemaName {
    /// The default schema of a workload: `krait_<family>` (the BlindW mixes share `krait_blindw`).
    pub fn default_for(workload: &Workload) -> Self {
        SchemaName(format!("krait_{}", workload.family()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SchemaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The isolation level clients ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// `SERIALIZABLE`
    #[default]
    Serializable,
    /// `REPEATABLE READ` (snapshot isolation in PostgreSQL)
    RepeatableRead,
    /// `READ COMMITTED`
    ReadCommitted,
}

impl Isolation {
    /// The `BEGIN` that asks for this level.
    pub(crate) fn begin_sql(self) -> &'static str {
        match self {
            Isolation::Serializable => "BEGIN ISOLATION LEVEL SERIALIZABLE",
            Isolation::RepeatableRead => "BEGIN ISOLATION LEVEL REPEATABLE READ",
            Isolation::ReadCommitted => "BEGIN ISOLATION LEVEL READ COMMITTED",
        }
    }
}

/// An isolation level name that is not one of the three.
#[derive(Debug, Error)]
#[error("unknown isolation level {0:?} (expected serializable, repeatable-read or read-committed)")]
pub struct UnknownIsolation(pub String);

impl FromStr for Isolation {
    type Err = UnknownIsolation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace(['_', ' '], "-").as_str() {
            "serializable" => Ok(Isolation::Serializable),
            "repeatable-read" => Ok(Isolation::RepeatableRead),
            "read-committed" => Ok(Isolation::ReadCommitted),
            _ => Err(UnknownIsolation(s.to_owned())),
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isolation::Serializable => "serializable",
            Isolation::RepeatableRead => "repeatable-read",
            Isolation::ReadCommitted => "read-committed",
        })
    }
}

async fn connect(url: &str) -> Result<Client, SqlError> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|source| SqlError::Connect { url: url.to_owned(), source })?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::warn!("workload connection ended: {e}");
        }
    });
    Ok(client)
}

/// What setup did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupOutcome {
    /// The schema already held this initial state; nothing was changed.
    AlreadyLoaded,
    /// The tables were (re)created and this many rows loaded.
    Loaded {
        /// Rows inserted.
        rows: u64,
    },
}

/// Creates `schema` and the workload's tables in it and loads the initial state, unless the schema already
/// holds the same initial state (or `reset` asks to reload anyway). Safe to run concurrently: an advisory
/// lock makes a second setup of one schema wait for the first.
pub async fn setup(
    url: &str,
    workload: &Workload,
    schema: &SchemaName,
    reset: bool,
) -> Result<SetupOutcome, SqlError> {
    let client = connect(url).await?;
    let step = |step: &str| {
        let step = step.to_owned();
        move |source| SqlError::Setup { step, source }
    };
    client.batch_execute("BEGIN").await.map_err(step("beginning"))?;
    client
        .execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&format!("krait-workload-{schema}")])
        .await
        .map_err(step("taking the setup lock"))?;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET LOCAL search_path TO {schema}; \
             CREATE TABLE IF NOT EXISTS krait_workload_meta (family TEXT PRIMARY KEY, fingerprint TEXT NOT NULL)"
        ))
        .await
        .map_err(step("creating the schema"))?;
    let loaded: Option<String> = client
        .query_opt("SELECT fingerprint FROM krait_workload_meta WHERE family = $1", &[&workload.family()])
        .await
        .map_err(step("reading the setup marker"))?
        .map(|row| row.get(0));
    let fingerprint = workload.fingerprint();
    if !reset && loaded.as_deref() == Some(fingerprint.as_str()) {
        client.batch_execute("COMMIT").await.map_err(step("committing"))?;
        return Ok(SetupOutcome::AlreadyLoaded);
    }
    let mut rows = 0u64;
    for table in workload.tables() {
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS {} CASCADE; {}", table.name, table.create_sql()))
            .await
            .map_err(step(&format!("creating {}", table.name)))?;
        let mut batch = Vec::with_capacity(LOAD_BATCH);
        let mut flush = async |batch: &mut Vec<Row>| -> Result<(), SqlError> {
            if !batch.is_empty() {
                client
                    .batch_execute(&table.insert_literal_sql(batch))
                    .await
                    .map_err(step(&format!("loading {}", table.name)))?;
                rows += batch.len() as u64;
                batch.clear();
            }
            Ok(())
        };
        for row in workload.initial_rows(table) {
            batch.push(row);
            if batch.len() == LOAD_BATCH {
                flush(&mut batch).await?;
            }
        }
        flush(&mut batch).await?;
    }
    client
        .execute(
            "INSERT INTO krait_workload_meta (family, fingerprint) VALUES ($1, $2) \
             ON CONFLICT (family) DO UPDATE SET fingerprint = EXCLUDED.fingerprint",
            &[&workload.family(), &fingerprint],
        )
        .await
        .map_err(step("writing the setup marker"))?;
    client.batch_execute("COMMIT").await.map_err(step("committing the initial state"))?;
    Ok(SetupOutcome::Loaded { rows })
}

/// How to run a workload.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Concurrent clients, each its own session.
    pub clients: u32,
    /// Stop after this many transactions (committed or rolled back by the logic, over all clients).
    pub txns: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The seed of the clients' random streams.
    pub seed: u64,
    /// The isolation level of every transaction.
    pub isolation: Isolation,
    /// The schema the workload was set up in.
    pub schema: SchemaName,
    /// A transaction that conflicts this many times in a row is given up and counted as an error.
    pub max_retries: u32,
}

/// Counters a progress display may poll while a run is going.
#[derive(Debug, Default)]
pub struct Progress {
    /// Transactions finished (committed, or rolled back by the logic).
    pub finished: AtomicU64,
    /// Attempts aborted by the database and retried.
    pub retries: AtomicU64,
    /// Transactions that failed for good.
    pub errors: AtomicU64,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// Transactions committed.
    pub committed: u64,
    /// Transactions the logic rolled back on purpose (TPC-C's 1% of new orders).
    pub rolled_back: u64,
    /// Attempts aborted by the database and retried, by kind.
    pub retries: BTreeMap<ConflictKind, u64>,
    /// Transactions that failed for good (not retryable, or too many retries).
    pub errors: u64,
    /// The first few error messages.
    pub error_samples: Vec<String>,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Latency of finished transactions in microseconds, from the first attempt's BEGIN to the final
    /// COMMIT (retries included).
    pub latency_us: Histogram<u64>,
    /// Finished transactions by type.
    pub mix: BTreeMap<&'static str, u64>,
}

impl RunSummary {
    /// Committed transactions per second.
    pub fn tps(&self) -> f64 {
        self.committed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// All retries.
    pub fn total_retries(&self) -> u64 {
        self.retries.values().sum()
    }

    fn merge(&mut self, other: ClientResult) {
        self.committed += other.committed;
        self.rolled_back += other.rolled_back;
        for (k, n) in other.retries {
            *self.retries.entry(k).or_default() += n;
        }
        self.errors += other.errors;
        for e in other.error_samples {
            if self.error_samples.len() < MAX_ERROR_SAMPLES {
                self.error_samples.push(e);
            }
        }
        // Both histograms have the same bounds, so adding cannot fail; if it did, latency would be
        // under-reported, which the counts above would not hide.
        let _ = self.latency_us.add(&other.latency_us);
        for (k, n) in other.mix {
            *self.mix.entry(k).or_default() += n;
        }
    }
}

const MAX_ERROR_SAMPLES: usize = 8;

fn new_histogram() -> Histogram<u64> {
    // 1 µs to 1 hour, three significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

/// Runs `workload` against the endpoint `url` (already set up in `opts.schema`) with `opts.clients`
/// concurrent sessions, until `opts.txns` transactions have finished or `opts.duration` has passed.
pub async fn run(
    url: &str,
    workload: Arc<Workload>,
    opts: &RunOptions,
    progress: Arc<Progress>,
) -> Result<RunSummary, SqlError> {
    if opts.txns.is_none() && opts.duration.is_none() {
        return Err(SqlError::Options("give a transaction count or a duration".into()));
    }
    if opts.clients == 0 {
        return Err(SqlError::Options("at least one client is needed".into()));
    }
    // Connect everyone first, so that connection time is not counted as throughput.
    let mut sessions = Vec::new();
    for _ in 0..opts.clients {
        let client = connect(url).await?;
        client
            .batch_execute(&format!("SET search_path TO {}", opts.schema))
            .await
            .map_err(|source| SqlError::Setup { step: "setting the search path".into(), source })?;
        sessions.push(SqlSession { client, stmts: HashMap::new() });
    }
    let issued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = opts.duration.map(|d| start + d);
    let mut tasks = Vec::new();
    for (i, session) in sessions.into_iter().enumerate() {
        let ctx = ClientCtx {
            index: i as u32,
            workload: workload.clone(),
            opts: opts.clone(),
            issued: issued.clone(),
            deadline,
            progress: progress.clone(),
        };
        tasks.push(tokio::spawn(client_loop(ctx, session)));
    }
    let mut summary = RunSummary {
        committed: 0,
        rolled_back: 0,
        retries: BTreeMap::new(),
        errors: 0,
        error_samples: Vec::new(),
        elapsed: Duration::ZERO,
        latency_us: new_histogram(),
        mix: BTreeMap::new(),
    };
    for task in tasks {
        summary.merge(task.await.map_err(|e| SqlError::Task(e.to_string()))?);
    }
    summary.elapsed = start.elapsed();
    Ok(summary)
}

struct ClientCtx {
    index: u32,
    workload: Arc<Workload>,
    opts: RunOptions,
    issued: Arc<AtomicU64>,
    deadline: Option<Instant>,
    progress: Arc<Progress>,
}

struct ClientResult {
    committed: u64,
    rolled_back: u64,
    retries: BTreeMap<ConflictKind, u64>,
    errors: u64,
    error_samples: Vec<String>,
    latency_us: Histogram<u64>,
    mix: BTreeMap<&'static str, u64>,
}

impl ClientResult {
    fn error(&mut self, ctx: &ClientCtx, message: String) {
        tracing::debug!(client = ctx.index, "transaction failed: {message}");
        self.errors += 1;
        ctx.progress.errors.fetch_add(1, Ordering::Relaxed);
        if self.error_samples.len() < MAX_ERROR_SAMPLES {
            self.error_samples.push(format!("client {}: {message}", ctx.index));
        }
    }
}

async fn client_loop(ctx: ClientCtx, mut session: SqlSession) -> ClientResult {
    let mut rng = client_rng(ctx.opts.seed, ctx.index);
    let mut out = ClientResult {
        committed: 0,
        rolled_back: 0,
        retries: BTreeMap::new(),
        errors: 0,
        error_samples: Vec::new(),
        latency_us: new_histogram(),
        mix: BTreeMap::new(),
    };
    loop {
        if ctx.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if let Some(txns) = ctx.opts.txns
            && ctx.issued.fetch_add(1, Ordering::Relaxed) >= txns
        {
            break;
        }
        if session.client.is_closed() {
            out.error(&ctx, "the connection closed".into());
            break;
        }
        let spec = ctx.workload.next_txn(&mut rng, ctx.index);
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            match session.attempt(&ctx.workload, &spec, ctx.opts.isolation).await {
                Ok(end) => {
                    match end {
                        TxnEnd::Commit => out.committed += 1,
                        TxnEnd::Rollback => out.rolled_back += 1,
                    }
                    out.latency_us.saturating_record(started.elapsed().as_micros() as u64);
                    *out.mix.entry(spec.kind()).or_default() += 1;
                    ctx.progress.finished.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(StoreError::Conflict { kind, .. }) if attempt < ctx.opts.max_retries => {
                    attempt += 1;
                    *out.retries.entry(kind).or_default() += 1;
                    ctx.progress.retries.fetch_add(1, Ordering::Relaxed);
                    // Back off a little more each time, so that two transactions that keep aborting each
                    // other stop meeting.
                    let jitter = u64::from(ctx.index % 7 + 1) * 50;
                    tokio::time::sleep(Duration::from_micros(jitter * u64::from(attempt.min(40)))).await;
                }
                Err(e) => {
                    let what = if e.is_retryable() { "gave up after retries: " } else { "" };
                    out.error(&ctx, format!("{}: {what}{e}", spec.kind()));
                    break;
                }
            }
        }
    }
    out
}

/// One client's connection, with its prepared statements.
struct SqlSession {
    client: Client,
    stmts: HashMap<(&'static str, StmtKind), Statement>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StmtKind {
    Select,
    Insert,
    Update,
}

/// Maps the two retryable SQLSTATEs to conflicts; everything else stays a database error.
fn classify(e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => {
            StoreError::Conflict { kind: ConflictKind::Serialization, sqlstate: "40001" }
        }
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED => {
            StoreError::Conflict { kind: ConflictKind::Deadlock, sqlstate: "40P01" }
        }
        _ => StoreError::Db(e),
    }
}

impl SqlSession {
    /// Runs one attempt of a transaction: BEGIN, the logic, then COMMIT (or ROLLBACK if the logic asks or
    /// anything fails).
    async fn attempt(
        &mut self,
        workload: &Workload,
        spec: &crate::Spec,
        iso: Isolation,
    ) -> Result<TxnEnd, StoreError> {
        self.client.batch_execute(iso.begin_sql()).await.map_err(classify)?;
        let result = workload.execute(&mut SqlTxn { session: self }, spec).await;
        match result {
            Ok(TxnEnd::Commit) => {
                self.client.batch_execute("COMMIT").await.map_err(classify)?;
                Ok(TxnEnd::Commit)
            }
            Ok(TxnEnd::Rollback) => {
                self.client.batch_execute("ROLLBACK").await.map_err(classify)?;
                Ok(TxnEnd::Rollback)
            }
            Err(e) => {
                // The transaction is already failed on the server; ROLLBACK ends it so the next can begin.
                // If even that fails the connection is gone, which the next transaction reports.
                let _ = self.client.batch_execute("ROLLBACK").await;
                Err(e)
            }
        }
    }

    async fn statement(&mut self, table: &'static TableDef, kind: StmtKind) -> Result<Statement, StoreError> {
        if let Some(s) = self.stmts.get(&(table.name, kind)) {
            return Ok(s.clone());
        }
        let sql = match kind {
            StmtKind::Select => table.select_sql(),
            StmtKind::Insert => table.insert_sql(),
            StmtKind::Update => table.update_sql(),
        };
        let s = self.client.prepare(&sql).await.map_err(classify)?;
        self.stmts.insert((table.name, kind), s.clone());
        Ok(s)
    }
}

fn params(vals: &[Val]) -> Vec<&(dyn ToSql + Sync)> {
    vals.iter()
        .map(|v| match v {
            Val::Int(i) => i as &(dyn ToSql + Sync),
            Val::Text(s) => s as &(dyn ToSql + Sync),
        })
        .collect()
}

/// A transaction in progress on a session.
struct SqlTxn<'a> {
    session: &'a mut SqlSession,
}

impl Txn for SqlTxn<'_> {
    async fn read(&mut self, table: &'static TableDef, pk: &[Val]) -> Result<Option<Row>, StoreError> {
        table.check_pk(pk)?;
        let stmt = self.session.statement(table, StmtKind::Select).await?;
        let Some(row) = self.session.client.query_opt(&stmt, &params(pk)).await.map_err(classify)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(table.columns.len());
        for (i, c) in table.columns.iter().enumerate() {
            out.push(match c.ty {
                crate::schema::ColType::Int => Val::Int(row.try_get(i)?),
                crate::schema::ColType::Text => Val::Text(row.try_get(i)?),
            });
        }
        Ok(Some(out))
    }

    async fn insert(&mut self, table: &'static TableDef, row: Row) -> Result<(), StoreError> {
        table.check_row(&row)?;
        let stmt = self.session.statement(table, StmtKind::Insert).await?;
        self.session.client.execute(&stmt, &params(&row)).await.map_err(classify)?;
        Ok(())
    }

    async fn update(&mut self, table: &'static TableDef, row: Row) -> Result<(), StoreError> {
        table.check_row(&row)?;
        let stmt = self.session.statement(table, StmtKind::Update).await?;
        let n = self.session.client.execute(&stmt, &params(&row)).await.map_err(classify)?;
        if n == 0 {
            return Err(StoreError::Data(format!(
                "{}: update of missing row {:?}",
                table.name,
                table.pk(&row)
            )));
        }
        Ok(())
    }
}
