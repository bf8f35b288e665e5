//! What to check and how: the isolation [`Level`] and the [`Options`] every stage of the pipeline reads
//! (which of Cobra's techniques are on: combining writes §3.1, coalescing §3.2, pruning §3.3, and the clock
//! drift of real-time edges §3.5). Not a stage itself; every stage may read it.

use kernels::Backend;
use serde::{Deserialize, Serialize};

/// The isolation level to check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Some total order of the committed transactions explains every read (and keeps session order).
    #[default]
    #[serde(rename = "serializable")]
    Serializable,
    /// As serializable, and the order also respects real time (Cobra §3.5).
    #[serde(rename = "strict-serializable")]
    StrictSerializable,
}

impl Level {
    /// The level's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Level::Serializable => "serializable",
            Level::StrictSerializable => "strict-serializable",
        }
    }
}

impl std::str::FromStr for Level {
    type Err = String;

    /// Parses `serializable` or `strict-serializable`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "serializable" => Ok(Level::Serializable),
            "strict-serializable" => Ok(Level::StrictSerializable),
            _ => Err(format!("unknown level {s:?} (serializable, strict-serializable)")),
        }
    }
}

/// How to verify. `Options::default()` is serializability with every Cobra technique on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The level to check.
    pub level: Level,
    /// Commit timestamps are pushed later by this much before real-time edges are inferred (Cobra §3.5).
    pub clock_drift_ms: u64,
    /// Pruning (Cobra §3.3). Off only for differential testing.
    pub prune: bool,
    /// Coalescing constraints (Cobra §3.2). Off only for differential testing.
    pub coalesce: bool,
    /// Combining writes (Cobra §3.1). Off only for differential testing.
    pub combine: bool,
    /// The reachability backend for pruning.
    pub reachability: Backend,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            level: Level::Serializable,
            clock_drift_ms: 100,
            prune: true,
            coalesce: true,
            combine: true,
            reachability: Backend::Auto,
        }
    }
}
