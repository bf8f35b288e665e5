//! Seeding the version book at start from the log earlier runs wrote, without reading all of it (issue 19,
//! item 5).
//!
//! Each start replays the log to seed the book ([`VersionBook::seed_from`]) and stores what it derived as a
//! [`BookCheckpoint`] in the log ([`history::log::HistoryLog::store_checkpoint`]). The next start restores
//! the checkpoint and replays only the records after it ([`history::log::replay::replay_tail`]): the runs
//! since. Start-up then reads what the last runs wrote, not the whole log; what it still loads grows with
//! the book (8 bytes or so per recorded version and per key seen).
//!
//! The checkpoint holds only what the records below [`BookCheckpoint::covers`] say, never the book's live
//! state: a live book may hold a version whose record was never appended, and a seeded one must not. A
//! checkpoint restored and then advanced by the records after it equals one derived from the whole log
//! (`tests::a_checkpoint_advanced_by_the_tail_equals_one_from_the_whole_log`), so a read is classified the
//! same either way. A checkpoint that does not decode or cannot be advanced (its tail does not replay) is
//! dropped with a warning, and the whole log is replayed instead.

use std::collections::{HashMap, HashSet};

use history::log::{HistoryLog, ReplayedTail, TxnXids, decode_framed, encode_framed_large};
use history::{LogError, Outcome, RecordingHorizon, TxnId};
use serde::{Deserialize, Serialize};

use super::{OwnedXids, VersionBook};

/// The name the checkpoint is stored under in the log.
pub const CHECKPOINT_NAME: &str = "version-book";

/// What the records of a log below [`BookCheckpoint::covers`] put in the version book and the crash
/// window: a start restores it and replays only the records from `covers` on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookCheckpoint {
    /// Every record below this sequence number is in it. It is where a run began (no session of the run
    /// that stored it had appended yet), so the records after it cite nothing before it but earlier
    /// transactions ([`history::log::Replayer::after`]).
    pub covers: u64,
    /// Every transaction id below it had its records below `covers`.
    pub txns_below: u64,
    /// The recording horizon.
    pub horizon: Option<RecordingHorizon>,
    /// The recorded write ids, sorted.
    pub written: Vec<u64>,
    /// The hashes of the keys seen, sorted.
    pub seen: Vec<u64>,
    /// The database ids the book remembers owners for, oldest first.
    pub owned: Vec<(u32, TxnId)>,
    /// The newest database id the book forgot.
    pub newest_evicted: Option<u32>,
    /// Transactions without an outcome whose top-level database id is known, for the first session to
    /// resolve.
    pub crash_window: Vec<(TxnId, u32)>,
}

/// How a start seeded the book, for its log line and for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seeded {
    /// Whether it started from a stored checkpoint.
    pub from_checkpoint: bool,
    /// The records it replayed.
    pub records_replayed: u64,
    /// The versions the book holds.
    pub versions: usize,
}

impl VersionBook {
    /// Adds every write of a replayed history (a restart's earlier runs), the keys it saw and its recording
    /// horizon.
    pub fn seed_from(&self, h: &history::History) {
        if let Some(horizon) = &h.horizon {
            self.set_horizon(horizon.clone());
        }
        for t in &h.transactions {
            for op in &t.ops {
                if let history::Op::Write { write, .. } = op {
                    self.insert(*write);
                }
                if let Some(name) = h.keys.name(op.key()) {
                    self.saw(name);
                }
            }
        }
    }

    /// Empties the book and fills it with `c`'s versions, keys, owners and horizon.
    fn restore(&self, c: &BookCheckpoint) {
        if let Some(horizon) = &c.horizon {
            self.set_horizon(horizon.clone());
        }
        // One pass over the checkpoint's ids, not one per shard: a restore runs at every start.
        let mut ids: [Vec<(history::WriteId, ())>; super::WRITTEN_SHARDS] = Default::default();
        for &id in &c.written {
            let id = history::WriteId(id);
            ids[super::written_shard(id)].push((id, ()));
        }
        for (shard, ids) in self.written.iter().zip(ids) {
            if let Ok(mut w) = shard.lock() {
                *w = ids.into_iter().collect();
            }
        }
        if let Ok(mut s) = self.seen.lock() {
            *s = c.seen.iter().copied().collect();
        }
        if let Ok(mut o) = self.owners.lock() {
            *o = OwnedXids {
                owner: c.owned.iter().copied().collect(),
                order: c.owned.iter().map(|(xid, _)| *xid).collect(),
                newest_evicted: c.newest_evicted,
            };
        }
    }

    /// The book's versions, keys, owners and horizon, into `c`.
    fn save(&self, c: &mut BookCheckpoint) {
        c.horizon = self.horizon().cloned();
        c.written = Vec::new();
        for shard in &self.written {
            if let Ok(w) = shard.lock() {
                c.written.extend(w.iter().map(|(id, ())| id.0));
            }
        }
        c.written.sort_unstable();
        c.written.dedup();
        c.seen = self.seen.lock().map(|s| s.iter().copied().collect()).unwrap_or_default();
        c.seen.sort_unstable();
        if let Ok(o) = self.owners.lock() {
            c.owned = o.order.iter().filter_map(|xid| Some((*xid, *o.owner.get(xid)?))).collect();
            c.newest_evicted = o.newest_evicted;
        }
    }
}

/// Seeds `book` from `log`: from its checkpoint and the records after it, or from the whole log when it
/// has none that serves. Stores the new checkpoint and returns the crash window with how it went. Call
/// before any session of this run appends.
pub fn seed(book: &VersionBook, log: &dyn HistoryLog) -> Result<(Vec<(TxnId, u32)>, Seeded), LogError> {
    let covers = log.next_seq();
    let txns_below = log.txn_id_floor();
    let stored = match log.checkpoint(CHECKPOINT_NAME) {
        Ok(Some(bytes)) => match decode_framed::<BookCheckpoint>(&bytes) {
            Ok(c) if c.covers <= covers && c.txns_below <= txns_below.0 => Some(c),
            Ok(c) => {
                tracing::warn!(
                    checkpoint_covers = c.covers,
                    log_records = covers,
                    "the version book's checkpoint is ahead of the log; replaying the whole log"
                );
                None
            }
            Err(e) => {
                tracing::warn!("the version book's checkpoint is unreadable ({e}); replaying the whole log");
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            tracing::warn!("cannot read the version book's checkpoint ({e}); replaying the whole log");
            None
        }
    };
    let advanced = stored.and_then(|c| match advance(book, log, &c, covers) {
        Ok(advanced) => Some(advanced),
        Err(e) => {
            tracing::warn!(
                checkpoint_covers = c.covers,
                "the log after the version book's checkpoint does not replay on it ({e}); replaying the whole log"
            );
            None
        }
    });
    let (mut next, from_checkpoint, records_replayed) = match advanced {
        Some((next, replayed)) => (next, true, replayed),
        None => {
            let (next, replayed) = advance(book, log, &BookCheckpoint::default(), covers)?;
            (next, false, replayed)
        }
    };
    next.txns_below = txns_below.0;
    // Nothing appended since the stored checkpoint: it is the one this start would store.
    let unchanged = from_checkpoint && records_replayed == 0;
    let stored = if unchanged { Ok(()) } else { store(log, &next) };
    if let Err(e) = stored {
        // The book is seeded either way; the next start replays more.
        tracing::warn!("cannot store the version book's checkpoint: {e}");
    }
    let seeded = Seeded { from_checkpoint, records_replayed, versions: book.len() };
    Ok((next.crash_window, seeded))
}

/// Moves the log's version-book checkpoint forward to its latest durable cut ([`HistoryLog::clean_cut`]),
/// so that retention may delete the records before it (`history::log::retention`); returns the records the
/// checkpoint covers now, or `None` when the log has none that decodes (then nothing before the run may
/// go).
///
/// The checkpoint is advanced the way a start advances it, by the records from where it stood to the cut,
/// but on a book of its own: the running book holds versions whose records may not be in the log yet, and
/// a checkpoint must hold only what the records say. A cut has no intent pending before it and the records
/// after it cite nothing before it, so the next start replays from it as it replays from a run's start
/// (`tests::a_checkpoint_advanced_to_a_cut_in_the_middle_of_a_run_equals_one_from_the_whole_log`).
pub fn advance_to_cut(log: &dyn HistoryLog) -> Result<Option<u64>, LogError> {
    let Some(bytes) = log.checkpoint(CHECKPOINT_NAME)? else { return Ok(None) };
    let Ok(stored) = decode_framed::<BookCheckpoint>(&bytes) else { return Ok(None) };
    let Some(cut) = log.clean_cut().filter(|cut| cut.seq > stored.covers) else {
        return Ok(Some(stored.covers));
    };
    let (mut next, _) = advance(&VersionBook::new(), log, &stored, cut.seq)?;
    next.txns_below = cut.txns_below.0;
    store(log, &next)?;
    Ok(Some(next.covers))
}

/// Stores `c` as the log's version-book checkpoint.
fn store(log: &dyn HistoryLog, c: &BookCheckpoint) -> Result<(), LogError> {
    encode_framed_large(&[], c)
        .map_err(|e| LogError::Storage(format!("the version book's checkpoint: {e}")))
        .and_then(|bytes| log.store_checkpoint(CHECKPOINT_NAME, &bytes))
}

/// Restores `c` into `book`, replays the records from `c.covers` up to `covers` on it, and returns the
/// checkpoint at `covers` with the number of records replayed.
fn advance(
    book: &VersionBook,
    log: &dyn HistoryLog,
    c: &BookCheckpoint,
    covers: u64,
) -> Result<(BookCheckpoint, u64), LogError> {
    let mut replayed = 0u64;
    let records =
        log.tail(c.covers).take_while(|r| r.as_ref().map_or(true, |(seq, _)| *seq < covers)).inspect(|r| {
            if r.is_ok() {
                replayed += 1;
            }
        });
    let tail = history::log::replay::replay_tail(records, TxnId(c.txns_below))?;
    book.restore(c);
    let crash_window = apply_tail(book, c.crash_window.clone(), tail);
    let mut next =
        BookCheckpoint { covers, txns_below: c.txns_below, crash_window, ..BookCheckpoint::default() };
    book.save(&mut next);
    Ok((next, replayed))
}

/// Adds what `tail` recorded to `book`: its versions, the keys it saw and its horizon; the ids its
/// transactions own, oldest first, so the book keeps the newest; the writes it discovered of earlier
/// transactions. Returns the crash window: `window` less what the tail resolved, and the tail's own
/// transactions left without an outcome whose top-level id is known.
fn apply_tail(
    book: &VersionBook,
    mut window: Vec<(TxnId, u32)>,
    mut tail: ReplayedTail,
) -> Vec<(TxnId, u32)> {
    book.seed_from(&tail.history);
    for (_, key, write) in &tail.earlier.discovered {
        book.insert(*write);
        book.saw(key);
    }
    let mut owned: Vec<(&TxnId, &TxnXids)> = tail.xids.iter().collect();
    owned.sort_unstable_by_key(|(id, _)| **id);
    for (id, x) in owned {
        book.own(&x.xids, *id);
    }
    let resolved: HashSet<TxnId> = tail.earlier.resolved.iter().map(|(txn, _)| *txn).collect();
    window.retain(|(txn, _)| !resolved.contains(txn));
    let xids: &mut HashMap<TxnId, TxnXids> = &mut tail.xids;
    window.extend(
        tail.history
            .transactions
            .iter()
            .filter(|t| t.outcome == Outcome::Indeterminate)
            .filter_map(|t| Some((t.id, xids.remove(&t.id)?.top?))),
    );
    window
}

#[cfg(test)]
#[path = "seed_tests.rs"]
mod tests;
