//! Replay (issue 18, item 4; CLOTHO): an anomaly recorded through the real proxy on the real PostgreSQL
//! becomes a report, and the report is replayed against the same database, in a scratch schema, through a
//! second, in-process proxy that records the replay. A REPEATABLE READ write skew is reproduced at
//! REPEATABLE READ and prevented at SERIALIZABLE; a READ COMMITTED lost update, and a READ COMMITTED
//! non-repeatable read, are reproduced.

mod proxy_support;

use std::time::Duration;

use history::IsolationLevel;
use proxy_support::*;
use replay::{ReplayOptions, ReplayPlan, StepOutcome, Verdict};
use verifier::{AnomalyClass, Level, Options, Report};

const TARGET: &str = "host=127.0.0.1 port=5432 user=postgres dbname=postgres";

/// A schema of its own with `accounts(id, balance)`, rows 0 and 1 at 100; dropped when dropped.
struct Accounts {
    schema: String,
    admin: tokio_postgres::Client,
}

impl Accounts {
    async fn new(name: &str) -> Accounts {
        let schema = format!("krait_rp_{name}_{}", std::process::id());
        let admin = connect(&format!("{TARGET} connect_timeout=5")).await;
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
                 CREATE TABLE {schema}.accounts (id INT PRIMARY KEY, balance INT NOT NULL); \
                 INSERT INTO {schema}.accounts VALUES (0, 100), (1, 100)"
            ))
            .await
            .expect("set-up");
        Accounts { schema, admin }
    }
}

impl Drop for Accounts {
    /// Drops the schema and its replays' scratch schema, also when the test failed.
    fn drop(&mut self) {
        for schema in [self.schema.clone(), scratch_of(self)] {
            let _ = std::process::Command::new("psql")
                .args(["-h", "127.0.0.1", "-U", PG_USER, "-d", PG_DB, "-XAtq"])
                .args(["-c", "SET client_min_messages = warning"])
                .args(["-c", &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")])
                .output();
        }
    }
}

/// The report of what the proxy recorded, checked at serializable, once `txns` transactions are in.
async fn recorded_report(p: TestProxy, txns: usize) -> Report {
    let log = p.handle.log().clone();
    p.handle.shutdown().await.expect("the proxy stops");
    let h = tokio::task::spawn_blocking(move || log.replay()).await.expect("join").expect("replay");
    assert_eq!(h.transactions.iter().filter(|t| !t.fence).count(), txns, "{:?}", h.transactions);
    verifier::verify(&h, &Options { level: Level::Serializable, ..Options::default() }).expect("verify")
}

/// The scratch schema of the replays of `accounts`' test.
fn scratch_of(accounts: &Accounts) -> String {
    format!("krait_replay_{}", accounts.schema)
}

async fn replay(accounts: &Accounts, report: &Report, isolation: Option<IsolationLevel>) -> replay::Replayed {
    let plan = ReplayPlan::new("r000001", report, isolation).expect("a plan");
    let options = ReplayOptions {
        step_timeout: Duration::from_millis(500),
        scratch_schema: Some(scratch_of(accounts)),
        ..ReplayOptions::new(TARGET)
    };
    replay::replay(&plan, &options).await.expect("the replay runs")
}

/// `report` without its timestamps: the plan then rests on the anomaly's dependencies alone (with the
/// report's order of transactions, which would run them one after the other).
fn untimed(report: &Report) -> Report {
    let mut untimed = report.clone();
    for t in &mut untimed.transactions {
        (t.start_ns, t.commit_ns) = (None, None);
    }
    untimed
}

fn classes(report: &Report) -> Vec<AnomalyClass> {
    report.anomalies.iter().map(|a| a.class).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeatable_read_write_skew_is_reproduced_there_and_prevented_at_serializable() {
    let accounts = Accounts::new("skew").await;
    let s = &accounts.schema;
    let p = start_proxy_with(Opts { fence_every: Some(0), ..Opts::default() }).await;
    let (a, b) = (p.connect().await, p.connect().await);
    let select = format!("SELECT id, balance FROM {s}.accounts WHERE id = $1 OR id = $2");
    let update = format!("UPDATE {s}.accounts SET balance = $1 WHERE id = $2");
    for c in [&a, &b] {
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.unwrap();
        assert_eq!(c.query(&select, &[&0i32, &1i32]).await.unwrap().len(), 2);
    }
    a.execute(&update, &[&(-1i32), &0i32]).await.unwrap();
    b.execute(&update, &[&(-1i32), &1i32]).await.unwrap();
    a.batch_execute("COMMIT").await.unwrap();
    b.batch_execute("COMMIT").await.unwrap();
    drop((a, b));
    let report = recorded_report(p, 2).await;
    assert!(classes(&report).contains(&AnomalyClass::WriteSkew), "{}", report.render_text());

    // The plan: each transaction's statements with their parameters, interleaved so that both snapshots
    // come before either commit.
    let plan = ReplayPlan::new("r000001", &report, None).unwrap();
    let out = tempfile::tempdir().unwrap();
    let scratch = replay::Scratch {
        map: replay::TableMap::scratch("krait_replay_r000001", plan.tables()),
        primary_keys: Default::default(),
    };
    let prepared = replay::Prepared::new(&plan, &scratch).unwrap();
    replay::script::write(out.path(), &plan, &prepared).unwrap();
    let order = std::fs::read_to_string(out.path().join("interleaving.txt")).unwrap();
    let steps: Vec<&str> = order.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(steps.len(), 8, "{order}");
    let first_commit = steps.iter().position(|l| l.ends_with("COMMIT")).unwrap();
    assert_eq!(steps[..first_commit].iter().filter(|l| l.contains("SELECT")).count(), 2, "{order}");
    assert!(order.contains("WHERE id = '0' OR id = '1'") && order.contains("SET balance = '-1'"), "{order}");
    let setup = std::fs::read_to_string(out.path().join("setup.sql")).unwrap();
    assert!(setup.contains("(LIKE \"") && setup.contains("VALUES ('0', '100')"), "{setup}");
    let sessions = std::fs::read_dir(out.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("session-S"))
        .count();
    assert_eq!(sessions, 2);

    let at_rr = replay(&accounts, &report, None).await;
    assert_eq!(at_rr.verdict, Verdict::Reproduced, "{}", replay::describe(&plan, &at_rr));
    assert!(classes(&at_rr.report).contains(&AnomalyClass::WriteSkew));
    let untimed_rr = replay(&accounts, &untimed(&report), None).await;
    assert_eq!(untimed_rr.verdict, Verdict::Reproduced, "{}", replay::describe(&plan, &untimed_rr));
    let at_s = replay(&accounts, &report, Some(IsolationLevel::Serializable)).await;
    assert_eq!(at_s.verdict, Verdict::Prevented, "{}", replay::describe(&plan, &at_s));
    assert!(
        at_s.steps.iter().any(|(_, o)| matches!(o, StepOutcome::Failed { code, .. } if code == "40001")),
        "{:?}",
        at_s.steps
    );
    // The recorded tables were never touched, and the scratch schema is gone.
    let rows =
        accounts.admin.query(&format!("SELECT balance FROM {s}.accounts ORDER BY id"), &[]).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), [-1, -1]);
    let scratch = accounts
        .admin
        .query("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&scratch_of(&accounts)])
        .await
        .unwrap();
    assert!(scratch.is_empty());

    // A set-up that fails (a recorded column the table does not have) is an error, and leaves no scratch
    // schema behind.
    let mut broken = report.clone();
    for op in broken.transactions.iter_mut().flat_map(|t| &mut t.ops) {
        for v in &mut op.values {
            v.column = "no_such_column".to_owned();
        }
    }
    let plan_of_broken = ReplayPlan::new("r000001", &broken, None).unwrap();
    let options = ReplayOptions { scratch_schema: Some(scratch_of(&accounts)), ..ReplayOptions::new(TARGET) };
    let err = replay::replay(&plan_of_broken, &options).await.expect_err("the set-up fails");
    assert!(err.to_string().contains("set-up statement"), "{err}");
    let scratch = accounts
        .admin
        .query("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&scratch_of(&accounts)])
        .await
        .unwrap();
    assert!(scratch.is_empty());

    // --in-place: the recorded rows themselves are set back to what the transactions read, and replayed.
    let options = ReplayOptions {
        in_place: true,
        step_timeout: Duration::from_millis(500),
        ..ReplayOptions::new(TARGET)
    };
    let in_place = replay::replay(&plan, &options).await.expect("the replay runs in place");
    assert_eq!(in_place.verdict, Verdict::Reproduced, "{}", replay::describe(&plan, &in_place));
    let rows =
        accounts.admin.query(&format!("SELECT balance FROM {s}.accounts ORDER BY id"), &[]).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), [-1, -1]);
    accounts.admin.batch_execute(&format!("UPDATE {s}.accounts SET balance = 5")).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let options = ReplayOptions { out: Some(out.path().to_path_buf()), ..options };
    replay::replay(&plan, &options).await.expect("the replay runs in place");
    let setup = std::fs::read_to_string(out.path().join("setup.sql")).unwrap();
    assert!(setup.contains("ON CONFLICT (\"id\") DO UPDATE"), "{setup}");
    assert!(!out.path().join("cleanup.sql").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_committed_lost_update_is_reproduced() {
    let accounts = Accounts::new("lost").await;
    let s = &accounts.schema;
    let p = start_proxy_with(Opts { fence_every: Some(0), ..Opts::default() }).await;
    let (a, b) = (p.connect().await, p.connect().await);
    let select = format!("SELECT id, balance FROM {s}.accounts WHERE id = $1");
    let update = format!("UPDATE {s}.accounts SET balance = $1 WHERE id = $2");
    for c in [&a, &b] {
        c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
        assert_eq!(c.query(&select, &[&0i32]).await.unwrap().len(), 1);
    }
    // b's UPDATE waits for a's row lock and, once a commits, overwrites a's version (EvalPlanQual): its
    // snapshot shows the version both read, so no replaced version is recorded for it, and the history
    // holds two read-modify-writes of one version.
    a.execute(&update, &[&90i32, &0i32]).await.unwrap();
    let a_commits = async {
        wait_until_waiting_for_a_lock(&format!("{s}.accounts")).await;
        a.batch_execute("COMMIT").await
    };
    let (b_balance, id) = (80i32, 0i32);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&b_balance, &id];
    let (b_update, a_commit) = tokio::join!(b.execute(&update, &params), a_commits);
    a_commit.unwrap();
    b_update.unwrap();
    b.batch_execute("COMMIT").await.unwrap();
    drop((a, b));
    let report = recorded_report(p, 2).await;
    assert!(classes(&report).contains(&AnomalyClass::LostUpdate), "{}", report.render_text());

    let replayed = replay(&accounts, &report, None).await;
    let plan = ReplayPlan::new("r000001", &report, None).unwrap();
    assert_eq!(replayed.verdict, Verdict::Reproduced, "{}", replay::describe(&plan, &replayed));
    // The second UPDATE may wait for the first transaction's lock (the statements' own times are not
    // recorded), but no step fails.
    assert!(replayed.steps.iter().all(|(_, o)| matches!(o, StepOutcome::Done | StepOutcome::Unblocked)));
    // Without times, the dependencies alone put the second read before the first commit.
    let replayed = replay(&accounts, &untimed(&report), None).await;
    assert_eq!(replayed.verdict, Verdict::Reproduced, "{}", replay::describe(&plan, &replayed));
}

/// A READ COMMITTED transaction reads a row twice, and another commits an update of it in between: at
/// serializability a non-repeatable read. Its report cites the update, so the replay commits it between
/// the two reads, with the recorded times and without them (the report's order alone would run the
/// reader first and whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_committed_non_repeatable_read_is_reproduced() {
    let accounts = Accounts::new("reread").await;
    let s = &accounts.schema;
    let p = start_proxy_with(Opts { fence_every: Some(0), ..Opts::default() }).await;
    let (a, b) = (p.connect().await, p.connect().await);
    let select = format!("SELECT id, balance FROM {s}.accounts WHERE id = $1");
    a.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    assert_eq!(a.query(&select, &[&0i32]).await.unwrap().len(), 1);
    b.execute(&format!("UPDATE {s}.accounts SET balance = 50 WHERE id = $1"), &[&0i32]).await.unwrap();
    assert_eq!(a.query(&select, &[&0i32]).await.unwrap().len(), 1);
    a.batch_execute("COMMIT").await.unwrap();
    drop((a, b));
    let report = recorded_report(p, 2).await;
    let reread = report.anomalies.iter().find(|a| a.class == AnomalyClass::NonRepeatableRead);
    let reread = reread.unwrap_or_else(|| panic!("a non-repeatable read: {}", report.render_text()));
    assert_eq!(reread.ops.len(), 3, "the update is cited: {}", report.render_text());

    let plan = ReplayPlan::new("r000001", &report, None).unwrap();
    for report in [report.clone(), untimed(&report)] {
        let replayed = replay(&accounts, &report, None).await;
        assert_eq!(replayed.verdict, Verdict::Reproduced, "{}", replay::describe(&plan, &replayed));
    }
}
