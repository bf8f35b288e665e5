//! Planning INSERT, UPDATE and DELETE on one table: the version columns appended to (or as) the RETURNING
//! list, hidden from a client that asked for no rows.

use std::ops::ControlFlow;

use sqlparser::ast::{
    AssignmentTarget, Expr, FromTable, ObjectName, OnInsert, SelectItem, SetExpr, TableFactor, TableObject,
    TableWithJoins, visit_expressions,
};

use super::rewrite::extra_items;
use super::scan::{check_side_effects, resolve};
use super::{OpaqueKind, PlanOptions, RowKind, RowPlan, StmtPlan, TableTag, opaque};
use crate::interpret::catalog::Catalog;

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

/// Appends the version columns `items` to the RETURNING list, making one if the client asked for no rows,
/// preceded then by `reference.*`, the written row, when `written_row` asks for it. Returns whether the
/// result is hidden from the client and whether it starts with the written row (`None`: that item could not
/// be built).
fn add_returning(
    returning: &mut Option<Vec<SelectItem>>,
    reference: &str,
    items: Vec<SelectItem>,
    written_row: bool,
) -> Option<(bool, bool)> {
    let hidden_result = returning.is_none();
    let hidden_row = hidden_result && written_row;
    let list = returning.get_or_insert_with(Vec::new);
    if hidden_row {
        list.push(super::rewrite::written_row_item(reference)?);
    }
    list.extend(items);
    Some((hidden_result, hidden_row))
}

/// The plan of a write whose version columns could not be built: not checked.
fn no_version_columns() -> StmtPlan {
    StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "could not build the version columns"))
}

pub(super) fn plan_insert(
    ins: &mut sqlparser::ast::Insert,
    catalog: &Catalog,
    options: PlanOptions,
) -> StmtPlan {
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
        set_reads_row: false,
        deleter: false,
    };
    if items.len() != tag.width() {
        return no_version_columns();
    }
    let Some((hidden_result, hidden_row)) =
        add_returning(&mut ins.returning, &reference, items, options.write_rows)
    else {
        return no_version_columns();
    };
    StmtPlan::Rows(Box::new(RowPlan {
        kind: RowKind::Insert,
        tables: vec![tag],
        hidden_result,
        hidden_row,
        point: None,
        notes,
        splice: None,
    }))
}

pub(super) fn plan_update(
    upd: &mut sqlparser::ast::Update,
    catalog: &Catalog,
    options: PlanOptions,
) -> StmtPlan {
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
    let mut set_reads_row = false;
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
                set_reads_row = true;
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
    // Every UPDATE records the version it replaced, also one whose SET reads nothing of the row (`SET v = $1`):
    // its WHERE reads the row, and PostgreSQL writes the new version right after the latest one (at
    // REPEATABLE READ and SERIALIZABLE the snapshot's, or the UPDATE fails), so the read gives the verifier
    // the key's version order. Recorded as a blind write instead, concurrent updates of a key were ordered only
    // by constraints, which with many sessions kept most of the history live (docs/benchmarks.md, stop 51).
    let items = extra_items(&reference, info, Some(table_text.as_str()), false, &mut counter);
    let tag = TableTag {
        namespace: info.namespace.clone(),
        pk_arity: pk.len(),
        replaced: true,
        set_reads_row,
        deleter: false,
    };
    if items.len() != tag.width() {
        return no_version_columns();
    }
    let Some((hidden_result, hidden_row)) =
        add_returning(&mut upd.returning, &reference, items, options.write_rows)
    else {
        return no_version_columns();
    };
    StmtPlan::Rows(Box::new(RowPlan {
        kind: RowKind::Update,
        tables: vec![tag],
        hidden_result,
        hidden_row,
        point: None,
        notes,
        splice: None,
    }))
}

pub(super) fn plan_delete(del: &mut sqlparser::ast::Delete, catalog: &Catalog) -> StmtPlan {
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
        set_reads_row: false,
        deleter: true,
    };
    if items.len() != tag.width() {
        return no_version_columns();
    }
    // A DELETE writes no row: its RETURNING shows the deleted one.
    let Some((hidden_result, hidden_row)) = add_returning(&mut del.returning, &reference, items, false)
    else {
        return no_version_columns();
    };
    StmtPlan::Rows(Box::new(RowPlan {
        kind: RowKind::Delete,
        tables: vec![tag],
        hidden_result,
        hidden_row,
        point: None,
        notes,
        splice: None,
    }))
}
