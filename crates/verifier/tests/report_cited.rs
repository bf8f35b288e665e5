//! A reject report must be re-checkable on its own, from the transactions it carries, once the history log
//! it came from has been compacted (REPORT.md, "Checking a report without its history"). For every reject of
//! the corpus and of a few hundred small random histories, at every level: the report holds against the
//! history its own transactions make ([`verifier::check_cited`]), and stops holding when that history is
//! tampered with (a transaction the anomaly names dropped, a version one of its edges rests on changed), so
//! the check is not vacuous.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use history::codec::read_history;
use history::{
    CollectorId, History, IsolationLevel, Key, KeyName, Observed, Op, Outcome, SessionId, Transaction, TxnId,
    WriteId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use verifier::report::Basis;
use verifier::{
    AnomalyClass, CitedHistory, EdgeKind, Level, Options, Report, RoundOptions, check_cited,
    check_report_detailed, verify, verify_in_rounds,
};

/// A version no history here holds.
const TAMPERED: Observed = Observed::PreHistory(987_654_321);

/// Asserts that `report` (a reject of `full`) holds against its own transactions, and not against them
/// tampered with. Returns how many transactions it carries beyond those its anomalies' cycles and evidence
/// name.
fn assert_self_contained(what: &str, full: &History, report: &Report) -> usize {
    check_report_detailed(full, report)
        .unwrap_or_else(|e| panic!("{what}: the report does not hold against its whole history: {e}"));
    let covered = check_cited(report).unwrap_or_else(|e| {
        panic!("{what}: the report does not hold against its own transactions: {e}\n{}", report.render_text())
    });
    assert_eq!(covered.transactions, report.transactions.len(), "{what}");
    let cited = report.cited_history().expect("rebuilt once already");
    assert_eq!(cited.history.transactions.len(), report.transactions.len(), "{what}");

    // Drop a transaction the first anomaly names.
    let named = named(report);
    let victim = *named.first().unwrap_or_else(|| panic!("{what}: a reject names no transaction"));
    let mut dropped = cited.clone();
    dropped.history.transactions.retain(|t| t.id != victim);
    assert!(
        check_report_detailed(&dropped.history, &dropped.report).is_err(),
        "{what}: still holds without {victim}\n{}",
        report.render_text()
    );

    // Change what the first anomaly's first edge rests on.
    if let Some(tampered) = tamper_first_edge(&cited) {
        assert!(
            check_report_detailed(&tampered.history, &tampered.report).is_err(),
            "{what}: still holds with the first edge's version changed\n{}",
            report.render_text()
        );
    }
    let named: HashSet<TxnId> = report
        .anomalies
        .iter()
        .flat_map(|a| a.cycle.iter().flat_map(|e| [e.from, e.to]).chain(a.ops.iter().map(|o| o.txn)))
        .collect();
    report.transactions.iter().filter(|t| !named.contains(&t.id)).count()
}

/// The transactions the first anomaly names, its cycle's first.
fn named(report: &Report) -> Vec<TxnId> {
    let a = &report.anomalies[0];
    a.cycle.iter().map(|e| e.from).chain(a.ops.iter().map(|o| o.txn)).collect()
}

/// The cited history with the fact under the first anomaly's first cycle edge changed: the read a wr or rw
/// edge rests on, the write a ww edge does, the session of an so edge, the start of an rt edge. `None` for an
/// anomaly without a cycle.
fn tamper_first_edge(cited: &CitedHistory) -> Option<CitedHistory> {
    let e = cited.report.anomalies[0].cycle.first()?;
    let mut out = cited.clone();
    fn txn(out: &mut CitedHistory, id: TxnId) -> &mut Transaction {
        out.history.transactions.iter_mut().find(|t| t.id == id).expect("a cited transaction is carried")
    }
    match e.kind {
        EdgeKind::Wr => {
            let (key, version) = (Key(e.key_id?), e.from_version?);
            for op in &mut txn(&mut out, e.to).ops {
                if let Op::Read { key: k, observed, .. } = op
                    && *k == key
                    && *observed == version
                {
                    *observed = TAMPERED;
                }
            }
        }
        EdgeKind::Rw => {
            let key = Key(e.key_id?);
            let reads = &mut txn(&mut out, e.from).ops;
            let first = reads.iter_mut().find(|op| op.key() == key)?;
            if let Op::Read { observed, .. } = first {
                *observed = TAMPERED;
            }
        }
        EdgeKind::Ww => {
            let key = Key(e.key_id?);
            let last = txn(&mut out, e.to)
                .ops
                .iter_mut()
                .rev()
                .find(|op| op.key() == key && matches!(op, Op::Write { .. }))?;
            if let Op::Write { write, .. } = last {
                *write = WriteId(987_654_321);
            }
        }
        EdgeKind::So => txn(&mut out, e.to).session = SessionId(987_654_321),
        EdgeKind::Rt => txn(&mut out, e.to).start_ns = None,
    }
    Some(out)
}

/// What the random rejects covered, to make sure the proofs that need supporting transactions came up.
#[derive(Debug, Default)]
struct Tally {
    rejects: usize,
    by_level: BTreeMap<&'static str, usize>,
    /// Rejects carrying transactions their anomalies do not name (chain writers, readers, paths).
    with_support: usize,
    /// Derivations whose chains have more than one version (their writers must be carried).
    long_chains: usize,
    refutations: usize,
    seen: usize,
    other_order_cycles: usize,
}

impl Tally {
    fn add(&mut self, report: &Report, support: usize) {
        self.rejects += 1;
        *self.by_level.entry(report.level.name()).or_default() += 1;
        self.with_support += usize::from(support > 0);
        for d in &report.derivations {
            self.long_chains += usize::from(d.before.len() + d.after.len() > 2);
            match d.basis {
                Basis::Seen { .. } => self.seen += 1,
                Basis::OtherOrderCycle { .. } => self.other_order_cycles += 1,
                _ => {}
            }
        }
        self.refutations += report.anomalies.iter().filter(|a| a.refutation.is_some()).count();
    }
}

/// A random history: transactions run one after another against a store, some reading an older snapshot
/// (lost updates, write skew, long forks), with read-modify-writes (chains), indeterminate outcomes,
/// overlapping timestamps, a random isolation level each, and then a few reads perturbed.
fn random_history(rng: &mut StdRng) -> History {
    let keys = 3u32;
    let mut h = History::default();
    for k in 0..keys {
        h.keys.intern(KeyName { namespace: String::new(), bytes: format!("k{k}").into_bytes() });
    }
    let n = rng.gen_range(2..=9);
    let sessions = rng.gen_range(1..=3u64);
    let mut states: Vec<HashMap<Key, Observed>> = vec![HashMap::new()];
    let snapshot_reads = rng.gen_bool(0.4);
    let mut next_write = 1u64;
    let mut clock = 1_000_000u64;
    let mut txns = Vec::new();
    for i in 0..n {
        let mut t = Transaction::new(TxnId(i as u64 + 1), SessionId(rng.gen_range(0..sessions)), 0);
        t.outcome = match rng.gen_range(0..100) {
            0..=5 => Outcome::Aborted,
            6..=15 => Outcome::Indeterminate,
            _ => Outcome::Committed,
        };
        t.isolation = match rng.gen_range(0..8) {
            0 => None,
            1 => Some(IsolationLevel::ReadCommitted),
            2 | 3 => Some(IsolationLevel::RepeatableRead),
            _ => Some(IsolationLevel::Serializable),
        };
        t.collector = CollectorId(0);
        let back = if snapshot_reads { rng.gen_range(0..states.len().min(3)) } else { 0 };
        let snapshot = states[states.len() - 1 - back].clone();
        let mut own: HashMap<Key, Observed> = HashMap::new();
        for _ in 0..rng.gen_range(1..=4) {
            let key = Key(rng.gen_range(0..keys));
            let seen = own.get(&key).or(snapshot.get(&key)).copied().unwrap_or(Observed::PreHistory(0));
            let (read, write) = match rng.gen_range(0..3) {
                0 => (true, false),
                1 => (false, true),
                _ => (true, true),
            };
            if read {
                t.ops.push(Op::Read { key, observed: seen, stmt: None });
            }
            if write {
                let w = WriteId(next_write);
                next_write += 1;
                own.insert(key, Observed::Version(w));
                t.ops.push(Op::Write { key, write: w, stmt: None });
            }
        }
        let start = clock.saturating_sub(rng.gen_range(0..3_000_000));
        clock += rng.gen_range(500_000..2_000_000);
        t.start_ns = Some(start);
        t.commit_ns = (t.outcome != Outcome::Indeterminate).then_some(clock);
        let applies = match t.outcome {
            Outcome::Committed => true,
            Outcome::Aborted => false,
            Outcome::Indeterminate => rng.gen_bool(0.5),
        };
        if applies {
            let mut s = states.last().cloned().unwrap_or_default();
            s.extend(own);
            states.push(s);
        }
        txns.push(t);
    }
    let perturbations = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(1..=2) };
    common::perturb_reads(rng, &mut txns, perturbations);
    common::number_in_sessions(rng, &mut txns);
    h.transactions = txns;
    h
}

#[test]
fn every_random_reject_holds_against_its_own_transactions_at_every_level() {
    let mut rng = StdRng::seed_from_u64(0x5e1f_c0de);
    let mut tally = Tally::default();
    for case in 0..500 {
        let h = random_history(&mut rng);
        for level in Level::ALL {
            for prune in [true, false] {
                let options =
                    Options { level, prune, clock_drift_ms: rng.gen_range(0..2), ..Options::default() };
                let report = verify(&h, &options).unwrap_or_else(|e| panic!("case {case}: {e}"));
                if report.is_accept() {
                    continue;
                }
                let what = format!("case {case} at {} (prune {prune})", level.name());
                let support = assert_self_contained(&what, &h, &report);
                tally.add(&report, support);
            }
        }
    }
    println!("{tally:#?}");
    assert!(tally.rejects >= 300, "too few rejects to say much: {tally:?}");
    assert!(tally.by_level.len() == Level::ALL.len(), "some level never rejected: {tally:?}");
    for (what, n) in [
        ("supporting transactions", tally.with_support),
        ("chains longer than a version", tally.long_chains),
        ("refutations", tally.refutations),
        ("seen derivations", tally.seen),
        ("other-order cycles", tally.other_order_cycles),
    ] {
        assert!(n > 0, "no reject needed {what}: the generator does not reach that case: {tally:?}");
    }
}

/// Reports from verification in rounds come from a residual history (collected transactions gone, reads
/// rewritten); they must hold against their own transactions as well. Rejects found at admission (a read
/// of a collected version) rest on Cobra's Guarantee (§4.2) rather than on transactions, and the checker
/// holds them to nothing it can prove, with or without the history; they are skipped.
#[test]
fn reports_from_rounds_hold_against_their_own_transactions() {
    let mut rng = StdRng::seed_from_u64(0x0a11_0c8d);
    let mut checked = 0;
    for case in 0..300 {
        let h = random_history(&mut rng);
        let options =
            RoundOptions { stop_at_first_reject: false, ..RoundOptions::offline(rng.gen_range(1..=4)) };
        let out = verify_in_rounds(&h, &options).unwrap_or_else(|e| panic!("case {case}: {e}"));
        for (i, report) in out.reports.iter().enumerate() {
            // Admission's evidence is one read, where the checker needs two ops for these classes.
            let at_admission = report.anomalies.iter().all(|a| {
                a.ops.len() == 1
                    && matches!(
                        a.class,
                        AnomalyClass::StaleRead | AnomalyClass::G1a | AnomalyClass::DuplicateWrite
                    )
            });
            if at_admission {
                continue;
            }
            let back = Report::from_json(&report.to_json()).expect("a report reads back");
            check_cited(&back).unwrap_or_else(|e| {
                panic!("case {case}, reject {i}: does not hold on its own: {e}\n{}", report.render_text())
            });
            checked += 1;
        }
    }
    assert!(checked >= 50, "only {checked} round rejects checked");
}

/// The labelled corpus: `$KRAIT_CORPUS`, or `../shared/corpus` beside the workspace. A missing corpus fails
/// the test: a skipped corpus check must never count as a pass.
fn corpus() -> PathBuf {
    match std::env::var("KRAIT_CORPUS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
    }
}

#[test]
fn corpus_rejects_hold_against_their_own_transactions() {
    let root = corpus();
    assert!(root.is_dir(), "the corpus {} is missing (set KRAIT_CORPUS)", root.display());
    let mut histories: Vec<PathBuf> = std::fs::read_dir(root.join("cobra/ser-violation"))
        .unwrap_or_else(|e| panic!("{}: {e} (set KRAIT_CORPUS)", root.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    histories.sort();
    histories.extend(["polysi/galera-lost-update.txt", "polysi/yugabyte-si.txt"].map(|p| root.join(p)));
    let mut rejects = 0;
    for path in &histories {
        let h = read_history(path, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for level in [
            Level::Serializable,
            Level::SnapshotIsolation,
            Level::Causal,
            Level::ReadAtomic,
            Level::ReadCommitted,
        ] {
            let report = verify(&h, &Options { level, ..Options::default() }).unwrap();
            if report.is_accept() {
                continue;
            }
            let what = format!("{} at {}", path.display(), level.name());
            let support = assert_self_contained(&what, &h, &report);
            let covered = check_cited(&report).expect("checked above");
            println!(
                "{what}: {} of {} transactions carried ({support} beyond those the anomaly names): {:?}",
                report.transactions.len(),
                h.transactions.len(),
                covered.check
            );
            rejects += 1;
        }
    }
    assert!(rejects >= 2, "the corpus's serializability violations must be rejected");
}

/// A report written before ops carried their key's id (schema 3) still rebuilds: each op's key is found by
/// its printed name among the keys the edges name.
#[test]
fn a_report_without_op_key_ids_is_matched_by_key_names() {
    let h = history::HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
        .build();
    let mut report = verify(&h, &Options::default()).unwrap();
    for t in &mut report.transactions {
        for op in &mut t.ops {
            op.key_id = None;
        }
    }
    check_cited(&report).unwrap();
    // A key the text names one way and the edges another is a report that contradicts itself.
    report.transactions[0].ops[0].text = report.transactions[0].ops[0].text.replace("r(x)", "r(z)");
    report.transactions[0].ops[0].key_id = report.anomalies[0].cycle[0].key_id;
    assert!(check_cited(&report).is_err());
}

#[test]
fn an_accept_report_cannot_be_checked_without_its_history() {
    let h = history::HistoryBuilder::new().txn(1, |t| t.read_init("x").write("x", 1)).build();
    let report = verify(&h, &Options::default()).unwrap();
    assert_eq!(check_cited(&report), Err(verifier::CitedError::Accept));
}
