//! The status server of `krait serve --verify-only` (`--admin ADDR`): `/api/status` (the JSON the verifier
//! thread last published) and `/healthz` (200 while verifying, 503 once verification stopped on an error).
//! A proxy has its own admin server (the proxy crate's); a verifier without a proxy has this one.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

/// The longest a client may take to send its request's headers, and a tenth of how long a connection lives.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `state` on `listener` until the runtime stops.
pub async fn serve(listener: TcpListener, state: Arc<Mutex<serde_json::Value>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&req, &state)) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(TIMEOUT * 10, connection).await;
        });
    }
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
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
