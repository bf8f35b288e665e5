//! `krait demo` through the binary: the embedded reference store under serializability (accepted, exit 0)
//! and under snapshot isolation (rejected with a stored report, exit 1), and the PostgreSQL target through
//! the TLS proxy against the machine's database (accepted, exit 0).

mod common;

use common::krait;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `N` in "N transactions recorded" and in "N verified" of the summary line.
fn recorded_and_verified(text: &str) -> (u64, u64) {
    let line = text.lines().find(|l| l.contains("transactions recorded")).expect("a summary line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let num = |after: &str| -> u64 {
        let i = words.iter().position(|w| *w == after).expect("the word is there");
        words[i - 1].parse().expect("a number")
    };
    (num("transactions"), num("verified"))
}

#[test]
fn embedded_serializable_store_is_accepted_and_keeps_no_report() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let out = krait(&[
        "demo",
        "--target",
        "embedded",
        "--model",
        "ser",
        "--txns",
        "300",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("No database and no proxy are involved"), "{text}");
    assert!(text.contains("Verdict: ACCEPT"), "{text}");
    let (recorded, verified) = recorded_and_verified(&text);
    assert!(recorded >= 300, "{text}");
    assert_eq!(recorded, verified, "{text}");
    assert!(!data.join("reports").exists(), "an accepted demo keeps no report");
}

#[test]
fn embedded_snapshot_isolation_store_is_rejected_with_a_report() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let out = krait(&[
        "demo",
        "--target",
        "embedded",
        "--model",
        "si",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("Verdict: REJECT"), "{text}");
    assert!(text.contains("In plain words ("), "{text}");
    let store = verifier::ReportStore::open_read_only(&data);
    let ids = store.ids().expect("the reports directory lists");
    assert!(!ids.is_empty(), "a reject keeps its report");
    for id in &ids {
        assert!(text.contains(&format!("{id}.json")), "the summary names {id}: {text}");
        let report = store.load(id).expect("the report loads");
        assert!(!report.is_accept(), "a stored report is a reject");
        assert!(!report.anomalies.is_empty());
    }
}

#[test]
fn postgres_target_runs_through_the_tls_proxy_and_is_accepted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let out = krait(&[
        "demo",
        "--target",
        "postgres",
        "--txns",
        "120",
        "--seed",
        "7",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("through the Krait proxy"), "{text}");
    assert!(text.contains("TLS required"), "{text}");
    assert!(text.contains("120 committed"), "{text}");
    let (recorded, verified) = recorded_and_verified(&text);
    assert!(recorded >= 120, "every committed transaction is recorded: {text}");
    assert_eq!(recorded, verified, "the verifier caught up with the log: {text}");
    // Either row-level ops were recorded and checked, or the demo says plainly that nothing was checked.
    let no_ops = text.contains("(0 row-level reads and writes)");
    assert_eq!(no_ops, text.contains("NOTE: the recorded transactions carry no row-level"), "{text}");
    assert!(text.contains("Verdict: ACCEPT"), "{text}");
}

#[test]
fn postgres_target_under_read_committed_is_rejected_when_rows_are_tagged() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let out = krait(&[
        "demo",
        "--target",
        "postgres",
        "--isolation",
        "read-committed",
        "--keys",
        "2",
        "--txns",
        "150",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ]);
    let text = stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if text.contains("row-level tagging: on") {
        // Two clients reading both rows and updating one from what they read, under READ COMMITTED, lose
        // updates; with the row versions recorded, the verifier must say so.
        assert_eq!(out.status.code(), Some(1), "{text}\n{stderr}");
        assert!(text.contains("Verdict: REJECT"), "{text}");
        let ids = verifier::ReportStore::open_read_only(&data).ids().expect("the reports list");
        assert!(!ids.is_empty(), "{text}");
    } else {
        // Without tagging nothing row-level is recorded, and the demo must say its accept means nothing.
        assert!(text.contains("row-level tagging: NOT AVAILABLE"), "{text}");
        assert_eq!(out.status.code(), Some(0), "{text}\n{stderr}");
        assert!(text.contains("NOTE: the recorded transactions carry no row-level"), "{text}");
    }
}
