//! A PostgreSQL-wire front for the reference store, so that real drivers (and the real proxy) can run
//! transactions on it: `krait refstore --listen ADDR --model si`.
//!
//! Every connection is one client of the store ([`Session`]). The front speaks protocol 3.0 with the
//! project's own codec (`wire::pg`, which decodes every frontend message and encodes every backend one):
//! - startup without authentication (AuthenticationOk, ParameterStatus, BackendKeyData, ReadyForQuery);
//!   SSLRequest and GSSENCRequest are answered `N`, CancelRequest is ignored;
//! - the simple query protocol, several statements per Query included (each statement outside a BEGIN
//!   block commits on its own: unlike PostgreSQL, a multi-statement Query is not one implicit transaction);
//! - the extended protocol (Parse, Bind, Describe, Execute with row limits, Close, Flush, Sync), with
//!   parameters in text or binary; a statement outside a BEGIN block commits when it is executed;
//! - the SQL of [`sql`], on the table `kv(k int8, v int8)` that always exists and starts empty, and the
//!   statements the Krait proxy sends on its own: its primary-key catalog query, its row-version tags
//!   (`xmin::text`) and its fence transactions on `krait_fence(id int4, epoch int8)`, which also always
//!   exists and starts empty (see [`sql`] and [`crate::session::Table`]). So the real proxy, tagging on,
//!   can run in front of the store.
//!
//! COMMIT runs the model's execution test; a refused commit is an ERROR with SQLSTATE 40001
//! (serialization_failure), after which the transaction is over, so drivers retry as they do on PostgreSQL.
//! Other SQL is refused with an ERROR (0A000 feature_not_supported, or the SQLSTATE PostgreSQL would use)
//! and the connection carries on; inside a BEGIN block the block is then failed (status `E`) until
//! ROLLBACK, as in PostgreSQL. Bytes that break the protocol get a FATAL 08P01 error and the connection is
//! closed; the server and the other connections carry on.

mod exec;
mod front;
pub mod sql;
mod values;

use std::collections::HashMap;
use std::future::Future;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use wire::pg::backend::ErrorFields;
use wire::pg::{
    BackendMessage, FrontendMessage, MAX_STARTUP_LEN, ProtocolError, StartupPacket, split_frame,
    split_startup,
};

use crate::session::{Session, SessionError, SharedStore};
use front::{Portal, Prepared};
use sql::SqlError;

/// The largest frontend message the front accepts; the statements it understands are tiny.
pub const MAX_MESSAGE_LEN: usize = 1 << 20;

/// What the server reports as its version: PostgreSQL 16 syntax, so that clients pick modern behaviour.
pub const SERVER_VERSION: &str = "16.0 (krait refstore)";

/// Accepts connections on `listener` and serves each on its own task until `shutdown` resolves; then stops
/// accepting and closes every connection (open transactions are recorded as aborted).
pub async fn serve(
    listener: TcpListener,
    store: SharedStore,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, _peer)) => {
                    let _ = socket.set_nodelay(true);
                    let store = store.clone();
                    tasks.spawn(async move {
                        if let Err(e) = connection(socket, store).await {
                            tracing::debug!("refstore connection ended: {e}");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("refstore: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.shutdown().await;
    Ok(())
}

/// Why a connection ended other than by Terminate or the client closing it.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The client broke the protocol; it was sent a FATAL error.
    #[error("protocol violation: {0}")]
    Protocol(#[from] ProtocolError),
}

/// Serves one client connection until it ends.
pub async fn connection<S>(mut socket: S, store: SharedStore) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(4096);
    // Startup: answer SSL and GSS encryption requests with "no", then expect a StartupMessage.
    loop {
        let packet = match split_startup(&mut buf, MAX_STARTUP_LEN) {
            Ok(Some(body)) => StartupPacket::decode(&body),
            Ok(None) => {
                if socket.read_buf(&mut buf).await? == 0 {
                    return Ok(());
                }
                continue;
            }
            Err(e) => Err(e),
        };
        match packet {
            Ok(StartupPacket::SslRequest | StartupPacket::GssEncRequest) => socket.write_all(b"N").await?,
            Ok(StartupPacket::CancelRequest { .. }) => return Ok(()),
            Ok(StartupPacket::Startup { .. }) => break,
            Err(e) => return fatal(&mut socket, e).await,
        }
    }

    let session = store.connect();
    let mut conn = Conn::new(session);
    conn.greet();
    loop {
        let frame = match split_frame(&mut buf, MAX_MESSAGE_LEN) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                if !conn.out.is_empty() {
                    socket.write_all(&conn.out).await?;
                    conn.out.clear();
                }
                if socket.read_buf(&mut buf).await? == 0 {
                    return Ok(());
                }
                continue;
            }
            Err(e) => return fatal(&mut socket, e).await,
        };
        let msg = match FrontendMessage::decode(&frame) {
            Ok(msg) => msg,
            Err(e) => {
                socket.write_all(&conn.out).await?;
                return fatal(&mut socket, e).await;
            }
        };
        match conn.handle(msg) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Close) => {
                socket.write_all(&conn.out).await?;
                return Ok(());
            }
            Err(e) => {
                socket.write_all(&conn.out).await?;
                return fatal(&mut socket, e).await;
            }
        }
        if conn.out.len() > 64 * 1024 {
            socket.write_all(&conn.out).await?;
            conn.out.clear();
        }
    }
}

/// Sends a FATAL protocol-violation error and reports it.
async fn fatal<S: AsyncWrite + Unpin>(socket: &mut S, e: ProtocolError) -> Result<(), ConnectionError> {
    let msg = BackendMessage::ErrorResponse(ErrorFields::with_severity("FATAL", "08P01", &e.to_string()));
    // The client may already be gone; the violation is what gets reported.
    let _ = socket.write_all(&msg.to_bytes()).await;
    let _ = socket.shutdown().await;
    Err(ConnectionError::Protocol(e))
}

enum Flow {
    Continue,
    Close,
}

/// An error for the client: SQLSTATE and message.
#[derive(Debug)]
struct PgError {
    sqlstate: &'static str,
    message: String,
}

impl PgError {
    fn new(sqlstate: &'static str, message: impl Into<String>) -> Self {
        PgError { sqlstate, message: message.into() }
    }
}

impl From<SqlError> for PgError {
    fn from(e: SqlError) -> Self {
        PgError { sqlstate: e.sqlstate, message: e.message }
    }
}

impl From<SessionError> for PgError {
    fn from(e: SessionError) -> Self {
        let sqlstate = match e {
            SessionError::Refused { .. } => "40001",
            SessionError::Duplicate(_) => "23505",
            SessionError::InvalidConfig(_) | SessionError::Internal(_) => "XX000",
        };
        PgError { sqlstate, message: e.to_string() }
    }
}

/// One client connection's state. Its message handling is in `front`, its statement execution in `exec`.
struct Conn {
    session: Session,
    /// Inside a BEGIN block.
    block: bool,
    /// The block hit an error: everything but COMMIT/ROLLBACK is refused until it ends.
    failed: bool,
    read_only: bool,
    /// Extended protocol: an error happened, so messages are skipped until Sync.
    skip_to_sync: bool,
    statements: HashMap<Bytes, Prepared>,
    portals: HashMap<Bytes, Portal>,
    out: BytesMut,
}
