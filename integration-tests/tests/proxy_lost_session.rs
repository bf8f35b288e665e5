//! A session whose replies the proxy loses track of (DESIGN.md §3, "every version has an owner"): a client
//! that breaks its own COPY (bad data, a Sync in the middle, then CopyDone) leaves the proxy unable to match
//! replies, so it relays that session unrecorded from then on. The client is not broken, and its later
//! writes are an unrecorded writer's: another session that reads them, at SERIALIZABLE and with no
//! concurrency at all, must be accepted with those reads counted as unverifiable, never as stale reads.

mod proxy_support;

use bytes::{Bytes, BytesMut};
use proxy_support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use verifier::{Options, UnverifiableCause, verify};
use wire::pg::FrontendMessage;
use wire::pg::backend::BackendMessage;

/// Sends `msgs` and reads until ReadyForQuery; returns whether an ErrorResponse came.
async fn round_trip(s: &mut TcpStream, buf: &mut BytesMut, msgs: &[FrontendMessage]) -> bool {
    let mut out = BytesMut::new();
    for m in msgs {
        m.encode(&mut out);
    }
    s.write_all(&out).await.expect("write");
    let mut error = false;
    loop {
        match read_backend(s, buf).await.expect("a reply") {
            BackendMessage::ErrorResponse(_) => error = true,
            BackendMessage::ReadyForQuery(_) => return error,
            _ => {}
        }
    }
}

fn query(sql: &str) -> FrontendMessage {
    FrontendMessage::Query { sql: Bytes::from(sql.to_owned()) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_proxy_lost_track_of_writes_as_an_unrecorded_writer() {
    let t = unique_table("lost_acct");
    let db = direct().await;
    db.batch_execute(&format!(
        "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int PRIMARY KEY, v int NOT NULL); INSERT INTO {t} VALUES (1, 0)"
    ))
    .await
    .expect("setup");
    let p = start_proxy_with(Opts { tagging: Some("xmin"), ..Opts::default() }).await;
    let reader = p.connect().await;
    let read = format!("SELECT v FROM {t} WHERE id = 1");
    let mut seen = Vec::new();
    seen.push(reader.query_one(&read, &[]).await.expect("read").get::<_, i32>(0));

    // The client breaks its own COPY: the database answers what the proxy does not expect.
    let (mut s, mut buf) = raw_session(&p).await;
    let mut out = BytesMut::new();
    query(&format!("COPY {t} FROM STDIN")).encode(&mut out);
    s.write_all(&out).await.expect("write");
    loop {
        if let BackendMessage::CopyInResponse(_) = read_backend(&mut s, &mut buf).await.expect("copy reply") {
            break;
        }
    }
    let copy_error = round_trip(
        &mut s,
        &mut buf,
        &[
            FrontendMessage::CopyData(Bytes::from_static(b"not a row\n")),
            FrontendMessage::Sync,
            FrontendMessage::CopyDone,
        ],
    )
    .await;
    assert!(copy_error, "the bad COPY data fails");
    // The Sync sent inside the COPY may be answered by one more ReadyForQuery: read up to a marker's row.
    let mut out = BytesMut::new();
    query("SELECT 'krait-marker'").encode(&mut out);
    s.write_all(&out).await.expect("write");
    let mut marked = false;
    loop {
        match read_backend(&mut s, &mut buf).await.expect("a reply") {
            BackendMessage::DataRow { .. } => marked = true,
            BackendMessage::ReadyForQuery(_) if marked => break,
            _ => {}
        }
    }
    // Then it goes on working through the proxy, writing the row the reader reads.
    for _ in 0..3 {
        let failed = round_trip(
            &mut s,
            &mut buf,
            &[query(&format!(
                "BEGIN ISOLATION LEVEL SERIALIZABLE; UPDATE {t} SET v = v + 1 WHERE id = 1; COMMIT"
            ))],
        )
        .await;
        assert!(!failed, "the client keeps working through the proxy");
        reader.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").await.expect("begin");
        seen.push(reader.query_one(&read, &[]).await.expect("read").get::<_, i32>(0));
        reader.batch_execute("COMMIT").await.expect("commit");
    }
    assert_eq!(seen, vec![0, 1, 2, 3], "every update committed");
    let metrics = p.admin_get("/metrics").await;
    let desyncs: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("krait_desyncs_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the desync counter");
    assert!(desyncs >= 1, "the proxy lost track of the session:\n{metrics}");
    // The lost session's recording ended in the log at once, while its client is still connected, so an
    // online verifier does not wait for it; the reader's session has not ended.
    let ended: Vec<_> = p
        .handle
        .log()
        .tail(0)
        .filter_map(|r| match r.expect("a readable record") {
            (_, history::log::LogRecord::SessionEnded { session, .. }) => Some(session),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "exactly the lost session ended: {ended:?}");
    drop((s, reader));

    let log = p.handle.log().clone();
    let h = tokio::task::spawn_blocking(move || log.replay()).await.expect("join").expect("replay");
    let report = verify(&h, &Options::default()).expect("verify");
    assert!(report.is_accept(), "the database did nothing wrong, yet:\n{report}");
    let unrecorded: u64 = report
        .unverifiable_by_cause()
        .iter()
        .filter(|(c, _)| *c == UnverifiableCause::UnrecordedWriter)
        .map(|(_, n)| n)
        .sum();
    assert!(unrecorded >= 2, "the reads of the lost session's writes are unverifiable:\n{report}");
    db.batch_execute(&format!("DROP TABLE {t}")).await.expect("drop");
}
