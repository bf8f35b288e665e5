//! One transaction's ops as its replies reveal them: row reads and writes, and the statement parts that
//! could not be mapped. They are collected beside the transaction's statement texts
//! ([`crate::machine::SessionMachine`] owns both), so a write-ahead intent and an outcome carry the ops of
//! exactly the statements they carry.
//!
//! Rows can arrive before their transaction is known to exist (a statement after `COMMIT` in the same query
//! string opens a new transaction only when it completes), so the ops are kept per session and taken when
//! a transaction ends.

use history::log::LoggedOp;
use history::{KeyName, Observed, WriteId};

use super::plan::{SavepointCmd, may_write_unseen};
use super::versions::DiscoveredWrite;

/// The ops of the open transaction. See the module docs.
#[derive(Debug, Default)]
pub struct TxnOps {
    ops: Vec<LoggedOp>,
    /// The open transaction's savepoints, innermost last: each name with how many ops came before it.
    savepoints: Vec<(String, usize)>,
    /// How many of the ops went into the transaction's write-ahead intent.
    in_intent: usize,
    /// The database transaction ids the open transaction is known to own: the `xmin` of rows it wrote, and
    /// its own id once asked for (see `versions`, "Discovered writes").
    xids: Vec<u32>,
    /// Its top-level id among them, when known: asked for, or stamped on a row it wrote outside any
    /// savepoint (a subtransaction's id can be aborted while the transaction commits).
    top_xid: Option<u32>,
    /// Writes of other transactions that this session's reads discovered, not yet logged.
    discovered: Vec<DiscoveredWrite>,
}

impl TxnOps {
    /// The ops so far.
    pub fn as_slice(&self) -> &[LoggedOp] {
        &self.ops
    }

    /// Adds an op, unless it repeats one the transaction already has: several writes of one row in one
    /// transaction share its xmin, so they are one version; and a statement's rows may each say it is not
    /// checked (an UPDATE at READ COMMITTED), where once is enough.
    pub fn push(&mut self, op: LoggedOp) {
        if let LoggedOp::Write { key, write, .. } = &op
            && self
                .ops
                .iter()
                .any(|o| matches!(o, LoggedOp::Write { key: k, write: w, .. } if k == key && w == write))
        {
            return;
        }
        // A statement's rows arrive together, so an earlier note of it is among the last ops.
        if let LoggedOp::Opaque { stmt, .. } = &op
            && self
                .ops
                .iter()
                .rev()
                .take_while(|o| matches!(o, LoggedOp::Row { .. }) || op_stmt(o) == *stmt)
                .any(|o| *o == op)
        {
            return;
        }
        self.ops.push(op);
    }

    /// Notes database transaction ids the open transaction owns.
    pub fn own_xids(&mut self, xids: &[u32]) {
        for &x in xids {
            if !self.xids.contains(&x) {
                self.xids.push(x);
            }
        }
    }

    /// Notes the ids stamped on rows the open transaction wrote: outside any savepoint, its top-level id.
    pub fn wrote(&mut self, xids: &[u32]) {
        self.own_xids(xids);
        if self.savepoints.is_empty() && self.top_xid.is_none() {
            self.top_xid = xids.first().copied();
        }
    }

    /// Notes the open transaction's top-level id, as the database told it.
    pub fn top_level(&mut self, xid: u32) {
        self.own_xids(&[xid]);
        self.top_xid = Some(xid);
    }

    /// The database transaction ids the open transaction is known to own.
    pub fn xids(&self) -> &[u32] {
        &self.xids
    }

    /// The open transaction's top-level id, when known.
    pub fn top_xid(&self) -> Option<u32> {
        self.top_xid
    }

    /// Notes writes of other transactions that a read discovered.
    pub fn discovered(&mut self, found: Vec<DiscoveredWrite>) {
        self.discovered.extend(found);
    }

    /// Takes the discovered writes not yet logged.
    pub fn take_discovered(&mut self) -> Vec<DiscoveredWrite> {
        std::mem::take(&mut self.discovered)
    }

    /// Whether an op is a statement that may have written rows the proxy did not see: one it could not map
    /// that is not known to only read (an aggregate, a predicate read) and is not a mapped UPDATE's note.
    pub fn may_have_written_unseen(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, LoggedOp::Opaque { kind, .. } if may_write_unseen(kind)))
    }

    /// Follows a savepoint command that succeeded. ROLLBACK TO SAVEPOINT takes back the writes made since
    /// the savepoint (those of the failed statement that forced it too), so they leave the transaction's
    /// ops, with the reads of them. Reads of other transactions' versions stay: the transaction did see
    /// them.
    pub fn savepoint(&mut self, cmd: &SavepointCmd) {
        match cmd {
            SavepointCmd::Define(name) => self.savepoints.push((name.clone(), self.ops.len())),
            SavepointCmd::Release(name) => {
                if let Some(i) = self.savepoints.iter().rposition(|(n, _)| n == name) {
                    self.savepoints.truncate(i);
                }
            }
            SavepointCmd::RollbackTo(name) => {
                let Some(i) = self.savepoints.iter().rposition(|(n, _)| n == name) else { return };
                let mark = self.savepoints[i].1;
                self.savepoints.truncate(i + 1);
                let later = self.ops.split_off(mark.min(self.ops.len()));
                let undone: Vec<(KeyName, WriteId)> = later
                    .iter()
                    .filter_map(|op| match op {
                        LoggedOp::Write { key, write, .. } => Some((key.clone(), *write)),
                        _ => None,
                    })
                    .collect();
                let keeps = |op: &LoggedOp| match op {
                    LoggedOp::Write { .. } => false,
                    LoggedOp::Read { key, observed: Observed::Version(w), .. } => {
                        !undone.iter().any(|(k, u)| k == key && u == w)
                    }
                    _ => true,
                };
                // A row's values stay behind those of its ops that stay (a row of a join may be behind a
                // read that stays and one that goes).
                let mut row_ops_kept: Vec<bool> = Vec::new();
                for op in later {
                    match op {
                        LoggedOp::Row { ops: n, values } => {
                            let behind = row_ops_kept.len().saturating_sub(n as usize);
                            let n = row_ops_kept[behind..].iter().filter(|&&k| k).count() as u32;
                            if n > 0 {
                                self.ops.push(LoggedOp::Row { ops: n, values });
                            }
                        }
                        op if op.is_row_op() => {
                            let kept = keeps(&op);
                            row_ops_kept.push(kept);
                            if kept {
                                self.ops.push(op);
                            }
                        }
                        op => self.ops.push(op),
                    }
                }
            }
        }
    }

    /// A copy of the ops so far, for the transaction's write-ahead intent; later ops are late ones.
    pub fn for_intent(&mut self) -> Vec<LoggedOp> {
        self.in_intent = self.ops.len();
        self.ops.clone()
    }

    /// Takes the ops of a transaction that just ended. With an intent already logged, only those that came
    /// after it (an autocommit statement's rows, or those of statements sent with their COMMIT): they are
    /// logged in a late-ops record before the outcome.
    pub fn take_at_end(&mut self, intent_written: bool) -> Vec<LoggedOp> {
        let mut ops = std::mem::take(&mut self.ops);
        let in_intent = std::mem::take(&mut self.in_intent);
        self.savepoints.clear();
        self.xids.clear();
        self.top_xid = None;
        if intent_written { ops.split_off(in_intent.min(ops.len())) } else { ops }
    }

    /// Drops every op: the session stopped recording them.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.savepoints.clear();
        self.in_intent = 0;
        self.xids.clear();
        self.top_xid = None;
    }
}

/// Whether every op is a recorded read: no write, and no opaque statement (which may have written). Recorded
/// values are neither.
pub fn reads_only(ops: &[LoggedOp]) -> bool {
    ops.iter().all(|op| matches!(op, LoggedOp::Read { .. } | LoggedOp::Run { .. } | LoggedOp::Row { .. }))
}

/// The statement an op came from.
fn op_stmt(op: &LoggedOp) -> Option<u32> {
    op.stmt()
}
