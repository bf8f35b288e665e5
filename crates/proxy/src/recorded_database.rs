//! Which database the history records. One history holds one database: two databases share table names
//! but not rows, and a verdict on a history mixing them would be about rows that are not the same rows.
//!
//! The recorded database is `[upstream] database`, else the first one a session sends a request to (not
//! the first it logs in to: a health check such as `pg_isready` logs in to whatever database and leaves).
//! The choice is kept in the log ([`RECORDED_DATABASE_CHECKPOINT`]) so that a restart records the same
//! database whoever connects first. Sessions to other databases are relayed unrecorded and counted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use history::log::HistoryLog;
use tracing::warn;

use crate::ProxyError;
use crate::metrics::Metrics;

/// The log's checkpoint that names the database it records.
pub const RECORDED_DATABASE_CHECKPOINT: &str = "recorded-database";

/// The database whose sessions are recorded, chosen once and kept in the log.
pub(crate) struct RecordedDatabase {
    log: Arc<dyn HistoryLog>,
    chosen: OnceLock<String>,
    /// The other databases sessions used, each named in a warning once.
    warned: Mutex<HashSet<String>>,
}

impl RecordedDatabase {
    /// The database this run records: the one the log already records, which `configured` (`[upstream]
    /// database`) must agree with; else `configured`, kept in the log; else none yet, and the first
    /// session's request chooses it. A restart must not choose another: the log would hold two databases'
    /// rows.
    pub(crate) async fn open(log: Arc<dyn HistoryLog>, configured: Option<&str>) -> Result<Self, ProxyError> {
        let read = log.clone();
        let stored = tokio::task::spawn_blocking(move || read.checkpoint(RECORDED_DATABASE_CHECKPOINT))
            .await
            .map_err(|e| ProxyError::Task(e.to_string()))?;
        let stored = match stored {
            Ok(bytes) => bytes.map(|b| String::from_utf8_lossy(&b).into_owned()),
            Err(e) => {
                warn!("cannot read which database the log records ({e}): the first session chooses it again");
                None
            }
        };
        let recorded = Self { log, chosen: OnceLock::new(), warned: Mutex::default() };
        match (stored, configured) {
            (Some(stored), Some(configured)) if stored != configured => {
                return Err(ProxyError::OtherDatabase {
                    recorded: stored,
                    configured: configured.to_owned(),
                });
            }
            (Some(stored), _) => {
                let _ = recorded.chosen.set(stored);
            }
            (None, Some(configured)) => {
                recorded.keep(configured).await;
                let _ = recorded.chosen.set(configured.to_owned());
            }
            (None, None) => {}
        }
        Ok(recorded)
    }

    /// Whether the database is chosen yet; until it is, a session's first request chooses it.
    pub(crate) fn is_chosen(&self) -> bool {
        self.chosen.get().is_some()
    }

    /// Whether sessions to `database` are recorded, choosing it (and keeping the choice in the log) if none
    /// is yet. A session to another database is counted, and its database named in a warning the first time.
    pub(crate) async fn records(&self, database: &str, metrics: &Metrics) -> bool {
        let mut chose = false;
        let recorded = self.chosen.get_or_init(|| {
            chose = true;
            database.to_owned()
        });
        if chose {
            self.keep(database).await;
        }
        if recorded == database {
            return true;
        }
        Metrics::inc(&metrics.sessions_other_database);
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.insert(database.to_owned()) {
            warn!(
                database,
                recorded = %recorded,
                "sessions to this database are relayed unrecorded: one history holds one database \
                 (set [upstream] database to choose which)"
            );
        }
        false
    }

    /// Keeps the choice in the log. Failing to is a warning, not an error: this run still records one
    /// database; only a restart may choose another.
    async fn keep(&self, database: &str) {
        let (log, bytes) = (self.log.clone(), database.as_bytes().to_vec());
        let kept =
            tokio::task::spawn_blocking(move || log.store_checkpoint(RECORDED_DATABASE_CHECKPOINT, &bytes))
                .await;
        if !matches!(kept, Ok(Ok(()))) {
            warn!(
                database,
                "cannot keep in the log which database it records: after a restart, the first session chooses again"
            );
        }
    }
}
