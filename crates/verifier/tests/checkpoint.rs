//! The online verifier's checkpoint (issue 20, item 4): a feeder stopped anywhere in a log, stored, restored
//! and fed the rest ends where reading the whole log in one go ends, on random logs with everything a proxy
//! writes (intents waiting for outcomes, fences, statements, sessions that end, discovered writes, crashes
//! and their Recovery records, stale reads that are rejected), at serializability (which collects garbage),
//! snapshot isolation and `declared` (which keep every transaction). And `krait serve`'s tailer resumes from the
//! checkpoint it stored, without reading the log again: the test prints how long that took against reading
//! the whole log. The verifier that many edges feed (`krait serve --verify-only`) resumes likewise from the
//! checkpoint file that holds its merger and its place in the stream.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use history::log::merge::{Heartbeat, Merger};
use history::log::{HistoryLog, LogRecord, LoggedOp, LoggedTxn};
use history::{
    ClockBounds, CollectorId, DiskLog, Durability, KeyName, Observed, Outcome, SessionId, TxnId, WriteId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use verifier::online::edges::{EdgesCheckpoint, StreamPosition};
use verifier::online::{CheckpointError, Feeder, Tailer};
use verifier::{Level, Options, RoundOptions, RoundStats};

use common::random_log::{fence_key, key, random_log, random_log_losing_writers, random_log_of};

/// What a feeder ended with, without timings.
#[derive(Debug, PartialEq)]
struct Ended {
    counts: [u64; 10],
    rounds: Vec<RoundStats>,
    rejects: Vec<String>,
    epoch_agree: u64,
    pending: Vec<TxnId>,
    gc_stopped: Option<String>,
}

fn ended(feeder: &mut Feeder) -> Ended {
    let s = feeder.status();
    let v = feeder.verifier();
    let rounds = v.rounds().iter().map(|r| RoundStats { verify_ms: 0.0, gc_ms: 0.0, ..r.clone() }).collect();
    let mut pending: Vec<TxnId> = feeder.replayer().pending().collect();
    pending.sort();
    Ended {
        counts: [
            s.records_read,
            s.txns_read,
            s.committed,
            s.indeterminate,
            s.ops_read,
            s.verified,
            v.deleted(),
            v.live_transactions() as u64,
            v.tombstones() as u64,
            v.links_added(),
        ],
        rounds,
        rejects: s.reject_lines,
        epoch_agree: v.epoch_agree(),
        pending,
        gc_stopped: s.gc_stopped,
    }
}

fn options(round_size: usize) -> RoundOptions {
    RoundOptions { round_size, round_interval: None, ..RoundOptions::default() }
}

/// Reads the log from `feeder` on and runs a last round.
fn to_the_end(mut feeder: Feeder, log: &DiskLog) -> Ended {
    feeder.read_log(log, usize::MAX).expect("reads");
    feeder.finish().expect("a last round");
    ended(&mut feeder)
}

#[test]
fn a_feeder_restored_anywhere_ends_where_reading_the_whole_log_ends() {
    let mut rng = StdRng::seed_from_u64(0xc4ec_0001);
    let (mut cases, mut rejected, mut collected, mut splits) = (0, 0, 0, 0);
    for case in 0..300 {
        let dir = tempfile::tempdir().expect("a temp dir");
        // A third of the logs have gaps, where a crash lost writers that later transactions read: the
        // restored feeder must still know that it read past a gap.
        let log = match case % 3 {
            0 => random_log_losing_writers(&mut rng, &dir.path().join("log")),
            _ => random_log(&mut rng, &dir.path().join("log")),
        };
        let round_size = [1, 3, 8, 1_000][rng.gen_range(0..4)];
        // Mostly serializability, which collects garbage; the others keep every transaction and verify
        // them all again each round.
        let level = [Level::Serializable, Level::Serializable, Level::Declared, Level::SnapshotIsolation]
            [rng.gen_range(0..4)];
        let options = |round_size| RoundOptions {
            verify: Options { level, ..Options::default() },
            ..options(round_size)
        };
        let whole = to_the_end(Feeder::new(options(round_size), None), &log);
        let records = log.next_seq();
        for _ in 0..4 {
            let split = rng.gen_range(0..=records) as usize;
            let mut first = Feeder::new(options(round_size), None);
            assert_eq!(first.read_log(&log, split).expect("reads"), split);
            let bytes = first.checkpoint().expect("the state encodes");
            drop(first);
            let restored = Feeder::from_checkpoint(&bytes, options(round_size), None).expect("it restores");
            assert_eq!(restored.next_seq(), split as u64);
            let resumed = to_the_end(restored, &log);
            assert_eq!(
                resumed,
                whole,
                "case {case}, {}, round size {round_size}: stopped at record {split} of {records}",
                level.name()
            );
            splits += 1;
        }
        cases += 1;
        rejected += usize::from(!whole.rejects.is_empty());
        collected += whole.counts[6];
    }
    println!("{cases} logs, {splits} restores; {rejected} logs rejected, {collected} transactions collected");
    assert!(rejected > cases / 10 && rejected < cases * 9 / 10, "both verdicts should occur: {rejected}");
    assert!(collected > 0, "collection should have run");
}

#[test]
fn a_checkpoint_made_for_another_question_or_another_log_is_not_used() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = random_log(&mut StdRng::seed_from_u64(7), &dir.path().join("log"));
    let mut feeder = Feeder::new(options(5), None);
    feeder.read_log(&log, usize::MAX).expect("reads");
    let bytes = feeder.checkpoint().expect("the state encodes");

    let mut strict = options(5);
    strict.verify.level = Level::StrictSerializable;
    let other = Feeder::from_checkpoint(&bytes, strict, None).err().expect("another level is refused");
    assert!(matches!(other, CheckpointError::OtherBasis { .. }), "{other}");
    assert!(other.to_string().contains("strict-serializable"), "{other}");

    let mut damaged = bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x55;
    let damaged = Feeder::from_checkpoint(&damaged, options(5), None).err().expect("damage is refused");
    assert!(matches!(damaged, CheckpointError::Decode(_)), "{damaged}");

    let mut newer = bytes.clone();
    newer[0] = newer[0].wrapping_add(1);
    let newer = Feeder::from_checkpoint(&newer, options(5), None).err().expect("another format is refused");
    assert!(matches!(newer, CheckpointError::Format { .. }), "{newer}");

    // A log that holds fewer records than the checkpoint covers is not the log it was made from.
    log.store_checkpoint(verifier::online::CHECKPOINT_NAME, &bytes).expect("stored");
    let fresh = DiskLog::open(dir.path().join("other"), Durability::Strict).expect("another log");
    fresh.store_checkpoint(verifier::online::CHECKPOINT_NAME, &bytes).expect("stored");
    let (resumed, started) = Feeder::resume(&fresh, options(5), None);
    assert_eq!((resumed.next_seq(), started.resumed_at), (0, None));
    assert!(started.not_used.as_deref().is_some_and(|w| w.contains("covers")), "{started:?}");
    let (resumed, started) = Feeder::resume(&log, options(5), None);
    assert_eq!(started.resumed_at, Some(log.next_seq()), "{started:?}");
    assert_eq!(resumed.next_seq(), log.next_seq());
}

/// A log of `n` transactions of the chengRW shape (issue 20: each reads 4 and then writes 4 of `keys` keys
/// chosen uniformly) in 8 sessions, with a fence every 20 transactions of each, as a proxy leaves it.
fn long_log(dir: &Path, n: u64, keys: u32) -> Arc<DiskLog> {
    let log = DiskLog::open(dir.join("log"), Durability::Group).expect("the log opens");
    let mut rng = StdRng::seed_from_u64(0x10_9106);
    let mut store: HashMap<KeyName, Observed> = HashMap::new();
    let mut seqs = [0u64; 8];
    for i in 0..n {
        let s = (i % 8) as usize;
        let mut t = LoggedTxn::new(TxnId(i + 1), SessionId(s as u64), seqs[s]);
        seqs[s] += 1;
        let mut writes = Vec::new();
        if seqs[s] % 20 == 0 {
            t.fence = true;
            let seen = store.get(&fence_key()).copied().unwrap_or(Observed::PreHistory(0));
            t.ops.push(LoggedOp::Read { key: fence_key(), observed: seen, stmt: None });
            writes.push(fence_key());
        } else {
            for _ in 0..4 {
                let k = key(rng.gen_range(0..keys));
                let seen = store.get(&k).copied().unwrap_or(Observed::PreHistory(0));
                t.ops.push(LoggedOp::Read { key: k, observed: seen, stmt: None });
            }
            writes.extend((0..4).map(|_| key(rng.gen_range(0..keys))));
        }
        for (j, k) in writes.into_iter().enumerate() {
            let w = WriteId(4 * i + j as u64 + 1);
            t.ops.push(LoggedOp::Write { key: k.clone(), write: w, stmt: None });
            store.insert(k, Observed::Version(w));
        }
        let _ = log.append_finished(t, Outcome::Committed, Some(i)).expect("finished");
    }
    log.close().expect("closed");
    Arc::new(log)
}

#[test]
fn a_restarted_tailer_resumes_from_its_checkpoint_instead_of_reading_the_log_again() {
    let n = 100_000;
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = long_log(dir.path(), n, 10_000);
    let options = || RoundOptions::online(10_000, Duration::from_secs(3600));

    let start = Instant::now();
    let first = Tailer::spawn(log.clone(), options(), None, |_, _| {}).expect("the tailer starts");
    let first = first.finish().expect("the tailer finishes");
    let whole = start.elapsed();
    assert_eq!((first.verified, first.rejects), (n, 0), "{first:?}");
    let started = first.started.as_ref().expect("it says how it started");
    assert_eq!(started.resumed_at, None, "a new log has no checkpoint: {started:?}");
    assert_eq!(first.checkpoint_covers, Some(log.next_seq()), "it stores one as it stops: {first:?}");

    let start = Instant::now();
    let second = Tailer::spawn(log.clone(), options(), None, |_, _| {}).expect("the tailer restarts");
    let second = second.finish().expect("the tailer finishes");
    let resume = start.elapsed();
    let started = second.started.as_ref().expect("it says how it started");
    assert_eq!(started.resumed_at, Some(log.next_seq()), "{started:?}");
    assert_eq!((second.verified, second.txns_read, second.rounds), (n, n, first.rounds), "{second:?}");
    let stored = log.checkpoint(verifier::online::CHECKPOINT_NAME).expect("reads").expect("stored");
    println!(
        "{n} transactions: verifying the whole log took {:.2} s; restarting from the checkpoint took {:.3} s \
         (restoring it {:.3} s); the checkpoint is {} KB, {} live transactions",
        whole.as_secs_f64(),
        resume.as_secs_f64(),
        started.took.as_secs_f64(),
        stored.len() / 1024,
        second.live
    );
}

/// Under `durability = none` the feeder reads records a crash may still lose, so no checkpoint may cover them
/// until the log makes them durable (at its close): a crash could otherwise cut records the checkpoint covers
/// and the next run append others under their numbers.
#[test]
fn no_checkpoint_covers_records_that_are_not_durable() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = DiskLog::open(dir.path().join("log"), Durability::None).expect("the log opens");
    for i in 0..10 {
        let t = LoggedTxn::new(TxnId(i + 1), SessionId(1), i);
        let _ = log.append_finished(t, Outcome::Committed, None).expect("finished");
    }
    let mut feeder = Feeder::new(options(5), None);
    assert_eq!(feeder.read_log(&log, usize::MAX).expect("reads"), 10);
    assert_eq!(
        feeder.store_checkpoint(&log).expect("no error"),
        None,
        "nothing is durable under none before close"
    );
    assert!(log.checkpoint(verifier::online::CHECKPOINT_NAME).expect("reads").is_none());
    log.close().expect("closed");
    assert!(
        feeder.store_checkpoint(&log).expect("stored").is_some(),
        "everything is durable after a clean close"
    );
    assert!(log.checkpoint(verifier::online::CHECKPOINT_NAME).expect("reads").is_some());
}

/// What a verifier fed by many edges takes: a collector's record or heartbeat, as the stream delivers them.
#[derive(Clone)]
enum Message {
    Record(CollectorId, u64, LogRecord),
    Beat(CollectorId, Heartbeat),
}

/// Two collectors' random logs as one stream: their records interleaved, each collector's heartbeats after
/// some of its records, now and then a record delivered twice or after the one that follows it (a shipper
/// that reconnected), and last heartbeats that release everything.
fn random_stream(rng: &mut StdRng, dir: &Path) -> Vec<Message> {
    let logs: Vec<(CollectorId, Vec<(u64, LogRecord)>)> = [1u32, 2]
        .into_iter()
        .map(|c| {
            let log = random_log_of(rng, &dir.join(format!("log{c}")), c);
            let records = log.tail(0).map(|r| r.expect("reads")).collect();
            (CollectorId(c), records)
        })
        .collect();
    let mut next = [0usize; 2];
    let mut stream = Vec::new();
    let mut clock = 0u64;
    let beat = |below: u64, clock: u64| Heartbeat { below, appended_before_ns: clock, read_at_ns: clock };
    while next.iter().zip(&logs).any(|(n, (_, records))| *n < records.len()) {
        let side = rng.gen_range(0..2);
        let (collector, records) = &logs[side];
        let Some((seq, record)) = records.get(next[side]).cloned() else { continue };
        next[side] += 1;
        clock += 1_000_000_000;
        stream.push(Message::Record(*collector, seq, record));
        if rng.gen_bool(0.05) {
            let again = stream[rng.gen_range(0..stream.len())].clone();
            stream.push(again);
        }
        let n = stream.len();
        // A merger takes a collector's first record as where its log starts: only later ones overtake.
        let first = |m: &Message| matches!(m, Message::Record(_, 0, _));
        if n >= 2 && !first(&stream[n - 1]) && !first(&stream[n - 2]) && rng.gen_bool(0.08) {
            stream.swap(n - 1, n - 2);
        }
        if rng.gen_bool(0.3) {
            stream.push(Message::Beat(*collector, beat(seq + 1, clock)));
        }
    }
    for (collector, records) in &logs {
        stream.push(Message::Beat(*collector, beat(records.len() as u64, u64::MAX / 2)));
    }
    stream
}

/// Feeds `messages` through `merger` into `feeder` in passes of `pass` messages, as `krait serve
/// --verify-only` does: every message of a pass into the merger, then what it releases into the feeder and
/// a round if one is due.
fn feed_stream(feeder: &mut Feeder, merger: &mut Merger, messages: &[Message], pass: usize) {
    for chunk in messages.chunks(pass) {
        for message in chunk {
            match message.clone() {
                Message::Record(c, seq, record) => merger.record(c, seq, record).expect("merges"),
                Message::Beat(c, beat) => merger.heartbeat(c, beat),
            }
        }
        let events = merger.release().expect("releases");
        feeder.feed_events(events, merger).expect("feeds");
        feeder.poll().expect("a round");
    }
}

/// The checkpoint of the verifier that many edges feed: stopped after any pass of a random two-collector
/// stream, stored in its file, resumed and fed the rest of the stream, it ends where the verifier that read
/// the whole stream ends: the same verifier state, and every collector's state in the merger (records,
/// events held back, records waiting for earlier ones).
#[test]
fn a_verifier_fed_by_many_edges_resumed_anywhere_ends_where_reading_the_whole_stream_ends() {
    let mut rng = StdRng::seed_from_u64(0xed9e_0001);
    let collectors = [CollectorId(1), CollectorId(2)];
    let (mut restores, mut held_at_split, mut rejected) = (0, 0, 0);
    for case in 0..120 {
        let dir = tempfile::tempdir().expect("a temp dir");
        let stream = random_stream(&mut rng, dir.path());
        let round_size = [1, 4, 1_000][rng.gen_range(0..3)];
        let pass = rng.gen_range(1..=12);
        let fresh =
            || (Feeder::new(options(round_size), None), Merger::new(&collectors, ClockBounds::default()));
        let (mut feeder, mut merger) = fresh();
        feed_stream(&mut feeder, &mut merger, &stream, pass);
        feeder.finish().expect("a last round");
        let whole = (ended(&mut feeder), merger.holding());
        rejected += usize::from(!whole.0.rejects.is_empty());
        for _ in 0..3 {
            let passes = stream.len().div_ceil(pass);
            let split = rng.gen_range(0..=passes) * pass;
            let split = split.min(stream.len());
            let (mut feeder, mut merger) = fresh();
            feed_stream(&mut feeder, &mut merger, &stream[..split], pass);
            held_at_split += merger.holding().iter().map(|c| c.held).sum::<usize>();
            let checkpoint = EdgesCheckpoint::new(dir.path(), "KRAIT", &collectors);
            let at = StreamPosition { generation: "g1".into(), next_message: split as u64 + 1 };
            checkpoint.store(&feeder, &merger, &at).expect("stored");
            drop((feeder, merger));
            let resumed = checkpoint.resume(options(round_size), None);
            assert_eq!(resumed.at, Some(at), "case {case}: {}", resumed.started.line());
            let (mut feeder, mut merger) = (resumed.feeder, resumed.merger);
            feed_stream(&mut feeder, &mut merger, &stream[split..], pass);
            feeder.finish().expect("a last round");
            let resumed = (ended(&mut feeder), merger.holding());
            assert_eq!(resumed, whole, "case {case}, round size {round_size}: stopped after message {split}");
            restores += 1;
        }
    }
    println!(
        "{restores} restores, {held_at_split} events held in mergers at the splits, {rejected} rejected"
    );
    assert!(held_at_split > 0, "some splits should fall while the merger holds events back");
    assert!(rejected > 0 && rejected < 100, "both verdicts should occur: {rejected} of 120 rejected");
}

/// A checkpoint made reading another stream, or for other collectors, is not used: the verifier reads the
/// stream from its first message, and says why.
#[test]
fn a_checkpoint_of_another_stream_or_other_collectors_is_not_used() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let collectors = [CollectorId(1), CollectorId(2)];
    let feeder = Feeder::new(options(5), None);
    let merger = Merger::new(&collectors, ClockBounds::default());
    let at = StreamPosition { generation: "g1".into(), next_message: 42 };
    EdgesCheckpoint::new(dir.path(), "KRAIT", &collectors).store(&feeder, &merger, &at).expect("stored");
    let resumed = EdgesCheckpoint::new(dir.path(), "KRAIT", &collectors).resume(options(5), None);
    assert_eq!(resumed.started.resumed_at, Some(42), "{}", resumed.started.line());
    assert!(resumed.started.line().contains("at stream message 42"), "{}", resumed.started.line());

    let other_stream = EdgesCheckpoint::new(dir.path(), "OTHER", &collectors).resume(options(5), None);
    assert_eq!(other_stream.at, None);
    let line = other_stream.started.line();
    assert!(line.contains("stream KRAIT, collectors 1,2") && line.contains("stream OTHER"), "{line}");

    let other_collectors =
        EdgesCheckpoint::new(dir.path(), "KRAIT", &collectors[..1]).resume(options(5), None);
    assert_eq!(other_collectors.at, None, "{}", other_collectors.started.line());

    let mut strict = options(5);
    strict.verify.level = Level::StrictSerializable;
    let other_level = EdgesCheckpoint::new(dir.path(), "KRAIT", &collectors).resume(strict, None);
    assert_eq!(other_level.at, None, "{}", other_level.started.line());
    assert!(other_level.started.line().contains("from its first message"), "{}", other_level.started.line());

    let none =
        EdgesCheckpoint::new(&dir.path().join("elsewhere"), "KRAIT", &collectors).resume(options(5), None);
    assert_eq!((none.at, none.started.not_used), (None, None));
}
