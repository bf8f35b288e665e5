//! The status server of `krait serve --verify-only` (`--admin ADDR`): `/` (the status page a proxy's admin
//! server shows, [`proxy::status_page`], with the stream and each collector), `/reports/ID` (a stored reject
//! report as HTML), `/api/status` (the JSON the verifier thread last published, with what this server
//! knows: the stream, the version, the uptime), `/metrics` (the same, for Prometheus: the verifier's figures
//! under the names a proxy's `/metrics` gives them, and each collector's) and `/healthz` (200 while
//! verifying, 503 once verification stopped on an error).
//! It runs on the proxy's admin server loop ([`proxy::admin::serve_http`]), with its timeouts and connection
//! cap; a verifier without a proxy has no other admin server.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use proxy::status_page::{self, PageExtras, ReportPages, Throughput};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What the status server shows beside the verifier's published state.
pub struct Served {
    /// The NATS server the logs are read from.
    pub source: String,
    /// The JetStream stream.
    pub stream: String,
    /// The stored reject reports.
    pub reports: Arc<dyn ReportPages>,
}

/// The server's state: the published document, what it adds, and the status page's throughput samples.
struct Server {
    state: Arc<Mutex<serde_json::Value>>,
    served: Served,
    started: Instant,
    throughput: Throughput,
}

/// Serves `state` on `listener` until `shutdown` changes, within the `[admin]` section's default limits.
pub async fn serve(
    listener: TcpListener,
    state: Arc<Mutex<serde_json::Value>>,
    served: Served,
    shutdown: watch::Receiver<bool>,
) {
    let limits = proxy::admin::Limits::from_config(&proxy::config::AdminConfig::default());
    let server =
        Arc::new(Server { state, served, started: Instant::now(), throughput: Throughput::default() });
    proxy::admin::serve_http(listener, limits, shutdown, move |req| {
        let server = server.clone();
        async move { route(&req, &server).await }
    })
    .await
}

async fn route<B>(req: &Request<B>, server: &Server) -> Response<Full<Bytes>> {
    let mut shown = server.state.lock().map(|s| s.clone()).unwrap_or(serde_json::Value::Null);
    if let Some(fields) = shown.as_object_mut() {
        fields.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        fields.insert("source".into(), server.served.source.clone().into());
        fields.insert("stream".into(), server.served.stream.clone().into());
        fields.insert("uptime_s".into(), server.started.elapsed().as_secs().into());
    }
    let html = "text/html; charset=utf-8";
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/") => (StatusCode::OK, html, status_page(server, &shown).await),
        (&Method::GET, path) if path.starts_with("/reports/") => {
            match status_page::report_page(server.served.reports.clone(), &path["/reports/".len()..]).await {
                Ok(Some(page)) => (StatusCode::OK, html, page),
                Ok(None) => (StatusCode::NOT_FOUND, "text/plain", "no such report\n".to_owned()),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{e}\n")),
            }
        }
        (&Method::GET, "/api/status") => (StatusCode::OK, "application/json", shown.to_string()),
        (&Method::GET, "/metrics") => (StatusCode::OK, "text/plain; version=0.0.4", metrics(&shown)),
        (&Method::GET, "/healthz") => match shown.get("stopped").and_then(|s| s.as_str()) {
            Some(why) => {
                (StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("verification stopped: {why}\n"))
            }
            None => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        },
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_owned()),
    };
    proxy::admin::respond(status, content_type, body)
}

/// The status page: the published state, the recent throughput, and the newest reports (listed off the
/// event loop: it reads files).
async fn status_page(server: &Server, shown: &serde_json::Value) -> String {
    let recent_rate = server.throughput.rate(Instant::now(), status_page::committed(shown));
    let reports = status_page::newest_reports(server.served.reports.clone()).await;
    status_page::render(shown, &PageExtras { recent_rate, reports: Some(reports) })
}

/// The Prometheus text exposition of a published state (see `serve_many::status_json`).
fn metrics(state: &serde_json::Value) -> String {
    let number = |value: &serde_json::Value| value.as_f64().unwrap_or(0.0);
    let flag = |value: &serde_json::Value| if value.is_null() || value == false { 0.0 } else { 1.0 };
    let one = |value: f64| vec![(String::new(), value)];
    let v = &state["verifier"];
    let collectors = state["collectors"].as_array().map(Vec::as_slice).unwrap_or_default();
    let per_collector = |read: &dyn Fn(&serde_json::Value) -> f64| -> Vec<(String, f64)> {
        collectors
            .iter()
            .map(|c| (format!("{{collector=\"{}\"}}", c["collector"].as_u64().unwrap_or(0)), read(c)))
            .collect()
    };
    let holes = |c: &serde_json::Value| c["holes"].as_array().map_or(0, Vec::len) as f64;
    let families = [
        (
            "krait_verifier_recorded_total",
            "counter",
            "Transactions received from every collector.",
            one(number(&v["recorded"])),
        ),
        ("krait_verifier_verified_total", "counter", "Transactions verified.", one(number(&v["verified"]))),
        (
            "krait_verifier_lag_transactions",
            "gauge",
            "Received transactions not verified yet.",
            one(number(&v["lag_transactions"])),
        ),
        (
            "krait_verifier_lag_seconds",
            "gauge",
            "How long the oldest unverified transaction has waited.",
            one(number(&v["lag_seconds"])),
        ),
        ("krait_verifier_rounds_total", "counter", "Verification rounds run.", one(number(&v["rounds"]))),
        ("krait_verifier_rejects_total", "counter", "Reject reports found.", one(number(&v["rejects"]))),
        (
            "krait_verifier_live_transactions",
            "gauge",
            "Transactions held after the last garbage collection.",
            one(number(&v["live_transactions"])),
        ),
        (
            "krait_verifier_checkpoint_covers",
            "gauge",
            "Stream messages the verifier's last checkpoint covers: a restart reads on from the next one.",
            one(number(&v["checkpoint_covers"])),
        ),
        (
            "krait_verifier_stopped",
            "gauge",
            "1 once verification has stopped on an error (/healthz says why).",
            one(flag(&state["stopped"])),
        ),
        (
            "krait_verifier_gc_stopped",
            "gauge",
            "1 once garbage collection has stopped: memory then grows with the history.",
            one(flag(&state["garbage_collection_stopped"])),
        ),
        (
            "krait_collector_records_total",
            "counter",
            "Log records received from the collector.",
            per_collector(&|c| number(&c["records"])),
        ),
        (
            "krait_collector_held_events",
            "gauge",
            "The collector's events held back, waiting for heartbeats or an earlier record.",
            per_collector(&|c| number(&c["held"])),
        ),
        (
            "krait_collector_silent_seconds",
            "gauge",
            "How old the collector's latest promise is (NaN before its first heartbeat).",
            per_collector(&|c| c["silent_s"].as_f64().unwrap_or(f64::NAN)),
        ),
        (
            "krait_collector_holds_back_others",
            "gauge",
            "1 while the collector's latest promise is missing or too old, which holds the others back.",
            per_collector(&|c| flag(&c["holds_back_others"])),
        ),
        (
            "krait_collector_waiting",
            "gauge",
            "1 while later records of the collector wait for an earlier one.",
            per_collector(&|c| flag(&c["waiting_for_record"])),
        ),
        (
            "krait_collector_holes_total",
            "counter",
            "Stretches of the collector's log given up on (--skip-holes-after).",
            per_collector(&holes),
        ),
        (
            "krait_collector_records_lost_to_holes_total",
            "counter",
            "Records dropped because they cite what a hole held.",
            per_collector(&|c| number(&c["records_lost_to_holes"])),
        ),
        (
            "krait_collector_values_lost_to_holes_total",
            "counter",
            "Recorded rows and statement parameters left out of kept transactions because they cite what a \
             hole held.",
            per_collector(&|c| number(&c["values_lost_to_holes"])),
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, samples) in families {
        proxy::admin::write_family(&mut out, name, kind, help, &samples);
    }
    out
}
