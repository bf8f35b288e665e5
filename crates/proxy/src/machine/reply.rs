//! The reply side of the session machine: each backend message matched against the head of the reply
//! queue (the one place that knows which request a reply belongs to, with [`crate::replies`]'s rules),
//! and the transaction boundaries and outcomes the replies reveal.

use std::sync::Arc;

use bytes::Bytes;
use history::Outcome;
use wire::pg::backend::tag as btag;
use wire::pg::{Target, TxnStatus};

use super::{SessionMachine, TxnEnd, owned};
use crate::replies::Expect;
use crate::sql::StmtKind;

impl SessionMachine {
    fn unexpected(&self, what: &str) -> String {
        format!("{what} arrived while expecting {:?}", self.head())
    }

    pub(super) fn match_reply(&mut self, tag: u8, body: &Bytes, now_ns: u64) -> Result<Vec<TxnEnd>, String> {
        let mut ends = Vec::new();
        match tag {
            btag::NOTICE_RESPONSE | btag::PARAMETER_STATUS | btag::NOTIFICATION_RESPONSE => {}
            btag::PARSE_COMPLETE => self.pop_if(|e| matches!(e, Expect::Parse), "ParseComplete")?,
            btag::BIND_COMPLETE => self.pop_if(|e| matches!(e, Expect::Bind), "BindComplete")?,
            btag::CLOSE_COMPLETE => self.pop_if(|e| matches!(e, Expect::Close), "CloseComplete")?,
            btag::PARAMETER_DESCRIPTION => {
                if self.head() != Some(&Expect::Describe(Target::Statement)) {
                    return Err(self.unexpected("ParameterDescription"));
                }
            }
            btag::ROW_DESCRIPTION => match self.head() {
                Some(Expect::Describe(_)) => drop(self.replies.pop()),
                Some(Expect::Query { .. }) => {}
                _ => return Err(self.unexpected("RowDescription")),
            },
            btag::NO_DATA => self.pop_if(|e| matches!(e, Expect::Describe(_)), "NoData")?,
            btag::DATA_ROW | btag::COPY_DATA | btag::COPY_DONE | btag::COPY_OUT_RESPONSE => match self.head()
            {
                Some(Expect::Execute { .. } | Expect::Query { .. }) => {}
                _ => return Err(self.unexpected(&format!("message {:?}", char::from(tag)))),
            },
            btag::COPY_IN_RESPONSE => {
                if !matches!(self.head(), Some(Expect::Execute { .. } | Expect::Query { .. })) {
                    return Err(self.unexpected("CopyInResponse"));
                }
                self.copy_in = true;
                self.replies.drop_syncs_behind_head();
            }
            btag::COPY_BOTH_RESPONSE => return Err("CopyBothResponse (replication) is not tracked".into()),
            btag::COMMAND_COMPLETE => {
                let command = command_tag(body);
                let (kind, query, level) = match self.replies.head_mut().map(|r| &mut r.expect) {
                    Some(Expect::Execute { recorded: false, kind, level, .. }) => {
                        // A statement that records nothing opens no transaction as it completes.
                        let (kind, level) = (*kind, *level);
                        self.replies.pop();
                        self.copy_in = false;
                        self.levels.completed(&command, Some(kind), level, None);
                        return Ok(ends);
                    }
                    Some(Expect::Execute { kind, level, .. }) => (Some(*kind), None, *level),
                    Some(Expect::Query { sql, kinds, levels, done, recorded }) => {
                        let (k, level) = (kinds.get(*done).copied(), levels.get(*done).copied().flatten());
                        *done += 1;
                        if !*recorded {
                            // A query that records nothing opens no transaction as it completes.
                            self.copy_in = false;
                            self.levels.completed(&command, k, level, None);
                            return Ok(ends);
                        }
                        (k, Some(sql.clone()), level)
                    }
                    _ => return Err(self.unexpected("CommandComplete")),
                };
                self.copy_in = false;
                if matches!(self.head(), Some(Expect::Execute { .. })) {
                    self.replies.pop();
                }
                ends.extend(self.on_command_tag(&command, kind, query, now_ns));
                self.levels.completed(&command, kind, level, self.txn.as_mut().map(|t| &mut t.level));
            }
            btag::EMPTY_QUERY_RESPONSE => match self.head() {
                Some(Expect::Execute { .. }) => drop(self.replies.pop()),
                Some(Expect::Query { .. }) => {}
                _ => return Err(self.unexpected("EmptyQueryResponse")),
            },
            btag::PORTAL_SUSPENDED => match self.head() {
                Some(Expect::Execute { portal, .. }) => {
                    self.suspended.insert(owned(portal), ());
                    self.replies.pop();
                }
                _ => return Err(self.unexpected("PortalSuspended")),
            },
            btag::FUNCTION_CALL_RESPONSE => {
                if self.head() != Some(&Expect::FunctionCall) {
                    return Err(self.unexpected("FunctionCallResponse"));
                }
            }
            btag::ERROR_RESPONSE => {
                self.copy_in = false;
                if let Some(t) = &mut self.txn {
                    t.had_error = true;
                }
                self.levels.error(self.txn.as_mut().map(|t| &mut t.level));
                match self.head() {
                    // ReadyForQuery follows.
                    Some(Expect::Query { .. } | Expect::FunctionCall | Expect::Sync) | None => {}
                    Some(_) => {
                        // Skip until Sync: the server discards everything up to the next Sync.
                        if !self.replies.skip_to_sync() {
                            self.server_skipping = true;
                        }
                    }
                }
            }
            btag::READY_FOR_QUERY => {
                let status = body
                    .first()
                    .and_then(|b| TxnStatus::from_byte(*b).ok())
                    .ok_or_else(|| "ReadyForQuery without a valid status".to_owned())?;
                let ours = self.answers(self.replies.head().map(|r| r.tick));
                self.pop_if(
                    |e| matches!(e, Expect::Query { .. } | Expect::Sync | Expect::FunctionCall),
                    "ReadyForQuery",
                )?;
                self.levels.ready(status);
                if status == TxnStatus::Idle && ours {
                    let outcome = match self.txn.as_ref().map(|t| t.had_error) {
                        Some(true) => Outcome::Aborted,
                        _ => Outcome::Committed,
                    };
                    // Portals die with their transaction, but the client may already have bound new ones for
                    // its next batch, so the portal map is not cleared here: Bind overwrites, Close removes.
                    // The ReadyForQuery's request is popped: anything still queued came after it.
                    let settled = self.replies.is_empty();
                    ends.extend(self.end_txn(outcome, now_ns, settled));
                } else if let Some(t) = self.txn.as_mut().filter(|_| ours) {
                    // A failed block is reported by the status byte; a recovered one (ROLLBACK TO) clears it.
                    t.had_error = status == TxnStatus::Failed;
                }
                if self.replies.is_empty() {
                    self.predicted = status;
                    self.at_rest = status == TxnStatus::Idle;
                    if let (true, Some(t)) = (self.at_rest, self.tagger.as_mut()) {
                        t.at_rest();
                    }
                }
            }
            other => return Err(self.unexpected(&format!("message {:?}", char::from(other)))),
        }
        Ok(ends)
    }

    fn pop_if(&mut self, want: impl Fn(&Expect) -> bool, what: &str) -> Result<(), String> {
        match self.head() {
            Some(e) if want(e) => {
                self.replies.pop();
                Ok(())
            }
            _ => Err(self.unexpected(what)),
        }
    }

    /// Acts on a CommandComplete tag: `COMMIT` ends the transaction committed, `ROLLBACK` aborted (unless
    /// the statement was ROLLBACK TO SAVEPOINT, which shares the tag), `PREPARE TRANSACTION` in doubt.
    fn on_command_tag(
        &mut self,
        command: &str,
        kind: Option<StmtKind>,
        query: Option<Arc<str>>,
        now_ns: u64,
    ) -> Option<TxnEnd> {
        // The CommandComplete's own request is still queued; anything behind it came later.
        let settled = self.replies.len() <= 1;
        match command {
            "COMMIT" => self.end_txn(Outcome::Committed, now_ns, settled),
            "ROLLBACK" if kind != Some(StmtKind::RollbackTo) => {
                self.end_txn(Outcome::Aborted, now_ns, settled)
            }
            "PREPARE TRANSACTION" => self.end_txn(Outcome::Indeterminate, now_ns, settled),
            _ => {
                // A statement after COMMIT or ROLLBACK in the same query string runs in a new transaction,
                // which that query's ReadyForQuery ends.
                if self.txn.is_none() {
                    let text = query.as_deref().unwrap_or("-- unknown statement");
                    let opened =
                        self.replies.head().map_or(self.replies.ticks(), |r| r.tick.saturating_sub(1));
                    self.add_statement_at(text.as_bytes(), now_ns, opened);
                }
                None
            }
        }
    }
}

/// The command tag of a CommandComplete body, up to its NUL, with the row count dropped for the tags that
/// matter here.
fn command_tag(body: &Bytes) -> String {
    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    String::from_utf8_lossy(&body[..end]).into_owned()
}
