//! Stage 3: chains (Cobra §3.1, `CombineWrites` and `InferRWEdges`).
//!
//! In: the versions and the ww pairs of the known graph. Out: for each key, its versions grouped into chains,
//! each a run of versions whose order is known (each written by a read-modify-write of the one before), and
//! the rw edges inside each chain: a reader of `chain[i]` must precede the writer of `chain[i+1]`, or it would
//! have read that version or a later one. With combining off, every version is its own chain.

use history::Key;

use crate::Few;
use crate::known_graph::{KnownGraph, Origin};
use crate::normalize::Normalized;

/// One chain of versions of one key.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    pub key: Key,
    pub versions: Few,
}

/// All chains, grouped by key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chains {
    pub list: Vec<Chain>,
    /// Chain indices, grouped by key (each group sorted, groups in key order).
    pub by_key: Vec<Few>,
}

/// Combines writes into chains and adds the rw edges inside each chain to the known graph.
pub(crate) fn combine_writes(norm: &Normalized, g: &mut KnownGraph, combine: bool) -> (Chains, u64) {
    let nv = norm.versions.len();
    let mut prev: Vec<Option<u32>> = vec![None; nv];
    if combine {
        for (v, n) in g.next.iter().enumerate() {
            if let Some(n) = n {
                prev[*n as usize] = Some(v as u32);
            }
        }
    }
    let next = |v: u32| if combine { g.next[v as usize] } else { None };
    let mut placed = vec![false; nv];
    let mut list = Vec::new();
    let walk = |start: u32, placed: &mut Vec<bool>| {
        let mut versions = Few::new();
        let mut v = start;
        loop {
            placed[v as usize] = true;
            versions.push(v);
            match next(v) {
                Some(n) if !placed[n as usize] => v = n,
                _ => break,
            }
        }
        Chain { key: norm.versions[start as usize].key, versions }
    };
    for v in 0..nv as u32 {
        if prev[v as usize].is_none() && !placed[v as usize] {
            list.push(walk(v, &mut placed));
        }
    }
    // What is left lies on cycles of read-modify-writes; the wr edges along them already close a cycle in
    // the known graph, so any cut will do.
    for v in 0..nv as u32 {
        if !placed[v as usize] {
            list.push(walk(v, &mut placed));
        }
    }
    // Sorted with each chain's key beside it: sorting indices by a key looked up per comparison was most of
    // this stage on TPC-C (a cache miss per comparison). Key and index packed in one u64, which sorts in
    // about half the instructions of the pair.
    let mut order: Vec<u64> =
        list.iter().enumerate().map(|(c, chain)| (u64::from(chain.key.0) << 32) | c as u64).collect();
    order.sort_unstable();
    let mut by_key: Vec<Few> = Vec::new();
    let mut last_key = None;
    for packed in order {
        let (key, c) = (Key((packed >> 32) as u32), packed as u32);
        if last_key != Some(key) {
            by_key.push(Few::new());
            last_key = Some(key);
        }
        if let Some(group) = by_key.last_mut() {
            group.push(c);
        }
    }
    // InferRWEdges.
    let mut rw = 0;
    for chain in &list {
        for pair in chain.versions.windows(2) {
            let (read, next) = (pair[0], pair[1]);
            let Some(writer) = norm.versions[next as usize].writer else { continue };
            for &r in &norm.versions[read as usize].readers {
                if r != writer && norm.counts_anti_dependencies(r) {
                    g.push(r, writer, Origin::ChainRw { read, next }, 0);
                    rw += 1;
                }
            }
        }
    }
    (Chains { list, by_key }, rw)
}
