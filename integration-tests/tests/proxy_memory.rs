//! Memory a client controls (issue 19, item 1): one huge multi-statement Query must be answered in full,
//! and the session's buffers must not stay at the size that Query needed once it is over.
//!
//! The proxy runs in this test's process, so the RSS figures printed here are the proxy's plus the test
//! client's (which keeps no replies). They are printed, never asserted: they depend on the allocator and
//! the machine.

mod proxy_support;

use std::time::Duration;

use bytes::BytesMut;
use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::pg::backend::BackendMessage;
use wire::pg::backend::tag as btag;
use wire::pg::{FrontendMessage, split_frame};

/// The tests here take turns: the RSS figures they print are the whole process's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One `/proc/self/status` field, in kB (0 where the file or field is missing).
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or(0)
}

/// Starts counting the peak RSS (`VmHWM`) afresh (Linux's `clear_refs` 5); ignored where it is missing.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Counts how many messages of each interesting kind answer one Query, up to its ReadyForQuery, without
/// keeping them: (DataRows, CommandCompletes, ErrorResponses).
async fn count_replies(s: &mut TcpStream, buf: &mut BytesMut) -> (usize, usize, usize) {
    let (mut rows, mut completes, mut errors) = (0, 0, 0);
    loop {
        while let Some(f) = split_frame(buf, 1 << 20).expect("a well-formed reply") {
            match f.tag() {
                btag::DATA_ROW => rows += 1,
                btag::COMMAND_COMPLETE => completes += 1,
                btag::ERROR_RESPONSE => errors += 1,
                btag::READY_FOR_QUERY => return (rows, completes, errors),
                _ => {}
            }
        }
        let n =
            tokio::time::timeout(Duration::from_secs(120), s.read_buf(buf)).await.expect("replies in time");
        assert!(n.unwrap_or(0) > 0, "the proxy closed the connection mid-reply");
    }
}

/// The sum of the live sessions' buffer capacities, from `/metrics`.
async fn session_buffer_bytes(p: &TestProxy) -> u64 {
    let metrics = p.admin_get("/metrics").await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("krait_session_buffer_bytes ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no krait_session_buffer_bytes in /metrics:\n{metrics}"))
}

/// `SELECT 1;` 50,000 times in one simple Query (450 KB): every statement is answered, and afterwards the
/// session holds its usual small buffers again, not the ones the 450 KB Query and its replies needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_of_fifty_thousand_statements_is_answered_and_its_buffers_shrink_back() {
    const N: usize = 50_000;
    let _turn = ONE_AT_A_TIME.lock().await;
    let p = start_proxy().await;
    let (mut s, mut buf) = raw_session(&p).await;
    // The pumps count their buffers once they start, just after the client saw ReadyForQuery.
    let mut idle = 0;
    for _ in 0..100 {
        idle = session_buffer_bytes(&p).await;
        if idle > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = status_kb("VmRSS:");
    reset_peak();

    let mut query = BytesMut::new();
    FrontendMessage::Query { sql: "SELECT 1;".repeat(N).into() }.encode(&mut query);
    s.write_all(&query).await.unwrap();
    drop(query);
    let (rows, completes, errors) = count_replies(&mut s, &mut buf).await;
    assert_eq!((rows, completes, errors), (N, N, 0));
    let peak = status_kb("VmHWM:");
    let after_query = status_kb("VmRSS:");

    // The buffers shrink once the pumps are idle again; a small query after it shows they still work.
    let mut small = BytesMut::new();
    FrontendMessage::Query { sql: "SELECT 1".into() }.encode(&mut small);
    s.write_all(&small).await.unwrap();
    assert_eq!(count_replies(&mut s, &mut buf).await, (1, 1, 0));
    let held = session_buffer_bytes(&p).await;
    eprintln!("session buffers: {idle} bytes idle before the big query, {held} bytes after it");

    s.write_all(b"X\0\0\0\x04").await.unwrap();
    drop(s);
    p.wait_metric("krait_connections_active 0").await;
    assert_eq!(session_buffer_bytes(&p).await, 0, "a closed session's buffers leave the gauge");
    // The allocator may return freed memory a little after the session's task is gone.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_close = status_kb("VmRSS:");
    eprintln!(
        "RSS (proxy and test client), kB: {before} before, {peak} peak, {after_query} after the {N}-statement \
         query, {after_close} after the session closed"
    );
    assert!(held <= 2 * 64 * 1024, "the session still holds {held} bytes of buffers (idle: {idle})");
    p.handle.shutdown().await.unwrap();
}

/// Eight clients that have not logged in each try to send a 60 MiB password message (the probe that took
/// the proxy from 12 MB to 393 MB when it buffered up to `max_message_bytes` before login): each is refused
/// from the length alone, and the proxy holds at most PostgreSQL's 65,535 bytes plus a read for each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_have_not_logged_in_cannot_make_the_proxy_buffer_their_messages() {
    const CLIENTS: usize = 8;
    const DECLARED: usize = 60 << 20;
    let _turn = ONE_AT_A_TIME.lock().await;
    let (upstream, received) = upstream_that_asks_for_a_password().await;
    let p = start_proxy_with(Opts {
        upstream: Some(upstream),
        max_message_bytes: Some(64 << 20),
        tagging: Some("off"),
        ..Opts::default()
    })
    .await;
    let before = status_kb("VmRSS:");
    reset_peak();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
        s.write_all(&startup_packet()).await.unwrap();
        let mut buf = BytesMut::new();
        assert!(matches!(read_backend(&mut s, &mut buf).await, Some(BackendMessage::Authentication(_))));
        let mut header = vec![b'p'];
        header.extend_from_slice(&i32::try_from(DECLARED + 4).unwrap().to_be_bytes());
        s.write_all(&header).await.unwrap();
        clients.push((s, buf));
    }
    // Each sends its body until the proxy's refusal closes the connection.
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    for (s, _) in &mut clients {
        for _ in 0..DECLARED / chunk.len() {
            if s.write_all(&chunk).await.is_err() {
                break;
            }
            sent += chunk.len();
        }
    }
    for (s, buf) in &mut clients {
        let mut refused = false;
        while let Ok(Some(m)) =
            tokio::time::timeout(Duration::from_secs(10), read_backend_lenient(s, buf)).await
        {
            refused |= matches!(m, BackendMessage::ErrorResponse(_));
        }
        assert!(refused || buf.is_empty(), "a client was neither refused nor closed");
    }
    let peak = status_kb("VmHWM:");
    eprintln!(
        "RSS (proxy and test client), kB: {before} before, {peak} peak with {CLIENTS} clients declaring \
         {DECLARED}-byte password messages ({sent} bytes written before the proxy closed them)"
    );
    assert_eq!(received.load(std::sync::atomic::Ordering::Relaxed), 0, "nothing reached the database");
    assert!(sent < CLIENTS * DECLARED / 2, "the proxy read {sent} bytes of messages it should have refused");
    p.handle.shutdown().await.unwrap();
}

/// One backend message, or `None` at EOF or when the connection was reset (a refused client's unread
/// bytes make the proxy's close a reset).
async fn read_backend_lenient(s: &mut TcpStream, buf: &mut BytesMut) -> Option<BackendMessage> {
    loop {
        if let Some(f) = split_frame(buf, 1 << 20).ok()? {
            return BackendMessage::decode(&f).ok();
        }
        if s.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}
