//! Independent brute-force oracles and anomaly detectors for the reference store's tests. Nothing here uses
//! the store's execution tests: the oracles enumerate serial orders of the committed transactions.

#![allow(dead_code)]

use std::collections::HashMap;

use history::{History, Key, Observed, Op, Outcome, SessionId, Transaction, WriteId};
use refstore::{GenConfig, KvStore, Model, Simulation};

/// The committed transactions, grouped by session in session order.
fn committed_sessions(h: &History) -> Vec<Vec<&Transaction>> {
    h.sessions()
        .into_values()
        .map(|txns| txns.into_iter().filter(|t| t.outcome == Outcome::Committed).collect::<Vec<_>>())
        .filter(|txns| !txns.is_empty())
        .collect()
}

type State = HashMap<Key, Observed>;

fn value(state: &State, key: Key) -> Observed {
    state.get(&key).copied().unwrap_or(Observed::PreHistory(0))
}

/// Runs `t` serially: external reads against `snapshot`, later reads against its own writes. Returns its
/// writes (last per key) if every read returned what a serial execution would.
fn run_serially(t: &Transaction, snapshot: &State) -> Option<Vec<(Key, WriteId)>> {
    let mut own: Vec<(Key, WriteId)> = Vec::new();
    for op in &t.ops {
        match *op {
            Op::Read { key, observed, .. } => {
                let expected = match own.iter().find(|(k, _)| *k == key) {
                    Some(&(_, w)) => Observed::Version(w),
                    None => value(snapshot, key),
                };
                if expected != observed {
                    return None;
                }
            }
            Op::Write { key, write, .. } => match own.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = write,
                None => own.push((key, write)),
            },
        }
    }
    Some(own)
}

struct Search<'h> {
    sessions: Vec<Vec<&'h Transaction>>,
    strict: bool,
    /// For SI: every transaction gets a snapshot point no later than its commit point.
    snapshot_isolation: bool,
}

impl<'h> Search<'h> {
    fn total(&self) -> usize {
        self.sessions.iter().map(Vec::len).sum()
    }

    /// `order` holds (session, index) of placed transactions; `states[p]` is the state after `p` of them.
    fn dfs(&self, cursor: &mut Vec<usize>, order: &mut Vec<(usize, usize)>, states: &mut Vec<State>) -> bool {
        if order.len() == self.total() {
            return true;
        }
        for s in 0..self.sessions.len() {
            let i = cursor[s];
            let Some(&t) = self.sessions[s].get(i) else { continue };
            if self.strict && !self.realtime_ok(t, cursor) {
                continue;
            }
            let p = order.len();
            let writes = if self.snapshot_isolation {
                // The snapshot must contain the session's previous transaction.
                let lo = order.iter().position(|&(ss, ii)| ss == s && ii + 1 == i).map_or(0, |q| q + 1);
                (lo..=p).find_map(|snap| {
                    let w = run_serially(t, &states[snap])?;
                    let conflict = order[snap..p].iter().any(|&(ss, ii)| {
                        let u = self.sessions[ss][ii];
                        u.ops
                            .iter()
                            .any(|o| matches!(o, Op::Write { key, .. } if w.iter().any(|(k, _)| k == key)))
                    });
                    (!conflict).then_some(w)
                })
            } else {
                run_serially(t, &states[p])
            };
            let Some(writes) = writes else { continue };
            let mut next = states[p].clone();
            for (k, w) in writes {
                next.insert(k, Observed::Version(w));
            }
            states.push(next);
            order.push((s, i));
            cursor[s] += 1;
            if self.dfs(cursor, order, states) {
                return true;
            }
            cursor[s] -= 1;
            order.pop();
            states.pop();
        }
        false
    }

    /// Every transaction that committed before `t` started must already be placed.
    fn realtime_ok(&self, t: &Transaction, cursor: &[usize]) -> bool {
        let start = t.start_ns.unwrap_or(0);
        self.sessions.iter().enumerate().all(|(s, txns)| {
            txns[cursor[s]..].iter().all(|u| u.id == t.id || u.commit_ns.is_none_or(|c| c >= start))
        })
    }

    fn run(self) -> bool {
        let mut cursor = vec![0; self.sessions.len()];
        self.dfs(&mut cursor, &mut Vec::new(), &mut vec![State::new()])
    }
}

/// Whether some total order of the committed transactions that respects session order, executed serially
/// from the initial state (every key `PreHistory(0)`), returns every read's observed value.
pub fn serializable(h: &History) -> bool {
    Search { sessions: committed_sessions(h), strict: false, snapshot_isolation: false }.run()
}

/// As [`serializable`], and the order respects real time (commit before start).
pub fn strictly_serializable(h: &History) -> bool {
    Search { sessions: committed_sessions(h), strict: true, snapshot_isolation: false }.run()
}

/// Snapshot isolation by brute force: some commit order respecting session order, and for each transaction a
/// snapshot point (a prefix of that order containing its session's previous transaction) from which its
/// reads are served, such that no transaction committed between its snapshot and its commit writes a key it
/// writes (first committer wins).
pub fn snapshot_isolated(h: &History) -> bool {
    Search { sessions: committed_sessions(h), strict: false, snapshot_isolation: true }.run()
}

/// External reads of a transaction: reads of a key before its own first write of that key.
pub fn external_reads(t: &Transaction) -> Vec<(Key, Observed)> {
    let mut written: Vec<Key> = Vec::new();
    let mut reads = Vec::new();
    for op in &t.ops {
        match *op {
            Op::Read { key, observed, .. } if !written.contains(&key) => reads.push((key, observed)),
            Op::Read { .. } => {}
            Op::Write { key, .. } => written.push(key),
        }
    }
    reads
}

fn writes_key(t: &Transaction, key: Key) -> bool {
    t.ops.iter().any(|o| matches!(o, Op::Write { key: k, .. } if *k == key))
}

fn committed(h: &History) -> Vec<&Transaction> {
    h.transactions.iter().filter(|t| t.outcome == Outcome::Committed).collect()
}

/// A lost update: two committed transactions read the same version of a key and both write that key.
pub fn has_lost_update(h: &History) -> bool {
    let txns = committed(h);
    txns.iter().enumerate().any(|(i, a)| {
        txns[i + 1..].iter().any(|b| {
            external_reads(a)
                .iter()
                .any(|&(k, v)| writes_key(a, k) && writes_key(b, k) && external_reads(b).contains(&(k, v)))
        })
    })
}

/// The position of every version in the store's version order.
fn version_index(store: &KvStore, key: Key, observed: Observed) -> Option<usize> {
    store.versions(key).iter().position(|v| v.observed == observed)
}

/// Whether `a` read a version of some key that `b` overwrote later (an rw anti-dependency a → b), using the
/// store's real version order, on a key `a` does not write itself.
fn anti_depends(store: &KvStore, a: &Transaction, b: &Transaction) -> bool {
    external_reads(a).iter().any(|&(k, v)| {
        !writes_key(a, k)
            && b.ops.iter().any(|o| match *o {
                Op::Write { key, write, .. } if key == k => {
                    match (version_index(store, k, v), version_index(store, k, Observed::Version(write))) {
                        (Some(read), Some(written)) => read < written,
                        _ => false,
                    }
                }
                _ => false,
            })
    })
}

/// A write skew: two committed transactions each read a key the other overwrote and neither writes the key it
/// read (a cycle of two rw edges, G2-item), by the store's version order.
pub fn has_write_skew(sim: &Simulation) -> bool {
    let txns = committed(&sim.history);
    txns.iter().enumerate().any(|(i, a)| {
        txns[i + 1..].iter().any(|b| anti_depends(&sim.store, a, b) && anti_depends(&sim.store, b, a))
    })
}

/// A non-repeatable read: one transaction read a key twice, before writing it, and saw two versions.
pub fn has_non_repeatable_read(h: &History) -> bool {
    committed(h).iter().any(|t| {
        let reads = external_reads(t);
        reads.iter().any(|&(k, v)| reads.iter().any(|&(k2, v2)| k == k2 && v != v2))
    })
}

/// A fractured read: a transaction read one key from writer W, and another key that W also wrote at a version
/// older than W's.
pub fn has_fractured_read(sim: &Simulation) -> bool {
    let h = &sim.history;
    let writer_of: HashMap<WriteId, &Transaction> = committed(h)
        .into_iter()
        .flat_map(|t| {
            t.ops.iter().filter_map(move |o| match *o {
                Op::Write { write, .. } => Some((write, t)),
                Op::Read { .. } => None,
            })
        })
        .collect();
    committed(h).iter().any(|t| {
        let reads = external_reads(t);
        reads.iter().any(|&(_, v)| {
            let Observed::Version(w) = v else { return false };
            let Some(writer) = writer_of.get(&w) else { return false };
            reads.iter().any(|&(k2, v2)| {
                final_write(writer, k2).is_some_and(|w2| {
                    match (
                        version_index(&sim.store, k2, v2),
                        version_index(&sim.store, k2, Observed::Version(w2)),
                    ) {
                        (Some(seen), Some(theirs)) => seen < theirs,
                        _ => false,
                    }
                })
            })
        })
    })
}

fn final_write(t: &Transaction, key: Key) -> Option<WriteId> {
    t.ops.iter().rev().find_map(|o| match *o {
        Op::Write { key: k, write, .. } if k == key => Some(write),
        _ => None,
    })
}

/// A session-guarantee violation: a transaction's external read of a key returned a version older (in the
/// store's version order) than one its session already wrote or read (monotonic reads, read-your-writes).
pub fn has_session_violation(sim: &Simulation) -> bool {
    let h = &sim.history;
    h.sessions().values().any(|txns| {
        let mut floor: HashMap<Key, usize> = HashMap::new();
        for t in txns.iter().filter(|t| t.outcome == Outcome::Committed) {
            for (k, v) in external_reads(t) {
                let Some(i) = version_index(&sim.store, k, v) else { return true };
                if i < floor.get(&k).copied().unwrap_or(0) {
                    return true;
                }
            }
            for o in &t.ops {
                let (key, v) = match *o {
                    Op::Read { key, observed, .. } => (key, observed),
                    Op::Write { key, write, .. } => (key, Observed::Version(write)),
                };
                if let Some(i) = version_index(&sim.store, key, v) {
                    let f = floor.entry(key).or_insert(0);
                    *f = (*f).max(i);
                }
            }
        }
        false
    })
}

/// A causality violation: a transaction read a key at a version older than one written by a transaction
/// that precedes it in SO ∪ WR (transitively).
pub fn has_causality_violation(sim: &Simulation) -> bool {
    let h = &sim.history;
    let txns = committed(h);
    let writer_of: HashMap<WriteId, usize> = txns
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            t.ops.iter().filter_map(move |o| match *o {
                Op::Write { write, .. } => Some((write, i)),
                Op::Read { .. } => None,
            })
        })
        .collect();
    // Direct predecessors under SO ∪ WR.
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); txns.len()];
    let sessions: HashMap<SessionId, Vec<usize>> =
        txns.iter().enumerate().fold(HashMap::new(), |mut m, (i, t)| {
            m.entry(t.session).or_default().push(i);
            m
        });
    for list in sessions.values() {
        let mut sorted = list.clone();
        sorted.sort_by_key(|&i| txns[i].seq);
        for pair in sorted.windows(2) {
            preds[pair[1]].push(pair[0]);
        }
    }
    for (i, t) in txns.iter().enumerate() {
        for (_, v) in external_reads(t) {
            if let Observed::Version(w) = v
                && let Some(&j) = writer_of.get(&w)
                && j != i
            {
                preds[i].push(j);
            }
        }
    }
    (0..txns.len()).any(|i| {
        let mut seen = vec![false; txns.len()];
        let mut work = preds[i].clone();
        while let Some(j) = work.pop() {
            if !std::mem::replace(&mut seen[j], true) {
                work.extend(preds[j].iter().copied());
            }
        }
        external_reads(txns[i]).iter().any(|&(k, v)| {
            let Some(read) = version_index(&sim.store, k, v) else { return true };
            (0..txns.len()).filter(|&j| seen[j]).any(|j| {
                final_write(txns[j], k).is_some_and(|w| {
                    version_index(&sim.store, k, Observed::Version(w)).is_some_and(|i2| i2 > read)
                })
            })
        })
    })
}

/// The high-contention preset, kept as a plain function so tests can pass it around.
pub fn contended(model: Model, seed: u64) -> GenConfig {
    GenConfig::high_contention(model, seed)
}

/// Runs `config` for seeds `0..n`, panicking (with the seed) if generation fails.
pub fn simulations(n: u64, config: impl Fn(u64) -> GenConfig) -> impl Iterator<Item = (u64, Simulation)> {
    (0..n).map(move |seed| {
        let sim = refstore::simulate(&config(seed)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        (seed, sim)
    })
}
