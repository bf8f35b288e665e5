//! The pipeline: Cobra's stages in order (OSDI'20, Fig. 3 and §3), written once.
//!
//! `normalize` (DESIGN.md §3) → `known_graph` (`CreateKnownGraph`, §2.3; `realtime` for strict
//! serializability, §3.5) → `chains` (`CombineWrites` and `InferRWEdges`, §3.1) → `constraints`
//! (`Coalesce`, §3.2) → `prune` (§3.3) → `solve` (§3.4) → `certificate` and `report`.
//!
//! [`build_polygraph`] runs stages 1–5 and stops early when stage 1 or 2 already found anomalies that need
//! no cycle. Everything that checks a history goes through it: one-shot verification ([`verify`]), each
//! round of verification in rounds ([`accepted_polygraph`], whose polygraph garbage collection then reads,
//! Cobra §4.3), and [`construct`](crate::construct), which shows the polygraph to tests.
//!
//! In: a history. Out: a [`Report`] ([`verify`]), or the accepted polygraph ([`accepted_polygraph`]). The
//! stages may assume only what the stage before them guarantees; the history itself is not trusted.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

use history::{ClockBounds, History, Outcome, TxnId};
use kernels::{Backend, Graph, Reachability};

use crate::certificate::Certifier;
use crate::chains::Chains;
use crate::constraints::Constraint;
use crate::error::VerifyError;
use crate::known_graph::{KnownGraph, Origin};
use crate::normalize::{Found, MAX_ANOMALIES, Normalized};
use crate::options::{Level, Options};
use crate::prune::Decision;
use crate::report::{
    self, Anomaly, Counts, EdgeKind, OptionsUsed, RealTime, Report, SCHEMA_VERSION, Timings, Unverifiable,
    Verdict, carried,
};
use crate::solve::Solved;
use crate::{chains, constraints, known_graph, normalize, prune, realtime, saturate, si, solve};

/// The polygraph after pruning (Cobra §2.3, §3.3): the known graph, the chains, the constraints, which of
/// them are still live, and pruning's decisions.
pub(crate) struct Polygraph {
    /// Stage 1's normalised history: the vertices and versions everything else refers to.
    pub norm: Normalized,
    /// The known graph, with the edges pruning's decisions added.
    pub g: KnownGraph,
    /// Stage 3's chains.
    pub chains: Chains,
    /// Stage 4's constraints, all of them; `live` says which are left.
    pub constraints: Vec<Constraint>,
    /// Which constraints pruning left for the solver.
    pub live: Vec<bool>,
    /// Pruning's decisions, which the known graph's decided edges cite.
    pub decisions: Vec<Decision>,
}

/// A round's polygraph that solving accepted, with its known graph's adjacency (each edge once), which
/// solving read and garbage collection reads.
pub(crate) struct Accepted {
    /// The polygraph after pruning.
    pub poly: Polygraph,
    /// The adjacency of `poly`'s known graph ([`solve::known_adjacency`]).
    pub known: Graph,
    /// Reachability in that graph, when pruning computed it already (its last pass); else `None`.
    pub reach: Option<Box<dyn Reachability>>,
}

/// Where stages 1–5 stopped.
pub(crate) enum Built {
    /// Stage 1 or 2 found anomalies that need no cycle (G1a, G1b, lost updates, …); the later stages did not
    /// run.
    NonCycle { norm: Normalized, found: Vec<Found> },
    /// Stages 2–5 ran: the polygraph after pruning, how pruning ended, and its known graph as pruning's last
    /// pass computed it (when that pass added nothing).
    Pruned { poly: Box<Polygraph>, outcome: prune::Outcome, settled: Option<prune::SettledGraph> },
}

impl Built {
    /// The normalised history, wherever the stages stopped.
    pub(crate) fn norm(&self) -> &Normalized {
        match self {
            Built::NonCycle { norm, .. } => norm,
            Built::Pruned { poly, .. } => &poly.norm,
        }
    }
}

/// What stages 1–5 measured, in the report's terms: the counts of the stages that ran (the history's own
/// counts and `indeterminate_included` are the caller's), the real-time summary, and times.
#[derive(Default)]
pub(crate) struct Tally {
    /// The stages' counts (zero for stages that did not run).
    pub counts: Counts,
    /// What strict serializability added, when it was checked.
    pub real_time: Option<RealTime>,
    /// The reachability backend pruning used, when pruning ran.
    pub backend: Option<Backend>,
    /// Milliseconds in stages 1–4.
    pub construct_ms: f64,
    /// Milliseconds in stage 5.
    pub prune_ms: f64,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Runs stages 1–5 on `h` (Cobra Fig. 3, `ConstructEncoding` and `Prune`).
///
/// At `declared`, for a history whose transactions are each held to serializability or to read committed
/// (an error if one is held to snapshot isolation), the polygraph is serializability's less what read
/// committed does not forbid: a read-committed transaction may read two versions of one key, its
/// read-modify-writes put no version right after the one read (PL-2 allows a lost update), and its reads give
/// no anti-dependencies. That is the same check as the split polygraph's (`si`): there a serializable
/// transaction's two vertices have the same edges out, and so do a read-committed one's (dependencies only),
/// so a cycle of the split graph is a cycle of this graph and back. Verification in rounds collects garbage
/// on it (`rounds`, `gc`); one-shot verification at `declared` uses the split polygraph.
pub(crate) fn build_polygraph(h: &History, options: &Options) -> Result<(Built, Tally), VerifyError> {
    let start = Instant::now();
    let mut tally = Tally::default();

    // Stage 1.
    let mut norm = match options.level {
        Level::Declared => {
            let read_committed = held_to_read_committed(h)?;
            let mut norm = normalize::normalize_with(h, &|i| !read_committed[i]);
            norm.read_committed = norm.txns.iter().map(|t| read_committed[t.hist]).collect();
            norm
        }
        _ => normalize::normalize(h),
    };
    tally.counts.vertices = norm.txns.len() as u64;
    tally.counts.versions = norm.versions.len() as u64;
    tally.counts.indeterminate_dropped = norm.dropped.len() as u64;
    if !norm.anomalies.is_empty() {
        let found = std::mem::take(&mut norm.anomalies);
        return Ok((Built::NonCycle { norm, found }, tally));
    }

    // Stage 2 (and real time).
    let (mut g, lost) = known_graph::create_known_graph_with(h, &norm, options.combine, &|v| {
        norm.counts_anti_dependencies(v)
    });
    if !lost.is_empty() {
        return Ok((Built::NonCycle { norm, found: lost }, tally));
    }
    let c = &mut tally.counts;
    c.wr_edges = g.edges.iter().filter(|e| matches!(e.origin, Origin::Wr { .. })).count() as u64;
    c.so_edges = g.edges.iter().filter(|e| e.origin == Origin::So).count() as u64;
    c.ww_pairs = g.ww_pairs;
    if options.level == Level::StrictSerializable {
        let (edges, missing) = realtime::realtime_edges(h, &norm, &options.clocks());
        c.rt_edges = edges.len() as u64;
        tally.real_time = Some(RealTime {
            clock_drift_ms: options.clock_drift_ms,
            clock_errors_ms: options.clock_errors_ms.clone(),
            edges: edges.len() as u64,
            without_timestamps: missing,
        });
        for (u, v) in edges {
            g.push(u, v, Origin::Rt, 0);
        }
    }

    // Stages 3 and 4.
    let (chains, chain_rw) = chains::combine_writes(&norm, &mut g, options.combine);
    let (constraints, made) =
        constraints::generate(&norm, &chains, &mut g, options.coalesce, constraints::PairRule::SkipUnread);
    let c = &mut tally.counts;
    c.chains = chains.list.len() as u64;
    c.chain_rw_edges = chain_rw;
    c.initial_edges = made.initial_edges;
    c.unread_pairs = made.unread_pairs;
    c.constraints_before_prune = constraints.len() as u64;
    tally.construct_ms = ms(start);

    // Stage 5.
    let prune_start = Instant::now();
    let (outcome, pruned) =
        prune::prune(&mut g, &constraints, &norm, &chains, options.prune, options.reachability)?;
    tally.prune_ms = ms(prune_start);
    tally.counts.prune_iterations = pruned.passes;
    tally.counts.constraints_after_prune = pruned.live.iter().filter(|&&l| l).count() as u64;
    tally.counts.known_edges_at_solve = g.edges.len() as u64;
    tally.backend = pruned.backend;
    let poly = Polygraph { norm, g, chains, constraints, live: pruned.live, decisions: pruned.decisions };
    Ok((Built::Pruned { poly: Box::new(poly), outcome, settled: pruned.settled }, tally))
}

/// Under `declared`, whether each transaction (by history index) is held to read committed; an error for one
/// held to snapshot isolation, which serializability's polygraph cannot stand for (see [`build_polygraph`]).
fn held_to_read_committed(h: &History) -> Result<Vec<bool>, VerifyError> {
    h.transactions
        .iter()
        .map(|t| match si::Reader::of(t) {
            si::Reader::Serializable => Ok(false),
            si::Reader::ReadCommitted => Ok(true),
            si::Reader::Snapshot => Err(VerifyError::Internal(format!(
                "{} is held to snapshot isolation, which serializability's polygraph cannot check",
                t.id
            ))),
        })
        .collect()
}

/// The adjacency of `poly`'s known graph after pruning, and its reachability when pruning computed one: the
/// graph pruning handed on when it settled, else built here ([`solve::known_adjacency`]; pruning was off, or
/// stopped at its pass limit with edges just added).
fn known_after_pruning(
    poly: &Polygraph,
    settled: Option<prune::SettledGraph>,
) -> Result<(Graph, Option<Box<dyn Reachability>>), VerifyError> {
    match settled {
        Some(prune::SettledGraph { graph, reach }) => Ok((graph, Some(reach))),
        None => Ok((solve::known_adjacency(&poly.g)?, None)),
    }
}

/// Stage 6: solves the constraints pruning left (Cobra §3.4), on `known`, the adjacency of `poly`'s known
/// graph ([`known_after_pruning`]).
fn solve(known: &Graph, poly: &Polygraph) -> Result<Solved, VerifyError> {
    solve::solve(known, &poly.g, &poly.constraints, &poly.norm, &poly.chains, &poly.live)
}

/// Runs stages 1–6 for one round of verification in rounds and keeps the polygraph and its known graph's
/// adjacency, which garbage collection reads (Cobra §4.3). `None` means the history is rejected (the caller
/// runs [`verify`] for the report).
pub(crate) fn accepted_polygraph(h: &History, options: &Options) -> Result<Option<Accepted>, VerifyError> {
    let (Built::Pruned { poly, outcome: prune::Outcome::Done, settled }, _) = build_polygraph(h, options)?
    else {
        return Ok(None);
    };
    let (known, reach) = known_after_pruning(&poly, settled)?;
    match solve(&known, &poly)? {
        Solved::Acyclic { .. } => Ok(Some(Accepted { poly: *poly, known, reach })),
        Solved::Cyclic { .. } => Ok(None),
    }
}

/// Verifies `history` at `options.level`.
pub fn verify(history: &History, options: &Options) -> Result<Report, VerifyError> {
    let h = history;
    let start = Instant::now();
    let mut ids = HashSet::with_capacity(h.transactions.len());
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
            clock_errors_ms: options.clock_errors_ms.clone(),
            reachability: options.reachability.name().to_owned(),
        },
        anomalies: Vec::new(),
        anomalies_omitted: 0,
        derivations: Vec::new(),
        transactions: Vec::new(),
        serial_order: None,
        unverifiable: Vec::new(),
        unverifiable_unlisted: BTreeMap::new(),
        dropped_indeterminate: Vec::new(),
        not_checked: report::NotChecked::summarize(&h.unchecked),
        counts: Counts::default(),
        timings: Timings::default(),
        real_time: None,
        declared: None,
        rounds: None,
    };

    if options.level.is_saturation() {
        return Ok(verify_by_saturation(h, options, report, start));
    }
    if matches!(options.level, Level::SnapshotIsolation | Level::Declared) {
        let mut report = verify_snapshot_isolation(h, options, report, start)?;
        if options.level == Level::Declared {
            note_unrecorded_levels(h, &mut report);
        }
        return Ok(report);
    }

    // Stages 1–5.
    let (built, tally) = build_polygraph(h, options)?;
    let committed = h.transactions.iter().filter(|t| t.outcome == Outcome::Committed).count() as u64;
    report.counts = Counts {
        transactions: h.transactions.len() as u64,
        committed,
        aborted: h.transactions.iter().filter(|t| t.outcome == Outcome::Aborted).count() as u64,
        indeterminate_included: tally.counts.vertices - committed,
        ..tally.counts
    };
    let norm = built.norm();
    note_normalized(h, norm, &mut report);
    report.real_time = tally.real_time;
    let (poly, outcome, settled) = match built {
        Built::NonCycle { found, .. } => return Ok(non_cycle_reject(h, report, found, start)),
        Built::Pruned { poly, outcome, settled } => (poly, outcome, settled),
    };
    report.timings.construct_ms = tally.construct_ms;
    report.timings.prune_ms = tally.prune_ms;
    if let Some(b) = tally.backend {
        report.options.reachability = b.name().to_owned();
    }

    let after_prune = Instant::now();
    let certifier = || {
        let Polygraph { norm, g, chains, constraints, decisions, .. } = &*poly;
        Certifier::new(h, norm, g, chains, constraints, decisions, options.clocks())
    };
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
            let (known, _) = known_after_pruning(&poly, settled)?;
            let solved = solve(&known, &poly)?;
            report.timings.solve_ms = ms(solve_start);
            match solved {
                Solved::Acyclic { order } => {
                    report.serial_order = Some(
                        order
                            .into_iter()
                            .map(|v| h.transactions[poly.norm.txns[v as usize].hist].id)
                            .collect(),
                    );
                    None
                }
                Solved::Cyclic { cycle, core } => {
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
        report.transactions = carried::transactions(h, &report, cert.involved.iter().copied());
    }
    report.timings.report_ms = (ms(after_prune) - report.timings.solve_ms).max(0.0);
    Ok(report)
}

/// What stage 1 left out of the check, into the report.
fn note_normalized(h: &History, norm: &Normalized, report: &mut Report) {
    report.dropped_indeterminate = norm.dropped.iter().map(|&i| h.transactions[i].id).collect();
    report.unverifiable = norm
        .unverified
        .iter()
        .map(|u| Unverifiable { op: u.op, cause: u.cause, reason: u.why.clone() })
        .collect();
}

/// The weak levels: stage 1, then saturation and a cycle search (`saturate`) instead of stages 2–6.
fn verify_by_saturation(h: &History, options: &Options, mut report: Report, start: Instant) -> Report {
    // Read committed allows a transaction to read two versions of one key.
    let mut norm = normalize::normalize_with(h, &|_| options.level != Level::ReadCommitted);
    report.counts = stage_one_counts(h, &norm);
    note_normalized(h, &norm, &mut report);
    if !norm.anomalies.is_empty() {
        let found = std::mem::take(&mut norm.anomalies);
        return non_cycle_reject(h, report, found, start);
    }
    let sat = saturate::saturate(h, &norm, options.level);
    report.counts.so_edges = sat.so_edges;
    report.counts.wr_edges = sat.wr_edges;
    report.counts.forced_edges = sat.forced_edges;
    report.timings.construct_ms = ms(start);
    let after = Instant::now();
    match saturate::evidence(h, &norm, options.level, &sat, &mut report.derivations) {
        None => {
            if let saturate::Outcome::Order(order) = &sat.outcome {
                report.serial_order =
                    Some(order.iter().map(|&v| h.transactions[norm.txns[v as usize].hist].id).collect());
            }
        }
        Some((anomaly, involved)) => {
            report.verdict = Verdict::Reject;
            report.anomalies.push(anomaly);
            report.transactions = carried::transactions(h, &report, involved);
        }
    }
    report.timings.report_ms = ms(after);
    report
}

/// The history's counts and stage 1's.
fn stage_one_counts(h: &History, norm: &Normalized) -> Counts {
    let committed = h.transactions.iter().filter(|t| t.outcome == Outcome::Committed).count() as u64;
    Counts {
        transactions: h.transactions.len() as u64,
        committed,
        aborted: h.transactions.iter().filter(|t| t.outcome == Outcome::Aborted).count() as u64,
        indeterminate_included: norm.txns.len() as u64 - committed,
        indeterminate_dropped: norm.dropped.len() as u64,
        vertices: norm.txns.len() as u64,
        versions: norm.versions.len() as u64,
        ..Counts::default()
    }
}

/// Under `declared`, says in each anomaly that rests on anti-dependencies which of its transactions have no
/// recorded isolation level. `declared` holds them to serializability, the strongest, so that nothing the
/// history cannot show is taken as allowed; if one ran at a weaker level (a session whose level the proxy
/// could not follow), the anomaly may be one that level allows, and the reader must know the verdict rests
/// on that. Anomalies every level forbids (G0, G1, reads of versions nobody wrote) need no such word.
fn note_unrecorded_levels(h: &History, report: &mut Report) {
    use report::AnomalyClass::*;
    if !h.transactions.iter().any(|t| t.isolation.is_none()) {
        return;
    }
    let unrecorded: HashSet<TxnId> =
        h.transactions.iter().filter(|t| t.isolation.is_none()).map(|t| t.id).collect();
    for a in &mut report.anomalies {
        if matches!(
            a.class,
            G0 | G1a | G1b | G1c | GarbageRead | DuplicateWrite | FutureRead | InternalRead | UnownedVersion
        ) {
            continue;
        }
        let mut involved: Vec<TxnId> =
            a.cycle.iter().flat_map(|e| [e.from, e.to]).chain(a.ops.iter().map(|o| o.txn)).collect();
        involved.sort_unstable();
        involved.dedup();
        let without: Vec<String> =
            involved.iter().filter(|t| unrecorded.contains(t)).map(|t| format!("T{}", t.0)).collect();
        if without.is_empty() {
            continue;
        }
        let (subject, verb) = match without.len() {
            1 => (without[0].clone(), "has"),
            _ => (without.join(", "), "have"),
        };
        a.summary.push_str(&format!(
            " {subject} {verb} no recorded isolation level and {} held to serializability: at a weaker level \
             this may be allowed.",
            if without.len() == 1 { "was" } else { "were" }
        ));
    }
}

/// Snapshot isolation, and `declared` (each transaction at the level it asked for): stages 1–4 as for
/// serializability (without real time), then `si`'s split polygraph and the solver instead of pruning and
/// stage 6 (PolySI §3–4). Under `declared` each transaction's [`si::Reader`] decides which of its
/// anti-dependencies count, and read-committed ones may read a key twice and order no read-modify-write.
fn verify_snapshot_isolation(
    h: &History,
    options: &Options,
    mut report: Report,
    start: Instant,
) -> Result<Report, VerifyError> {
    // Serializability is stronger than snapshot isolation and than any mix of declared levels (a serial
    // execution is one at every level: each transaction reads, as of its commit, what every level allows),
    // so serializability's serial order is a witness for both, and `check_report` re-checks it as such. A
    // history it accepts needs no split polygraph; Cobra's pruning makes that the fast path. Without pruning
    // (the differential tests) the split polygraph always runs.
    if options.prune {
        let ser = verify(h, &Options { level: Level::Serializable, ..options.clone() })?;
        if ser.is_accept() {
            let declared = (options.level == Level::Declared).then(|| report::DeclaredLevels::count(h));
            return Ok(Report { level: options.level, declared, ..ser });
        }
    }
    report.options.coalesce = true;
    let declared = options.level == Level::Declared;
    let reader_of = |i: usize| match declared {
        true => si::Reader::of(&h.transactions[i]),
        false => si::Reader::Snapshot,
    };
    let mut norm = normalize::normalize_with(h, &|i| reader_of(i) != si::Reader::ReadCommitted);
    report.counts = stage_one_counts(h, &norm);
    note_normalized(h, &norm, &mut report);
    if declared {
        report.declared = Some(report::DeclaredLevels::count(h));
    }
    if !norm.anomalies.is_empty() {
        let found = std::mem::take(&mut norm.anomalies);
        return Ok(non_cycle_reject(h, report, found, start));
    }
    let readers: Vec<si::Reader> = norm.txns.iter().map(|t| reader_of(t.hist)).collect();
    let encoding = si::Encoding { n: norm.txns.len() as u32, readers };
    let (mut g, lost) = known_graph::create_known_graph_with(h, &norm, options.combine, &|v| {
        encoding.readers[v as usize] != si::Reader::ReadCommitted
    });
    if !lost.is_empty() {
        return Ok(non_cycle_reject(h, report, lost, start));
    }
    let (chains, chain_rw) = chains::combine_writes(&norm, &mut g, options.combine);
    let (constraints, made) = constraints::generate(&norm, &chains, &mut g, true, constraints::PairRule::All);
    si::add_initial_ww(&norm, &chains, &mut g);
    let c = &mut report.counts;
    c.wr_edges = g.edges.iter().filter(|e| matches!(e.origin, Origin::Wr { .. })).count() as u64;
    c.so_edges = g.edges.iter().filter(|e| e.origin == Origin::So).count() as u64;
    c.ww_pairs = g.ww_pairs;
    c.chains = chains.list.len() as u64;
    c.chain_rw_edges = chain_rw;
    c.initial_edges = made.initial_edges;
    c.constraints_before_prune = constraints.len() as u64;
    c.constraints_after_prune = constraints.len() as u64;
    c.known_edges_at_solve = g.edges.len() as u64;
    report.timings.construct_ms = ms(start);

    let solve_start = Instant::now();
    let solved = si::solve(&g, &constraints, &norm, &chains, &encoding, options.prune)?;
    report.timings.solve_ms = ms(solve_start);
    let after = Instant::now();
    match solved {
        si::SiSolved::Acyclic { order, residual } => {
            report.counts.constraints_after_prune = residual;
            report.serial_order =
                Some(order.into_iter().map(|v| h.transactions[norm.txns[v as usize].hist].id).collect());
        }
        si::SiSolved::Cyclic { cycle, core } => {
            let mut cert = Certifier::new(h, &norm, &g, &chains, &constraints, &[], ClockBounds::default());
            let anomaly = si::SiEvidence::new(&mut cert, &encoding).anomaly(&cycle, &core);
            report.verdict = Verdict::Reject;
            report.derivations = std::mem::take(&mut cert.derivations);
            report.anomalies.push(anomaly);
            report.transactions = carried::transactions(h, &report, cert.involved.iter().copied());
        }
    }
    report.timings.report_ms = ms(after);
    Ok(report)
}

/// A reject from anomalies found before any cycle search.
fn non_cycle_reject(h: &History, mut report: Report, found: Vec<Found>, start: Instant) -> Report {
    report.verdict = Verdict::Reject;
    report.anomalies_omitted = found.len().saturating_sub(MAX_ANOMALIES) as u64;
    let mut involved = BTreeSet::new();
    let index: HashMap<history::TxnId, usize> =
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
    report.transactions = carried::transactions(h, &report, involved);
    report.timings.construct_ms = ms(start);
    report
}
