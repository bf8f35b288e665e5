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
