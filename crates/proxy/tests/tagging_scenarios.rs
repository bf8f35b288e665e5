//! The real database decides: two sessions interleaved step by step from the test, through the proxy's
//! tagger, against PostgreSQL at a chosen isolation level; the recorded history goes to `verifier::verify`.
//! - REPEATABLE READ lets write skew through: rejected, and the report names write skew on the two rows.
//! - READ COMMITTED lets a lost update through: rejected on the counter row, as the non-repeatable read that
//!   shows it (the later UPDATE replaced a version its transaction's SELECT had not seen).
//! - SERIALIZABLE stops both (one transaction fails with 40001, recorded as aborted): accepted.
//! - Concurrent transfers at SERIALIZABLE with retries and a fence every 5 commits per session: accepted,
//!   every op mapped, nothing opaque, fences marked in the history.

mod tagging_support;

use history::{History, Op, Outcome};
use proxy::interpret::OpaqueKind;
use tagging_support::{Raw, Recording, Tagged, error_code, rows};
use verifier::{AnomalyClass, Options, Verdict, verify};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn setup(sql: &str) -> Raw {
    let mut raw = Raw::connect().await;
    let r = raw.simple(sql).await;
    assert_eq!(error_code(&r), None, "setup failed: {sql}");
    raw
}

/// A fresh table `t (id int PRIMARY KEY, v int NOT NULL)` holding `rows` (an INSERT's VALUES list).
async fn table_with(t: &str, rows: &str) -> Raw {
    setup(&format!(
        "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int PRIMARY KEY, v int NOT NULL); \
         INSERT INTO {t} VALUES {rows}"
    ))
    .await
}

fn check(h: &History) -> verifier::Report {
    verify(h, &Options::default()).unwrap_or_else(|e| panic!("verify: {e}"))
}

fn key_text(r: &verifier::Report) -> String {
    r.anomalies
        .iter()
        .flat_map(|a| a.cycle.iter().filter_map(|e| e.key.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Two doctors on call; each session checks both, then takes one off call.
async fn doctors(level: &str, table: &str) -> (History, Vec<Option<String>>) {
    let mut admin = setup(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, on_call bool NOT NULL); \
         INSERT INTO {table} VALUES (1, true), (2, true)"
    ))
    .await;
    let rec = Recording::new(&mut admin).await;
    let mut a = Tagged::connect(&rec).await;
    let mut b = Tagged::connect(&rec).await;
    for s in [&mut a, &mut b] {
        s.exec(&format!("BEGIN ISOLATION LEVEL {level}")).await;
    }
    for s in [&mut a, &mut b] {
        for id in [1, 2] {
            let r = s.exec(&format!("SELECT on_call FROM {table} WHERE id = {id}")).await;
            assert_eq!(rows(&r), vec![vec![Some("t".to_owned())]]);
        }
    }
    let ua = a.exec(&format!("UPDATE {table} SET on_call = false WHERE id = 1")).await;
    let ub = b.exec(&format!("UPDATE {table} SET on_call = false WHERE id = 2")).await;
    assert_eq!(error_code(&ua), None);
    let ca = a.exec("COMMIT").await;
    let cb = b.exec(if error_code(&ub).is_some() { "ROLLBACK" } else { "COMMIT" }).await;
    let codes = vec![error_code(&ca), error_code(&ub).or(error_code(&cb))];
    admin.simple(&format!("DROP TABLE {table}")).await;
    (rec.history(), codes)
}

#[test]
fn write_skew_at_repeatable_read_is_rejected_on_the_right_keys() {
    rt().block_on(async {
        let (h, codes) = doctors("REPEATABLE READ", "ktag_ws_rr").await;
        assert_eq!(codes, vec![None, None], "REPEATABLE READ lets both commit");
        let r = check(&h);
        assert_eq!(r.verdict, Verdict::Reject, "{r:?}");
        assert_eq!(r.anomalies[0].class, AnomalyClass::WriteSkew, "{:?}", r.anomalies);
        let keys = key_text(&r);
        assert!(keys.contains("ktag_ws_rr"), "{keys}");
        assert!(keys.contains('1') && keys.contains('2'), "{keys}");
    });
}

#[test]
fn write_skew_attempt_at_serializable_is_stopped_and_accepted() {
    rt().block_on(async {
        let (h, codes) = doctors("SERIALIZABLE", "ktag_ws_ser").await;
        assert!(codes.iter().any(|c| c.as_deref() == Some("40001")), "{codes:?}");
        assert!(h.transactions.iter().any(|t| t.outcome == Outcome::Aborted));
        let r = check(&h);
        assert_eq!(r.verdict, Verdict::Accept, "{:?}", r.anomalies);
    });
}

#[test]
fn lost_update_at_read_committed_is_rejected() {
    rt().block_on(async {
        let t = "ktag_lu";
        let mut admin = table_with(t, "(1, 10)").await;
        let rec = Recording::new(&mut admin).await;
        let mut a = Tagged::connect(&rec).await;
        let mut b = Tagged::connect(&rec).await;
        let mut seen = Vec::new();
        for s in [&mut a, &mut b] {
            s.exec("BEGIN ISOLATION LEVEL READ COMMITTED").await;
            let r = s.exec(&format!("SELECT v FROM {t} WHERE id = 1")).await;
            seen.push(rows(&r));
        }
        assert_eq!(seen[0], seen[1]);
        // Each writes back what it read plus one (the application computed it).
        a.exec(&format!("UPDATE {t} SET v = 11 WHERE id = 1")).await;
        assert_eq!(error_code(&a.exec("COMMIT").await), None);
        b.exec(&format!("UPDATE {t} SET v = 11 WHERE id = 1")).await;
        assert_eq!(error_code(&b.exec("COMMIT").await), None);
        let h = rec.history();
        admin.simple(&format!("DROP TABLE {t}")).await;
        let r = check(&h);
        assert_eq!(r.verdict, Verdict::Reject);
        // b's UPDATE replaced a's version, which the proxy records as read (DESIGN.md §3, "what a write
        // replaced"), while b's SELECT had read the one before: the evidence is that non-repeatable read.
        assert_eq!(r.anomalies[0].class, AnomalyClass::NonRepeatableRead, "{:?}", r.anomalies);
        assert!(format!("{:?}", r.anomalies[0]).contains(t), "{:?}", r.anomalies[0]);
    });
}

#[test]
fn concurrent_transfers_at_serializable_are_accepted_with_every_op_mapped() {
    rt().block_on(async {
        let t = "ktag_bank";
        let mut admin = setup(&format!(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int PRIMARY KEY, bal int NOT NULL); \
             INSERT INTO {t} SELECT g, 100 FROM generate_series(0, 7) g"
        ))
        .await;
        let rec = Recording::new(&mut admin).await;
        let mut tasks = Vec::new();
        for client in 0..4u64 {
            let rec = rec.clone();
            tasks.push(tokio::spawn(async move {
                let mut s = Tagged::connect(&rec).await;
                s.fence_every(5);
                let (mut committed, mut aborted) = (0, 0);
                let mut x = client * 7 + 1;
                for _ in 0..60 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let from = (x >> 33) % 8;
                    let to = (from + 1 + (x >> 40) % 7) % 8;
                    s.exec("BEGIN ISOLATION LEVEL SERIALIZABLE").await;
                    let r = s.exec(&format!("SELECT bal FROM {t} WHERE id = {from}")).await;
                    let ok = error_code(&r).is_none()
                        && error_code(
                            &s.exec(&format!("UPDATE {t} SET bal = bal - 1 WHERE id = {from}")).await,
                        )
                        .is_none()
                        && error_code(
                            &s.exec(&format!("UPDATE {t} SET bal = bal + 1 WHERE id = {to}")).await,
                        )
                        .is_none()
                        && error_code(&s.exec(&format!("SELECT bal FROM {t} WHERE id = {to}")).await)
                            .is_none();
                    let end = s.exec(if ok { "COMMIT" } else { "ROLLBACK" }).await;
                    if ok && error_code(&end).is_none() {
                        committed += 1;
                    } else {
                        aborted += 1;
                    }
                }
                (committed, aborted)
            }));
        }
        let mut committed = 0;
        for task in tasks {
            let (c, _) = task.await.unwrap_or_else(|e| panic!("{e}"));
            committed += c;
        }
        let sum = rows(&admin.simple(&format!("SELECT sum(bal)::text FROM {t}")).await);
        admin.simple(&format!("DROP TABLE {t}")).await;
        assert_eq!(sum, vec![vec![Some("800".to_owned())]]);
        let h = rec.history();
        let fences = h.transactions.iter().filter(|t| t.fence && t.outcome == Outcome::Committed).count();
        assert!(fences >= 4, "fences every 5 commits on each of 4 sessions: {fences}");
        let recorded = h.transactions.iter().filter(|t| !t.fence && t.outcome == Outcome::Committed).count();
        assert_eq!(recorded, committed, "every committed transaction is recorded as committed");
        for t in h.transactions.iter().filter(|t| !t.fence && t.outcome == Outcome::Committed) {
            let reads = t.ops.iter().filter(|o| matches!(o, Op::Read { .. })).count();
            let writes = t.ops.iter().filter(|o| matches!(o, Op::Write { .. })).count();
            // Two point reads plus the two UPDATEs' reads of the versions they replaced; two writes.
            assert_eq!((reads, writes), (4, 2), "{t:?}");
        }
        let m = &rec.shared.metrics;
        for k in OpaqueKind::ALL {
            assert_eq!(m.opaque_count(k), 0, "opaque {}", k.label());
        }
        let r = check(&h);
        assert_eq!(r.verdict, Verdict::Accept, "{:?}", r.anomalies);
    });
}

#[test]
fn opaque_statements_are_logged_and_the_report_says_they_were_not_checked() {
    rt().block_on(async {
        let t = "ktag_opaque";
        let mut admin = table_with(t, "(1, 10), (2, 20)").await;
        let rec = Recording::new(&mut admin).await;
        let mut s = Tagged::connect(&rec).await;
        s.exec("BEGIN ISOLATION LEVEL SERIALIZABLE").await;
        let total = s.exec(&format!("SELECT sum(v) FROM {t}")).await;
        assert_eq!(rows(&total), vec![vec![Some("30".to_owned())]]);
        s.exec(&format!("SELECT v FROM {t} WHERE id = 1")).await;
        assert_eq!(error_code(&s.exec("COMMIT").await), None);
        let h = rec.history();
        admin.simple(&format!("DROP TABLE {t}")).await;

        assert_eq!(h.unchecked.len(), 1, "{:?}", h.unchecked);
        let u = &h.unchecked[0];
        assert_eq!(u.kind, OpaqueKind::Aggregate.label());
        assert!(u.statement.as_deref().is_some_and(|sql| sql.contains("sum(v)")), "{u:?}");
        let committed: Vec<_> = h.transactions.iter().filter(|t| t.outcome == Outcome::Committed).collect();
        assert_eq!(committed.len(), 1);
        assert_eq!(u.txn, committed[0].id);
        // The point read is still mapped and checked.
        assert_eq!(committed[0].ops.len(), 1, "{:?}", committed[0].ops);

        let r = check(&h);
        assert_eq!(r.verdict, Verdict::Accept, "{:?}", r.anomalies);
        assert_eq!(r.not_checked.len(), 1, "{:?}", r.not_checked);
        assert_eq!((r.not_checked[0].statements, r.not_checked[0].transactions), (1, 1));
        let text = r.render_text();
        assert!(text.contains("Not checked: 1 statement(s)") && text.contains("aggregate"), "{text}");
        // The JSON report carries it too, and reads back.
        let back = verifier::Report::from_json(&r.to_json()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.not_checked, r.not_checked);
    });
}

#[test]
fn writes_taken_back_by_rollback_to_savepoint_are_not_recorded() {
    rt().block_on(async {
        let t = "ktag_savepoint";
        let mut admin = table_with(t, "(1, 10), (2, 20)").await;
        let rec = Recording::new(&mut admin).await;
        let mut s = Tagged::connect(&rec).await;
        let steps = [
            "BEGIN ISOLATION LEVEL SERIALIZABLE".to_owned(),
            format!("UPDATE {t} SET v = 11 WHERE id = 1"),
            "SAVEPOINT a".to_owned(),
            format!("UPDATE {t} SET v = 99 WHERE id = 2"),
            // Reads the write that is about to be taken back: that read goes with it.
            format!("SELECT v FROM {t} WHERE id = 2"),
            "ROLLBACK TO SAVEPOINT A".to_owned(),
            format!("SELECT v FROM {t} WHERE id = 2"),
            "SAVEPOINT b".to_owned(),
            format!("UPDATE {t} SET v = 12 WHERE id = 1"),
            "RELEASE SAVEPOINT b".to_owned(),
            "COMMIT".to_owned(),
        ];
        for step in &steps {
            let r = s.exec(step).await;
            assert_eq!(error_code(&r), None, "{step}");
        }
        let after = s.exec(&format!("SELECT v FROM {t} ORDER BY id")).await;
        assert_eq!(rows(&after), vec![vec![Some("12".to_owned())], vec![Some("20".to_owned())]]);
        let h = rec.history();
        admin.simple(&format!("DROP TABLE {t}")).await;

        let txn = h
            .transactions
            .iter()
            .find(|x| x.outcome == Outcome::Committed && x.ops.len() > 1)
            .unwrap_or_else(|| panic!("the savepoint transaction is recorded: {:?}", h.transactions));
        let key = |op: &Op| {
            h.keys.name(op.key()).map(|k| String::from_utf8_lossy(&k.bytes).into_owned()).unwrap_or_default()
        };
        let writes: Vec<String> =
            txn.ops.iter().filter(|op| matches!(op, Op::Write { .. })).map(key).collect();
        let reads: Vec<(String, history::Observed)> = txn
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Read { observed, .. } => Some((key(op), *observed)),
                Op::Write { .. } => None,
            })
            .collect();
        // Row 1 written twice (before `a`, and inside the released `b`); row 2's write was taken back.
        assert_eq!(writes.len(), 2, "{:?}", txn.ops);
        assert!(writes.iter().all(|k| k.ends_with('1')), "{writes:?}");
        // At SERIALIZABLE every UPDATE also reads the version it replaced. Row 1: the one from before the
        // transaction, then its own first write. Row 2: the UPDATE inside `a` read the version from before
        // the transaction, and that read stays (rolling a savepoint back takes back writes, not what was
        // seen); the SELECT inside `a` read the write taken back, so it goes; the one after ROLLBACK TO saw
        // the version from before the transaction.
        let own = |w: &history::WriteId| {
            txn.ops.iter().any(|op| matches!(op, Op::Write { write, .. } if write == w))
        };
        let seen = |row: char| -> Vec<history::Observed> {
            reads.iter().filter(|(k, _)| k.ends_with(row)).map(|(_, o)| *o).collect()
        };
        let before = |o: &history::Observed| matches!(o, history::Observed::PreHistory(_));
        match seen('1')[..] {
            [first, history::Observed::Version(w)] if before(&first) && own(&w) => {}
            _ => panic!("row 1: {reads:?}"),
        }
        assert!(matches!(seen('2')[..], [a, b] if before(&a) && before(&b)), "row 2: {reads:?}");
        assert_eq!(check(&h).verdict, Verdict::Accept);
    });
}

#[test]
fn a_table_name_in_two_schemas_follows_search_path_or_is_not_checked() {
    rt().block_on(async {
        let mut ddl = String::new();
        for schema in ["ktag_amb_a", "ktag_amb_b"] {
            ddl.push_str(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
                 CREATE TABLE {schema}.ktag_amb (id int PRIMARY KEY, v int NOT NULL); \
                 INSERT INTO {schema}.ktag_amb VALUES (1, 10);"
            ));
        }
        let mut admin = setup(&ddl).await;
        let rec = Recording::new(&mut admin).await;
        let mut s = Tagged::connect(&rec).await;
        // The session's search_path says which table the unqualified name is: it is followed.
        assert_eq!(error_code(&s.exec("SET search_path TO ktag_amb_b").await), None);
        s.exec("BEGIN ISOLATION LEVEL SERIALIZABLE").await;
        let r = s.exec("SELECT v FROM ktag_amb WHERE id = 1").await;
        assert_eq!(rows(&r), vec![vec![Some("10".to_owned())]]);
        let r = s.exec("SELECT v FROM ktag_amb_b.ktag_amb WHERE id = 1").await;
        assert_eq!(rows(&r), vec![vec![Some("10".to_owned())]]);
        assert_eq!(error_code(&s.exec("COMMIT").await), None);
        // A change the proxy cannot follow: which table it is now is not checked, never guessed (a guess
        // could merge two tables' rows into one key).
        let r = s.exec("SELECT set_config('search_path', 'ktag_amb_a', false)").await;
        assert_eq!(error_code(&r), None);
        s.exec("BEGIN ISOLATION LEVEL SERIALIZABLE").await;
        let r = s.exec("SELECT v FROM ktag_amb WHERE id = 1").await;
        assert_eq!(rows(&r), vec![vec![Some("10".to_owned())]]);
        assert_eq!(error_code(&s.exec("COMMIT").await), None);
        let h = rec.history();
        admin.simple("DROP SCHEMA ktag_amb_a CASCADE; DROP SCHEMA ktag_amb_b CASCADE").await;

        let kinds: Vec<&str> = h.unchecked.iter().map(|u| u.kind.as_str()).collect();
        // set_config is a function call (not checked either), then the ambiguous read.
        let expected = vec![OpaqueKind::Function.label(), OpaqueKind::AmbiguousTable.label()];
        assert_eq!(kinds, expected, "{:?}", h.unchecked);
        let names: Vec<String> = h
            .transactions
            .iter()
            .filter(|t| t.outcome == Outcome::Committed)
            .flat_map(|t| &t.ops)
            .filter_map(|o| h.keys.name(o.key()).map(|k| k.namespace.clone()))
            .collect();
        assert_eq!(names, vec!["ktag_amb_b.ktag_amb".to_owned(); 2], "both reads are of ktag_amb_b's row");
    });
}
