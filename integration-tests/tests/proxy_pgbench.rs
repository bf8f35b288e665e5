//! pgbench through the proxy in all three query modes, 8 clients: no errors, and exactly one committed
//! transaction recorded per pgbench transaction.

mod proxy_support;

use std::time::Duration;

use history::Outcome;
use proxy_support::*;

const CLIENTS: u32 = 8;
const TXNS_PER_CLIENT: u32 = 25;

async fn run(cmd: &str, args: &[&str]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(cmd).args(args).stdin(std::process::Stdio::null()).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{cmd} timed out"))
    .unwrap_or_else(|e| panic!("{cmd} does not run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd} {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

fn field(report: &str, prefix: &str) -> String {
    report
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in pgbench output:\n{report}"))
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_through_the_proxy_records_every_transaction_in_every_mode() {
    let db = unique("pgbench");
    let admin = direct().await;
    admin.batch_execute(&format!("drop database if exists {db} with (force)")).await.unwrap();
    admin.batch_execute(&format!("create database {db}")).await.unwrap();
    run("pgbench", &["-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p", "5432", "-U", PG_USER, &db]).await;

    for mode in ["simple", "extended", "prepared"] {
        let p = start_proxy().await;
        let port = p.handle.listen_addr().port().to_string();
        let clients = CLIENTS.to_string();
        let txns = TXNS_PER_CLIENT.to_string();
        let report = run(
            "pgbench",
            &[
                "-n",
                "-M",
                mode,
                "-c",
                &clients,
                "-j",
                "2",
                "-t",
                &txns,
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                PG_USER,
                &db,
            ],
        )
        .await;
        let expected = CLIENTS * TXNS_PER_CLIENT;
        assert_eq!(
            field(&report, "number of transactions actually processed:"),
            format!("{expected}/{expected}"),
            "{mode}: {report}"
        );
        let failed = report.lines().find_map(|l| l.strip_prefix("number of failed transactions:"));
        if let Some(failed) = failed {
            assert!(failed.trim().starts_with("0 "), "{mode}: {report}");
        }
        // Every tpcb-like transaction updates pgbench_accounts exactly once.
        let recorded = p.wait_for("UPDATE pgbench_accounts", expected as usize).await;
        let committed = recorded.iter().filter(|r| r.outcome == Some(Outcome::Committed)).count();
        assert_eq!(committed, expected as usize, "{mode}: recorded {} transactions", recorded.len());
        assert_eq!(recorded.len(), expected as usize, "{mode}: nothing but committed transactions");
        for r in &recorded {
            assert_eq!(r.txn.statements.len(), 7, "{mode}: BEGIN, 5 statements, END: {r:?}");
        }
        let sessions: std::collections::HashSet<_> = recorded.iter().map(|r| r.txn.session).collect();
        assert_eq!(sessions.len(), CLIENTS as usize, "{mode}");
        p.handle.shutdown().await.unwrap();
    }
    admin.batch_execute(&format!("drop database if exists {db} with (force)")).await.unwrap();
}

/// pgbench's tpcb-like at READ COMMITTED and REPEATABLE READ, 8 clients on one branch, through the proxy:
/// every transaction locks its rows in the same order and holds the locks to commit, so the workload is
/// serializable and the recorded history must be accepted at SERIALIZABLE. At READ COMMITTED an UPDATE that
/// waited for a row lock replaces the latest committed version, not the one its snapshot shows; recording
/// the snapshot's version as its read made a false lost update (issue 14). The proxy now records no read
/// for such an UPDATE and lists it as not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_at_read_committed_and_repeatable_read_is_accepted_at_serializable() {
    let db = unique("pgbench_levels");
    let admin = direct().await;
    admin.batch_execute(&format!("drop database if exists {db} with (force)")).await.unwrap();
    admin.batch_execute(&format!("create database {db}")).await.unwrap();
    run("pgbench", &["-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p", "5432", "-U", PG_USER, &db]).await;

    for level in ["read\\ committed", "repeatable\\ read"] {
        // With `[record] exclusive` too: every writer goes through the proxy, and no version may be
        // reported as unowned (an autocommit write's row can reach the proxy after another session's read).
        let p = start_proxy_with(Opts { exclusive: true, ..Opts::default() }).await;
        let port = p.handle.listen_addr().port().to_string();
        let clients = CLIENTS.to_string();
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            tokio::process::Command::new("pgbench")
                .args(["-n", "-c", &clients, "-j", "2", "-t", "40", "--max-tries", "1000"])
                .args(["-h", "127.0.0.1", "-p", &port, "-U", PG_USER, &db])
                .env("PGOPTIONS", format!("-c default_transaction_isolation={level}"))
                .stdin(std::process::Stdio::null())
                .output(),
        )
        .await
        .expect("pgbench in time")
        .expect("pgbench runs");
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{level}: {report}\n{}", String::from_utf8_lossy(&out.stderr));
        p.wait_for("UPDATE pgbench_accounts", 40 * CLIENTS as usize).await;
        let metrics = p.admin_get("/metrics").await;
        assert!(metrics.contains("krait_record_exclusive_active 1"), "{level}: exclusive was suspended");
        let log = p.handle.log().clone();
        p.handle.shutdown().await.unwrap();
        let h = tokio::task::spawn_blocking(move || log.replay()).await.unwrap().expect("replay");
        assert!(h.horizon.is_some(), "{level}: no recording horizon");
        let verdict = verifier::verify(&h, &verifier::Options::default()).expect("verify");
        assert!(verdict.is_accept(), "{level}: a serializable workload was rejected:\n{verdict}");
        let reads =
            h.transactions.iter().flat_map(|t| &t.ops).filter(|op| matches!(op, history::Op::Read { .. }));
        assert!(reads.count() > 0, "{level}: nothing was read, so nothing was checked");
    }
    admin.batch_execute(&format!("drop database if exists {db} with (force)")).await.unwrap();
}
