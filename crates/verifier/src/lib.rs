//! Checks a history for serializability or strict serializability, following Cobra's pipeline (OSDI'20,
//! Fig. 3): one module per stage.
//!
//! 1. [`normalize`](crate::normalize): discharge Cobra's one-read-one-write-per-key assumption and report
//!    the anomalies that need no cycle (G1a, G1b, garbage reads, …) — DESIGN.md §3.
//! 2. `known_graph`: wr, session-order (and real-time, `realtime`, §3.5) edges, and ww pairs from
//!    read-modify-writes; lost updates — Cobra §2.3, Fig. 3 `CreateKnownGraph`.
//! 3. `chains`: combining writes and the rw edges inside chains — §3.1.
//! 4. `constraints`: one coalesced constraint per key and pair of chains — §3.2.
//! 5. `prune`: pruning to a fixpoint with reachability from `kernels` — §3.3.
//! 6. `encode`: solving what is left with the `solver` crate — §3.4.
//! 7. `certificate` and [`report`]: the evidence, and the report a person (and [`check_report`]) can check.
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
mod encode;
mod epochs;
mod gc;
mod known_graph;
mod normalize;
pub mod online;
mod prune;
mod realtime;
pub mod report;
pub mod reports;
pub mod rounds;

use std::time::Instant;

use history::{History, Outcome};
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use check::{CheckError, CheckSummary, check_report, check_report_detailed};
pub use gc::KeptReasons;
pub use kernels::Backend;
pub use report::{Anomaly, AnomalyClass, CycleEdge, EdgeKind, Report, Verdict};
pub use reports::{ReportStore, ReportStoreError, ReportSummary};
pub use rounds::{OnlineVerifier, RoundOptions, RoundStats, RoundsError, RoundsOutcome, verify_in_rounds};

use crate::certificate::{Certifier, txn_report};
use crate::normalize::MAX_ANOMALIES;
use crate::report::{Counts, OptionsUsed, RealTime, SCHEMA_VERSION, Timings, Unverifiable};

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

/// Why verification could not give a verdict.
#[derive(Debug, Error)]
pub enum VerifyError {
    /// The solver failed.
    #[error("solver failed: {0}")]
    Solver(#[from] solver::SolverError),
    /// Reachability could not be computed (for example, the closure would not fit in memory).
    #[error("reachability failed: {0}")]
    Reachability(#[from] kernels::KernelError),
    /// The history breaks the model's rules in a way that leaves no verdict (for example, two transactions
    /// share an id, so a report could not say which one it means).
    #[error("malformed history: {0}")]
    Malformed(String),
    /// A broken invariant inside the verifier; a bug, reported instead of a panic.
    #[error("internal error: {0}")]
    Internal(String),
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Verifies `history` at `options.level`.
pub fn verify(history: &History, options: &Options) -> Result<Report, VerifyError> {
    let h = history;
    let start = Instant::now();
    let mut ids = std::collections::HashSet::with_capacity(h.transactions.len());
    if let Some(t) = h.transactions.iter().find(|t| !ids.insert(t.id)) {
        return Err(VerifyError::Malformed(format!("transaction id {} is used twice", t.id)));
    }
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        verdict: Verdict::Accept,
        level: options.level,
        options: OptionsUsed {
            prune: options.prune,
            coalesce: options.coalesce,
            combine: options.combine,
            clock_drift_ms: options.clock_drift_ms,
            reachability: options.reachability.name().to_owned(),
        },
        anomalies: Vec::new(),
        anomalies_omitted: 0,
        derivations: Vec::new(),
        transactions: Vec::new(),
        serial_order: None,
        unverifiable: Vec::new(),
        dropped_indeterminate: Vec::new(),
        not_checked: report::NotChecked::summarize(&h.unchecked),
        counts: Counts::default(),
        timings: Timings::default(),
        real_time: None,
    };
    let c = &mut report.counts;
    c.transactions = h.transactions.len() as u64;
    c.committed = h.transactions.iter().filter(|t| t.outcome == Outcome::Committed).count() as u64;
    c.aborted = h.transactions.iter().filter(|t| t.outcome == Outcome::Aborted).count() as u64;

    // Stage 1.
    let norm = normalize::normalize(h);
    report.counts.vertices = norm.txns.len() as u64;
    report.counts.versions = norm.versions.len() as u64;
    report.counts.indeterminate_dropped = norm.dropped.len() as u64;
    report.counts.indeterminate_included = report.counts.vertices - report.counts.committed;
    report.dropped_indeterminate = norm.dropped.iter().map(|&i| h.transactions[i].id).collect();
    report.unverifiable =
        norm.unverified.iter().map(|u| Unverifiable { op: u.op, reason: u.why.clone() }).collect();
    if !norm.anomalies.is_empty() {
        return Ok(non_cycle_reject(h, report, norm.anomalies, start));
    }

    // Stage 2 (and real time).
    let (mut g, lost) = known_graph::create_known_graph(h, &norm, options.combine);
    if !lost.is_empty() {
        return Ok(non_cycle_reject(h, report, lost, start));
    }
    report.counts.wr_edges =
        g.edges.iter().filter(|e| matches!(e.origin, known_graph::Origin::Wr { .. })).count() as u64;
    report.counts.so_edges = g.edges.iter().filter(|e| e.origin == known_graph::Origin::So).count() as u64;
    report.counts.ww_pairs = g.ww_pairs;
    if options.level == Level::StrictSerializable {
        let (edges, missing) =
            realtime::realtime_edges(h, &norm, options.clock_drift_ms.saturating_mul(1_000_000));
        report.counts.rt_edges = edges.len() as u64;
        report.real_time = Some(RealTime {
            clock_drift_ms: options.clock_drift_ms,
            edges: edges.len() as u64,
            without_timestamps: missing,
        });
        for (u, v) in edges {
            g.push(u, v, known_graph::Origin::Rt, 0);
        }
    }

    // Stages 3 and 4.
    let (chains, chain_rw) = chains::combine_writes(&norm, &mut g, options.combine);
    report.counts.chains = chains.list.len() as u64;
    report.counts.chain_rw_edges = chain_rw;
    let (constraints, initial_edges) = constraints::generate(&norm, &chains, &mut g, options.coalesce);
    report.counts.initial_edges = initial_edges;
    report.counts.constraints_before_prune = constraints.len() as u64;
    report.timings.construct_ms = ms(start);

    // Stage 5.
    let prune_start = Instant::now();
    let (outcome, pruned) =
        prune::prune(&mut g, &constraints, &norm, &chains, options.prune, options.reachability)?;
    report.timings.prune_ms = ms(prune_start);
    report.counts.prune_iterations = pruned.passes;
    report.counts.constraints_after_prune = pruned.live.iter().filter(|&&l| l).count() as u64;
    report.counts.known_edges_at_solve = g.edges.len() as u64;
    if let Some(b) = pruned.backend {
        report.options.reachability = b.name().to_owned();
    }

    let after_prune = Instant::now();
    let certifier =
        || Certifier::new(h, &norm, &g, &chains, &constraints, &pruned.decisions, options.clock_drift_ms);
    let found = match outcome {
        prune::Outcome::Cyclic { round, cycle } => {
            let mut cert = certifier();
            Some((cert.known_cycle(&cycle, round), cert))
        }
        prune::Outcome::Conflict { constraint, a, b, round } => {
            let mut cert = certifier();
            Some((cert.conflict(constraint, a, b, round), cert))
        }
        prune::Outcome::Done => {
            // Stage 6.
            let solve_start = Instant::now();
            let solved = encode::solve(&g, &constraints, &norm, &chains, &pruned.live)?;
            report.timings.solve_ms = ms(solve_start);
            match solved {
                encode::Solved::Acyclic { order } => {
                    report.serial_order = Some(
                        order.into_iter().map(|v| h.transactions[norm.txns[v as usize].hist].id).collect(),
                    );
                    None
                }
                encode::Solved::Cyclic { cycle, core } => {
                    let mut cert = certifier();
                    let mut anomaly = cert.solver_cycle(&cycle, &core);
                    anomaly.refutation = cert.refutation(&core);
                    Some((anomaly, cert))
                }
            }
        }
    };
    // Stage 7.
    if let Some((mut anomaly, mut cert)) = found {
        report.verdict = Verdict::Reject;
        report.derivations = std::mem::take(&mut cert.derivations);
        // A reject depends on real time if any cycle of its proof uses a real-time edge, or, for a solver
        // refutation (whose other branches are not shown), if there are real-time edges at all.
        let in_proofs = report.derivations.iter().any(|d| match &d.basis {
            report::Basis::OtherOrderCycle { cycle } => cycle.iter().any(|e| e.kind == EdgeKind::Rt),
            report::Basis::Solver => report.counts.rt_edges > 0,
            _ => false,
        });
        anomaly.uses_real_time |= in_proofs;
        report.anomalies.push(anomaly);
        report.transactions = cert.transactions([]);
    }
    report.timings.report_ms = (ms(after_prune) - report.timings.solve_ms).max(0.0);
    Ok(report)
}

/// A reject from anomalies found before any cycle search.
fn non_cycle_reject(h: &History, mut report: Report, found: Vec<normalize::Found>, start: Instant) -> Report {
    report.verdict = Verdict::Reject;
    report.anomalies_omitted = found.len().saturating_sub(MAX_ANOMALIES) as u64;
    let mut involved = std::collections::BTreeSet::new();
    let index: std::collections::HashMap<history::TxnId, usize> =
        h.transactions.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    for f in found.into_iter().take(MAX_ANOMALIES) {
        for op in &f.ops {
            if let Some(&i) = index.get(&op.txn) {
                involved.insert(i);
            }
        }
        report.anomalies.push(Anomaly {
            class: f.class,
            summary: f.summary,
            ops: f.ops,
            cycle: Vec::new(),
            uses_real_time: false,
            uses_session_order: false,
            refutation: None,
        });
    }
    report.transactions = involved.into_iter().map(|i| txn_report(h, i)).collect();
    report.timings.construct_ms = ms(start);
    report
}

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
    let norm = normalize::normalize(h);
    let mut out = Construction::default();
    if !norm.anomalies.is_empty() {
        out.anomalies = norm.anomalies.iter().map(|f| f.class).collect();
        return Ok(out);
    }
    let (mut g, lost) = known_graph::create_known_graph(h, &norm, options.combine);
    if !lost.is_empty() {
        out.anomalies = lost.iter().map(|f| f.class).collect();
        return Ok(out);
    }
    if options.level == Level::StrictSerializable {
        let (edges, _) = realtime::realtime_edges(h, &norm, options.clock_drift_ms.saturating_mul(1_000_000));
        for (u, v) in edges {
            g.push(u, v, known_graph::Origin::Rt, 0);
        }
    }
    let (chains, _) = chains::combine_writes(&norm, &mut g, options.combine);
    let (constraints, _) = constraints::generate(&norm, &chains, &mut g, options.coalesce);
    let mut live = vec![true; constraints.len()];
    let mut decisions = Vec::new();
    if options.prune {
        let (_, pruned) = prune::prune(&mut g, &constraints, &norm, &chains, true, options.reachability)?;
        live = pruned.live;
        decisions = pruned.decisions;
    }
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
                    match c.side(&norm, &chains, side).get(edge as usize) {
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
        .zip(&live)
        .filter(|(_, l)| **l)
        .map(|(c, _)| ConstraintView {
            key: normalize::key_name(h, c.key),
            side_a: c.side(&norm, &chains, solver::Side::A).iter().map(pair).collect(),
            side_b: c.side(&norm, &chains, solver::Side::B).iter().map(pair).collect(),
        })
        .collect();
    Ok(out)
}
