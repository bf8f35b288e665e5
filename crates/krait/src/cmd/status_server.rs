//! The status server of `krait serve --verify-only` (`--admin ADDR`): `/api/status` (the JSON the verifier
//! thread last published) and `/healthz` (200 while verifying, 503 once verification stopped on an error).
//! It runs on the proxy's admin server loop ([`proxy::admin::serve_http`]), with its timeouts and connection
//! cap; a verifier without a proxy has no other admin server.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `state` on `listener` until `shutdown` changes, within the `[admin]` section's default limits.
pub async fn serve(
    listener: TcpListener,
    state: Arc<Mutex<serde_json::Value>>,
    shutdown: watch::Receiver<bool>,
) {
    let limits = proxy::admin::Limits::from_config(&proxy::config::AdminConfig::default());
    proxy::admin::serve_http(listener, limits, shutdown, move |req| {
        let response = route(&req, &state);
        async move { response }
    })
    .await
}

fn route<B>(req: &Request<B>, state: &Mutex<serde_json::Value>) -> Response<Full<Bytes>> {
    let shown = state.lock().map(|s| s.clone()).unwrap_or(serde_json::Value::Null);
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/api/status") => (StatusCode::OK, "application/json", shown.to_string()),
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
