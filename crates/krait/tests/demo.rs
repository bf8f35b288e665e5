//! `krait demo` through the binary: the embedded reference store behind the TLS proxy under serializability
//! (accepted, exit 0) and under snapshot isolation (rejected with a stored report, exit 1); the history the
//! proxy records from the store against the store's own history of the same run (same verdicts); and the
//! PostgreSQL target through the TLS proxy against the machine's database (accepted, exit 0).

mod common;

use std::path::Path;

use common::krait;
use history::{History, Op, Outcome};

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
    assert_runs_through_the_proxy(&text);
    assert!(text.contains("300 committed"), "{text}");
    assert!(text.contains("Verdict: ACCEPT"), "{text}");
    let (recorded, verified) = recorded_and_verified(&text);
    assert!(recorded >= 300, "{text}");
    assert_eq!(recorded, verified, "{text}");
    assert!(!data.join("reports").exists(), "an accepted demo keeps no report");
}

/// The embedded target ran through the TLS proxy with row-level tagging, and every recorded transaction
/// carries row-level ops (the store answered the proxy's catalog query and its `xmin` tags).
fn assert_runs_through_the_proxy(text: &str) {
    assert!(text.contains("target: the embedded reference store"), "{text}");
    assert!(text.contains("through the Krait proxy"), "{text}");
    assert!(text.contains("TLS required"), "{text}");
    assert!(text.contains("row-level tagging: on"), "{text}");
    assert!(text.contains(", 0 errors"), "no client statement was refused: {text}");
    assert!(!text.contains("(0 row-level reads and writes)"), "{text}");
    assert!(!text.contains("NOTE: the recorded transactions carry no row-level"), "{text}");
    // Every committed transfer read two rows and wrote one, and the proxy recorded those ops (not only its
    // fences' ops): the client's statements on kv were tagged, not opaque.
    let ops: u64 = text
        .split(" row-level reads and writes)")
        .next()
        .and_then(|before| before.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .expect("the number of row-level ops");
    assert!(ops >= 3 * committed(text), "{ops} ops: {text}");
    // The store's own record of the run gets the verdict the proxy's recording got.
    assert!(text.contains("Cross-check: the reference store's own record"), "{text}");
    assert!(text.contains("the verdicts agree"), "{text}");
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
    assert_runs_through_the_proxy(&text);
    assert!(text.contains("Verdict: REJECT"), "{text}");
    assert!(text.contains("In plain words ("), "{text}");
    let store = verifier::ReportStore::open_read_only(&data);
    let ids = store.ids().expect("the reports directory lists");
    assert!(!ids.is_empty(), "a reject keeps its report");
    assert!(text.contains(&format!("{}.json", ids[0])), "the summary names the first report's file: {text}");
    for (i, id) in ids.iter().enumerate() {
        // The first in full, the next eight one line each, the rest counted.
        if i <= 8 {
            assert!(text.contains(id.as_str()), "the summary names {id}: {text}");
        }
        let report = store.load(id).expect("the report loads");
        assert!(!report.is_accept(), "a stored report is a reject");
        assert!(!report.anomalies.is_empty());
    }
    if ids.len() > 9 {
        assert!(text.contains(&format!("… and {} more", ids.len() - 9)), "{text}");
    }
    assert_reject_fits_one_screen(&text);
}

/// Issue 18's "one screen": from the top of the demo's output, within 40 lines, the verdict, one sentence
/// in plain words and the first reject's cycle edge by edge, with short labels and no long ids.
fn assert_reject_fits_one_screen(text: &str) {
    // The legend, which maps labels to the real ids, may follow; it is not part of what must be short.
    let screen: Vec<&str> =
        text.lines().take(40).take_while(|l| !l.contains("Labels in this text")).collect();
    let at = |what: &str| screen.iter().position(|l| l.contains(what));
    let verdict = at("Verdict: REJECT").expect("the verdict on the first screen");
    let words = at("In plain words (").expect("the sentence on the first screen");
    let cycle = at("Cycle: T1 -> T2").expect("the labelled cycle on the first screen");
    assert!(verdict < words && words < cycle, "{text}");
    let edges: Vec<&&str> =
        screen[cycle + 1..].iter().take_while(|l| l.trim_start().starts_with('T')).collect();
    assert!(edges.len() >= 2, "every edge of the cycle on the first screen:\n{}", screen.join("\n"));
    // Versions show as the rows behind them, the written ones included: no `=w<digits>` version ids.
    let version_id =
        |l: &&&str| l.split("=w").skip(1).any(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    assert!(!edges.iter().any(version_id), "a version id where a value belongs:\n{}", screen.join("\n"));
    let long_id = |l: &&str| {
        l.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.len() > 8 && w.starts_with('T') && w[1..].bytes().all(|b| b.is_ascii_digit()))
    };
    assert!(!screen.iter().any(long_id), "long transaction ids on the first screen:\n{}", screen.join("\n"));
    let other_lines = text.lines().skip_while(|l| !l.starts_with("The other ")).skip(1);
    assert!(!other_lines.take(8).any(|l| long_id(&l)), "the other rejects use short labels: {text}");
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
    // With tagging on, the proxy fences (as `krait serve` does by default), so the online verifier has
    // epochs to collect garbage by.
    if !no_ops {
        let fences: u64 = text
            .split(" fences (as serializable)")
            .next()
            .and_then(|before| before.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no fence count in the summary: {text}"));
        assert!(fences > 0, "the demo's proxy fenced nothing: {text}");
    }
    assert!(text.contains("Verdict: ACCEPT"), "{text}");
}

/// Under READ COMMITTED the workload loses updates, which `declared` (the default) allows at that level and
/// serializability does not: checked at `--level serializable`, the run is rejected.
#[test]
fn postgres_target_under_read_committed_is_rejected_when_rows_are_tagged() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let out = krait(&[
        "demo",
        "--target",
        "postgres",
        "--level",
        "serializable",
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

/// At REPEATABLE READ (snapshot isolation) the workload commits write skews. The default level, `declared`,
/// holds every transaction to REPEATABLE READ, which allows them: accepted. At `--level serializable` the
/// same kind of run is rejected, with a write-skew report.
#[test]
fn postgres_target_at_repeatable_read_keeps_its_declared_level_and_is_not_serializable() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let run = |more: &[&str]| {
        let mut args = vec!["demo", "--isolation", "repeatable-read", "--keys", "3", "--txns", "200"];
        args.extend_from_slice(more);
        args.extend_from_slice(&["--data-dir", data.to_str().expect("utf-8 path")]);
        krait(&args)
    };
    let out = run(&[]);
    let text = stdout(&out);
    if !text.contains("row-level tagging: on") {
        assert!(text.contains("row-level tagging: NOT AVAILABLE"), "{text}");
        return;
    }
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}
{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("every transaction kept the isolation level it asked for"), "{text}");
    assert!(text.contains("0 serializable, ") && !text.contains(" 0 repeatable read"), "{text}");
    let out = run(&["--level", "serializable"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("write skew"), "{text}");
}

/// The number of transactions the clients committed, from the demo's clients line.
fn committed(text: &str) -> u64 {
    let clients = text.lines().find(|l| l.contains("krait demo: clients:")).expect("a clients line");
    clients
        .split_whitespace()
        .skip_while(|w| *w != "clients:")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("the number committed")
}

/// Committed transactions that wrote a row of `kv`.
fn committed_kv_writers(h: &History) -> usize {
    h.transactions
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .filter(|t| {
            t.ops.iter().any(|op| matches!(op, Op::Write { key, .. } if h.keys.name(*key).is_some_and(|n| n.namespace == "kv")))
        })
        .count()
}

fn demo_histories(model: &str, seed: u64, dir: &Path) -> (History, History, String) {
    let out = krait(&[
        "demo",
        "--target",
        "embedded",
        "--model",
        model,
        "--seed",
        &seed.to_string(),
        "--txns",
        "150",
        "--data-dir",
        dir.join("data").to_str().expect("utf-8 path"),
        "--history-out",
        dir.join("histories").to_str().expect("utf-8 path"),
    ]);
    let text = stdout(&out);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_runs_through_the_proxy(&text);
    let read = |name: &str| {
        history::read_history(&dir.join("histories").join(name), None)
            .unwrap_or_else(|e| panic!("{name} reads: {e}"))
    };
    (read("proxy.native"), read("refstore.native"), text)
}

#[test]
fn the_history_the_proxy_records_from_the_store_agrees_with_the_stores_own() {
    let options = verifier::Options::default();
    let mut si_rejects = 0;
    for (model, seed) in [("ser", 3), ("si", 1), ("si", 2), ("si", 3)] {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (recorded, own, text) = demo_histories(model, seed, dir.path());
        // Every transaction the clients committed is in both (a stale view may see no rows and roll back,
        // so count what the clients say): the store's own history has one more, the load.
        let committed = usize::try_from(committed(&text)).expect("a count");
        assert!(committed > 100, "{model}/{seed}\n{text}");
        assert_eq!(committed_kv_writers(&recorded), committed, "{model}/{seed}\n{text}");
        assert_eq!(committed_kv_writers(&own), committed + 1, "{model}/{seed}\n{text}");
        // The proxy's fences ran on the store and were recorded.
        assert!(
            recorded.transactions.iter().any(|t| t.fence && t.outcome == Outcome::Committed),
            "{model}/{seed}: no committed fence recorded"
        );
        let by_proxy = verifier::verify(&recorded, &options).expect("the recorded history verifies");
        let by_store = verifier::verify(&own, &options).expect("the store's history verifies");
        assert_eq!(
            by_proxy.is_accept(),
            by_store.is_accept(),
            "{model}/{seed}: the proxy's history says {}, the store's own says {}",
            by_proxy.verdict_line(),
            by_store.verdict_line()
        );
        // Under snapshot isolation the store lets write skew through only when transactions overlap; a
        // debug build on a loaded machine can run one seed's clients nearly one after another, and then
        // the history is serializable, by both accounts (asserted above). So each `ser` run must accept,
        // and some `si` run must reject.
        if model == "ser" {
            assert!(by_proxy.is_accept(), "{model}/{seed}: {}", by_proxy.verdict_line());
        } else {
            si_rejects += usize::from(!by_proxy.is_accept());
        }
        assert_eq!(
            by_proxy.is_accept(),
            text.contains("Verdict: ACCEPT"),
            "{model}/{seed}: online vs offline"
        );
    }
    assert!(si_rejects > 0, "no run of the snapshot-isolation store was rejected");
}

#[test]
fn a_flag_for_one_target_is_an_error_with_the_other_and_implies_its_target_under_auto() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    for args in [
        &["demo", "--target", "postgres", "--model", "si", "--data-dir", data][..],
        &["demo", "--target", "embedded", "--isolation", "repeatable-read", "--data-dir", data],
        &["demo", "--model", "si", "--isolation", "repeatable-read", "--data-dir", data],
        &["demo", "--target", "postgres", "--history-out", data, "--data-dir", data],
    ] {
        let out = krait(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}{stderr}", stdout(&out));
        assert!(stderr.contains("target"), "{args:?}: {stderr}");
        assert!(!stdout(&out).contains("transactions recorded"), "{args:?}: nothing runs");
    }

    // Under --target auto, --model runs the embedded store whether or not PostgreSQL answers.
    let out = krait(&["demo", "--model", "ser", "--txns", "100", "--data-dir", data]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("--model implies --target embedded"), "{text}");
    assert!(!text.contains("PostgreSQL answers"), "{text}");
    assert!(text.contains("target: the embedded reference store"), "{text}");
}

/// Issue 18, item 4: a reject of the demo at REPEATABLE READ, its schema kept, replays against the same
/// database as `reproduced` at REPEATABLE READ (what it recorded) and as `prevented` at SERIALIZABLE.
#[test]
fn a_demo_reject_replays_as_reproduced_at_its_level_and_prevented_at_serializable() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    let args =
        ["demo", "--isolation", "repeatable-read", "--level", "serializable", "--keys", "3", "--txns", "200"];
    let out = krait(&[&args[..], &["--keep-schema", "--seed", "7", "--data-dir", data]].concat());
    let text = stdout(&out);
    let kept = text
        .lines()
        .find_map(|l| l.strip_prefix("krait demo: kept schema "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    let drop_kept = || {
        if let Some(schema) = &kept {
            let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
            let dropped = std::process::Command::new("psql")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-d",
                    "test",
                    "-Xq",
                    "-c",
                    "SET client_min_messages = warning",
                    "-c",
                    &sql,
                ])
                .status()
                .expect("psql runs");
            assert!(dropped.success());
        }
    };
    if !text.contains("row-level tagging: on") {
        drop_kept();
        assert!(text.contains("row-level tagging: NOT AVAILABLE"), "{text}");
        return;
    }
    assert!(kept.is_some(), "{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_reject_fits_one_screen(&text);
    assert!(text.contains("krait report replay r000001"), "{text}");
    let target = "host=127.0.0.1 port=5432 user=postgres dbname=test";
    let replay = |more: &[&str]| {
        krait(&[&["report", "replay", "r000001", "--data-dir", data, "--target", target][..], more].concat())
    };
    let at_rr = replay(&[]);
    let at_s = replay(&["--isolation", "serializable"]);
    drop_kept();
    let (rr, s) = (stdout(&at_rr), stdout(&at_s));
    assert_eq!(at_rr.status.code(), Some(0), "{rr}{}", String::from_utf8_lossy(&at_rr.stderr));
    assert!(rr.lines().next().is_some_and(|l| l.ends_with(": reproduced")), "{rr}");
    assert_eq!(at_s.status.code(), Some(1), "{s}{}", String::from_utf8_lossy(&at_s.stderr));
    assert!(s.lines().next().is_some_and(|l| l.ends_with(": prevented")), "{s}");
    assert!(s.contains("refused: 40001"), "{s}");
}

/// Issue 18, item 4: a reject of the embedded store under snapshot isolation replays against a fresh
/// embedded store as `reproduced` under `--model si` and as `prevented` under `--model ser`.
///
/// Not every report replays: under load the replay of about one G2-item in fifteen comes out `prevented`
/// or `not reproduced` under `--model si` too (measured the same before and after the segment store, so the
/// replay's schedule, not the recording; see the closing note of stop 37). So the first of the demo's
/// reports that reproduces is the one held to being prevented under serializability, and at least one
/// must reproduce.
#[test]
fn an_embedded_store_reject_replays_under_its_model_and_is_prevented_under_serializability() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    let out = krait(&["demo", "--target", "embedded", "--model", "si", "--data-dir", data]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let replay = |id: &str, model: &str| {
        krait(&["report", "replay", id, "--data-dir", data, "--target", "embedded", "--model", model])
    };
    // Every report replays (reports whose cycle runs through the proxy's fence transactions too: the store
    // has their table), and at least one reproduces under the store's model.
    let mut tried = String::new();
    let ids: Vec<String> = std::fs::read_dir(Path::new(data).join("reports"))
        .expect("the demo stored reports")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json").map(str::to_owned))
        .collect();
    // Each op a report shows carries its own row: the `k` the store returned is the key of the op (a
    // verifier that drops an op, say a read of a collected version, keeps the rest with their own rows and
    // parameters).
    for id in &ids {
        let text = std::fs::read_to_string(Path::new(data).join("reports").join(format!("{id}.json")))
            .expect("reads the report");
        let report: serde_json::Value = serde_json::from_str(&text).expect("a JSON report");
        for op in report["transactions"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["ops"].as_array())
            .flatten()
        {
            let pk = &op["key"]["pk"][0];
            let k = op["values"].as_array().into_iter().flatten().find(|v| v["column"] == "k");
            if let (Some(pk), Some(k)) = (pk.as_str(), k) {
                assert_eq!(k["value"]["Text"].as_str(), Some(pk), "{id}: {op}");
            }
        }
    }
    let mut reproduced = Vec::new();
    for id in &ids {
        let si = replay(id, "si");
        let si_text = stdout(&si);
        tried.push_str(&format!(
            "{id}: exit {:?}\n{si_text}{}\n",
            si.status.code(),
            String::from_utf8_lossy(&si.stderr)
        ));
        assert_ne!(si.status.code(), Some(2), "{id} cannot be replayed:\n{tried}");
        if si.status.code() == Some(0) && si_text.lines().any(|l| l.ends_with(": reproduced")) {
            reproduced.push(id.clone());
        }
    }
    println!("{} of {} reports reproduced under si", reproduced.len(), ids.len());
    reproduced.sort();
    let id = reproduced
        .first()
        .unwrap_or_else(|| panic!("no report of the demo replays under its model:\n{tried}"));
    let ser = replay(id, "ser");
    let ser_text = stdout(&ser);
    assert_eq!(ser.status.code(), Some(1), "{ser_text}{}", String::from_utf8_lossy(&ser.stderr));
    assert!(ser_text.lines().next().is_some_and(|l| l.ends_with(": prevented")), "{ser_text}");
    let wrong = krait(&["report", "replay", "r000001", "--data-dir", data, "--target", "embedded"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("needs --model"));
}
