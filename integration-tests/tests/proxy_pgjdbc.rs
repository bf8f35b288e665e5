//! pgjdbc (the PostgreSQL JDBC driver, Java, its own protocol implementation) through the proxy:
//! transactions, server-side prepared statements from the first execution, a batch pipelined under one
//! Sync, an error in the middle of a pipelined batch, and a cancel relayed with the proxy's own cancel key.
//! The recorded history is accepted. scripts/test installs Debian's `libpostgresql-jdbc-java` and a JDK;
//! the client runs as a single source file (`java -cp postgresql.jar Client.java`).

mod proxy_support;

use std::time::Duration;

use history::Outcome;
use proxy_support::*;

/// Where Debian's `libpostgresql-jdbc-java` puts the driver.
const PGJDBC_JAR: &str = "/usr/share/java/postgresql.jar";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgjdbc_transactions_batches_errors_and_cancels_work_through_the_proxy() {
    assert!(
        std::path::Path::new(PGJDBC_JAR).exists(),
        "pgjdbc is not installed: apt-get install -y libpostgresql-jdbc-java default-jdk-headless (scripts/test does)"
    );
    let p = start_proxy_with(Opts { tagging: Some("xmin"), ..Opts::default() }).await;
    let t = unique_table("pgjdbc");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/java");
    let port = p.handle.listen_addr().port().to_string();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("java")
            .current_dir(dir)
            .args(["-cp", PGJDBC_JAR, "Client.java", &port, &t, PG_DB])
            .output(),
    )
    .await
    .expect("the Java client finished in time")
    .expect("java runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pgjdbc client failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec!["sum 450", "batch 3", "dup rejected", "count 10", "cancelled", "after cancel 7"],
        "{stderr}"
    );

    // The inserts, the reads, three read-modify-writes, the batch, and the rolled-back batch.
    let txns = p.wait_for(&t, 7).await;
    assert!(txns.iter().any(|r| r.outcome == Some(Outcome::Aborted)), "the rolled-back batch: {txns:#?}");
    p.assert_in_step_with_cancels(1).await;

    // Every write was recorded as a row operation: 10 inserts, 3 read-modify-writes and 3 batched updates.
    let writes = p.assert_accepted_with_writes("pgjdbc").await;
    assert!(writes >= 16, "{writes} writes recorded");
    p.handle.shutdown().await.unwrap();
}
