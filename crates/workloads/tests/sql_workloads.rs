//! Every workload runs as four concurrent SERIALIZABLE PostgreSQL clients against the machine's database
//! (127.0.0.1:5432, database `test`; override with `KRAIT_TEST_PG_URL`) with no error other than retried
//! serialization failures. Each test uses its own schema, so the tests can run in parallel.

use std::sync::Arc;
use std::time::Duration;

use workloads::sql::{Isolation, Progress, RunOptions, RunSummary, SchemaName, SetupOutcome, run, setup};
use workloads::{Sizes, Workload, WorkloadName};

fn url() -> String {
    std::env::var("KRAIT_TEST_PG_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=10".into())
}

fn small(name: WorkloadName) -> Workload {
    Workload::new(
        name,
        &Sizes {
            users: Some(200),
            items: Some(1000),
            customers: Some(30),
            keys: Some(1000),
            ..Sizes::default()
        },
    )
}

fn schema_for(name: WorkloadName, test: &str) -> SchemaName {
    format!("krait_wltest_{}_{test}", name.as_str().replace('-', "_")).parse().unwrap()
}

/// Drops a test's schema once it passed, so that its tables (named like every other run's) do not stay
/// behind: a proxy cannot tell same-named tables in several schemas apart by an unqualified name.
async fn drop_schema(schema: &SchemaName) {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.unwrap();
}

fn run_small(name: WorkloadName, txns: Option<u64>, duration: Option<Duration>) -> RunSummary {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let workload = Arc::new(small(name));
        let schema = schema_for(name, if duration.is_some() { "timed" } else { "count" });
        let loaded = setup(&url(), &workload, &schema, true).await.unwrap_or_else(|e| {
            panic!("{name}: setup failed (is PostgreSQL up on 127.0.0.1:5432 with database `test`?): {e}")
        });
        assert!(matches!(loaded, SetupOutcome::Loaded { rows } if rows > 0), "{name}: {loaded:?}");
        // Setup is idempotent: the same initial state is not loaded twice.
        assert_eq!(setup(&url(), &workload, &schema, false).await.unwrap(), SetupOutcome::AlreadyLoaded);
        let opts = RunOptions {
            clients: 4,
            txns,
            duration,
            seed: 17,
            isolation: Isolation::Serializable,
            schema,
            max_retries: 1000,
        };
        let progress = Arc::new(Progress::default());
        let summary = run(&url(), workload, &opts, progress.clone()).await.unwrap();
        check_consistency(name, &opts.schema).await;
        assert_eq!(summary.errors, 0, "{name}: {:#?}", summary.error_samples);
        assert_eq!(
            progress.finished.load(std::sync::atomic::Ordering::Relaxed),
            summary.committed + summary.rolled_back
        );
        assert_eq!(progress.retries.load(std::sync::atomic::Ordering::Relaxed), summary.total_retries());
        eprintln!(
            "{name}: {} committed, {} rolled back, {} retries {:?} in {:?} ({:.0} tps)",
            summary.committed,
            summary.rolled_back,
            summary.total_retries(),
            summary.retries,
            summary.elapsed,
            summary.tps()
        );
        drop_schema(&opts.schema).await;
        summary
    })
}

/// The invariants each workload keeps when every transaction is serializable: a lost update, or a retried
/// transaction applied twice, breaks them (TPC-C's are its consistency conditions 1 and 2, clause 3.3.2).
async fn check_consistency(name: WorkloadName, schema: &SchemaName) {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.batch_execute(&format!("SET search_path TO {schema}")).await.unwrap();
    let violations: &[(&str, &str)] = match name {
        WorkloadName::Tpcc => &[
            (
                "w_ytd = sum(d_ytd)",
                "SELECT count(*) FROM tpcc_warehouse w WHERE w_ytd <> (SELECT sum(d_ytd) FROM tpcc_district)",
            ),
            (
                "d_next_o_id - 1 = max(o_id)",
                "SELECT count(*) FROM tpcc_district d WHERE d_next_o_id - 1 <> \
                 (SELECT coalesce(max(o_id), 0) FROM tpcc_orders o WHERE o.o_d_id = d.d_id)",
            ),
            (
                "o_ol_cnt = count(order lines)",
                "SELECT count(*) FROM tpcc_orders o WHERE o_ol_cnt <> (SELECT count(*) FROM tpcc_order_line l \
                 WHERE l.ol_d_id = o.o_d_id AND l.ol_o_id = o.o_id)",
            ),
        ],
        WorkloadName::Twitter => &[(
            "tweet_count = count(tweets)",
            "SELECT count(*) FROM tw_user u WHERE tweet_count <> (SELECT count(*) FROM tw_tweet t WHERE t.t_uid = u.uid)",
        )],
        WorkloadName::Rubis => &[
            (
                "nb_bids = count(bids)",
                "SELECT count(*) FROM rb_item i WHERE nb_bids <> (SELECT count(*) FROM rb_bid b WHERE b.b_iid = i.iid)",
            ),
            (
                "nb_comments = count(comments)",
                "SELECT count(*) FROM rb_user u WHERE nb_comments <> \
                 (SELECT count(*) FROM rb_comment c WHERE c.c_to = u.uid)",
            ),
        ],
        _ => &[],
    };
    for (what, sql) in violations {
        let n: i64 = client.query_one(*sql, &[]).await.unwrap().get(0);
        assert_eq!(n, 0, "{name}: {what} is violated in {n} rows");
    }
}

fn run_count(name: WorkloadName) {
    let s = run_small(name, Some(200), None);
    assert_eq!(s.committed + s.rolled_back, 200, "{name}");
    assert_eq!(s.mix.values().sum::<u64>(), 200, "{name}");
    assert_eq!(s.latency_us.len(), 200, "{name}");
}

#[test]
fn tpcc_runs_serializable_with_only_retried_conflicts() {
    run_count(WorkloadName::Tpcc);
}

#[test]
fn twitter_runs_serializable_with_only_retried_conflicts() {
    run_count(WorkloadName::Twitter);
}

#[test]
fn rubis_runs_serializable_with_only_retried_conflicts() {
    run_count(WorkloadName::Rubis);
}

#[test]
fn blindw_mixes_run_serializable_with_only_retried_conflicts() {
    for name in [WorkloadName::BlindWRm, WorkloadName::BlindWRw, WorkloadName::BlindWWm] {
        run_count(name);
    }
}

#[test]
fn chengrw_runs_serializable_with_only_retried_conflicts() {
    // 1,000 keys and four clients reading and writing four each: conflicts happen, and are retried.
    run_count(WorkloadName::ChengRw);
}

#[test]
fn a_timed_run_stops_at_its_duration() {
    let s = run_small(WorkloadName::BlindWRw, None, Some(Duration::from_millis(700)));
    assert!(s.committed > 0);
    assert!(s.elapsed < Duration::from_secs(5), "{:?}", s.elapsed);
}

#[test]
fn a_second_run_on_the_same_data_continues_where_the_first_stopped() {
    // Registrations allocate ids from counters in the database, and tweets number themselves from the
    // author's count, so running again on the state a run left behind must not collide.
    for name in [WorkloadName::Rubis, WorkloadName::Twitter, WorkloadName::Tpcc] {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let workload = Arc::new(small(name));
            let schema = schema_for(name, "rerun");
            setup(&url(), &workload, &schema, true).await.unwrap();
            for _ in 0..2 {
                let opts = RunOptions {
                    clients: 4,
                    txns: Some(100),
                    duration: None,
                    seed: 3,
                    isolation: Isolation::Serializable,
                    schema: schema.clone(),
                    max_retries: 1000,
                };
                let s = run(&url(), workload.clone(), &opts, Arc::default()).await.unwrap();
                assert_eq!(s.errors, 0, "{name}: {:#?}", s.error_samples);
            }
            drop_schema(&schema).await;
        });
    }
}

#[test]
fn bad_schema_names_are_refused() {
    assert!("x; DROP TABLE y".parse::<SchemaName>().is_err());
    assert!("Upper".parse::<SchemaName>().is_err());
    assert!("9lives".parse::<SchemaName>().is_err());
    assert!("krait_tpcc".parse::<SchemaName>().is_ok());
}
