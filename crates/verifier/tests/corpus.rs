//! Every labelled history in the shared corpus gets its known verdict, for Cobra and PolySI histories, and
//! every report (reject or accept) passes the independent check.

use std::path::PathBuf;

use history::codec::read_history;
use verifier::{Options, check_report_detailed, verify};

fn corpus() -> PathBuf {
    if let Ok(dir) = std::env::var("KRAIT_CORPUS") {
        return PathBuf::from(dir);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.join("../shared/corpus")
}

fn expect(path: &str, accept: bool) {
    let full = corpus().join(path);
    assert!(full.exists(), "corpus history {} is missing (set KRAIT_CORPUS)", full.display());
    let h = read_history(&full, None).unwrap_or_else(|e| panic!("{path}: cannot read: {e}"));
    let report = verify(&h, &Options::default()).unwrap_or_else(|e| panic!("{path}: verify failed: {e}"));
    assert_eq!(report.is_accept(), accept, "{path}: wrong verdict\n{}", report.render_text());
    let summary = check_report_detailed(&h, &report)
        .unwrap_or_else(|e| panic!("{path}: report does not check: {e}\n{}", report.render_text()));
    println!("{path}: {} ({} txns) checked: {summary:?}", report.verdict_line(), report.counts.vertices);
    if !accept {
        println!("{}", report.render_text());
    }
}

#[test]
fn cobra_violations_are_rejected() {
    expect("cobra/ser-violation/cock-G2", false);
    expect("cobra/ser-violation/cock-blog", false);
}

#[test]
fn polysi_violations_are_rejected() {
    expect("polysi/galera-lost-update.txt", false);
    expect("polysi/yugabyte-si.txt", false);
}

#[test]
fn cheng_rw_histories_are_accepted() {
    for n in [100, 200, 300, 400, 500, 1000, 2000] {
        expect(&format!("cobra/one-shot-chengRW/chengRW-{n}"), true);
    }
}

#[test]
fn ten_thousand_transaction_histories_are_accepted() {
    expect("cobra/one-shot-10k/twitter-10000", true);
    expect("cobra/one-shot-10k/rubis-10000", true);
}

#[test]
fn the_hundred_thousand_transaction_history_is_accepted() {
    expect("cobra/scaling/twitter-100000", true);
}

/// Differential runs: every reachability backend and every technique switched off must give the same
/// verdicts, and the backends the same pruning.
#[test]
fn backends_and_techniques_agree_on_corpus_histories() {
    use verifier::Backend;
    for path in
        ["cobra/one-shot-chengRW/chengRW-500", "cobra/ser-violation/cock-G2", "polysi/yugabyte-si.txt"]
    {
        let full = corpus().join(path);
        assert!(full.exists(), "corpus history {} is missing (set KRAIT_CORPUS)", full.display());
        let h = read_history(&full, None).unwrap_or_else(|e| panic!("{path}: cannot read: {e}"));
        let base = verify(&h, &Options::default()).unwrap();
        for backend in [Backend::ChainClocks, Backend::BitsetRows, Backend::Dfs] {
            let r = verify(&h, &Options { reachability: backend, ..Options::default() }).unwrap();
            assert_eq!(r.verdict, base.verdict, "{path} with {backend:?}");
            assert_eq!(r.counts, base.counts, "{path} with {backend:?}: pruning differs");
        }
        for (prune, coalesce, combine) in
            [(false, true, true), (true, false, true), (true, true, false), (false, false, false)]
        {
            let opts = Options { prune, coalesce, combine, ..Options::default() };
            let r = verify(&h, &opts).unwrap();
            assert_eq!(r.verdict, base.verdict, "{path} with {opts:?}");
            check_report_detailed(&h, &r).unwrap_or_else(|e| panic!("{path} with {opts:?}: {e}"));
        }
    }
}

/// The weak levels on the corpus: every history accepted at serializability is accepted at causal, read
/// atomic and read committed (the lattice), every report re-checks, and the PolySI histories get what their
/// anomalies are. YugabyteDB's SI violation includes a session that does not read its own earlier write
/// (T7 reads key 15 from T5 after T6, earlier in its session, overwrote it): not read atomic, not causal.
/// Galera's lost update is allowed below serializability.
#[test]
fn weak_levels_on_the_corpus() {
    use verifier::{AnomalyClass, Level};
    let cases: [(&str, [bool; 3]); 6] = [
        ("cobra/ser-violation/cock-G2", [true, true, true]),
        ("cobra/ser-violation/cock-blog", [false, false, false]),
        ("cobra/one-shot-chengRW/chengRW-1000", [true, true, true]),
        ("cobra/one-shot-10k/twitter-10000", [true, true, true]),
        ("polysi/galera-lost-update.txt", [true, true, true]),
        ("polysi/yugabyte-si.txt", [false, false, true]),
    ];
    for (path, expected) in cases {
        let full = corpus().join(path);
        let h = read_history(&full, None).unwrap_or_else(|e| panic!("{path}: cannot read: {e}"));
        for (level, accept) in
            [Level::Causal, Level::ReadAtomic, Level::ReadCommitted].into_iter().zip(expected)
        {
            let r = verify(&h, &Options { level, ..Options::default() }).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.is_accept(), accept, "{path} at {}: {}", level.name(), r.render_text());
            check_report_detailed(&h, &r)
                .unwrap_or_else(|e| panic!("{path} at {}: report does not check: {e}", level.name()));
            if path.contains("yugabyte") && level == Level::ReadAtomic {
                assert_eq!(r.anomalies[0].class, AnomalyClass::FracturedRead, "{}", r.render_text());
            }
        }
    }
}
