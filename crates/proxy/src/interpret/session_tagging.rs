//! What the session calls: one object per session that wraps the [`Tagger`], the fence counter and the
//! injected queries, so the session's message loop needs only a few calls:
//!
//! - client → database: [`SessionTagging::must_wait`] before offering a statement-bearing message (a
//!   message that may commit waits until every earlier statement's rows are in, so the write-ahead intent
//!   holds all of the transaction's ops), then [`SessionTagging::frontend`] for the bytes to forward.
//! - between two client transactions: [`SessionTagging::injection_due`] and
//!   [`SessionTagging::start_injection`]; while [`SessionTagging::injecting`], every backend message goes
//!   to [`SessionTagging::injected_backend`] and none to the client or the state machine.
//! - database → client: [`SessionTagging::backend`] says what the client gets instead of each message.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use history::log::LoggedOp;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use wire::pg::backend::tag as btag;
use wire::pg::{FrontendMessage, Target, split_frame};

use super::fence::{FenceCounter, Injected, InjectedReplies, Injection, Step};
use super::tagger::{Outgoing, Tagger, TaggingShared};

/// A finished fence, to be recorded as a fence transaction in the session's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceTxn {
    /// Its read and write of the fence row.
    pub ops: Vec<LoggedOp>,
    /// Its statement texts (the ops cite them by index).
    pub statements: Vec<String>,
    /// Whether it committed.
    pub committed: bool,
}

/// What to do after an injected query's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectStep {
    /// Keep reading.
    More,
    /// Send this frame to the database next.
    Send(Bytes),
    /// Done; record the fence if there was one.
    Done(Option<FenceTxn>),
}

/// One session's tagging. See the module docs.
#[derive(Debug)]
pub struct SessionTagging {
    shared: Arc<TaggingShared>,
    tagger: Tagger,
    fences: FenceCounter,
    injecting: Option<InjectedReplies>,
    /// How many of the open transaction's ops went into its write-ahead intent.
    in_intent: usize,
}

/// The statement and portal name injected queries use. A client that uses it too would have it closed.
const INJECTED_NAME: &[u8] = b"krait_injected";

/// The frames that run `statements` in order, then Sync, in the extended protocol under
/// [`INJECTED_NAME`]. Not a simple Query: that would destroy the client's unnamed prepared statement, which
/// outlives Sync (PostgreSQL docs, "Extended Query"), so a client that prepared it before a fence and binds
/// it after would fail. Every statement closes the name first (closing a missing name is not an error), so
/// an injection cut short by an error leaves nothing that blocks the next.
fn injected_frames<S: AsRef<str>>(statements: &[S]) -> Bytes {
    let name = Bytes::from_static(INJECTED_NAME);
    let mut b = BytesMut::new();
    let close = |b: &mut BytesMut| {
        FrontendMessage::Close { target: Target::Statement, name: name.clone() }.encode(b);
        FrontendMessage::Close { target: Target::Portal, name: name.clone() }.encode(b);
    };
    for sql in statements {
        close(&mut b);
        FrontendMessage::Parse {
            name: name.clone(),
            query: Bytes::copy_from_slice(sql.as_ref().as_bytes()),
            param_types: vec![],
        }
        .encode(&mut b);
        FrontendMessage::Bind {
            portal: name.clone(),
            statement: name.clone(),
            param_formats: vec![],
            params: vec![],
            result_formats: vec![],
        }
        .encode(&mut b);
        FrontendMessage::Execute { portal: name.clone(), max_rows: 0 }.encode(&mut b);
    }
    close(&mut b);
    FrontendMessage::Sync.encode(&mut b);
    b.freeze()
}

impl SessionTagging {
    /// Tagging for a new session, with a fence every `fence_every` commits (0: never).
    pub fn new(shared: Arc<TaggingShared>, fence_every: u64) -> Self {
        SessionTagging {
            tagger: Tagger::new(shared.clone()),
            shared,
            fences: FenceCounter::new(fence_every),
            injecting: None,
            in_intent: 0,
        }
    }

    /// Sets the session's user and its `search_path` at startup (see [`super::search_path`]).
    pub fn set_startup(&mut self, user: &str, search_path: super::search_path::SearchPath) {
        self.tagger.set_startup(user, search_path);
    }

    /// Whether a client message must wait for outstanding rows before it is offered to the state machine.
    /// Only a message that may commit waits (`may_commit`, from [`crate::machine::SessionMachine::may_commit`],
    /// which is false for messages the server will skip or ignore), and only while the tagger still trusts
    /// its own queue: a broken tagger's queue may list replies that never come, and the client must not wait
    /// on them. Ops that arrive after the intent are then logged with the outcome rather than waited for.
    pub fn must_wait(&self, may_commit: bool) -> bool {
        may_commit && !self.tagger.is_broken() && self.tagger.results_pending()
    }

    /// The bytes to forward for a client message (`raw` unless it was rewritten). `stmt` is the index of its
    /// statement text in the open transaction.
    pub fn frontend(&mut self, msg: &FrontendMessage, raw: &Bytes, stmt: Option<u32>) -> Bytes {
        self.tagger.on_frontend(msg, stmt).unwrap_or_else(|| raw.clone())
    }

    /// What the client gets instead of a backend message.
    pub fn backend(&mut self, tag: u8, body: &Bytes) -> Outgoing {
        self.tagger.on_backend(tag, body)
    }

    /// A copy of the ops collected so far, for the open transaction's write-ahead intent.
    pub fn intent_ops(&mut self) -> Vec<LoggedOp> {
        self.in_intent = self.tagger.ops().len();
        self.tagger.ops().to_vec()
    }

    /// The ops of a transaction that just ended. With an intent already logged, only those that came after
    /// it (an autocommit statement's rows, or those of statements sent with their COMMIT): the recorder logs
    /// them in a late-ops record before the outcome.
    pub fn end_ops(&mut self, intent_written: bool) -> Vec<LoggedOp> {
        let mut ops = self.tagger.take_ops();
        let in_intent = std::mem::take(&mut self.in_intent);
        if intent_written {
            let late = ops.split_off(in_intent.min(ops.len()));
            self.shared.metrics.late_ops.fetch_add(late.len() as u64, Ordering::Relaxed);
            late
        } else {
            ops
        }
    }

    /// Notes a committed client transaction (for the fence counter).
    pub fn committed(&mut self) {
        self.fences.committed();
    }

    /// Whether an injected query is running.
    pub fn injecting(&self) -> bool {
        self.injecting.is_some()
    }

    /// What to inject now, if anything. Call only between two client transactions with nothing
    /// outstanding.
    pub fn injection_due(&self) -> Option<Injection> {
        if self.shared.catalog_stale.load(Ordering::Relaxed) {
            Some(Injection::Catalog)
        } else if self.fences.due() {
            Some(Injection::Fence {
                setup: !self.shared.fence_ready.load(Ordering::Relaxed),
                row: self.shared.fence_row,
            })
        } else {
            None
        }
    }

    /// Starts an injection; returns the frame to send to the database.
    pub fn start_injection(&mut self, what: Injection) -> Bytes {
        if let Injection::Fence { .. } = what {
            self.fences.fenced();
        }
        self.injecting = Some(InjectedReplies::new(what));
        injected_frames(&what.statements())
    }

    /// Takes one backend message while injecting.
    pub fn injected_backend(&mut self, tag: u8, body: &Bytes) -> InjectStep {
        let Some(replies) = self.injecting.as_mut() else { return InjectStep::Done(None) };
        match replies.on_backend(tag, body, &self.shared.book) {
            Step::More => InjectStep::More,
            Step::Send(sql) => InjectStep::Send(injected_frames(&[sql])),
            Step::Done => {
                let Some(replies) = self.injecting.take() else { return InjectStep::Done(None) };
                match replies.finish(&self.shared) {
                    Injected::Catalog | Injected::Horizon(_) => InjectStep::Done(None),
                    Injected::Fence { ops, committed } => InjectStep::Done(Some(FenceTxn {
                        ops,
                        statements: super::fence::fence_statements(self.shared.fence_row),
                        committed,
                    })),
                }
            }
        }
    }
}

/// Runs a catalog load or the horizon query over a connection that has just finished startup, before the
/// client's first message, and swallows the replies. `sbuf` holds bytes already read from the database.
pub async fn run_at_startup<S>(
    db: &mut S,
    sbuf: &mut BytesMut,
    shared: &TaggingShared,
    what: Injection,
) -> std::io::Result<Injected>
where
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    db.write_all(&injected_frames(&what.statements())).await?;
    let mut replies = InjectedReplies::new(what);
    loop {
        while let Some(frame) =
            split_frame(sbuf, 1 << 30).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?
        {
            if frame.tag() == btag::READY_FOR_QUERY
                || replies.on_backend(frame.tag(), &frame.body(), &shared.book) == Step::Done
            {
                return Ok(replies.finish(shared));
            }
        }
        if db.read_buf(sbuf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpret::Catalog;

    #[test]
    fn fences_are_due_after_the_catalog_and_every_n_commits() {
        let shared = Arc::new(TaggingShared::new());
        let mut s = SessionTagging::new(shared.clone(), 2);
        assert_eq!(s.injection_due(), Some(Injection::Catalog));
        shared.set_catalog(Catalog::new());
        assert_eq!(s.injection_due(), None);
        s.committed();
        s.committed();
        let row = shared.fence_row;
        assert!(row > 0);
        assert_eq!(s.injection_due(), Some(Injection::Fence { setup: true, row }));
        let frame = s.start_injection(Injection::Fence { setup: true, row });
        // Extended protocol, so the client's unnamed statement survives: per statement Close, Close, Parse,
        // Bind, Execute; then Close, Close, Sync. Setup (4 statements) and fence (3).
        let mut buf = BytesMut::from(&frame[..]);
        let mut tags = Vec::new();
        while let Ok(Some(f)) = split_frame(&mut buf, 1 << 20) {
            tags.push(f.tag());
        }
        assert!(buf.is_empty());
        assert_eq!(tags.len(), 7 * 5 + 3, "{tags:?}");
        assert_eq!(&tags[..5], b"CCPBE");
        assert_eq!(&tags[tags.len() - 3..], b"CCS");
        assert!(!tags.contains(&b'Q'));
        assert!(s.injecting());
        assert_eq!(s.injection_due(), None);
        let rfq = |st: u8| (btag::READY_FOR_QUERY, Bytes::copy_from_slice(&[st]));
        // The fence's first message ends in a block: COMMIT goes next.
        let (t, b) = rfq(b'T');
        assert!(matches!(s.injected_backend(t, &b), InjectStep::Send(_)));
        let (t, b) = rfq(b'I');
        let statements = crate::interpret::fence::fence_statements(row);
        assert_eq!(
            s.injected_backend(t, &b),
            InjectStep::Done(Some(FenceTxn { ops: vec![], statements, committed: false }))
        );
        assert!(!s.injecting());
    }
}
