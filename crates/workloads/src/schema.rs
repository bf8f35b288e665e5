//! Tables, rows and the SQL they become.
//!
//! Every workload is written against a real SQL schema, but its transaction logic only ever touches one
//! row at a time by primary key: a point read, an insert or an update of the whole row. That is the shape
//! Cobra's benchmarks have (Cobra §6: SQL is translated to key-value operations), the shape Krait's proxy
//! maps statements to, and the shape the in-memory store can record as a history (one row = one key).
//! Deletes are never used: the history model has no delete, so "removing" is an update of a flag column.

use std::fmt::Write as _;

use crate::StoreError;

/// One column value. Amounts are integers (cents), so that both backends compute identical values.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Val {
    /// A `BIGINT`.
    Int(i64),
    /// A `TEXT`.
    Text(String),
}

impl Val {
    /// The integer, or an error naming `what` if the column holds text.
    pub fn int(&self, what: &str) -> Result<i64, StoreError> {
        match self {
            Val::Int(i) => Ok(*i),
            Val::Text(_) => Err(StoreError::Data(format!("{what}: expected an integer, found text"))),
        }
    }

    /// The text, or an error naming `what` if the column holds an integer.
    pub fn text(&self, what: &str) -> Result<&str, StoreError> {
        match self {
            Val::Text(s) => Ok(s),
            Val::Int(_) => Err(StoreError::Data(format!("{what}: expected text, found an integer"))),
        }
    }

    fn sql_literal(&self, out: &mut String) {
        match self {
            Val::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Val::Text(s) => {
                out.push('\'');
                out.push_str(&s.replace('\'', "''"));
                out.push('\'');
            }
        }
    }
}

/// A whole row, its columns in [`TableDef::columns`] order (primary key first).
pub type Row = Vec<Val>;

/// A column's SQL type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColType {
    /// `BIGINT`
    Int,
    /// `TEXT`
    Text,
}

/// One column of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// Its SQL name.
    pub name: &'static str,
    /// Its SQL type.
    pub ty: ColType,
}

/// Shorthand for a `BIGINT` column.
pub(crate) const fn int(name: &'static str) -> Column {
    Column { name, ty: ColType::Int }
}

/// Shorthand for a `TEXT` column.
pub(crate) const fn text(name: &'static str) -> Column {
    Column { name, ty: ColType::Text }
}

/// A table: its name, its columns, and how many leading columns form the primary key.
#[derive(Debug, PartialEq, Eq)]
pub struct TableDef {
    /// The SQL table name; also the history key's namespace.
    pub name: &'static str,
    /// All columns, primary key first.
    pub columns: &'static [Column],
    /// The number of leading columns that form the primary key (at least one).
    pub pk_len: usize,
}

impl TableDef {
    /// The primary-key part of a row.
    pub fn pk<'r>(&self, row: &'r [Val]) -> &'r [Val] {
        &row[..self.pk_len.min(row.len())]
    }

    /// Checks that `row` has this table's shape, so that a logic bug surfaces as an error, not bad SQL.
    pub fn check_row(&self, row: &[Val]) -> Result<(), StoreError> {
        if row.len() != self.columns.len() {
            return Err(StoreError::Data(format!(
                "{}: row has {} columns, the table has {}",
                self.name,
                row.len(),
                self.columns.len()
            )));
        }
        for (v, c) in row.iter().zip(self.columns) {
            let ok = matches!((v, c.ty), (Val::Int(_), ColType::Int) | (Val::Text(_), ColType::Text));
            if !ok {
                return Err(StoreError::Data(format!("{}.{}: value of the wrong type", self.name, c.name)));
            }
        }
        Ok(())
    }

    /// Checks that `pk` has as many values as the primary key has columns.
    pub fn check_pk(&self, pk: &[Val]) -> Result<(), StoreError> {
        if pk.len() == self.pk_len {
            Ok(())
        } else {
            Err(StoreError::Data(format!(
                "{}: primary key has {} columns, {} given",
                self.name,
                self.pk_len,
                pk.len()
            )))
        }
    }

    /// The history key bytes of a primary key: each value's text form, joined by the unit separator 0x1f
    /// (e.g. `1␟3␟42`), the way Krait's proxy names the rows it records, so generated and recorded
    /// histories name one row alike.
    pub fn key_bytes(pk: &[Val]) -> Vec<u8> {
        let mut s = String::new();
        for (i, v) in pk.iter().enumerate() {
            if i > 0 {
                s.push('\u{1f}');
            }
            match v {
                Val::Int(n) => {
                    let _ = write!(s, "{n}");
                }
                Val::Text(t) => s.push_str(t),
            }
        }
        s.into_bytes()
    }

    /// `CREATE TABLE` for this table.
    pub fn create_sql(&self) -> String {
        let mut s = format!("CREATE TABLE {} (", self.name);
        for c in self.columns {
            let ty = match c.ty {
                ColType::Int => "BIGINT",
                ColType::Text => "TEXT",
            };
            let _ = write!(s, "{} {ty} NOT NULL, ", c.name);
        }
        let pk: Vec<&str> = self.columns[..self.pk_len].iter().map(|c| c.name).collect();
        let _ = write!(s, "PRIMARY KEY ({}))", pk.join(", "));
        s
    }

    fn pk_predicate(&self) -> String {
        let conds: Vec<String> = self.columns[..self.pk_len]
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} = ${}", c.name, i + 1))
            .collect();
        conds.join(" AND ")
    }

    /// The point read: every column, by primary key (`$1..` are the key columns).
    pub fn select_sql(&self) -> String {
        let cols: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        format!("SELECT {} FROM {} WHERE {}", cols.join(", "), self.name, self.pk_predicate())
    }

    /// The insert of a whole row (`$1..` in column order).
    pub fn insert_sql(&self) -> String {
        let cols: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        let params: Vec<String> = (1..=self.columns.len()).map(|i| format!("${i}")).collect();
        format!("INSERT INTO {} ({}) VALUES ({})", self.name, cols.join(", "), params.join(", "))
    }

    /// The update of a whole row by primary key (`$1..` in column order; the key columns come first).
    pub fn update_sql(&self) -> String {
        let sets: Vec<String> = self.columns[self.pk_len..]
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} = ${}", c.name, self.pk_len + i + 1))
            .collect();
        format!("UPDATE {} SET {} WHERE {}", self.name, sets.join(", "), self.pk_predicate())
    }

    /// A multi-row `INSERT` with literal values, for loading the initial state in batches.
    pub fn insert_literal_sql(&self, rows: &[Row]) -> String {
        let cols: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        let mut s = format!("INSERT INTO {} ({}) VALUES ", self.name, cols.join(", "));
        for (i, row) in rows.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            s.push('(');
            for (j, v) in row.iter().enumerate() {
                if j > 0 {
                    s.push_str(", ");
                }
                v.sql_literal(&mut s);
            }
            s.push(')');
        }
        s
    }
}

/// The initial row of key `pk` in `kv`, a key-value table of integer keys `0..keys`, each starting at 0
/// (BlindW's and chengRW's shape); `None` for any other table or key.
pub(crate) fn int_kv_initial_row(kv: &TableDef, keys: u64, table: &TableDef, pk: &[Val]) -> Option<Row> {
    match pk {
        [Val::Int(k)] if table.name == kv.name && (0..keys as i64).contains(k) => {
            Some(vec![Val::Int(*k), Val::Int(0)])
        }
        _ => None,
    }
}

/// The keys of `kv`'s initial rows (see [`int_kv_initial_row`]); none for any other table.
pub(crate) fn int_kv_initial_keys(
    kv: &TableDef,
    keys: u64,
    table: &TableDef,
) -> Box<dyn Iterator<Item = Vec<Val>> + 'static> {
    if table.name == kv.name {
        Box::new((0..keys as i64).map(|k| vec![Val::Int(k)]))
    } else {
        Box::new(std::iter::empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static T: TableDef = TableDef { name: "t", columns: &[int("a"), int("b"), text("c")], pk_len: 2 };

    #[test]
    fn sql_uses_the_key_columns_first() {
        assert_eq!(T.select_sql(), "SELECT a, b, c FROM t WHERE a = $1 AND b = $2");
        assert_eq!(T.update_sql(), "UPDATE t SET c = $3 WHERE a = $1 AND b = $2");
        assert_eq!(T.insert_sql(), "INSERT INTO t (a, b, c) VALUES ($1, $2, $3)");
        assert_eq!(
            T.create_sql(),
            "CREATE TABLE t (a BIGINT NOT NULL, b BIGINT NOT NULL, c TEXT NOT NULL, PRIMARY KEY (a, b))"
        );
    }

    #[test]
    fn literal_text_is_quoted() {
        let sql = T.insert_literal_sql(&[vec![Val::Int(1), Val::Int(-2), Val::Text("it's".into())]]);
        assert_eq!(sql, "INSERT INTO t (a, b, c) VALUES (1, -2, 'it''s')");
    }

    #[test]
    fn rows_of_the_wrong_shape_are_errors() {
        assert!(T.check_row(&[Val::Int(1)]).is_err());
        assert!(T.check_row(&[Val::Int(1), Val::Text("x".into()), Val::Text("y".into())]).is_err());
        assert!(T.check_row(&[Val::Int(1), Val::Int(2), Val::Text("y".into())]).is_ok());
    }
}
