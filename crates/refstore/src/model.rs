//! The consistency models and their execution tests (Xiong–Cerone–Raad–Gardner §4.1, Fig. 4; DESIGN.md
//! Appendix, the table).
//!
//! Each model is a pair of predicates:
//! - **vshift**: may a client move from its previous view to a new one before a transaction?
//! - **can-commit**: may a transaction that writes these keys commit, having run on this view?
//!
//! The generator also needs to *choose* a view the model allows; `Model::choose_view` draws one at random,
//! and the driver checks the choice against [`Model::vshift`] so that the chooser can never quietly widen a
//! model. Read committed has no views; it is interpreted separately (see `generate`).

use std::fmt;
use std::str::FromStr;

use history::Key;
use rand::Rng;

use crate::store::{Deps, KvStore, TxnIndex, View};

/// A consistency model the reference store can run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// Read committed: no snapshot; every read takes the latest committed version at the moment of the read,
    /// and operations of concurrent transactions interleave. Outside the paper's semantics (it cannot express
    /// it, §4.1), so it is modelled on its own. Allows lost updates, non-repeatable reads, fractured reads.
    ReadCommitted,
    /// Read atomic, the weakest model of the family (the paper's `ET_⊤`): any atomic view, always commits.
    ReadAtomic,
    /// Monotonic reads and read-your-writes (and with them monotonic writes and writes-follow-reads, which
    /// the paper shows hold for free): views only grow and include the client's own writes.
    SessionGuarantees,
    /// Causal consistency: as the session guarantees, and the view is closed under SO ∪ WR.
    Causal,
    /// Update atomic: any atomic view; a transaction commits only if its view holds every version of every
    /// key it writes (write-conflict freedom, so no lost update).
    UpdateAtomic,
    /// Parallel snapshot isolation: causal views; commits as update atomic, and the view must also be
    /// closed under SO ∪ WR ∪ WW. Allows long forks.
    ParallelSi,
    /// Consistent prefix: the view is a prefix of the commit order that never shrinks and contains the
    /// session's own transactions; always commits. Allows lost updates.
    ConsistentPrefix,
    /// Snapshot isolation: consistent prefix views; a transaction commits only if its view holds the latest
    /// version of every key it writes (first committer wins). Allows write skew.
    SnapshotIsolation,
    /// Serializability: update transactions see the whole store. Read-only transactions may see a stale
    /// prefix of the commit order (never shorter than their session's previous view), so histories are
    /// serializable but not always strictly serializable.
    Serializable,
}

impl Model {
    /// Every model, weakest first (roughly: the order is partial).
    pub const ALL: [Model; 9] = [
        Model::ReadCommitted,
        Model::ReadAtomic,
        Model::SessionGuarantees,
        Model::Causal,
        Model::UpdateAtomic,
        Model::ParallelSi,
        Model::ConsistentPrefix,
        Model::SnapshotIsolation,
        Model::Serializable,
    ];

    /// The short name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Model::ReadCommitted => "rc",
            Model::ReadAtomic => "ra",
            Model::SessionGuarantees => "sg",
            Model::Causal => "cc",
            Model::UpdateAtomic => "ua",
            Model::ParallelSi => "psi",
            Model::ConsistentPrefix => "cp",
            Model::SnapshotIsolation => "si",
            Model::Serializable => "ser",
        }
    }

    /// Whether the model's views are prefixes of the commit order.
    fn uses_prefix_views(self) -> bool {
        matches!(self, Model::ConsistentPrefix | Model::SnapshotIsolation | Model::Serializable)
    }

    /// Draws a view for `client`'s next transaction that the model's vshift allows. With probability
    /// `fresh_share` it takes the freshest allowed view; otherwise a random allowed one. `is_update` says
    /// whether the transaction will write (serializability treats the two kinds differently).
    pub(crate) fn choose_view(
        self,
        store: &KvStore,
        client: &ClientState,
        is_update: bool,
        fresh_share: f64,
        rng: &mut impl Rng,
    ) -> View {
        let fresh = rng.gen_bool(fresh_share);
        if self.uses_prefix_views() {
            let min = client.min_prefix();
            let max = store.len();
            if fresh || (self == Model::Serializable && is_update) || min >= max {
                return View::prefix(max);
            }
            return View::prefix(rng.gen_range(min..=max));
        }
        let mut view = match self {
            Model::ReadAtomic | Model::UpdateAtomic => View::initial(),
            _ => {
                let mut v = client.view.clone();
                for &t in &client.own_writes {
                    v.add(t);
                }
                v
            }
        };
        if fresh {
            view = store.full_view();
        } else {
            for (i, txn) in store.txns().iter().enumerate().skip(1) {
                if txn.is_writer() && rng.gen_bool(0.5) {
                    view.add(TxnIndex(i));
                }
            }
        }
        if matches!(self, Model::Causal | Model::ParallelSi) {
            view = store.close(&view, CAUSAL);
        }
        view
    }

    /// The model's vshift: may `client` move from its previous view to `new` (DESIGN.md Appendix table,
    /// first column)?
    pub fn vshift(self, store: &KvStore, client: &ClientState, new: &View, is_update: bool) -> bool {
        let grows = client.view.is_subset_of(new);
        let own_writes = client.own_writes.iter().all(|&t| new.sees(t));
        let prefix_ok = || new.is_prefix_shaped() && new.prefix_len() >= client.min_prefix();
        match self {
            // Views are atomic by construction; read committed has none.
            Model::ReadCommitted | Model::ReadAtomic | Model::UpdateAtomic => true,
            Model::SessionGuarantees => grows && own_writes,
            Model::Causal | Model::ParallelSi => grows && own_writes && store.is_closed(new, CAUSAL),
            Model::ConsistentPrefix | Model::SnapshotIsolation => prefix_ok(),
            Model::Serializable => {
                if is_update {
                    new.prefix_len() >= store.len()
                } else {
                    prefix_ok()
                }
            }
        }
    }

    /// The model's can-commit: may a transaction that writes `write_keys`, having run on `view`, commit
    /// (DESIGN.md Appendix table, second column)?
    pub fn can_commit(self, store: &KvStore, view: &View, write_keys: &[Key]) -> bool {
        let holds_latest = || write_keys.iter().all(|&k| view.sees(store.latest_writer(k)));
        let update_atomic = Deps { ww_inverse_on: write_keys, ..Deps::default() };
        match self {
            Model::ReadCommitted
            | Model::ReadAtomic
            | Model::SessionGuarantees
            | Model::Causal
            | Model::ConsistentPrefix => true,
            Model::UpdateAtomic => holds_latest() && store.is_closed(view, update_atomic),
            Model::ParallelSi => {
                let psi = Deps { so: true, wr: true, ww: true, ..update_atomic };
                holds_latest() && store.is_closed(view, psi)
            }
            Model::SnapshotIsolation => holds_latest(),
            // Update transactions saw the whole store (vshift made sure); read-only ones always commit.
            Model::Serializable => write_keys.is_empty() || view.prefix_len() >= store.len(),
        }
    }
}

/// Causal dependencies: SO ∪ WR.
const CAUSAL: Deps<'static> = Deps { so: true, wr: true, ww: false, ww_inverse_on: &[] };

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model name that is not one of [`Model::ALL`]'s names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown consistency model {0:?}; expected one of rc, ra, sg, cc, ua, psi, cp, si, ser")]
pub struct UnknownModel(pub String);

impl FromStr for Model {
    type Err = UnknownModel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        let model = match lower.as_str() {
            "rc" | "read-committed" => Model::ReadCommitted,
            "ra" | "read-atomic" => Model::ReadAtomic,
            "sg" | "session-guarantees" => Model::SessionGuarantees,
            "cc" | "causal" => Model::Causal,
            "ua" | "update-atomic" => Model::UpdateAtomic,
            "psi" | "parallel-si" => Model::ParallelSi,
            "cp" | "consistent-prefix" => Model::ConsistentPrefix,
            "si" | "snapshot-isolation" => Model::SnapshotIsolation,
            "ser" | "serializable" | "serializability" => Model::Serializable,
            _ => return Err(UnknownModel(s.to_owned())),
        };
        Ok(model)
    }
}

/// What the store remembers about one client between its transactions.
#[derive(Clone, Debug, Default)]
pub struct ClientState {
    /// The view the client holds now: the one its last transaction ran on, plus that transaction.
    pub view: View,
    /// The client's committed transactions that wrote something, in session order.
    pub own_writes: Vec<TxnIndex>,
    /// The client's last committed transaction.
    pub last: Option<TxnIndex>,
}

impl ClientState {
    /// A client that has run nothing yet.
    pub fn new() -> Self {
        ClientState { view: View::initial(), own_writes: Vec::new(), last: None }
    }

    /// The shortest prefix of the commit order a prefix model may give this client: never shorter than its
    /// previous view, and containing its own earlier transactions.
    pub fn min_prefix(&self) -> usize {
        let own = self.last.map_or(1, |t| t.0 + 1);
        self.view.prefix_len().max(own)
    }

    /// Records that the client committed `t`, having run on `view`.
    pub(crate) fn committed(&mut self, view: View, t: TxnIndex, wrote: bool) {
        // Only writers are ever in a view; a read-only transaction still counts in session order, through
        // `last`.
        self.view = view;
        if wrote {
            self.view.add(t);
            self.own_writes.push(t);
        }
        self.last = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use history::{TxnId, WriteId};

    use super::*;

    /// Client 0 wrote x (t1); client 1 read x from t1 (t2, read-only), then wrote y (t3).
    fn store() -> (KvStore, [TxnIndex; 3]) {
        let mut store = KvStore::new(2);
        let t1 = store.commit(TxnId(1), 0, &[], &[(Key(0), WriteId(1))], None);
        let t2 = store.commit(TxnId(2), 1, &[(Key(0), 1)], &[], None);
        let t3 = store.commit(TxnId(3), 1, &[], &[(Key(1), WriteId(2))], Some(t2));
        (store, [t1, t2, t3])
    }

    fn view(ts: &[TxnIndex]) -> View {
        let mut v = View::initial();
        for &t in ts {
            v.add(t);
        }
        v
    }

    #[test]
    fn causal_vshift_refuses_a_view_that_misses_a_cause() {
        let (store, [t1, _, t3]) = store();
        let client = ClientState::new();
        assert!(!Model::Causal.vshift(&store, &client, &view(&[t3]), true));
        assert!(Model::Causal.vshift(&store, &client, &view(&[t1, t3]), true));
        // The session guarantees do not care about causes.
        assert!(Model::SessionGuarantees.vshift(&store, &client, &view(&[t3]), true));
    }

    #[test]
    fn session_vshift_refuses_to_shrink_or_drop_own_writes() {
        let (store, [t1, _, t3]) = store();
        let mut client = ClientState::new();
        client.committed(view(&[t1]), t3, true);
        assert!(!Model::SessionGuarantees.vshift(&store, &client, &view(&[t3]), false), "lost t1");
        assert!(!Model::SessionGuarantees.vshift(&store, &client, &view(&[t1]), false), "lost own t3");
        assert!(Model::SessionGuarantees.vshift(&store, &client, &view(&[t1, t3]), false));
        assert!(Model::ReadAtomic.vshift(&store, &client, &View::initial(), false));
    }

    #[test]
    fn prefix_vshift_refuses_holes_and_stale_prefixes() {
        let (store, [t1, t2, t3]) = store();
        let mut client = ClientState::new();
        client.committed(View::prefix(2), t2, false);
        let cp = Model::ConsistentPrefix;
        assert!(!cp.vshift(&store, &client, &View::prefix(2), false), "must contain its own t2");
        assert!(cp.vshift(&store, &client, &View::prefix(3), false));
        assert!(!cp.vshift(&store, &client, &view(&[t3]), false), "a hole at t1");
        let fresh = ClientState::new();
        assert!(cp.vshift(&store, &fresh, &View::prefix(1), false));
        assert!(!Model::Serializable.vshift(&store, &fresh, &View::prefix(2), true), "updates see all");
        assert!(Model::Serializable.vshift(&store, &fresh, &View::prefix(2), false), "read-only may lag");
        assert!(Model::Serializable.vshift(&store, &fresh, &view(&[t1, t2, t3]), true));
    }

    #[test]
    fn write_conflicts_fail_the_commit_tests_that_forbid_them() {
        let (store, [t1, _, t3]) = store();
        let x = [Key(0)];
        let stale = View::initial();
        for model in [Model::UpdateAtomic, Model::ParallelSi, Model::SnapshotIsolation, Model::Serializable] {
            assert!(!model.can_commit(&store, &stale, &x), "{model} lets a stale writer of x commit");
            assert!(model.can_commit(&store, &stale, &[]), "{model} refuses a read-only transaction");
        }
        for model in [Model::ReadAtomic, Model::SessionGuarantees, Model::Causal, Model::ConsistentPrefix] {
            assert!(model.can_commit(&store, &stale, &x), "{model} has no write-conflict test");
        }
        // Update atomic only needs x's versions; parallel SI also needs the view closed under SO ∪ WR ∪ WW.
        assert!(Model::UpdateAtomic.can_commit(&store, &view(&[t1]), &x));
        assert!(Model::ParallelSi.can_commit(&store, &view(&[t1]), &x));
        assert!(!Model::ParallelSi.can_commit(&store, &view(&[t3]), &[Key(1)]), "t3's cause t1 is missing");
        assert!(Model::UpdateAtomic.can_commit(&store, &view(&[t3]), &[Key(1)]));
    }

    #[test]
    fn model_names_round_trip() {
        for model in Model::ALL {
            assert_eq!(model.name().parse::<Model>(), Ok(model));
        }
        assert!("snapshot".parse::<Model>().is_err());
    }
}
