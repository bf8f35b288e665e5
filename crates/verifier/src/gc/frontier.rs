//! Rule 3 of garbage collection: which versions are on the frontier (Cobra §4.3 (1)). A version `x` written
//! by `t` is *superseded* when an old transaction `u ≠ t` that `t` reaches in the known graph wrote another
//! version of `x`'s key; the versions that are not superseded are the frontier.
//!
//! Asked version by version, that is a scan of every version of the key with a reachability query each,
//! which is quadratic in a key's versions: on TPC-C, where every order updates its district's row, it was a
//! quarter of collection's time. Stage 3's chains answer most of it without a query. Each version of a chain
//! was written by a read-modify-write of the one before, so the known graph has a wr edge from each writer on
//! a chain to the next, and `t` reaches every writer further down `x`'s chain: when one of them is old, `x` is
//! superseded. When a key has one chain, nothing else can supersede `x`: the writers before `x` on the chain
//! reach `t`, so `t` reaching one of them would close a cycle in the known graph of an accepted round, which
//! is acyclic. Only keys written along more than one chain (blind writes, or two read-modify-writes of one
//! version) still need the scan.

use kernels::Reachability;

use crate::chains::Chains;
use crate::normalize::Normalized;

/// Every version of each key, found through stage 3's chains: a version's key is the key of its chain.
pub(super) struct KeyVersions<'a> {
    chains: &'a Chains,
    /// Each version's chain, as an index into `chains.list`.
    chain_of: Vec<u32>,
    /// Each chain's key, as an index into `chains.by_key`.
    key_of: Vec<u32>,
}

impl<'a> KeyVersions<'a> {
    /// Indexes `chains`, which cover all `versions` versions.
    pub(super) fn new(chains: &'a Chains, versions: usize) -> Self {
        let mut chain_of = vec![0; versions];
        for (c, chain) in chains.list.iter().enumerate() {
            for &x in &chain.versions {
                chain_of[x as usize] = c as u32;
            }
        }
        let mut key_of = vec![0; chains.list.len()];
        for (k, group) in chains.by_key.iter().enumerate() {
            for &c in group {
                key_of[c as usize] = k as u32;
            }
        }
        KeyVersions { chains, chain_of, key_of }
    }

    /// The chains of `x`'s key.
    fn chains_of_key(&self, x: u32) -> &[u32] {
        &self.chains.by_key[self.key_of[self.chain_of[x as usize] as usize] as usize]
    }

    /// Every version of `x`'s key, `x` included.
    pub(super) fn of(&self, x: u32) -> impl Iterator<Item = u32> + '_ {
        self.chains_of_key(x).iter().flat_map(|&c| self.chains.list[c as usize].versions.iter().copied())
    }
}

/// For each version of `norm`, whether it is on the frontier, given whether each vertex is `old` and
/// reachability in the known graph.
pub(super) fn frontier(
    norm: &Normalized,
    keys: &KeyVersions,
    old: &[bool],
    reach: &dyn Reachability,
) -> Vec<bool> {
    let writer = |x: u32| norm.versions[x as usize].writer;
    let old_written = |x: u32| writer(x).is_some_and(|u| old[u as usize]);
    let mut frontier = vec![false; norm.versions.len()];
    for chain in &keys.chains.list {
        let Some(&head) = chain.versions.first() else { continue };
        let alone = keys.chains_of_key(head).len() == 1;
        // Walking the chain back to front: whether a version further down was written by an old transaction.
        let mut later_old = false;
        for &x in chain.versions.iter().rev() {
            frontier[x as usize] = match writer(x) {
                Some(t) => !later_old && (alone || !superseded_by_scan(norm, keys, old, reach, x, t)),
                None => false,
            };
            later_old |= old_written(x);
        }
    }
    // The scan of every version is the definition; debug builds (every test) hold the shortcuts to it.
    debug_assert!(
        (0..norm.versions.len() as u32).all(|x| frontier[x as usize]
            == writer(x).is_some_and(|t| !superseded_by_scan(norm, keys, old, reach, x, t))),
        "a shortcut of the frontier disagrees with the scan of every version"
    );
    frontier
}

/// Whether version `x`, written by `t`, is superseded by another version of its key whose old writer `t`
/// reaches: rule 3's definition, one reachability query per version of the key.
fn superseded_by_scan(
    norm: &Normalized,
    keys: &KeyVersions,
    old: &[bool],
    reach: &dyn Reachability,
    x: u32,
    t: u32,
) -> bool {
    keys.of(x).any(|y| {
        y != x
            && norm.versions[y as usize]
                .writer
                .is_some_and(|u| u != t && old[u as usize] && reach.reaches(t, u))
    })
}
