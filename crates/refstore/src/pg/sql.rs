//! The SQL the front understands: a small matcher for the fixed shape of the `kv(k int8 primary key, v int8
//! not null)` table, not a general parser. Anything outside the shape is refused by construction (no clause
//! can be silently ignored), with a message that says what is supported.
//!
//! ```text
//! BEGIN [WORK | TRANSACTION] [modes] | START TRANSACTION [modes]
//! COMMIT [WORK | TRANSACTION] | END | ROLLBACK [WORK | TRANSACTION] | ABORT
//! SELECT cols FROM kv WHERE k = x
//! UPDATE kv SET v = y WHERE k = x [RETURNING cols]
//! INSERT INTO kv [(k, v)] VALUES (x, x) [, (x, x)]... [RETURNING cols]
//! DELETE FROM kv WHERE k = x [RETURNING cols]
//!
//! cols: * | col [, col]...      col: k | v | xmin, optionally written kv.col
//! x: an integer literal, a quoted integer, or a parameter $n, optionally cast ::int8 (or another int type)
//! y: x | v + x | v - x | x + v
//! ```
//! The table may be written `kv` or `public.kv`.

use std::fmt;

/// A column of the `kv` table, or its `xmin` system column (the writer's transaction number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// The key.
    K,
    /// The value.
    V,
    /// The number of the transaction that wrote the row's version.
    Xmin,
}

impl Column {
    /// The column's name.
    pub fn name(self) -> &'static str {
        match self {
            Column::K => "k",
            Column::V => "v",
            Column::Xmin => "xmin",
        }
    }
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

/// One statement of the supported shape.
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
        /// The selected columns.
        cols: Vec<Column>,
        /// The key.
        key: Scalar,
    },
    /// A point update.
    Update {
        /// The new value.
        value: NewValue,
        /// The key.
        key: Scalar,
        /// The RETURNING columns (empty if none).
        returning: Vec<Column>,
    },
    /// Inserts of (key, value) rows.
    Insert {
        /// The rows, as (key, value).
        rows: Vec<(Scalar, Scalar)>,
        /// The RETURNING columns (empty if none).
        returning: Vec<Column>,
    },
    /// A point delete.
    Delete {
        /// The key.
        key: Scalar,
        /// The RETURNING columns (empty if none).
        returning: Vec<Column>,
    },
}

impl Statement {
    /// The columns of the rows it returns (empty: it returns no rows).
    pub fn columns(&self) -> &[Column] {
        match self {
            Statement::Select { cols, .. } => cols,
            Statement::Update { returning, .. }
            | Statement::Insert { returning, .. }
            | Statement::Delete { returning, .. } => returning,
            _ => &[],
        }
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
    INSERT INTO kv (k, v) VALUES (x, x); DELETE FROM kv WHERE k = x; with RETURNING k, v or xmin";

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

    fn end(&self) -> Result<(), SqlError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(unsupported(format!("unexpected input {}", self.near()))),
        }
    }

    fn statement(mut self) -> Result<(Statement, usize), SqlError> {
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
                let cols = self.columns()?;
                self.expect_keyword("from")?;
                self.table()?;
                let key = self.where_key()?;
                self.end()?;
                Statement::Select { cols, key }
            }
            "update" => {
                self.table()?;
                self.expect_keyword("set")?;
                self.column_named(Column::V, "only v can be updated")?;
                self.expect_sym('=')?;
                let value = self.new_value()?;
                let key = self.where_key()?;
                let returning = self.returning()?;
                Statement::Update { value, key, returning }
            }
            "insert" => {
                self.expect_keyword("into")?;
                self.table()?;
                let mut key_first = true;
                if self.sym('(') {
                    let a = self.column()?;
                    self.expect_sym(',')?;
                    let b = self.column()?;
                    self.expect_sym(')')?;
                    key_first = match (a, b) {
                        (Column::K, Column::V) => true,
                        (Column::V, Column::K) => false,
                        _ => return Err(unsupported("INSERT must name the columns k and v")),
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
                let returning = self.returning()?;
                Statement::Insert { rows, returning }
            }
            "delete" => {
                self.expect_keyword("from")?;
                self.table()?;
                let key = self.where_key()?;
                let returning = self.returning()?;
                Statement::Delete { key, returning }
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

    fn table(&mut self) -> Result<(), SqlError> {
        let first = self.ident();
        let name = if self.sym('.') {
            if first.as_deref() != Some("public") {
                return Err(unsupported("only the table kv (or public.kv) exists"));
            }
            self.ident()
        } else {
            first
        };
        match name.as_deref() {
            Some("kv") => Ok(()),
            Some(other) => Err(SqlError {
                sqlstate: "42P01",
                message: format!("relation \"{other}\" does not exist; {SUPPORTED}"),
            }),
            None => Err(unsupported(format!("expected the table kv {}", self.near()))),
        }
    }

    fn column(&mut self) -> Result<Column, SqlError> {
        let mut name = self.ident();
        if name.as_deref() == Some("kv") && self.sym('.') {
            name = self.ident();
        }
        match name.as_deref() {
            Some("k") => Ok(Column::K),
            Some("v") => Ok(Column::V),
            Some("xmin") => Ok(Column::Xmin),
            Some(other) if self.peek() == Some(&Tok::Sym('(')) => {
                Err(unsupported(format!("function {other}() is not supported")))
            }
            Some(other) => Err(SqlError {
                sqlstate: "42703",
                message: format!("column \"{other}\" does not exist; the table is kv(k, v)"),
            }),
            None => Err(unsupported(format!("expected a column of kv {}", self.near()))),
        }
    }

    fn column_named(&mut self, want: Column, why: &str) -> Result<(), SqlError> {
        if self.column()? == want { Ok(()) } else { Err(unsupported(why.to_owned())) }
    }

    fn columns(&mut self) -> Result<Vec<Column>, SqlError> {
        if self.sym('*') {
            return Ok(vec![Column::K, Column::V]);
        }
        let mut cols = vec![self.column()?];
        while self.sym(',') {
            cols.push(self.column()?);
        }
        Ok(cols)
    }

    fn returning(&mut self) -> Result<Vec<Column>, SqlError> {
        let cols = if self.keyword("returning") { self.columns()? } else { Vec::new() };
        self.end()?;
        Ok(cols)
    }

    fn where_key(&mut self) -> Result<Scalar, SqlError> {
        if !self.keyword("where") {
            return Err(unsupported("a statement without WHERE k = ... (a scan) is not supported"));
        }
        let key = if matches!(self.peek(), Some(Tok::Ident { .. })) {
            self.column_named(Column::K, "only WHERE k = ... is supported")?;
            self.expect_sym('=')?;
            self.scalar()?
        } else {
            let key = self.scalar()?;
            self.expect_sym('=')?;
            self.column_named(Column::K, "only WHERE k = ... is supported")?;
            key
        };
        Ok(key)
    }

    fn new_value(&mut self) -> Result<NewValue, SqlError> {
        if matches!(self.peek(), Some(Tok::Ident { .. })) {
            self.column_named(Column::V, "SET v = v + x, v - x or x only")?;
            let negate = if self.sym('+') {
                false
            } else if self.sym('-') {
                true
            } else {
                return Err(unsupported("SET v = v + x, v - x or x only"));
            };
            return Ok(NewValue::Add { by: self.scalar()?, negate });
        }
        let value = self.scalar()?;
        if self.sym('+') {
            self.column_named(Column::V, "SET v = v + x, v - x or x only")?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Statement {
        let mut all = parse(sql).unwrap();
        assert_eq!(all.len(), 1, "{sql}");
        all.remove(0)
    }

    #[test]
    fn the_supported_shapes_parse() {
        assert_eq!(
            one("SELECT v FROM kv WHERE k = $1"),
            Statement::Select { cols: vec![Column::V], key: Scalar::Param(0) }
        );
        assert_eq!(
            one("select * from public.kv where 7 = k"),
            Statement::Select { cols: vec![Column::K, Column::V], key: Scalar::Lit(7) }
        );
        assert_eq!(
            one("UPDATE kv SET v = v - 2 WHERE k = '-3' RETURNING xmin, k"),
            Statement::Update {
                value: NewValue::Add { by: Scalar::Lit(2), negate: true },
                key: Scalar::Lit(-3),
                returning: vec![Column::Xmin, Column::K],
            }
        );
        assert_eq!(
            one("insert into kv (v, k) values ($2::int8, $1), (1, 2)"),
            Statement::Insert {
                rows: vec![(Scalar::Param(0), Scalar::Param(1)), (Scalar::Lit(2), Scalar::Lit(1))],
                returning: vec![],
            }
        );
        assert_eq!(
            one("DELETE FROM kv WHERE k = -1"),
            Statement::Delete { key: Scalar::Lit(-1), returning: vec![] }
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
        ] {
            let err = if sql.contains(';') { parse_one(sql).unwrap_err() } else { parse(sql).unwrap_err() };
            assert_eq!(err.sqlstate, state, "{sql}: {err}");
        }
    }
}
