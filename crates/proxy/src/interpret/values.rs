//! What the proxy records of values (issue 18, item 1): the parameters each statement ran with, the row
//! each mapped read returned to the client, and the row each INSERT or UPDATE wrote (which a write without
//! RETURNING returns to the proxy only: `PlanOptions::write_rows`), beside the ops in the log
//! ([`history::values`]), so a report can show values and a replay can set rows up. A write's row belongs
//! to its write op alone, not to the version it replaced nor to a DELETE's tombstone.
//!
//! Bounded and secret-free by construction:
//! - a row's values (or a statement's parameters) share one byte budget, `[record] row_bytes`; a value that
//!   does not fit keeps a prefix and its length ([`Value::Truncated`]);
//! - a column named in `[record] redact` is recorded as a hash; so is every parameter of a statement whose
//!   text names such a column (which parameter feeds which column is not worked out, so all are hidden);
//! - everything of a statement about passwords or the role catalog (`ALTER ROLE … PASSWORD`, `pg_authid`,
//!   `pg_shadow`) is a hash, whatever its columns are called;
//! - the row of a prepared statement whose row description the session did not see has no column names;
//!   with a redact list, its values are all hashed, since none can be told apart from a secret.
//!
//! Values in binary format (most drivers ask for binary results) are decoded for the common types by the
//! OIDs the RowDescription and ParameterDescription give; others are shown as `\x` and hex.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use history::log::LoggedOp;
use history::values::Value;
use sha2::{Digest, Sha256};

use super::ops::TxnOps;
use super::plan::StmtPlan;
use super::strip::{parameter_types, row_description_columns};

/// How many prepared statements' column names a session keeps (a row of one it forgot has unnamed columns).
const DESCRIBED_STATEMENTS: usize = 64;

/// What a statement's text says about the secrecy of its values ([`ValueRecording::secrecy`]). A session
/// judges it once, when the statement is prepared, not at every Bind: lower-casing the text to search it
/// was a few per cent of the proxy's instructions on a prepared read-only load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Secrecy {
    /// It is about passwords or the role catalog ([`ValueRecording::is_secret_statement`]): nothing it binds
    /// or returns is kept in clear.
    pub statement: bool,
    /// It names a column of `[record] redact`: its parameters are hashed.
    pub names_redacted: bool,
}

/// How values are recorded: `[record]`'s `values`, `row_bytes` and `redact`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueRecording {
    /// The byte budget of one row's values, or of one statement's parameters.
    pub row_bytes: usize,
    /// Column names whose values are secrets, lower-cased.
    redact: Vec<String>,
}

impl ValueRecording {
    /// Recording with a budget per row and the names of secret columns (compared case-insensitively).
    pub fn new(row_bytes: usize, redact: &[String]) -> Self {
        ValueRecording { row_bytes, redact: redact.iter().map(|c| c.to_lowercase()).collect() }
    }

    /// Whether nothing of a statement may be kept in clear: it is about passwords or the role catalog.
    pub fn is_secret_statement(sql: &str) -> bool {
        let lower = sql.to_lowercase();
        lower.contains("pg_authid") || lower.contains("pg_shadow") || lower.contains("password")
    }

    /// What `sql`'s text says about the secrecy of the values it binds and returns: judged once per
    /// prepared statement ([`Secrecy`]).
    pub fn secrecy(&self, sql: &str) -> Secrecy {
        Secrecy { statement: Self::is_secret_statement(sql), names_redacted: self.names_secret(sql) }
    }

    /// Whether a statement's text names a secret column.
    fn names_secret(&self, sql: &str) -> bool {
        if self.redact.is_empty() {
            return false;
        }
        let lower = sql.to_lowercase();
        let word = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
        lower.split(|c: char| !word(c)).any(|w| self.redact.iter().any(|r| r == w))
    }

    /// A statement's parameters, as bound with `formats` (Bind's parameter format codes), of the types
    /// `types` (OIDs, where known); `secrecy` is the statement's ([`ValueRecording::secrecy`]).
    pub fn params(
        &self,
        secrecy: Secrecy,
        params: &[Option<Bytes>],
        formats: &[i16],
        types: &[u32],
    ) -> Vec<Value> {
        let secret = secrecy.statement || secrecy.names_redacted;
        let mut budget = self.row_bytes;
        params
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let binary = format_of(formats, i).then(|| types.get(i).copied().unwrap_or(0));
                self.value(v.as_deref(), binary, secret, &mut budget)
            })
            .collect()
    }

    /// A row the client got: its values (the DataRow without the proxy's extra columns), with the names of
    /// its columns when known and the result format codes the client asked for. `statement_secret`: the
    /// statement is about passwords ([`ValueRecording::is_secret_statement`]).
    pub fn row(
        &self,
        statement_secret: bool,
        columns: &[Column],
        values: &[Option<Bytes>],
        formats: &[i16],
    ) -> Vec<Value> {
        let unnamed_secret = columns.len() != values.len() && !self.redact.is_empty();
        let mut budget = self.row_bytes;
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let column = columns.get(i);
                // Without a redact list no column name is looked at (lower-casing each allocated, per
                // column of every row).
                let secret = statement_secret
                    || unnamed_secret
                    || (!self.redact.is_empty()
                        && column.is_some_and(|c| self.redact.contains(&c.name.to_lowercase())));
                let binary = format_of(formats, i).then(|| column.map_or(0, |c| c.type_oid));
                self.value(v.as_deref(), binary, secret, &mut budget)
            })
            .collect()
    }

    /// One value: `binary` holds its type's OID (0: unknown) when it came in binary format.
    fn value(&self, raw: Option<&[u8]>, binary: Option<u32>, secret: bool, budget: &mut usize) -> Value {
        let Some(raw) = raw else { return Value::Null };
        if secret {
            return Value::Redacted(digest(raw));
        }
        let text = match binary {
            Some(oid) => decode_binary(oid, raw).unwrap_or_else(|| hex(raw)),
            None => String::from_utf8_lossy(raw).into_owned(),
        };
        if text.len() <= *budget {
            *budget -= text.len();
            return Value::Text(text);
        }
        let mut cut = (*budget).min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        *budget -= cut;
        Value::Truncated { prefix: text[..cut].to_owned(), len: text.len() as u64 }
    }
}

/// What a portal's runs record: its parameters (recorded once, at Bind) and how its rows come.
#[derive(Debug)]
pub struct PortalValues {
    /// Its parameters.
    pub params: Vec<Value>,
    /// The result format codes the client asked for.
    pub result_formats: Vec<i16>,
    /// Whether its statement is about passwords.
    pub secret: bool,
}

/// A column of a result, as its RowDescription describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type's OID.
    pub type_oid: u32,
}

/// The columns of a RowDescription body (`None` when it is malformed: the row is then recorded unnamed).
pub fn columns_of(description: &[u8]) -> Option<Arc<[Column]>> {
    let columns = row_description_columns(description).ok()?;
    Some(columns.into_iter().map(|(name, type_oid)| Column { name, type_oid }).collect())
}

/// What a Query string records of the statement whose replies come now.
#[derive(Debug, Default)]
pub struct QueryRun {
    /// Its columns, from its RowDescription.
    pub columns: Option<Arc<[Column]>>,
    /// Whether its run was recorded.
    pub logged: bool,
    /// Whether the query string is about passwords.
    pub secret: bool,
}

/// What a Describe showed of a prepared statement.
#[derive(Debug, Default)]
struct Description {
    columns: Option<Arc<[Column]>>,
    /// The RowDescription body `columns` were read from: a client that describes its portal at every
    /// execution (libpq does) gets the same body each time, and its columns are not read again.
    columns_from: Bytes,
    params: Vec<u32>,
}

/// The columns and parameter types of a session's prepared statements, as Describe showed them, by plan: a
/// prepared statement's plan is one allocation, shared by its Describe and every portal bound from it, and
/// an entry holds it, so its identity cannot be reused while the entry lives. Only the last
/// [`DESCRIBED_STATEMENTS`].
#[derive(Debug, Default)]
pub struct Described(VecDeque<(Arc<StmtPlan>, Description)>);

impl Described {
    /// The entry of `plan`, made if missing (the caller checked that it is a plan of rows: no other kind
    /// has row values, and the others are often made afresh per Describe).
    fn entry(&mut self, plan: &Arc<StmtPlan>) -> &mut Description {
        match self.0.iter().position(|(p, _)| Arc::ptr_eq(p, plan)) {
            Some(i) => &mut self.0[i].1,
            None => {
                if self.0.len() >= DESCRIBED_STATEMENTS {
                    self.0.pop_front();
                }
                self.0.push_back((plan.clone(), Description::default()));
                &mut self.0.back_mut().expect("just pushed").1
            }
        }
    }

    /// Notes the columns a Describe of `plan` showed the client (`description`: its RowDescription body).
    pub fn remember_columns(&mut self, plan: &Arc<StmtPlan>, description: &Bytes) {
        if matches!(plan.as_ref(), StmtPlan::Rows(_)) {
            let entry = self.entry(plan);
            if entry.columns_from != *description {
                entry.columns = columns_of(description);
                entry.columns_from = description.clone();
            }
        }
    }

    /// Notes the parameter types a Describe of `plan` showed (a ParameterDescription body).
    pub fn remember_params(&mut self, plan: &Arc<StmtPlan>, description: &[u8]) {
        if let (Ok(types), StmtPlan::Rows(_)) = (parameter_types(description), plan.as_ref()) {
            self.entry(plan).params = types;
        }
    }

    fn find(&self, plan: &Arc<StmtPlan>) -> Option<&Description> {
        self.0.iter().rev().find(|(p, _)| Arc::ptr_eq(p, plan)).map(|(_, d)| d)
    }

    /// The parameter types of `plan`'s statement, where a Describe showed them.
    pub fn param_types(&self, plan: &Arc<StmtPlan>) -> &[u32] {
        self.find(plan).map_or(&[], |d| &d.params[..])
    }

    fn columns(&self, plan: &Arc<StmtPlan>) -> Option<Arc<[Column]>> {
        self.find(plan).and_then(|d| d.columns.clone())
    }
}

/// Where a row's values come from: a portal's run or a Query's statement.
pub enum RowValues<'a> {
    /// A row of an Execute.
    Portal {
        /// The portal's plan.
        plan: &'a Arc<StmtPlan>,
        /// What it records.
        values: Option<&'a Arc<PortalValues>>,
        /// Whether this is its first row.
        first: bool,
    },
    /// A row of a Query's statement.
    Query(&'a mut QueryRun),
}

/// How to record one row: its statement's secrecy, column names and formats.
pub struct RowContext {
    /// Whether the statement is about passwords.
    pub secret: bool,
    /// Its columns (empty when unknown).
    pub columns: Arc<[Column]>,
    portal: Option<Arc<PortalValues>>,
}

impl RowContext {
    /// The result format codes of its values.
    pub fn formats(&self) -> &[i16] {
        self.portal.as_ref().map_or(&[], |p| &p.result_formats[..])
    }
}

impl RowValues<'_> {
    /// A row is about to be read: records its statement's run before its first row's ops
    /// ([`LoggedOp::Run`]), and says how to record the row.
    pub fn start(self, described: &Described, stmt: Option<u32>, ops: &mut TxnOps) -> Option<RowContext> {
        match self {
            RowValues::Portal { plan, values, first } => {
                let values = values?;
                let columns = described.columns(plan).unwrap_or_else(|| Arc::from(Vec::new()));
                if first {
                    let names = columns.iter().map(|c| c.name.clone()).collect();
                    ops.push(LoggedOp::Run { stmt, params: values.params.clone(), columns: names });
                }
                Some(RowContext { secret: values.secret, columns, portal: Some(values.clone()) })
            }
            RowValues::Query(run) => {
                let columns = run.columns.clone().unwrap_or_else(|| Arc::from(Vec::new()));
                if !std::mem::replace(&mut run.logged, true) {
                    let names = columns.iter().map(|c| c.name.clone()).collect();
                    ops.push(LoggedOp::Run { stmt, params: Vec::new(), columns: names });
                }
                Some(RowContext { secret: run.secret, columns, portal: None })
            }
        }
    }
}

/// Whether value `i` is in binary format, by the format codes of a Bind (none: all text; one: all alike).
fn format_of(formats: &[i16], i: usize) -> bool {
    match formats {
        [] => false,
        [one] => *one == 1,
        many => many.get(i) == Some(&1),
    }
}

/// A binary-format value of type `oid` in PostgreSQL's text format, for the common types; `None` for
/// others (and for bytes that do not fit the type).
fn decode_binary(oid: u32, raw: &[u8]) -> Option<String> {
    const BOOL: u32 = 16;
    const INT8: u32 = 20;
    const INT2: u32 = 21;
    const INT4: u32 = 23;
    const TEXT: u32 = 25;
    const OID: u32 = 26;
    const FLOAT4: u32 = 700;
    const FLOAT8: u32 = 701;
    const BPCHAR: u32 = 1042;
    const VARCHAR: u32 = 1043;
    const NAME: u32 = 19;
    const JSON: u32 = 114;
    const UUID: u32 = 2950;
    const JSONB: u32 = 3802;
    Some(match (oid, raw.len()) {
        (BOOL, 1) => if raw[0] != 0 { "t" } else { "f" }.to_owned(),
        (INT2, 2) => i16::from_be_bytes(raw.try_into().ok()?).to_string(),
        (INT4, 4) => i32::from_be_bytes(raw.try_into().ok()?).to_string(),
        (OID, 4) => u32::from_be_bytes(raw.try_into().ok()?).to_string(),
        (INT8, 8) => i64::from_be_bytes(raw.try_into().ok()?).to_string(),
        (FLOAT4, 4) => f32::from_be_bytes(raw.try_into().ok()?).to_string(),
        (FLOAT8, 8) => f64::from_be_bytes(raw.try_into().ok()?).to_string(),
        (TEXT | BPCHAR | VARCHAR | NAME | JSON, _) => std::str::from_utf8(raw).ok()?.to_owned(),
        (JSONB, _) if raw.first() == Some(&1) => std::str::from_utf8(&raw[1..]).ok()?.to_owned(),
        (UUID, 16) => {
            let h = hex(raw);
            let h = &h[2..];
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
        }
        _ => return None,
    })
}

/// `\x` and the bytes in hex, as PostgreSQL shows a `bytea`.
fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("\\x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The first 8 bytes of the value's SHA-256, in hex, named.
fn digest(raw: &[u8]) -> String {
    let sum = Sha256::digest(raw);
    let mut s = String::from("sha256:");
    for b in &sum[..8] {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(s: &str) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn cols(names: &[&str]) -> Vec<Column> {
        names.iter().map(|n| Column { name: (*n).to_owned(), type_oid: 25 }).collect()
    }

    /// A RowDescription body with text columns of these names.
    fn description(names: &[&str]) -> Bytes {
        let mut body = (names.len() as i16).to_be_bytes().to_vec();
        for name in names {
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(&[0; 6]); // table OID, column number
            body.extend_from_slice(&25u32.to_be_bytes()); // text
            body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]); // size, modifier, format
        }
        Bytes::from(body)
    }

    #[test]
    fn a_statement_described_again_keeps_its_columns_until_its_description_changes() {
        use crate::interpret::catalog::Catalog;
        use crate::interpret::shared::TaggingShared;
        let shared = TaggingShared::new();
        shared.set_catalog(Catalog::from_rows(vec![("public".into(), "acc".into(), Some("id".into()))]));
        let mut tagger = crate::interpret::tagger::Tagger::new(Arc::new(shared));
        let (plan, _, _) = tagger.parse(
            &Bytes::from_static(b"s"),
            &Bytes::from_static(b"SELECT bal FROM acc WHERE id = $1"),
            &[],
        );
        let mut described = Described::default();
        described.remember_columns(&plan, &description(&["bal"]));
        let first = described.columns(&plan).expect("read");
        assert_eq!(&first[..], &cols(&["bal"])[..]);
        // The same body again (libpq describes its portal at every execution): the columns are kept as
        // they were read, not read again.
        described.remember_columns(&plan, &description(&["bal"]));
        assert!(Arc::ptr_eq(&first, &described.columns(&plan).expect("kept")));
        // A table altered behind the statement changes its description, and the columns follow.
        described.remember_columns(&plan, &description(&["balance", "id"]));
        assert_eq!(&described.columns(&plan).expect("read again")[..], &cols(&["balance", "id"])[..]);
    }

    #[test]
    fn a_row_shares_its_budget_and_a_long_value_keeps_a_prefix_and_its_length() {
        let rec = ValueRecording::new(8, &[]);
        let row = rec.row(false, &cols(&["a", "b", "c"]), &[some("abc"), None, some("déjà vu")], &[]);
        assert_eq!(row[0], Value::Text("abc".into()));
        assert_eq!(row[1], Value::Null);
        // 5 bytes left of the 9 of "déjà vu": "déj" is 4 bytes, and "à" (2) does not fit.
        assert_eq!(row[2], Value::Truncated { prefix: "déj".into(), len: 9 });
    }

    #[test]
    fn secret_columns_and_the_parameters_of_statements_naming_them_are_hashes() {
        let rec = ValueRecording::new(256, &["Password_Hash".into()]);
        let row = rec.row(false, &cols(&["id", "password_hash"]), &[some("7"), some("s3cret")], &[]);
        assert_eq!(row[0], Value::Text("7".into()));
        assert!(matches!(&row[1], Value::Redacted(h) if h.starts_with("sha256:") && !h.contains("s3cret")));
        let params = rec.params(
            rec.secrecy("UPDATE users SET PASSWORD_HASH = $1 WHERE id = $2"),
            &[some("s3cret"), some("7")],
            &[],
            &[],
        );
        assert!(params.iter().all(|p| matches!(p, Value::Redacted(_))), "{params:?}");
        // Equal secrets hash alike; a column merely containing the name is not a secret.
        assert_eq!(row[1], Value::Redacted(digest(b"s3cret")));
        let rec = ValueRecording::new(256, &["ssn".into()]);
        let plain = rec.params(rec.secrecy("UPDATE t SET ssn_len = $1"), &[some("6")], &[], &[]);
        assert_eq!(plain, vec![Value::Text("6".into())]);
        let hidden = rec.params(rec.secrecy("UPDATE t SET SSN = $1"), &[some("6")], &[], &[]);
        assert!(matches!(&hidden[0], Value::Redacted(_)));
        // Any statement that mentions passwords keeps its parameters hidden, whatever the list says.
        let careful = rec.params(rec.secrecy("UPDATE t SET password_hint = $1"), &[some("6")], &[], &[]);
        assert!(matches!(&careful[0], Value::Redacted(_)));
    }

    #[test]
    fn password_statements_keep_nothing_in_clear() {
        let rec = ValueRecording::new(256, &[]);
        let p = rec.params(rec.secrecy("ALTER ROLE alice PASSWORD $1"), &[some("hunter2")], &[], &[]);
        assert!(matches!(&p[0], Value::Redacted(_)));
        let r = rec.row(
            ValueRecording::is_secret_statement("SELECT rolname FROM pg_authid"),
            &cols(&["rolname"]),
            &[some("alice")],
            &[],
        );
        assert!(matches!(&r[0], Value::Redacted(_)));
    }

    #[test]
    fn without_names_a_redact_list_hides_every_value() {
        let rec = ValueRecording::new(256, &["ssn".into()]);
        let row = rec.row(false, &[], &[some("1"), some("123-45")], &[]);
        assert!(row.iter().all(|v| matches!(v, Value::Redacted(_))));
        let open = ValueRecording::new(256, &[]).row(false, &[], &[some("1")], &[]);
        assert_eq!(open, vec![Value::Text("1".into())]);
    }

    #[test]
    fn binary_values_of_common_types_are_decoded_and_others_are_hex() {
        let rec = ValueRecording::new(256, &[]);
        let seven = || Some(Bytes::from_static(&[0, 0, 0, 7]));
        let p = rec.params(
            rec.secrecy("SELECT $1, $2, $3"),
            &[seven(), some("x"), seven()],
            &[1, 0, 1],
            &[23, 25],
        );
        assert_eq!(
            p,
            vec![Value::Text("7".into()), Value::Text("x".into()), Value::Text("\\x00000007".into())]
        );
        let typed = |oid: u32| vec![Column { name: "c".into(), type_oid: oid }];
        let one =
            |oid: u32, raw: &[u8]| rec.row(false, &typed(oid), &[Some(Bytes::copy_from_slice(raw))], &[1]);
        assert_eq!(one(16, &[1]), vec![Value::Text("t".into())]);
        assert_eq!(one(20, &(-5i64).to_be_bytes()), vec![Value::Text("-5".into())]);
        assert_eq!(one(1043, b"abc"), vec![Value::Text("abc".into())]);
        assert_eq!(one(3802, b"\x01{}"), vec![Value::Text("{}".into())]);
        // Bytes that do not fit the type are shown as they are.
        assert_eq!(one(23, &[1, 2]), vec![Value::Text("\\x0102".into())]);
    }
}
