//! Stage 5: the replay, run. Each session gets its own connection through an in-process Krait proxy that
//! records them, and the steps go out in the plan's order: each waits for the one before it to be answered,
//! or to block. A step still unanswered after the step timeout is blocked (on a lock, as a rule): the
//! replay goes on with the other sessions, and the blocked session's later steps follow as soon as it is
//! answered. Afterwards the recorded replay is verified at the report's level, and the result is named:
//! - **reproduced**: the replay's history has an anomaly of a class the report has;
//! - **prevented**: it has none, and the database refused a step for a serialization failure or a
//!   deadlock (SQLSTATE class 40): what a database that keeps the level is expected to do;
//! - **not reproduced**: neither.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use history::HistoryLog;
use tokio::sync::mpsc;
use tokio_postgres::NoTls;
use tokio_postgres::config::Host;
use verifier::{AnomalyClass, Options, Report};

use crate::plan::ReplayPlan;
use crate::script::Prepared;
use crate::setup::{Scratch, original_table, scratch_schema};
use crate::sql::{SqlError, TableMap};

/// How to run a replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The database, as a libpq connection string or URL (`host=… port=… user=… dbname=…`).
    pub target: String,
    /// Run on the recorded tables instead of a scratch schema.
    pub in_place: bool,
    /// The scratch schema's name, if not [`scratch_schema`]'s for the report.
    pub scratch_schema: Option<String>,
    /// Keep the scratch schema afterwards.
    pub keep: bool,
    /// The target already holds the rows at their values before the first step (it was loaded some other
    /// way, as the embedded reference store is): no catalog look-up, no set-up, the recorded tables.
    pub preloaded: bool,
    /// How long a step may go unanswered before it counts as blocked.
    pub step_timeout: Duration,
    /// How long blocked steps may take to finish after the last step went out.
    pub drain_timeout: Duration,
    /// Where to write the scripts too, if anywhere.
    pub out: Option<PathBuf>,
}

impl ReplayOptions {
    /// Defaults for `target`: a scratch schema, dropped afterwards; 1 s per step.
    pub fn new(target: impl Into<String>) -> Self {
        ReplayOptions {
            target: target.into(),
            in_place: false,
            scratch_schema: None,
            keep: false,
            preloaded: false,
            step_timeout: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(10),
            out: None,
        }
    }
}

/// Why a replay could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The target is not a connection string this replay can use.
    #[error("the target {0:?} is not usable: {1}")]
    Target(String, String),
    /// The database refused a connection or a query outside the steps.
    #[error("{what}: {source}")]
    Database {
        /// What was being done.
        what: String,
        /// The database's error.
        source: tokio_postgres::Error,
    },
    /// A recorded table is not on the target, so its scratch copy cannot be made like it.
    #[error(
        "table {0} is not on the target; the scratch schema copies its definition from there (run the replay \
         against the database the report came from)"
    )]
    MissingTable(String),
    /// A statement could not be rewritten.
    #[error(transparent)]
    Sql(#[from] SqlError),
    /// The in-process proxy failed.
    #[error("the recording proxy: {0}")]
    Proxy(String),
    /// The replay's history could not be verified.
    #[error("cannot verify the replay: {0}")]
    Verify(String),
    /// Writing the scripts failed.
    #[error("cannot write the scripts: {0}")]
    Io(#[from] std::io::Error),
}

/// The replay's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The same class of anomaly happened again.
    Reproduced,
    /// The database refused a step (SQLSTATE class 40) and no anomaly happened.
    Prevented,
    /// Neither.
    NotReproduced,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Reproduced => "reproduced",
            Verdict::Prevented => "prevented",
            Verdict::NotReproduced => "not reproduced",
        })
    }
}

/// What became of one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Answered within the step timeout.
    Done,
    /// Not answered within the step timeout, answered later.
    Unblocked,
    /// Refused by the database.
    Failed {
        /// The SQLSTATE.
        code: String,
        /// The message.
        message: String,
    },
    /// Never answered (still blocked when the replay ended), or never sent.
    NotAnswered,
}

/// A replay, run.
#[derive(Clone, Debug)]
pub struct Replayed {
    /// The result.
    pub verdict: Verdict,
    /// Each step's SQL and what became of it, in the plan's order.
    pub steps: Vec<(String, StepOutcome)>,
    /// The verifier's report on the replay's history.
    pub report: Report,
    /// What a person should know about how faithful the replay was.
    pub notes: Vec<String>,
    /// The scripts written, if asked.
    pub files: Vec<PathBuf>,
}

/// Where and as whom to connect, from the target.
struct Target {
    host: String,
    port: u16,
    user: String,
    dbname: String,
    password: Option<String>,
}

impl Target {
    fn parse(target: &str) -> Result<Target, ReplayError> {
        let bad = |why: &str| ReplayError::Target(target.to_owned(), why.to_owned());
        let config = tokio_postgres::Config::from_str(target).map_err(|e| bad(&e.to_string()))?;
        let host = match config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(_) => {
                return Err(bad("a Unix socket cannot sit behind the recording proxy; give a TCP host"));
            }
            None => "127.0.0.1".to_owned(),
        };
        let user = config.get_user().ok_or_else(|| bad("it names no user"))?.to_owned();
        Ok(Target {
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            dbname: config.get_dbname().unwrap_or(&user).to_owned(),
            password: config.get_password().map(|p| String::from_utf8_lossy(p).into_owned()),
            user,
        })
    }

    /// A connection string for `host:port`, as the target's user.
    fn conninfo(&self, host: &str, port: u16) -> String {
        let mut s =
            format!("host={host} port={port} user={} dbname={} connect_timeout=5", self.user, self.dbname);
        if let Some(p) = &self.password {
            s.push_str(&format!(" password='{}'", p.replace('\\', "\\\\").replace('\'', "\\'")));
        }
        s
    }
}

/// Connects without TLS and drives the connection on its own task.
async fn connect(conninfo: &str, what: &str) -> Result<tokio_postgres::Client, ReplayError> {
    let (client, conn) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .map_err(|source| ReplayError::Database { what: what.to_owned(), source })?;
    tokio::spawn(conn);
    Ok(client)
}

/// Runs `plan` against the options' target (see the module docs).
pub async fn replay(plan: &ReplayPlan, options: &ReplayOptions) -> Result<Replayed, ReplayError> {
    let target = Target::parse(&options.target)?;
    let admin = if options.preloaded {
        None
    } else {
        Some(connect(&target.conninfo(&target.host, target.port), "cannot connect to the target").await?)
    };
    let prepared = match &admin {
        Some(admin) => Prepared::new(plan, &look_up_tables(plan, admin, options).await?)?,
        None => Prepared::preloaded(plan)?,
    };
    let files = match &options.out {
        Some(dir) => crate::script::write(dir, plan, &prepared)?,
        None => Vec::new(),
    };
    let Prepared { setup, sql, notes } = prepared;
    // Set up and run; whatever happens, the scratch schema is dropped afterwards (unless kept).
    let result = async {
        if let Some(admin) = &admin {
            for statement in &setup.statements {
                admin.batch_execute(statement).await.map_err(|source| ReplayError::Database {
                    what: format!("the set-up statement `{statement}` failed"),
                    source,
                })?;
            }
        }
        record_and_run(plan, options, &target, &sql).await
    }
    .await;
    if let (Some(admin), Some(schema), false) = (&admin, &setup.schema, options.keep) {
        let drop = format!("DROP SCHEMA IF EXISTS {} CASCADE", crate::sql::quote_ident(schema));
        if let Err(e) = admin.batch_execute(&drop).await {
            tracing::warn!("cannot drop the scratch schema {schema}: {e}");
        }
    }
    let (steps, history) = result?;
    let report = verifier::verify(&history, &Options { level: plan.report.level, ..Options::default() })
        .map_err(|e| ReplayError::Verify(e.to_string()))?;
    let wanted: std::collections::HashSet<AnomalyClass> =
        plan.report.anomalies.iter().map(|a| a.class).collect();
    let refused =
        steps.iter().any(|(_, o)| matches!(o, StepOutcome::Failed { code, .. } if code.starts_with("40")));
    let verdict = if report.anomalies.iter().any(|a| wanted.contains(&a.class)) {
        Verdict::Reproduced
    } else if refused && report.anomalies.is_empty() {
        Verdict::Prevented
    } else {
        Verdict::NotReproduced
    };
    Ok(Replayed { verdict, steps, report, notes, files })
}

/// Where the replay's tables go, with their primary keys from the target's catalog.
async fn look_up_tables(
    plan: &ReplayPlan,
    admin: &tokio_postgres::Client,
    options: &ReplayOptions,
) -> Result<Scratch, ReplayError> {
    let in_place = options.in_place;
    let namespaces = plan.tables();
    let mut primary_keys = BTreeMap::new();
    for ns in &namespaces {
        let table = original_table(ns);
        let rows = admin
            .query(
                "SELECT to_regclass($1)::text, a.attname::text FROM (SELECT 1) one \
                 LEFT JOIN pg_catalog.pg_index i ON i.indrelid = to_regclass($1) AND i.indisprimary \
                 LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                 ORDER BY array_position(i.indkey::int2[], a.attnum)",
                &[&table],
            )
            .await
            .map_err(|source| ReplayError::Database { what: format!("cannot look up {table}"), source })?;
        if rows.first().and_then(|r| r.get::<_, Option<String>>(0)).is_none() {
            if !in_place {
                return Err(ReplayError::MissingTable(table));
            }
            continue;
        }
        let pk: Vec<String> = rows.iter().filter_map(|r| r.get::<_, Option<String>>(1)).collect();
        primary_keys.insert(ns.clone(), pk);
    }
    let map = if in_place {
        TableMap::default()
    } else {
        let schema = options.scratch_schema.clone().unwrap_or_else(|| scratch_schema(&plan.report_id));
        TableMap::scratch(&schema, namespaces)
    };
    Ok(Scratch { map, primary_keys })
}

/// What a session task answers: the step's number and how it went.
type Answer = (usize, usize, Result<(), (String, String)>);

/// Starts the recording proxy, runs the steps through it and returns what became of each, with the history
/// the proxy recorded.
async fn record_and_run(
    plan: &ReplayPlan,
    options: &ReplayOptions,
    target: &Target,
    sql: &[String],
) -> Result<(Vec<(String, StepOutcome)>, history::History), ReplayError> {
    let upstream = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            ReplayError::Target(options.target.clone(), format!("cannot resolve {}", target.host))
        })?;
    let dir = tempfile::tempdir()?;
    let toml = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"{upstream}\"\n[log]\npath = \"{}\"\n\
         durability = \"strict\"\n[admin]\nenabled = false\n[tagging]\nstrategy = \"xmin\"\n[fence]\nevery = 0\n",
        dir.path().join("log").display()
    );
    let config = proxy::Config::parse(&toml, std::path::Path::new("<replay>"))
        .map_err(|e| ReplayError::Proxy(e.to_string()))?;
    let handle = proxy::start(config).await.map_err(|e| ReplayError::Proxy(e.to_string()))?;
    let through = target.conninfo("127.0.0.1", handle.listen_addr().port());
    let outcomes = run_steps(plan, options, &through, sql).await;
    let log: std::sync::Arc<dyn HistoryLog> = handle.log().clone();
    let stopped = handle.shutdown().await;
    let outcomes = outcomes?;
    stopped.map_err(|e| ReplayError::Proxy(e.to_string()))?;
    let history = log.replay().map_err(|e| ReplayError::Proxy(format!("cannot read its log: {e}")))?;
    let steps = sql.iter().cloned().zip(outcomes).collect();
    Ok((steps, history))
}

/// The state of a replay in progress: which step each session is waiting on, and which wait behind it.
struct Driver<'a> {
    sessions: Vec<mpsc::UnboundedSender<(usize, String)>>,
    sql: &'a [String],
    outcomes: Vec<StepOutcome>,
    in_flight: Vec<Option<usize>>,
    backlog: Vec<VecDeque<usize>>,
    blocked: BTreeSet<usize>,
}

impl Driver<'_> {
    /// Sends step `n` on `session`'s connection.
    fn send(&mut self, session: usize, n: usize) {
        self.in_flight[session] = Some(n);
        // A session task ends only when its connection fails, and then the step stays unanswered.
        let _ = self.sessions[session].send((n, self.sql[n].clone()));
    }

    /// Records an answer, and sends the answered session's next held-back step.
    fn answered(&mut self, (session, n, result): Answer) {
        self.outcomes[n] = match result {
            Ok(()) if self.blocked.remove(&n) => StepOutcome::Unblocked,
            Ok(()) => StepOutcome::Done,
            Err((code, message)) => StepOutcome::Failed { code, message },
        };
        self.in_flight[session] = None;
        if let Some(next) = self.backlog[session].pop_front() {
            self.send(session, next);
        }
    }
}

/// Sends the steps, one session per connection, in the plan's order (see the module docs).
async fn run_steps(
    plan: &ReplayPlan,
    options: &ReplayOptions,
    conninfo: &str,
    sql: &[String],
) -> Result<Vec<StepOutcome>, ReplayError> {
    let (answers_tx, mut answers) = mpsc::unbounded_channel::<Answer>();
    let mut sessions = Vec::new();
    for i in 0..plan.sessions.len() {
        let client = connect(conninfo, "cannot connect through the recording proxy").await?;
        let (steps_tx, mut steps) = mpsc::unbounded_channel::<(usize, String)>();
        let answers = answers_tx.clone();
        tokio::spawn(async move {
            while let Some((n, sql)) = steps.recv().await {
                let result = client.simple_query(&sql).await.map(drop).map_err(|e| match e.as_db_error() {
                    Some(db) => (db.code().code().to_owned(), db.message().to_owned()),
                    None => (String::new(), e.to_string()),
                });
                if answers.send((i, n, result)).is_err() {
                    break;
                }
            }
        });
        sessions.push(steps_tx);
    }
    drop(answers_tx);
    let mut driver = Driver {
        sessions,
        sql,
        outcomes: vec![StepOutcome::NotAnswered; plan.steps.len()],
        in_flight: vec![None; plan.sessions.len()],
        backlog: vec![VecDeque::new(); plan.sessions.len()],
        blocked: BTreeSet::new(),
    };
    for (n, step) in plan.steps.iter().enumerate() {
        let session = plan.session_of[step.txn];
        if driver.in_flight[session].is_some() {
            driver.backlog[session].push_back(n);
            continue;
        }
        driver.send(session, n);
        let deadline = tokio::time::Instant::now() + options.step_timeout;
        // Wait for this step's answer, taking any other session's answers as they come.
        while driver.in_flight[session] == Some(n) {
            match tokio::time::timeout_at(deadline, answers.recv()).await {
                Ok(Some(answer)) => driver.answered(answer),
                Ok(None) => break,
                Err(_) => {
                    driver.blocked.insert(n);
                    tracing::info!("replay step {} is blocked", n + 1);
                    break;
                }
            }
        }
    }
    // Let blocked steps and the steps held back behind them finish.
    let deadline = tokio::time::Instant::now() + options.drain_timeout;
    while driver.in_flight.iter().any(Option::is_some) {
        match tokio::time::timeout_at(deadline, answers.recv()).await {
            Ok(Some(answer)) => driver.answered(answer),
            Ok(None) | Err(_) => break,
        }
    }
    let outcomes = driver.outcomes;
    Ok(outcomes)
}

/// The replay's result as text: the verdict, each step and what became of it, the replay's own verdict,
/// and the notes.
pub fn describe(plan: &ReplayPlan, replayed: &Replayed) -> String {
    use std::fmt::Write as _;
    let classes: Vec<&str> = plan.report.anomalies.iter().map(|a| a.class.name()).collect();
    let mut out = format!("replay of {} ({}): {}\n", plan.report_id, classes.join(", "), replayed.verdict);
    for (n, ((sql, outcome), step)) in replayed.steps.iter().zip(&plan.steps).enumerate() {
        let what = match outcome {
            StepOutcome::Done => "ok".to_owned(),
            StepOutcome::Unblocked => "blocked, then answered".to_owned(),
            StepOutcome::Failed { code, message } => format!("refused: {code} {message}"),
            StepOutcome::NotAnswered => "not answered (still blocked at the end)".to_owned(),
        };
        let _ = writeln!(
            out,
            "  step {:>3}  {} {:<4} {sql}\n              -> {what}",
            n + 1,
            plan.session_label(plan.session_of[step.txn]),
            plan.label(step.txn)
        );
    }
    let _ = writeln!(
        out,
        "the replay's history, checked at {}: {}",
        plan.report.level.name(),
        replayed.report.verdict_line()
    );
    for note in &replayed.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for file in &replayed.files {
        let _ = writeln!(out, "wrote {}", file.display());
    }
    out
}
