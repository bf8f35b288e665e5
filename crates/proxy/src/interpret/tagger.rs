//! One session's tagging: rewrites the client's statements on the way in, strips and reads the replies on
//! the way out, and collects the open transaction's ops. Pure code, no I/O, like [`crate::machine`]: the
//! session offers every message in forwarding order and sends what comes back.
//!
//! It keeps its own queue of expected replies, built by the protocol's rules (PostgreSQL docs, "Message
//! Flow"), because it needs to know for every RowDescription and DataRow which statement's plan applies:
//! - Query: per statement, [RowDescription, DataRow*] then CommandComplete (or EmptyQueryResponse or
//!   ErrorResponse, which ends the string), then ReadyForQuery.
//! - Parse, Bind, Close: one reply. Describe: [ParameterDescription,] RowDescription or NoData. Execute:
//!   DataRow*, then CommandComplete, EmptyQueryResponse or PortalSuspended. Sync: ReadyForQuery.
//! - After an ErrorResponse in the extended protocol the server skips to the next Sync.
//!
//! Prepared statements are planned once, at Parse, and every Bind of them reuses that plan (the statement
//! the server holds is the rewritten one). A Bind that lists one result format per column gets zeros (text)
//! for the extra columns, which are `text` anyway.
//!
//! If the tagger meets a reply it cannot place, or a row whose extra columns are malformed, it stops
//! recording ops for the session ([`Tagger::is_broken`]) but keeps stripping what it can; the session's
//! transactions then carry no ops beyond that point, and the count shows in `/metrics`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use history::log::LoggedOp;
use history::{KeyName, Observed, WriteId};
use wire::pg::backend::tag as btag;
use wire::pg::{FrontendMessage, Target};

use super::catalog::Catalog;
use super::plan::{OpaqueKind, SavepointCmd, StmtPlan};
use super::search_path::SearchPath;
use super::strip::{ClientReply, data_row_for_client, extend_result_formats, row_description_for_client};
use super::versions::{VersionBook, absent_read};
use super::{VersionStrategy, XminStrategy};

/// How many prepared statements and portals a session tracks before it forgets them in bulk; a forgotten
/// name's rows pass through untagged, which is safe only because a forgotten *rewritten* statement cannot
/// be told from a plain one: the session then stops recording ([`Tagger::is_broken`]).
const MAX_NAMES: usize = 10_000;

/// Counters for `/metrics`, shared by all sessions.
#[derive(Debug, Default)]
pub struct TaggingMetrics {
    /// Statements rewritten to return version tags.
    pub statements_rewritten: AtomicU64,
    /// Row reads recorded (including Absent).
    pub reads: AtomicU64,
    /// Of those, reads of a version no recorded transaction wrote, after the recording horizon (DESIGN.md
    /// §3): the verifier counts them as unverifiable.
    pub unrecorded_reads: AtomicU64,
    /// Row writes recorded (including tombstones).
    pub writes: AtomicU64,
    /// Opaque statements or statement parts, by [`OpaqueKind`] in [`OpaqueKind::ALL`] order.
    pub opaque: [AtomicU64; OpaqueKind::ALL.len()],
    /// Sessions that stopped recording ops after a reply they could not place.
    pub broken_sessions: AtomicU64,
    /// Fence transactions run.
    pub fences: AtomicU64,
    /// Ops that arrived after their transaction's write-ahead intent was logged (an autocommit statement's
    /// rows, or a COMMIT sent in the same query string as the statements), logged in a late-ops record.
    pub late_ops: AtomicU64,
}

impl TaggingMetrics {
    fn opaque(&self, kind: OpaqueKind) {
        if let Some(i) = OpaqueKind::ALL.iter().position(|k| *k == kind) {
            self.opaque[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The count of one opaque kind.
    pub fn opaque_count(&self, kind: OpaqueKind) -> u64 {
        OpaqueKind::ALL.iter().position(|k| *k == kind).map_or(0, |i| self.opaque[i].load(Ordering::Relaxed))
    }

    /// All opaque counts together.
    pub fn opaque_total(&self) -> u64 {
        self.opaque.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Prometheus text lines.
    pub fn render(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut s = String::new();
        s.push_str(&format!("krait_tagging_statements_rewritten_total {}\n", g(&self.statements_rewritten)));
        s.push_str(&format!("krait_tagging_reads_total {}\n", g(&self.reads)));
        s.push_str(&format!("krait_tagging_unrecorded_reads_total {}\n", g(&self.unrecorded_reads)));
        s.push_str(&format!("krait_tagging_writes_total {}\n", g(&self.writes)));
        for (k, c) in OpaqueKind::ALL.iter().zip(&self.opaque) {
            s.push_str(&format!("krait_tagging_opaque_total{{kind=\"{}\"}} {}\n", k.label(), g(c)));
        }
        s.push_str(&format!("krait_tagging_broken_sessions_total {}\n", g(&self.broken_sessions)));
        s.push_str(&format!("krait_fences_total {}\n", g(&self.fences)));
        s.push_str(&format!("krait_tagging_late_ops_total {}\n", g(&self.late_ops)));
        s
    }
}

/// What all sessions share: the catalog cache, the version book and the counters.
#[derive(Debug, Default)]
pub struct TaggingShared {
    catalog: std::sync::RwLock<Arc<Catalog>>,
    /// Set when a statement named a table the catalog does not know: reload at the next idle point.
    pub catalog_stale: std::sync::atomic::AtomicBool,
    /// Write ids recorded by this proxy.
    pub book: VersionBook,
    /// Whether a fence committed, so the fence table and row exist (later fences skip the setup).
    pub fence_ready: std::sync::atomic::AtomicBool,
    /// This proxy's row of `krait_fence`.
    pub fence_row: i32,
    /// Set when the database could not answer the horizon query (the reference store, PostgreSQL before
    /// 13): versions no recorded transaction wrote then stay pre-history, and no session asks again.
    pub horizon_unanswered: std::sync::atomic::AtomicBool,
    /// Held while a session learns the horizon, so exactly one learns it, logs it and sets it.
    pub horizon_learning: tokio::sync::Mutex<()>,
    /// Counters.
    pub metrics: TaggingMetrics,
}

impl TaggingShared {
    /// Shared state with an empty catalog, marked stale so the first session loads it.
    pub fn new() -> Self {
        // A random row per proxy, never 0, within PostgreSQL's int.
        let fence_row = 1 + (rand::random::<u32>() % (i32::MAX as u32 - 1)) as i32;
        let s = TaggingShared { fence_row, ..Self::default() };
        s.catalog_stale.store(true, Ordering::Relaxed);
        s
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// Replaces the catalog after a reload.
    pub fn set_catalog(&self, cat: Catalog) {
        if let Ok(mut c) = self.catalog.write() {
            *c = Arc::new(cat);
        }
        self.catalog_stale.store(false, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone)]
struct Portal {
    plan: Arc<StmtPlan>,
    params: Vec<Option<Bytes>>,
    param_formats: Vec<i16>,
}

#[derive(Debug)]
enum Pending {
    /// Parse, Close: one completion message. A Parse carries its splice, for error positions.
    One(Option<(usize, usize)>),
    /// Bind: BindComplete. Carries how many result formats it added, for the error message.
    Bind(usize),
    Describe(Arc<StmtPlan>),
    Execute {
        portal: Portal,
        rows: usize,
        stmt: Option<u32>,
    },
    Query {
        plans: Vec<StmtPlan>,
        at: usize,
        rows: usize,
        stmt: Option<u32>,
    },
    /// Sync or FunctionCall: ReadyForQuery.
    Ready,
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
    statements: HashMap<Bytes, Arc<StmtPlan>>,
    portals: HashMap<Bytes, Portal>,
    queue: VecDeque<Pending>,
    skipping: bool,
    /// The server is in COPY FROM STDIN: it ignores Sync (and so answers none) until CopyDone or CopyFail.
    copy_in: bool,
    broken: bool,
    ops: Vec<LoggedOp>,
    /// The open transaction's savepoints, innermost last: each name with how many ops came before it.
    savepoints: Vec<(String, usize)>,
    /// The session's `search_path` and user, which decide what an unqualified table name means.
    search_path: SearchPath,
    user: String,
    /// The shared catalog as this session resolves names, for that catalog and path (kept so it is built
    /// once per catalog load or path change, not per statement).
    resolved: Option<(Arc<Catalog>, SearchPath, Arc<Catalog>)>,
}

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
            statements: HashMap::new(),
            portals: HashMap::new(),
            queue: VecDeque::new(),
            skipping: false,
            copy_in: false,
            broken: false,
            ops: Vec::new(),
            savepoints: Vec::new(),
            search_path: SearchPath::Default,
            user: String::new(),
            resolved: None,
        }
    }

    /// Sets the session's user and its `search_path` at startup (see [`super::search_path`]).
    pub fn set_startup(&mut self, user: &str, search_path: SearchPath) {
        self.user = user.to_owned();
        self.search_path = search_path;
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
                self.resolved = Some((shared, during, resolved.clone()));
                resolved
            }
        };
        self.search_path = after;
        XminStrategy.plan(text, &catalog).ok()
    }

    /// Whether the tagger gave up recording ops for this session.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Whether replies to statements with rows are still outstanding (their ops are not all known yet).
    pub fn results_pending(&self) -> bool {
        self.queue.iter().any(|p| matches!(p, Pending::Execute { .. } | Pending::Query { .. }))
    }

    /// Takes the ops collected since the last call: the ending (or committing) transaction's.
    pub fn take_ops(&mut self) -> Vec<LoggedOp> {
        self.savepoints.clear();
        std::mem::take(&mut self.ops)
    }

    /// A copy of the ops so far, for a write-ahead intent.
    pub fn ops(&self) -> &[LoggedOp] {
        &self.ops
    }

    fn break_off(&mut self) {
        if !self.broken {
            self.broken = true;
            self.shared.metrics.broken_sessions.fetch_add(1, Ordering::Relaxed);
        }
        self.ops.clear();
        self.savepoints.clear();
    }

    /// Counts what `plan` could not map in `/metrics`, and logs it as an opaque op of statement `stmt` so
    /// that reports say what was not checked (DESIGN.md §3).
    fn count_plan(&mut self, plan: &StmtPlan, stmt: Option<u32>) {
        match plan {
            StmtPlan::Opaque(o) => {
                self.opaque(o.kind, stmt);
                // DDL that creates or changes a table may make the next statement name it: without a reload
                // its writes would be unmappable, and every version they make an unrecorded writer's
                // (DESIGN.md §3). Other DDL (GRANT, indexes, VACUUM, …) leaves the catalog as it was.
                if o.kind == OpaqueKind::UnknownTable || o.changes_catalog {
                    self.shared.catalog_stale.store(true, Ordering::Relaxed);
                }
            }
            StmtPlan::Rows(r) => {
                for n in &r.notes {
                    self.opaque(n.kind, stmt);
                }
            }
            StmtPlan::Savepoint(cmd) => self.savepoint(cmd),
            StmtPlan::Control => {}
        }
    }

    /// Follows a savepoint command that succeeded. ROLLBACK TO SAVEPOINT takes back the writes made since
    /// the savepoint (those of the failed statement that forced it too), so they leave the transaction's
    /// ops, with the reads of them. Reads of other transactions' versions stay: the transaction did see
    /// them.
    fn savepoint(&mut self, cmd: &SavepointCmd) {
        match cmd {
            SavepointCmd::Define(name) => self.savepoints.push((name.clone(), self.ops.len())),
            SavepointCmd::Release(name) => {
                if let Some(i) = self.savepoints.iter().rposition(|(n, _)| n == name) {
                    self.savepoints.truncate(i);
                }
            }
            SavepointCmd::RollbackTo(name) => {
                let Some(i) = self.savepoints.iter().rposition(|(n, _)| n == name) else { return };
                let mark = self.savepoints[i].1;
                self.savepoints.truncate(i + 1);
                let later = self.ops.split_off(mark.min(self.ops.len()));
                let undone: Vec<(KeyName, WriteId)> = later
                    .iter()
                    .filter_map(|op| match op {
                        LoggedOp::Write { key, write, .. } => Some((key.clone(), *write)),
                        _ => None,
                    })
                    .collect();
                let kept = later.into_iter().filter(|op| match op {
                    LoggedOp::Write { .. } => false,
                    LoggedOp::Read { key, observed: Observed::Version(w), .. } => {
                        !undone.iter().any(|(k, u)| k == key && u == w)
                    }
                    _ => true,
                });
                self.ops.extend(kept);
            }
        }
    }

    /// Counts one opaque statement part and logs it, unless the session's ops are already given up.
    fn opaque(&mut self, kind: OpaqueKind, stmt: Option<u32>) {
        self.shared.metrics.opaque(kind);
        if !self.broken {
            self.ops.push(LoggedOp::Opaque { kind: kind.label().to_owned(), stmt });
        }
    }

    /// Offers a frontend message about to be forwarded; `stmt` is the index its statement text has in the
    /// open transaction's statement list. Returns the raw frame to send instead, if it was rewritten.
    pub fn on_frontend(&mut self, msg: &FrontendMessage, stmt: Option<u32>) -> Option<Bytes> {
        match msg {
            FrontendMessage::CopyDone | FrontendMessage::CopyFail { .. } => {
                self.copy_in = false;
                None
            }
            // A Sync sent during COPY FROM STDIN gets no ReadyForQuery (libpq pipelines one after COPY).
            FrontendMessage::Sync if self.copy_in => None,
            FrontendMessage::Sync => {
                self.skipping = false;
                self.queue.push_back(Pending::Ready);
                None
            }
            _ if self.skipping => None,
            FrontendMessage::Query { sql } => {
                let text = wire::pg::text(sql);
                let planned = self.plan(&text);
                let (plans, rewritten) = match planned {
                    Some(p) if p.aligned => (p.stmts, p.rewritten),
                    Some(p) => {
                        // Not parsed: nothing is rewritten, so every reply passes through unchanged.
                        for s in &p.stmts {
                            self.count_plan(s, stmt);
                        }
                        (Vec::new(), None)
                    }
                    None => (Vec::new(), None),
                };
                let out = rewritten.map(|sql| {
                    self.shared.metrics.statements_rewritten.fetch_add(1, Ordering::Relaxed);
                    encode(&FrontendMessage::Query { sql: Bytes::from(sql.into_bytes()) })
                });
                self.queue.push_back(Pending::Query { plans, at: 0, rows: 0, stmt });
                out
            }
            FrontendMessage::Parse { name, query, param_types } => {
                let text = wire::pg::text(query);
                let planned = self.plan(&text);
                let (plan, rewritten) = match planned {
                    Some(mut p) if p.aligned && p.stmts.len() == 1 => (p.stmts.pop(), p.rewritten),
                    _ => (None, None),
                };
                let plan = Arc::new(plan.unwrap_or(StmtPlan::Control));
                if self.statements.len() >= MAX_NAMES && !self.statements.contains_key(name) {
                    self.statements.clear();
                }
                self.queue.push_back(Pending::One(splice_of(&plan)));
                self.statements.insert(name.clone(), plan);
                rewritten.map(|sql| {
                    self.shared.metrics.statements_rewritten.fetch_add(1, Ordering::Relaxed);
                    encode(&FrontendMessage::Parse {
                        name: name.clone(),
                        query: Bytes::from(sql.into_bytes()),
                        param_types: param_types.clone(),
                    })
                })
            }
            FrontendMessage::Bind { portal, statement, param_formats, params, result_formats } => {
                let plan = match self.statements.get(statement) {
                    Some(p) => p.clone(),
                    None => {
                        // A statement forgotten in bulk (or parsed before tagging began): its replies
                        // cannot be read safely.
                        if !self.statements.is_empty() || !statement.is_empty() {
                            self.break_off();
                        }
                        Arc::new(StmtPlan::Control)
                    }
                };
                if self.portals.len() >= MAX_NAMES {
                    self.portals.clear();
                }
                let extra = match plan.as_ref() {
                    StmtPlan::Rows(r) => r.extra_columns(),
                    _ => 0,
                };
                self.portals.insert(
                    portal.clone(),
                    Portal { plan, params: params.clone(), param_formats: param_formats.clone() },
                );
                let widened = if extra > 0 && result_formats.len() > 1 { extra } else { 0 };
                self.queue.push_back(Pending::Bind(widened));
                if widened > 0 {
                    let mut formats = result_formats.clone();
                    extend_result_formats(&mut formats, extra);
                    Some(encode(&FrontendMessage::Bind {
                        portal: portal.clone(),
                        statement: statement.clone(),
                        param_formats: param_formats.clone(),
                        params: params.clone(),
                        result_formats: formats,
                    }))
                } else {
                    None
                }
            }
            FrontendMessage::Describe { target, name } => {
                let plan = match target {
                    Target::Statement => self.statements.get(name).cloned(),
                    Target::Portal => self.portals.get(name).map(|p| p.plan.clone()),
                };
                self.queue.push_back(Pending::Describe(plan.unwrap_or_else(|| Arc::new(StmtPlan::Control))));
                None
            }
            FrontendMessage::Execute { portal, .. } => {
                let p = self.portals.get(portal).cloned().unwrap_or(Portal {
                    plan: Arc::new(StmtPlan::Control),
                    params: Vec::new(),
                    param_formats: Vec::new(),
                });
                self.queue.push_back(Pending::Execute { portal: p, rows: 0, stmt });
                None
            }
            FrontendMessage::Close { target, name } => {
                match target {
                    Target::Statement => self.statements.remove(name),
                    Target::Portal => self.portals.remove(name).map(|p| p.plan),
                };
                self.queue.push_back(Pending::One(None));
                None
            }
            FrontendMessage::FunctionCall { .. } => {
                self.queue.push_back(Pending::Ready);
                None
            }
            _ => None,
        }
    }

    /// Offers a backend message before it goes to the client; says what the client gets instead.
    pub fn on_backend(&mut self, tag: u8, body: &Bytes) -> Outgoing {
        match self.backend(tag, body) {
            Ok(o) => o,
            Err(reason) => {
                tracing::warn!("tagging stops for this session: {reason}");
                self.break_off();
                // Keep the client's view right where it can be: strip by the head's plan if there is one.
                Outgoing::Same
            }
        }
    }

    fn backend(&mut self, tag: u8, body: &Bytes) -> Result<Outgoing, String> {
        if matches!(tag, btag::COMMAND_COMPLETE | btag::ERROR_RESPONSE) {
            // Either ends a COPY FROM STDIN.
            self.copy_in = false;
        }
        match tag {
            btag::PARSE_COMPLETE | btag::BIND_COMPLETE | btag::CLOSE_COMPLETE => {
                if matches!(self.queue.front(), Some(Pending::One(_) | Pending::Bind(_))) {
                    self.queue.pop_front();
                    Ok(Outgoing::Same)
                } else {
                    Err(format!("completion {:?} out of place", char::from(tag)))
                }
            }
            btag::PARAMETER_DESCRIPTION => Ok(Outgoing::Same),
            btag::NO_DATA => {
                if matches!(self.queue.front(), Some(Pending::Describe(_))) {
                    self.queue.pop_front();
                }
                Ok(Outgoing::Same)
            }
            btag::ROW_DESCRIPTION => match self.queue.front() {
                Some(Pending::Describe(plan)) => {
                    let reply = row_description_for_client(plan, body, true).map_err(|e| e.to_string())?;
                    self.queue.pop_front();
                    Ok(client_reply(reply))
                }
                Some(Pending::Query { plans, at, .. }) => {
                    let plan = plans.get(*at).unwrap_or(&StmtPlan::Control);
                    Ok(client_reply(
                        row_description_for_client(plan, body, false).map_err(|e| e.to_string())?,
                    ))
                }
                _ => Err("RowDescription out of place".into()),
            },
            btag::DATA_ROW => {
                let shared = self.shared.clone();
                let (plan, stmt) = match self.queue.front_mut() {
                    Some(Pending::Execute { portal, rows, stmt }) => {
                        *rows += 1;
                        (portal.plan.as_ref().clone(), *stmt)
                    }
                    Some(Pending::Query { plans, at, rows, stmt }) => {
                        *rows += 1;
                        (plans.get(*at).cloned().unwrap_or(StmtPlan::Control), *stmt)
                    }
                    _ => return Ok(Outgoing::Same),
                };
                let StmtPlan::Rows(rows) = &plan else { return Ok(Outgoing::Same) };
                let (kept, extras) = data_row_for_client(&plan, body).map_err(|e| e.to_string())?;
                if !self.broken {
                    let ops =
                        XminStrategy.row_ops(rows, &extras, stmt, &shared.book).map_err(|e| e.to_string())?;
                    for op in ops {
                        self.push_op(op);
                    }
                }
                Ok(match kept {
                    Some(k) => Outgoing::Replace(btag::DATA_ROW, k),
                    None => Outgoing::Drop,
                })
            }
            btag::COMMAND_COMPLETE | btag::EMPTY_QUERY_RESPONSE => {
                let complete = tag == btag::COMMAND_COMPLETE;
                match self.queue.front_mut() {
                    Some(Pending::Execute { portal, rows, stmt }) => {
                        let (portal, rows, stmt) = (portal.clone(), *rows, *stmt);
                        self.queue.pop_front();
                        if complete {
                            self.statement_done(
                                &portal.plan,
                                rows,
                                &portal.params,
                                &portal.param_formats,
                                stmt,
                            );
                        }
                    }
                    Some(Pending::Query { plans, at, rows, stmt }) => {
                        let plan = plans.get(*at).cloned();
                        let (n, s) = (*rows, *stmt);
                        *at += 1;
                        *rows = 0;
                        if let (Some(plan), true) = (plan, complete) {
                            self.statement_done(&plan, n, &[], &[], s);
                        }
                    }
                    _ => return Err("CommandComplete out of place".into()),
                }
                Ok(Outgoing::Same)
            }
            btag::PORTAL_SUSPENDED => {
                if matches!(self.queue.front(), Some(Pending::Execute { .. })) {
                    self.queue.pop_front();
                    Ok(Outgoing::Same)
                } else {
                    Err("PortalSuspended out of place".into())
                }
            }
            btag::ERROR_RESPONSE => {
                let splice = match self.queue.front() {
                    Some(Pending::One(s)) => *s,
                    Some(Pending::Execute { portal, .. }) => splice_of(&portal.plan),
                    Some(Pending::Query { plans, at, .. }) => plans.get(*at).and_then(splice_of),
                    _ => None,
                };
                let moved = match self.queue.front() {
                    Some(Pending::Bind(extra)) if *extra > 0 => unwiden_format_error(body, *extra),
                    _ => splice.and_then(|s| move_error_position(body, s)),
                };
                let outgoing = match moved {
                    Some(b) => Outgoing::Replace(btag::ERROR_RESPONSE, b),
                    None => Outgoing::Same,
                };
                match self.queue.front() {
                    Some(Pending::Query { .. } | Pending::Ready) | None => {}
                    Some(_) => {
                        while let Some(p) = self.queue.front() {
                            if matches!(p, Pending::Ready) {
                                break;
                            }
                            self.queue.pop_front();
                        }
                        if self.queue.is_empty() {
                            self.skipping = true;
                        }
                    }
                }
                Ok(outgoing)
            }
            btag::READY_FOR_QUERY => {
                match self.queue.front() {
                    Some(Pending::Query { .. } | Pending::Ready) => {
                        self.queue.pop_front();
                    }
                    _ => return Err("ReadyForQuery out of place".into()),
                }
                Ok(Outgoing::Same)
            }
            btag::COPY_IN_RESPONSE => {
                // The server ignores Syncs until the copy ends; drop the queued ones as the machine does.
                self.copy_in = true;
                let mut kept = VecDeque::new();
                for (i, p) in self.queue.drain(..).enumerate() {
                    if i == 0 || !matches!(p, Pending::Ready) {
                        kept.push_back(p);
                    }
                }
                self.queue = kept;
                Ok(Outgoing::Same)
            }
            _ => Ok(Outgoing::Same),
        }
    }

    fn push_op(&mut self, op: LoggedOp) {
        let m = &self.shared.metrics;
        match &op {
            LoggedOp::Read { observed: history::Observed::Unrecorded(_), .. } => {
                m.unrecorded_reads.fetch_add(1, Ordering::Relaxed);
                m.reads.fetch_add(1, Ordering::Relaxed)
            }
            LoggedOp::Read { .. } => m.reads.fetch_add(1, Ordering::Relaxed),
            LoggedOp::Write { .. } => m.writes.fetch_add(1, Ordering::Relaxed),
            LoggedOp::Opaque { .. } => 0,
        };
        // Several writes of one row in one transaction share its xmin, so they are one version.
        if let LoggedOp::Write { key, write, .. } = &op
            && self
                .ops
                .iter()
                .any(|o| matches!(o, LoggedOp::Write { key: k, write: w, .. } if k == key && w == write))
        {
            return;
        }
        // A statement's rows may each say it is not checked (an UPDATE at READ COMMITTED): once is enough.
        // Its rows arrive together, so the earlier one is among the ops of the same statement, at the end.
        if let LoggedOp::Opaque { stmt, .. } = &op
            && self.ops.iter().rev().take_while(|o| op_stmt(o) == *stmt).any(|o| *o == op)
        {
            return;
        }
        self.ops.push(op);
    }

    fn statement_done(
        &mut self,
        plan: &StmtPlan,
        rows: usize,
        params: &[Option<Bytes>],
        formats: &[i16],
        stmt: Option<u32>,
    ) {
        self.count_plan(plan, stmt);
        if let StmtPlan::Rows(r) = plan
            && rows == 0
            && !self.broken
        {
            match absent_read(r, params, formats, stmt, &self.shared.book) {
                Some(op) => self.push_op(op),
                None if r.point.is_some() => self.opaque(OpaqueKind::Predicate, stmt),
                None => {}
            }
        }
    }
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

/// The statement an op came from.
fn op_stmt(op: &LoggedOp) -> Option<u32> {
    match op {
        LoggedOp::Read { stmt, .. } | LoggedOp::Write { stmt, .. } | LoggedOp::Opaque { stmt, .. } => *stmt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::Observed;
    use wire::pg::backend::{BackendMessage, FieldDescription};

    fn shared() -> Arc<TaggingShared> {
        let s = Arc::new(TaggingShared::new());
        s.set_catalog(Catalog::from_rows(vec![("public".into(), "acc".into(), Some("id".into()))]));
        s
    }

    fn body(m: &BackendMessage) -> (u8, Bytes) {
        let raw = m.to_bytes();
        (raw[0], raw.slice(5..))
    }

    fn field(n: &str) -> FieldDescription {
        FieldDescription {
            name: Bytes::copy_from_slice(n.as_bytes()),
            table_oid: 0,
            column: 0,
            type_oid: 25,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        }
    }

    fn row(vals: &[&str]) -> BackendMessage {
        BackendMessage::DataRow {
            values: vals.iter().map(|v| Some(Bytes::copy_from_slice(v.as_bytes()))).collect(),
        }
    }

    fn feed(t: &mut Tagger, m: &BackendMessage) -> Outgoing {
        let (tag, b) = body(m);
        t.on_backend(tag, &b)
    }

    #[test]
    fn simple_query_read_then_hidden_update_then_absent() {
        let mut t = Tagger::new(shared());
        let q = FrontendMessage::Query { sql: Bytes::from_static(b"SELECT bal FROM acc WHERE id = 1") };
        assert!(t.on_frontend(&q, Some(0)).is_some());
        let rd = BackendMessage::RowDescription {
            fields: vec![field("bal"), field("krait_v0"), field("krait_v1")],
        };
        let want = body(&BackendMessage::RowDescription { fields: vec![field("bal")] });
        assert_eq!(feed(&mut t, &rd), Outgoing::Replace(want.0, want.1));
        let want = body(&row(&["10"]));
        assert_eq!(feed(&mut t, &row(&["10", "77", "1"])), Outgoing::Replace(want.0, want.1));
        assert_eq!(
            feed(&mut t, &BackendMessage::CommandComplete { tag: Bytes::from_static(b"SELECT 1") }),
            Outgoing::Same
        );
        assert_eq!(
            feed(&mut t, &BackendMessage::ReadyForQuery(wire::pg::TxnStatus::InTransaction)),
            Outgoing::Same
        );

        let u =
            FrontendMessage::Query { sql: Bytes::from_static(b"UPDATE acc SET bal = bal + 1 WHERE id = 1") };
        assert!(t.on_frontend(&u, Some(1)).is_some());
        let rd = BackendMessage::RowDescription {
            fields: vec![field("krait_v0"), field("krait_v1"), field("krait_v2")],
        };
        assert_eq!(feed(&mut t, &rd), Outgoing::Drop);
        assert_eq!(feed(&mut t, &row(&["90", "1", "77"])), Outgoing::Drop);
        feed(&mut t, &BackendMessage::CommandComplete { tag: Bytes::from_static(b"UPDATE 1") });
        feed(&mut t, &BackendMessage::ReadyForQuery(wire::pg::TxnStatus::InTransaction));

        let a = FrontendMessage::Query { sql: Bytes::from_static(b"SELECT * FROM acc WHERE id = 5") };
        t.on_frontend(&a, Some(2));
        feed(
            &mut t,
            &BackendMessage::RowDescription {
                fields: vec![field("id"), field("krait_v0"), field("krait_v1")],
            },
        );
        feed(&mut t, &BackendMessage::CommandComplete { tag: Bytes::from_static(b"SELECT 0") });
        feed(&mut t, &BackendMessage::ReadyForQuery(wire::pg::TxnStatus::InTransaction));

        let ops = t.take_ops();
        assert_eq!(ops.len(), 4, "{ops:?}");
        assert!(matches!(&ops[0], LoggedOp::Read { observed: Observed::PreHistory(_), stmt: Some(0), .. }));
        // The update's read of the version it replaced is the version the SELECT saw.
        let (LoggedOp::Read { observed: a, .. }, LoggedOp::Read { observed: b, .. }) = (&ops[0], &ops[1])
        else {
            panic!("{ops:?}")
        };
        assert_eq!(a, b);
        assert!(matches!(&ops[2], LoggedOp::Write { stmt: Some(1), .. }));
        assert!(matches!(&ops[3], LoggedOp::Read { observed: Observed::Absent, .. }));
        assert!(!t.is_broken() && !t.results_pending());
    }

    #[test]
    fn extended_protocol_reuses_the_plan_and_answers_describe_with_nodata() {
        let mut t = Tagger::new(shared());
        let parse = FrontendMessage::Parse {
            name: Bytes::from_static(b"s"),
            query: Bytes::from_static(b"UPDATE acc SET bal = $1 WHERE id = $2"),
            param_types: vec![],
        };
        assert!(t.on_frontend(&parse, None).is_some());
        t.on_frontend(
            &FrontendMessage::Describe { target: Target::Statement, name: Bytes::from_static(b"s") },
            None,
        );
        t.on_frontend(&FrontendMessage::Sync, None);
        feed(&mut t, &BackendMessage::ParseComplete);
        feed(&mut t, &BackendMessage::ParameterDescription { types: vec![23, 23] });
        let rd = BackendMessage::RowDescription { fields: vec![field("krait_v0"), field("krait_v1")] };
        assert_eq!(feed(&mut t, &rd), Outgoing::Replace(btag::NO_DATA, Bytes::new()));
        feed(&mut t, &BackendMessage::ReadyForQuery(wire::pg::TxnStatus::Idle));
        for (i, xmin) in ["100", "101", "102"].iter().enumerate() {
            let bind = FrontendMessage::Bind {
                portal: Bytes::new(),
                statement: Bytes::from_static(b"s"),
                param_formats: vec![],
                params: vec![Some(Bytes::from_static(b"5")), Some(Bytes::from_static(b"1"))],
                result_formats: vec![1, 1],
            };
            // Two per-column formats become four.
            let Some(raw) = t.on_frontend(&bind, None) else { panic!("bind not widened") };
            assert_eq!(&raw[raw.len() - 10..], &[0, 4, 0, 1, 0, 1, 0, 0, 0, 0]);
            t.on_frontend(&FrontendMessage::Execute { portal: Bytes::new(), max_rows: 0 }, Some(i as u32));
            t.on_frontend(&FrontendMessage::Sync, None);
            feed(&mut t, &BackendMessage::BindComplete);
            assert_eq!(feed(&mut t, &row(xmin_row(xmin).as_slice())), Outgoing::Drop);
            feed(&mut t, &BackendMessage::CommandComplete { tag: Bytes::from_static(b"UPDATE 1") });
            feed(&mut t, &BackendMessage::ReadyForQuery(wire::pg::TxnStatus::Idle));
        }
        let ops = t.take_ops();
        assert_eq!(ops.len(), 3);
        assert!(ops.iter().all(|o| matches!(o, LoggedOp::Write { .. })));
    }

    fn xmin_row(x: &str) -> Vec<&str> {
        vec![x, "1"]
    }

    #[test]
    fn error_positions_after_the_splice_move_back() {
        let err = |p: &str| {
            let mut b = BytesMut::new();
            for f in ["SERROR", "C42703", &format!("P{p}"), "Mx"] {
                b.extend_from_slice(f.as_bytes());
                b.extend_from_slice(&[0]);
            }
            b.extend_from_slice(&[0]);
            b.freeze()
        };
        assert_eq!(move_error_position(&err("100"), (15, 60)), Some(err("40")));
        assert_eq!(move_error_position(&err("12"), (15, 60)), None);
        let msg = |m: &str| {
            let mut b = BytesMut::new();
            for f in ["SERROR", "C08P01", &format!("M{m}")] {
                b.extend_from_slice(f.as_bytes());
                b.extend_from_slice(&[0]);
            }
            b.extend_from_slice(&[0]);
            b.freeze()
        };
        assert_eq!(
            unwiden_format_error(&msg("bind message has 10 result formats but query has 4 columns"), 2),
            Some(msg("bind message has 8 result formats but query has 2 columns"))
        );
    }

    #[test]
    fn an_error_skips_to_sync_and_unknown_tables_mark_the_catalog_stale() {
        let s = shared();
        let mut t = Tagger::new(s.clone());
        s.catalog_stale.store(false, Ordering::Relaxed);
        let parse = FrontendMessage::Parse {
            name: Bytes::new(),
            query: Bytes::from_static(b"SELECT * FROM other"),
            param_types: vec![],
        };
        assert!(t.on_frontend(&parse, None).is_none());
        t.on_frontend(
            &FrontendMessage::Bind {
                portal: Bytes::new(),
                statement: Bytes::new(),
                param_formats: vec![],
                params: vec![],
                result_formats: vec![],
            },
            None,
        );
        t.on_frontend(&FrontendMessage::Execute { portal: Bytes::new(), max_rows: 0 }, None);
        t.on_frontend(&FrontendMessage::Sync, None);
        feed(&mut t, &BackendMessage::ErrorResponse(wire::pg::backend::ErrorFields::error("42P01", "nope")));
        feed(&mut t, &BackendMessage::ReadyForQuery(wire::pg::TxnStatus::Idle));
        assert!(!t.is_broken());
        assert!(!t.results_pending());
        // Unknown table: counted when it completes; here it failed, so count via a completed one.
        let q = FrontendMessage::Query { sql: Bytes::from_static(b"SELECT * FROM other") };
        t.on_frontend(&q, None);
        feed(&mut t, &BackendMessage::CommandComplete { tag: Bytes::from_static(b"SELECT 0") });
        feed(&mut t, &BackendMessage::ReadyForQuery(wire::pg::TxnStatus::Idle));
        assert!(s.catalog_stale.load(Ordering::Relaxed));
        assert_eq!(s.metrics.opaque_count(OpaqueKind::UnknownTable), 1);
        assert!(s.metrics.render().contains("krait_tagging_opaque_total{kind=\"unknown_table\"} 1"));
    }
}
