//! The admin HTTP server (hyper): `/healthz`, `/metrics` in the Prometheus text format, `/api/status` as
//! JSON, and for a person `/`, a status page, and `/reports/ID`, one reject report
//! ([`crate::status_page`]). It binds to loopback by default because nothing here is authenticated.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use history::log::{FSYNC_BUCKETS_US, HistoryLog};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::debug;

use crate::metrics::Metrics;
use crate::status_page::{self, PageExtras, ReportPages, Throughput};

/// What the admin endpoints report on.
pub(crate) struct AdminState {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) log: Arc<dyn HistoryLog>,
    pub(crate) log_path: PathBuf,
    pub(crate) started: Instant,
    pub(crate) listen: SocketAddr,
    pub(crate) upstream: String,
    /// Version-tagging counters, when tagging is on.
    pub(crate) tagging: Option<Arc<crate::interpret::shared::TaggingShared>>,
    /// The reject reports `/` links to and `/reports/ID` shows, when whoever started the proxy keeps them.
    pub(crate) reports: Option<Arc<dyn ReportPages>>,
    /// The status page's recent throughput.
    pub(crate) throughput: Throughput,
}

/// How much of the machine the admin server may hold: it shares file descriptors with the proxy's clients.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The most time a client may take to send a request's headers; a connection lives at most 12 times
    /// as long (a scraper's keep-alive included).
    pub timeout: Duration,
    /// The most connections served at once; more wait in the kernel's backlog, holding no descriptor.
    pub max_connections: usize,
}

impl Limits {
    /// The limits `[admin]` sets.
    pub fn from_config(admin: &crate::config::AdminConfig) -> Self {
        Limits {
            timeout: Duration::from_millis(admin.timeout_ms.max(1)),
            max_connections: admin.max_connections.max(1),
        }
    }
}

/// Serves admin requests until shutdown.
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
) {
    serve_http(listener, limits, shutdown, move |req| {
        let state = state.clone();
        async move { route(&req, &state).await }
    })
    .await
}

/// Serves HTTP/1 requests with `handle` until shutdown, within `limits`: the admin server's loop, which
/// `krait serve --verify-only`'s status server uses too.
pub async fn serve_http<H, F>(
    listener: TcpListener,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    handle: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // A slot first, then the connection: beyond the cap, connections wait unaccepted.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => return,
            },
            _ = shutdown.changed() => return,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    debug!("admin accept failed: {e}");
                    // Out of descriptors, most likely: give them back to the clients for a while.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |req| {
                let response = handle(req);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.timeout)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(limits.timeout * 12, connection).await {
                Ok(Err(e)) => debug!("admin connection: {e}"),
                Err(_) => debug!("admin connection closed after {:?}", limits.timeout * 12),
                Ok(Ok(())) => {}
            }
        });
    }
}

/// The content type of the HTML pages.
const HTML: &str = "text/html; charset=utf-8";

async fn route(req: &Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        // A proxy whose log has failed records nothing and refuses every session: not healthy.
        (&Method::GET, "/healthz") => match state.log.failure() {
            Some(reason) => {
                (StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("history log failed: {reason}\n"))
            }
            None => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        },
        (&Method::GET, "/metrics") => (StatusCode::OK, "text/plain; version=0.0.4", render_metrics(state)),
        (&Method::GET, "/api/status") => (StatusCode::OK, "application/json", render_status(state)),
        (&Method::GET, "/") => (StatusCode::OK, HTML, render_status_page(state).await),
        (&Method::GET, path) => match path.strip_prefix("/reports/") {
            Some(id) => match report_page(state, id).await {
                Ok(Some(page)) => (StatusCode::OK, HTML, page),
                Ok(None) => (StatusCode::NOT_FOUND, "text/plain", "no such report\n".to_owned()),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{e}\n")),
            },
            None => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_owned()),
        },
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_owned()),
    };
    respond(status, content_type, body)
}

/// A response with `body` as `content_type`; an HTML page also forbids every script, fetch and sniffing.
pub fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    if let Ok(v) = content_type.parse() {
        headers.insert(hyper::header::CONTENT_TYPE, v);
    }
    if content_type == HTML {
        // The pages quote recorded SQL: besides escaping it, forbid every script and fetch, and sniffing.
        for (name, value) in [
            (hyper::header::CONTENT_SECURITY_POLICY, "default-src 'none'; style-src 'unsafe-inline'"),
            (hyper::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ] {
            if let Ok(v) = value.parse() {
                headers.insert(name, v);
            }
        }
    }
    resp
}

/// The status page: `/api/status`'s numbers, the recent throughput, and the newest reports.
async fn render_status_page(state: &AdminState) -> String {
    let status = status_json(state);
    let committed = Metrics::get(&state.metrics.txns_committed);
    let recent_rate = state.throughput.rate(Instant::now(), committed);
    let reports = match state.reports.clone() {
        None => None,
        Some(r) => Some(status_page::newest_reports(r).await),
    };
    status_page::render(&status, &PageExtras { recent_rate, reports })
}

/// Report `id`'s page; `None` (404) for an id that cannot be one, or when this server keeps no reports.
async fn report_page(state: &AdminState, id: &str) -> Result<Option<String>, String> {
    let Some(reports) = state.reports.clone() else { return Ok(None) };
    status_page::report_page(reports, id).await
}

/// Writes one metric family in the Prometheus text exposition format: its help and type lines, then a
/// line per sample, `name{labels} value` (labels as `{k="v"}`, or empty).
pub fn write_family<L: std::fmt::Display, V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: &[(L, V)],
) {
    use std::fmt::Write;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

/// The reads the verifier could not judge, by cause, as it last published them.
fn not_judged_by_cause(v: &crate::metrics::VerifierMetrics) -> Vec<(&'static str, u64)> {
    v.reads_not_judged_by_cause.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// Renders the Prometheus text exposition format.
pub(crate) fn render_metrics(state: &AdminState) -> String {
    use std::fmt::Write;
    let m = &state.metrics;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        write_family(&mut out, name, kind, help, samples);
    };
    let g = Metrics::get;
    metric(
        "krait_connections_total",
        "counter",
        "Client connections accepted.",
        &[("", g(&m.connections_total))],
    );
    metric(
        "krait_connections_active",
        "gauge",
        "Client connections open now.",
        &[("", g(&m.connections_active))],
    );
    metric(
        "krait_session_buffer_bytes",
        "gauge",
        "Bytes the open sessions' read and send buffers hold, summed.",
        &[("", g(&m.session_buffer_bytes))],
    );
    metric(
        "krait_transactions_recorded_total",
        "counter",
        "Transactions written to the history log, by outcome.",
        &[
            ("{outcome=\"committed\"}", g(&m.txns_committed)),
            ("{outcome=\"aborted\"}", g(&m.txns_aborted)),
            ("{outcome=\"indeterminate\"}", g(&m.txns_indeterminate)),
        ],
    );
    metric(
        "krait_read_only_commits_unwaited_total",
        "counter",
        "Committed transactions that wrote nothing, acknowledged without waiting for the log's fsync.",
        &[("", g(&m.read_only_commits_unwaited))],
    );
    metric(
        "krait_upstream_errors_total",
        "counter",
        "Database connections that failed or closed unexpectedly.",
        &[("", g(&m.upstream_errors))],
    );
    metric(
        "krait_client_protocol_errors_total",
        "counter",
        "Clients closed for protocol violations.",
        &[("", g(&m.client_protocol_errors))],
    );
    metric(
        "krait_tls_handshake_errors_total",
        "counter",
        "Failed client TLS handshakes.",
        &[("", g(&m.tls_handshake_errors))],
    );
    metric(
        "krait_desyncs_total",
        "counter",
        "Sessions relayed unrecorded after reply matching lost track.",
        &[("", g(&m.desyncs))],
    );
    metric(
        "krait_sessions_other_database_total",
        "counter",
        "Sessions to a database other than the recorded one, relayed unrecorded.",
        &[("", g(&m.sessions_other_database))],
    );
    metric("krait_log_errors_total", "counter", "Failed history-log appends.", &[("", g(&m.log_errors))]);
    metric(
        "krait_isolation_unknown_total",
        "counter",
        "Transactions recorded without a known isolation level.",
        &[("", g(&m.isolation_unknown))],
    );
    metric(
        "krait_start_records_replayed",
        "gauge",
        "Log records this start replayed to seed the version book.",
        &[("", g(&m.start_records_replayed))],
    );
    metric(
        "krait_start_from_checkpoint",
        "gauge",
        "1 if this start seeded the version book from its checkpoint and the records after it.",
        &[("", g(&m.start_from_checkpoint))],
    );
    metric(
        "krait_cancels_relayed_total",
        "counter",
        "Cancel requests relayed.",
        &[("", g(&m.cancels_relayed))],
    );
    let stats = state.log.stats();
    metric(
        "krait_log_failed",
        "gauge",
        "1 once the history log has stopped after a failed write or fsync (a restart recovers it).",
        &[("", u64::from(state.log.failure().is_some()))],
    );
    metric(
        "krait_log_appends_total",
        "counter",
        "Records appended to the history log.",
        &[("", stats.appends)],
    );
    metric(
        "krait_log_bytes",
        "gauge",
        "Size of the history log directory on disk.",
        &[("", history::log::disk_bytes(&state.log_path))],
    );
    metric(
        "krait_log_first_record",
        "gauge",
        "The first record the history log still holds; retention deleted those before it.",
        &[("", state.log.first_seq())],
    );
    let r = &m.retention;
    metric(
        "krait_log_segments_deleted_total",
        "counter",
        "Segment files retention deleted ([log.retain]).",
        &[("", g(&r.segments_deleted))],
    );
    metric(
        "krait_log_bytes_deleted_total",
        "counter",
        "Bytes of the segment files retention deleted.",
        &[("", g(&r.bytes_deleted))],
    );
    metric(
        "krait_log_needed_from",
        "gauge",
        "The first record a reader (the verifier, the version book, the shipper) still needs; none from here \
         on is deleted.",
        &[("", g(&r.needed_from))],
    );
    let _ = writeln!(
        out,
        "# HELP krait_log_fsync_seconds History-log fsync latency.\n# TYPE krait_log_fsync_seconds histogram"
    );
    let mut cumulative = 0;
    for (i, bound_us) in FSYNC_BUCKETS_US.iter().enumerate() {
        cumulative += stats.fsync_histogram.get(i).copied().unwrap_or(0);
        let _ =
            writeln!(out, "krait_log_fsync_seconds_bucket{{le=\"{}\"}} {cumulative}", *bound_us as f64 / 1e6);
    }
    let _ = writeln!(out, "krait_log_fsync_seconds_bucket{{le=\"+Inf\"}} {}", stats.fsyncs);
    let _ = writeln!(out, "krait_log_fsync_seconds_sum {}", stats.fsync_ns_total as f64 / 1e9);
    let _ = writeln!(out, "krait_log_fsync_seconds_count {}", stats.fsyncs);
    let v = &m.verifier;
    if g(&v.attached) != 0 {
        let lag_s = g(&v.lag_ms) as f64 / 1e3;
        let samples: [(&str, &str, &str, String); 11] = [
            (
                "krait_verifier_verified_total",
                "counter",
                "Transactions verified.",
                g(&v.verified).to_string(),
            ),
            (
                "krait_verifier_lag_transactions",
                "gauge",
                "Recorded transactions not verified yet.",
                g(&v.lag_txns).to_string(),
            ),
            (
                "krait_verifier_lag_seconds",
                "gauge",
                "How long the oldest unverified transaction has waited.",
                lag_s.to_string(),
            ),
            (
                "krait_verifier_behind",
                "gauge",
                "1 when the verifier has fallen behind the recorded load.",
                g(&v.behind).to_string(),
            ),
            ("krait_verifier_rounds_total", "counter", "Verification rounds run.", g(&v.rounds).to_string()),
            ("krait_verifier_rejects_total", "counter", "Reject reports found.", g(&v.rejects).to_string()),
            (
                "krait_verifier_live_transactions",
                "gauge",
                "Transactions held after the last garbage collection.",
                g(&v.live).to_string(),
            ),
            (
                "krait_verifier_known_versions",
                "gauge",
                "Versions the verifier knows by write id: live, base, and the tombstones of collected ones.",
                g(&v.known_versions).to_string(),
            ),
            (
                "krait_verifier_reads_not_judged_total",
                "counter",
                "Reads the verifier could not judge and left out: of a version no recorded transaction wrote, of \
                 a write discovered after a round verified its writer, or of a collected version before the \
                 reader's session first fenced.",
                g(&v.reads_not_judged).to_string(),
            ),
            (
                "krait_verifier_checkpoint_covers",
                "gauge",
                "Log records the verifier's last checkpoint covers: a restart reads on from there.",
                g(&v.checkpoint_covers).to_string(),
            ),
            (
                "krait_verifier_collects_garbage",
                "gauge",
                "1 while the verifier collects garbage between rounds; 0 at a level that does not, or once it \
                 stopped for good (/api/status says why).",
                g(&v.collects_garbage).to_string(),
            ),
        ];
        for (name, kind, help, value) in samples {
            write_family(&mut out, name, kind, help, &[("", value)]);
        }
        let by_cause: Vec<(String, u64)> =
            not_judged_by_cause(v).into_iter().map(|(c, n)| (format!("{{cause=\"{c}\"}}"), n)).collect();
        write_family(
            &mut out,
            "krait_verifier_reads_not_judged_by_cause_total",
            "counter",
            "krait_verifier_reads_not_judged_total by cause: unrecorded_writer, not_covered, discovered_late, \
             writer_rejected (crates/verifier/REPORT.md).",
            &by_cause,
        );
    }
    if let Some(c) = m.shipping.get() {
        let get = ship::Counters::get;
        for (name, kind, help, value) in [
            (
                "krait_ship_connected",
                "gauge",
                "1 while the log shipper is connected to NATS.",
                get(&c.connected),
            ),
            (
                "krait_ship_shipped_below",
                "gauge",
                "Every log record below this sequence number is in the JetStream stream.",
                get(&c.shipped_below),
            ),
            (
                "krait_ship_backlog_records",
                "gauge",
                "Log records not shipped yet.",
                c.backlog(state.log.as_ref()),
            ),
            (
                "krait_ship_errors_total",
                "counter",
                "Failed connections and publishes to NATS.",
                get(&c.errors),
            ),
        ] {
            write_family(&mut out, name, kind, help, &[("", value)]);
        }
    }
    if let Some(t) = &state.tagging {
        out.push_str(&t.metrics.render());
        for (name, what, counter) in [
            ("krait_plan_cache_hits_total", "answered from the plan cache", &t.plans.hits),
            ("krait_plan_cache_misses_total", "that had to be parsed and planned", &t.plans.misses),
            (
                "krait_plan_cache_fingerprint_hits_total",
                "with literals answered from their literal-stripped fingerprint's plan template",
                &t.plans.fingerprint_hits,
            ),
            (
                "krait_plan_cache_fingerprint_misses_total",
                "with literals whose fingerprint had no plan template (they go on to the exact-text lookup \
                 when the fingerprint can have none)",
                &t.plans.fingerprint_misses,
            ),
        ] {
            let value = counter.load(std::sync::atomic::Ordering::Relaxed);
            write_family(&mut out, name, "counter", &format!("Statement texts {what}."), &[("", value)]);
        }
        write_family(
            &mut out,
            "krait_version_book_writes",
            "gauge",
            "Write ids the version book holds: every version this proxy recorded, so that a read of one is \
             evidence.",
            &[("", t.book.len() as u64)],
        );
        if let Some(horizon) = t.book.horizon() {
            let _ = writeln!(
                out,
                "# HELP krait_recording_horizon_xid The database's oldest running transaction id when recording \
                 began (its snapshot's xmin).\n# TYPE krait_recording_horizon_xid gauge\n\
                 krait_recording_horizon_xid {}",
                horizon.xmin
            );
        }
        let _ = writeln!(
            out,
            "# HELP krait_record_exclusive_active Whether a version no recorded transaction wrote is reported \
             ([record] exclusive asserted, not suspended, run horizon known).\n\
             # TYPE krait_record_exclusive_active gauge\nkrait_record_exclusive_active {}",
            u8::from(t.book.exclusive_active())
        );
    }
    out
}

fn render_status(state: &AdminState) -> String {
    status_json(state).to_string()
}

/// What `/api/status` reports, and what the status page shows.
fn status_json(state: &AdminState) -> serde_json::Value {
    let m = &state.metrics;
    let g = Metrics::get;
    let stats = state.log.stats();
    let v = &m.verifier;
    let verifier = (g(&v.attached) != 0).then(|| {
        serde_json::json!({
            "verified": g(&v.verified),
            "behind": g(&v.behind) != 0,
            "lag_transactions": g(&v.lag_txns),
            "lag_seconds": g(&v.lag_ms) as f64 / 1e3,
            "rounds": g(&v.rounds),
            "rejects": g(&v.rejects),
            "live_transactions": g(&v.live),
            "known_versions": g(&v.known_versions),
            "reads_not_judged": g(&v.reads_not_judged),
            "reads_not_judged_by_cause": not_judged_by_cause(v)
                .into_iter()
                .map(|(c, n)| (c.to_owned(), n.into()))
                .collect::<serde_json::Map<_, _>>(),
            "checkpoint_covers": g(&v.checkpoint_covers),
            "level": v.level.get(),
            "garbage_collection": g(&v.collects_garbage) != 0,
            "garbage_collection_stopped": v.gc_stopped.get(),
        })
    });
    let shipping = m.shipping.get().map(|c| {
        let get = ship::Counters::get;
        serde_json::json!({
            "connected": get(&c.connected) != 0,
            "shipped_below": get(&c.shipped_below),
            "backlog_records": c.backlog(state.log.as_ref()),
            "errors": get(&c.errors),
        })
    });
    serde_json::json!({
        "verifier": verifier,
        "shipping": shipping,
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": state.started.elapsed().as_secs(),
        "listen": state.listen.to_string(),
        "upstream": state.upstream,
        "connections": {
            "active": g(&m.connections_active),
            "total": g(&m.connections_total),
            "buffer_bytes": g(&m.session_buffer_bytes),
            "other_database": g(&m.sessions_other_database),
        },
        "transactions": {
            "committed": g(&m.txns_committed),
            "aborted": g(&m.txns_aborted),
            "indeterminate": g(&m.txns_indeterminate),
        },
        "errors": {
            "upstream": g(&m.upstream_errors),
            "client_protocol": g(&m.client_protocol_errors),
            "tls_handshake": g(&m.tls_handshake_errors),
            "desyncs": g(&m.desyncs),
            "log": g(&m.log_errors),
        },
        "log": {
            "path": state.log_path.display().to_string(),
            "durability": state.log.durability().as_str(),
            "next_seq": state.log.next_seq(),
            "bytes": history::log::disk_bytes(&state.log_path),
            "first_record": state.log.first_seq(),
            "needed_from": g(&m.retention.needed_from),
            "segments_deleted": g(&m.retention.segments_deleted),
            "bytes_deleted": g(&m.retention.bytes_deleted),
            "appends": stats.appends,
            "fsyncs": stats.fsyncs,
            "fsync_mean_us": stats.fsync_ns_mean() / 1_000,
            "failed": state.log.failure(),
        },
    })
}
