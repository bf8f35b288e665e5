//! The parser: a query's tokens split into statements, each matched against the supported shapes by a
//! small recursive-descent parser.

use super::lexer::{Tok, catalog_tokens, create_fence_tokens, tokenize};
use super::resolve::{RawExpr, RawItem, column_of, resolve_items, table_named};
use super::{Column, Item, NewValue, Scalar, SqlError, Statement, Table, syntax, unsupported};

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
            return Ok(vec![RawItem { expr: RawExpr::Star(Vec::new()), cast: None, alias: None }]);
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
            // `a.b.c`, or `a.b.*`: every column of the table the qualifier names (as the proxy asks for the
            // row a write produced).
            let mut parts = vec![self.expect_ident()?];
            let mut star = false;
            while self.sym('.') {
                if self.sym('*') {
                    star = true;
                    break;
                }
                parts.push(self.expect_ident()?);
            }
            if star {
                return Ok(RawItem { expr: RawExpr::Star(parts), cast: None, alias: None });
            }
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

    /// After `CASE`: `WHEN current_setting('transaction_isolation') = 'read committed' THEN
    /// COALESCE((<replaced-version subquery> AND a.xmax = t.xmin), 'read committed') ELSE (<replaced-version
    /// subquery>) END`, the proxy's guard that gives up the replaced version at READ COMMITTED where the
    /// statement's snapshot may not show it. The reference store has no per-session isolation setting (its
    /// model is the store's), so the guard always takes the ELSE subquery.
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
        self.expect_keyword("coalesce").map_err(|_| shape())?;
        self.expect_sym('(').map_err(|_| shape())?;
        self.expect_sym('(').map_err(|_| shape())?;
        let checked = self.replaced_subquery_with(true)?;
        self.expect_sym(',').map_err(|_| shape())?;
        string(self, "read committed")?;
        self.expect_sym(')').map_err(|_| shape())?;
        self.expect_keyword("else").map_err(|_| shape())?;
        self.expect_sym('(').map_err(|_| shape())?;
        let replaced = self.replaced_subquery()?;
        if checked != replaced {
            return Err(shape());
        }
        self.expect_keyword("end").map_err(|_| shape())?;
        Ok(replaced)
    }

    /// After `(`: `SELECT a.xmin[::text] FROM t AS a WHERE a.key = outer.key )`, the proxy's way of asking
    /// an UPDATE for the version it replaced.
    fn replaced_subquery(&mut self) -> Result<RawExpr, SqlError> {
        self.replaced_subquery_with(false)
    }

    /// [`Self::replaced_subquery`], with `AND a.xmax = outer.xmin` before the `)` when `xmax_check` (the
    /// read-committed guard's: the snapshot's version is the one this statement replaced).
    fn replaced_subquery_with(&mut self, xmax_check: bool) -> Result<RawExpr, SqlError> {
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
        if xmax_check {
            // `AND a.xmax = outer.xmin`: the store replaces the version its read saw, so it always holds.
            self.expect_keyword("and").map_err(|_| shape())?;
            if self.dotted()? != [alias.clone(), "xmax".to_owned()] {
                return Err(shape());
            }
            self.expect_sym('=').map_err(|_| shape())?;
            let mut xmin_of = self.dotted()?;
            if xmin_of.pop().as_deref() != Some("xmin") || xmin_of != outer {
                return Err(shape());
            }
        }
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
