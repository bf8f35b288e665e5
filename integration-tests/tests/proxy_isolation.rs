//! The isolation level each transaction asked for, as the proxy records it (issue 17, item 4): the session
//! default the database reports at startup, the levels BEGIN and SET TRANSACTION ask for, and the changes to
//! the default, in the simple and the extended protocol. Checked on the replayed history, which is what the
//! verifier reads, and on the log's Isolation records, which must come one per change, not per transaction.

mod proxy_support;

use std::time::Duration;

use history::IsolationLevel::{
    self, ReadCommitted as RC, ReadUncommitted as RU, RepeatableRead as RR, Serializable as S,
};
use history::log::LogRecord;
use proxy_support::*;

/// A proxy without fences: a fence is a transaction of the session too (at READ COMMITTED), which would
/// add records to count.
async fn proxy() -> TestProxy {
    start_proxy_with(Opts { fence_every: Some(0), ..Opts::default() }).await
}

/// The level of each client transaction in the replayed history, in session order, once `count` are there.
async fn levels(p: &TestProxy, count: usize) -> Vec<Option<IsolationLevel>> {
    let mut levels = Vec::new();
    for _ in 0..100 {
        let log = p.handle.log().clone();
        let h = tokio::task::spawn_blocking(move || log.replay()).await.expect("join").expect("replay");
        let mut txns: Vec<_> = h.transactions.iter().filter(|t| !t.fence).collect();
        txns.sort_by_key(|t| (t.session, t.seq));
        levels = txns.iter().map(|t| t.isolation).collect();
        if levels.len() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    levels
}

/// The levels of the log's Isolation records, in log order.
fn isolation_records(p: &TestProxy) -> Vec<IsolationLevel> {
    p.handle
        .log()
        .tail(0)
        .filter_map(|r| match r.expect("a readable record") {
            (_, LogRecord::Isolation { level, .. }) => Some(level),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_run_at_the_default_unless_begin_or_set_transaction_asks() {
    let p = proxy().await;
    let c = p.connect().await;
    c.batch_execute("select 1").await.unwrap();
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.unwrap();
    c.batch_execute("select 1").await.unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    c.batch_execute("select 2").await.unwrap();
    // Several modes in any order, and all in one Query: its intent is logged before the server answers.
    c.batch_execute("START TRANSACTION READ ONLY, ISOLATION LEVEL SERIALIZABLE DEFERRABLE; select 3; COMMIT")
        .await
        .unwrap();
    c.batch_execute("begin; set transaction isolation level serializable").await.unwrap();
    c.batch_execute("select 4").await.unwrap();
    c.batch_execute("commit").await.unwrap();
    c.batch_execute("begin work isolation level read uncommitted; select 5; commit").await.unwrap();
    // After a query, SET TRANSACTION fails: the transaction keeps the level it had.
    c.batch_execute("begin").await.unwrap();
    c.batch_execute("select 6").await.unwrap();
    assert!(c.batch_execute("set transaction isolation level serializable").await.is_err());
    c.batch_execute("rollback").await.unwrap();
    c.batch_execute("select 7").await.unwrap();
    drop(c);

    let got = levels(&p, 8).await;
    assert_eq!(got, [RC, RR, RC, S, S, RU, RC, RC].map(Some).to_vec());
    assert_eq!(isolation_records(&p), vec![RC, RR, RC, S, RU, RC], "one record per change");
    p.wait_metric("krait_isolation_unknown_total 0").await;
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_default_holds_from_its_commit_until_reset() {
    let p = proxy().await;
    let c = p.connect().await;
    c.batch_execute("select 1").await.unwrap();
    c.batch_execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE").await.unwrap();
    for i in 0..10 {
        c.batch_execute(&format!("select {i}")).await.unwrap();
    }
    // A SET in a block that rolls back is undone by PostgreSQL, and by the proxy.
    c.batch_execute("begin; set default_transaction_isolation = 'read uncommitted'; rollback").await.unwrap();
    c.batch_execute("select 1").await.unwrap();
    c.batch_execute("SET default_transaction_isolation TO 'repeatable read'").await.unwrap();
    c.batch_execute("select 1").await.unwrap();
    c.batch_execute("RESET default_transaction_isolation").await.unwrap();
    c.batch_execute("select 1").await.unwrap();
    drop(c);

    let mut want = vec![Some(RC)];
    want.extend([Some(S); 12]);
    want.extend([Some(RR), Some(RC)]);
    assert_eq!(levels(&p, want.len()).await, want);
    assert_eq!(isolation_records(&p), vec![RC, S, RR, RC], "15 transactions, 4 levels in a row");
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_the_proxy_cannot_follow_is_recorded_as_unknown_not_as_the_last_one() {
    let p = proxy().await;
    let c = p.connect().await;
    c.batch_execute("SET default_transaction_isolation = 'serializable'").await.unwrap();
    c.batch_execute("select 1").await.unwrap();
    // The proxy does not evaluate set_config: the session now runs at READ COMMITTED, and a transaction
    // recorded at the SERIALIZABLE logged before would be held to serializability under `declared`.
    c.batch_execute("select set_config('default_transaction_isolation', 'read ' || 'committed', false)")
        .await
        .unwrap();
    c.batch_execute("select 2").await.unwrap();
    c.batch_execute("select 3").await.unwrap();
    c.batch_execute("SET default_transaction_isolation = 'repeatable read'").await.unwrap();
    c.batch_execute("select 4").await.unwrap();
    drop(c);

    // The SETs record nothing; the set_config runs at the level it changes, as the SETs' statements would.
    let want = vec![Some(S), Some(S), None, None, Some(RR)];
    assert_eq!(levels(&p, want.len()).await, want);
    let records: Vec<&'static str> = p
        .handle
        .log()
        .tail(0)
        .filter_map(|r| match r.expect("a readable record") {
            (_, LogRecord::Isolation { .. }) => Some("level"),
            (_, LogRecord::IsolationUnknown { .. }) => Some("unknown"),
            _ => None,
        })
        .collect();
    assert_eq!(records, ["level", "unknown", "level"], "one record per change, unknown included");
    p.wait_metric("krait_isolation_unknown_total 2").await;
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_from_the_startup_packet_is_learnt_and_reset_returns_to_it() {
    let p = proxy().await;
    let mut config: tokio_postgres::Config = p.conn_str().parse().expect("a connection string");
    config.options("-c default_transaction_isolation=repeatable\\ read");
    let (c, conn) = config.connect(tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    let shown = c.simple_query("show default_transaction_isolation").await.unwrap();
    let shown = shown.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    });
    assert_eq!(shown.as_deref(), Some("repeatable read"), "the client sees only its own query's rows");
    c.batch_execute("select 1").await.unwrap();
    c.batch_execute("begin isolation level serializable; select 2; commit").await.unwrap();
    c.batch_execute("set default_transaction_isolation = 'read committed'").await.unwrap();
    c.batch_execute("select 3").await.unwrap();
    c.batch_execute("RESET ALL").await.unwrap();
    c.batch_execute("select 4").await.unwrap();
    drop(c);

    assert_eq!(levels(&p, 4).await, [RR, S, RC, RR].map(Some).to_vec());
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extended_protocol_records_the_same_levels() {
    let p = proxy().await;
    let t = unique_table("isolation_ext");
    let c = p.connect().await;
    c.batch_execute(&format!("create table {t} (id int primary key, v int)")).await.unwrap();
    // Every statement below goes as Parse, Bind, Execute, Sync.
    let insert = c.prepare(&format!("insert into {t} values ($1, $2)")).await.unwrap();
    c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ", &[]).await.unwrap();
    c.execute(&insert, &[&1i32, &10i32]).await.unwrap();
    c.execute("COMMIT", &[]).await.unwrap();
    c.execute(&insert, &[&2i32, &20i32]).await.unwrap();
    c.execute("SET default_transaction_isolation = serializable", &[]).await.unwrap();
    c.execute(&insert, &[&3i32, &30i32]).await.unwrap();
    c.execute("begin", &[]).await.unwrap();
    c.execute("set transaction isolation level read uncommitted", &[]).await.unwrap();
    c.execute(&insert, &[&4i32, &40i32]).await.unwrap();
    c.execute("commit", &[]).await.unwrap();
    // tokio-postgres's own transactions: START TRANSACTION ISOLATION LEVEL …
    let mut c = c;
    let tx = c.build_transaction().isolation_level(tokio_postgres::IsolationLevel::RepeatableRead).start();
    let tx = tx.await.unwrap();
    tx.execute(&insert, &[&5i32, &50i32]).await.unwrap();
    tx.commit().await.unwrap();
    // A write's intent goes to the log before the server has answered the BEGIN in front of it.
    c.batch_execute(&format!("BEGIN ISOLATION LEVEL READ COMMITTED; insert into {t} values (6, 60); COMMIT"))
        .await
        .unwrap();
    c.query(&format!("select v from {t}"), &[]).await.unwrap();
    drop(c);

    // The CREATE TABLE, then the six inserts' transactions, then the select.
    let intents =
        p.recorded().iter().filter(|r| r.txn.statements.iter().any(|s| s.contains("(6, 60)"))).count();
    assert_eq!(intents, 1);
    assert_eq!(levels(&p, 8).await, [RC, RR, RC, S, RU, RR, RC, S].map(Some).to_vec());
    p.handle.shutdown().await.unwrap();
}
