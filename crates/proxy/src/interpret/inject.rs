//! Queries the proxy runs on a client's connection between two of its transactions: a catalog reload when a
//! statement named a table the cache did not know, and a fence every so many commits (DESIGN.md §3). The
//! session asks [`Injector::injection_due`] when the connection is at rest
//! ([`crate::machine::SessionMachine::at_rest`]), sends what [`Injector::start_injection`] returns, and
//! while [`Injector::injecting`] gives every backend message to [`Injector::injected_backend`] instead of
//! the client or the state machine. [`run_at_startup`] does the same for a fresh connection, before the
//! client's first message.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use history::log::LoggedOp;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use wire::pg::backend::tag as btag;
use wire::pg::{FrontendMessage, Target, split_frame};

use super::FenceConfig;
use super::fence::{FenceCounter, Injected, InjectedReplies, Injection, Step};
use super::shared::TaggingShared;

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

/// A fence about to commit, to be logged as an intent before its COMMIT goes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceIntent {
    /// Its read and write of the fence row.
    pub ops: Vec<LoggedOp>,
    /// Its statement texts (the ops cite them by index).
    pub statements: Vec<String>,
    /// Its transaction id (the `xmin` of the row it wrote), so that a restart can ask the database how
    /// it ended.
    pub xid: Option<u32>,
}

/// What to do after an injected query's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectStep {
    /// Keep reading.
    More,
    /// Send this frame to the database next.
    Send(Bytes),
    /// Log the fence's intent, then (once it is as durable as a commit's outcome) send `commit`.
    Commit {
        /// The fence to log.
        intent: FenceIntent,
        /// Its COMMIT.
        commit: Bytes,
    },
    /// Done; record the fence if there was one.
    Done(Option<FenceTxn>),
    /// Done: the open transaction's id, for [`crate::machine::SessionMachine::learned_xid`].
    Learned(Option<u32>),
}

/// One session's injected queries. See the module docs.
#[derive(Debug)]
pub struct Injector {
    shared: Arc<TaggingShared>,
    fences: FenceCounter,
    injecting: Option<InjectedReplies>,
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

impl Injector {
    /// Injections for a new session, with fences as `fence` says.
    pub fn new(shared: Arc<TaggingShared>, fence: &FenceConfig) -> Self {
        let fences = FenceCounter::new(
            fence.every,
            Duration::from_millis(fence.min_interval_ms),
            Duration::from_millis(fence.idle_ms),
        );
        let fences = if fence.at_open { fences.fencing_at_open() } else { fences };
        Injector { shared, fences, injecting: None }
    }

    /// Notes a committed client transaction (for the fence counter).
    pub fn committed(&mut self) {
        self.fences.committed();
    }

    /// Whether an injected query is running.
    pub fn injecting(&self) -> bool {
        self.injecting.is_some()
    }

    /// What to inject now, if anything: a catalog load while the catalog is stale, else a fence due by
    /// commits or, before the connection's first client message, its opening fence
    /// ([`FenceCounter::opening_due`]). Call only between two client transactions with nothing outstanding.
    pub fn injection_due(&self) -> Option<Injection> {
        self.catalog_due().or_else(|| (self.fences.due() || self.fences.opening_due()).then(|| self.fence()))
    }

    /// What to inject before a connection closes: a catalog load while the catalog is stale, else a fence
    /// due by commits or when the connection committed a transaction since its last
    /// ([`FenceCounter::closing_due`]); never the opening fence, which a connection that closes before
    /// its first transaction has no use for. Call only between two client transactions with nothing
    /// outstanding.
    pub fn closing_injection_due(&self) -> Option<Injection> {
        // A fence due by commits is due at closing too (`closing_due` holds whenever `due` does).
        self.catalog_due().or_else(|| self.fences.closing_due().then(|| self.fence()))
    }

    fn catalog_due(&self) -> Option<Injection> {
        self.shared.catalog_stale().then(|| Injection::Catalog { as_of: self.shared.catalog_reload_begins() })
    }

    /// How long a connection at rest waits before [`Injector::idle_injection_due`] may say yes; `None`
    /// when it never does.
    pub fn idle_after(&self) -> Option<Duration> {
        self.fences.idle_after()
    }

    /// What to inject on a connection that has been at rest, with no client message, for
    /// [`Injector::idle_after`]: a fence, when other connections fenced since its last
    /// ([`FenceCounter::idle_due`]). Call only between two client transactions with nothing outstanding.
    pub fn idle_injection_due(&self) -> Option<Injection> {
        self.fences.idle_due(self.shared.busy_fences.load(Ordering::Relaxed)).then(|| self.fence())
    }

    fn fence(&self) -> Injection {
        Injection::Fence {
            setup: !self.shared.fence_ready.load(Ordering::Relaxed),
            row: self.shared.fence_row,
        }
    }

    /// Starts an injection; returns the frame to send to the database.
    pub fn start_injection(&mut self, what: Injection) -> Bytes {
        if let Injection::Fence { .. } = what {
            // A fence due by commits moves the chain idle sessions must follow; an idle one only catches up.
            let busy = &self.shared.busy_fences;
            let seen = if self.fences.due() {
                busy.fetch_add(1, Ordering::Relaxed) + 1
            } else {
                busy.load(Ordering::Relaxed)
            };
            self.fences.fenced(seen);
        }
        self.injecting = Some(InjectedReplies::new(what));
        injected_frames(&what.statements(&self.shared))
    }

    /// Takes one backend message while injecting.
    pub fn injected_backend(&mut self, tag: u8, body: &Bytes) -> InjectStep {
        let Some(replies) = self.injecting.as_mut() else { return InjectStep::Done(None) };
        match replies.on_backend(tag, body, &self.shared.book) {
            Step::More => InjectStep::More,
            Step::Send(sql) => InjectStep::Send(injected_frames(&[sql])),
            Step::Commit { ops, xid } => InjectStep::Commit {
                intent: FenceIntent {
                    ops,
                    statements: super::fence::fence_statements(
                        self.shared.fence_row,
                        &self.shared.fence_table(),
                    ),
                    xid,
                },
                commit: injected_frames(&[super::fence::FENCE_COMMIT]),
            },
            Step::Done => {
                let Some(replies) = self.injecting.take() else { return InjectStep::Done(None) };
                match replies.finish(&self.shared) {
                    Injected::Catalog | Injected::Horizon(_) => InjectStep::Done(None),
                    Injected::Xid(xid) => InjectStep::Learned(xid),
                    Injected::Fence { ops, committed } => InjectStep::Done(Some(FenceTxn {
                        ops,
                        statements: super::fence::fence_statements(
                            self.shared.fence_row,
                            &self.shared.fence_table(),
                        ),
                        committed,
                    })),
                }
            }
        }
    }
}

/// Runs one query over a connection that has just finished startup, before the client's first message, and
/// returns its rows, or `None` if the database answered with an error. `sbuf` holds bytes already read from
/// the database.
pub async fn query_at_startup<S>(
    db: &mut S,
    sbuf: &mut BytesMut,
    sql: &str,
) -> std::io::Result<Option<Vec<Vec<Option<Bytes>>>>>
where
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    db.write_all(&injected_frames(&[sql])).await?;
    let (mut rows, mut failed) = (Vec::new(), false);
    loop {
        while let Some(frame) =
            split_frame(sbuf, 1 << 30).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?
        {
            match frame.tag() {
                btag::DATA_ROW => match super::strip::data_row_values(&frame.body()) {
                    Ok(values) => rows.push(values),
                    Err(_) => failed = true,
                },
                btag::ERROR_RESPONSE => failed = true,
                btag::READY_FOR_QUERY => return Ok((!failed).then_some(rows)),
                _ => {}
            }
        }
        if db.read_buf(sbuf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
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
    db.write_all(&injected_frames(&what.statements(shared))).await?;
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
        let mut s = Injector::new(
            shared.clone(),
            &FenceConfig { every: 2, min_interval_ms: 0, idle_ms: 0, at_open: false },
        );
        assert!(matches!(s.injection_due(), Some(Injection::Catalog { .. })));
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
        // After the setup's fence, where the table is: the schema's one-column row names it from now on.
        let (t, b) = rfq(b'I');
        assert!(matches!(s.injected_backend(t, &b), InjectStep::Send(_)));
        let mut row_body = BytesMut::new();
        row_body.extend_from_slice(&1i16.to_be_bytes());
        row_body.extend_from_slice(&3i32.to_be_bytes());
        row_body.extend_from_slice(b"app");
        assert!(matches!(s.injected_backend(btag::DATA_ROW, &row_body.freeze()), InjectStep::More));
        let (t, b) = rfq(b'I');
        let statements = crate::interpret::fence::fence_statements(row, "app.krait_fence");
        assert_eq!(
            s.injected_backend(t, &b),
            InjectStep::Done(Some(FenceTxn { ops: vec![], statements, committed: false }))
        );
        assert!(!s.injecting());
        assert_eq!(shared.fence_table(), "app.krait_fence");
        let fence = Injection::Fence { setup: false, row }.statements(&shared);
        assert!(fence[1].contains("FROM app.krait_fence"), "{fence:?}");
    }

    /// A data row of text values, as the database sends it.
    fn data_row(values: &[&[u8]]) -> Bytes {
        let mut body = BytesMut::new();
        body.extend_from_slice(&(values.len() as i16).to_be_bytes());
        for v in values {
            body.extend_from_slice(&(v.len() as i32).to_be_bytes());
            body.extend_from_slice(v);
        }
        body.freeze()
    }

    /// Once a fence has read and rewritten its row, and before its COMMIT, the session is told to log its
    /// intent: the read, the write and its transaction id (the written row's `xmin`); the fence ends with
    /// the same ops, for its outcome.
    #[test]
    fn a_fence_asks_for_its_intent_to_be_logged_before_its_commit() {
        let shared = Arc::new(TaggingShared::new());
        shared.set_catalog(Catalog::new());
        shared.fence_ready.store(true, Ordering::Relaxed);
        let config = FenceConfig { every: 20, min_interval_ms: 0, idle_ms: 0, at_open: true };
        let mut s = Injector::new(shared.clone(), &config);
        let row = shared.fence_row;
        let fence = Injection::Fence { setup: false, row };
        assert_eq!(s.injection_due(), Some(fence));
        s.start_injection(fence);
        let id = row.to_string();
        // BEGIN's reply, the row read (xmin 700, the setup's epoch 0), the row written (xmin 701).
        for (tag, body) in [
            (btag::COMMAND_COMPLETE, Bytes::from_static(b"BEGIN\0")),
            (btag::DATA_ROW, data_row(&[b"700", id.as_bytes(), b"0"])),
            (btag::DATA_ROW, data_row(&[b"701", id.as_bytes()])),
        ] {
            assert_eq!(s.injected_backend(tag, &body), InjectStep::More);
        }
        let InjectStep::Commit { intent, commit } =
            s.injected_backend(btag::READY_FOR_QUERY, &Bytes::from_static(b"T"))
        else {
            panic!("the intent comes before the COMMIT")
        };
        assert_eq!(intent.xid, Some(701));
        assert!(matches!(intent.ops[0], LoggedOp::Read { observed: history::Observed::PreHistory(_), .. }));
        let LoggedOp::Write { write, .. } = intent.ops[1] else { panic!("{:?}", intent.ops) };
        assert!(shared.book.contains(write), "its version is in the book before it can commit");
        assert_eq!(intent.statements.last().map(String::as_str), Some("COMMIT"));
        let mut frames = BytesMut::from(&commit[..]);
        let mut tags = Vec::new();
        while let Ok(Some(f)) = split_frame(&mut frames, 1 << 20) {
            tags.push(f.tag());
        }
        assert_eq!(tags, b"CCPBECCS", "COMMIT alone, in the extended protocol");
        for (tag, body) in [
            (btag::COMMAND_COMPLETE, Bytes::from_static(b"COMMIT\0")),
            (btag::READY_FOR_QUERY, Bytes::from_static(b"I")),
        ] {
            if let InjectStep::Done(Some(done)) = s.injected_backend(tag, &body) {
                assert!(done.committed);
                assert_eq!(done.ops, intent.ops, "the same ops, computed once");
                return;
            }
        }
        panic!("the fence did not end");
    }

    /// With `at_open`, a connection's first injection is a fence, due before any commit; one that closes
    /// first does not run it, and once it ran the regular count takes over.
    #[test]
    fn a_connection_fences_before_its_first_message_but_not_to_close_at_once() {
        let shared = Arc::new(TaggingShared::new());
        shared.set_catalog(Catalog::new());
        let config = FenceConfig { every: 20, min_interval_ms: 0, idle_ms: 0, at_open: true };
        let mut s = Injector::new(shared.clone(), &config);
        let fence = Injection::Fence { setup: true, row: shared.fence_row };
        assert_eq!(s.injection_due(), Some(fence));
        assert_eq!(s.closing_injection_due(), None, "a connection closing unused has nothing to cover");
        s.start_injection(fence);
        let (t, b) = (btag::READY_FOR_QUERY, Bytes::from_static(b"I"));
        while matches!(s.injected_backend(t, &b), InjectStep::Send(_) | InjectStep::More) {}
        assert_eq!(s.injection_due(), None, "once per connection");
        assert_eq!(shared.busy_fences.load(Ordering::Relaxed), 0, "an opening fence does not move idle ones");
        let off = Injector::new(shared, &FenceConfig { at_open: false, ..config });
        assert_eq!(off.injection_due(), None);
    }
}
