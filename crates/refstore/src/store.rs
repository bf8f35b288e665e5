//! The centralised multi-version kv-store and client views (Xiong–Cerone–Raad–Gardner §3; DESIGN.md
//! Appendix, "State").
//!
//! The store keeps, for every key, the list of its versions in version order. Index 0 is the initial version,
//! written by the initial transaction ([`TxnIndex::INITIAL`]); list order is the version order, so the last
//! writer wins. Every committed transaction is also kept, with what it read and wrote, because the execution
//! tests are phrased over the dependencies between transactions (WR, WW, RW, SO) that the store induces.

use history::{Key, Observed, TxnId, WriteId};

/// A committed transaction's position in the store's commit order. Index 0 is the initial transaction that
/// wrote version 0 of every key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnIndex(pub usize);

impl TxnIndex {
    /// The initial transaction, writer of every key's version 0. Every view sees it.
    pub const INITIAL: TxnIndex = TxnIndex(0);
}

/// One version of one key: its value (the write id, which doubles as the value), its writer and its readers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// What a read of this version observes: `PreHistory(0)` for the initial version, else the write id.
    pub observed: Observed,
    /// The transaction that wrote it.
    pub writer: TxnIndex,
    /// The committed transactions that read it (each at most once).
    pub readers: Vec<TxnIndex>,
}

/// A committed transaction as the store remembers it: what it read (external reads only, as in the paper's
/// fingerprint) and which versions it installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTxn {
    /// Its id in the generated history; `None` for the initial transaction.
    pub id: Option<TxnId>,
    /// The client (session) that ran it; `None` for the initial transaction.
    pub client: Option<usize>,
    /// The versions it read from other transactions, as (key, version index), each key once.
    pub reads: Vec<(Key, usize)>,
    /// The versions it installed, as (key, version index), each key once.
    pub writes: Vec<(Key, usize)>,
    /// The client's previous committed transaction: the SO predecessor.
    pub session_prev: Option<TxnIndex>,
}

impl StoredTxn {
    /// Whether it installed at least one version. Only such transactions can be in a view.
    pub fn is_writer(&self) -> bool {
        !self.writes.is_empty()
    }
}

/// Which dependencies a closure follows backwards (the paper's `closed(K, u, R)`, §4.1).
#[derive(Clone, Copy, Debug, Default)]
pub struct Deps<'a> {
    /// Session order: a client's earlier transaction precedes its later one.
    pub so: bool,
    /// Write-read: the writer of a version precedes its readers.
    pub wr: bool,
    /// Write-write: the writer of an earlier version of a key precedes the writer of a later one.
    pub ww: bool,
    /// Inverse write-write, restricted to these keys: the writer of a later version of one of these keys
    /// precedes the writer of an earlier one. Closing a view under it makes the view hold every version of
    /// the key, which is how update atomic forbids lost updates.
    pub ww_inverse_on: &'a [Key],
}

/// A client's view: which committed transactions' versions it sees. A view is a set of transactions rather
/// than a set of version indices per key, so it is atomic by construction (it sees all of a transaction's
/// versions or none). The initial transaction is always visible. Transactions committed after the view was
/// taken are not visible.
///
/// Views of the prefix models (consistent prefix, SI, serializability) are a prefix of the commit order; they
/// are held as a length, so taking one costs nothing however long the history grows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// Every transaction before this index is visible.
    prefix: usize,
    /// Transactions at or after `prefix` that are visible too.
    extra: Vec<bool>,
}

impl View {
    /// The view that sees only the initial transaction.
    pub fn initial() -> Self {
        View::prefix(1)
    }

    /// The view that sees the first `len` transactions of the commit order (at least the initial one).
    pub fn prefix(len: usize) -> Self {
        View { prefix: len.max(1), extra: Vec::new() }
    }

    /// The length of the longest prefix of the commit order this view sees whole.
    pub fn prefix_len(&self) -> usize {
        self.prefix + self.extra.iter().skip(self.prefix).take_while(|v| **v).count()
    }

    /// Whether this view is exactly a prefix of the commit order.
    pub fn is_prefix_shaped(&self) -> bool {
        let len = self.prefix_len();
        !self.extra.iter().skip(len).any(|v| *v)
    }

    /// Whether transaction `t`'s versions are visible.
    pub fn sees(&self, t: TxnIndex) -> bool {
        t.0 < self.prefix || self.extra.get(t.0).copied().unwrap_or(false)
    }

    /// Makes `t` visible.
    pub fn add(&mut self, t: TxnIndex) {
        if t.0 < self.prefix {
            return;
        }
        if self.extra.len() <= t.0 {
            self.extra.resize(t.0 + 1, false);
        }
        self.extra[t.0] = true;
    }

    /// Whether every transaction visible in `self` is visible in `other` (the paper's `u ⊑ u'`).
    pub fn is_subset_of(&self, other: &View) -> bool {
        self.visible().all(|t| other.sees(t))
    }

    /// The visible transactions, in commit order.
    pub fn visible(&self) -> impl Iterator<Item = TxnIndex> + '_ {
        let extra = self.extra.iter().enumerate().skip(self.prefix).filter(|(_, v)| **v).map(|(i, _)| i);
        (0..self.prefix).chain(extra).map(TxnIndex)
    }
}

/// The multi-version kv-store with its committed transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvStore {
    versions: Vec<Vec<Version>>,
    txns: Vec<StoredTxn>,
}

impl KvStore {
    /// A store with `keys` keys, each holding only its initial version.
    pub fn new(keys: usize) -> Self {
        let key_ids: Vec<Key> = (0..keys).map(key_at).collect();
        let initial = StoredTxn {
            id: None,
            client: None,
            reads: Vec::new(),
            writes: key_ids.iter().map(|&k| (k, 0)).collect(),
            session_prev: None,
        };
        let versions = (0..keys)
            .map(|_| {
                vec![Version {
                    observed: Observed::PreHistory(0),
                    writer: TxnIndex::INITIAL,
                    readers: Vec::new(),
                }]
            })
            .collect();
        KvStore { versions, txns: vec![initial] }
    }

    /// Adds a key whose only version is an initial one, written by the initial transaction and observed as
    /// `initial` (`Observed::Absent` for a row that does not exist yet). Returns the key, which is the next
    /// index; the initial transaction is in every view, so every client sees the new key at once.
    pub fn add_key(&mut self, initial: Observed) -> Key {
        let key = key_at(self.versions.len());
        self.versions.push(vec![Version {
            observed: initial,
            writer: TxnIndex::INITIAL,
            readers: Vec::new(),
        }]);
        self.txns[0].writes.push((key, 0));
        key
    }

    /// How many keys the store has.
    pub fn key_count(&self) -> usize {
        self.versions.len()
    }

    /// The versions of `key`, in version order (index 0 is the initial version). Empty for an unknown key.
    pub fn versions(&self, key: Key) -> &[Version] {
        self.versions.get(key.0 as usize).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The committed transactions, in commit order, the initial one first.
    pub fn txns(&self) -> &[StoredTxn] {
        &self.txns
    }

    /// One committed transaction.
    pub fn txn(&self, t: TxnIndex) -> Option<&StoredTxn> {
        self.txns.get(t.0)
    }

    /// The number of committed transactions, counting the initial one: the length of the commit order.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    /// Whether only the initial transaction has committed.
    pub fn is_empty(&self) -> bool {
        self.txns.len() == 1
    }

    /// The index of the latest version of `key`.
    pub fn latest(&self, key: Key) -> usize {
        self.versions(key).len().saturating_sub(1)
    }

    /// The writer of the latest version of `key`.
    pub fn latest_writer(&self, key: Key) -> TxnIndex {
        self.versions(key).last().map_or(TxnIndex::INITIAL, |v| v.writer)
    }

    /// The snapshot of `view` at `key`: the highest version index whose writer is visible (§3, "snapshot
    /// property": a transaction reads the latest version its view holds).
    pub fn snapshot(&self, view: &View, key: Key) -> usize {
        self.versions(key).iter().rposition(|v| view.sees(v.writer)).unwrap_or(0)
    }

    /// The view that sees the whole store.
    pub fn full_view(&self) -> View {
        View::prefix(self.len())
    }

    /// Commits a transaction: appends one version per written key (after the current latest, so the last
    /// writer wins) and adds it to the readers of each version it read (§3, the update function).
    pub fn commit(
        &mut self,
        id: TxnId,
        client: usize,
        reads: &[(Key, usize)],
        writes: &[(Key, WriteId)],
        session_prev: Option<TxnIndex>,
    ) -> TxnIndex {
        let t = TxnIndex(self.txns.len());
        let mut stored_reads = Vec::new();
        for &(key, index) in reads {
            if stored_reads.contains(&(key, index)) {
                continue;
            }
            if let Some(version) = self.versions.get_mut(key.0 as usize).and_then(|vs| vs.get_mut(index)) {
                version.readers.push(t);
                stored_reads.push((key, index));
            }
        }
        let mut stored_writes = Vec::new();
        for &(key, write) in writes {
            if let Some(versions) = self.versions.get_mut(key.0 as usize) {
                stored_writes.push((key, versions.len()));
                versions.push(Version { observed: Observed::Version(write), writer: t, readers: Vec::new() });
            }
        }
        self.txns.push(StoredTxn {
            id: Some(id),
            client: Some(client),
            reads: stored_reads,
            writes: stored_writes,
            session_prev,
        });
        t
    }

    /// Whether `view` is closed under `deps` (§4.1, `closed(K, u, R)`): every writer that reaches a visible
    /// transaction through a chain of `deps` edges is visible too. Chains may pass through read-only
    /// transactions, which are never in a view themselves.
    pub fn is_closed(&self, view: &View, deps: Deps<'_>) -> bool {
        let closure = self.closure(view, deps);
        closure.visible().all(|t| view.sees(t) || !self.txns[t.0].is_writer())
    }

    /// The smallest view that contains `view` and is closed under `deps`.
    pub fn close(&self, view: &View, deps: Deps<'_>) -> View {
        let closure = self.closure(view, deps);
        let mut closed = View::initial();
        for t in closure.visible().filter(|t| self.txns[t.0].is_writer()) {
            closed.add(t);
        }
        closed
    }

    /// Every committed transaction that reaches a visible writer through `deps` edges (reflexive), read-only
    /// ones included.
    fn closure(&self, view: &View, deps: Deps<'_>) -> View {
        let mut reached = View::initial();
        let mut work: Vec<TxnIndex> = Vec::new();
        for t in view.visible().filter(|t| t.0 < self.txns.len() && self.txns[t.0].is_writer()) {
            reached.add(t);
            work.push(t);
        }
        work.push(TxnIndex::INITIAL);
        while let Some(t) = work.pop() {
            let txn = &self.txns[t.0];
            let mut preds: Vec<TxnIndex> = Vec::new();
            if deps.so {
                preds.extend(txn.session_prev);
            }
            if deps.wr {
                preds.extend(txn.reads.iter().map(|&(k, i)| self.versions[k.0 as usize][i].writer));
            }
            for &(k, i) in &txn.writes {
                let versions = &self.versions[k.0 as usize];
                if deps.ww && i > 0 {
                    preds.push(versions[i - 1].writer);
                }
                if deps.ww_inverse_on.contains(&k) && i + 1 < versions.len() {
                    preds.push(versions[i + 1].writer);
                }
            }
            for p in preds {
                if !reached.sees(p) {
                    reached.add(p);
                    work.push(p);
                }
            }
        }
        reached
    }
}

/// The key with index `i`; the generator interns keys `k0`, `k1`, … in this order.
pub(crate) fn key_at(i: usize) -> Key {
    Key(u32::try_from(i).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u32) -> Key {
        Key(i)
    }

    #[test]
    fn snapshot_reads_the_latest_visible_version() {
        let mut store = KvStore::new(2);
        let t1 = store.commit(TxnId(1), 0, &[], &[(k(0), WriteId(1))], None);
        let t2 = store.commit(TxnId(2), 1, &[], &[(k(0), WriteId(2)), (k(1), WriteId(3))], None);
        let mut view = View::initial();
        assert_eq!(store.snapshot(&view, k(0)), 0);
        view.add(t2);
        assert_eq!(store.snapshot(&view, k(0)), 2);
        let mut only_t1 = View::initial();
        only_t1.add(t1);
        assert_eq!(store.snapshot(&only_t1, k(0)), 1);
        assert_eq!(store.snapshot(&only_t1, k(1)), 0);
    }

    #[test]
    fn causal_closure_follows_reads_through_read_only_transactions() {
        // t1 writes x; client 1 reads x from t1 read-only (t2), then writes y (t3). A view that sees t3 but
        // not t1 is not closed under SO ∪ WR, because t1 -wr-> t2 -so-> t3.
        let mut store = KvStore::new(2);
        let t1 = store.commit(TxnId(1), 0, &[], &[(k(0), WriteId(1))], None);
        let t2 = store.commit(TxnId(2), 1, &[(k(0), 1)], &[], None);
        let t3 = store.commit(TxnId(3), 1, &[], &[(k(1), WriteId(2))], Some(t2));
        let mut view = View::initial();
        view.add(t3);
        let causal = Deps { so: true, wr: true, ..Deps::default() };
        assert!(!store.is_closed(&view, causal));
        let closed = store.close(&view, causal);
        assert!(closed.sees(t1) && closed.sees(t3));
        assert!(store.is_closed(&closed, causal));
    }

    #[test]
    fn inverse_ww_closure_demands_every_version_of_the_key() {
        let mut store = KvStore::new(1);
        let t1 = store.commit(TxnId(1), 0, &[], &[(k(0), WriteId(1))], None);
        let t2 = store.commit(TxnId(2), 1, &[], &[(k(0), WriteId(2))], None);
        let keys = [k(0)];
        let ua = Deps { ww_inverse_on: &keys, ..Deps::default() };
        let mut view = View::initial();
        view.add(t2);
        assert!(!store.is_closed(&view, ua), "t1 is missing");
        view.add(t1);
        assert!(store.is_closed(&view, ua));
    }
}
