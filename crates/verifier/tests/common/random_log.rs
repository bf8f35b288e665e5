//! Random history logs, as proxies append them over a few runs (the checkpoint and finished-log tests).

use std::collections::HashMap;
use std::path::Path;

use history::log::{HistoryLog, LoggedOp, LoggedTxn};
use history::{DiskLog, Durability, IsolationLevel, KeyName, Observed, Outcome, SessionId, TxnId, WriteId};
use rand::Rng;
use rand::rngs::StdRng;

/// The name of test key `k`.
pub fn key(k: u32) -> KeyName {
    KeyName { namespace: "kv".into(), bytes: format!("k{k}").into_bytes() }
}

/// The fence row's key.
pub fn fence_key() -> KeyName {
    KeyName { namespace: "krait_fence".into(), bytes: b"F".to_vec() }
}

/// A session's transaction whose COMMIT reply is in flight: its intent is logged, and the database has
/// ended it (its writes are in the store when it committed), but its outcome is not logged yet.
struct InFlight {
    txn: TxnId,
    outcome: Outcome,
}

/// Appends a random log to `path`, as proxies would over a few runs: transactions of a few sessions reading
/// and writing a few keys (now and then a stale read, which makes the history non-serializable), a fence
/// every few transactions of each session, intents whose outcome comes later, sessions that end, writes
/// discovered after their transaction finished, and crashes after which a new run starts new sessions.
pub fn random_log(rng: &mut StdRng, path: &Path) -> DiskLog {
    random_log_of(rng, path, 0)
}

/// [`random_log`] as a proxy under `group` durability appends it: each crash may lose what the proxy
/// acknowledged last, here a committed writer whose record never reached the log (its writes are in the
/// store, and later transactions read them), and the next run's Recovery record marks a gap.
pub fn random_log_losing_writers(rng: &mut StdRng, path: &Path) -> DiskLog {
    appended(rng, path, 0, Durability::Group)
}

/// [`random_log`] as collector `collector` records it: a collector other than 0 writes versions and keys
/// of its own (and fences a row of its own, as proxies do), so that merged logs of several can be accepted.
pub fn random_log_of(rng: &mut StdRng, path: &Path, collector: u32) -> DiskLog {
    appended(rng, path, collector, Durability::Strict)
}

/// [`random_log_of`] under `durability`; under any but `strict`, crashes lose writers.
fn appended(rng: &mut StdRng, path: &Path, collector: u32, durability: Durability) -> DiskLog {
    let own = |name: KeyName| match collector {
        0 => name,
        c => KeyName { bytes: [format!("c{c}/").into_bytes(), name.bytes].concat(), ..name },
    };
    let key = |k| own(key(k));
    let fence_key = || own(fence_key());
    let first_write = u64::from(collector) << 32 | 1;
    let mut log = DiskLog::open(path, durability).expect("the log opens");
    let keys = rng.gen_range(3..=8u32);
    let steps = rng.gen_range(30..=160);
    let stale_p = [0.0, 0.0, 0.02, 0.08][rng.gen_range(0..4)];
    let fence_every = rng.gen_range(2..=5u64);
    let mut store: HashMap<KeyName, Observed> = HashMap::new();
    let mut history: Vec<HashMap<KeyName, Observed>> = vec![HashMap::new()];
    let mut next_txn = 1u64;
    let mut next_write = first_write;
    let mut next_session = 0u64;
    let mut sessions: Vec<(SessionId, u64, Option<InFlight>)> = Vec::new();
    let mut finished: Vec<TxnId> = Vec::new();
    for _ in 0..steps {
        while sessions.len() < 2 {
            sessions.push((SessionId(next_session), 0, None));
            next_session += 1;
        }
        let at = rng.gen_range(0..sessions.len());
        let roll = rng.gen_range(0..100);
        if roll < 2 {
            // A crash: intents in flight stay without an outcome, and the next run's sessions are new.
            if durability != Durability::Strict && rng.gen_bool(0.7) {
                // The writer acknowledged last was lost with the records the crash cut off.
                for _ in 0..rng.gen_range(1..=2) {
                    store.insert(key(rng.gen_range(0..keys)), Observed::Version(WriteId(next_write)));
                    next_write += 1;
                }
                history.push(store.clone());
            }
            log.drop_as_if_crashed();
            log = DiskLog::open(path, durability).expect("the log reopens after a crash");
            sessions.clear();
            continue;
        }
        if roll < 6 && sessions[at].2.is_none() {
            let (session, seq, _) = sessions.swap_remove(at);
            let _ = log.append_session_ended(session, seq.checked_sub(1)).expect("session ended");
            continue;
        }
        if roll < 9
            && let Some(&txn) = finished.last()
        {
            // A write by a SQL function that a later read revealed (DESIGN.md §3), by the transaction that
            // committed last (so that no later writer came between).
            let (k, w) = (key(rng.gen_range(0..keys)), WriteId(next_write));
            next_write += 1;
            let _ = log.append_discovered_write(txn, k.clone(), w).expect("discovered write");
            store.insert(k, Observed::Version(w));
            history.push(store.clone());
            continue;
        }
        if roll < 11 && sessions[at].2.is_none() {
            // A session's next transactions ask for another level: under `declared`, the first that asks
            // for less than SERIALIZABLE stops garbage collection for good, which a checkpoint must keep.
            let level = IsolationLevel::ALL[rng.gen_range(0..IsolationLevel::ALL.len())];
            let _ = log.append_isolation(sessions[at].0, Some(level)).expect("isolation");
            continue;
        }
        let (session, seq, in_flight) = &mut sessions[at];
        if let Some(f) = in_flight.take() {
            let _ = log.append_outcome(f.txn, f.outcome, Some(next_txn)).expect("outcome");
            continue;
        }
        let mut t = LoggedTxn::new(TxnId(next_txn), *session, *seq);
        next_txn += 1;
        let mut writes = Vec::new();
        // A session's first transaction is a fence, as the proxy runs one when a connection opens.
        let fence = *seq % fence_every == 0;
        *seq += 1;
        if fence {
            t.fence = true;
            let seen = store.get(&fence_key()).copied().unwrap_or(Observed::PreHistory(0));
            t.ops.push(LoggedOp::Read { key: fence_key(), observed: seen, stmt: None });
            writes.push((fence_key(), WriteId(next_write)));
        } else {
            t.statements.push(format!("UPDATE kv SET v = v + 1 WHERE k = 'k{}'", rng.gen_range(0..keys)));
            for _ in 0..rng.gen_range(1..=3) {
                let k = key(rng.gen_range(0..keys));
                let state = match rng.gen_bool(stale_p) {
                    true => &history[rng.gen_range(0..history.len())],
                    false => &store,
                };
                let seen = state.get(&k).copied().unwrap_or(Observed::PreHistory(0));
                t.ops.push(LoggedOp::Read { key: k, observed: seen, stmt: Some(0) });
            }
            for _ in 0..rng.gen_range(1..=2) {
                writes.push((key(rng.gen_range(0..keys)), WriteId(next_write + writes.len() as u64)));
            }
        }
        next_write += writes.len() as u64 + 1;
        for (k, w) in &writes {
            t.ops.push(LoggedOp::Write { key: k.clone(), write: *w, stmt: None });
        }
        let (id, outcome) = (t.id, if rng.gen_bool(0.93) { Outcome::Committed } else { Outcome::Aborted });
        if rng.gen_bool(0.4) {
            let _ = log.append_intent(t).expect("intent");
            *in_flight = Some(InFlight { txn: id, outcome });
        } else {
            let _ = log.append_finished(t, outcome, Some(next_txn)).expect("finished");
        }
        if outcome == Outcome::Committed {
            store.extend(writes.into_iter().map(|(k, w)| (k, Observed::Version(w))));
            history.push(store.clone());
            finished.push(id);
        }
    }
    log.sync().expect("durable");
    log
}
