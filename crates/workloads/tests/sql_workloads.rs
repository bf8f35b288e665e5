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
    Workload::new(name, &Sizes { users: Some(200), items: Some(1000), customers: Some(30), keys: Some(1000) })
}

fn schema_for(name: WorkloadName, test: &str) -> SchemaName {
    format!("krait_wltest_{}_{test}", name.as_str().replace('-', "_")).parse().unwrap()
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
        summary
    })
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
