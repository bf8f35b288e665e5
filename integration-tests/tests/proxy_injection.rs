//! Fixed protocol scripts that once stalled or broke a client through the proxy with xmin tagging on: the
//! proxy's own queries (fences, catalog reloads) must run only where the server is at rest, and the wait
//! for a transaction's rows before its commit must never wait on replies the server will not send. Each
//! script runs directly against PostgreSQL and through a proxy that fences after every commit; the client
//! must see the same replies, in time.

mod proxy_support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::pg::backend::BackendMessage;
use wire::pg::{FrontendMessage, StartupPacket, Target, split_frame};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn parse(name: &str, sql: &str) -> FrontendMessage {
    FrontendMessage::Parse { name: b(name), query: b(sql), param_types: vec![] }
}

fn bind(statement: &str) -> FrontendMessage {
    FrontendMessage::Bind {
        portal: b(""),
        statement: b(statement),
        param_formats: vec![],
        params: vec![],
        result_formats: vec![],
    }
}

fn execute() -> FrontendMessage {
    FrontendMessage::Execute { portal: b(""), max_rows: 0 }
}

fn query(sql: &str) -> FrontendMessage {
    FrontendMessage::Query { sql: b(sql) }
}

/// When a step's replies are complete.
#[derive(Clone, Copy)]
enum Until {
    /// This many ReadyForQuery messages.
    Ready(usize),
    /// The first message with this tag.
    Tag(u8),
}

/// Sends each step's messages in one write and reads its replies; returns every reply, with the parts that
/// differ between connections (BackendKeyData, ParameterStatus, table OIDs) left out.
async fn run(addr: SocketAddr, steps: &[(Vec<FrontendMessage>, Until)]) -> Vec<String> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut out = BytesMut::new();
    StartupPacket::Startup {
        major: 3,
        minor: 0,
        params: vec![(b("user"), b(PG_USER)), (b("database"), b(PG_DB))],
    }
    .encode(&mut out);
    let startup = (Vec::new(), Until::Ready(1));
    let mut buf = BytesMut::new();
    let mut seen = Vec::new();
    for (i, (msgs, until)) in std::iter::once(&startup).chain(steps).enumerate() {
        for m in msgs {
            m.encode(&mut out);
        }
        s.write_all(&out).await.expect("write");
        out.clear();
        let mut ready = 0;
        loop {
            if let Some(f) = split_frame(&mut buf, 1 << 24).expect("frame") {
                let m = BackendMessage::decode(&f).expect("backend message");
                let shown = match &m {
                    BackendMessage::BackendKeyData { .. } | BackendMessage::ParameterStatus { .. } => {
                        continue;
                    }
                    BackendMessage::NoticeResponse(_) => continue,
                    BackendMessage::ErrorResponse(e) => {
                        format!("Error({})", String::from_utf8_lossy(e.code().map(|c| &c[..]).unwrap_or(b"")))
                    }
                    BackendMessage::RowDescription { fields } => {
                        let names: Vec<_> = fields.iter().map(|f| (f.name.clone(), f.type_oid)).collect();
                        format!("RowDescription({names:?})")
                    }
                    other => format!("{other:?}"),
                };
                seen.push(shown);
                let done = match until {
                    Until::Ready(n) => {
                        ready += usize::from(matches!(m, BackendMessage::ReadyForQuery(_)));
                        ready == *n
                    }
                    Until::Tag(t) => f.tag() == *t,
                };
                if done {
                    break;
                }
                continue;
            }
            let n = tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("step {i}: no reply in time; replies so far: {seen:?}"));
            assert!(n.expect("read") > 0, "step {i}: connection closed; replies so far: {seen:?}");
        }
    }
    seen
}

/// Runs `steps` directly and through a proxy with xmin tagging and a fence after every commit, after
/// `setup` each time, and compares.
async fn same_replies(table: &str, setup: &str, steps: &[(Vec<FrontendMessage>, Until)]) -> TestProxy {
    let d = direct().await;
    d.batch_execute(setup).await.expect("setup");
    let direct_replies = run(PG_ADDR.parse().expect("address"), steps).await;
    d.batch_execute(setup).await.expect("setup");
    let p = start_proxy_with(Opts { tagging: Some("xmin"), fence_every: Some(1), ..Opts::default() }).await;
    let proxied = run(p.handle.listen_addr(), steps).await;
    assert_eq!(proxied, direct_replies, "{table}: replies through the proxy differ");
    p.wait_metric("krait_desyncs_total 0").await;
    d.batch_execute(&format!("drop table if exists {table}")).await.expect("cleanup");
    p
}

/// The stall the random differential test once hit: a commit makes a fence due, and the client's next
/// message is a Parse that fails with no transaction open. The server then skips everything up to the
/// client's Sync; a fence injected before that Sync would be skipped too and never answered, and the Sync
/// would wait behind it for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fence_while_the_server_skips_to_sync_after_an_error() {
    let t = unique_table("inj_skip");
    let setup = format!("drop table if exists {t}; create table {t} (id int primary key, v int)");
    let steps = vec![
        (
            vec![
                query(&format!("insert into {t} values (1, 1)")),
                parse("", "select * from krait_no_such_table"),
                FrontendMessage::Flush,
            ],
            Until::Tag(b'E'),
        ),
        (vec![FrontendMessage::Sync], Until::Ready(1)),
        (vec![query(&format!("select v from {t} where id = 1"))], Until::Ready(1)),
    ];
    let p = same_replies(&t, &setup, &steps).await;
    // The fences did run, at rest points.
    let metrics = p.admin_get("/metrics").await;
    assert!(!metrics.contains("krait_fences_total 0\n"), "{metrics}");
    p.handle.shutdown().await.expect("shutdown");
}

/// A fence between two client transactions must leave the client's unnamed prepared statement alone: it
/// outlives Sync, and a simple Query would destroy it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_keeps_the_clients_unnamed_statement() {
    let t = unique_table("inj_unnamed");
    let setup = format!("drop table if exists {t}; create table {t} (id int primary key, v int)");
    let steps = vec![
        (
            vec![
                parse("", &format!("select v from {t} where id = 1")),
                parse("s1", &format!("insert into {t} values (1, 42)")),
                bind("s1"),
                execute(),
                FrontendMessage::Sync,
            ],
            Until::Ready(1),
        ),
        // The insert committed, so a fence runs before this Bind.
        (vec![bind(""), execute(), FrontendMessage::Sync], Until::Ready(1)),
    ];
    let p = same_replies(&t, &setup, &steps).await;
    p.handle.shutdown().await.expect("shutdown");
}

/// libpq's COPY FROM STDIN in the extended protocol pipelines a Sync right after the Execute; the server
/// ignores it until CopyDone. Waiting for the COPY's result before that Sync would wait for ever (the client
/// sends its data only after CopyInResponse), and the ignored Sync must not leave the reply matching one
/// ReadyForQuery behind, or later rows would reach the client unstripped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_copy_with_a_pipelined_sync() {
    let t = unique_table("inj_copy");
    let setup = format!("drop table if exists {t}; create table {t} (id int primary key, v int)");
    let steps = vec![
        (
            vec![parse("", &format!("copy {t} from stdin")), bind(""), execute(), FrontendMessage::Sync],
            Until::Tag(b'G'),
        ),
        (
            vec![
                FrontendMessage::CopyData(b("1\t10\n2\t20\n")),
                FrontendMessage::CopyDone,
                FrontendMessage::Sync,
            ],
            Until::Ready(1),
        ),
        (vec![query(&format!("select v from {t} order by id"))], Until::Ready(1)),
        (
            vec![
                parse("", &format!("select v from {t} where id = 2")),
                FrontendMessage::Describe { target: Target::Statement, name: b("") },
                bind(""),
                execute(),
                FrontendMessage::Sync,
            ],
            Until::Ready(1),
        ),
    ];
    let p = same_replies(&t, &setup, &steps).await;
    p.handle.shutdown().await.expect("shutdown");
}
