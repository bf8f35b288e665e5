//! What the online verifier knows of each write id it has seen: written by a live transaction, its key's
//! base version, a tombstone, and so on ([`Known`]). Admission asks it of every read (`admission`);
//! collection moves versions from live to base or tombstone (`gc`).
//!
//! Tombstones are final and make up nearly all entries after a while (one per collected write), so they
//! are kept apart, compactly ([`WriteIdMap`]); the other kinds can still change and stay in a map.

use history::{TxnId, WriteId, WriteIdMap};
use serde::{Deserialize, Serialize};

use crate::FastMap;

/// What a known write id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Known {
    /// Written by a live transaction.
    Live,
    /// Superseded and collected: a later read of it is a stale read.
    Tombstone { writer: TxnId },
    /// Written by an aborted transaction that was collected: a later read of it is G1a.
    Aborted { writer: TxnId },
    /// Written by a transaction removed after a reject: later reads of it cannot be judged.
    Quarantined,
    /// Written by a transaction that was admitted before the write was discovered (a SQL function's or a
    /// trigger's write that a later read revealed, DESIGN.md §3): what rounds and collection decided
    /// without it stands, so later reads of it cannot be judged.
    DiscoveredLate,
    /// Its key's base version (written by `writer`): reads of it read the key's initial version in the
    /// residual history.
    Base { writer: TxnId },
}

/// Every write id the verifier knows, by kind; see the module documentation.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct KnownVersions {
    /// Every kind but tombstones. An id here wins over the same id among the tombstones (a write id
    /// written again after its first writer was collected, which admission reports).
    current: FastMap<WriteId, Known>,
    /// Each tombstone's writer.
    tombstones: WriteIdMap<TxnId>,
}

impl KnownVersions {
    /// What `write` is, if it is known.
    pub(super) fn get(&self, write: WriteId) -> Option<Known> {
        self.current
            .get(&write)
            .copied()
            .or_else(|| self.tombstones.get(write).map(|writer| Known::Tombstone { writer }))
    }

    /// Whether `write` is known.
    pub(super) fn contains(&self, write: WriteId) -> bool {
        self.get(write).is_some()
    }

    /// Records what `write` now is.
    pub(super) fn insert(&mut self, write: WriteId, known: Known) {
        match known {
            Known::Tombstone { writer } => {
                self.current.remove(&write);
                self.tombstones.insert(write, writer);
            }
            _ => {
                self.current.insert(write, known);
            }
        }
    }

    /// Records that a live transaction wrote `write`, and returns what the id was before ([`Self::get`]),
    /// in one lookup of the map: admission does this for every write it admits.
    pub(super) fn insert_live(&mut self, write: WriteId) -> Option<Known> {
        match self.current.insert(write, Known::Live) {
            Some(before) => Some(before),
            None => self.tombstones.get(write).map(|writer| Known::Tombstone { writer }),
        }
    }

    /// Forgets a version that is not a tombstone (a retired link's write).
    pub(super) fn remove(&mut self, write: WriteId) {
        self.current.remove(&write);
    }

    /// How many tombstones there are.
    pub(super) fn tombstones(&self) -> usize {
        self.tombstones.len()
    }

    /// How many write ids are known.
    pub(super) fn len(&self) -> usize {
        self.current.len() + self.tombstones.len()
    }
}
