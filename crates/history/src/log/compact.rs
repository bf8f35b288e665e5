//! The compact encoding of transaction records (issue 16, item 5): each statement text and each key
//! namespace is written once, in a record of its own, and transaction records cite it.
//!
//! # Why
//!
//! Records used to carry every statement text of their transaction, and every op its table's name: an
//! application runs a few dozen distinct statements, so nearly all of those bytes repeated earlier ones.
//! A [`LogRecord::Statement`] (or [`LogRecord::Namespace`]) record now holds a text once, and the records
//! after it cite it by **the sequence number of that record**.
//!
//! # Why a sequence number, and what keeps a citation sound
//!
//! - It is unique across the whole log and every run that wrote it, so two definitions can never share an
//!   id, and a citation never needs a "which run" to be read.
//! - A definition is appended before the first record that cites it, under the same append lock, so it
//!   has the smaller sequence number. The storage engine recovers a prefix of what was appended (a crash
//!   loses a suffix, never a hole), so a record that survives a crash has its definitions too.
//! - The writer's table of what it already defined lives in memory only. Each open of the log starts with
//!   it empty, so a run cites only definitions it appended itself, after it opened; nothing it writes
//!   depends on what an earlier run left. The table is bounded (about [`TEXT_TABLE_BYTES`] of text): when
//!   it fills (or at a cut, [`super::retention::Cut`]), it is emptied and the texts are defined again at
//!   their next use. A text may so be defined more than once; each definition is complete on its own.
//! - Whenever its table starts over within a run, the writer appends [`LogRecord::TextsForgotten`] before
//!   the new table's first definition: nothing after that record cites a definition before it, so the
//!   reader forgets them there and holds about one table's worth (plus what each earlier run of the log
//!   left, one table's worth at most each). Without the mark, a reader of a client that puts its values in
//!   its statements kept one text per statement run, for as long as it read.
//! - The reader ([`Resolver`], inside [`super::Replayer`]) keeps every definition it has read since the last
//!   mark, and refuses a citation of anything else (a sequence number it has not read, or one that defines
//!   the other kind of text) as an inconsistency, never guessing. Reading a log from the middle, or a copy
//!   of some of its records, therefore fails loudly instead of attributing a text to the wrong statement.
//!
//! # Rows written once
//!
//! With values recorded (issue 18), a row read again and again (the same version, by the same statement)
//! carried its values every time. The writer remembers each row it wrote inline (large enough to be worth
//! it, [`MIN_CITED_ROW_BYTES`]) by **the sequence number of its record and its place among that record's
//! inline rows**, and a later equal row cites that place ([`CompactOp::CitedRow`]) instead of repeating the
//! values. Rows are compared by their values alone, which is all a citation stands for: two versions with
//! equal recorded values read the same. Why it stays sound and bounded:
//! - a row is remembered only once the record holding it is in the engine, and cited only by records
//!   appended after it, so (as for texts) a record that survives a crash has the rows it cites;
//! - the reader remembers exactly the rows the writer does, by the same rule (every inline row of a compact
//!   record large enough to be worth citing), in the same order;
//! - the writer's table of rows is bounded ([`ROW_TABLE_BYTES`] of values). Whenever it starts a table (at
//!   each open of the log, and when the table fills), it appends [`LogRecord::RowsForgotten`] before the
//!   first record that adds to it: nothing after that record cites a row before it, so the reader forgets
//!   its rows there and holds at most one table's worth too.
//!
//! A row that is not cited is packed ([`CompactOp::PackedRow`]) where that saves bytes:
//! - a value that repeats one of its run's parameters (`UPDATE kv SET v = $2 WHERE k = $1 RETURNING k, v`,
//!   or the key a `SELECT … WHERE k = $1` returns) is written as the parameter's index
//!   ([`RowValue::Param`]); the parameters are those of the last run before the row in the same record,
//!   the run the row belongs to ([`LoggedOp::Row`]);
//! - a value whose text is an integer exactly as PostgreSQL prints one is written as that integer
//!   ([`RowValue::Int`], a varint: a 14-digit counter takes 7 bytes instead of 16);
//! - a row that is its run's parameters exactly, in order (an `INSERT` or `UPDATE` that returns the
//!   columns it set, as most writes do), is written as just that ([`CompactOp::RowOfParams`]).
//!
//! A run's parameters are packed the same way ([`CompactOp::PackedRun`]), where that saves bytes: a
//! parameter that repeats a value of the row just before the run in the same record is written as that
//! value's index ([`ParamValue::LastRow`]). An application that reads a row and writes it back changed
//! (`SELECT … WHERE id = $1`, then `UPDATE … SET a = $1, b = $2, … WHERE id = $n`) passes most of the row
//! again as parameters: on TPC-C, three parameters in four. A row lost to a hole (below) makes the
//! parameters citing it unknown: the run is kept without them, and counted.
//!
//! A read or write whose key is its run's first parameters, joined as the proxy joins a key's columns
//! (0x1f between them: `SELECT … WHERE id = $1`), names them instead of repeating the key
//! ([`CompactOp::ReadOfParams`], [`CompactOp::WriteOfParams`]). Only when the run's parameters are all in
//! the record itself (none packed against the row before it): a key decides the verdict, so it must never
//! depend on a row a hole could take.
//!
//! Expanding a compact record gives back exactly the record the proxy handed to the log
//! ([`Resolver::resolve`]): the same ops, the same statement list in the same order. So everything after
//! the resolver (replay, tests reading records) sees the records as before.

use serde::{Deserialize, Serialize};

use super::LogError;
use super::record::{LogRecord, LoggedOp, LoggedTxn};
use crate::values::Value;
use crate::{CollectorId, KeyName, Observed, SessionId, TxnId, WriteId};

/// Roughly how many bytes of text the writer's table of defined texts holds before it starts over.
pub const TEXT_TABLE_BYTES: usize = 4 << 20;

/// Roughly how many bytes of values the writer's (and the reader's) table of rows holds before it starts
/// over.
pub const ROW_TABLE_BYTES: usize = 8 << 20;

/// The smallest row ([`row_bytes`]) worth remembering: a citation takes about 8 bytes, so citing a smaller
/// row saves little, and remembering it costs memory on both sides.
pub const MIN_CITED_ROW_BYTES: usize = 16;

/// About what `values` take in a record: each value's bytes and a little for its kind and length.
pub fn row_bytes(values: &[Value]) -> usize {
    values
        .iter()
        .map(|v| match v {
            Value::Null => 1,
            Value::Text(t) | Value::Redacted(t) => t.len() + 2,
            Value::Truncated { prefix, .. } => prefix.len() + 4,
        })
        .sum()
}

/// One value of a row in [`CompactOp::PackedRow`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowValue {
    /// The value itself.
    Own(Value),
    /// The same value as this parameter (counting from 0) of the run the row belongs to.
    Param(u32),
    /// A [`Value::Text`] holding this integer as PostgreSQL prints it (no sign for positives, no leading
    /// zeros), so that it reads back as exactly that text.
    Int(i64),
}

impl RowValue {
    /// The packed form of `v` given the parameters of its run, if it has one shorter than itself.
    fn packed(v: &Value, params: &[Value]) -> Option<RowValue> {
        index_in(v, params).map(RowValue::Param).or_else(|| int_form(v).map(RowValue::Int))
    }
}

/// The integer `v` holds, when its text is one exactly as PostgreSQL prints it (no sign for positives, no
/// leading zeros), so that the integer reads back as the same text.
fn int_form(v: &Value) -> Option<i64> {
    let Value::Text(t) = v else { return None };
    // Printed as PostgreSQL prints: digits, a minus for negatives only, no leading zero but in "0" itself.
    // Checked on the text rather than by printing the integer again, which allocated for every integer
    // value of every row the proxy records.
    let digits = t.strip_prefix('-').unwrap_or(t);
    let canonical = match digits.as_bytes() {
        [] => false,
        [b'0'] => digits.len() == t.len(),
        [b'0', ..] => false,
        bytes => bytes.iter().all(u8::is_ascii_digit),
    };
    canonical.then(|| t.parse::<i64>().ok()).flatten()
}

/// Where `v` is among `values`, when it is long enough that an index (a byte or two) saves bytes over
/// writing it.
fn index_in(v: &Value, values: &[Value]) -> Option<u32> {
    let long = match v {
        Value::Null => false,
        Value::Text(t) | Value::Redacted(t) => t.len() >= 2,
        Value::Truncated { .. } => true,
    };
    values.iter().position(|p| p == v).filter(|_| long).map(|i| i as u32)
}

/// One parameter of a run in [`CompactOp::PackedRun`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParamValue {
    /// The value itself.
    Own(Value),
    /// A [`Value::Text`] holding this integer, as [`RowValue::Int`].
    Int(i64),
    /// The same value as this one (counting from 0) of the row just before the run in the same record.
    LastRow(u32),
}

impl ParamValue {
    /// The packed form of `v` given the row before its run, if it has one shorter than itself.
    fn packed(v: &Value, last_row: &[Value]) -> Option<ParamValue> {
        index_in(v, last_row).map(ParamValue::LastRow).or_else(|| int_form(v).map(ParamValue::Int))
    }
}

/// A table of texts or rows: the writer hashes every statement text, table name and row it appends.
type Table<K, V> = crate::FastMap<K, V>;

/// Whether the writer remembers an inline row with `values` (and so the reader does too).
fn worth_citing(values: &[Value]) -> bool {
    row_bytes(values) >= MIN_CITED_ROW_BYTES
}

/// How an inline row is written ([`packed_row`]), decided against its run's parameters.
enum RowForm {
    /// The table holds it: [`CompactOp::CitedRow`].
    Cited { record: u64, row: u32 },
    /// It is its run's parameters: [`CompactOp::RowOfParams`].
    OfParams,
    /// Some of its values pack ([`RowValue::packed`]): [`CompactOp::PackedRow`].
    Packed(Vec<Option<RowValue>>),
    /// [`CompactOp::Row`].
    Plain,
}

impl RowForm {
    /// The form of an inline row of `values`, given the parameters of its run.
    fn of(values: &[Value], params: &[Value]) -> RowForm {
        if !values.is_empty() && values == params {
            return RowForm::OfParams;
        }
        let packed: Vec<Option<RowValue>> = values.iter().map(|v| RowValue::packed(v, params)).collect();
        if packed.iter().all(Option::is_none) { RowForm::Plain } else { RowForm::Packed(packed) }
    }
}

/// A row op of `values`, written in `form`.
fn packed_row(ops: u32, values: Vec<Value>, form: RowForm) -> CompactOp {
    match form {
        RowForm::Cited { record, row } => CompactOp::CitedRow { ops, record, row },
        RowForm::OfParams => CompactOp::RowOfParams { ops },
        RowForm::Plain => CompactOp::Row { ops, values },
        RowForm::Packed(packed) => {
            let values = values.into_iter().zip(packed).map(|(v, p)| p.unwrap_or(RowValue::Own(v))).collect();
            CompactOp::PackedRow { ops, values }
        }
    }
}

/// The separator between a key's column values in [`KeyName::bytes`], as the proxy joins them.
const KEY_COLUMN_SEPARATOR: u8 = 0x1f;

/// How many of `params`, from the first, joined by [`KEY_COLUMN_SEPARATOR`], make `key`: the
/// [`CompactOp::ReadOfParams`] it can be written as.
fn key_of_params(key: &[u8], params: &[Value]) -> Option<u32> {
    let mut at = 0;
    for (i, p) in params.iter().enumerate() {
        let Value::Text(t) = p else { return None };
        if i > 0 {
            if key.get(at) != Some(&KEY_COLUMN_SEPARATOR) {
                return None;
            }
            at += 1;
        }
        if !key.get(at..)?.starts_with(t.as_bytes()) {
            return None;
        }
        at += t.len();
        if at == key.len() {
            return Some(i as u32 + 1);
        }
    }
    None
}

/// The key [`key_of_params`] found: the first `count` of `params`, joined.
fn params_key(params: &[Value], count: u32) -> Option<Vec<u8>> {
    let mut key = Vec::new();
    for (i, p) in params.get(..count as usize)?.iter().enumerate() {
        let Value::Text(t) = p else { return None };
        if i > 0 {
            key.push(KEY_COLUMN_SEPARATOR);
        }
        key.extend_from_slice(t.as_bytes());
    }
    Some(key)
}

/// How a run's parameters pack against the row before it ([`ParamValue::packed`]); `None` where none does.
fn run_packing(params: &[Value], last_row: &[Value]) -> Option<Vec<Option<ParamValue>>> {
    let packed: Vec<Option<ParamValue>> = params.iter().map(|v| ParamValue::packed(v, last_row)).collect();
    packed.iter().any(Option::is_some).then_some(packed)
}

/// A run: [`CompactOp::PackedRun`] with a packing ([`run_packing`]), [`CompactOp::Run`] or
/// [`CompactOp::RunCitingColumns`] without.
fn packed_run(
    stmt: Option<u32>,
    params: Vec<Value>,
    columns: Option<u64>,
    packing: Option<Vec<Option<ParamValue>>>,
) -> CompactOp {
    match (packing, columns) {
        (None, Some(columns)) => CompactOp::RunCitingColumns { stmt, params, columns },
        (None, None) => CompactOp::Run { stmt, params, columns: Vec::new() },
        (Some(packed), columns) => {
            let params =
                params.into_iter().zip(packed).map(|(v, p)| p.unwrap_or(ParamValue::Own(v))).collect();
            CompactOp::PackedRun { stmt, params, columns }
        }
    }
}

/// The values of a record's last run or last row, which the ops after it pack against: held out of its op
/// until the next run or row (or the record's end) replaces them, and then moved into the op. Copying every
/// run's parameters and every row's values to keep them beside their op was 3% of the proxy's
/// instructions on a read-only load.
struct Held<F> {
    /// Where its op goes among the record's ops.
    at: usize,
    values: Vec<Value>,
    /// How the op is written, decided when it came.
    form: F,
}

/// How a held run is written: its statement, its column list's citation, and its packing.
type RunForm = (Option<u32>, Option<u64>, Option<Vec<Option<ParamValue>>>);

impl<F> Held<F> {
    /// Writes the op in its place, made by `op` from the values and the form.
    fn put(self, out: &mut [CompactOp], op: fn(Vec<Value>, F) -> CompactOp) {
        out[self.at] = op(self.values, self.form);
    }
}

/// A held run's op.
fn run_op(params: Vec<Value>, (stmt, columns, packing): RunForm) -> CompactOp {
    packed_run(stmt, params, columns, packing)
}

/// A held row's op.
fn row_op(values: Vec<Value>, (ops, form): (u32, RowForm)) -> CompactOp {
    packed_row(ops, values, form)
}

/// Where a held op waits for its values; overwritten before the record is written.
const HELD_PLACE: CompactOp = CompactOp::RowOfParams { ops: 0 };

/// One op in the compact encoding: a [`LoggedOp`] whose key names its namespace by an index into
/// [`CompactOps::namespaces`]. Statement indices are as in [`LoggedOp`], into [`CompactOps::statements`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompactOp {
    /// A read of a key that observed one version.
    Read {
        /// Index into [`CompactOps::namespaces`].
        ns: u32,
        /// The key's bytes within its namespace.
        key: Vec<u8>,
        /// The version it returned.
        observed: Observed,
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
    },
    /// A write of a new version of a key.
    Write {
        /// Index into [`CompactOps::namespaces`].
        ns: u32,
        /// The key's bytes within its namespace.
        key: Vec<u8>,
        /// The identity of the new version.
        write: WriteId,
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
    },
    /// A statement the proxy could not map to row reads and writes, as [`LoggedOp::Opaque`].
    Opaque {
        /// Why it could not be mapped.
        kind: String,
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
    },
    /// A statement run's values, as [`LoggedOp::Run`]. Appended last, so logs written before it existed
    /// still decode.
    Run {
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
        /// Its parameters.
        params: Vec<Value>,
        /// The names of its rows' columns.
        columns: Vec<String>,
    },
    /// The row behind the ops just before it, as [`LoggedOp::Row`]. Appended last.
    Row {
        /// How many of the reads and writes just before it the row is behind.
        ops: u32,
        /// One value per column.
        values: Vec<Value>,
    },
    /// The row behind the ops just before it, as [`LoggedOp::Row`], whose values an earlier record holds
    /// inline (see the module docs, "Rows written once"). Appended last.
    CitedRow {
        /// How many of the reads and writes just before it the row is behind.
        ops: u32,
        /// The sequence number of the record holding the values.
        record: u64,
        /// Which of that record's inline rows ([`CompactOp::Row`], [`CompactOp::PackedRow`],
        /// [`CompactOp::RowOfParams`]) it is, counting from 0.
        row: u32,
    },
    /// A statement run's values, as [`LoggedOp::Run`], whose column names a [`LogRecord::Columns`] record
    /// holds: a statement's columns are the same run after run. Appended last.
    RunCitingColumns {
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
        /// Its parameters.
        params: Vec<Value>,
        /// The sequence number of the [`LogRecord::Columns`] record naming its rows' columns.
        columns: u64,
    },
    /// The row behind the ops just before it, as [`LoggedOp::Row`], with some of its values packed: as
    /// parameters of the run it belongs to, or as integers (see the module docs). An inline row, like
    /// [`CompactOp::Row`]. Appended last.
    PackedRow {
        /// How many of the reads and writes just before it the row is behind.
        ops: u32,
        /// One value per column.
        values: Vec<RowValue>,
    },
    /// A statement run's values, as [`LoggedOp::Run`], with some of its parameters packed: as values of
    /// the row before it, or as integers (see the module docs). Appended last.
    PackedRun {
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
        /// Its parameters.
        params: Vec<ParamValue>,
        /// The sequence number of the [`LogRecord::Columns`] record naming its rows' columns; none when it
        /// has none.
        columns: Option<u64>,
    },
    /// The row behind the ops just before it, as [`LoggedOp::Row`], whose values are the parameters of the
    /// run it belongs to, in order. An inline row, like [`CompactOp::Row`]. Appended last.
    RowOfParams {
        /// How many of the reads and writes just before it the row is behind.
        ops: u32,
    },
    /// A [`CompactOp::Read`] whose key is the first `params` parameters of its run, joined (see the module
    /// docs). Appended last.
    ReadOfParams {
        /// Index into [`CompactOps::namespaces`].
        ns: u32,
        /// How many of the run's parameters make the key.
        params: u32,
        /// The version it returned.
        observed: Observed,
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
    },
    /// A [`CompactOp::Write`] whose key is the first `params` parameters of its run, joined. Appended last.
    WriteOfParams {
        /// Index into [`CompactOps::namespaces`].
        ns: u32,
        /// How many of the run's parameters make the key.
        params: u32,
        /// The identity of the new version.
        write: WriteId,
        /// Index into [`CompactOps::statements`].
        stmt: Option<u32>,
    },
}

/// Ops with the tables their indices refer to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactOps {
    /// The ops, in order.
    pub ops: Vec<CompactOp>,
    /// The transaction's statement list: for each, the sequence number of the [`LogRecord::Statement`]
    /// record that holds its text.
    pub statements: Vec<u64>,
    /// The namespaces the ops cite: for each, the sequence number of its [`LogRecord::Namespace`] record.
    pub namespaces: Vec<u64>,
}

/// A [`LoggedTxn`] in the compact encoding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactTxn {
    /// Unique within the history.
    pub id: TxnId,
    /// The session that ran it.
    pub session: SessionId,
    /// Its position within the session, counting from 0.
    pub seq: u64,
    /// Its ops and statements.
    pub ops: CompactOps,
    /// When it started, in nanoseconds since the Unix epoch, by the collector's clock.
    pub start_ns: Option<u64>,
    /// The collector whose clock took the timestamps.
    pub collector: CollectorId,
    /// Whether this is a fence transaction.
    pub fence: bool,
}

/// A text the writer must define before the record that cites it: a statement or a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NewText {
    /// A statement text.
    Statement(String),
    /// A namespace name.
    Namespace(String),
    /// Not a text: the mark that the writer starts a new table of rows ([`LogRecord::RowsForgotten`]).
    ForgetRows,
    /// Not a text: the mark that the writer starts a new table of texts ([`LogRecord::TextsForgotten`]).
    ForgetTexts,
    /// The column names of a statement run's rows.
    Columns(Vec<String>),
}

impl NewText {
    /// The definition record.
    pub fn record(self) -> LogRecord {
        match self {
            NewText::Statement(text) => LogRecord::Statement { text },
            NewText::Namespace(name) => LogRecord::Namespace { name },
            NewText::ForgetRows => LogRecord::RowsForgotten,
            NewText::ForgetTexts => LogRecord::TextsForgotten,
            NewText::Columns(names) => LogRecord::Columns { names },
        }
    }
}

/// The sequence number a record cites `text` by: `known`, where the writer's table has it; else its place
/// among the definitions this record appends first (`new`, numbered from `next_seq`), added if missing,
/// after the mark of a new table of texts when `mark` says the table has not had it yet.
fn cite(known: Option<u64>, text: NewText, new: &mut Vec<NewText>, next_seq: u64, mark: bool) -> u64 {
    if let Some(seq) = known {
        return seq;
    }
    if mark && !new.contains(&NewText::ForgetTexts) {
        new.push(NewText::ForgetTexts);
    }
    let at = new.iter().position(|n| *n == text).unwrap_or_else(|| {
        new.push(text);
        new.len() - 1
    });
    next_seq + at as u64
}

/// The writer's side: which texts this open of the log has defined, and at which sequence number; which
/// rows it can cite, and where they are.
#[derive(Debug, Default)]
pub struct TextTable {
    statements: Table<String, u64>,
    namespaces: Table<String, u64>,
    columns: Table<Vec<String>, u64>,
    bytes: usize,
    /// Rows written inline since the last [`LogRecord::RowsForgotten`]: the record and the place in it.
    rows: Table<Vec<Value>, (u64, u32)>,
    /// What `rows` holds, by [`row_bytes`].
    row_bytes: usize,
    /// Whether the table started over ([`TextTable::start_over`]) and has not yet marked that in the log
    /// ([`LogRecord::TextsForgotten`]): its first definition must come after the mark.
    forget_texts: bool,
    /// Whether this table's [`LogRecord::RowsForgotten`] is in the log: rows are remembered only after it.
    rows_started: bool,
    /// The rows the record being appended holds inline and worth citing, with their places: remembered
    /// once it is in the engine ([`TextTable::appended`]).
    unappended_rows: Vec<(Vec<Value>, u32)>,
}

impl TextTable {
    /// Empties the table (when it is full, and at a cut): texts are defined again at their next use, after
    /// a [`LogRecord::TextsForgotten`] mark, so that nothing after the mark cites a definition before it.
    pub fn start_over(&mut self) {
        *self = TextTable { forget_texts: true, ..TextTable::default() };
    }

    /// Encodes `ops` and `statements` compactly. Texts this table has not defined yet get the sequence
    /// numbers from `next_seq` on, in the order of `new`, where the caller must append their definitions
    /// (before the record that cites them) and then call [`TextTable::defined`] for each.
    pub fn encode(
        &mut self,
        ops: Vec<LoggedOp>,
        statements: Vec<String>,
        next_seq: u64,
        new: &mut Vec<NewText>,
    ) -> CompactOps {
        if self.bytes > TEXT_TABLE_BYTES {
            // Start over rather than grow without bound; texts are defined again at their next use, after
            // the mark that tells the reader to forget the old definitions.
            self.start_over();
        }
        if self.row_bytes > ROW_TABLE_BYTES {
            self.rows.clear();
            self.row_bytes = 0;
            self.rows_started = false;
        }
        self.unappended_rows.clear();
        let seq_of = |text: String, is_statement: bool, new: &mut Vec<NewText>| {
            let table = if is_statement { &self.statements } else { &self.namespaces };
            let known = table.get(&text).copied();
            cite(
                known,
                if is_statement { NewText::Statement(text) } else { NewText::Namespace(text) },
                new,
                next_seq,
                self.forget_texts,
            )
        };
        let statements: Vec<u64> = statements.into_iter().map(|t| seq_of(t, true, new)).collect();
        let mut namespaces: Vec<u64> = Vec::new();
        let mut ns_index = |name: String, new: &mut Vec<NewText>| -> u32 {
            let seq = seq_of(name, false, new);
            match namespaces.iter().position(|&s| s == seq) {
                Some(i) => i as u32,
                None => {
                    namespaces.push(seq);
                    namespaces.len() as u32 - 1
                }
            }
        };
        let columns_seq = |columns: Vec<String>, new: &mut Vec<NewText>| {
            let known = self.columns.get(&columns).copied();
            cite(known, NewText::Columns(columns), new, next_seq, self.forget_texts)
        };
        let mut inline_rows = 0u32;
        // The last run's parameters (see `key_of_params`) and the last row's values.
        let mut run: Option<Held<RunForm>> = None;
        let mut row: Option<Held<(u32, RowForm)>> = None;
        // Whether the last run's parameters are all in this record (see `key_of_params`).
        let mut params_inline = false;
        let mut out: Vec<CompactOp> = Vec::with_capacity(ops.len());
        for op in ops {
            let last_params = run.as_ref().map_or(&[][..], |r| &r.values[..]);
            let compact = match op {
                LoggedOp::Read { key, observed, stmt } => {
                    let ns = ns_index(key.namespace, new);
                    match key_of_params(&key.bytes, last_params).filter(|_| params_inline) {
                        Some(params) => CompactOp::ReadOfParams { ns, params, observed, stmt },
                        None => CompactOp::Read { ns, key: key.bytes, observed, stmt },
                    }
                }
                LoggedOp::Write { key, write, stmt } => {
                    let ns = ns_index(key.namespace, new);
                    match key_of_params(&key.bytes, last_params).filter(|_| params_inline) {
                        Some(params) => CompactOp::WriteOfParams { ns, params, write, stmt },
                        None => CompactOp::Write { ns, key: key.bytes, write, stmt },
                    }
                }
                LoggedOp::Opaque { kind, stmt } => CompactOp::Opaque { kind, stmt },
                LoggedOp::Run { stmt, params, columns } => {
                    let columns = (!columns.is_empty()).then(|| columns_seq(columns, new));
                    let last_row = row.as_ref().map_or(&[][..], |r| &r.values[..]);
                    let packing = run_packing(&params, last_row);
                    params_inline = !packing
                        .as_deref()
                        .is_some_and(|p| p.iter().any(|p| matches!(p, Some(ParamValue::LastRow(_)))));
                    let held = Held { at: out.len(), values: params, form: (stmt, columns, packing) };
                    if let Some(done) = run.replace(held) {
                        done.put(&mut out, run_op);
                    }
                    HELD_PLACE
                }
                LoggedOp::Row { ops, values } => {
                    // A row too small to be worth citing is never in the table.
                    let worth = worth_citing(&values);
                    let form = match self.rows.get(&values).filter(|_| worth) {
                        Some(&(record, row)) => RowForm::Cited { record, row },
                        None => {
                            if worth {
                                if !self.rows_started && !new.contains(&NewText::ForgetRows) {
                                    new.push(NewText::ForgetRows);
                                }
                                self.unappended_rows.push((values.clone(), inline_rows));
                            }
                            inline_rows += 1;
                            RowForm::of(&values, last_params)
                        }
                    };
                    if let Some(done) = row.replace(Held { at: out.len(), values, form: (ops, form) }) {
                        done.put(&mut out, row_op);
                    }
                    HELD_PLACE
                }
            };
            out.push(compact);
        }
        if let Some(done) = run {
            done.put(&mut out, run_op);
        }
        if let Some(done) = row {
            done.put(&mut out, row_op);
        }
        let ops = out;
        CompactOps { ops, statements, namespaces }
    }

    /// Notes that the record last encoded went in as record `seq`: its inline rows can be cited from now
    /// on.
    pub fn appended(&mut self, seq: u64) {
        for (values, row) in self.unappended_rows.drain(..) {
            self.row_bytes += row_bytes(&values);
            self.rows.insert(values, (seq, row));
        }
    }

    /// Notes that the definition of `text` was appended as record `seq`.
    pub fn defined(&mut self, text: &NewText, seq: u64) {
        match text {
            NewText::Statement(t) => {
                self.bytes += t.len();
                self.statements.insert(t.clone(), seq);
            }
            NewText::Namespace(t) => {
                self.bytes += t.len();
                self.namespaces.insert(t.clone(), seq);
            }
            NewText::ForgetRows => self.rows_started = true,
            NewText::ForgetTexts => self.forget_texts = false,
            NewText::Columns(names) => {
                self.bytes += names.iter().map(|n| n.len() + 1).sum::<usize>();
                self.columns.insert(names.clone(), seq);
            }
        }
    }
}

/// The reader's side: turns compact records back into the records the proxy appended, from the
/// definitions read so far. Feed it every record from the first, in sequence order.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Resolver {
    statements: Table<u64, String>,
    namespaces: Table<u64, String>,
    columns: Table<u64, Vec<String>>,
    /// The rows the writer can cite: by record and place among its inline rows.
    rows: Table<(u64, u32), Vec<Value>>,
    /// Whether records were skipped ([`Resolver::after_hole`]).
    after_hole: bool,
    /// Rows, and runs' parameters, whose values were in skipped records, left out.
    values_lost: u64,
}

impl Resolver {
    /// A resolver that has read no definitions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes that records were skipped (a stretch lost in transit): from now on a row citing a record the
    /// reader never saw is left out, and counted ([`Resolver::values_lost`]), rather than making its whole
    /// record an error; so are the run parameters and row values packed against such a row. Values never
    /// decide a verdict, so the transaction is kept without them.
    pub fn after_hole(&mut self) {
        self.after_hole = true;
    }

    /// How many definitions (statement texts, namespaces, column lists) it holds: those since the writer's
    /// table last started over, and what earlier runs of the log left.
    pub fn definitions(&self) -> usize {
        self.statements.len() + self.namespaces.len() + self.columns.len()
    }

    /// Rows left out, and runs kept without their parameters, because their values were in skipped records.
    pub fn values_lost(&self) -> u64 {
        self.values_lost
    }

    /// Takes record `seq` and returns it as the proxy appended it: a definition is kept and yields nothing;
    /// a compact record comes back as its [`LogRecord::Intent`], [`LogRecord::Finished`] or
    /// [`LogRecord::LateOps`]; any other record as it is. A citation of a text not defined earlier is an
    /// error naming `seq`.
    pub fn resolve(&mut self, seq: u64, record: LogRecord) -> Result<Option<LogRecord>, LogError> {
        Ok(Some(match record {
            LogRecord::Statement { text } => {
                self.statements.insert(seq, text);
                return Ok(None);
            }
            LogRecord::Namespace { name } => {
                self.namespaces.insert(seq, name);
                return Ok(None);
            }
            LogRecord::RowsForgotten => {
                self.rows.clear();
                return Ok(None);
            }
            LogRecord::TextsForgotten => {
                // Nothing after the mark cites a definition before it: the writer's table started over.
                self.statements = Table::default();
                self.namespaces = Table::default();
                self.columns = Table::default();
                return Ok(None);
            }
            LogRecord::Columns { names } => {
                self.columns.insert(seq, names);
                return Ok(None);
            }
            LogRecord::CompactIntent(txn) => LogRecord::Intent(self.txn(seq, txn)?),
            LogRecord::CompactFinished { txn, outcome, commit_ns } => {
                LogRecord::Finished { txn: self.txn(seq, txn)?, outcome, commit_ns }
            }
            LogRecord::CompactLateOps { txn, ops } => {
                let (ops, statements) = self.ops(seq, ops)?;
                LogRecord::LateOps { txn, ops, statements }
            }
            other => other,
        }))
    }

    fn txn(&mut self, seq: u64, txn: CompactTxn) -> Result<LoggedTxn, LogError> {
        let (ops, statements) = self.ops(seq, txn.ops)?;
        Ok(LoggedTxn {
            id: txn.id,
            session: txn.session,
            seq: txn.seq,
            ops,
            statements,
            start_ns: txn.start_ns,
            collector: txn.collector,
            fence: txn.fence,
        })
    }

    fn ops(&mut self, seq: u64, compact: CompactOps) -> Result<(Vec<LoggedOp>, Vec<String>), LogError> {
        let statements = compact
            .statements
            .iter()
            .map(|&s| defined(&self.statements, seq, s, "statement"))
            .collect::<Result<Vec<_>, _>>()?;
        let namespaces = compact
            .namespaces
            .iter()
            .map(|&s| defined(&self.namespaces, seq, s, "namespace"))
            .collect::<Result<Vec<_>, _>>()?;
        let namespace = |ns: u32| {
            namespaces.get(ns as usize).cloned().ok_or_else(|| LogError::Inconsistent {
                seq,
                reason: format!("an op cites namespace {ns}, but the record lists {}", namespaces.len()),
            })
        };
        // A key made of the run's parameters. The writer names them only when they are all in the record,
        // so a hole never takes them: their absence is an inconsistency.
        let key_from = |count: u32, params: &Option<Vec<Value>>| {
            params.as_deref().and_then(|p| params_key(p, count)).ok_or_else(|| LogError::Inconsistent {
                seq,
                reason: format!(
                    "a key cites the first {count} parameters of its run, which it does not have"
                ),
            })
        };
        let mut inline_rows = 0u32;
        // What the writer packed against: the last run's parameters and the last row's values. `None` once
        // a hole took them (a row citing the lost stretch, or packed against what it took).
        let mut last_params: Option<Vec<Value>> = Some(Vec::new());
        let mut last_row: Option<Vec<Value>> = Some(Vec::new());
        let mut ops = Vec::with_capacity(compact.ops.len());
        for op in compact.ops {
            let inline = match op {
                CompactOp::Read { ns, key, observed, stmt } => {
                    let key = KeyName { namespace: namespace(ns)?, bytes: key };
                    ops.push(LoggedOp::Read { key, observed, stmt });
                    continue;
                }
                CompactOp::Write { ns, key, write, stmt } => {
                    let key = KeyName { namespace: namespace(ns)?, bytes: key };
                    ops.push(LoggedOp::Write { key, write, stmt });
                    continue;
                }
                CompactOp::Opaque { kind, stmt } => {
                    ops.push(LoggedOp::Opaque { kind, stmt });
                    continue;
                }
                CompactOp::ReadOfParams { ns, params, observed, stmt } => {
                    let key = KeyName { namespace: namespace(ns)?, bytes: key_from(params, &last_params)? };
                    ops.push(LoggedOp::Read { key, observed, stmt });
                    continue;
                }
                CompactOp::WriteOfParams { ns, params, write, stmt } => {
                    let key = KeyName { namespace: namespace(ns)?, bytes: key_from(params, &last_params)? };
                    ops.push(LoggedOp::Write { key, write, stmt });
                    continue;
                }
                CompactOp::Run { stmt, params, columns } => {
                    last_params = Some(params.clone());
                    ops.push(LoggedOp::Run { stmt, params, columns });
                    continue;
                }
                CompactOp::RunCitingColumns { stmt, params, columns: cited } => {
                    let columns = defined(&self.columns, seq, cited, "column list")?;
                    last_params = Some(params.clone());
                    ops.push(LoggedOp::Run { stmt, params, columns });
                    continue;
                }
                CompactOp::PackedRun { stmt, params, columns: cited } => {
                    let columns = match cited {
                        Some(cited) => defined(&self.columns, seq, cited, "column list")?,
                        None => Vec::new(),
                    };
                    let params =
                        unpack(seq, params, last_row.as_deref(), ("a run cites value", "the row before it"))?;
                    if params.is_none() {
                        self.values_lost += 1;
                    }
                    last_params.clone_from(&params);
                    ops.push(LoggedOp::Run { stmt, params: params.unwrap_or_default(), columns });
                    continue;
                }
                CompactOp::CitedRow { record, row, .. }
                    if self.after_hole && !self.rows.contains_key(&(record, row)) =>
                {
                    self.values_lost += 1;
                    last_row = None;
                    continue;
                }
                CompactOp::CitedRow { ops: n, record, row } => {
                    let values = self.rows.get(&(record, row)).cloned().ok_or_else(|| LogError::Inconsistent {
                        seq,
                        reason: format!(
                            "cites row {row} of record {record}, which no record since the last RowsForgotten \
                             held"
                        ),
                    })?;
                    last_row = Some(values.clone());
                    ops.push(LoggedOp::Row { ops: n, values });
                    continue;
                }
                CompactOp::Row { ops: n, values } => (n, Some(values)),
                CompactOp::RowOfParams { ops: n } => match &last_params {
                    Some(params) if params.is_empty() => {
                        return Err(LogError::Inconsistent {
                            seq,
                            reason: "a row stands for its run's parameters, but the run has none".into(),
                        });
                    }
                    params => (n, params.clone()),
                },
                CompactOp::PackedRow { ops: n, values } => {
                    (n, unpack(seq, values, last_params.as_deref(), ("a row cites parameter", "its run"))?)
                }
            };
            // An inline row, remembered by the same rule as the writer's (see `TextTable::encode`), and
            // counted among the record's inline rows even when a hole took its values.
            inline_rows += 1;
            let (n, Some(values)) = inline else {
                self.values_lost += 1;
                last_row = None;
                continue;
            };
            if worth_citing(&values) {
                self.rows.insert((seq, inline_rows - 1), values.clone());
            }
            last_row = Some(values.clone());
            ops.push(LoggedOp::Row { ops: n, values });
        }
        Ok((ops, statements))
    }
}

/// The definition (a statement text, a namespace, a column list) that record `seq` cites as record `cited`,
/// from the reader's `table` of that kind: a citation of anything else is an inconsistency.
fn defined<T: Clone>(table: &Table<u64, T>, seq: u64, cited: u64, what: &str) -> Result<T, LogError> {
    table.get(&cited).cloned().ok_or_else(|| LogError::Inconsistent {
        seq,
        reason: format!(
            "cites record {cited} as a {what}, but no {what} was defined there earlier in the log"
        ),
    })
}

/// A packed value ([`RowValue`], [`ParamValue`]) as the reader expands it.
enum Packed {
    /// The value itself (an integer already turned back into its text).
    Value(Value),
    /// The value at this index of what it was packed against.
    Index(u32),
}

impl From<RowValue> for Packed {
    fn from(v: RowValue) -> Self {
        match v {
            RowValue::Own(v) => Packed::Value(v),
            RowValue::Int(n) => Packed::Value(Value::Text(n.to_string())),
            RowValue::Param(i) => Packed::Index(i),
        }
    }
}

impl From<ParamValue> for Packed {
    fn from(v: ParamValue) -> Self {
        match v {
            ParamValue::Own(v) => Packed::Value(v),
            ParamValue::Int(n) => Packed::Value(Value::Text(n.to_string())),
            ParamValue::LastRow(i) => Packed::Index(i),
        }
    }
}

/// `packed` (of record `seq`) expanded against `source`: a row's against its run's parameters, a run's
/// against the row before it. `None` when a hole took `source`. `cites` says what an index points at, for
/// the error when it points past the end: ("a row cites parameter", "its run").
fn unpack<P: Into<Packed>>(
    seq: u64,
    packed: Vec<P>,
    source: Option<&[Value]>,
    cites: (&str, &str),
) -> Result<Option<Vec<Value>>, LogError> {
    let mut out = Vec::with_capacity(packed.len());
    for p in packed {
        out.push(match p.into() {
            Packed::Value(v) => v,
            Packed::Index(i) => {
                let Some(source) = source else { return Ok(None) };
                source.get(i as usize).cloned().ok_or_else(|| LogError::Inconsistent {
                    seq,
                    reason: format!("{} {i} of {}, which has {}", cites.0, cites.1, source.len()),
                })?
            }
        });
    }
    Ok(Some(out))
}

/// Resolves records read in sequence order from the first ([`super::HistoryLog::tail`]`(0)`): what
/// [`Resolver::resolve`] gives for each, definitions left out. For tools and tests that look at the records
/// themselves; replay resolves on its own.
pub fn resolved<'a>(
    records: impl IntoIterator<Item = Result<(u64, LogRecord), LogError>> + 'a,
) -> impl Iterator<Item = Result<(u64, LogRecord), LogError>> + 'a {
    let mut resolver = Resolver::new();
    records.into_iter().filter_map(move |item| match item {
        Ok((seq, record)) => resolver.resolve(seq, record).transpose().map(|r| r.map(|r| (seq, r))),
        Err(e) => Some(Err(e)),
    })
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
