//! One history holds one database: rows of two databases are different rows under the same names. A proxy in
//! front of a server with several databases records one (`[upstream] database`, or the first that a
//! session sends a request to) and relays sessions to the others unrecorded. A health check that only logs
//! in (`pg_isready`) chooses nothing: before this, it made the proxy load the primary keys of the health
//! check's database as the catalog, and a client's prepared statements, planned against it, went unrecorded
//! for as long as they lived (with a reload of the catalog at every execution).

mod proxy_support;

use history::log::LoggedOp;
use proxy_support::*;

/// The other database of the test server (the brief's `test`), which health checks and stray sessions use.
const OTHER_DB: &str = "test";

async fn pg_isready(p: &TestProxy, database: &str) {
    let port = p.handle.listen_addr().port().to_string();
    let out = tokio::process::Command::new("pg_isready")
        .args(["-h", "127.0.0.1", "-p", &port, "-U", PG_USER, "-d", database, "-t", "10"])
        .output()
        .await
        .expect("pg_isready runs");
    assert!(out.status.success(), "pg_isready: {}", String::from_utf8_lossy(&out.stdout));
}

/// Prepared statements (tokio-postgres names them) that update and read `table`'s row 1 in one transaction.
async fn prepared_transaction(client: &mut tokio_postgres::Client, table: &str) {
    let update = client.prepare(&format!("UPDATE {table} SET v = v + 1 WHERE id = $1")).await.unwrap();
    let select = client.prepare(&format!("SELECT v FROM {table} WHERE id = $1")).await.unwrap();
    let t = client.transaction().await.unwrap();
    t.execute(&select, &[&1i32]).await.unwrap();
    t.execute(&update, &[&1i32]).await.unwrap();
    t.commit().await.unwrap();
}

async fn create_directly(table: &str) {
    direct()
        .await
        .batch_execute(&format!(
            "CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL); INSERT INTO {table} VALUES (1, 0)"
        ))
        .await
        .unwrap();
}

/// The row reads and writes recorded by the one transaction that mentions `table`.
async fn row_ops(p: &TestProxy, table: &str) -> usize {
    let txns = p.wait_for(table, 1).await;
    assert_eq!(txns.len(), 1, "one transaction mentions {table}");
    let rows = |op: &&LoggedOp| matches!(op, LoggedOp::Read { .. } | LoggedOp::Write { .. });
    txns[0].txn.ops.iter().filter(rows).count()
}

fn other_db_conn(p: &TestProxy) -> String {
    let a = p.handle.listen_addr();
    format!("host={} port={} user={PG_USER} dbname={OTHER_DB} connect_timeout=10", a.ip(), a.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_does_not_choose_the_recorded_database() {
    let table = unique_table("databases_probe");
    create_directly(&table).await;
    let p = start_proxy().await;
    // The health check comes first, to another database, and leaves.
    pg_isready(&p, OTHER_DB).await;

    let mut client = p.connect().await;
    prepared_transaction(&mut client, &table).await;
    drop(client);
    // The SELECT's read, and the UPDATE's read of the version it replaced and its write.
    assert_eq!(row_ops(&p, &table).await, 3, "the prepared statements are recorded as row ops");
    p.assert_accepted_with_writes("a health check first").await;
    let metrics = p.admin_get("/metrics").await;
    assert!(metrics.contains("krait_tagging_opaque_total{kind=\"unknown_table\"} 0"), "{metrics}");
    assert!(metrics.contains("krait_sessions_other_database_total 0"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_to_another_database_are_relayed_unrecorded() {
    let table = unique_table("databases_other");
    create_directly(&table).await;
    let p = start_proxy_with(Opts { database: Some(PG_DB), ..Opts::default() }).await;
    let marker = unique("databases_marker");

    // A session to the other database works as without the proxy, and nothing of it is recorded.
    let other = connect(&other_db_conn(&p)).await;
    let row = other.query_one(&format!("SELECT 1 AS {marker}"), &[]).await.expect("relayed");
    assert_eq!(row.get::<_, i32>(0), 1);
    other.batch_execute(&format!("BEGIN; SELECT 2 AS {marker}; COMMIT")).await.expect("relayed");
    drop(other);
    p.wait_metric("krait_sessions_other_database_total 1").await;

    let mut client = p.connect().await;
    prepared_transaction(&mut client, &table).await;
    drop(client);
    assert_eq!(row_ops(&p, &table).await, 3, "the recorded database's transaction, as row ops");
    assert!(p.txns_mentioning(&marker).is_empty(), "the other database's statements are not in the history");
    p.assert_accepted_with_writes("another database beside").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_records_the_database_its_log_records() {
    let table = unique_table("databases_restart");
    create_directly(&table).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log_path = dir.path().join("log");
    let on_the_log = |database| Opts { log_path: Some(log_path.clone()), database, ..Opts::default() };

    // The first run: a session to the test database chooses it.
    let p = start_proxy_with(on_the_log(None)).await;
    let mut client = p.connect().await;
    prepared_transaction(&mut client, &table).await;
    drop(client);
    assert_eq!(row_ops(&p, &table).await, 3);
    p.handle.shutdown().await.expect("first run stops");

    // The second run: a session to the other database sends requests first, and is still not recorded.
    let p = start_proxy_with(on_the_log(None)).await;
    let marker = unique("databases_restart_marker");
    let other = connect(&other_db_conn(&p)).await;
    other.batch_execute(&format!("SELECT 1 AS {marker}")).await.expect("relayed");
    drop(other);
    p.wait_metric("krait_sessions_other_database_total 1").await;
    assert!(p.txns_mentioning(&marker).is_empty(), "the other database is not in the log's history");
    p.handle.shutdown().await.expect("second run stops");

    // A configuration naming the other database is refused this log, with the reason.
    let refused = proxy::start(test_config(&on_the_log(Some(OTHER_DB)), dir.path())).await.err();
    let message = refused.expect("the log records another database").to_string();
    assert!(message.contains(&format!("records database \"{PG_DB}\"")), "{message}");
}
