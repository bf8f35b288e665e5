//! Checks a history for serializability or strict serializability, following Cobra's pipeline (OSDI'20,
//! Fig. 3): one module per stage, and `pipeline`, which runs them in order (the one place that order is
//! written; [`verify`], [`construct`] and each round of [`verify_in_rounds`] go through it). [`Options`] and
//! [`Level`] say what to check, [`VerifyError`] why there is no verdict.
//!
//! 1. [`normalize`](crate::normalize): discharge Cobra's one-read-one-write-per-key assumption and report
//!    the anomalies that need no cycle (G1a, G1b, garbage reads, …) — DESIGN.md §3.
//! 2. `known_graph`: wr, session-order (and real-time, `realtime`, §3.5) edges, and ww pairs from
//!    read-modify-writes; lost updates — Cobra §2.3, Fig. 3 `CreateKnownGraph`.
//! 3. `chains`: combining writes and the rw edges inside chains — §3.1.
//! 4. `constraints`: one coalesced constraint per key and pair of chains (only neighbours, among chains that
//!    session order already sorts) — §3.2.
//! 5. `prune`: pruning to a fixpoint with reachability from `kernels` — §3.3.
//! 6. `solve`: solving what is left with the `solver` crate — §3.4.
//! 7. `certificate` and [`report`]: the evidence, and the report a person (and [`check_report`]) can check.
//!
//! Snapshot isolation runs stages 1–4, then `si` (PolySI's characterisation on a split polygraph) instead of
//! stages 5–6; the weak levels run stage 1, then `saturate` (docs/levels.md).
//!
//! ```
//! use history::HistoryBuilder;
//! use verifier::{Options, verify};
//!
//! // Write skew: each transaction overwrote what the other read.
//! let h = HistoryBuilder::new()
//!     .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
//!     .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
//!     .build();
//! let report = verify(&h, &Options::default()).unwrap();
//! assert!(!report.is_accept());
//! verifier::check_report(&h, &report).unwrap();
//! ```

mod certificate;
mod chains;
mod check;
mod constraints;
mod epochs;
mod error;
mod gc;
mod known_graph;
mod normalize;
pub mod online;
mod options;
mod pipeline;
mod prune;
mod realtime;
pub mod report;
pub mod report_store;
pub mod rounds;
mod saturate;
mod si;
mod solve;

use history::History;

/// The hash maps and sets of the verifier's per-round work, looked up millions of times a round.
pub(crate) use history::{FastMap, FastSet};
/// A list of vertex or version indices that is nearly always one or two long, held inline up to two: a
/// version's readers, a chain's versions, a key's chains. Rounds build hundreds of thousands of them, and a
/// heap allocation for each showed in TPC-C's profile.
pub(crate) type Few = smallvec::SmallVec<[u32; 2]>;

pub use check::{CheckError, CheckSummary, check_report, check_report_detailed};
pub use error::VerifyError;
pub use gc::KeptReasons;
pub use kernels::Backend;
pub use options::{Level, Options};
pub use pipeline::verify;
pub use report::{
    Anomaly, AnomalyClass, CitedError, CitedHistory, CitedSummary, ColumnValue, CycleEdge, DeclaredLevels,
    EdgeKind, InRounds, OpReport, Report, RowKey, SeenHow, StatementReport, TxnReport, Unverifiable,
    UnverifiableCause, Verdict, check_cited,
};
pub use report_store::{ReportStore, ReportStoreError, ReportSummary};
pub use rounds::{
    NotJudged, OnlineVerifier, RoundOptions, RoundStats, RoundsError, RoundsOutcome, verify_in_rounds,
};

use crate::pipeline::{Built, Polygraph};

/// The polygraph the pipeline builds, in the history's terms: for tests, debugging and teaching.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Construction {
    /// Non-cycle anomalies found first; when any is present the rest is empty.
    pub anomalies: Vec<AnomalyClass>,
    /// Known edges (before pruning, or after it when pruning was asked for).
    pub known: Vec<(history::TxnId, history::TxnId, EdgeKind)>,
    /// Each chain: its key's name and its versions, in order.
    pub chains: Vec<(String, Vec<history::Observed>)>,
    /// Each remaining constraint: its key's name, side A and side B, as edges between transactions.
    pub constraints: Vec<ConstraintView>,
}

/// One constraint, as [`Construction`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstraintView {
    /// The key's name.
    pub key: String,
    /// The edges of side A (the first chain before the second).
    pub side_a: Vec<(history::TxnId, history::TxnId)>,
    /// The edges of side B.
    pub side_b: Vec<(history::TxnId, history::TxnId)>,
}

/// Runs stages 1–4 (and stage 5 when `options.prune`) and returns the polygraph (Cobra Fig. 3,
/// `ConstructEncoding`).
pub fn construct(history: &History, options: &Options) -> Result<Construction, VerifyError> {
    let h = history;
    let mut out = Construction::default();
    let poly = match pipeline::build_polygraph(h, options)?.0 {
        Built::NonCycle { found, .. } => {
            out.anomalies = found.iter().map(|f| f.class).collect();
            return Ok(out);
        }
        Built::Pruned { poly, .. } => poly,
    };
    let Polygraph { norm, g, chains, constraints, live, decisions } = &*poly;
    let id = |v: u32| h.transactions[norm.txns[v as usize].hist].id;
    let pair = |e: &constraints::CEdge| (id(e.from), id(e.to));
    use known_graph::Origin;
    out.known = g
        .edges
        .iter()
        .map(|e| {
            let kind = match e.origin {
                Origin::Wr { .. } => EdgeKind::Wr,
                Origin::So => EdgeKind::So,
                Origin::Rt => EdgeKind::Rt,
                Origin::ChainRw { .. } => EdgeKind::Rw,
                Origin::Initial { rw, .. } => {
                    if rw {
                        EdgeKind::Rw
                    } else {
                        EdgeKind::Ww
                    }
                }
                Origin::Decided { decision, side, edge } => {
                    let c = &constraints[decisions[decision as usize].constraint as usize];
                    match c.side(norm, chains, side).get(edge as usize) {
                        Some(e) if e.rw => EdgeKind::Rw,
                        _ => EdgeKind::Ww,
                    }
                }
            };
            (id(e.from), id(e.to), kind)
        })
        .collect();
    out.chains = chains
        .list
        .iter()
        .map(|c| {
            (
                normalize::key_name(h, c.key),
                c.versions.iter().map(|&v| norm.versions[v as usize].observed()).collect(),
            )
        })
        .collect();
    out.constraints = constraints
        .iter()
        .zip(live)
        .filter(|(_, l)| **l)
        .map(|(c, _)| ConstraintView {
            key: normalize::key_name(h, c.key),
            side_a: c.side(norm, chains, solver::Side::A).iter().map(pair).collect(),
            side_b: c.side(norm, chains, solver::Side::B).iter().map(pair).collect(),
        })
        .collect();
    Ok(out)
}
