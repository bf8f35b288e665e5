//! Stage 1: from a report to a plan. Each transaction the report cites becomes steps (BEGIN, its
//! statements, COMMIT or ROLLBACK) on its session's connection, and the steps of all sessions are put in
//! one order: the interleaving that produced the anomaly, as far as the record shows it.
//!
//! The proxy timestamps a transaction's start and commit, not each statement, so the order is derived
//! (CLOTHO §4 asks the same of its schedules: an order consistent with every dependency of the anomaly):
//! - a session's steps stay in its order;
//! - each edge of an anomaly's cycle says which step must come before which: for `T1 -wr-> T2` T1 commits
//!   before T2 takes the snapshot its read used, for `T1 -rw-> T2` that snapshot is taken before T2
//!   commits, for `T1 -ww-> T2` T1 commits before T2's write takes its snapshot, and for `T1 -rt-> T2` T1
//!   commits before T2 begins. The snapshot of a read is its statement's at READ COMMITTED (and below),
//!   and the transaction's first statement's at REPEATABLE READ and SERIALIZABLE (PostgreSQL takes it
//!   there);
//! - the two reads of a lost update (an anomaly without a cycle) each come before the other transaction
//!   commits, and so do its two writes: the second waits for the first's row lock and, at READ COMMITTED,
//!   overwrites its version once it commits (the schedule the proxy records as a lost update; written
//!   after the first commit instead, the second UPDATE replaces the first's version, which the proxy
//!   records as read, and the replay shows a non-repeatable read);
//! - in an anomaly without a cycle that shows a read of another transaction's write (an aborted or an
//!   intermediate read), the read comes after the write's statement and before the writer ends;
//! - in a non-repeatable read, the writer of the version read second commits after the first read's
//!   snapshot and before the second's;
//! - beyond the cycles, what any database's history implies among the report's transactions: a read of
//!   another's committed write comes after that writer commits, and two writers of a row do not overlap
//!   (the one that committed first ends before the other's write takes its snapshot); dropped if they
//!   contradict the cycles, as they can when the database broke more than its level;
//! - everything else follows the recorded times: a transaction begins at its start, commits at its
//!   commit, and its statements are spread evenly in between.
//!
//! When the cycle's dependencies admit no order (the database broke more than the level it was asked for),
//! the order is the times' alone, and the plan says so in its notes.
//!
//! Each BEGIN is sent just before its transaction's first statement, with no other session's step
//! between: where a database takes a transaction's snapshot, or starts it in real time, varies (PostgreSQL
//! at the first statement, the embedded store at BEGIN), and with nothing between the two every database
//! sees the same interleaving. Moving a BEGIN later breaks no edge: only its own session's earlier steps
//! and the real-time edges of other transactions' commits come before it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use history::{IsolationLevel, Outcome, SessionId, TxnId};
use verifier::report::{EdgeKind, Labels, OpRef, OpReport, TxnReport};
use verifier::{AnomalyClass, Report, Verdict};

/// Why a report cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// An accept has nothing to replay.
    #[error("the report is an accept: there is no anomaly to replay")]
    Accept,
    /// No transaction of the report has a statement text to send.
    #[error(
        "the report's transactions carry no statements to replay (a report of schema {0}; schema 3 and \
         later list each transaction's statements, and a history without statement texts cannot be replayed)"
    )]
    NoStatements(u32),
}

/// What a step does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// `BEGIN`, at the transaction's isolation level.
    Begin,
    /// The transaction's statement number `statement` (an index into its report's `statements`).
    Statement {
        /// The index.
        statement: usize,
    },
    /// `COMMIT` (for a transaction that committed, or whose outcome is unknown).
    Commit,
    /// `ROLLBACK` (for a transaction that aborted).
    Rollback,
}

/// One step of the replay: something one session sends and waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The transaction: an index into [`ReplayPlan::txns`].
    pub txn: usize,
    /// What it sends.
    pub kind: StepKind,
}

/// The whole replay: the transactions, their sessions, and every step in the interleaving.
#[derive(Clone, Debug)]
pub struct ReplayPlan {
    /// The report's id, for names (the scratch schema's, the files').
    pub report_id: String,
    /// The report.
    pub report: Report,
    /// The transactions, in the order the report lists them.
    pub txns: Vec<TxnReport>,
    /// The session of each transaction: an index into [`ReplayPlan::sessions`].
    pub session_of: Vec<usize>,
    /// The sessions, in the order they first appear in the interleaving.
    pub sessions: Vec<SessionId>,
    /// The isolation level each transaction runs at (`None`: the session's default).
    pub isolation: Vec<Option<IsolationLevel>>,
    /// The steps, in the interleaving.
    pub steps: Vec<Step>,
    /// What a person should know about how faithful the plan is.
    pub notes: Vec<String>,
    /// The short labels the report's text gives transactions and sessions.
    labels: std::sync::Arc<Labels>,
}

/// A step's place in the dependency graph and its estimated time.
struct Node {
    step: Step,
    time: u64,
}

impl ReplayPlan {
    /// Plans the replay of `report` (stored as `report_id`), running every transaction at `isolation`
    /// when given, else at the level it recorded.
    pub fn new(
        report_id: &str,
        report: &Report,
        isolation: Option<IsolationLevel>,
    ) -> Result<ReplayPlan, PlanError> {
        if report.verdict == Verdict::Accept {
            return Err(PlanError::Accept);
        }
        let mut txns = report.transactions.clone();
        txns.sort_by_key(|t| (t.session, t.seq));
        if txns.iter().all(|t| t.statements.iter().all(|s| s.sql.is_none())) {
            return Err(PlanError::NoStatements(report.schema_version));
        }
        let mut notes = Vec::new();
        let levels: Vec<Option<IsolationLevel>> = txns.iter().map(|t| isolation.or(t.isolation)).collect();
        let (nodes, first_node) = nodes_of(&txns, &mut notes);
        let index_of: BTreeMap<TxnId, usize> = txns.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let mut edges: Vec<(usize, usize)> = Vec::new();
        // Session order: consecutive steps of one session.
        let mut last_of_session: BTreeMap<SessionId, usize> = BTreeMap::new();
        for (i, t) in txns.iter().enumerate() {
            let range = first_node[i]..first_node[i + 1];
            if let Some(&prev) = last_of_session.get(&t.session) {
                edges.push((prev, range.start));
            }
            edges.extend(range.clone().zip(range.clone().skip(1)));
            last_of_session.insert(t.session, range.end - 1);
        }
        let places = Places { txns: &txns, levels: &levels, nodes: &nodes, first_node: &first_node };
        let dependencies = dependency_edges(report, &txns, &index_of, &places);
        let implied = implied_edges(&places);
        edges.extend(dependencies.iter().copied());
        let with_implied = [edges.as_slice(), implied.as_slice()].concat();
        let order = match topological(&nodes, &with_implied) {
            Some(order) => Some(order),
            None => {
                let order = topological(&nodes, &edges);
                if order.is_some() {
                    notes.push(
                        "the anomaly's dependencies contradict what the history implies among these \
                         transactions (reads of each other's writes, writers of one row); the plan follows \
                         the anomaly's"
                            .to_owned(),
                    );
                }
                order
            }
        };
        let order = match order {
            Some(order) => order,
            None => {
                notes.push(
                    "the anomaly's dependencies admit no interleaving of these steps; they run in the order \
                     of the recorded times instead"
                        .to_owned(),
                );
                edges.truncate(edges.len() - dependencies.len());
                topological(&nodes, &edges).expect("session order alone is acyclic")
            }
        };
        if txns.iter().any(|t| t.start_ns.is_none() || t.commit_ns.is_none()) {
            notes.push(
                "some transactions have no recorded start or commit time; their steps are placed by the \
                 anomaly's dependencies and the report's order alone"
                    .to_owned(),
            );
        }
        let steps = begins_next_to_first_statements(order.into_iter().map(|n| nodes[n].step.clone()));
        let mut sessions: Vec<SessionId> = Vec::new();
        for step in &steps {
            let s = txns[step.txn].session;
            if !sessions.contains(&s) {
                sessions.push(s);
            }
        }
        let session_of = txns
            .iter()
            .map(|t| sessions.iter().position(|&s| s == t.session).expect("every session has a step"))
            .collect();
        Ok(ReplayPlan {
            report_id: report_id.to_owned(),
            report: report.clone(),
            txns,
            session_of,
            sessions,
            isolation: levels,
            steps,
            notes,
            labels: std::sync::Arc::new(Labels::of(report)),
        })
    }

    /// The SQL of a BEGIN, COMMIT or ROLLBACK step; `None` for a statement.
    pub fn control_sql(&self, step: &Step) -> Option<String> {
        match step.kind {
            StepKind::Begin => Some(match self.isolation[step.txn] {
                Some(level) => format!("BEGIN ISOLATION LEVEL {level}"),
                None => "BEGIN".to_owned(),
            }),
            StepKind::Commit => Some("COMMIT".to_owned()),
            StepKind::Rollback => Some("ROLLBACK".to_owned()),
            StepKind::Statement { .. } => None,
        }
    }

    /// The recorded tables the steps touch, as the history names them (`table` in `public`, else
    /// `schema.table`).
    pub fn tables(&self) -> std::collections::BTreeSet<String> {
        self.txns
            .iter()
            .flat_map(|t| t.ops.iter().filter_map(|o| o.key.as_ref().map(|k| k.table.clone())))
            .collect()
    }

    /// Transaction `txn`'s label, as the report's text names it (`T1`, …).
    pub fn label(&self, txn: usize) -> String {
        self.labels.txn(self.txns[txn].id.0)
    }

    /// Session `session`'s label, as the report's text names it (`S1`, …).
    pub fn session_label(&self, session: usize) -> String {
        self.labels.session(self.sessions[session].0)
    }
}

/// The steps of every transaction, in order, with their estimated times; and where each transaction's
/// steps start (`first_node[i]..first_node[i + 1]` are transaction `i`'s).
fn nodes_of(txns: &[TxnReport], notes: &mut Vec<String>) -> (Vec<Node>, Vec<usize>) {
    let mut nodes = Vec::new();
    let mut first_node = Vec::new();
    for (i, t) in txns.iter().enumerate() {
        first_node.push(nodes.len());
        let statements: Vec<usize> =
            (0..t.statements.len()).filter(|&s| t.statements[s].sql.is_some()).collect();
        if statements.len() < t.statements.len() {
            notes.push(format!(
                "{} of transaction {} has {} statement(s) whose text was not logged; they are left out",
                t.session,
                t.id,
                t.statements.len() - statements.len()
            ));
        }
        let start = t.start_ns.unwrap_or(0);
        let end = t.commit_ns.unwrap_or(start).max(start);
        let spread = |k: usize| {
            start + ((end - start) as u128 * (k as u128 + 1) / (statements.len() as u128 + 1)) as u64
        };
        nodes.push(Node { step: Step { txn: i, kind: StepKind::Begin }, time: start });
        for (k, &statement) in statements.iter().enumerate() {
            nodes.push(Node {
                step: Step { txn: i, kind: StepKind::Statement { statement } },
                time: spread(k),
            });
        }
        let kind = if t.outcome == Outcome::Aborted { StepKind::Rollback } else { StepKind::Commit };
        nodes.push(Node { step: Step { txn: i, kind }, time: end });
    }
    first_node.push(nodes.len());
    (nodes, first_node)
}

/// Where a transaction's steps are among the nodes, and where its reads take their snapshots.
struct Places<'a> {
    txns: &'a [TxnReport],
    levels: &'a [Option<IsolationLevel>],
    nodes: &'a [Node],
    first_node: &'a [usize],
}

impl Places<'_> {
    fn begin(&self, t: usize) -> usize {
        self.first_node[t]
    }

    /// Its COMMIT or ROLLBACK.
    fn end(&self, t: usize) -> usize {
        self.first_node[t + 1] - 1
    }

    /// The node of the statement that produced op `op` of transaction `t`, or its first statement's.
    fn statement_node(&self, t: usize, op: usize) -> usize {
        let found = (self.first_node[t]..self.first_node[t + 1]).find(|&n| match self.nodes[n].step.kind {
            StepKind::Statement { statement } => {
                let s = &self.txns[t].statements[statement];
                s.first_op <= op && op < s.first_op + s.ops
            }
            _ => false,
        });
        found.unwrap_or_else(|| (self.begin(t) + 1).min(self.end(t)))
    }

    /// Where the snapshot of op `op` of `t` is taken (see the module docs): its statement's, or the
    /// transaction's first statement's at the levels that take one snapshot.
    fn snapshot_of(&self, t: usize, op: usize) -> usize {
        match self.levels[t] {
            Some(IsolationLevel::RepeatableRead | IsolationLevel::Serializable) => {
                (self.begin(t) + 1).min(self.end(t))
            }
            _ => self.statement_node(t, op),
        }
    }
}

/// The "before" edges the anomalies' cycles imply, between nodes (see the module docs).
fn dependency_edges(
    report: &Report,
    txns: &[TxnReport],
    index_of: &BTreeMap<TxnId, usize>,
    places: &Places<'_>,
) -> Vec<(usize, usize)> {
    // The first op of `t` of the given kind on `key`.
    let op_on = |t: usize, write: bool, key: &str| -> Option<usize> {
        let prefix = format!("{}({key}) = ", if write { "w" } else { "r" });
        txns[t].ops.iter().find(|o| o.text.starts_with(&prefix)).map(|o| o.index)
    };
    // An op an anomaly cites: its transaction's index here, its index in it, and the op; `None` where the
    // report does not hold it.
    let cited = |o: &OpRef| -> Option<(usize, usize, &OpReport)> {
        let t = *index_of.get(&o.txn)?;
        Some((t, o.op, txns[t].ops.get(o.op)?))
    };
    let mut edges = Vec::new();
    for edge in report.anomalies.iter().flat_map(|a| &a.cycle) {
        let (Some(&from), Some(&to)) = (index_of.get(&edge.from), index_of.get(&edge.to)) else { continue };
        if edge.hypothetical || from == to {
            continue;
        }
        let key = edge.key.as_deref().unwrap_or_default();
        match edge.kind {
            EdgeKind::Wr => {
                if let Some(op) = op_on(to, false, key) {
                    edges.push((places.end(from), places.snapshot_of(to, op)));
                }
            }
            EdgeKind::Rw => {
                if let Some(op) = op_on(from, false, key) {
                    edges.push((places.snapshot_of(from, op), places.end(to)));
                }
            }
            EdgeKind::Ww => {
                if let Some(op) = op_on(to, true, key) {
                    edges.push((places.end(from), places.snapshot_of(to, op)));
                }
            }
            EdgeKind::Rt => edges.push((places.end(from), places.begin(to))),
            EdgeKind::So => {}
        }
    }
    // A lost update has no cycle; its ops are each transaction's read and write of the key. Each read must
    // see the version before either write commits, and each write is sent before the other transaction
    // ends (see the module docs).
    for anomaly in report.anomalies.iter().filter(|a| a.class == AnomalyClass::LostUpdate) {
        let steps: Vec<(usize, usize)> = anomaly
            .ops
            .iter()
            .filter_map(cited)
            .map(|(t, i, op)| {
                (t, if op.write { places.statement_node(t, i) } else { places.snapshot_of(t, i) })
            })
            .collect();
        for &(t, step) in &steps {
            for &(other, _) in steps.iter().filter(|(other, _)| *other != t) {
                edges.push((step, places.end(other)));
            }
        }
    }
    // A non-repeatable read lists its two reads and the write of the version the second one read: the
    // writer commits after the first read's snapshot and before the second's.
    for anomaly in report.anomalies.iter().filter(|a| a.class == AnomalyClass::NonRepeatableRead) {
        let place = |i: usize| anomaly.ops.get(i).and_then(cited);
        if let (Some((reader, first, _)), Some((_, second, _)), Some((writer, ..))) =
            (place(0), place(1), place(2))
        {
            edges.push((places.snapshot_of(reader, first), places.end(writer)));
            edges.push((places.end(writer), places.snapshot_of(reader, second)));
        }
    }
    // The other anomalies without a cycle (an aborted read, an intermediate read, …) list a write and a
    // read of it by another transaction: the read comes after the write's statement and before the
    // writer ends, the schedule of a dirty read (which a database that keeps READ COMMITTED refuses).
    for anomaly in report.anomalies.iter().filter(|a| {
        a.cycle.is_empty() && !matches!(a.class, AnomalyClass::LostUpdate | AnomalyClass::NonRepeatableRead)
    }) {
        let ops: Vec<(usize, &OpReport)> =
            anomaly.ops.iter().filter_map(cited).map(|(t, _, op)| (t, op)).collect();
        for &(writer, w) in ops.iter().filter(|(_, o)| o.write) {
            for &(reader, r) in ops.iter().filter(|(t, o)| !o.write && *t != writer && o.version == w.version)
            {
                let read = places.snapshot_of(reader, r.index);
                edges.push((places.statement_node(writer, w.index), read));
                edges.push((read, places.end(writer)));
            }
        }
    }
    edges
}

/// `steps` with each BEGIN moved later, to just before its transaction's next step (see the module docs).
fn begins_next_to_first_statements(steps: impl Iterator<Item = Step>) -> Vec<Step> {
    let mut out = Vec::new();
    let mut held: Vec<Step> = Vec::new();
    for step in steps {
        if step.kind == StepKind::Begin {
            held.push(step);
            continue;
        }
        if let Some(at) = held.iter().position(|b| b.txn == step.txn) {
            out.push(held.remove(at));
        }
        out.push(step);
    }
    out.extend(held);
    out
}

/// The "before" edges every history a database produced has among the report's transactions, beyond the
/// cycles' (without them the times decide, and the replay can run a writer's reader before the writer
/// commits, or two writers of a row at once, which first-committer-wins refuses): a committed write read
/// by another transaction commits before the read's snapshot; of two transactions that wrote the same
/// row, the one that committed first (by the recorded times, else the report's order) ends before the
/// other's write takes its snapshot. A database that broke more than its level can contradict them; the
/// plan then goes without them.
fn implied_edges(places: &Places<'_>) -> Vec<(usize, usize)> {
    let txns = places.txns;
    let mut writer_of: BTreeMap<&str, usize> = BTreeMap::new();
    let mut writes_of_key: BTreeMap<String, Vec<(usize, usize)>> = BTreeMap::new();
    for (t, txn) in txns.iter().enumerate() {
        for op in txn.ops.iter().filter(|o| o.write) {
            if txn.outcome != Outcome::Aborted
                && let Some(version) = op.version.as_deref()
            {
                writer_of.insert(version, t);
            }
            if let Some(key) = op.text.split_once(") = ").map(|(key, _)| key.trim_start_matches("w(")) {
                let writes = writes_of_key.entry(key.to_owned()).or_default();
                if !writes.iter().any(|&(other, _)| other == t) {
                    writes.push((t, op.index));
                }
            }
        }
    }
    let mut edges = Vec::new();
    for (t, txn) in txns.iter().enumerate() {
        for op in txn.ops.iter().filter(|o| !o.write) {
            let writer = op.version.as_deref().and_then(|v| writer_of.get(v)).copied();
            if let Some(writer) = writer.filter(|&w| w != t) {
                edges.push((places.end(writer), places.snapshot_of(t, op.index)));
            }
        }
    }
    for writes in writes_of_key.values_mut() {
        writes.sort_by_key(|&(t, _)| (txns[t].commit_ns.unwrap_or(u64::MAX), t));
        for pair in writes.windows(2) {
            let ((first, _), (then, op)) = (pair[0], pair[1]);
            edges.push((places.end(first), places.snapshot_of(then, op)));
        }
    }
    edges
}

/// Kahn's algorithm, taking among the ready nodes the one with the earliest time (then the report's order);
/// `None` when the edges have a cycle.
fn topological(nodes: &[Node], edges: &[(usize, usize)]) -> Option<Vec<usize>> {
    let mut successors = vec![Vec::new(); nodes.len()];
    let mut waiting_on = vec![0usize; nodes.len()];
    for &(a, b) in edges {
        successors[a].push(b);
        waiting_on[b] += 1;
    }
    let mut ready: BinaryHeap<Reverse<(u64, usize)>> =
        (0..nodes.len()).filter(|&n| waiting_on[n] == 0).map(|n| Reverse((nodes[n].time, n))).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse((_, n))) = ready.pop() {
        order.push(n);
        for &m in &successors[n] {
            waiting_on[m] -= 1;
            if waiting_on[m] == 0 {
                ready.push(Reverse((nodes[m].time, m)));
            }
        }
    }
    (order.len() == nodes.len()).then_some(order)
}

#[cfg(test)]
mod tests {
    use history::HistoryBuilder;
    use verifier::Options;

    use super::*;

    /// The steps of `plan` as `label: sql-or-control`, in order.
    fn order(plan: &ReplayPlan) -> Vec<String> {
        plan.steps
            .iter()
            .map(|s| {
                let what = match s.kind {
                    StepKind::Statement { statement } => {
                        plan.txns[s.txn].statements[statement].sql.clone().unwrap_or_default()
                    }
                    _ => plan.control_sql(s).unwrap_or_default(),
                };
                format!("{}: {what}", plan.label(s.txn))
            })
            .collect()
    }

    fn position(order: &[String], step: &str) -> usize {
        order.iter().position(|s| s == step).unwrap_or_else(|| panic!("{step} in {order:#?}"))
    }

    #[test]
    fn without_times_an_aborted_read_reads_after_the_write_and_before_the_rollback() {
        let (b, update) = HistoryBuilder::new().statement("UPDATE t SET v = 1 WHERE k = 'x'");
        let (b, select) = b.statement("SELECT v FROM t WHERE k = 'x'");
        let h =
            b.aborted(1, |t| t.stmt(update).write("x", 1)).txn(2, |t| t.stmt(select).read("x", 1)).build();
        let report = verifier::verify(&h, &Options::default()).unwrap();
        assert_eq!(report.anomalies[0].class, AnomalyClass::G1a, "{report}");
        let plan = ReplayPlan::new("r1", &report, None).unwrap();
        let order = order(&plan);
        let write = position(&order, "T1: UPDATE t SET v = 1 WHERE k = 'x'");
        let read = position(&order, "T2: SELECT v FROM t WHERE k = 'x'");
        assert!(write < read && read < position(&order, "T1: ROLLBACK"), "{order:#?}");
        assert!(
            plan.notes.iter().any(|n| n.contains("no recorded start or commit time")),
            "{:?}",
            plan.notes
        );
    }

    #[test]
    fn without_times_a_non_repeatable_read_commits_the_second_version_between_the_two_reads() {
        let (b, select) = HistoryBuilder::new().statement("SELECT v FROM t WHERE k = 'x'");
        let (b, again) = b.statement("SELECT k, v FROM t WHERE k = 'x'");
        let (b, update) = b.statement("UPDATE t SET v = 2 WHERE k = 'x'");
        // The writer comes first in the history, so an order by the history alone would run it first.
        let h = b
            .txn(1, |t| t.stmt(update).write("x", 2))
            .txn(2, |t| t.stmt(select).read_init("x").stmt(again).read("x", 2))
            .build();
        let report = verifier::verify(&h, &Options::default()).unwrap();
        assert_eq!(report.anomalies[0].class, AnomalyClass::NonRepeatableRead, "{report}");
        assert_eq!(report.anomalies[0].ops.len(), 3, "the writer of the second version is cited: {report}");
        let plan = ReplayPlan::new("r1", &report, Some(IsolationLevel::ReadCommitted)).unwrap();
        let order = order(&plan);
        let (first, commit) =
            (position(&order, "T2: SELECT v FROM t WHERE k = 'x'"), position(&order, "T1: COMMIT"));
        assert!(
            first < commit && commit < position(&order, "T2: SELECT k, v FROM t WHERE k = 'x'"),
            "{order:#?}"
        );
    }

    #[test]
    fn without_times_a_write_skew_takes_both_snapshots_before_either_commit() {
        let (b, select) = HistoryBuilder::new().statement("SELECT * FROM t");
        let (b, update) = b.statement("UPDATE t SET v = 0");
        let h = b
            .txn(1, |t| t.stmt(select).read_init("x").read_init("y").stmt(update).write("x", 1))
            .txn(2, |t| t.stmt(select).read_init("x").read_init("y").stmt(update).write("y", 2))
            .build();
        let report = verifier::verify(&h, &Options::default()).unwrap();
        let plan = ReplayPlan::new("r1", &report, Some(IsolationLevel::RepeatableRead)).unwrap();
        let order = order(&plan);
        let first_commit = order.iter().position(|s| s.ends_with("COMMIT")).unwrap();
        assert_eq!(
            order[..first_commit].iter().filter(|s| s.ends_with("SELECT * FROM t")).count(),
            2,
            "{order:#?}"
        );
        assert_eq!(order[0], "T1: BEGIN ISOLATION LEVEL REPEATABLE READ", "{order:#?}");
    }

    /// The transaction of session 4 reads the write of session 3's and overwrites it, and its recorded start
    /// falls before the other's commit: a plan that sent its BEGIN at that time, before the COMMIT, would
    /// make the two concurrent writers of x
    /// wherever BEGIN starts the transaction (the embedded store), and first-committer-wins refuses one.
    #[test]
    fn a_begin_is_sent_just_before_its_first_statement_after_what_its_snapshot_must_see() {
        let (b, select) = HistoryBuilder::new().statement("SELECT v FROM t");
        let (b, update) = b.statement("UPDATE t SET v = v + 1");
        let h = b
            .txn(1, |t| t.stmt(select).read_init("x").stmt(update).write("z", 1))
            .at(0, 300)
            .txn(3, |t| t.stmt(update).write("x", 3))
            .at(10, 100)
            .txn(4, |t| t.stmt(select).read("x", 3).read_init("z").stmt(update).write("x", 4))
            .at(50, 200)
            .build();
        let report = verifier::verify(&h, &Options::default()).unwrap();
        assert_eq!(report.verdict, Verdict::Reject, "{report}");
        let plan = ReplayPlan::new("r1", &report, Some(IsolationLevel::RepeatableRead)).unwrap();
        for (i, step) in plan.steps.iter().enumerate() {
            if step.kind == StepKind::Begin {
                let next = plan.steps.get(i + 1).map(|s| s.txn);
                assert_eq!(
                    next,
                    Some(step.txn),
                    "a BEGIN is followed by its own statement: {:#?}",
                    order(&plan)
                );
            }
        }
        let order = order(&plan);
        // One transaction per session here: the builder's first argument.
        let label = |session: u64| {
            let i =
                plan.txns.iter().position(|t| t.session == SessionId(session)).expect("the report cites it");
            plan.label(i)
        };
        let t4_begin = position(&order, &format!("{}: BEGIN ISOLATION LEVEL REPEATABLE READ", label(4)));
        assert!(t4_begin > position(&order, &format!("{}: COMMIT", label(3))), "{order:#?}");
    }

    /// A reject the embedded SI store's demo stored, whose cycle leaves out that one of its transactions
    /// read (and overwrote) another's write of `kv:1`, and whose recorded times put the reader first: the
    /// plan still runs every reader of a version after its writer commits, and never two writers of a row
    /// at once (before, the reader ran first and first-committer-wins refused the writer: "prevented").
    #[test]
    fn every_read_of_a_reported_write_runs_after_it_commits_even_off_the_cycle() {
        let text = include_str!("../tests/fixtures/embedded-si-g2-item.json");
        let report: Report = serde_json::from_str(text).expect("a stored report");
        let plan = ReplayPlan::new("r000013", &report, Some(IsolationLevel::RepeatableRead)).unwrap();
        let at = |txn: usize, kind: &dyn Fn(&StepKind) -> bool| {
            plan.steps.iter().position(|s| s.txn == txn && kind(&s.kind)).expect("a step")
        };
        let commit = |t: usize| at(t, &|k| *k == StepKind::Commit);
        let first_statement = |t: usize| at(t, &|k| matches!(k, StepKind::Statement { .. }));
        let mut checked = 0;
        for (reader, txn) in plan.txns.iter().enumerate() {
            for read in txn.ops.iter().filter(|o| !o.write) {
                let writer = plan.txns.iter().position(|w| {
                    w.ops.iter().any(|o| o.write && o.version.is_some() && o.version == read.version)
                });
                if let Some(writer) = writer.filter(|&w| w != reader) {
                    assert!(commit(writer) < first_statement(reader), "{}", order(&plan).join("\n"));
                    checked += 1;
                }
            }
        }
        assert!(checked >= 2, "the report has reads of its own transactions' writes: {checked}");
    }

    /// A write skew whose two transactions also both wrote z: no database that keeps snapshot isolation
    /// lets that happen, and the writers of z cannot both run before the other commits, as the skew needs.
    /// The plan follows the anomaly, and says it set the history's other dependencies aside.
    #[test]
    fn where_the_history_contradicts_the_anomaly_the_plan_follows_the_anomaly_and_says_so() {
        let (b, select) = HistoryBuilder::new().statement("SELECT v FROM t");
        let (b, update) = b.statement("UPDATE t SET v = v + 1");
        let h = b
            .txn(1, |t| t.stmt(select).read_init("x").stmt(update).write("y", 1).write("z", 3))
            .at(0, 100)
            .txn(2, |t| t.stmt(select).read_init("y").stmt(update).write("x", 2).write("z", 4))
            .at(10, 110)
            .build();
        let report = verifier::verify(&h, &Options::default()).unwrap();
        assert_eq!(report.verdict, Verdict::Reject, "{report}");
        let plan = ReplayPlan::new("r1", &report, Some(IsolationLevel::RepeatableRead)).unwrap();
        let order = order(&plan);
        let first_commit = order.iter().position(|s| s.ends_with("COMMIT")).unwrap();
        let reads_before = order[..first_commit].iter().filter(|s| s.ends_with("SELECT v FROM t")).count();
        assert_eq!(reads_before, 2, "both snapshots before either commit: {order:#?}");
        assert!(
            plan.notes.iter().any(|n| n.contains("contradict what the history implies")),
            "{:?}",
            plan.notes
        );
    }

    #[test]
    fn an_accept_or_a_history_without_statements_cannot_be_planned() {
        let h = HistoryBuilder::new().txn(1, |t| t.write("x", 1)).build();
        let accept = verifier::verify(&h, &Options::default()).unwrap();
        assert!(matches!(ReplayPlan::new("r1", &accept, None), Err(PlanError::Accept)));
        let h = HistoryBuilder::new().aborted(1, |t| t.write("x", 1)).txn(2, |t| t.read("x", 1)).build();
        let reject = verifier::verify(&h, &Options::default()).unwrap();
        assert!(matches!(
            ReplayPlan::new("r1", &reject, None),
            Err(PlanError::NoStatements(verifier::report::SCHEMA_VERSION))
        ));
    }
}
