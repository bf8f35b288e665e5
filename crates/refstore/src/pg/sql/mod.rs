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
//!     | CASE WHEN current_setting('transaction_isolation') = 'read committed'
//!       THEN COALESCE((SELECT a.xmin FROM t AS a WHERE a.key = t.key AND a.xmax = t.xmin), 'read committed')
//!       ELSE (SELECT a.xmin FROM t AS a WHERE a.key = t.key) END
//!                                                             (the proxy's read-committed guard: the same)
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
//! transaction (`SELECT xmin::text, id::text, epoch::text FROM krait_fence WHERE id = n FOR UPDATE`, `UPDATE krait_fence
//! SET epoch = epoch + 1 ... RETURNING xmin::text, id::text`, `INSERT ... ON CONFLICT (id) DO NOTHING`).
//!
//! `xmin` is the number of the transaction that wrote the row's version (PostgreSQL's xmin; here a 64-bit
//! number, sent as int8 unless cast to text). `FOR UPDATE` takes no lock (the store has none): the read is a
//! plain read, and the model's commit test decides, as for any read-modify-write. It is accepted only on
//! `krait_fence`, where the proxy's fence needs it; on `kv`, where a client may rely on the lock for mutual
//! exclusion, it is refused.

mod lexer;
mod parser;
mod resolve;

use std::fmt;

pub use crate::session::Table;
pub use parser::{parse, parse_one};

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
        // The same, behind the proxy's read-committed guard (the store's model, not a session setting,
        // decides its isolation, so the guard takes the plain subquery).
        let Statement::Update { returning, .. } = one(
            "UPDATE kv SET v = v + 1 WHERE k = 3\nRETURNING kv.xmin::TEXT AS krait_v0, kv.k::TEXT AS krait_v1, \
             CASE WHEN current_setting('transaction_isolation') = 'read committed' THEN COALESCE((SELECT \
             krait_old.xmin::TEXT FROM kv AS krait_old WHERE krait_old.k = kv.k AND krait_old.xmax = kv.xmin), \
             'read committed') ELSE (SELECT krait_old.xmin::TEXT FROM kv AS krait_old WHERE krait_old.k = kv.k) \
             END AS krait_v2",
        ) else {
            panic!("an update behind the guard")
        };
        assert_eq!(returning[2], item(Column::Replaced, ColType::Text, "krait_v2"));
        let mismatched = "UPDATE kv SET v = 1 WHERE k = 3 RETURNING CASE WHEN current_setting('transaction_isolation') \
             = 'read committed' THEN COALESCE((SELECT a.xmin FROM kv AS a WHERE a.k = kv.k AND a.xmax = kv.xmin), \
             'read committed') ELSE (SELECT a.xmin::TEXT FROM kv AS a WHERE a.k = kv.k) END";
        assert!(parse(mismatched).is_err(), "the guard's two subqueries must ask for the same thing");
        // With values recorded, a write without RETURNING also returns its row, first (`kv.*`).
        let Statement::Insert { returning, .. } = one(
            "INSERT INTO kv (k, v) VALUES ($1, $2)\nRETURNING kv.*, kv.xmin::TEXT AS krait_v0, kv.k::TEXT AS krait_v1",
        ) else {
            panic!("an insert")
        };
        assert_eq!(
            returning[..2],
            [item(Column::K, ColType::Int8, "k"), item(Column::V, ColType::Int8, "v")]
        );
        assert_eq!(returning[2], item(Column::Xmin, ColType::Text, "krait_v0"));
        assert!(
            parse_one("UPDATE kv SET v = 1 WHERE k = 1 RETURNING other.*, kv.k").is_err(),
            "another table"
        );
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
            one("SELECT xmin::text, id::text, epoch::text FROM krait_fence WHERE id = 7 FOR UPDATE"),
            Statement::Select {
                table: Table::Fence,
                cols: vec![
                    item(Column::Xmin, ColType::Text, "xmin"),
                    item(Column::K, ColType::Text, "id"),
                    item(Column::V, ColType::Text, "epoch")
                ],
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
