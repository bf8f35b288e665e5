//! Stage 2: a statement as the replay sends it. Its parameters are written in as literals of unknown
//! type (`'42'`), which PostgreSQL casts to whatever the context needs, just as it typed the original
//! parameters; and its tables are moved into the scratch schema, so that the replay never touches the
//! tables it was recorded on.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use history::values::Value;
use sqlparser::ast::{
    Expr, Ident, ObjectName, ObjectNamePart, Value as SqlValue, visit_expressions_mut, visit_relations_mut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::plan::{ReplayPlan, StepKind};

/// Where the replay's tables are: the scratch schema and, per table the history names (`table` for
/// `public`, else `schema.table`), its name there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableMap {
    /// The scratch schema, or `None` to run on the recorded tables themselves.
    pub schema: Option<String>,
    /// The recorded table (as the history names it) to its name in the scratch schema.
    pub tables: BTreeMap<String, String>,
}

impl TableMap {
    /// A map into `schema` for the tables `namespaces` (as the history names them): each keeps its name,
    /// unless two share one, when the later ones are named `schema__table`.
    pub fn scratch(schema: &str, namespaces: impl IntoIterator<Item = String>) -> TableMap {
        let mut tables = BTreeMap::new();
        let mut taken = std::collections::BTreeSet::new();
        for ns in namespaces {
            if tables.contains_key(&ns) {
                continue;
            }
            let plain = ns.rsplit('.').next().unwrap_or(&ns).to_owned();
            let name = if taken.insert(plain.clone()) { plain } else { ns.replace('.', "__") };
            taken.insert(name.clone());
            tables.insert(ns, name);
        }
        TableMap { schema: Some(schema.to_owned()), tables }
    }

    /// The scratch name of a relation as a statement wrote it, if it is one of the recorded tables.
    fn scratch_name(&self, relation: &ObjectName) -> Option<&str> {
        let parts: Vec<String> = relation
            .0
            .iter()
            .map(|p| match p {
                ObjectNamePart::Identifier(id) => Some(folded(id)),
                ObjectNamePart::Function(_) => None,
            })
            .collect::<Option<_>>()?;
        match parts.as_slice() {
            [schema, table] if schema == "public" => self.tables.get(table.as_str()),
            [schema, table] => self.tables.get(&format!("{schema}.{table}")),
            // An unqualified name: the table of that name in `public`, else the one recorded table of that
            // name in another schema (the session's search_path found it there).
            [table] => self.tables.get(table.as_str()).or_else(|| {
                let mut matching = self.tables.iter().filter(|(ns, _)| ns.rsplit('.').next() == Some(table));
                match (matching.next(), matching.next()) {
                    (Some((_, name)), None) => Some(name),
                    _ => None,
                }
            }),
            _ => None,
        }
        .map(String::as_str)
    }
}

/// An identifier as PostgreSQL resolves it: unquoted ones fold to lower case.
fn folded(id: &Ident) -> String {
    if id.quote_style.is_some() { id.value.clone() } else { id.value.to_lowercase() }
}

/// Why a statement cannot be sent as recorded.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The parser refused the text, and the replay needs to change it.
    #[error("cannot parse the statement to rewrite it: {0}")]
    Parse(String),
    /// A placeholder has no recorded value.
    #[error("parameter ${0} has no recorded value")]
    MissingParam(usize),
    /// One step's statement could not be rendered.
    #[error("step {step} ({text}): {source}")]
    Step {
        /// The step's number, from 1.
        step: usize,
        /// The statement as recorded.
        text: String,
        /// Why.
        source: Box<SqlError>,
    },
}

/// The statement `text` with `params` written in and its tables mapped by `map`, plus notes on what is not
/// faithful (a truncated or redacted value). The text goes out unchanged when there is nothing to change.
pub fn render(text: &str, params: &[Value], map: &TableMap) -> Result<(String, Vec<String>), SqlError> {
    if params.is_empty() && map.schema.is_none() {
        return Ok((text.to_owned(), Vec::new()));
    }
    let mut statements =
        Parser::parse_sql(&PostgreSqlDialect {}, text).map_err(|e| SqlError::Parse(e.to_string()))?;
    let mut notes = Vec::new();
    let mut missing = None;
    let _ = visit_expressions_mut(&mut statements, |expr| {
        if let Expr::Value(v) = expr
            && let SqlValue::Placeholder(p) = &v.value
            && let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
        {
            match params.get(n.wrapping_sub(1)) {
                Some(value) => v.value = literal(n, value, &mut notes),
                None => missing = Some(n),
            }
        }
        ControlFlow::<()>::Continue(())
    });
    if let Some(n) = missing {
        return Err(SqlError::MissingParam(n));
    }
    if let Some(schema) = &map.schema {
        let _ = visit_relations_mut(&mut statements, |relation| {
            if let Some(name) = map.scratch_name(relation) {
                *relation = ObjectName(vec![
                    ObjectNamePart::Identifier(Ident::with_quote('"', schema.as_str())),
                    ObjectNamePart::Identifier(Ident::with_quote('"', name)),
                ]);
            }
            ControlFlow::<()>::Continue(())
        });
    }
    let sql: Vec<String> = statements.iter().map(ToString::to_string).collect();
    Ok((sql.join("; "), notes))
}

/// Every step of `plan` as the SQL it sends, in the plan's order, with the notes on what is not faithful.
pub fn render_steps(plan: &ReplayPlan, map: &TableMap) -> Result<(Vec<String>, Vec<String>), SqlError> {
    let mut sql = Vec::with_capacity(plan.steps.len());
    let mut notes = Vec::new();
    for (n, step) in plan.steps.iter().enumerate() {
        if let Some(control) = plan.control_sql(step) {
            sql.push(control);
            continue;
        }
        let StepKind::Statement { statement } = step.kind else { unreachable!("control steps have SQL") };
        let s = &plan.txns[step.txn].statements[statement];
        let text = s.sql.as_deref().unwrap_or_default();
        let (rendered, said) = render(text, &s.params, map).map_err(|e| SqlError::Step {
            step: n + 1,
            text: text.to_owned(),
            source: Box::new(e),
        })?;
        notes.extend(said.into_iter().map(|note| format!("step {}: {note}", n + 1)));
        sql.push(rendered);
    }
    Ok((sql, notes))
}

/// A recorded value as a SQL literal of unknown type.
fn literal(n: usize, value: &Value, notes: &mut Vec<String>) -> SqlValue {
    match value {
        Value::Null => SqlValue::Null,
        Value::Text(text) => SqlValue::SingleQuotedString(text.clone()),
        Value::Truncated { prefix, len } => {
            notes.push(format!("${n} was recorded cut short ({len} bytes); its first bytes are sent"));
            SqlValue::SingleQuotedString(prefix.clone())
        }
        Value::Redacted(_) => {
            notes.push(format!("${n} is a secret (recorded as a hash); NULL is sent in its place"));
            SqlValue::Null
        }
    }
}

/// `text` as a SQL string literal.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `name` as a SQL identifier, quoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::Text(s.into())
    }

    #[test]
    fn parameters_become_literals_and_tables_move_to_the_scratch_schema() {
        let map = TableMap::scratch("krait_replay_r1", ["shop.accounts".to_owned(), "items".to_owned()]);
        let (sql, notes) = render(
            "UPDATE shop.accounts SET balance = $1 WHERE id = $2 AND note = $3",
            &[text("99"), text("3"), text("it's")],
            &map,
        )
        .unwrap();
        assert_eq!(
            sql,
            "UPDATE \"krait_replay_r1\".\"accounts\" SET balance = '99' WHERE id = '3' AND note = 'it''s'"
        );
        assert!(notes.is_empty());
        // Unqualified names: `public`'s table, or the only recorded table of that name.
        let (sql, _) = render("SELECT * FROM Items JOIN accounts a ON a.id = 1", &[], &map).unwrap();
        assert_eq!(
            sql,
            "SELECT * FROM \"krait_replay_r1\".\"items\" JOIN \"krait_replay_r1\".\"accounts\" a ON a.id = 1"
        );
        // Other tables stay where they are.
        let (sql, _) = render("SELECT * FROM other.accounts", &[], &map).unwrap();
        assert_eq!(sql, "SELECT * FROM other.accounts");
    }

    #[test]
    fn unfaithful_values_are_said_and_missing_ones_refused() {
        let map = TableMap::default();
        let (sql, notes) = render(
            "SELECT $1, $2, $3",
            &[
                Value::Null,
                Value::Truncated { prefix: "ab".into(), len: 900 },
                Value::Redacted("sha256:0".into()),
            ],
            &map,
        )
        .unwrap();
        assert_eq!(sql, "SELECT NULL, 'ab', NULL");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(matches!(render("SELECT $2", &[text("1")], &map), Err(SqlError::MissingParam(2))));
        // Nothing to change: the text goes out as recorded, even where the parser would refuse it.
        assert_eq!(render("VACUUM (weird", &[], &map).unwrap().0, "VACUUM (weird");
    }

    #[test]
    fn a_shared_table_name_gets_a_qualified_scratch_name() {
        let map = TableMap::scratch("s", ["a.t".to_owned(), "b.t".to_owned()]);
        assert_eq!(map.tables["a.t"], "t");
        assert_eq!(map.tables["b.t"], "b__t");
        // An unqualified `t` is ambiguous between them and is left alone.
        assert_eq!(render("SELECT * FROM t", &[], &map).unwrap().0, "SELECT * FROM t");
    }
}
