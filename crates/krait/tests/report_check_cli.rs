//! `krait report check` end to end: a stored reject report is re-checked against the transactions it
//! carries, with no history log anywhere: exit 0 when it holds, 1 when its JSON was tampered with, 2 when
//! there is nothing it could be checked on.

mod common;

use std::path::Path;

use common::krait;
use history::HistoryBuilder;
use verifier::{Options, Report, ReportStore, verify};

/// A data directory holding `reports` (in order), and their ids.
fn store(dir: &Path, reports: &[&Report]) -> Vec<String> {
    let store = ReportStore::open(dir).expect("a report store");
    reports.iter().map(|r| store.save(r).expect("the report is saved")).collect()
}

fn check(dir: &Path, id: &str) -> (Option<i32>, String) {
    let out = krait(&["report", "check", id, "--data-dir", dir.to_str().expect("utf-8 path")]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// A G-single whose proof needs a transaction no edge names: T3 read T1's x=w3, which T2's x=w2 follows
/// because T1 wrote w3 over the version from before recording (a chain `init, w3`, and initial versions come
/// first), and T3 read T2's y. The fact rests on T1, so the report must carry it.
fn g_single() -> Report {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").write("x", 3))
        .txn(2, |t| t.write("x", 2).write("y", 5))
        .txn(3, |t| t.read("x", 3).read("y", 5))
        .build();
    let report = verify(&h, &Options::default()).expect("verifies");
    assert!(!report.is_accept());
    report
}

#[test]
fn an_intact_report_holds_and_a_tampered_one_is_refuted_without_the_history() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let intact = g_single();
    let carried: Vec<u64> = intact.transactions.iter().map(|t| t.id.0).collect();
    assert_eq!(carried, [1, 2, 3], "{}", intact.render_text());
    // T1 read x from before recording; the tampered report says it read T2's write instead, so w3 no longer
    // follows the initial version.
    let mut tampered = intact.clone();
    let t1 = tampered.transactions.iter_mut().find(|t| t.id.0 == 1).expect("T1 is carried");
    let read = t1.ops.iter_mut().find(|op| op.text == "r(x) = init").expect("T1 read x");
    read.text = "r(x) = w2".to_owned();
    read.version = Some("w2".to_owned());
    // And one without T1, which no edge names.
    let mut cut = intact.clone();
    cut.transactions.retain(|t| t.id.0 != 1);
    let ids = store(dir.path(), &[&intact, &tampered, &cut]);

    let (code, out) = check(dir.path(), &ids[0]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("REPORT CHECKED: 2 cycle edges, 1 version-order facts proved"), "{out}");
    assert!(out.contains("against the 3 transaction(s) the report carries"), "{out}");

    for id in &ids[1..] {
        let (code, out) = check(dir.path(), id);
        assert_eq!(code, Some(1), "{id}: {out}");
        assert!(out.starts_with("REPORT REFUTED: "), "{id}: {out}");
    }
}

#[test]
fn an_accept_an_old_incomplete_report_a_missing_one_and_unreadable_json_are_errors() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let h = HistoryBuilder::new().txn(1, |t| t.read_init("x").write("x", 1)).build();
    let accept = verify(&h, &Options::default()).expect("verifies");
    // A report of schema 3 carried only what its anomalies name: one its transactions do not bear out may
    // still hold against its history, so that is no refutation.
    let mut old = g_single();
    old.schema_version = 3;
    old.transactions.retain(|t| t.id.0 != 1);
    let ids = store(dir.path(), &[&accept, &old]);

    let (code, out) = check(dir.path(), &ids[0]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("accept report"), "{out}");

    let (code, out) = check(dir.path(), &ids[1]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("check it against its history"), "{out}");

    let (code, out) = check(dir.path(), "r000042");
    assert_eq!(code, Some(2), "{out}");

    std::fs::write(dir.path().join("reports").join(format!("{}.json", ids[1])), "{\"verdict\": ")
        .expect("overwrites the report");
    let (code, out) = check(dir.path(), &ids[1]);
    assert_eq!(code, Some(2), "{out}");
}
