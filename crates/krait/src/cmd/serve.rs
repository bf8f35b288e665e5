//! `krait serve`: the recording proxy and a co-located online verifier in one process (DESIGN.md §2).
//!
//! The verifier runs on its own OS thread ([`Tailer`]), never on the proxy's async runtime: every ~100 ms it
//! reads the records the log has made durable since the last sequence number it saw, turns each finished
//! transaction into a [`Transaction`], and pushes it into an [`OnlineVerifier`], which verifies in rounds
//! (Cobra §4, §6.2) and writes reject reports into `DATA_DIR/reports/`. The proxy's data path only appends to
//! the log; it never waits for the verifier, so a slow round delays verification (the lag grows), not
//! clients. Each tick reads at most [`MAX_RECORDS_PER_TICK`] records so that rounds and status keep running.
//!
//! **Sessions.** A session ends for the verifier at its `SessionEnded` record. A session that was open when
//! the proxy crashed has none: it ends at the `Recovery` record the log appends when `serve` reopens it
//! (before the proxy accepts a client), as does every other session of the crashed run, so that it does not
//! hold `epoch_agree` and garbage collection back for ever.
//!
//! The proxy's admin server is the proxy crate's; this command publishes the verifier's state into it every
//! quarter second ([`publish_status`]): `/metrics` and `/api/status` show the transactions verified, the lag
//! in transactions and in seconds, and whether the verifier has fallen behind. It also prints a status line
//! (transactions recorded and verified, lag, rounds, rejects) to stderr every few seconds.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use history::log::{HistoryLog, LogRecord, LoggedTxn};
use history::{Durability, Outcome, SessionId, StmtRef, Transaction, TxnId};
use verifier::{OnlineVerifier, ReportStore, RoundOptions};

/// How often the verifier thread looks at the log.
pub const POLL: Duration = Duration::from_millis(100);
/// The most log records one tick reads, so a burst cannot starve rounds and status updates.
pub const MAX_RECORDS_PER_TICK: usize = 20_000;

/// Arguments of `krait serve`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Stop it with Ctrl-C or SIGTERM: the proxy records open transactions and closes its log, then \
                  the verifier reads the rest of the log, runs a last round and exits."
)]
pub struct ServeArgs {
    /// The proxy's configuration file (see configs/krait.toml).
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Where reject reports go (`DATA_DIR/reports/`). Defaults to the directory that holds the log directory.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Seconds between status lines on stderr.
    #[arg(long, default_value_t = 5, value_name = "S")]
    status_every: u64,
    /// Transactions per verification round (a round also runs every --round-interval-ms).
    #[arg(long, default_value_t = 2_000)]
    round_size: usize,
    /// The longest time between rounds while transactions wait, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    round_interval_ms: u64,
}

/// The verifier thread's state, as the status line and the demo show it.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// Log records read so far.
    pub records_read: u64,
    /// The log's next sequence number when last looked at (records appended so far).
    pub log_records: u64,
    /// Finished transactions read from the log (committed, aborted, indeterminate).
    pub txns_read: u64,
    /// Reads and writes (row-level ops) in those transactions.
    pub ops_read: u64,
    /// Statements in those transactions that the proxy could not map to row ops, so were not checked.
    pub unchecked: u64,
    /// Transactions verified by a completed round.
    pub verified: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Reject reports found.
    pub rejects: u64,
    /// Ids of the stored reports, in order found.
    pub report_ids: Vec<String>,
    /// The verdict line of each reject.
    pub reject_lines: Vec<String>,
    /// Transactions read but not yet verified, plus log records not yet read.
    pub lag_txns: u64,
    /// How long the oldest transaction not yet verified has been waiting since it was read.
    pub lag: Duration,
    /// When the oldest transaction not yet verified was read, so that the lag can be told between ticks
    /// (a long round publishes nothing while it runs).
    pub oldest_unverified: Option<Instant>,
    /// Transactions held after the last garbage collection.
    pub live: u64,
    /// Why the verifier stopped, if it failed.
    pub error: Option<String>,
}

impl Status {
    /// One line for a person.
    pub fn line(&self) -> String {
        format!(
            "recorded {} txns ({} row ops, {} statements not checked), verified {}, lag {} txns / {:.1} s, \
             {} rounds, {} rejects",
            self.txns_read,
            self.ops_read,
            self.unchecked,
            self.verified,
            self.lag_txns,
            self.lag.as_secs_f64(),
            self.rounds,
            self.rejects
        )
    }
}

/// Turns log records into transactions for an [`OnlineVerifier`]: a transaction is pushed once its outcome is
/// known (a `Finished` record, or the `Outcome` of an earlier intent, or a `Recovery` record that declares
/// it Indeterminate). A session cannot begin its next transaction before its COMMIT reply, so pushing at
/// outcome time keeps session order.
pub struct Feeder {
    verifier: OnlineVerifier,
    pending: HashMap<TxnId, LoggedTxn>,
    statements: HashMap<String, StmtRef>,
    next_seq: u64,
    status: Status,
    /// `(cumulative transactions pushed, when)` for each tick that pushed some, to measure the lag.
    pushed_at: VecDeque<(u64, Instant)>,
    seen_rounds: usize,
    seen_rejects: usize,
    /// Sessions of the log that have transactions and no SessionEnded record yet.
    open_sessions: HashSet<SessionId>,
}

impl Feeder {
    /// A feeder that starts at sequence number 0.
    pub fn new(options: RoundOptions, store: Option<ReportStore>) -> Self {
        Self::with_tables(Default::default(), Vec::new(), options, store)
    }

    /// A feeder for the transactions of a history whose key table and statements are `keys` and
    /// `statements` (the embedded demo pushes them with [`Feeder::push_txn`]).
    pub fn with_tables(
        keys: history::KeyTable,
        statements: Vec<String>,
        options: RoundOptions,
        store: Option<ReportStore>,
    ) -> Self {
        let mut verifier = OnlineVerifier::new(keys, statements, options);
        if let Some(store) = store {
            verifier = verifier.with_report_store(store);
        }
        Feeder {
            verifier,
            pending: HashMap::new(),
            statements: HashMap::new(),
            next_seq: 0,
            status: Status::default(),
            pushed_at: VecDeque::new(),
            seen_rounds: 0,
            seen_rejects: 0,
            open_sessions: HashSet::new(),
        }
    }

    /// Reads what the log has made durable since the last call (at most `max` records); returns how many.
    pub fn read_log(&mut self, log: &dyn HistoryLog, max: usize) -> anyhow::Result<usize> {
        // Act only on records a crash cannot take back; under `none` nothing is durable until close.
        let limit = match log.durability() {
            Durability::None => log.next_seq(),
            _ => log.durable_below(),
        };
        let mut n = 0;
        let pushed_before = self.status.txns_read;
        for item in log.tail(self.next_seq) {
            if n >= max {
                break;
            }
            let (seq, record) = item.context("cannot read the history log")?;
            if seq >= limit {
                break;
            }
            self.next_seq = seq + 1;
            n += 1;
            self.apply(record)?;
        }
        self.status.records_read = self.next_seq;
        self.status.log_records = log.next_seq();
        if self.status.txns_read > pushed_before {
            self.pushed_at.push_back((self.status.txns_read, Instant::now()));
        }
        Ok(n)
    }

    fn apply(&mut self, record: LogRecord) -> anyhow::Result<()> {
        match record {
            LogRecord::Intent(txn) => {
                self.pending.insert(txn.id, txn);
            }
            LogRecord::Outcome { txn, outcome, commit_ns } => {
                if let Some(t) = self.pending.remove(&txn) {
                    self.push(t, outcome, commit_ns)?;
                }
            }
            LogRecord::Finished { txn, outcome, commit_ns } => self.push(txn, outcome, commit_ns)?,
            LogRecord::LateOps { txn, ops, statements } => {
                if let Some(t) = self.pending.get_mut(&txn) {
                    t.ops.extend(ops);
                    t.statements = statements;
                }
            }
            LogRecord::Recovery { indeterminate, .. } => {
                for id in indeterminate {
                    if let Some(t) = self.pending.remove(&id) {
                        self.push(t, Outcome::Indeterminate, None)?;
                    }
                }
                // A Recovery record marks where a run of the proxy ended (it is appended when the log is
                // reopened after a crash, or at a close with intents in flight), and no session of that run
                // can log anything after it. Sessions open at a crash never got their SessionEnded record;
                // without this they would hold `epoch_agree` (and so collection) back for ever.
                let mut open: Vec<SessionId> = self.open_sessions.drain().collect();
                open.sort_unstable();
                for session in open {
                    self.verifier.session_ended(session);
                }
            }
            // The proxy classifies versions against the horizon; the verifier needs nothing of it.
            LogRecord::Horizon { .. } => {}
            LogRecord::SessionEnded { session, .. } => {
                // The proxy logs a session's end after its last transaction's records, so an intent of the
                // session still pending here will get no outcome: it goes to the verifier as Indeterminate
                // first, so that the session's transactions are all fed before its end is announced.
                let mut orphans: Vec<TxnId> =
                    self.pending.iter().filter(|(_, t)| t.session == session).map(|(&id, _)| id).collect();
                orphans.sort_by_key(|id| self.pending.get(id).map(|t| t.seq));
                for id in orphans {
                    if let Some(t) = self.pending.remove(&id) {
                        self.push(t, Outcome::Indeterminate, None)?;
                    }
                }
                // A quiet session no longer holds `epoch_agree` (and so collection) back (Cobra §4.2).
                self.open_sessions.remove(&session);
                self.verifier.session_ended(session);
            }
        }
        Ok(())
    }

    /// Pushes one transaction of another history (the embedded demo), interning its keys and statements.
    pub fn push_txn(&mut self, txn: Transaction) -> anyhow::Result<()> {
        self.status.txns_read += 1;
        self.status.ops_read += txn.ops.len() as u64;
        self.status.records_read += 1;
        self.status.log_records += 1;
        self.verifier.push(txn).context("online verification failed")?;
        self.pushed_at.push_back((self.status.txns_read, Instant::now()));
        self.after_push();
        Ok(())
    }

    /// The verifier, to declare keys and sessions.
    pub fn verifier_mut(&mut self) -> &mut OnlineVerifier {
        &mut self.verifier
    }

    fn push(&mut self, logged: LoggedTxn, outcome: Outcome, commit_ns: Option<u64>) -> anyhow::Result<()> {
        let session = logged.session;
        // The key table moves out while statements are added to the same verifier.
        let mut keys = std::mem::take(self.verifier.keys_mut());
        let (verifier, statements) = (&mut self.verifier, &mut self.statements);
        let converted = logged.into_transaction(outcome, commit_ns, &mut keys, |text| {
            *statements.entry(text.to_owned()).or_insert_with(|| verifier.add_statement(text.to_owned()))
        });
        *self.verifier.keys_mut() = keys;
        // Our own proxy wrote the record, so a contradiction in it is a bug to surface, not to skip.
        let (txn, unchecked) = converted.context("the history log holds an inconsistent transaction")?;
        self.status.txns_read += 1;
        self.status.ops_read += txn.ops.len() as u64;
        self.status.unchecked += unchecked.len() as u64;
        self.verifier.note_unchecked(&unchecked);
        self.open_sessions.insert(session);
        self.verifier.push(txn).context("online verification failed")?;
        self.after_push();
        Ok(())
    }

    /// Runs a round if the round interval has passed.
    pub fn poll(&mut self) -> anyhow::Result<()> {
        self.verifier.poll().context("online verification failed")?;
        self.after_push();
        Ok(())
    }

    /// Admits everything still waiting and runs a last round.
    pub fn finish(&mut self) -> anyhow::Result<()> {
        self.verifier.finish().context("online verification failed")?;
        self.after_push();
        Ok(())
    }

    /// New reject verdict lines (with their report ids) since the last call.
    pub fn new_rejects(&mut self) -> Vec<(Option<String>, String)> {
        let rejects = self.verifier.rejects();
        let ids = self.verifier.report_ids();
        let out = (self.seen_rejects..rejects.len())
            .map(|i| (ids.get(i).cloned(), rejects[i].verdict_line()))
            .collect();
        self.seen_rejects = rejects.len();
        out
    }

    /// The reject reports found so far.
    pub fn rejects(&self) -> &[verifier::Report] {
        self.verifier.rejects()
    }

    fn after_push(&mut self) {
        let rounds = self.verifier.rounds();
        for r in &rounds[self.seen_rounds..] {
            self.status.verified += r.admitted as u64;
        }
        self.seen_rounds = rounds.len();
        self.status.rounds = rounds.len() as u64;
        self.status.rejects = self.verifier.rejects().len() as u64;
        self.status.report_ids = self.verifier.report_ids().to_vec();
        self.status.reject_lines = self.verifier.rejects().iter().map(|r| r.verdict_line()).collect();
        while self.pushed_at.front().is_some_and(|&(n, _)| n <= self.status.verified) {
            self.pushed_at.pop_front();
        }
        self.status.oldest_unverified = self.pushed_at.front().map(|&(_, at)| at);
        self.status.lag = self.pushed_at.front().map_or(Duration::ZERO, |&(_, at)| at.elapsed());
        self.status.live = self.verifier.live_transactions() as u64;
        let unread = self.status.log_records.saturating_sub(self.status.records_read);
        self.status.lag_txns = self.status.txns_read.saturating_sub(self.status.verified) + unread;
    }

    /// The state now.
    pub fn status(&mut self) -> Status {
        self.after_push();
        self.status.clone()
    }
}

/// The verifier thread: a [`Feeder`] that tails a live log until told to stop.
pub struct Tailer {
    stop: Arc<AtomicBool>,
    status: Arc<Mutex<Status>>,
    thread: Option<JoinHandle<anyhow::Result<Status>>>,
}

impl Tailer {
    /// Starts tailing `log` on a new thread. `on_reject` is called (on that thread) once per reject with the
    /// report id and the verdict line.
    pub fn spawn(
        log: Arc<dyn HistoryLog>,
        options: RoundOptions,
        store: Option<ReportStore>,
        on_reject: impl Fn(Option<&str>, &str) + Send + 'static,
    ) -> anyhow::Result<Tailer> {
        let stop = Arc::new(AtomicBool::new(false));
        let status = Arc::new(Mutex::new(Status::default()));
        let (stop2, status2) = (stop.clone(), status.clone());
        let thread = std::thread::Builder::new()
            .name("krait-verifier".into())
            .spawn(move || {
                let mut feeder = Feeder::new(options, store);
                let publish = |feeder: &mut Feeder| {
                    let s = feeder.status();
                    if let Ok(mut g) = status2.lock() {
                        *g = s.clone();
                    }
                    s
                };
                let result = (|| -> anyhow::Result<()> {
                    loop {
                        let stopping = stop2.load(Ordering::Acquire);
                        // Once stopping, the proxy has closed the log: read everything that is left.
                        let max = if stopping { usize::MAX } else { MAX_RECORDS_PER_TICK };
                        let n = feeder.read_log(log.as_ref(), max)?;
                        if stopping {
                            feeder.finish()?;
                        } else {
                            feeder.poll()?;
                        }
                        for (id, line) in feeder.new_rejects() {
                            on_reject(id.as_deref(), &line);
                        }
                        publish(&mut feeder);
                        if stopping {
                            return Ok(());
                        }
                        if n < MAX_RECORDS_PER_TICK {
                            std::thread::sleep(POLL);
                        }
                    }
                })();
                let mut s = publish(&mut feeder);
                if let Err(e) = &result {
                    s.error = Some(format!("{e:#}"));
                    if let Ok(mut g) = status2.lock() {
                        g.error = s.error.clone();
                    }
                }
                result.map(|()| s)
            })
            .context("cannot start the verifier thread")?;
        Ok(Tailer { stop, status, thread: Some(thread) })
    }

    /// The state at the last tick.
    pub fn status(&self) -> Status {
        self.status.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Tells the thread to read the rest of the log, run a last round and exit; returns the final state.
    /// Call after the proxy has shut down (so the log is closed and everything in it is durable).
    pub fn finish(mut self) -> anyhow::Result<Status> {
        self.stop.store(true, Ordering::Release);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => anyhow::bail!("the verifier thread panicked"),
            None => Ok(self.status()),
        }
    }
}

impl Drop for Tailer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The round options `serve` and the demo use: carry on after a reject, rounds on size or interval.
pub fn online_options(round_size: usize, interval: Duration) -> RoundOptions {
    RoundOptions {
        round_size,
        round_interval: Some(interval),
        stop_at_first_reject: false,
        ..RoundOptions::default()
    }
}

/// How often `serve` publishes the verifier's state to the admin server's `/metrics` and `/api/status`.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// Publishes the verifier's state into the proxy's metrics, for `/metrics` and `/api/status`. The lag is
/// told from `now` (not from the verifier's last tick), so it keeps growing while a long round runs;
/// `log_next_seq` counts log records appended since that tick as not yet verified. The verifier is behind
/// when the oldest unverified transaction has waited more than two round intervals and a second (a round
/// should verify it within one interval), or when more records wait unread than one tick reads.
pub fn publish_status(
    status: &Status,
    metrics: &proxy::metrics::VerifierMetrics,
    now: Instant,
    round_interval: Duration,
    log_next_seq: u64,
) {
    use proxy::metrics::VerifierMetrics as V;
    let lag = status.oldest_unverified.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
    let unread = log_next_seq.saturating_sub(status.log_records.max(status.records_read));
    let lag_txns = status.lag_txns + unread;
    let behind = lag > round_interval * 2 + Duration::from_secs(1)
        || log_next_seq.saturating_sub(status.records_read) > MAX_RECORDS_PER_TICK as u64;
    V::set(&metrics.verified, status.verified);
    V::set(&metrics.lag_txns, lag_txns);
    V::set(&metrics.lag_ms, lag.as_millis() as u64);
    V::set(&metrics.behind, u64::from(behind));
    V::set(&metrics.rounds, status.rounds);
    V::set(&metrics.rejects, status.rejects);
    V::set(&metrics.live, status.live);
    V::set(&metrics.attached, 1);
}

/// The data directory for reports when none is given: the directory holding the log directory.
fn default_data_dir(log_path: &Path) -> PathBuf {
    match log_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Runs `krait serve` until Ctrl-C or SIGTERM. Exit 0 after a clean stop (whatever the verdicts: rejects are
/// reported as they are found), 2 if the proxy or the verifier failed.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = proxy::check_config(&args.config)
        .with_context(|| format!("invalid configuration {}", args.config.display()))?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| default_data_dir(&config.log.path));
    let store = ReportStore::open(&data_dir)
        .with_context(|| format!("cannot open the reports directory in {}", data_dir.display()))?;
    let reports_dir = store.dir().to_path_buf();
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let options_interval = Duration::from_millis(args.round_interval_ms.max(1));
    let options = online_options(args.round_size.max(1), options_interval);
    let status_every = Duration::from_secs(args.status_every.max(1));
    let final_status = runtime.block_on(async {
        let handle = proxy::start(config.clone()).await.context("the proxy could not start")?;
        eprintln!(
            "krait serve: clients connect to {}, database at {}, history log in {}, reject reports in {}",
            handle.listen_addr(),
            config.upstream.address,
            config.log.path.display(),
            reports_dir.display()
        );
        if let Some(admin) = handle.admin_addr() {
            eprintln!(
                "krait serve: admin server at http://{admin}/ (the verifier's state and lag are in /metrics \
                 and /api/status)"
            );
        }
        let dir = reports_dir.clone();
        let tailer = Tailer::spawn(handle.log().clone(), options, Some(store), move |id, line| match id {
            Some(id) => {
                eprintln!("krait serve: {line} (report {})", dir.join(format!("{id}.json")).display())
            }
            None => eprintln!("krait serve: {line}"),
        })?;
        let mut ticker = tokio::time::interval(status_every);
        ticker.tick().await;
        let mut publisher = tokio::time::interval(PUBLISH_EVERY);
        let interval = options_interval;
        let stop = crate::cmd::proxy::shutdown_signal();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = publisher.tick() => {
                    let (s, next_seq) = (tailer.status(), handle.log().next_seq());
                    publish_status(&s, &handle.metrics().verifier, Instant::now(), interval, next_seq);
                }
                _ = ticker.tick() => {
                    let s = tailer.status();
                    eprintln!("krait serve: verifier: {}", s.line());
                    if let Some(e) = s.error {
                        eprintln!("krait serve: the verifier stopped: {e}");
                    }
                }
            }
        }
        eprintln!("krait serve: shutting down");
        handle.shutdown().await.context("the proxy stopped with an error")?;
        tokio::task::spawn_blocking(move || tailer.finish()).await.context("the verifier thread failed")?
    })?;
    eprintln!("krait serve: stopped; verifier: {}", final_status.line());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use history::log::{HistoryLog, LoggedOp, LoggedTxn};
    use history::{Durability, KeyName, Observed, Outcome, SessionId, SledLog, TxnId, WriteId};

    use super::*;

    fn key(name: &str) -> KeyName {
        KeyName { namespace: "accounts".into(), bytes: name.as_bytes().to_vec() }
    }

    /// A transaction that reads `x` and `y` at their initial versions and writes `writes`.
    fn skewed(id: u64, session: u64, writes: &str, write: u64) -> LoggedTxn {
        let mut t = LoggedTxn::new(TxnId(id), SessionId(session), 0);
        t.statements.push(format!("UPDATE accounts SET v = v - 1 WHERE k = '{writes}'"));
        for k in ["x", "y"] {
            t.ops.push(LoggedOp::Read { key: key(k), observed: Observed::PreHistory(0), stmt: Some(0) });
        }
        t.ops.push(LoggedOp::Write { key: key(writes), write: WriteId(write), stmt: Some(0) });
        t
    }

    #[test]
    fn a_write_skew_in_the_log_is_rejected_and_its_report_stored() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = SledLog::open(dir.path().join("log"), Durability::Strict).expect("the log opens");
        let _durable_with_the_outcome = log.append_intent(skewed(1, 1, "x", 11)).expect("intent");
        let _durable_with_the_outcome = log.append_intent(skewed(2, 2, "y", 12)).expect("intent");
        // Only T1's outcome is logged so far: T2 must wait for its outcome, not be verified as it stands.
        log.append_outcome(TxnId(1), Outcome::Committed, Some(10)).expect("outcome").wait().expect("durable");
        let store = ReportStore::open(dir.path()).expect("a report store");
        let mut feeder = Feeder::new(online_options(1_000, Duration::from_secs(3600)), Some(store.clone()));
        assert_eq!(feeder.read_log(&log, usize::MAX).expect("reads"), 3);
        let s = feeder.status();
        assert_eq!((s.txns_read, s.ops_read, s.verified), (1, 3, 0));
        assert_eq!(s.lag_txns, 1);

        log.append_outcome(TxnId(2), Outcome::Committed, Some(20)).expect("outcome").wait().expect("durable");
        assert_eq!(feeder.read_log(&log, usize::MAX).expect("reads"), 1);
        feeder.finish().expect("a last round");
        let s = feeder.status();
        assert_eq!((s.txns_read, s.verified, s.rejects, s.lag_txns), (2, 2, 1, 0));
        let rejects = feeder.new_rejects();
        assert_eq!(rejects.len(), 1);
        assert!(rejects[0].1.starts_with("REJECT"), "{}", rejects[0].1);
        let id = rejects[0].0.clone().expect("the report was stored");
        assert!(!store.load(&id).expect("the stored report loads").is_accept());
        assert!(feeder.new_rejects().is_empty(), "each reject is announced once");
    }

    #[test]
    fn serial_transactions_are_accepted_and_a_recovery_record_releases_pending_intents() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = SledLog::open(dir.path().join("log"), Durability::Strict).expect("the log opens");
        // T1 writes x; T2 (same session, later) reads T1's x and writes y: serial, accepted.
        let mut t1 = LoggedTxn::new(TxnId(1), SessionId(1), 0);
        t1.ops.push(LoggedOp::Write { key: key("x"), write: WriteId(11), stmt: None });
        log.append_finished(t1, Outcome::Committed, Some(10)).expect("finished").wait().expect("durable");
        let mut t2 = LoggedTxn::new(TxnId(2), SessionId(1), 1);
        t2.ops.push(LoggedOp::Read { key: key("x"), observed: Observed::Version(WriteId(11)), stmt: None });
        t2.ops.push(LoggedOp::Write { key: key("y"), write: WriteId(12), stmt: None });
        let _durable_with_the_outcome = log.append_intent(t2).expect("intent");
        // The proxy closes with T2's COMMIT in flight: the log lists it as indeterminate.
        log.close().expect("a clean close");
        let mut feeder = Feeder::new(online_options(1, Duration::from_secs(3600)), None);
        feeder.read_log(&log, usize::MAX).expect("reads");
        feeder.finish().expect("a last round");
        let s = feeder.status();
        assert_eq!((s.txns_read, s.verified, s.rejects), (2, 2, 0), "{s:?}");
        assert!(s.rounds >= 2, "one round per transaction at round size 1: {s:?}");
    }

    #[test]
    fn reading_is_bounded_per_call() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = SledLog::open(dir.path().join("log"), Durability::Strict).expect("the log opens");
        for i in 0..10 {
            let t = LoggedTxn::new(TxnId(i + 1), SessionId(1), i);
            log.append_finished(t, Outcome::Committed, None).expect("finished").wait().expect("durable");
        }
        let mut feeder = Feeder::new(online_options(1_000, Duration::from_secs(3600)), None);
        assert_eq!(feeder.read_log(&log, 4).expect("reads"), 4);
        assert_eq!(feeder.status().lag_txns, 10, "4 read but unverified, 6 not read yet");
        assert_eq!(feeder.read_log(&log, 100).expect("reads"), 6);
        assert_eq!(feeder.read_log(&log, 100).expect("reads"), 0);
    }

    /// A logged transaction of `session` at position `seq` with the given ops.
    fn logged(id: u64, session: u64, seq: u64, ops: Vec<LoggedOp>, fence: bool) -> LoggedTxn {
        let mut t = LoggedTxn::new(TxnId(id), SessionId(session), seq);
        t.ops = ops;
        t.fence = fence;
        t
    }

    fn read(k: &str, observed: Observed) -> LoggedOp {
        LoggedOp::Read { key: key(k), observed, stmt: None }
    }

    fn write(k: &str, w: u64) -> LoggedOp {
        LoggedOp::Write { key: key(k), write: WriteId(w), stmt: None }
    }

    /// Session 3 runs one transaction (left as an intent with no outcome when `orphan`) and goes quiet;
    /// session 1 writes x twice; then ten fences alternate between sessions 1 and 2. Returns the feeder
    /// after a last round.
    fn quiet_session(end: bool, orphan: bool) -> Feeder {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = SledLog::open(dir.path().join("log"), Durability::Strict).expect("the log opens");
        let quiet = logged(1, 3, 0, vec![write("s", 7)], false);
        if orphan {
            let _ = log.append_intent(quiet).expect("intent");
        } else {
            let _ = log.append_finished(quiet, Outcome::Committed, Some(1)).expect("finished");
        }
        if end {
            let _ = log.append_session_ended(SessionId(3), Some(0)).expect("session ended");
        }
        let t2 = logged(2, 1, 0, vec![write("x", 1)], false);
        let _ = log.append_finished(t2, Outcome::Committed, Some(2)).expect("finished");
        let t3 = logged(3, 1, 1, vec![read("x", Observed::Version(WriteId(1))), write("x", 2)], false);
        let _ = log.append_finished(t3, Outcome::Committed, Some(3)).expect("finished");
        append_fence_chain(&log, [(1, 2), (2, 0)]);
        let options = RoundOptions { round_size: 2, round_interval: None, ..RoundOptions::default() };
        let mut feeder = Feeder::new(options, None);
        feeder.read_log(&log, usize::MAX).expect("reads");
        feeder.finish().expect("a last round");
        feeder
    }

    /// Ten committed fences (transactions 10–19), alternating between two sessions given as (session, seq
    /// of its first fence), each reading the fence row the one before wrote; then waits until durable.
    fn append_fence_chain(log: &SledLog, sessions: [(u64, u64); 2]) {
        let mut next_seq = sessions.map(|(_, seq)| seq);
        for i in 0..10u64 {
            let s = (i % 2) as usize;
            let prev =
                if i == 0 { Observed::PreHistory(0) } else { Observed::Version(WriteId(1000 + i - 1)) };
            let ops = vec![read("F", prev), write("F", 1000 + i)];
            let fence = logged(10 + i, sessions[s].0, next_seq[s], ops, true);
            next_seq[s] += 1;
            let _ = log.append_finished(fence, Outcome::Committed, Some(10 + i)).expect("finished");
        }
        log.sync().expect("durable");
    }

    #[test]
    fn published_lag_grows_between_ticks_and_says_when_behind() {
        let metrics = proxy::Metrics::default();
        let v = &metrics.verifier;
        let g = proxy::Metrics::get;
        let start = Instant::now();
        let status = Status {
            log_records: 10,
            records_read: 10,
            lag_txns: 4,
            oldest_unverified: Some(start),
            ..Status::default()
        };
        let interval = Duration::from_millis(200);
        publish_status(&status, v, start + Duration::from_millis(500), interval, 10);
        assert_eq!((g(&v.attached), g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (1, 4, 500, 0));
        // No new tick, but time passed and records were appended: the lag grows and the verifier is behind.
        publish_status(&status, v, start + Duration::from_secs(3), interval, 13);
        assert_eq!((g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (7, 3_000, 1));
        let caught_up = Status { lag_txns: 0, oldest_unverified: None, ..status };
        publish_status(&caught_up, v, start + Duration::from_secs(4), interval, 10);
        assert_eq!((g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (0, 0, 0));
    }

    /// Session 3 runs one transaction and the proxy crashes before the session ends (no SessionEnded
    /// record); after the restart (a Recovery record) sessions 4 and 5 run ten fences. Without the restart
    /// rule session 3 would hold `epoch_agree` at 0 for ever.
    #[test]
    fn sessions_open_at_a_crash_end_at_the_recovery_record() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("log");
        let log = SledLog::open(&path, Durability::Strict).expect("the log opens");
        let quiet = logged(1, 3, 0, vec![write("s", 7)], false);
        log.append_finished(quiet, Outcome::Committed, Some(1)).expect("finished").wait().expect("durable");
        log.drop_as_if_crashed();
        let log = SledLog::open(&path, Durability::Strict).expect("the log reopens after the crash");
        let t2 = logged(2, 4, 0, vec![write("x", 1)], false);
        let _ = log.append_finished(t2, Outcome::Committed, Some(2)).expect("finished");
        let t3 = logged(3, 4, 1, vec![read("x", Observed::Version(WriteId(1))), write("x", 2)], false);
        let _ = log.append_finished(t3, Outcome::Committed, Some(3)).expect("finished");
        append_fence_chain(&log, [(4, 2), (5, 0)]);
        let options = RoundOptions { round_size: 2, round_interval: None, ..RoundOptions::default() };
        let mut feeder = Feeder::new(options, None);
        feeder.read_log(&log, usize::MAX).expect("reads");
        feeder.finish().expect("a last round");
        let (agree, deleted) = (feeder.verifier.epoch_agree(), feeder.verifier.deleted());
        assert!(agree >= 8 && deleted > 0, "epoch_agree {agree}, deleted {deleted}");
        assert_eq!(feeder.status().txns_read, 13);
        assert!(feeder.new_rejects().is_empty());
    }

    #[test]
    fn a_session_ended_record_lets_collection_advance_past_a_quiet_session() {
        let stalled = quiet_session(false, false);
        assert_eq!((stalled.verifier.epoch_agree(), stalled.verifier.deleted()), (0, 0), "no end: stalled");
        for orphan in [false, true] {
            let mut ended = quiet_session(true, orphan);
            let (agree, deleted) = (ended.verifier.epoch_agree(), ended.verifier.deleted());
            assert!(agree >= 8 && deleted > 0, "orphan {orphan}: epoch_agree {agree}, deleted {deleted}");
            // The quiet session's transaction was fed (as Indeterminate when its outcome never came).
            assert_eq!(ended.status().txns_read, 13, "orphan {orphan}");
            assert!(ended.pending.is_empty(), "orphan {orphan}");
            assert!(ended.new_rejects().is_empty(), "orphan {orphan}");
        }
    }
}
