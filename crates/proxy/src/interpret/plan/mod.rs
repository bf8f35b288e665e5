//! Statement understanding: parse each statement with `sqlparser`, decide what it does to rows, and rewrite
//! it so the database also returns each row's version tag (strategy `xmin`, DESIGN.md §3).
//!
//! Every extra column goes at the *end* of the target list or RETURNING list, cast to `text`. At the end,
//! stripping is a suffix cut ([`super::strip`]); as `text`, the bytes are the same in the text and the binary
//! result format, so a Bind that asks for binary results needs no special decoding.
//!
//! The layout of the extra columns, per tagged table, in [`RowPlan::tables`] order:
//! `xmin`, then each primary-key column, then (UPDATE) the replaced version's `xmin`,
//! then (DELETE) the deleting transaction's id.
//!
//! The statement planners live beside this module: `select` (SELECT and point lookups) and `write`
//! (INSERT, UPDATE, DELETE), both built on `scan` (catalog lookups and what expressions contain) and
//! `rewrite` (the extra columns, and splicing them into the client's text).

mod rewrite;
mod scan;
mod select;
mod write;

use sqlparser::ast::{Ident, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

use super::catalog::Catalog;
use rewrite::{select_list_end, splice};
use select::plan_query_stmt;
use write::{plan_delete, plan_insert, plan_update};

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

/// Whether a statement part not checked, by its label ([`OpaqueKind::label`], or the tagger's
/// `read_committed_update`), may have written rows the proxy did not see: all but those known to only
/// read (aggregates, predicate reads), the UPDATE whose rows are mapped, and tables without a primary key
/// (whose versions no read can name).
pub fn may_write_unseen(label: &str) -> bool {
    !matches!(label, "aggregate" | "predicate" | "read_committed_update" | "no_primary_key")
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
    /// The key namespace ([`TableInfo::namespace`](super::catalog::TableInfo::namespace)).
    pub namespace: String,
    /// How many primary-key columns follow its `xmin`.
    pub pk_arity: usize,
    /// An UPDATE: the replaced version's `xmin` follows the key.
    pub replaced: bool,
    /// An UPDATE whose SET reads the row (`v = v + 1`). Where the replaced version is not known (READ
    /// COMMITTED), such a write depends on a version the history cannot name, and is noted as not checked;
    /// one whose SET reads nothing is a blind write there.
    pub set_reads_row: bool,
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
    /// With `hidden_result`: the columns before the version columns are the written row (`t.*`, see
    /// [`PlanOptions::write_rows`]), read for its recorded values only.
    pub hidden_row: bool,
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
    /// Rewritten; its rows are reads or writes. Boxed: a Query keeps one plan per statement until its
    /// replies are read, and most are not rows, so the enum stays the size of the small variants.
    Rows(Box<RowPlan>),
    /// A savepoint command: no rows, but a ROLLBACK TO SAVEPOINT takes back the writes made since the
    /// savepoint, so the tagger must drop them from the transaction's ops.
    Savepoint(SavepointCmd),
}

impl StmtPlan {
    /// Whether running it writes nothing: transaction control, a savepoint command, or a read, whose rows are
    /// all it does. An opaque statement may write.
    pub fn writes_nothing(&self) -> bool {
        match self {
            StmtPlan::Control | StmtPlan::Savepoint(_) => true,
            StmtPlan::Rows(r) => r.kind == RowKind::Read,
            StmtPlan::Opaque(_) => false,
        }
    }

    /// Whether its rows are writes, which a write-ahead intent must carry (DESIGN.md §3).
    pub fn writes_rows(&self) -> bool {
        matches!(self, StmtPlan::Rows(r) if r.kind != RowKind::Read)
    }
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
    /// Whether `rewritten` is the client's own text with the extra columns spliced in (one statement), not
    /// sqlparser's printing of the statements, which may show a literal otherwise than the client wrote it
    /// (a plan template relies on the former: [`super::plan_template`]).
    pub spliced: bool,
}

/// Plans a query string (simple protocol: maybe several statements; Parse: one).
///
/// The statements are parsed, planned and printed one at a time, each syntax tree dropped before the next
/// is parsed: a tree takes kilobytes even for `SELECT 1`, and a client decides how many statements one
/// Query holds (50,000 `SELECT 1;` took the proxy from 53 to 575 MB while all trees were alive at once).
/// What is kept per statement is its plan and, until it is known whether anything was rewritten, its text
/// (in one string, not one allocation per statement).
/// The outcome is the same as parsing the whole string first: if any statement does not parse, the whole
/// string is one unparsed entry and nothing is rewritten.
pub fn plan_query(sql: &str, catalog: &Catalog) -> PlannedQuery {
    plan_query_with(sql, catalog, PlanOptions::default())
}

/// What the rewrite adds beyond the version columns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Return the row an INSERT or UPDATE without RETURNING wrote, hidden from the client, so that its
    /// values are recorded (`[record] values`): a report then shows what a write produced, not only a
    /// version id (issue 18, item 1).
    pub write_rows: bool,
}

/// [`plan_query`] with options.
pub fn plan_query_with(sql: &str, catalog: &Catalog, options: PlanOptions) -> PlannedQuery {
    let unparsed = |e: ParserError| PlannedQuery {
        rewritten: None,
        stmts: vec![StmtPlan::Opaque(opaque(OpaqueKind::Unparsed, e.to_string()))],
        aligned: false,
        spliced: false,
    };
    let dialect = PostgreSqlDialect {};
    let mut statements = match Parser::new(&dialect).try_with_sql(sql) {
        Ok(parser) => Statements { parser, expecting_delimiter: false },
        Err(e) => return unparsed(e),
    };
    // One statement of lookahead: a lone statement is spliced into the client's text, so whether there is a
    // second must be known before the first is printed.
    let mut next = match statements.next() {
        Ok(s) => s,
        Err(e) => return unparsed(e),
    };
    let mut out = Vec::new();
    let mut texts = String::new();
    let mut any = false;
    let mut all_spliced = true;
    while let Some(mut stmt) = next.take() {
        next = match statements.next() {
            Ok(s) => s,
            Err(e) => return unparsed(e),
        };
        let single = out.is_empty() && next.is_none();
        let select_end = select_list_end(&stmt);
        let mut plan = plan_statement_with(&mut stmt, catalog, options);
        any |= matches!(plan, StmtPlan::Rows(_));
        // One statement: splice the extra columns into the client's own text, so everything the client
        // wrote keeps its position (error positions stay right). Several: print the rewritten statements.
        let spliced = match (&mut plan, single) {
            (StmtPlan::Rows(rows), true) => splice(sql, &stmt, rows, select_end),
            _ => None,
        };
        if !out.is_empty() {
            texts.push_str("; ");
        }
        match spliced {
            Some(text) => texts.push_str(&text),
            None => {
                use std::fmt::Write;
                let _ = write!(texts, "{stmt}");
                all_spliced = false;
            }
        }
        out.push(plan);
    }
    out.shrink_to_fit();
    let spliced = any && all_spliced;
    PlannedQuery { rewritten: any.then_some(texts), stmts: out, aligned: true, spliced }
}

/// The statements of a query string, parsed one at a time with the same rules as sqlparser's
/// `Parser::parse_statements` (empty statements skipped, a delimiter required between two, `END` after a
/// statement ends the input), which would build every statement's tree before returning any.
struct Statements<'a> {
    parser: Parser<'a>,
    expecting_delimiter: bool,
}

impl Statements<'_> {
    /// The next statement, `None` at the end of the input.
    fn next(&mut self) -> Result<Option<Statement>, ParserError> {
        while self.parser.consume_token(&Token::SemiColon) {
            self.expecting_delimiter = false;
        }
        match &self.parser.peek_token_ref().token {
            Token::EOF => return Ok(None),
            Token::Word(word) if self.expecting_delimiter && word.keyword == Keyword::END => return Ok(None),
            _ => {}
        }
        if self.expecting_delimiter {
            return self.parser.expected_ref("end of statement", self.parser.peek_token_ref());
        }
        let statement = self.parser.parse_statement()?;
        self.expecting_delimiter = true;
        Ok(Some(statement))
    }
}

/// Plans one parsed statement and, for [`StmtPlan::Rows`], rewrites it in place.
pub fn plan_statement(stmt: &mut Statement, catalog: &Catalog) -> StmtPlan {
    plan_statement_with(stmt, catalog, PlanOptions::default())
}

/// [`plan_statement`] with options.
pub fn plan_statement_with(stmt: &mut Statement, catalog: &Catalog, options: PlanOptions) -> StmtPlan {
    match stmt {
        Statement::Query(q) => plan_query_stmt(q, catalog),
        Statement::Insert(ins) => plan_insert(ins, catalog, options),
        Statement::Update(upd) => plan_update(upd, catalog, options),
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
        Statement::Explain { analyze, options, .. } => {
            // EXPLAIN ANALYZE runs its statement, writes included.
            let analyzes = *analyze
                || options
                    .as_ref()
                    .is_some_and(|o| o.iter().any(|u| u.name.value.eq_ignore_ascii_case("analyze")));
            if analyzes {
                StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "EXPLAIN ANALYZE runs its statement"))
            } else {
                StmtPlan::Control
            }
        }
        Statement::ExplainTable { .. } => StmtPlan::Control,
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
            (Some(s), Some(StmtPlan::Rows(r))) => (s, *r),
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
    fn writes_return_the_row_they_wrote_first_and_hidden_when_values_are_recorded() {
        let with_rows = PlanOptions { write_rows: true };
        let plan_of = |sql: &str| match plan_query_with(sql, &catalog(), with_rows) {
            PlannedQuery { rewritten: Some(s), stmts, .. } => match stmts.into_iter().next() {
                Some(StmtPlan::Rows(r)) => (s, *r),
                other => panic!("{sql}: {other:?}"),
            },
            other => panic!("{sql}: {other:?}"),
        };
        let (sql, plan) = plan_of("UPDATE accounts AS a SET balance = $1 WHERE id = $2 -- note");
        assert!(
            sql.ends_with(
                "-- note\nRETURNING a.*, a.xmin::TEXT AS krait_v0, a.id::TEXT AS krait_v1, CASE WHEN \
                 current_setting('transaction_isolation') = 'read committed' THEN COALESCE((SELECT \
                 krait_old.xmin::TEXT FROM accounts AS krait_old WHERE krait_old.id = a.id AND krait_old.xmax = \
                 a.xmin), 'read committed') ELSE (SELECT krait_old.xmin::TEXT FROM accounts AS krait_old WHERE \
                 krait_old.id = a.id) END AS krait_v2"
            ),
            "{sql}"
        );
        assert!(plan.hidden_result && plan.hidden_row && plan.extra_columns() == 3);
        let (sql, plan) = plan_of("INSERT INTO accounts (id, balance) VALUES (1, 2)");
        assert!(
            sql.ends_with(
                "RETURNING accounts.*, accounts.xmin::TEXT AS krait_v0, accounts.id::TEXT AS krait_v1"
            ),
            "{sql}"
        );
        assert!(plan.hidden_row);
        // What the client asked for is what it gets; a DELETE's row is not a written one.
        let (sql, plan) = plan_of("UPDATE accounts SET balance = 5 WHERE id = 7 RETURNING balance");
        assert!(!plan.hidden_row && !sql.contains(".*"), "{sql}");
        let (sql, plan) = plan_of("DELETE FROM accounts WHERE id = 7");
        assert!(plan.hidden_result && !plan.hidden_row && !sql.contains(".*"), "{sql}");
        // Without the option, nothing more than the version columns.
        let (sql, plan) = rows("UPDATE accounts SET balance = $1 WHERE id = $2");
        assert!(!plan.hidden_row && !sql.contains(".*"), "{sql}");
    }

    #[test]
    fn writes_get_returning_and_hide_it_when_the_client_did_not_ask() {
        let (sql, plan) = rows("UPDATE accounts SET balance = balance + 1 WHERE id = 7");
        assert!(sql.ends_with(
            "RETURNING accounts.xmin::TEXT AS krait_v0, accounts.id::TEXT AS krait_v1, CASE WHEN \
             current_setting('transaction_isolation') = 'read committed' THEN COALESCE((SELECT krait_old.xmin::TEXT \
             FROM accounts AS krait_old WHERE krait_old.id = accounts.id AND krait_old.xmax = accounts.xmin), \
             'read committed') ELSE (SELECT krait_old.xmin::TEXT FROM accounts AS krait_old WHERE krait_old.id = \
             accounts.id) END AS krait_v2"
        ), "{sql}");
        assert!(plan.hidden_result && plan.tables[0].replaced);
        // A SET that reads nothing of the row still records the version it replaced.
        let (_, plan) = rows("UPDATE accounts SET balance = 5 WHERE id = 7 RETURNING balance");
        assert!(!plan.hidden_result && plan.tables[0].replaced);
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

    /// The planner as it was before statements were parsed one at a time: the whole string's trees first.
    fn plan_all_at_once(sql: &str, catalog: &Catalog) -> PlannedQuery {
        let statements = match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
            Ok(s) => s,
            Err(e) => {
                let stmts = vec![StmtPlan::Opaque(opaque(OpaqueKind::Unparsed, e.to_string()))];
                return PlannedQuery { rewritten: None, stmts, aligned: false, spliced: false };
            }
        };
        let single = statements.len() == 1;
        let (mut out, mut texts, mut any, mut all_spliced) = (Vec::new(), Vec::new(), false, true);
        for mut stmt in statements {
            let select_end = select_list_end(&stmt);
            let mut plan = plan_statement(&mut stmt, catalog);
            any |= matches!(plan, StmtPlan::Rows(_));
            let spliced = match (&mut plan, single) {
                (StmtPlan::Rows(rows), true) => splice(sql, &stmt, rows, select_end),
                _ => None,
            };
            all_spliced &= spliced.is_some();
            texts.push(spliced.unwrap_or_else(|| stmt.to_string()));
            out.push(plan);
        }
        let spliced = any && all_spliced;
        PlannedQuery { rewritten: any.then(|| texts.join("; ")), stmts: out, aligned: true, spliced }
    }

    #[test]
    fn statements_planned_one_at_a_time_plan_as_the_whole_string_did() {
        for sql in [
            "",
            ";;",
            "SELECT 1",
            "SELECT 1;",
            ";SELECT 1;;",
            "SELECT 1; SELECT 2",
            "SELECT balance FROM accounts WHERE id = 7;",
            "BEGIN; UPDATE accounts SET balance = 1 WHERE id = 2; COMMIT",
            "SELECT 1; SELECT balance FROM accounts WHERE id = 7; SELECT 3",
            "SELECT 1 SELECT 2",
            "SELECT 1; SELEKT 2",
            "SELECT 1; END",
            "SELECT 1 END",
            "SELECT 1; SELECT (",
            "END; SELECT 1",
        ] {
            assert_eq!(plan_query(sql, &catalog()), plan_all_at_once(sql, &catalog()), "{sql:?}");
        }
    }

    #[test]
    fn a_statements_plan_is_small_when_it_maps_no_rows() {
        // A Query keeps one plan per statement until its replies are read (50,000 for 450 KB of `SELECT 1;`).
        let size = std::mem::size_of::<StmtPlan>();
        assert!(size <= 48, "StmtPlan takes {size} bytes");
    }
}
