//! Each key's base version: the collected version that reads of the key's initial version stand for in the
//! residual history (`gc` rule 4, Cobra §4.3). Collection sets it as it promotes a version; admission asks
//! it of every judged read of an initial version (a read of the version before a key's base is stale).

use history::{Key, TxnId, WriteId};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::FastMap;

/// Each key's base version, if it has one. Keys are dense indices into the key table, so this is a vector
/// indexed by key: TPC-C reads initial versions of hundreds of thousands of keys, and a hash map's lookup
/// for each showed in profiles of its rounds.
///
/// It serializes as a map from key to version, as it did when it was one, so that checkpoints written
/// before read back.
#[derive(Debug, Default)]
pub(super) struct BaseVersions {
    by_key: Vec<Option<WriteId>>,
    /// Keys with a base version: the map form's length, which the checkpoint's encoding writes first.
    len: usize,
}

impl BaseVersions {
    /// The base version of `key`.
    pub(super) fn get(&self, key: Key) -> Option<WriteId> {
        self.by_key.get(key.0 as usize).copied().flatten()
    }

    /// Whether `key` has a base version.
    pub(super) fn contains(&self, key: Key) -> bool {
        self.get(key).is_some()
    }

    /// Makes `write` the base version of `key`, and returns the one it replaces.
    pub(super) fn insert(&mut self, key: Key, write: WriteId) -> Option<WriteId> {
        let i = key.0 as usize;
        if i >= self.by_key.len() {
            self.by_key.resize(i + 1, None);
        }
        let before = self.by_key[i].replace(write);
        if before.is_none() {
            self.len += 1;
        }
        before
    }

    /// Every key with a base version, and the version.
    fn iter(&self) -> impl Iterator<Item = (Key, WriteId)> + '_ {
        self.by_key.iter().enumerate().filter_map(|(i, w)| w.map(|w| (Key(i as u32), w)))
    }
}

/// Keys whose initial versions a collected write superseded while no version of the key is its base yet
/// (`gc` rule 3 made the write a tombstone, its key's frontier writer being still live), with the collected
/// writer. A key's initial versions precede every recorded write of it, so a read of one after such a
/// collection is stale exactly as a read of the tombstone is (Cobra §4.2's Guarantee puts the collected
/// writer before every covered reader); without this, admission let it through to a round in which the
/// writer, and so the read's anti-dependency on it, no longer was. Once the key has a base version, the
/// base answers instead and the entry goes, so this holds only keys whose frontier is live.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct SupersededInitials(FastMap<Key, TxnId>);

impl SupersededInitials {
    /// Notes that `writer`, now collected, wrote `key` after its initial versions; the first one noted
    /// stays (any of them proves a read of an initial version stale).
    pub(super) fn note(&mut self, key: Key, writer: TxnId) {
        self.0.entry(key).or_insert(writer);
    }

    /// The collected writer that superseded `key`'s initial versions, if one did and the key has no base.
    pub(super) fn by(&self, key: Key) -> Option<TxnId> {
        self.0.get(&key).copied()
    }

    /// `key` has a base version now, which stands for its initial versions from here on.
    pub(super) fn based(&mut self, key: Key) {
        self.0.remove(&key);
    }
}

impl Serialize for BaseVersions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (key, write) in self.iter() {
            map.serialize_entry(&key, &write)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for BaseVersions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = FastMap::<Key, WriteId>::deserialize(deserializer)?;
        let mut base = BaseVersions::default();
        for (key, write) in map {
            base.insert(key, write);
        }
        Ok(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_versions_encode_as_the_map_checkpoints_held() {
        let mut base = BaseVersions::default();
        assert_eq!(base.insert(Key(7), WriteId(70)), None);
        assert_eq!(base.insert(Key(2), WriteId(20)), None);
        assert_eq!(base.insert(Key(7), WriteId(71)), Some(WriteId(70)));
        assert_eq!((base.get(Key(7)), base.get(Key(3)), base.get(Key(100))), (Some(WriteId(71)), None, None));
        let map: FastMap<Key, WriteId> = [(Key(2), WriteId(20)), (Key(7), WriteId(71))].into_iter().collect();
        // Checkpoints encode with postcard, which writes a map's length first.
        let ours: FastMap<Key, WriteId> =
            postcard::from_bytes(&postcard::to_allocvec(&base).unwrap()).unwrap();
        assert_eq!(ours, map);
        let back: BaseVersions = postcard::from_bytes(&postcard::to_allocvec(&map).unwrap()).unwrap();
        assert_eq!(back.iter().collect::<Vec<_>>(), vec![(Key(2), WriteId(20)), (Key(7), WriteId(71))]);
        assert_eq!(back.len, 2);
    }
}
