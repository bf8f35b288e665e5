//! What every planner checks first: the table a name resolves to in the catalog, and what a statement's
//! expressions contain (aggregates, functions with side effects, subqueries).

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, ObjectName, visit_expressions};

use super::{Opaque, OpaqueKind, opaque};
use crate::interpret::catalog::{Catalog, Lookup, TableInfo};

/// Aggregate functions of PostgreSQL: a query using one returns computed rows, not table rows.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "bit_and",
    "bit_or",
    "bit_xor",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "xmlagg",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "corr",
    "covar_pop",
    "covar_samp",
];

/// Functions with side effects on the database that the history cannot see.
const SIDE_EFFECTS: &[&str] = &[
    "nextval",
    "setval",
    "set_config",
    "pg_advisory_lock",
    "pg_advisory_xact_lock",
    "pg_try_advisory_lock",
    "pg_try_advisory_xact_lock",
    "pg_notify",
    "lo_create",
    "lo_import",
    "lo_unlink",
    "dblink_exec",
    "pg_terminate_backend",
    "pg_cancel_backend",
];

fn function_name(name: &ObjectName) -> String {
    name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()).unwrap_or_default()
}

/// What the expressions of a statement contain that matters here.
#[derive(Default)]
pub(super) struct ExprScan {
    pub(super) aggregate: bool,
    pub(super) side_effect: Option<String>,
    pub(super) function: bool,
    pub(super) subquery: bool,
}

pub(super) fn scan<V: sqlparser::ast::Visit>(node: &V) -> ExprScan {
    let mut s = ExprScan::default();
    let _ = visit_expressions(node, |e: &Expr| {
        match e {
            Expr::Function(f) => {
                let name = function_name(&f.name);
                s.function = true;
                if AGGREGATES.contains(&name.as_str()) && f.over.is_none() {
                    s.aggregate = true;
                }
                if SIDE_EFFECTS.contains(&name.as_str()) {
                    s.side_effect = Some(name);
                }
            }
            Expr::Subquery(_) | Expr::Exists { .. } => s.subquery = true,
            Expr::In { target: sqlparser::ast::InTarget::Subquery(_), .. } => s.subquery = true,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    s
}

pub(super) fn resolve<'a>(catalog: &'a Catalog, name: &ObjectName) -> Result<&'a TableInfo, Opaque> {
    match catalog.lookup(name) {
        Lookup::Keyed(info) => Ok(info),
        Lookup::NoPrimaryKey(info) => Err(opaque(
            OpaqueKind::NoPrimaryKey,
            format!("table {} has no primary key; its rows are unverifiable", info.namespace),
        )),
        Lookup::Unknown => {
            Err(opaque(OpaqueKind::UnknownTable, format!("table {name} is not in the catalog")))
        }
        Lookup::Ambiguous => Err(opaque(
            OpaqueKind::AmbiguousTable,
            format!("table {name} is in several schemas; qualify it with its schema to have it checked"),
        )),
    }
}

pub(super) fn check_side_effects<V: sqlparser::ast::Visit>(node: &V) -> Result<ExprScan, Opaque> {
    let found = scan(node);
    match &found.side_effect {
        Some(f) => Err(opaque(OpaqueKind::Function, format!("{f}() has side effects"))),
        None => Ok(found),
    }
}
