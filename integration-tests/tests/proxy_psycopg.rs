//! A non-Rust driver through the proxy: psycopg 3 (Python, on libpq) with pipeline mode, COPY and
//! LISTEN/NOTIFY. Needs `pip install "psycopg[binary]"`.

mod proxy_support;

use std::time::Duration;

use history::Outcome;
use proxy_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_pipeline_copy_and_notify_work_through_the_proxy() {
    let p = start_proxy().await;
    let t = unique_table("psycopg");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy_support/psycopg_client.py");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("python3").arg(script).arg(p.conn_str()).arg(&*t).output(),
    )
    .await
    .expect("the psycopg client finished in time")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'psycopg'"),
        "psycopg is not installed: run pip install \"psycopg[binary]\""
    );
    assert!(out.status.success(), "psycopg client failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec!["count 18", "dup rejected", "notify hello"],
        "{stderr}"
    );

    let txns = p.wait_for(&t, 7).await;
    let aborted: Vec<_> = txns.iter().filter(|r| r.outcome == Some(Outcome::Aborted)).collect();
    assert_eq!(aborted.len(), 1, "{txns:#?}");
    assert!(aborted[0].txn.statements.iter().any(|s| s.contains("'dup'")));
    let committed = txns.iter().filter(|r| r.outcome == Some(Outcome::Committed)).count();
    assert_eq!(committed + 1, txns.len(), "everything else committed: {txns:#?}");
    let inserts: usize = txns
        .iter()
        .filter(|r| r.outcome == Some(Outcome::Committed))
        .map(|r| r.txn.statements.iter().filter(|s| s.starts_with("insert")).count())
        .sum();
    // executemany may send one Parse and many Bind/Execute: each Execute records its statement.
    assert_eq!(inserts, 15, "{txns:#?}");
    assert!(txns.iter().any(|r| r.txn.statements.iter().any(|s| s.starts_with("copy"))));
    assert_eq!(Metric::desyncs(&p).await, 0);
    p.handle.shutdown().await.unwrap();
}

struct Metric;

impl Metric {
    async fn desyncs(p: &TestProxy) -> u64 {
        let m = p.admin_get("/metrics").await;
        m.lines()
            .find_map(|l| l.strip_prefix("krait_desyncs_total "))
            .and_then(|v| v.trim().parse().ok())
            .expect("desync counter")
    }
}
