//! `krait history stats` prints exactly the counts that the corpus README gives for every history.

mod common;

use common::{corpus, krait};

/// One row of the corpus README's table of Cobra histories.
struct Row {
    path: String,
    counts: [u64; 6],
}

/// Reads the rows with exact counts from the corpus README, so the test follows the labels, not our memory.
fn readme_rows() -> Vec<Row> {
    let readme = std::fs::read_to_string(corpus().join("README.md")).expect("corpus README is readable");
    let mut rows = Vec::new();
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 9 || !cells[1].starts_with('`') {
            continue;
        }
        let numbers: Vec<Option<u64>> = cells[2..8].iter().map(|c| c.replace(',', "").parse().ok()).collect();
        if numbers.iter().any(Option::is_none) {
            continue; // a row with approximate counts, such as chengRW-{200,...}
        }
        let name = cells[1].split('`').nth(1).expect("a history name in backquotes");
        let counts: Vec<u64> = numbers.into_iter().flatten().collect();
        rows.push(Row { path: format!("cobra/{name}"), counts: counts.try_into().expect("six counts") });
    }
    rows
}

#[test]
fn history_stats_match_the_corpus_readme_for_every_history_with_exact_counts() {
    let rows = readme_rows();
    assert!(rows.len() >= 6, "expected at least 6 rows with exact counts, found {}", rows.len());
    for row in rows {
        let path = corpus().join(&row.path);
        let out = krait(&["history", "stats", "--json", path.to_str().expect("utf-8 path")]);
        assert!(out.status.success(), "{}: {}", row.path, String::from_utf8_lossy(&out.stderr));
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats are JSON");
        let got: Vec<u64> = ["sessions", "transactions", "reads", "writes", "keys", "fence_ops"]
            .iter()
            .map(|field| stats[field].as_u64().expect("a count"))
            .collect();
        assert_eq!(got, row.counts, "{}: sessions, txns, reads, writes, keys, fence ops", row.path);
    }
}

#[test]
fn history_stats_of_the_approximate_chengrw_rows_have_24_sessions_and_about_n_transactions() {
    for n in [200u64, 300, 400, 500, 1000, 2000] {
        let path = corpus().join(format!("cobra/one-shot-chengRW/chengRW-{n}"));
        let out = krait(&["history", "stats", "--json", path.to_str().expect("utf-8 path")]);
        assert!(out.status.success(), "chengRW-{n}: {}", String::from_utf8_lossy(&out.stderr));
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats are JSON");
        assert_eq!(stats["sessions"], 24, "chengRW-{n}");
        let txns = stats["transactions"].as_u64().expect("a count");
        assert!(txns.abs_diff(n) * 20 <= n, "chengRW-{n} has {txns} transactions");
    }
}

#[test]
fn history_stats_of_a_missing_path_is_an_error_with_exit_code_2() {
    let out = krait(&["history", "stats", "/nonexistent/krait-history"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/krait-history"), "{stderr}");
}

#[test]
fn history_convert_roundtrips_through_native_and_jsonl() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let source = corpus().join("cobra/one-shot-chengRW/chengRW-100");
    let source = source.to_str().expect("utf-8 path");
    let native = dir.path().join("h.krait");
    let jsonl = dir.path().join("h.jsonl");
    let native_s = native.to_str().expect("utf-8 path");
    let jsonl_s = jsonl.to_str().expect("utf-8 path");
    assert!(krait(&["history", "convert", source, native_s]).status.success());
    assert!(krait(&["history", "convert", native_s, jsonl_s, "--to", "jsonl"]).status.success());
    let again = krait(&["history", "convert", native_s, jsonl_s, "--to", "jsonl"]);
    assert_eq!(again.status.code(), Some(2), "refuses to overwrite without --force");
    let stats = |p: &str| krait(&["history", "stats", "--json", p]).stdout;
    assert_eq!(stats(source), stats(jsonl_s));
    assert_eq!(stats(source), stats(native_s));
}
