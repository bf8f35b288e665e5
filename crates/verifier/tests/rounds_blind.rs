//! Round-by-round verification against one-shot verification on histories made mostly of blind writes of a
//! few keys that nobody reads at first: what the proxy records for `UPDATE t SET v = v + 1` and pgbench's
//! branch and teller updates. Serializability's polygraph has no constraint for a pair of unread blind writes
//! (`constraints`), and garbage collection deletes a superseded one without holding it for such a pair
//! (`gc::entangled::unread_pairs`). Later reads of some of those versions, current or a little stale, are
//! where a deletion that mattered would show: rounds must give the one-shot verdict, and one-shot verdicts
//! agree with brute force on the same shape (`tests/oracle.rs`).
//!
//! The random histories go red (a false reject) when rule 4 lets an unread frontier version become the base
//! while another one is unordered with it, but not when collection drops the pairs of unread frontier
//! versions from rule 2: the hand-built history at the end does (a false accept).

use std::collections::HashMap;

use history::{
    History, HistoryBuilder, Key, KeyName, Observed, Op, Outcome, SessionId, Transaction, TxnId, WriteId,
};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use verifier::{Options, RoundOptions, verify, verify_in_rounds};

mod common;

/// A random history run serially against a store: most transactions blind-write one or two of a few keys;
/// the others read one or two keys (the current version, or with some probability one of the last few) and
/// may write what they read. A fence (a read-modify-write of key `F`) comes every few transactions of each
/// session. In half of the histories the reads come only in the second half: an unread past that collection
/// has already thinned, then reads of it.
fn blind_increments(rng: &mut StdRng) -> History {
    let mut h = History::default();
    let key_count = rng.gen_range(1..=3usize);
    let keys: Vec<Key> = (0..key_count)
        .map(|k| h.keys.intern(KeyName { namespace: "t".into(), bytes: k.to_string().into_bytes() }))
        .collect();
    let fence_key = h.keys.intern_str("F");
    let sessions = rng.gen_range(2..=6u64);
    let n = rng.gen_range(20..=80usize);
    let every = rng.gen_range(1..=4u64);
    let late = rng.gen_bool(0.5);
    let blind_p = [0.6, 0.8, 0.95][rng.gen_range(0..3)];
    let stale_p = [0.05, 0.15, 0.3][rng.gen_range(0..3)];
    let mut store: HashMap<Key, Observed> = HashMap::new();
    let mut versions: HashMap<Key, Vec<Observed>> = HashMap::new();
    let mut seq: HashMap<u64, u64> = HashMap::new();
    let mut since_fence: HashMap<u64, u64> = HashMap::new();
    let mut next_write = 1u64;
    let initial = Observed::PreHistory(0);
    for i in 0..n {
        let s = rng.gen_range(0..sessions);
        let sq = seq.entry(s).or_default();
        let mut t = Transaction::new(TxnId(i as u64 + 1), SessionId(s), *sq);
        *sq += 1;
        let mut own: HashMap<Key, Observed> = HashMap::new();
        let gone = since_fence.entry(s).or_default();
        if *gone >= every {
            *gone = 0;
            t.fence = true;
            let w = WriteId(next_write);
            next_write += 1;
            let observed = store.get(&fence_key).copied().unwrap_or(initial);
            t.ops.push(Op::Read { key: fence_key, observed, stmt: None });
            t.ops.push(Op::Write { key: fence_key, write: w, stmt: None });
            own.insert(fence_key, Observed::Version(w));
        } else {
            *gone += 1;
            if rng.gen_bool(0.03) {
                t.outcome = Outcome::Aborted;
            }
            let reads_now = !(late && i < n / 2 || rng.gen_bool(blind_p));
            let count = rng.gen_range(1..=2usize).min(key_count);
            let chosen: Vec<Key> = sample(rng, key_count, count).into_iter().map(|k| keys[k]).collect();
            let modify = !reads_now || rng.gen_bool(0.5);
            for &key in &chosen {
                if reads_now {
                    let mut seen = store.get(&key).copied().unwrap_or(initial);
                    let past = versions.get(&key).map(Vec::as_slice).unwrap_or_default();
                    if rng.gen_bool(stale_p) && !past.is_empty() {
                        seen = past[past.len() - 1 - rng.gen_range(0..past.len().min(4))];
                    }
                    t.ops.push(Op::Read { key, observed: seen, stmt: None });
                }
                if modify {
                    let w = WriteId(next_write);
                    next_write += 1;
                    t.ops.push(Op::Write { key, write: w, stmt: None });
                    own.insert(key, Observed::Version(w));
                }
            }
        }
        if t.outcome == Outcome::Committed {
            for (&key, &v) in &own {
                versions.entry(key).or_default().push(v);
            }
            store.extend(own);
        }
        h.transactions.push(t);
    }
    h
}

#[test]
fn rounds_give_the_one_shot_verdict_on_blind_increments_read_later() {
    let cases = 15_000;
    let mut rng = StdRng::seed_from_u64(0xb11d_0001);
    let d = common::differential("blind increments", cases, &[1, 2, 3, 5, 8], || blind_increments(&mut rng));
    println!(
        "{cases} histories, {} rejected, {} transactions collected ({} histories collected something)",
        d.rejects, d.deleted, d.collected_histories
    );
    assert!(
        d.rejects > cases / 10 && d.rejects < cases * 9 / 10,
        "the generator should make both verdicts: {}",
        d.rejects
    );
    assert!(d.deleted > 10 * cases as u64, "garbage collection should delete: {}", d.deleted);
}

/// Why a pair of unread blind writes on the frontier joins Γ with both its sides (`gc::entangled`): the
/// case of `rounds_chengrw.rs`'s `an_old_constraint_that_kept_constraints_can_close_both_ways_stays`, with the
/// kept constraints made of unread blind writes, which serializability's polygraph has no constraint for.
///
/// W1 and W2 blindly write k (versions 1 and 2, unordered); r1 reads 1 and r2 reads 2; W3 overwrites k
/// later, so all four are candidates, in one old constraint "r1 → W2 or r2 → W1". K1 and K2 blindly write p,
/// K3 and K4 write q, nobody reads them, and each pair is unordered and on the frontier. With session order
/// W2 ⇝ K2, K1 ⇝ r1, W1 ⇝ K4 and K3 ⇝ r2, a future read of K1's p in K2's session forces K2 → K1, one of
/// K3's q in K4's session forces K4 → K3, and either side of the old constraint closes a cycle: W2 ⇝ K2 →
/// K1 ⇝ r1 → W2, or W1 ⇝ K4 → K3 ⇝ r2 → W1. Without the pairs in Γ the old constraint goes, and rounds
/// accept.
#[test]
fn an_old_constraint_that_unread_pairs_can_close_both_ways_stays() {
    let b = HistoryBuilder::new()
        .txn(1, |t| t.write("k", 2))
        .txn(1, |t| t.write("p", 12))
        .txn(2, |t| t.write("p", 11))
        .txn(2, |t| t.read("k", 1))
        .txn(3, |t| t.write("k", 1))
        .txn(3, |t| t.write("q", 14))
        .txn(4, |t| t.write("q", 13))
        .txn(4, |t| t.read("k", 2));
    let mut b =
        (1..=4).fold(b, |b, s| common::fence(b, s, if s == 1 { 0 } else { 1000 + s - 2 }, 1000 + s - 1));
    for i in 0..16u64 {
        if i == 4 {
            b = b.txn(1, |t| t.write("k", 3));
        }
        b = common::fence(b, [1, 3][(i % 2) as usize], 1003 + i, 1004 + i);
    }
    let h = b.txn(1, |t| t.read("p", 11)).txn(3, |t| t.read("q", 13)).build();
    assert!(!verify(&h, &Options::default()).unwrap().is_accept(), "one-shot verification rejects it");
    for size in [1, 2, 3, 4, 6] {
        let out = verify_in_rounds(&h, &RoundOptions::offline(size)).unwrap();
        assert!(out.deleted > 0, "garbage collection should have deleted something (round size {size})");
        assert!(!out.is_accept(), "round size {size}: both sides of the old constraint close a cycle");
    }
}
