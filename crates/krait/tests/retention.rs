//! Retention end to end (issue 20, item 5): `krait serve` in front of the machine's PostgreSQL, with small
//! segments and a small `[log.retain] max_bytes`. A lost update is rejected first; then paced traffic
//! fills segments until retention has deleted the records of the reject. The log folder stays within the
//! bound except for what a reader still needs, the stored report re-checks from what it carries, reading
//! the deleted records is a clear error, and a restart after a crash resumes from the checkpoints and
//! verifies on.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::serve::{Serve, http_get, psql, recorded_verified};
use common::{free_port, krait, write_serve_config};

const SEGMENT_BYTES: u64 = 64 << 10;
const MAX_BYTES: u64 = 256 << 10;

/// A number from a `/metrics` line `NAME VALUE`.
fn metric(metrics: &str, name: &str) -> Option<u64> {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Two READ COMMITTED sessions through the proxy each read `table`'s row and write it back incremented:
/// one increment is lost, which serializability forbids.
fn lost_update(port: u16, table: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let url = format!("host=127.0.0.1 port={port} user=postgres dbname=test");
        let connect = || async {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connects");
            tokio::spawn(conn);
            c
        };
        let (c1, c2) = (connect().await, connect().await);
        let read = format!("SELECT v FROM {table} WHERE k = 0");
        let write = format!("UPDATE {table} SET v = $1 WHERE k = 0");
        c1.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.expect("begin");
        c2.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.expect("begin");
        let v1: i32 = c1.query_one(&read, &[]).await.expect("reads").get(0);
        let v2: i32 = c2.query_one(&read, &[]).await.expect("reads").get(0);
        c1.execute(&write, &[&(v1 + 1)]).await.expect("writes");
        c1.batch_execute("COMMIT").await.expect("commits");
        c2.execute(&write, &[&(v2 + 1)]).await.expect("writes");
        c2.batch_execute("COMMIT").await.expect("commits");
    });
}

/// The log's segment files, as (first record, bytes), oldest first.
fn segments(log: &Path) -> Vec<(u64, u64)> {
    let mut found: Vec<(u64, u64)> = std::fs::read_dir(log.join("segments"))
        .expect("lists the segments")
        .flatten()
        .filter_map(|e| {
            let first = e.file_name().to_str()?.strip_suffix(".seg")?.parse().ok()?;
            Some((first, e.metadata().ok()?.len()))
        })
        .collect();
    found.sort_unstable();
    found
}

#[test]
fn serve_keeps_its_log_within_the_bound_and_its_reports_re_check_without_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (port, admin_port) = (free_port(), free_port());
    let more = format!("[tagging]\nstrategy = \"xmin\"\n[log.retain]\nmax_bytes = {MAX_BYTES}\n");
    let config = write_serve_config(dir.path(), port, Some(admin_port), &more);
    // Small segments, so that a short run fills several.
    let text = std::fs::read_to_string(&config).expect("reads the config");
    let text = text.replacen("[log]\n", &format!("[log]\nsegment_bytes = {SEGMENT_BYTES}\n"), 1);
    std::fs::write(&config, text).expect("writes the config");
    let (data, log) = (dir.path().join("data"), dir.path().join("log"));
    let table = format!("krait_retain_{}", std::process::id());
    let admin = format!("127.0.0.1:{admin_port}");
    let status = || -> serde_json::Value {
        serde_json::from_str(&http_get(&admin, "/api/status")).expect("/api/status is JSON")
    };
    // Each reads the row it then writes: a chain the verifier orders without the solver. (A blind
    // `SET v = v + 1` on five rows leaves the verifier a growing set of constraints to solve each round.)
    let updates = |n: usize| {
        (0..n)
            .map(|i| {
                let k = 1 + i % 5;
                format!("BEGIN; SELECT v FROM {table} WHERE k = {k}; UPDATE {table} SET v = {i} WHERE k = {k}; COMMIT;")
            })
            .collect::<String>()
    };

    let mut serve = Serve::start_with(&config, &data, port, &["--level", "serializable"]);
    psql(port, &format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int);"));
    psql(port, &format!("INSERT INTO {table} SELECT g, 0 FROM generate_series(0, 5) g;"));
    lost_update(port, &table);
    serve.wait_for("the lost update rejected", |l| l.contains("REJECT"));
    let after_reject = status()["log"]["next_seq"].as_u64().expect("log.next_seq");

    // Paced, so that the verifier keeps up on two shared cores, until the reject's records are gone.
    let deadline = Instant::now() + Duration::from_secs(120);
    while status()["log"]["first_record"].as_u64().expect("log.first_record") <= after_reject {
        assert!(Instant::now() < deadline, "retention kept record {after_reject} for 120 s:\n{}", status());
        psql(port, &updates(150));
        std::thread::sleep(Duration::from_millis(300));
    }
    // Quiet for two retention passes: what exceeds the bound is only what a reader still needs.
    std::thread::sleep(Duration::from_secs(11));
    let s = status();
    let needed_from = s["log"]["needed_from"].as_u64().expect("log.needed_from");
    let folder = history::log::disk_bytes(&log);
    let files = segments(&log);
    let oldest_needed = files.get(1).is_none_or(|next| next.0 > needed_from);
    let metrics = http_get(&admin, "/metrics");
    eprintln!(
        "log folder {folder} bytes (bound {MAX_BYTES}), {} segments from record {}, a reader needs record \
         {needed_from} on; retention deleted {} segments, {} bytes",
        files.len(),
        files[0].0,
        metric(&metrics, "krait_log_segments_deleted_total").unwrap_or(0),
        metric(&metrics, "krait_log_bytes_deleted_total").unwrap_or(0),
    );
    assert!(folder <= MAX_BYTES || oldest_needed, "{folder} bytes, {files:?}, needed from {needed_from}");
    let verified = s["verifier"]["verified"].as_u64().expect("verifier.verified");
    // A crash: the next start resumes from the last checkpoints stored, not from a clean stop's.
    let crashed = serve.kill();

    // The report re-checks from the transactions it carries; its records are gone from the log.
    let data_dir = data.to_str().expect("utf-8 path");
    let ids = verifier::ReportStore::open_read_only(&data).ids().expect("the reports list");
    assert_eq!(ids.len(), 1, "one reject, one report:\n{}", crashed.join("\n"));
    let check = krait(&["report", "check", &ids[0], "--data-dir", data_dir]);
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && out.contains("REPORT CHECKED"),
        "{out}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Reading the log from its first record says the records were deleted, and by what.
    let verify = krait(&["verify", log.to_str().expect("utf-8 path")]);
    let err = String::from_utf8_lossy(&verify.stderr);
    assert_eq!(verify.status.code(), Some(2), "{err}");
    assert!(err.contains("deleted by retention"), "{err}");

    // A restart resumes from the checkpoints, though the log's first records are gone, and verifies on.
    let mut serve = Serve::start_with(&config, &data, port, &["--level", "serializable"]);
    serve.wait_for("a resume from the checkpoint", |l| {
        l.contains("resumed from its checkpoint at log record")
    });
    psql(port, &format!("{} DROP TABLE {table};", updates(20)));
    serve.wait_for("the verifier caught up with the new transactions", |line| {
        line.contains("verifier:")
            && recorded_verified(line).is_some_and(|(r, v)| r >= verified + 20 && v == r)
    });
    let second = serve.stop();
    let all = [crashed, second].concat().join("\n");
    assert!(!all.contains("retention could not run") && !all.contains("verifier stopped"), "{all}");
    assert_eq!(all.matches("REJECT").count(), 1, "the one lost update, and nothing else:\n{all}");
}
