//! The weak levels (read committed, read atomic, causal) against a brute-force oracle, the lattice between
//! the levels, and `check_report` on every report.
//!
//! The oracle knows nothing of saturation: it tries every total order of the committed transactions and
//! checks Biswas and Enea's axioms (OOPSLA'19, §3) from their definitions: the order keeps session order
//! and write-read order, and whenever a transaction reads a key from T1 after it *saw* another writer W of
//! the key (read committed: an earlier read returned a write of W; read atomic: some read did, or W precedes
//! it in its session; causal: W happens before it, transitively), W comes before T1. Reads must also be
//! well-formed: of committed, final, other transactions' writes, own writes read back, one initial version
//! per key.

use std::collections::HashMap;

use history::{History, HistoryBuilder, Key, Observed, Op, Outcome, SessionId, TxnId, WriteId};
use rand::SeedableRng;
use rand::rngs::StdRng;
use verifier::{AnomalyClass, Level, Options, Verdict, check_report, verify};

mod common;
use common::{compact, random_history};

const WEAK: [Level; 3] = [Level::ReadCommitted, Level::ReadAtomic, Level::Causal];

/// An external read: its op index, key, and writer (`None`: an initial version).
type Read = (usize, Key, Option<usize>);

/// Does some commit order satisfy `level`'s axiom (see the module comment)?
fn oracle(h: &History, level: Level) -> bool {
    let t = &h.transactions;
    let committed: Vec<usize> = (0..t.len()).filter(|&i| t[i].outcome == Outcome::Committed).collect();
    let mut writer: HashMap<WriteId, (usize, Key, usize)> = HashMap::new();
    for (i, tx) in t.iter().enumerate() {
        for (oi, op) in tx.ops.iter().enumerate() {
            if let Op::Write { key, write, .. } = *op {
                writer.insert(write, (i, key, oi));
            }
        }
    }
    let writes_key =
        |i: usize, k: Key| t[i].ops.iter().any(|op| matches!(*op, Op::Write { key, .. } if key == k));
    let is_final = |i: usize, k: Key, oi: usize| {
        !t[i].ops[oi + 1..].iter().any(|op| matches!(*op, Op::Write { key, .. } if key == k))
    };
    // Well-formed reads.
    let mut reads: HashMap<usize, Vec<Read>> = HashMap::new();
    let mut initial: HashMap<Key, Observed> = HashMap::new();
    for &i in &committed {
        let mut own: HashMap<Key, WriteId> = HashMap::new();
        let mut list = Vec::new();
        for (oi, op) in t[i].ops.iter().enumerate() {
            match *op {
                Op::Write { key, write, .. } => {
                    own.insert(key, write);
                }
                Op::Read { key, observed, .. } => {
                    if let Some(&w) = own.get(&key) {
                        if observed != Observed::Version(w) {
                            return false;
                        }
                        continue;
                    }
                    match observed {
                        Observed::Version(w) => match writer.get(&w) {
                            Some(&(j, k, woi))
                                if j != i
                                    && k == key
                                    && t[j].outcome == Outcome::Committed
                                    && is_final(j, k, woi) =>
                            {
                                list.push((oi, key, Some(j)))
                            }
                            _ => return false,
                        },
                        init => {
                            if *initial.entry(key).or_insert(init) != init {
                                return false;
                            }
                            list.push((oi, key, None));
                        }
                    }
                }
            }
        }
        reads.insert(i, list);
    }
    // Happens-before (causal), by transitive closure.
    let n = t.len();
    let mut hb = vec![vec![false; n]; n];
    for &a in &committed {
        for &b in &committed {
            let so = a != b && t[a].session == t[b].session && t[a].seq < t[b].seq;
            let wr = reads[&b].iter().any(|r| r.2 == Some(a));
            hb[a][b] = so || wr;
        }
    }
    for k in 0..n {
        for a in 0..n {
            for b in 0..n {
                if hb[a][k] && hb[k][b] {
                    hb[a][b] = true;
                }
            }
        }
    }
    let seen = |reader: usize, r: &Read| -> Vec<usize> {
        let rs = &reads[&reader];
        match level {
            Level::ReadCommitted => rs.iter().filter(|x| x.0 < r.0).filter_map(|x| x.2).collect(),
            Level::ReadAtomic => {
                let mut v: Vec<usize> = rs.iter().filter_map(|x| x.2).collect();
                v.extend(
                    committed
                        .iter()
                        .filter(|&&w| t[w].session == t[reader].session && t[w].seq < t[reader].seq),
                );
                v
            }
            _ => committed.iter().copied().filter(|&w| hb[w][reader]).collect(),
        }
    };
    // Every order, by backtracking over prefixes: each placed transaction's constraints that involve only
    // placed ones are checked when the last of them is placed.
    let mut pos: Vec<Option<usize>> = vec![None; n];
    let ok_so_far = |pos: &[Option<usize>]| -> bool {
        for &b in &committed {
            let Some(pb) = pos[b] else { continue };
            for &a in &committed {
                if let Some(pa) = pos[a]
                    && (t[a].session == t[b].session && t[a].seq < t[b].seq
                        || reads[&b].iter().any(|r| r.2 == Some(a)))
                    && pa > pb
                {
                    return false;
                }
            }
            for r in &reads[&b] {
                for w in seen(b, r) {
                    if Some(w) == r.2 || w == b || !writes_key(w, r.1) {
                        continue;
                    }
                    match r.2 {
                        None => return false,
                        Some(t1) => {
                            if let (Some(pw), Some(p1)) = (pos[w], pos[t1])
                                && pw > p1
                            {
                                return false;
                            }
                        }
                    }
                }
            }
        }
        true
    };
    fn search(
        placed: usize,
        committed: &[usize],
        pos: &mut Vec<Option<usize>>,
        ok: &dyn Fn(&[Option<usize>]) -> bool,
    ) -> bool {
        if placed == committed.len() {
            return true;
        }
        for &c in committed {
            if pos[c].is_some() {
                continue;
            }
            pos[c] = Some(placed);
            if ok(pos) && search(placed + 1, committed, pos, ok) {
                pos[c] = None;
                return true;
            }
            pos[c] = None;
        }
        false
    }
    search(0, &committed, &mut pos, &ok_so_far)
}

#[test]
fn weak_levels_agree_with_brute_force_and_every_report_checks() {
    let mut rng = StdRng::seed_from_u64(0x1e7e15);
    let mut seen = HashMap::<(Level, bool), u64>::new();
    for i in 0..20_000 {
        let h = random_history(&mut rng);
        let mut accepted = Vec::new();
        for level in WEAK {
            let r = verify(&h, &Options { level, ..Options::default() }).unwrap_or_else(|e| panic!("{e}"));
            let expected = oracle(&h, level);
            assert_eq!(
                r.is_accept(),
                expected,
                "history {i} at {}:\n{}\n{}",
                level.name(),
                compact(&h),
                r.render_text()
            );
            if let Err(e) = check_report(&h, &r) {
                panic!(
                    "history {i} at {}: the report does not check: {e}\n{}\n{}",
                    level.name(),
                    r.render_text(),
                    compact(&h)
                );
            }
            *seen.entry((level, expected)).or_default() += 1;
            accepted.push(r.is_accept());
        }
        // The lattice: serializable ⇒ causal ⇒ read atomic ⇒ read committed.
        let ser = verify(&h, &Options::default()).unwrap_or_else(|e| panic!("{e}")).is_accept();
        let [rc, ra, cc] = [accepted[0], accepted[1], accepted[2]];
        assert!(
            (!ser || cc) && (!cc || ra) && (!ra || rc),
            "history {i}: ser {ser} cc {cc} ra {ra} rc {rc}:\n{}",
            compact(&h)
        );
    }
    // The generator must exercise both verdicts at every level.
    for level in WEAK {
        for verdict in [true, false] {
            assert!(seen.get(&(level, verdict)).copied().unwrap_or(0) > 500, "{seen:?}");
        }
    }
}

/// Fractured read: T3 saw T1's write of y but read x from before T1. Read committed allows it (T3's
/// read of x came first); read atomic does not.
#[test]
fn a_fractured_read_is_read_committed_but_not_read_atomic() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1).write("y", 2))
        .txn(2, |t| t.read_init("x").read("y", 2))
        .build();
    let rc = verify(&h, &Options { level: Level::ReadCommitted, ..Options::default() }).unwrap();
    assert!(rc.is_accept(), "{}", rc.render_text());
    check_report(&h, &rc).unwrap();
    let ra = verify(&h, &Options { level: Level::ReadAtomic, ..Options::default() }).unwrap();
    assert_eq!(ra.verdict, Verdict::Reject);
    assert_eq!(ra.anomalies[0].class, AnomalyClass::FracturedRead, "{}", ra.render_text());
    check_report(&h, &ra).unwrap();
    // The same evidence does not hold at read committed: T2's read of y came after its read of x.
    let mut tampered = ra.clone();
    tampered.level = Level::ReadCommitted;
    assert!(check_report(&h, &tampered).is_err());
    // Reversed reads (y first, then x from before T1): a violation at read committed too.
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1).write("y", 2))
        .txn(2, |t| t.read("y", 2).read_init("x"))
        .build();
    let rc = verify(&h, &Options { level: Level::ReadCommitted, ..Options::default() }).unwrap();
    assert_eq!(rc.verdict, Verdict::Reject, "{}", rc.render_text());
    check_report(&h, &rc).unwrap();
}

/// A lost update is allowed at every weak level, and write skew too; a session that does not read its
/// own write is not read atomic.
#[test]
fn lost_updates_pass_weak_levels_and_session_order_counts_from_read_atomic_up() {
    let lost = HistoryBuilder::new()
        .txn(1, |t| t.read_init("x").write("x", 1))
        .txn(2, |t| t.read_init("x").write("x", 2))
        .build();
    for level in WEAK {
        let r = verify(&lost, &Options { level, ..Options::default() }).unwrap();
        assert!(r.is_accept(), "{}: {}", level.name(), r.render_text());
        check_report(&lost, &r).unwrap();
    }
    assert!(!verify(&lost, &Options::default()).unwrap().is_accept());
    // One session writes x and then reads x from before its own earlier transaction.
    let mut h = HistoryBuilder::new().txn(1, |t| t.write("x", 1)).txn(2, |t| t.read_init("x")).build();
    for t in &mut h.transactions {
        t.session = SessionId(7);
    }
    h.transactions[1].seq = 1;
    let rc = verify(&h, &Options { level: Level::ReadCommitted, ..Options::default() }).unwrap();
    assert!(rc.is_accept(), "{}", rc.render_text());
    let ra = verify(&h, &Options { level: Level::ReadAtomic, ..Options::default() }).unwrap();
    assert!(!ra.is_accept());
    check_report(&h, &ra).unwrap();
}

/// An accept's commit order is checked against the axiom: T3 saw T2 (it read y from T2) and read x from
/// T1, so T2 must come before T1. The verifier's order does that; the swapped order does not check.
#[test]
fn an_accepts_commit_order_is_checked_against_the_axiom() {
    let h = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(2, |t| t.write("x", 2).write("y", 3))
        .txn(3, |t| t.read("y", 3).read("x", 1))
        .build();
    for level in [Level::ReadCommitted, Level::ReadAtomic, Level::Causal] {
        let r = verify(&h, &Options { level, ..Options::default() }).unwrap();
        assert!(r.is_accept(), "{}", r.render_text());
        check_report(&h, &r).unwrap();
        let order = r.serial_order.clone().unwrap();
        let at = |id: u64| order.iter().position(|t| t.0 == id).unwrap();
        assert!(at(2) < at(1), "{order:?}");
        let mut tampered = r.clone();
        tampered.serial_order = Some(vec![TxnId(1), TxnId(2), TxnId(3)]);
        assert!(check_report(&h, &tampered).is_err(), "{}", level.name());
    }
}
