//! Restarts that read only the runs since the last start (issue 19, item 5): each start of the proxy seeds
//! its version book from the checkpoint the previous start stored in the log and the records after it, not
//! by replaying the whole log. Through the real proxy on one log, four runs each update a row; the last
//! reads every row, and each read must still be of a recorded version, known as one (a book that lost one
//! would rediscover it from its writer's ids, or take it for an unrecorded writer's), and the history
//! accepted.

mod proxy_support;

use std::time::Instant;

use history::Observed;
use proxy_support::{Opts, TestProxy, direct, start_proxy_with, unique_table};

async fn exec(c: &tokio_postgres::Client, sql: &str) {
    c.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The value of the metric `name` on the proxy's `/metrics`.
async fn metric(p: &TestProxy, name: &str) -> u64 {
    let text = p.admin_get("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_start_replays_only_the_runs_since_the_last_and_versions_stay_recorded() {
    let t = unique_table("restart_ckpt");
    let db = direct().await;
    exec(&db, &format!("DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int PRIMARY KEY, v int NOT NULL)"))
        .await;
    exec(&db, &format!("INSERT INTO {t} SELECT g, 0 FROM generate_series(1, 4) g")).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("log");
    let opts = || Opts { tagging: Some("xmin"), log_path: Some(path.clone()), ..Opts::default() };

    let mut records_before = 0;
    for run in 1..=4 {
        let started = Instant::now();
        let p = start_proxy_with(opts()).await;
        let replayed = metric(&p, "krait_start_records_replayed").await;
        let from_checkpoint = metric(&p, "krait_start_from_checkpoint").await;
        println!("run {run}: started in {:?}, {replayed} records replayed", started.elapsed());
        assert_eq!(from_checkpoint, u64::from(run > 1), "run {run}: the first start has no checkpoint");
        let records_at_start = p.handle.log().next_seq();
        if run > 1 {
            // The checkpoint covers what the log held at the previous start, however long; the first start
            // found it empty.
            assert!(
                replayed == records_at_start - records_before && (run == 2 || replayed < records_at_start),
                "run {run}: {replayed} of {records_at_start} records replayed, {records_before} were checkpointed"
            );
        }
        records_before = records_at_start;
        let c = p.connect().await;
        exec(
            &c,
            &format!("BEGIN ISOLATION LEVEL SERIALIZABLE; UPDATE {t} SET v = v + 1 WHERE id = {run}; COMMIT"),
        )
        .await;
        if run == 4 {
            exec(&c, "BEGIN ISOLATION LEVEL SERIALIZABLE").await;
            let rows = c.query(&format!("SELECT id, v FROM {t} ORDER BY id"), &[]).await.expect("read");
            assert_eq!(rows.len(), 4);
            exec(&c, "COMMIT").await;
        }
        drop(c);
        if run < 4 {
            p.handle.shutdown().await.expect("a clean shutdown");
            continue;
        }
        let log = p.handle.log().clone();
        let h = tokio::task::spawn_blocking(move || log.replay()).await.expect("join").expect("replay");
        let report = verifier::verify(&h, &verifier::Options::default()).expect("verify");
        assert!(report.is_accept(), "{report}");
        // The last client transaction: the connection's closing fence, which may be logged after it by the
        // time the log is replayed, is not it (a fence reads one row, and the assertion below failed so).
        let last =
            h.transactions.iter().filter(|t| !t.fence).max_by_key(|t| t.id).expect("the reading transaction");
        let reads: Vec<Observed> = last
            .ops
            .iter()
            .filter_map(|op| match op {
                history::Op::Read { observed, .. } => Some(*observed),
                _ => None,
            })
            .collect();
        assert_eq!(reads.len(), 4, "{reads:?}");
        assert!(
            reads.iter().all(|o| matches!(o, Observed::Version(_))),
            "every row was written by a recorded transaction of runs 1–4: {reads:?}"
        );
        // Known as recorded versions, not rediscovered from the ids their writers own.
        let rediscovered = h.transactions.iter().flat_map(|t| &t.ops);
        let rediscovered =
            rediscovered.filter(|op| matches!(op, history::Op::Write { stmt: None, .. })).count();
        assert_eq!(rediscovered, 0, "the book held every version:\n{report}");
        p.handle.shutdown().await.expect("a clean shutdown");
    }
    exec(&db, &format!("DROP TABLE {t}")).await;
}
