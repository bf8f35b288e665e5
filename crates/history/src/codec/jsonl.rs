//! JSON Lines: a history a person can read, grep and diff, with keys shown by name.
//!
//! Each line is a JSON object with one field, which says what the line is:
//!
//! ```text
//! {"krait_history":{"version":1,"statements":1,"keys":2,"transactions":2,"gaps":0}}
//! {"stmt":"UPDATE accounts SET balance = balance - 10 WHERE id = 1"}
//! {"key":{"name":"accounts:1","ns":"accounts","utf8":"1"}}
//! {"key":{"name":"b8873aa82ef6c6d3","ns":"","hex":"b8873aa82ef6c6d3"}}
//! {"txn":{"id":7,"session":1,"seq":0,"outcome":"committed","ops":[{"r":"accounts:1","pre":0},{"w":"accounts:1","v":12,"stmt":0}]}}
//! {"gap":{"after_txns":2}}
//! ```
//!
//! - The header comes first and announces how many of each line follow, so that a truncated file is an
//!   error rather than a shorter history.
//! - Statement and key lines come before the transactions; a key's index is its position among the key
//!   lines. Its `name` is what ops use: the key's usual display form, with `#index` appended where two keys
//!   would otherwise display alike.
//! - An op is `{"r": key, ...}` with exactly one of `"v"` (a write id), `"pre"` (a pre-history tag),
//!   `"unrecorded"` (the tag of a version no recorded transaction wrote) or `"absent": true`; or
//!   `{"w": key, "v": write id}`. Either may carry `"stmt"`, a statement index.
//! - A transaction may carry `"isolation"`, the level it asked for (`"read-committed"`, `"repeatable-read"`,
//!   …).
//!
//! Errors name the line (counting from 1) and, for malformed JSON, the column.

use std::collections::HashMap;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::native::{InvalidHistory, check_references};
use crate::model::{
    CollectorId, History, IsolationLevel, Key, KeyName, KeyTable, LogGap, Observed, Op, Outcome,
    RecordingHorizon, SessionId, StmtRef, Transaction, TxnId, WriteId,
};

/// The version of the line format this build writes and reads.
pub const VERSION: u32 = 1;

/// A JSON Lines history could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("JSON Lines history, line {line}{}: {message}", at_column(*column))]
pub struct JsonlError {
    /// The line, counting from 1.
    pub line: usize,
    /// The column, counting from 1, where the JSON parser knows it.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

fn at_column(column: Option<usize>) -> String {
    column.map(|c| format!(", column {c}")).unwrap_or_default()
}

impl JsonlError {
    fn at(line: usize, message: impl Into<String>) -> Self {
        JsonlError { line, column: None, message: message.into() }
    }
}

/// A JSON Lines history could not be written.
#[derive(Debug, Error)]
pub enum JsonlWriteError {
    /// The history refers to keys or statements it does not have.
    #[error(transparent)]
    Invalid(#[from] InvalidHistory),
    /// The writer failed.
    #[error("cannot write the history: {0}")]
    Io(#[from] io::Error),
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    KraitHistory(Header),
    Stmt(String),
    Key(KeyLine),
    Txn(TxnLine),
    Gap(LogGap),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    version: u32,
    statements: u64,
    keys: u64,
    transactions: u64,
    gaps: u64,
    /// The recording horizon, when the collector noted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    horizon: Option<HorizonLine>,
}

/// The horizon in a header: an object with the whole snapshot, or (files written before it) a bare xmin.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum HorizonLine {
    Xmin(u64),
    Snapshot(RecordingHorizon),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyLine {
    name: String,
    ns: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    utf8: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_default_collector(c: &CollectorId) -> bool {
    c.0 == 0
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TxnLine {
    id: u64,
    session: u64,
    seq: u64,
    outcome: Outcome,
    #[serde(default, skip_serializing_if = "is_false")]
    fence: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    commit_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "is_default_collector")]
    collector: CollectorId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    isolation: Option<IsolationLevel>,
    ops: Vec<OpLine>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct OpLine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    w: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    v: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pre: Option<u64>,
    #[serde(default, skip_serializing_if = "is_false")]
    absent: bool,
    /// A version of an unrecorded writer, with its tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unrecorded: Option<u64>,
    /// A version no recorded transaction wrote, under `[record] exclusive`, with its tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    foreign: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stmt: Option<u32>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

/// The names ops use for keys: the display form where it is unique and holds no `#`, else the display form
/// followed by `#index`. Suffixed labels end in `#digits` that no other label shares, so all are unique.
fn key_labels(keys: &KeyTable) -> Vec<String> {
    let shown: Vec<String> = keys.names().iter().map(ToString::to_string).collect();
    let mut counts: HashMap<&str, usize> = HashMap::with_capacity(shown.len());
    for s in &shown {
        *counts.entry(s.as_str()).or_default() += 1;
    }
    shown
        .iter()
        .enumerate()
        .map(|(i, s)| if counts[s.as_str()] > 1 || s.contains('#') { format!("{s}#{i}") } else { s.clone() })
        .collect()
}

/// Writes a history as JSON Lines.
pub fn encode(history: &History, out: &mut impl Write) -> Result<(), JsonlWriteError> {
    check_references(history)?;
    let mut out = io::BufWriter::new(out);
    let line = |l: &Line, out: &mut io::BufWriter<_>| -> io::Result<()> {
        serde_json::to_writer(&mut *out, l)?;
        out.write_all(b"\n")
    };
    let header = Header {
        version: VERSION,
        statements: history.statements.len() as u64,
        keys: history.keys.len() as u64,
        transactions: history.transactions.len() as u64,
        gaps: history.gaps.len() as u64,
        horizon: history.horizon.clone().map(HorizonLine::Snapshot),
    };
    line(&Line::KraitHistory(header), &mut out)?;
    for s in &history.statements {
        line(&Line::Stmt(s.clone()), &mut out)?;
    }
    let labels = key_labels(&history.keys);
    for (name, label) in history.keys.names().iter().zip(&labels) {
        let (utf8, hex) = match std::str::from_utf8(&name.bytes) {
            Ok(s) => (Some(s.to_owned()), None),
            Err(_) => (None, Some(hex(&name.bytes))),
        };
        line(&Line::Key(KeyLine { name: label.clone(), ns: name.namespace.clone(), utf8, hex }), &mut out)?;
    }
    for txn in &history.transactions {
        let ops = txn
            .ops
            .iter()
            .map(|op| {
                let label = labels[op.key().0 as usize].clone();
                let stmt = op.stmt().map(|s| s.0);
                match *op {
                    Op::Write { write, .. } => {
                        OpLine { w: Some(label), v: Some(write.0), stmt, ..Default::default() }
                    }
                    Op::Read { observed, .. } => {
                        let mut o = OpLine { r: Some(label), stmt, ..Default::default() };
                        match observed {
                            Observed::Version(w) => o.v = Some(w.0),
                            Observed::PreHistory(t) => o.pre = Some(t),
                            Observed::Absent => o.absent = true,
                            Observed::Unrecorded(t) => o.unrecorded = Some(t),
                            Observed::Foreign(t) => o.foreign = Some(t),
                        }
                        o
                    }
                }
            })
            .collect();
        let t = TxnLine {
            id: txn.id.0,
            session: txn.session.0,
            seq: txn.seq,
            outcome: txn.outcome,
            fence: txn.fence,
            isolation: txn.isolation,
            start_ns: txn.start_ns,
            commit_ns: txn.commit_ns,
            collector: txn.collector,
            ops,
        };
        line(&Line::Txn(t), &mut out)?;
    }
    for gap in &history.gaps {
        line(&Line::Gap(*gap), &mut out)?;
    }
    out.flush()?;
    Ok(())
}

/// Writes a history as JSON Lines into a byte vector.
pub fn encode_to_vec(history: &History) -> Result<Vec<u8>, JsonlWriteError> {
    let mut out = Vec::new();
    encode(history, &mut out)?;
    Ok(out)
}

fn serde_error(line: usize, e: &serde_json::Error) -> JsonlError {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
    JsonlError { line, column: (e.column() > 0).then_some(e.column()), message }
}

/// Where the decoder is in the fixed order of line kinds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Stage {
    Statements,
    Keys,
    Transactions,
    Gaps,
}

/// Decodes a JSON Lines history from raw bytes, which must be UTF-8.
pub fn decode_bytes(data: &[u8]) -> Result<History, JsonlError> {
    match std::str::from_utf8(data) {
        Ok(s) => decode(s),
        Err(e) => {
            let line = data[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            Err(JsonlError::at(line, format!("not UTF-8 (byte offset {})", e.valid_up_to())))
        }
    }
}

/// Decodes a JSON Lines history. Errors name the line.
pub fn decode(text: &str) -> Result<History, JsonlError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (first_no, first) = lines.next().ok_or_else(|| JsonlError::at(1, "the file is empty"))?;
    let header = match serde_json::from_str::<Line>(first) {
        Ok(Line::KraitHistory(h)) => h,
        Ok(_) => return Err(JsonlError::at(first_no, "the first line must be the krait_history header")),
        Err(e) => return Err(serde_error(first_no, &e)),
    };
    if header.version != VERSION {
        return Err(JsonlError::at(
            first_no,
            format!("unsupported version {}; this build reads version {VERSION}", header.version),
        ));
    }
    let horizon = header.horizon.map(|h| match h {
        HorizonLine::Xmin(xmin) => RecordingHorizon::from_xmin(xmin),
        HorizonLine::Snapshot(h) => h,
    });
    let mut history = History { horizon, ..History::default() };
    let mut labels: HashMap<String, Key> = HashMap::new();
    let mut stage = Stage::Statements;
    let mut last_line = first_no;
    for (no, text) in lines {
        last_line = no;
        if text.trim().is_empty() {
            return Err(JsonlError::at(no, "an empty line"));
        }
        let line: Line = serde_json::from_str(text).map_err(|e| serde_error(no, &e))?;
        let this_stage = match &line {
            Line::KraitHistory(_) => return Err(JsonlError::at(no, "a second krait_history header")),
            Line::Stmt(_) => Stage::Statements,
            Line::Key(_) => Stage::Keys,
            Line::Txn(_) => Stage::Transactions,
            Line::Gap(_) => Stage::Gaps,
        };
        if this_stage < stage {
            return Err(JsonlError::at(
                no,
                format!(
                    "a {this_stage:?} line after the {stage:?} lines; the order is statements, keys, transactions, gaps"
                ),
            ));
        }
        stage = this_stage;
        match line {
            Line::KraitHistory(_) => {}
            Line::Stmt(s) => {
                if history.statements.len() as u64 >= header.statements {
                    return Err(JsonlError::at(no, "more statements than the header announced"));
                }
                history.statements.push(s);
            }
            Line::Key(k) => {
                if history.keys.len() as u64 >= header.keys {
                    return Err(JsonlError::at(no, "more keys than the header announced"));
                }
                let bytes = match (k.utf8, k.hex) {
                    (Some(s), None) => s.into_bytes(),
                    (None, Some(h)) => unhex(&h).ok_or_else(|| {
                        JsonlError::at(no, format!("\"{h}\" is not an even-length hex string"))
                    })?,
                    _ => return Err(JsonlError::at(no, "a key needs exactly one of \"utf8\" and \"hex\"")),
                };
                let before = history.keys.len();
                let key = history.keys.intern(KeyName { namespace: k.ns, bytes });
                if history.keys.len() == before {
                    return Err(JsonlError::at(no, format!("key \"{}\" repeats an earlier key", k.name)));
                }
                if labels.insert(k.name.clone(), key).is_some() {
                    return Err(JsonlError::at(no, format!("key name \"{}\" is used twice", k.name)));
                }
            }
            Line::Txn(t) => {
                check_count(no, "statements", history.statements.len(), header.statements)?;
                check_count(no, "keys", history.keys.len(), header.keys)?;
                if history.transactions.len() as u64 >= header.transactions {
                    return Err(JsonlError::at(no, "more transactions than the header announced"));
                }
                let txn = decode_txn(no, t, &labels, history.statements.len())?;
                history.transactions.push(txn);
            }
            Line::Gap(g) => {
                if history.gaps.len() as u64 >= header.gaps {
                    return Err(JsonlError::at(no, "more gaps than the header announced"));
                }
                history.gaps.push(g);
            }
        }
    }
    let end = last_line + 1;
    check_count(end, "statements", history.statements.len(), header.statements)?;
    check_count(end, "keys", history.keys.len(), header.keys)?;
    check_count(end, "transactions", history.transactions.len(), header.transactions)?;
    check_count(end, "gaps", history.gaps.len(), header.gaps)?;
    Ok(history)
}

fn check_count(line: usize, what: &str, got: usize, announced: u64) -> Result<(), JsonlError> {
    if got as u64 != announced {
        return Err(JsonlError::at(
            line,
            format!(
                "the header announced {announced} {what} but {got} came before this point (is the file truncated?)"
            ),
        ));
    }
    Ok(())
}

fn decode_txn(
    no: usize,
    t: TxnLine,
    labels: &HashMap<String, Key>,
    n_stmts: usize,
) -> Result<Transaction, JsonlError> {
    let mut ops = Vec::with_capacity(t.ops.len());
    for (i, o) in t.ops.into_iter().enumerate() {
        let bad = |msg: &str| JsonlError::at(no, format!("op {i} of transaction {}: {msg}", t.id));
        let key_of =
            |label: &str| labels.get(label).copied().ok_or_else(|| bad(&format!("unknown key \"{label}\"")));
        let stmt = match o.stmt {
            Some(s) if s as usize >= n_stmts => return Err(bad(&format!("statement {s} is not defined"))),
            s => s.map(StmtRef),
        };
        let op = match (o.r, o.w) {
            (None, Some(w)) => {
                if o.pre.is_some() || o.absent || o.unrecorded.is_some() || o.foreign.is_some() {
                    return Err(bad("a write takes only \"v\""));
                }
                let write = WriteId(o.v.ok_or_else(|| bad("a write needs \"v\", its write id"))?);
                Op::Write { key: key_of(&w)?, write, stmt }
            }
            (Some(r), None) => {
                let observed = match (o.v, o.pre, o.absent, o.unrecorded, o.foreign) {
                    (Some(v), None, false, None, None) => Observed::Version(WriteId(v)),
                    (None, Some(p), false, None, None) => Observed::PreHistory(p),
                    (None, None, true, None, None) => Observed::Absent,
                    (None, None, false, Some(u), None) => Observed::Unrecorded(u),
                    (None, None, false, None, Some(f)) => Observed::Foreign(f),
                    _ => {
                        return Err(bad(
                            "a read needs exactly one of \"v\", \"pre\", \"absent\", \"unrecorded\" and \"foreign\"",
                        ));
                    }
                };
                Op::Read { key: key_of(&r)?, observed, stmt }
            }
            _ => return Err(bad("an op needs exactly one of \"r\" and \"w\"")),
        };
        ops.push(op);
    }
    Ok(Transaction {
        id: TxnId(t.id),
        session: SessionId(t.session),
        seq: t.seq,
        ops,
        outcome: t.outcome,
        start_ns: t.start_ns,
        commit_ns: t.commit_ns,
        collector: t.collector,
        fence: t.fence,
        isolation: t.isolation,
        values: None,
    })
}
