//! One client's session, told in the order its bytes travel: accept, TLS, startup, the authentication relay,
//! then the message loop with reply matching and recording.
//!
//! Failures stay with the client that caused them. A client that sends garbage, an oversized message or a
//! broken TLS handshake gets a FATAL error (where the protocol still allows one) and its connection closes;
//! the listener and every other session go on. When the database cannot be reached, the client is told so
//! in an ErrorResponse. When the database drops the connection, the client gets whatever the database said
//! last and then the connection closes; the open transaction is recorded as aborted or indeterminate.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tracing::{Instrument, debug, info, warn};
use wire::pg::backend::{Authentication, BackendMessage, ErrorFields, tag as btag};
use wire::pg::frontend::tag as ftag;
use wire::pg::{
    Frame, FrontendMessage, MAX_AUTH_MESSAGE_LEN, MAX_STARTUP_LEN, ProtocolError, StartupPacket, split_frame,
    split_startup,
};

use crate::config::{ClientTlsMode, Config};
use crate::interpret::fence::{Injected, Injection};
use crate::interpret::search_path::SearchPath;
use crate::interpret::session_tagging::{InjectStep, SessionTagging, run_at_startup};
use crate::interpret::tagger::{Outgoing, TaggingShared};
use crate::machine::{FrontendStep, SessionMachine};
use crate::metrics::{ActiveConnection, Metrics};
use crate::recorder::{Recorder, SessionRecorder, now_ns};
use crate::tls::{ALPN_POSTGRESQL, ReloadableTls, UpstreamTls};

/// A byte stream to a client or the database, plain or TLS.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}
type BoxStream = Box<dyn Stream>;

/// The largest backend message accepted: PostgreSQL's own limit plus the header. The database is trusted;
/// this only keeps a broken one from making the proxy allocate without bound.
const MAX_BACKEND_MESSAGE: usize = (1 << 30) + 1024;

/// Everything sessions share.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) tls: Option<Arc<ReloadableTls>>,
    pub(crate) upstream_tls: UpstreamTls,
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) metrics: Arc<Metrics>,
    /// Client-facing cancel keys → the database's, so a CancelRequest reaches the right backend.
    pub(crate) cancel_keys: Mutex<std::collections::HashMap<(i32, Bytes), (i32, Bytes)>>,
    /// Version tagging, when `[tagging] strategy` is not `off`.
    pub(crate) tagging: Option<Arc<TaggingShared>>,
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("client I/O: {0}")]
    ClientIo(std::io::Error),
    #[error("database I/O: {0}")]
    UpstreamIo(std::io::Error),
    #[error("client protocol violation: {0}")]
    ClientProtocol(ProtocolError),
    #[error("database protocol violation: {0}")]
    UpstreamProtocol(String),
    #[error("TLS handshake with the client failed: {0}")]
    Handshake(std::io::Error),
    #[error("history log: {0}")]
    Log(#[from] history::LogError),
    #[error("timed out during startup")]
    StartupTimeout,
}

/// Serves one accepted connection until it closes or the proxy shuts down.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let recorder = shared.recorder.session();
    let span = tracing::info_span!("session", id = recorder.id.0, %peer);
    async move {
        let _active = ActiveConnection::new(&shared.metrics);
        match run_session(&shared, tcp, recorder, shutdown).await {
            Ok(()) => debug!("session closed"),
            Err(e) => {
                let m = &shared.metrics;
                match &e {
                    SessionError::ClientProtocol(_) => Metrics::inc(&m.client_protocol_errors),
                    SessionError::Handshake(_) => Metrics::inc(&m.tls_handshake_errors),
                    SessionError::UpstreamIo(_) | SessionError::UpstreamProtocol(_) => {
                        Metrics::inc(&m.upstream_errors)
                    }
                    _ => {}
                }
                info!("session ended: {e}");
            }
        }
    }
    .instrument(span)
    .await
}

async fn run_session(
    shared: &Arc<Shared>,
    tcp: TcpStream,
    recorder: SessionRecorder,
    shutdown: watch::Receiver<bool>,
) -> Result<(), SessionError> {
    // Until the message loop starts there is nothing to record, so shutdown simply drops the connection.
    let mut stopping = shutdown.clone();
    let startup = tokio::time::timeout(shared.config.startup_timeout(), negotiate(shared, tcp));
    let negotiated = tokio::select! {
        r = startup => r.map_err(|_| SessionError::StartupTimeout)??,
        _ = stopping.changed() => None,
    };
    let Some((mut client, mut cbuf, packet)) = negotiated else {
        return Ok(());
    };
    if let Some(user) = packet.param("user") {
        debug!(user = %wire::pg::text(user), "startup");
    }

    // Step 3: the database. A failure here is the client's to hear about, in words.
    let mut upstream = match connect_upstream(shared).await {
        Ok(s) => s,
        Err(e) => {
            Metrics::inc(&shared.metrics.upstream_errors);
            warn!("cannot reach the database: {e}");
            let msg =
                format!("krait: cannot connect to the database at {}: {e}", shared.config.upstream.address);
            send_fatal(&mut client, "08001", &msg).await;
            return Ok(());
        }
    };
    let mut out = BytesMut::new();
    packet.encode(&mut out);
    upstream.write_all(&out).await.map_err(SessionError::UpstreamIo)?;

    // Step 4: authentication, relayed message by message until the first ReadyForQuery.
    let mut sbuf = BytesMut::new();
    let mut cancel_key = None;
    let auth = tokio::time::timeout(
        shared.config.startup_timeout(),
        relay_auth(shared, &mut client, &mut cbuf, &mut upstream, &mut sbuf, &mut cancel_key),
    );
    let authenticated = tokio::select! {
        r = auth => r.map_err(|_| SessionError::StartupTimeout).and_then(|r| r),
        _ = stopping.changed() => Ok(false),
    };
    // With tagging on, the first session (and any after a table the cache did not know) loads the primary
    // keys before the client's first message; a failure leaves the cache stale, to be retried between
    // transactions. Every way out of this block, these failures included, reaches the cancel key's removal.
    let result = async {
        let authenticated = authenticated?;
        if let (true, Some(t)) = (authenticated, &shared.tagging) {
            if t.catalog_stale.load(std::sync::atomic::Ordering::Relaxed)
                && let Err(e) = run_at_startup(&mut upstream, &mut sbuf, t, Injection::Catalog).await
            {
                warn!("cannot load the primary-key catalog: {e}");
                return Err(SessionError::UpstreamIo(e));
            }
            // Likewise the recording horizon, until some session has learnt it: every read this session
            // records is then classified against it (DESIGN.md §3).
            learn_horizon(shared, t, &mut upstream, &mut sbuf).await?;
        }
        if authenticated {
            let startup = Startup::of(&packet);
            message_loop(shared, client, cbuf, upstream, sbuf, recorder, &startup, shutdown).await
        } else {
            Ok(())
        }
    }
    .await;
    if let Some(key) = cancel_key
        && let Ok(mut keys) = shared.cancel_keys.lock()
    {
        keys.remove(&key);
    }
    result
}

/// Learns the recording horizon if no session has yet (DESIGN.md §3; `interpret::versions`). It is durable
/// in the log before any read is classified against it, so a crash can never leave a log whose recorded
/// reads were classified against a horizon the next run does not know.
async fn learn_horizon(
    shared: &Shared,
    t: &TaggingShared,
    upstream: &mut BoxStream,
    sbuf: &mut BytesMut,
) -> Result<(), SessionError> {
    use std::sync::atomic::Ordering;
    let _learning = t.horizon_learning.lock().await;
    if t.book.horizon().is_some() || t.horizon_unanswered.load(Ordering::Relaxed) {
        return Ok(());
    }
    match run_at_startup(upstream, sbuf, t, Injection::Horizon).await {
        Ok(Injected::Horizon(Some(horizon))) => {
            let ticket = shared.recorder.log().append_horizon(&horizon).map_err(SessionError::Log)?;
            ticket.wait_async().await.map_err(SessionError::Log)?;
            info!(
                xmin = horizon.xmin,
                xmax = horizon.xmax,
                running = horizon.running.len(),
                "recording horizon learnt"
            );
            t.book.set_horizon(horizon);
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

/// Steps 1 and 2: SSLRequest/GSSENCRequest negotiation, TLS, and the startup packet. Returns `None` when the
/// connection was a CancelRequest (relayed) or was refused.
async fn negotiate(
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
            match split_startup(&mut buf, MAX_STARTUP_LEN).map_err(SessionError::ClientProtocol)? {
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
async fn connect_upstream(shared: &Shared) -> Result<BoxStream, std::io::Error> {
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

async fn relay_cancel(shared: &Shared, pid: i32, secret: Bytes) {
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
async fn send_fatal(stream: &mut (impl AsyncWrite + Unpin + ?Sized), sqlstate: &str, message: &str) {
    let msg = BackendMessage::ErrorResponse(ErrorFields::with_severity("FATAL", sqlstate, message));
    let _ = stream.write_all(&msg.to_bytes()).await;
    let _ = stream.flush().await;
}

async fn read_frame(
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
async fn relay_auth(
    shared: &Shared,
    client: &mut BoxStream,
    cbuf: &mut BytesMut,
    upstream: &mut BoxStream,
    sbuf: &mut BytesMut,
    cancel_key: &mut Option<(i32, Bytes)>,
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
                // The client gets a key of our own, mapped to the database's.
                let mine = Bytes::copy_from_slice(&rand::random::<[u8; 4]>());
                if let Ok(mut keys) = shared.cancel_keys.lock() {
                    keys.insert((pid, mine.clone()), (pid, secret));
                }
                *cancel_key = Some((pid, mine.clone()));
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

fn client_read_error(e: std::io::Error) -> SessionError {
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

/// The state both directions of the message loop share.
struct Core {
    machine: SessionMachine,
    recorder: SessionRecorder,
    /// Version tagging, when on.
    tagging: Option<SessionTagging>,
    /// A frame an injected query wants sent next (the fence's COMMIT).
    inject_send: Option<Bytes>,
}

/// Step 5: the message loop. Two pumps run concurrently in this task, one per direction, so that neither
/// side can block the other (a database writing a large result while the client is still sending must not
/// deadlock). They share the state machine through a mutex that is never held across an await.
/// What the startup packet says that recording needs: the user and the first `search_path`.
struct Startup {
    user: String,
    search_path: SearchPath,
}

impl Startup {
    fn of(packet: &StartupPacket) -> Self {
        let text = |name: &str| packet.param(name).map(|v| wire::pg::text(v).into_owned());
        let search_path =
            SearchPath::from_startup(text("search_path").as_deref(), text("options").as_deref());
        Startup { user: text("user").unwrap_or_default(), search_path }
    }
}

#[allow(clippy::too_many_arguments)]
async fn message_loop(
    shared: &Shared,
    client: BoxStream,
    cbuf: BytesMut,
    upstream: BoxStream,
    sbuf: BytesMut,
    recorder: SessionRecorder,
    startup: &Startup,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), SessionError> {
    let tagging = shared.tagging.as_ref().map(|t| {
        let mut tagging = SessionTagging::new(t.clone(), shared.config.fence.every);
        tagging.set_startup(&startup.user, startup.search_path.clone());
        tagging
    });
    let core = Mutex::new(Core { machine: SessionMachine::new(), recorder, tagging, inject_send: None });
    let replied = Notify::new();
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut sr, mut sw) = tokio::io::split(upstream);
    let max = shared.config.listen.max_message_bytes;

    let outcome = tokio::select! {
        r = client_to_server(&core, &replied, &mut cr, cbuf, &mut sw, max) => r,
        r = server_to_client(shared, &core, &replied, &mut sr, sbuf, &mut cw) => r,
        _ = shutdown.changed() => {
            send_fatal(&mut cw, "57P01", "krait: the proxy is shutting down").await;
            Ok(End::Shutdown)
        }
    };

    // Whatever ended the session, the open transaction is recorded.
    {
        let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
        let Core { machine, recorder: rec, tagging, .. } = &mut *guard;
        if let Some(mut end) = machine.on_disconnect(now_ns()) {
            if let Some(t) = tagging.as_mut() {
                end.txn.ops = t.end_ops(end.intent_written);
            }
            debug!(seq = end.txn.seq, outcome = ?end.outcome, "transaction open at disconnect");
            if let Err(e) = rec.end(end, false) {
                warn!("cannot record the transaction open at disconnect: {e}");
            }
        }
        // Only now, after the session's last transaction record, so a tailing verifier never sees the end
        // of a session before one of its transactions.
        if let Err(e) = rec.ended() {
            warn!("cannot record the end of the session: {e}");
        }
    }
    match outcome {
        Ok(End::ClientClosed) | Ok(End::Shutdown) => {
            let _ = sw.shutdown().await;
            Ok(())
        }
        Ok(End::ServerClosed) => {
            let _ = cw.shutdown().await;
            Err(SessionError::UpstreamIo(std::io::ErrorKind::UnexpectedEof.into()))
        }
        Err(Failure::Client(e)) => {
            if let SessionError::ClientProtocol(p) = &e {
                send_fatal(&mut cw, "08P01", &format!("krait: invalid message from client: {p}")).await;
            }
            let _ = sw.shutdown().await;
            Err(e)
        }
        Err(Failure::Other(e)) => {
            if let SessionError::Log(_) = &e {
                // The commit may have happened, but it cannot be recorded as promised: the client must not
                // see it acknowledged, so the connection drops with the outcome in doubt.
                send_fatal(&mut cw, "58030", "krait: the history log failed; transaction outcome unknown")
                    .await;
            }
            let _ = cw.shutdown().await;
            Err(e)
        }
    }
}

enum End {
    ClientClosed,
    ServerClosed,
    Shutdown,
}

enum Failure {
    Client(SessionError),
    Other(SessionError),
}

/// The client → database pump: split, decode, ask the state machine, log intents, forward.
async fn client_to_server(
    core: &Mutex<Core>,
    replied: &Notify,
    cr: &mut (impl AsyncRead + Unpin),
    mut cbuf: BytesMut,
    sw: &mut (impl AsyncWrite + Unpin),
    max: usize,
) -> Result<End, Failure> {
    let mut out = BytesMut::new();
    loop {
        loop {
            let frame = match split_frame(&mut cbuf, max) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(Failure::Client(SessionError::ClientProtocol(e))),
            };
            let msg = FrontendMessage::decode(&frame)
                .map_err(|e| Failure::Client(SessionError::ClientProtocol(e)))?;
            inject_between_transactions(core, replied, sw, &mut out).await?;
            let mut forward = frame.raw().clone();
            loop {
                let (step, copy_in) = {
                    let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
                    let Core { machine, recorder, tagging, .. } = &mut *guard;
                    // A message that may commit waits until the rows of every earlier statement are in, so
                    // the write-ahead intent carries all of the transaction's ops. The server runs messages
                    // in order, so this costs a pipelining client one round trip to the database and never
                    // waits on anything the server would not answer (see `SessionTagging::must_wait`).
                    let may_commit = machine.may_commit(&msg);
                    let step = if tagging.as_ref().is_some_and(|t| t.must_wait(may_commit)) {
                        FrontendStep::Wait
                    } else {
                        match machine.on_frontend(&msg, now_ns()) {
                            FrontendStep::Forward { intent: Some(mut snap) } => {
                                if let Some(t) = tagging.as_mut() {
                                    snap.ops = t.intent_ops();
                                }
                                recorder.intent(snap).map_err(|e| Failure::Other(SessionError::Log(e)))?;
                                FrontendStep::Forward { intent: None }
                            }
                            other => other,
                        }
                    };
                    if let (FrontendStep::Forward { .. }, Some(t)) = (&step, tagging.as_mut()) {
                        forward = t.frontend(&msg, frame.raw(), machine.current_statement());
                    }
                    (step, machine.in_copy_in())
                };
                match step {
                    FrontendStep::Forward { .. } => break,
                    FrontendStep::Wait => {
                        // The replies we wait for may sit in the server's output buffer until it is told to
                        // flush: send what we hold, plus a Flush, which has no reply of its own.
                        if !copy_in {
                            FrontendMessage::Flush.encode(&mut out);
                        }
                        sw.write_all(&out).await.map_err(|e| Failure::Other(SessionError::UpstreamIo(e)))?;
                        out.clear();
                        replied.notified().await;
                    }
                }
            }
            out.extend_from_slice(&forward);
            if frame.tag() == ftag::TERMINATE {
                let _ = sw.write_all(&out).await;
                return Ok(End::ClientClosed);
            }
        }
        if !out.is_empty() {
            sw.write_all(&out).await.map_err(|e| Failure::Other(SessionError::UpstreamIo(e)))?;
            out.clear();
        }
        match cr.read_buf(&mut cbuf).await {
            Ok(0) => return Ok(End::ClientClosed),
            Ok(_) => {}
            Err(e) => return Err(Failure::Other(SessionError::ClientIo(e))),
        }
    }
}

/// Runs what the tagger wants injected (a catalog reload or a fence) when the connection is between two
/// client transactions with nothing outstanding. The client's message waits meanwhile; the replies are
/// swallowed by [`server_to_client`], which records the fence in session order.
async fn inject_between_transactions(
    core: &Mutex<Core>,
    replied: &Notify,
    sw: &mut (impl AsyncWrite + Unpin),
    out: &mut BytesMut,
) -> Result<(), Failure> {
    let frame = {
        let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
        let Core { machine, tagging, .. } = &mut *guard;
        match tagging.as_mut() {
            Some(t) if machine.at_rest() && !t.injecting() => match t.injection_due() {
                Some(what) => t.start_injection(what),
                None => return Ok(()),
            },
            _ => return Ok(()),
        }
    };
    out.extend_from_slice(&frame);
    sw.write_all(out).await.map_err(|e| Failure::Other(SessionError::UpstreamIo(e)))?;
    out.clear();
    loop {
        replied.notified().await;
        let (send, done) = {
            let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
            let send = guard.inject_send.take();
            (send, !guard.tagging.as_ref().is_some_and(SessionTagging::injecting))
        };
        if let Some(f) = send {
            sw.write_all(&f).await.map_err(|e| Failure::Other(SessionError::UpstreamIo(e)))?;
        }
        if done {
            return Ok(());
        }
    }
}

/// The database → client pump: split, match each reply, record ended transactions, and hold a commit's
/// reply until its outcome is durable.
async fn server_to_client(
    shared: &Shared,
    core: &Mutex<Core>,
    replied: &Notify,
    sr: &mut (impl AsyncRead + Unpin),
    mut sbuf: BytesMut,
    cw: &mut (impl AsyncWrite + Unpin),
) -> Result<End, Failure> {
    let mut out = BytesMut::new();
    loop {
        loop {
            let frame = match split_frame(&mut sbuf, MAX_BACKEND_MESSAGE) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(Failure::Other(SessionError::UpstreamProtocol(e.to_string()))),
            };
            let mut tickets = Vec::new();
            let mut outgoing = Outgoing::Same;
            {
                let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
                let Core { machine, recorder, tagging, inject_send } = &mut *guard;
                if let Some(t) = tagging.as_mut()
                    && t.injecting()
                {
                    // A reply to an injected query: the client never sees it, the machine never matches it.
                    match t.injected_backend(frame.tag(), &frame.body()) {
                        InjectStep::More => {}
                        InjectStep::Send(f) => *inject_send = Some(f),
                        InjectStep::Done(Some(fence)) => {
                            let seq = machine.reserve_seq();
                            recorder
                                .fence(seq, fence.ops, fence.statements, fence.committed)
                                .map_err(|e| Failure::Other(SessionError::Log(e)))?;
                        }
                        InjectStep::Done(None) => {}
                    }
                    continue;
                }
                if let Some(t) = tagging.as_mut() {
                    outgoing = t.backend(frame.tag(), &frame.body());
                }
                let (ends, lost) = match machine.on_backend(frame.tag(), &frame.body(), now_ns()) {
                    Ok(ends) => (ends, false),
                    Err(desync) => {
                        Metrics::inc(&shared.metrics.desyncs);
                        warn!("{}; relaying unrecorded from now on", desync.reason);
                        (desync.ends, true)
                    }
                };
                for mut end in ends {
                    if let Some(t) = tagging.as_mut() {
                        // Ops that arrived after an intent (an autocommit statement's rows, or statements
                        // sent with their COMMIT) are logged just before the outcome.
                        end.txn.ops = t.end_ops(end.intent_written);
                        if end.outcome == history::Outcome::Committed {
                            t.committed();
                        }
                    }
                    // The ops tell whether it wrote only while tagging is on and in step with the replies.
                    let ops_known = tagging.is_some() && !lost;
                    let ticket =
                        recorder.end(end, ops_known).map_err(|e| Failure::Other(SessionError::Log(e)))?;
                    tickets.extend(ticket);
                }
                if lost {
                    // A lost session logs nothing more, so its recording ends here, in the log too: an online
                    // verifier must not wait for it (and hold garbage collection back) until the client
                    // disconnects. What it writes from now on is an unrecorded writer's (DESIGN.md §3).
                    recorder.ended().map_err(|e| Failure::Other(SessionError::Log(e)))?;
                }
            }
            if !tickets.is_empty() {
                // Everything before the commit reply may go now; the reply itself waits for durability.
                cw.write_all(&out).await.map_err(|e| Failure::Other(SessionError::ClientIo(e)))?;
                out.clear();
                for t in tickets {
                    t.wait_async().await.map_err(|e| Failure::Other(SessionError::Log(e)))?;
                }
            }
            if frame.tag() == btag::ERROR_RESPONSE {
                debug!("database error relayed");
            }
            match outgoing {
                Outgoing::Same => out.extend_from_slice(frame.raw()),
                Outgoing::Drop => {}
                Outgoing::Replace(tag, body) => {
                    out.extend_from_slice(&[tag]);
                    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
                    out.extend_from_slice(&body);
                }
            }
        }
        replied.notify_one();
        if !out.is_empty() {
            cw.write_all(&out).await.map_err(|e| Failure::Other(SessionError::ClientIo(e)))?;
            out.clear();
        }
        match sr.read_buf(&mut sbuf).await {
            Ok(0) => return Ok(End::ServerClosed),
            Ok(_) => {}
            Err(e) => return Err(Failure::Other(SessionError::UpstreamIo(e))),
        }
    }
}
