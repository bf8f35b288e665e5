//! Rule 3 of garbage collection: which versions are on the frontier (Cobra §4.3 (1)). A version `x` written
//! by `t` is *superseded* when an old transaction `u ≠ t` that `t` reaches in the known graph wrote another
//! version of `x`'s key; the versions that are not superseded are the frontier.
//!
//! Asked version by version, that is a scan of every version of the key with a reachability query each,
//! which is quadratic in a key's versions: on TPC-C, where every order updates its district's row, it was a
//! quarter of collection's time. Read-modify-writes answer most of it without a query. `next[x]` is the
//! version that a transaction which read `x` wrote (the known graph's `next`), so the known graph has the wr
//! edge `t → writer(next[x])`, and `t` reaches every writer further down `x`'s read-modify-write chain. When
//! one of them is old, `x` is superseded. When *all* of a key's versions lie on one chain, nothing else can
//! supersede `x`: the writers before `x` on the chain reach `t`, so `t` reaching one of them would close a
//! cycle in the known graph of an accepted round, which is acyclic. Only keys written along more than one
//! chain (blind writes, or two read-modify-writes of one version) still need the scan.

use history::Key;
use kernels::Reachability;

use crate::FastMap;
use crate::normalize::Normalized;

/// For each version of `norm`, whether it is on the frontier. `next` is the known graph's read-modify-write
/// successor of each version, `by_key` every version of each key, `old` whether each vertex is old, and
/// `reach` reachability in the known graph.
pub(super) fn frontier(
    norm: &Normalized,
    next: &[Option<u32>],
    by_key: &FastMap<Key, Vec<u32>>,
    old: &[bool],
    reach: &dyn Reachability,
) -> Vec<bool> {
    let versions = &norm.versions;
    let writer = |x: u32| versions[x as usize].writer;
    let successor = |x: u32| next.get(x as usize).copied().flatten();
    // A key whose versions lie on one chain has exactly one version that follows no other.
    let mut follows = vec![false; versions.len()];
    for y in (0..versions.len() as u32).filter_map(successor) {
        follows[y as usize] = true;
    }
    let one_chain: FastMap<Key, bool> = by_key
        .iter()
        .map(|(&key, xs)| (key, xs.iter().filter(|&&x| !follows[x as usize]).count() == 1))
        .collect();
    let later_old =
        old_further_down(versions.len(), &successor, &|x| writer(x).is_some_and(|u| old[u as usize]));
    let frontier: Vec<bool> = (0..versions.len() as u32)
        .map(|x| {
            let Some(t) = writer(x) else { return false };
            if later_old[x as usize] {
                return false;
            }
            let key = versions[x as usize].key;
            one_chain[&key] || !superseded_by_scan(norm, by_key, old, reach, x, t)
        })
        .collect();
    // The scan of every version is the definition; debug builds (every test) hold the shortcuts to it.
    debug_assert!(
        (0..versions.len() as u32).all(|x| frontier[x as usize]
            == writer(x).is_some_and(|t| !superseded_by_scan(norm, by_key, old, reach, x, t))),
        "a shortcut of the frontier disagrees with the scan of every version"
    );
    frontier
}

/// Whether version `x`, written by `t`, is superseded by another version of its key whose old writer `t`
/// reaches: rule 3's definition, one reachability query per version of the key.
fn superseded_by_scan(
    norm: &Normalized,
    by_key: &FastMap<Key, Vec<u32>>,
    old: &[bool],
    reach: &dyn Reachability,
    x: u32,
    t: u32,
) -> bool {
    by_key[&norm.versions[x as usize].key].iter().any(|&y| {
        y != x
            && norm.versions[y as usize]
                .writer
                .is_some_and(|u| u != t && old[u as usize] && reach.reaches(t, u))
    })
}

/// For each of `count` versions, whether some version strictly after it on its read-modify-write chain
/// (following `successor`) is `old_written`. Each chain is walked once: a walk stops at the first version
/// already answered and answers the versions it passed, back to front.
fn old_further_down(
    count: usize,
    successor: &dyn Fn(u32) -> Option<u32>,
    old_written: &dyn Fn(u32) -> bool,
) -> Vec<bool> {
    let mut answer: Vec<Option<bool>> = vec![None; count];
    let mut walk: Vec<u32> = Vec::new();
    for start in 0..count as u32 {
        if answer[start as usize].is_some() {
            continue;
        }
        // Whether a version strictly after the walk's last one is old-written; the end of a chain says no.
        // Chains are paths in an accepted round; the length bound only keeps a malformed one finite.
        let mut below = false;
        let mut x = start;
        walk.push(x);
        while let Some(y) = successor(x) {
            if let Some(known) = answer[y as usize] {
                below = known || old_written(y);
                break;
            }
            if walk.len() > count {
                break;
            }
            walk.push(y);
            x = y;
        }
        while let Some(x) = walk.pop() {
            answer[x as usize] = Some(below);
            below = below || old_written(x);
        }
    }
    answer.into_iter().map(|a| a.unwrap_or(false)).collect()
}
