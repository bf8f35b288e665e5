//! `krait workload` and `krait bench` end to end: generated histories are accepted by `krait verify`, a run
//! against the local PostgreSQL (127.0.0.1:5432, database `test`; `KRAIT_TEST_PG_URL` overrides) reports
//! zero errors, and the bench writes its tables and plots.

mod common;

use common::krait;

fn pg_url() -> String {
    std::env::var("KRAIT_TEST_PG_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into())
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn a_generated_history_is_accepted_and_the_output_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.krait");
    let p = path.to_str().unwrap();
    let args =
        ["workload", "generate", "blindw-rw", "--txns", "400", "--out", p, "--seed", "3", "--keys", "500"];
    let out = krait(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("wrote 400 transactions of blindw-rw"), "{}", text(&out.stderr));
    let verified = krait(&["verify", p]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified.stdout));
    // Without --force an existing file is left alone.
    let again = krait(&args);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("already exists"));
}

#[test]
fn the_same_seed_writes_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let gen_to = |name: &str, seed: &str| {
        let path = dir.path().join(name);
        let p = path.to_str().unwrap().to_owned();
        let out = krait(&[
            "workload",
            "generate",
            "tpcc",
            "--txns",
            "200",
            "--customers",
            "30",
            "--seed",
            seed,
            "--out",
            &p,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        std::fs::read(path).unwrap()
    };
    assert_eq!(gen_to("a", "1"), gen_to("b", "1"));
    assert_ne!(gen_to("a2", "1"), gen_to("c", "2"));
}

#[test]
fn a_run_against_postgres_reports_throughput_and_no_errors() {
    let url = pg_url();
    let out = krait(&[
        "workload",
        "run",
        "blindw-rm",
        "--target",
        &url,
        "--clients",
        "4",
        "--txns",
        "200",
        "--keys",
        "500",
        "--schema",
        "krait_wltest_cli",
        "--reset",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["committed"], 200);
    assert_eq!(summary["errors"], 0);
    assert!(summary["tps"].as_f64().unwrap() > 0.0);
    assert!(summary["latency_ms"]["p99"].as_f64().unwrap() >= summary["latency_ms"]["p50"].as_f64().unwrap());
    // Its tables are named like every other BlindW run's; leave none behind.
    let drop = std::process::Command::new("psql")
        .args(["-X", "-q", "-d", &url, "-c", "DROP SCHEMA IF EXISTS krait_wltest_cli CASCADE"])
        .status()
        .unwrap();
    assert!(drop.success());
}

#[test]
fn a_generated_chengrw_history_with_fences_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.krait");
    let p = path.to_str().unwrap();
    let out = krait(&[
        "workload",
        "generate",
        "chengrw",
        "--txns",
        "2000",
        "--keys",
        "300",
        "--reads",
        "3",
        "--writes",
        "5",
        "--sessions",
        "24",
        "--fence-every",
        "20",
        "--seed",
        "8",
        "--out",
        p,
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("wrote ") && err.contains(" of chengrw"), "{err}");
    assert!(err.contains("24 sessions"), "{err}");
    // 2,000 transactions of 3 reads and 5 writes, and fences (a read and a write each) on top.
    let fences =
        err.split("wrote ").nth(1).unwrap().split(' ').next().unwrap().parse::<u64>().unwrap() - 2000;
    assert!(fences >= 2000 / 20, "{err}");
    assert!(err.contains(&format!("{} reads, {} writes", 3 * 2000 + fences, 5 * 2000 + fences)), "{err}");
    let verified = krait(&["verify", p]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified.stdout));
}

#[test]
fn a_chengrw_run_against_postgres_reports_no_errors() {
    let url = pg_url();
    let out = krait(&[
        "workload",
        "run",
        "chengrw",
        "--target",
        &url,
        "--sessions",
        "4",
        "--txns",
        "200",
        "--keys",
        "500",
        "--reads",
        "4",
        "--writes",
        "4",
        "--schema",
        "krait_wltest_cli_chengrw",
        "--reset",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["workload"], "chengrw");
    assert_eq!(summary["committed"], 200);
    assert_eq!(summary["errors"], 0);
    assert_eq!(summary["mix"]["read_write"], 200);
    let drop = std::process::Command::new("psql")
        .args(["-X", "-q", "-d", &url, "-c", "DROP SCHEMA IF EXISTS krait_wltest_cli_chengrw CASCADE"])
        .status()
        .unwrap();
    assert!(drop.success());
}

#[test]
fn run_needs_a_count_or_a_duration() {
    let out = krait(&["workload", "run", "twitter", "--target", &pg_url()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--txns"), "{}", text(&out.stderr));
}

#[test]
fn bench_writes_a_csv_row_per_point_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = krait(&[
        "bench",
        "--workloads",
        "twitter,blindw-wm",
        "--txns",
        "100,300",
        "--clients",
        "4",
        "--figures",
        "fig5",
        "--out",
        d,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.path().join("stage_time.csv").exists(), "fig7 was not asked for");
    let csv = std::fs::read_to_string(dir.path().join("verify_time.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 4, "{csv}");
    assert!(rows.iter().all(|r| r.ends_with(",accept")), "{csv}");
    assert!(rows[0].starts_with("twitter,100,") && rows[3].starts_with("blindw-wm,300,"), "{csv}");
    let svg = std::fs::read_to_string(dir.path().join("verify_time.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("blindw-wm") && svg.contains("number of transactions"));
}

#[test]
fn bench_writes_stage_times_and_the_differential_analysis() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = krait(&[
        "bench",
        "--workloads",
        "twitter,blindw-rw",
        "--figures",
        "fig7,fig8",
        "--stage-txns",
        "200",
        "--diff-txns",
        "100,150",
        "--clients",
        "4",
        "--out",
        d,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.path().join("verify_time.csv").exists(), "fig5 was not asked for");

    let stages = std::fs::read_to_string(dir.path().join("stage_time.csv")).unwrap();
    let mut lines = stages.lines();
    assert_eq!(
        lines.next(),
        Some("workload,txns,committed,construct_ms,prune_ms,solve_ms,report_ms,verdict"),
        "{stages}"
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2, "{stages}");
    assert!(rows[0].starts_with("twitter,200,") && rows[1].starts_with("blindw-rw,200,"), "{stages}");
    assert!(rows.iter().all(|r| r.ends_with(",accept")), "{stages}");

    let diff = std::fs::read_to_string(dir.path().join("differential.csv")).unwrap();
    let mut lines = diff.lines();
    assert_eq!(lines.next(), Some("workload,txns,config,verify_ms,verdict"), "{diff}");
    let rows: Vec<&str> = lines.collect();
    // 2 workloads x 2 sizes x 4 configurations.
    assert_eq!(rows.len(), 16, "{diff}");
    for w in ["twitter", "blindw-rw"] {
        for n in ["100", "150"] {
            for c in ["all-on", "no-prune", "no-coalesce", "no-combine"] {
                let key = format!("{w},{n},{c},");
                assert_eq!(rows.iter().filter(|r| r.starts_with(&key)).count(), 1, "{key} in {diff}");
            }
        }
    }
    assert!(rows.iter().all(|r| r.ends_with(",accept")), "{diff}");
    for svg in ["stage_time.svg", "differential.svg"] {
        let text = std::fs::read_to_string(dir.path().join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.contains("blindw-rw"), "{svg}");
    }
    let stage_svg = std::fs::read_to_string(dir.path().join("stage_time.svg")).unwrap();
    assert!(stage_svg.contains("construct") && stage_svg.contains("solve"));
    let diff_svg = std::fs::read_to_string(dir.path().join("differential.svg")).unwrap();
    assert!(diff_svg.contains("no-coalesce"));
}

/// `krait bench rounds` measures each history in a child process of its own and gives each its own memory
/// columns: the input it holds, the peak while verifying, and their difference.
#[test]
fn bench_rounds_measures_each_history_in_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = krait(&[
        "bench",
        "rounds",
        "--workloads",
        "blindw-rm,chengrw",
        "--blindw-txns",
        "2000",
        "--round-sizes",
        "500,1000",
        "--out",
        d,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let csv = std::fs::read_to_string(dir.path().join("rounds.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "history,round_size,rounds,verdict,seconds,capacity_txn_per_s,max_live,end_live,deleted,input_mib,\
             peak_mib,verifier_mib"
        ),
        "{csv}"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4, "{csv}");
    let names: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        names,
        [
            ("blindw-rm-2000", "500"),
            ("blindw-rm-2000", "1000"),
            ("chengrw-2000", "500"),
            ("chengrw-2000", "1000")
        ],
        "{csv}"
    );
    for r in &rows {
        assert_eq!(r[3], "accept", "{csv}");
        let mib = |i: usize| r[i].parse::<f64>().unwrap_or_else(|_| panic!("column {i} of {r:?}"));
        let (input, peak, verifier) = (mib(9), mib(10), mib(11));
        assert!(input > 0.0 && peak >= input && (verifier - (peak - input)).abs() <= 1.0, "{r:?}");
    }
    // The children's hand-over files are consumed.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().starts_with(".rounds-")), "{left:?}");
}
