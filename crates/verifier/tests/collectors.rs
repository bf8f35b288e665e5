//! Histories that several collectors (proxies) recorded: a reject whose cycle rests on real-time order
//! between two collectors' transactions says so, since their timestamps come from two clocks.

use history::{CollectorId, History, HistoryBuilder};
use verifier::{AnomalyClass, Level, Options, Verdict, verify};

/// T1 (collector 1) writes x and commits 400 ms before T2 (collector 2) starts, yet T2 reads the initial x.
fn stale_read_across_collectors() -> History {
    let mut h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .at(0, 100_000_000)
        .txn(2, |t| t.read_init("x"))
        .at(500_000_000, 600_000_000)
        .build();
    h.transactions[0].collector = CollectorId(1);
    h.transactions[1].collector = CollectorId(2);
    h
}

/// [`stale_read_across_collectors`] is serializable (T2 first), not strictly serializable, and the
/// real-time edge crosses two clocks.
#[test]
fn a_real_time_edge_between_two_collectors_is_named_in_the_report() {
    let mut h = stale_read_across_collectors();
    let mut options = Options { level: Level::StrictSerializable, ..Options::default() };
    options.clock_drift_ms = 50;
    let report = verify(&h, &options).expect("verifies");
    assert_eq!(report.verdict, Verdict::Reject, "{report}");
    assert!(report.anomalies.iter().any(|a| a.uses_real_time && a.class != AnomalyClass::G0), "{report}");
    let text = report.to_string();
    assert!(text.contains("rests on the clocks of two collectors (1 and 2)"), "{text}");
    // One collector's two transactions: the same edge, one clock, and no such line.
    h.transactions[1].collector = CollectorId(1);
    let text = verify(&h, &options).expect("verifies").to_string();
    assert!(!text.contains("clocks of two collectors"), "{text}");
}

/// Collector 2's clock has an error bound of its own: the same 400 ms gap orders the two transactions when
/// the two bounds add up to less (25 + 370 ms, and the reject says which bounds it rests on), and not when
/// they add up to more (25 + 380 ms).
#[test]
fn a_clock_with_a_bound_of_its_own_decides_real_time_order_across_collectors() {
    let h = stale_read_across_collectors();
    let mut options = Options { level: Level::StrictSerializable, clock_drift_ms: 50, ..Options::default() };
    options.clock_errors_ms.insert(CollectorId(2), 370);
    let report = verify(&h, &options).expect("verifies");
    assert_eq!(report.verdict, Verdict::Reject, "{report}");
    let text = report.to_string();
    assert!(text.contains("collector 2's clock within 370 ms of true time"), "{text}");
    verifier::check_report(&h, &report).expect("the reject checks");
    options.clock_errors_ms.insert(CollectorId(2), 380);
    let report = verify(&h, &options).expect("verifies");
    assert_eq!(report.verdict, Verdict::Accept, "{report}");
}
