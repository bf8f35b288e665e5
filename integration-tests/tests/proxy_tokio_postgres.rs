//! tokio-postgres through the proxy: the simple protocol, the extended protocol, pipelining, and what the
//! recorder logs for each.

mod proxy_support;

use history::Outcome;
use proxy_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_protocol_transactions_are_recorded_with_their_outcomes() {
    let p = start_proxy().await;
    let t = unique_table("simple");
    let c = p.connect().await;
    c.batch_execute(&format!("drop table if exists {t}; create table {t} (id int primary key, v int)"))
        .await
        .unwrap();
    c.batch_execute(&format!("insert into {t} values (1, 10)")).await.unwrap();
    c.batch_execute("begin").await.unwrap();
    c.batch_execute(&format!("update {t} set v = 11 where id = 1")).await.unwrap();
    c.batch_execute("commit").await.unwrap();
    c.batch_execute("begin").await.unwrap();
    c.batch_execute(&format!("update {t} set v = 12 where id = 1")).await.unwrap();
    c.batch_execute("rollback").await.unwrap();
    let err = c.batch_execute(&format!("insert into {t} values (1, 0)")).await.unwrap_err();
    assert!(err.to_string().contains("duplicate key") || format!("{err:?}").contains("23505"), "{err:?}");
    // The proxy relays results faithfully.
    let rows = c.simple_query(&format!("select v from {t}")).await.unwrap();
    assert!(
        rows.iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("11")))
    );
    drop(c);

    let txns = p.wait_for(&t, 6).await;
    assert_eq!(txns.len(), 6, "{txns:#?}");
    let summary: Vec<(Option<Outcome>, Vec<String>)> =
        txns.iter().map(|r| (r.outcome, r.txn.statements.clone())).collect();
    assert_eq!(summary[1], (Some(Outcome::Committed), vec![format!("insert into {t} values (1, 10)")]));
    assert_eq!(
        summary[2],
        (
            Some(Outcome::Committed),
            vec!["begin".into(), format!("update {t} set v = 11 where id = 1"), "commit".into()]
        )
    );
    assert_eq!(summary[3].0, Some(Outcome::Aborted), "rolled back: {summary:?}");
    assert_eq!(summary[4].0, Some(Outcome::Aborted), "duplicate key: {summary:?}");
    assert_eq!(summary[5].0, Some(Outcome::Committed), "the select: {summary:?}");
    // Session order and timestamps.
    let seqs: Vec<u64> = txns.iter().map(|r| r.txn.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let committed = &txns[2];
    assert!(committed.txn.start_ns.unwrap() <= committed.commit_ns.unwrap());
    assert!(txns.iter().all(|r| r.txn.session == txns[0].txn.session));
    // Under strict durability every commit reply waited for the fsync of its outcome; so did the first
    // session for the recording horizon, before it classified any read against it, and every fence (the
    // one the connection ran as it opened, and the one as it closed) for its intent's, before its COMMIT.
    // The closing fence may not have started yet, or be between its intent and its COMMIT: the count is
    // compared once both fences have their outcome (its intent's wait came before its COMMIT). Comparing as
    // soon as the count matched raced with the closing fence's intent appearing in the log.
    let expected = || {
        let recorded = p.recorded();
        let fences_ended = recorded.iter().filter(|r| r.txn.fence && r.outcome.is_some()).count();
        let committed =
            recorded.iter().filter(|r| r.outcome == Some(Outcome::Committed) && !r.txn.fence).count();
        let fences = recorded.iter().filter(|r| r.txn.fence).count();
        (fences_ended == 2, committed as u64 + 1 + fences as u64)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !expected().0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (settled, expected) = expected();
    assert!(settled, "the opening and the closing fence both end: {:#?}", p.recorded());
    assert_eq!(p.handle.log().stats().durable_waits, expected, "{:#?}", p.recorded());
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_and_prepared_statements_work_and_are_recorded() {
    let p = start_proxy().await;
    let t = unique_table("extended");
    let c = p.connect().await;
    c.batch_execute(&format!("drop table if exists {t}; create table {t} (id int primary key, v text)"))
        .await
        .unwrap();
    let insert = c.prepare(&format!("insert into {t} values ($1, $2)")).await.unwrap();
    for i in 0..5i32 {
        c.execute(&insert, &[&i, &format!("v{i}")]).await.unwrap();
    }
    let rows = c.query(&format!("select v from {t} where id >= $1 order by id"), &[&2i32]).await.unwrap();
    let got: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec!["v2", "v3", "v4"]);
    // An explicit transaction through the extended protocol.
    let mut c = c;
    let tx = c.transaction().await.unwrap();
    tx.execute(&format!("update {t} set v = 'x' where id = $1"), &[&1i32]).await.unwrap();
    tx.commit().await.unwrap();
    // A failing statement in the extended protocol.
    assert!(c.execute(&insert, &[&1i32, &"dup"]).await.is_err());
    // Portals suspended by a row limit: a cursor-style query in a transaction.
    let tx = c.transaction().await.unwrap();
    let portal = tx.bind(&format!("select id from {t} order by id"), &[]).await.unwrap();
    let first = tx.query_portal(&portal, 2).await.unwrap();
    let rest = tx.query_portal(&portal, 10).await.unwrap();
    assert_eq!((first.len(), rest.len()), (2, 3));
    tx.commit().await.unwrap();
    drop(c);

    let txns = p.wait_for(&t, 10).await;
    let committed_inserts = txns
        .iter()
        .filter(|r| {
            r.outcome == Some(Outcome::Committed) && r.txn.statements.iter().any(|s| s.starts_with("insert"))
        })
        .count();
    assert_eq!(committed_inserts, 5, "{txns:#?}");
    assert!(
        txns.iter().any(|r| r.outcome == Some(Outcome::Aborted) && r.txn.statements[0].starts_with("insert"))
    );
    let update = txns.iter().find(|r| r.txn.statements.iter().any(|s| s.starts_with("update"))).unwrap();
    assert_eq!(update.outcome, Some(Outcome::Committed));
    assert_eq!(update.txn.statements.first().map(String::as_str), Some("START TRANSACTION"));
    let cursor = txns.iter().find(|r| r.txn.statements.iter().any(|s| s.starts_with("select id"))).unwrap();
    assert_eq!(cursor.txn.statements.iter().filter(|s| s.starts_with("select id")).count(), 1, "{cursor:?}");
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_queries_get_their_own_replies_and_transactions() {
    let p = start_proxy().await;
    let t = unique_table("pipelined");
    let c = p.connect().await;
    c.batch_execute(&format!("drop table if exists {t}; create table {t} (id int primary key, v int)"))
        .await
        .unwrap();
    let stmt = c.prepare(&format!("insert into {t} values ($1, $1 * 10) returning v")).await.unwrap();
    // tokio-postgres pipelines concurrent requests on one connection: all Parse/Bind/Execute/Sync batches are
    // written before the first reply is read.
    let futures = (0..20i32).map(|i| {
        let c = &c;
        let stmt = &stmt;
        async move { c.query_one(stmt, &[&i]).await.map(|r| r.get::<_, i32>(0)) }
    });
    let results = join_all(futures).await;
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap(), i as i32 * 10, "reply {i} matched to the wrong request");
    }
    // A failure in the middle of a pipeline only fails its own request.
    let a = c.query_one(&stmt, &[&100i32]);
    let b = c.query_one(&stmt, &[&0i32]); // duplicate key
    let d = c.query_one(&stmt, &[&101i32]);
    let (a, b, d) = tokio::join!(a, b, d);
    assert!(a.is_ok() && b.is_err() && d.is_ok(), "{a:?} {b:?} {d:?}");
    drop(c);

    let txns = p.wait_for(&t, 24).await;
    let committed = txns.iter().filter(|r| r.outcome == Some(Outcome::Committed)).count();
    let aborted = txns.iter().filter(|r| r.outcome == Some(Outcome::Aborted)).count();
    // create table + 20 inserts + 2 inserts committed; the duplicate aborted.
    assert_eq!((committed, aborted), (23, 1), "{txns:#?}");
    for r in &txns {
        assert_eq!(r.txn.statements.len(), 1, "each pipelined insert is its own implicit transaction: {r:?}");
    }
    p.handle.shutdown().await.unwrap();
}

async fn join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.collect();
    let mut out = Vec::new();
    // Poll them all concurrently without an extra dependency: pin each and drive them together.
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = handles.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in pinned.iter_mut().zip(results.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    out.extend(results.into_iter().flatten());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_and_none_durability_record_the_same_transactions() {
    for durability in ["group", "none"] {
        let p = start_proxy_with(Opts { durability: Some(durability), ..Opts::default() }).await;
        let t = unique_table(&format!("durability_{durability}"));
        let c = p.connect().await;
        c.batch_execute(&format!("drop table if exists {t}; create table {t} (id int)")).await.unwrap();
        for i in 0..10 {
            c.execute(&format!("insert into {t} values ($1)"), &[&i]).await.unwrap();
        }
        drop(c);
        let txns = p.wait_for(&t, 11).await;
        assert_eq!(outcomes(&txns), vec![Some(Outcome::Committed); 11], "{durability}");
        let status: serde_json::Value = serde_json::from_str(&p.admin_get("/api/status").await).unwrap();
        assert_eq!(status["log"]["durability"], durability);
        // No client reply waits for an fsync. Under `group` each of the proxy's own fences does, before its
        // COMMIT (a lost fence would stop garbage collection for good); under `none` nothing is fsynced. The
        // fence the closed session runs may still be on its way: read both until they agree, or time out.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let waits = p.handle.log().stats().durable_waits;
            let fences = p.handle.log().replay().unwrap().transactions.iter().filter(|t| t.fence).count();
            let fence_waits = if durability == "group" { fences as u64 } else { 0 };
            if waits == fence_waits || std::time::Instant::now() > deadline {
                assert!(durability == "none" || fences > 0, "{durability}: the proxy fences at open");
                assert_eq!(waits, fence_waits, "{durability}: only fences wait for fsync, replies do not");
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        p.handle.shutdown().await.unwrap();
    }
}

/// A statement text that sessions send again and again (tokio-postgres parses every `query` afresh) is
/// planned once: the rest come from the plan cache, and each execution's rows are still recorded as reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_statement_text_is_planned_once_and_still_recorded() {
    let p = start_proxy_with(Opts { tagging: Some("xmin"), ..Opts::default() }).await;
    let t = unique_table("plan_cache");
    let c = p.connect().await;
    c.batch_execute(&format!(
        "drop table if exists {t}; create table {t} (id int primary key, v int); \
         insert into {t} select g, g * 2 from generate_series(1, 5) g"
    ))
    .await
    .unwrap();
    let other = p.connect().await;
    let read = format!("select v from {t} where id = $1");
    let hits = || async {
        let m = p.admin_get("/metrics").await;
        m.lines()
            .find_map(|l| l.strip_prefix("krait_plan_cache_hits_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("the plan cache's counter")
    };
    // The CREATE TABLE makes the catalog stale; its reload (at some session's next idle point, in the first
    // rounds) empties the cache once. After that, every execution of the text is a hit.
    let mut before = 0;
    for i in 1..=5i32 {
        if i == 3 {
            before = hits().await;
        }
        for client in [&c, &other] {
            let v: i32 = client.query_one(&read, &[&i]).await.unwrap().get(0);
            assert_eq!(v, i * 2);
        }
    }
    let after = hits().await;
    assert_eq!(after - before, 6, "6 executions of a text planned before: {} hits", after - before);
    drop((c, other));
    let txns = p.wait_for(&read, 10).await;
    let reads: usize = txns
        .iter()
        .map(|r| r.txn.ops.iter().filter(|o| matches!(o, history::log::LoggedOp::Read { .. })).count())
        .sum();
    assert_eq!(reads, 10, "every execution's row is recorded: {txns:#?}");
    p.handle.shutdown().await.unwrap();
}
