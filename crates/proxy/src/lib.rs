//! The Krait middlebox: it sits between unmodified PostgreSQL clients and the database, relays every byte,
//! and records each transaction in the durable history log (DESIGN.md §2–3).
//!
//! The modules follow one client's bytes:
//! - [`config`]: the TOML configuration, checked at load.
//! - [`tls`]: TLS towards clients (reloadable on SIGHUP) and towards the database.
//! - `session`: accept, TLS, startup and authentication relay, then the message loop.
//! - [`machine`]: the pure state machine that matches every reply to its request and finds transaction
//!   boundaries; [`sql`] is the little keyword reading it needs, [`isolation`] the level each transaction
//!   asked for.
//! - [`interpret`]: SQL to row reads and writes with version tags (`[tagging] strategy = "xmin"`, the
//!   default), reply stripping, and fence injection.
//! - `recorded_database`: which database the history records; sessions to others pass unrecorded.
//! - [`recorder`]: intents and outcomes to the history log, with the durability wait.
//! - `admin`: `/healthz`, `/metrics`, `/api/status`, and [`status_page`]'s `/` and `/reports/ID`.
//!
//! The `krait` binary calls [`run`] and [`check_config`]; tests call [`start`] to get the bound addresses.

pub mod admin;
pub mod config;
pub mod interpret;
pub mod isolation;
pub mod machine;
pub mod metrics;
mod recorded_database;
pub mod recorder;
pub mod replies;
pub mod retention;
mod session;
pub mod sql;
pub mod status_page;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use history::CollectorId;
use history::log::{DiskLog, HistoryLog, LogError, LogOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use config::{Config, ConfigError, check_config};
pub use metrics::Metrics;
pub use recorded_database::RECORDED_DATABASE_CHECKPOINT;

use crate::recorded_database::RecordedDatabase;
use crate::session::Shared;

/// Why the proxy could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// TLS material could not be loaded.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The history log could not be opened or closed.
    #[error("history log {path}: {source}")]
    Log {
        /// The log directory.
        path: String,
        /// What failed.
        source: LogError,
    },
    /// The history log stopped after a failed write or fsync (a full disk, an I/O error), so the proxy
    /// stopped too: it could record nothing more, and acknowledged nothing it had not recorded.
    #[error(
        "history log {path} failed: {reason}. Nothing after the failure was acknowledged to a client. Fix the \
         cause (on a full disk, free some space) and start the proxy again: the log recovers when it is opened"
    )]
    LogFailed {
        /// The log directory.
        path: String,
        /// What failed.
        reason: String,
    },
    /// `[upstream] database` names another database than the one the log records.
    #[error(
        "the history log records database {recorded:?}, and [upstream] database says {configured:?}: one \
         history holds one database. Give this database a log of its own ([log] path)"
    )]
    OtherDatabase {
        /// The database the log records.
        recorded: String,
        /// The database the configuration names.
        configured: String,
    },
    /// A listening socket could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The accept loop failed.
    #[error("proxy task failed: {0}")]
    Task(String),
}

/// A started proxy: its addresses, its log and metrics, and the way to stop it.
pub struct ProxyHandle {
    listen_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    log: Arc<dyn HistoryLog>,
    metrics: Arc<Metrics>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    accept_task: JoinHandle<()>,
    shipper: Option<ship::Shipper>,
    retention: Option<JoinHandle<()>>,
}

impl ProxyHandle {
    /// Where clients connect (the real port when the config said port 0).
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    /// Where the admin server listens, if enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The history log the proxy writes.
    pub fn log(&self) -> &Arc<dyn HistoryLog> {
        &self.log
    }

    /// The proxy's counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// How many client cancel keys the proxy holds: one per authenticated session still open, so a number
    /// that outlives its sessions is a leak.
    pub fn cancel_keys_held(&self) -> usize {
        self.shared.cancel_keys.lock().map_or(0, |k| k.len())
    }

    /// Resolves once the history log has stopped after a failed write or fsync, with the reason. From then
    /// on every session is refused or closed with an error, so a caller that runs the proxy as a service
    /// should stop it ([`run`] does) and let its supervisor start it again.
    pub async fn log_failed(&self) -> String {
        loop {
            if let Some(reason) = self.log.failure() {
                return reason;
            }
            tokio::time::sleep(LOG_FAILURE_POLL).await;
        }
    }

    /// Re-reads the client TLS certificate and key (what SIGHUP does).
    pub fn reload_tls(&self) -> Result<(), tls::TlsError> {
        match &self.shared.tls {
            Some(t) => t.reload(),
            None => Ok(()),
        }
    }

    /// Stops accepting, ends every session (recording their open transactions), waits up to five seconds for
    /// them, and closes the log cleanly.
    pub async fn shutdown(self) -> Result<(), ProxyError> {
        if let Some(retention) = &self.retention {
            retention.abort();
        }
        let _ = self.stop.send(true);
        let _ = self.accept_task.await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Metrics::get(&self.metrics.connections_active) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let log = self.log.clone();
        let path = self.shared.config.log.path.display().to_string();
        let closed = tokio::task::spawn_blocking(move || log.close())
            .await
            .map_err(|e| ProxyError::Task(e.to_string()))?
            .map_err(|source| ProxyError::Log { path, source });
        // Closed, the log holds everything durably: ship the rest now rather than at the next start.
        if let Some(shipper) = self.shipper {
            shipper.finish(SHIP_GRACE).await;
        }
        closed
    }
}

/// What a caller may add to a proxy beyond its configuration.
#[derive(Clone, Default)]
pub struct StartOptions {
    /// Reject reports for the admin server's status page and `/reports/ID` (`krait serve` keeps them; a
    /// bare proxy has none).
    pub reports: Option<Arc<dyn status_page::ReportPages>>,
    /// Whether an online verifier in this process reads the log and publishes its checkpoint in
    /// [`metrics::VerifierMetrics`] (`krait serve`): retention then deletes only what that checkpoint covers.
    pub local_verifier: bool,
}

/// Starts the proxy: opens the log, binds the listener and the admin server, and accepts clients in the
/// background.
pub async fn start(config: Config) -> Result<ProxyHandle, ProxyError> {
    start_with(config, StartOptions::default()).await
}

/// [`start`], with what `extras` adds.
pub async fn start_with(config: Config, extras: StartOptions) -> Result<ProxyHandle, ProxyError> {
    let tls = match config.tls.mode {
        config::ClientTlsMode::Disable => None,
        _ => Some(Arc::new(tls::ReloadableTls::load(&config.tls)?)),
    };
    let upstream_tls = tls::upstream_connector(&config)?;
    let log_path = config.log.path.clone();
    let mut options = LogOptions::new(config.log.durability);
    options.group_interval = Duration::from_millis(config.log.group_interval_ms);
    options.segment_bytes = config.log.segment_bytes;
    options.cut_every_bytes = config.log.segment_bytes / 4;
    let log: Arc<dyn HistoryLog> = {
        let path = log_path.clone();
        let opened = tokio::task::spawn_blocking(move || DiskLog::open_with(&path, options))
            .await
            .map_err(|e| ProxyError::Task(e.to_string()))?;
        Arc::new(opened.map_err(|source| ProxyError::Log { path: log_path.display().to_string(), source })?)
    };
    let recorded_database = RecordedDatabase::open(log.clone(), config.upstream.database.as_deref()).await?;
    if config.log.durability == history::log::Durability::None {
        warn!("log.durability = none: for benchmarks only; a crash can lose acknowledged transactions");
    }
    let metrics = Arc::new(Metrics::default());
    let recorder =
        Arc::new(recorder::Recorder::new(log.clone(), CollectorId(config.log.collector), metrics.clone()));
    let listener = TcpListener::bind(config.listen.address)
        .await
        .map_err(|source| ProxyError::Bind { address: config.listen.address, source })?;
    let listen_addr = listener
        .local_addr()
        .map_err(|source| ProxyError::Bind { address: config.listen.address, source })?;
    let (stop, stop_rx) = watch::channel(false);

    let tagging = match config.tagging.strategy {
        interpret::StrategyName::Xmin => {
            let mut shared = interpret::shared::TaggingShared::new();
            // Every run on this log fences the same row, so that the fence chain goes on across restarts.
            let (row_log, fresh) = (log.clone(), shared.fence_row);
            let row =
                tokio::task::spawn_blocking(move || interpret::fence::fence_row_of(row_log.as_ref(), fresh))
                    .await;
            match row {
                Ok(Ok(row)) => shared.fence_row = row,
                Ok(Err(e)) => warn!(
                    "cannot keep the fence row in the log ({e}): this run fences row {fresh}, and the next run \
                     another, so the verifier's garbage collection stops at each restart"
                ),
                Err(e) => warn!("cannot read the fence row from the log: {e}"),
            }
            if config.record.values {
                let values =
                    interpret::values::ValueRecording::new(config.record.row_bytes, &config.record.redact);
                shared.values = Some(Arc::new(values));
            }
            let t = Arc::new(shared);
            if config.record.exclusive {
                t.book.assert_exclusive();
            }
            // Versions written by earlier runs into this log stay recorded versions, not pre-history; their
            // transactions own their ids again; those a crash left without an outcome are resolved by the
            // first session.
            let (seeding, seed_log, started) = (t.clone(), log.clone(), Instant::now());
            let seeded = tokio::task::spawn_blocking(move || seeding.seed(seed_log.as_ref())).await;
            match seeded {
                Ok(Ok(s)) => {
                    info!(
                        from_checkpoint = s.from_checkpoint,
                        records_replayed = s.records_replayed,
                        versions = s.versions,
                        ms = started.elapsed().as_millis() as u64,
                        "version book seeded from the log"
                    );
                    metrics.start_records_replayed.store(s.records_replayed, Ordering::Relaxed);
                    metrics.start_from_checkpoint.store(u64::from(s.from_checkpoint), Ordering::Relaxed);
                }
                Ok(Err(e)) => warn!("cannot replay the log to seed the version book: {e}"),
                Err(e) => warn!("cannot replay the log to seed the version book: {e}"),
            }
            info!(strategy = "xmin", fence_every = config.fence.every, "version tagging on");
            Some(t)
        }
        _ => None,
    };
    let admin_addr = if config.admin.enabled {
        let admin = TcpListener::bind(config.admin.address)
            .await
            .map_err(|source| ProxyError::Bind { address: config.admin.address, source })?;
        let addr = admin
            .local_addr()
            .map_err(|source| ProxyError::Bind { address: config.admin.address, source })?;
        let state = Arc::new(admin::AdminState {
            metrics: metrics.clone(),
            log: log.clone(),
            log_path: config.log.path.clone(),
            started: Instant::now(),
            listen: listen_addr,
            upstream: config.upstream.address.clone(),
            tagging: tagging.clone(),
            reports: extras.reports,
            throughput: Default::default(),
        });
        let limits = admin::Limits::from_config(&config.admin);
        tokio::spawn(admin::serve(admin, state, limits, stop_rx.clone()));
        Some(addr)
    } else {
        None
    };

    let shared = Arc::new(Shared {
        config,
        tls,
        upstream_tls,
        recorder,
        metrics: metrics.clone(),
        cancel_keys: Default::default(),
        tagging,
        recorded_database,
    });
    info!(%listen_addr, upstream = %shared.config.upstream.address, durability = %shared.config.log.durability, "krait proxy listening");
    let shipper = shared.config.ship.clone().map(|ship_config| {
        let shipper =
            ship::Shipper::spawn(log.clone(), CollectorId(shared.config.log.collector), ship_config);
        let _ = metrics.shipping.set(shipper.counters().clone());
        tokio::spawn(list_open_sessions(shared.clone(), stop_rx.clone()));
        shipper
    });
    let readers = retention::Readers { local_verifier: extras.local_verifier, shipper: shipper.is_some() };
    let retention = shared
        .config
        .log
        .retain
        .policy()
        .and_then(|policy| retention::spawn(log.clone(), metrics.clone(), policy, readers));
    let accept_task = tokio::spawn(accept_loop(listener, shared.clone(), stop_rx));
    Ok(ProxyHandle { listen_addr, admin_addr, log, metrics, shared, stop, accept_task, shipper, retention })
}

/// How long a stopping proxy's shipper may take to ship what the log still holds.
const SHIP_GRACE: Duration = Duration::from_secs(5);

/// How often [`ProxyHandle::log_failed`] looks at the log: a failed log is final, so noticing it a
/// fraction of a second late costs nothing but that fraction of refused sessions.
const LOG_FAILURE_POLL: Duration = Duration::from_millis(100);

/// How often a failing client `accept` is logged.
const ACCEPT_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// How often a shipping proxy lists its open sessions in the log ([`recorder::Recorder::list_open_sessions`]):
/// how long a verifier that lost a session's end in a hole of the shipped log waits to end it.
const OPEN_SESSIONS_INTERVAL: Duration = Duration::from_secs(5);

/// Lists the open sessions in the log every [`OPEN_SESSIONS_INTERVAL`] until the proxy stops. A failed
/// append is counted in the log's error metric, and the proxy stops on a failed log anyway.
async fn list_open_sessions(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(OPEN_SESSIONS_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = shared.recorder.list_open_sessions() {
            warn!("cannot list the open sessions in the log: {e}");
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // A failing accept repeats every 50 ms: say so once per interval, with how often it failed since.
    let mut last_warned: Option<Instant> = None;
    let mut failed_since_warning = 0u64;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        match accepted {
            Ok((tcp, peer)) => {
                tokio::spawn(session::serve(shared.clone(), tcp, peer, stop.clone()));
            }
            Err(e) => {
                // Running out of file descriptors must not end the proxy; back off and retry.
                failed_since_warning += 1;
                if last_warned.is_none_or(|at| at.elapsed() >= ACCEPT_WARNING_INTERVAL) {
                    warn!("accept failed ({failed_since_warning} times since the last warning): {e}");
                    (last_warned, failed_since_warning) = (Some(Instant::now()), 0);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Runs the proxy until `shutdown` resolves, reloading the client TLS certificate on SIGHUP.
///
/// If the history log fails (a full disk, an I/O error), the proxy stops and returns
/// [`ProxyError::LogFailed`], as PostgreSQL stops when it cannot write its WAL: nothing more could be
/// recorded, and the log cannot be written again without being reopened. A supervisor that restarts the
/// proxy (systemd's `Restart=on-failure`) brings it back once the disk has room; until then, each start
/// fails with the log's open error, which says the disk is full.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    let handle = start(config).await?;
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!("cannot watch SIGHUP, TLS reload disabled: {e}");
            None
        }
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            reason = handle.log_failed() => {
                tracing::error!("the history log failed, stopping: {reason}");
                let path = handle.shared.config.log.path.display().to_string();
                // The close fails too (the log cannot be made durable any more); the reason is the one above.
                let _ = handle.shutdown().await;
                return Err(ProxyError::LogFailed { path, reason });
            }
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                match handle.reload_tls() {
                    Ok(()) => info!("SIGHUP: TLS certificate reloaded"),
                    Err(e) => warn!("SIGHUP: TLS reload failed, keeping the old certificate: {e}"),
                }
            }
        }
    }
    info!("shutting down");
    handle.shutdown().await
}
