//! What to check and how: the isolation [`Level`] and the [`Options`] every stage of the pipeline reads
//! (which of Cobra's techniques are on: combining writes §3.1, coalescing §3.2, pruning §3.3, and the clock
//! drift of real-time edges §3.5). Not a stage itself; every stage may read it.

use std::collections::BTreeMap;

use history::{ClockBounds, CollectorId};
use kernels::Backend;
use serde::{Deserialize, Serialize};

/// The isolation level to check. `docs/levels.md` gives each one's definition, paper and cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Some total order of the committed transactions explains every read (and keeps session order).
    #[default]
    #[serde(rename = "serializable")]
    Serializable,
    /// As serializable, and the order also respects real time (Cobra §3.5).
    #[serde(rename = "strict-serializable")]
    StrictSerializable,
    /// Snapshot isolation (PolySI, VLDB'23, §3; Cerone and Gotsman's characterisation): each transaction reads
    /// from a snapshot that includes every transaction before it in its session, and no two concurrent
    /// transactions write one key. PostgreSQL's REPEATABLE READ.
    #[serde(rename = "snapshot-isolation")]
    SnapshotIsolation,
    /// Causal consistency (Biswas and Enea, OOPSLA'19, §3): a transaction sees every write that happened
    /// before it, by session order and reads, transitively, and no version older than one of those.
    #[serde(rename = "causal")]
    Causal,
    /// Read atomic (Biswas and Enea §3; Cerone et al.'s atomic visibility): no fractured reads: a
    /// transaction that saw one write of another transaction, or follows it in its session, sees all of
    /// that transaction's writes or newer ones.
    #[serde(rename = "read-atomic")]
    ReadAtomic,
    /// Read committed (Biswas and Enea §3; it implies Adya's PL-2: no G0, G1a, G1b, G1c): each read returns
    /// a committed version no older than any write an earlier read of the same transaction saw.
    #[serde(rename = "read-committed")]
    ReadCommitted,
    /// Each transaction at the isolation level it asked for (issue 17; Adya's mixing theorem, thesis §4.3):
    /// PostgreSQL's SERIALIZABLE as serializable, REPEATABLE READ as snapshot isolation, READ COMMITTED and
    /// READ UNCOMMITTED (which PostgreSQL runs as READ COMMITTED) as Adya's PL-2. A transaction whose level
    /// was not recorded is held to serializable.
    #[serde(rename = "declared")]
    Declared,
}

impl Level {
    /// Every level: the uniform ones strongest first, then `declared`, which is per transaction.
    pub const ALL: [Level; 7] = [
        Level::StrictSerializable,
        Level::Serializable,
        Level::SnapshotIsolation,
        Level::Causal,
        Level::ReadAtomic,
        Level::ReadCommitted,
        Level::Declared,
    ];

    /// The level's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Level::Serializable => "serializable",
            Level::StrictSerializable => "strict-serializable",
            Level::SnapshotIsolation => "snapshot-isolation",
            Level::Causal => "causal",
            Level::ReadAtomic => "read-atomic",
            Level::ReadCommitted => "read-committed",
            Level::Declared => "declared",
        }
    }

    /// Whether the level is checked by saturation in polynomial time (`crate::saturate`) rather than by
    /// Cobra's polygraph and the solver.
    pub fn is_saturation(self) -> bool {
        matches!(self, Level::Causal | Level::ReadAtomic | Level::ReadCommitted)
    }

    /// Whether verification in rounds (and so `krait serve`) collects garbage at this level: garbage
    /// collection's argument (`gc.rs`) is made for serializability's polygraph. Under `declared` it holds
    /// while every transaction is held to serializability or to read committed (`declared` then has a
    /// polygraph of serializability's shape, `pipeline::build_polygraph`), so rounds collect until the first
    /// transaction that asked for REPEATABLE READ (snapshot isolation), and then stop for good
    /// ([`crate::OnlineVerifier::gc_disabled`] says why). At the other levels rounds keep every transaction,
    /// and each round checks them all again.
    pub fn collects_garbage(self) -> bool {
        matches!(self, Level::Serializable | Level::StrictSerializable | Level::Declared)
    }
}

impl std::str::FromStr for Level {
    type Err = String;

    /// Parses a level's [name](Level::name).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Level::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Level::ALL.iter().map(|l| l.name()).collect();
            format!("unknown level {s:?} ({})", names.join(", "))
        })
    }
}

/// How to verify. `Options::default()` is serializability with every Cobra technique on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The level to check.
    pub level: Level,
    /// Commit timestamps are pushed later by this much before real-time edges are inferred (Cobra §3.5).
    pub clock_drift_ms: u64,
    /// Collectors whose clock has an error bound of its own, in milliseconds; the others are within half of
    /// `clock_drift_ms` of true time ([`history::ClockBounds`]).
    pub clock_errors_ms: BTreeMap<CollectorId, u64>,
    /// Pruning (Cobra §3.3). Off only for differential testing.
    pub prune: bool,
    /// Coalescing constraints (Cobra §3.2). Off only for differential testing.
    pub coalesce: bool,
    /// Combining writes (Cobra §3.1). Off only for differential testing.
    pub combine: bool,
    /// The reachability backend for pruning.
    pub reachability: Backend,
}

impl Options {
    /// The clocks' bounds, in nanoseconds, for real-time order.
    pub fn clocks(&self) -> ClockBounds {
        ClockBounds::from_ms(self.clock_drift_ms, &self.clock_errors_ms)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            level: Level::Serializable,
            clock_drift_ms: 100,
            clock_errors_ms: BTreeMap::new(),
            prune: true,
            coalesce: true,
            combine: true,
            reachability: Backend::Auto,
        }
    }
}
