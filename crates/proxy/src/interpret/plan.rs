//! Statement understanding: parse each statement with `sqlparser`, decide what it does to rows, and rewrite
//! it so the database also returns each row's version tag (strategy `xmin`, DESIGN.md §3).
//!
//! Every extra column goes at the *end* of the target list or RETURNING list, cast to `text`. At the end,
//! stripping is a suffix cut ([`super::strip`]); as `text`, the bytes are the same in the text and the binary
//! result format, so a Bind that asks for binary results needs no special decoding.
//!
//! The layout of the extra columns, per tagged table, in [`RowPlan::tables`] order:
//! `xmin`, then each primary-key column, then (UPDATE that reads its row) the replaced version's `xmin`,
//! then (DELETE) the deleting transaction's id.

use std::ops::ControlFlow;

use sqlparser::ast::{
    AssignmentTarget, BinaryOperator, Expr, FromTable, GroupByExpr, Ident, ObjectName, OnInsert, Query,
    SelectItem, SetExpr, Statement, TableFactor, TableObject, TableWithJoins, Value, visit_expressions,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use super::catalog::{Catalog, Lookup, TableInfo};

/// Why a statement (or part of one) could not be mapped to row operations. Counted in `/metrics` under
/// [`OpaqueKind::label`] and kept in the history's statement text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opaque {
    /// The class.
    pub kind: OpaqueKind,
    /// A short human explanation.
    pub detail: String,
    /// Whether the statement may change what the primary-key catalog holds (tables, their schemas,
    /// columns and primary keys), so that it must be reloaded before the next statement is planned.
    pub changes_catalog: bool,
}

/// Classes of what Krait cannot check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpaqueKind {
    /// The parser did not understand the statement.
    Unparsed,
    /// An aggregate, GROUP BY, DISTINCT or set operation: result rows are not table rows.
    Aggregate,
    /// A predicate read whose phantoms cannot be checked (the rows it returned are still recorded).
    Predicate,
    /// Schema changes and other utility statements.
    Ddl,
    /// COPY: rows move in bulk without identities.
    Copy,
    /// A function that may have side effects (or a procedure call).
    Function,
    /// A table without a primary key: its rows have no stable identity.
    NoPrimaryKey,
    /// A table name the catalog cache does not know (yet).
    UnknownTable,
    /// An unqualified table name found in several schemas (none `public`); the proxy does not follow the
    /// session's `search_path`, so it cannot tell which table is meant.
    AmbiguousTable,
    /// A shape the interpreter does not handle (CTE, subquery in FROM, MERGE, ...).
    Unsupported,
}

impl OpaqueKind {
    /// The label used in `/metrics` and reports.
    pub fn label(self) -> &'static str {
        match self {
            OpaqueKind::Unparsed => "unparsed",
            OpaqueKind::Aggregate => "aggregate",
            OpaqueKind::Predicate => "predicate",
            OpaqueKind::Ddl => "ddl",
            OpaqueKind::Copy => "copy",
            OpaqueKind::Function => "function",
            OpaqueKind::NoPrimaryKey => "no_primary_key",
            OpaqueKind::UnknownTable => "unknown_table",
            OpaqueKind::AmbiguousTable => "ambiguous_table",
            OpaqueKind::Unsupported => "unsupported",
        }
    }

    /// Every kind, for metric registration.
    pub const ALL: [OpaqueKind; 10] = [
        OpaqueKind::Unparsed,
        OpaqueKind::Aggregate,
        OpaqueKind::Predicate,
        OpaqueKind::Ddl,
        OpaqueKind::Copy,
        OpaqueKind::Function,
        OpaqueKind::NoPrimaryKey,
        OpaqueKind::UnknownTable,
        OpaqueKind::AmbiguousTable,
        OpaqueKind::Unsupported,
    ];
}

fn opaque(kind: OpaqueKind, detail: impl Into<String>) -> Opaque {
    Opaque { kind, detail: detail.into(), changes_catalog: false }
}

/// Whether a DDL statement (its SQL text) may change tables, their schemas, columns or primary keys:
/// CREATE/ALTER/DROP of a table or schema, RENAME TABLE. GRANT, COMMENT, VACUUM, indexes, views,
/// functions and the like leave the catalog as it was.
fn changes_catalog(text: &str) -> bool {
    let words: Vec<String> = text.split_whitespace().take(5).map(str::to_uppercase).collect();
    let object = |w: &str| w == "TABLE" || w == "SCHEMA";
    match words.first().map(String::as_str) {
        Some("CREATE") => words[1..].iter().any(|w| object(w)),
        Some("ALTER" | "DROP") => words.get(1).is_some_and(|w| object(w)),
        Some("RENAME") => words.get(1).is_some_and(|w| w == "TABLE"),
        _ => false,
    }
}

/// What a statement's rows mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// Every row returned is a read of its version.
    Read,
    /// Every row returned is a new version (INSERT, including ON CONFLICT DO UPDATE).
    Insert,
    /// Every row returned is a new version, plus (when [`TableTag::replaced`]) a read of the one it replaced.
    Update,
    /// Every row returned is a tombstone version.
    Delete,
}

/// One table whose rows carry extra columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableTag {
    /// The key namespace ([`TableInfo::namespace`]).
    pub namespace: String,
    /// How many primary-key columns follow its `xmin`.
    pub pk_arity: usize,
    /// An UPDATE that reads its row: the replaced version's `xmin` follows the key.
    pub replaced: bool,
    /// A DELETE: the deleting transaction's id follows.
    pub deleter: bool,
}

impl TableTag {
    /// How many extra columns this table adds.
    pub fn width(&self) -> usize {
        1 + self.pk_arity + usize::from(self.replaced) + usize::from(self.deleter)
    }
}

/// A value a point lookup compares a key column with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PkValue {
    /// A literal, as text.
    Literal(String),
    /// A parameter (`$n`), 0-based.
    Param(usize),
}

/// `WHERE pk = v` on all key columns and nothing else: if no row comes back, the key was read as Absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointLookup {
    /// The key namespace.
    pub namespace: String,
    /// One value per key column, in key order.
    pub values: Vec<PkValue>,
}

/// How to read one rewritten statement's result rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPlan {
    /// What the rows mean.
    pub kind: RowKind,
    /// The tagged tables, in the order of their extra columns.
    pub tables: Vec<TableTag>,
    /// The client asked for no rows (a write without RETURNING): drop RowDescription and DataRows, and
    /// answer Describe with NoData.
    pub hidden_result: bool,
    /// Set for a point lookup, to record Absent when no row comes back.
    pub point: Option<PointLookup>,
    /// What the rows do not cover (for example phantoms of a predicate read).
    pub notes: Vec<Opaque>,
    /// Where the extra columns were spliced into the client's text, as (character offset, characters
    /// inserted), so error positions after it can be moved back.
    pub splice: Option<(usize, usize)>,
}

impl RowPlan {
    /// How many columns were appended.
    pub fn extra_columns(&self) -> usize {
        self.tables.iter().map(TableTag::width).sum()
    }
}

/// What one statement does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StmtPlan {
    /// No effect on rows: transaction control, SET, SHOW, `SELECT 1`.
    Control,
    /// Cannot be mapped; recorded as opaque.
    Opaque(Opaque),
    /// Rewritten; its rows are reads or writes.
    Rows(RowPlan),
    /// A savepoint command: no rows, but a ROLLBACK TO SAVEPOINT takes back the writes made since the
    /// savepoint, so the tagger must drop them from the transaction's ops.
    Savepoint(SavepointCmd),
}

/// A savepoint command, with the savepoint's name as PostgreSQL compares it (unquoted names folded to
/// lower case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavepointCmd {
    /// `SAVEPOINT name`.
    Define(String),
    /// `RELEASE [SAVEPOINT] name`: forgets the savepoint and every later one; keeps their writes.
    Release(String),
    /// `ROLLBACK TO [SAVEPOINT] name`: undoes the writes since the savepoint, which stays defined.
    RollbackTo(String),
}

/// A savepoint's name as PostgreSQL compares it: unquoted identifiers fold to lower case.
fn savepoint_name(name: &Ident) -> String {
    match name.quote_style {
        Some(_) => name.value.clone(),
        None => name.value.to_lowercase(),
    }
}

/// A query string's plan: one entry per statement, and the SQL to send instead, if any was rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedQuery {
    /// The SQL to forward instead of the client's, or `None` to forward the client's bytes unchanged.
    pub rewritten: Option<String>,
    /// One plan per statement, in order. When parsing failed, a single opaque entry.
    pub stmts: Vec<StmtPlan>,
    /// Whether `stmts` lines up with the statements the server will run (false after a parse failure).
    pub aligned: bool,
}

/// Plans a query string (simple protocol: maybe several statements; Parse: one).
pub fn plan_query(sql: &str, catalog: &Catalog) -> PlannedQuery {
    let statements = match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
        Ok(s) => s,
        Err(e) => {
            return PlannedQuery {
                rewritten: None,
                stmts: vec![StmtPlan::Opaque(opaque(OpaqueKind::Unparsed, e.to_string()))],
                aligned: false,
            };
        }
    };
    let single = statements.len() == 1;
    let mut out = Vec::with_capacity(statements.len());
    let mut texts = Vec::with_capacity(statements.len());
    let mut any = false;
    for mut stmt in statements {
        let select_end = select_list_end(&stmt);
        let mut plan = plan_statement(&mut stmt, catalog);
        any |= matches!(plan, StmtPlan::Rows(_));
        // One statement: splice the extra columns into the client's own text, so everything the client
        // wrote keeps its position (error positions stay right). Several: print the rewritten statements.
        let spliced = match (&mut plan, single) {
            (StmtPlan::Rows(rows), true) => splice(sql, &stmt, rows, select_end),
            _ => None,
        };
        texts.push(spliced.unwrap_or_else(|| stmt.to_string()));
        out.push(plan);
    }
    PlannedQuery { rewritten: any.then(|| texts.join("; ")), stmts: out, aligned: true }
}

/// Where the target list of a plain SELECT ends in its text, if the parser knows.
fn select_list_end(stmt: &Statement) -> Option<sqlparser::tokenizer::Location> {
    use sqlparser::ast::Spanned;
    let Statement::Query(q) = stmt else { return None };
    let SetExpr::Select(sel) = q.body.as_ref() else { return None };
    let end = sel.projection.last()?.span().end;
    (end.line > 0).then_some(end)
}

/// The byte offset of a 1-based (line, column) location; columns count characters.
fn byte_offset(sql: &str, loc: sqlparser::tokenizer::Location) -> Option<usize> {
    let (mut line, mut col) = (1u64, 1u64);
    for (i, ch) in sql.char_indices() {
        if line == loc.line && col == loc.column {
            return Some(i);
        }
        if ch == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (line == loc.line && col == loc.column).then_some(sql.len())
}

/// The client's text with the extra columns spliced in: after the target list of a SELECT, or appended to
/// (or as) the RETURNING list of a write, which is always the statement's last clause.
fn splice(
    sql: &str,
    stmt: &Statement,
    rows: &mut RowPlan,
    select_end: Option<sqlparser::tokenizer::Location>,
) -> Option<String> {
    let n = rows.extra_columns();
    let tail = |items: &[SelectItem]| -> Option<String> {
        let extra = items.get(items.len().checked_sub(n)?..)?;
        Some(extra.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
    };
    match stmt {
        Statement::Query(q) => {
            let SetExpr::Select(sel) = q.body.as_ref() else { return None };
            let at = byte_offset(sql, select_end?)?;
            let inserted = format!(", {}", tail(&sel.projection)?);
            rows.splice = Some((sql[..at].chars().count(), inserted.chars().count()));
            Some(format!("{}{inserted}{}", &sql[..at], &sql[at..]))
        }
        Statement::Insert(sqlparser::ast::Insert { returning: Some(r), .. })
        | Statement::Update(sqlparser::ast::Update { returning: Some(r), .. })
        | Statement::Delete(sqlparser::ast::Delete { returning: Some(r), .. }) => {
            let body = sql.trim_end().trim_end_matches(';').trim_end();
            // A newline first, so a trailing `-- comment` cannot swallow the addition.
            let joint = if rows.hidden_result { "\nRETURNING " } else { "\n, " };
            Some(format!("{body}{joint}{}", tail(r)?))
        }
        _ => None,
    }
}

/// Plans one parsed statement and, for [`StmtPlan::Rows`], rewrites it in place.
pub fn plan_statement(stmt: &mut Statement, catalog: &Catalog) -> StmtPlan {
    match stmt {
        Statement::Query(q) => plan_query_stmt(q, catalog),
        Statement::Insert(ins) => plan_insert(ins, catalog),
        Statement::Update(upd) => plan_update(upd, catalog),
        Statement::Delete(del) => plan_delete(del, catalog),
        Statement::Savepoint { name } => StmtPlan::Savepoint(SavepointCmd::Define(savepoint_name(name))),
        Statement::ReleaseSavepoint { name } => {
            StmtPlan::Savepoint(SavepointCmd::Release(savepoint_name(name)))
        }
        Statement::Rollback { savepoint: Some(name), .. } => {
            StmtPlan::Savepoint(SavepointCmd::RollbackTo(savepoint_name(name)))
        }
        Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { savepoint: None, .. }
        | Statement::Set(_)
        | Statement::Reset(_)
        | Statement::ShowVariable { .. }
        | Statement::Discard { .. }
        | Statement::Deallocate { .. }
        | Statement::LISTEN { .. }
        | Statement::UNLISTEN { .. }
        | Statement::Close { .. } => StmtPlan::Control,
        Statement::Copy { .. } => {
            StmtPlan::Opaque(opaque(OpaqueKind::Copy, "COPY moves rows without identities"))
        }
        Statement::Call(_) => StmtPlan::Opaque(opaque(OpaqueKind::Function, "CALL of a procedure")),
        Statement::Execute { .. }
        | Statement::Prepare { .. }
        | Statement::Declare { .. }
        | Statement::Fetch { .. } => {
            StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "SQL-level PREPARE/EXECUTE and cursors"))
        }
        Statement::Merge(_) => StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "MERGE")),
        Statement::Explain { .. } | Statement::ExplainTable { .. } => StmtPlan::Control,
        other => {
            let text = other.to_string();
            let word = text.split_whitespace().next().unwrap_or("").to_uppercase();
            let changes_catalog = changes_catalog(&text);
            StmtPlan::Opaque(Opaque {
                changes_catalog,
                ..opaque(OpaqueKind::Ddl, format!("{word} statement"))
            })
        }
    }
}

/// Aggregate functions of PostgreSQL: a query using one returns computed rows, not table rows.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "bit_and",
    "bit_or",
    "bit_xor",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "xmlagg",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "corr",
    "covar_pop",
    "covar_samp",
];

/// Functions with side effects on the database that the history cannot see.
const SIDE_EFFECTS: &[&str] = &[
    "nextval",
    "setval",
    "set_config",
    "pg_advisory_lock",
    "pg_advisory_xact_lock",
    "pg_try_advisory_lock",
    "pg_try_advisory_xact_lock",
    "pg_notify",
    "lo_create",
    "lo_import",
    "lo_unlink",
    "dblink_exec",
    "pg_terminate_backend",
    "pg_cancel_backend",
];

fn function_name(name: &ObjectName) -> String {
    name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()).unwrap_or_default()
}

/// What the expressions of a statement contain that matters here.
#[derive(Default)]
struct ExprScan {
    aggregate: bool,
    side_effect: Option<String>,
    function: bool,
    subquery: bool,
}

fn scan<V: sqlparser::ast::Visit>(node: &V) -> ExprScan {
    let mut s = ExprScan::default();
    let _ = visit_expressions(node, |e: &Expr| {
        match e {
            Expr::Function(f) => {
                let name = function_name(&f.name);
                s.function = true;
                if AGGREGATES.contains(&name.as_str()) && f.over.is_none() {
                    s.aggregate = true;
                }
                if SIDE_EFFECTS.contains(&name.as_str()) {
                    s.side_effect = Some(name);
                }
            }
            Expr::Subquery(_) | Expr::Exists { .. } => s.subquery = true,
            Expr::In { target: sqlparser::ast::InTarget::Subquery(_), .. } => s.subquery = true,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    s
}

fn resolve<'a>(catalog: &'a Catalog, name: &ObjectName) -> Result<&'a TableInfo, Opaque> {
    match catalog.lookup(name) {
        Lookup::Keyed(info) => Ok(info),
        Lookup::NoPrimaryKey(info) => Err(opaque(
            OpaqueKind::NoPrimaryKey,
            format!("table {} has no primary key; its rows are unverifiable", info.namespace),
        )),
        Lookup::Unknown => {
            Err(opaque(OpaqueKind::UnknownTable, format!("table {name} is not in the catalog")))
        }
        Lookup::Ambiguous => Err(opaque(
            OpaqueKind::AmbiguousTable,
            format!("table {name} is in several schemas; qualify it with its schema to have it checked"),
        )),
    }
}

fn parse_items(sql: &str) -> Vec<SelectItem> {
    // A failure shows as a short list, which every caller checks against the width it expects.
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_projection())
        .unwrap_or_default()
}

/// The extra target-list items for one table, referenced as `reference` (its alias or name).
fn extra_items(
    reference: &str,
    info: &TableInfo,
    replaced_from: Option<&str>,
    deleter: bool,
    counter: &mut usize,
) -> Vec<SelectItem> {
    let mut cols = vec![format!("{reference}.xmin::text")];
    let pk = info.pk.as_deref().unwrap_or(&[]);
    for c in pk {
        cols.push(format!("{reference}.{}::text", quote_ident(c)));
    }
    if let Some(table) = replaced_from {
        let cond: Vec<String> =
            pk.iter().map(|c| format!("krait_old.{q} = {reference}.{q}", q = quote_ident(c))).collect();
        // The subquery reads the statement's snapshot. At READ COMMITTED an UPDATE replaces the latest
        // committed version after waiting for the row lock (EvalPlanQual), which the snapshot may not show,
        // so there the proxy records no replaced version rather than a wrong one (DESIGN.md §3, "what a
        // write replaced"); `versions::READ_COMMITTED_MARK` says so.
        cols.push(format!(
            "CASE WHEN current_setting('transaction_isolation') = '{mark}' THEN '{mark}' \
             ELSE (SELECT krait_old.xmin::text FROM {table} AS krait_old WHERE {}) END",
            cond.join(" AND "),
            mark = super::versions::READ_COMMITTED_MARK,
        ));
    }
    if deleter {
        cols.push("pg_current_xact_id()::text".to_owned());
    }
    let list: Vec<String> = cols
        .into_iter()
        .map(|c| {
            let s = format!("{c} AS krait_v{}", *counter);
            *counter += 1;
            s
        })
        .collect();
    parse_items(&list.join(", "))
}

/// Quotes an identifier when PostgreSQL would not read it back unchanged unquoted.
fn quote_ident(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain { name.to_owned() } else { format!("\"{}\"", name.replace('"', "\"\"")) }
}

fn plan_query_stmt(q: &mut Query, catalog: &Catalog) -> StmtPlan {
    if q.with.is_some() {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "WITH (common table expressions)"));
    }
    let select = match q.body.as_mut() {
        SetExpr::Select(s) => s,
        SetExpr::SetOperation { .. } => {
            return StmtPlan::Opaque(opaque(OpaqueKind::Aggregate, "UNION/INTERSECT/EXCEPT"));
        }
        SetExpr::Values(_) => return StmtPlan::Control,
        _ => return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "query body")),
    };
    let found = scan(select.as_ref());
    if let Some(f) = &found.side_effect {
        return StmtPlan::Opaque(opaque(OpaqueKind::Function, format!("{f}() has side effects")));
    }
    if select.from.is_empty() {
        return if found.function || found.subquery {
            StmtPlan::Opaque(opaque(OpaqueKind::Function, "SELECT of functions or subqueries without FROM"))
        } else {
            StmtPlan::Control
        };
    }
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if found.aggregate || grouped || select.having.is_some() || select.distinct.is_some() {
        return StmtPlan::Opaque(opaque(OpaqueKind::Aggregate, "aggregate, GROUP BY or DISTINCT"));
    }
    if select.into.is_some() {
        let creates = opaque(OpaqueKind::Ddl, "SELECT INTO creates a table");
        return StmtPlan::Opaque(Opaque { changes_catalog: true, ..creates });
    }
    // Every relation must be a base table with a primary key.
    let mut relations: Vec<(&ObjectName, Option<String>)> = Vec::new();
    for twj in &select.from {
        for factor in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            match factor {
                TableFactor::Table { name, alias, args: None, .. } => {
                    relations.push((name, alias.as_ref().map(|a| a.name.to_string())));
                }
                _ => {
                    return StmtPlan::Opaque(opaque(
                        OpaqueKind::Unsupported,
                        "FROM with a subquery, function or nested join",
                    ));
                }
            }
        }
    }
    let mut tags = Vec::new();
    let mut items = Vec::new();
    let mut counter = 0;
    let mut infos = Vec::new();
    for (name, alias) in &relations {
        let info = match resolve(catalog, name) {
            Ok(i) => i,
            Err(o) => return StmtPlan::Opaque(o),
        };
        let reference = alias.clone().unwrap_or_else(|| name.to_string());
        items.extend(extra_items(&reference, info, None, false, &mut counter));
        tags.push(TableTag {
            namespace: info.namespace.clone(),
            pk_arity: info.pk.as_ref().map_or(0, Vec::len),
            replaced: false,
            deleter: false,
        });
        infos.push(info);
    }
    let expected: usize = tags.iter().map(TableTag::width).sum();
    if items.len() != expected {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "could not build the version columns"));
    }
    let point = match (infos.as_slice(), &select.selection) {
        ([info], Some(w)) if relations.len() == 1 => point_lookup(w, info),
        _ => None,
    };
    let mut notes = Vec::new();
    if point.is_none() {
        notes.push(opaque(
            OpaqueKind::Predicate,
            "predicate read: rows are recorded, phantoms are not checked",
        ));
    }
    select.projection.extend(items);
    StmtPlan::Rows(RowPlan {
        kind: RowKind::Read,
        tables: tags,
        hidden_result: false,
        point,
        notes,
        splice: None,
    })
}

/// `WHERE k1 = v1 AND k2 = v2 ...` over exactly the key columns.
fn point_lookup(selection: &Expr, info: &TableInfo) -> Option<PointLookup> {
    let pk = info.pk.as_ref()?;
    let mut conj = Vec::new();
    flatten_and(selection, &mut conj);
    if conj.len() != pk.len() {
        return None;
    }
    let mut values: Vec<Option<PkValue>> = vec![None; pk.len()];
    for e in conj {
        let Expr::BinaryOp { left, op: BinaryOperator::Eq, right } = e else { return None };
        let (col, val) = match (column_name(left), column_name(right)) {
            (Some(c), None) => (c, right.as_ref()),
            (None, Some(c)) => (c, left.as_ref()),
            _ => return None,
        };
        let at = pk.iter().position(|p| *p == col)?;
        let v = match unnest(val) {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => PkValue::Literal(n.to_string()),
                Value::SingleQuotedString(s) => PkValue::Literal(s.clone()),
                Value::Placeholder(p) => {
                    PkValue::Param(p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)?)
                }
                _ => return None,
            },
            _ => return None,
        };
        if values[at].replace(v).is_some() {
            return None;
        }
    }
    let values: Option<Vec<PkValue>> = values.into_iter().collect();
    Some(PointLookup { namespace: info.namespace.clone(), values: values? })
}

fn unnest(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) => unnest(inner),
        other => other,
    }
}

fn flatten_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            flatten_and(left, out);
            flatten_and(right, out);
        }
        Expr::Nested(inner) => flatten_and(inner, out),
        other => out.push(other),
    }
}

fn column_name(e: &Expr) -> Option<String> {
    let id = match unnest(e) {
        Expr::Identifier(id) => id,
        Expr::CompoundIdentifier(ids) => ids.last()?,
        _ => return None,
    };
    Some(if id.quote_style.is_some() { id.value.clone() } else { id.value.to_lowercase() })
}

fn single_table(twj: &TableWithJoins) -> Option<(&ObjectName, Option<String>)> {
    if !twj.joins.is_empty() {
        return None;
    }
    match &twj.relation {
        TableFactor::Table { name, alias, args: None, .. } => {
            Some((name, alias.as_ref().map(|a| a.name.to_string())))
        }
        _ => None,
    }
}

fn check_side_effects<V: sqlparser::ast::Visit>(node: &V) -> Result<ExprScan, Opaque> {
    let found = scan(node);
    match &found.side_effect {
        Some(f) => Err(opaque(OpaqueKind::Function, format!("{f}() has side effects"))),
        None => Ok(found),
    }
}

fn plan_insert(ins: &mut sqlparser::ast::Insert, catalog: &Catalog) -> StmtPlan {
    let name = match &ins.table {
        TableObject::TableName(n) => n.clone(),
        _ => return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "INSERT into a table function")),
    };
    let info = match resolve(catalog, &name) {
        Ok(i) => i,
        Err(o) => return StmtPlan::Opaque(o),
    };
    if let Err(o) = check_side_effects(&*ins) {
        return StmtPlan::Opaque(o);
    }
    let mut notes = Vec::new();
    match ins.source.as_deref().map(|q| q.body.as_ref()) {
        Some(SetExpr::Values(_)) | None => {}
        Some(_) => {
            notes.push(opaque(OpaqueKind::Predicate, "INSERT ... SELECT: the rows it read are not recorded"))
        }
    }
    if let Some(OnInsert::OnConflict(_)) = &ins.on {
        notes.push(opaque(
            OpaqueKind::Predicate,
            "ON CONFLICT: the conflicting row's old version is not recorded as read",
        ));
    }
    let reference = ins.table_alias.as_ref().map(|a| a.alias.to_string()).unwrap_or_else(|| name.to_string());
    let mut counter = 0;
    let items = extra_items(&reference, info, None, false, &mut counter);
    let tag = TableTag {
        namespace: info.namespace.clone(),
        pk_arity: info.pk.as_ref().map_or(0, Vec::len),
        replaced: false,
        deleter: false,
    };
    if items.len() != tag.width() {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "could not build the version columns"));
    }
    let hidden_result = ins.returning.is_none();
    ins.returning.get_or_insert_with(Vec::new).extend(items);
    StmtPlan::Rows(RowPlan {
        kind: RowKind::Insert,
        tables: vec![tag],
        hidden_result,
        point: None,
        notes,
        splice: None,
    })
}

fn plan_update(upd: &mut sqlparser::ast::Update, catalog: &Catalog) -> StmtPlan {
    let Some((name, alias)) = single_table(&upd.table) else {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "UPDATE of a join"));
    };
    let name = name.clone();
    let info = match resolve(catalog, &name) {
        Ok(i) => i,
        Err(o) => return StmtPlan::Opaque(o),
    };
    if let Err(o) = check_side_effects(&*upd) {
        return StmtPlan::Opaque(o);
    }
    let pk = info.pk.as_deref().unwrap_or(&[]);
    let mut reads_row = false;
    for a in &upd.assignments {
        let targets: Vec<&ObjectName> = match &a.target {
            AssignmentTarget::ColumnName(n) => vec![n],
            AssignmentTarget::Tuple(ns) => ns.iter().collect(),
        };
        for t in targets {
            let col =
                t.0.last()
                    .and_then(|p| p.as_ident())
                    .map(|i| if i.quote_style.is_some() { i.value.clone() } else { i.value.to_lowercase() });
            if col.is_some_and(|c| pk.contains(&c)) {
                return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "UPDATE of a primary-key column"));
            }
        }
        let _ = visit_expressions(&a.value, |e: &Expr| {
            if matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                reads_row = true;
            }
            ControlFlow::<()>::Continue(())
        });
    }
    let mut notes = Vec::new();
    if upd.from.is_some() {
        notes.push(opaque(OpaqueKind::Predicate, "UPDATE ... FROM: the other tables' rows are not recorded"));
    }
    let reference = alias.unwrap_or_else(|| name.to_string());
    let table_text = name.to_string();
    let mut counter = 0;
    let items = extra_items(&reference, info, reads_row.then_some(table_text.as_str()), false, &mut counter);
    let tag = TableTag {
        namespace: info.namespace.clone(),
        pk_arity: pk.len(),
        replaced: reads_row,
        deleter: false,
    };
    if items.len() != tag.width() {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "could not build the version columns"));
    }
    let hidden_result = upd.returning.is_none();
    upd.returning.get_or_insert_with(Vec::new).extend(items);
    StmtPlan::Rows(RowPlan {
        kind: RowKind::Update,
        tables: vec![tag],
        hidden_result,
        point: None,
        notes,
        splice: None,
    })
}

fn plan_delete(del: &mut sqlparser::ast::Delete, catalog: &Catalog) -> StmtPlan {
    let tables = match &del.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let ([twj], true) = (tables.as_slice(), del.tables.is_empty()) else {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "DELETE from several tables"));
    };
    let Some((name, alias)) = single_table(twj) else {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "DELETE from a join"));
    };
    let name = name.clone();
    let info = match resolve(catalog, &name) {
        Ok(i) => i,
        Err(o) => return StmtPlan::Opaque(o),
    };
    if let Err(o) = check_side_effects(&*del) {
        return StmtPlan::Opaque(o);
    }
    let mut notes = Vec::new();
    if del.using.is_some() {
        notes
            .push(opaque(OpaqueKind::Predicate, "DELETE ... USING: the other tables' rows are not recorded"));
    }
    let reference = alias.unwrap_or_else(|| name.to_string());
    let mut counter = 0;
    let items = extra_items(&reference, info, None, true, &mut counter);
    let tag = TableTag {
        namespace: info.namespace.clone(),
        pk_arity: info.pk.as_ref().map_or(0, Vec::len),
        replaced: false,
        deleter: true,
    };
    if items.len() != tag.width() {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "could not build the version columns"));
    }
    let hidden_result = del.returning.is_none();
    del.returning.get_or_insert_with(Vec::new).extend(items);
    StmtPlan::Rows(RowPlan {
        kind: RowKind::Delete,
        tables: vec![tag],
        hidden_result,
        point: None,
        notes,
        splice: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let r = |t: &str, c: Option<&str>| ("public".to_owned(), t.to_owned(), c.map(str::to_owned));
        Catalog::from_rows(vec![
            r("accounts", Some("id")),
            r("history", None),
            r("pairs", Some("a")),
            r("pairs", Some("b")),
            r("tellers", Some("tid")),
        ])
    }

    fn rows(sql: &str) -> (String, RowPlan) {
        let p = plan_query(sql, &catalog());
        match (p.rewritten, p.stmts.into_iter().next()) {
            (Some(s), Some(StmtPlan::Rows(r))) => (s, r),
            other => panic!("{sql}: expected rows, got {other:?}"),
        }
    }

    fn opaque_kind(sql: &str) -> OpaqueKind {
        match plan_query(sql, &catalog()).stmts.first() {
            Some(StmtPlan::Opaque(o)) => o.kind,
            other => panic!("{sql}: expected opaque, got {other:?}"),
        }
    }

    #[test]
    fn point_read_gets_xmin_and_key_and_a_point_lookup() {
        let (sql, plan) = rows("SELECT balance FROM accounts WHERE id = 7");
        assert_eq!(
            sql,
            "SELECT balance, accounts.xmin::TEXT AS krait_v0, accounts.id::TEXT AS krait_v1 FROM accounts WHERE id = 7"
        );
        assert_eq!(plan.kind, RowKind::Read);
        assert_eq!(plan.extra_columns(), 2);
        assert!(!plan.hidden_result && plan.notes.is_empty());
        assert_eq!(
            plan.point,
            Some(PointLookup { namespace: "accounts".into(), values: vec![PkValue::Literal("7".into())] })
        );
        let (_, plan) = rows("SELECT * FROM pairs WHERE b = $2 AND a = $1 FOR UPDATE");
        assert_eq!(plan.point.map(|p| p.values), Some(vec![PkValue::Param(0), PkValue::Param(1)]));
    }

    #[test]
    fn range_reads_and_joins_are_rows_with_a_predicate_note() {
        let (sql, plan) =
            rows("SELECT a.balance, t.tid FROM accounts a JOIN tellers t ON t.tid = a.id WHERE a.id > 3");
        assert!(
            sql.contains("a.xmin::TEXT AS krait_v0, a.id::TEXT AS krait_v1, t.xmin::TEXT AS krait_v2"),
            "{sql}"
        );
        assert_eq!(plan.tables.len(), 2);
        assert_eq!(plan.extra_columns(), 4);
        assert!(plan.point.is_none());
        assert_eq!(plan.notes[0].kind, OpaqueKind::Predicate);
    }

    #[test]
    fn writes_get_returning_and_hide_it_when_the_client_did_not_ask() {
        let (sql, plan) = rows("UPDATE accounts SET balance = balance + 1 WHERE id = 7");
        assert!(sql.ends_with(
            "RETURNING accounts.xmin::TEXT AS krait_v0, accounts.id::TEXT AS krait_v1, CASE WHEN \
             current_setting('transaction_isolation') = 'read committed' THEN 'read committed' ELSE (SELECT \
             krait_old.xmin::TEXT FROM accounts AS krait_old WHERE krait_old.id = accounts.id) END AS krait_v2"
        ), "{sql}");
        assert!(plan.hidden_result && plan.tables[0].replaced);
        let (_, plan) = rows("UPDATE accounts SET balance = 5 WHERE id = 7 RETURNING balance");
        assert!(!plan.hidden_result && !plan.tables[0].replaced);
        let (sql, plan) =
            rows("INSERT INTO accounts (id, balance) VALUES (1, 2) ON CONFLICT (id) DO NOTHING");
        assert!(
            sql.ends_with("RETURNING accounts.xmin::TEXT AS krait_v0, accounts.id::TEXT AS krait_v1"),
            "{sql}"
        );
        assert_eq!(plan.kind, RowKind::Insert);
        let (sql, plan) = rows("DELETE FROM pairs WHERE a = 1");
        assert!(sql.contains("pg_current_xact_id()::TEXT AS krait_v3"), "{sql}");
        assert_eq!(plan.kind, RowKind::Delete);
        assert_eq!(plan.extra_columns(), 4);
    }

    #[test]
    fn single_statements_keep_the_clients_text_around_the_splice() {
        let sql = "select  balance -- b\n FROM accounts WHERE id = 7;";
        let (out, plan) = rows(sql);
        assert_eq!(
            out,
            "select  balance, accounts.xmin::TEXT AS krait_v0, accounts.id::TEXT AS krait_v1 -- b\n FROM accounts \
             WHERE id = 7;"
        );
        let inserted = ", accounts.xmin::TEXT AS krait_v0, accounts.id::TEXT AS krait_v1".chars().count();
        assert_eq!(plan.splice, Some((15, inserted)));
        let (out, _) = rows("update accounts set balance = 0 where id = 1 -- done\n;");
        assert!(out.starts_with("update accounts set balance = 0 where id = 1 -- done\nRETURNING "), "{out}");
        let (out, _) = rows("DELETE FROM accounts WHERE id = 1 RETURNING id");
        assert!(out.starts_with("DELETE FROM accounts WHERE id = 1 RETURNING id\n, accounts.xmin"), "{out}");
    }

    #[test]
    fn what_cannot_be_mapped_is_opaque_and_control_is_not() {
        assert_eq!(opaque_kind("SELECT count(*) FROM accounts"), OpaqueKind::Aggregate);
        assert_eq!(opaque_kind("SELECT DISTINCT balance FROM accounts"), OpaqueKind::Aggregate);
        assert_eq!(opaque_kind("SELECT * FROM history"), OpaqueKind::NoPrimaryKey);
        assert_eq!(opaque_kind("INSERT INTO history VALUES (1)"), OpaqueKind::NoPrimaryKey);
        assert_eq!(opaque_kind("SELECT * FROM nowhere"), OpaqueKind::UnknownTable);
        assert_eq!(opaque_kind("CREATE TABLE x (a int)"), OpaqueKind::Ddl);
        for (sql, changes) in [
            ("CREATE TABLE x (a int)", true),
            ("CREATE UNLOGGED TABLE x (a int)", true),
            ("CREATE TEMPORARY TABLE x (a int)", true),
            ("CREATE TABLE x AS SELECT 1", true),
            ("CREATE SCHEMA s", true),
            ("ALTER TABLE x ADD PRIMARY KEY (a)", true),
            ("ALTER TABLE x RENAME COLUMN a TO b", true),
            ("DROP TABLE x", true),
            ("DROP SCHEMA s CASCADE", true),
            ("CREATE INDEX i ON x (a)", false),
            ("CREATE VIEW v AS SELECT 1", false),
            ("GRANT SELECT ON x TO PUBLIC", false),
            ("COMMENT ON TABLE x IS 'y'", false),
            ("DROP INDEX i", false),
        ] {
            let Some(StmtPlan::Opaque(o)) = plan_query(sql, &catalog()).stmts.first().cloned() else {
                panic!("{sql}: not opaque")
            };
            assert_eq!(o.changes_catalog, changes, "{sql}");
        }
        assert_eq!(opaque_kind("COPY accounts FROM STDIN"), OpaqueKind::Copy);
        assert_eq!(opaque_kind("SELECT nextval('s')"), OpaqueKind::Function);
        assert_eq!(opaque_kind("SELECT * FROM (SELECT * FROM accounts) s"), OpaqueKind::Unsupported);
        assert_eq!(opaque_kind("UPDATE accounts SET id = 3 WHERE id = 2"), OpaqueKind::Unsupported);
        assert_eq!(opaque_kind("SELEKT nonsense"), OpaqueKind::Unparsed);
        let p = plan_query("BEGIN; SET x = 1; SELECT 1; COMMIT", &catalog());
        assert_eq!(p.stmts, vec![StmtPlan::Control; 4]);
        assert_eq!(p.rewritten, None);
    }
}
