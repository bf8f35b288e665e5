//! Links (`gc` rule 6): the orderings between kept transactions that the residual history cannot re-derive
//! after collection, kept as a synthetic write and read. Not one of Fig. 3's stages: collection adds them
//! after an accepted round, and retires them when it deletes their source.
//!
//! A link `u → v` is a wr edge: `u` writes a synthetic key of its own (namespace `krait.gc`) once, and `v`
//! reads that version. These ops are the verifier's, not the client's; they are appended, so the client's
//! op indices do not change, and reports show them under `krait.gc`.
//!
//! **Retiring.** When collection deletes `u`, its link has done its job: every ordering through `u` that
//! still matters between kept transactions is a new link (rule 6). A client's version whose writer is
//! deleted becomes its key's base version, so that its live readers keep their rw edges to the key's later
//! writers; a link key has no other writer, so its readers' reads carry no edge once `u` is gone, and they
//! are dropped instead. Nothing of the link is then left, so its key goes back to a free list for the next
//! link. Before, each link left its key name in the key table, a base version and an entry in the map of
//! known versions for ever: about 200 bytes per link, most of what `krait serve` grew by under chengRW.
//! A recycled key is never read stale: a link's reads are only ever made here, for a live writer, and the
//! retired ones are all dropped before the key is used again.

use history::{Key, KeyName, Observed, Op, TxnId, WriteId};

use super::{Known, OnlineVerifier};
use crate::FastMap;

/// Synthetic write ids of links live in the top of the id space (importers' ids are hashes or counters).
const LINK_WRITE_BASE: u64 = 0xFFFF_0000_0000_0000;

/// The namespace of link keys.
const LINK_NAMESPACE: &str = "krait.gc";

impl OnlineVerifier {
    /// Keeps each ordering `u → v` between live transactions (indices into the residual history) as a link.
    pub(super) fn link(&mut self, links: &[(usize, usize)]) {
        for &(u, v) in links {
            let uid = self.work.transactions[u].id;
            let (key, write) = match self.links.get(&uid) {
                Some(&kw) => kw,
                None => {
                    let key = self.free_link_keys.pop().unwrap_or_else(|| {
                        self.link_keys_made += 1;
                        self.work.keys.intern(KeyName {
                            namespace: LINK_NAMESPACE.to_owned(),
                            bytes: self.link_keys_made.to_string().into_bytes(),
                        })
                    });
                    self.next_link_write += 1;
                    let write = WriteId(LINK_WRITE_BASE | self.next_link_write);
                    self.work.transactions[u].ops.push(Op::Write { key, write, stmt: None });
                    self.known.insert(write, Known::Live);
                    self.links.insert(uid, (key, write));
                    (key, write)
                }
            };
            let t = &mut self.work.transactions[v];
            let already = t.ops.iter().any(|op| matches!(op, Op::Read { key: k, .. } if *k == key));
            if !already {
                t.ops.push(Op::Read { key, observed: Observed::Version(write), stmt: None });
                self.links_added += 1;
            }
        }
    }

    /// Takes the links of the transactions `deleted` (which collection is deleting) out of the verifier's
    /// maps, and returns their writes with their keys: collection neither tombstones nor promotes these,
    /// and drops their reads from the transactions it keeps ([`OnlineVerifier::drop_retired_reads`]).
    pub(super) fn retire_links(&mut self, deleted: &[TxnId]) -> FastMap<WriteId, Key> {
        let mut retired = FastMap::default();
        for id in deleted {
            if let Some((key, write)) = self.links.remove(id) {
                self.known.remove(write);
                retired.insert(write, key);
            }
        }
        retired
    }

    /// Drops the kept transactions' reads of `retired` link writes, then frees their keys for new links.
    pub(super) fn drop_retired_reads(&mut self, retired: FastMap<WriteId, Key>) {
        if retired.is_empty() {
            return;
        }
        for t in &mut self.work.transactions {
            t.retain_ops(
                |op| !matches!(op, Op::Read { observed: Observed::Version(w), .. } if retired.contains_key(w)),
            );
        }
        self.free_link_keys.extend(retired.into_values());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use history::{KeyTable, SessionId, Transaction};

    use super::*;
    use crate::rounds::RoundOptions;

    /// A reject that quarantines a link's source retires the link as collection would: the target's read of
    /// it is not a client read lost (not counted as unverifiable), no quarantined version is kept for it,
    /// and its key goes back to the free list.
    #[test]
    fn quarantining_a_link_source_retires_its_link() {
        let mut keys = KeyTable::default();
        let x = keys.intern_str("x");
        let mut v = OnlineVerifier::new(keys, Vec::new(), RoundOptions::offline(10));
        let mut source = Transaction::new(TxnId(1), SessionId(1), 0);
        source.ops.push(Op::Write { key: x, write: WriteId(11), stmt: None });
        let mut client_reader = Transaction::new(TxnId(2), SessionId(2), 0);
        client_reader.ops.push(Op::Read { key: x, observed: Observed::Version(WriteId(11)), stmt: None });
        let target = Transaction::new(TxnId(3), SessionId(3), 0);
        v.work.transactions = vec![source, client_reader, target];
        v.known.insert(WriteId(11), Known::Live);
        v.link(&[(0, 2)]);
        let (key, write) = v.links[&TxnId(1)];

        v.remove_quarantined(HashSet::from([TxnId(1)]));

        assert_eq!(v.unverifiable_reads(), 1, "only the client's read of x is unverifiable");
        assert!(matches!(v.known.get(WriteId(11)), Some(Known::Quarantined)));
        assert!(!v.known.contains(write), "the link's write is forgotten, not quarantined");
        assert!(v.links.is_empty());
        assert_eq!(v.free_link_keys, [key], "the link's key is free again");
        let ops: usize = v.work.transactions.iter().map(|t| t.ops.len()).sum();
        assert_eq!(ops, 0, "no read of the quarantined writes is left: {:?}", v.work.transactions);
    }
}
