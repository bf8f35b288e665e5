//! Stage 3: the rows the replay needs, at the values they had before its first step.
//!
//! By default the replay runs in a scratch schema: one table per recorded table, made `LIKE` the original
//! (columns, types, defaults, keys and indexes), holding only the rows the steps touch. A row's value
//! before the first step is the first read, in the interleaving, of a version no replayed transaction
//! wrote: the proxy recorded the row it returned. A row that read found missing is left out. A row only
//! written, or read without recorded values, is copied from the original table as it is now, and the
//! notes say so. `--in-place` puts the same values into the recorded tables themselves instead.

use std::collections::BTreeMap;

use history::values::Value;
use verifier::report::{ColumnValue, RowKey};

use crate::plan::{ReplayPlan, StepKind};
use crate::sql::{TableMap, quote_ident, quote_literal};

/// The scratch schema a replay of report `report_id` uses.
pub fn scratch_schema(report_id: &str) -> String {
    let id: String = report_id.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    format!("krait_replay_{}", id.to_ascii_lowercase())
}

/// A recorded table's name as SQL: `"schema"."table"`, `public` when the history names no schema.
pub fn original_table(namespace: &str) -> String {
    match namespace.split_once('.') {
        Some((schema, table)) => format!("{}.{}", quote_ident(schema), quote_ident(table)),
        None => format!("{}.{}", quote_ident("public"), quote_ident(namespace)),
    }
}

/// Where the replay runs and the primary-key columns of its tables, as the target's catalog has them.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    /// Where statements go.
    pub map: TableMap,
    /// Per recorded table (as the history names it), its primary-key columns, where looked up.
    pub primary_keys: BTreeMap<String, Vec<String>>,
}

/// What a row looked like before the first step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Before {
    /// A read returned it, with these values.
    Row(Vec<ColumnValue>),
    /// A read found it missing.
    Absent,
    /// No read shows it.
    Unknown,
}

/// The SQL that prepares the replay, run straight against the database before recording starts, and what
/// it could not make faithful.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// The scratch schema it makes, if any.
    pub schema: Option<String>,
    /// The statements, in order.
    pub statements: Vec<String>,
    /// What a person should know.
    pub notes: Vec<String>,
}

impl Setup {
    /// The set-up of `plan` into `scratch`.
    pub fn new(plan: &ReplayPlan, scratch: &Scratch) -> Setup {
        let mut setup = Setup { schema: scratch.map.schema.clone(), ..Setup::default() };
        let rows = rows_before(plan);
        let in_place = scratch.map.schema.is_none();
        if let Some(schema) = &scratch.map.schema {
            let schema = quote_ident(schema);
            setup.statements.push(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
            setup.statements.push(format!("CREATE SCHEMA {schema}"));
            for (namespace, name) in &scratch.map.tables {
                setup.statements.push(format!(
                    "CREATE TABLE {schema}.{} (LIKE {} INCLUDING ALL)",
                    quote_ident(name),
                    original_table(namespace)
                ));
            }
        }
        for (key, before) in rows {
            let table = match (&scratch.map.schema, scratch.map.tables.get(&key.table)) {
                (Some(schema), Some(name)) => format!("{}.{}", quote_ident(schema), quote_ident(name)),
                _ => original_table(&key.table),
            };
            let pk = scratch.primary_keys.get(&key.table).filter(|cols| cols.len() == key.pk.len());
            let shown = format!("{}:{}", key.table, key.pk.join(","));
            let condition = pk.map(|cols| {
                cols.iter()
                    .zip(&key.pk)
                    .map(|(c, v)| format!("{} = {}", quote_ident(c), quote_literal(v)))
                    .collect::<Vec<_>>()
                    .join(" AND ")
            });
            match before {
                Before::Row(values) => {
                    let mut columns: Vec<(String, String)> = Vec::new();
                    for cv in &values {
                        columns.push((cv.column.clone(), value_sql(&cv.value)));
                        match &cv.value {
                            Value::Truncated { len, .. } => setup.notes.push(format!(
                                "{shown}: column {} was recorded cut short ({len} bytes); its first bytes are set",
                                cv.column
                            )),
                            Value::Redacted(_) => setup.notes.push(format!(
                                "{shown}: column {} is a secret (recorded as a hash); it is set to NULL",
                                cv.column
                            )),
                            _ => {}
                        }
                    }
                    // A read that did not return the key's columns still names the row: add them.
                    if let Some(cols) = pk {
                        for (c, v) in cols.iter().zip(&key.pk) {
                            if !columns.iter().any(|(name, _)| name == c) {
                                columns.push((c.clone(), quote_literal(v)));
                            }
                        }
                    }
                    let names: Vec<String> = columns.iter().map(|(c, _)| quote_ident(c)).collect();
                    let values: Vec<&str> = columns.iter().map(|(_, v)| v.as_str()).collect();
                    let insert =
                        format!("INSERT INTO {table} ({}) VALUES ({})", names.join(", "), values.join(", "));
                    match (in_place, pk) {
                        (false, _) => setup.statements.push(insert),
                        (true, Some(cols)) => {
                            let keys: Vec<String> = cols.iter().map(|c| quote_ident(c)).collect();
                            let updates: Vec<String> = names.iter().map(|c| format!("{c} = EXCLUDED.{c}")).collect();
                            setup.statements.push(format!(
                                "{insert} ON CONFLICT ({}) DO UPDATE SET {}",
                                keys.join(", "),
                                updates.join(", ")
                            ));
                        }
                        (true, None) => setup.notes.push(format!(
                            "{shown}: its primary key's columns are unknown, so its recorded value is not set"
                        )),
                    }
                }
                Before::Absent => match (in_place, &condition) {
                    (false, _) => {}
                    (true, Some(condition)) => setup.statements.push(format!("DELETE FROM {table} WHERE {condition}")),
                    (true, None) => setup.notes.push(format!(
                        "{shown}: a read found it missing, but its primary key's columns are unknown, so it is not deleted"
                    )),
                },
                Before::Unknown => match (in_place, &condition) {
                    (true, _) => setup.notes.push(format!(
                        "{shown}: its value before the first step was not recorded; it is left as it is now"
                    )),
                    (false, Some(condition)) => {
                        setup.notes.push(format!(
                            "{shown}: its value before the first step was not recorded; it is copied from {} as it is now",
                            original_table(&key.table)
                        ));
                        setup.statements.push(format!(
                            "INSERT INTO {table} SELECT * FROM {} WHERE {condition}",
                            original_table(&key.table)
                        ));
                    }
                    (false, None) => setup.notes.push(format!(
                        "{shown}: its value before the first step was not recorded and its primary key's columns are \
                         unknown; the replay starts without it"
                    )),
                },
            }
        }
        setup
    }
}

/// A recorded value as a SQL literal (a truncated one as its prefix, a secret as NULL).
fn value_sql(value: &Value) -> String {
    match value {
        Value::Null | Value::Redacted(_) => "NULL".to_owned(),
        Value::Text(t) => quote_literal(t),
        Value::Truncated { prefix, .. } => quote_literal(prefix),
    }
}

/// Each row the steps touch, in the order first touched, with what it held before the first step: for a
/// target that is loaded some other way than by SQL (the embedded reference store).
pub fn rows_before(plan: &ReplayPlan) -> Vec<(RowKey, Before)> {
    let written: std::collections::BTreeSet<&str> = plan
        .txns
        .iter()
        .flat_map(|t| t.ops.iter().filter(|o| o.write).filter_map(|o| o.version.as_deref()))
        .collect();
    let mut rows: Vec<(RowKey, Before)> = Vec::new();
    for step in &plan.steps {
        let StepKind::Statement { statement } = step.kind else { continue };
        let txn = &plan.txns[step.txn];
        let s = &txn.statements[statement];
        for op in txn.ops.iter().skip(s.first_op).take(s.ops) {
            let Some(key) = &op.key else { continue };
            let at = match rows.iter().position(|(k, _)| k == key) {
                Some(at) => at,
                None => {
                    rows.push((key.clone(), Before::Unknown));
                    rows.len() - 1
                }
            };
            let version = op.version.as_deref().unwrap_or_default();
            if op.write || rows[at].1 != Before::Unknown || written.contains(version) {
                continue;
            }
            let named = op.values.iter().all(|v| !v.column.starts_with('$'));
            rows[at].1 = match version {
                "absent" => Before::Absent,
                _ if !op.values.is_empty() && named => Before::Row(op.values.clone()),
                _ => Before::Unknown,
            };
        }
    }
    rows
}
