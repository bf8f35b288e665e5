//! Error paths: the database down or killed mid-transaction, clients that send garbage, oversized messages
//! or broken TLS, and cancel requests. Each failure must stay with the client that caused it.

mod proxy_support;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use history::Outcome;
use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::pg::backend::BackendMessage;
use wire::pg::{FrontendMessage, StartupPacket};

/// Reads until EOF and returns the FATAL error's message, if one came.
async fn fatal_then_eof(s: &mut TcpStream, buf: &mut BytesMut) -> String {
    let mut message = String::new();
    while let Some(m) = read_backend(s, buf).await {
        if let BackendMessage::ErrorResponse(e) = m {
            assert_eq!(e.severity().map(|s| s.to_vec()), Some(b"FATAL".to_vec()));
            message = String::from_utf8_lossy(e.message().unwrap()).into_owned();
        }
    }
    message
}

async fn still_serves(p: &TestProxy) {
    let c = p.connect().await;
    let row = c.query_one("select 1 + 1", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_down_gives_the_client_a_clear_error_and_the_proxy_stays_up() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let p = start_proxy_with(Opts { upstream: Some(addr.to_string()), ..Opts::default() }).await;
    for _ in 0..2 {
        let err =
            tokio_postgres::connect(&p.conn_str(), tokio_postgres::NoTls).await.err().expect("must fail");
        let text = format!("{err:?} {err}");
        assert!(text.contains("cannot connect to the database"), "{text}");
        assert!(text.contains(&addr.to_string()), "{text}");
    }
    assert_eq!(p.admin_get("/healthz").await, "ok\n");
    p.wait_metric("krait_upstream_errors_total 2").await;
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_killed_inside_a_transaction_block_records_it_aborted() {
    let p = start_proxy().await;
    let t = unique_table("killed_block");
    let c = p.connect().await;
    c.batch_execute(&format!("drop table if exists {t}; create table {t} (id int)")).await.unwrap();
    c.batch_execute("begin").await.unwrap();
    c.batch_execute(&format!("insert into {t} values (1)")).await.unwrap();
    let pid: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    direct().await.execute("select pg_terminate_backend($1)", &[&pid]).await.unwrap();
    assert!(c.batch_execute("select 1").await.is_err(), "the session must be gone");
    let txns = p.wait_for(&t, 2).await;
    assert_eq!(outcomes(&txns), vec![Some(Outcome::Committed), Some(Outcome::Aborted)], "{txns:#?}");
    assert_eq!(txns[1].txn.statements[0], "begin");
    still_serves(&p).await;
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_killed_while_a_commit_is_in_flight_records_it_indeterminate() {
    let p = start_proxy().await;
    let t = unique_table("killed_commit");
    let c = p.connect().await;
    // An autocommit statement may commit when it ends, so its intent is logged before it is forwarded.
    let sql = format!("select pg_sleep(30), '{t}'");
    let running = tokio::spawn(async move { c.batch_execute(&sql).await });
    let d = direct().await;
    let mut killed = 0;
    for _ in 0..100 {
        let rows = d
            .query(
                "select pg_terminate_backend(pid) from pg_stat_activity where query like $1 and pid <> pg_backend_pid()",
                &[&format!("%pg_sleep(30), '{t}'%")],
            )
            .await
            .unwrap();
        killed = rows.len();
        if killed > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(killed, 1, "the sleeping backend was not found");
    let result = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap();
    assert!(result.is_err());
    let txns = p.wait_for(&t, 1).await;
    assert_eq!(outcomes(&txns), vec![Some(Outcome::Indeterminate)], "{txns:#?}");
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_unknown_messages_close_only_that_client() {
    let p = start_proxy_with(Opts { max_message_bytes: Some(64 * 1024), ..Opts::default() }).await;
    let bystander = p.connect().await;

    let (mut s, mut buf) = raw_session(&p).await;
    s.write_all(b"Q\x7f\xff\xff\xff").await.unwrap();
    let msg = fatal_then_eof(&mut s, &mut buf).await;
    assert!(msg.contains("exceeds the limit"), "{msg}");

    let (mut s, mut buf) = raw_session(&p).await;
    s.write_all(b"Y\0\0\0\x04").await.unwrap();
    let msg = fatal_then_eof(&mut s, &mut buf).await;
    assert!(msg.contains("unknown frontend message type"), "{msg}");

    let (mut s, mut buf) = raw_session(&p).await;
    s.write_all(b"Q\0\0\0\x09abcde").await.unwrap(); // a Query without its terminator
    let msg = fatal_then_eof(&mut s, &mut buf).await;
    assert!(msg.contains("Query"), "{msg}");

    // Not PostgreSQL at all.
    let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await.unwrap();
    assert!(n.is_ok(), "the connection must be closed");

    assert_eq!(bystander.query_one("select 3", &[]).await.unwrap().get::<_, i32>(0), 3);
    p.wait_metric("krait_client_protocol_errors_total 4").await;
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_tls_handshake_closes_only_that_connection() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(certs.path(), "server");
    let p = start_proxy_with(Opts { tls: Some((cert, key, "prefer")), ..Opts::default() }).await;
    let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    let mut req = BytesMut::new();
    StartupPacket::SslRequest.encode(&mut req);
    s.write_all(&req).await.unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"S");
    s.write_all(b"\x16\x03\x01\x00\x05junk! this is not a ClientHello").await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await.unwrap();
    // GSSENCRequest is refused cleanly, and the client may go on without it.
    let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    let mut req = BytesMut::new();
    StartupPacket::GssEncRequest.encode(&mut req);
    s.write_all(&req).await.unwrap();
    s.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"N");
    still_serves(&p).await;
    p.wait_metric("krait_tls_handshake_errors_total 1").await;
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_reaches_the_right_backend() {
    let p = start_proxy().await;
    let c = p.connect().await;
    let token = c.cancel_token();
    let marker = unique("cancel_me");
    let sql = format!("select pg_sleep(30), '{marker}'");
    let running = tokio::spawn(async move { c.batch_execute(&sql).await });
    // Cancel only once the query runs, or the cancel would find nothing to cancel.
    let d = direct().await;
    let pattern = format!("%pg_sleep(30), '{marker}'%");
    let mut active = false;
    for _ in 0..200 {
        let q = "select 1 from pg_stat_activity where state = 'active' and query like $1 and pid <> pg_backend_pid()";
        active = !d.query(q, &[&pattern]).await.unwrap().is_empty();
        if active {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(active, "the query never started");
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap();
    let err = result.unwrap_err();
    assert_eq!(err.code(), Some(&tokio_postgres::error::SqlState::QUERY_CANCELED), "{err:?}");
    p.wait_metric("krait_cancels_relayed_total 1").await;
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_report_health_metrics_and_status() {
    let p = start_proxy().await;
    let t = unique_table("admin");
    let c = p.connect().await;
    c.batch_execute(&format!("drop table if exists {t}; create table {t} (id int)")).await.unwrap();
    drop(c);
    p.wait_for(&t, 1).await;
    assert_eq!(p.admin_get("/healthz").await, "ok\n");
    p.wait_metric("krait_transactions_recorded_total{outcome=\"committed\"} 1").await;
    let metrics = p.admin_get("/metrics").await;
    for needle in [
        "krait_connections_total 1",
        "krait_transactions_recorded_total{outcome=\"committed\"} 1",
        "# TYPE krait_log_fsync_seconds histogram",
        "krait_log_fsync_seconds_bucket{le=\"+Inf\"}",
        "krait_log_bytes ",
    ] {
        assert!(metrics.contains(needle), "{needle} missing from\n{metrics}");
    }
    let status: serde_json::Value = serde_json::from_str(&p.admin_get("/api/status").await).unwrap();
    assert_eq!(status["transactions"]["committed"], 1);
    assert_eq!(status["log"]["durability"], "strict");
    assert!(status["log"]["fsyncs"].as_u64().unwrap() >= 1, "strict durability fsyncs: {status}");
    p.handle.shutdown().await.unwrap();
}

/// A database that lets anyone in (AuthenticationOk, BackendKeyData, ReadyForQuery), then hangs up on the
/// first query it is sent. Returns its address.
async fn upstream_that_hangs_up_after_login() -> String {
    upstream_that_hangs_up_after_login_with_keys(1).await
}

/// As [`upstream_that_hangs_up_after_login`], sending `keys` BackendKeyData messages during startup.
async fn upstream_that_hangs_up_after_login_with_keys(keys: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut len = [0u8; 4];
                s.read_exact(&mut len).await?;
                let mut startup = vec![0u8; (i32::from_be_bytes(len) as usize).saturating_sub(4)];
                s.read_exact(&mut startup).await?;
                let mut reply = Vec::new();
                reply.extend_from_slice(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
                for secret in 0..keys {
                    reply.extend_from_slice(&[b'K', 0, 0, 0, 12, 0, 0, 0x10, 0x92, 0, 0, 0, secret as u8]);
                }
                reply.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
                s.write_all(&reply).await?;
                let mut first = [0u8; 1];
                s.read_exact(&mut first).await?;
                std::io::Result::Ok(())
            });
        }
    });
    addr
}

/// Logs in to the proxy as `PG_USER` `sessions` times, one after the other, each until the proxy closes
/// the connection (the database behind it hangs up on the first query).
async fn sessions_until_closed(p: &TestProxy, sessions: usize) {
    for _ in 0..sessions {
        let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
        let mut buf = BytesMut::new();
        StartupPacket::Startup {
            major: 3,
            minor: 0,
            params: vec![(Bytes::from("user"), Bytes::from(PG_USER))],
        }
        .encode(&mut buf);
        s.write_all(&buf).await.unwrap();
        // Logged in, the client sends a request (until one does, no database is chosen to record, and the
        // proxy asks the database nothing). The session ends when the proxy's first query of its own (the
        // catalog, or the default isolation level) finds the database gone.
        let mut rbuf = BytesMut::new();
        while let Some(m) = read_backend(&mut s, &mut rbuf).await {
            if matches!(m, BackendMessage::ReadyForQuery(_)) {
                let mut query = BytesMut::new();
                FrontendMessage::Query { sql: Bytes::from_static(b"SELECT 1") }.encode(&mut query);
                s.write_all(&query).await.unwrap();
            }
        }
    }
}

/// Waits up to two seconds for the proxy to hold no cancel key (sessions end a little after their socket).
async fn assert_no_cancel_key_held(p: &TestProxy) {
    let mut held = p.handle.cancel_keys_held();
    for _ in 0..100 {
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        held = p.handle.cancel_keys_held();
    }
    assert_eq!(held, 0, "cancel keys of ended sessions are still held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_catalog_load_fails_leaves_no_cancel_key_behind() {
    let upstream = upstream_that_hangs_up_after_login().await;
    let p =
        start_proxy_with(Opts { upstream: Some(upstream), tagging: Some("xmin"), ..Opts::default() }).await;
    sessions_until_closed(&p, 3).await;
    assert_no_cancel_key_held(&p).await;
    p.handle.shutdown().await.unwrap();
}

/// A database that sends a second BackendKeyData during startup (PostgreSQL never does; a broken server or
/// something in between might): the second key replaces the first for the client, and neither outlives
/// the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_key_from_the_database_leaves_no_cancel_key_behind() {
    let upstream = upstream_that_hangs_up_after_login_with_keys(2).await;
    let p =
        start_proxy_with(Opts { upstream: Some(upstream), tagging: Some("off"), ..Opts::default() }).await;
    sessions_until_closed(&p, 3).await;
    assert_no_cancel_key_held(&p).await;
    p.handle.shutdown().await.unwrap();
}

/// The admin server shares file descriptors with the proxy's clients (issue 19, item 4): a request whose
/// headers never finish is closed after the timeout, and connections beyond the cap wait in the backlog
/// until a slot frees, then get the same treatment. Clients are served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_admin_requests_are_closed_after_the_timeout_and_capped() {
    let p = start_proxy_with(Opts { admin_limits: Some((300, 4)), ..Opts::default() }).await;
    let addr = p.handle.admin_addr().expect("admin enabled");
    let mut held = Vec::new();
    for _ in 0..6 {
        let mut s = TcpStream::connect(addr).await.expect("connect to admin");
        s.write_all(b"GET /metr").await.expect("half a request");
        held.push(s);
    }
    still_serves(&p).await;
    for (i, s) in held.iter_mut().enumerate() {
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            let mut buf = [0u8; 512];
            while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        })
        .await;
        assert!(closed.is_ok(), "half-sent request {i} still open after 5 s");
    }
    assert_eq!(p.admin_get("/healthz").await, "ok\n");
}

/// Before login the proxy holds a client to PostgreSQL's own limits (10,000 bytes of startup packet, 65,535
/// of password), far below `max_message_bytes` (1 MiB here): a client that declares more gets a FATAL error
/// from the proxy as soon as it sent the length, with most of the message still unsent, and nothing of it
/// reaches the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_login_a_message_over_postgresqls_limit_is_refused_from_its_length() {
    let (upstream, received) = upstream_that_asks_for_a_password().await;
    let max = 1 << 20;
    let p = start_proxy_with(Opts {
        upstream: Some(upstream),
        max_message_bytes: Some(max),
        tagging: Some("off"),
        ..Opts::default()
    })
    .await;

    // A startup packet of 20,000 bytes, of which only the first KiB is sent.
    let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    let mut packet = 20_000i32.to_be_bytes().to_vec();
    packet.extend_from_slice(&[0, 3, 0, 0]);
    packet.extend_from_slice(&[b'x'; 1024]);
    s.write_all(&packet).await.unwrap();
    let msg = fatal_then_eof(&mut s, &mut BytesMut::new()).await;
    assert!(msg.contains("invalid startup packet") && msg.contains("limit of 10000 bytes"), "{msg}");

    // A password message that declares half of max_message_bytes, of which only the first KiB is sent.
    let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    s.write_all(&startup_packet()).await.unwrap();
    let mut buf = BytesMut::new();
    match read_backend(&mut s, &mut buf).await {
        Some(BackendMessage::Authentication(_)) => {}
        other => panic!("expected the password request, got {other:?}"),
    }
    let declared = max / 2;
    let mut password = vec![b'p'];
    password.extend_from_slice(&i32::try_from(declared + 4).unwrap().to_be_bytes());
    password.extend_from_slice(&[b'x'; 1024]);
    s.write_all(&password).await.unwrap();
    let msg = fatal_then_eof(&mut s, &mut buf).await;
    assert!(msg.contains("invalid authentication message") && msg.contains("limit of 65540 bytes"), "{msg}");
    assert_eq!(received.load(std::sync::atomic::Ordering::Relaxed), 0, "none of it reached the database");

    p.wait_metric("krait_client_protocol_errors_total 2").await;
    p.handle.shutdown().await.unwrap();
}
