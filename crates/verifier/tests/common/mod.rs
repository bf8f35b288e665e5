//! What the tests share: random histories, their one-line-per-transaction rendering and the brute-force
//! oracle they are checked against (the level tests), and the differential run of round-by-round against
//! one-shot verification (the rounds tests). Each test crate uses only part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};

use history::{
    CollectorId, History, HistoryBuilder, Key, KeyName, Observed, Op, Outcome, SessionId, Transaction, TxnId,
    WriteId,
};
use rand::Rng;
use rand::rngs::StdRng;
use verifier::{OnlineVerifier, Options, RoundOptions, verify, verify_in_rounds};

pub mod random_log;

/// A random history: transactions run one after another against a store, each read returning the value
/// of one of the last few states (so reads can be stale, fractured or non-monotonic), then a few reads are
/// perturbed (other writes of the key, initial versions, intermediate or aborted writes, garbage).
pub fn random_history(rng: &mut StdRng) -> History {
    let keys = 3u32;
    let mut h = History::default();
    for k in 0..keys {
        h.keys.intern(KeyName { namespace: String::new(), bytes: format!("k{k}").into_bytes() });
    }
    let n = rng.gen_range(1..=6);
    let sessions = rng.gen_range(1..=3u64);
    let mut states: Vec<HashMap<Key, Observed>> = vec![HashMap::new()];
    let mut next_write = 1u64;
    let mut txns = Vec::new();
    let stale = rng.gen_range(0..3usize);
    for i in 0..n {
        let mut t = Transaction::new(TxnId(i as u64 + 1), SessionId(rng.gen_range(0..sessions)), 0);
        t.outcome = if rng.gen_range(0..100) < 8 { Outcome::Aborted } else { Outcome::Committed };
        t.collector = CollectorId(0);
        let mut own: HashMap<Key, Observed> = HashMap::new();
        for _ in 0..rng.gen_range(1..=5) {
            let key = Key(rng.gen_range(0..keys));
            if rng.gen_bool(0.55) {
                let back = rng.gen_range(0..=stale.min(states.len() - 1));
                let state = &states[states.len() - 1 - back];
                let seen = own.get(&key).or(state.get(&key)).copied().unwrap_or(Observed::PreHistory(0));
                t.ops.push(Op::Read { key, observed: seen, stmt: None });
            } else {
                let w = WriteId(next_write);
                next_write += 1;
                own.insert(key, Observed::Version(w));
                t.ops.push(Op::Write { key, write: w, stmt: None });
            }
        }
        if t.outcome == Outcome::Committed {
            let mut s = states.last().cloned().unwrap_or_default();
            s.extend(own);
            states.push(s);
        }
        txns.push(t);
    }
    let perturbations = if rng.gen_bool(0.6) { 0 } else { rng.gen_range(1..=2) };
    perturb_reads(rng, &mut txns, perturbations);
    number_in_sessions(rng, &mut txns);
    h.transactions = txns;
    h
}

/// Changes the version `count` random reads of `txns` observed: to another write of the key, an initial
/// version, no row, or a version nobody wrote. How the random histories get their anomalies beyond stale
/// snapshots.
pub fn perturb_reads(rng: &mut StdRng, txns: &mut [Transaction], count: usize) {
    let writes: Vec<(Key, WriteId)> = txns
        .iter()
        .flat_map(|t| t.ops.iter())
        .filter_map(|op| match *op {
            Op::Write { key, write, .. } => Some((key, write)),
            _ => None,
        })
        .collect();
    for _ in 0..count {
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
            0..=74 if !same_key.is_empty() => Observed::Version(same_key[rng.gen_range(0..same_key.len())]),
            0..=89 => Observed::PreHistory(0),
            90..=94 => Observed::Absent,
            _ => Observed::Version(WriteId(9_999)),
        };
        txns[ti].ops[oi] = Op::Read { key, observed, stmt: None };
    }
}

/// Numbers each transaction's place in its session: in the order given, or (one time in seven or so) in a
/// shuffled order, so that session order and execution order disagree.
pub fn number_in_sessions(rng: &mut StdRng, txns: &mut [Transaction]) {
    let mut seq: HashMap<SessionId, u64> = HashMap::new();
    let mut order: Vec<usize> = (0..txns.len()).collect();
    if rng.gen_bool(0.15) {
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
}

/// The history, one line per transaction, for failure messages.
pub fn compact(h: &History) -> String {
    let mut out = String::new();
    for t in &h.transactions {
        let ops: Vec<String> = t
            .ops
            .iter()
            .map(|op| match *op {
                Op::Read { key, observed, .. } => format!("r(k{})={observed:?}", key.0),
                Op::Write { key, write, .. } => format!("w(k{})={}", key.0, write.0),
            })
            .collect();
        out.push_str(&format!("{} s{}#{} {:?}: {}\n", t.id, t.session.0, t.seq, t.outcome, ops.join(" ")));
    }
    out
}

/// What a differential run of round-by-round against one-shot verification saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Differential {
    /// Histories that one-shot verification rejected.
    pub rejects: usize,
    /// Transactions that garbage collection deleted, over all histories.
    pub deleted: u64,
    /// Histories in which garbage collection deleted at least one transaction.
    pub collected_histories: usize,
    /// Live constraints that garbage collection deleted with their transactions (its rule 2).
    pub constraints: usize,
}

/// Verifies `cases` histories, each drawn from `next`, one-shot and in rounds of the given sizes (in turn),
/// and asserts the same verdict (Cobra §4: verification in rounds must not change what is accepted). `what`
/// names the histories in failure messages.
pub fn differential(
    what: &str,
    cases: usize,
    sizes: &[usize],
    mut next: impl FnMut() -> History,
) -> Differential {
    let mut out = Differential::default();
    for case in 0..cases {
        let h = next();
        let one_shot = verify(&h, &Options::default()).expect("one-shot verification");
        let size = sizes[case % sizes.len()];
        let rounds = verify_in_rounds(&h, &RoundOptions::offline(size)).expect("round-by-round verification");
        assert_eq!(
            rounds.is_accept(),
            one_shot.is_accept(),
            "{what}, case {case} (round size {size}): rounds say {:?}, one-shot says {:?}\n{}\nrounds: {:?}\n{:#?}",
            rounds.verdict,
            one_shot.verdict,
            one_shot.render_text(),
            rounds.reports.first().map(|r| r.render_text()),
            h.transactions,
        );
        out.rejects += usize::from(!one_shot.is_accept());
        out.deleted += rounds.deleted;
        out.collected_histories += usize::from(rounds.deleted > 0);
        out.constraints += rounds.rounds.iter().map(|r| r.constraints_collected).sum::<usize>();
    }
    out
}

/// What [`oracle`] holds a transaction to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Held {
    /// Serializable: reads from the state it commits on.
    Serializable,
    /// Snapshot isolation: reads from a snapshot, first committer wins.
    Snapshot,
    /// Read committed: reads committed versions.
    ReadCommitted,
}

/// The brute-force oracle of the level tests: does some execution explain the history, each committed
/// transaction held to `held` of it? It knows nothing of dependency graphs. It tries every commit order of
/// the committed transactions (keeping session order) and asks, for each transaction at its place, whether
/// what it is held to explains its reads:
/// - [`Held::Serializable`]: every external read returns the latest version committed before it;
/// - [`Held::Snapshot`]: some start point, after its session's earlier transactions, whose prefix's latest
///   versions are what it read, and no transaction committed after that point wrote a key it writes (first
///   committer wins);
/// - [`Held::ReadCommitted`] (Adya's PL-2): every external read returns a version committed before it, any
///   of them.
pub fn oracle(h: &History, held: impl Fn(&Transaction) -> Held) -> bool {
    let t = &h.transactions;
    let committed: Vec<usize> = (0..t.len()).filter(|&i| t[i].outcome == Outcome::Committed).collect();
    let mut writer: HashMap<WriteId, (usize, Key)> = HashMap::new();
    for (i, tx) in t.iter().enumerate() {
        for op in &tx.ops {
            if let Op::Write { key, write, .. } = *op
                && writer.insert(write, (i, key)).is_some()
            {
                return false;
            }
        }
    }
    let final_write = |i: usize, k: Key| {
        t[i].ops.iter().rev().find_map(|op| match *op {
            Op::Write { key, write, .. } if key == k => Some(write),
            _ => None,
        })
    };
    // Well-formed reads: own writes read back; external reads of committed final writes of others, or of
    // one initial version per key. What is left to place: each transaction's external reads.
    let mut external: HashMap<usize, Vec<(Key, Option<usize>)>> = HashMap::new();
    let mut initial: HashMap<Key, Observed> = HashMap::new();
    for &i in &committed {
        let mut own: HashMap<Key, WriteId> = HashMap::new();
        let mut list = Vec::new();
        for op in &t[i].ops {
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
                            Some(&(j, k))
                                if j != i
                                    && k == key
                                    && t[j].outcome == Outcome::Committed
                                    && final_write(j, k) == Some(w) =>
                            {
                                list.push((key, Some(j)))
                            }
                            _ => return false,
                        },
                        init => {
                            if *initial.entry(key).or_insert(init) != init {
                                return false;
                            }
                            list.push((key, None));
                        }
                    }
                }
            }
        }
        external.insert(i, list);
    }
    let writes = |i: usize, k: Key| final_write(i, k).is_some();
    let session_before = |before: &[usize], i: usize| {
        committed
            .iter()
            .all(|&p| !(t[p].session == t[i].session && t[p].seq < t[i].seq) || before.contains(&p))
    };
    // Can `i` commit right after `order`?
    let fits = |order: &[usize], i: usize| -> bool {
        let snapshot_at = |start: usize| {
            let before = &order[..start];
            let reads_ok = external[&i].iter().all(|&(k, from)| {
                let latest = before.iter().rev().copied().find(|&w| writes(w, k));
                latest == from
            });
            let first_committer = order[start..]
                .iter()
                .all(|&c| !t[i].ops.iter().any(|op| matches!(*op, Op::Write { key, .. } if writes(c, key))));
            session_before(before, i) && reads_ok && first_committer
        };
        match held(&t[i]) {
            Held::Serializable => snapshot_at(order.len()),
            Held::Snapshot => (0..=order.len()).any(snapshot_at),
            Held::ReadCommitted => {
                session_before(order, i)
                    && external[&i]
                        .iter()
                        .all(|&(k, from)| from.is_none_or(|j| order.contains(&j) && writes(j, k)))
            }
        }
    };
    fn search(order: &mut Vec<usize>, left: &mut Vec<usize>, fits: &dyn Fn(&[usize], usize) -> bool) -> bool {
        if left.is_empty() {
            return true;
        }
        for k in 0..left.len() {
            let i = left[k];
            if !fits(order, i) {
                continue;
            }
            left.remove(k);
            order.push(i);
            let ok = search(order, left, fits);
            order.pop();
            left.insert(k, i);
            if ok {
                return true;
            }
        }
        false
    }
    search(&mut Vec::new(), &mut committed.clone(), &fits)
}

/// A random history run serially against a store, with a fence (a read-modify-write of key `F`) every few
/// transactions of each session, and some reads from older states of the store (stale reads, lost updates,
/// write skew), so that about half the histories are not serializable (the rounds tests). With `ending`,
/// longer histories of up to four sessions in which session 0 stops part-way (its last transactions, after
/// its last fence, have no epoch and no fence after them: the case where only the links that replace a
/// collected read order a kept reader before later transactions).
pub fn fenced_history(rng: &mut StdRng, ending: bool) -> History {
    let mut h = History::default();
    let keys: Vec<Key> = (0..4u8)
        .map(|k| h.keys.intern(KeyName { namespace: String::new(), bytes: vec![b'a' + k] }))
        .collect();
    let fence_key = h.keys.intern_str("F");
    let sessions = if ending { rng.gen_range(2..=4u64) } else { rng.gen_range(2..=3u64) };
    let n = if ending { rng.gen_range(20..=70usize) } else { rng.gen_range(10..=40usize) };
    let stop_at = if ending { rng.gen_range(n / 3..n) } else { n };
    let every = rng.gen_range(1..=3u64);
    let stale_p = [0.0, 0.02, 0.1][rng.gen_range(0..3)];
    let mut store: HashMap<Key, Observed> = HashMap::new();
    let mut states: Vec<HashMap<Key, Observed>> = vec![HashMap::new()];
    let mut seq: HashMap<u64, u64> = HashMap::new();
    let mut since_fence: HashMap<u64, u64> = HashMap::new();
    let mut next_write = 1u64;
    for i in 0..n {
        let mut s = rng.gen_range(0..sessions);
        if i >= stop_at && s == 0 {
            s = 1;
        }
        let sq = seq.entry(s).or_default();
        let mut t = Transaction::new(TxnId(i as u64 + 1), SessionId(s), *sq);
        *sq += 1;
        let gone = since_fence.entry(s).or_default();
        if *gone >= every {
            *gone = 0;
            t.fence = true;
            let seen = store.get(&fence_key).copied().unwrap_or(Observed::PreHistory(0));
            let w = WriteId(next_write);
            next_write += 1;
            t.ops.push(Op::Read { key: fence_key, observed: seen, stmt: None });
            t.ops.push(Op::Write { key: fence_key, write: w, stmt: None });
            store.insert(fence_key, Observed::Version(w));
        } else {
            *gone += 1;
            if rng.gen_bool(0.05) {
                t.outcome = Outcome::Aborted;
            }
            let back = if rng.gen_bool(stale_p * 5.0) { rng.gen_range(0..states.len().min(6)) } else { 0 };
            let snapshot = states[states.len() - 1 - back].clone();
            let mut own: HashMap<Key, Observed> = HashMap::new();
            for _ in 0..rng.gen_range(1..=3) {
                let key = keys[rng.gen_range(0..keys.len())];
                if rng.gen_bool(0.5) {
                    let mut seen =
                        own.get(&key).or(snapshot.get(&key)).copied().unwrap_or(Observed::PreHistory(0));
                    if rng.gen_bool(stale_p) {
                        // A read of some older version of the key.
                        let older: Vec<Observed> =
                            states.iter().filter_map(|st| st.get(&key).copied()).collect();
                        if !older.is_empty() {
                            seen = older[rng.gen_range(0..older.len())];
                        }
                    }
                    t.ops.push(Op::Read { key, observed: seen, stmt: None });
                } else {
                    let w = WriteId(next_write);
                    next_write += 1;
                    own.insert(key, Observed::Version(w));
                    t.ops.push(Op::Write { key, write: w, stmt: None });
                }
            }
            if t.outcome == Outcome::Committed {
                store.extend(own);
            }
        }
        if t.outcome == Outcome::Committed {
            states.push(store.clone());
        }
        h.transactions.push(t);
    }
    h
}

/// Adds a fence of `session` to `b`: a read-modify-write of the fence key `F` that overwrote its version
/// `prev` (0: the initial version) with `new`.
pub fn fence(b: HistoryBuilder, session: u64, prev: u64, new: u64) -> HistoryBuilder {
    b.txn(session, |t| {
        if prev == 0 { t.read_init("F").write("F", new) } else { t.read("F", prev).write("F", new) }
    })
    .fence()
}

/// What an online verifier made of a history ([`online`]).
pub struct Online {
    pub rejects: Vec<verifier::Report>,
    pub unverifiable: u64,
    pub deleted: u64,
    pub gc_disabled: Option<String>,
}

/// Pushes `h` into an online verifier in history order, every session declared up front and ended after its
/// last transaction, and says what it made of it.
pub fn online(h: &History, options: RoundOptions) -> Online {
    let mut v = OnlineVerifier::new(h.keys.clone(), h.statements.clone(), options);
    let sessions = h.sessions();
    for &s in sessions.keys() {
        v.session_started(s);
    }
    let last: BTreeMap<SessionId, TxnId> = sessions.iter().map(|(s, t)| (*s, t[t.len() - 1].id)).collect();
    for t in &h.transactions {
        v.push(t.clone()).expect("push");
        if last[&t.session] == t.id {
            v.session_ended(t.session);
        }
    }
    v.finish().expect("finish");
    Online {
        rejects: v.rejects().to_vec(),
        unverifiable: v.unverifiable_reads(),
        deleted: v.deleted(),
        gc_disabled: v.gc_disabled().map(str::to_owned),
    }
}

/// What [`declared_differential`] counted.
#[derive(Debug, Default)]
pub struct DeclaredDifferential {
    /// Histories one-shot verification at `declared` rejected.
    pub rejects: usize,
    /// Histories the online verifier collected garbage in.
    pub collected: usize,
    /// Histories rejected one-shot whose evidence the online verifier counted as unverifiable reads.
    pub unverifiable_accepts: usize,
}

/// Verifies `cases` histories from `next` at `declared`, one-shot (the split polygraph) and online in rounds of
/// the given sizes (in turn), and panics on a false reject, or on a false accept that no read counted as
/// unverifiable explains. With `collecting`, no history may stop collection by the level it asked for (no
/// transaction at REPEATABLE READ).
pub fn declared_differential(
    what: &str,
    cases: usize,
    sizes: &[usize],
    collecting: bool,
    mut next: impl FnMut() -> History,
) -> DeclaredDifferential {
    let declared = Options { level: verifier::Level::Declared, ..Options::default() };
    let mut out = DeclaredDifferential::default();
    for case in 0..cases {
        let h = next();
        let one_shot = verify(&h, &declared).expect("one-shot");
        let size = sizes[case % sizes.len()];
        let rounds = online(&h, RoundOptions { verify: declared.clone(), ..RoundOptions::offline(size) });
        let context = || format!("{what}, case {case} (round size {size}):\n{:#?}", h.transactions);
        if collecting && let Some(why) = &rounds.gc_disabled {
            assert!(!why.contains("asked for"), "{why}: {}", context());
        }
        match (one_shot.is_accept(), rounds.rejects.is_empty()) {
            (true, false) => panic!("a false reject: {}\n{}", rounds.rejects[0].render_text(), context()),
            (false, true) if rounds.unverifiable == 0 => {
                panic!("a false accept: {}\n{}", one_shot.render_text(), context())
            }
            (false, true) => out.unverifiable_accepts += 1,
            _ => {}
        }
        out.rejects += usize::from(!one_shot.is_accept());
        out.collected += usize::from(rounds.deleted > 0);
    }
    out
}

/// Gives each transaction of `h` but its fences SERIALIZABLE, READ COMMITTED, READ UNCOMMITTED or no level at
/// random, read committed or read uncommitted with probability `read_committed`, and its fences READ
/// COMMITTED, as the proxy records them.
pub fn mix_serializable_and_read_committed(rng: &mut StdRng, h: &mut History, read_committed: f64) {
    use history::IsolationLevel::{ReadCommitted, ReadUncommitted, Serializable};
    for t in &mut h.transactions {
        t.isolation = match t.fence {
            true => Some(ReadCommitted),
            false if rng.gen_bool(read_committed) => {
                Some([ReadCommitted, ReadUncommitted][rng.gen_range(0..2)])
            }
            false => [Some(Serializable), None][rng.gen_range(0..2)],
        };
    }
}
