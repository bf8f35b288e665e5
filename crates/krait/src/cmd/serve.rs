//! `krait serve`: the recording proxy and a co-located online verifier in one process (DESIGN.md §2).
//!
//! The proxy appends what it records to its history log; the verifier ([`verifier::online::Tailer`]) runs on
//! its own OS thread, tails that log, verifies in rounds (Cobra §4, §6.2) and writes reject reports into
//! `DATA_DIR/reports/`. This command only wires the two together and reports what they do.
//!
//! The proxy's admin server is the proxy crate's; this command publishes the verifier's state into it every
//! quarter second ([`Publisher`]): `/metrics` and `/api/status` show the transactions verified, the lag
//! in transactions and in seconds, and whether the verifier has fallen behind. It also prints a status line
//! (transactions recorded and verified, lag, rounds, rejects) to stderr every few seconds. The admin server's
//! status page (`/`) links to the reports, and `/reports/ID` shows each as HTML ([`StoredReports`]).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use verifier::online::{MAX_RECORDS_PER_TICK, Status, Tailer};
use verifier::{Level, ReportStore, RoundOptions};

use crate::cmd::report::StoredReports;

/// Arguments of `krait serve`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Stop it with Ctrl-C or SIGTERM: the proxy records open transactions and closes its log, then \
                  the verifier reads the rest of the log, runs a last round and exits. If it is still verifying \
                  after --stop-grace seconds, or at a second Ctrl-C or SIGTERM, it stops at its next tick and \
                  says how many transactions it left unverified; they are all in the log, and the next \
                  `krait serve` on it (or `krait verify`) checks them."
)]
pub struct ServeArgs {
    /// The proxy's configuration file (see configs/krait.toml). With --verify-only it is optional, and only
    /// its `[verify] level` is read.
    #[arg(long, short, value_name = "FILE", required_unless_present = "verify_only")]
    pub(crate) config: Option<PathBuf>,
    /// Where reject reports go (`DATA_DIR/reports/`). Defaults to the directory that holds the log directory
    /// (with --verify-only, the current directory, where the verifier also keeps its checkpoint,
    /// `verifier.checkpoint`, from which a restart resumes).
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Run no proxy: verify the logs that proxies at many edges ship to NATS JetStream (their `[ship]`
    /// section), merged into one history (DESIGN.md §4). Needs --source.
    #[arg(long, requires = "source")]
    pub(crate) verify_only: bool,
    /// With --verify-only: the NATS server the proxies ship to, `nats://host:port`.
    #[arg(long, value_name = "URL", requires = "verify_only")]
    pub(crate) source: Option<String>,
    /// With --verify-only: the JetStream stream the proxies ship to (their `[ship] stream`).
    #[arg(long, default_value = ship::DEFAULT_STREAM, value_name = "NAME")]
    pub(crate) stream: String,
    /// With --verify-only: the collector ids (`[log] collector`) of every proxy, comma-separated. A
    /// transaction is verified only once every listed proxy has shipped what it recorded up to then, so
    /// that a read of another proxy's write is never taken for a read of an older version. Without it, the
    /// proxies that have shipped anything when a transaction arrives are the ones waited for.
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    pub(crate) collectors: Vec<u32>,
    /// With --verify-only: the most the proxies' clocks may disagree, in milliseconds. It widens the wait
    /// for the other proxies' records, and is the drift allowed for real-time order under
    /// `strict-serializable`.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub(crate) drift_ms: u64,
    /// With --verify-only: proxies whose clock has an error bound of its own, as COLLECTOR=MS
    /// (comma-separated), for a proxy whose clock is known to be worse (or better) than the others. A
    /// transaction waits for proxy b's records up to its own proxy a's time plus error(a) + error(b), and
    /// real-time order needs timestamps that far apart; a proxy not named is within half of --drift-ms.
    #[arg(long, value_delimiter = ',', value_name = "C=MS", requires = "verify_only")]
    pub(crate) clock_error_ms: Vec<crate::cmd::clocks::ClockError>,
    /// With --verify-only: how long to wait, in seconds, for a proxy's records that later ones overtook
    /// (a shipper that reconnected sends again what a broken connection lost). If they have not come by
    /// then (a stream that lost them, or limits that dropped them), verification goes on without them:
    /// reads of versions they may have written count as unverifiable, never as violations, and the status
    /// lists the hole. 0 waits for ever.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub(crate) skip_holes_after: u64,
    /// With --verify-only: serve the verifier's state, and each proxy's (records, events held back, how
    /// long it has been silent), as JSON on `http://ADDR/api/status`.
    #[arg(long, value_name = "ADDR", requires = "verify_only")]
    pub(crate) admin: Option<std::net::SocketAddr>,
    /// Seconds between status lines on stderr.
    #[arg(long, default_value_t = 5, value_name = "S")]
    pub(crate) status_every: u64,
    /// Transactions per verification round (a round also runs every --round-interval-ms).
    #[arg(long, default_value_t = 2_000)]
    pub(crate) round_size: usize,
    /// The longest time between rounds while transactions wait, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) round_interval_ms: u64,
    /// The isolation level to check; overrides the configuration's `[verify] level`. The default,
    /// `declared`, holds each transaction to the level it asked for. `serializable`,
    /// `strict-serializable` and `declared` collect garbage between rounds, `declared` until a transaction
    /// asks for REPEATABLE READ; at the other levels the verifier keeps every transaction, so its memory and
    /// each round's time grow with the history.
    #[arg(long, value_enum)]
    pub(crate) level: Option<crate::cmd::verify::LevelArg>,
    /// On Ctrl-C or SIGTERM, how long the verifier may go on verifying what the log still holds before it
    /// stops with the rest unverified (the log keeps it). A second signal stops it at once.
    #[arg(long, default_value_t = 30, value_name = "S")]
    pub(crate) stop_grace: u64,
}

/// The level `serve` checks: `--level`, else the configuration's `[verify] level`, else `declared`.
pub(crate) fn chosen_level(args: &ServeArgs, config: Option<&proxy::Config>) -> anyhow::Result<Level> {
    if let Some(arg) = args.level {
        return Ok(arg.into());
    }
    match config.and_then(|c| c.verify.level.as_ref()) {
        None => Ok(Level::Declared),
        Some(name) => name.parse::<Level>().map_err(|e| {
            let path = args.config.as_deref().unwrap_or(Path::new("the configuration"));
            anyhow::anyhow!("{}: [verify] level: {e}", path.display())
        }),
    }
}

/// How often `serve` publishes the verifier's state to the admin server's `/metrics` and `/api/status`.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// Publishes the verifier's state into the proxy's metrics, for `/metrics` and `/api/status`, and keeps the
/// one clock the verifier cannot keep: since when log records have waited unread.
/// How many publishes [`Publisher`] remembers while the verifier has not read their records.
const MAX_SEEN: usize = 4096;

#[derive(Debug, Default)]
pub struct Publisher {
    /// What the log held at each publish since the oldest one whose records the verifier has not all read:
    /// (when, the log's next sequence number then). The first entry tells since when the oldest unread
    /// record has waited: it was there by that publish.
    seen: VecDeque<(Instant, u64)>,
    /// The lag last published, in time and in transactions, for the status lines on stderr.
    last: (Duration, u64),
}

impl Publisher {
    /// Publishes `status` as of `now`. The lag is told from `now` (not from the verifier's last tick), so it
    /// keeps growing while a long round runs; `log_next_seq` counts log records appended since that tick as
    /// not yet verified. Records the verifier has not read have no time of their own in its status, so the
    /// lag is at least how long records have waited unread: a verifier stuck in a long round, or one that
    /// has read nothing of a backlog yet, would otherwise show a lag of 0 s with thousands of transactions
    /// behind. The verifier is behind when the lag exceeds two round intervals and a second (a round should
    /// verify a transaction within one interval), or when more records wait unread than one tick reads.
    pub fn publish(
        &mut self,
        status: &Status,
        metrics: &proxy::metrics::VerifierMetrics,
        now: Instant,
        round_interval: Duration,
        log_next_seq: u64,
    ) {
        use proxy::metrics::VerifierMetrics as V;
        if self.seen.back().is_none_or(|&(_, seq)| seq < log_next_seq) {
            self.seen.push_back((now, log_next_seq));
        }
        while self.seen.front().is_some_and(|&(_, seq)| seq <= status.records_read) {
            self.seen.pop_front();
        }
        if self.seen.len() > MAX_SEEN {
            // Far behind: keep the oldest entry, which alone sets the lag, and forget one after it.
            self.seen.remove(1);
        }
        let unread_since = self.seen.front().map(|&(at, _)| at);
        let oldest = match (status.oldest_unverified, unread_since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let lag = oldest.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        let unread = log_next_seq.saturating_sub(status.log_records.max(status.records_read));
        let lag_txns = status.lag_txns + unread;
        let behind = lag > round_interval * 2 + Duration::from_secs(1)
            || log_next_seq.saturating_sub(status.records_read) > MAX_RECORDS_PER_TICK as u64;
        self.last = (lag, lag_txns);
        V::set(&metrics.verified, status.verified);
        V::set(&metrics.lag_txns, lag_txns);
        V::set(&metrics.lag_ms, lag.as_millis() as u64);
        V::set(&metrics.behind, u64::from(behind));
        V::set(&metrics.rounds, status.rounds);
        V::set(&metrics.rejects, status.rejects);
        V::set(&metrics.live, status.live);
        V::set(&metrics.known_versions, status.known_versions);
        V::set(&metrics.reads_not_judged, status.reads_not_judged);
        let by_cause = status.reads_not_judged_by_cause.iter().map(|(c, n)| (c.as_str(), *n)).collect();
        *metrics.reads_not_judged_by_cause.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            by_cause;
        V::set(&metrics.checkpoint_covers, status.checkpoint_covers.unwrap_or(0));
        V::set(&metrics.attached, 1);
    }

    /// `status` with the lag last published, so that a status line says what `/metrics` says.
    pub fn with_lag(&self, mut status: Status) -> Status {
        (status.lag, status.lag_txns) = self.last;
        status
    }
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
    if args.verify_only {
        return crate::cmd::serve_many::run(args);
    }
    let Some(config_path) = args.config.clone() else {
        anyhow::bail!("krait serve needs --config (or --verify-only with --source)");
    };
    let config = crate::cmd::proxy::load_config(&config_path)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| default_data_dir(&config.log.path));
    let store = ReportStore::open(&data_dir)
        .with_context(|| format!("cannot open the reports directory in {}", data_dir.display()))?;
    let reports_dir = store.dir().to_path_buf();
    let runtime = config.listen.runtime().context("cannot start the async runtime")?;
    let options_interval = Duration::from_millis(args.round_interval_ms.max(1));
    let level = chosen_level(&args, Some(&config))?;
    let mut options = RoundOptions::online(args.round_size.max(1), options_interval);
    options.verify.level = level;
    let status_every = Duration::from_secs(args.status_every.max(1));
    let stop_grace = Duration::from_secs(args.stop_grace);
    let final_status = runtime.block_on(async {
        let extras = proxy::StartOptions {
            reports: Some(Arc::new(StoredReports(store.clone()))),
            local_verifier: true,
        };
        let handle = proxy::start_with(config.clone(), extras).await.context("the proxy could not start")?;
        eprintln!(
            "krait serve: clients connect to {}, database at {}, history log in {}, reject reports in {}",
            handle.listen_addr(),
            config.upstream.address,
            config.log.path.display(),
            reports_dir.display()
        );
        eprintln!("krait serve: the verifier checks {}{}", level.name(), match level {
            Level::Declared => {
                " (garbage collection runs while every transaction asks for SERIALIZABLE or READ COMMITTED; \
                 the first that asks for REPEATABLE READ stops it, and the verifier then keeps every transaction)"
            }
            _ if level.collects_garbage() => "",
            _ => {
                " (garbage collection runs only for serializable, strict-serializable and declared: the verifier \
                 keeps every transaction, so its memory grows with the history)"
            }
        });
        let verifier_metrics = &handle.metrics().verifier;
        let _ = verifier_metrics.level.set(level.name().to_owned());
        proxy::metrics::VerifierMetrics::set(
            &verifier_metrics.collects_garbage,
            u64::from(level.collects_garbage()),
        );
        if let Some(admin) = handle.admin_addr() {
            eprintln!(
                "krait serve: admin server at http://{admin}/ (a status page with links to the reports; the \
                 verifier's state and lag are also in /metrics and /api/status)"
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
        let mut published = Publisher::default();
        let interval = options_interval;
        let stop = crate::cmd::proxy::shutdown_signal();
        tokio::pin!(stop);
        // A failed log ends the proxy as a signal does, but the exit says so (see `proxy::run`).
        let mut log_failure = None;
        let (mut announced, mut checkpoint_error, mut warned_gc) = (false, None, false);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                reason = handle.log_failed() => {
                    eprintln!("krait serve: the history log failed, stopping: {reason}");
                    log_failure = Some(reason);
                    break;
                }
                _ = publisher.tick() => {
                    let (s, next_seq) = (tailer.status(), handle.log().next_seq());
                    published.publish(&s, &handle.metrics().verifier, Instant::now(), interval, next_seq);
                    if !announced && let Some(started) = &s.started {
                        eprintln!("krait serve: the verifier {}", started.line());
                        announced = true;
                    }
                    if !warned_gc && level.collects_garbage() && let Some(why) = &s.gc_stopped {
                        warned_gc = true;
                        proxy::metrics::VerifierMetrics::set(&handle.metrics().verifier.collects_garbage, 0);
                        let _ = handle.metrics().verifier.gc_stopped.set(why.clone());
                        eprintln!(
                            "krait serve: garbage collection stopped ({why}); the verifier now keeps every \
                             transaction, so its memory grows with the history"
                        );
                    }
                    if s.checkpoint_error != checkpoint_error {
                        if let Some(e) = &s.checkpoint_error {
                            eprintln!("krait serve: the verifier goes on without a new checkpoint: {e}");
                        }
                        checkpoint_error = s.checkpoint_error;
                    }
                }
                _ = ticker.tick() => {
                    let s = published.with_lag(tailer.status());
                    eprintln!("krait serve: verifier: {}", s.line());
                    if let Some(e) = s.error {
                        eprintln!("krait serve: the verifier stopped: {e}");
                    }
                }
            }
        }
        eprintln!("krait serve: shutting down");
        match &log_failure {
            // Closing a failed log fails with the same reason, already said.
            Some(_) => drop(handle.shutdown().await),
            None => handle.shutdown().await.context("the proxy stopped with an error")?,
        }
        let give_up = tailer.give_up_handle();
        let finishing = tokio::task::spawn_blocking(move || tailer.finish());
        tokio::pin!(finishing);
        let grace = tokio::time::sleep(stop_grace);
        let finished = tokio::select! {
            finished = &mut finishing => finished,
            () = grace => {
                eprintln!("krait serve: still verifying after {} s, stopping at the next tick", stop_grace.as_secs());
                give_up.now();
                finishing.await
            }
            () = crate::cmd::proxy::shutdown_signal() => {
                eprintln!("krait serve: stopping the verifier at its next tick");
                give_up.now();
                finishing.await
            }
        };
        let status = finished.context("the verifier thread failed")??;
        if give_up.given_up() && status.lag_txns > 0 {
            eprintln!(
                "krait serve: about {} transactions were left unverified; they are in the history log at {}, \
                 and the next `krait serve` on it (or `krait verify`) checks them",
                status.lag_txns,
                config.log.path.display()
            );
        }
        anyhow::Ok((status, log_failure))
    })?;
    let (final_status, log_failure) = final_status;
    eprintln!("krait serve: stopped; verifier: {}", final_status.line());
    match log_failure {
        Some(reason) => {
            Err(proxy::ProxyError::LogFailed { path: config.log.path.display().to_string(), reason }.into())
        }
        None => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut p = Publisher::default();
        p.publish(&status, v, start + Duration::from_millis(500), interval, 10);
        assert_eq!((g(&v.attached), g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (1, 4, 500, 0));
        // No new tick, but time passed and records were appended: the lag grows and the verifier is behind.
        p.publish(&status, v, start + Duration::from_secs(3), interval, 13);
        assert_eq!((g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (7, 3_000, 1));
        let caught_up =
            Status { lag_txns: 0, oldest_unverified: None, log_records: 13, records_read: 13, ..status };
        p.publish(&caught_up, v, start + Duration::from_secs(4), interval, 13);
        assert_eq!((g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (0, 0, 0));
    }

    #[test]
    fn a_backlog_the_verifier_has_not_read_has_a_lag_in_seconds() {
        let metrics = proxy::Metrics::default();
        let v = &metrics.verifier;
        let g = proxy::Metrics::get;
        let start = Instant::now();
        // The verifier has read nothing of 5,000 records (stuck in a round, or just started on a backlog): its
        // status has no unverified transaction with a time.
        let nothing_read = Status::default();
        let interval = Duration::from_millis(200);
        let mut p = Publisher::default();
        p.publish(&nothing_read, v, start, interval, 5_000);
        assert_eq!((g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (5_000, 0, 0));
        p.publish(&nothing_read, v, start + Duration::from_millis(2_500), interval, 5_000);
        assert_eq!((g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (5_000, 2_500, 1));
        // Read and verified: the clock stops, and starts afresh with the next unread record.
        let read = Status { log_records: 5_000, records_read: 5_000, ..Status::default() };
        p.publish(&read, v, start + Duration::from_secs(3), interval, 5_000);
        assert_eq!((g(&v.lag_txns), g(&v.lag_ms), g(&v.behind)), (0, 0, 0));
        p.publish(&read, v, start + Duration::from_secs(4), interval, 5_001);
        p.publish(&read, v, start + Duration::from_millis(4_300), interval, 5_001);
        assert_eq!(g(&v.lag_ms), 300);
    }

    #[test]
    fn steady_traffic_that_the_verifier_keeps_up_with_has_a_lag_of_a_tick() {
        // Under pgbench, records are appended between every two publishes, so some are always unread; the
        // verifier reads each tick what the tick before saw. The lag must stay about a tick, not grow with
        // the uptime (it did: the clock started at the first unread record and never stopped).
        let metrics = proxy::Metrics::default();
        let v = &metrics.verifier;
        let g = proxy::Metrics::get;
        let start = Instant::now();
        let interval = Duration::from_millis(200);
        let mut p = Publisher::default();
        for tick in 0..100u64 {
            let read = Status { log_records: tick * 100, records_read: tick * 100, ..Status::default() };
            p.publish(&read, v, start + interval * tick as u32, interval, (tick + 1) * 100);
        }
        assert_eq!((g(&v.lag_ms), g(&v.behind)), (0, 0));
        let read = Status { log_records: 9_900, records_read: 9_900, ..Status::default() };
        p.publish(&read, v, start + interval * 100, interval, 10_000);
        assert_eq!((g(&v.lag_ms), g(&v.behind)), (200, 0));
        // Then the verifier stops reading: the lag counts from the publish that first saw the oldest record it
        // has not read (tick 99).
        for tick in 101..120u64 {
            p.publish(&read, v, start + interval * tick as u32, interval, tick * 100);
        }
        assert_eq!((g(&v.lag_ms), g(&v.behind)), (4_000, 1));
    }
}
