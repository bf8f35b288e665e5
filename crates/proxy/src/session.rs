//! One client's session, told in the order its bytes travel: accept, TLS, startup, the authentication relay
//! (steps 1 to 4, in [`startup`]), then the message loop: each client message goes through the state machine
//! (which queues it, with tagging's rewrite, and says when an intent must be logged first), and each reply
//! comes back through it (which matches it to its request, strips it, and ends transactions).
//!
//! Failures stay with the client that caused them. A client that sends garbage, an oversized message or a
//! broken TLS handshake gets a FATAL error (where the protocol still allows one) and its connection closes;
//! the listener and every other session go on. When the database cannot be reached, the client is told so
//! in an ErrorResponse. When the database drops the connection, the client gets whatever the database said
//! last and then the connection closes; the open transaction is recorded as aborted or indeterminate.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tracing::{Instrument, debug, info, warn};
use wire::pg::backend::tag as btag;
use wire::pg::frontend::tag as ftag;
use wire::pg::{FrontendMessage, ProtocolError, StartupPacket, split_frame};

use crate::config::Config;
use crate::interpret::fence::Injection;
use crate::interpret::inject::{InjectStep, Injector, run_at_startup};
use crate::interpret::search_path::SearchPath;
use crate::interpret::shared::TaggingShared;
use crate::interpret::tagger::{Outgoing, Tagger};
use crate::machine::{FrontendStep, Reply, SessionMachine};
use crate::metrics::{ActiveConnection, Metrics};
use crate::recorded_database::RecordedDatabase;
use crate::recorder::{Recorder, SessionRecorder};
use crate::tls::{ReloadableTls, UpstreamTls};
use history::now_ns;

mod buffers;
mod startup;
use buffers::{PumpBuffers, make_room};
use startup::{connect_upstream, learn_default_isolation, learn_horizon, negotiate, relay_auth, send_fatal};

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
    /// The database whose sessions are recorded; sessions to others are relayed unrecorded.
    pub(crate) recorded_database: RecordedDatabase,
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
        buffers::return_freed_memory();
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

    // A log that has failed records nothing more: say so before the database is even asked, rather than
    // let the client log in and fail at its first transaction.
    if let Some(reason) = shared.recorder.log().failure() {
        let msg = format!("krait: the history log failed, so no transaction can be recorded: {reason}");
        send_fatal(&mut client, "58030", &msg).await;
        return Ok(());
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
    // `cancel_key`, once the database sent its key, is a guard: from here on every way out of this
    // function, a panic included, removes the client's key from the shared map.
    //
    // One history holds one database ([`RecordedDatabase`]). With tagging on, the first recorded session (and
    // any after a table the cache did not know) loads the primary keys before the client's first message is
    // planned; a failure leaves the cache stale, to be retried between transactions.
    async {
        if !authenticated? {
            return Ok(());
        }
        let mut startup = Startup::of(&packet);
        // Until a database is chosen, this session's first request chooses it, not its login: a health
        // check (`pg_isready`) logs in to whatever database and leaves, and must not decide what is recorded.
        if !shared.recorded_database.is_chosen() {
            if cbuf.is_empty() {
                let read = tokio::select! {
                    r = client.read_buf(&mut cbuf) => r.map_err(SessionError::ClientIo)?,
                    _ = stopping.changed() => return Ok(()),
                };
                if read == 0 {
                    return Ok(());
                }
            }
            if cbuf.first() == Some(&wire::pg::frontend::tag::TERMINATE) {
                let _ = upstream.write_all(&cbuf).await;
                return Ok(());
            }
        }
        startup.recorded = shared.recorded_database.records(&startup.database, &shared.metrics).await;
        if !startup.recorded {
            return message_loop(shared, client, cbuf, upstream, sbuf, recorder, &startup, shutdown).await;
        }
        if let Some(t) = &shared.tagging {
            let reload = Injection::Catalog { as_of: t.catalog_reload_begins() };
            if t.catalog_stale()
                && let Err(e) = run_at_startup(&mut upstream, &mut sbuf, t, reload).await
            {
                warn!("cannot load the primary-key catalog: {e}");
                return Err(SessionError::UpstreamIo(e));
            }
            // Likewise the recording horizon, until some session has learnt it: every read this session
            // records is then classified against it (DESIGN.md §3).
            learn_horizon(shared, t, &mut upstream, &mut sbuf).await?;
        }
        startup.isolation = learn_default_isolation(&mut upstream, &mut sbuf).await?;
        message_loop(shared, client, cbuf, upstream, sbuf, recorder, &startup, shutdown).await
    }
    .await
}

/// The state both directions of the message loop share.
struct Core {
    /// The queue of expected replies and the transactions, with tagging inside when it is on.
    machine: SessionMachine,
    recorder: SessionRecorder,
    /// Fences and catalog reloads, when tagging is on.
    injector: Option<Injector>,
    /// A frame an injected query wants sent next (the fence's COMMIT).
    inject_send: Option<Bytes>,
}

/// What the startup packet says that recording needs: the user and the first `search_path`; and the default
/// isolation level, which the database reports after startup.
struct Startup {
    user: String,
    /// The database the session logged in to (PostgreSQL's default: the user's name).
    database: String,
    search_path: SearchPath,
    isolation: Option<history::IsolationLevel>,
    /// Whether the session's transactions are recorded: it is to the recorded database.
    recorded: bool,
}

impl Startup {
    fn of(packet: &StartupPacket) -> Self {
        let text = |name: &str| packet.param(name).map(|v| wire::pg::text(v).into_owned());
        let search_path =
            SearchPath::from_startup(text("search_path").as_deref(), text("options").as_deref());
        let user = text("user").unwrap_or_default();
        let database = text("database").filter(|d| !d.is_empty()).unwrap_or_else(|| user.clone());
        Startup { user, database, search_path, isolation: None, recorded: false }
    }
}

/// Step 5: the message loop. Two pumps run concurrently in this task, one per direction, so that neither
/// side can block the other (a database writing a large result while the client is still sending must not
/// deadlock). They share the state machine through a mutex that is never held across an await.
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
    let tagging = shared.tagging.as_ref().filter(|_| startup.recorded);
    let tagger = tagging.map(|t| {
        let mut tagger = Tagger::new(t.clone());
        tagger.set_startup(&startup.user, startup.search_path.clone());
        tagger
    });
    let injector = tagging.map(|t| Injector::new(t.clone(), &shared.config.fence));
    let mut machine =
        if startup.recorded { SessionMachine::with_tagging(tagger) } else { SessionMachine::unrecorded() };
    machine.learnt_default_isolation(startup.isolation);
    let core = Mutex::new(Core { machine, recorder, injector, inject_send: None });
    let replied = Notify::new();
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut sr, mut sw) = tokio::io::split(upstream);
    let max = shared.config.listen.max_message_bytes;

    let outcome = tokio::select! {
        r = client_to_server(&shared.metrics, &core, &replied, &mut cr, cbuf, &mut sw, max) => r,
        r = server_to_client(shared, &core, &replied, &mut sr, sbuf, &mut cw) => r,
        () = shutdown_at_rest(&core, &mut shutdown) => {
            send_fatal(&mut cw, "57P01", "krait: the proxy is shutting down").await;
            Ok(End::Shutdown)
        }
    };

    // Whatever ended the session, the open transaction is recorded.
    {
        let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
        let Core { machine, recorder: rec, .. } = &mut *guard;
        if let Some(end) = machine.on_disconnect(now_ns()) {
            debug!(seq = end.txn.seq, outcome = ?end.outcome, "transaction open at disconnect");
            if let Err(e) = rec.end(end, false).map(drop) {
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

/// How long a session that the proxy is stopping waits for an injected query in flight.
const INJECTION_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Resolves once the proxy is shutting down and no injected query is in flight (or [`INJECTION_GRACE`]
/// has passed), while the pumps go on. A fence the database may already have committed is recorded before
/// the session goes: cut off between its COMMIT and its record, it left a version of the fence row that the
/// next run's first fence read with no owner, and collection stopped there (the test that found it caught
/// it in 6 of 14 runs).
async fn shutdown_at_rest(core: &Mutex<Core>, shutdown: &mut watch::Receiver<bool>) {
    // An error means the proxy's handle is gone: that ends the session too, as a shutdown does.
    let _ = shutdown.changed().await;
    let deadline = tokio::time::Instant::now() + INJECTION_GRACE;
    while tokio::time::Instant::now() < deadline {
        let injecting = {
            let guard = core.lock().unwrap_or_else(|p| p.into_inner());
            guard.injector.as_ref().is_some_and(Injector::injecting)
        };
        if !injecting {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
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

/// The client → database pump: split, decode, ask the state machine, log intents, forward. While the client
/// sends nothing, it wakes once per [`Injector::idle_after`] and runs a fence if the connection is idle
/// ([`Injector::idle_injection_due`]).
async fn client_to_server(
    metrics: &Metrics,
    core: &Mutex<Core>,
    replied: &Notify,
    cr: &mut (impl AsyncRead + Unpin),
    mut cbuf: BytesMut,
    sw: &mut (impl AsyncWrite + Unpin),
    max: usize,
) -> Result<End, Failure> {
    let mut out = BytesMut::new();
    let mut bufs = PumpBuffers::new(metrics);
    // One timer for the session, moved on only when it fires (not at every read): the hot path pays for
    // a clock read per read, not a timer per read.
    let idle_after =
        core.lock().unwrap_or_else(|p| p.into_inner()).injector.as_ref().and_then(Injector::idle_after);
    let idle_timer = tokio::time::sleep(idle_after.unwrap_or_default());
    tokio::pin!(idle_timer);
    let mut last_read = tokio::time::Instant::now();
    loop {
        loop {
            let frame = match split_frame(&mut cbuf, max) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(Failure::Client(SessionError::ClientProtocol(e))),
            };
            let msg = FrontendMessage::decode(&frame)
                .map_err(|e| Failure::Client(SessionError::ClientProtocol(e)))?;
            // A closing connection fences first if it committed since its last fence, so that its last
            // transactions get an epoch ([`Injector::closing_injection_due`]).
            let due = match frame.tag() {
                ftag::TERMINATE => Injector::closing_injection_due,
                _ => Injector::injection_due,
            };
            inject_at_rest(core, replied, sw, &mut out, due).await?;
            let mut forward = frame.raw().clone();
            loop {
                let (step, copy_in) = {
                    let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
                    let Core { machine, recorder, .. } = &mut *guard;
                    let mut step = machine.on_frontend(&msg, now_ns());
                    if let FrontendStep::Forward { intent, frame } = &mut step {
                        // Moved into the log, not copied: it holds every op of the transaction so far.
                        if let Some(snap) = intent.take() {
                            let (id, xids) =
                                recorder.intent(snap).map_err(|e| Failure::Other(SessionError::Log(e)))?;
                            // Only now that the intent is in the log may a reader name it as a writer.
                            machine.own_xids(&xids, id);
                        }
                        if let Some(rewritten) = frame {
                            forward = rewritten.clone();
                        }
                    }
                    (step, machine.in_copy_in())
                };
                match step {
                    FrontendStep::Forward { .. } => break,
                    FrontendStep::LearnXid => {
                        let frame = {
                            let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
                            guard.injector.as_mut().map(|t| t.start_injection(Injection::Xid))
                        };
                        match frame {
                            Some(frame) => {
                                out.extend_from_slice(&frame);
                                finish_injection(core, replied, sw, &mut out).await?;
                            }
                            None => core.lock().unwrap_or_else(|p| p.into_inner()).machine.learned_xid(None),
                        }
                    }
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
        bufs.shrink(&mut cbuf, &mut out);
        make_room(&mut cbuf);
        bufs.note(&cbuf, &out);
        let read = match idle_after {
            None => cr.read_buf(&mut cbuf).await,
            Some(after) => tokio::select! {
                read = cr.read_buf(&mut cbuf) => read,
                () = &mut idle_timer => {
                    let now = tokio::time::Instant::now();
                    if now >= last_read + after {
                        inject_at_rest(core, replied, sw, &mut out, Injector::idle_injection_due).await?;
                        idle_timer.as_mut().reset(tokio::time::Instant::now() + after);
                    } else {
                        idle_timer.as_mut().reset(last_read + after);
                    }
                    continue;
                }
            },
        };
        match read {
            Ok(0) => {
                // Gone without a Terminate: the connection to the database is still there to fence on. The
                // client is gone whatever happens to the fence, so its failure ends nothing more.
                let _ = inject_at_rest(core, replied, sw, &mut out, Injector::closing_injection_due).await;
                return Ok(End::ClientClosed);
            }
            Ok(_) => {
                if idle_after.is_some() {
                    last_read = tokio::time::Instant::now();
                }
            }
            Err(e) => return Err(Failure::Other(SessionError::ClientIo(e))),
        }
    }
}

/// Runs what `due` asks for, if the connection is between two client transactions with nothing outstanding
/// and nothing is being injected: [`Injector::injection_due`] (a catalog reload or a fence) before a client
/// message, which waits meanwhile; [`Injector::idle_injection_due`] (a fence, so that an idle connection
/// does not hold the epochs, and so garbage collection, back) when the client has sent nothing for a
/// while, and a message it sends meanwhile waits in the socket. The replies are swallowed by
/// [`server_to_client`], which records the fence in session order.
///
/// One injection can make another due: a connection's first client message, or its last, finds the catalog
/// stale (another connection changed the schema), and its opening or closing fence is due once the catalog
/// is loaded. Both run before the message, so that the connection's first transaction follows a fence (its
/// reads are judged) and its last is followed by one. [`MAX_INJECTIONS_AT_REST`] bounds the chain, should
/// the catalog go stale again and again.
async fn inject_at_rest(
    core: &Mutex<Core>,
    replied: &Notify,
    sw: &mut (impl AsyncWrite + Unpin),
    out: &mut BytesMut,
    due: fn(&Injector) -> Option<Injection>,
) -> Result<(), Failure> {
    for _ in 0..MAX_INJECTIONS_AT_REST {
        let frame = {
            let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
            let Core { machine, injector, .. } = &mut *guard;
            match injector.as_mut() {
                Some(t) if machine.at_rest() && !t.injecting() => match due(t) {
                    Some(what) => t.start_injection(what),
                    None => return Ok(()),
                },
                _ => return Ok(()),
            }
        };
        out.extend_from_slice(&frame);
        finish_injection(core, replied, sw, out).await?;
    }
    Ok(())
}

/// The most injections run back to back at one rest ([`inject_at_rest`]): a catalog load and a fence, with
/// room for a reload that another session's schema change made due meanwhile.
const MAX_INJECTIONS_AT_REST: usize = 3;

/// Sends `out`, which ends with an injection's frames, and waits until the injection is over.
async fn finish_injection(
    core: &Mutex<Core>,
    replied: &Notify,
    sw: &mut (impl AsyncWrite + Unpin),
    out: &mut BytesMut,
) -> Result<(), Failure> {
    sw.write_all(out).await.map_err(|e| Failure::Other(SessionError::UpstreamIo(e)))?;
    out.clear();
    loop {
        replied.notified().await;
        let (send, done) = {
            let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
            let send = guard.inject_send.take();
            (send, !guard.injector.as_ref().is_some_and(Injector::injecting))
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
    let mut bufs = PumpBuffers::new(&shared.metrics);
    loop {
        loop {
            let frame = match split_frame(&mut sbuf, MAX_BACKEND_MESSAGE) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(Failure::Other(SessionError::UpstreamProtocol(e.to_string()))),
            };
            let mut tickets: Vec<history::log::DurabilityTicket> = Vec::new();
            // A fence's COMMIT, to send once its intent is durable.
            let mut fence_commit = None;
            let outgoing = 'frame: {
                let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
                let Core { machine, recorder, injector, inject_send } = &mut *guard;
                if let Some(t) = injector.as_mut()
                    && t.injecting()
                {
                    // A reply to an injected query: the client never sees it, the machine never matches it.
                    let log = |e| Failure::Other(SessionError::Log(e));
                    match t.injected_backend(frame.tag(), &frame.body()) {
                        InjectStep::More => {}
                        InjectStep::Send(f) => *inject_send = Some(f),
                        InjectStep::Commit { intent, commit } => {
                            let seq = machine.reserve_seq();
                            let ticket = recorder
                                .fence_intent(seq, intent.ops, intent.statements, intent.xid)
                                .map_err(log)?;
                            fence_commit = Some((ticket, commit));
                        }
                        InjectStep::Done(Some(fence)) => {
                            if !recorder.fence_outcome(fence.committed).map_err(log)? {
                                let seq = machine.reserve_seq();
                                recorder
                                    .fence(seq, fence.ops, fence.statements, fence.committed)
                                    .map_err(log)?;
                            }
                        }
                        InjectStep::Done(None) => {}
                        InjectStep::Learned(xid) => machine.learned_xid(xid),
                    }
                    break 'frame None;
                }
                let (Reply { ends, outgoing }, lost) =
                    match machine.on_backend(frame.tag(), &frame.body(), now_ns()) {
                        Ok(reply) => (reply, false),
                        Err(desync) => {
                            Metrics::inc(&shared.metrics.desyncs);
                            if let Some(t) = machine.tagger() {
                                t.shared()
                                    .book
                                    .suspend_exclusive(|| "it lost track of a session's replies".into());
                            }
                            warn!("{}; relaying unrecorded from now on", desync.reason);
                            (Reply { ends: desync.ends, outgoing: Outgoing::Same }, true)
                        }
                    };
                // Discovered writes go to the log before any record of this session that cites them, and
                // into the book only then, so no other session's record can cite them earlier either.
                for found in machine.take_discovered() {
                    let (key, write) = (found.key.clone(), found.write);
                    recorder.discovered(found).map_err(|e| Failure::Other(SessionError::Log(e)))?;
                    machine.discovered_logged(&key, write);
                }
                for end in ends {
                    if end.outcome == history::Outcome::Committed
                        && let Some(t) = injector.as_mut()
                    {
                        t.committed();
                    }
                    // The ops tell whether it wrote only while tagging is on and in step with the replies.
                    let ops_known = machine.tagging_in_step() && !lost;
                    let (xids, aborted) = (end.txn.xids.clone(), end.outcome == history::Outcome::Aborted);
                    let (id, ticket) =
                        recorder.end(end, ops_known).map_err(|e| Failure::Other(SessionError::Log(e)))?;
                    if !aborted {
                        machine.own_xids(&xids, id);
                    }
                    tickets.extend(ticket);
                }
                if lost {
                    // A lost session logs nothing more, so its recording ends here, in the log too: an online
                    // verifier must not wait for it (and hold garbage collection back) until the client
                    // disconnects. What it writes from now on is an unrecorded writer's (DESIGN.md §3).
                    recorder.ended().map_err(|e| Failure::Other(SessionError::Log(e)))?;
                }
                Some(outgoing)
            };
            // A fence's COMMIT waits until its intent is as durable as a commit's outcome would be, so
            // that a crash cannot lose the record of a fence the database committed.
            if let Some((ticket, commit)) = fence_commit {
                ticket.wait_async_undelayed().await.map_err(|e| Failure::Other(SessionError::Log(e)))?;
                core.lock().unwrap_or_else(|p| p.into_inner()).inject_send = Some(commit);
            }
            let Some(outgoing) = outgoing else { continue };
            // The commit reply waits until its outcome is as durable as promised. What came before it waits
            // with it, so that a reply goes to the client in one send (the client needs the whole of it
            // anyway; the rows in `out` are at most one read's worth).
            for t in tickets {
                t.wait_async().await.map_err(|e| Failure::Other(SessionError::Log(e)))?;
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
        bufs.shrink(&mut sbuf, &mut out);
        make_room(&mut sbuf);
        bufs.note(&sbuf, &out);
        match sr.read_buf(&mut sbuf).await {
            Ok(0) => return Ok(End::ServerClosed),
            Ok(_) => {}
            Err(e) => return Err(Failure::Other(SessionError::UpstreamIo(e))),
        }
    }
}
