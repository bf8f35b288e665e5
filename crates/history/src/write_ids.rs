//! A compact map from write ids, for records that only grow: the online verifier's tombstones (every
//! collected version, with its writer) and the proxy's book of recorded writes. Both hold one entry per
//! version ever written and are most of what a long run's memory grows with.
//!
//! A hash map holds a `(u64, u64)` entry in about 38 bytes (key, value, control byte and the map's slack).
//! Here the newest entries sit in a small map and the rest in one array sorted by write id, 8 bytes plus the
//! value each (and room for up to a quarter more, which merges fill in place), which the newest are merged
//! into once they are an eighth of it (so an entry is copied about nine times on average, whatever the
//! total). A lookup in the array goes through an index of equal slices of the id range, so that it costs a
//! step into a short stretch rather than a binary search over millions: write ids are hashes (the proxy's)
//! or counters (importers'), spread evenly either way. A skewed spread only makes the stretches longer,
//! never a lookup wrong. Entries are never removed.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{FastMap, WriteId};

/// The newest entries are merged into the sorted array once there are this many and they are an eighth of
/// it.
const MIN_RECENT: usize = 1 << 10;

/// Sorted entries per slice of the index, on average.
const PER_SLICE: usize = 16;

/// Values by write id, compactly; see the module documentation.
#[derive(Debug, Deserialize)]
#[serde(from = "Stored<V>", bound(deserialize = "V: DeserializeOwned + Copy"))]
pub struct WriteIdMap<V> {
    /// The newest entries, not merged yet. An id here is newer than the same id in `sorted`.
    recent: FastMap<WriteId, V>,
    /// The rest, sorted by write id, each id once.
    sorted: Vec<(WriteId, V)>,
    /// Where each slice of `sorted`'s id range starts in it, and one past the end; built from `sorted`.
    index: Vec<u32>,
}

/// What a checkpoint stores: the entries, without the index (rebuilt from them).
#[derive(Deserialize)]
struct Stored<V> {
    recent: Vec<(WriteId, V)>,
    sorted: Vec<(WriteId, V)>,
}

/// [`Stored`], borrowed for writing, so that a checkpoint does not copy the sorted array.
#[derive(Serialize)]
struct StoredRef<'a, V> {
    recent: Vec<(WriteId, V)>,
    sorted: &'a [(WriteId, V)],
}

impl<V: Serialize + Copy> Serialize for WriteIdMap<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let recent = self.recent.iter().map(|(w, t)| (*w, *t)).collect();
        StoredRef { recent, sorted: &self.sorted }.serialize(s)
    }
}

impl<V: Copy> From<Stored<V>> for WriteIdMap<V> {
    fn from(s: Stored<V>) -> Self {
        // What was stored is input: sort it again rather than trust it, so that a lookup never misses.
        let mut t: WriteIdMap<V> = s.sorted.into_iter().collect();
        t.recent = s.recent.into_iter().collect();
        t
    }
}

impl<V: Copy> FromIterator<(WriteId, V)> for WriteIdMap<V> {
    /// A map of the entries, the last of each id winning, with all of them sorted at once.
    fn from_iter<I: IntoIterator<Item = (WriteId, V)>>(entries: I) -> Self {
        let mut sorted: Vec<(WriteId, V)> = entries.into_iter().collect();
        // A stable sort keeps each id's entries in order; reversed, `dedup` keeps the last.
        sorted.sort_by_key(|e| e.0);
        sorted.reverse();
        sorted.dedup_by_key(|e| e.0);
        sorted.reverse();
        let mut t = WriteIdMap { recent: FastMap::default(), sorted, index: Vec::new() };
        t.build_index();
        t
    }
}

impl<V> Default for WriteIdMap<V> {
    fn default() -> Self {
        WriteIdMap { recent: FastMap::default(), sorted: Vec::new(), index: Vec::new() }
    }
}

impl<V: Copy> WriteIdMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `write`, if it has one.
    pub fn get(&self, write: WriteId) -> Option<V> {
        if let Some(&v) = self.recent.get(&write) {
            return Some(v);
        }
        let range = self.slice_of(write)?;
        let stretch = &self.sorted[range];
        stretch.binary_search_by_key(&write, |e| e.0).ok().map(|i| stretch[i].1)
    }

    /// Whether `write` has a value.
    pub fn contains(&self, write: WriteId) -> bool {
        self.get(write).is_some()
    }

    /// Sets the value of `write`; the same id again replaces the earlier value.
    pub fn insert(&mut self, write: WriteId, value: V) {
        self.recent.insert(write, value);
        if self.recent.len() >= MIN_RECENT.max(self.sorted.len() / 8) {
            self.merge();
        }
    }

    /// How many ids have a value (an id set twice may count twice until the next merge).
    pub fn len(&self) -> usize {
        self.recent.len() + self.sorted.len()
    }

    /// Every entry, in no particular order (an id set twice may come twice until the next merge).
    pub fn iter(&self) -> impl Iterator<Item = (WriteId, V)> + '_ {
        self.sorted.iter().copied().chain(self.recent.iter().map(|(w, v)| (*w, *v)))
    }

    /// Whether no id has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Merges the newest into the sorted array; the newest win where ids repeat.
    ///
    /// In place, from the back, into room grown by at least a quarter at a time: merging into a fresh array
    /// each time touched as many fresh pages as the array has, which the kernel zeroed first (6% of the
    /// online verifier's samples in one `perf` run of TPC-C's rounds), and held both arrays at once.
    fn merge(&mut self) {
        let mut newest: Vec<(WriteId, V)> = self.recent.drain().collect();
        newest.sort_unstable_by_key(|e| e.0);
        let older_len = self.sorted.len();
        if self.sorted.capacity() < older_len + newest.len() {
            self.sorted.reserve_exact(newest.len().max(older_len / 4));
        }
        // Any entries do to lengthen the array; every slot past the older entries is written below.
        self.sorted.extend_from_slice(&newest);
        // `sorted[..a]`: older entries not placed yet; `sorted[k..]`: placed. `k - a` is the newest entries
        // left plus the older ones dropped for a newer entry of their id, so a write at `k - 1` never lands on
        // an older entry still to be read. By index: every entry is copied here about nine times over its
        // life, so the loop is most of what an entry costs.
        let (mut a, mut b, mut k) = (older_len, newest.len(), self.sorted.len());
        while b > 0 {
            k -= 1;
            if a > 0 && self.sorted[a - 1].0 > newest[b - 1].0 {
                self.sorted[k] = self.sorted[a - 1];
                a -= 1;
            } else {
                if a > 0 && self.sorted[a - 1].0 == newest[b - 1].0 {
                    a -= 1;
                }
                self.sorted[k] = newest[b - 1];
                b -= 1;
            }
        }
        // The older entries dropped leave as many slots between the two parts.
        self.sorted.drain(a..k);
        self.build_index();
    }

    /// The number of slices and the bounds of the id range they split, or `None` when nothing is sorted.
    fn slices(&self) -> Option<(usize, u64, u64)> {
        let (first, last) = (self.sorted.first()?.0.0, self.sorted.last()?.0.0);
        Some(((self.sorted.len() / PER_SLICE).next_power_of_two(), first, last))
    }

    /// Which slice of `[first, last]` the id `w` falls in.
    fn slice(w: u64, slices: usize, first: u64, last: u64) -> usize {
        let span = u128::from(last - first) + 1;
        (u128::from(w - first) * slices as u128 / span) as usize
    }

    fn build_index(&mut self) {
        self.index.clear();
        let Some((slices, first, last)) = self.slices() else { return };
        self.index.reserve(slices + 1);
        let span = u128::from(last - first) + 1;
        let mut at = 0;
        for s in 0..slices {
            // [`Self::slice`] puts `w` below slice `s` exactly when `(w - first) · slices < s · span`, that is
            // when `w - first < ⌈s · span / slices⌉`: one division per slice, not one per entry (a 128-bit
            // division per entry, at every merge, was most of what a tombstone cost the online verifier).
            let start = (s as u128 * span).div_ceil(slices as u128);
            while at < self.sorted.len() && u128::from(self.sorted[at].0.0 - first) < start {
                at += 1;
            }
            self.index.push(at as u32);
        }
        self.index.push(self.sorted.len() as u32);
    }

    /// The stretch of `sorted` that holds `write` if anything does.
    fn slice_of(&self, write: WriteId) -> Option<std::ops::Range<usize>> {
        let (slices, first, last) = self.slices()?;
        if write.0 < first || write.0 > last {
            return None;
        }
        let s = Self::slice(write.0, slices, first, last);
        Some(self.index[s] as usize..self.index[s + 1] as usize)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::TxnId;

    /// Random inserts, with repeated ids, against a plain map; ids spread as hashes, as counters and
    /// clustered (two far-apart runs of counters, the worst spread for the index).
    #[test]
    fn every_entry_is_found_and_nothing_else_across_merges() {
        let mut rng = StdRng::seed_from_u64(7);
        type Shape = dyn Fn(&mut StdRng, u64) -> u64;
        let shapes: [&Shape; 3] = [&|rng, _| rng.r#gen::<u64>(), &|_, i| 1_000 + i * 3, &|_, i| {
            if i % 2 == 0 { i } else { u64::MAX - i }
        }];
        for shape in shapes {
            let mut store = WriteIdMap::default();
            let mut oracle: HashMap<WriteId, TxnId> = HashMap::new();
            let mut ids = Vec::new();
            for i in 0..200_000u64 {
                let w = if i % 97 == 0 && !ids.is_empty() {
                    ids[rng.gen_range(0..ids.len())]
                } else {
                    WriteId(shape(&mut rng, i))
                };
                ids.push(w);
                store.insert(w, TxnId(i));
                oracle.insert(w, TxnId(i));
            }
            assert!(!store.sorted.is_empty(), "the test must reach a merge");
            // Before and after the last entries are merged.
            for merged in [false, true] {
                if merged {
                    store.merge();
                    assert_eq!(store.len(), oracle.len());
                    // The index puts every entry in its slice's stretch, the one a lookup searches.
                    let (slices, first, last) = store.slices().expect("entries are sorted");
                    for (i, (w, _)) in store.sorted.iter().enumerate() {
                        let s = WriteIdMap::<TxnId>::slice(w.0, slices, first, last);
                        let stretch = store.index[s] as usize..store.index[s + 1] as usize;
                        assert!(stretch.contains(&i), "entry {w} at {i} is outside its stretch {stretch:?}");
                    }
                }
                for (w, writer) in &oracle {
                    assert_eq!(store.get(*w), Some(*writer), "entry {w} lost or stale");
                }
                for _ in 0..20_000 {
                    let w = WriteId(rng.r#gen::<u64>());
                    assert_eq!(store.get(w), oracle.get(&w).copied());
                }
                for w in [WriteId(0), WriteId(u64::MAX), WriteId(1_001), WriteId(999)] {
                    assert_eq!(store.get(w), oracle.get(&w).copied());
                }
            }
        }
    }

    /// Built from a list, the last entry of each id wins, and later inserts merge with it.
    #[test]
    fn a_map_built_from_a_list_keeps_the_last_of_each_id() {
        let mut map: WriteIdMap<u32> =
            [(WriteId(5), 1), (WriteId(3), 2), (WriteId(5), 3), (WriteId(9), 4)].into_iter().collect();
        assert_eq!((map.get(WriteId(5)), map.get(WriteId(3)), map.get(WriteId(4))), (Some(3), Some(2), None));
        for i in 0..MIN_RECENT as u64 {
            map.insert(WriteId(100 + i), 7);
        }
        map.insert(WriteId(5), 8);
        // The inserts above were merged; id 5 is now both merged and recent, and counts twice until the next
        // merge.
        assert_eq!((map.get(WriteId(5)), map.get(WriteId(9)), map.len()), (Some(8), Some(4), MIN_RECENT + 4));
    }

    /// Serialized and read back, it keeps every entry and rebuilds the index.
    #[test]
    fn a_stored_map_restores_every_entry() {
        let mut store = WriteIdMap::default();
        for i in 0..(MIN_RECENT as u64 + 10) {
            store.insert(WriteId(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)), TxnId(i));
        }
        let bytes = serde_json::to_vec(&store).unwrap();
        let back: WriteIdMap<TxnId> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.len(), store.len());
        for i in 0..(MIN_RECENT as u64 + 10) {
            assert_eq!(back.get(WriteId(i.wrapping_mul(0x9e37_79b9_7f4a_7c15))), Some(TxnId(i)));
        }
    }
}
