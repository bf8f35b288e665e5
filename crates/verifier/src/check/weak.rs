//! Re-checking the weak levels' reports (read committed, read atomic, causal; docs/levels.md): what a
//! transaction saw, the commit order of an accept, and a read of an initial version after a seen write.
//! Written from the levels' definitions, apart from `crate::saturate`.

use std::collections::{HashMap, HashSet, VecDeque};

use history::{Key, Observed, Op, Transaction, TxnId, WriteId};

use super::{CheckError, CheckSummary, Facts, bad, final_write};
use crate::gc::is_initial;
use crate::options::Level;
use crate::report::{OpRef, Report, SeenHow};

/// The read at `op` of `t`, if it is an external read (no own write of its key comes before it).
pub(super) fn external_read_at(t: &Transaction, op: usize) -> Option<(Key, Observed)> {
    let Some(&Op::Read { key, observed, .. }) = t.ops.get(op) else { return None };
    let own_before = t.ops[..op].iter().any(|o| matches!(*o, Op::Write { key: k, .. } if k == key));
    (!own_before).then_some((key, observed))
}

/// Whether some external read of `key` in `t` returned `observed`.
pub(super) fn reads_externally(t: &Transaction, key: Key, observed: Observed) -> bool {
    (0..t.ops.len()).any(|i| external_read_at(t, i) == Some((key, observed)))
}

/// The transaction (history index) whose final write is `w`, if an included one.
fn final_writer(f: &Facts<'_>, w: WriteId) -> Option<usize> {
    let &(i, key) = f.writer.get(&w)?;
    (f.included[i] && final_write(&f.h.transactions[i], key) == Some(w)).then_some(i)
}

/// Whether the external read at `op` of `reader` returned a final write of `writer`.
fn read_from(f: &Facts<'_>, reader: &Transaction, op: usize, writer: TxnId) -> bool {
    match external_read_at(reader, op) {
        Some((_, Observed::Version(w))) => {
            final_writer(f, w).is_some_and(|i| f.h.transactions[i].id == writer)
        }
        _ => false,
    }
}

/// Whether `a` precedes `b` by session order or `b` read a write of `a`: one happens-before step.
fn step(f: &Facts<'_>, a: &Transaction, b: &Transaction) -> bool {
    (a.session == b.session && a.seq < b.seq) || (0..b.ops.len()).any(|op| read_from(f, b, op, a.id))
}

/// Checks that `reader` saw `writer` as `how` says, before its read at `read`, and that `level` counts it.
pub(super) fn saw(
    f: &Facts<'_>,
    level: Level,
    writer: &Transaction,
    reader: &Transaction,
    read: usize,
    how: &SeenHow,
) -> Result<(), CheckError> {
    if !how.counts_at(level) {
        return bad(format!("{how:?} is not seeing at {}", level.name()));
    }
    let ok = match how {
        SeenHow::EarlierRead { op } => *op < read && read_from(f, reader, *op, writer.id),
        SeenHow::Read { op } => read_from(f, reader, *op, writer.id),
        SeenHow::Session => writer.session == reader.session && writer.seq < reader.seq,
        SeenHow::HappensBefore { path } => {
            path.len() >= 2
                && path.first() == Some(&writer.id)
                && path.last() == Some(&reader.id)
                && path.windows(2).all(|p| match (f.included_txn(p[0]), f.included_txn(p[1])) {
                    (Ok(a), Ok(b)) => step(f, a, b),
                    _ => false,
                })
        }
    };
    if !ok {
        return bad(format!("{} did not see {} as the report says ({how:?})", reader.id, writer.id));
    }
    Ok(())
}

/// Whether `from` happens before `to`, by a breadth-first search back from `to` over the history.
fn happens_before(f: &Facts<'_>, from: usize, to: usize) -> bool {
    let h = f.h;
    let mut seen = HashSet::from([to]);
    let mut queue = VecDeque::from([to]);
    while let Some(b) = queue.pop_front() {
        let tb = &h.transactions[b];
        for (a, ta) in h.transactions.iter().enumerate() {
            if f.included[a] && !seen.contains(&a) && a != b && step(f, ta, tb) {
                if a == from {
                    return true;
                }
                seen.insert(a);
                queue.push_back(a);
            }
        }
    }
    false
}

/// A read of an initial version after a write of the key was seen: `ops` are the writer's final write of
/// the key, the reader's external read of an initial version, and, unless the writer precedes (or
/// happens before) the reader, the reader's read of a write of the writer.
pub(super) fn initial_after_write(f: &Facts<'_>, level: Level, ops: &[OpRef]) -> Result<(), CheckError> {
    if !level.is_saturation() || ops.len() < 2 {
        return bad("a read of an initial version after a seen write needs a weak level and two ops");
    }
    let writer = f.included_txn(ops[0].txn)?;
    let reader = f.included_txn(ops[1].txn)?;
    let Some(&Op::Write { key, write, .. }) = writer.ops.get(ops[0].op) else {
        return bad("op 0 is not a write");
    };
    match external_read_at(reader, ops[1].op) {
        Some((k, o)) if k == key && is_initial(o) => {}
        _ => return bad("op 1 is not an external read of the key's initial version"),
    }
    if final_write(writer, key) != Some(write) || writer.id == reader.id {
        return bad("op 0 is not another transaction's final write of the key");
    }
    let seen = match ops.get(2) {
        Some(e) if e.txn == reader.id && read_from(f, reader, e.op, writer.id) => {
            e.op < ops[1].op || level != Level::ReadCommitted
        }
        Some(_) => false,
        None => {
            let session = writer.session == reader.session && writer.seq < reader.seq;
            let hb = || match (f.by_id.get(&writer.id), f.by_id.get(&reader.id)) {
                (Some(&a), Some(&b)) => happens_before(f, a, b),
                _ => false,
            };
            match level {
                Level::ReadAtomic => session,
                Level::Causal => session || hb(),
                _ => false,
            }
        }
    };
    if !seen {
        return bad(format!("{} did not see {} at {}", reader.id, writer.id, level.name()));
    }
    Ok(())
}

/// Checks an accept's commit order at a weak level: every read's writer comes before its reader, and every
/// writer of the key the reader saw (as the level defines seeing) comes before the version it read.
/// `position` is each included transaction's place in the order (already checked to be a permutation that
/// keeps session order).
pub(super) fn check_commit_order(
    f: &Facts<'_>,
    report: &Report,
    position: &HashMap<usize, usize>,
    summary: &mut CheckSummary,
) -> Result<(), CheckError> {
    let h = f.h;
    let level = report.level;
    let skip: HashSet<OpRef> = report.unverifiable.iter().map(|u| u.op).collect();
    // Per session, transactions in order, for the last earlier writer of a key (read atomic) and for
    // per-session clocks (causal).
    let mut sessions: HashMap<u64, Vec<usize>> = HashMap::new();
    for &i in position.keys() {
        sessions.entry(h.transactions[i].session.0).or_default().push(i);
    }
    let mut place: HashMap<usize, (u64, usize)> = HashMap::new();
    for (s, list) in sessions.iter_mut() {
        list.sort_by_key(|&i| h.transactions[i].seq);
        for (p, &i) in list.iter().enumerate() {
            place.insert(i, (*s, p));
        }
    }
    // Causal: per transaction, how many of each session's transactions happen before it (or are it),
    // filled in commit order (which extends happens-before, checked as it goes).
    let mut clocks: HashMap<usize, HashMap<u64, usize>> = HashMap::new();
    let mut order: Vec<usize> = position.keys().copied().collect();
    order.sort_by_key(|i| position[i]);
    for &t3 in &order {
        let t = &h.transactions[t3];
        // The external reads that count, in program order, with their writers (None: initial).
        let mut reads: Vec<(usize, Key, Option<usize>)> = Vec::new();
        for op in 0..t.ops.len() {
            let Some((key, observed)) = external_read_at(t, op) else { continue };
            if skip.contains(&OpRef::new(t.id, op))
                || matches!(observed, Observed::Unrecorded(_) | Observed::Foreign(_))
            {
                continue;
            }
            let writer = match observed {
                Observed::Version(w) => match final_writer(f, w) {
                    Some(j) if j != t3 && f.writer.get(&w).is_some_and(|&(_, k)| k == key) => Some(j),
                    _ => {
                        return bad(format!(
                            "{} op {op} read {w}, no other included transaction's final write",
                            t.id
                        ));
                    }
                },
                _ => None,
            };
            if let Some(j) = writer
                && position[&j] > position[&t3]
            {
                return bad(format!("{} comes after {}, which read its write", h.transactions[j].id, t.id));
            }
            reads.push((op, key, writer));
        }
        let mut clock: HashMap<u64, usize> = HashMap::new();
        if level == Level::Causal {
            for &(_, _, w) in &reads {
                if let Some(j) = w {
                    for (&s, &c) in &clocks[&j] {
                        let e = clock.entry(s).or_insert(0);
                        *e = (*e).max(c);
                    }
                }
            }
            let (s, p) = place[&t3];
            if p > 0 {
                for (&s2, &c) in &clocks[&sessions[&s][p - 1]] {
                    let e = clock.entry(s2).or_insert(0);
                    *e = (*e).max(c);
                }
            }
            clock.insert(s, p + 1);
        }
        for (idx, &(op, key, t1)) in reads.iter().enumerate() {
            let mut seen: Vec<usize> = Vec::new();
            match level {
                Level::ReadCommitted => seen.extend(reads[..idx].iter().filter_map(|r| r.2)),
                Level::ReadAtomic => {
                    seen.extend(reads.iter().filter_map(|r| r.2));
                    let (s, p) = place[&t3];
                    seen.extend(
                        sessions[&s][..p]
                            .iter()
                            .rev()
                            .find(|&&i| final_write(&h.transactions[i], key).is_some()),
                    );
                }
                _ => {
                    for (s, list) in &sessions {
                        let limit = if *s == place[&t3].0 {
                            place[&t3].1
                        } else {
                            clock.get(s).copied().unwrap_or(0)
                        };
                        seen.extend(
                            list[..limit.min(list.len())]
                                .iter()
                                .rev()
                                .find(|&&i| final_write(&h.transactions[i], key).is_some()),
                        );
                    }
                }
            }
            for w in seen {
                if Some(w) == t1 || w == t3 || final_write(&h.transactions[w], key).is_none() {
                    continue;
                }
                match t1 {
                    None => {
                        return bad(format!(
                            "{} op {op} read an initial version after seeing {}'s write of the key",
                            t.id, h.transactions[w].id
                        ));
                    }
                    Some(j) if position[&w] > position[&j] => {
                        return bad(format!(
                            "{} op {op}: {} was seen but comes after {}, whose version was read",
                            t.id, h.transactions[w].id, h.transactions[j].id
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        if level == Level::Causal {
            clocks.insert(t3, clock);
        }
        summary.replayed += 1;
    }
    Ok(())
}
