//! Stage 7 (evidence side): certificates (Cobra §5: "a cycle in the known graph … or else a set of
//! unsatisfiable clauses").
//!
//! In: the reason for a reject (a cycle of known edges, a constraint whose two sides both close cycles, or a
//! cycle from the solver's refutation). Out: report anomalies whose every edge carries its kind, key and a
//! sentence, and whose ww/rw edges cite version-order facts ([`Derivation`]s). A fact that pruning derived
//! cites the cycle the opposite order would close, recursively; that cycle uses only edges that existed when
//! the decision was made, so the proof is well-founded. Cycles are shortened first: for a few edges of the
//! cycle found, a breadth-first search finds the shortest cycle through that edge.

use std::collections::{BTreeSet, HashMap};

use history::{ClockBounds, History, Op};
use kernels::{Backend, Graph, Reachability};
use solver::Side;

use crate::chains::Chains;
use crate::constraints::{CEdge, Constraint};
use crate::known_graph::{KnownGraph, Origin};
use crate::normalize::{Normalized, key_name, show};
use crate::prune::Decision;
use crate::report::{
    Anomaly, AnomalyClass, Basis, Choice, ColumnValue, CycleEdge, Derivation, EdgeKind, OpReport, Refutation,
    RefutationNode, RowKey, StatementReport, TxnReport,
};

/// The most derivations a report carries; beyond, facts are marked [`Basis::Omitted`].
const MAX_DERIVATIONS: usize = 400;
/// The most splits a refutation may take (a core of up to about ten constraints).
const MAX_SPLITS: usize = 1024;
/// How many edges of a found cycle are tried as anchors for a shorter one.
const SHORTEN_TRIES: usize = 12;

/// The state of a refutation being built.
struct Splits {
    choices: Vec<Choice>,
    index: HashMap<u32, usize>,
    budget: usize,
}

/// Builds the evidence of one reject.
pub(crate) struct Certifier<'a> {
    pub h: &'a History,
    pub norm: &'a Normalized,
    pub g: &'a KnownGraph,
    pub chains: &'a Chains,
    pub constraints: &'a [Constraint],
    pub decisions: &'a [Decision],
    /// The clocks' bounds real-time edges were inferred with.
    pub clocks: ClockBounds,
    /// Edge ids leaving each vertex, simplest first.
    adj: Vec<Vec<u32>>,
    pub derivations: Vec<Derivation>,
    memo: HashMap<(u8, u32, u32), usize>,
    /// The history indices of the transactions the edges explained so far name (the report carries them
    /// and what else `report::carried` adds).
    pub involved: BTreeSet<usize>,
}

impl<'a> Certifier<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        h: &'a History,
        norm: &'a Normalized,
        g: &'a KnownGraph,
        chains: &'a Chains,
        constraints: &'a [Constraint],
        decisions: &'a [Decision],
        clocks: ClockBounds,
    ) -> Self {
        let mut adj: Vec<Vec<u32>> = vec![Vec::new(); g.vertices as usize];
        for (i, e) in g.edges.iter().enumerate() {
            adj[e.from as usize].push(i as u32);
        }
        for list in &mut adj {
            list.sort_by_key(|&i| (g.edges[i as usize].origin.priority(), g.edges[i as usize].round));
        }
        Certifier {
            h,
            norm,
            g,
            chains,
            constraints,
            decisions,
            clocks,
            adj,
            derivations: Vec::new(),
            memo: HashMap::new(),
            involved: BTreeSet::new(),
        }
    }

    /// The shortest path of known edges (of passes up to `round`) from `from` to `to`, as edge ids.
    fn path(&self, from: u32, to: u32, round: u32) -> Option<Vec<u32>> {
        if from == to {
            return Some(Vec::new());
        }
        let n = self.g.vertices as usize;
        let mut via: Vec<u32> = vec![u32::MAX; n];
        let mut seen = vec![false; n];
        seen[from as usize] = true;
        let mut queue = std::collections::VecDeque::from([from]);
        while let Some(v) = queue.pop_front() {
            for &ei in &self.adj[v as usize] {
                let e = &self.g.edges[ei as usize];
                if e.round > round || seen[e.to as usize] {
                    continue;
                }
                seen[e.to as usize] = true;
                via[e.to as usize] = ei;
                if e.to == to {
                    let mut path = Vec::new();
                    let mut at = to;
                    while at != from {
                        let ei = via[at as usize];
                        path.push(ei);
                        at = self.g.edges[ei as usize].from;
                    }
                    path.reverse();
                    return Some(path);
                }
                queue.push_back(e.to);
            }
        }
        None
    }

    /// The simplest known edge `from → to` of passes up to `round`.
    fn edge_between(&self, from: u32, to: u32, round: u32) -> Option<u32> {
        self.adj[from as usize].iter().copied().find(|&ei| {
            let e = &self.g.edges[ei as usize];
            e.to == to && e.round <= round
        })
    }

    /// A shortest cycle of known edges near the cycle of vertices `cycle` (edges of passes up to `round`).
    pub(crate) fn shortest_cycle(&self, cycle: &[u32], round: u32) -> Vec<u32> {
        let mut best: Option<Vec<u32>> = None;
        let step = (cycle.len() / SHORTEN_TRIES).max(1);
        for i in (0..cycle.len()).step_by(step) {
            let (u, v) = (cycle[i], cycle[(i + 1) % cycle.len()]);
            let Some(e) = self.edge_between(u, v, round) else { continue };
            let Some(back) = self.path(v, u, round) else { continue };
            if best.as_ref().is_none_or(|b| back.len() + 1 < b.len()) {
                let mut c = vec![e];
                c.extend(back);
                best = Some(c);
            }
        }
        best.unwrap_or_default()
    }

    fn txn_id(&mut self, v: u32) -> history::TxnId {
        let hist = self.norm.txns[v as usize].hist;
        self.involved.insert(hist);
        self.h.transactions[hist].id
    }

    fn key_of_version(&self, v: u32) -> history::Key {
        self.norm.versions[v as usize].key
    }

    fn shown(&self, v: u32) -> String {
        show(self.norm.versions[v as usize].observed())
    }

    pub(crate) fn chain_observed(&self, c: u32) -> Vec<history::Observed> {
        self.chains.list[c as usize]
            .versions
            .iter()
            .map(|&v| self.norm.versions[v as usize].observed())
            .collect()
    }

    pub(crate) fn push_derivation(
        &mut self,
        key: history::Key,
        before: u32,
        after: u32,
        basis: Basis,
    ) -> usize {
        let d = Derivation {
            key: key_name(self.h, key),
            key_id: key.0,
            before: self.chain_observed(before),
            after: self.chain_observed(after),
            basis,
        };
        self.derivations.push(d);
        self.derivations.len() - 1
    }

    /// Explains one known edge.
    pub(crate) fn known_edge(&mut self, ei: u32) -> CycleEdge {
        let e = self.g.edges[ei as usize];
        let (from, to) = (self.txn_id(e.from), self.txn_id(e.to));
        let base = |kind, reason: String| CycleEdge::plain(from, to, kind, reason);
        match e.origin {
            Origin::Wr { version } => {
                let key = self.key_of_version(version);
                let o = self.norm.versions[version as usize].observed();
                CycleEdge {
                    key: Some(key_name(self.h, key)),
                    key_id: Some(key.0),
                    from_version: Some(o),
                    to_version: Some(o),
                    ..base(
                        EdgeKind::Wr,
                        format!(
                            "{from} < {to} because {to} read {}={} written by {from}",
                            key_name(self.h, key),
                            show(o)
                        ),
                    )
                }
            }
            Origin::So => {
                let s = self.h.transactions[self.norm.txns[e.from as usize].hist].session;
                base(
                    EdgeKind::So,
                    format!("{from} < {to} because both ran in session {s} and {from} came first"),
                )
            }
            Origin::Rt => {
                let tf = &self.h.transactions[self.norm.txns[e.from as usize].hist];
                let tt = &self.h.transactions[self.norm.txns[e.to as usize].hist];
                base(
                    EdgeKind::Rt,
                    format!(
                        "{from} < {to} because {from} committed at {} ns, more than the clock-drift threshold of {} \
                         ms before {to} started at {} ns",
                        tf.commit_ns.unwrap_or(0),
                        self.clocks.drift_ns(tf.collector, tt.collector) as f64 / 1e6,
                        tt.start_ns.unwrap_or(0)
                    ),
                )
            }
            Origin::ChainRw { read, next } => {
                let key = self.key_of_version(read);
                let d = self.memo_derivation((1, read, next), |c| {
                    let k = c.key_of_version(read);
                    c.derivations.push(Derivation {
                        key: key_name(c.h, k),
                        key_id: k.0,
                        before: vec![c.norm.versions[read as usize].observed()],
                        after: vec![c.norm.versions[next as usize].observed()],
                        basis: Basis::Rmw,
                    });
                    c.derivations.len() - 1
                });
                let kn = key_name(self.h, key);
                CycleEdge {
                    key: Some(kn.clone()),
                    key_id: Some(key.0),
                    from_version: Some(self.norm.versions[read as usize].observed()),
                    to_version: Some(self.norm.versions[next as usize].observed()),
                    derivation: Some(d),
                    ..base(
                        EdgeKind::Rw,
                        format!(
                            "{from} < {to} because {from} read {kn}={} and {to} overwrote it: {to} read {kn}={} and \
                             wrote {kn}={} [{d}]",
                            self.shown(read),
                            self.shown(read),
                            self.shown(next)
                        ),
                    )
                }
            }
            Origin::Initial { first, second, from_version, to_version, rw } => {
                let key = self.key_of_version(from_version);
                let d = self.memo_derivation((2, first, second), |c| {
                    c.push_derivation(key, first, second, Basis::InitialFirst)
                });
                let ce = CEdge { from: e.from, to: e.to, rw, from_version, to_version };
                self.constraint_edge(
                    &ce,
                    d,
                    false,
                    "versions from before recording precede every recorded write",
                )
            }
            Origin::Decided { decision, edge, .. } => {
                let dec = self.decisions[decision as usize];
                let side_edges =
                    self.constraints[dec.constraint as usize].side(self.norm, self.chains, dec.chosen);
                let ce = side_edges.get(edge as usize).copied().unwrap_or(CEdge {
                    from: e.from,
                    to: e.to,
                    rw: false,
                    from_version: 0,
                    to_version: 0,
                });
                let d = self.decision_derivation(decision);
                self.constraint_edge(&ce, d, false, "the opposite order closes a cycle")
            }
        }
    }

    pub(crate) fn memo_derivation(
        &mut self,
        k: (u8, u32, u32),
        make: impl FnOnce(&mut Self) -> usize,
    ) -> usize {
        if let Some(&d) = self.memo.get(&k) {
            return d;
        }
        let d = make(self);
        self.memo.insert(k, d);
        d
    }

    /// The derivation of pruning decision `decision`: the opposite order's cycle, explained recursively.
    fn decision_derivation(&mut self, decision: u32) -> usize {
        if let Some(&d) = self.memo.get(&(3, decision, 0)) {
            return d;
        }
        let dec = self.decisions[decision as usize];
        let c = &self.constraints[dec.constraint as usize];
        let (before, after) = match dec.chosen {
            Side::A => (c.first, c.second),
            Side::B => (c.second, c.first),
        };
        let key = c.key;
        let basis = if self.derivations.len() >= MAX_DERIVATIONS {
            Basis::Omitted
        } else {
            match self.path(dec.witness.to, dec.witness.from, dec.round) {
                Some(path) => {
                    let mut cycle = vec![self.hypothetical(&dec.witness)];
                    for ei in path {
                        cycle.push(self.known_edge(ei));
                    }
                    Basis::OtherOrderCycle { cycle }
                }
                None => Basis::Omitted,
            }
        };
        let d = self.push_derivation(key, before, after, basis);
        self.memo.insert((3, decision, 0), d);
        d
    }

    /// The edge that the opposite of a derivation would imply.
    fn hypothetical(&mut self, ce: &CEdge) -> CycleEdge {
        let mut e = self.constraint_edge(ce, 0, true, "");
        e.derivation = None;
        e
    }

    /// Explains an rw or ww edge between chains, citing derivation `d`.
    pub(crate) fn constraint_edge(
        &mut self,
        ce: &CEdge,
        d: usize,
        hypothetical: bool,
        why: &str,
    ) -> CycleEdge {
        let (from, to) = (self.txn_id(ce.from), self.txn_id(ce.to));
        let key = self.key_of_version(ce.from_version);
        let kn = key_name(self.h, key);
        let (fv, tv) = (self.shown(ce.from_version), self.shown(ce.to_version));
        let (kind, reason) = match (ce.rw, hypothetical) {
            (true, false) => (
                EdgeKind::Rw,
                format!(
                    "{from} < {to} because {from} read {kn}={fv} and {to} wrote {kn}={tv}, which comes after {fv} \
                     in the version order [{d}]: {why}"
                ),
            ),
            (false, false) => (
                EdgeKind::Ww,
                format!(
                    "{from} < {to} because {from} wrote {kn}={fv} and {to} wrote {kn}={tv}, which comes later in \
                     the version order [{d}]: {why}"
                ),
            ),
            (true, true) => (
                EdgeKind::Rw,
                format!(
                    "if {kn}={fv} came before {kn}={tv} in the version order, {from} (which read {kn}={fv}) would \
                     precede {to} (which wrote {kn}={tv})"
                ),
            ),
            (false, true) => (
                EdgeKind::Ww,
                format!(
                    "if {kn}={fv} came before {kn}={tv} in the version order, {from} (which wrote {kn}={fv}) would \
                     precede {to} (which wrote {kn}={tv})"
                ),
            ),
        };
        CycleEdge {
            from,
            to,
            kind,
            key: Some(kn),
            key_id: Some(key.0),
            from_version: Some(self.norm.versions[ce.from_version as usize].observed()),
            to_version: Some(self.norm.versions[ce.to_version as usize].observed()),
            derivation: if hypothetical { None } else { Some(d) },
            hypothetical,
            assumption: None,
            reason,
        }
    }

    /// A reject because the known graph (edges of passes up to `round`) has the cycle `cycle`.
    pub(crate) fn known_cycle(&mut self, cycle: &[u32], round: u32) -> Anomaly {
        let edges = self.shortest_cycle(cycle, round);
        let cycle: Vec<CycleEdge> = edges.into_iter().map(|ei| self.known_edge(ei)).collect();
        classify(cycle)
    }

    /// A reject because neither side of constraint `ci` can hold.
    pub(crate) fn conflict(&mut self, ci: u32, a: CEdge, b: CEdge, round: u32) -> Anomaly {
        let c = &self.constraints[ci as usize];
        let (first, second, key) = (c.first, c.second, c.key);
        // Side B (second before first) closes a cycle through `b`, so side A holds...
        let basis = match self.path(b.to, b.from, round) {
            Some(path) => {
                let mut cycle = vec![self.hypothetical(&b)];
                for ei in path {
                    cycle.push(self.known_edge(ei));
                }
                Basis::OtherOrderCycle { cycle }
            }
            None => Basis::Omitted,
        };
        let d = self.push_derivation(key, first, second, basis);
        // ...and side A closes a cycle through `a`.
        let mut cycle = vec![self.constraint_edge(&a, d, false, "the opposite order closes a cycle")];
        if let Some(path) = self.path(a.to, a.from, round) {
            for ei in path {
                cycle.push(self.known_edge(ei));
            }
        }
        classify(cycle)
    }

    /// A reject from the solver: `cycle` is a cycle of vertices under some choice of the core's constraints
    /// (`core`, indices into all constraints).
    pub(crate) fn solver_cycle(&mut self, cycle: &[(u32, u32)], core: &[u32]) -> Anomaly {
        let mut out = Vec::new();
        for &(u, v) in cycle {
            if let Some(ei) = self.edge_between(u, v, u32::MAX) {
                out.push(self.known_edge(ei));
                continue;
            }
            let found = core.iter().find_map(|&ci| {
                let c = &self.constraints[ci as usize];
                [Side::A, Side::B].into_iter().find_map(|side| {
                    let edges = c.side(self.norm, self.chains, side);
                    edges.iter().find(|e| e.from == u && e.to == v).map(|e| (ci, side, *e))
                })
            });
            if let Some((ci, side, ce)) = found {
                let c = &self.constraints[ci as usize];
                let (before, after) = match side {
                    Side::A => (c.first, c.second),
                    Side::B => (c.second, c.first),
                };
                let key = c.key;
                let d = self.memo_derivation((4, before, after), |s| {
                    s.push_derivation(key, before, after, Basis::Solver)
                });
                out.push(self.constraint_edge(&ce, d, false, "the order the solver's refutation chose here"));
            }
        }
        let mut a = classify(out);
        a.summary.push_str(&format!(
            " The SAT solver showed that no choice of order for the {} chain pair(s) in its core avoids a cycle; \
             this is the cycle for one choice.",
            core.len()
        ));
        a
    }

    /// A proof by cases that the core's constraints admit no acyclic choice: split on each constraint in turn
    /// until the choices made close a cycle with the known graph. `None` when the proof would exceed
    /// [`MAX_SPLITS`] splits (the report then rests on the solver's word for the other branches).
    pub(crate) fn refutation(&mut self, core: &[u32]) -> Option<Refutation> {
        let pairs: Vec<(u32, u32)> = self.g.edges.iter().map(|e| (e.from, e.to)).collect();
        let graph = Graph::from_edges(self.g.vertices, &pairs).ok()?;
        let reach = kernels::reachability(&graph, Some(&self.g.sessions), Backend::Auto).ok()?;
        let mut state = Splits { choices: Vec::new(), index: HashMap::new(), budget: MAX_SPLITS };
        let tree = self.refute(core, 0, &mut Vec::new(), &*reach, &mut state)?;
        Some(Refutation { choices: state.choices, tree })
    }

    fn refute(
        &mut self,
        core: &[u32],
        depth: usize,
        assumed: &mut Vec<(u32, Side)>,
        reach: &dyn Reachability,
        state: &mut Splits,
    ) -> Option<RefutationNode> {
        if let Some(cycle) = self.leaf_cycle(assumed, reach, &state.index) {
            return Some(RefutationNode::Cycle { cycle });
        }
        if depth >= core.len() || state.budget == 0 {
            return None;
        }
        state.budget -= 1;
        let ci = core[depth];
        let choice = match state.index.get(&ci) {
            Some(&i) => i,
            None => {
                let c = self.constraints[ci as usize];
                state.choices.push(Choice {
                    key: key_name(self.h, c.key),
                    key_id: c.key.0,
                    first: self.chain_observed(c.first),
                    second: self.chain_observed(c.second),
                });
                state.index.insert(ci, state.choices.len() - 1);
                state.choices.len() - 1
            }
        };
        assumed.push((ci, Side::A));
        let a = self.refute(core, depth + 1, assumed, reach, state);
        assumed.pop();
        let a = a?;
        assumed.push((ci, Side::B));
        let b = self.refute(core, depth + 1, assumed, reach, state);
        assumed.pop();
        Some(RefutationNode::Split {
            choice,
            first_before_second: Box::new(a),
            second_before_first: Box::new(b?),
        })
    }

    /// The shortest cycle through the edges of the assumed constraint sides and known paths, if any.
    fn leaf_cycle(
        &mut self,
        assumed: &[(u32, Side)],
        reach: &dyn Reachability,
        index: &HashMap<u32, usize>,
    ) -> Option<Vec<CycleEdge>> {
        let mut extra: Vec<(CEdge, usize)> = Vec::new();
        for &(ci, side) in assumed {
            let choice = index.get(&ci).copied()?;
            for e in self.constraints[ci as usize].side(self.norm, self.chains, side) {
                extra.push((e, choice));
            }
        }
        if extra.is_empty() {
            return None;
        }
        let mut nodes: Vec<u32> = extra.iter().flat_map(|(e, _)| [e.from, e.to]).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let at = |v: u32| nodes.binary_search(&v).unwrap_or(0);
        // Links of the small graph over the endpoints: known paths, and the assumed edges themselves.
        #[derive(Clone, Copy)]
        enum Link {
            Known,
            Assumed(usize),
        }
        let mut adj: Vec<Vec<(usize, Link)>> = vec![Vec::new(); nodes.len()];
        for (i, (e, _)) in extra.iter().enumerate() {
            adj[at(e.from)].push((at(e.to), Link::Assumed(i)));
        }
        for (xi, &x) in nodes.iter().enumerate() {
            for (yi, &y) in nodes.iter().enumerate() {
                if xi != yi && reach.reaches(x, y) {
                    adj[xi].push((yi, Link::Known));
                }
            }
        }
        // Shortest cycle through some assumed edge: BFS from its head back to its tail.
        let mut best: Option<Vec<(usize, usize, Link)>> = None;
        for (i, (e, _)) in extra.iter().enumerate() {
            let (start, goal) = (at(e.to), at(e.from));
            let mut via: Vec<Option<(usize, Link)>> = vec![None; nodes.len()];
            let mut seen = vec![false; nodes.len()];
            seen[start] = true;
            let mut queue = std::collections::VecDeque::from([start]);
            let mut found = start == goal;
            while let Some(v) = queue.pop_front() {
                if found {
                    break;
                }
                for &(w, link) in &adj[v] {
                    if !seen[w] {
                        seen[w] = true;
                        via[w] = Some((v, link));
                        if w == goal {
                            found = true;
                            break;
                        }
                        queue.push_back(w);
                    }
                }
            }
            if !found {
                continue;
            }
            let mut hops = vec![(goal, start, Link::Assumed(i))];
            let mut back = Vec::new();
            let mut w = goal;
            while w != start {
                let Some((v, link)) = via[w] else { break };
                back.push((v, w, link));
                w = v;
            }
            back.reverse();
            hops.extend(back);
            if best.as_ref().is_none_or(|b| hops.len() < b.len()) {
                best = Some(hops);
            }
        }
        let hops = best?;
        let mut cycle = Vec::new();
        for (x, y, link) in hops {
            match link {
                Link::Assumed(i) => {
                    let (ce, choice) = extra[i];
                    let mut edge = self.constraint_edge(&ce, 0, false, "assumed in this branch");
                    edge.derivation = None;
                    edge.assumption = Some(choice);
                    edge.reason =
                        edge.reason.replace(" [0]: assumed in this branch", " (assumed in this branch)");
                    cycle.push(edge);
                }
                Link::Known => {
                    for ei in self.path(nodes[x], nodes[y], u32::MAX)? {
                        cycle.push(self.known_edge(ei));
                    }
                }
            }
        }
        Some(cycle)
    }
}

/// The report of transaction number `i` of the history.
pub(crate) fn txn_report(h: &History, i: usize) -> TxnReport {
    let t = &h.transactions[i];
    let ops = t
        .ops
        .iter()
        .enumerate()
        .map(|(index, op)| {
            let (text, version) = match *op {
                Op::Read { key, observed, .. } => {
                    (format!("r({}) = {}", key_name(h, key), show(observed)), show(observed))
                }
                Op::Write { key, write, .. } => {
                    (format!("w({}) = {}", key_name(h, key), write), write.to_string())
                }
            };
            let sql = op.stmt().and_then(|s| h.statement(s)).map(str::to_owned);
            let values = t.values.as_deref();
            let row = values.and_then(|v| v.describe_row(index));
            let params = values.and_then(|v| v.describe_params(index, op.stmt()));
            let write = matches!(op, Op::Write { .. });
            let key = h.keys.name(op.key()).filter(|n| !n.namespace.is_empty()).map(|n| RowKey {
                table: n.namespace.clone(),
                pk: n.bytes.split(|&b| b == 0x1f).map(|p| String::from_utf8_lossy(p).into_owned()).collect(),
            });
            let values = values.and_then(|v| v.row_of(index)).map_or_else(Vec::new, |(row, columns)| {
                row.values
                    .iter()
                    .enumerate()
                    .map(|(i, value)| ColumnValue {
                        column: columns.get(i).cloned().unwrap_or_else(|| format!("${}", i + 1)),
                        value: value.clone(),
                    })
                    .collect()
            });
            OpReport {
                index,
                text,
                sql,
                version: Some(version),
                row,
                params,
                write,
                key,
                values,
                key_id: Some(op.key().0),
            }
        })
        .collect();
    let statements = history::values::statement_steps(&t.ops, t.values.as_deref())
        .into_iter()
        .map(|step| StatementReport {
            sql: step.stmt.and_then(|s| h.statement(s)).map(str::to_owned),
            params: step.params,
            first_op: step.first_op,
            ops: step.ops,
        })
        .collect();
    TxnReport {
        id: t.id,
        session: t.session,
        seq: t.seq,
        outcome: t.outcome,
        start_ns: t.start_ns,
        commit_ns: t.commit_ns,
        ops,
        isolation: t.isolation,
        statements,
        collector: t.collector,
    }
}

/// Names a cycle's anomaly from its edge kinds (Adya's G0/G1c/G-single/G2, with Elle's special cases).
pub(crate) fn classify(cycle: Vec<CycleEdge>) -> Anomaly {
    let count = |k: EdgeKind| cycle.iter().filter(|e| e.kind == k).count();
    let (rw, wr, rt, so) =
        (count(EdgeKind::Rw), count(EdgeKind::Wr), count(EdgeKind::Rt), count(EdgeKind::So));
    let class = match rw {
        0 if wr == 0 => AnomalyClass::G0,
        0 => AnomalyClass::G1c,
        1 if rt > 0 => AnomalyClass::StaleRead,
        1 => AnomalyClass::GSingle,
        2 if cycle.len() == 2 => AnomalyClass::WriteSkew,
        2 if cycle.len() == 4
            && wr == 2
            && cycle[0].kind != cycle[1].kind
            && cycle[1].kind != cycle[2].kind =>
        {
            AnomalyClass::LongFork
        }
        _ => AnomalyClass::G2Item,
    };
    let path: Vec<String> = cycle.iter().map(|e| format!("{} -{}->", e.from, e.kind.name())).collect();
    let summary = match cycle.first() {
        Some(first) => {
            format!("a dependency cycle of {} transactions: {} {}", cycle.len(), path.join(" "), first.from)
        }
        None => "a dependency cycle (not reconstructed)".to_owned(),
    };
    Anomaly {
        class,
        summary,
        ops: Vec::new(),
        uses_real_time: rt > 0,
        uses_session_order: so > 0,
        cycle,
        refutation: None,
    }
}
