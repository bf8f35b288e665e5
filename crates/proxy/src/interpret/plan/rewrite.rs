//! The version columns and where they go: the extra target-list items for one tagged table, and the client's
//! text with them spliced in, so that everything the client wrote keeps its position.

use sqlparser::ast::{SelectItem, SetExpr, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use super::RowPlan;
use crate::interpret::catalog::TableInfo;

fn parse_items(sql: &str) -> Vec<SelectItem> {
    // A failure shows as a short list, which every caller checks against the width it expects.
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_projection())
        .unwrap_or_default()
}

/// The extra target-list items for one table, referenced as `reference` (its alias or name).
pub(super) fn extra_items(
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
        // committed version after waiting for the row lock (EvalPlanQual), which the snapshot may not show
        // (DESIGN.md §3, "what a write replaced"). There the snapshot's version is the one replaced exactly
        // when its `xmax` equals the new version's `xmin`, the (sub)transaction that wrote both: a version is
        // replaced once, and after EvalPlanQual its `xmax` is the concurrent updater's. (A multixact `xmax`,
        // left by others' key-share locks, equals a transaction id only by a coincidence of counters, and
        // even then the version recorded is one the statement saw committed.) Otherwise
        // `versions::READ_COMMITTED_MARK` says the replaced version is not known.
        let snapshot_version = |extra: &str| {
            format!(
                "(SELECT krait_old.xmin::text FROM {table} AS krait_old WHERE {}{extra})",
                cond.join(" AND ")
            )
        };
        cols.push(format!(
            "CASE WHEN current_setting('transaction_isolation') = '{mark}' THEN COALESCE({}, '{mark}') \
             ELSE {} END",
            snapshot_version(&format!(" AND krait_old.xmax = {reference}.xmin")),
            snapshot_version(""),
            mark = crate::interpret::versions::READ_COMMITTED_MARK,
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

/// `reference.*`: every column of the row a write produced, first in a RETURNING list the client did not ask
/// for (see `PlanOptions::write_rows`).
pub(super) fn written_row_item(reference: &str) -> Option<SelectItem> {
    let mut items = parse_items(&format!("{reference}.*"));
    (items.len() == 1).then(|| items.remove(0))
}

/// Quotes an identifier when PostgreSQL would not read it back unchanged unquoted.
fn quote_ident(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain { name.to_owned() } else { format!("\"{}\"", name.replace('"', "\"\"")) }
}

/// Where the target list of a plain SELECT ends in its text, if the parser knows.
pub(super) fn select_list_end(stmt: &Statement) -> Option<sqlparser::tokenizer::Location> {
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
pub(super) fn splice(
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
            // The written row, when asked for, comes just before the version columns.
            let row = match rows.hidden_row {
                true => format!("{}, ", r.get(r.len().checked_sub(n + 1)?)?),
                false => String::new(),
            };
            Some(format!("{body}{joint}{row}{}", tail(r)?))
        }
        _ => None,
    }
}
