//! `krait verify` end to end on the labelled corpus: the verdict, the exit code, and a reject report that
//! `--check-report` confirms (and refutes once tampered with).

mod common;

use common::{corpus, krait};

fn verify(rel: &str, extra: &[&str]) -> std::process::Output {
    let path = corpus().join(rel);
    let mut args = vec!["verify", path.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    krait(&args)
}

#[test]
fn verify_rejects_the_labelled_violations_with_exit_code_1() {
    for rel in
        ["cobra/ser-violation/cock-G2", "cobra/ser-violation/cock-blog", "polysi/galera-lost-update.txt"]
    {
        let out = verify(rel, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{rel}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.starts_with("REJECT"), "{rel}: {stdout}");
    }
}

#[test]
fn verify_accepts_the_labelled_serializable_histories_with_exit_code_0() {
    for rel in ["cobra/one-shot-chengRW/chengRW-500", "cobra/one-shot-10k/rubis-10000"] {
        let out = verify(rel, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{rel}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.starts_with("ACCEPT"), "{rel}: {stdout}");
    }
}

#[test]
fn verify_json_report_passes_check_report_and_a_tampered_one_is_refuted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let report = dir.path().join("report.json");
    let report_s = report.to_str().expect("utf-8 path");
    let out = verify("cobra/ser-violation/cock-G2", &["--json", "--report-out", report_s]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(json["verdict"], "reject");

    let checked = verify("cobra/ser-violation/cock-G2", &["--check-report", report_s]);
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert_eq!(checked.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&checked.stderr));

    // Reverse the first edge of the cycle: the report no longer follows from the history.
    let mut tampered = json.clone();
    let edge = &mut tampered["anomalies"][0]["cycle"][0];
    let (from, to) = (edge["from"].clone(), edge["to"].clone());
    edge["from"] = to;
    edge["to"] = from;
    std::fs::write(&report, serde_json::to_string(&tampered).expect("serialises")).expect("writes");
    let refuted = verify("cobra/ser-violation/cock-G2", &["--check-report", report_s]);
    assert_eq!(refuted.status.code(), Some(1), "{}", String::from_utf8_lossy(&refuted.stdout));
}

#[test]
fn verify_of_a_corrupt_history_is_an_error_with_exit_code_2() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "r(1,2,3\n").expect("writes");
    let out = krait(&["verify", bad.to_str().expect("utf-8 path"), "--format", "polysi"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 1"), "{stderr}");
}

#[test]
fn verify_in_rounds_gives_the_labelled_verdicts() {
    let out = verify("cobra/ser-violation/cock-G2", &["--rounds", "100"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("REJECT"));
    let out = verify("cobra/one-shot-chengRW/chengRW-500", &["--rounds", "100"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ACCEPT"));
    let out = verify("cobra/one-shot-chengRW/chengRW-500", &["--rounds", "0"]);
    assert_eq!(out.status.code(), Some(2));
}

/// An accept reached in rounds is a report like any other: `--json` prints it, `--report-out` and `--dot`
/// write it, and it lists the reads it could not judge with their causes. It has no serial order (collection
/// deleted what each round settled), and `--check-report` says so rather than failing on a missing field.
#[test]
fn an_accept_in_rounds_is_a_report_with_the_reads_it_did_not_judge() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let history = dir.path().join("h.jsonl");
    let lines = [
        r#"{"krait_history":{"version":1,"statements":0,"keys":2,"transactions":3,"gaps":0}}"#,
        r#"{"key":{"name":"x","ns":"","utf8":"x"}}"#,
        r#"{"key":{"name":"y","ns":"","utf8":"y"}}"#,
        r#"{"txn":{"id":1,"session":1,"seq":0,"outcome":"committed","ops":[{"w":"x","v":1}]}}"#,
        r#"{"txn":{"id":2,"session":2,"seq":0,"outcome":"committed","ops":[{"r":"x","v":1},{"r":"y","unrecorded":7}]}}"#,
        r#"{"txn":{"id":3,"session":3,"seq":0,"outcome":"committed","ops":[{"r":"x","v":1}]}}"#,
    ];
    std::fs::write(&history, lines.join("\n") + "\n").expect("writes");
    let (report, dot) = (dir.path().join("report.json"), dir.path().join("cycles.dot"));
    let [history_s, report_s, dot_s] =
        [&history, &report, &dot].map(|p| p.to_str().expect("utf-8 path").to_owned());
    let out =
        krait(&["verify", &history_s, "--rounds", "2", "--json", "--report-out", &report_s, "--dot", &dot_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("--json prints JSON on accept too");
    assert_eq!(json["verdict"], "accept", "{json}");
    assert_eq!(json["counts"]["vertices"], 3, "{json}");
    assert_eq!(json["rounds"]["round_size"], 2, "{json}");
    assert_eq!(json["unverifiable"][0]["op"], serde_json::json!({"txn": 2, "op": 1}), "{json}");
    assert_eq!(json["unverifiable"][0]["cause"], "unrecorded_writer", "{json}");
    assert!(json.get("serial_order").is_none(), "no serial order is claimed: {json}");
    let written = std::fs::read_to_string(&report).expect("--report-out writes the accept");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&written).expect("JSON"), json);
    assert!(std::fs::read_to_string(&dot).expect("--dot writes a graph").contains("digraph"));

    let out = krait(&["verify", &history_s, "--rounds", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("ACCEPT: the history is serializable (3 transactions checked in "),
        "{stdout}"
    );
    assert!(
        stdout.contains("Unverifiable: 1 read(s)") && stdout.contains("unrecorded_writer: 1"),
        "{stdout}"
    );
    // No polygraph's sizes or times: no round's are summed into the report, so zeros would be false claims.
    assert!(stdout.contains("Chains, constraints and timings are per round"), "{stdout}");
    assert!(!stdout.contains("Time: construct") && !stdout.contains("constraints 0 -> 0"), "{stdout}");

    let out = krait(&["verify", &history_s, "--check-report", &report_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("no serial order") && stdout.contains("without --rounds"), "{stdout}");
}

#[test]
fn strict_serializability_without_any_timestamps_is_an_error_unless_explicitly_allowed() {
    // Cobra's plain logs carry no timestamps: real-time order cannot be checked at all.
    let out = verify("cobra/one-shot-chengRW/chengRW-500", &["--level", "strict-serializable"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains("has timestamps") && stderr.contains("--allow-missing-timestamps"), "{stderr}");

    for extra in [&[][..], &["--rounds", "100"][..]] {
        let mut args = vec!["--level", "strict-serializable", "--allow-missing-timestamps"];
        args.extend_from_slice(extra);
        let out = verify("cobra/one-shot-chengRW/chengRW-500", &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.starts_with("ACCEPT: the history is serializable"), "{stdout}");
        assert!(!stdout.contains("strict serializable ("), "{stdout}");
        assert!(stdout.contains("real-time order was not checked"), "{stdout}");
    }
}

#[test]
fn strict_serializability_with_some_timestamps_missing_says_how_many_were_not_checked() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("h.jsonl");
    let lines = [
        r#"{"krait_history":{"version":1,"statements":0,"keys":1,"transactions":3,"gaps":0}}"#,
        r#"{"key":{"name":"x","ns":"","utf8":"x"}}"#,
        r#"{"txn":{"id":1,"session":1,"seq":0,"outcome":"committed","start_ns":5,"commit_ns":9,"ops":[{"w":"x","v":1}]}}"#,
        r#"{"txn":{"id":2,"session":2,"seq":0,"outcome":"committed","ops":[{"r":"x","v":1}]}}"#,
        r#"{"txn":{"id":3,"session":3,"seq":0,"outcome":"committed","ops":[{"r":"x","v":1}]}}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").expect("writes");
    let path = path.to_str().expect("utf-8 path");
    for extra in [&[][..], &["--rounds", "100"][..]] {
        let mut args = vec!["verify", path, "--level", "strict-serializable"];
        args.extend_from_slice(extra);
        let out = krait(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("real-time order was not checked for the 2 without timestamps"), "{stdout}");
    }
}

/// The same two answers on a history log folder, which `--rounds` reads record by record (the verifier's
/// own counts decide, not a loaded history): none of the committed transactions has timestamps, so strict
/// serializability is refused unless told to settle; one with timestamps among them, and the others are
/// said not to be checked for real-time order.
#[test]
fn strict_serializability_on_a_log_read_in_rounds_needs_timestamps_too() {
    use history::log::HistoryLog;
    use history::{DiskLog, Durability, LoggedTxn, Outcome, SessionId, TxnId};
    for timestamped in [0, 1] {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = DiskLog::open(dir.path(), Durability::Strict).expect("opens the log");
        for id in 1..=3u64 {
            let mut txn = LoggedTxn::new(TxnId(id), SessionId(id), 0);
            let commit_ns = (id <= timestamped).then(|| {
                txn.start_ns = Some(id * 10);
                id * 10 + 5
            });
            log.append_finished(txn, Outcome::Committed, commit_ns)
                .expect("appends")
                .wait()
                .expect("durable");
        }
        drop(log);
        let path = dir.path().to_str().expect("utf-8 path");
        let strict = ["verify", path, "--level", "strict-serializable", "--rounds", "100"];
        let out = krait(&strict);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if timestamped == 0 {
            assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
            assert!(
                stderr.contains("none of the 3 committed transactions")
                    && stderr.contains("--allow-missing-timestamps"),
                "{stderr}"
            );
            let out = krait(&[&strict[..], &["--allow-missing-timestamps"]].concat());
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
            assert!(stdout.starts_with("ACCEPT: the history is serializable"), "{stdout}");
        } else {
            assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
            assert!(
                stdout.contains("real-time order was not checked for the 2 without timestamps"),
                "{stdout}"
            );
        }
    }
}

#[test]
fn a_plain_cobra_log_read_as_timestamped_says_it_has_no_timestamps() {
    let out = verify("cobra/one-shot-chengRW/chengRW-500", &["--format", "cobra-ts"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("appears to have no timestamps") && stderr.contains("--format cobra"),
        "{stderr}"
    );
    assert!(!stderr.contains("tag byte"), "{stderr}");
}

/// Asserts that a failed command exits 2 and that its error says each of `once` exactly once.
fn assert_error_says_once(args: &[&str], once: &[&str]) {
    let out = krait(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    for s in once {
        assert_eq!(stderr.matches(s).count(), 1, "{args:?} should say {s:?} once: {stderr}");
    }
}

#[test]
fn errors_of_verify_history_and_config_check_name_the_file_and_position_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("writes");
        path.to_str().expect("utf-8 path").to_owned()
    };
    let polysi = file("bad.txt", b"r(1,2,3\n");
    let jsonl = file("bad.jsonl", b"{\"x\":1}\n");
    let native = file("bad.krait", b"not native at all");
    let config = file("bad.toml", b"[proxy]\nlisten = 5\n");
    let missing = dir.path().join("missing").to_str().expect("utf-8 path").to_owned();
    let out = dir.path().join("out.krait").to_str().expect("utf-8 path").to_owned();
    let cobra = dir.path().join("cobra");
    std::fs::create_dir(&cobra).expect("creates");
    std::fs::write(cobra.join("T1.log"), b"X").expect("writes");
    let cobra = cobra.to_str().expect("utf-8 path").to_owned();

    for command in [&["verify"][..], &["history", "stats"][..]] {
        let cases: [(&[&str], &[&str]); 5] = [
            (&[&polysi, "--format", "polysi"], &[&polysi, "line 1"]),
            (&[&jsonl], &[&jsonl, "line 1"]),
            (&[&native, "--format", "native"], &[&native, "byte offset"]),
            (&[&cobra], &["T1.log", "byte offset"]),
            (&[&missing], &[&missing, "No such file"]),
        ];
        for (rest, once) in cases {
            assert_error_says_once(&[command, rest].concat(), once);
        }
    }
    assert_error_says_once(
        &["history", "convert", &polysi, &out, "--format", "polysi"],
        &[&polysi, "line 1"],
    );
    assert_error_says_once(&["config", "check", &config], &[&config, "line 1"]);
    assert_error_says_once(&["config", "check", &missing], &[&missing, "No such file"]);
}

#[test]
fn commands_exit_quietly_when_the_reader_of_stdout_goes_away() {
    use std::process::{Command, Stdio};
    let reject = corpus().join("cobra/ser-violation/cock-G2");
    let reject = reject.to_str().expect("utf-8 path");
    let accept = corpus().join("cobra/one-shot-chengRW/chengRW-500");
    let accept = accept.to_str().expect("utf-8 path");
    for args in [
        &["verify", reject, "--json"][..],
        &["verify", reject],
        &["verify", accept],
        &["verify", accept, "--rounds", "100"],
        &["history", "stats", accept],
        &["history", "stats", accept, "--json"],
    ] {
        // The reader is gone before krait starts, so every write to stdout fails (closing the read end after
        // the spawn raced with a fast command on a loaded machine: its output could fit the pipe first).
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let child = Command::new(env!("CARGO_BIN_EXE_krait"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .expect("the krait binary runs");
        let out = child.wait_with_output().expect("krait ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("error"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
    }
}

/// `--dot FILE` writes the reject's cycle as a Graphviz graph; `--level` takes the weak levels, whose
/// reports also re-check.
#[test]
fn verify_writes_the_cycle_as_a_graph_and_checks_weak_levels() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let dot = dir.path().join("cycle.dot");
    let out = verify("cobra/ser-violation/cock-G2", &["--dot", dot.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let graph = std::fs::read_to_string(&dot).expect("the graph was written");
    assert!(graph.starts_with("digraph") && graph.matches(" -> ").count() == 2, "{graph}");
    assert!(graph.contains("label=\"rw("), "{graph}");
    let report = dir.path().join("ra.json");
    let report_s = report.to_str().expect("utf-8");
    let out = verify("polysi/yugabyte-si.txt", &["--level", "read-atomic", "--report-out", report_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.starts_with("REJECT: not read atomic: fractured read"), "{stdout}");
    let checked = verify("polysi/yugabyte-si.txt", &["--check-report", report_s]);
    assert_eq!(checked.status.code(), Some(0), "{}", String::from_utf8_lossy(&checked.stdout));
    let out = verify("polysi/yugabyte-si.txt", &["--level", "read-committed"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

/// `--level snapshot-isolation`: CockroachDB's G2 history is snapshot isolated though not serializable;
/// YugabyteDB's is not, and its SI report (with the solver's proof by cases) re-checks; the same in rounds.
#[test]
fn verify_checks_snapshot_isolation() {
    let out = verify("cobra/ser-violation/cock-G2", &["--level", "snapshot-isolation"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.starts_with("ACCEPT: the history is snapshot isolated"), "{stdout}");
    let dir = tempfile::tempdir().expect("a temp dir");
    let report = dir.path().join("si.json");
    let report_s = report.to_str().expect("utf-8");
    let out = verify("polysi/yugabyte-si.txt", &["--level", "snapshot-isolation", "--report-out", report_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.starts_with("REJECT: not snapshot isolated"), "{stdout}");
    let json = std::fs::read_to_string(&report).expect("the report was written");
    assert!(json.contains("\"level\": \"snapshot-isolation\""), "{json}");
    let checked = verify("polysi/yugabyte-si.txt", &["--check-report", report_s]);
    assert_eq!(checked.status.code(), Some(0), "{}", String::from_utf8_lossy(&checked.stdout));
    // In rounds too, without garbage collection (not argued for snapshot isolation), and it says so.
    let out = verify("polysi/yugabyte-si.txt", &["--level", "snapshot-isolation", "--rounds", "10"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("keep every transaction"));
    let out = verify("cobra/ser-violation/cock-G2", &["--level", "snapshot-isolation", "--rounds", "10"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}
