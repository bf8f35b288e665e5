//! The SQL the front understands: a small matcher for the fixed shapes of the `kv(k int8 primary key, v int8
//! not null)` table, plus the few statements the Krait proxy sends on its own, not a general parser.
//! Anything outside the shapes is refused by construction (no clause can be silently ignored), with a
//! message that says what is supported.
//!
//! ```text
//! BEGIN [WORK | TRANSACTION] [modes] | START TRANSACTION [modes]
//! COMMIT [WORK | TRANSACTION] | END | ROLLBACK [WORK | TRANSACTION] | ABORT
//! SELECT items FROM t WHERE key = x [FOR UPDATE]          (FOR UPDATE on krait_fence only)
//! UPDATE t SET val = y WHERE key = x [RETURNING items]
//! INSERT INTO t [(key, val)] VALUES (x, x) [, (x, x)]... [ON CONFLICT (key) DO NOTHING] [RETURNING items]
//! DELETE FROM t WHERE key = x [RETURNING items]
//!
//! t: kv (key k, val v) or krait_fence (key id, val epoch), optionally written public.t
//! items: * | item [, item]...
//! item: expr [::type] [AS name]          type: text | int8 | bigint | int4 | int | integer
//! expr: key | val | xmin, optionally written t.col
//!     | pg_current_xact_id()                                   (the transaction's own number)
//!     | (SELECT a.xmin FROM t AS a WHERE a.key = t.key)        (UPDATE ... RETURNING only: the replaced
//!                                                              version's xmin; `a.xmin` may be cast to text)
//! x: an integer literal, a quoted integer, or a parameter $n, optionally cast ::int8 (or another int type)
//! y: x | val + x | val - x | x + val
//! ```
//!
//! Two more statements are matched whole, token for token (case and spacing aside), because the Krait
//! proxy sends them (DESIGN.md §3):
//! - [`CATALOG_QUERY`], the proxy's primary-key catalog query: answered with the truth, that `kv`'s key is
//!   `k` and `krait_fence`'s is `id`;
//! - [`CREATE_FENCE`], the fence table's set-up: `krait_fence` always exists, so it does nothing.
//!
//! With those, the shapes above cover the proxy's tagging rewrite (`..., kv.xmin::TEXT AS krait_v0,
//! kv.k::TEXT AS krait_v1`, and the replaced-version subquery of an UPDATE that reads its row) and its fence
//! transaction (`SELECT xmin::text, id::text FROM krait_fence WHERE id = n FOR UPDATE`, `UPDATE krait_fence
//! SET epoch = epoch + 1 ... RETURNING xmin::text, id::text`, `INSERT ... ON CONFLICT (id) DO NOTHING`).
//!
//! `xmin` is the number of the transaction that wrote the row's version (PostgreSQL's xmin; here a 64-bit
//! number, sent as int8 unless cast to text). `FOR UPDATE` takes no lock (the store has none): the read is a
//! plain read, and the model's commit test decides, as for any read-modify-write. It is accepted only on
//! `krait_fence`, where the proxy's fence needs it; on `kv`, where a client may rely on the lock for mutual
//! exclusion, it is refused.

use std::fmt;
use std::sync::OnceLock;

pub use crate::session::Table;

/// What a result column shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// The key.
    K,
    /// The value.
    V,
    /// The number of the transaction that wrote the row's version (`xmin`).
    Xmin,
    /// In `UPDATE ... RETURNING`: the `xmin` of the version the update replaced (the version its read saw).
    Replaced,
    /// `pg_current_xact_id()`: the number of the statement's own transaction.
    CurrentXact,
}

/// The type a result column is sent as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColType {
    /// `int8`.
    Int8,
    /// `int4` (`krait_fence.id`).
    Int4,
    /// `text`: what `::text` casts give.
    Text,
}

/// One result column: what it shows, as which type, under which name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// What it shows.
    pub col: Column,
    /// Its type.
    pub ty: ColType,
    /// Its name in the RowDescription: the `AS` name, else the column's (or function's) name.
    pub name: String,
}

/// An integer operand: a literal, or a parameter (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    /// A literal.
    Lit(i64),
    /// `$n`, stored as `n - 1`.
    Param(usize),
}

/// The new value in `UPDATE ... SET v = ...`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewValue {
    /// A plain value.
    Set(Scalar),
    /// `v + x` (or `v - x`, with `negate`): reads the row first.
    Add {
        /// The operand.
        by: Scalar,
        /// Whether it is subtracted.
        negate: bool,
    },
}

/// One statement of the supported shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Statement {
    /// BEGIN / START TRANSACTION.
    Begin {
        /// `READ ONLY` was given.
        read_only: bool,
    },
    /// COMMIT / END.
    Commit,
    /// ROLLBACK / ABORT.
    Rollback,
    /// A point read.
    Select {
        /// The table.
        table: Table,
        /// The selected columns.
        cols: Vec<Item>,
        /// The key.
        key: Scalar,
    },
    /// A point update.
    Update {
        /// The table.
        table: Table,
        /// The new value.
        value: NewValue,
        /// The key.
        key: Scalar,
        /// The RETURNING columns (empty if none).
        returning: Vec<Item>,
    },
    /// Inserts of (key, value) rows.
    Insert {
        /// The table.
        table: Table,
        /// The rows, as (key, value).
        rows: Vec<(Scalar, Scalar)>,
        /// `ON CONFLICT (key) DO NOTHING`: a row whose key exists is skipped instead of failing.
        skip_existing: bool,
        /// The RETURNING columns (empty if none).
        returning: Vec<Item>,
    },
    /// A point delete.
    Delete {
        /// The table.
        table: Table,
        /// The key.
        key: Scalar,
        /// The RETURNING columns (empty if none).
        returning: Vec<Item>,
    },
    /// The proxy's primary-key catalog query ([`CATALOG_QUERY`]).
    Catalog,
    /// The fence table's set-up ([`CREATE_FENCE`]): a no-op, the table exists.
    CreateFence,
}

/// The rows [`Statement::Catalog`] returns, in the query's order (schema, table, key column): every table
/// of the store with its primary key.
pub const CATALOG_ROWS: [[&str; 3]; 2] = [["public", "krait_fence", "id"], ["public", "kv", "k"]];

/// The column names of [`Statement::Catalog`]'s rows (all `text`), as PostgreSQL names `x.col::text`.
const CATALOG_COLUMNS: [&str; 3] = ["nspname", "relname", "attname"];

/// The Krait proxy's primary-key catalog query, as it sends it (a copy of `proxy::interpret::PK_QUERY`; the
/// krait crate's tests check that the two agree).
pub const CATALOG_QUERY: &str = "SELECT n.nspname::text, c.relname::text, a.attname::text \
     FROM pg_catalog.pg_class c \
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     LEFT JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary \
     LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) \
     WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
       AND n.nspname NOT LIKE 'pg_toast%' \
     ORDER BY 1, 2, array_position(i.indkey::int2[], a.attnum)";

/// The fence table's set-up statement as the Krait proxy sends it (`proxy::interpret::fence::setup_sql`).
pub const CREATE_FENCE: &str =
    "CREATE TABLE IF NOT EXISTS krait_fence (id int PRIMARY KEY, epoch bigint NOT NULL)";

impl Statement {
    /// The columns of the rows it returns, as (name, type); empty: it returns no rows.
    pub fn columns(&self) -> Vec<(&str, ColType)> {
        let items = match self {
            Statement::Select { cols, .. } => cols,
            Statement::Update { returning, .. }
            | Statement::Insert { returning, .. }
            | Statement::Delete { returning, .. } => returning,
            Statement::Catalog => return CATALOG_COLUMNS.iter().map(|&n| (n, ColType::Text)).collect(),
            _ => return Vec::new(),
        };
        items.iter().map(|i| (i.name.as_str(), i.ty)).collect()
    }

    /// Whether it reads or writes rows (rather than controlling the transaction).
    pub fn is_data(&self) -> bool {
        !matches!(self, Statement::Begin { .. } | Statement::Commit | Statement::Rollback)
    }
}

/// Why SQL text was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// The SQLSTATE: `42601` (syntax error), `0A000` (feature not supported), `22003` (out of range).
    pub sqlstate: &'static str,
    /// The message for the client.
    pub message: String,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.sqlstate)
    }
}

/// What the front supports, for error messages.
pub const SUPPORTED: &str = "the krait reference store supports only BEGIN, COMMIT, ROLLBACK and point \
    statements on kv(k, v): SELECT cols FROM kv WHERE k = x; UPDATE kv SET v = x | v + x WHERE k = x; \
    INSERT INTO kv (k, v) VALUES (x, x); DELETE FROM kv WHERE k = x; with RETURNING k, v or xmin (and the \
    Krait proxy's catalog query and fence statements)";

fn unsupported(what: impl Into<String>) -> SqlError {
    SqlError { sqlstate: "0A000", message: format!("{}; {SUPPORTED}", what.into()) }
}

fn syntax(what: impl Into<String>) -> SqlError {
    SqlError { sqlstate: "42601", message: what.into() }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    /// An identifier or keyword; unquoted ones are lower-cased.
    Ident {
        name: String,
        quoted: bool,
    },
    Number(String),
    Str(String),
    Param(usize),
    Cast,
    Sym(char),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident { name, quoted: false } => f.write_str(name),
            Tok::Ident { name, quoted: true } => write!(f, "\"{name}\""),
            Tok::Number(n) => f.write_str(n),
            Tok::Str(s) => write!(f, "'{s}'"),
            Tok::Param(n) => write!(f, "${}", n + 1),
            Tok::Cast => f.write_str("::"),
            Tok::Sym(c) => write!(f, "{c}"),
        }
    }
}

/// The most parameters a statement may use (the protocol counts them in 16 bits).
const MAX_PARAMS: usize = u16::MAX as usize;

fn tokenize(sql: &str) -> Result<Vec<Tok>, SqlError> {
    let chars: Vec<char> = sql.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let end =
                (i + 2..chars.len().saturating_sub(1)).find(|&j| chars[j] == '*' && chars[j + 1] == '/');
            i = end.ok_or_else(|| syntax("unterminated /* comment"))? + 2;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            let name = chars[start..i].iter().collect::<String>().to_ascii_lowercase();
            toks.push(Tok::Ident { name, quoted: false });
        } else if c == '"' || c == '\'' {
            let mut text = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(syntax("unterminated quoted string or identifier")),
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                        text.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&other) => {
                        text.push(other);
                        i += 1;
                    }
                }
            }
            toks.push(if c == '"' { Tok::Ident { name: text, quoted: true } } else { Tok::Str(text) });
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            toks.push(Tok::Number(chars[start..i].iter().collect()));
        } else if c == '$' {
            let start = i + 1;
            i = start;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let n: usize = chars[start..i]
                .iter()
                .collect::<String>()
                .parse()
                .ok()
                .filter(|n| (1..=MAX_PARAMS).contains(n))
                .ok_or_else(|| syntax("a parameter must be written $1 to $65535"))?;
            toks.push(Tok::Param(n - 1));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            toks.push(Tok::Cast);
            i += 2;
        } else if "(),=;*+-.<>!/%^|&~[]:{}?@#".contains(c) {
            toks.push(Tok::Sym(c));
            i += 1;
        } else {
            return Err(syntax(format!("syntax error at or near \"{c}\"")));
        }
    }
    Ok(toks)
}

/// The tokens of a statement matched whole, computed once.
fn whole(cell: &'static OnceLock<Vec<Tok>>, sql: &str) -> &'static [Tok] {
    cell.get_or_init(|| tokenize(sql).unwrap_or_default())
}

fn catalog_tokens() -> &'static [Tok] {
    static CELL: OnceLock<Vec<Tok>> = OnceLock::new();
    whole(&CELL, CATALOG_QUERY)
}

fn create_fence_tokens() -> &'static [Tok] {
    static CELL: OnceLock<Vec<Tok>> = OnceLock::new();
    whole(&CELL, CREATE_FENCE)
}

/// Parses a query string into its statements (a simple Query may hold several, separated by `;`). An empty
/// list means the query was empty.
pub fn parse(sql: &str) -> Result<Vec<Statement>, SqlError> {
    let toks = tokenize(sql)?;
    toks.split(|t| *t == Tok::Sym(';'))
        .filter(|s| !s.is_empty())
        .map(|s| Parser { toks: s, pos: 0, params: 0 }.statement().map(|(stmt, _)| stmt))
        .collect()
}

/// Parses the one statement of a prepared statement (Parse message), with the number of parameters it
/// uses. `None` means an empty query.
pub fn parse_one(sql: &str) -> Result<Option<(Statement, usize)>, SqlError> {
    let toks = tokenize(sql)?;
    let mut parts = toks.split(|t| *t == Tok::Sym(';')).filter(|s| !s.is_empty());
    let Some(first) = parts.next() else { return Ok(None) };
    if parts.next().is_some() {
        return Err(syntax("cannot insert multiple commands into a prepared statement"));
    }
    Parser { toks: first, pos: 0, params: 0 }.statement().map(Some)
}

/// A result item as written, before the statement's table is known (a SELECT names it after the items).
#[derive(Debug)]
struct RawItem {
    expr: RawExpr,
    cast: Option<String>,
    alias: Option<String>,
}

#[derive(Debug)]
enum RawExpr {
    Star,
    /// `[qualifier.]name`.
    Col {
        qual: Vec<String>,
        name: String,
    },
    /// `(SELECT a.xmin FROM t AS a WHERE a.key = outer.key)`.
    Replaced {
        /// The inner `a.xmin` is cast to text.
        text: bool,
        table: Vec<String>,
        key: String,
        outer: Vec<String>,
        outer_key: String,
    },
    CurrentXact,
}

struct Parser<'t> {
    toks: &'t [Tok],
    pos: usize,
    /// The highest parameter number seen.
    params: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn near(&self) -> String {
        match self.peek() {
            Some(t) => format!("at or near \"{t}\""),
            None => "at end of statement".to_owned(),
        }
    }

    /// Consumes the unquoted keyword `kw` if it is next.
    fn keyword(&mut self, kw: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Ident { name, quoted: false }) if name == kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_keyword(&mut self, kw: &str) -> Result<(), SqlError> {
        if self.keyword(kw) {
            Ok(())
        } else {
            Err(unsupported(format!("expected {} {}", kw.to_ascii_uppercase(), self.near())))
        }
    }

    fn sym(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Sym(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_sym(&mut self, c: char) -> Result<(), SqlError> {
        if self.sym(c) { Ok(()) } else { Err(unsupported(format!("expected \"{c}\" {}", self.near()))) }
    }

    fn ident(&mut self) -> Option<String> {
        match self.peek() {
            Some(Tok::Ident { name, .. }) => {
                let name = name.clone();
                self.pos += 1;
                Some(name)
            }
            _ => None,
        }
    }

    fn expect_ident(&mut self) -> Result<String, SqlError> {
        self.ident().ok_or_else(|| unsupported(format!("expected a name {}", self.near())))
    }

    /// `a.b.c`: one or more names joined by dots.
    fn dotted(&mut self) -> Result<Vec<String>, SqlError> {
        let mut parts = vec![self.expect_ident()?];
        while self.sym('.') {
            parts.push(self.expect_ident()?);
        }
        Ok(parts)
    }

    fn end(&self) -> Result<(), SqlError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(unsupported(format!("unexpected input {}", self.near()))),
        }
    }

    fn statement(mut self) -> Result<(Statement, usize), SqlError> {
        if self.toks == catalog_tokens() {
            return Ok((Statement::Catalog, 0));
        }
        if self.toks == create_fence_tokens() {
            return Ok((Statement::CreateFence, 0));
        }
        let Some(Tok::Ident { name, quoted: false }) = self.peek().cloned() else {
            return Err(syntax(format!("syntax error {}", self.near())));
        };
        self.pos += 1;
        let stmt = match name.as_str() {
            "begin" => {
                let _ = self.keyword("work") || self.keyword("transaction");
                self.transaction_modes()?
            }
            "start" => {
                self.expect_keyword("transaction")?;
                self.transaction_modes()?
            }
            "commit" | "end" => {
                let _ = self.keyword("work") || self.keyword("transaction");
                self.end()?;
                Statement::Commit
            }
            "rollback" | "abort" => {
                let _ = self.keyword("work") || self.keyword("transaction");
                self.end()?;
                Statement::Rollback
            }
            "select" => {
                let raw = self.raw_items()?;
                self.expect_keyword("from")?;
                let table = self.table()?;
                let cols = resolve_items(raw, table, false)?;
                let key = self.where_key(table)?;
                if self.keyword("for") {
                    self.expect_keyword("update")?;
                    if table != Table::Fence {
                        return Err(unsupported(
                            "SELECT ... FOR UPDATE is supported on krait_fence only: the store takes no row \
                             locks",
                        ));
                    }
                }
                self.end()?;
                Statement::Select { table, cols, key }
            }
            "update" => {
                let table = self.table()?;
                self.expect_keyword("set")?;
                if self.column(table)? != Column::V {
                    return Err(unsupported(format!("only {} can be updated", table.value_column())));
                }
                self.expect_sym('=')?;
                let value = self.new_value(table)?;
                let key = self.where_key(table)?;
                let returning = self.returning(table, true)?;
                Statement::Update { table, value, key, returning }
            }
            "insert" => {
                self.expect_keyword("into")?;
                let table = self.table()?;
                let mut key_first = true;
                if self.sym('(') {
                    let a = self.column(table)?;
                    self.expect_sym(',')?;
                    let b = self.column(table)?;
                    self.expect_sym(')')?;
                    key_first = match (a, b) {
                        (Column::K, Column::V) => true,
                        (Column::V, Column::K) => false,
                        _ => {
                            return Err(unsupported(format!(
                                "INSERT must name the columns {} and {}",
                                table.key_column(),
                                table.value_column()
                            )));
                        }
                    };
                }
                self.expect_keyword("values")?;
                let mut rows = Vec::new();
                loop {
                    self.expect_sym('(')?;
                    let a = self.scalar()?;
                    self.expect_sym(',')?;
                    let b = self.scalar()?;
                    self.expect_sym(')')?;
                    rows.push(if key_first { (a, b) } else { (b, a) });
                    if !self.sym(',') {
                        break;
                    }
                }
                let mut skip_existing = false;
                if self.keyword("on") {
                    self.expect_keyword("conflict")?;
                    self.expect_sym('(')?;
                    if self.column(table)? != Column::K {
                        return Err(unsupported("ON CONFLICT must name the primary key"));
                    }
                    self.expect_sym(')')?;
                    self.expect_keyword("do")?;
                    self.expect_keyword("nothing")?;
                    skip_existing = true;
                }
                let returning = self.returning(table, false)?;
                Statement::Insert { table, rows, skip_existing, returning }
            }
            "delete" => {
                self.expect_keyword("from")?;
                let table = self.table()?;
                let key = self.where_key(table)?;
                let returning = self.returning(table, false)?;
                Statement::Delete { table, key, returning }
            }
            other => {
                return Err(unsupported(format!(
                    "{} statements are not supported",
                    other.to_ascii_uppercase()
                )));
            }
        };
        Ok((stmt, self.params))
    }

    /// BEGIN's modes: ISOLATION LEVEL ..., READ WRITE / READ ONLY, [NOT] DEFERRABLE, comma-separated. The
    /// isolation level is the store's model whatever is asked.
    fn transaction_modes(&mut self) -> Result<Statement, SqlError> {
        let mut read_only = false;
        while let Some(word) = self.ident() {
            match word.as_str() {
                "read" if self.keyword("only") => read_only = true,
                "read" if self.keyword("write") => read_only = false,
                "isolation" | "level" | "serializable" | "repeatable" | "read" | "committed"
                | "uncommitted" | "not" | "deferrable" => {}
                other => return Err(syntax(format!("syntax error at or near \"{other}\""))),
            }
            let _ = self.sym(',');
        }
        self.end()?;
        Ok(Statement::Begin { read_only })
    }

    fn table(&mut self) -> Result<Table, SqlError> {
        if !matches!(self.peek(), Some(Tok::Ident { .. })) {
            return Err(unsupported(format!("expected the table kv {}", self.near())));
        }
        let name = self.dotted()?;
        table_named(&name)
    }

    /// A column of `table` as written in a column list, SET or WHERE: `col` or `table.col`.
    fn column(&mut self, table: Table) -> Result<Column, SqlError> {
        if !matches!(self.peek(), Some(Tok::Ident { .. })) {
            return Err(unsupported(format!("expected a column of {} {}", table.name(), self.near())));
        }
        let mut parts = self.dotted()?;
        let name = parts.pop().unwrap_or_default();
        if self.peek() == Some(&Tok::Sym('(')) {
            return Err(unsupported(format!("function {name}() is not supported")));
        }
        column_of(table, &parts, &name)
    }

    fn raw_items(&mut self) -> Result<Vec<RawItem>, SqlError> {
        if self.sym('*') {
            return Ok(vec![RawItem { expr: RawExpr::Star, cast: None, alias: None }]);
        }
        let mut items = vec![self.raw_item()?];
        while self.sym(',') {
            items.push(self.raw_item()?);
        }
        Ok(items)
    }

    fn raw_item(&mut self) -> Result<RawItem, SqlError> {
        let expr = if self.sym('(') {
            self.replaced_subquery()?
        } else if self.keyword("case") {
            self.read_committed_guard()?
        } else if matches!(self.peek(), Some(Tok::Ident { .. })) {
            let mut parts = self.dotted()?;
            let name = parts.pop().unwrap_or_default();
            if self.sym('(') {
                if name != "pg_current_xact_id" || !parts.is_empty() {
                    return Err(unsupported(format!("function {name}() is not supported")));
                }
                self.expect_sym(')')?;
                RawExpr::CurrentXact
            } else {
                RawExpr::Col { qual: parts, name }
            }
        } else {
            return Err(unsupported(format!("expected a column {}", self.near())));
        };
        let cast = if self.peek() == Some(&Tok::Cast) {
            self.pos += 1;
            Some(self.expect_ident()?)
        } else {
            None
        };
        let alias = if self.keyword("as") { Some(self.expect_ident()?) } else { None };
        Ok(RawItem { expr, cast, alias })
    }

    /// After `CASE`: `WHEN current_setting('transaction_isolation') = 'read committed' THEN 'read committed'
    /// ELSE (<replaced-version subquery>) END`, the proxy's guard that gives up the replaced version at READ
    /// COMMITTED. The reference store has no per-session isolation setting (its model is the store's), so
    /// the guard always takes the subquery.
    fn read_committed_guard(&mut self) -> Result<RawExpr, SqlError> {
        let shape = || {
            unsupported(
                "the only CASE supported is the proxy's read-committed guard around the replaced-version subquery",
            )
        };
        let string = |p: &mut Self, want: &str| match p.peek() {
            Some(Tok::Str(s)) if s == want => {
                p.pos += 1;
                Ok(())
            }
            _ => Err(shape()),
        };
        self.expect_keyword("when").map_err(|_| shape())?;
        self.expect_keyword("current_setting").map_err(|_| shape())?;
        self.expect_sym('(').map_err(|_| shape())?;
        string(self, "transaction_isolation")?;
        self.expect_sym(')').map_err(|_| shape())?;
        self.expect_sym('=').map_err(|_| shape())?;
        string(self, "read committed")?;
        self.expect_keyword("then").map_err(|_| shape())?;
        string(self, "read committed")?;
        self.expect_keyword("else").map_err(|_| shape())?;
        self.expect_sym('(').map_err(|_| shape())?;
        let replaced = self.replaced_subquery()?;
        self.expect_keyword("end").map_err(|_| shape())?;
        Ok(replaced)
    }

    /// After `(`: `SELECT a.xmin[::text] FROM t AS a WHERE a.key = outer.key )`, the proxy's way of asking
    /// an UPDATE for the version it replaced.
    fn replaced_subquery(&mut self) -> Result<RawExpr, SqlError> {
        let shape =
            || unsupported("the only subquery supported is (SELECT a.xmin FROM t AS a WHERE a.key = t.key)");
        self.expect_keyword("select").map_err(|_| shape())?;
        let inner = self.dotted()?;
        let [alias, xmin] = inner.as_slice() else { return Err(shape()) };
        if xmin != "xmin" {
            return Err(shape());
        }
        let text = self.peek() == Some(&Tok::Cast);
        if text {
            self.pos += 1;
            if self.expect_ident()? != "text" {
                return Err(shape());
            }
        }
        self.expect_keyword("from").map_err(|_| shape())?;
        let table = self.dotted()?;
        self.expect_keyword("as").map_err(|_| shape())?;
        if self.expect_ident()? != *alias {
            return Err(shape());
        }
        self.expect_keyword("where").map_err(|_| shape())?;
        let mut left = self.dotted()?;
        let key = left.pop().unwrap_or_default();
        if left != [alias.clone()] {
            return Err(shape());
        }
        self.expect_sym('=').map_err(|_| shape())?;
        let mut outer = self.dotted()?;
        let outer_key = outer.pop().unwrap_or_default();
        self.expect_sym(')').map_err(|_| shape())?;
        Ok(RawExpr::Replaced { text, table, key, outer, outer_key })
    }

    fn returning(&mut self, table: Table, update: bool) -> Result<Vec<Item>, SqlError> {
        let cols = if self.keyword("returning") {
            resolve_items(self.raw_items()?, table, update)?
        } else {
            Vec::new()
        };
        self.end()?;
        Ok(cols)
    }

    fn where_key(&mut self, table: Table) -> Result<Scalar, SqlError> {
        if !self.keyword("where") {
            return Err(unsupported("a statement without WHERE key = ... (a scan) is not supported"));
        }
        let only = || unsupported(format!("only WHERE {} = ... is supported", table.key_column()));
        let key = if matches!(self.peek(), Some(Tok::Ident { .. })) {
            if self.column(table)? != Column::K {
                return Err(only());
            }
            self.expect_sym('=')?;
            self.scalar()?
        } else {
            let key = self.scalar()?;
            self.expect_sym('=')?;
            if self.column(table)? != Column::K {
                return Err(only());
            }
            key
        };
        Ok(key)
    }

    fn new_value(&mut self, table: Table) -> Result<NewValue, SqlError> {
        let col = table.value_column();
        let shape = || unsupported(format!("SET {col} = {col} + x, {col} - x or x only"));
        if matches!(self.peek(), Some(Tok::Ident { .. })) {
            if self.column(table)? != Column::V {
                return Err(shape());
            }
            let negate = if self.sym('+') {
                false
            } else if self.sym('-') {
                true
            } else {
                return Err(shape());
            };
            return Ok(NewValue::Add { by: self.scalar()?, negate });
        }
        let value = self.scalar()?;
        if self.sym('+') {
            if self.column(table)? != Column::V {
                return Err(shape());
            }
            return Ok(NewValue::Add { by: value, negate: false });
        }
        Ok(NewValue::Set(value))
    }

    fn scalar(&mut self) -> Result<Scalar, SqlError> {
        let negative = self.sym('-');
        let scalar = match self.peek().cloned() {
            Some(Tok::Param(n)) if !negative => {
                self.params = self.params.max(n + 1);
                Scalar::Param(n)
            }
            Some(Tok::Number(text)) | Some(Tok::Str(text)) => {
                let text = if negative { format!("-{}", text.trim()) } else { text.trim().to_owned() };
                let n = text.parse::<i64>().map_err(|_| SqlError {
                    sqlstate: "22003",
                    message: format!("\"{text}\" is not a 64-bit integer (kv's columns are int8)"),
                })?;
                Scalar::Lit(n)
            }
            Some(Tok::Ident { name, quoted: false }) if name == "null" && !negative => {
                return Err(SqlError {
                    sqlstate: "23502",
                    message: "NULL is not allowed: kv's columns are NOT NULL".to_owned(),
                });
            }
            _ => return Err(unsupported(format!("expected an integer or a parameter {}", self.near()))),
        };
        self.pos += 1;
        if self.peek() == Some(&Tok::Cast) {
            self.pos += 1;
            match self.ident().as_deref() {
                Some("int8" | "bigint" | "int4" | "int" | "integer" | "int2" | "smallint") => {}
                _ => return Err(unsupported("only casts to integer types are supported")),
            }
        }
        Ok(scalar)
    }
}

/// The table a (possibly schema-qualified) name denotes.
fn table_named(name: &[String]) -> Result<Table, SqlError> {
    let bare = match name {
        [t] => t,
        [schema, t] if schema == "public" => t,
        [_, _] => return Err(unsupported("only the tables kv and krait_fence (in public) exist")),
        _ => return Err(unsupported("only the tables kv and krait_fence exist")),
    };
    match bare.as_str() {
        "kv" => Ok(Table::Kv),
        "krait_fence" => Ok(Table::Fence),
        other => Err(SqlError {
            sqlstate: "42P01",
            message: format!("relation \"{other}\" does not exist; {SUPPORTED}"),
        }),
    }
}

/// Whether `qual` (before a column name) names `table`: nothing, `t` or `public.t`.
fn qualifies(table: Table, qual: &[String]) -> bool {
    match qual {
        [] => true,
        [t] => t == table.name(),
        [schema, t] => schema == "public" && t == table.name(),
        _ => false,
    }
}

fn column_of(table: Table, qual: &[String], name: &str) -> Result<Column, SqlError> {
    if !qualifies(table, qual) {
        return Err(SqlError {
            sqlstate: "42P01",
            message: format!("missing FROM-clause entry for table \"{}\"", qual.join(".")),
        });
    }
    if name == table.key_column() {
        Ok(Column::K)
    } else if name == table.value_column() {
        Ok(Column::V)
    } else if name == "xmin" {
        Ok(Column::Xmin)
    } else {
        Err(SqlError {
            sqlstate: "42703",
            message: format!(
                "column \"{name}\" does not exist; the table is {}({}, {})",
                table.name(),
                table.key_column(),
                table.value_column()
            ),
        })
    }
}

/// Checks raw items against the statement's table and gives them types and names. `update`: the items
/// are an UPDATE's RETURNING list, the only place the replaced-version subquery means something.
fn resolve_items(raw: Vec<RawItem>, table: Table, update: bool) -> Result<Vec<Item>, SqlError> {
    let natural = |col: Column| match (col, table) {
        (Column::K, Table::Fence) => ColType::Int4,
        _ => ColType::Int8,
    };
    let mut items = Vec::with_capacity(raw.len());
    for RawItem { expr, cast, alias } in raw {
        let mut inner_text = false;
        let (col, name) = match expr {
            RawExpr::Star => {
                items.push(Item { col: Column::K, ty: natural(Column::K), name: table.key_column().into() });
                items.push(Item {
                    col: Column::V,
                    ty: natural(Column::V),
                    name: table.value_column().into(),
                });
                continue;
            }
            RawExpr::Col { qual, name } => (column_of(table, &qual, &name)?, name),
            RawExpr::CurrentXact => (Column::CurrentXact, "pg_current_xact_id".to_owned()),
            RawExpr::Replaced { text, table: inner, key, outer, outer_key } => {
                if !update {
                    return Err(unsupported(
                        "the replaced-version subquery is supported in UPDATE ... RETURNING only",
                    ));
                }
                if table_named(&inner)? != table
                    || !qualifies(table, &outer)
                    || outer.is_empty()
                    || key != table.key_column()
                    || outer_key != table.key_column()
                {
                    return Err(unsupported(
                        "the replaced-version subquery must read the updated table by its primary key",
                    ));
                }
                inner_text = text;
                (Column::Replaced, "xmin".to_owned())
            }
        };
        let ty = match cast.as_deref() {
            None if inner_text => ColType::Text,
            None => natural(col),
            Some("text") => ColType::Text,
            Some("int8" | "bigint") => ColType::Int8,
            Some(other) => return Err(unsupported(format!("a cast to {other} is not supported here"))),
        };
        items.push(Item { col, ty, name: alias.unwrap_or(name) });
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Statement {
        let mut all = parse(sql).unwrap();
        assert_eq!(all.len(), 1, "{sql}");
        all.remove(0)
    }

    fn item(col: Column, ty: ColType, name: &str) -> Item {
        Item { col, ty, name: name.to_owned() }
    }

    #[test]
    fn the_supported_shapes_parse() {
        assert_eq!(
            one("SELECT v FROM kv WHERE k = $1"),
            Statement::Select {
                table: Table::Kv,
                cols: vec![item(Column::V, ColType::Int8, "v")],
                key: Scalar::Param(0)
            }
        );
        assert_eq!(
            one("select * from public.kv where 7 = k"),
            Statement::Select {
                table: Table::Kv,
                cols: vec![item(Column::K, ColType::Int8, "k"), item(Column::V, ColType::Int8, "v")],
                key: Scalar::Lit(7)
            }
        );
        assert_eq!(
            one("UPDATE kv SET v = v - 2 WHERE k = '-3' RETURNING xmin, k"),
            Statement::Update {
                table: Table::Kv,
                value: NewValue::Add { by: Scalar::Lit(2), negate: true },
                key: Scalar::Lit(-3),
                returning: vec![
                    item(Column::Xmin, ColType::Int8, "xmin"),
                    item(Column::K, ColType::Int8, "k")
                ],
            }
        );
        assert_eq!(
            one("insert into kv (v, k) values ($2::int8, $1), (1, 2)"),
            Statement::Insert {
                table: Table::Kv,
                rows: vec![(Scalar::Param(0), Scalar::Param(1)), (Scalar::Lit(2), Scalar::Lit(1))],
                skip_existing: false,
                returning: vec![],
            }
        );
        assert_eq!(
            one("DELETE FROM kv WHERE k = -1"),
            Statement::Delete { table: Table::Kv, key: Scalar::Lit(-1), returning: vec![] }
        );
        assert_eq!(
            one("begin isolation level serializable, read only"),
            Statement::Begin { read_only: true }
        );
        assert_eq!(one("START TRANSACTION"), Statement::Begin { read_only: false });
        assert_eq!(one("commit work"), Statement::Commit);
        assert_eq!(one("ABORT"), Statement::Rollback);
        assert_eq!(parse("BEGIN; SELECT k FROM kv WHERE k=1; -- c\n COMMIT;").unwrap().len(), 3);
        assert!(parse("  ; -- nothing\n").unwrap().is_empty());
        assert_eq!(parse_one("UPDATE kv SET v = $2 WHERE k = $1").unwrap().unwrap().1, 2);
    }

    #[test]
    fn the_proxys_tagging_and_fence_shapes_parse() {
        // The tagging rewrite of a point read and of an update that reads its row.
        assert_eq!(
            one("SELECT k, v, kv.xmin::TEXT AS krait_v0, kv.k::TEXT AS krait_v1 FROM kv WHERE k = $1"),
            Statement::Select {
                table: Table::Kv,
                cols: vec![
                    item(Column::K, ColType::Int8, "k"),
                    item(Column::V, ColType::Int8, "v"),
                    item(Column::Xmin, ColType::Text, "krait_v0"),
                    item(Column::K, ColType::Text, "krait_v1"),
                ],
                key: Scalar::Param(0)
            }
        );
        let Statement::Update { returning, .. } = one(
            "UPDATE kv SET v = v + 1 WHERE k = 3\nRETURNING kv.xmin::TEXT AS krait_v0, kv.k::TEXT AS krait_v1, \
             (SELECT krait_old.xmin::TEXT FROM kv AS krait_old WHERE krait_old.k = kv.k) AS krait_v2",
        ) else {
            panic!("an update")
        };
        assert_eq!(returning[2], item(Column::Replaced, ColType::Text, "krait_v2"));
        assert_eq!(
            one("DELETE FROM kv WHERE k = 1 RETURNING kv.xmin::TEXT AS a, pg_current_xact_id()::TEXT AS b"),
            Statement::Delete {
                table: Table::Kv,
                key: Scalar::Lit(1),
                returning: vec![
                    item(Column::Xmin, ColType::Text, "a"),
                    item(Column::CurrentXact, ColType::Text, "b")
                ],
            }
        );
        // The fence.
        assert_eq!(one(CREATE_FENCE), Statement::CreateFence);
        assert_eq!(one(&CATALOG_QUERY.to_lowercase().replace("  ", " ")), Statement::Catalog);
        assert_eq!(
            one("INSERT INTO krait_fence VALUES (7, 0) ON CONFLICT (id) DO NOTHING"),
            Statement::Insert {
                table: Table::Fence,
                rows: vec![(Scalar::Lit(7), Scalar::Lit(0))],
                skip_existing: true,
                returning: vec![],
            }
        );
        assert_eq!(
            one("SELECT xmin::text, id::text FROM krait_fence WHERE id = 7 FOR UPDATE"),
            Statement::Select {
                table: Table::Fence,
                cols: vec![item(Column::Xmin, ColType::Text, "xmin"), item(Column::K, ColType::Text, "id")],
                key: Scalar::Lit(7)
            }
        );
        assert_eq!(
            one("UPDATE krait_fence SET epoch = epoch + 1 WHERE id = 7 RETURNING xmin::text, id::text"),
            Statement::Update {
                table: Table::Fence,
                value: NewValue::Add { by: Scalar::Lit(1), negate: false },
                key: Scalar::Lit(7),
                returning: vec![
                    item(Column::Xmin, ColType::Text, "xmin"),
                    item(Column::K, ColType::Text, "id")
                ],
            }
        );
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        for (sql, state) in [
            ("SELECT v FROM kv", "0A000"),
            ("SELECT v FROM kv WHERE k = 1 FOR UPDATE", "0A000"),
            ("SELECT v FROM kv WHERE k > 1", "0A000"),
            ("SELECT v FROM other WHERE k = 1", "42P01"),
            ("SELECT w FROM kv WHERE k = 1", "42703"),
            ("SELECT count(*) FROM kv", "0A000"),
            ("UPDATE kv SET k = 1 WHERE k = 2", "0A000"),
            ("UPDATE kv SET v = v * 2 WHERE k = 2", "0A000"),
            ("INSERT INTO kv VALUES (1, NULL)", "23502"),
            ("INSERT INTO kv VALUES (1.5, 1)", "22003"),
            ("CREATE TABLE kv (k int)", "0A000"),
            ("SELECT 'unterminated", "42601"),
            ("SELECT v FROM kv WHERE k = $0", "42601"),
            ("BEGIN; COMMIT", "42601"),
            // Near misses of the proxy's shapes stay refused.
            ("CREATE TABLE IF NOT EXISTS krait_fence (id int PRIMARY KEY)", "0A000"),
            ("CREATE TABLE krait_fence (id int PRIMARY KEY, epoch bigint NOT NULL)", "0A000"),
            (&CATALOG_QUERY.replace("'r', 'p'", "'r'"), "0A000"),
            ("SELECT id FROM kv WHERE k = 1", "42703"),
            ("SELECT v FROM kv WHERE id = 1", "42703"),
            ("SELECT other.v FROM kv WHERE k = 1", "42P01"),
            ("SELECT kv.xmin::date FROM kv WHERE k = 1", "0A000"),
            ("SELECT (SELECT a.xmin FROM kv AS a WHERE a.k = kv.k) FROM kv WHERE k = 1", "0A000"),
            (
                "UPDATE kv SET v = 1 WHERE k = 1 RETURNING (SELECT a.xmin FROM kv AS b WHERE a.k = kv.k)",
                "0A000",
            ),
            (
                "UPDATE kv SET v = 1 WHERE k = 1 RETURNING (SELECT a.xmin FROM kv AS a WHERE a.v = kv.k)",
                "0A000",
            ),
            (
                "UPDATE kv SET v = 1 WHERE k = 1 RETURNING (SELECT a.xmin FROM krait_fence AS a WHERE a.k = kv.k)",
                "0A000",
            ),
            ("SELECT now() FROM kv WHERE k = 1", "0A000"),
            ("INSERT INTO kv VALUES (1, 1) ON CONFLICT (v) DO NOTHING", "0A000"),
            ("INSERT INTO kv VALUES (1, 1) ON CONFLICT (k) DO UPDATE SET v = 2", "0A000"),
        ] {
            let err = if sql.contains(';') { parse_one(sql).unwrap_err() } else { parse(sql).unwrap_err() };
            assert_eq!(err.sqlstate, state, "{sql}: {err}");
        }
    }
}
