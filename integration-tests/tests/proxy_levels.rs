//! Isolation levels end to end (issue 17, item 5): real PostgreSQL, real clients through the proxy, the
//! recorded history replayed from the log and checked at several levels. PostgreSQL keeps the promise of
//! each level, so what it lets through must be accepted at that level and at `declared` (each transaction at
//! the level it asked for), and rejected at a stronger one when the anomaly the weaker level allows happened.

mod proxy_support;

use std::time::Duration;

use history::{History, IsolationLevel, Outcome};
use proxy_support::*;
use tokio_postgres::Client;
use verifier::{AnomalyClass, Level, Options, Report, check_report, verify};

/// A proxy that tags rows and runs no fences (a fence is a transaction of its own, at the session default).
async fn proxy() -> TestProxy {
    start_proxy_with(Opts { tagging: Some("xmin"), fence_every: Some(0), ..Opts::default() }).await
}

/// The proxy's history, once `committed` client transactions have committed.
async fn history(p: &TestProxy, committed: usize) -> History {
    for _ in 0..100 {
        let log = p.handle.log().clone();
        let h = tokio::task::spawn_blocking(move || log.replay()).await.expect("join").expect("replay");
        if h.transactions.iter().filter(|t| t.outcome == Outcome::Committed).count() >= committed {
            return h;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the log never held {committed} committed transactions");
}

/// Verifies at `level`, checks the report, and returns it.
fn at(h: &History, level: Level) -> Report {
    let r = verify(h, &Options { level, ..Options::default() }).expect("verifies");
    check_report(h, &r).unwrap_or_else(|e| panic!("{}: the report does not check: {e}\n{r}", level.name()));
    r
}

async fn create(c: &Client, table: &str, rows: i32) {
    c.batch_execute(&format!("CREATE TABLE {table} (k int primary key, v int)")).await.expect("creates");
    // By its own statement, after the proxy reloaded its catalog for the new table.
    c.batch_execute(&format!("INSERT INTO {table} SELECT k, 0 FROM generate_series(1, {rows}) AS k"))
        .await
        .expect("fills");
}

/// A pgbench-like run at REPEATABLE READ: two clients move amounts between rows (serialization failures
/// retried, as an application must), and once, the classic write skew: each reads both of two rows and
/// writes the one the other did not. Snapshot isolation allows it, and PostgreSQL lets it commit; the
/// history is accepted at `snapshot-isolation` and `declared`, rejected at `serializable` with the skew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_with_write_skew_is_snapshot_isolated_and_not_serializable() {
    let table = unique_table("levels_rr");
    let p = proxy().await;
    let (c1, c2) = (p.connect().await, p.connect().await);
    create(&c1, &table, 8).await;
    let mut committed = 0;
    for i in 0..40 {
        let c = if i % 2 == 0 { &c1 } else { &c2 };
        let (from, to) = (1 + i % 6, 1 + (i * 5 + 1) % 6);
        let transfer = format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; \
             UPDATE {table} SET v = v - 1 WHERE k = {from}; UPDATE {table} SET v = v + 1 WHERE k = {to}; COMMIT"
        );
        match c.batch_execute(&transfer).await {
            Ok(()) => committed += 1,
            Err(_) => c.batch_execute("ROLLBACK").await.expect("rolls back"),
        }
    }
    let read_both = format!("SELECT k, v FROM {table} WHERE k = 7; SELECT k, v FROM {table} WHERE k = 8");
    for c in [&c1, &c2] {
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.expect("begins");
        c.batch_execute(&read_both).await.expect("reads both rows");
    }
    c1.batch_execute(&format!("UPDATE {table} SET v = 1 WHERE k = 7")).await.expect("writes 7");
    c2.batch_execute(&format!("UPDATE {table} SET v = 1 WHERE k = 8")).await.expect("writes 8");
    c1.batch_execute("COMMIT").await.expect("commits");
    c2.batch_execute("COMMIT").await.expect("snapshot isolation lets the write skew commit");
    let h = history(&p, committed + 2).await;
    let levels: Vec<_> = h.transactions.iter().filter_map(|t| t.isolation).collect();
    assert!(levels.contains(&IsolationLevel::RepeatableRead), "{levels:?}");

    let si = at(&h, Level::SnapshotIsolation);
    assert!(si.is_accept(), "{si}");
    let declared = at(&h, Level::Declared);
    assert!(declared.is_accept(), "{declared}");
    assert!(declared.declared.as_ref().is_some_and(|d| d.repeatable_read >= 2), "{declared:?}");
    let ser = at(&h, Level::Serializable);
    assert!(!ser.is_accept(), "the write skew is not serializable:\n{ser}");
    let class = ser.anomalies[0].class;
    assert!(matches!(class, AnomalyClass::WriteSkew | AnomalyClass::G2Item), "{ser}");
}

/// A lost update at READ COMMITTED (the default): two clients read one row and both write what they
/// computed. Accepted at `read-committed` and `declared`, rejected at `snapshot-isolation` as a lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_update_at_read_committed_is_read_committed_and_not_snapshot_isolated() {
    let table = unique_table("levels_rc");
    let p = proxy().await;
    let (c1, c2) = (p.connect().await, p.connect().await);
    create(&c1, &table, 1).await;
    lose_an_update(&c1, &c2, &table, "BEGIN").await;
    let h = history(&p, 3).await;
    assert!(at(&h, Level::ReadCommitted).is_accept());
    let declared = at(&h, Level::Declared);
    assert!(declared.is_accept(), "{declared}");
    assert!(declared.declared.as_ref().is_some_and(|d| d.read_committed >= 2), "{declared:?}");
    let si = at(&h, Level::SnapshotIsolation);
    assert_eq!(si.anomalies.first().map(|a| a.class), Some(AnomalyClass::LostUpdate), "{si}");
}

/// Two clients read row 1 and each writes back what it read plus one, interleaved so one increment is lost:
/// the second UPDATE waits for the first transaction's row lock, and once that commits PostgreSQL applies
/// it to the new version (EvalPlanQual). Its snapshot shows the version both read, so the proxy records no
/// replaced version for it, and the history holds two read-modify-writes of one version.
async fn lose_an_update(c1: &Client, c2: &Client, table: &str, begin: &str) {
    let read = format!("SELECT v FROM {table} WHERE k = 1");
    let write = format!("UPDATE {table} SET v = $1 WHERE k = 1");
    c1.batch_execute(begin).await.expect("begins");
    c2.batch_execute(begin).await.expect("begins");
    let v1: i32 = c1.query_one(&read, &[]).await.expect("reads").get(0);
    let v2: i32 = c2.query_one(&read, &[]).await.expect("reads").get(0);
    c1.execute(&write, &[&(v1 + 1)]).await.expect("writes");
    let first_commits = async {
        wait_until_waiting_for_a_lock(table).await;
        c1.batch_execute("COMMIT").await
    };
    let second_value = v2 + 1;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&second_value];
    let (second, first) = tokio::join!(c2.execute(&write, &params), first_commits);
    first.expect("commits");
    second.expect("writes");
    c2.batch_execute("COMMIT").await.expect("commits");
}

/// Sessions that mix levels are judged per transaction: the same two sessions run a serializable and a
/// repeatable-read transaction (which PostgreSQL keeps apart) and then lose an update between two
/// read-committed ones. `declared` accepts, counting each level, and stays a stronger check than read
/// committed alone: the same history with every transaction held to REPEATABLE READ is rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_mixing_levels_is_judged_per_transaction() {
    let table = unique_table("levels_mixed");
    let p = proxy().await;
    let (c1, c2) = (p.connect().await, p.connect().await);
    create(&c1, &table, 2).await;
    c1.batch_execute(&format!(
        "BEGIN ISOLATION LEVEL SERIALIZABLE; UPDATE {table} SET v = v + 1 WHERE k = 2; COMMIT"
    ))
    .await
    .expect("a serializable transaction");
    c2.batch_execute(&format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT k, v FROM {table} WHERE k = 2; COMMIT"
    ))
    .await
    .expect("a repeatable-read transaction");
    lose_an_update(&c1, &c2, &table, "BEGIN ISOLATION LEVEL READ COMMITTED").await;
    let h = history(&p, 6).await;
    let declared = at(&h, Level::Declared);
    assert!(declared.is_accept(), "{declared}");
    let d = declared.declared.as_ref().expect("declared levels");
    assert!(d.serializable >= 1 && d.repeatable_read >= 1 && d.read_committed >= 2, "{d:?}");
    let mut all_rr = h.clone();
    for t in &mut all_rr.transactions {
        t.isolation = Some(IsolationLevel::RepeatableRead);
    }
    let r = at(&all_rr, Level::Declared);
    assert_eq!(r.anomalies.first().map(|a| a.class), Some(AnomalyClass::LostUpdate), "{r}");
}
