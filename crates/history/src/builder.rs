//! A compact way to write histories in tests.
//!
//! Keys are named by strings, and a write id is a plain number that also serves as the written value, so a
//! three-transaction history takes three lines:
//!
//! ```
//! use history::HistoryBuilder;
//!
//! let h = HistoryBuilder::new()
//!     .txn(1, |t| t.read_init("x").write("x", 1))
//!     .txn(2, |t| t.read_init("x").write("x", 2))
//!     .txn(1, |t| t.read("x", 2))
//!     .build();
//! assert_eq!(h.transactions.len(), 3);
//! ```

use crate::model::{
    History, KeyTable, Observed, Op, Outcome, SessionId, StmtRef, Transaction, TxnId, WriteId,
};

/// Builds a [`History`] transaction by transaction. Transaction ids count up from 1 in the order added;
/// each transaction goes to the end of its session.
#[derive(Debug, Default)]
pub struct HistoryBuilder {
    history: History,
    /// How many transactions each session has so far: the next one's place in it.
    session_lengths: std::collections::HashMap<SessionId, u64>,
}

/// Builds the ops of one transaction; see [`HistoryBuilder::txn`].
#[derive(Debug)]
pub struct TxnBuilder<'a> {
    keys: &'a mut KeyTable,
    txn: Transaction,
    stmt: Option<StmtRef>,
}

impl HistoryBuilder {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a committed transaction to `session`, with the ops that `f` adds.
    pub fn txn(
        self,
        session: u64,
        f: impl for<'b, 'k> FnOnce(&'b mut TxnBuilder<'k>) -> &'b mut TxnBuilder<'k>,
    ) -> Self {
        self.txn_with(session, Outcome::Committed, f)
    }

    /// Adds an aborted transaction to `session`.
    pub fn aborted(
        self,
        session: u64,
        f: impl for<'b, 'k> FnOnce(&'b mut TxnBuilder<'k>) -> &'b mut TxnBuilder<'k>,
    ) -> Self {
        self.txn_with(session, Outcome::Aborted, f)
    }

    /// Adds a transaction whose outcome is unknown to `session`.
    pub fn indeterminate(
        self,
        session: u64,
        f: impl for<'b, 'k> FnOnce(&'b mut TxnBuilder<'k>) -> &'b mut TxnBuilder<'k>,
    ) -> Self {
        self.txn_with(session, Outcome::Indeterminate, f)
    }

    /// Adds a transaction with the given outcome to `session`.
    pub fn txn_with(
        mut self,
        session: u64,
        outcome: Outcome,
        f: impl for<'b, 'k> FnOnce(&'b mut TxnBuilder<'k>) -> &'b mut TxnBuilder<'k>,
    ) -> Self {
        let id = TxnId(self.history.transactions.len() as u64 + 1);
        let session = SessionId(session);
        let next = self.session_lengths.entry(session).or_default();
        let seq = *next;
        *next += 1;
        let mut txn = Transaction::new(id, session, seq);
        txn.outcome = outcome;
        let mut builder = TxnBuilder { keys: &mut self.history.keys, txn, stmt: None };
        f(&mut builder);
        let txn = builder.txn;
        self.history.transactions.push(txn);
        self
    }

    /// Sets the start and commit timestamps (in nanoseconds) of the transaction added last.
    pub fn at(mut self, start_ns: u64, commit_ns: u64) -> Self {
        if let Some(txn) = self.history.transactions.last_mut() {
            txn.start_ns = Some(start_ns);
            txn.commit_ns = Some(commit_ns);
        }
        self
    }

    /// Marks the transaction added last as a fence.
    pub fn fence(mut self) -> Self {
        if let Some(txn) = self.history.transactions.last_mut() {
            txn.fence = true;
        }
        self
    }

    /// Attaches a statement text to the ops added after this call in later transactions.
    pub fn statement(mut self, text: &str) -> (Self, StmtRef) {
        let r = self.history.add_statement(text);
        (self, r)
    }

    /// The finished history.
    pub fn build(self) -> History {
        self.history
    }
}

impl TxnBuilder<'_> {
    /// Reads `key` and observes the version with write id `write`.
    pub fn read(&mut self, key: &str, write: u64) -> &mut Self {
        self.push_read(key, Observed::Version(WriteId(write)))
    }

    /// Reads `key` and observes its pre-history (initial) version.
    pub fn read_init(&mut self, key: &str) -> &mut Self {
        self.push_read(key, Observed::PreHistory(0))
    }

    /// Reads `key` and finds no row.
    pub fn read_absent(&mut self, key: &str) -> &mut Self {
        self.push_read(key, Observed::Absent)
    }

    /// Writes a new version of `key` with write id `write`.
    pub fn write(&mut self, key: &str, write: u64) -> &mut Self {
        let key = self.keys.intern_str(key);
        self.txn.ops.push(Op::Write { key, write: WriteId(write), stmt: self.stmt });
        self
    }

    /// Tags the ops added after this call with a statement.
    pub fn stmt(&mut self, stmt: StmtRef) -> &mut Self {
        self.stmt = Some(stmt);
        self
    }

    fn push_read(&mut self, key: &str, observed: Observed) -> &mut Self {
        let key = self.keys.intern_str(key);
        self.txn.ops.push(Op::Read { key, observed, stmt: self.stmt });
        self
    }
}
