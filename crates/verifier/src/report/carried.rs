//! Which transactions a reject report carries: every one it cites, so that it can be checked without the
//! history it came from ([`super::check_cited`]; REPORT.md, "Checking a report without its history").
//!
//! In: the history and the finished report (its anomalies, derivations and refutations). Out: the report's
//! `transactions`. The builders (`certificate`, `saturate`, the non-cycle anomalies) know which
//! transactions their cycles and evidence name; what the checker reads besides is decided here, once, from
//! the report itself, by the checker's rules (`check`):
//! - every transaction an edge, an evidence op, a `seen` derivation (its reader and happens-before path)
//!   names, in the anomalies, the derivations' alternative cycles and the refutations' leaves;
//! - the writer of every recorded version of every chain a derivation or a refutation's choice orders: the
//!   checker proves a chain by finding each version's writer and the version it read;
//! - for each transaction of unknown outcome, the included reader that proves it committed, and that
//!   reader's own proof, down to a committed transaction;
//! - every writer of a write id that several writes carry, where a carried transaction reads or writes it:
//!   such an id proves nothing, and a subset of its writers must not make it look as if it did;
//! - for a causality violation whose writer happens before its reader, a happens-before path between them.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use history::{History, Key, Observed, Op, Outcome, Transaction, TxnId, WriteId};

use super::{AnomalyClass, Basis, CycleEdge, RefutationNode, Report, SeenHow, TxnReport};
use crate::certificate::txn_report;
use crate::options::Level;

/// The transactions `report` (a reject of `h`) must carry, as it shows them: those it cites, `extra` (history
/// indices its builder named), and what the checker needs besides, in history order.
pub(crate) fn transactions(
    h: &History,
    report: &Report,
    extra: impl IntoIterator<Item = usize>,
) -> Vec<TxnReport> {
    let index: HashMap<TxnId, usize> = h.transactions.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let history = Facts::new(h);
    let mut carried: BTreeSet<usize> = extra.into_iter().collect();
    let mut named: Vec<TxnId> = Vec::new();
    let mut versions: Vec<(Key, Observed)> = Vec::new();
    for a in &report.anomalies {
        cycle_ids(&a.cycle, &mut named);
        named.extend(a.ops.iter().map(|o| o.txn));
        if let Some(r) = &a.refutation {
            for c in &r.choices {
                versions.extend(c.first.iter().chain(&c.second).map(|&v| (Key(c.key_id), v)));
            }
            node_ids(&r.tree, &mut named);
        }
        if a.class == AnomalyClass::CausalityViolation
            && report.level == Level::Causal
            && a.cycle.is_empty()
            && let [writer, reader] = a.ops[..]
            && let (Some(&w), Some(&r)) = (index.get(&writer.txn), index.get(&reader.txn))
            && !precedes_in_session(&h.transactions[w], &h.transactions[r])
        {
            carried.extend(history.happens_before_path(w, r));
        }
    }
    for d in &report.derivations {
        versions.extend(d.before.iter().chain(&d.after).map(|&v| (Key(d.key_id), v)));
        match &d.basis {
            Basis::OtherOrderCycle { cycle } => cycle_ids(cycle, &mut named),
            Basis::Seen { reader, how, .. } => {
                named.push(*reader);
                if let SeenHow::HappensBefore { path } = how {
                    named.extend(path);
                }
            }
            _ => {}
        }
    }
    carried.extend(named.iter().filter_map(|id| index.get(id)));
    for (key, v) in versions {
        if let Observed::Version(w) = v {
            carried.extend(history.writers_of(w).filter(|&(_, k)| k == key).map(|(i, _)| i));
        }
    }
    // What the carried transactions bring in, until nothing more does.
    let mut queue: VecDeque<usize> = carried.iter().copied().collect();
    while let Some(i) = queue.pop_front() {
        let mut more: Vec<usize> = Vec::new();
        more.extend(history.witness[i]);
        for op in &h.transactions[i].ops {
            let w = match *op {
                Op::Write { write, .. } | Op::Read { observed: Observed::Version(write), .. } => write,
                Op::Read { .. } => continue,
            };
            if history.ambiguous.contains(&w) {
                more.extend(history.writers_of(w).map(|(j, _)| j));
            }
        }
        for j in more {
            if carried.insert(j) {
                queue.push_back(j);
            }
        }
    }
    carried.into_iter().map(|i| txn_report(h, i)).collect()
}

fn cycle_ids(cycle: &[CycleEdge], out: &mut Vec<TxnId>) {
    out.extend(cycle.iter().flat_map(|e| [e.from, e.to]));
}

fn node_ids(n: &RefutationNode, out: &mut Vec<TxnId>) {
    match n {
        RefutationNode::Cycle { cycle } => cycle_ids(cycle, out),
        RefutationNode::Split { first_before_second, second_before_first, .. } => {
            node_ids(first_before_second, out);
            node_ids(second_before_first, out);
        }
    }
}

/// What the checker reads of the whole history, computed as it computes it (`check::Facts`).
struct Facts<'a> {
    h: &'a History,
    /// Every write of each write id: the writer's index and the key.
    writes: HashMap<WriteId, Vec<(usize, Key)>>,
    /// Write ids written by more than one transaction, or to more than one key.
    ambiguous: HashSet<WriteId>,
    /// Committed transactions, and those of unknown outcome an included one read from.
    included: Vec<bool>,
    /// For an included transaction of unknown outcome, the included reader that brought it in.
    witness: Vec<Option<usize>>,
}

impl<'a> Facts<'a> {
    fn new(h: &'a History) -> Self {
        let mut writes: HashMap<WriteId, Vec<(usize, Key)>> = HashMap::new();
        for (i, t) in h.transactions.iter().enumerate() {
            for op in &t.ops {
                if let Op::Write { key, write, .. } = *op {
                    let list = writes.entry(write).or_default();
                    if !list.contains(&(i, key)) {
                        list.push((i, key));
                    }
                }
            }
        }
        let ambiguous: HashSet<WriteId> =
            writes.iter().filter(|(_, list)| list.len() > 1).map(|(&w, _)| w).collect();
        let n = h.transactions.len();
        let mut included: Vec<bool> =
            h.transactions.iter().map(|t| t.outcome == Outcome::Committed).collect();
        let mut witness = vec![None; n];
        let mut changed = true;
        while changed {
            changed = false;
            for i in 0..n {
                if !included[i] {
                    continue;
                }
                for op in &h.transactions[i].ops {
                    if let Op::Read { observed: Observed::Version(w), .. } = *op
                        && !ambiguous.contains(&w)
                        && let Some(&[(j, _)]) = writes.get(&w).map(Vec::as_slice)
                        && !included[j]
                        && h.transactions[j].outcome == Outcome::Indeterminate
                    {
                        included[j] = true;
                        witness[j] = Some(i);
                        changed = true;
                    }
                }
            }
        }
        Facts { h, writes, ambiguous, included, witness }
    }

    fn writers_of(&self, w: WriteId) -> impl Iterator<Item = (usize, Key)> + '_ {
        self.writes.get(&w).into_iter().flatten().copied()
    }

    /// The included transaction whose final write of its key is `w`.
    fn final_writer(&self, w: WriteId) -> Option<usize> {
        // The first write of the id, as the checker takes it.
        let &(i, key) = self.writes.get(&w)?.first()?;
        (self.included[i] && final_write(&self.h.transactions[i], key) == Some(w)).then_some(i)
    }

    /// A happens-before path from `from` to `to` over included transactions (session order, and reads of
    /// final writes before any own write of the key), both ends included; empty when there is none.
    fn happens_before_path(&self, from: usize, to: usize) -> Vec<usize> {
        let h = self.h;
        let mut sessions: HashMap<u64, Vec<usize>> = HashMap::new();
        for i in (0..h.transactions.len()).filter(|&i| self.included[i]) {
            sessions.entry(h.transactions[i].session.0).or_default().push(i);
        }
        let mut previous: HashMap<usize, usize> = HashMap::new();
        for list in sessions.values_mut() {
            list.sort_by_key(|&i| h.transactions[i].seq);
            previous.extend(list.windows(2).map(|p| (p[1], p[0])));
        }
        // Backwards from `to`: each step goes to a transaction that precedes the current one.
        let mut next: HashMap<usize, usize> = HashMap::from([(to, to)]);
        let mut queue = VecDeque::from([to]);
        while let Some(b) = queue.pop_front() {
            let t = &h.transactions[b];
            let read_from = (0..t.ops.len()).filter_map(|op| match external_read_at(t, op) {
                Some(Observed::Version(w)) => self.final_writer(w),
                _ => None,
            });
            for a in previous.get(&b).copied().into_iter().chain(read_from) {
                if a == b || next.contains_key(&a) {
                    continue;
                }
                next.insert(a, b);
                if a == from {
                    let mut path = vec![from];
                    let mut at = from;
                    while at != to {
                        at = next[&at];
                        path.push(at);
                    }
                    return path;
                }
                queue.push_back(a);
            }
        }
        Vec::new()
    }
}

fn precedes_in_session(a: &Transaction, b: &Transaction) -> bool {
    a.session == b.session && a.seq < b.seq
}

fn final_write(t: &Transaction, key: Key) -> Option<WriteId> {
    t.ops.iter().rev().find_map(|op| match *op {
        Op::Write { key: k, write, .. } if k == key => Some(write),
        _ => None,
    })
}

/// The version op `op` of `t` read, if it is a read before any own write of its key.
fn external_read_at(t: &Transaction, op: usize) -> Option<Observed> {
    let Some(&Op::Read { key, observed, .. }) = t.ops.get(op) else { return None };
    let own_before = t.ops[..op].iter().any(|o| matches!(*o, Op::Write { key: k, .. } if k == key));
    (!own_before).then_some(observed)
}

#[cfg(test)]
mod tests {
    use history::HistoryBuilder;

    use crate::{Options, check_cited, check_report, verify};

    /// T1 and T3 both write w9; T3's outcome is unknown and nobody reads it, so it is dropped and the id
    /// is no duplicate-write anomaly, but it still names no single version. T1 is carried (write skew with
    /// T2), so T3 is too: without it, the report's transactions would make w9 look like T1's alone.
    #[test]
    fn every_writer_of_a_write_id_a_carried_transaction_shares_is_carried() {
        let h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1).write("z", 9))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .indeterminate(3, |t| t.write("z", 9))
            .build();
        let report = verify(&h, &Options::default()).unwrap();
        check_report(&h, &report).unwrap();
        let carried: Vec<u64> = report.transactions.iter().map(|t| t.id.0).collect();
        assert_eq!(carried, [1, 2, 3], "{}", report.render_text());
        check_cited(&report).unwrap();
    }
}
