//! Re-checks a report against the history, independently of the pipeline (`krait verify --check-report`).
//!
//! Nothing here reuses the pipeline's data structures: the checker reads the history afresh.
//! - An accept report must carry a serial order; replaying the included transactions in that order must give
//!   every read the value it returned, and the order must keep session order (and real time, for strict
//!   serializability, with the report's clock-drift threshold).
//! - A snapshot-isolation accept carries an order whose restriction to each key's writers is the version
//!   order; the dependency graph it gives is checked for cycles without two adjacent anti-dependencies.
//! - A reject report's anomalies are checked one by one. Anomalies without a cycle are checked from their
//!   evidence ops. A cycle must be closed; its wr, so and rt edges must follow from the history directly; its
//!   ww and rw edges must follow from the version-order fact ([`Derivation`]) they cite. A fact is checked
//!   from its basis: a read-modify-write in the history, an initial version, or the cycle the opposite order
//!   would close (checked the same way, recursively, citing only earlier facts). Facts the solver chose in
//!   its refutation are counted as assumed, not proved.

mod si;
mod weak;

use std::collections::{HashMap, HashSet};

use history::{History, Key, Observed, Op, Outcome, Transaction, TxnId, WriteId};
use thiserror::Error;

use crate::options::Level;
use crate::report::{
    AnomalyClass, Basis, Choice, CycleEdge, Derivation, EdgeKind, OpRef, Refutation, RefutationNode, Report,
    Verdict,
};

/// Why a report does not hold.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CheckError {
    /// A stated fact does not follow from the history.
    #[error("report does not hold: {0}")]
    Invalid(String),
}

/// What the check covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    /// Cycle edges checked (including those of alternative cycles).
    pub edges: u64,
    /// Version-order facts proved from the history.
    pub derivations_proved: u64,
    /// Facts taken from the solver's refutation, checked for consistency but not proved.
    pub derivations_assumed: u64,
    /// Facts whose proof the report omitted.
    pub derivations_omitted: u64,
    /// Transactions replayed (accept reports).
    pub replayed: u64,
    /// Case-split proofs of solver rejects checked in full (every branch ends in a valid cycle).
    pub refutations_proved: u64,
}

impl std::fmt::Display for CheckSummary {
    /// What the check covered, in one line (what `krait verify --check-report` and `krait report check`
    /// print after `REPORT CHECKED:`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cycle edges, {} version-order facts proved from the history, {} taken from the solver's \
             refutation (checked for consistency only), {} omitted, {} transactions replayed",
            self.edges,
            self.derivations_proved,
            self.derivations_assumed,
            self.derivations_omitted,
            self.replayed
        )
    }
}

/// Re-checks `report` against `history`.
pub fn check_report(history: &History, report: &Report) -> Result<(), CheckError> {
    check_report_detailed(history, report).map(|_| ())
}

fn bad<T>(msg: impl Into<String>) -> Result<T, CheckError> {
    Err(CheckError::Invalid(msg.into()))
}

/// The facts of the history the checker needs.
struct Facts<'a> {
    h: &'a History,
    by_id: HashMap<TxnId, usize>,
    included: Vec<bool>,
    /// Which transaction wrote each write id, to which key (first occurrence).
    writer: HashMap<WriteId, (usize, Key)>,
}

impl<'a> Facts<'a> {
    fn new(h: &'a History) -> Self {
        let by_id = h.transactions.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let mut writer = HashMap::new();
        // Write ids written by more than one transaction (or to more than one key) name no single version;
        // a read of one proves nothing about who committed.
        let mut ambiguous = HashSet::new();
        for (i, t) in h.transactions.iter().enumerate() {
            for op in &t.ops {
                if let Op::Write { key, write, .. } = *op
                    && *writer.entry(write).or_insert((i, key)) != (i, key)
                {
                    ambiguous.insert(write);
                }
            }
        }
        // Included: committed, plus indeterminate transactions an included one read from.
        let mut included: Vec<bool> =
            h.transactions.iter().map(|t| t.outcome == Outcome::Committed).collect();
        let mut changed = true;
        while changed {
            changed = false;
            for i in 0..h.transactions.len() {
                if !included[i] {
                    continue;
                }
                for op in &h.transactions[i].ops {
                    if let Op::Read { observed: Observed::Version(w), .. } = *op
                        && !ambiguous.contains(&w)
                        && let Some(&(j, _)) = writer.get(&w)
                        && !included[j]
                        && h.transactions[j].outcome == Outcome::Indeterminate
                    {
                        included[j] = true;
                        changed = true;
                    }
                }
            }
        }
        Facts { h, by_id, included, writer }
    }

    fn txn(&self, id: TxnId) -> Result<&'a Transaction, CheckError> {
        match self.by_id.get(&id) {
            Some(&i) => Ok(&self.h.transactions[i]),
            None => bad(format!("{id} is not in the history")),
        }
    }

    fn included_txn(&self, id: TxnId) -> Result<&'a Transaction, CheckError> {
        let t = self.txn(id)?;
        match self.by_id.get(&id) {
            Some(&i) if self.included[i] => Ok(t),
            _ => bad(format!("{id} did not commit (or is not known to have)")),
        }
    }

    fn op(&self, r: OpRef) -> Result<(&'a Transaction, Op), CheckError> {
        let t = self.txn(r.txn)?;
        match t.ops.get(r.op) {
            Some(op) => Ok((t, *op)),
            None => bad(format!("{} has no op {}", r.txn, r.op)),
        }
    }
}

/// The version a transaction's first read of `key` returned, if that read comes before any own write.
fn external_read(t: &Transaction, key: Key) -> Option<Observed> {
    for op in &t.ops {
        match *op {
            Op::Write { key: k, .. } if k == key => return None,
            Op::Read { key: k, observed, .. } if k == key => return Some(observed),
            _ => {}
        }
    }
    None
}

/// A transaction's last write of `key`.
fn final_write(t: &Transaction, key: Key) -> Option<WriteId> {
    t.ops.iter().rev().find_map(|op| match *op {
        Op::Write { key: k, write, .. } if k == key => Some(write),
        _ => None,
    })
}

fn is_initial(o: Observed) -> bool {
    !matches!(o, Observed::Version(_))
}

/// Re-checks `report` against `history`, and says what was covered.
pub fn check_report_detailed(history: &History, report: &Report) -> Result<CheckSummary, CheckError> {
    let facts = Facts::new(history);
    let mut summary = CheckSummary::default();
    match report.verdict {
        Verdict::Accept => check_accept(&facts, report, &mut summary)?,
        Verdict::Reject => {
            if report.anomalies.is_empty() {
                return bad("a reject report without an anomaly");
            }
            let mut checker = Checker {
                f: &facts,
                report,
                proved: HashMap::new(),
                summary: &mut summary,
                choices: Vec::new(),
                assumed: Vec::new(),
            };
            for a in &report.anomalies {
                checker.anomaly(a)?;
            }
        }
    }
    Ok(summary)
}

fn check_accept(f: &Facts<'_>, report: &Report, summary: &mut CheckSummary) -> Result<(), CheckError> {
    let Some(order) = &report.serial_order else {
        return bad(match &report.rounds {
            // Collection deleted what each round settled, so no order of the whole history was kept.
            Some(r) => format!(
                "an accept reached in {} rounds has no serial order of the whole history to check; verify \
                 without --rounds for a report that can be re-checked",
                r.rounds
            ),
            None => "an accept report without a serial order".to_owned(),
        });
    };
    let h = f.h;
    let mut position: HashMap<usize, usize> = HashMap::new();
    for (p, id) in order.iter().enumerate() {
        let Some(&i) = f.by_id.get(id) else { return bad(format!("{id} is not in the history")) };
        if !f.included[i] {
            return bad(format!("{id} is in the serial order but did not commit"));
        }
        if position.insert(i, p).is_some() {
            return bad(format!("{id} appears twice in the serial order"));
        }
    }
    for (i, _) in h.transactions.iter().enumerate() {
        if f.included[i] && !position.contains_key(&i) {
            return bad(format!("{} is missing from the serial order", h.transactions[i].id));
        }
    }
    // Session order.
    let mut last_in_session: HashMap<u64, (u64, usize)> = HashMap::new();
    let mut by_session: Vec<(u64, u64, usize)> =
        position.iter().map(|(&i, &p)| (h.transactions[i].session.0, h.transactions[i].seq, p)).collect();
    by_session.sort_unstable();
    for (s, seq, p) in by_session {
        if let Some(&(prev_seq, prev_p)) = last_in_session.get(&s)
            && prev_seq < seq
            && prev_p > p
        {
            return bad(format!("the serial order breaks the session order of session {s}"));
        }
        last_in_session.insert(s, (seq, p));
    }
    // The weak levels: the order is a commit order, checked against the level's axiom, not replayed.
    if report.level.is_saturation() {
        return weak::check_commit_order(f, report, &position, summary);
    }
    // Snapshot isolation: the order gives the version order, whose dependency graph is checked.
    if matches!(report.level, Level::SnapshotIsolation | Level::Declared) {
        return si::check_snapshot_order(f, report, &position, summary);
    }
    // Real time: no transaction may come after one that started after it committed (+ drift).
    if report.level == Level::StrictSerializable {
        // Each start shifted earlier and each commit later by its clock's error bound (see realtime.rs).
        let clocks = report.options.clocks();
        let mut min_end_after = u64::MAX;
        for id in order.iter().rev() {
            let t = f.txn(*id)?;
            let start = t.start_ns.map(|s| clocks.earliest(t.collector, s));
            if let Some(start) = start
                && min_end_after < start
            {
                return bad(format!("{id} comes before a transaction that committed before it started"));
            }
            if let Some(end) = t.commit_ns {
                min_end_after = min_end_after.min(clocks.latest(t.collector, end, start.unwrap_or(0)));
            }
        }
    }
    // Replay.
    let skip: HashSet<OpRef> = report.unverifiable.iter().map(|u| u.op).collect();
    let mut store: HashMap<Key, Observed> = HashMap::new();
    let mut initial: HashMap<Key, Observed> = HashMap::new();
    for id in order {
        let t = f.txn(*id)?;
        let mut own: HashMap<Key, WriteId> = HashMap::new();
        for (oi, op) in t.ops.iter().enumerate() {
            match *op {
                Op::Write { key, write, .. } => {
                    own.insert(key, write);
                }
                Op::Read { key, observed, .. } => {
                    // A version no recorded transaction wrote explains nothing and contradicts nothing.
                    if skip.contains(&OpRef::new(t.id, oi))
                        || matches!(observed, Observed::Unrecorded(_) | Observed::Foreign(_))
                    {
                        continue;
                    }
                    let expected = match (own.get(&key), store.get(&key)) {
                        (Some(&w), _) => Observed::Version(w),
                        (None, Some(&v)) => v,
                        (None, None) if is_initial(observed) => *initial.entry(key).or_insert(observed),
                        (None, None) => {
                            return bad(format!(
                                "replay: {} op {oi} read {observed:?} but nothing was written yet",
                                t.id
                            ));
                        }
                    };
                    if expected != observed {
                        return bad(format!(
                            "replay: {} op {oi} read {observed:?}, expected {expected:?}",
                            t.id
                        ));
                    }
                }
            }
        }
        for (k, w) in own {
            store.insert(k, Observed::Version(w));
        }
        summary.replayed += 1;
    }
    Ok(())
}

struct Checker<'a, 'b> {
    f: &'a Facts<'a>,
    report: &'a Report,
    proved: HashMap<usize, ()>,
    summary: &'b mut CheckSummary,
    /// Inside a refutation: its choices, and the order assumed for each on the current branch
    /// (`Some(true)`: first before second).
    choices: Vec<Choice>,
    assumed: Vec<Option<bool>>,
}

impl Checker<'_, '_> {
    fn anomaly(&mut self, a: &crate::report::Anomaly) -> Result<(), CheckError> {
        if let Some(r) = &a.refutation {
            self.refutation(r)?;
        }
        if !a.cycle.is_empty() {
            return self.cycle(&a.cycle, None, usize::MAX);
        }
        let f = self.f;
        if matches!(
            a.class,
            AnomalyClass::G1c | AnomalyClass::FracturedRead | AnomalyClass::CausalityViolation
        ) {
            return weak::initial_after_write(f, self.report.level, &a.ops);
        }
        let ops: Vec<(&Transaction, Op)> = a.ops.iter().map(|&r| f.op(r)).collect::<Result<_, _>>()?;
        let need =
            |n: usize| if ops.len() < n { bad(format!("{} needs {n} ops", a.class.name())) } else { Ok(()) };
        let read = |i: usize| match ops[i].1 {
            Op::Read { key, observed, .. } => Ok((key, observed)),
            _ => bad(format!("op {i} of the evidence is not a read")),
        };
        let write = |i: usize| match ops[i].1 {
            Op::Write { key, write, .. } => Ok((key, write)),
            _ => bad(format!("op {i} of the evidence is not a write")),
        };
        match a.class {
            AnomalyClass::G1a => {
                need(2)?;
                let ((k1, w), (k2, o)) = (write(0)?, read(1)?);
                f.included_txn(ops[1].0.id)?;
                if ops[0].0.outcome != Outcome::Aborted || k1 != k2 || o != Observed::Version(w) {
                    return bad("G1a evidence is not a read of an aborted write");
                }
            }
            AnomalyClass::G1b => {
                need(2)?;
                let ((k1, w), (k2, o)) = (write(0)?, read(1)?);
                f.included_txn(ops[1].0.id)?;
                if k1 != k2 || o != Observed::Version(w) || final_write(ops[0].0, k1) == Some(w) {
                    return bad("G1b evidence is not a read of an intermediate write");
                }
                if ops[0].0.id == ops[1].0.id {
                    return bad("G1b evidence reads within one transaction");
                }
            }
            AnomalyClass::GarbageRead => {
                need(1)?;
                let (k, o) = read(0)?;
                f.included_txn(ops[0].0.id)?;
                let Observed::Version(w) = o else { return bad("garbage read of an initial version") };
                if f.h.transactions.iter().any(|t| {
                    t.ops
                        .iter()
                        .any(|op| matches!(*op, Op::Write { key, write, .. } if key == k && write == w))
                }) {
                    return bad(format!("{w} was written to that key"));
                }
            }
            AnomalyClass::UnownedVersion => {
                need(1)?;
                let (k, o) = read(0)?;
                f.included_txn(ops[0].0.id)?;
                let Observed::Foreign(tag) = o else {
                    return bad("unowned-version evidence is not a foreign read");
                };
                if f.h.transactions.iter().any(|t| {
                    t.ops
                        .iter()
                        .any(|op| matches!(*op, Op::Write { key, write, .. } if key == k && write.0 == tag))
                }) {
                    return bad(format!("w{tag} was written to that key by a recorded transaction"));
                }
            }
            AnomalyClass::DuplicateWrite => {
                need(2)?;
                let ((k1, w1), (k2, w2)) = (write(0)?, write(1)?);
                if w1 != w2 || (ops[0].0.id == ops[1].0.id && k1 == k2) {
                    return bad("duplicate-write evidence is not two writes of one id");
                }
            }
            AnomalyClass::FutureRead => {
                need(2)?;
                let ((k1, o), (k2, w)) = (read(0)?, write(1)?);
                f.included_txn(ops[0].0.id)?;
                if ops[0].0.id != ops[1].0.id
                    || k1 != k2
                    || o != Observed::Version(w)
                    || a.ops[1].op < a.ops[0].op
                {
                    return bad("future-read evidence is not a read of the transaction's own later write");
                }
                if external_read(ops[0].0, k1).is_none() {
                    return bad("future-read evidence follows an own write");
                }
            }
            AnomalyClass::InternalRead => {
                need(2)?;
                let ((k1, w), (k2, o)) = (write(0)?, read(1)?);
                f.included_txn(ops[0].0.id)?;
                let t = ops[0].0;
                let (wi, ri) = (a.ops[0].op, a.ops[1].op);
                if t.id != ops[1].0.id || k1 != k2 || ri <= wi || o == Observed::Version(w) {
                    return bad("internal-read evidence is not a read that missed the own write before it");
                }
                // Both ops are in `t` (checked above), so `wi < ri < t.ops.len()`.
                if t.ops[wi + 1..ri].iter().any(|op| matches!(*op, Op::Write { key, .. } if key == k1)) {
                    return bad("internal-read evidence: another own write comes between");
                }
            }
            AnomalyClass::NonRepeatableRead => {
                need(2)?;
                let ((k1, o1), (k2, o2)) = (read(0)?, read(1)?);
                let t = f.included_txn(ops[0].0.id)?;
                let before_own_write = t.ops[..a.ops[1].op.min(t.ops.len())]
                    .iter()
                    .all(|op| !matches!(*op, Op::Write { key, .. } if key == k1));
                if t.id != ops[1].0.id || k1 != k2 || o1 == o2 || !before_own_write {
                    return bad("non-repeatable-read evidence is not two differing reads");
                }
                if self.report.level == Level::ReadCommitted
                    || si::held(self.report, t) == si::Held::ReadCommitted
                {
                    return bad("read committed allows a non-repeatable read");
                }
                // The third op, when cited, is the write of the version read second, by another transaction.
                if ops.len() > 2 {
                    let (k3, w) = write(2)?;
                    if k3 != k1 || o2 != Observed::Version(w) || ops[2].0.id == t.id {
                        return bad(
                            "non-repeatable-read evidence: the third op is not another transaction's write of \
                             the version read second",
                        );
                    }
                }
            }
            AnomalyClass::StaleRead => {
                need(2)?;
                let ((k1, o1), (k2, o2)) = (read(0)?, read(1)?);
                f.included_txn(ops[0].0.id)?;
                f.included_txn(ops[1].0.id)?;
                if k1 != k2 || o1 == o2 || !is_initial(o1) || !is_initial(o2) {
                    return bad("stale-read evidence is not two reads of different initial versions");
                }
                if !weak::reads_externally(ops[0].0, k1, o1) || !weak::reads_externally(ops[1].0, k1, o2) {
                    return bad("stale-read evidence reads are not external");
                }
            }
            AnomalyClass::LostUpdate => {
                need(4)?;
                let ((k1, o1), (k2, _), (k3, o3), (k4, _)) = (read(0)?, write(1)?, read(2)?, write(3)?);
                let (ta, tb) = (f.included_txn(ops[0].0.id)?, f.included_txn(ops[2].0.id)?);
                let same_txns = ops[1].0.id == ta.id && ops[3].0.id == tb.id && ta.id != tb.id;
                if !same_txns || [k2, k3, k4].iter().any(|&k| k != k1) || o1 != o3 {
                    return bad("lost-update evidence is not two read-modify-writes of one version");
                }
                if external_read(ta, k1) != Some(o1) || external_read(tb, k1) != Some(o1) {
                    return bad("lost-update reads are not external");
                }
                if [ta, tb].iter().any(|t| si::held(self.report, t) == si::Held::ReadCommitted) {
                    return bad("read committed allows a lost update");
                }
            }
            other => return bad(format!("a {} anomaly needs a cycle", other.name())),
        }
        Ok(())
    }

    /// Checks a proof by cases: every choice is a pair of disjoint chains of one key, and every branch of the
    /// tree ends in a valid cycle under the orders assumed on the way.
    fn refutation(&mut self, r: &Refutation) -> Result<(), CheckError> {
        for (i, c) in r.choices.iter().enumerate() {
            let key = Key(c.key_id);
            if c.first.is_empty() || c.second.is_empty() || c.first.iter().any(|v| c.second.contains(v)) {
                return bad(format!("choice {i} has empty or overlapping chains"));
            }
            self.chain(key, &c.first)?;
            self.chain(key, &c.second)?;
        }
        self.choices = r.choices.clone();
        self.assumed = vec![None; r.choices.len()];
        let result = self.node(&r.tree);
        self.choices.clear();
        self.assumed.clear();
        result?;
        self.summary.refutations_proved += 1;
        Ok(())
    }

    fn node(&mut self, n: &RefutationNode) -> Result<(), CheckError> {
        match n {
            RefutationNode::Cycle { cycle } => self.cycle(cycle, None, usize::MAX),
            RefutationNode::Split { choice, first_before_second, second_before_first } => {
                match self.assumed.get(*choice) {
                    Some(None) => {}
                    _ => {
                        return bad(format!(
                            "a split on choice {choice}, which is unknown or already assumed"
                        ));
                    }
                }
                self.assumed[*choice] = Some(true);
                let a = self.node(first_before_second);
                self.assumed[*choice] = Some(false);
                let b = self.node(second_before_first);
                self.assumed[*choice] = None;
                a.and(b)
            }
        }
    }

    /// Checks a closed cycle. Inside the proof of derivation `within` (whose index is `limit`), exactly one
    /// edge must be the hypothetical one, and cited derivations must come before `limit`.
    fn cycle(
        &mut self,
        cycle: &[CycleEdge],
        within: Option<&Derivation>,
        limit: usize,
    ) -> Result<(), CheckError> {
        if cycle.is_empty() {
            return bad("an empty cycle");
        }
        for i in 0..cycle.len() {
            let next = &cycle[(i + 1) % cycle.len()];
            if cycle[i].to != next.from {
                return bad(format!("the cycle is not closed: {} then {}", cycle[i].to, next.from));
            }
        }
        // Under snapshot isolation only a cycle without two adjacent anti-dependencies is a violation
        // (PolySI Theorem 1); write skew's two adjacent rw edges are allowed.
        if self.report.level == Level::SnapshotIsolation
            && (0..cycle.len())
                .any(|i| cycle[i].kind == EdgeKind::Rw && cycle[(i + 1) % cycle.len()].kind == EdgeKind::Rw)
        {
            return bad("two adjacent anti-dependencies: snapshot isolation allows that cycle");
        }
        // Under declared levels, each anti-dependency is its reader's: a read-committed reader's never
        // counts, a snapshot reader's only after a dependency (Adya's mixing theorem).
        if self.report.level == Level::Declared {
            for i in 0..cycle.len() {
                if cycle[i].kind != EdgeKind::Rw {
                    continue;
                }
                let before = &cycle[(i + cycle.len() - 1) % cycle.len()];
                match si::held(self.report, self.f.included_txn(cycle[i].from)?) {
                    si::Held::ReadCommitted => {
                        return bad(format!(
                            "{} reads at read committed: its anti-dependency does not count",
                            cycle[i].from
                        ));
                    }
                    si::Held::Snapshot if before.kind == EdgeKind::Rw => {
                        return bad(format!(
                            "{} reads at repeatable read (snapshot isolation): its anti-dependency after \
                             another one does not count",
                            cycle[i].from
                        ));
                    }
                    _ => {}
                }
            }
        }
        let hypothetical = cycle.iter().filter(|e| e.hypothetical).count();
        if within.is_some() != (hypothetical == 1) || hypothetical > 1 {
            return bad("a cycle has the wrong number of hypothetical edges");
        }
        for e in cycle {
            self.edge(e, within, limit)?;
        }
        Ok(())
    }

    fn edge(&mut self, e: &CycleEdge, within: Option<&Derivation>, limit: usize) -> Result<(), CheckError> {
        self.summary.edges += 1;
        let f = self.f;
        let (from, to) = (f.included_txn(e.from)?, f.included_txn(e.to)?);
        if e.from == e.to {
            return bad(format!("a self-loop on {}", e.from));
        }
        let key = e.key_id.map(Key);
        match e.kind {
            EdgeKind::So => {
                if from.session != to.session || from.seq >= to.seq {
                    return bad(format!("{} does not precede {} in a session", e.from, e.to));
                }
            }
            EdgeKind::Rt => {
                if self.report.level != Level::StrictSerializable {
                    return bad("a real-time edge in a serializability report");
                }
                let drift = self.report.options.clocks().drift_ns(from.collector, to.collector);
                match (from.commit_ns, to.start_ns) {
                    (Some(c), Some(s)) if c.saturating_add(drift) < s => {}
                    _ => return bad(format!("{} did not commit before {} started", e.from, e.to)),
                }
            }
            EdgeKind::Wr => {
                let (Some(k), Some(Observed::Version(w))) = (key, e.from_version) else {
                    return bad("a wr edge without a key or version");
                };
                if final_write(from, k) != Some(w) || !weak::reads_externally(to, k, Observed::Version(w)) {
                    return bad(format!("{} did not read {w} written by {}", e.to, e.from));
                }
            }
            EdgeKind::Rw if self.report.level.is_saturation() => {
                return bad(format!("an anti-dependency edge in a {} report", self.report.level.name()));
            }
            EdgeKind::Rw | EdgeKind::Ww => {
                let (Some(k), Some(fv), Some(Observed::Version(tw))) = (key, e.from_version, e.to_version)
                else {
                    return bad("an rw/ww edge without a key or versions");
                };
                let from_ok = if e.kind == EdgeKind::Rw {
                    external_read(from, k) == Some(fv)
                } else {
                    matches!(fv, Observed::Version(w) if final_write(from, k) == Some(w))
                };
                if !from_ok || final_write(to, k) != Some(tw) {
                    return bad(format!(
                        "{} -> {}: the stated reads/writes are not in the history",
                        e.from, e.to
                    ));
                }
                if let Some(i) = e.assumption {
                    let (Some(c), Some(Some(first_first))) = (self.choices.get(i), self.assumed.get(i))
                    else {
                        return bad(format!(
                            "{} -> {}: cites a choice not assumed on this branch",
                            e.from, e.to
                        ));
                    };
                    let (earlier, later) =
                        if *first_first { (&c.first, &c.second) } else { (&c.second, &c.first) };
                    if e.hypothetical
                        || c.key_id != k.0
                        || !earlier.contains(&fv)
                        || !later.contains(&Observed::Version(tw))
                    {
                        return bad(format!(
                            "{} -> {}: the edge does not follow from the assumed order",
                            e.from, e.to
                        ));
                    }
                    return Ok(());
                }
                let (d, earlier, later) = if e.hypothetical {
                    let Some(d) = within else { return bad("a hypothetical edge outside a proof") };
                    (d, &d.after, &d.before)
                } else {
                    let Some(i) = e.derivation else { return bad("an rw/ww edge without a derivation") };
                    if i >= limit {
                        return bad("a proof cites a fact that is not earlier");
                    }
                    let Some(d) = self.report.derivations.get(i) else { return bad("a missing derivation") };
                    self.derivation(i)?;
                    (d, &d.before, &d.after)
                };
                if d.key_id != k.0 || !earlier.contains(&fv) || !later.contains(&Observed::Version(tw)) {
                    return bad(format!(
                        "{} -> {}: the edge does not follow from the cited order",
                        e.from, e.to
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks that a chain's consecutive versions are joined by read-modify-writes.
    fn chain(&self, key: Key, versions: &[Observed]) -> Result<(), CheckError> {
        for pair in versions.windows(2) {
            self.link(key, pair[0], pair[1])?;
        }
        Ok(())
    }

    /// `next`'s writer read `prev` before writing `key` (so `next` directly follows `prev`).
    fn link(&self, key: Key, prev: Observed, next: Observed) -> Result<(), CheckError> {
        let Observed::Version(w) = next else { return bad("an initial version inside a chain") };
        let Some(&(i, k)) = self.f.writer.get(&w) else { return bad(format!("{w} was never written")) };
        let t = &self.f.h.transactions[i];
        if k != key
            || !self.f.included[i]
            || final_write(t, key) != Some(w)
            || external_read(t, key) != Some(prev)
        {
            return bad(format!("{w} is not a read-modify-write of {prev:?}"));
        }
        // At read committed a write need not directly follow the version its transaction read.
        if si::held(self.report, t) == si::Held::ReadCommitted {
            return bad(format!("{w} was written at read committed: it need not directly follow {prev:?}"));
        }
        Ok(())
    }

    fn derivation(&mut self, i: usize) -> Result<(), CheckError> {
        if self.proved.contains_key(&i) {
            return Ok(());
        }
        let report = self.report;
        let Some(d) = report.derivations.get(i) else { return bad("a missing derivation") };
        let key = Key(d.key_id);
        if d.before.is_empty() || d.after.is_empty() || d.before.iter().any(|v| d.after.contains(v)) {
            return bad(format!("derivation {i} has empty or overlapping chains"));
        }
        self.chain(key, &d.before)?;
        self.chain(key, &d.after)?;
        match &d.basis {
            Basis::Rmw => {
                let (Some(&prev), Some(&next)) = (d.before.last(), d.after.first()) else {
                    return bad("empty");
                };
                self.link(key, prev, next)?;
                self.summary.derivations_proved += 1;
            }
            Basis::InitialFirst => {
                if !is_initial(d.before[0]) || is_initial(d.after[0]) {
                    return bad(format!("derivation {i} does not start with an initial version"));
                }
                self.summary.derivations_proved += 1;
            }
            Basis::OtherOrderCycle { cycle } => {
                self.cycle(cycle, Some(d), i)?;
                self.summary.derivations_proved += 1;
            }
            Basis::Seen { reader, read, how } => {
                let f = self.f;
                let Some(Observed::Version(w)) = d.before.last().copied() else {
                    return bad(format!("derivation {i}: what was seen is not a recorded write"));
                };
                let Some(&(wi, _)) = f.writer.get(&w) else { return bad(format!("{w} was never written")) };
                let reader = f.included_txn(*reader)?;
                if weak::external_read_at(reader, *read) != Some((key, d.after[0])) {
                    return bad(format!(
                        "derivation {i}: {} op {read} is not an external read of it",
                        reader.id
                    ));
                }
                weak::saw(f, report.level, &f.h.transactions[wi], reader, *read, how)?;
                self.summary.derivations_proved += 1;
            }
            Basis::Solver => self.summary.derivations_assumed += 1,
            Basis::Omitted => self.summary.derivations_omitted += 1,
        }
        self.proved.insert(i, ());
        Ok(())
    }
}
