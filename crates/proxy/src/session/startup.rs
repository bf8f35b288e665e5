//! Steps 1 to 4 of a session, before the message loop: TLS negotiation and the startup packet, the
//! connection to the database, the authentication relay, and learning the recording horizon and the
//! session's default isolation level. Cancel requests are relayed from here too.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, info, warn};
use wire::pg::backend::{Authentication, BackendMessage, ErrorFields};
use wire::pg::frontend::tag as ftag;
use wire::pg::{
    Frame, MAX_AUTH_MESSAGE_LEN, MAX_STARTUP_LEN, ProtocolError, StartupPacket, split_frame, split_startup,
};

use super::{BoxStream, MAX_BACKEND_MESSAGE, SessionError, Shared};
use crate::config::{ClientTlsMode, UpstreamTlsMode};
use crate::interpret::fence::{Injected, Injection};
use crate::interpret::inject::{query_at_startup, run_at_startup};
use crate::interpret::shared::TaggingShared;
use crate::metrics::Metrics;
use crate::tls::{ALPN_POSTGRESQL, UpstreamTls};

/// Learns the database's snapshot once per run of the proxy, before the first session's first message
/// (DESIGN.md §3; `interpret::versions`): the first run's is the recording horizon, durable in the log before
/// any read is classified against it, so a crash can never leave a log whose recorded reads were classified
/// against a horizon the next run does not know; every run's is its run horizon (`[record] exclusive`).
pub(super) async fn learn_horizon(
    shared: &Shared,
    t: &TaggingShared,
    upstream: &mut BoxStream,
    sbuf: &mut BytesMut,
) -> Result<(), SessionError> {
    use std::sync::atomic::Ordering;
    let _learning = t.horizon_learning.lock().await;
    if t.book.run_horizon().is_some() || t.horizon_unanswered.load(Ordering::Relaxed) {
        return Ok(());
    }
    match run_at_startup(upstream, sbuf, t, Injection::Horizon).await {
        Ok(Injected::Horizon(Some(horizon))) => {
            if t.book.horizon().is_none() {
                let ticket = shared.recorder.log().append_horizon(&horizon).map_err(SessionError::Log)?;
                ticket.wait_async().await.map_err(SessionError::Log)?;
                info!(
                    xmin = horizon.xmin,
                    xmax = horizon.xmax,
                    running = horizon.running.len(),
                    "recording horizon learnt"
                );
                t.book.set_horizon(horizon.clone());
            }
            resolve_crash_window(shared, t, upstream, sbuf, horizon.xmax).await?;
            t.book.set_run_horizon(horizon);
        }
        Ok(_) => {
            t.horizon_unanswered.store(true, Ordering::Relaxed);
            warn!(
                "the database cannot tell the recording horizon (pg_current_snapshot needs PostgreSQL 13); \
                 versions no recorded transaction wrote are taken as pre-history"
            );
        }
        Err(e) => {
            warn!("cannot learn the recording horizon: {e}");
            return Err(SessionError::UpstreamIo(e));
        }
    }
    Ok(())
}

/// Learns the isolation level the session's transactions start with, before the client's first message, with
/// the query the proxy runs on its own at startup (the client never sees it): whatever set it (the startup
/// packet's `options`, `ALTER ROLE` or `ALTER DATABASE … SET`, the server's configuration), the database
/// reports the result. `None` when it cannot tell (an error, or a database that is not PostgreSQL): the
/// session's transactions are then recorded without a level until the client sets one.
pub(super) async fn learn_default_isolation(
    upstream: &mut BoxStream,
    sbuf: &mut BytesMut,
) -> Result<Option<history::IsolationLevel>, SessionError> {
    let rows = query_at_startup(upstream, sbuf, crate::isolation::SHOW_DEFAULT)
        .await
        .map_err(SessionError::UpstreamIo)?;
    let value = rows.as_ref().and_then(|r| r.first()).and_then(|r| r.first()).and_then(Option::as_ref);
    let level = value.and_then(|v| history::IsolationLevel::parse_sql(&String::from_utf8_lossy(v)));
    if level.is_none() {
        debug!(
            "the database did not tell the default isolation level; transactions are recorded without one"
        );
    }
    Ok(level)
}

/// Asks the database how the transactions that earlier runs left without an outcome ended, by their
/// top-level ids (widened to 64 bits next to `xmax`, the run horizon's), and logs each committed or
/// aborted one as resolved (issue 14, item 3). Those it cannot tell (too old, or a question that fails) stay
/// indeterminate. Runs once, under the horizon lock, before any session of this run logs anything.
async fn resolve_crash_window(
    shared: &Shared,
    t: &TaggingShared,
    upstream: &mut BoxStream,
    sbuf: &mut BytesMut,
    xmax: u64,
) -> Result<(), SessionError> {
    let window = std::mem::take(&mut *t.crash_window.lock().unwrap_or_else(|p| p.into_inner()));
    // Every one of them had ended before this run's snapshot, so its id lies below xmax; one that does not
    // would make pg_xact_status fail for all ("in the future").
    let asked: Vec<(history::TxnId, u64)> = window
        .into_iter()
        .map(|(txn, xid)| (txn, crate::interpret::versions::widen_xid(xid, xmax)))
        .filter(|&(_, xid8)| xid8 < xmax)
        .collect();
    if asked.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = asked.iter().map(|(_, x)| format!("'{x}'")).collect();
    let sql =
        format!("SELECT x::text, pg_xact_status(x) FROM unnest(ARRAY[{}]::xid8[]) AS x", list.join(","));
    let rows = match query_at_startup(upstream, sbuf, &sql).await {
        Ok(Some(rows)) => rows,
        Ok(None) => {
            warn!("the database could not tell how {} transactions of an earlier run ended", asked.len());
            return Ok(());
        }
        Err(e) => return Err(SessionError::UpstreamIo(e)),
    };
    let text =
        |v: &Option<bytes::Bytes>| v.as_ref().and_then(|b| std::str::from_utf8(b).ok().map(str::to_owned));
    let (mut committed, mut aborted) = (0, 0);
    for row in &rows {
        let (Some(xid8), status) = (row.first().and_then(text), row.get(1).and_then(text)) else { continue };
        let outcome = match status.as_deref() {
            Some("committed") => history::Outcome::Committed,
            Some("aborted") => history::Outcome::Aborted,
            _ => continue,
        };
        for (txn, _) in asked.iter().filter(|(_, x)| x.to_string() == xid8) {
            shared.recorder.log().append_resolved(*txn, outcome).map_err(SessionError::Log)?.request();
            if outcome == history::Outcome::Committed { committed += 1 } else { aborted += 1 }
        }
    }
    info!(asked = asked.len(), committed, aborted, "crash window of an earlier run resolved");
    Ok(())
}

/// Steps 1 and 2: SSLRequest/GSSENCRequest negotiation, TLS, and the startup packet. Returns `None` when the
/// connection was a CancelRequest (relayed) or was refused.
///
/// Before login a client may make the proxy hold no more than PostgreSQL itself would: a startup packet of
/// at most [`MAX_STARTUP_LEN`] (10,000 bytes, the server's `MAX_STARTUP_PACKET_LENGTH`), whatever
/// `[listen] max_message_bytes` says; [`relay_auth`] holds authentication messages to PostgreSQL's limit for
/// them. A longer one gets a FATAL error and the connection closes.
pub(super) async fn negotiate(
    shared: &Arc<Shared>,
    tcp: TcpStream,
) -> Result<Option<(BoxStream, BytesMut, StartupPacket)>, SessionError> {
    let tls_mode = shared.config.tls.mode;
    let acceptor = shared.tls.as_ref().filter(|_| tls_mode != ClientTlsMode::Disable);
    let mut secured = false;
    // PostgreSQL 17 "direct TLS": the first byte is a TLS handshake record, not a length.
    let mut first = [0u8; 1];
    let direct = matches!(tcp.peek(&mut first).await, Ok(1) if first[0] == 0x16);
    let mut stream: BoxStream = Box::new(tcp);
    if direct {
        let Some(acceptor) = acceptor else {
            return Err(SessionError::ClientProtocol(ProtocolError::invalid(
                "startup",
                "direct TLS but TLS is disabled",
            )));
        };
        let tls = acceptor.acceptor().accept(stream).await.map_err(SessionError::Handshake)?;
        if tls.get_ref().1.alpn_protocol() != Some(ALPN_POSTGRESQL) {
            return Err(SessionError::Handshake(std::io::Error::other(
                "direct TLS without ALPN \"postgresql\"",
            )));
        }
        stream = Box::new(tls);
        secured = true;
    }
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        let body = loop {
            // The length is checked from the header alone, so an oversized packet is refused before its
            // body is read: the buffer holds at most the limit plus one read.
            let split = match split_startup(&mut buf, MAX_STARTUP_LEN) {
                Ok(split) => split,
                Err(e) => {
                    send_fatal(&mut stream, "08P01", &format!("krait: invalid startup packet: {e}")).await;
                    return Err(SessionError::ClientProtocol(e));
                }
            };
            match split {
                Some(body) => break body,
                None => {
                    if stream.read_buf(&mut buf).await.map_err(SessionError::ClientIo)? == 0 {
                        return Ok(None);
                    }
                }
            }
        };
        match StartupPacket::decode(&body).map_err(SessionError::ClientProtocol)? {
            StartupPacket::SslRequest if !secured && acceptor.is_some() => {
                // Bytes sent after SSLRequest but before the handshake could be injected by a
                // man in the middle (CVE-2021-23214); refuse them.
                if !buf.is_empty() {
                    return Err(SessionError::ClientProtocol(ProtocolError::invalid(
                        "SSLRequest",
                        "unencrypted bytes after SSLRequest",
                    )));
                }
                stream.write_all(b"S").await.map_err(SessionError::ClientIo)?;
                let acceptor = acceptor.map(|a| a.acceptor()).ok_or_else(|| {
                    SessionError::ClientProtocol(ProtocolError::invalid("SSLRequest", "TLS is disabled"))
                })?;
                stream = Box::new(acceptor.accept(stream).await.map_err(SessionError::Handshake)?);
                secured = true;
            }
            StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
                stream.write_all(b"N").await.map_err(SessionError::ClientIo)?;
            }
            StartupPacket::CancelRequest { pid, secret } => {
                relay_cancel(shared, pid, secret).await;
                return Ok(None);
            }
            packet @ StartupPacket::Startup { .. } => {
                if tls_mode == ClientTlsMode::Require && !secured {
                    send_fatal(&mut stream, "28000", "krait: this proxy requires TLS (use sslmode=require)")
                        .await;
                    return Ok(None);
                }
                return Ok(Some((stream, buf, packet)));
            }
        }
    }
}

/// Opens a connection to the database, with TLS if configured.
pub(super) async fn connect_upstream(shared: &Shared) -> Result<BoxStream, std::io::Error> {
    let timeout = Duration::from_millis(shared.config.upstream.connect_timeout_ms);
    let tcp = tokio::time::timeout(timeout, TcpStream::connect(&shared.config.upstream.address))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out"))??;
    let _ = tcp.set_nodelay(true);
    match &shared.upstream_tls {
        UpstreamTls::Disable => Ok(Box::new(tcp)),
        UpstreamTls::Tls(connector, name) => {
            let mut tcp = tcp;
            let mut req = BytesMut::new();
            StartupPacket::SslRequest.encode(&mut req);
            tcp.write_all(&req).await?;
            let mut answer = [0u8; 1];
            tcp.read_exact(&mut answer).await?;
            if answer[0] != b'S' {
                return Err(std::io::Error::other(
                    "the database does not accept TLS (upstream.tls requires it)",
                ));
            }
            Ok(Box::new(connector.connect(name.clone(), tcp).await?))
        }
    }
}

/// A client cancel key the session registered in [`Shared::cancel_keys`], mapped to the database's key.
/// Dropping it removes the entry, so the key leaves with its session however the session ends: a normal
/// close, an error returned from any step, a panic, or the session's future dropped half way.
pub(super) struct CancelKey<'s> {
    shared: &'s Shared,
    /// The key the client was given: the database's process id and a secret of the proxy's own.
    client: (i32, Bytes),
}

impl<'s> CancelKey<'s> {
    /// Registers a fresh client key for the database's `(pid, secret)`.
    fn register(shared: &'s Shared, pid: i32, secret: Bytes) -> Self {
        let client = (pid, Bytes::copy_from_slice(&rand::random::<[u8; 4]>()));
        // A poisoned map still holds consistent entries (every update is one insert or remove).
        shared.cancel_keys.lock().unwrap_or_else(|p| p.into_inner()).insert(client.clone(), (pid, secret));
        CancelKey { shared, client }
    }

    /// The secret the client was given in its BackendKeyData.
    fn client_secret(&self) -> Bytes {
        self.client.1.clone()
    }
}

impl Drop for CancelKey<'_> {
    fn drop(&mut self) {
        self.shared.cancel_keys.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.client);
    }
}

pub(super) async fn relay_cancel(shared: &Shared, pid: i32, secret: Bytes) {
    let target = shared.cancel_keys.lock().ok().and_then(|k| k.get(&(pid, secret)).cloned());
    // An unknown key is ignored silently, as PostgreSQL does, so keys cannot be probed.
    let Some((upstream_pid, upstream_secret)) = target else { return };
    match connect_upstream(shared).await {
        Ok(mut s) => {
            let mut buf = BytesMut::new();
            StartupPacket::CancelRequest { pid: upstream_pid, secret: upstream_secret }.encode(&mut buf);
            if s.write_all(&buf).await.is_ok() {
                Metrics::inc(&shared.metrics.cancels_relayed);
                let _ = s.shutdown().await;
            }
        }
        Err(e) => {
            Metrics::inc(&shared.metrics.upstream_errors);
            warn!("cannot relay a cancel request: {e}");
        }
    }
}

/// Sends a FATAL ErrorResponse; the caller closes the connection next. Errors are ignored: the client may
/// already be gone.
pub(super) async fn send_fatal(
    stream: &mut (impl AsyncWrite + Unpin + ?Sized),
    sqlstate: &str,
    message: &str,
) {
    let msg = BackendMessage::ErrorResponse(ErrorFields::with_severity("FATAL", sqlstate, message));
    let _ = stream.write_all(&msg.to_bytes()).await;
    let _ = stream.flush().await;
}

pub(super) async fn read_frame(
    stream: &mut (impl AsyncRead + Unpin + ?Sized),
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<Frame>, std::io::Error> {
    loop {
        match split_frame(buf, max) {
            Ok(Some(f)) => return Ok(Some(f)),
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Step 4: relays the authentication exchange. Passwords and SASL messages are forwarded as opaque bytes
/// and never logged. Returns whether the session reached ReadyForQuery.
///
/// Every client message until then is held to [`MAX_AUTH_MESSAGE_LEN`]: PostgreSQL refuses a password,
/// SASL or GSS message with a body over `PG_MAX_AUTH_TOKEN_LENGTH` (65,535 bytes), so no client that can
/// log in needs more, and an unauthenticated one must not make the proxy buffer `max_message_bytes`
/// (64 MiB by default) per connection. The length header alone decides ([`split_frame`]), before any of
/// the body is buffered.
pub(super) async fn relay_auth<'s>(
    shared: &'s Shared,
    client: &mut BoxStream,
    cbuf: &mut BytesMut,
    upstream: &mut BoxStream,
    sbuf: &mut BytesMut,
    cancel_key: &mut Option<CancelKey<'s>>,
) -> Result<bool, SessionError> {
    let max = shared.config.listen.max_message_bytes;
    loop {
        let Some(frame) =
            read_frame(upstream, sbuf, MAX_BACKEND_MESSAGE).await.map_err(SessionError::UpstreamIo)?
        else {
            send_fatal(client, "08006", "krait: the database closed the connection during startup").await;
            return Err(SessionError::UpstreamProtocol("closed during startup".into()));
        };
        let msg =
            BackendMessage::decode(&frame).map_err(|e| SessionError::UpstreamProtocol(e.to_string()))?;
        let mut expects_response = false;
        let to_client: Bytes = match msg {
            BackendMessage::Authentication(Authentication::Sasl { mechanisms }) => {
                // Channel binding cannot cross a terminating proxy (see crate::tls).
                let kept: Vec<Bytes> = mechanisms.into_iter().filter(|m| !m.ends_with(b"-PLUS")).collect();
                if kept.is_empty() {
                    send_fatal(client, "28000", "krait: the database offers only channel-bound SASL").await;
                    return Ok(false);
                }
                expects_response = true;
                BackendMessage::Authentication(Authentication::Sasl { mechanisms: kept }).to_bytes()
            }
            BackendMessage::Authentication(Authentication::CleartextPassword)
                if shared.config.upstream.tls_mode() == UpstreamTlsMode::Disable
                    && !shared.config.upstream.allow_cleartext_password =>
            {
                warn!("refused a login: the database asks for a cleartext password over plain TCP");
                let msg = "krait: the database asks for the password in clear text and the connection from the \
                           proxy to it is not encrypted; set [upstream] tls = \"verify-full\" (or \"require\"), or \
                           allow_cleartext_password = true to relay it anyway";
                send_fatal(client, "28000", msg).await;
                return Ok(false);
            }
            BackendMessage::Authentication(
                Authentication::CleartextPassword
                | Authentication::Md5Password { .. }
                | Authentication::SaslContinue(_)
                | Authentication::Gss
                | Authentication::GssContinue(_)
                | Authentication::Sspi,
            ) => {
                expects_response = true;
                frame.raw().clone()
            }
            BackendMessage::BackendKeyData { pid, secret } => {
                // The client gets a key of our own, mapped to the database's. A second key (no PostgreSQL
                // sends one, a broken server might) replaces the first, whose guard removes it.
                let key = CancelKey::register(shared, pid, secret);
                let mine = key.client_secret();
                *cancel_key = Some(key);
                BackendMessage::BackendKeyData { pid, secret: mine }.to_bytes()
            }
            BackendMessage::ErrorResponse(ref e) => {
                client.write_all(frame.raw()).await.map_err(SessionError::ClientIo)?;
                let _ = client.flush().await;
                let code = e.code().map(|c| wire::pg::text(c).into_owned()).unwrap_or_default();
                debug!(sqlstate = %code, "the database refused the session");
                return Ok(false);
            }
            BackendMessage::ReadyForQuery(_) => {
                client.write_all(frame.raw()).await.map_err(SessionError::ClientIo)?;
                return Ok(true);
            }
            BackendMessage::Authentication(_)
            | BackendMessage::ParameterStatus { .. }
            | BackendMessage::NoticeResponse(_)
            | BackendMessage::NegotiateProtocolVersion { .. } => frame.raw().clone(),
            other => {
                return Err(SessionError::UpstreamProtocol(format!(
                    "unexpected message {:?} during startup",
                    char::from(other.tag())
                )));
            }
        };
        client.write_all(&to_client).await.map_err(SessionError::ClientIo)?;
        if expects_response {
            client.flush().await.map_err(SessionError::ClientIo)?;
            // Before login a client may not make the proxy hold more than PostgreSQL itself would.
            let reply = match read_frame(client, cbuf, max.min(MAX_AUTH_MESSAGE_LEN)).await {
                Ok(Some(reply)) => reply,
                Ok(None) => return Ok(false),
                Err(e) => {
                    let e = client_read_error(e);
                    if let SessionError::ClientProtocol(p) = &e {
                        send_fatal(client, "08P01", &format!("krait: invalid authentication message: {p}"))
                            .await;
                    }
                    return Err(e);
                }
            };
            if reply.tag() != ftag::PASSWORD {
                return Err(SessionError::ClientProtocol(ProtocolError::invalid(
                    "authentication",
                    format!("expected a password message, got {:?}", char::from(reply.tag())),
                )));
            }
            upstream.write_all(reply.raw()).await.map_err(SessionError::UpstreamIo)?;
        }
    }
}

pub(super) fn client_read_error(e: std::io::Error) -> SessionError {
    match e.kind() {
        std::io::ErrorKind::InvalidData => match e.into_inner().map(|i| i.downcast::<ProtocolError>()) {
            Some(Ok(p)) => SessionError::ClientProtocol(*p),
            Some(Err(other)) => {
                SessionError::ClientIo(std::io::Error::new(std::io::ErrorKind::InvalidData, other))
            }
            None => SessionError::ClientIo(std::io::ErrorKind::InvalidData.into()),
        },
        _ => SessionError::ClientIo(e),
    }
}
