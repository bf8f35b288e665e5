//! One session's tagging: rewrites the client's statements on the way in, strips and reads the replies on
//! the way out, and turns the rows into ops. Pure code, no I/O, and no queue of its own: the session's
//! state machine ([`crate::machine`]) keeps the one queue of expected replies, and each queued request
//! carries the tagger's [`Reading`] of it (which statement's plan applies to its RowDescription and
//! DataRows, how many rows came, where an error position must move back). The machine calls
//! [`Tagger::query`], [`Tagger::parse`] and [`Tagger::bind`] as it queues a request, and
//! [`Tagger::on_reply`] with the head request's reading before it matches each reply; the ops go to the
//! [`TxnOps`] the machine keeps beside the transaction's statements.
//!
//! Prepared statements are planned once, at Parse, and every Bind of them reuses that plan (the statement
//! the server holds is the rewritten one). A Bind that lists one result format per column gets zeros (text)
//! for the extra columns, which are `text` anyway.
//!
//! If the tagger meets a row whose extra columns are malformed, or a Bind of a statement it no longer
//! knows, it stops recording ops for the session ([`Tagger::is_broken`]) but keeps stripping what it can;
//! the session's transactions then carry no ops beyond that point, and the count shows in `/metrics`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use history::log::LoggedOp;
use wire::pg::FrontendMessage;
use wire::pg::backend::tag as btag;

use super::ops::TxnOps;
use super::plan::{OpaqueKind, PkValue, StmtPlan, may_write_unseen};
use super::search_path::{SearchPath, SessionPath};
use super::shared::TaggingShared;
use super::strip::{
    ClientReply, ResultRow, data_row_values, extend_result_formats, recorded_row_description,
    row_description_for_client, split_result_row,
};
use super::values::{Described, PortalValues, QueryRun, RowValues, Secrecy, ValueRecording, columns_of};
use super::versions::absent_read;
use super::{PlanOptions, VersionStrategy, XminStrategy};
use crate::interpret::catalog::Catalog;

/// A bound portal as tagging reads its replies: the statement's plan and the parameters (an absent read
/// names its key from them).
#[derive(Debug, Clone)]
pub struct PortalPlan {
    plan: Arc<StmtPlan>,
    params: Vec<Option<Bytes>>,
    param_formats: Vec<i16>,
    /// What is recorded of its values, with `[record] values` on.
    values: Option<Arc<PortalValues>>,
}

impl PortalPlan {
    /// A portal whose statement is not known: its replies pass through unread.
    pub fn unknown() -> Self {
        PortalPlan {
            plan: Arc::new(StmtPlan::Control),
            params: Vec::new(),
            param_formats: Vec::new(),
            values: None,
        }
    }

    /// The plan of the portal's statement.
    pub fn plan(&self) -> &Arc<StmtPlan> {
        &self.plan
    }
}

/// What tagging needs to read one request's replies; it travels in the request's place in the session's
/// queue of expected replies.
#[derive(Debug, Default)]
pub enum Reading {
    /// Nothing to read: Close, Sync, FunctionCall, or tagging is off.
    #[default]
    Nothing,
    /// Parse: its splice, for error positions.
    Parse(Option<(usize, usize)>),
    /// Bind: how many result formats it added, for the error message.
    Bind(usize),
    /// Describe: the plan whose RowDescription the client gets.
    Describe(Arc<StmtPlan>),
    /// Execute: the portal, and its rows so far.
    Execute {
        /// The portal executed.
        portal: PortalPlan,
        /// Rows seen so far.
        rows: usize,
        /// Its statement text's index in the open transaction.
        stmt: Option<u32>,
        /// Whether its values' run was recorded ([`history::LoggedOp::Run`]).
        run_logged: bool,
    },
    /// Query: one plan per statement, the one whose replies come now, and its rows so far.
    Query {
        /// The statements' plans (empty when the string was not parsed: nothing is rewritten then).
        plans: Vec<StmtPlan>,
        /// The statement whose replies come now.
        at: usize,
        /// Its rows so far.
        rows: usize,
        /// The query string's index in the open transaction.
        stmt: Option<u32>,
        /// The values recorded of the statement whose replies come now.
        run: QueryRun,
    },
}

impl Reading {
    /// The plans of the statements whose replies are still to come.
    fn plans_to_come(&self) -> &[StmtPlan] {
        match self {
            Reading::Execute { portal, .. } => std::slice::from_ref(portal.plan.as_ref()),
            Reading::Query { plans, at, .. } => plans.get(*at..).unwrap_or_default(),
            _ => &[],
        }
    }

    /// Whether rows still to come are writes: a commit behind this request waits for them, so that its
    /// write-ahead intent carries them (DESIGN.md §3).
    pub fn brings_writes(&self) -> bool {
        self.plans_to_come().iter().any(StmtPlan::writes_rows)
    }

    /// Whether what the request still runs writes nothing, as tagging planned it (a Query string that did not
    /// parse may write).
    pub fn writes_nothing(&self) -> bool {
        match self {
            Reading::Query { plans, .. } if plans.is_empty() => false,
            _ => self.plans_to_come().iter().all(StmtPlan::writes_nothing),
        }
    }
}

/// What to send the client in place of one backend message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// The message as it came.
    Same,
    /// Nothing.
    Drop,
    /// This message instead: (tag, body).
    Replace(u8, Bytes),
}

/// One session's tagging state. See the module docs.
#[derive(Debug)]
pub struct Tagger {
    shared: Arc<TaggingShared>,
    broken: bool,
    /// The session's `search_path` and user, which decide what an unqualified table name means.
    search_path: SessionPath,
    /// The session's path as of its last idle point, which an aborted transaction block returns to:
    /// PostgreSQL undoes the `SET`s of a block that rolls back.
    path_at_rest: SearchPath,
    /// The paths at each savepoint of the open block, innermost last: `ROLLBACK TO` returns to them.
    savepoint_paths: Vec<(String, SessionPath)>,
    user: String,
    /// The shared catalog as this session resolves names, for that catalog and path (kept so it is built
    /// once per catalog load or path change, not per statement).
    resolved: Option<(Arc<Catalog>, SearchPath, Arc<Catalog>)>,
    /// The column names of prepared statements as Describe showed them, for recording row values.
    described: Described,
    /// Whether the open transaction ran DDL that changes tables: its end marks the catalog stale again.
    changed_catalog: bool,
}

/// How many rows of one statement run get their values recorded ([`super::values`]); later rows are recorded
/// as ops only, so a transaction's recorded values stay within about this many times `[record] row_bytes`
/// per statement.
const MAX_ROWS_WITH_VALUES: usize = 1000;

/// The plan of a statement whose replies pass through unread.
static UNREAD: StmtPlan = StmtPlan::Control;

fn encode(msg: &FrontendMessage) -> Bytes {
    let mut b = BytesMut::new();
    msg.encode(&mut b);
    b.freeze()
}

impl Tagger {
    /// A tagger for a new session.
    pub fn new(shared: Arc<TaggingShared>) -> Self {
        Tagger {
            shared,
            broken: false,
            search_path: SessionPath::default(),
            path_at_rest: SearchPath::Default,
            savepoint_paths: Vec::new(),
            user: String::new(),
            resolved: None,
            described: Described::default(),
            changed_catalog: false,
        }
    }

    /// The state all sessions share.
    pub fn shared(&self) -> &Arc<TaggingShared> {
        &self.shared
    }

    /// Sets the session's user and its `search_path` at startup (see [`super::search_path`]).
    pub fn set_startup(&mut self, user: &str, search_path: SearchPath) {
        self.user = user.to_owned();
        self.path_at_rest = search_path.clone();
        self.search_path = SessionPath::new(search_path);
    }

    /// Plans `text` with the catalog as this session resolves names, and follows any change of the
    /// session's `search_path` it makes.
    fn plan(&mut self, text: &str) -> Option<super::plan::PlannedQuery> {
        let (during, after) = self.search_path.through(text);
        let shared = self.shared.catalog();
        let catalog = match &self.resolved {
            Some((cat, path, resolved)) if Arc::ptr_eq(cat, &shared) && *path == during => resolved.clone(),
            _ => {
                let resolved = Arc::new(during.resolve(&shared, &self.user));
                self.resolved = Some((shared.clone(), during.clone(), resolved.clone()));
                resolved
            }
        };
        self.search_path = after;
        // The plan depends on the text and on the catalog as `during` and the user resolve its names.
        self.shared
            .plans
            .get_or_plan(&shared, &self.user, &during, text, |t| self.strategy().plan(t, &catalog).ok())
    }

    /// Notes that the open transaction ended. If it changed tables, the catalog is marked stale once more:
    /// a reload another session began before the change committed read the tables without it, and must not
    /// leave the cache marked fresh.
    ///
    /// An aborted block takes its `SET search_path`s back with it, as PostgreSQL does, and any block's end
    /// ends its `SET LOCAL`. When requests the client sent after it are outstanding (`settled` false), a
    /// path they set is indistinguishable from one the block set, so a path that changed becomes unknown:
    /// names found in several schemas are then not checked, never guessed.
    pub fn transaction_ended(&mut self, outcome: history::Outcome, settled: bool) {
        if std::mem::take(&mut self.changed_catalog) {
            self.shared.mark_catalog_stale();
        }
        let path = &mut self.search_path;
        if path.local.is_some() && !settled {
            *path = SessionPath::new(SearchPath::Unknown);
        }
        path.transaction_ended();
        if outcome == history::Outcome::Aborted && path.session != self.path_at_rest {
            path.session = if settled { self.path_at_rest.clone() } else { SearchPath::Unknown };
        }
        self.savepoint_paths.clear();
    }

    /// Notes that the session is idle with nothing outstanding: its path now is what a later aborted block
    /// returns to.
    pub fn at_rest(&mut self) {
        // Idle, outside any transaction: no `SET LOCAL` is in force (one outside a block does nothing).
        self.search_path.transaction_ended();
        self.path_at_rest = self.search_path.session.clone();
        self.savepoint_paths.clear();
    }

    /// The version strategy, with the written rows asked for when values are recorded.
    fn strategy(&self) -> XminStrategy {
        XminStrategy { options: PlanOptions { write_rows: self.shared.values.is_some() } }
    }

    /// Whether the tagger gave up recording ops for this session.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// A statement about to run: one that may write rows the proxy cannot see suspends `[record]
    /// exclusive` (see `versions`, "Exclusive recording") before it is forwarded.
    fn about_to_run(&self, plan: &StmtPlan) {
        let unseen = match plan {
            StmtPlan::Opaque(o) => Some(o.kind).filter(|k| may_write_unseen(k.label())),
            StmtPlan::Rows(r) => r.notes.iter().map(|n| n.kind).find(|k| may_write_unseen(k.label())),
            _ => None,
        };
        if let Some(kind) = unseen {
            self.shared.book.suspend_exclusive(|| {
                format!("a statement it cannot map ({}) may have written rows it cannot see", kind.label())
            });
        }
    }

    /// Gives up recording ops for this session: the proxy can no longer tell which rows belong to which
    /// statement.
    pub fn lose_track(&mut self, ops: &mut TxnOps) {
        self.shared.book.suspend_exclusive(|| "it lost track of a session's replies".to_owned());
        if !self.broken {
            self.broken = true;
            self.shared.metrics.broken_sessions.fetch_add(1, Ordering::Relaxed);
        }
        ops.clear();
    }

    /// Counts what `plan` could not map in `/metrics`, and logs it as an opaque op of statement `stmt` so
    /// that reports say what was not checked (DESIGN.md §3).
    fn count_plan(&mut self, plan: &StmtPlan, stmt: Option<u32>, ops: &mut TxnOps) {
        match plan {
            StmtPlan::Opaque(o) => {
                self.opaque(o.kind, stmt, ops);
                // DDL that creates or changes a table may make the next statement name it: without a reload
                // its writes would be unmappable, and every version they make an unrecorded writer's
                // (DESIGN.md §3). Other DDL (GRANT, indexes, VACUUM, …) leaves the catalog as it was. A name
                // the catalog does not know asks for a reload too, rate-limited: no reload may find it.
                if o.changes_catalog {
                    self.shared.mark_catalog_stale();
                } else if o.kind == OpaqueKind::UnknownTable {
                    self.shared.mark_catalog_stale_for_unknown();
                }
                self.changed_catalog |= o.changes_catalog;
            }
            StmtPlan::Rows(r) => {
                for n in &r.notes {
                    self.opaque(n.kind, stmt, ops);
                }
            }
            StmtPlan::Savepoint(cmd) => {
                ops.savepoint(cmd);
                self.follow_savepoint(cmd);
            }
            StmtPlan::Control => {}
        }
    }

    /// Keeps the path each savepoint saw, and returns to it on `ROLLBACK TO`, as PostgreSQL does.
    fn follow_savepoint(&mut self, cmd: &super::plan::SavepointCmd) {
        use super::plan::SavepointCmd;
        let find = |paths: &[(String, SessionPath)], name: &str| paths.iter().rposition(|(n, _)| n == name);
        match cmd {
            SavepointCmd::Define(name) => self.savepoint_paths.push((name.clone(), self.search_path.clone())),
            SavepointCmd::Release(name) => {
                if let Some(i) = find(&self.savepoint_paths, name) {
                    self.savepoint_paths.truncate(i);
                }
            }
            SavepointCmd::RollbackTo(name) => {
                if let Some(i) = find(&self.savepoint_paths, name) {
                    self.search_path = self.savepoint_paths[i].1.clone();
                    self.savepoint_paths.truncate(i + 1);
                }
            }
        }
    }

    /// Counts one opaque statement part and logs it, unless the session's ops are already given up.
    fn opaque(&mut self, kind: OpaqueKind, stmt: Option<u32>, ops: &mut TxnOps) {
        self.shared.metrics.opaque(kind);
        if !self.broken {
            ops.push(LoggedOp::Opaque { kind: kind.label().to_owned(), stmt });
        }
    }

    /// A Query about to be forwarded, as statement `stmt` of the open transaction: its reading, and the
    /// frame to send instead if it was rewritten.
    pub fn query(&mut self, sql: &Bytes, stmt: Option<u32>, ops: &mut TxnOps) -> (Reading, Option<Bytes>) {
        let text = wire::pg::text(sql);
        let planned = self.plan(&text);
        match &planned {
            Some(p) => p.stmts.iter().for_each(|s| self.about_to_run(s)),
            None => self.shared.book.suspend_exclusive(|| "a query string could not be planned".to_owned()),
        }
        let (plans, rewritten) = match planned {
            Some(p) if p.aligned => (p.stmts, p.rewritten),
            Some(p) => {
                // Not parsed: nothing is rewritten, so every reply passes through unchanged.
                for s in &p.stmts {
                    self.count_plan(s, stmt, ops);
                }
                (Vec::new(), None)
            }
            None => (Vec::new(), None),
        };
        let out = rewritten.map(|sql| {
            self.shared.metrics.statements_rewritten.fetch_add(1, Ordering::Relaxed);
            encode(&FrontendMessage::Query { sql: Bytes::from(sql.into_bytes()) })
        });
        let run = QueryRun { secret: ValueRecording::is_secret_statement(&text), ..QueryRun::default() };
        (Reading::Query { plans, at: 0, rows: 0, stmt, run }, out)
    }

    /// A Parse about to be forwarded: the plan to keep with the statement's name, its reading, and the frame
    /// to send instead if it was rewritten.
    pub fn parse(
        &mut self,
        name: &Bytes,
        query: &Bytes,
        param_types: &[u32],
    ) -> (Arc<StmtPlan>, Reading, Option<Bytes>) {
        let planned = self.plan(&wire::pg::text(query));
        let (plan, rewritten) = match planned {
            Some(mut p) if p.aligned && p.stmts.len() == 1 => (p.stmts.pop(), p.rewritten),
            // Not parsed: nothing is rewritten, and each run is counted as not checked.
            Some(mut p) if p.stmts.len() == 1 => (p.stmts.pop(), None),
            _ => (None, None),
        };
        let plan = Arc::new(plan.unwrap_or(StmtPlan::Control));
        let frame = rewritten.map(|sql| {
            self.shared.metrics.statements_rewritten.fetch_add(1, Ordering::Relaxed);
            encode(&FrontendMessage::Parse {
                name: name.clone(),
                query: Bytes::from(sql.into_bytes()),
                param_types: param_types.to_vec(),
            })
        });
        (plan.clone(), Reading::Parse(splice_of(&plan)), frame)
    }

    /// What a statement's text says about the secrecy of its values, where values are recorded: a session
    /// asks once per Parse and hands it to every [`Tagger::bind`] of the statement.
    pub fn secrecy(&self, sql: &str) -> Secrecy {
        self.shared.values.as_ref().map(|rec| rec.secrecy(sql)).unwrap_or_default()
    }

    /// A Bind about to be forwarded, of a statement whose plan is `plan` (`None`: a name the session does
    /// not know), and whose text says `secrecy` of its values ([`Tagger::secrecy`]). Returns the portal's plan,
    /// the Bind's reading, and the frame to send instead if its result formats were widened.
    pub fn bind(
        &mut self,
        msg: &FrontendMessage,
        plan: Option<Arc<StmtPlan>>,
        secrecy: Secrecy,
        ops: &mut TxnOps,
    ) -> BoundPortal {
        let FrontendMessage::Bind { portal, statement, param_formats, params, result_formats } = msg else {
            return BoundPortal { portal: PortalPlan::unknown(), reading: Reading::Nothing, frame: None };
        };
        let plan = plan.unwrap_or_else(|| {
            // A statement forgotten in bulk (or parsed before tagging began): its replies cannot be read
            // safely.
            self.lose_track(ops);
            Arc::new(StmtPlan::Control)
        });
        self.about_to_run(&plan);
        let extra = match plan.as_ref() {
            StmtPlan::Rows(r) => r.extra_columns(),
            _ => 0,
        };
        let widened = if extra > 0 && result_formats.len() > 1 { extra } else { 0 };
        let frame = (widened > 0).then(|| {
            let mut formats = result_formats.clone();
            extend_result_formats(&mut formats, extra);
            encode(&FrontendMessage::Bind {
                portal: portal.clone(),
                statement: statement.clone(),
                param_formats: param_formats.clone(),
                params: params.clone(),
                result_formats: formats,
            })
        });
        // The portal keeps only the parameters its point lookup names (an absent read is recorded from them),
        // each in its own allocation: the decoded Bind's values are slices of the read buffer it arrived in,
        // which a named portal would otherwise keep alive, large values and all, until it is closed.
        let named = |i: usize| match plan.as_ref() {
            StmtPlan::Rows(rows) => {
                rows.point.as_ref().is_some_and(|p| p.values.contains(&PkValue::Param(i)))
            }
            _ => false,
        };
        let kept: Vec<Option<Bytes>> = if (0..params.len()).any(named) {
            let copy = |(i, v): (usize, &Option<Bytes>)| {
                v.as_ref().filter(|_| named(i)).map(|v| Bytes::copy_from_slice(v))
            };
            params.iter().enumerate().map(copy).collect()
        } else {
            Vec::new()
        };
        let values =
            self.shared.values.as_ref().filter(|_| matches!(plan.as_ref(), StmtPlan::Rows(_))).map(|rec| {
                Arc::new(PortalValues {
                    params: rec.params(secrecy, params, param_formats, self.described.param_types(&plan)),
                    result_formats: result_formats.clone(),
                    secret: secrecy.statement,
                })
            });
        let portal = PortalPlan { plan, params: kept, param_formats: param_formats.clone(), values };
        BoundPortal { portal, reading: Reading::Bind(widened), frame }
    }

    /// Offers a backend message before it goes to the client, with the reading of the request it answers
    /// (the head of the session's queue); says what the client gets instead.
    pub fn on_reply(
        &mut self,
        tag: u8,
        body: &Bytes,
        head: Option<&mut Reading>,
        ops: &mut TxnOps,
    ) -> Outgoing {
        match self.reply(tag, body, head, ops) {
            Ok(o) => o,
            Err(reason) => {
                tracing::warn!("tagging stops for this session: {reason}");
                self.lose_track(ops);
                Outgoing::Same
            }
        }
    }

    fn reply(
        &mut self,
        tag: u8,
        body: &Bytes,
        head: Option<&mut Reading>,
        ops: &mut TxnOps,
    ) -> Result<Outgoing, String> {
        let Some(head) = head else { return Ok(Outgoing::Same) };
        match tag {
            btag::ROW_DESCRIPTION => match head {
                Reading::Describe(plan) => {
                    let reply = row_description_for_client(plan, body, true).map_err(|e| e.to_string())?;
                    if self.shared.values.is_some()
                        && let Some(recorded) = recorded_description(plan, body, &reply)?
                    {
                        self.described.remember_columns(plan, &recorded);
                    }
                    Ok(client_reply(reply))
                }
                Reading::Query { plans, at, run, .. } => {
                    let plan = plans.get(*at).unwrap_or(&UNREAD);
                    let reply = row_description_for_client(plan, body, false).map_err(|e| e.to_string())?;
                    if self.shared.values.is_some()
                        && let Some(recorded) = recorded_description(plan, body, &reply)?
                    {
                        run.columns = columns_of(&recorded);
                    }
                    Ok(client_reply(reply))
                }
                _ => Ok(Outgoing::Same),
            },
            btag::PARAMETER_DESCRIPTION => {
                if let (Reading::Describe(plan), Some(_)) = (head, &self.shared.values) {
                    self.described.remember_params(plan, body);
                }
                Ok(Outgoing::Same)
            }
            btag::DATA_ROW => {
                let (plan, stmt, run, nth) = match head {
                    Reading::Execute { portal, rows, stmt, run_logged } => {
                        *rows += 1;
                        let first = !std::mem::replace(run_logged, true);
                        let values =
                            RowValues::Portal { plan: &portal.plan, values: portal.values.as_ref(), first };
                        (portal.plan.as_ref(), *stmt, values, *rows)
                    }
                    Reading::Query { plans, at, rows, stmt, run } => {
                        *rows += 1;
                        (plans.get(*at).unwrap_or(&UNREAD), *stmt, RowValues::Query(run), *rows)
                    }
                    _ => return Ok(Outgoing::Same),
                };
                let StmtPlan::Rows(rows) = plan else { return Ok(Outgoing::Same) };
                let ResultRow { client, recorded: recorded_row, extras } =
                    split_result_row(plan, body).map_err(|e| e.to_string())?;
                if !self.broken {
                    let recorded = self.shared.values.clone();
                    let row = recorded.as_ref().and_then(|_| run.start(&self.described, stmt, ops));
                    let before = ops.as_slice().len();
                    let found = self
                        .strategy()
                        .row_ops(rows, &extras, stmt, &self.shared.book, ops.xids())
                        .map_err(|e| e.to_string())?;
                    ops.wrote(&found.xids);
                    ops.discovered(found.discovered);
                    for op in found.ops {
                        self.push_op(op, ops);
                    }
                    // A statement's first rows only: a scan of a million rows keeps its ops, not its values.
                    let recorded = recorded.filter(|_| nth <= MAX_ROWS_WITH_VALUES);
                    if let (Some(rec), Some(row), Some(kept)) = (&recorded, row, &recorded_row) {
                        let n = ops_with_the_row(rows.kind, &ops.as_slice()[before..]);
                        if n > 0 {
                            let values = data_row_values(kept).map_err(|e| e.to_string())?;
                            let values = rec.row(row.secret, &row.columns, &values, row.formats());
                            ops.push(LoggedOp::Row { ops: n, values });
                        }
                    }
                }
                Ok(match client {
                    Some(k) => Outgoing::Replace(btag::DATA_ROW, k),
                    None => Outgoing::Drop,
                })
            }
            btag::COMMAND_COMPLETE | btag::EMPTY_QUERY_RESPONSE => {
                let complete = tag == btag::COMMAND_COMPLETE;
                match head {
                    Reading::Execute { portal, rows, stmt, run_logged } if complete => {
                        // A run without rows is recorded for its parameters (an absent read's, an update's).
                        if let (Some(v), false, false) = (&portal.values, *run_logged, self.broken)
                            && !v.params.is_empty()
                        {
                            *run_logged = true;
                            ops.push(LoggedOp::Run {
                                stmt: *stmt,
                                params: v.params.clone(),
                                columns: Vec::new(),
                            });
                        }
                        let PortalPlan { plan, params, param_formats, .. } = portal;
                        self.statement_done(plan, *rows, params, param_formats, *stmt, ops);
                    }
                    Reading::Query { plans, at, rows, stmt, run } => {
                        if let (Some(plan), true) = (plans.get(*at), complete) {
                            self.statement_done(plan, *rows, &[], &[], *stmt, ops);
                        }
                        *at += 1;
                        *rows = 0;
                        *run = QueryRun { secret: run.secret, ..QueryRun::default() };
                    }
                    _ => {}
                }
                Ok(Outgoing::Same)
            }
            btag::ERROR_RESPONSE => {
                let moved = match head {
                    Reading::Bind(extra) if *extra > 0 => unwiden_format_error(body, *extra),
                    Reading::Parse(splice) => splice.and_then(|s| move_error_position(body, s)),
                    Reading::Execute { portal, .. } => {
                        splice_of(&portal.plan).and_then(|s| move_error_position(body, s))
                    }
                    Reading::Query { plans, at, .. } => {
                        plans.get(*at).and_then(splice_of).and_then(|s| move_error_position(body, s))
                    }
                    _ => None,
                };
                Ok(match moved {
                    Some(b) => Outgoing::Replace(btag::ERROR_RESPONSE, b),
                    None => Outgoing::Same,
                })
            }
            _ => Ok(Outgoing::Same),
        }
    }

    /// Counts an op in `/metrics` and adds it to the transaction's.
    fn push_op(&mut self, op: LoggedOp, ops: &mut TxnOps) {
        let m = &self.shared.metrics;
        match &op {
            LoggedOp::Read { observed: history::Observed::Unrecorded(_), .. } => {
                m.unrecorded_reads.fetch_add(1, Ordering::Relaxed);
                m.reads.fetch_add(1, Ordering::Relaxed)
            }
            LoggedOp::Read { .. } => m.reads.fetch_add(1, Ordering::Relaxed),
            LoggedOp::Write { .. } => m.writes.fetch_add(1, Ordering::Relaxed),
            LoggedOp::Opaque { .. } | LoggedOp::Run { .. } | LoggedOp::Row { .. } => 0,
        };
        ops.push(op);
    }

    /// A statement completed: count what it could not map, follow its savepoint command, and record a read
    /// of a missing row when a point read returned nothing.
    fn statement_done(
        &mut self,
        plan: &StmtPlan,
        rows: usize,
        params: &[Option<Bytes>],
        formats: &[i16],
        stmt: Option<u32>,
        ops: &mut TxnOps,
    ) {
        self.count_plan(plan, stmt, ops);
        if let StmtPlan::Rows(r) = plan
            && rows == 0
            && !self.broken
        {
            match absent_read(r, params, formats, stmt, &self.shared.book) {
                Some(op) => self.push_op(op, ops),
                None if r.point.is_some() => self.opaque(OpaqueKind::Predicate, stmt, ops),
                None => {}
            }
        }
    }
}

/// The RowDescription body of the columns whose values are recorded: the client's, which `reply` already
/// holds stripped, or (for a write the client asked no rows of) the written row's, if it was asked for.
fn recorded_description(plan: &StmtPlan, body: &Bytes, reply: &ClientReply) -> Result<Option<Bytes>, String> {
    match reply {
        ClientReply::Keep(kept) => Ok(Some(kept.clone())),
        ClientReply::Drop | ClientReply::NoData => {
            recorded_row_description(plan, body).map_err(|e| e.to_string())
        }
    }
}

/// How many of the ops one result row just produced (`ops`, in order) the row's values belong to, counted
/// from the last: every row op of a read; of an INSERT or UPDATE only its write, the last op, since the
/// row is the new version and not the one the write replaced (read just before it); none of a DELETE,
/// whose row is the deleted version and not the tombstone its write records.
fn ops_with_the_row(kind: super::plan::RowKind, ops: &[LoggedOp]) -> u32 {
    use super::plan::RowKind;
    match kind {
        RowKind::Read => ops.iter().filter(|op| op.is_row_op()).count() as u32,
        RowKind::Insert | RowKind::Update => u32::from(matches!(ops.last(), Some(LoggedOp::Write { .. }))),
        RowKind::Delete => 0,
    }
}

/// What a Bind leaves: the portal's plan (kept under its name), the Bind's reading, and the frame to send
/// instead if it was rewritten.
#[derive(Debug)]
pub struct BoundPortal {
    /// The portal's plan and parameters.
    pub portal: PortalPlan,
    /// The Bind request's reading.
    pub reading: Reading,
    /// The rewritten Bind, if its result formats were widened.
    pub frame: Option<Bytes>,
}

fn splice_of(plan: &StmtPlan) -> Option<(usize, usize)> {
    match plan {
        StmtPlan::Rows(r) => r.splice,
        _ => None,
    }
}

/// An ErrorResponse body with its position field (`P`, 1-based characters) moved back over the text the
/// rewriter spliced in, so it points where it would without Krait. `None`: nothing to change.
fn move_error_position(body: &Bytes, (at, len): (usize, usize)) -> Option<Bytes> {
    let mut out = BytesMut::with_capacity(body.len());
    let mut changed = false;
    for field in body.split(|&b| b == 0) {
        if field.is_empty() {
            continue;
        }
        if field[0] == b'P'
            && let Some(p) = std::str::from_utf8(&field[1..]).ok().and_then(|v| v.parse::<usize>().ok())
            && p > at + len
        {
            out.extend_from_slice(format!("P{}", p - len).as_bytes());
            changed = true;
        } else {
            out.extend_from_slice(field);
        }
        out.extend_from_slice(&[0]);
    }
    out.extend_from_slice(&[0]);
    changed.then(|| out.freeze())
}

/// The server's "bind message has N result formats but query has M columns" for a Bind whose formats
/// were widened by `extra`, with both counts as the client's own Bind and statement have them.
fn unwiden_format_error(body: &Bytes, extra: usize) -> Option<Bytes> {
    let mut out = BytesMut::with_capacity(body.len());
    let mut changed = false;
    for field in body.split(|&b| b == 0) {
        if field.is_empty() {
            continue;
        }
        let text = std::str::from_utf8(&field[1..]).ok();
        let fixed = (field[0] == b'M').then_some(text).flatten().and_then(|m| {
            let rest = m.strip_prefix("bind message has ")?;
            let (n, rest) = rest.split_once(" result formats but query has ")?;
            let (c, tail) = rest.split_once(' ')?;
            let (n, c) =
                (n.parse::<usize>().ok()?.checked_sub(extra)?, c.parse::<usize>().ok()?.checked_sub(extra)?);
            Some(format!("Mbind message has {n} result formats but query has {c} {tail}"))
        });
        match fixed {
            Some(f) => {
                out.extend_from_slice(f.as_bytes());
                changed = true;
            }
            None => out.extend_from_slice(field),
        }
        out.extend_from_slice(&[0]);
    }
    out.extend_from_slice(&[0]);
    changed.then(|| out.freeze())
}

fn client_reply(r: ClientReply) -> Outgoing {
    match r {
        ClientReply::Keep(b) => Outgoing::Replace(btag::ROW_DESCRIPTION, b),
        ClientReply::Drop => Outgoing::Drop,
        ClientReply::NoData => Outgoing::Replace(btag::NO_DATA, Bytes::new()),
    }
}

#[cfg(test)]
#[path = "tagger_tests.rs"]
mod tests;
