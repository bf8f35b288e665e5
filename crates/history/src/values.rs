//! Values the proxy records beside a transaction's ops, for people and for replay (issue 18): the
//! parameters each statement ran with, and the row each read returned or each write produced.
//!
//! The verifier never looks at them: verdicts rest on versions alone, so a value that was cut short or
//! replaced by a hash costs a report its detail, never its correctness. The proxy bounds them (a row's
//! values share a byte budget, [`Value::Truncated`] keeps a prefix) and keeps secrets out
//! ([`Value::Redacted`] keeps a hash, for telling equal values apart).

use serde::{Deserialize, Serialize};

use crate::{Op, StmtRef};

/// One recorded value: a parameter, or a column of a row.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// The value in PostgreSQL's text format (a value sent or returned in binary format is shown as
    /// `\x` and its bytes in hex).
    Text(String),
    /// A value longer than what was left of its row's budget: its first bytes (cut at a character
    /// boundary) and its whole length in bytes.
    Truncated {
        /// The first bytes.
        prefix: String,
        /// The whole value's length in bytes.
        len: u64,
    },
    /// A secret (a column in the redact list, a parameter of a statement that names one, anything of a
    /// statement about passwords): a hash of the value instead of the value, so that equal values still
    /// look equal. Not a protection for guessable values: it is a digest, not a keyed one.
    Redacted(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            Value::Truncated { prefix, len } => {
                write!(f, "'{}…' ({len} bytes)", prefix.replace('\'', "''"))
            }
            Value::Redacted(hash) => write!(f, "<redacted {hash}>"),
        }
    }
}

/// One run of a statement: the parameters it was bound with and the names of the columns its rows carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementRun {
    /// The statement, when its text is known.
    pub stmt: Option<StmtRef>,
    /// Its parameters (`$1`, `$2`, …), empty for a simple-protocol statement, whose literals are in its text.
    pub params: Vec<Value>,
    /// The names of the columns of the rows it returned to the client, when a row description was seen.
    pub columns: Vec<String>,
    /// How many of the transaction's ops came before it, to place it among them.
    pub before_op: u32,
}

/// The row behind one op: what a read returned, or what a write produced, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRow {
    /// The op's index in its transaction's ops.
    pub op: u32,
    /// The statement run whose row it is: an index into [`TxnValues::runs`].
    pub run: u32,
    /// The row's values, one per column of the run (see [`StatementRun::columns`]).
    pub values: Vec<Value>,
}

/// Everything recorded of a transaction's values (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnValues {
    /// Its statement runs, in order.
    pub runs: Vec<StatementRun>,
    /// The rows behind its ops, in op order.
    pub rows: Vec<OpRow>,
}

impl TxnValues {
    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.rows.is_empty()
    }

    /// Appends the values of ops that came after `ops_before` ops of this transaction (a late-ops record):
    /// their op and run indices move up accordingly.
    pub fn append(&mut self, later: TxnValues, ops_before: u32) {
        let runs_before = self.runs.len() as u32;
        self.runs.extend(
            later.runs.into_iter().map(|r| StatementRun { before_op: r.before_op + ops_before, ..r }),
        );
        self.rows.extend(later.rows.into_iter().map(|r| OpRow {
            op: r.op + ops_before,
            run: r.run + runs_before,
            ..r
        }));
    }

    /// Forgets the rows of the ops at `dropped` (ascending indices, in the numbering before) and renumbers
    /// the rest, and the runs' places, as the ops that remain are numbered
    /// ([`crate::Transaction::retain_ops`]).
    pub fn drop_ops(&mut self, dropped: &[u32]) {
        let before = |op: u32| dropped.partition_point(|&d| d < op) as u32;
        self.rows.retain(|r| dropped.binary_search(&r.op).is_err());
        for row in &mut self.rows {
            row.op -= before(row.op);
        }
        for run in &mut self.runs {
            run.before_op -= before(run.before_op);
        }
    }

    /// The row behind op `op`, with its column names.
    pub fn row_of(&self, op: usize) -> Option<(&OpRow, &[String])> {
        let row = self.rows.iter().find(|r| r.op as usize == op)?;
        let columns = self.runs.get(row.run as usize).map_or(&[][..], |r| &r.columns[..]);
        Some((row, columns))
    }

    /// The parameters of the statement run op `op` came from (its statement `stmt`), as `$1 = value, …`:
    /// the last run before it of the same statement, if that run had parameters.
    pub fn describe_params(&self, op: usize, stmt: Option<StmtRef>) -> Option<String> {
        let run = self.runs.iter().rev().find(|r| r.before_op as usize <= op && r.stmt == stmt)?;
        if run.params.is_empty() {
            return None;
        }
        let params: Vec<String> =
            run.params.iter().enumerate().map(|(i, v)| format!("${} = {v}", i + 1)).collect();
        Some(params.join(", "))
    }

    /// The row behind op `op` as `name = value, …` (positions `$1`, `$2`, … for columns without a name).
    pub fn describe_row(&self, op: usize) -> Option<String> {
        let (row, columns) = self.row_of(op)?;
        let fields: Vec<String> = row
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| match columns.get(i) {
                Some(name) => format!("{name} = {v}"),
                None => format!("${} = {v}", i + 1),
            })
            .collect();
        Some(fields.join(", "))
    }
}

/// One statement as a transaction ran it, for replay: its text's reference, the parameters it was bound
/// with (empty where none were recorded) and the stretch of the transaction's ops it produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementStep {
    /// The statement, when its text is known.
    pub stmt: Option<StmtRef>,
    /// Its parameters, where a run of it was recorded ([`StatementRun`]).
    pub params: Vec<Value>,
    /// The index of its first op (where a statement without ops stood, for one that produced none).
    pub first_op: usize,
    /// How many ops it produced.
    pub ops: usize,
}

/// The statements a transaction ran, in order, as far as its ops and its recorded runs show them.
///
/// A recorded run ([`StatementRun`]) starts a statement; so does an op whose statement differs from the
/// op before it. Two things cannot be seen and are merged or missed: back-to-back runs of one text that
/// left no run record (a simple-protocol statement run twice in a row: its literals are in the text, so
/// both runs are one step here), and a statement that produced no op and no run record (a simple-protocol
/// UPDATE that matched no row).
pub fn statement_steps(ops: &[Op], values: Option<&TxnValues>) -> Vec<StatementStep> {
    let runs = values.map_or(&[][..], |v| &v.runs[..]);
    let mut steps: Vec<StatementStep> = Vec::new();
    let mut next_run = 0;
    // Starts a step for each run recorded before op `op` (`None`: every run left), placed at op `at`.
    let mut start_runs_before = |steps: &mut Vec<StatementStep>, op: Option<usize>, at: usize| {
        while let Some(run) = runs.get(next_run).filter(|r| op.is_none_or(|op| r.before_op as usize <= op)) {
            steps.push(StatementStep { stmt: run.stmt, params: run.params.clone(), first_op: at, ops: 0 });
            next_run += 1;
        }
    };
    for (i, op) in ops.iter().enumerate() {
        start_runs_before(&mut steps, Some(i), i);
        match steps.last_mut() {
            Some(step) if step.stmt == op.stmt() && step.first_op + step.ops == i => step.ops += 1,
            _ => steps.push(StatementStep { stmt: op.stmt(), params: Vec::new(), first_op: i, ops: 1 }),
        }
    }
    start_runs_before(&mut steps, None, ops.len());
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_values_move_past_the_ops_and_runs_before_them() {
        let run =
            |before_op| StatementRun { stmt: None, params: vec![], columns: vec!["v".into()], before_op };
        let row = |op, run| OpRow { op, run, values: vec![Value::Text(op.to_string())] };
        let mut early = TxnValues { runs: vec![run(0)], rows: vec![row(0, 0), row(1, 0)] };
        let late = TxnValues { runs: vec![run(0)], rows: vec![row(0, 0)] };
        early.append(late, 2);
        assert_eq!(early.runs[1].before_op, 2);
        assert_eq!(early.rows[2], OpRow { op: 2, run: 1, values: vec![Value::Text("0".into())] });
        assert_eq!(early.describe_row(2).as_deref(), Some("v = '0'"));
        assert_eq!(early.describe_row(3), None);
    }

    /// A transaction read `k = 3` and `k = 4` (a statement run each) and wrote `k = 3`; a verifier drops the
    /// first read (its version was collected). The rows and parameters stay with the ops that remain: the
    /// read of 4 shows `k = 4` bound as `$1 = '4'`, and the write its own row and parameters.
    #[test]
    fn dropping_ops_keeps_each_remaining_op_with_its_row_and_parameters() {
        use crate::{Key, Observed, SessionId, Transaction, TxnId, WriteId};
        let select = Some(StmtRef(0));
        let update = Some(StmtRef(1));
        let run = |stmt, param: &str, before_op| StatementRun {
            stmt,
            params: vec![Value::Text(param.into())],
            columns: vec!["k".into()],
            before_op,
        };
        let row = |op, run, k: &str| OpRow { op, run, values: vec![Value::Text(k.into())] };
        let mut t = Transaction::new(TxnId(1), SessionId(1), 0);
        t.ops = vec![
            Op::Read { key: Key(3), observed: Observed::Version(WriteId(1)), stmt: select },
            Op::Read { key: Key(4), observed: Observed::Version(WriteId(2)), stmt: select },
            Op::Write { key: Key(3), write: WriteId(3), stmt: update },
        ];
        t.values = Some(Box::new(TxnValues {
            runs: vec![run(select, "3", 0), run(select, "4", 1), run(update, "3", 2)],
            rows: vec![row(0, 0, "3"), row(1, 1, "4"), row(2, 2, "3")],
        }));
        let dropped = t.retain_ops(|op| !matches!(op, Op::Read { key: Key(3), .. }));
        assert_eq!(dropped, 1);
        let values = t.values.as_deref().expect("values");
        assert_eq!(values.describe_row(0).as_deref(), Some("k = '4'"));
        assert_eq!(values.describe_params(0, select).as_deref(), Some("$1 = '4'"));
        assert_eq!(values.describe_row(1).as_deref(), Some("k = '3'"));
        assert_eq!(values.describe_params(1, update).as_deref(), Some("$1 = '3'"));
        assert_eq!(values.runs.iter().map(|r| r.before_op).collect::<Vec<_>>(), [0, 0, 1]);
    }

    #[test]
    fn values_read_as_sql_literals_and_secrets_stay_hashes() {
        assert_eq!(Value::Text("it's".into()).to_string(), "'it''s'");
        assert_eq!(Value::Null.to_string(), "NULL");
        assert_eq!(Value::Truncated { prefix: "ab".into(), len: 900 }.to_string(), "'ab…' (900 bytes)");
        assert_eq!(Value::Redacted("sha256:00ff".into()).to_string(), "<redacted sha256:00ff>");
    }

    #[test]
    fn statement_steps_follow_runs_and_changes_of_statement() {
        let run = |stmt, before_op, p: &str| StatementRun {
            stmt: Some(StmtRef(stmt)),
            params: vec![Value::Text(p.into())],
            columns: vec![],
            before_op,
        };
        let read = |stmt| Op::Read {
            key: crate::Key(0),
            observed: crate::Observed::Absent,
            stmt: Some(StmtRef(stmt)),
        };
        let write =
            |stmt| Op::Write { key: crate::Key(0), write: crate::WriteId(1), stmt: Some(StmtRef(stmt)) };
        // A SELECT with params reading two rows, the same SELECT again with other params finding none, an
        // UPDATE without a run record, and a last run with no ops after every op.
        let ops = [read(0), read(0), write(1)];
        let values = TxnValues { runs: vec![run(0, 0, "a"), run(0, 2, "b"), run(2, 3, "c")], rows: vec![] };
        let steps = statement_steps(&ops, Some(&values));
        let shape: Vec<_> =
            steps.iter().map(|s| (s.stmt.map(|r| r.0), s.params.len(), s.first_op, s.ops)).collect();
        assert_eq!(shape, [(Some(0), 1, 0, 2), (Some(0), 1, 2, 0), (Some(1), 0, 2, 1), (Some(2), 1, 3, 0)]);
        // Without values, one step per change of statement.
        let steps = statement_steps(&ops, None);
        assert_eq!(steps.iter().map(|s| (s.first_op, s.ops)).collect::<Vec<_>>(), [(0, 2), (2, 1)]);
    }
}
