//! Snapshot isolation against a brute-force oracle, the lattice around it, `check_report` on every report,
//! named anomalies, and the corpus.
//!
//! The oracle knows nothing of dependency graphs: it is SI's operational definition. It tries every commit
//! order of the committed transactions and asks, for each transaction at its place, whether some start point
//! (a prefix of the commits before it) works: every external read returns that prefix's latest version of its
//! key, no transaction that committed after the start point wrote a key it writes (first committer wins), and
//! its session's earlier transactions had committed before it started (strong session SI, what PostgreSQL's
//! REPEATABLE READ gives one connection).

use std::collections::HashMap;

use history::{
    CollectorId, History, HistoryBuilder, Key, KeyName, Observed, Op, Outcome, SessionId, Transaction, TxnId,
    WriteId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use verifier::{AnomalyClass, EdgeKind, Level, Options, Verdict, check_report, verify};

mod common;
use common::{Held, compact, oracle, random_history};

fn si() -> Options {
    Options { level: Level::SnapshotIsolation, ..Options::default() }
}

/// A random history from a simulated SI store: transactions start and commit in a random interleaving (a
/// session's next one starts after its previous one ended), read their start snapshot and their own writes,
/// and abort when a concurrent transaction committed a key they write first. Then, sometimes, a read is
/// perturbed (another write of its key, an initial version, garbage), which usually breaks SI.
fn random_si_history(rng: &mut StdRng) -> History {
    let keys = 3u32;
    let mut h = History::default();
    for k in 0..keys {
        h.keys.intern(KeyName { namespace: String::new(), bytes: format!("k{k}").into_bytes() });
    }
    let n = rng.gen_range(2..=6usize);
    let sessions = rng.gen_range(1..=3u64);
    let mut txns: Vec<Transaction> = (0..n)
        .map(|i| {
            let mut t = Transaction::new(TxnId(i as u64 + 1), SessionId(rng.gen_range(0..sessions)), 0);
            t.collector = CollectorId(0);
            t
        })
        .collect();
    // Each transaction's plan: reads and writes of random keys.
    let plans: Vec<Vec<(Key, bool)>> = (0..n)
        .map(|_| {
            (0..rng.gen_range(1..=4)).map(|_| (Key(rng.gen_range(0..keys)), rng.gen_bool(0.5))).collect()
        })
        .collect();
    let mut committed_state: HashMap<Key, (Observed, usize)> = HashMap::new();
    let mut commits = 0usize;
    // Per transaction: None (not started), Some(commits at start).
    let mut started: Vec<Option<usize>> = vec![None; n];
    let mut ended = vec![false; n];
    let mut last_commit_of: HashMap<Key, usize> = HashMap::new();
    let mut next_write = 1u64;
    let previous_in_session =
        |txns: &[Transaction], i: usize| (0..i).rev().find(|&j| txns[j].session == txns[i].session);
    while ended.iter().any(|e| !e) {
        let can_start: Vec<usize> = (0..n)
            .filter(|&i| started[i].is_none() && previous_in_session(&txns, i).is_none_or(|j| ended[j]))
            .collect();
        let can_end: Vec<usize> = (0..n).filter(|&i| started[i].is_some() && !ended[i]).collect();
        let pick_start = !can_start.is_empty() && (can_end.is_empty() || rng.gen_bool(0.5));
        if pick_start {
            let i = can_start[rng.gen_range(0..can_start.len())];
            started[i] = Some(commits);
            let mut own: HashMap<Key, WriteId> = HashMap::new();
            for &(key, write) in &plans[i] {
                if write {
                    let w = WriteId(next_write);
                    next_write += 1;
                    own.insert(key, w);
                    txns[i].ops.push(Op::Write { key, write: w, stmt: None });
                } else {
                    let observed = match own.get(&key) {
                        Some(&w) => Observed::Version(w),
                        None => committed_state.get(&key).map_or(Observed::PreHistory(0), |v| v.0),
                    };
                    txns[i].ops.push(Op::Read { key, observed, stmt: None });
                }
            }
        } else {
            let i = can_end[rng.gen_range(0..can_end.len())];
            ended[i] = true;
            let start = started[i].unwrap_or(0);
            let writes: Vec<(Key, WriteId)> = txns[i]
                .ops
                .iter()
                .filter_map(|op| match *op {
                    Op::Write { key, write, .. } => Some((key, write)),
                    _ => None,
                })
                .collect();
            let conflict = writes.iter().any(|(k, _)| last_commit_of.get(k).is_some_and(|&c| c >= start));
            if conflict || rng.gen_range(0..100) < 5 {
                txns[i].outcome = Outcome::Aborted;
                continue;
            }
            txns[i].outcome = Outcome::Committed;
            for (k, w) in writes {
                committed_state.insert(k, (Observed::Version(w), commits));
                last_commit_of.insert(k, commits);
            }
            commits += 1;
        }
    }
    if rng.gen_bool(0.35) {
        let all_writes: Vec<(Key, WriteId)> = txns
            .iter()
            .flat_map(|t| t.ops.iter())
            .filter_map(|op| match *op {
                Op::Write { key, write, .. } => Some((key, write)),
                _ => None,
            })
            .collect();
        let ti = rng.gen_range(0..n);
        let reads: Vec<usize> =
            (0..txns[ti].ops.len()).filter(|&i| matches!(txns[ti].ops[i], Op::Read { .. })).collect();
        if !reads.is_empty() {
            let oi = reads[rng.gen_range(0..reads.len())];
            if let Op::Read { key, .. } = txns[ti].ops[oi] {
                let same: Vec<WriteId> =
                    all_writes.iter().filter(|(k, _)| *k == key).map(|(_, w)| *w).collect();
                let observed = match rng.gen_range(0..100) {
                    0..=79 if !same.is_empty() => Observed::Version(same[rng.gen_range(0..same.len())]),
                    0..=94 => Observed::PreHistory(0),
                    _ => Observed::Version(WriteId(9_999)),
                };
                txns[ti].ops[oi] = Op::Read { key, observed, stmt: None };
            }
        }
    }
    let mut seq: HashMap<SessionId, u64> = HashMap::new();
    for t in &mut txns {
        let s = seq.entry(t.session).or_insert(0);
        t.seq = *s;
        *s += 1;
    }
    h.transactions = txns;
    h
}

#[test]
fn snapshot_isolation_agrees_with_brute_force_and_every_report_checks() {
    let mut rng = StdRng::seed_from_u64(0x5a9_5107);
    let (mut accepts, mut rejects, mut si_not_ser) = (0u64, 0u64, 0u64);
    for i in 0..20_000 {
        let h = if i % 2 == 0 { random_si_history(&mut rng) } else { random_history(&mut rng) };
        let r = verify(&h, &si()).unwrap_or_else(|e| panic!("history {i}: {e}\n{}", compact(&h)));
        let expected = oracle(&h, |_| Held::Snapshot);
        let unpruned = verify(&h, &Options { prune: false, ..si() }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(unpruned.verdict, r.verdict, "history {i} without pruning:\n{}", compact(&h));
        check_report(&h, &unpruned).unwrap_or_else(|e| panic!("history {i} without pruning: {e}"));
        assert_eq!(r.is_accept(), expected, "history {i}:\n{}\n{}", compact(&h), r.render_text());
        if let Err(e) = check_report(&h, &r) {
            panic!("history {i}: the report does not check: {e}\n{}\n{}", r.render_text(), compact(&h));
        }
        // The lattice: serializable ⇒ snapshot isolation ⇒ causal ⇒ read committed.
        let ser = verify(&h, &Options::default()).unwrap_or_else(|e| panic!("{e}")).is_accept();
        let at = |level| verify(&h, &Options { level, ..Options::default() }).unwrap().is_accept();
        let (cc, rc) = (at(Level::Causal), at(Level::ReadCommitted));
        assert!(
            if expected { cc && rc } else { !ser },
            "history {i}: ser {ser} si {expected} causal {cc} rc {rc}:\n{}",
            compact(&h)
        );
        match expected {
            true => accepts += 1,
            false => rejects += 1,
        }
        si_not_ser += u64::from(expected && !ser);
    }
    // Both verdicts, and histories that only SI allows (write skew and its kin), must be exercised.
    assert!(accepts > 3_000 && rejects > 3_000 && si_not_ser > 150, "{accepts} {rejects} {si_not_ser}");
}

/// Write skew is snapshot isolated and not serializable; SI's report replays its order, and a tampered order
/// does not check.
#[test]
fn write_skew_is_snapshot_isolated() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
        .build();
    let r = verify(&h, &si()).unwrap();
    assert!(r.is_accept(), "{}", r.render_text());
    assert!(r.verdict_line().contains("snapshot isolated"), "{}", r.verdict_line());
    check_report(&h, &r).unwrap();
    let ser = verify(&h, &Options::default()).unwrap();
    assert!(!ser.is_accept());
    // SER's write-skew cycle has two adjacent rw edges: relabelled as an SI report it does not check.
    let mut relabelled = ser.clone();
    relabelled.level = Level::SnapshotIsolation;
    assert!(check_report(&h, &relabelled).is_err(), "{}", ser.render_text());

    // T2 read-modify-wrote T1's x, so T2's version follows T1's: the order T2, T1 puts them the other way
    // round, and T1 → T2 (wr) → T1 (ww) is a cycle of dependencies.
    let h =
        HistoryBuilder::new().txn(1, |t| t.write("x", 1)).txn(2, |t| t.read("x", 1).write("x", 2)).build();
    let r = verify(&h, &si()).unwrap();
    check_report(&h, &r).unwrap();
    let mut tampered = r.clone();
    tampered.serial_order = Some(vec![TxnId(2), TxnId(1)]);
    assert!(check_report(&h, &tampered).is_err());
}

/// A long fork: T3 saw T1 and not T2, T4 saw T2 and not T1. Rejected at SI with the four-edge cycle.
#[test]
fn a_long_fork_is_not_snapshot_isolated() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.write("y", 2))
        .txn(3, |t| t.read("x", 1).read_init("y"))
        .txn(4, |t| t.read_init("x").read("y", 2))
        .build();
    let r = verify(&h, &si()).unwrap();
    assert_eq!(r.verdict, Verdict::Reject, "{}", r.render_text());
    let a = &r.anomalies[0];
    assert_eq!(a.class, AnomalyClass::LongFork, "{}", r.render_text());
    let kinds: Vec<EdgeKind> = a.cycle.iter().map(|e| e.kind).collect();
    assert_eq!(kinds.iter().filter(|&&k| k == EdgeKind::Rw).count(), 2, "{kinds:?}");
    check_report(&h, &r).unwrap();
    assert!(!oracle(&h, |_| Held::Snapshot));
}

/// Read skew: T2 saw T1's y but read x from before T1; one anti-dependency: a causality violation.
#[test]
fn read_skew_is_a_causality_violation() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1).write("y", 2))
        .txn(2, |t| t.read_init("x").read("y", 2))
        .build();
    let r = verify(&h, &si()).unwrap();
    assert_eq!(r.verdict, Verdict::Reject);
    assert_eq!(r.anomalies[0].class, AnomalyClass::CausalityViolation, "{}", r.render_text());
    check_report(&h, &r).unwrap();
}

/// A lost update (two read-modify-writes of one version) is not SI, and a cycle that needs the solver's
/// choice comes with a refutation by cases that checks.
#[test]
fn lost_updates_and_solver_rejects_are_evidenced() {
    let lost = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").write("x", 1))
        .txn(2, |t| t.read_init("x").write("x", 2))
        .build();
    let r = verify(&lost, &si()).unwrap();
    assert_eq!(r.anomalies[0].class, AnomalyClass::LostUpdate, "{}", r.render_text());
    check_report(&lost, &r).unwrap();
    // Two blind writers of x; T3 and T4 read them in opposite orders along with y and z: whichever order
    // the versions of x take, someone's snapshot is impossible.
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1).write("y", 3))
        .txn(2, |t| t.write("x", 2).write("z", 4))
        .txn(3, |t| t.read("y", 3).read("x", 2))
        .txn(4, |t| t.read("z", 4).read("x", 1))
        .build();
    let r = verify(&h, &si()).unwrap();
    assert_eq!(r.is_accept(), oracle(&h, |_| Held::Snapshot), "{}", r.render_text());
    assert_eq!(r.verdict, Verdict::Reject, "{}", r.render_text());
    let summary = verifier::check_report_detailed(&h, &r).unwrap();
    assert!(summary.refutations_proved >= 1, "{summary:?}\n{}", r.render_text());
}

fn corpus(path: &str) -> History {
    let dir = std::env::var("KRAIT_CORPUS").map(std::path::PathBuf::from).unwrap_or_else(|_| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
    });
    let full = dir.join(path);
    assert!(full.exists(), "corpus history {} is missing (set KRAIT_CORPUS)", full.display());
    history::codec::read_history(&full, None).unwrap_or_else(|e| panic!("{path}: cannot read: {e}"))
}

/// The corpus: PolySI's two SI violations are rejected (Galera's as a lost update), what serializability
/// accepts SI accepts, what causal consistency rejects SI rejects, and every report re-checks.
#[test]
fn snapshot_isolation_on_the_corpus() {
    let cases = [
        ("polysi/galera-lost-update.txt", Some(false)),
        ("polysi/yugabyte-si.txt", Some(false)),
        ("cobra/ser-violation/cock-blog", Some(false)),
        ("cobra/ser-violation/cock-G2", None),
        ("cobra/one-shot-chengRW/chengRW-1000", Some(true)),
        ("cobra/one-shot-10k/twitter-10000", Some(true)),
        ("cobra/one-shot-10k/rubis-10000", Some(true)),
    ];
    for (path, expected) in cases {
        let h = corpus(path);
        let start = std::time::Instant::now();
        let r = verify(&h, &si()).unwrap_or_else(|e| panic!("{path}: {e}"));
        println!("{path}: {} in {:?}", r.verdict_line(), start.elapsed());
        if let Some(accept) = expected {
            assert_eq!(r.is_accept(), accept, "{path}: {}", r.render_text());
        }
        if path.contains("galera") {
            assert_eq!(r.anomalies[0].class, AnomalyClass::LostUpdate, "{}", r.render_text());
        }
        verifier::check_report_detailed(&h, &r)
            .unwrap_or_else(|e| panic!("{path}: report does not check: {e}\n{}", r.render_text()));
    }
}
