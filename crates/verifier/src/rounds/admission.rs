//! Admission and quarantine: how transactions join and leave the residual history that verification in
//! rounds checks (Cobra §4; tombstones and the Guarantee of §4.2–§4.3). Not one of Fig. 3's stages: it runs
//! before the pipeline each round, and after a reject.
//!
//! In: recorded transactions, in session order, and what the verifier knows of every version (live, base,
//! tombstone, aborted, quarantined). Out: transactions added to the residual history, with reads of base
//! versions rewritten; or a reject with the read as evidence (a stale read of a tombstone or of an
//! overwritten initial version, G1a, a write id written twice). Admission waits until every version a
//! transaction read is known, so each round's history is closed under reads-from. Quarantine takes out the
//! transactions a reject names, and later reads of their writes are counted as unverifiable.

use std::collections::{HashSet, VecDeque};

use history::{History, Observed, Op, Outcome, SessionId, Transaction, TxnId, WriteId};

use super::{Known, OnlineVerifier, RoundsError};
use crate::certificate::txn_report;
use crate::gc::{base_tag, is_initial};
use crate::options::Level;
use crate::report::{OpRef, UnverifiableCause};
use crate::si::Reader;
use crate::{Anomaly, AnomalyClass, Report, Verdict, verify};

/// The write ids a transaction writes, sorted, for lookups by id. A hash set of them, built for every
/// transaction admitted (twice, when a read waited), was a quarter of admission's instructions on TPC-C's
/// rounds; sorting them costs two fifths of that.
struct OwnWrites(Vec<WriteId>);

impl OwnWrites {
    fn of(t: &Transaction) -> Self {
        // Sized for every op at once: collected from a filter, it grew by reallocating several times.
        let mut own: Vec<WriteId> = Vec::with_capacity(t.ops.len());
        own.extend(t.ops.iter().filter_map(|op| match *op {
            Op::Write { write, .. } => Some(write),
            _ => None,
        }));
        own.sort_unstable();
        OwnWrites(own)
    }

    fn contains(&self, w: WriteId) -> bool {
        self.0.binary_search(&w).is_ok()
    }
}

impl OnlineVerifier {
    /// What the verifier knows of each version `t` reads, by op index (`None` for an op that reads no
    /// recorded version, or one not known). With `wait`, the first version read that is neither known nor
    /// `t`'s own instead (`Err`): `t` waits for it. A foreign read (`[record] exclusive`) waits for a
    /// write of its tag too: the writer's row may have reached the proxy after the reader's, and its record
    /// then comes later. If none comes before admission is forced, the pipeline reports the read.
    ///
    /// Admission reads what this found rather than asking again: the versions map is large and each
    /// lookup a likely cache miss, and asking twice per read showed in profiles (TPC-C's rounds).
    fn known_reads(&self, t: &Transaction, wait: bool) -> Result<Vec<Option<Known>>, WriteId> {
        // The own writes are gathered once, and only if some read is of a version not known yet: searching
        // the ops for each such read was quadratic in the transaction (TPC-C's read what they wrote).
        let mut own = None;
        let mut found = Vec::with_capacity(t.ops.len());
        for op in &t.ops {
            let w = match *op {
                Op::Read { observed: Observed::Version(w), .. } => w,
                Op::Read { observed: Observed::Foreign(tag), .. } => WriteId(tag),
                _ => {
                    found.push(None);
                    continue;
                }
            };
            let known = self.known.get(w);
            if wait && known.is_none() && !own.get_or_insert_with(|| OwnWrites::of(t)).contains(w) {
                return Err(w);
            }
            found.push(known);
        }
        Ok(found)
    }

    /// What the verifier knows of the versions the head of session `s` reads, when the head can be
    /// admitted now (always, when `force`). A head found waiting for a version is not searched again until
    /// that version is known: it is registered as waiting for it, and woken when it is ([`Self::now_known`]).
    fn ready_head(&mut self, s: SessionId, force: bool) -> Option<Vec<Option<Known>>> {
        if !force && self.head_waits_for.get(&s).is_some_and(|w| !self.known.contains(*w)) {
            return None;
        }
        let t = self.waiting.get(&s).and_then(|q| q.front())?;
        match self.known_reads(t, !force) {
            Ok(reads) => Some(reads),
            Err(w) => {
                self.forget_wait(s);
                self.head_waits_for.insert(s, w);
                self.waiters.entry(w).or_default().push(s);
                None
            }
        }
    }

    /// Forgets what the head of session `s` was found waiting for, in both directions.
    fn forget_wait(&mut self, s: SessionId) {
        let Some(w) = self.head_waits_for.remove(&s) else { return };
        if let Some(sessions) = self.waiters.get_mut(&w) {
            sessions.retain(|waiter| *waiter != s);
            if sessions.is_empty() {
                self.waiters.remove(&w);
            }
        }
    }

    /// Version `w` has just become known: wakes the sessions whose head waited for it.
    pub(super) fn now_known(&mut self, w: WriteId) {
        // Most writes are waited for by no one, and the map is then nearly always empty.
        if self.waiters.is_empty() {
            return;
        }
        if let Some(sessions) = self.waiters.remove(&w) {
            for s in sessions {
                self.head_waits_for.remove(&s);
                self.wake.push(s);
            }
        }
    }

    /// Wakes session `s` whatever its head waited for (its head changed, or what the head needs did).
    pub(super) fn rewake(&mut self, s: SessionId) {
        self.forget_wait(s);
        self.wake.push(s);
    }

    /// Takes the head of session `s` off its queue.
    fn pop_head(&mut self, s: SessionId) -> Option<Transaction> {
        let t = self.waiting.get_mut(&s).and_then(|q| q.pop_front())?;
        self.forget_wait(s);
        self.waiting_count -= 1;
        Some(t)
    }

    /// After admitting a head of session `s`: forgets an emptied queue, and ends the session if it ended
    /// while transactions of it waited ([`OnlineVerifier::session_ended`]).
    fn settle(&mut self, s: SessionId) {
        if self.waiting.get(&s).is_some_and(VecDeque::is_empty) {
            self.waiting.remove(&s);
            if self.ending.remove(&s) {
                self.epochs.end(s);
            }
        }
    }

    /// Admits waiting transactions whose writers are known, until none is left that can go (all of them
    /// when `force`, or when too many wait). Only woken sessions are looked at (`wake`), so a push
    /// costs what it admits, not what waits.
    pub(super) fn admit_ready(&mut self, force: bool) -> Result<(), RoundsError> {
        if force {
            self.wake.extend(self.waiting.keys().copied());
        }
        loop {
            while let Some(s) = self.wake.pop() {
                while let Some(reads) = self.ready_head(s, force) {
                    let Some(t) = self.pop_head(s) else { break };
                    self.admit(t, reads)?;
                    self.settle(s);
                    if self.stopped {
                        return Ok(());
                    }
                }
            }
            if self.waiting_count <= self.options.max_waiting || !self.admit_oldest()? || self.stopped {
                return Ok(());
            }
        }
    }

    /// Admits the head that has waited longest (lowest transaction id), whatever it waits for, to make
    /// room when too many wait. Returns whether there was one.
    fn admit_oldest(&mut self) -> Result<bool, RoundsError> {
        let oldest = self.waiting.iter().filter_map(|(s, q)| q.front().map(|t| (t.id, *s))).min();
        let Some(t) = oldest.and_then(|(_, s)| self.pop_head(s)) else { return Ok(false) };
        let s = t.session;
        let reads = self.known_reads(&t, false).unwrap_or_default();
        self.admit(t, reads)?;
        self.settle(s);
        // Its next head has not been looked at.
        self.wake.push(s);
        Ok(true)
    }

    /// Admits one transaction: checks its reads against tombstones and base versions, rewrites reads of
    /// base versions, and adds it to the residual history. `known` is what [`Self::known_reads`] found
    /// for `t`'s reads.
    fn admit(&mut self, mut t: Transaction, known: Vec<Option<Known>>) -> Result<(), RoundsError> {
        // A read of a collected version is a stale read only for a reader the Guarantee covers (Cobra
        // §4.2): one that follows a fence of its session. Before its session's first fence, a reader from a
        // session first seen after collection began may legitimately precede the write that superseded the
        // version (a long first transaction of a new connection), so the read is unverifiable, never a
        // reject. A session seen before collection began holds `epoch_agree` at 0 until it fences, so
        // nothing it could read was collected before then.
        //
        // Under `declared`, a transaction held to snapshot isolation stops collection for good (garbage
        // collection's argument is made for a polygraph of serializability's shape, which a read-committed
        // reader fits and a snapshot one does not: `pipeline::build_polygraph`). The reads of collected
        // versions by a transaction held to less than serializability are unverifiable: read committed may
        // read a superseded version (PL-2 allows it), and the Guarantee's stale read is argued for
        // serializable readers only.
        let held = match self.options.verify.level {
            Level::Declared => Reader::of(&t),
            _ => Reader::Serializable,
        };
        if held == Reader::Snapshot && self.snapshot_reader.is_none() {
            let asked =
                t.isolation.map_or_else(|| "no level".to_owned(), |l| l.sql_name().to_ascii_uppercase());
            self.snapshot_reader = Some(format!(
                "{} asked for {asked}, and under declared levels garbage collection is argued only while every \
                 transaction is held to serializability or read committed",
                t.id
            ));
        }
        let weaker = held != Reader::Serializable;
        let covered = self.epochs.fenced(t.session) && !weaker;
        // Why a read of a collected version is then not judged, for its reason.
        let uncovered = if weaker {
            "by a transaction held to less than serializability, for which the Guarantee says nothing"
        } else {
            "before a fence of its session covered it"
        };
        self.epochs.admit(&t);
        let own = OwnWrites::of(&t);
        // Its reads of versions no transaction is known to have written may be of a write the gap lost.
        // Looked up only where a gap was read: this runs for every transaction admitted.
        let after_gap = !self.after_log_gap.is_empty() && self.after_log_gap.remove(&t.id);
        let judged = t.outcome == Outcome::Committed;
        // An aborted transaction's reads are never judged, and one-shot verification leaves it out before it
        // counts reads it cannot judge (`normalize`): counted here too, the two counts of one log disagreed.
        let counted = t.outcome != Outcome::Aborted;
        let mut found: Vec<(AnomalyClass, String, usize)> = Vec::new();
        let mut drop_ops: Vec<usize> = Vec::new();
        for (oi, op) in t.ops.iter_mut().enumerate() {
            // A foreign read whose tag a known transaction wrote read that write (see `admissible`).
            if let Op::Read { observed, .. } = op
                && let Observed::Foreign(tag) = *observed
                && (known.get(oi).copied().flatten().is_some() || own.contains(WriteId(tag)))
            {
                *observed = Observed::Version(WriteId(tag));
            }
            match op {
                Op::Read { key, observed, .. } => {
                    // The key's name only goes into a reject's summary; building it for every read cost
                    // about 5% of a run (`verify --rounds` on twitter-100000).
                    let work = &self.work;
                    let name = || crate::normalize::key_name(work, *key);
                    match *observed {
                        // An unknown owner is never evidence (DESIGN.md §3): counted (where the reader did not abort),
                        // then dropped.
                        Observed::Unrecorded(tag) => {
                            if counted {
                                self.not_judged.read(
                                    OpRef::new(t.id, oi),
                                    UnverifiableCause::UnrecordedWriter,
                                    || {
                                        format!(
                                            "read of {}={}, a version no recorded transaction wrote",
                                            name(),
                                            crate::normalize::show(Observed::Unrecorded(tag))
                                        )
                                    },
                                );
                            }
                            drop_ops.push(oi);
                        }
                        Observed::Version(w) if own.contains(w) => {}
                        // Still not known (admission was forced): a garbage read, unless a gap may have lost
                        // its writer. Likewise a foreign version whose tag no known transaction wrote.
                        Observed::Version(_) | Observed::Foreign(_)
                            if after_gap && known.get(oi).copied().flatten().is_none() =>
                        {
                            if counted {
                                self.not_judged.read(OpRef::new(t.id, oi), UnverifiableCause::LogGap, || {
                                    format!(
                                        "read of {}={} after a log gap: its writer may have been lost",
                                        name(),
                                        crate::normalize::show(*observed)
                                    )
                                });
                            }
                            drop_ops.push(oi);
                        }
                        Observed::Version(w) => match known.get(oi).copied().flatten() {
                            Some(Known::Base { .. }) => *observed = Observed::PreHistory(base_tag(w)),
                            Some(Known::Tombstone { writer }) if judged && !covered => {
                                self.not_judged.read(OpRef::new(t.id, oi), UnverifiableCause::NotCovered, || {
                                    format!(
                                        "read of {}={w}, which {writer} wrote and collection had deleted, {uncovered}",
                                        name()
                                    )
                                });
                                drop_ops.push(oi);
                            }
                            Some(Known::Tombstone { writer }) if judged => {
                                let name = name();
                                found.push((
                                    AnomalyClass::StaleRead,
                                    format!(
                                        "{} read {name}={w}, which {writer} wrote; a later write of {name} by a \
                                         transaction that precedes the reader through the fences (at least two \
                                         epochs older, or before one that is) superseded it, so the version had \
                                         been collected (Cobra §4.3): a stale read",
                                        t.id
                                    ),
                                    oi,
                                ));
                                drop_ops.push(oi);
                            }
                            Some(Known::Aborted { writer }) if judged => {
                                let name = name();
                                found.push((
                                    AnomalyClass::G1a,
                                    format!("{} read {name}={w}, written by {writer}, which aborted", t.id),
                                    oi,
                                ));
                                drop_ops.push(oi);
                            }
                            Some(Known::Quarantined) => {
                                if counted {
                                    self.not_judged.read(
                                        OpRef::new(t.id, oi),
                                        UnverifiableCause::WriterRejected,
                                        || {
                                            format!(
                                                "read of {}={w}, whose writer was taken out of verification after a \
                                                 reject named it",
                                                name()
                                            )
                                        },
                                    );
                                }
                                drop_ops.push(oi);
                            }
                            Some(Known::DiscoveredLate) => {
                                if counted {
                                    self.not_judged.read(
                                        OpRef::new(t.id, oi),
                                        UnverifiableCause::DiscoveredLate,
                                        || {
                                            format!(
                                                "read of {}={w}, a write a later read revealed after a round had verified \
                                                 its writer without it",
                                                name()
                                            )
                                        },
                                    );
                                }
                                drop_ops.push(oi);
                            }
                            _ => {}
                        },
                        o if is_initial(o)
                            && judged
                            && !covered
                            && (self.base.contains(*key) || self.superseded_initials.by(*key).is_some()) =>
                        {
                            self.not_judged.read(OpRef::new(t.id, oi), UnverifiableCause::NotCovered, || {
                                format!(
                                    "read of the initial version of {}, which collection had superseded, {uncovered}",
                                    name()
                                )
                            });
                            drop_ops.push(oi);
                        }
                        o if is_initial(o) && judged => {
                            if let Some(writer) = self.superseded_initials.by(*key) {
                                let name = name();
                                found.push((
                                    AnomalyClass::StaleRead,
                                    format!(
                                        "{} read the initial version of {name}, but {writer} had written {name} and \
                                         was collected: it precedes the reader through the fences (at least two \
                                         epochs older, or before one that is; Cobra §4.2), so the initial version \
                                         had been superseded: a stale read",
                                        t.id
                                    ),
                                    oi,
                                ));
                                drop_ops.push(oi);
                            } else if let Some(b) = self.base.get(*key) {
                                let name = name();
                                found.push((
                                    AnomalyClass::StaleRead,
                                    format!(
                                        "{} read the initial version of {name}, but {b} had overwritten it and \
                                         precedes the reader through the fences (at least two epochs older, or \
                                         before one that is; Cobra §4.2): a stale read",
                                        t.id
                                    ),
                                    oi,
                                ));
                                drop_ops.push(oi);
                            }
                        }
                        _ => {}
                    }
                }
                Op::Write { key, write, .. } => {
                    // Known as live from here on, whatever happens to the transaction below; what the id
                    // was before tells a second writer of it.
                    let before = self.known.insert_live(*write);
                    if before.is_none() {
                        self.now_known(*write);
                    }
                    if t.outcome != Outcome::Indeterminate
                        && let Some(k) = before
                    {
                        let earlier = match k {
                            Known::Tombstone { writer } | Known::Aborted { writer } => Some(writer),
                            _ => None,
                        };
                        if let Some(writer) = earlier {
                            let name = crate::normalize::key_name(&self.work, *key);
                            found.push((
                                AnomalyClass::DuplicateWrite,
                                format!(
                                    "write id {write} of {name} is written twice: by {writer} and by {}",
                                    t.id
                                ),
                                oi,
                            ));
                        }
                    }
                }
            }
        }
        if !found.is_empty() {
            self.admission_reject(&t, found)?;
        }
        if !drop_ops.is_empty() {
            let mut i = 0;
            t.retain_ops(|_| {
                let keep = !drop_ops.contains(&i);
                i += 1;
                keep
            });
        }
        self.work.transactions.push(t);
        self.new_in_round += 1;
        self.admitted += 1;
        Ok(())
    }

    /// A reject found at admission: its report has the read as evidence and no cycle.
    fn admission_reject(
        &mut self,
        t: &Transaction,
        found: Vec<(AnomalyClass, String, usize)>,
    ) -> Result<(), RoundsError> {
        let mut report = verify(&History::default(), &self.options.verify)?;
        report.verdict = Verdict::Reject;
        for (class, summary, op) in found {
            report.anomalies.push(Anomaly {
                class,
                summary,
                ops: vec![OpRef::new(t.id, op)],
                cycle: Vec::new(),
                uses_real_time: false,
                uses_session_order: true,
                refutation: None,
            });
        }
        let single = History {
            keys: self.work.keys.clone(),
            statements: self.work.statements.clone(),
            transactions: vec![t.clone()],
            ..History::default()
        };
        report.transactions = vec![txn_report(&single, 0)];
        report.counts.transactions = 1;
        self.record_reject(report)
    }

    /// Removes the transactions a reject names, so that verification can carry on past it.
    pub(super) fn quarantine(&mut self, report: &Report) {
        let mut ids: HashSet<TxnId> = report.transactions.iter().map(|t| t.id).collect();
        for a in &report.anomalies {
            ids.extend(a.ops.iter().map(|o| o.txn));
            ids.extend(a.cycle.iter().map(|e| e.from));
        }
        let n = self.work.transactions.len();
        if !self.work.transactions.iter().any(|t| ids.contains(&t.id)) {
            // Nothing named is live: take out the whole round's new transactions.
            ids.extend(self.work.transactions[n - self.new_in_round.min(n)..].iter().map(|t| t.id));
        }
        self.remove_quarantined(ids);
    }

    /// Takes the transactions `ids` out of the residual history. Their client writes become
    /// [`Known::Quarantined`], and the live reads of them are dropped and counted as unverifiable. Their
    /// links are retired as collection retires a deleted source's: a link's write is the verifier's own,
    /// so the reads of it are dropped uncounted (no client read is lost) and its key goes back to the free
    /// list.
    pub(super) fn remove_quarantined(&mut self, ids: HashSet<TxnId>) {
        let mut gone: HashSet<WriteId> = HashSet::new();
        let mut removed: Vec<TxnId> = Vec::new();
        self.work.transactions.retain(|t| {
            if ids.contains(&t.id) {
                for op in &t.ops {
                    if let Op::Write { write, .. } = *op {
                        gone.insert(write);
                    }
                }
                removed.push(t.id);
                false
            } else {
                true
            }
        });
        self.new_in_round = self.new_in_round.saturating_sub(removed.len());
        let retired = self.retire_links(&removed);
        gone.retain(|w| !retired.contains_key(w));
        for w in &gone {
            self.known.insert(*w, Known::Quarantined);
        }
        for t in &mut self.work.transactions {
            let dropped = t.retain_ops(
                |op| !matches!(op, Op::Read { observed: Observed::Version(w), .. } if gone.contains(w)),
            );
            self.not_judged.uncited(UnverifiableCause::WriterRejected, dropped as u64);
        }
        self.drop_retired_reads(retired);
        self.epochs.forget(ids);
    }
}
