//! Importer for the text histories of PolySI and IsoVista: one op a line, `r(key,value,session,txn)` or
//! `w(key,value,session,txn)`.
//!
//! How lines map to the model:
//! - Ops join their transaction in file order; transaction ids are global, so a transaction's lines need
//!   not be adjacent (PolySI's loader reads them the same way). A transaction belongs to the session of its
//!   first line; a later line that puts it in another session is an error. Within a session, transactions
//!   are in order of first appearance, which is session order. The PolySI txn number is the [`TxnId`].
//! - Key `k` becomes the key named by the decimal text of `k`, in namespace `""`.
//! - Values are unique per key in these histories, so each `(key, value)` pair is interned to its own
//!   [`WriteId`] (1, 2, … in order of first appearance). Value 0 is the initial value: a read of it
//!   observed [`Observed::PreHistory`]`(0)`.
//! - IsoVista writes that initial value down as a transaction: its `TextHistorySerializer` sorts
//!   transactions by id, and its collectors add txn 0 in session 0 (IsoVista's own sessions and txns
//!   count from 1) writing 0 to every key, so the file opens with `w(k,0,0,0)` lines. When the first line
//!   writes value 0, its transaction is taken for that *initial transaction*: its writes are the state
//!   before the history, so it becomes no [`Transaction`], and reads of 0 stay pre-history reads. It may
//!   only write value 0, its lines must all come before any other transaction's, and no other
//!   transaction may share its session. A write of value 0 anywhere else is an error: nothing could tell
//!   a read of it from a read of the initial state.
//! - Txn number -1 marks an aborted transaction (IsoVista). Its lines carry no txn id, so each run of
//!   adjacent -1 lines of one session becomes one Aborted transaction, with a fresh id above every id in
//!   the file. Only its writes matter to a verifier (reads of them are aborted reads, G1a).
//!
//! Errors name the line, counting from 1.

use std::collections::HashMap;

use thiserror::Error;

use crate::model::{History, Key, Observed, Op, Outcome, SessionId, Transaction, TxnId, WriteId};

/// A PolySI text history could not be imported.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("PolySI history, line {line}: {message}")]
pub struct PolysiError {
    /// The line, counting from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn parse_line(text: &str) -> Result<(bool, u64, u64, u64, i64), String> {
    let text = text.trim();
    let is_read = match text.as_bytes().first() {
        Some(b'r') => true,
        Some(b'w') => false,
        _ => return Err(format!("expected r(key,value,session,txn) or w(...), found \"{}\"", excerpt(text))),
    };
    let inner = text[1..]
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected r(key,value,session,txn) or w(...), found \"{}\"", excerpt(text)))?;
    let fields: Vec<&str> = inner.split(',').collect();
    if fields.len() != 4 {
        return Err(format!("expected 4 comma-separated numbers, found {}", fields.len()));
    }
    let num = |name: &str, s: &str| -> Result<u64, String> {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{name} \"{}\" is not a non-negative integer", excerpt(s)));
        }
        s.parse().map_err(|_| format!("{name} {s} does not fit 64 bits"))
    };
    let txn_text = fields[3].trim();
    let txn = if txn_text == "-1" {
        -1
    } else {
        let t = num("txn", txn_text)?;
        i64::try_from(t).map_err(|_| format!("txn {t} does not fit 63 bits"))?
    };
    Ok((is_read, num("key", fields[0])?, num("value", fields[1])?, num("session", fields[2])?, txn))
}

fn excerpt(s: &str) -> String {
    s.chars().take(60).collect()
}

/// Imports a PolySI/IsoVista text history from raw bytes, which must be UTF-8.
pub fn import_bytes(data: &[u8]) -> Result<History, PolysiError> {
    match std::str::from_utf8(data) {
        Ok(s) => import(s),
        Err(e) => {
            let line = data[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            Err(PolysiError { line, message: format!("not UTF-8 (byte offset {})", e.valid_up_to()) })
        }
    }
}

/// Imports a PolySI/IsoVista text history.
pub fn import(text: &str) -> Result<History, PolysiError> {
    let mut history = History::default();
    let mut keys: HashMap<u64, Key> = HashMap::new();
    let mut writes: HashMap<(u64, u64), WriteId> = HashMap::new();
    // Transaction number -> index in history.transactions.
    let mut txn_index: HashMap<i64, usize> = HashMap::new();
    let mut next_seq: HashMap<u64, u64> = HashMap::new();
    let mut aborted: Vec<usize> = Vec::new();
    // The aborted transaction the previous line went to, if the previous line was aborted.
    let mut open_aborted: Option<(u64, usize)> = None;
    let mut max_id: i64 = -1;
    // IsoVista's initial transaction, (txn, session), once line 1 turned out to be one, and whether its
    // lines are still the only ones seen.
    let mut initial: Option<(i64, u64)> = None;
    let mut initial_open = false;
    let mut lines = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        lines = line;
        if raw.trim().is_empty() {
            return Err(PolysiError { line, message: "an empty line".to_owned() });
        }
        let (is_read, k, value, session, txn) =
            parse_line(raw).map_err(|message| PolysiError { line, message })?;
        let key = *keys.entry(k).or_insert_with(|| history.keys.intern_str(&k.to_string()));
        if line == 1 && !is_read && value == 0 && txn >= 0 {
            initial = Some((txn, session));
            initial_open = true;
        }
        if let Some((initial_txn, initial_session)) = initial {
            let error = |message: String| PolysiError { line, message };
            if txn == initial_txn {
                if !initial_open {
                    return Err(error(format!(
                        "txn {txn} is the initial transaction (it writes value 0 on line 1), so all of its \
                         lines must come before any other transaction's"
                    )));
                }
                if session != initial_session {
                    return Err(error(format!(
                        "txn {txn} is in session {initial_session}, but this line puts it in session {session}"
                    )));
                }
                if is_read || value != 0 {
                    let op = if is_read { "reads" } else { "writes" };
                    return Err(error(format!(
                        "txn {txn} is the initial transaction (it writes value 0 on line 1), which may only \
                         write value 0, but this line {op} value {value} of key {k}"
                    )));
                }
                // The initial state: key `k` holds 0 before the history, which is what a read of 0 observes.
                continue;
            }
            initial_open = false;
            if session == initial_session {
                return Err(error(format!(
                    "session {session} holds the initial transaction (txn {initial_txn}, which writes value 0 \
                     on line 1), and the initial transaction must be alone in its session"
                )));
            }
        }
        let new_txn = |history: &mut History, next_seq: &mut HashMap<u64, u64>, id: u64| {
            let seq = next_seq.entry(session).or_insert(0);
            let mut t = Transaction::new(TxnId(id), SessionId(session), *seq);
            *seq += 1;
            if txn < 0 {
                t.outcome = Outcome::Aborted;
            }
            history.transactions.push(t);
            history.transactions.len() - 1
        };
        let index = if txn < 0 {
            match open_aborted {
                Some((s, idx)) if s == session => idx,
                _ => {
                    let idx = new_txn(&mut history, &mut next_seq, 0);
                    aborted.push(idx);
                    idx
                }
            }
        } else {
            max_id = max_id.max(txn);
            match txn_index.get(&txn) {
                Some(&idx) => {
                    let owner = history.transactions[idx].session.0;
                    if owner != session {
                        return Err(PolysiError {
                            line,
                            message: format!(
                                "txn {txn} is in session {owner}, but this line puts it in session {session}"
                            ),
                        });
                    }
                    idx
                }
                None => {
                    let idx = new_txn(&mut history, &mut next_seq, txn as u64);
                    txn_index.insert(txn, idx);
                    idx
                }
            }
        };
        open_aborted = (txn < 0).then_some((session, index));
        let next_write = WriteId(writes.len() as u64 + 1);
        let op = if is_read {
            let observed = if value == 0 {
                Observed::PreHistory(0)
            } else {
                Observed::Version(*writes.entry((k, value)).or_insert(next_write))
            };
            Op::Read { key, observed, stmt: None }
        } else {
            if value == 0 {
                return Err(PolysiError {
                    line,
                    message: format!(
                        "a write of value 0 to key {k}; value 0 is the initial value, which only the initial \
                         transaction may write: the file's first transaction, alone in its session, writing \
                         only value 0 before any other transaction's line (as IsoVista writes it)"
                    ),
                });
            }
            Op::Write { key, write: *writes.entry((k, value)).or_insert(next_write), stmt: None }
        };
        history.transactions[index].ops.push(op);
    }
    if lines == 0 {
        return Err(PolysiError { line: 1, message: "the file is empty".to_owned() });
    }
    // Aborted transactions get ids above every id in the file, in order of appearance.
    // In u64: the largest id i64 holds is a valid id, and one past it is not an i64.
    let base = u64::try_from(max_id).map_or(0, |m| m + 1);
    for (n, idx) in aborted.into_iter().enumerate() {
        history.transactions[idx].id = TxnId(base + n as u64);
    }
    Ok(history)
}
