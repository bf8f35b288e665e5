//! Counters the admin server exposes on /metrics and /api/status. Plain atomics: sessions bump them on the
//! data path, so they must cost nothing to update.

use std::sync::atomic::{AtomicU64, Ordering};

/// Process-wide proxy counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Client connections accepted.
    pub connections_total: AtomicU64,
    /// Client connections open now.
    pub connections_active: AtomicU64,
    /// Transactions recorded as committed.
    pub txns_committed: AtomicU64,
    /// Transactions recorded as aborted.
    pub txns_aborted: AtomicU64,
    /// Transactions recorded as indeterminate.
    pub txns_indeterminate: AtomicU64,
    /// Committed transactions whose commit reached the client without waiting for the log's fsync,
    /// because they wrote nothing (every op a recorded read).
    pub read_only_commits_unwaited: AtomicU64,
    /// Connections to the database that failed, or that the database closed unexpectedly.
    pub upstream_errors: AtomicU64,
    /// Clients closed for sending bytes that are not the protocol (or too large).
    pub client_protocol_errors: AtomicU64,
    /// Failed TLS handshakes with clients.
    pub tls_handshake_errors: AtomicU64,
    /// Sessions whose reply matching lost track (they keep running, unrecorded).
    pub desyncs: AtomicU64,
    /// Sessions to a database other than the recorded one (`[upstream] database`), relayed unrecorded.
    pub sessions_other_database: AtomicU64,
    /// Failed appends to the history log.
    pub log_errors: AtomicU64,
    /// Transactions recorded without a known isolation level (the session's default could not be learnt,
    /// or was set in a way the proxy cannot read; see `isolation`).
    pub isolation_unknown: AtomicU64,
    /// CancelRequests relayed to the database.
    pub cancels_relayed: AtomicU64,
    /// Log records this start replayed to seed the version book (see `interpret::versions::seed`).
    pub start_records_replayed: AtomicU64,
    /// 1 when this start seeded the version book from a checkpoint and the records after it, 0 when it
    /// replayed the whole log.
    pub start_from_checkpoint: AtomicU64,
    /// Bytes the live sessions' read and send buffers hold, summed (a gauge; see `session::buffers`).
    pub session_buffer_bytes: AtomicU64,
    /// The co-located verifier's progress, when one runs (`krait serve`).
    pub verifier: VerifierMetrics,
    /// What retention deleted from the log (`[log.retain]`, under `krait serve`).
    pub retention: RetentionMetrics,
    /// The log shipper's counters, when `[ship]` is on.
    pub shipping: std::sync::OnceLock<std::sync::Arc<ship::Counters>>,
}

/// What a co-located online verifier publishes for /metrics and /api/status (`krait serve` updates it from
/// its verifier thread; the proxy only reads it). All zero, and not shown, until `attached` is set.
#[derive(Debug, Default)]
pub struct VerifierMetrics {
    /// 1 once a verifier publishes here.
    pub attached: AtomicU64,
    /// Transactions verified by completed rounds.
    pub verified: AtomicU64,
    /// Recorded transactions not verified yet (read but waiting for a round, plus log records not read).
    pub lag_txns: AtomicU64,
    /// How long the oldest transaction not yet verified has waited, in milliseconds.
    pub lag_ms: AtomicU64,
    /// 1 when the verifier has fallen behind the recorded load.
    pub behind: AtomicU64,
    /// Rounds run.
    pub rounds: AtomicU64,
    /// Reject reports found.
    pub rejects: AtomicU64,
    /// Transactions held after the last garbage collection.
    pub live: AtomicU64,
    /// Versions the verifier knows by write id (live, base, tombstones).
    pub known_versions: AtomicU64,
    /// Reads the verifier could not judge and left out (`verifier::online::Status::reads_not_judged`).
    pub reads_not_judged: AtomicU64,
    /// The same by cause (`verifier::UnverifiableCause::as_str`), causes with none left out.
    pub reads_not_judged_by_cause: std::sync::Mutex<Vec<(&'static str, u64)>>,
    /// The log records the verifier's last stored checkpoint covers (a restart reads on from there); 0
    /// before it stores one.
    pub checkpoint_covers: AtomicU64,
    /// The isolation level the verifier checks (`declared`, `serializable`, …), once it says.
    pub level: std::sync::OnceLock<String>,
    /// 1 while the verifier collects garbage between rounds: at a level that does (serializability, and
    /// `declared` until a transaction asks for less), until collection stops for good.
    pub collects_garbage: AtomicU64,
    /// Why garbage collection stopped for good, once it did (epochs broke, or under `declared` a transaction
    /// asked for less than SERIALIZABLE).
    pub gc_stopped: std::sync::OnceLock<String>,
}

/// What retention did to the log (`history::log::retention`); `krait serve` updates it.
#[derive(Debug, Default)]
pub struct RetentionMetrics {
    /// Segment files deleted.
    pub segments_deleted: AtomicU64,
    /// Their bytes.
    pub bytes_deleted: AtomicU64,
    /// The first record a reader still needs (the smallest of the checkpoints and the shipper): nothing
    /// from here on may be deleted.
    pub needed_from: AtomicU64,
}

impl VerifierMetrics {
    /// Sets a gauge.
    pub fn set(gauge: &AtomicU64, value: u64) {
        gauge.store(value, Ordering::Relaxed);
    }
}

impl Metrics {
    /// Adds one to a counter.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Transactions recorded, whatever the outcome.
    pub fn txns_recorded(&self) -> u64 {
        Self::get(&self.txns_committed) + Self::get(&self.txns_aborted) + Self::get(&self.txns_indeterminate)
    }
}

/// Keeps `connections_active` right however a session ends.
pub(crate) struct ActiveConnection<'a>(&'a Metrics);

impl<'a> ActiveConnection<'a> {
    pub(crate) fn new(m: &'a Metrics) -> Self {
        Metrics::inc(&m.connections_total);
        Metrics::inc(&m.connections_active);
        ActiveConnection(m)
    }
}

impl Drop for ActiveConnection<'_> {
    fn drop(&mut self) {
        self.0.connections_active.fetch_sub(1, Ordering::Relaxed);
    }
}
