//! node-postgres (npm `pg`, JavaScript, its own protocol implementation) through the proxy: transactions,
//! named prepared statements, an error in the middle of a transaction, and a cancel relayed with the
//! proxy's own cancel key. The recorded history is accepted. scripts/test installs the package
//! (`npm ci` in integration-tests/node).

mod proxy_support;

use std::time::Duration;

use history::Outcome;
use proxy_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_postgres_transactions_prepared_statements_errors_and_cancels_work_through_the_proxy() {
    let p = start_proxy_with(Opts { tagging: Some("xmin"), ..Opts::default() }).await;
    let t = unique_table("node_pg");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/node");
    assert!(
        std::path::Path::new(dir).join("node_modules/pg").exists(),
        "node-postgres is not installed: run npm ci in integration-tests/node (scripts/test does)"
    );
    let port = p.handle.listen_addr().port().to_string();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("node").current_dir(dir).args(["client.js", &port, &t, PG_DB]).output(),
    )
    .await
    .expect("the node client finished in time")
    .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "node-postgres client failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec!["sum 450", "dup rejected", "count 10", "cancelled", "after cancel 7"],
        "{stderr}"
    );

    let txns = p.wait_for(&t, 6).await;
    assert!(txns.iter().any(|r| r.outcome == Some(Outcome::Aborted)), "the rolled-back block: {txns:#?}");
    p.assert_in_step_with_cancels(1).await;

    // The read-modify-writes were recorded as row operations, not only as statement texts.
    let writes = p.assert_accepted_with_writes("node-postgres").await;
    assert!(writes >= 13, "{writes} writes recorded");
    p.handle.shutdown().await.unwrap();
}
