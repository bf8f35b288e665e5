//! Statement execution: transaction control and the data statements, run in the connection's session
//! (in its open BEGIN block or in a transaction of their own), and the rows they return.

use super::sql::{self, Column, Item, NewValue, Scalar, Statement};
use super::{Conn, PgError};
use crate::session::{Row, SessionError, Table};

/// One value of a result row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cell {
    /// An integer, sent as its column's type says (int8, int4, or its decimal text).
    Int(i64),
    /// A fixed text (the catalog's names).
    Text(&'static str),
}

/// The result of one statement.
pub(super) struct Outcome {
    pub(super) rows: Vec<Vec<Cell>>,
    pub(super) tag: String,
    /// A notice to send before the result (a no-op CREATE TABLE IF NOT EXISTS).
    pub(super) notice: Option<(&'static str, &'static str)>,
}

impl Conn {
    /// Marks a BEGIN block failed after an error: its transaction is rolled back now (recorded as aborted)
    /// and the block waits for ROLLBACK.
    pub(super) fn fail_block(&mut self) {
        if self.block {
            self.failed = true;
            self.session.rollback();
        }
    }

    /// Runs one statement in the session: transaction control, or a data statement in the open block or in
    /// a transaction of its own.
    pub(super) fn run(&mut self, stmt: &Statement, params: &[Option<i64>]) -> Result<Outcome, PgError> {
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
