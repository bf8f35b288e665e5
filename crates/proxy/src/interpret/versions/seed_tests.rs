use history::log::{DiskLog, Durability, HistoryLog, LoggedOp, LoggedTxn, encode_framed};
use history::{KeyName, Observed, Outcome, RecordingHorizon, SessionId, TxnId, WriteId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn key(k: u32) -> KeyName {
    KeyName { namespace: "t".into(), bytes: k.to_string().into_bytes() }
}

/// What one run of a proxy appends: random transactions in a few sessions (finished, or an intent with
/// its outcome, or, if the run crashes, an intent left without one), their database ids, writes a read
/// discovered of this run's or an earlier run's transactions, and resolutions of the crash window it
/// inherited.
fn run(log: &DiskLog, rng: &mut StdRng, window: &[(TxnId, u32)], earlier: &mut Vec<TxnId>, crashes: bool) {
    let base = log.txn_id_floor().0;
    if base == 0 {
        let _ = log.append_horizon(&RecordingHorizon::from_xmin(100)).unwrap();
    }
    for (txn, _) in window {
        if rng.gen_bool(0.7) {
            let _ = log.append_resolved(*txn, Outcome::Committed).unwrap();
        }
    }
    let sessions = rng.gen_range(1..4u64);
    let mut next = base;
    for s in 0..sessions {
        let session = SessionId(base * 10 + s + 1);
        for seq in 0..rng.gen_range(1..6u64) {
            let id = TxnId(next);
            next += 1;
            let mut txn = LoggedTxn::new(id, session, seq);
            for _ in 0..rng.gen_range(0..4) {
                let k = key(rng.gen_range(0..20));
                txn.ops.push(match rng.gen_bool(0.5) {
                    true => LoggedOp::Write { key: k, write: WriteId(rng.r#gen()), stmt: None },
                    false => LoggedOp::Read { key: k, observed: Observed::PreHistory(1), stmt: None },
                });
            }
            let xid = 1000 + id.0 as u32;
            let last_of_a_crashing_run = crashes && s + 1 == sessions;
            match rng.gen_range(0..3) {
                0 if !last_of_a_crashing_run => {
                    let outcome = if rng.gen_bool(0.8) { Outcome::Committed } else { Outcome::Aborted };
                    let _ = log.append_finished(txn, outcome, Some(id.0)).unwrap();
                    let _ = log.append_xids(id, Some(xid), vec![xid]).unwrap();
                }
                _ => {
                    let _ = log.append_intent(txn).unwrap();
                    let _ = log.append_xids(id, Some(xid), vec![xid, xid + 500]).unwrap();
                    if !last_of_a_crashing_run {
                        let _ = log.append_outcome(id, Outcome::Committed, Some(id.0)).unwrap();
                    }
                }
            }
            earlier.push(id);
            if rng.gen_bool(0.3) {
                let writer = earlier[rng.gen_range(0..earlier.len())];
                let _ = log.append_discovered_write(writer, key(rng.gen_range(0..20)), WriteId(rng.r#gen()));
            }
            if last_of_a_crashing_run {
                break;
            }
        }
        if !(crashes && s + 1 == sessions) {
            let _ = log.append_session_ended(session, None).unwrap();
        }
    }
}

/// The checkpoint of `log` as a replay of all of it gives, into a fresh book: the oracle, written as the
/// proxy seeded its book before checkpoints (one replay of the whole log, nothing from `advance`).
fn from_the_whole_log(log: &DiskLog) -> BookCheckpoint {
    let end = history::log::retention::Cut { seq: log.next_seq(), txns_below: log.txn_id_floor() };
    from_the_records_below(log, end)
}

fn stored(log: &DiskLog) -> BookCheckpoint {
    decode_framed(&log.checkpoint(CHECKPOINT_NAME).unwrap().expect("a stored checkpoint")).unwrap()
}

#[test]
fn a_checkpoint_advanced_by_the_tail_equals_one_from_the_whole_log() {
    // How many starts inherited a crash window, so the test is known to cover resolutions.
    let mut windows = 0;
    for case in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(case);
        let dir = tempfile::tempdir().unwrap();
        let mut earlier = Vec::new();
        let runs = rng.gen_range(2..6);
        for r in 0..runs {
            let log = DiskLog::open(dir.path(), Durability::None).unwrap();
            // Each start seeds a fresh book, as the proxy does, which stores the checkpoint.
            let book = VersionBook::new();
            let (w, seeded) = seed(&book, &log).unwrap();
            assert_eq!(seeded.from_checkpoint, r > 0, "case {case}, run {r}");
            assert_eq!(stored(&log), from_the_whole_log(&log), "case {case}, run {r}: the stored checkpoint");
            assert_eq!(w, from_the_whole_log(&log).crash_window, "case {case}, run {r}: the crash window");
            let window = w;
            windows += usize::from(!window.is_empty());
            let crashes = rng.gen_bool(0.4);
            run(&log, &mut rng, &window, &mut earlier, crashes);
            if crashes {
                log.drop_as_if_crashed();
            } else {
                log.close().unwrap();
            }
        }
        let log = DiskLog::open(dir.path(), Durability::None).unwrap();
        let before = stored(&log);
        let book = VersionBook::new();
        let (_, seeded) = seed(&book, &log).unwrap();
        let whole = from_the_whole_log(&log);
        assert!(seeded.from_checkpoint);
        assert_eq!(
            seeded.records_replayed,
            log.next_seq() - before.covers,
            "case {case}: only the tail is read"
        );
        assert_eq!(stored(&log), whole, "case {case}");
        assert!(!whole.written.is_empty() && !whole.owned.is_empty(), "case {case}: {whole:?}");
        // The book itself holds what the checkpoint says.
        let mut live =
            BookCheckpoint { covers: whole.covers, txns_below: whole.txns_below, ..Default::default() };
        book.save(&mut live);
        live.crash_window = whole.crash_window.clone();
        assert_eq!(live, whole, "case {case}: the seeded book");
    }
    assert!(windows >= 10, "{windows} starts with a crash window");
}

#[test]
fn a_checkpoint_that_does_not_serve_is_dropped_for_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    let log = DiskLog::open(dir.path(), Durability::None).unwrap();
    run(&log, &mut rng, &[], &mut Vec::new(), false);
    let whole = from_the_whole_log(&log);
    for bad in [
        b"not a checkpoint".to_vec(),
        // Ahead of the log.
        encode_framed(&BookCheckpoint { covers: log.next_seq() + 5, ..whole.clone() }).unwrap(),
        // A tail that does not replay on it: it starts in the middle of a transaction's records.
        encode_framed(&BookCheckpoint { covers: 2, txns_below: 0, ..BookCheckpoint::default() }).unwrap(),
    ] {
        log.store_checkpoint(CHECKPOINT_NAME, &bad).unwrap();
        let book = VersionBook::new();
        let (_, seeded) = seed(&book, &log).unwrap();
        assert!(!seeded.from_checkpoint);
        assert_eq!(seeded.records_replayed, log.next_seq());
        assert_eq!(stored(&log), whole);
    }
    log.close().unwrap();
}

/// `c` with its owners sorted. The book evicts owners oldest first in the order it learnt them, and a
/// checkpoint advanced cut by cut learns a transaction that appended after a cut after the larger ids
/// before it, where one replay of the whole log sorts them all. Either order is safe: the book remembers
/// the newest id it evicted, and treats every unowned id up to it as possibly owned.
fn owners_sorted(mut c: BookCheckpoint) -> BookCheckpoint {
    c.owned.sort_unstable();
    c
}

/// The checkpoint a replay of the records below `cut` gives, into a fresh book: the oracle for a
/// checkpoint advanced to a cut in the middle of a run.
fn from_the_records_below(log: &DiskLog, cut: history::log::retention::Cut) -> BookCheckpoint {
    let records = log.tail(0).take_while(|r| r.as_ref().map_or(true, |(seq, _)| *seq < cut.seq));
    let (h, mut xids) = history::log::replay::replay_keeping_xids(records).unwrap();
    let book = VersionBook::new();
    book.seed_from(&h);
    let mut owned: Vec<_> = xids.iter().map(|(id, x)| (*id, x.xids.clone())).collect();
    owned.sort_unstable_by_key(|(id, _)| *id);
    for (id, x) in owned {
        book.own(&x, id);
    }
    let crash_window = h
        .transactions
        .iter()
        .filter(|t| t.outcome == Outcome::Indeterminate)
        .filter_map(|t| Some((t.id, xids.remove(&t.id)?.top?)))
        .collect();
    let mut c = BookCheckpoint {
        covers: cut.seq,
        txns_below: cut.txns_below.0,
        crash_window,
        ..BookCheckpoint::default()
    };
    book.save(&mut c);
    c
}

/// A run whose sessions take their transaction ids at `BEGIN` and append their records later, in between
/// one another's, so that ids are appended out of order and some straddle the cuts the log takes; the
/// version book's checkpoint is advanced to the latest cut now and then, as `krait serve` does.
fn run_advancing(log: &DiskLog, rng: &mut StdRng) -> usize {
    let mut next = log.txn_id_floor().0;
    let mut begun: Vec<TxnId> = Vec::new();
    let mut advanced = 0;
    let session = SessionId(next * 10 + 7);
    let mut seq = 0;
    for _ in 0..rng.gen_range(20..80) {
        if begun.is_empty() || rng.gen_bool(0.4) {
            begun.push(TxnId(next));
            next += 1;
            continue;
        }
        let id = begun.swap_remove(rng.gen_range(0..begun.len()));
        let mut txn = LoggedTxn::new(id, session, seq);
        seq += 1;
        for _ in 0..rng.gen_range(1..4) {
            let k = key(rng.gen_range(0..20));
            txn.ops.push(LoggedOp::Write { key: k, write: WriteId(rng.r#gen()), stmt: None });
        }
        let xid = 1000 + id.0 as u32;
        if rng.gen_bool(0.5) {
            let _ = log.append_finished(txn, Outcome::Committed, Some(id.0)).unwrap();
        } else {
            let _ = log.append_intent(txn).unwrap();
            let _ = log.append_outcome(id, Outcome::Committed, Some(id.0)).unwrap();
        }
        let _ = log.append_xids(id, Some(xid), vec![xid]).unwrap();
        if rng.gen_bool(0.2) {
            let _ = log.append_discovered_write(id, key(rng.gen_range(0..20)), WriteId(rng.r#gen()));
        }
        if rng.gen_bool(0.2) {
            // Cuts count once the records before them are durable.
            log.sync().unwrap();
            let before = stored(log).covers;
            let cut = log.clean_cut().expect("a log takes a cut at every open");
            let covers = advance_to_cut(log).unwrap();
            assert_eq!(covers, Some(cut.seq.max(before)));
            if cut.seq > before {
                let expected = owners_sorted(from_the_records_below(log, cut));
                assert_eq!(owners_sorted(stored(log)), expected, "the checkpoint at {cut:?}");
                advanced += 1;
            }
        }
    }
    advanced
}

#[test]
fn a_checkpoint_advanced_to_a_cut_in_the_middle_of_a_run_equals_one_from_the_whole_log() {
    let mut advanced = 0;
    for case in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(1_000 + case);
        let dir = tempfile::tempdir().unwrap();
        let mut options = history::log::LogOptions::new(Durability::None);
        options.cut_every_bytes = rng.gen_range(200..1_200);
        let mut earlier = Vec::new();
        for r in 0..rng.gen_range(2..5) {
            let log = DiskLog::open_with(dir.path(), options).unwrap();
            let book = VersionBook::new();
            let (window, _) = seed(&book, &log).unwrap();
            let whole = owners_sorted(from_the_whole_log(&log));
            assert_eq!(owners_sorted(stored(&log)), whole, "case {case}, run {r}: the stored checkpoint");
            run(&log, &mut rng, &window, &mut earlier, false);
            advanced += run_advancing(&log, &mut rng);
            match rng.gen_bool(0.4) {
                true => log.drop_as_if_crashed(),
                false => log.close().unwrap(),
            }
        }
        // The next start replays from a cut in the middle of the last run, and gets what the whole log says.
        let log = DiskLog::open_with(dir.path(), options).unwrap();
        let (_, seeded) = seed(&VersionBook::new(), &log).unwrap();
        assert!(seeded.from_checkpoint, "case {case}");
        assert_eq!(owners_sorted(stored(&log)), owners_sorted(from_the_whole_log(&log)), "case {case}");
    }
    assert!(advanced >= 40, "{advanced} checkpoints advanced to a cut");
}

/// A book restored from a checkpoint finds every write id the checkpoint lists, whichever shard holds it,
/// and none it does not: `contains` is what tells a recorded version from an unrecorded writer's.
#[test]
fn a_restored_book_finds_every_write_id_of_its_checkpoint() {
    let mut rng = StdRng::seed_from_u64(11);
    let ids: Vec<u64> = (0..5_000).map(|_| rng.r#gen()).collect();
    let (kept, absent) = ids.split_at(4_000);
    let book = VersionBook::new();
    book.restore(&BookCheckpoint { written: kept.to_vec(), ..Default::default() });
    assert_eq!(book.len(), kept.len());
    assert!(kept.iter().all(|&id| book.contains(WriteId(id))), "a checkpointed id is missing");
    assert!(!absent.iter().any(|&id| book.contains(WriteId(id))), "an id never recorded is found");
    let mut saved = BookCheckpoint::default();
    book.save(&mut saved);
    let mut sorted = kept.to_vec();
    sorted.sort_unstable();
    assert_eq!(saved.written, sorted);
}
