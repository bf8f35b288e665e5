//! The Cobra paper's worked examples (§2.3, §3.1, §3.2, §3.3, §4.3) and other hand-made histories, each
//! checked at the stage it illustrates and end to end; every reject must pass the independent check.

use history::{HistoryBuilder, Observed, TxnId, WriteId};
use verifier::{
    AnomalyClass, ConstraintView, EdgeKind, Level, Options, check_report_detailed, construct, verify,
};

fn t(n: u64) -> TxnId {
    TxnId(n)
}

fn no_prune() -> Options {
    Options { prune: false, ..Options::default() }
}

fn rejects(h: &history::History, opts: &Options) -> verifier::Report {
    let report = verify(h, opts).unwrap();
    assert!(!report.is_accept(), "expected a reject:\n{}", report.render_text());
    let summary =
        check_report_detailed(h, &report).unwrap_or_else(|e| panic!("{e}\n{}", report.render_text()));
    println!("{}\n{summary:?}", report.render_text());
    report
}

fn accepts(h: &history::History, opts: &Options) -> verifier::Report {
    let report = verify(h, opts).unwrap();
    assert!(report.is_accept(), "expected an accept:\n{}", report.render_text());
    check_report_detailed(h, &report).unwrap();
    report
}

/// §2.3: T1 writes x=1, T2 writes x=2, T3 reads x=1. Known edge T1 → T3; one constraint ⟨(T3, T2), (T2, T1)⟩.
#[test]
fn section_2_3_polygraph() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.write("x", 2))
        .txn(3, |t| t.read("x", 1))
        .build();
    let c = construct(&h, &no_prune()).unwrap();
    assert_eq!(c.known, vec![(t(1), t(3), EdgeKind::Wr)]);
    assert_eq!(
        c.constraints,
        vec![ConstraintView { key: "x".into(), side_a: vec![(t(3), t(2))], side_b: vec![(t(2), t(1))] }]
    );
    let report = accepts(&h, &Options::default());
    assert_eq!(report.counts.constraints_before_prune, 1);
}

/// §3.1: blind writes W1, W3 and read-modify-writes (R2 W2) of W1 and (R4 W4) of W3 form two chains, and only
/// the order of the chains is left to decide.
#[test]
fn section_3_1_combining_writes() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.read("x", 1).write("x", 2))
        .txn(3, |t| t.write("x", 3))
        .txn(4, |t| t.read("x", 3).write("x", 4))
        .build();
    let c = construct(&h, &no_prune()).unwrap();
    let v = |w| Observed::Version(WriteId(w));
    assert_eq!(c.chains, vec![("x".into(), vec![v(1), v(2)]), ("x".into(), vec![v(3), v(4)])]);
    assert_eq!(
        c.constraints,
        vec![ConstraintView { key: "x".into(), side_a: vec![(t(2), t(3))], side_b: vec![(t(4), t(1))] }]
    );
    // Without combining, each write is its own chain and more constraints remain.
    let uncombined = construct(&h, &Options { combine: false, ..no_prune() }).unwrap();
    assert_eq!(uncombined.chains.len(), 4);
    assert!(uncombined.constraints.len() > 1);
    accepts(&h, &Options::default());
    accepts(&h, &Options { combine: false, ..Options::default() });
}

/// §3.2: writes W1, W2; R3 and R4 read W1; R5 reads W2. One coalesced constraint
/// ⟨{(R3, W2), (R4, W2)}, {(R5, W1)}⟩; without coalescing, one per pair of edges.
#[test]
fn section_3_2_coalescing_constraints() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.write("x", 2))
        .txn(3, |t| t.read("x", 1))
        .txn(4, |t| t.read("x", 1))
        .txn(5, |t| t.read("x", 2))
        .build();
    let c = construct(&h, &no_prune()).unwrap();
    assert_eq!(
        c.constraints,
        vec![ConstraintView {
            key: "x".into(),
            side_a: vec![(t(3), t(2)), (t(4), t(2))],
            side_b: vec![(t(5), t(1))]
        }]
    );
    let plain = construct(&h, &Options { coalesce: false, ..no_prune() }).unwrap();
    assert_eq!(plain.constraints.len(), 2);
    accepts(&h, &Options::default());
}

/// §3.3: T3 reads x from T1 and y from T2, so T2 ⇝ T3; the constraint ⟨(T3, T2), (T2, T1)⟩ cannot take its
/// first side, and pruning adds T2 → T1.
#[test]
fn section_3_3_pruning() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.write("x", 2).write("y", 3))
        .txn(3, |t| t.read("x", 1).read("y", 3))
        .build();
    let before = construct(&h, &no_prune()).unwrap();
    assert_eq!(before.constraints.len(), 1);
    let after = construct(&h, &Options::default()).unwrap();
    assert!(after.constraints.is_empty());
    assert!(after.known.contains(&(t(2), t(1), EdgeKind::Ww)));
    let report = accepts(&h, &Options::default());
    assert_eq!(report.counts.constraints_after_prune, 0);
    assert_eq!(report.serial_order, Some(vec![t(2), t(1), t(3)]));
}

/// §4.3's counter-example ("superseded does not imply disposable") as a one-shot history. Session order
/// stands in for the epoch guarantee: T1 ⇝ T4 ⇝ T8 and T2 ⇝ T7. T7 reads d from T1 and T8 reads c from T5,
/// which forces T2 → T1 (key d), hence T3 → T1 (key a), and T4 → T5 (key c), hence T4 → T3 (key b): the cycle
/// T1 ⇝ T4 → T3 → T1.
#[test]
fn section_4_3_gc_counter_example_is_rejected() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("d", 11).write("a", 12)) // T1
        .txn(2, |t| t.write("d", 21).write("a", 22)) // T2
        .txn(3, |t| t.read("a", 22).write("b", 31)) // T3
        .txn(1, |t| t.write("b", 41).write("c", 42)) // T4, after T1 in session 1
        .txn(4, |t| t.read("b", 31).write("c", 51)) // T5
        .txn(5, |t| t.write("b", 61)) // T6
        .txn(2, |t| t.read("d", 11)) // T7, after T2 in session 2
        .txn(1, |t| t.read("c", 51)) // T8, after T4 in session 1
        .build();
    for opts in [
        Options::default(),
        no_prune(),
        Options { coalesce: false, combine: false, ..Options::default() },
        Options { coalesce: false, combine: false, ..no_prune() },
    ] {
        let report = rejects(&h, &opts);
        // Without pruning the solver finds the reject, and the report carries a proof by cases; swapping the
        // branches of its root must make the check fail.
        if !opts.prune {
            let summary = check_report_detailed(&h, &report).unwrap();
            assert_eq!(summary.refutations_proved, 1);
            let mut tampered = report.clone();
            let refutation = tampered.anomalies[0].refutation.as_mut().unwrap();
            if let verifier::report::RefutationNode::Split {
                first_before_second, second_before_first, ..
            } = &mut refutation.tree
            {
                std::mem::swap(first_before_second, second_before_first);
            }
            assert!(check_report_detailed(&h, &tampered).is_err());
        }
        // With pruning, the certificate is the paper's cycle; the solver may show another branch's cycle.
        if opts.prune {
            let cycle = &report.anomalies[0].cycle;
            let txns: std::collections::BTreeSet<TxnId> = cycle.iter().map(|e| e.from).collect();
            assert!(txns.contains(&t(3)), "the cycle must go through the superseded T3: {txns:?}");
        }
    }
}

#[test]
fn write_skew_is_rejected_with_a_two_edge_cycle() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
        .build();
    let report = rejects(&h, &Options::default());
    let a = &report.anomalies[0];
    assert_eq!(a.class, AnomalyClass::WriteSkew);
    assert_eq!(a.cycle.len(), 2);
    assert!(a.cycle.iter().all(|e| e.kind == EdgeKind::Rw));
}

#[test]
fn lost_update_is_reported_with_both_read_modify_writes() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.read("x", 1).write("x", 2))
        .txn(3, |t| t.read("x", 1).write("x", 3))
        .build();
    let report = rejects(&h, &Options::default());
    assert_eq!(report.anomalies[0].class, AnomalyClass::LostUpdate);
    assert_eq!(report.anomalies[0].ops.len(), 4);
    // The encoding alone (no combining, so no early lost-update check) must find it too.
    rejects(&h, &Options { combine: false, ..Options::default() });
}

/// The same lost update in transactions that write many other keys: a read-modify-write is found among a
/// transaction's writes, searched by key, however many it has.
#[test]
fn lost_update_among_many_writes_is_reported_with_both_read_modify_writes() {
    let others = |t: &mut history::TxnBuilder<'_>, first: u64| {
        for i in 0..12 {
            t.write(&format!("k{i}"), first + i);
        }
    };
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| {
            others(t, 100);
            t.read("x", 1).write("x", 2)
        })
        .txn(3, |t| {
            others(t, 200);
            t.read("x", 1).write("x", 3)
        })
        .build();
    let report = rejects(&h, &Options::default());
    assert_eq!(report.anomalies[0].class, AnomalyClass::LostUpdate);
    assert_eq!(report.anomalies[0].ops.len(), 4, "found by the read-modify-write check:\n{report}");
}

#[test]
fn long_fork_is_rejected() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.write("y", 2))
        .txn(3, |t| t.read("x", 1).read_init("y"))
        .txn(4, |t| t.read_init("x").read("y", 2))
        .build();
    let report = rejects(&h, &Options::default());
    assert_eq!(report.anomalies[0].class, AnomalyClass::LongFork);
}

#[test]
fn a_cycle_through_session_order_is_rejected() {
    // T2 runs after T1 in the session but T1 read T2's write.
    let h = HistoryBuilder::new().txn(1, |t| t.read("x", 2)).txn(1, |t| t.write("x", 2)).build();
    let report = rejects(&h, &Options::default());
    assert!(report.anomalies[0].uses_session_order);
    assert_eq!(report.anomalies[0].class, AnomalyClass::G1c);
}

#[test]
fn aborted_and_intermediate_reads_are_reported_with_their_ops() {
    let h = HistoryBuilder::new().aborted(1, |t| t.write("x", 1)).txn(2, |t| t.read("x", 1)).build();
    let report = rejects(&h, &Options::default());
    assert_eq!(report.anomalies[0].class, AnomalyClass::G1a);
    assert_eq!(report.anomalies[0].ops.len(), 2);

    let h =
        HistoryBuilder::new().txn(1, |t| t.write("x", 1).write("x", 2)).txn(2, |t| t.read("x", 1)).build();
    assert_eq!(rejects(&h, &Options::default()).anomalies[0].class, AnomalyClass::G1b);
}

#[test]
fn garbage_duplicate_future_and_non_repeatable_reads_are_reported() {
    let cases: Vec<(history::History, AnomalyClass)> = vec![
        (HistoryBuilder::new().txn(1, |t| t.read("x", 9)).build(), AnomalyClass::GarbageRead),
        (
            HistoryBuilder::new().txn(1, |t| t.write("x", 1)).txn(2, |t| t.write("y", 1)).build(),
            AnomalyClass::DuplicateWrite,
        ),
        (HistoryBuilder::new().txn(1, |t| t.read("x", 1).write("x", 1)).build(), AnomalyClass::FutureRead),
        (
            HistoryBuilder::new()
                .txn(1, |t| t.write("x", 1))
                .txn(2, |t| t.read("x", 1).read_init("x"))
                .build(),
            AnomalyClass::NonRepeatableRead,
        ),
        (
            HistoryBuilder::new().txn(1, |t| t.write("x", 1).read_init("x")).build(),
            AnomalyClass::InternalRead,
        ),
        (
            HistoryBuilder::new().txn(1, |t| t.read_init("x")).txn(2, |t| t.read_absent("x")).build(),
            AnomalyClass::StaleRead,
        ),
    ];
    for (h, class) in cases {
        let report = rejects(&h, &Options::default());
        assert_eq!(report.anomalies[0].class, class);
        assert!(!report.anomalies[0].ops.is_empty());
    }
}

#[test]
fn a_stale_read_is_rejected_only_for_strict_serializability_and_names_the_threshold() {
    // T2 starts 500 ms after T1 committed, yet reads the initial x.
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").write("x", 1))
        .at(0, 1_000_000)
        .txn(2, |t| t.read_init("x"))
        .at(501_000_000, 502_000_000)
        .build();
    accepts(&h, &Options::default());
    let strict = Options { level: Level::StrictSerializable, ..Options::default() };
    let report = rejects(&h, &strict);
    assert_eq!(report.anomalies[0].class, AnomalyClass::StaleRead);
    assert!(report.anomalies[0].uses_real_time);
    assert!(report.verdict_line().contains("100 ms"), "{}", report.verdict_line());
    // With a threshold larger than the gap, the two are concurrent.
    accepts(&h, &Options { clock_drift_ms: 600, ..strict });
}

#[test]
fn indeterminate_transactions_count_only_when_read_from() {
    // Nobody reads T1's write: it is dropped, even though keeping it would make a lost update.
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").write("x", 1))
        .indeterminate(2, |t| t.read_init("x").write("x", 2))
        .build();
    let report = accepts(&h, &Options::default());
    assert_eq!(report.dropped_indeterminate, vec![t(2)]);
    // Once T3 reads T2's write, T2 committed, and the lost update is real.
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").write("x", 1))
        .indeterminate(2, |t| t.read_init("x").write("x", 2))
        .txn(3, |t| t.read("x", 2))
        .build();
    assert_eq!(rejects(&h, &Options::default()).anomalies[0].class, AnomalyClass::LostUpdate);
}

#[test]
fn reads_after_a_log_gap_of_unknown_writes_are_unverifiable_not_rejects() {
    let mut h = HistoryBuilder::new().txn(1, |t| t.write("x", 1)).txn(2, |t| t.read("x", 7)).build();
    h.gaps.push(history::LogGap { after_txns: 1 });
    let report = accepts(&h, &Options::default());
    assert_eq!(report.unverifiable.len(), 1);
    // In rounds too, whatever the round size (the reader waits for a writer that never comes).
    for round_size in [1, 2] {
        let rounds = verifier::verify_in_rounds(&h, &verifier::RoundOptions::offline(round_size)).unwrap();
        assert!(
            rounds.is_accept(),
            "rounds of {round_size}: {:?}",
            rounds.reports.first().map(|r| r.verdict_line())
        );
        let causes = rounds.not_judged.by_cause();
        assert_eq!(causes.get(&verifier::UnverifiableCause::LogGap), Some(&1), "rounds of {round_size}");
    }
    // Without the gap, the same read is a garbage read in rounds as one-shot.
    h.gaps.clear();
    let rounds = verifier::verify_in_rounds(&h, &verifier::RoundOptions::offline(1)).unwrap();
    assert!(!rounds.is_accept());
}

#[test]
fn a_tampered_report_fails_the_check() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
        .build();
    let report = verify(&h, &Options::default()).unwrap();
    check_report_detailed(&h, &report).unwrap();
    // Reverse one edge: the cycle no longer closes.
    let mut broken = report.clone();
    let e = &mut broken.anomalies[0].cycle[0];
    std::mem::swap(&mut e.from, &mut e.to);
    assert!(check_report_detailed(&h, &broken).is_err());
    // Claim a read that did not happen.
    let mut broken = report.clone();
    broken.anomalies[0].cycle[0].from_version = Some(Observed::Version(WriteId(2)));
    assert!(check_report_detailed(&h, &broken).is_err());
    // A report of the same anomaly on a history where it does not occur.
    let fine = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.read("x", 1).read_init("y").write("y", 2))
        .build();
    assert!(check_report_detailed(&fine, &report).is_err());
    // An accept whose serial order does not explain the reads.
    let ok = accepts(&fine, &Options::default());
    let mut wrong = ok.clone();
    wrong.serial_order = Some(vec![t(2), t(1)]);
    assert!(check_report_detailed(&fine, &wrong).is_err());
}

#[test]
fn reports_round_trip_through_json() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
        .build();
    let report = verify(&h, &Options::default()).unwrap();
    let mut back = verifier::Report::from_json(&report.to_json()).unwrap();
    // Timings are floats, which JSON text does not always carry bit for bit.
    assert!((back.timings.construct_ms - report.timings.construct_ms).abs() < 1e-9);
    back.timings = report.timings.clone();
    assert_eq!(back, report);
    check_report_detailed(&h, &back).unwrap();
}

#[test]
fn degenerate_histories_are_accepted() {
    for h in [
        history::History::default(),
        HistoryBuilder::new().txn(1, |t| t).build(),
        HistoryBuilder::new().aborted(1, |t| t.write("x", 1)).aborted(2, |t| t.read("x", 1)).build(),
        HistoryBuilder::new().indeterminate(1, |t| t.read("x", 5)).build(),
    ] {
        for level in [Level::Serializable, Level::StrictSerializable] {
            accepts(&h, &Options { level, ..Options::default() });
        }
    }
}

#[test]
fn sql_text_and_sessions_appear_in_the_text_report() {
    let (b, stmt) =
        HistoryBuilder::new().statement("UPDATE accounts SET balance = balance - 10 WHERE id = 1");
    let h = b
        .txn(1, |t| t.stmt(stmt).read_init("x").write("x", 1))
        .txn(2, |t| t.stmt(stmt).read_init("x").write("x", 2))
        .build();
    let text = rejects(&h, &Options::default()).render_text();
    assert!(text.starts_with("REJECT"), "{text}");
    assert!(text.contains("UPDATE accounts"), "{text}");
    assert!(text.contains("session S1"), "{text}");
}
