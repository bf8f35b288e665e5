//! The verifier must agree with a brute-force oracle on many small random histories.
//!
//! The oracle knows nothing of polygraphs: it tries every total order of the committed transactions
//! (backtracking over prefixes), and, for every subset of the indeterminate transactions, checks that each
//! read returns the latest write before it (own writes first), that versions from before recording are read
//! consistently, that session order holds, and, for strict serializability, real-time order. The generator
//! runs random transactions serially against a store (so the history starts serializable), then perturbs it:
//! stale and future reads, aborted and intermediate reads, shuffled sessions, and skewed timestamps. It makes
//! lost updates, write skew, long forks, stale reads, G1a/G1b and session-order cycles.

mod common;

use std::collections::{BTreeMap, HashMap};

use history::{
    ClockBounds, CollectorId, History, Key, KeyName, Observed, Op, Outcome, SessionId, Transaction, TxnId,
    WriteId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use verifier::{Backend, Level, Options, check_report_detailed, verify};

fn random_history(rng: &mut StdRng) -> (History, u64) {
    random_history_sized(rng, 7, 3)
}

/// A random history of up to `max_txns` transactions over `keys` keys (see the module comment).
fn random_history_sized(rng: &mut StdRng, max_txns: usize, keys: u32) -> (History, u64) {
    let mut h = History::default();
    for k in 0..keys {
        h.keys.intern(KeyName { namespace: String::new(), bytes: format!("k{k}").into_bytes() });
    }
    let n = rng.gen_range(1..=max_txns);
    let sessions = rng.gen_range(1..=3u64);
    let mut store: HashMap<Key, Observed> = HashMap::new();
    // Earlier states of the store: a transaction reading an older snapshot (as under snapshot isolation)
    // makes lost updates, write skew and long forks.
    let mut states: Vec<HashMap<Key, Observed>> = vec![HashMap::new()];
    let snapshot_reads = rng.gen_bool(0.3);
    let mut next_write = 1u64;
    let mut txns = Vec::new();
    let mut clock = 1_000_000u64;
    for i in 0..n {
        let mut t = Transaction::new(TxnId(i as u64 + 1), SessionId(rng.gen_range(0..sessions)), 0);
        t.outcome = match rng.gen_range(0..100) {
            0..=7 => Outcome::Aborted,
            8..=15 => Outcome::Indeterminate,
            _ => Outcome::Committed,
        };
        let applies = match t.outcome {
            Outcome::Committed => true,
            Outcome::Aborted => false,
            Outcome::Indeterminate => rng.gen_bool(0.5),
        };
        let mut own: HashMap<Key, Observed> = HashMap::new();
        let back = if snapshot_reads { rng.gen_range(0..states.len().min(3)) } else { 0 };
        let snapshot = states[states.len() - 1 - back].clone();
        for _ in 0..rng.gen_range(1..=4) {
            let key = Key(rng.gen_range(0..keys));
            if rng.gen_bool(0.5) {
                let seen = own.get(&key).or(snapshot.get(&key)).copied().unwrap_or(Observed::PreHistory(0));
                t.ops.push(Op::Read { key, observed: seen, stmt: None });
            } else {
                let w = WriteId(next_write);
                next_write += 1;
                own.insert(key, Observed::Version(w));
                t.ops.push(Op::Write { key, write: w, stmt: None });
            }
        }
        // Timestamps: serial, with random overlap so that some pairs are concurrent.
        let start = clock.saturating_sub(rng.gen_range(0..3_000_000));
        clock += rng.gen_range(500_000..2_000_000);
        t.start_ns = Some(start);
        t.commit_ns = if t.outcome == Outcome::Indeterminate { None } else { Some(clock) };
        t.collector = CollectorId(0);
        if applies {
            store.extend(own);
            states.push(store.clone());
        }
        txns.push(t);
    }
    // Perturb some reads.
    let writes: Vec<(Key, WriteId)> = txns
        .iter()
        .flat_map(|t| t.ops.iter())
        .filter_map(|op| match *op {
            Op::Write { key, write, .. } => Some((key, write)),
            _ => None,
        })
        .collect();
    let perturbations = if rng.gen_bool(0.45) { 0 } else { rng.gen_range(1..=1 + n / 8) };
    for _ in 0..perturbations {
        let ti = rng.gen_range(0..txns.len());
        let reads: Vec<usize> =
            (0..txns[ti].ops.len()).filter(|&i| matches!(txns[ti].ops[i], Op::Read { .. })).collect();
        if reads.is_empty() {
            continue;
        }
        let oi = reads[rng.gen_range(0..reads.len())];
        let Op::Read { key, .. } = txns[ti].ops[oi] else { continue };
        let same_key: Vec<WriteId> = writes.iter().filter(|(k, _)| *k == key).map(|(_, w)| *w).collect();
        let observed = match rng.gen_range(0..100) {
            0..=69 if !same_key.is_empty() => Observed::Version(same_key[rng.gen_range(0..same_key.len())]),
            0..=84 => Observed::PreHistory(0),
            85..=89 => Observed::Absent,
            90..=94 if !writes.is_empty() => Observed::Version(writes[rng.gen_range(0..writes.len())].1),
            _ => Observed::Version(WriteId(9_999)),
        };
        txns[ti].ops[oi] = Op::Read { key, observed, stmt: None };
    }
    // Session order follows the serial order, unless shuffled.
    let mut seq: HashMap<SessionId, u64> = HashMap::new();
    let shuffle = rng.gen_bool(0.2);
    let mut order: Vec<usize> = (0..txns.len()).collect();
    if shuffle {
        for i in (1..order.len()).rev() {
            let j = rng.gen_range(0..=i);
            order.swap(i, j);
        }
    }
    for &i in &order {
        let s = seq.entry(txns[i].session).or_insert(0);
        txns[i].seq = *s;
        *s += 1;
    }
    h.transactions = txns;
    let drift_ms = [0u64, 1, 2][rng.gen_range(0..3)];
    (h, drift_ms)
}

/// Every clock within half of `drift_ms` of true time.
fn uniform(drift_ms: u64) -> ClockBounds {
    ClockBounds::uniform(drift_ms * 1_000_000)
}

/// Half the time, spreads the sessions over three collectors, some of whose clocks get an error bound of
/// their own (0–2 ms, against timestamps 0.5–2 ms apart); returns those bounds.
fn random_clocks(rng: &mut StdRng, h: &mut History) -> BTreeMap<CollectorId, u64> {
    let mut errors = BTreeMap::new();
    if rng.gen_bool(0.5) {
        return errors;
    }
    for t in &mut h.transactions {
        t.collector = CollectorId((t.session.0 % 3) as u32);
    }
    for c in 0..3 {
        if rng.gen_bool(0.6) {
            errors.insert(CollectorId(c), rng.gen_range(0..3));
        }
    }
    errors
}

/// Does some total order of committed (plus some indeterminate) transactions explain every read?
fn oracle(h: &History, level: Level, clocks: &ClockBounds) -> bool {
    let indeterminate: Vec<usize> =
        (0..h.transactions.len()).filter(|&i| h.transactions[i].outcome == Outcome::Indeterminate).collect();
    (0u32..1 << indeterminate.len()).any(|mask| {
        let included: Vec<usize> = (0..h.transactions.len())
            .filter(|&i| match h.transactions[i].outcome {
                Outcome::Committed => true,
                Outcome::Aborted => false,
                Outcome::Indeterminate => {
                    mask & (1 << indeterminate.iter().position(|&j| j == i).unwrap_or(0)) != 0
                }
            })
            .collect();
        let mut placed = vec![false; h.transactions.len()];
        search(h, &included, &mut placed, &HashMap::new(), &HashMap::new(), level, clocks)
    })
}

fn must_precede(h: &History, u: usize, v: usize, level: Level, clocks: &ClockBounds) -> bool {
    let (a, b) = (&h.transactions[u], &h.transactions[v]);
    if a.session == b.session && a.seq < b.seq {
        return true;
    }
    level == Level::StrictSerializable
        && matches!((a.commit_ns, b.start_ns), (Some(c), Some(s)) if c + clocks.drift_ns(a.collector, b.collector) < s)
}

fn search(
    h: &History,
    included: &[usize],
    placed: &mut Vec<bool>,
    store: &HashMap<Key, Observed>,
    initial: &HashMap<Key, Observed>,
    level: Level,
    clocks: &ClockBounds,
) -> bool {
    if included.iter().all(|&i| placed[i]) {
        return true;
    }
    for &v in included {
        if placed[v] || included.iter().any(|&u| !placed[u] && u != v && must_precede(h, u, v, level, clocks))
        {
            continue;
        }
        let mut store2 = store.clone();
        let mut initial2 = initial.clone();
        let mut own: HashMap<Key, Observed> = HashMap::new();
        let mut ok = true;
        for op in &h.transactions[v].ops {
            match *op {
                Op::Write { key, write, .. } => {
                    own.insert(key, Observed::Version(write));
                }
                // A version of a writer nobody recorded says nothing about the order (DESIGN.md §3).
                Op::Read { observed: Observed::Unrecorded(_), .. } => {}
                Op::Read { key, observed, .. } => {
                    let expected = match (own.get(&key), store.get(&key)) {
                        (Some(&o), _) | (None, Some(&o)) => o,
                        (None, None) if !matches!(observed, Observed::Version(_)) => {
                            *initial2.entry(key).or_insert(observed)
                        }
                        (None, None) => {
                            ok = false;
                            break;
                        }
                    };
                    if expected != observed {
                        ok = false;
                        break;
                    }
                }
            }
        }
        if !ok {
            continue;
        }
        store2.extend(own);
        placed[v] = true;
        let found = search(h, included, placed, &store2, &initial2, level, clocks);
        placed[v] = false;
        if found {
            return true;
        }
    }
    false
}

/// `h` as a collector that missed some writers would have recorded it (DESIGN.md §3): some transactions
/// are not recorded at all, and some lose some of their writes (a function or trigger wrote them). Every
/// read of a hidden write observes an unrecorded writer's version instead.
fn hide_writers(h: &History, rng: &mut StdRng) -> History {
    let mut hidden = std::collections::HashSet::new();
    let mut out = h.clone();
    out.transactions.retain_mut(|t| {
        match rng.gen_range(0..100) {
            // Not recorded at all: a crash window, a lost session, a client that bypassed the proxy.
            0..=14 => {
                hidden.extend(t.ops.iter().filter_map(|op| match *op {
                    Op::Write { write, .. } => Some(write),
                    Op::Read { .. } => None,
                }));
                return false;
            }
            // Some writes not recorded: a function, a trigger, an unmapped statement.
            15..=34 => t.ops.retain(|op| match *op {
                Op::Write { write, .. } if rng.gen_bool(0.5) => {
                    hidden.insert(write);
                    false
                }
                _ => true,
            }),
            _ => {}
        }
        true
    });
    for t in &mut out.transactions {
        for op in &mut t.ops {
            if let Op::Read { observed, .. } = op
                && let Observed::Version(w) = *observed
                && hidden.contains(&w)
            {
                *observed = Observed::Unrecorded(w.0);
            }
        }
    }
    out
}

#[test]
fn hiding_writers_never_turns_an_accept_into_a_reject() {
    let count: usize =
        std::env::var("KRAIT_ORACLE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000) / 2;
    let mut rng = StdRng::seed_from_u64(0x0068_6964_6531);
    let mut unverifiable = 0usize;
    let mut hidden_rejects = 0usize;
    for case in 0..count {
        let (full, drift_ms) = random_history(&mut rng);
        let level = if rng.gen_bool(0.5) { Level::Serializable } else { Level::StrictSerializable };
        let options = Options { level, clock_drift_ms: drift_ms, ..Options::default() };
        let full_report = verify(&full, &options).unwrap_or_else(|e| panic!("case {case}: {e}"));
        let h = hide_writers(&full, &mut rng);
        let report = verify(&h, &options).unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert!(
            report.is_accept() || !full_report.is_accept(),
            "case {case}: hiding writers turned an accept into a reject\nfull: {:#?}\nhidden: {:#?}\n{}",
            full.transactions,
            h.transactions,
            report.render_text()
        );
        assert_eq!(
            report.is_accept(),
            oracle(&h, level, &uniform(drift_ms)),
            "case {case}: verifier and oracle disagree on a history with hidden writers\n{:#?}\n{}",
            h.transactions,
            report.render_text()
        );
        // The report, accept or reject, re-checks independently of the pipeline.
        check_report_detailed(&h, &report).unwrap_or_else(|e| {
            panic!("case {case}: the report does not check: {e}\n{}", report.render_text())
        });
        hidden_rejects += usize::from(!report.is_accept());
        unverifiable += report.unverifiable.len();
    }
    eprintln!(
        "{count} histories with hidden writers: {hidden_rejects} still rejected, {unverifiable} unverifiable reads"
    );
    assert!(unverifiable > count / 10, "the mode must actually hide writers that others read");
    assert!(hidden_rejects > count / 20, "the mode must keep real anomalies among the visible transactions");
}

/// Changes one detail of a report at random: the check may accept or refute it, but must never panic.
fn tamper(h: &History, report: &verifier::Report, rng: &mut StdRng) {
    let mut r = report.clone();
    let n = h.transactions.len() as u64 + 2;
    match rng.gen_range(0..6) {
        0 => {
            if let Some(a) = r.anomalies.first_mut() {
                for op in &mut a.ops {
                    op.op = rng.gen_range(0..6);
                    op.txn = TxnId(rng.gen_range(0..n));
                }
            }
        }
        1 => {
            if let Some(e) = r.anomalies.first_mut().and_then(|a| a.cycle.first_mut()) {
                e.derivation = Some(rng.gen_range(0..4));
                e.key_id = Some(rng.gen_range(0..5));
            }
        }
        2 => {
            for d in &mut r.derivations {
                d.before.push(Observed::Version(WriteId(rng.gen_range(0..20))));
                d.key_id = rng.gen_range(0..4);
            }
        }
        3 => {
            if let Some(order) = r.serial_order.as_mut().filter(|o| !o.is_empty()) {
                let i = rng.gen_range(0..order.len());
                order[i] = TxnId(rng.gen_range(0..n));
            }
        }
        4 => {
            if let Some(a) = r.anomalies.first_mut() {
                a.class = [
                    verifier::AnomalyClass::G1a,
                    verifier::AnomalyClass::LostUpdate,
                    verifier::AnomalyClass::InternalRead,
                ][rng.gen_range(0..3)];
            }
        }
        _ => {
            if let Some(e) = r.anomalies.first_mut().and_then(|a| a.cycle.last_mut()) {
                e.to = TxnId(rng.gen_range(0..n));
                e.from_version = Some(Observed::Absent);
            }
        }
    }
    let _ = check_report_detailed(h, &r);
}

#[test]
fn verifier_agrees_with_brute_force_on_random_histories() {
    let count: usize =
        std::env::var("KRAIT_ORACLE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let mut rng = StdRng::seed_from_u64(0x006b_7261_6974);
    let mut rejects = [0usize; 2];
    let mut total = [0usize; 2];
    let mut realtime_only = 0usize;
    let mut solver_rejects = 0usize;
    let mut classes: std::collections::BTreeMap<&'static str, usize> = Default::default();
    let backends = [Backend::Auto, Backend::ChainClocks, Backend::BitsetRows, Backend::Dfs];
    for case in 0..count {
        let (mut h, drift_ms) = random_history(&mut rng);
        let clock_errors_ms = random_clocks(&mut rng, &mut h);
        let level = if rng.gen_bool(0.5) { Level::Serializable } else { Level::StrictSerializable };
        let li = usize::from(level == Level::StrictSerializable);
        let want = oracle(&h, level, &ClockBounds::from_ms(drift_ms, &clock_errors_ms));
        let default = Options { level, clock_drift_ms: drift_ms, clock_errors_ms, ..Options::default() };
        let variant = Options {
            prune: rng.gen_bool(0.5),
            coalesce: rng.gen_bool(0.5),
            combine: rng.gen_bool(0.5),
            reachability: backends[rng.gen_range(0..backends.len())],
            ..default.clone()
        };
        for opts in [&default, &variant] {
            let report = verify(&h, opts).unwrap_or_else(|e| panic!("case {case}: verify failed: {e}"));
            assert_eq!(
                report.is_accept(),
                want,
                "case {case}: verifier says {:?}, oracle says {want}, options {opts:?}\nhistory: {:#?}\n{}",
                report.verdict,
                h.transactions,
                report.render_text()
            );
            if let Some(a) = report.anomalies.first() {
                *classes.entry(a.class.name()).or_default() += 1;
                // A strict reject of a serializable history can only come from real time, and must say so.
                if level == Level::StrictSerializable && oracle(&h, Level::Serializable, &uniform(drift_ms)) {
                    assert!(
                        a.uses_real_time,
                        "case {case}: a real-time reject does not say so\n{}",
                        report.render_text()
                    );
                    realtime_only += 1;
                }
            }
            let summary = check_report_detailed(&h, &report).unwrap_or_else(|e| {
                panic!(
                    "case {case}: report does not check: {e}\n{}\n{:#?}",
                    report.render_text(),
                    h.transactions
                )
            });
            if case % 4 == 0 {
                tamper(&h, &report, &mut rng);
            }
            if report
                .anomalies
                .first()
                .is_some_and(|a| a.refutation.is_some() || summary.derivations_assumed > 0)
            {
                solver_rejects += 1;
                // Small cores must come with a full proof by cases.
                assert_eq!(
                    summary.refutations_proved,
                    1,
                    "case {case}: no checked refutation\n{}",
                    report.render_text()
                );
            }
        }
        total[li] += 1;
        rejects[li] += usize::from(!want);
    }
    let share = |i: usize| rejects[i] as f64 / total[i].max(1) as f64;
    println!(
        "{count} histories: serializable rejects {}/{} ({:.0}%), strict rejects {}/{} ({:.0}%)",
        rejects[0],
        total[0],
        share(0) * 100.0,
        rejects[1],
        total[1],
        share(1) * 100.0
    );
    println!(
        "reject classes: {classes:?}; strict-only rejects (real time): {realtime_only}; \
         solver rejects with a checked proof by cases: {solver_rejects}"
    );
    assert!(share(0) >= 0.2 && share(0) <= 0.8, "serializable reject share {:.2} is unbalanced", share(0));
    assert!(share(1) >= 0.2 && share(1) <= 0.8, "strict reject share {:.2} is unbalanced", share(1));
}

/// Histories too large for the oracle: here every verdict must come with a proof the independent checker
/// accepts in full (a replayed serial order, or a cycle whose every fact is proved, including solver rejects'
/// proofs by cases), and every technique switched off must give the same verdict.
#[test]
fn larger_histories_get_fully_checked_verdicts_that_agree_across_techniques() {
    let mut rng = StdRng::seed_from_u64(99);
    let (mut accepts, mut rejects) = (0, 0);
    for case in 0..400 {
        let (h, drift_ms) = random_history_sized(&mut rng, 60, 8);
        let level = if rng.gen_bool(0.5) { Level::Serializable } else { Level::StrictSerializable };
        let base = Options { level, clock_drift_ms: drift_ms, ..Options::default() };
        let report = verify(&h, &base).unwrap();
        let summary = check_report_detailed(&h, &report)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{}", report.render_text()));
        let proved = report.is_accept()
            || summary.refutations_proved > 0
            || (summary.derivations_assumed == 0 && summary.derivations_omitted == 0);
        assert!(
            proved,
            "case {case}: the verdict is not fully proved: {summary:?}\n{}",
            report.render_text()
        );
        if report.is_accept() {
            accepts += 1;
        } else {
            rejects += 1;
        }
        for (prune, coalesce, combine) in [(false, true, true), (true, false, true), (true, true, false)] {
            let opts = Options { prune, coalesce, combine, ..base.clone() };
            let other = verify(&h, &opts).unwrap();
            assert_eq!(other.verdict, report.verdict, "case {case}: {opts:?} disagrees");
            check_report_detailed(&h, &other).unwrap_or_else(|e| panic!("case {case} {opts:?}: {e}"));
        }
    }
    println!("larger histories: {accepts} accepted, {rejects} rejected");
    assert!(
        accepts >= 40 && rejects >= 40,
        "{accepts} accepts, {rejects} rejects: the generator is unbalanced"
    );
}

/// Arbitrary, mostly malformed histories (duplicate write ids and transaction ids, repeated sequence
/// numbers, reads of anything, log gaps): the verifier must answer without panicking, and its own report
/// must pass the independent check.
#[test]
fn malformed_histories_get_a_verdict_that_checks() {
    let mut rng = StdRng::seed_from_u64(5);
    for case in 0..3000 {
        let mut h = History::default();
        for k in 0..3 {
            h.keys.intern(KeyName { namespace: "t".into(), bytes: vec![k] });
        }
        for i in 0..rng.gen_range(0..8u64) {
            let id = if rng.gen_bool(0.1) { TxnId(1) } else { TxnId(i + 1) };
            let mut t = Transaction::new(id, SessionId(rng.gen_range(0..3)), rng.gen_range(0..4));
            t.outcome = [Outcome::Committed, Outcome::Aborted, Outcome::Indeterminate][rng.gen_range(0..3)];
            if rng.gen_bool(0.7) {
                t.start_ns = Some(rng.gen_range(0..1_000_000_000));
                t.commit_ns = Some(rng.gen_range(0..1_000_000_000));
            }
            for _ in 0..rng.gen_range(0..5) {
                let key = Key(rng.gen_range(0..3));
                let w = WriteId(rng.gen_range(0..12));
                t.ops.push(if rng.gen_bool(0.5) {
                    Op::Write { key, write: w, stmt: None }
                } else {
                    let observed = match rng.gen_range(0..4) {
                        0 => Observed::Absent,
                        1 => Observed::PreHistory(rng.gen_range(0..2)),
                        _ => Observed::Version(w),
                    };
                    Op::Read { key, observed, stmt: None }
                });
            }
            h.transactions.push(t);
        }
        if rng.gen_bool(0.2) {
            h.gaps.push(history::LogGap { after_txns: rng.gen_range(0..8) });
        }
        let level = if rng.gen_bool(0.5) { Level::Serializable } else { Level::StrictSerializable };
        let opts =
            Options { level, prune: rng.gen_bool(0.7), combine: rng.gen_bool(0.7), ..Options::default() };
        let report = match verify(&h, &opts) {
            Ok(r) => r,
            Err(verifier::VerifyError::Malformed(_)) => {
                let mut ids: Vec<TxnId> = h.transactions.iter().map(|t| t.id).collect();
                ids.sort_unstable();
                ids.dedup();
                assert!(ids.len() < h.transactions.len(), "case {case}: malformed without a repeated id");
                continue;
            }
            Err(e) => panic!("case {case}: {e}"),
        };
        check_report_detailed(&h, &report)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{}\n{:#?}", report.render_text(), h.transactions));
    }
}

/// A random history of mostly blind writes of few keys across few sessions, in the shape that makes one
/// chain per write (see `tests/blind_writes.rs`): transactions run serially against a store, and each read
/// returns the store's version, or, half of the time, any version of the key, which session order may say
/// was already overwritten (a stale read) or not yet written.
fn blind_write_history(rng: &mut StdRng) -> (History, u64) {
    let keys = rng.gen_range(1..=2u32);
    let mut h = History::default();
    for k in 0..keys {
        h.keys.intern(KeyName { namespace: String::new(), bytes: format!("k{k}").into_bytes() });
    }
    let n = rng.gen_range(2..=8);
    let sessions = rng.gen_range(1..=3u64);
    let mut store: HashMap<Key, Observed> = HashMap::new();
    let mut written: Vec<Vec<WriteId>> = vec![Vec::new(); keys as usize];
    let mut txns = Vec::new();
    let mut clock = 1_000_000u64;
    for i in 0..n {
        let session = SessionId(rng.gen_range(0..sessions));
        let seq = txns.iter().filter(|t: &&Transaction| t.session == session).count() as u64;
        let mut t = Transaction::new(TxnId(i as u64 + 1), session, seq);
        t.outcome = if rng.gen_range(0..100) < 5 { Outcome::Aborted } else { Outcome::Committed };
        t.collector = CollectorId(0);
        let mut own: HashMap<Key, Observed> = HashMap::new();
        for _ in 0..rng.gen_range(1..=2) {
            let key = Key(rng.gen_range(0..keys));
            if rng.gen_bool(0.65) {
                let w = WriteId(i as u64 * 10 + t.ops.len() as u64 + 1);
                own.insert(key, Observed::Version(w));
                written[key.0 as usize].push(w);
                t.ops.push(Op::Write { key, write: w, stmt: None });
            } else if own.contains_key(&key) {
                continue;
            } else {
                let ws = &written[key.0 as usize];
                let observed = if rng.gen_bool(0.5) && !ws.is_empty() {
                    Observed::Version(ws[rng.gen_range(0..ws.len())])
                } else {
                    store.get(&key).copied().unwrap_or(Observed::PreHistory(0))
                };
                t.ops.push(Op::Read { key, observed, stmt: None });
            }
        }
        let start = clock.saturating_sub(rng.gen_range(0..1_500_000));
        clock += rng.gen_range(500_000..2_000_000);
        (t.start_ns, t.commit_ns) = (Some(start), Some(clock));
        if t.outcome == Outcome::Committed {
            store.extend(own);
        }
        txns.push(t);
    }
    h.transactions = txns;
    (h, [0u64, 1][rng.gen_range(0..2)])
}

/// Many blind writes of one key by one session are chains that session order sorts, and only neighbours get
/// a constraint (`constraints.rs`); the verdicts must stay the oracle's, with every technique on or off.
#[test]
fn blind_writes_of_few_keys_across_few_sessions_agree_with_brute_force() {
    let count: usize =
        std::env::var("KRAIT_ORACLE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000) / 4;
    let mut rng = StdRng::seed_from_u64(0x626c_696e_6477);
    let (mut accepts, mut rejects, mut runs, mut unread) = (0usize, 0usize, 0usize, 0usize);
    for case in 0..count {
        let (h, drift_ms) = blind_write_history(&mut rng);
        // Histories where one session wrote one key three times or more: non-neighbours of a run.
        let mut writes: HashMap<(SessionId, Key), usize> = HashMap::new();
        for t in &h.transactions {
            for op in &t.ops {
                if let Op::Write { key, .. } = *op {
                    *writes.entry((t.session, key)).or_default() += 1;
                }
            }
        }
        runs += usize::from(writes.values().any(|&w| w >= 3));
        let level = if rng.gen_bool(0.5) { Level::Serializable } else { Level::StrictSerializable };
        let want = oracle(&h, level, &uniform(drift_ms));
        let default = Options { level, clock_drift_ms: drift_ms, ..Options::default() };
        let variant = Options { prune: rng.gen_bool(0.5), coalesce: rng.gen_bool(0.5), ..default.clone() };
        for opts in [&default, &variant] {
            let report = verify(&h, opts).unwrap_or_else(|e| panic!("case {case}: verify failed: {e}"));
            unread += usize::from(opts == &default && report.counts.unread_pairs > 0);
            assert_eq!(
                report.is_accept(),
                want,
                "case {case}: verifier says {:?}, oracle says {want}, options {opts:?}\n{}\n{}",
                report.verdict,
                common::compact(&h),
                report.render_text()
            );
            check_report_detailed(&h, &report).unwrap_or_else(|e| {
                panic!(
                    "case {case}: report does not check: {e}\n{}\n{}",
                    report.render_text(),
                    common::compact(&h)
                )
            });
        }
        if want {
            accepts += 1;
        } else {
            rejects += 1;
        }
    }
    println!(
        "{count} blind-write histories: {accepts} accepted, {rejects} rejected; {runs} with a session that \
         wrote one key three times or more; {unread} with pairs of unread blind writes that got no constraint"
    );
    assert!(runs >= count / 4, "only {runs} histories have a run of three chains");
    assert!(unread >= count / 4, "only {unread} histories skip a pair of unread chains");
    assert!(
        accepts >= count / 5 && rejects >= count / 8,
        "{accepts} accepts, {rejects} rejects: the generator is unbalanced"
    );
}
