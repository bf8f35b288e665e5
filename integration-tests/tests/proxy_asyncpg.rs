//! A driver that pipelines and uses the binary format: asyncpg (Python, its own protocol implementation, no
//! libpq). Through the proxy it runs transactions, prepared statements, an error in the middle of a pipelined
//! batch and a cancel; the proxy never loses track of a reply, and the recorded history is accepted.
//! Needs `pip install -r integration-tests/requirements.txt` (scripts/test does it).

mod proxy_support;

use std::time::Duration;

use history::Outcome;
use proxy_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpg_pipelines_binary_results_errors_and_cancels_work_through_the_proxy() {
    let p = start_proxy_with(Opts { tagging: Some("xmin"), ..Opts::default() }).await;
    let t = unique_table("asyncpg");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy_support/asyncpg_client.py");
    let a = p.handle.listen_addr();
    let dsn = format!("postgresql://{PG_USER}@127.0.0.1:{}/{PG_DB}", a.port());
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("python3").arg(script).arg(&dsn).arg(&*t).output(),
    )
    .await
    .expect("the asyncpg client finished in time")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'asyncpg'"),
        "asyncpg is not installed: run pip install -r integration-tests/requirements.txt"
    );
    assert!(out.status.success(), "asyncpg client failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec!["sum 450", "batch rejected", "count 10", "cancelled", "after cancel 7"],
        "{stderr}"
    );

    // Everything the client did is recorded: the batch insert, three read-modify-writes, the failed batch.
    let txns = p.wait_for(&t, 6).await;
    let aborted = txns.iter().filter(|r| r.outcome == Some(Outcome::Aborted)).count();
    assert!(aborted >= 1, "the failed batch is recorded as aborted: {txns:#?}");
    let m = p.admin_get("/metrics").await;
    let desyncs = m.lines().find_map(|l| l.strip_prefix("krait_desyncs_total ")).map(str::trim);
    assert_eq!(desyncs, Some("0"), "the proxy lost track of a reply:\n{m}");
    let broken =
        m.lines().find_map(|l| l.strip_prefix("krait_tagging_broken_sessions_total ")).map(str::trim);
    assert!(broken.is_none_or(|b| b == "0"), "a session stopped recording ops:\n{m}");

    // The read-modify-writes were recorded as row operations, not only as statement texts.
    let writes = p.assert_accepted_with_writes("asyncpg").await;
    assert!(writes >= 13, "{writes} writes recorded");
    p.handle.shutdown().await.unwrap();
}
