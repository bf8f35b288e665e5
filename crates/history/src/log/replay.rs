//! Replay: turns a stream of log records back into a [`History`], interning key names and statement texts.
//!
//! Replay is strict. A record that contradicts the ones before it (a second intent for one transaction, an
//! outcome with no intent, an op pointing at a statement that is not there) is an error that names the
//! record's sequence number, never a skipped record.
//!
//! An intent with no outcome replays as Indeterminate. That covers both the intents a [`LogRecord::Recovery`]
//! record lists (the previous run crashed before their outcome) and, when replaying a log that is still
//! being written, intents whose COMMIT is in flight right now.

use std::collections::HashMap;

use super::LogError;
use super::record::{LogRecord, LoggedTxn};
use crate::{History, LogGap, Outcome, StmtRef, Transaction, TxnId};

/// Builds a [`History`] from log records fed in sequence order. Usable incrementally: a verifier that
/// tails the log can feed records as they arrive and look at [`Replayer::history`] between rounds.
#[derive(Debug, Default)]
pub struct Replayer {
    history: History,
    /// Where each transaction seen so far sits in `history.transactions`.
    index: HashMap<TxnId, usize>,
    /// Intents still waiting for an outcome.
    pending: HashMap<TxnId, usize>,
    /// Statement texts already added, so a statement repeated by many transactions is stored once.
    statements: HashMap<String, StmtRef>,
    /// The sequence number the next record must have, once one was seen.
    next_seq: Option<u64>,
}

impl Replayer {
    /// An empty replayer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The history assembled so far. Pending intents show as Indeterminate.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Transactions whose intent has no outcome yet.
    pub fn pending(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.pending.keys().copied()
    }

    /// Consumes the replayer; pending intents stay Indeterminate.
    pub fn finish(self) -> History {
        self.history
    }

    /// Applies one record. Records must come in increasing sequence order; a hole in the sequence numbers is
    /// reported, since appends never leave one.
    pub fn apply(&mut self, seq: u64, record: LogRecord) -> Result<(), LogError> {
        if let Some(expected) = self.next_seq
            && seq != expected
        {
            return Err(inconsistent(seq, format!("expected record {expected} next; the log has a hole")));
        }
        self.next_seq = Some(seq.saturating_add(1));
        match record {
            LogRecord::Intent(txn) => {
                let at = self.add_txn(seq, txn, Outcome::Indeterminate, None)?;
                if let Some(&id) = self.history.transactions.get(at).map(|t| &t.id) {
                    self.pending.insert(id, at);
                }
            }
            LogRecord::Finished { txn, outcome, commit_ns } => {
                self.add_txn(seq, txn, outcome, commit_ns)?;
            }
            LogRecord::Outcome { txn, outcome, commit_ns } => {
                let at = self.pending.remove(&txn).ok_or_else(|| {
                    let why = if self.index.contains_key(&txn) {
                        format!("outcome for {txn}, which already has one")
                    } else {
                        format!("outcome for {txn}, which has no intent")
                    };
                    inconsistent(seq, why)
                })?;
                if let Some(t) = self.history.transactions.get_mut(at) {
                    t.outcome = outcome;
                    t.commit_ns = commit_ns;
                }
            }
            LogRecord::LateOps { txn, ops, statements } => {
                let &at = self.pending.get(&txn).ok_or_else(|| {
                    inconsistent(seq, format!("late ops for {txn}, which has no pending intent"))
                })?;
                let Some(t) = self.history.transactions.get(at) else {
                    return Err(inconsistent(
                        seq,
                        format!("late ops for {txn}, which is not in the history"),
                    ));
                };
                let mut late = LoggedTxn::new(txn, t.session, t.seq);
                (late.ops, late.statements) = (ops, statements);
                let late = self.convert(seq, late, Outcome::Indeterminate, None)?;
                if let Some(t) = self.history.transactions.get_mut(at) {
                    t.ops.extend(late.ops);
                }
            }
            // The history has no place for session ends; session order is already in the transactions.
            LogRecord::SessionEnded { .. } => {}
            // The first horizon is when recording began; a later run's is not.
            LogRecord::Horizon { xid } => {
                self.history.horizon.get_or_insert(xid);
            }
            LogRecord::Recovery { indeterminate, gap, previous: _ } => {
                for txn in indeterminate {
                    // Already Indeterminate in the history; the record only promises no outcome will come.
                    if self.pending.remove(&txn).is_none() {
                        return Err(inconsistent(
                            seq,
                            format!("recovery lists {txn} as pending, but it has no pending intent"),
                        ));
                    }
                }
                if gap {
                    let after_txns = self.history.transactions.len() as u64;
                    self.history.gaps.push(LogGap { after_txns });
                }
            }
        }
        Ok(())
    }

    fn add_txn(
        &mut self,
        seq: u64,
        logged: LoggedTxn,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<usize, LogError> {
        if self.index.contains_key(&logged.id) {
            return Err(inconsistent(seq, format!("a second record for {}", logged.id)));
        }
        let txn = self.convert(seq, logged, outcome, commit_ns)?;
        let at = self.history.transactions.len();
        self.index.insert(txn.id, at);
        self.history.transactions.push(txn);
        Ok(at)
    }

    /// The transaction in the model, its keys and statements interned into the history, and its unchecked
    /// statements added to the history's list.
    fn convert(
        &mut self,
        seq: u64,
        logged: LoggedTxn,
        outcome: Outcome,
        commit_ns: Option<u64>,
    ) -> Result<Transaction, LogError> {
        // The key table moves out while statements are interned into the same history.
        let mut keys = std::mem::take(&mut self.history.keys);
        let converted =
            logged.into_transaction(outcome, commit_ns, &mut keys, |text| self.intern_statement(text));
        self.history.keys = keys;
        let (txn, unchecked) = converted.map_err(|e| inconsistent(seq, e.to_string()))?;
        self.history.unchecked.extend(unchecked);
        Ok(txn)
    }

    fn intern_statement(&mut self, text: &str) -> StmtRef {
        if let Some(&r) = self.statements.get(text) {
            return r;
        }
        let r = self.history.add_statement(text);
        self.statements.insert(text.to_owned(), r);
        r
    }
}

fn inconsistent(seq: u64, reason: String) -> LogError {
    LogError::Inconsistent { seq, reason }
}
