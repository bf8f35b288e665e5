//! Planning a SELECT: the version columns of each table it reads, and whether its WHERE clause is a point
//! lookup on the primary key (so that no row back means the key was read as absent).

use sqlparser::ast::{BinaryOperator, Expr, GroupByExpr, ObjectName, Query, SetExpr, TableFactor, Value};

use super::rewrite::extra_items;
use super::scan::{resolve, scan};
use super::{Opaque, OpaqueKind, PkValue, PointLookup, RowKind, RowPlan, StmtPlan, TableTag, opaque};
use crate::interpret::catalog::{Catalog, TableInfo};

pub(super) fn plan_query_stmt(q: &mut Query, catalog: &Catalog) -> StmtPlan {
    if q.with.is_some() {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "WITH (common table expressions)"));
    }
    let select = match q.body.as_mut() {
        SetExpr::Select(s) => s,
        SetExpr::SetOperation { .. } => {
            return StmtPlan::Opaque(opaque(OpaqueKind::Aggregate, "UNION/INTERSECT/EXCEPT"));
        }
        SetExpr::Values(_) => return StmtPlan::Control,
        _ => return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "query body")),
    };
    let found = scan(select.as_ref());
    if let Some(f) = &found.side_effect {
        return StmtPlan::Opaque(opaque(OpaqueKind::Function, format!("{f}() has side effects")));
    }
    if select.from.is_empty() {
        return if found.function || found.subquery {
            StmtPlan::Opaque(opaque(OpaqueKind::Function, "SELECT of functions or subqueries without FROM"))
        } else {
            StmtPlan::Control
        };
    }
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if found.aggregate || grouped || select.having.is_some() || select.distinct.is_some() {
        return StmtPlan::Opaque(opaque(OpaqueKind::Aggregate, "aggregate, GROUP BY or DISTINCT"));
    }
    if select.into.is_some() {
        let creates = opaque(OpaqueKind::Ddl, "SELECT INTO creates a table");
        return StmtPlan::Opaque(Opaque { changes_catalog: true, ..creates });
    }
    // Every relation must be a base table with a primary key.
    let mut relations: Vec<(&ObjectName, Option<String>)> = Vec::new();
    for twj in &select.from {
        for factor in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            match factor {
                TableFactor::Table { name, alias, args: None, .. } => {
                    relations.push((name, alias.as_ref().map(|a| a.name.to_string())));
                }
                _ => {
                    return StmtPlan::Opaque(opaque(
                        OpaqueKind::Unsupported,
                        "FROM with a subquery, function or nested join",
                    ));
                }
            }
        }
    }
    let mut tags = Vec::new();
    let mut items = Vec::new();
    let mut counter = 0;
    let mut infos = Vec::new();
    for (name, alias) in &relations {
        let info = match resolve(catalog, name) {
            Ok(i) => i,
            Err(o) => return StmtPlan::Opaque(o),
        };
        let reference = alias.clone().unwrap_or_else(|| name.to_string());
        items.extend(extra_items(&reference, info, None, false, &mut counter));
        tags.push(TableTag {
            namespace: info.namespace.clone(),
            pk_arity: info.pk.as_ref().map_or(0, Vec::len),
            replaced: false,
            set_reads_row: false,
            deleter: false,
        });
        infos.push(info);
    }
    let expected: usize = tags.iter().map(TableTag::width).sum();
    if items.len() != expected {
        return StmtPlan::Opaque(opaque(OpaqueKind::Unsupported, "could not build the version columns"));
    }
    let point = match (infos.as_slice(), &select.selection) {
        ([info], Some(w)) if relations.len() == 1 => point_lookup(w, info),
        _ => None,
    };
    let mut notes = Vec::new();
    if point.is_none() {
        notes.push(opaque(
            OpaqueKind::Predicate,
            "predicate read: rows are recorded, phantoms are not checked",
        ));
    }
    select.projection.extend(items);
    StmtPlan::Rows(Box::new(RowPlan {
        kind: RowKind::Read,
        tables: tags,
        hidden_result: false,
        hidden_row: false,
        point,
        notes,
        splice: None,
    }))
}

/// `WHERE k1 = v1 AND k2 = v2 ...` over exactly the key columns.
fn point_lookup(selection: &Expr, info: &TableInfo) -> Option<PointLookup> {
    let pk = info.pk.as_ref()?;
    let mut conj = Vec::new();
    flatten_and(selection, &mut conj);
    if conj.len() != pk.len() {
        return None;
    }
    let mut values: Vec<Option<PkValue>> = vec![None; pk.len()];
    for e in conj {
        let Expr::BinaryOp { left, op: BinaryOperator::Eq, right } = e else { return None };
        let (col, val) = match (column_name(left), column_name(right)) {
            (Some(c), None) => (c, right.as_ref()),
            (None, Some(c)) => (c, left.as_ref()),
            _ => return None,
        };
        let at = pk.iter().position(|p| *p == col)?;
        let v = match unnest(val) {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => PkValue::Literal(n.to_string()),
                Value::SingleQuotedString(s) => PkValue::Literal(s.clone()),
                Value::Placeholder(p) => {
                    PkValue::Param(p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)?)
                }
                _ => return None,
            },
            _ => return None,
        };
        if values[at].replace(v).is_some() {
            return None;
        }
    }
    let values: Option<Vec<PkValue>> = values.into_iter().collect();
    Some(PointLookup { namespace: info.namespace.clone(), values: values? })
}

fn unnest(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) => unnest(inner),
        other => other,
    }
}

fn flatten_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            flatten_and(left, out);
            flatten_and(right, out);
        }
        Expr::Nested(inner) => flatten_and(inner, out),
        other => out.push(other),
    }
}

fn column_name(e: &Expr) -> Option<String> {
    let id = match unnest(e) {
        Expr::Identifier(id) => id,
        Expr::CompoundIdentifier(ids) => ids.last()?,
        _ => return None,
    };
    Some(if id.quote_style.is_some() { id.value.clone() } else { id.value.to_lowercase() })
}
