//! A client session that ends leaves a session-ended record in the log, after every record of its
//! transactions (including the one left open at disconnect), so that `krait serve`'s online verifier can
//! stop waiting for it.

mod proxy_support;

use std::time::Duration;

use history::{LogRecord, Outcome};
use proxy_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_is_logged_as_ended_after_its_transactions() {
    let p = start_proxy().await;
    let t = unique_table("session_end");
    let c = p.connect().await;
    c.batch_execute(&format!("drop table if exists {t}; create table {t} (id int primary key, v int)"))
        .await
        .unwrap();
    c.batch_execute(&format!("begin; insert into {t} values (1, 10); commit")).await.unwrap();
    // Left open: the proxy records it as aborted when the client goes.
    c.batch_execute(&format!("begin; update {t} set v = 11 where id = 1")).await.unwrap();
    drop(c);

    let txns = p.wait_for(&t, 3).await;
    let expected = vec![Some(Outcome::Committed), Some(Outcome::Committed), Some(Outcome::Aborted)];
    assert_eq!(outcomes(&txns), expected, "{txns:#?}");
    let session = txns[0].txn.session;
    let last_seq = txns.iter().map(|r| r.txn.seq).max();

    // The end record may land just after the client's socket closed; wait for it (bounded).
    let mut records = Vec::new();
    for _ in 0..100 {
        // Resolved: transaction records as the proxy handed them over (the log writes them compactly).
        records = history::log::resolved(p.handle.log().tail(0))
            .collect::<Result<Vec<_>, _>>()
            .expect("readable log");
        if records
            .iter()
            .any(|(_, r)| matches!(r, LogRecord::SessionEnded { session: s, .. } if *s == session))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ended: Vec<(u64, Option<u64>)> = records
        .iter()
        .filter_map(|(seq, r)| match r {
            LogRecord::SessionEnded { session: s, last_seq } if *s == session => Some((*seq, *last_seq)),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "exactly one end record for the session: {records:#?}");
    let (end_at, logged_last) = ended[0];
    assert!(logged_last >= last_seq, "end says last seq {logged_last:?}, the session logged {last_seq:?}");
    // Every record about the session's transactions comes before its end.
    let ids: Vec<_> = records
        .iter()
        .filter_map(|(_, r)| match r {
            LogRecord::Intent(txn) | LogRecord::Finished { txn, .. } if txn.session == session => {
                Some(txn.id)
            }
            _ => None,
        })
        .collect();
    assert!(!ids.is_empty());
    for (seq, r) in &records {
        if r.txn_id().is_some_and(|id| ids.contains(&id)) {
            assert!(*seq < end_at, "record {seq} of the session follows its end at {end_at}: {r:?}");
        }
    }
    p.handle.shutdown().await.unwrap();
}

/// A proxy that ships its log lists its open sessions every few seconds (issue 21), so that a verifier that
/// lost a session's end in a hole of the shipped log can end it. The list after a session closed leaves it
/// out, names the session still connected, and its bound covers both. Shipping here goes to a port where
/// no NATS listens: the proxy keeps serving and recording, and lists all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipping_proxy_lists_its_open_sessions_and_leaves_out_a_closed_one() {
    let nowhere = format!("nats://127.0.0.1:{}", closed_port());
    let p = start_proxy_with(Opts { ship: Some(nowhere), ..Opts::default() }).await;
    let t = unique_table("sessions_open");
    let stays = p.connect().await;
    stays
        .batch_execute(&format!("drop table if exists {t}; create table {t} (id int primary key)"))
        .await
        .unwrap();
    let goes = p.connect().await;
    goes.batch_execute(&format!("insert into {t} values (1)")).await.unwrap();
    drop(goes);
    stays.batch_execute(&format!("insert into {t} values (2)")).await.unwrap();
    let txns = p.wait_for(&t, 3).await;
    let session_of = |text: &str| {
        let r = txns.iter().find(|r| r.txn.statements.iter().any(|s| s.contains(text)));
        r.expect("the transaction is recorded").txn.session
    };
    let (open, closed) = (session_of("values (2)"), session_of("values (1)"));
    assert_ne!(open, closed);

    // The closed session's end record, then a list after it (one every 5 s; wait for it, bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let list = loop {
        let records = history::log::resolved(p.handle.log().tail(0))
            .collect::<Result<Vec<_>, _>>()
            .expect("readable log");
        let end_at = records.iter().find_map(|(seq, r)| match r {
            LogRecord::SessionEnded { session, .. } if *session == closed => Some(*seq),
            _ => None,
        });
        let list = records.iter().find_map(|(seq, r)| match r {
            LogRecord::SessionsOpen { below, open } if end_at.is_some_and(|e| *seq > e) => {
                Some((*below, open.clone()))
            }
            _ => None,
        });
        if let Some(list) = list {
            break list;
        }
        assert!(std::time::Instant::now() < deadline, "no list after the session's end: {records:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (below, listed) = list;
    assert!(below > open && below > closed, "the bound {below:?} covers {open:?} and {closed:?}");
    assert!(listed.contains(&open), "the connected session is listed: {listed:?}");
    assert!(!listed.contains(&closed), "the closed session is left out: {listed:?}");
    drop(stays);
    p.handle.shutdown().await.unwrap();
}

/// A local port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    listener.local_addr().expect("an address").port()
}
