//! The protocol front of a connection: the greeting, then each frontend message of the simple query
//! protocol and of the extended one (Parse, Bind, Describe, Execute, Close, Sync), turned into statements
//! to run and replies to send.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use wire::pg::backend::{Authentication, ErrorFields};
use wire::pg::{BackendMessage, FrontendMessage, ProtocolError, Target, TxnStatus};

use super::exec::Cell;
use super::sql::{self, Statement};
use super::values::{INT8_OID, command_complete, data_row, decode_param, row_description};
use super::{Conn, Flow, PgError, SERVER_VERSION};
use crate::session::Session;

/// A prepared statement: `None` for an empty query.
#[derive(Clone, Debug)]
pub(super) struct Prepared {
    stmt: Option<Statement>,
    /// The parameter types: the ones the client declared, int8 for the rest.
    param_types: Vec<u32>,
}

/// A bound portal, with the rows of its execution once it has run.
#[derive(Debug)]
pub(super) struct Portal {
    stmt: Option<Statement>,
    params: Vec<Option<i64>>,
    result_formats: Vec<i16>,
    /// After the first Execute: the rows not sent yet and the command tag.
    ran: Option<(std::collections::VecDeque<Vec<Cell>>, String)>,
}

impl Conn {
    pub(super) fn new(session: Session) -> Self {
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

    pub(super) fn greet(&mut self) {
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

    pub(super) fn warning(&mut self, sqlstate: &str, message: &str) {
        self.send(BackendMessage::NoticeResponse(ErrorFields::with_severity("WARNING", sqlstate, message)));
    }

    fn notice(&mut self, sqlstate: &str, message: &str) {
        self.send(BackendMessage::NoticeResponse(ErrorFields::with_severity("NOTICE", sqlstate, message)));
    }

    pub(super) fn handle(&mut self, msg: FrontendMessage) -> Result<Flow, ProtocolError> {
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
}
