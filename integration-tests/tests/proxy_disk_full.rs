//! A full disk under the history log (issue 19, item 5), on a real one: a small tmpfs mounted for the test.
//!
//! What is promised: a commit the log could not record is never acknowledged (the client gets an error);
//! once the log has failed, new sessions are refused in words and `/healthz` says why; [`proxy::run`] stops
//! with [`proxy::ProxyError::LogFailed`]; and once space returns, a proxy started again on the same log
//! recovers it and records again, with every acknowledged commit still there and the whole history accepted.
//!
//! The log does not resume in the same process: the log's store fails every write after an I/O error, and
//! an fsync is never retried after a failure (see `history::log::group_commit`), so a restart is the
//! recovery, as it is for PostgreSQL when it cannot write its WAL.
//!
//! Mounting needs root. Not as root, each test says so on stderr and passes without running (the log's
//! failure path is also unit-tested in `history::log::group_commit`); as root, a mount that fails fails it.

mod proxy_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use history::Outcome;
use proxy_support::*;

/// A tmpfs of a few MiB, mounted on a fresh temporary directory and unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts one of `mib` MiB; `None` (after saying so) where the tests do not run as root.
    fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("tempdir");
        let size = format!("size={mib}m,mode=0700");
        let out =
            Command::new("mount").args(["-t", "tmpfs", "-o", &size, "krait-test"]).arg(dir.path()).output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk { dir }),
            _ if !running_as_root() => {
                eprintln!("skipped: mounting a small tmpfs needs root");
                None
            }
            other => panic!("cannot mount a tmpfs as root: {other:?}"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes zeros until the disk is full; returns the file that holds them.
    fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).expect("create the filler");
        let chunk = vec![0u8; 64 * 1024];
        // Then byte by byte, for the last partial chunk.
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&[0]).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).output();
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Inserts `id` with a literal, so the recorded statement names it.
async fn insert(c: &tokio_postgres::Client, table: &str, id: i32) -> Result<(), tokio_postgres::Error> {
    c.batch_execute(&format!("BEGIN; INSERT INTO {table} VALUES ({id}, 0); COMMIT")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_commits_instead_of_acknowledging_them_and_a_restart_recovers_when_space_returns() {
    let Some(disk) = SmallDisk::mount(16) else { return };
    let table = unique_table("disk_full");
    direct().await.batch_execute(&format!("CREATE TABLE {table} (id int PRIMARY KEY, v int)")).await.unwrap();
    let log_path = disk.path().join("log");
    let opts = || Opts { log_path: Some(log_path.clone()), ..Opts::default() };

    let p = start_proxy_with(opts()).await;
    let c = p.connect().await;
    let mut acked = Vec::new();
    for id in 0..5 {
        insert(&c, &table, id).await.expect("a commit with room on the disk");
        acked.push(id);
    }

    // The disk fills. Commits go on until one needs a page the disk no longer has; that one fails.
    let filler = disk.fill();
    let mut failed = None;
    for id in 5..2_000 {
        match insert(&c, &table, id).await {
            Ok(()) => acked.push(id),
            Err(e) => {
                failed = Some((id, e));
                break;
            }
        }
    }
    let (failed_id, error) = failed.expect("a commit failed once the disk was full");
    eprintln!("disk full: {} commits acknowledged after filling it, then: {error:?}", acked.len() - 5);
    let said = error.as_db_error().map(|e| (e.code().code().to_owned(), e.message().to_owned()));
    assert!(
        matches!(&said, Some((code, message)) if code == "58030" && message.contains("history log failed")),
        "the client is told the log failed: {error:?}"
    );
    let reason = tokio::time::timeout(Duration::from_secs(5), p.handle.log_failed())
        .await
        .expect("the proxy notices the failed log");
    assert!(reason.contains("No space left on device"), "{reason}");

    // A failed log records nothing more: new sessions are refused in words, and the proxy is not healthy.
    let refused = tokio_postgres::connect(&p.conn_str(), tokio_postgres::NoTls).await.err();
    let refused = refused.expect("a new session is refused");
    let said = refused.as_db_error().map(|e| (e.code().code().to_owned(), e.message().to_owned()));
    assert!(
        matches!(&said, Some((code, message)) if code == "58030" && message.contains("history log failed")),
        "a new session is told the log failed: {refused:?}"
    );
    let (status, body) = p.admin_request("/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert!(p.admin_get("/metrics").await.contains("krait_log_failed 1"));

    // Space returns; the proxy is started again on the same log, as a supervisor would.
    std::fs::remove_file(&filler).unwrap();
    assert!(p.handle.shutdown().await.is_err(), "closing a failed log reports the failure");
    let p = start_proxy_with(opts()).await;
    let c = p.connect().await;
    for id in 10_000..10_005 {
        insert(&c, &table, id).await.expect("a commit after the restart");
        acked.push(id);
    }
    drop(c);

    // Every acknowledged commit is committed in the log, and the history is accepted. The one whose commit
    // the client saw fail was told "outcome unknown": the database committed it before its outcome record
    // failed to become durable, and the record may still have reached the disk (part of a write can land
    // before the disk fills), in which case the restarted log holds it as committed. That is the truth,
    // not an acknowledgement; what must never be is a commit in the log that the database did not make.
    let recorded = p.wait_for(&table, acked.len()).await;
    let committed_in_log = |id: i32| {
        let literal = format!("VALUES ({id}, 0)");
        recorded.iter().any(|r| {
            r.outcome == Some(Outcome::Committed) && r.txn.statements.iter().any(|s| s.contains(&literal))
        })
    };
    for &id in &acked {
        assert!(committed_in_log(id), "acknowledged commit {id} is not committed in the log");
    }
    let rows = direct().await.query(&format!("SELECT id FROM {table}"), &[]).await.unwrap();
    let in_db: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert!(acked.iter().all(|id| in_db.contains(id)), "acknowledged commits are in the database");
    assert!(
        !committed_in_log(failed_id) || in_db.contains(&failed_id),
        "the log holds commit {failed_id} as committed, but the database does not have it"
    );
    p.assert_accepted_with_writes("after a full disk and a restart").await;
    p.handle.shutdown().await.expect("a clean close once the disk has room");
}

/// `proxy::run`, what `krait proxy` runs, stops when its log fails, with an error that says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_stops_when_its_log_fails() {
    let Some(disk) = SmallDisk::mount(16) else { return };
    let table = unique_table("disk_full_run");
    direct().await.batch_execute(&format!("CREATE TABLE {table} (id int PRIMARY KEY, v int)")).await.unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config =
        test_config(&Opts { log_path: Some(disk.path().join("log")), ..Opts::default() }, disk.path());
    config.listen.address = format!("127.0.0.1:{port}").parse().unwrap();
    let running = tokio::spawn(proxy::run(config, std::future::pending()));

    let conn = format!("host=127.0.0.1 port={port} user={PG_USER} dbname={PG_DB} connect_timeout=10");
    let mut c = None;
    for _ in 0..100 {
        if let Ok((client, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await {
            tokio::spawn(connection);
            c = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = c.expect("the proxy listens");
    insert(&c, &table, 0).await.expect("a commit with room on the disk");
    let _filler = disk.fill();
    let mut id = 1;
    while insert(&c, &table, id).await.is_ok() && id < 2_000 {
        id += 1;
    }
    let stopped = tokio::time::timeout(Duration::from_secs(10), running).await.expect("the proxy stops");
    match stopped.expect("join") {
        Err(e @ proxy::ProxyError::LogFailed { .. }) => {
            let said = e.to_string();
            assert!(
                said.contains("No space left on device") && said.contains("start the proxy again"),
                "{said}"
            );
        }
        other => panic!("expected LogFailed, got {other:?}"),
    }
}
