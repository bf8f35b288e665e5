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

pub mod sql;

use std::collections::HashMap;
use std::future::Future;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use wire::pg::backend::{Authentication, ErrorFields, FieldDescription};
use wire::pg::{
    BackendMessage, FrontendMessage, MAX_STARTUP_LEN, ProtocolError, StartupPacket, Target, TxnStatus,
    split_frame, split_startup,
};

use crate::session::{Row, Session, SessionError, SharedStore, Table};
use sql::{ColType, Column, Item, NewValue, Scalar, SqlError, Statement};

/// The largest frontend message the front accepts; the statements it understands are tiny.
pub const MAX_MESSAGE_LEN: usize = 1 << 20;

/// The type oid of `int8`, the type of every parameter and most columns.
const INT8_OID: u32 = 20;
const INT4_OID: u32 = 23;
const INT2_OID: u32 = 21;
const TEXT_OID: u32 = 25;
const VARCHAR_OID: u32 = 1043;

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

/// A prepared statement: `None` for an empty query.
#[derive(Clone, Debug)]
struct Prepared {
    stmt: Option<Statement>,
    /// The parameter types: the ones the client declared, int8 for the rest.
    param_types: Vec<u32>,
}

/// A bound portal, with the rows of its execution once it has run.
#[derive(Debug)]
struct Portal {
    stmt: Option<Statement>,
    params: Vec<Option<i64>>,
    result_formats: Vec<i16>,
    /// After the first Execute: the rows not sent yet and the command tag.
    ran: Option<(std::collections::VecDeque<Vec<Cell>>, String)>,
}

/// One value of a result row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    /// An integer, sent as its column's type says (int8, int4, or its decimal text).
    Int(i64),
    /// A fixed text (the catalog's names).
    Text(&'static str),
}

/// The result of one statement.
struct Outcome {
    rows: Vec<Vec<Cell>>,
    tag: String,
    /// A notice to send before the result (a no-op CREATE TABLE IF NOT EXISTS).
    notice: Option<(&'static str, &'static str)>,
}

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

impl Conn {
    fn new(session: Session) -> Self {
        Conn {
            session,
            block: false,
            failed: false,
            read_only: false,
            skip_to_sync: false,
            statements: HashMap::new(),
            portals: HashMap::new(),
            out: BytesMut::with_capacity(4096),
        }
    }

    fn send(&mut self, msg: BackendMessage) {
        msg.encode(&mut self.out);
    }

    fn status(&self) -> TxnStatus {
        match (self.block, self.failed) {
            (false, _) => TxnStatus::Idle,
            (true, false) => TxnStatus::InTransaction,
            (true, true) => TxnStatus::Failed,
        }
    }

    fn greet(&mut self) {
        self.send(BackendMessage::Authentication(Authentication::Ok));
        for (name, value) in [
            ("server_version", SERVER_VERSION),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("IntervalStyle", "postgres"),
            ("TimeZone", "UTC"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
            ("is_superuser", "off"),
            ("application_name", ""),
        ] {
            self.send(BackendMessage::ParameterStatus {
                name: Bytes::from_static(name.as_bytes()),
                value: Bytes::from_static(value.as_bytes()),
            });
        }
        // Cancellation is not supported; the key only has to be well formed.
        let pid = i32::try_from(self.session.id() + 1).unwrap_or(i32::MAX);
        self.send(BackendMessage::BackendKeyData { pid, secret: Bytes::copy_from_slice(&pid.to_be_bytes()) });
        self.send(BackendMessage::ReadyForQuery(TxnStatus::Idle));
    }

    fn error(&mut self, e: PgError) {
        self.send(BackendMessage::ErrorResponse(ErrorFields::error(e.sqlstate, &e.message)));
    }

    fn warning(&mut self, sqlstate: &str, message: &str) {
        self.send(BackendMessage::NoticeResponse(ErrorFields::with_severity("WARNING", sqlstate, message)));
    }

    fn notice(&mut self, sqlstate: &str, message: &str) {
        self.send(BackendMessage::NoticeResponse(ErrorFields::with_severity("NOTICE", sqlstate, message)));
    }

    fn handle(&mut self, msg: FrontendMessage) -> Result<Flow, ProtocolError> {
        if self.skip_to_sync && !matches!(msg, FrontendMessage::Sync | FrontendMessage::Terminate) {
            return Ok(Flow::Continue);
        }
        match msg {
            FrontendMessage::Query { sql } => self.simple_query(&sql),
            FrontendMessage::Parse { name, query, param_types } => {
                let r = self.parse(&query, param_types);
                let r = r.map(|p| {
                    self.statements.insert(name, p);
                    BackendMessage::ParseComplete
                });
                self.extended(r);
            }
            FrontendMessage::Bind { portal, statement, param_formats, params, result_formats } => {
                let r = self.bind(&statement, &param_formats, &params, result_formats);
                let r = r.map(|p| {
                    self.portals.insert(portal, p);
                    BackendMessage::BindComplete
                });
                self.extended(r);
            }
            FrontendMessage::Describe { target, name } => {
                if let Err(e) = self.describe(target, &name) {
                    self.extended(Err(e));
                }
            }
            FrontendMessage::Execute { portal, max_rows } => {
                if let Err(e) = self.execute_portal(&portal, max_rows) {
                    self.extended(Err(e));
                }
            }
            FrontendMessage::Close { target, name } => {
                match target {
                    Target::Statement => self.statements.remove(&name).map(|_| ()),
                    Target::Portal => self.portals.remove(&name).map(|_| ()),
                };
                self.send(BackendMessage::CloseComplete);
            }
            FrontendMessage::Sync => {
                self.skip_to_sync = false;
                if !self.block {
                    self.portals.clear();
                }
                self.send(BackendMessage::ReadyForQuery(self.status()));
            }
            FrontendMessage::Flush => {}
            FrontendMessage::Terminate => return Ok(Flow::Close),
            FrontendMessage::FunctionCall { .. } => {
                self.error(PgError::new("0A000", "function calls are not supported"));
                self.send(BackendMessage::ReadyForQuery(self.status()));
            }
            FrontendMessage::Password(_)
            | FrontendMessage::CopyData(_)
            | FrontendMessage::CopyDone
            | FrontendMessage::CopyFail { .. } => {
                return Err(ProtocolError::invalid(
                    "message",
                    format!(
                        "unexpected message type {:?} outside authentication or COPY",
                        char::from(msg.tag())
                    ),
                ));
            }
        }
        Ok(Flow::Continue)
    }

    /// Sends an extended-protocol reply, or the error and then skips to Sync.
    fn extended(&mut self, r: Result<BackendMessage, PgError>) {
        match r {
            Ok(m) => self.send(m),
            Err(e) => {
                self.fail_block();
                self.error(e);
                self.skip_to_sync = true;
            }
        }
    }

    fn simple_query(&mut self, sql: &[u8]) {
        let parsed = std::str::from_utf8(sql)
            .map_err(|_| PgError::new("22021", "invalid byte sequence for encoding \"UTF8\""))
            .and_then(|s| sql::parse(s).map_err(PgError::from));
        match parsed {
            Ok(stmts) if stmts.is_empty() => self.send(BackendMessage::EmptyQueryResponse),
            Ok(stmts) => {
                for stmt in &stmts {
                    match self.run(stmt, &[]) {
                        Ok(outcome) => {
                            if let Some((state, text)) = outcome.notice {
                                self.notice(state, text);
                            }
                            let cols = stmt.columns();
                            if !cols.is_empty() {
                                let fields = row_description(&cols, &[]);
                                self.send(BackendMessage::RowDescription { fields });
                            }
                            for row in &outcome.rows {
                                self.send(data_row(row, &cols, &[]));
                            }
                            self.send(command_complete(&outcome.tag));
                        }
                        Err(e) => {
                            self.error(e);
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                self.fail_block();
                self.error(e);
            }
        }
        self.send(BackendMessage::ReadyForQuery(self.status()));
    }

    fn parse(&mut self, query: &[u8], declared: Vec<u32>) -> Result<Prepared, PgError> {
        let text = std::str::from_utf8(query)
            .map_err(|_| PgError::new("22021", "invalid byte sequence for UTF8"))?;
        let parsed = sql::parse_one(text)?;
        let used = parsed.as_ref().map_or(0, |(_, n)| *n);
        let mut param_types = declared;
        if param_types.len() < used {
            param_types.resize(used, 0);
        }
        for t in &mut param_types {
            if *t == 0 {
                *t = INT8_OID;
            }
        }
        Ok(Prepared { stmt: parsed.map(|(s, _)| s), param_types })
    }

    fn bind(
        &mut self,
        statement: &[u8],
        formats: &[i16],
        params: &[Option<Bytes>],
        result_formats: Vec<i16>,
    ) -> Result<Portal, PgError> {
        let prepared = self.statements.get(statement).ok_or_else(|| {
            PgError::new(
                "26000",
                format!("prepared statement \"{}\" does not exist", wire::pg::text(statement)),
            )
        })?;
        if params.len() != prepared.param_types.len() {
            return Err(PgError::new(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                    params.len(),
                    wire::pg::text(statement),
                    prepared.param_types.len()
                ),
            ));
        }
        if formats.len() > 1 && formats.len() != params.len() {
            return Err(PgError::new("08P01", "bind message has a wrong number of parameter formats"));
        }
        let columns = prepared.stmt.as_ref().map_or(0, |s| s.columns().len());
        if result_formats.len() > 1 && result_formats.len() != columns {
            return Err(PgError::new(
                "08P01",
                format!(
                    "bind message has {} result formats but query has {columns} columns",
                    result_formats.len()
                ),
            ));
        }
        let mut values = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate() {
            let format = formats.get(if formats.len() == 1 { 0 } else { i }).copied().unwrap_or(0);
            values.push(match p {
                None => None,
                Some(bytes) => Some(decode_param(bytes, format, prepared.param_types[i])?),
            });
        }
        Ok(Portal { stmt: prepared.stmt.clone(), params: values, result_formats, ran: None })
    }

    fn describe(&mut self, target: Target, name: &[u8]) -> Result<(), PgError> {
        let (stmt, formats, types) = match target {
            Target::Statement => {
                let p = self.statements.get(name).ok_or_else(|| {
                    PgError::new(
                        "26000",
                        format!("prepared statement \"{}\" does not exist", wire::pg::text(name)),
                    )
                })?;
                (p.stmt.clone(), Vec::new(), Some(p.param_types.clone()))
            }
            Target::Portal => {
                let p = self.portals.get(name).ok_or_else(|| {
                    PgError::new("34000", format!("portal \"{}\" does not exist", wire::pg::text(name)))
                })?;
                (p.stmt.clone(), p.result_formats.clone(), None)
            }
        };
        if let Some(types) = types {
            self.send(BackendMessage::ParameterDescription { types });
        }
        match stmt.as_ref().map(|s| s.columns()).filter(|c| !c.is_empty()) {
            Some(cols) => {
                let fields = row_description(&cols, &formats);
                self.send(BackendMessage::RowDescription { fields });
            }
            None => self.send(BackendMessage::NoData),
        }
        Ok(())
    }

    fn execute_portal(&mut self, name: &[u8], max_rows: i32) -> Result<(), PgError> {
        let portal = self.portals.get_mut(name).ok_or_else(|| {
            PgError::new("34000", format!("portal \"{}\" does not exist", wire::pg::text(name)))
        })?;
        let Some(stmt) = portal.stmt.clone() else {
            self.send(BackendMessage::EmptyQueryResponse);
            return Ok(());
        };
        if portal.ran.is_none() {
            let params = portal.params.clone();
            let outcome = self.run(&stmt, &params)?;
            if let Some((state, text)) = outcome.notice {
                self.notice(state, text);
            }
            let portal =
                self.portals.get_mut(name).ok_or_else(|| PgError::new("34000", "portal vanished"))?;
            portal.ran = Some((outcome.rows.into(), outcome.tag));
        }
        let portal = self.portals.get_mut(name).ok_or_else(|| PgError::new("34000", "portal vanished"))?;
        let formats = portal.result_formats.clone();
        let Some((rows, tag)) = portal.ran.as_mut() else { return Ok(()) };
        let limit = usize::try_from(max_rows).ok().filter(|&n| n > 0).unwrap_or(usize::MAX);
        let batch: Vec<Vec<Cell>> = (0..limit).map_while(|_| rows.pop_front()).collect();
        let suspended = !rows.is_empty();
        let tag = tag.clone();
        let cols = stmt.columns();
        for row in &batch {
            self.send(data_row(row, &cols, &formats));
        }
        self.send(if suspended { BackendMessage::PortalSuspended } else { command_complete(&tag) });
        Ok(())
    }

    /// Marks a BEGIN block failed after an error: its transaction is rolled back now (recorded as aborted)
    /// and the block waits for ROLLBACK.
    fn fail_block(&mut self) {
        if self.block {
            self.failed = true;
            self.session.rollback();
        }
    }

    /// Runs one statement in the session: transaction control, or a data statement in the open block or in
    /// a transaction of its own.
    fn run(&mut self, stmt: &Statement, params: &[Option<i64>]) -> Result<Outcome, PgError> {
        let tag = |t: &str| Ok(Outcome { rows: Vec::new(), tag: t.to_owned(), notice: None });
        match stmt {
            Statement::Begin { read_only } => {
                if self.block {
                    self.warning("25001", "there is already a transaction in progress");
                } else {
                    self.block = true;
                    self.failed = false;
                    self.read_only = *read_only;
                    self.session.begin();
                }
                tag("BEGIN")
            }
            Statement::Commit => {
                if !self.block {
                    self.warning("25P01", "there is no transaction in progress");
                    return tag("COMMIT");
                }
                let failed = std::mem::take(&mut self.failed);
                self.block = false;
                if failed {
                    self.session.rollback();
                    return tag("ROLLBACK");
                }
                self.session.commit()?;
                tag("COMMIT")
            }
            Statement::Rollback => {
                if !self.block {
                    self.warning("25P01", "there is no transaction in progress");
                }
                self.block = false;
                self.failed = false;
                self.session.rollback();
                tag("ROLLBACK")
            }
            data => {
                if self.failed {
                    return Err(PgError::new(
                        "25P02",
                        "current transaction is aborted, commands ignored until end of transaction block",
                    ));
                }
                let result = self.data(data, params);
                if self.block {
                    if result.is_err() {
                        self.fail_block();
                    }
                    return result;
                }
                // Outside a block the statement is its own transaction.
                match result {
                    Ok(outcome) => {
                        self.session.commit()?;
                        Ok(outcome)
                    }
                    Err(e) => {
                        self.session.rollback();
                        Err(e)
                    }
                }
            }
        }
    }

    fn data(&mut self, stmt: &Statement, params: &[Option<i64>]) -> Result<Outcome, PgError> {
        let value = |s: Scalar| -> Result<Option<i64>, PgError> {
            match s {
                Scalar::Lit(n) => Ok(Some(n)),
                Scalar::Param(i) => params
                    .get(i)
                    .copied()
                    .ok_or_else(|| PgError::new("42P02", format!("there is no parameter ${}", i + 1))),
            }
        };
        let not_null = |v: Option<i64>, table: Table, col: &str| {
            v.ok_or_else(|| {
                PgError::new(
                    "23502",
                    format!("null value in column \"{col}\" of relation \"{}\"", table.name()),
                )
            })
        };
        // krait_fence's key is an int4, as the proxy creates it.
        let row_of = |table: Table, key: i64| -> Result<Row, PgError> {
            if table == Table::Fence && i32::try_from(key).is_err() {
                return Err(PgError::new("22003", "integer out of range"));
            }
            Ok(Row { table, key })
        };
        let outcome = |rows: Vec<Vec<Cell>>, tag: String| Ok(Outcome { rows, tag, notice: None });
        let writes = matches!(
            stmt,
            Statement::Update { .. }
                | Statement::Insert { .. }
                | Statement::Delete { .. }
                | Statement::CreateFence
        );
        if writes && self.block && self.read_only {
            return Err(PgError::new("25006", "cannot execute a write in a read-only transaction"));
        }
        match stmt {
            Statement::Catalog => {
                let rows =
                    sql::CATALOG_ROWS.iter().map(|r| r.iter().map(|&t| Cell::Text(t)).collect()).collect();
                outcome(rows, format!("SELECT {}", sql::CATALOG_ROWS.len()))
            }
            Statement::CreateFence => Ok(Outcome {
                rows: Vec::new(),
                tag: "CREATE TABLE".into(),
                notice: Some(("42P07", "relation \"krait_fence\" already exists, skipping")),
            }),
            Statement::Select { table, cols, key } => {
                // `k = NULL` matches no row and reads nothing.
                let Some(k) = value(*key)? else { return outcome(vec![], "SELECT 0".into()) };
                let read = self.session.read(row_of(*table, k)?)?;
                let Some(v) = read.value else { return outcome(vec![], "SELECT 0".into()) };
                let own = self.session.txn_number();
                let row = cells(cols, Shown { k, v, xmin: read.writer, replaced: read.writer, own });
                outcome(vec![row], "SELECT 1".into())
            }
            Statement::Update { table, value: new, key, returning } => {
                let Some(k) = value(*key)? else { return outcome(vec![], "UPDATE 0".into()) };
                let row = row_of(*table, k)?;
                let read = self.session.read(row)?;
                let Some(old) = read.value else { return outcome(vec![], "UPDATE 0".into()) };
                let v = match *new {
                    NewValue::Set(s) => not_null(value(s)?, *table, table.value_column())?,
                    NewValue::Add { by, negate } => {
                        let by = not_null(value(by)?, *table, table.value_column())?;
                        let sum = if negate { old.checked_sub(by) } else { old.checked_add(by) };
                        sum.ok_or_else(|| PgError::new("22003", "bigint out of range"))?
                    }
                };
                self.session.write(row, Some(v))?;
                let own = self.session.txn_number();
                // The new version's xmin is the transaction's own number; the replaced one's is its writer's.
                let shown = Shown { k, v, xmin: own, replaced: read.writer, own };
                let rows = if returning.is_empty() { vec![] } else { vec![cells(returning, shown)] };
                outcome(rows, "UPDATE 1".into())
            }
            Statement::Insert { table, rows: values, skip_existing, returning } => {
                let mut rows = Vec::new();
                let mut inserted = 0;
                for &(k, v) in values {
                    let k = not_null(value(k)?, *table, table.key_column())?;
                    let v = not_null(value(v)?, *table, table.value_column())?;
                    let row = row_of(*table, k)?;
                    if self.session.read(row)?.value.is_some() {
                        if *skip_existing {
                            continue;
                        }
                        return Err(SessionError::Duplicate(row).into());
                    }
                    self.session.write(row, Some(v))?;
                    inserted += 1;
                    let own = self.session.txn_number();
                    rows.push(cells(returning, Shown { k, v, xmin: own, replaced: own, own }));
                }
                let tag = format!("INSERT 0 {inserted}");
                outcome(if returning.is_empty() { vec![] } else { rows }, tag)
            }
            Statement::Delete { table, key, returning } => {
                let Some(k) = value(*key)? else { return outcome(vec![], "DELETE 0".into()) };
                let row = row_of(*table, k)?;
                let read = self.session.read(row)?;
                let Some(v) = read.value else { return outcome(vec![], "DELETE 0".into()) };
                self.session.write(row, None)?;
                let own = self.session.txn_number();
                // As in PostgreSQL, RETURNING shows the deleted row as it was.
                let shown = Shown { k, v, xmin: read.writer, replaced: read.writer, own };
                let rows = if returning.is_empty() { vec![] } else { vec![cells(returning, shown)] };
                outcome(rows, "DELETE 1".into())
            }
            Statement::Begin { .. } | Statement::Commit | Statement::Rollback => {
                Err(PgError::new("XX000", "transaction control reached the data path"))
            }
        }
    }
}

/// What a result row can show: the row's key and value, the `xmin` of the version shown, the `xmin` of
/// the version an UPDATE replaced, and the statement's own transaction number.
#[derive(Clone, Copy)]
struct Shown {
    k: i64,
    v: i64,
    xmin: u64,
    replaced: u64,
    own: u64,
}

fn cells(items: &[Item], s: Shown) -> Vec<Cell> {
    let number = |n: u64| Cell::Int(i64::try_from(n).unwrap_or(i64::MAX));
    items
        .iter()
        .map(|i| match i.col {
            Column::K => Cell::Int(s.k),
            Column::V => Cell::Int(s.v),
            Column::Xmin => number(s.xmin),
            Column::Replaced => number(s.replaced),
            Column::CurrentXact => number(s.own),
        })
        .collect()
}

fn command_complete(tag: &str) -> BackendMessage {
    BackendMessage::CommandComplete { tag: Bytes::copy_from_slice(tag.as_bytes()) }
}

/// The format of result column `i` under a Bind's result formats (none: all text; one: all alike).
fn format_of(formats: &[i16], i: usize) -> i16 {
    match formats {
        [] => 0,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(0),
    }
}

fn type_of(ty: ColType) -> (u32, i16) {
    match ty {
        ColType::Int8 => (INT8_OID, 8),
        ColType::Int4 => (INT4_OID, 4),
        ColType::Text => (TEXT_OID, -1),
    }
}

fn row_description(cols: &[(&str, ColType)], formats: &[i16]) -> Vec<FieldDescription> {
    cols.iter()
        .enumerate()
        .map(|(i, &(name, ty))| {
            let (type_oid, type_size) = type_of(ty);
            FieldDescription {
                name: Bytes::copy_from_slice(name.as_bytes()),
                table_oid: 0,
                column: 0,
                type_oid,
                type_size,
                type_modifier: -1,
                format: format_of(formats, i),
            }
        })
        .collect()
}

/// Encodes a row. Integers go as their column's type: text, or binary int8/int4; a text column's binary
/// form is its UTF-8 text, the same bytes as its text form (which is why the proxy casts its tags to text).
fn data_row(row: &[Cell], cols: &[(&str, ColType)], formats: &[i16]) -> BackendMessage {
    let values = row
        .iter()
        .enumerate()
        .map(|(i, cell)| {
            let ty = cols.get(i).map_or(ColType::Int8, |c| c.1);
            let mut b = BytesMut::new();
            match (*cell, ty, format_of(formats, i)) {
                (Cell::Int(v), ColType::Int8, 1) => b.put_i64(v),
                // An int4 column only ever holds int4 values (krait_fence's keys are checked on the way in).
                (Cell::Int(v), ColType::Int4, 1) => b.put_i32(i32::try_from(v).unwrap_or(i32::MAX)),
                (Cell::Int(v), _, _) => b.put_slice(v.to_string().as_bytes()),
                (Cell::Text(t), _, _) => b.put_slice(t.as_bytes()),
            }
            Some(b.freeze())
        })
        .collect();
    BackendMessage::DataRow { values }
}

/// Decodes one Bind parameter: text is a decimal integer; binary is an int2/int4/int8 by the declared type,
/// or UTF-8 text for text types.
fn decode_param(bytes: &[u8], format: i16, type_oid: u32) -> Result<i64, PgError> {
    let bad =
        || PgError::new("22P03", format!("incorrect binary data format in a parameter of type {type_oid}"));
    let text = |b: &[u8]| {
        std::str::from_utf8(b).ok().and_then(|s| s.trim().parse::<i64>().ok()).ok_or_else(|| {
            PgError::new("22P02", format!("invalid input syntax for type bigint: \"{}\"", wire::pg::text(b)))
        })
    };
    match (format, type_oid) {
        (0, _) | (1, TEXT_OID | VARCHAR_OID) => text(bytes),
        (1, INT8_OID) => bytes.try_into().map(i64::from_be_bytes).map_err(|_| bad()),
        (1, INT4_OID) => bytes.try_into().map(|b| i64::from(i32::from_be_bytes(b))).map_err(|_| bad()),
        (1, INT2_OID) => bytes.try_into().map(|b| i64::from(i16::from_be_bytes(b))).map_err(|_| bad()),
        (1, other) => Err(PgError::new("42804", format!("parameters of type oid {other} are not supported"))),
        (f, _) => Err(PgError::new("08P01", format!("unsupported parameter format code {f}"))),
    }
}
