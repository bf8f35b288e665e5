//! A bare protocol-3 client for the tagging tests, and a tagged connection that puts the proxy's state
//! machine, with its [`Tagger`], between that client and the real PostgreSQL on 127.0.0.1:5432 (trust auth
//! for `postgres`), recording each transaction the machine ends as the proxy's recorder does, and replaying
//! the records into a history with the log's own [`replay`].
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use history::log::replay::replay;
use history::log::{LogRecord, LoggedOp, LoggedTxn};
use history::{History, Outcome, SessionId, TxnId};
use proxy::interpret::fence::{
    FENCE_COMMIT, FenceCounter, Injected, InjectedReplies, Injection, Step, fence_statements,
};
use proxy::interpret::shared::TaggingShared;
use proxy::interpret::tagger::{Outgoing, Tagger};
use proxy::interpret::{Catalog, PK_QUERY};
use proxy::machine::{FrontendStep, SessionMachine, TxnEnd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::pg::backend::tag as btag;
use wire::pg::{FrontendMessage, StartupPacket, split_frame};

/// A backend message: tag and body.
pub type Msg = (u8, Bytes);

/// A bare protocol-3 connection.
pub struct Raw {
    s: TcpStream,
    buf: BytesMut,
}

impl Raw {
    /// Connects to the database directly and authenticates (trust).
    pub async fn connect() -> Raw {
        Self::connect_db("127.0.0.1:5432", "postgres").await
    }

    /// Connects to `addr` (the database or a proxy in front of it), database `postgres`.
    pub async fn connect_to(addr: &str) -> Raw {
        Self::connect_db(addr, "postgres").await
    }

    /// Connects to `addr`, database `db`, as `postgres` (trust auth).
    pub async fn connect_db(addr: &str, db: &str) -> Raw {
        let s = TcpStream::connect(addr).await.unwrap_or_else(|e| {
            panic!("this test needs PostgreSQL on 127.0.0.1:5432 (trust auth for postgres): {addr}: {e}")
        });
        let mut raw = Raw { s, buf: BytesMut::new() };
        let mut out = BytesMut::new();
        StartupPacket::Startup {
            major: 3,
            minor: 0,
            params: vec![
                (Bytes::from_static(b"user"), Bytes::from_static(b"postgres")),
                (Bytes::from_static(b"database"), Bytes::copy_from_slice(db.as_bytes())),
            ],
        }
        .encode(&mut out);
        raw.write(&out).await;
        let msgs = raw.until_ready().await;
        assert!(msgs.iter().all(|(t, _)| *t != btag::ERROR_RESPONSE), "startup failed: {msgs:?}");
        raw
    }

    /// Sends raw bytes.
    pub async fn write(&mut self, b: &[u8]) {
        self.s.write_all(b).await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// Sends Terminate and waits until the other end closes the connection (a proxy does once whatever it
    /// runs before a connection closes is over).
    pub async fn terminate(mut self) {
        let mut out = BytesMut::new();
        FrontendMessage::Terminate.encode(&mut out);
        self.write(&out).await;
        let mut rest = Vec::new();
        let _ = self.s.read_to_end(&mut rest).await;
    }

    /// The next backend message.
    pub async fn next(&mut self) -> Msg {
        loop {
            if let Some(f) = split_frame(&mut self.buf, 1 << 26).unwrap_or_else(|e| panic!("{e}")) {
                return (f.tag(), f.body());
            }
            let n = self.s.read_buf(&mut self.buf).await.unwrap_or_else(|e| panic!("{e}"));
            assert!(n > 0, "server closed the connection");
        }
    }

    /// Messages up to and including ReadyForQuery, without the asynchronous ones.
    pub async fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.0 == btag::READY_FOR_QUERY;
            if !matches!(m.0, btag::PARAMETER_STATUS | btag::NOTICE_RESPONSE | b'K' | b'R') {
                out.push(m);
            }
            if done {
                return out;
            }
        }
    }

    /// Runs a simple query.
    pub async fn simple(&mut self, sql: &str) -> Vec<Msg> {
        let mut out = BytesMut::new();
        FrontendMessage::Query { sql: Bytes::copy_from_slice(sql.as_bytes()) }.encode(&mut out);
        self.write(&out).await;
        self.until_ready().await
    }
}

/// The SQLSTATE of an ErrorResponse among `msgs`, if any.
pub fn error_code(msgs: &[Msg]) -> Option<String> {
    msgs.iter().find(|(t, _)| *t == btag::ERROR_RESPONSE).map(|(_, b)| {
        let f = b.split(|&c| c == 0).find(|f| f.first() == Some(&b'C')).unwrap_or(b"C");
        String::from_utf8_lossy(&f[1..]).into_owned()
    })
}

/// The text values of the DataRows among `msgs`.
pub fn rows(msgs: &[Msg]) -> Vec<Vec<Option<String>>> {
    msgs.iter()
        .filter(|(t, _)| *t == btag::DATA_ROW)
        .map(|(_, b)| {
            let n = i16::from_be_bytes([b[0], b[1]]) as usize;
            let (_, vals) = proxy::interpret::strip::split_data_row(b, n).unwrap_or_else(|e| panic!("{e}"));
            vals.into_iter().map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned())).collect()
        })
        .collect()
}

/// What every tagged connection of one test shares: the tagging state and the recorded log.
pub struct Recording {
    /// The proxy-wide tagging state.
    pub shared: Arc<TaggingShared>,
    records: Mutex<Vec<LogRecord>>,
    next_txn: AtomicU64,
    next_session: AtomicU64,
}

impl Recording {
    /// Loads the catalog over `raw` and starts an empty recording.
    pub async fn new(raw: &mut Raw) -> Arc<Recording> {
        let shared = Arc::new(TaggingShared::new());
        let msgs = raw.simple(PK_QUERY).await;
        let cat = Catalog::from_rows(rows(&msgs).into_iter().map(|r| {
            let s = |i: usize| r.get(i).cloned().flatten();
            (s(0).unwrap_or_default(), s(1).unwrap_or_default(), s(2))
        }));
        shared.set_catalog(cat);
        Arc::new(Recording {
            shared,
            records: Mutex::new(Vec::new()),
            next_txn: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
        })
    }

    /// The history recorded so far, through the log's replay path.
    pub fn history(&self) -> History {
        let records = self.records.lock().map(|r| r.clone()).unwrap_or_default();
        let numbered = records.into_iter().enumerate().map(|(seq, rec)| Ok((seq as u64, rec)));
        replay(numbered).unwrap_or_else(|e| panic!("replay: {e}"))
    }
}

/// A client connection with the state machine and its tagger in the middle, recording transactions.
pub struct Tagged {
    raw: Raw,
    machine: SessionMachine,
    rec: Arc<Recording>,
    session: SessionId,
    /// The ops of the open transaction's write-ahead intent, if one was written.
    intent_ops: Vec<LoggedOp>,
    fences: FenceCounter,
}

impl Tagged {
    /// A new tagged connection.
    pub async fn connect(rec: &Arc<Recording>) -> Tagged {
        let raw = Raw::connect().await;
        let session = SessionId(rec.next_session.fetch_add(1, Ordering::Relaxed));
        Tagged {
            raw,
            machine: SessionMachine::with_tagging(Some(Tagger::new(rec.shared.clone()))),
            rec: rec.clone(),
            session,
            intent_ops: Vec::new(),
            fences: FenceCounter::new(0, std::time::Duration::ZERO, std::time::Duration::ZERO),
        }
    }

    /// Runs a fence every `n` committed transactions, as the session does.
    pub fn fence_every(&mut self, n: u64) {
        self.fences = FenceCounter::new(n, std::time::Duration::ZERO, std::time::Duration::ZERO);
    }

    /// Runs a due fence between two transactions, swallowing its replies, and records it.
    async fn maybe_fence(&mut self) {
        if self.machine.in_transaction() || !self.fences.due() {
            return;
        }
        self.fences.fenced(0);
        let setup = !self.rec.shared.fence_ready.load(Ordering::Relaxed);
        let row = self.rec.shared.fence_row;
        let what = Injection::Fence { setup, row };
        let mut b = BytesMut::new();
        FrontendMessage::Query {
            sql: Bytes::from(what.statements(&self.rec.shared).join("; ").into_bytes()),
        }
        .encode(&mut b);
        self.raw.write(&b).await;
        let mut replies = InjectedReplies::new(what);
        loop {
            let (tag, body) = self.raw.next().await;
            let sql = match replies.on_backend(tag, &body, &self.rec.shared.book) {
                Step::More => continue,
                Step::Send(sql) => sql,
                // The harness records the fence whole once it ends: it checks ops, not durability.
                Step::Commit { .. } => FENCE_COMMIT,
                Step::Done => break,
            };
            let mut b = BytesMut::new();
            FrontendMessage::Query { sql: Bytes::from_static(sql.as_bytes()) }.encode(&mut b);
            self.raw.write(&b).await;
        }
        let Injected::Fence { ops, committed } = replies.finish(&self.rec.shared) else { return };
        let id = TxnId(self.rec.next_txn.fetch_add(1, Ordering::Relaxed));
        let mut txn = LoggedTxn::new(id, self.session, self.machine.reserve_seq());
        txn.ops = ops;
        txn.statements = fence_statements(row, &self.rec.shared.fence_table());
        txn.fence = true;
        let outcome = if committed { Outcome::Committed } else { Outcome::Aborted };
        if let Ok(mut r) = self.rec.records.lock() {
            r.push(LogRecord::Finished { txn, outcome, commit_ns: None });
        }
    }

    /// Runs one simple query through the state machine and its tagger; returns what the client sees.
    pub async fn exec(&mut self, sql: &str) -> Vec<Msg> {
        self.maybe_fence().await;
        let msg = FrontendMessage::Query { sql: Bytes::copy_from_slice(sql.as_bytes()) };
        let mut step = self.machine.on_frontend(&msg, 0);
        if step == FrontendStep::LearnXid {
            // This harness does not inject queries: the transaction's id stays unknown.
            self.machine.learned_xid(None);
            step = self.machine.on_frontend(&msg, 0);
        }
        let frame = match step {
            FrontendStep::Forward { intent, frame } => {
                if let Some(snap) = intent {
                    self.intent_ops = snap.ops;
                }
                frame.unwrap_or_else(|| {
                    let mut b = BytesMut::new();
                    msg.encode(&mut b);
                    b.freeze()
                })
            }
            FrontendStep::Wait | FrontendStep::LearnXid => panic!("a lone query waited"),
        };
        self.raw.write(&frame).await;
        let mut seen = Vec::new();
        loop {
            let (tag, body) = self.raw.next().await;
            let reply = self.machine.on_backend(tag, &body, 0).unwrap_or_else(|e| panic!("{e}"));
            if !matches!(tag, btag::PARAMETER_STATUS | btag::NOTICE_RESPONSE) {
                match reply.outgoing {
                    Outgoing::Same => seen.push((tag, body.clone())),
                    Outgoing::Drop => {}
                    Outgoing::Replace(t, b) => seen.push((t, b)),
                }
            }
            for end in reply.ends {
                self.end(end);
            }
            if tag == btag::READY_FOR_QUERY {
                return seen;
            }
        }
    }

    fn end(&mut self, end: TxnEnd) {
        assert!(!self.machine.tagger().is_some_and(Tagger::is_broken), "the tagger lost track");
        let id = TxnId(self.rec.next_txn.fetch_add(1, Ordering::Relaxed));
        let mut txn = LoggedTxn::new(id, self.session, end.txn.seq);
        let intent_ops = std::mem::take(&mut self.intent_ops);
        txn.ops = if end.intent_written {
            intent_ops.into_iter().chain(end.txn.ops).collect()
        } else {
            end.txn.ops
        };
        txn.statements = end.txn.statements;
        if end.outcome == Outcome::Committed {
            self.fences.committed();
        }
        if let Ok(mut r) = self.rec.records.lock() {
            r.push(LogRecord::Finished { txn, outcome: end.outcome, commit_ns: None });
        }
    }
}
