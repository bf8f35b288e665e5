//! Merging the logs of several collectors into one history (DESIGN.md §4, "several edges feed one verifier").
//!
//! Each proxy (a *collector*) keeps its own log and ships its records, in order, with *heartbeats* that say
//! how far it has shipped (see [`Heartbeat`]). A [`Merger`] takes both, runs one [`Replayer`] per collector
//! (compact records cite definitions by the sequence numbers of their own log) and releases one stream of
//! [`Replayed`] events whose keys and statements refer to the merger's own tables.
//!
//! # Ids
//!
//! Transaction and session ids are allocated by each proxy on its own, so two proxies can use the same
//! ones. The merger qualifies them: the collector id goes into the top 8 bits ([`qualify`]), and collector 0
//! keeps its ids as they are. Write ids are *not* qualified: under the `xmin` strategy a write id hashes
//! the database's own name for the version (table, key, `xmin`), so a reader at one proxy and the writer at
//! another compute the same id, and that is what joins their histories.
//!
//! # What one proxy cannot know about another's writes
//!
//! A proxy classifies every version it reads by what *it* recorded (`interpret::versions` in the proxy): a
//! version another proxy's client wrote is, to it, pre-history (written before its own recording began),
//! unrecorded, or foreign, and a row another proxy's client deleted reads as absent. The merger corrects
//! both with what the other collectors recorded:
//! - a read of a pre-history, unrecorded or foreign version whose tag is a write id some collector recorded
//!   (the tag of all three is the version's write id) is a read of that write;
//! - a read that found no row, of a key another collector wrote, may have read that collector's tombstone
//!   rather than the initial absence the reading proxy assumed, so it becomes unrecorded: never evidence.
//!
//! # When an event may go: watermarks
//!
//! Those corrections need the writer's records before the reader's are released. A write's intent is
//! appended before its COMMIT is forwarded, so before any other client can read it; the reader's records
//! are appended after its read. So if the writer's collector has shipped every record it appended before
//! `t + drift`, where `t` is a time (by the reader's collector's clock) after the reader's record was
//! appended and `drift` bounds how far the two clocks disagree (the sum of their error bounds,
//! [`ClockBounds::drift_ns`]), the writer's write is known. Each event is
//! therefore held until its own collector's next heartbeat stamps it with such a `t`
//! ([`Heartbeat::read_at_ns`]), and then until every other collector's heartbeats say it has shipped
//! everything appended before `t + drift` ([`Heartbeat::appended_before_ns`]). A collector that goes silent
//! holds every other one back, and [`Merger::holding`] says which: that is a hole made visible, never a
//! verdict over a history with a stretch missing.
//!
//! # Holes
//!
//! A collector's records can arrive out of order (a shipper that reconnected sends again what the old
//! connection lost); a later record waits for the earlier ones, and the collector's promises count for
//! nothing meanwhile. If the earlier ones never come (a stream that lost them, limits that dropped them),
//! the caller may give up on them ([`Merger::skip_hole`]): verification goes on, and what the hole may have
//! held is never used as evidence. A read of a version no collector recorded is then unverifiable, and
//! records that refer to the hole's transactions are dropped and counted. [`Merger::holding`] lists every
//! hole, so a verdict over a stretch with one says so.
//!
//! Known limit: each proxy learns its own recording horizon. A version that a writer no proxy recorded
//! wrote after one proxy's horizon and before a later proxy's is pre-history to the later proxy, which
//! orders it before every recorded transaction. Start every proxy of a deployment before traffic flows (or
//! record every writer) so that their horizons agree; [`Merger::horizons_differ`] says when they do not.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::replay::{IdMap, Replayed, ReplayedTxn, Replayer, StatementTable};
use super::{LogError, LogRecord};
use crate::{
    ClockBounds, CollectorId, Key, KeyTable, Observed, Op, RecordingHorizon, SessionId, StmtRef, Transaction,
    TxnId, WriteId, WriteIdMap,
};

/// The bits of a qualified id that hold the collector.
const COLLECTOR_SHIFT: u32 = 56;

/// From this many statement texts on, [`Merger::release`] starts its table over. Twice the collectors'
/// readers' threshold: the table starts over whole, and every text it still needs is interned again.
const FORGET_STATEMENTS_FROM: usize = 8_192;

/// What a collector says about its shipping, after the records it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Every record below this sequence number has been shipped before this heartbeat.
    pub below: u64,
    /// Every record the collector appended before this time (ns since the Unix epoch, its clock) is below
    /// `below`: the time was read before `below` was.
    pub appended_before_ns: u64,
    /// Every record below `below` was appended before this time: it was read after `below` was.
    pub read_at_ns: u64,
}

/// Why merging stopped.
#[derive(Debug, Error)]
pub enum MergeError {
    /// A collector's records contradict each other, or one is missing.
    #[error("collector {collector}: {source}")]
    Log {
        /// The collector.
        collector: u32,
        /// What is wrong.
        #[source]
        source: LogError,
    },
    /// An id that cannot be qualified with its collector.
    #[error(
        "collector {collector}: {what} {id} is too large to qualify with the collector id (ids below 2^56 and \
         collector ids below 256 can be merged)"
    )]
    IdTooLarge {
        /// The collector.
        collector: u32,
        /// What kind of id.
        what: &'static str,
        /// The id.
        id: u64,
    },
}

/// `local`, an id a collector allocated, qualified with the collector: unique across collectors.
pub fn qualify(collector: CollectorId, local: u64, what: &'static str) -> Result<u64, MergeError> {
    if collector.0 >= 1 << (64 - COLLECTOR_SHIFT) || local >> COLLECTOR_SHIFT != 0 {
        return Err(MergeError::IdTooLarge { collector: collector.0, what, id: local });
    }
    Ok(u64::from(collector.0) << COLLECTOR_SHIFT | local)
}

/// One collector's side of the merge.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Source {
    replayer: Replayer,
    /// Every record the collector appended before this time has been received, once a heartbeat said so.
    complete_before_ns: Option<u64>,
    /// Events of records no heartbeat has covered yet, with the sequence number of their record.
    unstamped: VecDeque<(u64, Replayed)>,
    /// Events whose record was appended before the time they carry, oldest first.
    stamped: VecDeque<(u64, Replayed)>,
    /// The merger's key for each of the replayer's keys.
    keys: IdMap<Key>,
    /// The merger's statement for each of the replayer's statements.
    statements: IdMap<StmtRef>,
    /// Records received.
    records: u64,
    /// The sequence number of the next record to apply, once one was.
    next_seq: Option<u64>,
    /// Records that came before an earlier one (a shipper that reconnected sends again what was lost).
    ahead: BTreeMap<u64, LogRecord>,
    /// Stretches given up on ([`Merger::skip_hole`]).
    holes: Vec<Hole>,
    /// The latest heartbeat that came while records it covers were missing: it counts once they are
    /// applied, or given up on.
    held_beat: Option<Heartbeat>,
}

impl Source {
    /// Stamps the events of the applied records `beat` covers with its time, after their appends.
    fn stamp(&mut self, beat: &Heartbeat) {
        while self.unstamped.front().is_some_and(|(seq, _)| *seq < beat.below) {
            if let Some((_, event)) = self.unstamped.pop_front() {
                self.stamped.push_back((beat.read_at_ns, event));
            }
        }
    }

    /// Makes the held heartbeat count if every record it covers is now applied (or none has arrived yet: a
    /// merger takes a collector's first record as where its log starts): it stamps their events with its
    /// time, and its promise holds.
    fn settle_beat(&mut self) {
        let Some(beat) = self.held_beat else { return };
        if self.next_seq.is_some_and(|next| next < beat.below) {
            return;
        }
        self.held_beat = None;
        self.stamp(&beat);
        let complete = self.complete_before_ns.get_or_insert(beat.appended_before_ns);
        *complete = (*complete).max(beat.appended_before_ns);
    }
}

/// A stretch of a collector's log that never arrived and was given up on: records `from` up to `to`
/// (excluded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hole {
    /// The first missing record.
    pub from: u64,
    /// The record after the last missing one: the first that did arrive.
    pub to: u64,
}

/// Where a collector stands: for status pages and for saying which collector holds the others back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectorStatus {
    /// The collector.
    pub collector: CollectorId,
    /// Records received from it.
    pub records: u64,
    /// Its latest heartbeat's promise: everything it appended before this time has arrived.
    pub complete_before_ns: Option<u64>,
    /// Events of its records held back, waiting for heartbeats, and records waiting for an earlier one.
    pub held: usize,
    /// The record it waits for, when later ones came first.
    pub waiting_for: Option<u64>,
    /// Stretches of its log given up on, oldest first.
    pub holes: Vec<Hole>,
    /// Records after those stretches dropped because they refer to what a stretch held.
    pub lost_to_holes: u64,
    /// Recorded rows and runs' parameters left out of kept transactions because their values were in a
    /// stretch given up on ([`super::Replayer::values_lost_to_holes`]).
    pub values_lost_to_holes: u64,
    /// Statement texts its log's reader holds.
    pub statements: usize,
}

/// Merges the records of several collectors into one history; see the module documentation.
///
/// It serializes to what it has taken so far, so that a verifier can stop, store it, and go on later from
/// the next message as if it had never stopped (the checkpoint of `krait serve --verify-only`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Merger {
    clocks: ClockBounds,
    sources: BTreeMap<CollectorId, Source>,
    keys: KeyTable,
    statements: StatementTable,
    /// Every write id some collector recorded (pending intents included), compactly: 8 bytes each, and it
    /// grows with every version written.
    written: WriteIdMap<()>,
    /// For each key some collector wrote, the collectors that wrote it.
    writers_of_key: HashMap<Key, Vec<CollectorId>>,
    /// Whether some collector's log has a hole: a read of a version no collector recorded may then be a
    /// read of a write the hole held.
    holed: bool,
    /// How many times the merger's statement texts were forgotten since it was made or restored
    /// ([`Merger::release`]).
    #[serde(skip)]
    statements_renumbered: u64,
}

impl Merger {
    /// A merger of `collectors`, whose clocks are as far from true time as `clocks` says. Events wait for
    /// every one of them: a collector that has not been heard from yet holds the others back. A collector
    /// not listed is added when its first record or heartbeat arrives.
    pub fn new(collectors: &[CollectorId], clocks: ClockBounds) -> Self {
        Merger {
            clocks,
            sources: collectors.iter().map(|&c| (c, Source::default())).collect(),
            keys: KeyTable::default(),
            statements: StatementTable::default(),
            written: WriteIdMap::new(),
            writers_of_key: HashMap::new(),
            holed: false,
            statements_renumbered: 0,
        }
    }

    /// The key names of the released events.
    pub fn keys(&self) -> &KeyTable {
        &self.keys
    }

    /// The statement texts of the released events.
    pub fn statements(&self) -> &[String] {
        self.statements.texts()
    }

    /// How many times the merger forgot its statement texts since it was made or restored: the events of
    /// one [`Merger::release`] and those of the next may number the same text differently when it moved.
    pub fn statements_renumbered(&self) -> u64 {
        self.statements_renumbered
    }

    /// Takes record `seq` of `collector`'s log. A record that comes before an earlier one waits for it, and
    /// holds the collector's promises back meanwhile; a second copy of a record is dropped.
    pub fn record(&mut self, collector: CollectorId, seq: u64, record: LogRecord) -> Result<(), MergeError> {
        let source = self.sources.entry(collector).or_default();
        match source.next_seq {
            Some(next) if seq < next => return Ok(()),
            Some(next) if seq > next => {
                source.ahead.insert(seq, record);
                return Ok(());
            }
            _ => {}
        }
        self.apply(collector, seq, record)?;
        self.apply_ahead(collector)
    }

    /// Applies the records that waited for the ones now applied.
    fn apply_ahead(&mut self, collector: CollectorId) -> Result<(), MergeError> {
        loop {
            let source = self.sources.entry(collector).or_default();
            let Some(next) = source.next_seq else { return Ok(()) };
            let Some(record) = source.ahead.remove(&next) else {
                source.settle_beat();
                return Ok(());
            };
            self.apply(collector, next, record)?;
        }
    }

    /// Gives up on the records `collector`'s log is waiting for (they never arrived: a stream that lost
    /// them, or limits that dropped them) and goes on from the first one that did; returns the hole, or
    /// `None` when the collector waits for nothing.
    ///
    /// What the hole held is unknown, so what depends on it is not evidence (DESIGN.md §3): a read of a
    /// version that no collector recorded becomes a read of an unrecorded writer's version, which the
    /// verifier counts as unverifiable, where a whole history would make it a garbage read or an unowned
    /// version; records that refer to the hole's transactions or texts are dropped and counted
    /// ([`CollectorStatus::lost_to_holes`]); the collector's promises count again.
    pub fn skip_hole(&mut self, collector: CollectorId) -> Result<Option<Hole>, MergeError> {
        let Some(source) = self.sources.get_mut(&collector) else { return Ok(None) };
        let (Some(from), Some(&to)) = (source.next_seq, source.ahead.keys().next()) else {
            return Ok(None);
        };
        source.replayer.skip_to(to);
        source.next_seq = Some(to);
        let hole = Hole { from, to };
        source.holes.push(hole);
        self.holed = true;
        self.apply_ahead(collector)?;
        Ok(Some(hole))
    }

    /// Applies record `seq`, the next of `collector`'s log.
    fn apply(&mut self, collector: CollectorId, seq: u64, record: LogRecord) -> Result<(), MergeError> {
        let txn = record.txn_id();
        let source = self.sources.entry(collector).or_default();
        source.records += 1;
        source.next_seq = Some(seq + 1);
        // A client that puts its values in its statements makes a text per run (issue 20, memory): the
        // collector's reader forgets the texts no pending intent cites, but only while no event of it is
        // held back here, since held events cite its texts by number.
        if source.unstamped.is_empty()
            && source.stamped.is_empty()
            && source.replayer.forget_uncited_statements()
        {
            source.statements = IdMap::default();
        }
        let events = source
            .replayer
            .apply(seq, record)
            .map_err(|source| MergeError::Log { collector: collector.0, source })?;
        // The writes of an intent are known from its first record: a reader can see them before the outcome.
        let mut writes: Vec<(Key, WriteId)> = Vec::new();
        if let Some(pending) = txn.and_then(|t| source.replayer.pending_transaction(t)) {
            writes.extend(written_by(pending));
        }
        for event in &events {
            match event {
                Replayed::Transaction(t) => writes.extend(written_by(&t.txn)),
                Replayed::DiscoveredWrite { key, write, .. } => writes.push((*key, *write)),
                _ => {}
            }
        }
        for (key, write) in writes {
            let key = self.merged_key(collector, key)?;
            self.written.insert(write, ());
            let writers = self.writers_of_key.entry(key).or_default();
            if !writers.contains(&collector) {
                writers.push(collector);
            }
        }
        let source = self.sources.entry(collector).or_default();
        source.unstamped.extend(events.into_iter().map(|e| (seq, e)));
        Ok(())
    }

    /// Takes a heartbeat of `collector`, which came after the records it covers.
    pub fn heartbeat(&mut self, collector: CollectorId, beat: Heartbeat) {
        // Records it covers may be missing here (later ones overtook them): then it counts once they come.
        let source = self.sources.entry(collector).or_default();
        source.stamp(&beat);
        source.held_beat = Some(beat);
        source.settle_beat();
    }

    /// The events every collector's heartbeats now allow, with ids qualified, reads corrected (see the
    /// module documentation) and keys and statements in the merger's tables. Use the events before the next
    /// call: from 8,192 statement texts on, a call starts the table over (and
    /// [`Merger::statements_renumbered`] moves), so that a client putting its values in its statements does
    /// not make it grow for ever.
    pub fn release(&mut self) -> Result<Vec<Replayed>, MergeError> {
        // The caller is done with the events released before (they cite this table by number), and events
        // held back cite their collectors' tables: so once large, the table can start over whole.
        if self.statements.texts().len() >= FORGET_STATEMENTS_FROM {
            self.statements = StatementTable::default();
            for source in self.sources.values_mut() {
                source.statements = IdMap::default();
            }
            self.statements_renumbered += 1;
        }
        let collectors: Vec<CollectorId> = self.sources.keys().copied().collect();
        let mut out = Vec::new();
        for &c in &collectors {
            // What every other collector has shipped, as far as its clock goes, and how far its clock and
            // this one's may disagree.
            let others: Option<Vec<(u64, u64)>> = collectors
                .iter()
                .filter(|&&o| o != c)
                .map(|&o| {
                    let complete = self.sources.get(&o).and_then(|s| s.complete_before_ns)?;
                    Some((complete, self.clocks.drift_ns(c, o)))
                })
                .collect();
            let Some(others) = others else { continue };
            let ready = |s: &mut Source| match s.stamped.front() {
                Some(&(read_at, _))
                    if others.iter().all(|&(complete, drift)| read_at.saturating_add(drift) <= complete) =>
                {
                    s.stamped.pop_front()
                }
                _ => None,
            };
            while let Some((_, event)) = self.sources.get_mut(&c).and_then(ready) {
                out.push(self.merged_event(c, event)?);
            }
        }
        Ok(out)
    }

    /// Each collector's state, in collector order.
    pub fn holding(&self) -> Vec<CollectorStatus> {
        self.sources
            .iter()
            .map(|(&collector, s)| CollectorStatus {
                collector,
                records: s.records,
                complete_before_ns: s.complete_before_ns,
                held: s.unstamped.len() + s.stamped.len() + s.ahead.len(),
                waiting_for: s.next_seq.filter(|_| !s.ahead.is_empty()),
                holes: s.holes.clone(),
                lost_to_holes: s.replayer.lost_to_holes(),
                values_lost_to_holes: s.replayer.values_lost_to_holes(),
                statements: s.replayer.statements().len(),
            })
            .collect()
    }

    /// Whether the collectors began recording at different points of the database's history (see the
    /// module documentation's known limit).
    pub fn horizons_differ(&self) -> bool {
        let horizons: Vec<&RecordingHorizon> =
            self.sources.values().filter_map(|s| s.replayer.horizon()).collect();
        horizons.windows(2).any(|w| w[0] != w[1])
    }

    fn merged_event(&mut self, c: CollectorId, event: Replayed) -> Result<Replayed, MergeError> {
        let txn_id = |t: TxnId| qualify(c, t.0, "transaction id").map(TxnId);
        Ok(match event {
            Replayed::Transaction(ReplayedTxn { mut txn, unchecked, position }) => {
                txn.id = txn_id(txn.id)?;
                txn.session = SessionId(qualify(c, txn.session.0, "session id")?);
                txn.collector = c;
                self.translate(c, &mut txn)?;
                let unchecked = unchecked
                    .into_iter()
                    .map(|mut u| {
                        u.txn = txn.id;
                        u
                    })
                    .collect();
                Replayed::Transaction(ReplayedTxn { txn, unchecked, position })
            }
            Replayed::SessionEnded(s) => Replayed::SessionEnded(SessionId(qualify(c, s.0, "session id")?)),
            Replayed::Resolved { txn, outcome } => Replayed::Resolved { txn: txn_id(txn)?, outcome },
            Replayed::DiscoveredWrite { txn, key, write } => {
                Replayed::DiscoveredWrite { txn: txn_id(txn)?, key: self.merged_key(c, key)?, write }
            }
            gap @ Replayed::Gap(_) => gap,
        })
    }

    /// Moves `txn`'s keys and statements into the merger's tables and corrects its reads.
    fn translate(&mut self, c: CollectorId, txn: &mut Transaction) -> Result<(), MergeError> {
        for op in &mut txn.ops {
            let (Op::Read { key, .. } | Op::Write { key, .. }) = op;
            *key = self.merged_key(c, *key)?;
            if let Op::Read { key, observed, .. } = op {
                *observed = self.corrected(c, *key, *observed);
            }
        }
        txn.try_renumber_statements(|stmt| self.merged_statement(c, stmt))
    }

    /// What a read by a client of collector `c` observed, given what every collector recorded.
    fn corrected(&self, c: CollectorId, key: Key, observed: Observed) -> Observed {
        match observed {
            Observed::PreHistory(tag) | Observed::Unrecorded(tag) | Observed::Foreign(tag)
                if self.written.contains(WriteId(tag)) =>
            {
                Observed::Version(WriteId(tag))
            }
            Observed::Absent
                if self.writers_of_key.get(&key).is_some_and(|w| w.iter().any(|&other| other != c)) =>
            {
                Observed::Unrecorded(u64::from(key.0))
            }
            // A collector reads `Version` only of writes it recorded itself, and `Foreign` only of versions
            // no one recorded: after a hole either may be a write the hole held.
            Observed::Version(WriteId(tag)) | Observed::Foreign(tag)
                if self.holed && !self.written.contains(WriteId(tag)) =>
            {
                Observed::Unrecorded(tag)
            }
            other => other,
        }
    }

    fn merged_key(&mut self, c: CollectorId, key: Key) -> Result<Key, MergeError> {
        let unknown = || MergeError::Log {
            collector: c.0,
            source: LogError::Inconsistent { seq: 0, reason: format!("key {} was never named", key.0) },
        };
        let Source { replayer, keys: merged, .. } = self.sources.entry(c).or_default();
        let keys = &mut self.keys;
        merged.get_or_try_insert(key.0 as usize, || {
            Ok(keys.intern(replayer.keys().name(key).ok_or_else(unknown)?.clone()))
        })
    }

    fn merged_statement(&mut self, c: CollectorId, stmt: StmtRef) -> Result<StmtRef, MergeError> {
        let unknown = || MergeError::Log {
            collector: c.0,
            source: LogError::Inconsistent {
                seq: 0,
                reason: format!("statement {} was never named", stmt.0),
            },
        };
        let Source { replayer, statements: merged, .. } = self.sources.entry(c).or_default();
        let statements = &mut self.statements;
        merged.get_or_try_insert(stmt.0 as usize, || {
            Ok(statements.intern(replayer.statements().get(stmt.0 as usize).ok_or_else(unknown)?))
        })
    }
}

/// The writes of `txn`.
fn written_by(txn: &Transaction) -> impl Iterator<Item = (Key, WriteId)> + '_ {
    txn.ops.iter().filter_map(|op| match *op {
        Op::Write { key, write, .. } => Some((key, write)),
        Op::Read { .. } => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KeyName, LoggedOp, LoggedTxn, Outcome};

    const A: CollectorId = CollectorId(1);
    const B: CollectorId = CollectorId(2);

    fn x() -> KeyName {
        KeyName { namespace: "kv".into(), bytes: b"x".to_vec() }
    }

    fn finished(id: u64, ops: Vec<LoggedOp>) -> LogRecord {
        let mut txn = LoggedTxn::new(TxnId(id), SessionId(id), 0);
        txn.statements.push("SELECT v FROM kv WHERE k = $1".into());
        txn.ops = ops;
        LogRecord::Finished { txn, outcome: Outcome::Committed, commit_ns: Some(1) }
    }

    fn read(observed: Observed) -> LoggedOp {
        LoggedOp::Read { key: x(), observed, stmt: Some(0) }
    }

    fn beat(below: u64, at: u64) -> Heartbeat {
        Heartbeat { below, appended_before_ns: at, read_at_ns: at }
    }

    fn transactions(events: Vec<Replayed>) -> Vec<Transaction> {
        events
            .into_iter()
            .filter_map(|e| match e {
                Replayed::Transaction(t) => Some(t.txn),
                _ => None,
            })
            .collect()
    }

    /// A version one collector's client wrote, which the other collector's proxy took for pre-history, is
    /// read as that write once merged; ids come out qualified with their collector.
    #[test]
    fn a_read_of_another_collectors_write_is_a_read_of_that_write() {
        let mut m = Merger::new(&[A, B], ClockBounds::uniform(0));
        let w = WriteId(77);
        m.record(A, 0, finished(5, vec![LoggedOp::Write { key: x(), write: w, stmt: Some(0) }])).unwrap();
        m.record(B, 0, finished(5, vec![read(Observed::PreHistory(w.0))])).unwrap();
        m.heartbeat(A, beat(1, 100));
        m.heartbeat(B, beat(1, 100));
        let txns = transactions(m.release().unwrap());
        assert_eq!(txns.len(), 2);
        let reader = txns.iter().find(|t| t.collector == B).unwrap();
        assert!(matches!(reader.ops[..], [Op::Read { observed: Observed::Version(v), .. }] if v == w));
        assert_eq!(reader.id, TxnId(2 << 56 | 5));
        assert_eq!(reader.session, SessionId(2 << 56 | 5));
        let writer = txns.iter().find(|t| t.collector == A).unwrap();
        assert_eq!(writer.id, TxnId(1 << 56 | 5));
        // One statement text from two collectors is one statement of the merged history.
        assert_eq!(m.statements().len(), 1);
        assert_eq!(m.keys().len(), 1);
    }

    /// A reader's event waits until every other collector has shipped what it appended up to the reader's
    /// time plus the drift: until then the writer's records may still be on their way.
    #[test]
    fn events_wait_for_every_other_collectors_watermark_plus_drift() {
        let mut m = Merger::new(&[A, B], ClockBounds::uniform(10));
        m.record(B, 0, finished(5, vec![read(Observed::PreHistory(9))])).unwrap();
        assert!(m.release().unwrap().is_empty(), "not stamped by its own collector yet");
        m.heartbeat(B, beat(1, 100));
        assert!(m.release().unwrap().is_empty(), "A has not been heard from");
        m.heartbeat(A, beat(0, 105));
        assert!(m.release().unwrap().is_empty(), "A's watermark is within the drift of the read");
        assert_eq!(m.holding()[1].held, 1);
        m.heartbeat(A, beat(0, 110));
        assert_eq!(transactions(m.release().unwrap()).len(), 1);
        assert_eq!(m.holding()[1].held, 0);
    }

    /// A collector whose clock has an error bound of its own widens the waits that involve it, and only
    /// those: B's event waits for A's watermark to pass B's time plus A's bound, and for C's to pass B's time.
    #[test]
    fn a_clock_with_a_bound_of_its_own_widens_only_the_waits_it_is_in() {
        const C: CollectorId = CollectorId(3);
        let mut clocks = ClockBounds::uniform(0);
        clocks.errors_ns.insert(A, 30);
        let mut m = Merger::new(&[A, B, C], clocks);
        m.record(B, 0, finished(5, vec![])).unwrap();
        m.heartbeat(B, beat(1, 100));
        m.heartbeat(C, beat(0, 100));
        m.heartbeat(A, beat(0, 129));
        assert!(m.release().unwrap().is_empty(), "A's watermark is within A's bound of the event");
        m.heartbeat(A, beat(0, 130));
        assert_eq!(transactions(m.release().unwrap()).len(), 1, "C's watermark needs no room for drift");
    }

    /// A row the reading proxy never saw may have been deleted through another proxy, so its absence is
    /// not evidence once another collector wrote the key; a key no one else wrote keeps its absence.
    #[test]
    fn an_absence_of_a_key_another_collector_wrote_is_not_evidence() {
        let mut m = Merger::new(&[A, B], ClockBounds::uniform(0));
        m.record(B, 0, finished(5, vec![read(Observed::Absent)])).unwrap();
        m.heartbeat(B, beat(1, 100));
        m.heartbeat(A, beat(0, 100));
        let before = transactions(m.release().unwrap());
        assert!(matches!(before[0].ops[..], [Op::Read { observed: Observed::Absent, .. }]));
        m.record(A, 0, finished(6, vec![LoggedOp::Write { key: x(), write: WriteId(3), stmt: None }]))
            .unwrap();
        m.record(B, 1, finished(7, vec![read(Observed::Absent)])).unwrap();
        m.heartbeat(B, beat(2, 200));
        m.heartbeat(A, beat(1, 200));
        let after = transactions(m.release().unwrap());
        let reader = after.iter().find(|t| t.collector == B).unwrap();
        assert!(matches!(reader.ops[..], [Op::Read { observed: Observed::Unrecorded(_), .. }]), "{reader:?}");
    }

    /// The writes of an intent count from the intent on: a reader can see them before the outcome comes.
    #[test]
    fn a_pending_intents_writes_are_known() {
        let mut m = Merger::new(&[A, B], ClockBounds::uniform(0));
        let mut txn = LoggedTxn::new(TxnId(5), SessionId(5), 0);
        txn.ops.push(LoggedOp::Write { key: x(), write: WriteId(42), stmt: None });
        m.record(A, 0, LogRecord::Intent(txn)).unwrap();
        m.record(B, 0, finished(6, vec![read(Observed::Unrecorded(42))])).unwrap();
        m.heartbeat(A, beat(1, 100));
        m.heartbeat(B, beat(1, 100));
        let txns = transactions(m.release().unwrap());
        assert!(matches!(txns[0].ops[..], [Op::Read { observed: Observed::Version(WriteId(42)), .. }]));
    }

    #[test]
    fn collector_zero_keeps_its_ids_and_an_id_too_large_is_refused() {
        assert_eq!(qualify(CollectorId(0), 17, "transaction id").unwrap(), 17);
        assert!(qualify(CollectorId(256), 1, "transaction id").is_err());
        let err = qualify(CollectorId(1), 1 << 56, "session id").unwrap_err();
        assert!(err.to_string().contains("session id"), "{err}");
    }

    /// A record that overtook an earlier one (a shipper resent what a broken connection lost) waits for it,
    /// and the collector's promises wait with it; a second copy of a record is dropped.
    #[test]
    fn a_record_that_comes_early_waits_for_the_ones_before_it() {
        let mut m = Merger::new(&[A, B], ClockBounds::uniform(0));
        m.heartbeat(B, beat(0, 1_000));
        m.record(A, 0, finished(5, vec![])).unwrap();
        m.record(A, 2, finished(7, vec![])).unwrap();
        m.heartbeat(A, beat(3, 100));
        let mut released = transactions(m.release().unwrap());
        assert_eq!(released.len(), 1, "only record 0: record 1 is missing");
        assert_eq!(m.holding()[0].waiting_for, Some(1));
        assert_eq!(m.holding()[0].complete_before_ns, None, "no promise while a record is missing");
        m.record(A, 1, finished(6, vec![])).unwrap();
        m.record(A, 1, finished(6, vec![])).unwrap();
        m.heartbeat(A, beat(3, 100));
        released.extend(transactions(m.release().unwrap()));
        let ids: Vec<TxnId> = released.iter().map(|t| t.id).collect();
        assert_eq!(ids, [5, 6, 7].map(|id| TxnId(1 << 56 | id)));
        assert_eq!(m.holding()[0].waiting_for, None);
    }

    /// Records 1 and 2 of A never arrive: one wrote x = w2, the other was an intent whose outcome (record 3)
    /// did arrive. Once the hole is given up on, verification goes on; reads of w2, by A's proxy (which
    /// recorded it: `Version`) and by B's (which did not: `Foreign`), are unverifiable, not garbage reads
    /// or unowned versions; the orphaned outcome is dropped and counted; status lists the hole.
    #[test]
    fn a_hole_given_up_on_makes_what_it_held_unverifiable() {
        let mut m = Merger::new(&[A, B], ClockBounds::uniform(0));
        let (w1, w2) = (WriteId(41), WriteId(42));
        m.record(A, 0, finished(5, vec![LoggedOp::Write { key: x(), write: w1, stmt: None }])).unwrap();
        m.record(A, 3, LogRecord::Outcome { txn: TxnId(7), outcome: Outcome::Committed, commit_ns: Some(2) })
            .unwrap();
        m.record(A, 4, finished(8, vec![read(Observed::Version(w2))])).unwrap();
        m.record(B, 0, finished(9, vec![read(Observed::Foreign(w2.0)), read(Observed::PreHistory(w1.0))]))
            .unwrap();
        m.heartbeat(A, beat(5, 100));
        m.heartbeat(B, beat(1, 100));
        let mut released = transactions(m.release().unwrap());
        assert_eq!(released.len(), 1, "only record 0 of A: the rest waits for record 1");
        assert_eq!(m.holding()[0].waiting_for, Some(1));

        assert_eq!(m.skip_hole(A).unwrap(), Some(Hole { from: 1, to: 3 }));
        assert_eq!(m.skip_hole(A).unwrap(), None, "nothing else is missing");
        m.heartbeat(A, beat(5, 100));
        released.extend(transactions(m.release().unwrap()));
        let ids: Vec<TxnId> = released.iter().map(|t| t.id).collect();
        assert_eq!(ids.len(), 3, "{ids:?}");
        let by = |id: TxnId| released.iter().find(|t| t.id == id).unwrap();
        let a_reader = by(TxnId(1 << 56 | 8));
        assert!(matches!(a_reader.ops[..], [Op::Read { observed: Observed::Unrecorded(42), .. }]));
        let b_reader = by(TxnId(2 << 56 | 9));
        assert!(
            matches!(
                b_reader.ops[..],
                [
                    Op::Read { observed: Observed::Unrecorded(42), .. },
                    Op::Read { observed: Observed::Version(v), .. }
                ] if v == w1
            ),
            "{b_reader:?}"
        );
        let a = &m.holding()[0];
        assert_eq!(
            (a.waiting_for, a.holes.clone(), a.lost_to_holes),
            (None, vec![Hole { from: 1, to: 3 }], 1)
        );
    }
}
