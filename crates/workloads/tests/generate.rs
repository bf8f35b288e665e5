//! Generated histories: serializable by construction (the verifier accepts them), with the intended mix of
//! transaction types, and reproducible from their seed.

use std::collections::HashMap;

use history::{History, Observed, Op, Outcome};
use workloads::memory::{GenerateOptions, Generated, Interleave, generate};
use workloads::{Sizes, Workload, WorkloadName};

/// Small initial states, so that a few hundred transactions still touch shared rows.
fn small(name: WorkloadName) -> Workload {
    Workload::new(
        name,
        &Sizes {
            users: Some(200),
            items: Some(500),
            customers: Some(30),
            keys: Some(300),
            ..Sizes::default()
        },
    )
}

fn gen_for(name: WorkloadName, txns: u64, seed: u64, interleave: Interleave) -> Generated {
    let opts = GenerateOptions { txns, clients: 8, seed, interleave, fence_every: None };
    generate(&small(name), &opts).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_workload_generates_a_history_the_verifier_accepts() {
    for name in WorkloadName::ALL {
        for interleave in [Interleave::Random, Interleave::RoundRobin] {
            let g = gen_for(name, 600, 11, interleave);
            let h = &g.history;
            assert_eq!(h.transactions.len(), 600, "{name}");
            assert!(h.stats().reads > 0 && h.stats().writes > 0, "{name}: {:?}", h.stats());
            let report = verifier::verify(h, &verifier::Options::default()).unwrap();
            assert!(report.is_accept(), "{name} {interleave:?}: {:?}", report.verdict);
            let strict =
                verifier::Options { level: verifier::Level::StrictSerializable, ..Default::default() };
            assert!(
                verifier::verify(h, &strict).unwrap().is_accept(),
                "{name}: serial order is real-time order"
            );
        }
    }
}

#[test]
fn the_mix_matches_the_workload() {
    for name in WorkloadName::ALL {
        let w = small(name);
        let g = gen_for(name, 4000, 5, Interleave::Random);
        let total: u64 = g.mix.values().sum();
        assert_eq!(total, 4000);
        for (kind, share) in w.expected_mix() {
            let got = g.mix.get(kind).copied().unwrap_or(0) as f64 / total as f64;
            assert!((got - share).abs() < 0.03, "{name}: {kind} is {got:.3}, expected {share:.3}");
        }
        assert!(g.mix.keys().all(|k| w.expected_mix().contains_key(k)), "{name}: {:?}", g.mix);
    }
}

#[test]
fn blindw_transactions_are_read_only_or_write_only_with_eight_ops() {
    for name in [WorkloadName::BlindWRm, WorkloadName::BlindWRw, WorkloadName::BlindWWm] {
        let g = gen_for(name, 1000, 3, Interleave::Random);
        let mut read_only = 0;
        for t in &g.history.transactions {
            assert_eq!(t.ops.len(), 8, "{name}");
            let reads = t.ops.iter().filter(|op| matches!(op, Op::Read { .. })).count();
            assert!(reads == 0 || reads == 8, "{name}: a mixed transaction");
            read_only += usize::from(reads == 8);
        }
        assert_eq!(read_only as u64, g.mix["read_only"], "{name}");
    }
}

#[test]
fn tpcc_rolls_back_about_one_percent_of_new_orders() {
    let g = gen_for(WorkloadName::Tpcc, 6000, 9, Interleave::Random);
    let aborted = g.history.transactions.iter().filter(|t| t.outcome == Outcome::Aborted).count() as u64;
    assert_eq!(aborted, g.rollbacks);
    let new_orders = g.mix["new_order"];
    assert!(aborted > 0 && aborted < new_orders / 30, "{aborted} of {new_orders}");
}

#[test]
fn reads_of_initial_and_missing_rows_are_labelled() {
    let g = gen_for(WorkloadName::Rubis, 2000, 4, Interleave::Random);
    let observed: Vec<Observed> = g
        .history
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match *op {
            Op::Read { observed, .. } => Some(observed),
            Op::Write { .. } => None,
        })
        .collect();
    assert!(observed.contains(&Observed::PreHistory(0)));
    assert!(observed.contains(&Observed::Absent), "the first id allocation of a client reads a missing row");
    assert!(observed.iter().any(|o| matches!(o, Observed::Version(_))));
    let names: Vec<&str> = g.history.keys.names().iter().map(|k| k.namespace.as_str()).collect();
    assert!(names.contains(&"rb_item") && names.contains(&"rb_bid"), "{names:?}");
}

#[test]
fn the_same_seed_gives_the_same_history() {
    for name in WorkloadName::ALL {
        let a = gen_for(name, 300, 42, Interleave::Random);
        let b = gen_for(name, 300, 42, Interleave::Random);
        assert_eq!(a.history, b.history, "{name}");
        let c = gen_for(name, 300, 43, Interleave::Random);
        assert_ne!(a.history, c.history, "{name}");
    }
}

/// Makes the last of two read-modify-writes of one key read the version the first one read: a lost update.
fn inject_lost_update(h: &mut History) -> bool {
    let mut first_rmw: HashMap<history::Key, (usize, Observed)> = HashMap::new();
    for (i, t) in h.transactions.iter().enumerate() {
        if t.outcome != Outcome::Committed {
            continue;
        }
        for op in &t.ops {
            if let Op::Read { key, observed, .. } = *op
                && t.ops.iter().any(|w| matches!(w, Op::Write { key: k, .. } if *k == key))
            {
                if let Some(&(_, old)) = first_rmw.get(&key)
                    && old != observed
                {
                    for op in &mut h.transactions[i].ops {
                        if let Op::Read { key: k, observed: o, .. } = op
                            && *k == key
                        {
                            *o = old;
                        }
                    }
                    return true;
                }
                first_rmw.entry(key).or_insert((i, observed));
            }
        }
    }
    false
}

#[test]
fn a_tampered_history_is_rejected() {
    let mut h = gen_for(WorkloadName::Tpcc, 300, 1, Interleave::Random).history;
    assert!(inject_lost_update(&mut h), "no read-modify-write pair to tamper with");
    let report = verifier::verify(&h, &verifier::Options::default()).unwrap();
    assert!(!report.is_accept(), "a lost update must be rejected");
}

#[test]
fn fences_chain_through_every_session_and_keep_the_history_serializable() {
    let w = small(WorkloadName::Twitter);
    let opts = GenerateOptions {
        txns: 1000,
        clients: 8,
        seed: 2,
        interleave: Interleave::Random,
        fence_every: Some(20),
    };
    let g = generate(&w, &opts).unwrap();
    let h = &g.history;
    let fences: Vec<_> = h.transactions.iter().filter(|t| t.fence).collect();
    // One at each session's start, then one per 20 of its transactions.
    assert!(fences.len() >= 8 + 1000 / 20 - 8 && fences.len() <= 8 + 1000 / 20, "{}", fences.len());
    assert_eq!(h.transactions.len(), 1000 + fences.len());
    for (session, txns) in h.sessions() {
        assert!(txns[0].fence, "{session} does not start with a fence");
    }
    // Each fence reads the version the previous fence wrote: one chain through all sessions.
    let mut last = Observed::PreHistory(0);
    for f in &fences {
        let (read, wrote) = match f.ops.as_slice() {
            [Op::Read { observed, .. }, Op::Write { write, .. }] => (*observed, *write),
            ops => panic!("a fence is a read-modify-write, not {ops:?}"),
        };
        assert_eq!(read, last);
        last = Observed::Version(wrote);
    }
    assert!(verifier::verify(h, &verifier::Options::default()).unwrap().is_accept());
}

fn chengrw(keys: u64, reads: u32, writes: u32) -> Workload {
    Workload::new(
        WorkloadName::ChengRw,
        &Sizes { keys: Some(keys), reads: Some(reads), writes: Some(writes), ..Sizes::default() },
    )
}

fn gen_chengrw(w: &Workload, txns: u64, seed: u64, fence_every: Option<u32>) -> Generated {
    let opts = GenerateOptions { txns, clients: 24, seed, interleave: Interleave::Random, fence_every };
    generate(w, &opts).unwrap()
}

#[test]
fn chengrw_reads_then_writes_the_asked_counts_of_distinct_keys_in_range() {
    for (keys, reads, writes) in [(10_000, 4, 4), (50, 2, 6), (5, 8, 8)] {
        let g = gen_chengrw(&chengrw(keys, reads, writes), 500, 7, None);
        let h = &g.history;
        assert_eq!(h.transactions.len(), 500);
        assert_eq!(g.mix["read_write"], 500);
        // Counts above the key space are capped at it.
        let (reads, writes) = (reads.min(keys as u32) as usize, writes.min(keys as u32) as usize);
        for t in &h.transactions {
            let n_reads = t.ops.iter().take_while(|op| matches!(op, Op::Read { .. })).count();
            assert_eq!(n_reads, reads, "{t:?}");
            assert_eq!(t.ops.len() - n_reads, writes, "reads come first, then writes: {t:?}");
            let (r, w) = t.ops.split_at(n_reads);
            for part in [r, w] {
                let mut ks: Vec<_> = part.iter().map(Op::key).collect();
                ks.sort_unstable();
                ks.dedup();
                assert_eq!(ks.len(), part.len(), "keys repeat within the reads or the writes: {t:?}");
                for k in ks {
                    let name = h.keys.name(k).unwrap();
                    assert_eq!(name.namespace, "chengrw_kv");
                    let n: u64 = std::str::from_utf8(&name.bytes).unwrap().parse().unwrap();
                    assert!(n < keys, "key {n} out of 0..{keys}");
                }
            }
        }
    }
}

#[test]
fn chengrw_keys_are_spread_uniformly() {
    let g = gen_chengrw(&chengrw(100, 4, 4), 5000, 1, None);
    let mut hits: HashMap<history::Key, u64> = HashMap::new();
    for op in g.history.transactions.iter().flat_map(|t| &t.ops) {
        *hits.entry(op.key()).or_default() += 1;
    }
    // 40,000 ops over 100 keys: 400 each on average; a uniform draw stays well within ±25%.
    assert_eq!(hits.len(), 100);
    assert!(hits.values().all(|&n| (300..=500).contains(&n)), "{:?}", hits.values().collect::<Vec<_>>());
}

#[test]
fn chengrw_is_reproducible_from_its_seed() {
    let w = chengrw(1000, 4, 4);
    let a = gen_chengrw(&w, 2000, 9, Some(20));
    assert_eq!(a.history, gen_chengrw(&w, 2000, 9, Some(20)).history);
    assert_ne!(a.history, gen_chengrw(&w, 2000, 10, Some(20)).history);
}

#[test]
fn chengrw_with_fences_is_accepted_and_a_stale_read_in_it_is_rejected() {
    let w = chengrw(200, 4, 4);
    let g = gen_chengrw(&w, 3000, 4, Some(20));
    let h = &g.history;
    assert!(h.transactions.iter().filter(|t| t.fence).count() >= 3000 / 20);
    assert!(verifier::verify(h, &verifier::Options::default()).unwrap().is_accept());
    // A read-modify-write that reads the version an earlier one already overwrote: a lost update. Without
    // fences, so that the stale read is of a chengRW key and not of the fence chain.
    let mut tampered = gen_chengrw(&w, 3000, 4, None).history;
    assert!(verifier::verify(&tampered, &verifier::Options::default()).unwrap().is_accept());
    assert!(inject_lost_update(&mut tampered), "no read-modify-write pair to tamper with");
    let report = verifier::verify(&tampered, &verifier::Options::default()).unwrap();
    assert!(!report.is_accept(), "a stale read must be rejected");
}
