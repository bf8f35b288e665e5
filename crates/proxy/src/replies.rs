//! The queue of expected replies: the one place in the proxy that knows which request each backend message
//! answers. Every forwarded request that the server answers is queued as a [`Request`], carrying what every
//! part of the proxy needs to handle its replies: the protocol's [`Expect`] (which messages may answer it),
//! whether it may end or commit the transaction, and tagging's [`Reading`] of it (which plan strips its
//! rows and turns them into ops). [`crate::machine::SessionMachine`] matches each reply against the head
//! and pops a request with its last reply.
//!
//! The server's own rules (PostgreSQL docs, "Message Flow") decide what is queued and dropped:
//! - Simple Query: any number of result sets, CommandComplete per statement, then ReadyForQuery.
//! - Parse/Bind/Close: one completion message each. Describe: ParameterDescription (statements only), then
//!   RowDescription or NoData. Execute: DataRows, then CommandComplete, EmptyQueryResponse or PortalSuspended.
//!   Sync: ReadyForQuery. Flush: nothing.
//! - An ErrorResponse in the extended protocol makes the server discard every message until the next Sync
//!   ([`ReplyQueue::skip_to_sync`]).
//! - COPY FROM STDIN: after CopyInResponse the server ignores Sync and Flush until CopyDone or CopyFail, so
//!   Syncs queued behind the COPY are dropped ([`ReplyQueue::drop_syncs_behind_head`]).
//! - NoticeResponse, ParameterStatus and NotificationResponse can arrive at any time and match nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use wire::pg::Target;

use crate::interpret::tagger::Reading;
use crate::isolation::LevelEffect;
use crate::sql::StmtKind;

/// The replies a request expects. Its `Debug` leaves out a query's text, which may hold a secret and is
/// written into desync warnings.
#[derive(Clone, PartialEq, Eq)]
pub enum Expect {
    /// Parse: ParseComplete.
    Parse,
    /// Bind: BindComplete.
    Bind,
    /// Describe: ParameterDescription (statements only), then RowDescription or NoData.
    Describe(Target),
    /// Execute: rows, then CommandComplete, EmptyQueryResponse or PortalSuspended.
    Execute {
        /// The portal executed.
        portal: Bytes,
        /// What its statement does to the transaction.
        kind: StmtKind,
        /// What its statement does to isolation levels, if it applies ([`crate::isolation`]).
        level: Option<LevelEffect>,
        /// Whether its statement is recorded (see `Query`).
        recorded: bool,
    },
    /// Close: CloseComplete.
    Close,
    /// Sync: ReadyForQuery.
    Sync,
    /// Query: results for each statement, then ReadyForQuery.
    Query {
        /// The query string.
        sql: Arc<str>,
        /// The kinds of its statements, in order.
        kinds: Vec<StmtKind>,
        /// What its statements do to isolation levels, in order; empty when none does anything.
        levels: Vec<Option<LevelEffect>>,
        /// How many statements have completed so far.
        done: usize,
        /// Whether its statements are recorded; not for a query that only touches session state or is a
        /// lone COMMIT or ROLLBACK outside a transaction.
        recorded: bool,
    },
    /// FunctionCall: FunctionCallResponse, then ReadyForQuery.
    FunctionCall,
}

impl std::fmt::Debug for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Parse => f.write_str("Parse"),
            Expect::Bind => f.write_str("Bind"),
            Expect::Describe(target) => f.debug_tuple("Describe").field(target).finish(),
            Expect::Execute { portal, kind, level, recorded } => f
                .debug_struct("Execute")
                .field("portal", portal)
                .field("kind", kind)
                .field("level", level)
                .field("recorded", recorded)
                .finish(),
            Expect::Close => f.write_str("Close"),
            Expect::Sync => f.write_str("Sync"),
            Expect::Query { sql, kinds, levels, done, recorded } => f
                .debug_struct("Query")
                .field("sql_bytes", &sql.len())
                .field("kinds", kinds)
                .field("levels", levels)
                .field("done", done)
                .field("recorded", recorded)
                .finish(),
            Expect::FunctionCall => f.write_str("FunctionCall"),
        }
    }
}

/// A forwarded request whose replies are still to come.
#[derive(Debug)]
pub struct Request {
    /// Which replies answer it.
    pub expect: Expect,
    /// Tagging's reading of it ([`Reading::Nothing`] with tagging off).
    pub reading: Reading,
    /// Whether it may end the open transaction.
    pub may_end: bool,
    /// Whether it may commit the open transaction.
    pub may_commit: bool,
    /// Its position among all requests queued, counting from 1.
    pub tick: u64,
}

/// The queue of expected replies, head first. See the module docs.
#[derive(Debug, Default)]
pub struct ReplyQueue {
    queue: VecDeque<Request>,
    /// How many requests have been queued so far (the last one's [`Request::tick`]).
    ticks: u64,
    ends_in_flight: usize,
    commits_in_flight: usize,
}

impl ReplyQueue {
    /// Queues a request that was just forwarded.
    pub fn push(&mut self, expect: Expect, reading: Reading, may_end: bool, may_commit: bool) {
        self.ends_in_flight += usize::from(may_end);
        self.commits_in_flight += usize::from(may_commit);
        self.ticks += 1;
        self.queue.push_back(Request { expect, reading, may_end, may_commit, tick: self.ticks });
    }

    /// Removes the head: its last reply came.
    pub fn pop(&mut self) -> Option<Request> {
        let r = self.queue.pop_front()?;
        self.forget(&r);
        Some(r)
    }

    fn forget(&mut self, r: &Request) {
        self.ends_in_flight -= usize::from(r.may_end);
        self.commits_in_flight -= usize::from(r.may_commit);
    }

    /// The request the next reply answers.
    pub fn head(&self) -> Option<&Request> {
        self.queue.front()
    }

    /// The request the next reply answers, to update as its replies come.
    pub fn head_mut(&mut self) -> Option<&mut Request> {
        self.queue.front_mut()
    }

    /// How many requests have been queued so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// How many requests still wait for replies.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether every request has been answered.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// How many unanswered requests may end the transaction.
    pub fn ends_in_flight(&self) -> usize {
        self.ends_in_flight
    }

    /// How many unanswered requests may commit the transaction.
    pub fn commits_in_flight(&self) -> usize {
        self.commits_in_flight
    }

    /// Whether an unanswered request will still return writes (and so ops a write-ahead intent must carry).
    pub fn writes_pending(&self) -> bool {
        self.queue.iter().any(|r| r.reading.brings_writes())
    }

    /// Whether every unanswered request writes nothing, as tagging planned it. A fast-path function call
    /// may write whatever it likes.
    pub fn writes_nothing(&self) -> bool {
        self.queue.iter().all(|r| r.expect != Expect::FunctionCall && r.reading.writes_nothing())
    }

    /// After an ErrorResponse in the extended protocol: drops every request up to the queued Sync, which
    /// the server answers next. Returns false when no Sync is queued: the client has not sent it yet, and
    /// the server skips what comes until it does.
    pub fn skip_to_sync(&mut self) -> bool {
        while let Some(r) = self.queue.front() {
            if r.expect == Expect::Sync {
                return true;
            }
            self.pop();
        }
        false
    }

    /// After CopyInResponse: the server ignores Sync until the copy ends, so a Sync the client pipelined
    /// behind the COPY (libpq does) gets no ReadyForQuery; the client sends another after CopyDone.
    pub fn drop_syncs_behind_head(&mut self) {
        let mut i = 1;
        while i < self.queue.len() {
            if self.queue[i].expect == Expect::Sync {
                if let Some(r) = self.queue.remove(i) {
                    self.forget(&r);
                }
            } else {
                i += 1;
            }
        }
    }

    /// The expected replies, head first (for tests and diagnostics).
    pub fn expected(&self) -> Vec<Expect> {
        self.queue.iter().map(|r| r.expect.clone()).collect()
    }
}
