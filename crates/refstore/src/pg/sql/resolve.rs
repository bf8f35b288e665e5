//! Name resolution: the tables, columns and result items a statement names, checked against its table and
//! given their types and result names.

use super::{ColType, Column, Item, SUPPORTED, SqlError, Table, unsupported};

/// A result item as written, before the statement's table is known (a SELECT names it after the items).
#[derive(Debug)]
pub(super) struct RawItem {
    pub(super) expr: RawExpr,
    pub(super) cast: Option<String>,
    pub(super) alias: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum RawExpr {
    /// `*`, or `qualifier.*` (the qualifier is empty for a bare `*`).
    Star(Vec<String>),
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

/// The table a (possibly schema-qualified) name denotes.
pub(super) fn table_named(name: &[String]) -> Result<Table, SqlError> {
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

pub(super) fn column_of(table: Table, qual: &[String], name: &str) -> Result<Column, SqlError> {
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
pub(super) fn resolve_items(raw: Vec<RawItem>, table: Table, update: bool) -> Result<Vec<Item>, SqlError> {
    let natural = |col: Column| match (col, table) {
        (Column::K, Table::Fence) => ColType::Int4,
        _ => ColType::Int8,
    };
    let mut items = Vec::with_capacity(raw.len());
    for RawItem { expr, cast, alias } in raw {
        let mut inner_text = false;
        let (col, name) = match expr {
            RawExpr::Star(qual) => {
                // A qualified `t.*` must name the statement's table, as a qualified column must.
                if !qual.is_empty() {
                    column_of(table, &qual, table.key_column())?;
                }
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
