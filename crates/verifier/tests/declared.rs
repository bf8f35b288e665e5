//! `declared`: each transaction held to the isolation level it asked for, against a brute-force oracle.
//!
//! The oracle knows nothing of dependency graphs. It tries every commit order of the committed transactions
//! (keeping session order) and asks, for each transaction at its place, whether its level explains its
//! reads:
//! - SERIALIZABLE (and a transaction without a recorded level): every external read returns the latest
//!   version committed before it;
//! - REPEATABLE READ (snapshot isolation): some start point, after its session's earlier transactions, whose
//!   prefix's latest versions are what it read, and no transaction committed after that point wrote a key it
//!   writes (first committer wins);
//! - READ COMMITTED and READ UNCOMMITTED (Adya's PL-2): every external read returns a version committed
//!   before it, any of them.

use std::collections::HashMap;

use history::{
    CollectorId, History, HistoryBuilder, IsolationLevel, Key, KeyName, Observed, Op, Outcome, SessionId,
    Transaction, TxnId, WriteId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use verifier::{AnomalyClass, Level, Options, Verdict, check_report, verify};

mod common;
use common::{Held, compact, oracle, random_history};

fn at(level: Level) -> Options {
    Options { level, ..Options::default() }
}

fn declared() -> Options {
    at(Level::Declared)
}

/// What the oracle holds a transaction to: the level it declared, serializable when it declared none.
fn held(t: &Transaction) -> Held {
    match t.isolation {
        None | Some(IsolationLevel::Serializable) => Held::Serializable,
        Some(IsolationLevel::RepeatableRead) => Held::Snapshot,
        Some(IsolationLevel::ReadCommitted | IsolationLevel::ReadUncommitted) => Held::ReadCommitted,
    }
}

fn random_level(rng: &mut StdRng) -> Option<IsolationLevel> {
    match rng.gen_range(0..10) {
        0 => None,
        1 => Some(IsolationLevel::ReadUncommitted),
        2..=4 => Some(IsolationLevel::ReadCommitted),
        5..=7 => Some(IsolationLevel::RepeatableRead),
        _ => Some(IsolationLevel::Serializable),
    }
}

/// A random history from a simulated store that runs each transaction at its level, one op at a time in a
/// random interleaving: snapshot reads and first-committer-wins for repeatable read and serializable (so
/// write skew among serializable ones gets through, as it would without PostgreSQL's SSI), the latest
/// committed version at each read and no write-conflict check for read committed (so lost updates do).
/// Then, sometimes, one read is perturbed.
fn random_mixed_history(rng: &mut StdRng) -> History {
    let keys = 3u32;
    let mut h = History::default();
    for k in 0..keys {
        h.keys.intern(KeyName { namespace: String::new(), bytes: format!("k{k}").into_bytes() });
    }
    let n = rng.gen_range(2..=6usize);
    let sessions = rng.gen_range(1..=3u64);
    let uniform = rng.gen_bool(0.2).then(|| random_level(rng));
    let mut txns: Vec<Transaction> = (0..n)
        .map(|i| {
            let mut t = Transaction::new(TxnId(i as u64 + 1), SessionId(rng.gen_range(0..sessions)), 0);
            t.collector = CollectorId(0);
            t.isolation = uniform.unwrap_or_else(|| random_level(rng));
            t
        })
        .collect();
    let plans: Vec<Vec<(Key, bool)>> = (0..n)
        .map(|_| {
            (0..rng.gen_range(1..=4)).map(|_| (Key(rng.gen_range(0..keys)), rng.gen_bool(0.5))).collect()
        })
        .collect();
    // states[c]: the latest committed version of each key after c commits.
    let mut states: Vec<HashMap<Key, Observed>> = vec![HashMap::new()];
    let mut last_commit_of: HashMap<Key, usize> = HashMap::new();
    let mut started: Vec<Option<usize>> = vec![None; n];
    let mut done_ops = vec![0usize; n];
    let mut ended = vec![false; n];
    let mut own: Vec<HashMap<Key, WriteId>> = vec![HashMap::new(); n];
    let mut next_write = 1u64;
    let previous_in_session =
        |txns: &[Transaction], i: usize| (0..i).rev().find(|&j| txns[j].session == txns[i].session);
    while ended.iter().any(|e| !e) {
        let runnable: Vec<usize> = (0..n)
            .filter(|&i| {
                !ended[i] && (started[i].is_some() || previous_in_session(&txns, i).is_none_or(|j| ended[j]))
            })
            .collect();
        let i = runnable[rng.gen_range(0..runnable.len())];
        let commits = states.len() - 1;
        let Some(start) = started[i] else {
            started[i] = Some(commits);
            continue;
        };
        if let Some(&(key, write)) = plans[i].get(done_ops[i]) {
            done_ops[i] += 1;
            if write {
                let w = WriteId(next_write);
                next_write += 1;
                own[i].insert(key, w);
                txns[i].ops.push(Op::Write { key, write: w, stmt: None });
            } else {
                let snapshot = match held(&txns[i]) {
                    Held::ReadCommitted => commits,
                    Held::Snapshot | Held::Serializable => start,
                };
                let observed = match own[i].get(&key) {
                    Some(&w) => Observed::Version(w),
                    None => states[snapshot].get(&key).copied().unwrap_or(Observed::PreHistory(0)),
                };
                txns[i].ops.push(Op::Read { key, observed, stmt: None });
            }
            continue;
        }
        ended[i] = true;
        let conflict = held(&txns[i]) != Held::ReadCommitted
            && own[i].keys().any(|k| last_commit_of.get(k).is_some_and(|&c| c >= start));
        if conflict || rng.gen_range(0..100) < 5 {
            txns[i].outcome = Outcome::Aborted;
            continue;
        }
        txns[i].outcome = Outcome::Committed;
        let mut state = states[commits].clone();
        for (&k, &w) in &own[i] {
            state.insert(k, Observed::Version(w));
            last_commit_of.insert(k, commits);
        }
        states.push(state);
    }
    if rng.gen_bool(0.3) {
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
                    0..=84 if !same.is_empty() => Observed::Version(same[rng.gen_range(0..same.len())]),
                    _ => Observed::PreHistory(0),
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

fn with_levels(mut h: History, level: impl Fn(usize) -> Option<IsolationLevel>) -> History {
    for (i, t) in h.transactions.iter_mut().enumerate() {
        t.isolation = level(i);
    }
    h
}

#[test]
fn declared_levels_agree_with_brute_force_and_every_report_checks() {
    let mut rng = StdRng::seed_from_u64(0xdec_1a4ed);
    let (mut accepts, mut rejects, mut mixed_accepts_not_ser) = (0u64, 0u64, 0u64);
    for i in 0..20_000 {
        let h = if i % 3 == 2 {
            let h = random_history(&mut rng);
            let levels: Vec<Option<IsolationLevel>> =
                (0..h.transactions.len()).map(|_| random_level(&mut rng)).collect();
            with_levels(h, |i| levels[i])
        } else {
            random_mixed_history(&mut rng)
        };
        let r = verify(&h, &declared()).unwrap_or_else(|e| panic!("history {i}: {e}\n{}", compact(&h)));
        let expected = oracle(&h, held);
        assert_eq!(r.is_accept(), expected, "history {i}:\n{}\n{}", compact_levels(&h), r.render_text());
        if let Err(e) = check_report(&h, &r) {
            panic!(
                "history {i}: the report does not check: {e}\n{}\n{}",
                r.render_text(),
                compact_levels(&h)
            );
        }
        let unpruned = verify(&h, &Options { prune: false, ..declared() }).unwrap();
        assert_eq!(unpruned.verdict, r.verdict, "history {i} without pruning:\n{}", compact_levels(&h));
        // The lattice: what serializability accepts, declared levels accept; and declared levels accept
        // nothing that every transaction's own weakest level (read committed as PL-2) would not.
        let ser = verify(&h, &Options::default()).unwrap().is_accept();
        assert!(
            !ser || expected,
            "history {i}: serializable but not at its declared levels:\n{}",
            compact_levels(&h)
        );
        match expected {
            true => accepts += 1,
            false => rejects += 1,
        }
        mixed_accepts_not_ser += u64::from(expected && !ser);
    }
    assert!(
        accepts > 3_000 && rejects > 3_000 && mixed_accepts_not_ser > 300,
        "{accepts} {rejects} {mixed_accepts_not_ser}"
    );
}

/// With one level for every transaction, `declared` is that level: serializable and snapshot isolation
/// exactly, and read committed as Adya's PL-2 (which the `read-committed` level's definition implies).
#[test]
fn uniform_declared_levels_are_the_uniform_levels() {
    let mut rng = StdRng::seed_from_u64(0x0e_1e7e15);
    for i in 0..3_000 {
        let base = random_history(&mut rng);
        let ser = with_levels(base.clone(), |_| Some(IsolationLevel::Serializable));
        let unknown = with_levels(base.clone(), |_| None);
        let si = with_levels(base.clone(), |_| Some(IsolationLevel::RepeatableRead));
        let rc = with_levels(base.clone(), |_| Some(IsolationLevel::ReadCommitted));
        let verdict = |h: &History, o: Options| verify(h, &o).unwrap().is_accept();
        assert_eq!(verdict(&ser, declared()), verdict(&base, Options::default()), "{i}:\n{}", compact(&base));
        assert_eq!(verdict(&unknown, declared()), verdict(&base, Options::default()), "{i}");
        assert_eq!(verdict(&si, declared()), verdict(&base, at(Level::SnapshotIsolation)), "{i}");
        if verdict(&base, at(Level::ReadCommitted)) {
            assert!(verdict(&rc, declared()), "{i}: read committed but not PL-2:\n{}", compact(&base));
        }
    }
}

fn compact_levels(h: &History) -> String {
    let levels: Vec<String> =
        h.transactions.iter().map(|t| format!("{}:{:?}", t.id, t.isolation.map(|l| l.sql_name()))).collect();
    format!("{}levels: {}", compact(h), levels.join(" "))
}

fn write_skew(l1: IsolationLevel, l2: IsolationLevel) -> History {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
        .build();
    with_levels(h, |i| Some([l1, l2][i]))
}

/// Write skew is allowed unless both transactions asked for SERIALIZABLE (PostgreSQL's SSI tracks only
/// serializable transactions' reads); the reject names it and re-checks, and does not check once a level is
/// lowered.
#[test]
fn write_skew_is_rejected_only_between_serializable_transactions() {
    use IsolationLevel::*;
    for (l1, l2, accept) in [
        (Serializable, Serializable, false),
        (Serializable, RepeatableRead, true),
        (RepeatableRead, RepeatableRead, true),
        (ReadCommitted, Serializable, true),
    ] {
        let h = write_skew(l1, l2);
        let r = verify(&h, &declared()).unwrap();
        assert_eq!(r.is_accept(), accept, "{l1} {l2}: {}", r.render_text());
        assert_eq!(oracle(&h, held), accept);
        check_report(&h, &r).unwrap_or_else(|e| panic!("{l1} {l2}: {e}\n{}", r.render_text()));
        if !accept {
            assert_eq!(r.anomalies[0].class, AnomalyClass::WriteSkew, "{}", r.render_text());
            let lowered = with_levels(h.clone(), |i| Some([Serializable, RepeatableRead][i]));
            assert!(
                check_report(&lowered, &r).is_err(),
                "a write-skew cycle through a snapshot reader's two rw"
            );
        }
    }
}

/// A lost update is allowed at READ COMMITTED and not at REPEATABLE READ; a non-repeatable read likewise.
#[test]
fn read_committed_transactions_may_lose_updates_and_reread() {
    use IsolationLevel::*;
    let lost = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").write("x", 1))
        .txn(2, |t| t.read_init("x").write("x", 2))
        .build();
    let reread =
        HistoryBuilder::new().txn(1, |t| t.write("x", 1)).txn(2, |t| t.read_init("x").read("x", 1)).build();
    for (h, class) in [(lost, AnomalyClass::LostUpdate), (reread, AnomalyClass::NonRepeatableRead)] {
        let rc = with_levels(h.clone(), |_| Some(ReadCommitted));
        let r = verify(&rc, &declared()).unwrap();
        assert!(r.is_accept(), "{}", r.render_text());
        check_report(&rc, &r).unwrap();
        let rr = with_levels(h.clone(), |_| Some(RepeatableRead));
        let r = verify(&rr, &declared()).unwrap();
        assert_eq!(r.verdict, Verdict::Reject);
        assert_eq!(r.anomalies[0].class, class, "{}", r.render_text());
        check_report(&rr, &r).unwrap();
        // The same report over the read-committed history does not check.
        assert!(check_report(&rc, &r).is_err());
    }
}

/// A non-repeatable read's report cites the write of the version read second, so that a replay can commit
/// it between the two reads, and the report checker holds the report to it.
#[test]
fn a_non_repeatable_read_cites_the_write_of_the_version_read_second() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 3).write("x", 1))
        .txn(2, |t| t.read_init("x").read("x", 1))
        .build();
    let h = with_levels(h, |_| Some(IsolationLevel::RepeatableRead));
    let r = verify(&h, &declared()).unwrap();
    let a = &r.anomalies[0];
    assert_eq!(a.class, AnomalyClass::NonRepeatableRead, "{}", r.render_text());
    let cited: Vec<(u64, usize)> = a.ops.iter().map(|o| (o.txn.0, o.op)).collect();
    assert_eq!(cited, vec![(2, 0), (2, 1), (1, 1)], "{}", r.render_text());
    check_report(&h, &r).unwrap();
    // Citing the writer's earlier write of the key instead does not check.
    let mut wrong = r.clone();
    wrong.anomalies[0].ops[2].op = 0;
    assert!(check_report(&h, &wrong).is_err());
}

/// The report says which levels it held transactions to, and that READ UNCOMMITTED runs as READ
/// COMMITTED.
#[test]
fn the_report_lists_the_declared_levels() {
    let h = with_levels(write_skew(IsolationLevel::Serializable, IsolationLevel::Serializable), |i| {
        [Some(IsolationLevel::ReadUncommitted), None][i]
    });
    let r = verify(&h, &declared()).unwrap();
    assert!(r.is_accept(), "{}", r.render_text());
    let d = r.declared.as_ref().expect("declared levels in the report");
    assert_eq!((d.read_uncommitted, d.unrecorded, d.serializable), (1, 1, 0));
    let text = r.render_text();
    assert!(text.contains("PostgreSQL runs it as read committed"), "{text}");
    assert!(r.verdict_line().contains("levels its transactions asked for"), "{}", r.verdict_line());
    let json = r.to_json();
    assert!(json.contains("\"level\": \"declared\""), "{json}");
}

/// A reject that rests on a transaction without a recorded level (held to serializability) says so in the
/// anomaly, naming that transaction; one every level forbids, and one among recorded levels, do not.
#[test]
fn an_anomaly_names_the_transactions_it_held_to_serializability_for_want_of_a_level() {
    use IsolationLevel::Serializable as S;
    let note = "no recorded isolation level";
    let r = verify(&with_levels(write_skew(S, S), |i| [Some(S), None][i]), &declared()).unwrap();
    assert_eq!(r.verdict, Verdict::Reject, "{}", r.render_text());
    let summary = &r.anomalies[0].summary;
    assert!(summary.contains(&format!("T2 has {note} and was held to serializability")), "{summary}");
    assert!(!summary.contains("T1 has"), "{summary}");
    let r = verify(&with_levels(write_skew(S, S), |_| None), &declared()).unwrap();
    assert!(r.anomalies[0].summary.contains(&format!("T1, T2 have {note}")), "{}", r.anomalies[0].summary);
    // Recorded levels only: nothing to say.
    let r = verify(&write_skew(S, S), &declared()).unwrap();
    assert!(!r.anomalies[0].summary.contains(note), "{}", r.anomalies[0].summary);
    // A read of an aborted write is a violation at every level.
    let h = HistoryBuilder::new().aborted(1, |t| t.write("x", 1)).txn(2, |t| t.read("x", 1)).build();
    let r = verify(&with_levels(h, |_| None), &declared()).unwrap();
    assert_eq!(r.anomalies[0].class, AnomalyClass::G1a, "{}", r.render_text());
    assert!(!r.anomalies[0].summary.contains(note), "{}", r.anomalies[0].summary);
}
