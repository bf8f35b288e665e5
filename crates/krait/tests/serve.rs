//! `krait serve` through the binary, in front of the machine's PostgreSQL: psql runs transactions through
//! it, the co-located verifier's status lines show it caught up, SIGTERM stops both cleanly, and (with row
//! tagging) a lost update is reported while it runs.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::serve::{Serve, http_get, psql, psql_each, recorded_verified};
use common::{free_port, write_serve_config};

#[test]
fn serve_verifies_psql_transactions_online_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let config = write_serve_config(dir.path(), port, None, "");
    let data = dir.path().join("data");
    let mut serve = Serve::start(&config, &data, port);
    let table = format!("krait_serve_{}", std::process::id());
    let sql = format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int);\n\
         BEGIN; INSERT INTO {table} VALUES (1, 1); COMMIT;\n\
         BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; COMMIT;\n\
         BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; ROLLBACK;\n\
         SELECT v FROM {table} WHERE k = 1;\nDROP TABLE {table};\n"
    );
    let psql = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "test", "-X", "-q"])
        .args(["-v", "ON_ERROR_STOP=1", "-t", "-A", "-c", &sql])
        .output()
        .expect("runs psql");
    assert!(psql.status.success(), "psql through krait serve: {}", String::from_utf8_lossy(&psql.stderr));
    assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "2");

    // A status line must show the verifier caught up: at least the three explicit transactions recorded,
    // and every recorded one verified.
    serve.wait_for("the verifier caught up", |line| {
        line.contains("verifier:")
            && recorded_verified(line)
                .is_some_and(|(recorded, verified)| recorded >= 3 && verified == recorded)
    });
    let seen = serve.stop();
    let last = seen.iter().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    let (recorded, verified) = recorded_verified(last).expect("numbers in the final line");
    assert!(recorded >= 3 && verified == recorded, "{last}");
    assert!(!seen.iter().any(|l| l.contains("REJECT")), "{}", seen.join("\n"));
    assert!(data.join("reports").is_dir(), "the reports directory exists");
}

/// With row-level tagging on, a lost update under READ COMMITTED (two clients read one row, both write it
/// from what they read) is reported while serve runs when it checks snapshot isolation (read committed, which
/// the default `declared` holds these transactions to, allows it): one log line, and a report in
/// DATA_DIR/reports/.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reports_a_lost_update_when_rows_are_tagged() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let config =
        write_serve_config(dir.path(), port, None, "[tagging]\nstrategy = \"xmin\"\n[fence]\nevery = 0\n");
    let check = common_check(&config);
    if !check.status.success() {
        // This build's proxy has no tagging: then there is nothing row-level to reject, and the config
        // check must say that the tagging section is what it does not know.
        let stderr = String::from_utf8_lossy(&check.stderr);
        assert!(stderr.contains("tagging"), "{stderr}");
        return;
    }
    let data = dir.path().join("data");
    let mut serve = Serve::start_with(&config, &data, port, &["--level", "snapshot-isolation"]);
    let table = format!("krait_serve_lost_{}", std::process::id());
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=test");
    let connect = || async {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connects");
        tokio::spawn(conn);
        c
    };
    let (c1, c2) = (connect().await, connect().await);
    // The row goes in by its own statement, after the proxy has reloaded its catalog at the rest point
    // that follows the DDL: an INSERT in the same query string as the CREATE could not be mapped, and the
    // version it wrote would be an unrecorded writer's, whose reads are never evidence.
    c1.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int)"
    ))
    .await
    .expect("creates the table");
    c1.batch_execute(&format!("INSERT INTO {table} VALUES (1, 0)")).await.expect("fills the table");
    let read = format!("SELECT v FROM {table} WHERE k = 1");
    let write = format!("UPDATE {table} SET v = $1 WHERE k = 1");
    c1.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.expect("begin");
    c2.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.expect("begin");
    // An aggregate the proxy cannot map to rows: the report must say it was not checked.
    c1.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.expect("counts");
    let v1: i32 = c1.query_one(&read, &[]).await.expect("reads").get(0);
    let v2: i32 = c2.query_one(&read, &[]).await.expect("reads").get(0);
    // c2's UPDATE waits for c1's row lock and, once c1 commits, overwrites c1's version (EvalPlanQual): its
    // snapshot shows the version both read, so no replaced version is recorded for it, and the history
    // holds two read-modify-writes of one version.
    c1.execute(&write, &[&(v1 + 1)]).await.expect("writes");
    let c1_commits = async {
        wait_until_waiting_for_a_lock(&table).await;
        c1.batch_execute("COMMIT").await
    };
    let second_value = v2 + 1;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&second_value];
    let (c2_update, c1_commit) = tokio::join!(c2.execute(&write, &params), c1_commits);
    c1_commit.expect("commits");
    c2_update.expect("writes");
    c2.batch_execute("COMMIT").await.expect("commits");
    let v: i32 = c1.query_one(&read, &[]).await.expect("reads").get(0);
    assert_eq!(v, 1, "one of the two increments was lost, as READ COMMITTED allows");
    c1.batch_execute(&format!("DROP TABLE {table}")).await.expect("drops the table");
    drop((c1, c2));

    serve.wait_for("the lost update reported", |l| l.contains("REJECT") && l.contains("lost update"));
    let seen = serve.stop();
    let reject = seen.iter().find(|l| l.contains("REJECT")).expect("a reject line");
    assert!(reject.contains("(report "), "{reject}");
    let store = verifier::ReportStore::open_read_only(&data);
    let ids = store.ids().expect("the reports list");
    assert_eq!(ids.len(), 1, "one reject, one report:\n{}", seen.join("\n"));
    let report = store.load(&ids[0]).expect("the report loads");
    assert!(report.not_checked.iter().any(|n| n.kind == "aggregate"), "{:?}", report.not_checked);
}

/// Waits, watching from a direct connection to the database, until a statement that names `table` waits
/// for a lock.
async fn wait_until_waiting_for_a_lock(table: &str) {
    let (admin, conn) =
        tokio_postgres::connect("host=127.0.0.1 port=5432 user=postgres dbname=test", tokio_postgres::NoTls)
            .await
            .expect("connects to the database directly");
    tokio::spawn(conn);
    let pattern = format!("%{table}%");
    for _ in 0..500 {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await
            .expect("reads pg_stat_activity")
            .get(0);
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no statement on {table} ever waited for a lock");
}

/// A level `[verify]` names that does not exist stops `krait serve` before it listens, with the file, the
/// setting and the levels it knows.
#[test]
fn serve_refuses_an_unknown_verify_level() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = write_serve_config(dir.path(), free_port(), None, "[verify]\nlevel = \"snapshot\"\n");
    let out = Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .output()
        .expect("runs krait serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[verify] level")
            && stderr.contains("\"snapshot\"")
            && stderr.contains("snapshot-isolation"),
        "{stderr}"
    );
}

fn common_check(config: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["config", "check", config.to_str().expect("utf-8 path")])
        .output()
        .expect("runs krait config check")
}

/// `/metrics` and `/api/status` of a running `krait serve` carry the verifier's state: transactions
/// verified, the lag in transactions and in seconds, and whether it has fallen behind.
#[test]
fn serve_reports_the_verifier_lag_on_metrics_and_status() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (port, admin_port) = (free_port(), free_port());
    let config = write_serve_config(dir.path(), port, Some(admin_port), "");
    let serve = Serve::start(&config, &dir.path().join("data"), port);
    let admin = format!("127.0.0.1:{admin_port}");
    let table = format!("krait_serve_lag_{}", std::process::id());
    // One statement per query (psql's -c each), so that the writes are mapped to row ops: a query string
    // of several statements with DDL among them is recorded as not checked.
    let psql = |port: u16, statements: &[String]| {
        let psql = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "test", "-X", "-q"])
            .args(["-v", "ON_ERROR_STOP=1"])
            .args(statements.iter().flat_map(|s| ["-c", s.as_str()]))
            .output()
            .expect("runs psql");
        assert!(psql.status.success(), "psql on port {port}: {}", String::from_utf8_lossy(&psql.stderr));
    };
    psql(
        port,
        &[
            format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int)"),
            "BEGIN".to_owned(),
            format!("INSERT INTO {table} VALUES (1, 1)"),
            "COMMIT".to_owned(),
            "BEGIN".to_owned(),
            format!("UPDATE {table} SET v = v + 1 WHERE k = 1"),
            "COMMIT".to_owned(),
        ],
    );
    // A write straight to the database, which the proxy never sees: a read of its version through the
    // proxy has no recorded writer, so the verifier cannot judge it, and says so.
    psql(5432, &[format!("UPDATE {table} SET v = 10 WHERE k = 1")]);
    psql(port, &[format!("SELECT v FROM {table} WHERE k = 1"), format!("DROP TABLE {table}")]);
    // The verifier catches up: status shows what it verified and no lag.
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        let body = http_get(&admin, "/api/status");
        let json: serde_json::Value = serde_json::from_str(&body).expect("/api/status is JSON");
        let v = &json["verifier"];
        assert!(v.is_object(), "/api/status has a verifier section: {body}");
        for field in ["lag_transactions", "lag_seconds", "behind", "verified"] {
            assert!(!v[field].is_null(), "verifier.{field} in {body}");
        }
        // `declared` by default, which collects garbage until a transaction asks for REPEATABLE READ:
        // psql's run at the server's default, READ COMMITTED, and collection goes on.
        let collecting = v["garbage_collection"] == true;
        // Waiting for the unjudged read itself: "verified and no lag" alone held once the first records were
        // verified, before the verifier had read the SELECT's record (it failed once in CI that way).
        if v["verified"].as_u64().is_some_and(|n| n >= 2)
            && v["lag_transactions"].as_u64() == Some(0)
            && v["reads_not_judged"].as_u64().is_some_and(|n| n >= 1)
            && collecting
        {
            break json;
        }
        assert!(Instant::now() < deadline, "the verifier did not catch up: {body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["verifier"]["behind"], serde_json::Value::Bool(false), "{status}");
    assert_eq!(status["verifier"]["level"], "declared", "{status}");
    assert_eq!(status["verifier"]["lag_seconds"].as_f64(), Some(0.0), "{status}");
    let metrics = http_get(&admin, "/metrics");
    let sample = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} in /metrics:\n{metrics}"))
    };
    assert_eq!(sample("krait_verifier_lag_transactions "), 0.0);
    assert_eq!(sample("krait_verifier_lag_seconds "), 0.0);
    assert_eq!(sample("krait_verifier_behind "), 0.0);
    assert!(sample("krait_verifier_verified_total ") >= 2.0);
    // What the history costs in memory: the version book holds the two versions the client wrote, and the
    // verifier knows them by write id.
    assert!(sample("krait_version_book_writes ") >= 2.0, "{metrics}");
    assert!(sample("krait_verifier_known_versions ") >= 2.0);
    assert!(status["verifier"]["known_versions"].as_u64().is_some_and(|n| n >= 2), "{status}");
    assert_eq!(sample("krait_verifier_reads_not_judged_total "), 1.0, "{metrics}");
    assert_eq!(status["verifier"]["reads_not_judged"].as_u64(), Some(1), "{status}");
    let by_cause = &status["verifier"]["reads_not_judged_by_cause"];
    assert_eq!(*by_cause, serde_json::json!({"unrecorded_writer": 1}), "{status}");
    assert_eq!(sample("krait_verifier_reads_not_judged_by_cause_total{cause=\"unrecorded_writer\"} "), 1.0);
    let lines = serve.stop();
    assert!(lines.iter().any(|l| l.contains(", 1 reads not judged,")), "{}", lines.join("\n"));
}

/// Issue 20, item 4: a restarted `krait serve` resumes from the checkpoint its verifier stored as it stopped,
/// instead of verifying the log again from its first record, and goes on counting from where it stopped.
#[test]
fn a_restarted_serve_resumes_its_verifier_from_the_checkpoint() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (port, admin_port) = (free_port(), free_port());
    let config = write_serve_config(dir.path(), port, Some(admin_port), "");
    let data = dir.path().join("data");
    let table = format!("krait_resume_{}", std::process::id());
    let updates = |n: usize| {
        (0..n)
            .map(|_| format!("BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; COMMIT;"))
            .collect::<String>()
    };

    let mut serve = Serve::start(&config, &data, port);
    serve.wait_for("how the verifier started", |line| {
        line.contains("first record (it has no checkpoint yet)")
    });
    psql(port, &format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int);"));
    psql(port, &format!("BEGIN; INSERT INTO {table} VALUES (1, 0); COMMIT; {}", updates(20)));
    let first = serve.stop();
    let last = first.iter().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    let (recorded, verified) = recorded_verified(last).expect("numbers in the final line");
    assert!(recorded >= 21 && verified == recorded, "{last}");

    let mut serve = Serve::start(&config, &data, port);
    serve.wait_for("a resume from the checkpoint", |line| {
        line.contains("resumed from its checkpoint at log record")
    });
    let resumed_at: u64 = serve
        .seen
        .iter()
        .find_map(|l| l.split("at log record ").nth(1)?.split_whitespace().next()?.parse().ok())
        .expect("the record it resumed at");
    assert!(resumed_at > 0);
    // /metrics and /api/status say which records a restart would not read again.
    let metrics = http_get(&format!("127.0.0.1:{admin_port}"), "/metrics");
    let covers = format!("krait_verifier_checkpoint_covers {resumed_at}");
    assert!(metrics.lines().any(|l| l == covers), "{covers} in /metrics:\n{metrics}");
    let status = http_get(&format!("127.0.0.1:{admin_port}"), "/api/status");
    let json: serde_json::Value = serde_json::from_str(&status).expect("/api/status is JSON");
    assert_eq!(json["verifier"]["checkpoint_covers"].as_u64(), Some(resumed_at), "{status}");
    psql(port, &format!("{} DROP TABLE {table};", updates(10)));
    serve.wait_for("the verifier caught up with the new transactions", |line| {
        line.contains("verifier:")
            && recorded_verified(line).is_some_and(|(r, v)| r >= recorded + 10 && v == r)
    });
    let second = serve.stop();
    assert!(!second.iter().any(|l| l.contains("REJECT")), "{}", second.join("\n"));
}

/// Every run of the proxy on one log fences the same row of `krait_fence`, so that the fence chain, and
/// with it the verifier's epochs, goes on across a restart. A run that fenced a new row started a second
/// chain that nothing orders after the first: epochs broke, and garbage collection stopped for good, at
/// every restart.
///
/// The row the updates chain from is inserted by a session of one transaction. It fences as it closes
/// (fewer commits than `every`): before it did, that transaction never got an epoch, and, each UPDATE
/// recording the version it replaced, every later update of the row was reached from it and kept.
#[test]
fn a_restarted_serve_fences_the_same_row_and_collection_goes_on() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let fence = "[fence]\nevery = 2\nmin_interval_ms = 0\n";
    let config = write_serve_config(dir.path(), port, None, fence);
    let data = dir.path().join("data");
    let table = format!("krait_fence_row_{}", std::process::id());
    // One query per transaction, so that fences can run between them; an even count, so that a fence is
    // due as psql leaves. It runs before psql's Terminate, often as the proxy stops: a session cut off
    // between the fence's COMMIT and its record left a version no one recorded, which the next run's
    // first fence read, and collection stopped (6 runs in 14, before sessions let their fence finish).
    let update = format!("BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; COMMIT;");
    let updates = vec![update.as_str(); 12];
    let mut outputs = Vec::new();
    for run in 0..2 {
        let mut serve = Serve::start_with(&config, &data, port, &["--level", "serializable"]);
        serve.wait_for("the verifier to start", |line| line.contains("krait serve: the verifier"));
        if run == 0 {
            psql(
                port,
                &format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int);"),
            );
            psql(port, &format!("BEGIN; INSERT INTO {table} VALUES (1, 0); COMMIT;"));
        }
        psql_each(port, &updates);
        if run == 1 {
            psql(port, &format!("DROP TABLE {table};"));
        }
        outputs.extend(serve.stop());
    }
    let all = outputs.join("\n");
    assert!(!all.contains("garbage collection stopped"), "{all}");
    let out = common::krait(&["verify", "--rounds", "4", &dir.path().join("log").display().to_string()]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ACCEPT"), "{text}");
    assert!(!text.contains("garbage collection was off"), "both runs fence one chain:\n{text}");
    let deleted: u64 = text
        .split("garbage collection deleted ")
        .nth(1)
        .and_then(|rest| rest.split(',').next()?.trim().parse().ok())
        .expect("a summary line with the transactions collected");
    assert!(deleted > 0, "{text}");
}

/// Epochs advance only as far as every open session has fenced (Cobra §4.2), so a connection left idle
/// used to stop garbage collection for as long as it stayed open: one idle psql beside a busy chengRW load
/// kept all 23,781 of its transactions live. It now fences on its own once the busy connections' fences
/// have moved on (`[fence] idle_ms`); with that off, the same run keeps every transaction live. The busy
/// connection runs with its own `search_path`, so its first fence makes the fence table in its schema:
/// the idle one, on the default path, finds it only because fences name it with its schema (before, every
/// fence of a session with another path failed, and that session held collection back the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_does_not_hold_garbage_collection_back() {
    let schema = format!("krait_serve_idle_{}", std::process::id());
    let table = format!("{schema}.kv");
    let direct = "host=127.0.0.1 port=5432 user=postgres dbname=test";
    let (admin_db, conn) = tokio_postgres::connect(direct, tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(conn);
    admin_db
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
             CREATE TABLE {table} (k int primary key, v int); INSERT INTO {table} VALUES (1, 0), (2, 0)"
        ))
        .await
        .expect("creates the table");
    for idle_ms in [200, 0] {
        // A fence table left by an earlier run in the busy connection's schema would spare this run's
        // setup: every run starts without one there.
        admin_db.batch_execute(&format!("DROP TABLE IF EXISTS {schema}.krait_fence")).await.expect("drops");
        let dir = tempfile::tempdir().expect("a temp dir");
        let (port, admin_port) = (free_port(), free_port());
        let fence = format!("[fence]\nevery = 5\nmin_interval_ms = 0\nidle_ms = {idle_ms}\n");
        let config = write_serve_config(dir.path(), port, Some(admin_port), &fence);
        let serve = Serve::start_with(&config, &dir.path().join("data"), port, &["--level", "serializable"]);
        let connect = |options: String| async move {
            let url = format!("host=127.0.0.1 port={port} user=postgres dbname=test {options}");
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connects");
            tokio::spawn(conn);
            c
        };
        // One transaction, then idle (open) for the rest of the run.
        let idle = connect(String::new()).await;
        idle.execute(&format!("UPDATE {table} SET v = v + 1 WHERE k = 2"), &[]).await.expect("updates");
        let busy = connect(format!("options='-c search_path={schema}'")).await;
        let busy_txns = 300;
        for _ in 0..busy_txns {
            busy.execute("UPDATE kv SET v = v + 1 WHERE k = 1", &[]).await.expect("updates");
        }
        drop(busy);

        let admin = format!("127.0.0.1:{admin_port}");
        let sample = |metrics: &str, name: &str| -> u64 {
            let value = metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok());
            value.unwrap_or_else(|| panic!("{name} in /metrics:\n{metrics}")) as u64
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let live = loop {
            let metrics = http_get(&admin, "/metrics");
            let verified = sample(&metrics, "krait_verifier_verified_total ");
            let lag = sample(&metrics, "krait_verifier_lag_transactions ");
            let live = sample(&metrics, "krait_verifier_live_transactions ");
            // Caught up with the client transactions (fences come on top), and, with idle fences, collected.
            if verified > busy_txns && lag == 0 && (idle_ms == 0 || live < 50) {
                break live;
            }
            assert!(
                Instant::now() < deadline,
                "idle_ms = {idle_ms}: live {live}, verified {verified}, lag {lag}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if idle_ms == 0 {
            assert!(live > busy_txns, "without idle fences the idle session holds every transaction: {live}");
        }
        drop(idle);
        let lines = serve.stop();
        assert!(!lines.iter().any(|l| l.contains("REJECT")), "{}", lines.join("\n"));
    }
    admin_db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drops the schema");
}

/// Under the default level, `declared`, garbage collection runs while every transaction asks for
/// SERIALIZABLE or READ COMMITTED (the proxy's fences, which say READ COMMITTED but lock their row, are held
/// to serializability), and the first transaction that asks for REPEATABLE READ stops it for good, said
/// aloud. Before, `declared` collected nothing, and then only while every transaction was serializable, so
/// `krait serve` with its default configuration kept every transaction of an application at PostgreSQL's
/// default level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_declared_levels_serve_collects_until_a_transaction_asks_for_repeatable_read() {
    let table = format!("krait_serve_declared_{}", std::process::id());
    let admin_db = direct_with_one_row(&table).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let (port, admin_port) = (free_port(), free_port());
    let fence = "[fence]\nevery = 5\nmin_interval_ms = 0\nidle_ms = 200\n";
    let config = write_serve_config(dir.path(), port, Some(admin_port), fence);
    let mut serve = Serve::start(&config, &dir.path().join("data"), port);
    serve.wait_for("the level and its collection", |l| {
        l.contains(
            "checks declared (garbage collection runs while every transaction asks for SERIALIZABLE or READ \
                    COMMITTED",
        )
    });
    let connect = |options: &'static str| async move {
        let url = format!("host=127.0.0.1 port={port} user=postgres dbname=test {options}");
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connects");
        tokio::spawn(conn);
        c
    };
    let admin = format!("127.0.0.1:{admin_port}");
    let settled = |txns: u64, done: fn(&serde_json::Value) -> bool| settled(&admin, txns, done);

    let serializable = connect("options='-c default_transaction_isolation=serializable'").await;
    let txns = 300;
    for _ in 0..txns {
        serializable
            .execute(&format!("UPDATE {table} SET v = v + 1 WHERE k = 1"), &[])
            .await
            .expect("updates");
    }
    let status = settled(txns, |v| v["live_transactions"].as_u64().is_some_and(|l| l < 50)).await;
    assert_eq!(status["verifier"]["level"], "declared", "{status}");
    assert_eq!(status["verifier"]["garbage_collection"], true, "{status}");
    assert!(status["verifier"]["garbage_collection_stopped"].is_null(), "{status}");

    // READ COMMITTED, the server's default: collected as well, alone and mixed with SERIALIZABLE.
    let read_committed = connect("").await;
    read_committed.batch_execute("SET default_transaction_isolation = 'read committed'").await.expect("sets");
    let verified = |status: &serde_json::Value| status["verifier"]["verified"].as_u64().expect("verified");
    let before = verified(&status);
    for i in 0..txns {
        let client = if i % 3 == 0 { &serializable } else { &read_committed };
        client.execute(&format!("UPDATE {table} SET v = v + 1 WHERE k = 1"), &[]).await.expect("updates");
    }
    let status = settled(before + txns, |v| v["live_transactions"].as_u64().is_some_and(|l| l < 50)).await;
    assert_eq!(status["verifier"]["garbage_collection"], true, "{status}");

    let repeatable_read = connect("").await;
    repeatable_read
        .batch_execute("SET default_transaction_isolation = 'repeatable read'")
        .await
        .expect("sets");
    repeatable_read
        .execute(&format!("UPDATE {table} SET v = v + 1 WHERE k = 1"), &[])
        .await
        .expect("updates");
    let status = settled(verified(&status), |v| v["garbage_collection"] == false).await;
    let why = status["verifier"]["garbage_collection_stopped"].as_str().unwrap_or_default();
    assert!(why.contains("asked for REPEATABLE READ"), "{status}");
    let metrics = http_get(&admin, "/metrics");
    assert!(metrics.lines().any(|l| l == "krait_verifier_collects_garbage 0"), "{metrics}");
    let live = status["verifier"]["live_transactions"].as_u64().expect("live transactions");
    for _ in 0..20 {
        serializable
            .execute(&format!("UPDATE {table} SET v = v + 1 WHERE k = 1"), &[])
            .await
            .expect("updates");
    }
    let status = settled(verified(&status) + 19, |_| true).await;
    let now = status["verifier"]["live_transactions"].as_u64().expect("live transactions");
    assert!(now >= live + 20, "collection stopped for good: {live} live, then {now}: {status}");
    drop((serializable, read_committed, repeatable_read));
    let lines = serve.stop();
    let all = lines.join("\n");
    assert!(
        all.contains("garbage collection stopped (T") && all.contains("asked for REPEATABLE READ"),
        "{all}"
    );
    assert!(!all.contains("REJECT"), "{all}");
    // The log says which levels were asked for: what was collected above was read committed.
    let out =
        common::krait(&["verify", "--level", "declared", &dir.path().join("log").display().to_string()]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("ACCEPT"), "{text}");
    assert!(
        text.contains("1 repeatable read") && text.contains(&format!("{} read committed", txns * 2 / 3)),
        "{text}"
    );
    admin_db.batch_execute(&format!("DROP TABLE {table}")).await.expect("drops the table");
}

/// A connection opened after garbage collection began runs a fence before its first message
/// (`[fence] at_open`), so the verifier judges the reads of its first transaction. Here that transaction
/// reads a row at REPEATABLE READ and commits only after a busy connection has overwritten the row for
/// dozens of epochs. With the opening fence, the reader's session holds `epoch_agree` back from its fence
/// on, the version it read is kept, and the read is judged; without it, the verifier meets the session only
/// at its commit, has collected the version by then, and can only count the read as not judged (it cannot
/// tell a stale read from a long first transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connection_fences_before_its_first_message_so_its_reads_are_judged() {
    let table = format!("krait_serve_open_{}", std::process::id());
    let admin_db = direct_with_one_row(&table).await;
    for at_open in [true, false] {
        make_one_row(&admin_db, &table).await;
        let dir = tempfile::tempdir().expect("a temp dir");
        let (port, admin_port) = (free_port(), free_port());
        let fence = format!("[fence]\nevery = 5\nmin_interval_ms = 0\nidle_ms = 0\nat_open = {at_open}\n");
        let config = write_serve_config(dir.path(), port, Some(admin_port), &fence);
        let serve = Serve::start_with(&config, &dir.path().join("data"), port, &["--level", "serializable"]);
        let connect = || async move {
            let url = format!("host=127.0.0.1 port={port} user=postgres dbname=test");
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connects");
            tokio::spawn(conn);
            c
        };
        let admin = format!("127.0.0.1:{admin_port}");
        // Caught up, and, if `collecting`, with few live.
        let caught_up = |txns: u64, collecting: bool| {
            settled(&admin, txns, move |v| {
                !collecting || v["live_transactions"].as_u64().is_some_and(|l| l < 50)
            })
        };
        let update = format!("UPDATE {table} SET v = v + 1 WHERE k = 1");
        let busy = connect().await;
        for _ in 0..100 {
            busy.execute(&update, &[]).await.expect("updates");
        }
        caught_up(100, true).await;

        let reader = connect().await;
        reader.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.expect("begins");
        let read = format!("SELECT v FROM {table} WHERE k = 1");
        let v: i32 = reader.query_one(&read, &[]).await.expect("reads").get(0);
        assert_eq!(v, 100, "the reader's snapshot");
        for _ in 0..200 {
            busy.execute(&update, &[]).await.expect("updates");
        }
        // The reader's session, once its opening fence is verified, holds collection back (it has not
        // fenced since); without that fence, collection deletes the version it read.
        let before = caught_up(300, !at_open).await;
        reader.batch_execute("COMMIT").await.expect("commits");
        let status = caught_up(before["verifier"]["verified"].as_u64().expect("verified"), false).await;
        let not_judged = status["verifier"]["reads_not_judged"].as_u64().expect("reads_not_judged");
        if at_open {
            assert_eq!(not_judged, 0, "the opening fence covers the reader: {status}");
        } else {
            assert_eq!(not_judged, 1, "without it, the read of a collected version is not judged: {status}");
        }
        drop((busy, reader));
        let lines = serve.stop();
        assert!(!lines.iter().any(|l| l.contains("REJECT")), "{}", lines.join("\n"));
    }
    admin_db.batch_execute(&format!("DROP TABLE {table}")).await.expect("drops the table");
}

/// A direct connection to the database (not through Krait), with `table` made anew holding one row, (1, 0).
async fn direct_with_one_row(table: &str) -> tokio_postgres::Client {
    let direct = "host=127.0.0.1 port=5432 user=postgres dbname=test";
    let (db, conn) = tokio_postgres::connect(direct, tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(conn);
    make_one_row(&db, table).await;
    db
}

/// Makes `table` anew, holding one row, (1, 0).
async fn make_one_row(db: &tokio_postgres::Client, table: &str) {
    db.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int); \
         INSERT INTO {table} VALUES (1, 0)"
    ))
    .await
    .expect("creates the table");
}

/// Waits until the verifier behind the admin server at `admin` has verified more than `txns` transactions
/// (fences included) with no lag, and `done` holds of its status; returns the whole status.
async fn settled(admin: &str, txns: u64, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = http_get(admin, "/api/status");
        let json: serde_json::Value = serde_json::from_str(&body).expect("/api/status is JSON");
        let v = &json["verifier"];
        let caught_up = v["verified"].as_u64().is_some_and(|n| n > txns) && v["lag_transactions"] == 0;
        if caught_up && done(v) {
            return json;
        }
        assert!(Instant::now() < deadline, "the verifier did not settle: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
